//! Static-quant `dq -> op -> q` groups: their anchors, their q/dq members, and fused
//! activations.

use super::configs::is_const;
use super::users::Users;
use crate::mutants::{is_active, Mutant};
use reference::graph::{BinaryOp, Graph, NodeId, Op};

/// Ops a static-quant `dq -> op -> q` group may be anchored on (ExecuTorch's configs with
/// STATIC_QUANT precision).
pub(super) fn quant_anchor(op: &Op) -> bool {
    matches!(
        op,
        Op::Binary(BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul)
            | Op::Mean { .. }
            | Op::Conv2d(_)
            | Op::Linear
            | Op::Clamp { .. }
            | Op::Permute { .. }
            | Op::Reshape { .. }
    )
}

/// relu and hardtanh, which ExecuTorch's `FuseActivationPass` folds into the op before
/// them as its output range.
pub fn fuseable_activation(op: &Op) -> Option<(f32, f32)> {
    match op {
        Op::Clamp { min: Some(lo), max: None } if *lo == 0.0 => Some((0.0, f32::INFINITY)),
        Op::Clamp { min: Some(lo), max: Some(hi) } => Some((*lo, *hi)),
        _ => None,
    }
}

/// The ops an activation fuses into.
pub fn takes_fused_activation(op: &Op) -> bool {
    matches!(op, Op::Conv2d(_) | Op::Linear | Op::Binary(BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul))
}

/// The nodes after a group anchor up to its quantize: `[q]`, or `[activation, q]` when a
/// fuseable activation sits between (the static-quant config looks past it).
pub(super) fn quant_output(g: &Graph, u: &Users, id: NodeId) -> Option<Vec<NodeId>> {
    let single = |x: NodeId| (!u.is_output[x] && u.of(x).len() == 1).then(|| u.of(x)[0]);
    let next = single(id)?;
    if matches!(g.nodes[next].op, Op::Quantize(_)) {
        return Some(vec![next]);
    }
    if fuseable_activation(&g.nodes[next].op).is_some() && takes_fused_activation(&g.nodes[id].op) {
        let q = single(next)?;
        if matches!(g.nodes[q].op, Op::Quantize(_)) {
            return Some(vec![next, q]);
        }
    }
    None
}

/// XNNPACK's copy-like qs8 nodes (static reshape, static transpose, clamp) refuse an output
/// whose scale or zero point differs from the input's
/// (`xnn_subgraph_check_quantization_parameter_matches`): such a `dq -> op -> q` is a
/// requantization and stays outside a group, as explicit q/dq around an fp32 op.
pub(super) fn keeps_qparams(g: &Graph, u: &Users, id: NodeId) -> bool {
    if !matches!(g.nodes[id].op, Op::Permute { .. } | Op::Reshape { .. } | Op::Clamp { .. }) {
        return true;
    }
    if is_active(Mutant::RequantReshapeGrouped) {
        return true;
    }
    let params = |x: NodeId| match g.nodes[x].op {
        Op::Quantize(q) | Op::Dequantize(q) => Some(q),
        _ => None,
    };
    let out = quant_output(g, u, id).and_then(|t| t.last().and_then(|&q| params(q)));
    let ins = dq_inputs(g, id).unwrap_or_default();
    out.is_some() && ins.iter().all(|&d| params(d) == out)
}

/// Inputs of a group anchor that must be dequantize nodes (a constant bias may stay fp32).
pub(super) fn dq_inputs(g: &Graph, id: NodeId) -> Option<Vec<NodeId>> {
    let n = &g.nodes[id];
    let mut out = Vec::new();
    for (k, &i) in n.inputs.iter().enumerate() {
        let is_bias = k == 2 && matches!(n.op, Op::Conv2d(_) | Op::Linear) && is_const(g, i);
        if is_bias {
            continue;
        }
        if !matches!(g.nodes[i].op, Op::Dequantize(_)) {
            return None;
        }
        out.push(i);
    }
    if matches!(n.op, Op::Conv2d(_) | Op::Linear) {
        // XNNPACK's qs8 conv/fully-connected take symmetric constant weights.
        let w = n.inputs[1];
        let c = g.nodes[w].inputs.first().copied()?;
        if !is_const(g, c) || g.nodes[c].spec.quant.map(|q| q.zero_point) != Some(0) {
            return None;
        }
    }
    Some(out)
}
