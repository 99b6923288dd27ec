//! ExecuTorch's `ChannelsLastTaggedReshapePass` and `RemoveRedundantCopyPass`, run on one
//! delegate's subgraph ([`PGraph`]).
//!
//! Tags: `Some(true)` = NHWC, `Some(false)` = explicitly NCHW, `None` = NCHW. Ops needing
//! NHWC (conv, GAP) get their first input converted and tag their output NHWC; ops needing
//! NCHW (linear, reshape, a non-GAP mean) get every input converted; a memory-format
//! `_to_copy` is tagged from its target format; every other op follows the converge rule.
//! Layout changes are `_to_copy` nodes (later `XNNStaticTranspose`), reused through
//! partners, wrapped in implicit q/dq around quantized values.

use super::partition::{fuseable_activation, is_gap, takes_fused_activation, Partition, Plan};
use super::{LowerError, LowerOptions};
use crate::program::SlotId;
use crate::LoweringMode;
use reference::graph::{mean_axes, Graph, NodeId, Op, TensorSpec};
use reference::{ElemType, MemoryFormat, QuantParams};
use std::borrow::Cow;
use std::ops::{Deref, DerefMut};

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// External input `ext` of the delegate (program slot `slot`).
    Placeholder { ext: usize, slot: SlotId, node: NodeId },
    /// A graph constant lifted into the delegate.
    Param { node: NodeId },
    /// A graph op claimed by the partitioner.
    Op { node: NodeId },
    /// A memory-format `_to_copy` inserted by the pass.
    Copy { nhwc: bool },
    /// A quantize inserted around a quantized copy (always implicit).
    Quant(QuantParams),
    /// A dequantize inserted around a quantized copy.
    Dequant(QuantParams),
}

/// A node's inputs: up to three inline (every graph op reads at most three values: conv
/// and linear with a bias), more on the heap. Every subgraph node has a list and the
/// layout pass asks for distinct inputs often, so they are not a `Vec` each.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ins {
    len: usize,
    inline: [usize; 3],
    /// All of them, when there are more than fit inline.
    spill: Vec<usize>,
}

impl Ins {
    pub fn from_slice(xs: &[usize]) -> Ins {
        let mut ins = Ins::default();
        for &x in xs {
            ins.push(x);
        }
        ins
    }

    pub fn push(&mut self, x: usize) {
        if self.len < self.inline.len() {
            self.inline[self.len] = x;
        } else {
            if self.spill.is_empty() {
                self.spill.extend_from_slice(&self.inline);
            }
            self.spill.push(x);
        }
        self.len += 1;
    }
}

impl Deref for Ins {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        if self.spill.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.spill
        }
    }
}

impl<'a> IntoIterator for &'a Ins {
    type Item = &'a usize;
    type IntoIter = std::slice::Iter<'a, usize>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl DerefMut for Ins {
    fn deref_mut(&mut self) -> &mut [usize] {
        if self.spill.is_empty() {
            &mut self.inline[..self.len]
        } else {
            &mut self.spill
        }
    }
}

#[derive(Clone, Debug)]
pub struct PNode<'g> {
    pub kind: Kind,
    pub inputs: Ins,
    /// Logical (NCHW-order) shape, dtype and quant params; `format` is the eager format.
    /// Borrowed from the graph for the nodes that stand for graph nodes (most of them).
    pub spec: Cow<'g, TensorSpec>,
    pub tag: Option<bool>,
    /// An implicit q/dq: serialized as nothing, its value is its input's.
    pub implicit: bool,
    pub alive: bool,
    pub partner: Option<usize>,
    /// NhwcAware: a non-GAP mean reading its NHWC input directly with remapped axes.
    pub nhwc_mean: bool,
    /// Output range of a relu/hardtanh fused into this node.
    pub fused: Option<(f32, f32)>,
    pub debug_handle: u32,
}

/// Where a rewired value is read: a node, or the delegate's output tuple.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    Node(usize),
    Output,
    /// Output entry `k` alone (repairs).
    OutputAt(usize),
}

/// One delegate's subgraph, as the layout pass and the visitors see it.
#[derive(Clone, Debug)]
pub struct PGraph<'g> {
    pub nodes: Vec<PNode<'g>>,
    /// Graph order (params, placeholders, then ops; inserted nodes right after their input).
    pub order: Vec<usize>,
    /// The output tuple.
    pub outputs: Vec<usize>,
    /// Whether output `k` is handed off NHWC (its eager value is channels_last).
    pub out_nhwc: Vec<bool>,
    pub num_inputs: usize,
    pub mode: LoweringMode,
    /// The buffer [`PGraph::order_snapshot`] lends out, kept to save an allocation per walk.
    spare: Vec<usize>,
}

