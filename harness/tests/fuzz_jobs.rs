//! `harness fuzz --jobs`: workers split one campaign. (Not in `fuzz_job.rs`: that binary
//! activates a seeded bug process-wide while its test runs.)

use harness::fuzz::{campaign, Campaign};

/// Workers split one campaign: with a case budget they check exactly the cases one worker
/// checks (case `k` depends only on the seed), so the coverage counts are equal.
#[test]
fn two_jobs_check_the_same_cases_as_one() {
    let run = |jobs| {
        campaign(&Campaign { seed: 5, max_cases: Some(300), duration: None, jobs, ..Campaign::default() }).coverage
    };
    let (one, two) = (run(1), run(2));
    assert_eq!(one.cases, 300);
    assert_eq!(two.cases, 300);
    assert_eq!(one.per_pattern, two.per_pattern);
    assert_eq!(one.per_dtype, two.per_dtype);
    assert_eq!(one.per_rank, two.per_rank);
    assert_eq!(one.per_oracle, two.per_oracle);
    assert_eq!(one.skip_reasons, two.skip_reasons);
}
