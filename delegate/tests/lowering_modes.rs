//! `lower_modes` (one call for several modes, sharing the mode-independent work) must give
//! exactly what `lower_with` gives per mode: the same program or the same error, on random
//! builder graphs (with and without bf16 enabled, modes repeated and in any order) and on
//! graphs the validator refuses.

#[path = "lowering_gen/mod.rs"]
#[allow(dead_code)]
mod gen;

use delegate::{lower_modes, lower_with, LowerOptions, LoweringMode};
use proptest::prelude::*;
use reference::graph::Graph;
use reference::ElemType;
use LoweringMode::{Main, NhwcAware, StaticMean};

/// The option lists each graph is lowered with: the fuzz job's three modes (bf16 on and
/// off), a reordered list with repeats, and a single entry.
fn option_lists() -> Vec<Vec<LowerOptions>> {
    let with = |modes: &[LoweringMode], bf16: bool| {
        modes.iter().map(|&m| LowerOptions { enable_bf16: bf16, ..LowerOptions::new(m) }).collect::<Vec<_>>()
    };
    let mut mixed = with(&[NhwcAware, Main, StaticMean, Main], false);
    mixed.extend(with(&[Main, NhwcAware], true));
    vec![with(&LoweringMode::ALL, false), with(&LoweringMode::ALL, true), mixed, with(&[StaticMean], true)]
}

/// Programs are compared through `Debug`: constants may hold NaN, which `PartialEq` never
/// finds equal to itself.
fn assert_same(graph: &Graph) {
    for opts in option_lists() {
        let together = lower_modes(graph, &opts);
        assert_eq!(together.len(), opts.len());
        for (o, got) in opts.iter().zip(&together) {
            let alone = lower_with(graph, o);
            assert_eq!(format!("{got:?}"), format!("{alone:?}"), "options {o:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("LOWER_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(160),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]
    #[test]
    fn lower_modes_equals_lower_with_per_mode(
        shape in prop_oneof![proptest::collection::vec(1usize..6, 4..=4), proptest::collection::vec(1usize..5, 1..5)],
        cl in any::<bool>(),
        dt in prop_oneof![Just(ElemType::F32), Just(ElemType::F16), Just(ElemType::Bf16)],
        steps in proptest::collection::vec(gen::step(), 1..8),
        n_out in 1usize..3,
    ) {
        let Some(graph) = gen::build(&shape, cl, dt, &steps, n_out) else { return Ok(()) };
        assert_same(&graph);
    }
}

#[test]
fn lower_modes_covers_graphs_with_and_without_means() {
    use gen::Step;
    let conv_only = gen::build(&[1, 3, 6, 6], false, ElemType::F32, &[Step::Conv(4, 3, 1), Step::Unary(2)], 1);
    let conv_mean = gen::build(
        &[1, 3, 6, 6],
        true,
        ElemType::F32,
        &[Step::Conv(4, 3, 1), Step::Mean(vec![1], true, false), Step::Binary(1, 0)],
        2,
    );
    let qconv = gen::build(
        &[1, 2, 5, 5],
        false,
        ElemType::F32,
        &[Step::Qdq, Step::QConv(3), Step::Mean(vec![2, 3], true, false)],
        1,
    );
    let graphs = [conv_only, conv_mean, qconv];
    assert!(graphs.iter().all(Option::is_some), "the builder accepts every fixed graph");
    let mut with_mean = 0;
    for g in graphs.iter().flatten() {
        with_mean += usize::from(g.nodes.iter().any(|n| matches!(n.op, reference::Op::Mean { .. })));
        assert_same(g);
    }
    assert_eq!(with_mean, 2);
}

#[test]
fn lower_modes_repeats_the_validation_error_per_entry() {
    let mut g = gen::build(&[1, 3, 6, 6], false, ElemType::F32, &[gen::Step::Conv(4, 3, 1)], 1).unwrap();
    g.outputs.push(g.nodes.len() + 5);
    let opts: Vec<_> = LoweringMode::ALL.iter().map(|&m| LowerOptions::new(m)).collect();
    let got = lower_modes(&g, &opts);
    assert_eq!(got.len(), 3);
    for (o, r) in opts.iter().zip(&got) {
        let alone = lower_with(&g, o);
        assert!(alone.is_err());
        assert_eq!(format!("{r:?}"), format!("{alone:?}"));
    }
}