pub(crate) fn ambiguous(spec: &TensorSpec) -> bool {
    spec.rank() == 4 && (spec.shape[1].size == 1 || (spec.shape[2].size == 1 && spec.shape[3].size == 1))
}

/// `_is_nhwc_tensor`: channels_last and not also contiguous.
pub(crate) fn eager_nhwc(spec: &TensorSpec) -> bool {
    spec.format == MemoryFormat::ChannelsLast && spec.rank() == 4 && !ambiguous(spec)
}

fn mutant(_m: &str) -> bool {
    #[cfg(feature = "mutants")]
    {
        use crate::mutants::{is_active, Mutant};
        return match _m {
            "look_through" => is_active(Mutant::LookThroughRankSlice),
            "gap_as_static" => is_active(Mutant::GapAsStaticMean),
            "nhwc_into_static" => is_active(Mutant::NhwcIntoStaticMean),
            "gap_rank_from_input" => is_active(Mutant::GapRankFromInput),
            "requant_copy_folded" => is_active(Mutant::RequantCopyFolded),
            _ => false,
        };
    }
    #[allow(unreachable_code)]
    false
}

impl<'g> PGraph<'g> {
    /// The subgraph of one partition: the constants it owns, placeholders (its inputs, the
    /// constants it does not own among them) in first-use order, then the member ops in
    /// graph order.
    pub fn build(g: &'g Graph, plan: &Plan, p: &Partition, slots: &[SlotId]) -> Result<PGraph<'g>, LowerError> {
        let mut pg = PGraph {
            nodes: Vec::new(),
            order: Vec::new(),
            outputs: Vec::new(),
            out_nhwc: Vec::new(),
            num_inputs: 0,
            mode: plan.mode,
            spare: Vec::new(),
        };
        // Graph node -> subgraph node, indexed by graph node id.
        let mut map: Vec<Option<usize>> = vec![None; g.nodes.len()];
        pg.nodes.reserve(p.nodes.len() + p.inputs.len() + 4);
        pg.order.reserve(p.nodes.len() + p.inputs.len() + 4);
        for &m in &p.nodes {
            for &i in &g.nodes[m].inputs {
                // (A constant is never a member: partitions hold ops only.) A constant the
                // partition does not own is one of its inputs, a placeholder below.
                let lifted = matches!(g.nodes[i].op, Op::Constant { .. }) && !p.inputs.contains(&i);
                if lifted && map[i].is_none() {
                    let k = pg.push(Kind::Param { node: i }, Ins::default(), Cow::Borrowed(&g.nodes[i].spec), 0);
                    pg.order.push(k);
                    map[i] = Some(k);
                }
            }
        }
        for (ext, (&i, &slot)) in p.inputs.iter().zip(slots).enumerate() {
            let k =
                pg.push(Kind::Placeholder { ext, slot, node: i }, Ins::default(), Cow::Borrowed(&g.nodes[i].spec), 0);
            pg.order.push(k);
            map[i] = Some(k);
        }
        pg.num_inputs = p.inputs.len();
        for &m in &p.nodes {
            let mut ins = Ins::default();
            for &i in &g.nodes[m].inputs {
                ins.push(
                    map[i].ok_or_else(|| LowerError::Internal { reason: format!("partition input {i} not mapped") })?,
                );
            }
            let k = pg.push(Kind::Op { node: m }, ins, Cow::Borrowed(&g.nodes[m].spec), plan.debug_handle[m]);
            pg.nodes[k].implicit = plan.implicit[m];
            pg.order.push(k);
            map[m] = Some(k);
        }
        pg.outputs.reserve(p.outputs.len());
        for &o in &p.outputs {
            pg.outputs.push(map[o].ok_or_else(|| LowerError::Internal { reason: format!("output {o} not mapped") })?);
        }
        pg.out_nhwc = p.outputs.iter().map(|&o| eager_nhwc(&g.nodes[o].spec)).collect();
        pg.fuse_activations(g);
        Ok(pg)
    }

    /// `FuseActivationPass` (runs before the layout pass): a relu/hardtanh whose input is
    /// a conv, linear, add, sub or mul read by nothing else becomes that op's output range.
    fn fuse_activations(&mut self, g: &Graph) {
        let order = self.order_snapshot();
        for &a in &order {
            let Some(range) = self.op(a, g).and_then(fuseable_activation) else { continue };
            let Some(&pre) = self.nodes[a].inputs.first() else { continue };
            let fuses = self.op(pre, g).is_some_and(takes_fused_activation)
                && self.nodes[pre].fused.is_none()
                && self.num_users(pre) == 1;
            if fuses {
                self.nodes[pre].fused = Some(range);
                self.replace_all_uses(a, pre);
                self.nodes[a].alive = false;
                self.order.retain(|&x| x != a);
            }
        }
        self.spare = order;
    }

    /// A copy of `order` to walk while the walk edits it; hand it back through `spare`.
    fn order_snapshot(&mut self) -> Vec<usize> {
        let mut v = std::mem::take(&mut self.spare);
        v.clear();
        v.extend_from_slice(&self.order);
        v
    }

    fn push(&mut self, kind: Kind, inputs: Ins, spec: Cow<'g, TensorSpec>, debug_handle: u32) -> usize {
        self.nodes.push(PNode {
            kind,
            inputs,
            spec,
            tag: None,
            implicit: false,
            alive: true,
            partner: None,
            nhwc_mean: false,
            fused: None,
            debug_handle,
        });
        self.nodes.len() - 1
    }

    fn insert_after(&mut self, after: usize, node: usize) {
        let pos = self.order.iter().position(|&x| x == after).map_or(self.order.len(), |p| p + 1);
        self.order.insert(pos, node);
    }

    /// The graph op of a node (`None` for placeholders, params and inserted nodes).
    pub fn op<'a>(&self, i: usize, g: &'a Graph) -> Option<&'a Op> {
        match self.nodes[i].kind {
            Kind::Op { node } => Some(&g.nodes[node].op),
            _ => None,
        }
    }

    pub fn graph_node(&self, i: usize) -> Option<NodeId> {
        match self.nodes[i].kind {
            Kind::Op { node } | Kind::Param { node } | Kind::Placeholder { node, .. } => Some(node),
            _ => None,
        }
    }

    pub fn is_quant(&self, i: usize, g: &Graph) -> bool {
        matches!(self.nodes[i].kind, Kind::Quant(_)) || matches!(self.op(i, g), Some(Op::Quantize(_)))
    }

    pub fn is_dequant(&self, i: usize, g: &Graph) -> bool {
        matches!(self.nodes[i].kind, Kind::Dequant(_)) || matches!(self.op(i, g), Some(Op::Dequantize(_)))
    }

    pub fn qparams(&self, i: usize, g: &Graph) -> Option<QuantParams> {
        match (&self.nodes[i].kind, self.op(i, g)) {
            (Kind::Quant(q) | Kind::Dequant(q), _) => Some(*q),
            (_, Some(Op::Quantize(q) | Op::Dequantize(q))) => Some(*q),
            _ => None,
        }
    }

    pub fn is_param(&self, i: usize) -> bool {
        matches!(self.nodes[i].kind, Kind::Param { .. })
    }

    pub fn is_placeholder(&self, i: usize) -> bool {
        matches!(self.nodes[i].kind, Kind::Placeholder { .. } | Kind::Param { .. })
    }

    /// A memory-format `_to_copy` (inserted, or the user's with an unchanged dtype).
    pub fn is_format_copy(&self, i: usize, g: &Graph) -> bool {
        match self.nodes[i].kind {
            Kind::Copy { .. } => true,
            Kind::Op { node } => {
                matches!(g.nodes[node].op, Op::ToCopy { .. })
                    && self.nodes[i]
                        .inputs
                        .first()
                        .is_some_and(|&x| self.nodes[x].spec.dtype == self.nodes[i].spec.dtype)
            }
            _ => false,
        }
    }

    /// Distinct input nodes (`all_input_nodes`).
    pub fn input_nodes(&self, i: usize) -> Ins {
        let mut v = Ins::default();
        for &x in self.nodes[i].inputs.iter() {
            if !v.contains(&x) {
                v.push(x);
            }
        }
        v
    }

    /// Number of distinct users (the output tuple counts once).
    pub fn num_users(&self, i: usize) -> usize {
        let nodes = self.nodes.iter().filter(|n| n.alive && n.inputs.contains(&i)).count();
        nodes + usize::from(self.outputs.contains(&i))
    }

    fn replace_input(&mut self, target: Target, old: usize, new: usize) {
        match target {
            Target::Node(t) => {
                for x in self.nodes[t].inputs.iter_mut() {
                    if *x == old {
                        *x = new;
                    }
                }
            }
            Target::OutputAt(k) => {
                if self.outputs.get(k) == Some(&old) {
                    self.outputs[k] = new;
                }
            }
            Target::Output => {
                for x in &mut self.outputs {
                    if *x == old {
                        *x = new;
                    }
                }
            }
        }
    }

    fn replace_all_uses(&mut self, old: usize, new: usize) {
        for k in 0..self.nodes.len() {
            if self.nodes[k].alive {
                self.replace_input(Target::Node(k), old, new);
            }
        }
        self.replace_input(Target::Output, old, new);
    }

    fn remove_if_unused(&mut self, i: usize) {
        if self.nodes[i].alive && self.num_users(i) == 0 {
            self.nodes[i].alive = false;
            self.order.retain(|&x| x != i);
        }
    }

    /// `is_nhwc_node`, with the q/dq look-through reading the tag of the node it looks
    /// through to (the fixed behaviour).
    pub fn is_nhwc(&self, i: usize, g: &Graph) -> bool {
        if self.is_dequant(i, g) {
            if let Some(&q) = self.nodes[i].inputs.first() {
                if let Some(&a) = self.nodes[q].inputs.first() {
                    if self.is_placeholder(a) && mutant("look_through") {
                        // ExecuTorch's old `meta["val"][0]`: a 3-D slice is never channels_last.
                        return false;
                    }
                    return self.nodes[a].tag == Some(true);
                }
            }
        }
        self.nodes[i].tag == Some(true)
    }

    /// Whether `i` is an NHWC layout copy (possibly wrapped in inserted q/dq) of an NCHW
    /// value: a mean rewired onto it by the dq `replace_all_uses_with` gains nothing from
    /// reading NHWC (the NCHW source exists) and would need a copy back for its output.
    pub fn is_copy_of_nchw(&self, mut i: usize, g: &Graph) -> bool {
        for _ in 0..self.nodes.len() {
            match self.nodes[i].kind {
                Kind::Copy { nhwc } => return nhwc,
                Kind::Quant(_) | Kind::Dequant(_) => {}
                _ if self.is_quant(i, g) || self.is_dequant(i, g) => {}
                _ => return false,
            }
            match self.nodes[i].inputs.first() {
                Some(&x) => i = x,
                None => return false,
            }
        }
        false
    }

    /// The layout the value of `i` really has once serialized: its forwarding root's tag.
    pub fn actual_nhwc(&self, i: usize, g: &Graph) -> bool {
        let r = self.resolve(i, g);
        self.nodes[r].tag == Some(true) && self.nodes[r].spec.rank() == 4
    }

    /// Follows implicit q/dq nodes to the node whose value they forward.
    pub fn resolve(&self, mut i: usize, g: &Graph) -> usize {
        let mut guard = 0;
        while self.nodes[i].implicit && (self.is_quant(i, g) || self.is_dequant(i, g)) && guard < self.nodes.len() {
            match self.nodes[i].inputs.first() {
                Some(&x) => i = x,
                None => break,
            }
            guard += 1;
        }
        i
    }

    fn can_be_nhwc(&self, i: usize, g: &Graph) -> bool {
        let pinned_nchw = self.is_param(i) && self.nodes[i].tag.is_some() && !self.is_nhwc(i, g);
        self.nodes[i].spec.rank() == 4 && !pinned_nchw
    }
}

