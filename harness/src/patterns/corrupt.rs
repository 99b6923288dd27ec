//! Invalid cases: a valid graph corrupted by one [`InvalidKind`].

use super::{invalid_field, NotApplicable};
use crate::case::{Case, InvalidKind};
use reference::graph::{Dim, Graph, Op, TensorSpec};
use reference::{ElemType, MemoryFormat, Tensor, TensorData};

/// Applies an [`InvalidKind`] to a valid graph. Specs stay as they were, so `validate`
/// (and the delegate's own checks) must notice.
pub(super) fn corrupt(graph: &mut Graph, case: &Case, kind: InvalidKind) -> Result<(), NotApplicable> {
    let find = |g: &Graph, f: &dyn Fn(&Op) -> bool| g.nodes.iter().position(|n| f(&n.op));
    let mean = find(graph, &|op| matches!(op, Op::Mean { .. }));
    match kind {
        InvalidKind::DimOutOfRange | InvalidKind::RepeatedDim | InvalidKind::MeanDtypeQs8 => {
            let Some(m) = mean else { return invalid_field("invalid", "no mean to corrupt") };
            let rank = graph.nodes[graph.nodes[m].inputs[0]].spec.rank() as i64;
            if let Op::Mean { dims, dtype, .. } = &mut graph.nodes[m].op {
                match kind {
                    InvalidKind::DimOutOfRange => *dims = vec![rank],
                    InvalidKind::RepeatedDim => *dims = vec![0, -rank.max(1)],
                    _ => *dtype = Some(ElemType::Qs8),
                }
            }
        }
        InvalidKind::RankTooHigh => {
            let x = graph.inputs[0];
            graph.nodes[x].spec.shape.insert(0, Dim::fixed(1));
            graph.nodes[x].spec.format = MemoryFormat::Contiguous;
        }
        InvalidKind::ZeroSizedDim => {
            let x = graph.inputs[0];
            graph.nodes[x].spec.shape[0] = Dim::fixed(0);
        }
        InvalidKind::MeanOnQs8 => {
            let Some(m) = mean else { return invalid_field("invalid", "no mean to corrupt") };
            let src = graph.nodes[m].inputs[0];
            match &graph.nodes[src].op {
                Op::Dequantize(_) => {
                    let q = graph.nodes[src].inputs[0];
                    graph.nodes[m].inputs[0] = q;
                }
                _ => return invalid_field("invalid", "mean_on_qs8 needs a qs8 case"),
            }
        }
        InvalidKind::BadQuantScale | InvalidKind::BadZeroPoint => {
            let Some(qn) = find(graph, &|op| matches!(op, Op::Quantize(_))) else {
                return invalid_field("invalid", "no quantize to corrupt (needs dtype qs8)");
            };
            if let Op::Quantize(p) = &mut graph.nodes[qn].op {
                if kind == InvalidKind::BadQuantScale {
                    p.scale = 0.0;
                } else {
                    p.zero_point = 300;
                }
            }
        }
        InvalidKind::ConvChannelMismatch => {
            let Some(c) = find(graph, &|op| matches!(op, Op::Conv2d(_))) else {
                return invalid_field("invalid", "no conv to corrupt");
            };
            let mut w = graph.nodes[c].inputs[1];
            if matches!(graph.nodes[w].op, Op::Dequantize(_)) {
                // Corrupt the int8 constant under the dequantize, and the dequantize's spec.
                let dq = w;
                w = graph.nodes[dq].inputs[0];
                graph.nodes[dq].spec.shape[1].size += 1;
            }
            let Op::Constant { tensor } = &graph.nodes[w].op else {
                return invalid_field("invalid", "conv weight is not a constant");
            };
            let mut shape = tensor.shape.clone();
            shape[1] += 1;
            let n: usize = shape.iter().product();
            let data = match &tensor.data {
                TensorData::Qs8(_) => TensorData::Qs8(vec![1; n]),
                d => TensorData::from_f64(d.dtype(), &vec![0.5; n], None),
            };
            let t = Tensor { shape, format: MemoryFormat::Contiguous, quant: tensor.quant, data };
            graph.nodes[w].spec = TensorSpec::of(&t);
            graph.nodes[w].op = Op::Constant { tensor: t };
        }
        InvalidKind::NotBroadcastable => {
            // Replace the second operand of the last binary op with a constant whose last
            // dim is one longer (never 1, never equal): it can not broadcast. The last one
            // (the output's `sub`, `add` or `* w`) has full-rank operands; an earlier one
            // may add a 0-D `eps` or multiply by a 0-D `-1` (swapped `conv_sub_mean`).
            let Some(a) = graph.nodes.iter().rposition(|n| matches!(n.op, Op::Binary(_))) else {
                return invalid_field("invalid", "no binary op");
            };
            let other = graph.nodes[a].inputs[1];
            let spec = graph.nodes[other].spec.clone();
            let mut shape = spec.max_shape();
            let Some(last) = shape.last_mut() else { return invalid_field("invalid", "0-D operand") };
            *last += 1;
            let n: usize = shape.iter().product();
            let t = Tensor::from_f64(&shape, spec.dtype, None, &vec![1.0; n]);
            // Constants may appear anywhere before their user: put it first, shifting ids.
            insert_front(graph, Op::Constant { tensor: t.clone() }, TensorSpec::of(&t));
            graph.nodes[a + 1].inputs[1] = 0;
        }
        InvalidKind::PoolOutputSize => {
            let Some(p) = find(graph, &|op| matches!(op, Op::AdaptiveAvgPool2d { .. })) else {
                return invalid_field("invalid", "pool_output_size needs an adaptive_avg_pool2d to corrupt");
            };
            graph.nodes[p].op = Op::AdaptiveAvgPool2d { output_size: [2, 2] };
        }
        InvalidKind::DynamicAboveBound => {
            if case.dynamic.is_empty() {
                return invalid_field("invalid", "dynamic_above_bound needs a dynamic dim");
            }
        }
    }
    Ok(())
}

/// Inserts a node at id 0, renumbering every reference.
pub(super) fn insert_front(graph: &mut Graph, op: Op, spec: TensorSpec) {
    for n in &mut graph.nodes {
        n.inputs.iter_mut().for_each(|i| *i += 1);
    }
    graph.inputs.iter_mut().for_each(|i| *i += 1);
    graph.outputs.iter_mut().for_each(|i| *i += 1);
    graph.nodes.insert(0, reference::graph::Node { op, inputs: vec![], spec });
}
