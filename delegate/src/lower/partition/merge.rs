//! Claimed nodes merged into connected, cycle-free delegates, the constants each owns, and
//! the order of delegates and portable ops.

use super::configs::{is_const, is_op};
use super::users::Users;
use super::{Partition, Unit};
use reference::graph::{Graph, NodeId, Op};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Scratch buffers of the cycle check, reused across the merges of one graph.
pub(super) struct CycleScratch {
    mask: Vec<bool>,
    seen: Vec<bool>,
    queue: VecDeque<NodeId>,
}

/// Merges partition `b` into `a` (each node's partition in `part`) unless the union would
/// have a cycle; `false` then.
pub(super) fn try_merge(u: &Users, part: &mut [Option<usize>], s: &mut CycleScratch, a: usize, b: usize) -> bool {
    if a == b {
        return true;
    }
    for (m, p) in s.mask.iter_mut().zip(part.iter()) {
        *m = *p == Some(a) || *p == Some(b);
    }
    if has_cycle(u, part, &s.mask, &mut s.seen, &mut s.queue) {
        return false;
    }
    for p in part.iter_mut() {
        if *p == Some(b) {
            *p = Some(a);
        }
    }
    true
}

/// Whether the node set `m` (a mask) has a path that leaves it and comes back, where a path
/// that reaches a node of another partition (`part`) goes on from every node of that
/// partition: a delegate runs as one step, so it needs all its inputs before any of its
/// outputs exist. Without that, two partitions could each be convex and still need each
/// other (`a1 -> b1` and `b2 -> a2` with no path from `b1` to `b2`): a cross-partition
/// cycle, whose steps no order can run (random graphs found it: "node 21 is read before
/// any step produced it", `corpora/regressions/errors-random-partition-cycle-*.json`).
pub(super) fn has_cycle(
    u: &Users,
    part: &[Option<usize>],
    m: &[bool],
    seen: &mut [bool],
    q: &mut VecDeque<NodeId>,
) -> bool {
    let n = m.len();
    seen.fill(false);
    q.clear();
    let mut expanded: Vec<usize> = vec![];
    let mut visit = |x: NodeId, seen: &mut [bool], q: &mut VecDeque<NodeId>| {
        if seen[x] {
            return;
        }
        seen[x] = true;
        q.push_back(x);
        if let Some(p) = part[x] {
            if !expanded.contains(&p) {
                expanded.push(p);
                for y in 0..n {
                    if part[y] == Some(p) && !seen[y] {
                        seen[y] = true;
                        q.push_back(y);
                    }
                }
            }
        }
    };
    for id in 0..n {
        if m[id] {
            for &x in u.of(id) {
                if !m[x] {
                    visit(x, seen, q);
                }
            }
        }
    }
    while let Some(x) = q.pop_front() {
        for &y in u.of(x) {
            if m[y] {
                return true;
            }
            visit(y, seen, q);
        }
    }
    false
}

/// Merges claimed nodes into connected partitions without cycles. `Err(anchor)` when a
/// static-quant group cannot be kept in one partition.
pub(super) fn form_partitions(
    g: &Graph,
    u: &Users,
    claimed: &[bool],
    groups: &[Vec<NodeId>],
) -> Result<Vec<Vec<NodeId>>, NodeId> {
    let n = g.nodes.len();
    // Each claimed node starts as its own partition, numbered in node order; a merge
    // relabels the second partition's nodes with the first one's number.
    let mut part: Vec<Option<usize>> = vec![None; n];
    let mut count = 0;
    for id in 0..n {
        if claimed[id] {
            part[id] = Some(count);
            count += 1;
        }
    }
    let mut scratch = CycleScratch { mask: vec![false; n], seen: vec![false; n], queue: VecDeque::new() };
    for grp in groups {
        let anchor = grp.iter().copied().find(|&m| !matches!(g.nodes[m].op, Op::Quantize(_) | Op::Dequantize(_)));
        let anchor = anchor.unwrap_or(grp[0]);
        for &m in grp {
            let (Some(a), Some(b)) = (part[anchor], part[m]) else { return Err(anchor) };
            if !try_merge(u, &mut part, &mut scratch, a, b) {
                return Err(anchor);
            }
        }
    }
    for id in 0..n {
        if !claimed[id] {
            continue;
        }
        let inputs = &g.nodes[id].inputs;
        for (k, &i) in inputs.iter().enumerate() {
            // Each distinct claimed input once.
            if !claimed[i] || inputs[..k].contains(&i) {
                continue;
            }
            if let (Some(a), Some(b)) = (part[i], part[id]) {
                try_merge(u, &mut part, &mut scratch, a, b);
            }
        }
    }
    // Partitions in the order of their numbers, members ascending.
    let mut members: Vec<Vec<NodeId>> = vec![Vec::new(); count];
    for (id, p) in part.iter().enumerate() {
        if let Some(p) = *p {
            members[p].push(id);
        }
    }
    members.retain(|m| !m.is_empty());
    Ok(members)
}

