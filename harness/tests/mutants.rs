//! Every seeded bug of the delegate stays killed: a small-budget run of `harness mutants`.
//!
//! The harness's dev-dependency on `delegate` enables the `mutants` feature, so this runs
//! under a plain `cargo test --workspace` (resolver 2 keeps the feature out of normal
//! builds of the binary). The budget is in cases, not time, so the verdict does not depend
//! on the machine: case `k` of a campaign depends only on the seed. A harness change that
//! loses a kill (a weaker generator or oracle) fails here.
//!
//! This file holds one test on purpose: the active bug is process-wide, and a second test
//! running in parallel in this binary would see it.

use delegate::mutants::{active, set_active, Mutant};
use harness::mutants::{hunt, GateBaseline, GateUse, HuntBudget};
use std::time::Duration;

/// Cases per bug. The committed `reports/mutants.csv` (same seed) shows how far below this
/// each kill lands.
const CASES: u64 = 400;

#[test]
fn every_seeded_bug_is_killed_within_a_small_budget() {
    assert_eq!(active(), None);
    let base = GateBaseline::load().expect("the lowering matches the golden table with no bug active");
    let budget = HuntBudget {
        seed: 1,
        max_cases: CASES,
        // A safety net for a very slow machine; the case budget decides in practice.
        duration: Duration::from_secs(30),
        minimize: false,
        gate: GateUse::IfFuzzSurvives,
        ..HuntBudget::default()
    };
    let mut lost = vec![];
    for m in Mutant::ALL {
        let switch = move |on: bool| set_active(on.then_some(m));
        let k = hunt(&m.name(), &switch, &budget, Some(&base));
        assert_eq!(active(), None, "{} was left active", m.name());
        if !k.killed() {
            let gate = k.gate.as_ref().map_or("not run".to_string(), |g| g.label.clone());
            lost.push(format!("{}: fuzz {}; gate {}", m.name(), k.fuzz.label, gate));
        }
    }
    assert!(lost.is_empty(), "seeded bugs the harness no longer kills:\n{}", lost.join("\n"));
}