/// Layout class of a node for the main loop.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Class {
    Nhwc,
    Nchw,
    FormatCopy,
    /// NhwcAware: a non-GAP mean reading an NHWC input in place.
    NhwcMean {
        keep: bool,
    },
    Agnostic,
}

/// Whether a mean over `axes` of an NHWC [N,H,W,C] tensor without keepdim leaves the
/// kept dims in NCHW order (then its output is plain NCHW with no copy).
pub(crate) fn kept_order_preserved(axes: &[usize]) -> bool {
    let kept_phys: Vec<usize> = [0usize, 2, 3, 1].into_iter().filter(|d| !axes.contains(d)).collect();
    kept_phys.windows(2).all(|w| w[0] < w[1])
}

/// Whether the pass treats this mean as GAP (reads the rank from the mean's own output;
/// the `GapRankFromInput` mutant reads it from the input, which for an inserted node
/// has no shape: ExecuTorch's KeyError).
fn gap_in_pass(pg: &PGraph, i: usize, g: &Graph) -> Result<bool, LowerError> {
    let Some(op) = pg.op(i, g) else { return Ok(false) };
    if mutant("gap_rank_from_input") {
        if let Some(&x) = pg.nodes[i].inputs.first() {
            if matches!(pg.nodes[x].kind, Kind::Copy { .. } | Kind::Quant(_) | Kind::Dequant(_)) {
                return Err(LowerError::Internal {
                    reason: "mean input has no shape metadata (KeyError 'val')".into(),
                });
            }
        }
    }
    Ok(treated_as_gap(op, &pg.nodes[i].spec))
}

