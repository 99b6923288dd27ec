//! Replays every case under `corpora/seeds` and `corpora/regressions` through every oracle.
//! A case marked `xfail` must still fail (and this test says so once it passes).

use harness::case::Case;
use harness::fuzz::corpus_files;
use harness::replay::{replay_case, Outcome};
use std::path::Path;

#[test]
fn every_corpus_case_replays() {
    let corpora = Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpora");
    let files = corpus_files(&corpora).expect("corpora/ is readable");
    assert!(files.iter().any(|f| f.to_string_lossy().contains("seeds")), "no seed files under {}", corpora.display());
    let mut total = 0;
    let mut problems = vec![];
    let mut passes = 0;
    // An `xnnpack-*` case marked xfail fails only on real XNNPACK: without the library it
    // passes, and that is no news.
    let have_xnnpack = xnnpack::for_test("xfail cases of real XNNPACK (corpora/regressions/xnnpack-*)").is_some();
    for f in &files {
        let needs_xnnpack = f.file_name().is_some_and(|n| n.to_string_lossy().starts_with("xnnpack-"));
        let cases = Case::read_file(f).unwrap_or_else(|e| panic!("{e:#}"));
        for (i, case) in cases.iter().enumerate() {
            total += 1;
            let (outcome, text) = replay_case(case);
            match outcome {
                Outcome::Pass => passes += 1,
                Outcome::ExpectedFail(_) => {}
                Outcome::Fail(l) => {
                    problems.push(format!("{}[{i}] {} fails {l}:\n{text}", f.display(), case.to_json()))
                }
                Outcome::Invalid(e) => problems.push(format!("{}[{i}] can not be run: {e}", f.display())),
                Outcome::UnexpectedPass if needs_xnnpack && !have_xnnpack => passes += 1,
                Outcome::UnexpectedPass => {
                    problems.push(format!("{}[{i}] is marked xfail but passes: remove the mark", f.display()))
                }
            }
        }
    }
    assert!(total >= 40, "only {total} corpus cases");
    assert!(problems.is_empty(), "{} of {total} corpus cases went wrong:\n{}", problems.len(), problems.join("\n"));
    assert!(passes > 0);
}

#[test]
fn every_corpus_case_is_one_canonical_json_line() {
    let corpora = Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpora");
    for f in corpus_files(&corpora).unwrap() {
        for case in Case::read_file(&f).unwrap() {
            let line = case.to_json();
            assert!(!line.contains('\n'));
            assert_eq!(Case::from_json(&line).unwrap(), case, "{}", f.display());
        }
    }
}
