//! The command line as a user meets it: odd arguments and unbuildable cases are usage
//! errors (status 2) that name what was wrong, never a panic or a pass; SIGINT and SIGTERM
//! stop the fuzz job with its summary, a rerun line and the signal's status.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn harness() -> Command {
    Command::new(env!("CARGO_BIN_EXE_harness"))
}

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("harness-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the harness; returns (status, stdout + stderr).
fn run(args: &[&str], dir: &std::path::Path) -> (Option<i32>, String) {
    let out = harness().args(args).current_dir(dir).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

#[test]
fn odd_arguments_are_usage_errors_naming_the_flag() {
    let dir = temp("args");
    let cases: &[(&[&str], &str)] = &[
        (&["fuzz", "--duration", "inf", "--cases", "1"], "--duration inf"),
        (&["fuzz", "--duration", "-1"], "--duration -1: needs a positive number"),
        (&["fuzz", "--case-timeout", "1e30", "--cases", "1"], "--case-timeout 1e30"),
        (&["fuzz", "--threads", "1000", "--cases", "10"], "--threads 1000"),
        (&["fuzz", "--pattern", "rms_norm", "--dtype", "qs8", "--cases", "10"], "every one would be a skip"),
        (&["bench", "--budget", "inf", "--quick"], "--budget inf"),
        (&["gate", "--only", "no_such_program"], "matches no program"),
    ];
    for (args, want) in cases {
        let (code, text) = run(args, &dir);
        assert_eq!(code, Some(2), "{args:?}: {text}");
        assert!(text.contains(want), "{args:?}: {text}");
        assert!(!text.contains("panicked"), "{args:?}: {text}");
    }
    // Nothing was fuzzed, so nothing was saved.
    assert!(!dir.join("corpora").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn replay_of_an_unbuildable_case_fails_naming_the_field() {
    let dir = temp("replay");
    let f32s = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    let inline = |vals: &str, dtype: &str| format!(r#"{{"shape":[2,3],"dtype":"{dtype}","values":[{vals}]}}"#);
    let cases = [
        (format!(r#"{{"pattern":"mean","shape":[2,3],"inputs":[{}]}}"#, inline(&f32s(5), "f32")), "inputs[0]"),
        (format!(r#"{{"pattern":"mean","shape":[2,3],"inputs":[{}]}}"#, inline("1,2,3,4,5,\"x\"", "f32")), "bad value"),
        (
            format!(r#"{{"pattern":"mean","shape":[2,3],"inputs":[{},{}]}}"#, inline(&f32s(6), "f32"), inline(&f32s(6), "f32")),
            "2 inline tensors",
        ),
        (format!(r#"{{"pattern":"mean","shape":[2,3],"inputs":[{}]}}"#, inline(&f32s(6), "f16")), "dtype mismatch"),
        (r#"{"pattern":"mean","shape":[1,1,1,1,1,1,2]}"#.into(), "shape: rank 7"),
        (r#"{"pattern":"mean","shape":[2,0,3]}"#.into(), "shape: dim 1"),
        (r#"{"pattern":"mean","shape":[2,3],"threads":[0]}"#.into(), "threads: 0"),
        (r#"{"pattern":"mean","shape":[2,3],"threads":[1000]}"#.into(), "threads: 1000"),
        (r#"{"pattern":"mean","shape":[4294967296,4294967296,4294967296]}"#.into(), "shape: [4294967296"),
        (r#"{"pattern":"mean","shape":[4,5],"run_shapes":[[3,5]]}"#.into(), "run_shapes[0]"),
        // Weights grow with the input's dims: refused before any is made (this one ran the
        // roundtrip fuzz target out of memory), also for a conv over 4 M channels.
        (r#"{"pattern":"pre_norm_mlp","shape":[10428],"dims":[],"seed":16}"#.into(), "needs 434972736 weights"),
        (r#"{"pattern":"conv_mean","shape":[1,4194304,1,1],"param":64,"variant":1}"#.into(), "at most 4194304"),
        (r#"{"pattern":"qk_norm","shape":[1,1,2097152],"param":1}"#.into(), "shape: pattern qk_norm"),
        (r#"{"pattern":"mean","shape":[4,5],"dynamic":[0],"run_shapes":[[5,5]]}"#.into(), "above its bound"),
        (
            r#"{"pattern":"mean","shape":[1,2],"dtype":"qs8","inputs":[{"shape":[1,2],"dtype":"qs8","quant":{"scale":0.0078431377,"zero_point":-3},"values":[10,20]}]}"#.into(),
            "inputs[0]: an int8 tensor with scale 0.007843138 and zero point -3",
        ),
    ];
    for (i, (line, want)) in cases.iter().enumerate() {
        let path = dir.join(format!("case{i}.json"));
        std::fs::write(&path, line).unwrap();
        let (code, text) = run(&["replay", path.to_str().unwrap()], &dir);
        assert_eq!(code, Some(2), "{line}: {text}");
        assert!(text.contains("invalid case: ") && text.contains(want), "{line}: {text}");
        // One clear verdict: no oracle passes it, none calls it the reference's fault.
        assert!(!text.contains("PASS") && !text.contains("reference_rejects_valid"), "{line}: {text}");
    }
    // The int8 tensor on the graph's own input quantization runs, as written.
    let ok = r#"{"pattern":"mean","shape":[1,2],"dims":[1],"dtype":"qs8","inputs":[{"shape":[1,2],"dtype":"qs8","quant":{"scale":0.0625,"zero_point":3},"values":[10,20]}]}"#;
    std::fs::write(dir.join("ok.json"), ok).unwrap();
    let (code, text) = run(&["replay", "ok.json"], &dir);
    assert_eq!(code, Some(0), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts a fuzz job in `dir`, waits for its start line, sends `signal`, returns
/// (status, stdout).
fn interrupted_fuzz(dir: &std::path::Path, signal: &str) -> (Option<i32>, String) {
    let mut child = harness()
        .args(["fuzz", "--duration", "120", "--seed", "5", "--jobs", "1", "--quiet"])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    // "failures are saved under ...", printed once the handlers are installed.
    while !line.contains("failures are saved under") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "the job ended before it started");
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let killed = Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).to_string())
}

#[test]
fn sigint_and_sigterm_stop_the_fuzz_job_with_its_summary_and_a_rerun_line() {
    for (signal, name, status) in [("-INT", "SIGINT", 130), ("-TERM", "SIGTERM", 143)] {
        let dir = temp(&format!("signal{status}"));
        let (code, out) = interrupted_fuzz(&dir, signal);
        assert_eq!(code, Some(status), "{out}");
        assert!(out.contains(&format!("interrupted by {name}")), "{out}");
        assert!(out.contains("oracle          pass"), "no coverage summary: {out}");
        let rerun = out.lines().find(|l| l.starts_with("rerun this campaign with:")).expect("a rerun line");
        let cases: u64 = rerun.split("--cases ").nth(1).and_then(|s| s.split(' ').next()).unwrap().parse().unwrap();
        let run: u64 = out.split("fuzz: ").nth(1).and_then(|s| s.split(' ').next()).unwrap().parse().unwrap();
        assert_eq!(cases, run, "{out}");
        assert!(cases > 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