/// A mean the pass lowers as GAP in every mode.
fn treated_as_gap(op: &Op, out: &TensorSpec) -> bool {
    is_gap(op, out) && !mutant("gap_as_static")
}

/// Whether the pass and the visitors read the lowering mode at this op: only at a mean
/// they do not treat as GAP (`class`, `repair_rewired_inputs`, and `nhwc_mean` in the
/// visitors). A subgraph without such a mean lowers the same in every mode.
pub(crate) fn reads_mode(op: &Op, out: &TensorSpec) -> bool {
    matches!(op, Op::Mean { .. }) && !treated_as_gap(op, out)
}

fn class(pg: &PGraph, i: usize, g: &Graph) -> Result<Class, LowerError> {
    let n = &pg.nodes[i];
    if let Kind::Copy { .. } = n.kind {
        return Ok(Class::FormatCopy);
    }
    let Some(op) = pg.op(i, g) else { return Ok(Class::Agnostic) };
    Ok(match op {
        Op::Conv2d(_) => Class::Nhwc,
        Op::Mean { dims, keepdim, .. } => {
            if gap_in_pass(pg, i, g)? {
                Class::Nhwc
            } else if mutant("nhwc_into_static") {
                Class::Agnostic
            } else {
                let x = n.inputs[0];
                let xs = &pg.nodes[x].spec;
                let axes = mean_axes(dims, xs.rank()).unwrap_or_default();
                if pg.mode == LoweringMode::NhwcAware
                    && xs.rank() == 4
                    && pg.is_nhwc(x, g)
                    && !pg.is_copy_of_nchw(x, g)
                    && (*keepdim || kept_order_preserved(&axes))
                {
                    Class::NhwcMean { keep: *keepdim }
                } else {
                    Class::Nchw
                }
            }
        }
        Op::Linear | Op::Reshape { .. } => Class::Nchw,
        Op::ToCopy { .. } if pg.is_format_copy(i, g) => Class::FormatCopy,
        _ => Class::Agnostic,
    })
}

