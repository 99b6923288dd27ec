//! No graph makes `lower` panic; every program it returns is well formed.

use super::gen::{build, step};
use super::*;
use proptest::prelude::*;

fn well_formed(p: &LoweredProgram) {
    let mut ready: Vec<bool> = vec![false; p.slots.len()];
    for &i in &p.inputs {
        ready[i] = true;
    }
    for (s, _) in &p.constants {
        ready[*s] = true;
    }
    let mut delegates = 0;
    for st in &p.steps {
        match st {
            delegate::program::Step::Delegate(d) => {
                delegates += 1;
                for &i in &d.inputs {
                    assert!(ready[i], "slot {i} read before written");
                }
                let xg = &d.graph;
                assert_eq!(xg.num_externs as usize, d.inputs.len() + d.outputs.len());
                for (k, v) in xg.values.iter().enumerate() {
                    assert_eq!(v.id_out as usize, k);
                    assert!(!v.dims.is_empty() && v.dims.len() <= 6);
                    if v.flags != 0 {
                        assert!(v.external_id < xg.num_externs);
                    }
                }
                let mut ext: Vec<u32> = xg.values.iter().filter(|v| v.flags != 0).map(|v| v.external_id).collect();
                ext.sort_unstable();
                ext.dedup();
                assert_eq!(ext.len(), xg.num_externs as usize, "every external id bound once");
                let mut written = vec![false; xg.values.len()];
                for v in &xg.values {
                    if v.flags & 1 != 0 || v.constant_buffer_idx != 0 {
                        written[v.id_out as usize] = true;
                    }
                }
                for n in &xg.nodes {
                    for i in n.kind.inputs() {
                        assert!(written[i as usize], "value {i} read before written");
                    }
                    let o = n.kind.output().unwrap();
                    assert!(!written[o as usize], "value {o} written twice");
                    written[o as usize] = true;
                }
                for &o in &d.outputs {
                    ready[o] = true;
                }
            }
            delegate::program::Step::Portable(op) => {
                for &i in &op.inputs {
                    assert!(ready[i], "slot {i} read before written");
                }
                ready[op.output] = true;
            }
        }
    }
    for &o in &p.outputs {
        assert!(ready[o]);
    }
    assert_eq!(p.summary.delegates, delegates);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("LOWER_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(128), failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn lowering_never_panics(
        shape in prop_oneof![proptest::collection::vec(1usize..6, 4..=4), proptest::collection::vec(1usize..5, 1..7)],
        cl in any::<bool>(),
        dt in prop_oneof![Just(ElemType::F32), Just(ElemType::F16), Just(ElemType::Bf16)],
        steps in proptest::collection::vec(step(), 2..10),
        n_out in 1usize..3,
    ) {
        let Some(graph) = build(&shape, cl, dt, &steps, n_out) else { return Ok(()) };
        for mode in MODES {
            for enable_bf16 in [false, true] {
                match lower_with(&graph, &LowerOptions { mode, enable_bf16 }) {
                    Ok(p) => { if std::env::var("LOWER_DIAG").is_ok() { eprintln!("DIAG ok {} nodes {} delegates {} outside", graph.nodes.len(), p.summary.delegates, p.summary.outside.len()); } well_formed(&p) }
                    Err(LowerError::InvalidGraph(e)) => panic!("valid graph rejected: {e}"),
                    Err(e) => { if std::env::var("LOWER_DIAG").is_ok() { eprintln!("DIAG {mode} {e}"); eprintln!("GRAPHJSON {}", serde_json::to_string(&graph).unwrap()); } }
                }
            }
        }
    }
}
