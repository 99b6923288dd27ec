//! Plan-time fusion of a segment's nodes into groups that run as one pass, as XNNPACK does
//! not (it runs every node as its own operator):
//! - a square feeding a mean (`mean(x * x)` or `mean(square(x))`): the mean sums squares
//!   as it reads `x`, the squared tensor is never written; in fp32 the elementwise nodes
//!   after the mean (`rsqrt(... + eps)`) run on its output in the same group (`Tail`);
//! - a chain of elementwise nodes of one float type where each node's output is read only by
//!   the next and has the chain's output shape (`x * r * w` with `r` and `w` broadcast): one
//!   pass over the output, each operand read once;
//! - an f32 -> qs8 convert whose int8 values only a qs8 -> f32 convert reads (a qs8 program's
//!   edges, `QuantRoundTrip`): one pass, the int8 values never written;
//! - an fp32 square and mean (with its tail) followed by a chain that reads the mean's input
//!   and the tail's output (`x * rsqrt(mean(x * x) + eps) * w`, RMSNorm): block by block of
//!   rows, the rows' means and then their chain while the rows are still in cache (`Norm`).
//!
//! fp16/bf16 groups compute in f32 as their nodes do and round to the type after every node
//! (`ChainStep::Round`, a square before the mean sums it), so only the memory passes go.
//!
//! A group computes the same f32 operations in the same order per element as its nodes
//! would one by one, so its outputs are bit-identical to the unfused plan
//! (`RunOptions::fuse` turns fusion off for A/B runs). Groups are consecutive nodes, and the
//! plan's block assignment keeps every value a group reads alive until the group's last node,
//! so the same blocks serve both the fused and the unfused run. Shapes are only known at run
//! time: a chain whose run-time shapes break its condition runs node by node.

use super::kernels::elementwise::Unary;
use super::plan::{Dt, Kernel, Loc, NodePlan, ValuePlan};
use super::simd::{ChainStep, Narrow, Src, CHAIN_ARGS};

/// Consecutive nodes run as one unit.
#[derive(Clone, Debug, PartialEq)]
pub enum Group {
    /// Node `i`, by itself.
    Node(usize),
    /// Node `square` squares the input of node `square + 1`, a mean that is its only reader;
    /// with a `tail`, the fp32 elementwise nodes after the mean run on its output in place.
    SquareMean { square: usize, tail: Option<Tail> },
    /// Nodes `first..=last` as one elementwise pass: `steps` over the operand values `args`.
    Chain { first: usize, last: usize, steps: Vec<ChainStep>, args: Vec<usize> },
    /// An fp32 square and mean with its tail (as `SquareMean`), then `apply`: a chain reading
    /// the mean's input and the square-mean's result (`norm`, the tail's output or else the
    /// mean's), which stays live until the chain's last node.
    Norm { square: usize, tail: Option<Tail>, apply: Apply },
    /// Node `i` converts f32 to qs8, node `i + 1` its int8 values (read by nothing else) back.
    QuantRoundTrip(usize),
}

/// The chain of a [`Group::Norm`]: nodes `first..=last`, `steps` over operand values `args`.
#[derive(Clone, Debug, PartialEq)]
pub struct Apply {
    pub first: usize,
    pub last: usize,
    pub steps: Vec<ChainStep>,
    pub args: Vec<usize>,
}

/// Nodes `mean + 1..=last` of a fused square and mean, each reading the one before (the
/// first the mean's output) and nothing else computed in the segment but operands `args`:
/// `steps` applied to the mean's output where the mean wrote it (`rsqrt(mean(x * x) + eps)`
/// in one group; fp32 only, where the steps round nowhere).
#[derive(Clone, Debug, PartialEq)]
pub struct Tail {
    pub last: usize,
    pub steps: Vec<ChainStep>,
    pub args: Vec<usize>,
}

impl Group {
    /// The nodes of the group, first and last.
    pub fn span(&self) -> (usize, usize) {
        match self {
            Group::Node(i) => (*i, *i),
            Group::SquareMean { square, tail } => (*square, tail.as_ref().map_or(square + 1, |t| t.last)),
            Group::Chain { first, last, .. } => (*first, *last),
            Group::Norm { square, apply, .. } => (*square, apply.last),
            Group::QuantRoundTrip(i) => (*i, i + 1),
        }
    }

    /// A `Norm`'s square-mean result: the value its tail's last node (or its mean) writes.
    pub fn norm_value(&self, nodes: &[NodePlan]) -> Option<usize> {
        match self {
            Group::Norm { apply, .. } => Some(nodes[apply.first - 1].output),
            _ => None,
        }
    }
}