/// Runs the layout pass, the binary re-converge and the redundant-copy removal.
pub fn run(pg: &mut PGraph, g: &Graph, _opts: &LowerOptions) -> Result<(), LowerError> {
    let snapshot = pg.order_snapshot();
    for &i in &snapshot {
        if !pg.nodes[i].alive {
            continue;
        }
        if pg.nodes[i].inputs.is_empty() {
            if pg.nodes[i].spec.rank() == 4 {
                pg.nodes[i].tag = Some(eager_nhwc(&pg.nodes[i].spec));
            }
            continue;
        }
        match class(pg, i, g)? {
            Class::Nhwc => {
                let x = pg.nodes[i].inputs[0];
                input_to_nhwc(pg, g, x, Target::Node(i))?;
                pg.nodes[i].tag = Some(true);
            }
            Class::Nchw => {
                for &x in &pg.input_nodes(i) {
                    input_to_nchw(pg, g, x, Target::Node(i))?;
                }
            }
            Class::FormatCopy => {
                let nhwc = match pg.nodes[i].kind {
                    Kind::Copy { nhwc } => nhwc,
                    _ => pg.nodes[i].spec.format == MemoryFormat::ChannelsLast,
                };
                pg.nodes[i].tag = Some(nhwc);
            }
            Class::NhwcMean { keep } => {
                pg.nodes[i].nhwc_mean = true;
                pg.nodes[i].tag = if keep { Some(true) } else { None };
            }
            Class::Agnostic => converge(pg, g, i, false)?,
        }
    }
    // The outputs as they were before this loop rewires any of them.
    let mut outs = snapshot;
    outs.clear();
    outs.extend_from_slice(&pg.outputs);
    for (k, &o) in outs.iter().enumerate() {
        if pg.out_nhwc[k] {
            input_to_nhwc(pg, g, o, Target::Output)?;
        } else {
            input_to_nchw(pg, g, o, Target::Output)?;
        }
    }
    pg.spare = outs;
    for n in &mut pg.nodes {
        n.partner = None;
    }
    // Re-converge binary ops whose operands ended up in different layouts.
    let order = pg.order_snapshot();
    for &i in &order {
        if !pg.nodes[i].alive || !matches!(pg.op(i, g), Some(Op::Binary(_))) {
            continue;
        }
        let ins = pg.input_nodes(i);
        if ins.len() == 2 && pg.is_nhwc(ins[0], g) != pg.is_nhwc(ins[1], g) {
            converge(pg, g, i, true)?;
        }
    }
    pg.spare = order;
    repair_rewired_inputs(pg, g)?;
    remove_redundant_copies(pg, g);
    repair_rewired_inputs(pg, g)?;
    // Every hand-off leaves in the layout its slot holds, whatever the rewiring did.
    for k in 0..pg.outputs.len() {
        let o = pg.outputs[k];
        if pg.actual_nhwc(o, g) != pg.out_nhwc[k] {
            repair_convert(pg, g, o, Target::OutputAt(k), pg.out_nhwc[k])?;
        }
    }
    Ok(())
}

