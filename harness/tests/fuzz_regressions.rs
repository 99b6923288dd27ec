//! Replays every saved cargo-fuzz input under `fuzz/regressions/<target>/` through the same
//! check its target makes (`harness::fuzz_targets`): a crash, once fixed, stays fixed. New
//! crash inputs go there as they are (the nightly workflow collects them).

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions").join(target);
    let entries = match std::fs::read_dir(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return vec![],
        r => r.unwrap_or_else(|e| panic!("{}: {e}", dir.display())),
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.is_file() && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
        .collect();
    files.sort();
    files
}

fn replay(target: &str, check: fn(&[u8]) -> Result<bool, String>) -> usize {
    let files = inputs(target);
    let failures: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let data = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            let r = std::panic::catch_unwind(|| check(&data));
            match r {
                Ok(Ok(_)) => None,
                Ok(Err(finding)) => Some(format!("{}: {finding}", f.display())),
                Err(_) => Some(format!("{}: panicked", f.display())),
            }
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} {target} inputs fail:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
    files.len()
}

#[test]
fn load_bytes_crash_inputs_pass() {
    // The 33 inputs of the first nightly run (node types the loader kept by id only).
    assert!(replay("load_bytes", harness::fuzz_targets::load_bytes) >= 33);
}

#[test]
fn load_bytes_crash_inputs_load_and_use_every_member_they_name() {
    // They are not just refused: each loads and holds a node type that used to lose its
    // fields (what the fix is about).
    let mut types = std::collections::BTreeSet::new();
    for f in inputs("load_bytes") {
        let data = std::fs::read(&f).unwrap();
        if let Ok(g) = delegate::serialize::load(&data, &delegate::serialize::LoadLimits::lenient()) {
            types.extend(g.nodes.iter().map(|n| n.kind.type_name()));
        }
    }
    assert!(types.len() >= 3, "{types:?}");
}

#[test]
fn roundtrip_inputs_pass() {
    replay("roundtrip", harness::fuzz_targets::roundtrip);
}

#[test]
fn differential_inputs_pass() {
    replay("differential", harness::fuzz_targets::differential);
}
