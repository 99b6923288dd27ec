//! Cases for what `cargo mutants` found no test for in the mean kernel (see
//! `reports/cargo-mutants.md`): each runs every oracle, at 1 to 4 threads, on both SIMD paths.
//!
//! The fuzz loop's inputs stay under 4096 elements, below the runtime's 256 KiB inline
//! threshold, so it never reaches the cost model's split of a single output's rows across
//! threads (`split_rows`): `one_large_output_is_split_into_column_blocks` kills the missed
//! `split_rows` mutant (checked by hand: it panics on a pool thread).

use harness::case::{Case, Pattern};
use harness::fuzz::{check_caught, failure_label};
use harness::oracle::CheckOptions;

fn passes(mut case: Case) {
    case.threads = vec![1, 2, 3, 4];
    case.seed = 3;
    let report = check_caught(&case, &CheckOptions::default());
    assert!(report
        .checks
        .iter()
        .any(|c| c.oracle == harness::oracle::OracleKind::Outputs && c.verdict == harness::oracle::Verdict::Pass));
    assert_eq!(failure_label(&report), None, "{}\n{}", case.to_json(), harness::report::verdicts(&report));
}

/// One output over 70001 contiguous f32 (273 KiB): the cost model splits its row into
/// column blocks of a multiple of 64 across threads; the last block is short.
#[test]
fn one_large_output_is_split_into_column_blocks() {
    passes(Case::new(Pattern::Mean, &[1, 70001], &[], false));
}

/// Column means (leading dims reduced) with more outputs than a 64-output chunk, split
/// across threads. (They do not kill the missed `discontiguous_f32` mutant: that needs a
/// chunk starting in the middle of a row, which these shapes do not reach.)
#[test]
fn column_means_across_threads() {
    passes(Case::new(Pattern::Mean, &[3, 333], &[0], false));
    passes(Case::new(Pattern::Mean, &[2, 3, 150], &[0, 1], true));
}