/// Rewires one reader: a node's every use of `old`, or a single output entry.
fn replace_one(pg: &mut PGraph, target: Target, old: usize, new: usize) {
    match target {
        Target::OutputAt(k) => {
            if pg.outputs.get(k) == Some(&old) {
                pg.outputs[k] = new;
            }
        }
        t => pg.replace_input(t, old, new),
    }
}

/// After `replace_all_uses_with` moved the users of a dequantize onto the new one, an op
/// processed earlier can read a value in a layout it was not planned for. ExecuTorch
/// re-checks only binary ops (above); there a conv would read NCHW data under NHWC dims
/// and a unary op would mix layouts. Those programs never worked, so converting the
/// input back into the op's layout changes no program ExecuTorch lowers correctly. A
/// non-GAP mean is left to the visitor's guard, as merged (a typed error).
/// A copy of `x` into the layout `target` needs, rewiring `target` alone (never
/// `replace_all_uses_with`, which is how the mismatch arose). An implicit dequantize keeps
/// the copy on the int8 value inside an implicit q/dq pair.
fn repair_convert(pg: &mut PGraph, g: &Graph, x: usize, target: Target, nhwc: bool) -> Result<(), LowerError> {
    if pg.is_param(x) {
        clone_param(pg, x, target, nhwc);
        return Ok(());
    }
    if nhwc && pg.nodes[x].spec.rank() != 4 {
        return Err(LowerError::InternalLayout {
            node: node_id_for_error(pg, x),
            reason: format!("a rank-{} value cannot be converted to NHWC", pg.nodes[x].spec.rank()),
        });
    }
    let copy = new_copy(pg, x, nhwc);
    let wrap = if pg.is_dequant(x, g) && pg.nodes[x].implicit { pg.qparams(x, g) } else { None };
    match wrap {
        Some(qp) => {
            let handle = crate::xnn::DEFAULT_DEBUG_HANDLE;
            let qspec = TensorSpec { dtype: ElemType::Qs8, quant: Some(qp), ..pg.nodes[copy].spec.as_ref().clone() };
            let q = pg.push(Kind::Quant(qp), Ins::from_slice(&[copy]), Cow::Owned(qspec), handle);
            pg.nodes[q].tag = Some(nhwc);
            pg.nodes[q].implicit = true;
            pg.insert_after(copy, q);
            let dspec = TensorSpec { dtype: ElemType::F32, quant: None, ..pg.nodes[copy].spec.as_ref().clone() };
            let dq = pg.push(Kind::Dequant(qp), Ins::from_slice(&[q]), Cow::Owned(dspec), handle);
            pg.nodes[dq].tag = Some(nhwc);
            pg.nodes[dq].implicit = true;
            pg.insert_after(q, dq);
            replace_one(pg, target, x, dq);
        }
        None => replace_one(pg, target, x, copy),
    }
    Ok(())
}

