//! An interrupt while a failure is being minimized: the failure is on disk from the moment
//! it is found, minimizing stops, and the campaign returns with what it had. Its own test
//! binary, because the planted bug (the delegate's `wrong_divisor` mutant) is process-wide.

use delegate::mutants::{set_active, Mutant};
use harness::case::{Case, Pattern};
use harness::fuzz::{campaign, Campaign};
use harness::replay::{replay_case, Outcome};
use reference::ElemType;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn an_interrupt_keeps_the_failure_found_and_stops_the_campaign() {
    let dir = std::env::temp_dir().join(format!("harness-fuzz-interrupt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    set_active(Some(Mutant::WrongDivisor));
    let flag = Arc::new(AtomicBool::new(false));
    // Interrupts as soon as the first failure is on disk (before it is minimized): a saved
    // `<oracle>-<hash>.json` in the folder itself, not the `.in-flight/` folder that every
    // worker creates there before its first case.
    let saved = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .is_ok_and(|d| d.flatten().any(|e| e.path().extension().is_some_and(|x| x == "json") && e.path().is_file()))
    };
    let watcher = {
        let (dir, flag) = (dir.clone(), flag.clone());
        std::thread::spawn(move || {
            while !flag.load(Ordering::Acquire) {
                if saved(&dir) {
                    flag.store(true, Ordering::Release);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let c = Campaign {
        seed: 11,
        max_cases: Some(100_000),
        duration: Some(Duration::from_secs(120)),
        out_dir: Some(dir.clone()),
        patterns: vec![Pattern::Mean],
        dtypes: vec![ElemType::F32],
        keep_going: true,
        interrupt: Some(flag.clone()),
        ..Campaign::default()
    };
    let outcome = campaign(&c);
    flag.store(true, Ordering::Release);
    watcher.join().unwrap();
    assert!(outcome.interrupted);
    let found = outcome.found.first().expect("the failure found before the interrupt is kept");
    // Saved, and it replays as a failure while the bug is in.
    let path = found.path.clone().expect("saved");
    let saved = Case::read_file(&path).unwrap();
    assert_eq!(saved, vec![found.minimized.clone()]);
    assert!(matches!(replay_case(&saved[0]).0, Outcome::Fail(l) if l.starts_with("outputs/")));
    // The interrupt ended the campaign well before its 100,000 cases.
    assert!(outcome.coverage.cases < 100_000, "{} cases", outcome.coverage.cases);
    set_active(None);
    let _ = std::fs::remove_dir_all(&dir);
}