/// How many nodes read each value (a node reading a value twice counts once).
fn readers(nodes: &[NodePlan], n_values: usize) -> Vec<usize> {
    let mut r = vec![0usize; n_values];
    for n in nodes {
        for (k, &v) in n.inputs.iter().enumerate() {
            if !n.inputs[..k].contains(&v) {
                r[v] += 1;
            }
        }
    }
    r
}

/// The float type every input and the output of node `n` have, if they share one.
fn float_dt(n: &NodePlan, values: &[ValuePlan]) -> Option<Dt> {
    let dt = values[n.output].dt;
    let float = matches!(dt, Dt::F32 | Dt::F16 | Dt::Bf16);
    (float && n.inputs.iter().all(|&v| values[v].dt == dt)).then_some(dt)
}

/// The rounding an fp16/bf16 node's output gets (none for fp32).
fn narrow(dt: Dt) -> Option<Narrow> {
    match dt {
        Dt::F16 => Some(Narrow::F16),
        Dt::Bf16 => Some(Narrow::Bf16),
        _ => None,
    }
}

/// A value only the next node reads, computed inside the segment (not one of its outputs).
fn private(v: usize, values: &[ValuePlan], readers: &[usize]) -> bool {
    readers[v] == 1 && !matches!(values[v].loc, Loc::Output(_))
}

/// Whether nodes `i` and `i + 1` are a square and the mean it feeds.
fn square_mean(nodes: &[NodePlan], i: usize, values: &[ValuePlan], readers: &[usize]) -> bool {
    let (Some(s), Some(m)) = (nodes.get(i), nodes.get(i + 1)) else { return false };
    let squares = match s.kernel {
        Kernel::Unary(Unary::Square) => s.inputs.len() == 1,
        Kernel::Binary(super::simd::BinOp::Mul) => s.inputs.len() == 2 && s.inputs[0] == s.inputs[1],
        _ => false,
    };
    let dt = float_dt(s, values);
    squares
        && s.act.is_none()
        && dt.is_some()
        && matches!(m.kernel, Kernel::Mean { .. })
        && m.inputs == [s.output]
        && Some(values[m.output].dt) == dt
        // An output range on an fp16/bf16 mean is an error the unfused node reports.
        && (dt == Some(Dt::F32) || m.act.is_none())
        && private(s.output, values, readers)
}

/// Whether node `i` converts f32 to qs8 and node `i + 1`, the only reader of its int8
/// values, converts them back to f32 (neither with an output range).
fn quant_round_trip(nodes: &[NodePlan], i: usize, values: &[ValuePlan], readers: &[usize]) -> bool {
    let (Some(q), Some(d)) = (nodes.get(i), nodes.get(i + 1)) else { return false };
    let converts = matches!(q.kernel, Kernel::Convert) && matches!(d.kernel, Kernel::Convert);
    converts
        && q.inputs.len() == 1
        && d.inputs == [q.output]
        && values[q.inputs[0]].dt == Dt::F32
        && values[q.output].dt == Dt::I8
        && values[d.output].dt == Dt::F32
        && q.act.is_none()
        && d.act.is_none()
        && private(q.output, values, readers)
}

/// The chain steps of elementwise node `n` of float type `dt` (its operation, its output
/// range, then for fp16/bf16 the rounding of its output), reading the running value where it
/// reads `acc` and operands through `arg`; `None` if the node is not an elementwise node of
/// `dt` (`None`: of any one float type).
fn steps_of(
    n: &NodePlan,
    values: &[ValuePlan],
    dt: Option<Dt>,
    acc: Option<usize>,
    mut arg: impl FnMut(usize) -> Src,
) -> Option<Vec<ChainStep>> {
    let own = float_dt(n, values)?;
    if dt.is_some_and(|d| d != own) {
        return None;
    }
    let mut src = |v: usize| if Some(v) == acc { Src::Acc } else { arg(v) };
    let mut steps = Vec::with_capacity(2);
    match (&n.kernel, n.inputs.as_slice()) {
        (Kernel::Binary(op), &[a, b]) => steps.push(ChainStep::Bin { op: *op, a: src(a), b: src(b) }),
        (Kernel::Unary(Unary::Square), &[x]) => steps.push(ChainStep::Square(src(x))),
        (Kernel::Unary(Unary::Rsqrt), &[x]) => steps.push(ChainStep::Rsqrt(src(x))),
        (Kernel::Unary(Unary::Copy), &[x]) => steps.push(ChainStep::Copy(src(x))),
        (Kernel::Unary(Unary::Clamp(lo, hi)), &[x]) => {
            steps.push(ChainStep::Copy(src(x)));
            steps.push(ChainStep::Clamp { lo: *lo, hi: *hi });
        }
        _ => return None,
    }
    if let Some((lo, hi)) = n.act {
        steps.push(ChainStep::Clamp { lo, hi });
    }
    if let Some(to) = narrow(own) {
        steps.push(ChainStep::Round(to));
    }
    Some(steps)
}

