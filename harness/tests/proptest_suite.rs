//! A bounded differential proptest: generated cases (small inputs) through every oracle.
//! A failure shrinks toward a simple case (see `harness::gen::strategies`) and is printed as
//! a JSON line ready for `corpora/regressions/`. The seed is fixed so CI is repeatable;
//! `PROPTEST_RNG_SEED=<n>` explores others (`harness fuzz` is the open-ended search).

use harness::fuzz::{check_caught, failure_label};
use harness::gen::{strategies, GenConfig};
use harness::oracle::CheckOptions;
use harness::report;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed};

proptest! {
    #![proptest_config(Config {
        cases: 96,
        failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
        max_shrink_iters: 2000,
        rng_seed: RngSeed::Fixed(0x6d65_616e),
        ..Config::default()
    })]

    #[test]
    fn delegate_agrees_with_reference(
        case in strategies::cases_with(GenConfig { max_elems: 512, threads: 2, max_macs: 1 << 13, large_bytes: 0, ..GenConfig::default() })
    ) {
        let r = check_caught(&case, &CheckOptions::default());
        let label = failure_label(&r);
        prop_assert!(label.is_none(), "case {}\n{}", case.to_json(), report::verdicts(&r));
    }
}
