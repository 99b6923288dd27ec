//! A crash while a case runs (a segfault or abort inside real XNNPACK kills the process with
//! no unwinding) loses nothing: the case in flight is on disk, the next fuzz run reports it as
//! `crash/signal` and saves it, and `replay` reruns it. The crash is simulated by the
//! `HARNESS_TEST_ABORT_AT_CASE` hook, which aborts right after the case is recorded, where a
//! crash in the library would happen.

use harness::case::Case;
use harness::gen::{nth_case, GenConfig};
use harness::inflight::TEST_ABORT_ENV;
use std::process::Command;

#[test]
fn a_crash_leaves_the_case_in_flight_for_the_next_run_and_replay() {
    let bin = env!("CARGO_BIN_EXE_harness");
    let dir = std::env::temp_dir().join(format!("harness-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.to_str().unwrap();
    let fuzz = |cases: &str| {
        let mut c = Command::new(bin);
        c.args(["fuzz", "--cases", cases, "--seed", "3", "--quiet", "--jobs", "1", "--no-minimize", "--out", out]);
        c
    };
    let status = fuzz("20").env(TEST_ABORT_ENV, "7").status().unwrap();
    assert!(!status.success(), "the run should have died");
    let left: Vec<_> = std::fs::read_dir(dir.join(".in-flight")).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(left.len(), 1, "{left:?}");
    let text = std::fs::read_to_string(&left[0]).unwrap();
    assert!(text.starts_with("// harness fuzz --seed 3 (case #7)"), "{text}");
    // The case the run died on: case 7 of seed 3 with the job's generator settings.
    let want = nth_case(3, 7, &GenConfig { max_elems: 4096, threads: 2, ..GenConfig::default() });

    let next = fuzz("1").output().unwrap();
    let stderr = String::from_utf8_lossy(&next.stderr);
    let stdout = String::from_utf8_lossy(&next.stdout);
    assert_eq!(next.status.code(), Some(1), "{stderr}{stdout}");
    assert!(stderr.contains("a previous run died while checking a case"), "{stderr}");
    assert!(stdout.contains("FAIL crash/signal"), "{stdout}");
    let saved = dir.join(format!("crash-{}.json", want.hash()));
    assert_eq!(Case::read_file(&saved).unwrap(), vec![want]);
    assert!(!left[0].exists(), "the in-flight file is consumed");
    // Reported once: a third run finds nothing left.
    assert_eq!(fuzz("1").status().unwrap().code(), Some(0));

    let replay = Command::new(bin).args(["replay", saved.to_str().unwrap()]).output().unwrap();
    assert!(replay.status.success(), "{}", String::from_utf8_lossy(&replay.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}