/// Operand values a node reads other than `acc`, not yet in `args`.
fn new_args(n: &NodePlan, acc: Option<usize>, args: &[usize]) -> usize {
    let mut fresh: Vec<usize> = n.inputs.iter().copied().filter(|&v| Some(v) != acc && !args.contains(&v)).collect();
    fresh.dedup();
    fresh.len()
}

/// Groups of the nodes, in order; every node is in exactly one group.
pub fn groups(nodes: &[NodePlan], values: &[ValuePlan]) -> Vec<Group> {
    let readers = readers(nodes, values.len());
    let mut out = Vec::with_capacity(nodes.len());
    let mut i = 0;
    while i < nodes.len() {
        if quant_round_trip(nodes, i, values, &readers) {
            out.push(Group::QuantRoundTrip(i));
            i += 2;
            continue;
        }
        if square_mean(nodes, i, values, &readers) {
            let mean = i + 1;
            let (mut steps, mut args) = (Vec::new(), Vec::new());
            // fp16/bf16 tails too: their steps round after each node as the unfused nodes do.
            let dt = values[nodes[mean].output].dt;
            let last = extend_chain(nodes, values, &readers, Some(dt), mean, &mut steps, &mut args);
            let tail = (last > mean).then_some(Tail { last, steps, args });
            match apply_of(nodes, values, &readers, i, last) {
                Some(apply) => {
                    let next = apply.last + 1;
                    out.push(Group::Norm { square: i, tail, apply });
                    i = next;
                }
                None => {
                    out.push(Group::SquareMean { square: i, tail });
                    i = last + 1;
                }
            }
            continue;
        }
        let mut args: Vec<usize> = Vec::new();
        let dt = float_dt(&nodes[i], values);
        let head = steps_of(&nodes[i], values, None, None, |v| arg_of(&mut args, v));
        let Some(mut steps) = head.filter(|_| args.len() <= CHAIN_ARGS) else {
            out.push(Group::Node(i));
            i += 1;
            continue;
        };
        let last = extend_chain(nodes, values, &readers, dt, i, &mut steps, &mut args);
        if last > i {
            out.push(Group::Chain { first: i, last, steps, args });
        } else {
            out.push(Group::Node(i));
        }
        i = last + 1;
    }
    out
}

/// The chain that makes an fp32 square and mean (nodes `square..=last`, its tail included) a
/// [`Group::Norm`]: elementwise nodes from `last + 1` on whose first node reads the group's
/// result, which read the mean's input, and whose output has that input's (bound) dims.
fn apply_of(nodes: &[NodePlan], values: &[ValuePlan], readers: &[usize], square: usize, last: usize) -> Option<Apply> {
    let (norm, x) = (nodes[last].output, nodes[square].inputs[0]);
    let first = last + 1;
    let n = nodes.get(first)?;
    if values[norm].dt != Dt::F32 || !n.inputs.contains(&norm) {
        return None;
    }
    let mut args = Vec::new();
    let mut steps = steps_of(n, values, Some(Dt::F32), None, |v| arg_of(&mut args, v))?;
    if args.len() > CHAIN_ARGS {
        return None;
    }
    let end = extend_chain(nodes, values, readers, Some(Dt::F32), first, &mut steps, &mut args);
    let fits = args.contains(&x) && values[nodes[end].output].dims == values[x].dims;
    fits.then_some(Apply { first, last: end, steps, args })
}

/// Operand `v`'s index in `args` (added if new).
fn arg_of(args: &mut Vec<usize>, v: usize) -> Src {
    let k = args.iter().position(|&a| a == v).unwrap_or_else(|| {
        args.push(v);
        args.len() - 1
    });
    Src::Arg(k)
}

/// Extends a group ending at node `last` with the elementwise nodes of type `dt` that follow,
/// each reading the one before's output (the running value) as that output's only reader,
/// with its shape, within `CHAIN_ARGS` operands; returns the new last node.
fn extend_chain(
    nodes: &[NodePlan],
    values: &[ValuePlan],
    readers: &[usize],
    dt: Option<Dt>,
    mut last: usize,
    steps: &mut Vec<ChainStep>,
    args: &mut Vec<usize>,
) -> usize {
    while let Some(n) = nodes.get(last + 1) {
        let acc = nodes[last].output;
        let extends = n.inputs.contains(&acc)
            && private(acc, values, readers)
            && values[n.output].dims == values[acc].dims
            && args.len() + new_args(n, Some(acc), args) <= CHAIN_ARGS
            // A square that feeds a mean is worth more in that pair.
            && !square_mean(nodes, last + 1, values, readers);
        if !extends {
            break;
        }
        let Some(more) = steps_of(n, values, dt, Some(acc), |v| arg_of(args, v)) else { break };
        steps.extend(more);
        last += 1;
    }
    last
}