fn repair_rewired_inputs(pg: &mut PGraph, g: &Graph) -> Result<(), LowerError> {
    let order = pg.order_snapshot();
    for &i in &order {
        if !pg.nodes[i].alive || pg.nodes[i].inputs.is_empty() || pg.nodes[i].implicit {
            continue;
        }
        if matches!(pg.nodes[i].kind, Kind::Copy { .. }) || pg.is_format_copy(i, g) {
            continue;
        }
        let Some(op) = pg.op(i, g) else { continue };
        // The layout each input must have: Some(layout) for the first input only, or for all.
        let (want, first_only) = match op {
            Op::Conv2d(_) => (Some(true), true),
            Op::Mean { .. } if gap_in_pass(pg, i, g)? => (Some(true), true),
            Op::Mean { .. } if pg.nodes[i].nhwc_mean => (Some(true), true),
            // As merged, a non-GAP mean handed an NHWC input is the visitor's typed error;
            // NhwcAware, our follow-up, copies it back instead.
            Op::Mean { .. } if pg.mode == LoweringMode::NhwcAware => (Some(false), true),
            Op::Mean { .. } => (None, true),
            Op::Linear | Op::Reshape { .. } => (Some(false), false),
            _ => (Some(pg.nodes[i].tag == Some(true)), false),
        };
        let Some(want) = want else { continue };
        let first = [pg.nodes[i].inputs[0]];
        let all;
        let inputs: &[usize] = if first_only {
            &first
        } else {
            all = pg.input_nodes(i);
            &all
        };
        for &x in inputs {
            if pg.actual_nhwc(x, g) != want && !(pg.is_param(x) && !want && pg.nodes[x].spec.rank() != 4) {
                repair_convert(pg, g, x, Target::Node(i), want)?;
            }
        }
    }
    pg.spare = order;
    Ok(())
}

fn converge(pg: &mut PGraph, g: &Graph, i: usize, recheck: bool) -> Result<(), LowerError> {
    let ins = pg.input_nodes(i);
    let all_nhwc = ins.iter().all(|&x| pg.is_nhwc(x, g));
    let any_nhwc = ins.iter().any(|&x| pg.is_nhwc(x, g));
    if all_nhwc {
        pg.nodes[i].tag = Some(true);
    } else if any_nhwc {
        if ins.iter().all(|&x| pg.can_be_nhwc(x, g)) {
            for &x in &ins {
                input_to_nhwc(pg, g, x, Target::Node(i))?;
            }
            pg.nodes[i].tag = Some(true);
        } else {
            for &x in &ins {
                input_to_nchw(pg, g, x, Target::Node(i))?;
            }
            if recheck {
                pg.nodes[i].tag = Some(false);
            }
        }
    }
    Ok(())
}

/// A constant already pinned to the other layout: ExecuTorch asserts; we give this use
/// its own copy of the constant, pinned to the layout it needs (bytes permuted at
/// serialization, never a runtime copy).
fn clone_param(pg: &mut PGraph, x: usize, target: Target, nhwc: bool) {
    let mut n = pg.nodes[x].clone();
    n.tag = Some(nhwc);
    n.partner = None;
    pg.nodes.push(n);
    let k = pg.nodes.len() - 1;
    pg.insert_after(x, k);
    pg.replace_input(target, x, k);
}

fn node_id_for_error(pg: &PGraph, i: usize) -> NodeId {
    pg.graph_node(i).unwrap_or(usize::MAX)
}

fn input_to_nhwc(pg: &mut PGraph, g: &Graph, x: usize, target: Target) -> Result<(), LowerError> {
    if pg.is_param(x) {
        if pg.nodes[x].tag == Some(false) {
            if pg.nodes[x].spec.rank() != 4 {
                return Err(LowerError::InternalLayout {
                    node: node_id_for_error(pg, x),
                    reason: "a non-4-D constant cannot be made NHWC".into(),
                });
            }
            clone_param(pg, x, target, true);
            return Ok(());
        }
        pg.nodes[x].tag = Some(true);
        return Ok(());
    }
    if pg.is_placeholder(x) {
        if eager_nhwc(&pg.nodes[x].spec) {
            return Ok(());
        }
    } else if pg.is_nhwc(x, g) {
        return Ok(());
    }
    if !pg.can_be_nhwc(x, g) {
        return Err(LowerError::InternalLayout {
            node: node_id_for_error(pg, x),
            reason: format!("a rank-{} value cannot be converted to NHWC", pg.nodes[x].spec.rank()),
        });
    }
    let copy = match pg.nodes[x].partner {
        Some(p) => p,
        None => new_copy(pg, x, true),
    };
    insert_copy(pg, g, x, copy, target);
    Ok(())
}