/// Whether a member of a partition (`in_part`) claims constant `c` as a dependency, which
/// lifts it into the delegate as XNNPACK constant data: ExecuTorch's gemm configs claim a
/// conv's or linear's weight (through its dequantize when quantized) and bias. No other
/// constant is tagged (the XNNPACK partitioner does not call `tag_constant_data`), so the
/// parameters, buffers and tensor constants torch.export lifts (a 0-D `eps` included:
/// `ScalarToTensorPass` makes a Python scalar one) reach the delegate as external inputs
/// fed from the program's constant segment (fixture `e`: RMSNorm's `eps` and weight).
pub(crate) fn owns_constant(g: &Graph, u: &Users, in_part: &[bool], c: NodeId) -> bool {
    let weight_or_bias = |m: NodeId, v: NodeId| {
        in_part[m] && matches!(g.nodes[m].op, Op::Conv2d(_) | Op::Linear) && g.nodes[m].inputs[1..].contains(&v)
    };
    u.of(c).iter().any(|&m| {
        weight_or_bias(m, c)
            || in_part[m] && matches!(g.nodes[m].op, Op::Dequantize(_)) && u.of(m).iter().any(|&w| weight_or_bias(w, m))
    })
}

/// Orders delegates and portable ops so every value is produced before it is read,
/// preferring the unit whose first node comes earliest in the graph.
pub(super) fn order_units(
    g: &Graph,
    u: &Users,
    parts: Vec<Vec<NodeId>>,
    claimed: &[bool],
    mut reason: Vec<Option<String>>,
) -> Vec<Unit> {
    let n = g.nodes.len();
    let mut unit_of: Vec<Option<usize>> = vec![None; n];
    let mut units: Vec<(NodeId, Unit)> = Vec::new();
    let mut in_part = vec![false; n];
    for members in parts {
        for &m in &members {
            in_part[m] = true;
        }
        let mut inputs = Vec::new();
        for &m in &members {
            for &i in &g.nodes[m].inputs {
                let owned = in_part[i] || is_const(g, i) && owns_constant(g, u, &in_part, i);
                if !owned && !inputs.contains(&i) {
                    inputs.push(i);
                }
            }
        }
        let outputs: Vec<NodeId> =
            members.iter().copied().filter(|&m| u.is_output[m] || u.of(m).iter().any(|&x| !in_part[x])).collect();
        let k = units.len();
        for &m in &members {
            unit_of[m] = Some(k);
            in_part[m] = false;
        }
        units.push((members[0], Unit::Delegate(Partition { nodes: members, inputs, outputs })));
    }
    for id in 0..n {
        if is_op(&g.nodes[id].op) && !claimed[id] {
            unit_of[id] = Some(units.len());
            let r = reason[id].take().unwrap_or_else(|| "not claimed".into());
            units.push((id, Unit::Portable { node: id, reason: r }));
        }
    }
    let m = units.len();
    // Dependency edges (consumer unit, producer unit), each once, in one flat list.
    let mut edges: Vec<(usize, usize)> = Vec::new();
    for id in 0..n {
        let Some(k) = unit_of[id] else { continue };
        for &i in &g.nodes[id].inputs {
            if let Some(j) = unit_of[i] {
                if j != k {
                    edges.push((k, j));
                }
            }
        }
    }
    edges.sort_unstable();
    edges.dedup();
    let mut indeg = vec![0usize; m];
    // `dependents[start[j]..start[j + 1]]`: the units reading unit `j`, ascending.
    let mut start = vec![0usize; m + 1];
    for &(k, j) in &edges {
        indeg[k] += 1;
        start[j + 1] += 1;
    }
    for j in 0..m {
        start[j + 1] += start[j];
    }
    let mut fill = start.clone();
    let mut dependents = vec![0usize; edges.len()];
    for &(k, j) in &edges {
        dependents[fill[j]] = k;
        fill[j] += 1;
    }
    // The ready unit whose first node comes earliest goes next (keys are unique).
    let mut ready: BinaryHeap<Reverse<(NodeId, usize)>> =
        (0..m).filter(|&k| indeg[k] == 0).map(|k| Reverse((units[k].0, k))).collect();
    let mut order = Vec::with_capacity(m);
    let mut placed = vec![false; m];
    while let Some(Reverse((_, k))) = ready.pop() {
        order.push(k);
        placed[k] = true;
        for &d in &dependents[start[k]..start[k + 1]] {
            indeg[d] -= 1;
            if indeg[d] == 0 {
                ready.push(Reverse((units[d].0, d)));
            }
        }
    }
    // Partitions are cycle-free, so every unit is ordered; keep any leftover (defensive)
    // in index order rather than dropping it.
    order.extend((0..m).filter(|&k| !placed[k]));
    let mut slots: Vec<Option<Unit>> = units.into_iter().map(|(_, un)| Some(un)).collect();
    order.into_iter().filter_map(|k| slots[k].take()).collect()
}
