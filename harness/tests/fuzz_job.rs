//! End to end: a planted bug (the delegate's `wrong_divisor` mutant, compiled in for test
//! builds) is caught by the fuzz loop, minimized, saved as a regression case, and that case
//! replays: failing with the bug, passing without it. One test in its own binary, because
//! the active mutant is process-wide.

use delegate::mutants::{set_active, Mutant};
use harness::case::{Case, Pattern};
use harness::fuzz::{campaign, Campaign};
use harness::replay::{replay_case, Outcome};
use reference::ElemType;
use std::time::Duration;

#[test]
fn planted_wrong_divisor_is_caught_minimized_saved_and_replayed() {
    let dir = std::env::temp_dir().join(format!("harness-fuzz-job-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    set_active(Some(Mutant::WrongDivisor));
    let c = Campaign {
        seed: 11,
        max_cases: Some(5000),
        duration: Some(Duration::from_secs(60)),
        out_dir: Some(dir.clone()),
        // Bare fp32 means: where a wrong divisor shows and nothing else is being exercised.
        patterns: vec![Pattern::Mean],
        dtypes: vec![ElemType::F32],
        // Two workers: the first failure stops both, and what either found is kept.
        jobs: 2,
        ..Campaign::default()
    };
    let outcome = campaign(&c);
    let found = outcome.found.first().expect("the fuzz loop must catch a wrong divisor");
    assert!(found.label.starts_with("outputs/"), "caught as {}", found.label);
    // Minimized: no bigger than what was found, and small.
    assert!(found.minimized.numel() <= found.original.numel());
    assert!(found.minimized.shape.len() <= 2, "not minimized: {}", found.minimized.to_json());
    assert_eq!(found.minimized.modes.len(), 1);
    // Saved before the campaign returned, as <oracle>-<hash>.json.
    let path = found.path.clone().expect("saved");
    assert_eq!(path.file_name().unwrap().to_string_lossy(), format!("outputs-{}.json", found.minimized.hash()));
    let saved = Case::read_file(&path).unwrap();
    assert_eq!(saved, vec![found.minimized.clone()]);
    // Replays: fails with the bug, passes once it is gone.
    assert!(matches!(replay_case(&saved[0]).0, Outcome::Fail(l) if l.starts_with("outputs/")));
    set_active(None);
    let (outcome, text) = replay_case(&saved[0]);
    assert_eq!(outcome, Outcome::Pass, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
