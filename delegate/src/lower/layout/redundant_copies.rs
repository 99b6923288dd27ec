//! `RemoveRedundantCopyPass`.

use super::ir::PGraph;
use crate::mutants::{is_active, Mutant};
use reference::graph::Graph;

fn same_layout(pg: &PGraph, g: &Graph, a: usize, b: usize) -> bool {
    pg.is_nhwc(a, g) == pg.is_nhwc(b, g)
}

fn same_type_and_shape(pg: &PGraph, a: usize, b: usize) -> bool {
    let (x, y) = (&pg.nodes[a].spec, &pg.nodes[b].spec);
    x.dtype == y.dtype && x.max_shape() == y.max_shape()
}

fn rewire_users(pg: &mut PGraph, old: usize, new: usize) {
    pg.replace_all_uses(old, new);
}

/// `RemoveRedundantCopyPass`: opposite copies back to back cancel; a copy into the layout
/// its input already has is dropped; the same across `dq -> copy -> q` chains.
pub(super) fn remove_redundant_copies(pg: &mut PGraph, g: &Graph) {
    let snapshot = pg.order_snapshot();
    for &i in &snapshot {
        if !pg.nodes[i].alive || pg.nodes[i].inputs.is_empty() || !pg.is_format_copy(i, g) {
            continue;
        }
        let x = pg.nodes[i].inputs[0];
        if pg.is_dequant(x, g) {
            remove_quantized(pg, g, i);
        } else if pg.is_format_copy(x, g)
            && !same_layout(pg, g, x, i)
            && pg.num_users(x) == 1
            && pg.actual_nhwc(pg.nodes[x].inputs[0], g) == pg.actual_nhwc(i, g)
        {
            // (The last condition is ours: ExecuTorch assumes the first copy really changed
            // the layout, which a same-layout copy not yet removed did not.)
            let original = pg.nodes[x].inputs[0];
            rewire_users(pg, i, original);
            pg.remove_if_unused(i);
            pg.remove_if_unused(x);
        } else if same_layout(pg, g, x, i) && same_type_and_shape(pg, x, i) {
            rewire_users(pg, i, x);
            pg.remove_if_unused(i);
        }
    }
    pg.spare = snapshot;
}

/// (Ours, as above: ExecuTorch drops the q/dq pairs without comparing their parameters,
/// which silently drops a requantization; a chain is removed here only when every q and dq
/// in it has the same scale and zero point.)
fn remove_quantized(pg: &mut PGraph, g: &Graph, i: usize) {
    if pg.num_users(i) != 1 {
        return;
    }
    let Some(qn) = pg.nodes.iter().position(|n| n.alive && n.inputs.contains(&i)) else { return };
    if !pg.is_quant(qn, g) {
        return;
    }
    let dq = pg.nodes[i].inputs[0];
    if pg.nodes[dq].inputs.len() != 1 {
        return;
    }
    let prev_q = pg.nodes[dq].inputs[0];
    if !pg.is_quant(prev_q, g) || pg.nodes[prev_q].inputs.len() != 1 {
        return;
    }
    let params = pg.qparams(qn, g);
    let differ = |x: usize| pg.qparams(x, g) != params && !is_active(Mutant::RequantCopyFolded);
    if differ(dq) || differ(prev_q) {
        return;
    }
    let prev = pg.nodes[prev_q].inputs[0];
    if pg.is_format_copy(prev, g) && !same_layout(pg, g, prev, i) && pg.num_users(prev) == 1 {
        let prev_dq = pg.nodes[prev].inputs[0];
        if !pg.is_dequant(prev_dq, g) || pg.nodes[prev_dq].inputs.len() != 1 || differ(prev_dq) {
            return;
        }
        let original = pg.nodes[prev_dq].inputs[0];
        if pg.actual_nhwc(original, g) != pg.actual_nhwc(i, g) {
            return;
        }
        rewire_users(pg, qn, original);
        for k in [qn, i, dq, prev_q, prev, prev_dq] {
            pg.remove_if_unused(k);
        }
    } else if same_layout(pg, g, prev, i) && same_type_and_shape(pg, prev, i) {
        let original_q = pg.nodes[dq].inputs[0];
        rewire_users(pg, qn, original_q);
        for k in [qn, i, dq] {
            pg.remove_if_unused(k);
        }
    }
}
