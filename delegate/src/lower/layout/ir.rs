//! The layout pass's IR: one delegate's subgraph ([`PGraph`]) with a layout [`Tag`] per
//! node, and the queries and edits the passes share.

use crate::mutants::{is_active, Mutant};
use crate::program::SlotId;
use crate::LoweringMode;
use reference::graph::{Graph, NodeId, Op, TensorSpec};
use reference::{MemoryFormat, QuantParams};
use std::borrow::Cow;
use std::ops::{Deref, DerefMut};

/// A node's layout tag: ExecuTorch's `XNN_NHWC_NODE` meta, absent or set either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tag {
    /// Never tagged: NCHW, and a constant is still free to be pinned either way.
    #[default]
    Untagged,
    /// Explicitly NCHW (a constant pinned to NCHW, a re-converged binary op, a copy).
    Nchw,
    /// NHWC (channels-last physical order).
    Nhwc,
}

impl Tag {
    /// `Nhwc` or the explicit `Nchw`.
    pub fn of(nhwc: bool) -> Tag {
        if nhwc {
            Tag::Nhwc
        } else {
            Tag::Nchw
        }
    }

    pub fn is_nhwc(self) -> bool {
        self == Tag::Nhwc
    }
}

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
    pub tag: Tag,
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
    pub(super) spare: Vec<usize>,
}

pub(crate) fn ambiguous(spec: &TensorSpec) -> bool {
    spec.rank() == 4 && (spec.shape[1].size == 1 || (spec.shape[2].size == 1 && spec.shape[3].size == 1))
}

/// `_is_nhwc_tensor`: channels_last and not also contiguous.
pub(crate) fn eager_nhwc(spec: &TensorSpec) -> bool {
    spec.format == MemoryFormat::ChannelsLast && spec.rank() == 4 && !ambiguous(spec)
}

impl<'g> PGraph<'g> {
    /// A copy of `order` to walk while the walk edits it; hand it back through `spare`.
    pub(super) fn order_snapshot(&mut self) -> Vec<usize> {
        let mut v = std::mem::take(&mut self.spare);
        v.clear();
        v.extend_from_slice(&self.order);
        v
    }

    pub(super) fn push(&mut self, kind: Kind, inputs: Ins, spec: Cow<'g, TensorSpec>, debug_handle: u32) -> usize {
        self.nodes.push(PNode {
            kind,
            inputs,
            spec,
            tag: Tag::Untagged,
            implicit: false,
            alive: true,
            partner: None,
            nhwc_mean: false,
            fused: None,
            debug_handle,
        });
        self.nodes.len() - 1
    }

    pub(super) fn insert_after(&mut self, after: usize, node: usize) {
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

    pub(super) fn replace_input(&mut self, target: Target, old: usize, new: usize) {
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

    pub(super) fn replace_all_uses(&mut self, old: usize, new: usize) {
        for k in 0..self.nodes.len() {
            if self.nodes[k].alive {
                self.replace_input(Target::Node(k), old, new);
            }
        }
        self.replace_input(Target::Output, old, new);
    }

    pub(super) fn remove_if_unused(&mut self, i: usize) {
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
                    if self.is_placeholder(a) && is_active(Mutant::LookThroughRankSlice) {
                        // ExecuTorch's old `meta["val"][0]`: a 3-D slice is never channels_last.
                        return false;
                    }
                    return self.nodes[a].tag.is_nhwc();
                }
            }
        }
        self.nodes[i].tag.is_nhwc()
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
        self.nodes[r].tag.is_nhwc() && self.nodes[r].spec.rank() == 4
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

    pub(super) fn can_be_nhwc(&self, i: usize, g: &Graph) -> bool {
        let pinned_nchw = self.is_param(i) && self.nodes[i].tag != Tag::Untagged && !self.is_nhwc(i, g);
        self.nodes[i].spec.rank() == 4 && !pinned_nchw
    }
}
