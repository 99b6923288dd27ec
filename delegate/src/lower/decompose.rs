//! The decompositions `to_edge` applies before the partitioner sees a graph, for the ops of
//! the graph language that have one: `adaptive_avg_pool2d(x, [1, 1])` becomes
//! `x.mean([-1, -2], keepdim=True)`, ATen's own kernel for that size (so the partitioner,
//! the layout pass and the visitors see a `mean.dim`, and a 4-D pool lowers to GAP in every
//! mode with the very payload of `x.mean([2, 3], keepdim=True)`, as ExecuTorch's
//! `AdaptiveAvgPool2d(1)` CNN heads do).
//!
//! Node ids are kept (each node is replaced in place), so reasons, debug handles and slots
//! still name the graph's own nodes.

use reference::graph::{Graph, Op};
use std::borrow::Cow;

/// `g` with every decomposable op replaced (borrowed when it has none).
pub fn run(g: &Graph) -> Cow<'_, Graph> {
    if !g.nodes.iter().any(|n| matches!(n.op, Op::AdaptiveAvgPool2d { .. })) {
        return Cow::Borrowed(g);
    }
    let mut out = g.clone();
    for node in &mut out.nodes {
        if let Op::AdaptiveAvgPool2d { .. } = node.op {
            // The graph was validated: the output size is [1, 1], and the mean infers the
            // same spec (checked by a test).
            node.op = Op::Mean { dims: vec![-1, -2], keepdim: true, dtype: None };
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reference::graph::GraphBuilder;
    use reference::TensorSpec;

    #[test]
    fn pool_becomes_the_hw_mean_with_the_same_spec() {
        for spec in [
            TensorSpec::f32(&[2, 3, 5, 4]),
            TensorSpec::f32(&[2, 3, 5, 4]).channels_last(),
            TensorSpec::f16(&[3, 5, 4]),
        ] {
            let g = GraphBuilder::new();
            let x = g.input("x", spec);
            let p = g.adaptive_avg_pool2d(x, [1, 1]);
            let gr = g.finish(&[p]).unwrap();
            let d = run(&gr);
            assert!(matches!(d, Cow::Owned(_)));
            assert_eq!(d.nodes[1].op, Op::Mean { dims: vec![-1, -2], keepdim: true, dtype: None });
            assert_eq!(d.nodes[1].spec, gr.nodes[1].spec);
            d.validate().unwrap();
        }
        let g = GraphBuilder::new();
        let x = g.input("x", TensorSpec::f32(&[1, 2, 3, 3]));
        let m = g.mean(x, &[2, 3], true);
        let gr = g.finish(&[m]).unwrap();
        assert!(matches!(run(&gr), Cow::Borrowed(_)));
    }
}