fn input_to_nchw(pg: &mut PGraph, g: &Graph, x: usize, target: Target) -> Result<(), LowerError> {
    if pg.is_param(x) {
        if pg.nodes[x].tag == Some(true) {
            clone_param(pg, x, target, false);
            return Ok(());
        }
        pg.nodes[x].tag = Some(false);
        return Ok(());
    }
    if pg.is_placeholder(x) {
        if !eager_nhwc(&pg.nodes[x].spec) {
            return Ok(());
        }
    } else if !pg.is_nhwc(x, g) {
        return Ok(());
    }
    let copy = match pg.nodes[x].partner {
        Some(p) => p,
        None => new_copy(pg, x, false),
    };
    insert_copy(pg, g, x, copy, target);
    Ok(())
}

fn new_copy(pg: &mut PGraph, x: usize, nhwc: bool) -> usize {
    let spec = pg.nodes[x].spec.clone();
    let k = pg.push(Kind::Copy { nhwc }, Ins::from_slice(&[x]), spec, crate::xnn::DEFAULT_DEBUG_HANDLE);
    pg.nodes[k].tag = Some(nhwc);
    pg.insert_after(x, k);
    k
}

/// `insert_copy_and_assign_partner_nodes_quantization_sensitive`.
fn insert_copy(pg: &mut PGraph, g: &Graph, x: usize, copy: usize, target: Target) {
    let qp = pg.qparams(x, g);
    let tag = pg.nodes[copy].tag;
    let handle = crate::xnn::DEFAULT_DEBUG_HANDLE;
    if let (true, Some(qp)) = (pg.is_dequant(x, g), qp) {
        // dq_old -> copy -> q_new -> dq_new; every user of dq_old moves to dq_new.
        let qspec = TensorSpec { dtype: ElemType::Qs8, quant: Some(qp), ..pg.nodes[copy].spec.as_ref().clone() };
        let q = pg.push(Kind::Quant(qp), Ins::from_slice(&[copy]), Cow::Owned(qspec), handle);
        pg.nodes[q].tag = tag;
        pg.nodes[q].implicit = true;
        pg.insert_after(copy, q);
        let dspec = TensorSpec { dtype: ElemType::F32, quant: None, ..pg.nodes[copy].spec.as_ref().clone() };
        let dq = pg.push(Kind::Dequant(qp), Ins::from_slice(&[q]), Cow::Owned(dspec), handle);
        pg.nodes[dq].tag = tag;
        pg.insert_after(q, dq);
        if pg.nodes[x].implicit {
            pg.nodes[dq].implicit = true;
        }
        pg.nodes[x].implicit = true;
        pg.replace_all_uses(x, dq);
        pg.replace_input(Target::Node(copy), dq, x);
    } else if let (true, Some(qp)) = (pg.is_quant(x, g), qp) {
        // q_old -> dq_new -> copy -> q_new -> target, both new nodes implicit.
        let dspec = TensorSpec { dtype: ElemType::F32, quant: None, ..pg.nodes[x].spec.as_ref().clone() };
        let dq = pg.push(Kind::Dequant(qp), Ins::from_slice(&[x]), Cow::Owned(dspec), handle);
        pg.nodes[dq].tag = pg.nodes[x].tag;
        pg.nodes[dq].implicit = true;
        pg.insert_after(x, dq);
        let qspec = TensorSpec { dtype: ElemType::Qs8, quant: Some(qp), ..pg.nodes[copy].spec.as_ref().clone() };
        let q = pg.push(Kind::Quant(qp), Ins::from_slice(&[copy]), Cow::Owned(qspec), handle);
        pg.nodes[q].tag = tag;
        pg.nodes[q].implicit = true;
        pg.insert_after(copy, q);
        pg.nodes[copy].spec =
            Cow::Owned(TensorSpec { dtype: ElemType::F32, quant: None, ..pg.nodes[copy].spec.as_ref().clone() });
        pg.replace_input(Target::Node(copy), x, dq);
        pg.replace_input(target, x, q);
    } else {
        pg.replace_input(target, x, copy);
        pg.nodes[x].partner = Some(copy);
        pg.nodes[copy].partner = Some(x);
    }
}

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
fn remove_redundant_copies(pg: &mut PGraph, g: &Graph) {
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
    let differ = |x: usize| pg.qparams(x, g) != params && !mutant("requant_copy_folded");
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
