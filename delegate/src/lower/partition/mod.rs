//! The partitioner: one config per op decides whether a node may go to XNNPACK (and why
//! not), static-quant `dq -> op -> q` groups are claimed together with implicit q/dq, and
//! claimed nodes are merged into connected, cycle-free delegates ordered so the program
//! is executable (ExecuTorch's `ConfigerationBasedPartitioner` + capability partitioner).
//!
//! [`configs`] holds the per-op checks, [`quant`] the static-quant groups, [`users`] who
//! reads each node, [`merge`] the cycle-free merge into delegates and their order.

pub mod configs;
pub mod merge;
pub mod quant;
pub mod users;

pub(crate) use configs::is_op;
pub use configs::{check, is_gap, DTYPE_REASON};
pub use quant::{fuseable_activation, takes_fused_activation};
pub(crate) use users::{users, Users};

use super::LowerOptions;
use crate::LoweringMode;
use configs::is_const;
use merge::{form_partitions, order_units};
use quant::{dq_inputs, keeps_qparams, quant_anchor, quant_output};
use reference::graph::{Graph, NodeId, Op};

/// One delegate: the graph nodes it runs and its hand-offs.
#[derive(Clone, Debug, PartialEq)]
pub struct Partition {
    /// Member op nodes, in graph order.
    pub nodes: Vec<NodeId>,
    /// Values produced outside and read inside, in order of first use (the order
    /// `fuse_as_graphmodule` creates placeholders in): hand-offs, graph inputs, and every
    /// constant no member claims as a dependency ([`merge::owns_constant`]).
    pub inputs: Vec<NodeId>,
    /// Members read outside the partition or returned by the graph, in graph order.
    pub outputs: Vec<NodeId>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Unit {
    Delegate(Partition),
    Portable { node: NodeId, reason: String },
}

/// The partitioner's decisions for one graph.
#[derive(Clone, Debug)]
pub struct Plan {
    pub units: Vec<Unit>,
    /// q/dq nodes claimed by a static-quant group: serialized as no node at all.
    pub implicit: Vec<bool>,
    /// ExecuTorch's `debug_handle` of each node ([`super::debug_handle::assign`]).
    pub debug_handle: Vec<u32>,
    pub mode: LoweringMode,
}

pub fn plan(g: &Graph, opts: &LowerOptions) -> Plan {
    plan_from_verdicts(g, opts.mode, &users(g), verdicts(g, opts))
}

/// The per-op configs' verdicts: which op nodes are claimed, and why each other op stays
/// outside. Everything else the partitioner decides follows from these alone (and the
/// graph), which is what lets [`super::lower_modes`] reuse a plan across modes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Verdicts {
    pub claimed: Vec<bool>,
    pub reason: Vec<Option<String>>,
}

pub(crate) fn verdicts(g: &Graph, opts: &LowerOptions) -> Verdicts {
    let n = g.nodes.len();
    let mut reason: Vec<Option<String>> = vec![None; n];
    let mut claimed = vec![false; n];
    for id in 0..n {
        if !is_op(&g.nodes[id].op) {
            continue;
        }
        match check(g, id, opts) {
            Ok(()) => claimed[id] = true,
            Err(r) => reason[id] = Some(r),
        }
    }
    Verdicts { claimed, reason }
}

/// The plan for `mode` given the configs' verdicts.
pub(crate) fn plan_from_verdicts(g: &Graph, mode: LoweringMode, u: &Users, v: Verdicts) -> Plan {
    let n = g.nodes.len();
    let Verdicts { mut claimed, mut reason } = v;

    // Static-quant groups, to a fixpoint: an anchor keeps its group only while every dq it
    // reads feeds grouped anchors alone (an implicit dq forwards the int8 value, which
    // no fp32 reader may see), and a conv/linear whose weight comes through a dq needs
    // its group.
    let mut no_group = vec![false; n];
    let (groups, parts) = loop {
        let mut anchor: Vec<bool> = (0..n)
            .map(|id| {
                claimed[id]
                    && !no_group[id]
                    && quant_anchor(&g.nodes[id].op)
                    && quant_output(g, u, id).is_some_and(|t| t.iter().all(|&x| claimed[x]))
                    && dq_inputs(g, id).is_some_and(|d| d.iter().all(|&q| claimed[q]))
                    && keeps_qparams(g, u, id)
            })
            .collect();
        loop {
            let mut changed = false;
            for id in 0..n {
                if !anchor[id] {
                    continue;
                }
                let dqs = dq_inputs(g, id).unwrap_or_default();
                let ok = dqs.iter().all(|&d| !u.is_output[d] && u.of(d).iter().all(|&x| anchor[x]));
                if !ok {
                    anchor[id] = false;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        // A conv/linear whose weight is a dq needs its group.
        let mut dropped = false;
        for id in 0..n {
            if claimed[id] && matches!(g.nodes[id].op, Op::Conv2d(_) | Op::Linear) && !anchor[id] {
                let w = g.nodes[id].inputs[1];
                if !is_const(g, w) {
                    claimed[id] = false;
                    reason[id] = Some(format!(
                        "{}: a quantized weight lowers only in a dq -> {} -> q group",
                        g.nodes[id].op.name(),
                        g.nodes[id].op.name()
                    ));
                    dropped = true;
                }
            }
        }
        if dropped {
            continue;
        }
        let groups: Vec<Vec<NodeId>> = (0..n)
            .filter(|&id| anchor[id])
            .map(|id| {
                let mut m = dq_inputs(g, id).unwrap_or_default();
                m.push(id);
                m.extend(quant_output(g, u, id).unwrap_or_default());
                m.sort_unstable();
                m.dedup();
                m
            })
            .collect();
        match form_partitions(g, u, &claimed, &groups) {
            Ok(parts) => break (groups, parts),
            Err(bad_anchor) => no_group[bad_anchor] = true,
        }
    };

    let mut implicit = vec![false; n];
    for grp in &groups {
        for &m in grp {
            if matches!(g.nodes[m].op, Op::Quantize(_) | Op::Dequantize(_)) {
                implicit[m] = true;
            }
        }
    }

    let debug_handle = super::debug_handle::assign(g);

    let units = order_units(g, u, parts, &claimed, reason);
    Plan { units, implicit, debug_handle, mode }
}
