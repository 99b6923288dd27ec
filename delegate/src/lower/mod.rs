//! Lowering of a [`reference::Graph`] into a [`LoweredProgram`], mirroring ExecuTorch's
//! XNNPACK flow: the partitioner ([`partition`]) claims ops per config and groups them into
//! connected delegates; each delegate runs the channels-last tagged layout pass and the
//! redundant-copy removal ([`layout`]); the visitors ([`emit`]) turn the result into an
//! [`XnnGraph`](crate::xnn::XnnGraph) with ExecuTorch's value-id order; [`summary`] counts
//! what came out.

pub mod emit;
pub mod layout;
pub mod partition;
pub mod summary;

use crate::program::{DelegateSegment, LoweredProgram, PortableOp, SlotId, Step};
use crate::LoweringMode;
use reference::graph::{GraphError, NodeId, Op, TensorSpec};
use reference::Graph;

/// What [`lower_with`] needs beyond the graph.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LowerOptions {
    pub mode: LoweringMode,
    /// ExecuTorch's `XnnpackPartitioner(enable_bf16=...)`; off by default as there.
    pub enable_bf16: bool,
}

impl LowerOptions {
    pub fn new(mode: LoweringMode) -> LowerOptions {
        LowerOptions { mode, enable_bf16: false }
    }
}

impl Default for LowerOptions {
    fn default() -> Self {
        LowerOptions::new(LoweringMode::Main)
    }
}

/// Why a graph could not be lowered. Never a panic.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LowerError {
    #[error("invalid graph: {0}")]
    InvalidGraph(#[from] GraphError),
    /// The layout pass left a tensor in a layout its consumer cannot read (ExecuTorch's
    /// guard: an NHWC tensor reaching an op that reduces NCHW axes). Never wrong axes.
    #[error("internal layout error at node {node}: {reason}")]
    InternalLayout { node: NodeId, reason: String },
    /// A delegated op the visitors cannot serialize (ExecuTorch raises in the visitor).
    #[error("node {node} ({op}) cannot be serialized: {reason}")]
    Unsupported { node: NodeId, op: String, reason: String },
    /// An invariant of the lowering itself failed.
    #[error("internal lowering error: {reason}")]
    Internal { reason: String },
}

/// Whether a hand-off slot of this spec holds NHWC data, i.e. delegates declare it with
/// [N, H, W, C] dims: channels_last and not also contiguous (ExecuTorch's
/// `_is_nhwc_tensor`). A channels_last shape with C == 1 or H == W == 1 has the same bytes
/// in both orders and is handed off with NCHW dims.
pub fn slot_is_nhwc(spec: &TensorSpec) -> bool {
    layout::eager_nhwc(spec)
}

/// Lowers `graph` in `mode` with ExecuTorch's default options (bf16 off).
pub fn lower(graph: &Graph, mode: LoweringMode) -> Result<LoweredProgram, LowerError> {
    lower_with(graph, &LowerOptions::new(mode))
}

/// Lowers `graph` with explicit options.
pub fn lower_with(graph: &Graph, opts: &LowerOptions) -> Result<LoweredProgram, LowerError> {
    graph.validate()?;
    let plan = partition::plan(graph, opts);
    let mut b = Builder { graph, slots: Vec::new(), constants: Vec::new(), slot_of: vec![None; graph.nodes.len()] };

    let inputs: Vec<SlotId> = graph.inputs.iter().map(|&i| b.slot_for(i)).collect();
    let mut steps = Vec::new();
    for unit in &plan.units {
        match unit {
            partition::Unit::Portable { node, reason } => {
                let n = &graph.nodes[*node];
                let ins = n.inputs.iter().map(|&i| b.existing_slot(i)).collect::<Result<Vec<_>, _>>()?;
                let output = b.slot_for(*node);
                steps.push(Step::Portable(PortableOp {
                    node: *node,
                    op: n.op.clone(),
                    inputs: ins,
                    output,
                    reason: reason.clone(),
                }));
            }
            partition::Unit::Delegate(p) => {
                let ext_inputs = p.inputs.iter().map(|&i| b.existing_slot(i)).collect::<Result<Vec<_>, _>>()?;
                let mut pg = layout::PGraph::build(graph, &plan, p, &ext_inputs)?;
                layout::run(&mut pg, graph, opts)?;
                let xg = emit::emit(&pg, graph, opts)?;
                let outs: Vec<SlotId> = p.outputs.iter().map(|&o| b.slot_for(o)).collect();
                steps.push(Step::Delegate(DelegateSegment { graph: xg, inputs: ext_inputs, outputs: outs }));
            }
        }
    }
    let outputs = graph.outputs.iter().map(|&o| b.existing_slot(o)).collect::<Result<Vec<_>, _>>()?;
    let mut program = LoweredProgram {
        mode: opts.mode,
        slots: b.slots,
        constants: b.constants,
        inputs,
        outputs,
        steps,
        summary: Default::default(),
    };
    program.summary = summary::summarize(&program);
    Ok(program)
}

/// Allocates program slots: one per value that lives outside every delegate.
struct Builder<'g> {
    graph: &'g Graph,
    slots: Vec<TensorSpec>,
    constants: Vec<(SlotId, reference::Tensor)>,
    /// The slot of each graph node that has one, indexed by node id.
    slot_of: Vec<Option<SlotId>>,
}

impl Builder<'_> {
    /// The slot of `node`, created on first request. A hand-off slot has the node's own
    /// spec: a delegate writes an NHWC output exactly when that spec is channels_last.
    fn slot_for(&mut self, node: NodeId) -> SlotId {
        if let Some(s) = self.slot_of[node] {
            return s;
        }
        let id = self.slots.len();
        self.slots.push(self.graph.nodes[node].spec.clone());
        self.slot_of[node] = Some(id);
        id
    }

    /// The slot of a value an earlier step (or the caller) already provides; constants
    /// get theirs on demand.
    fn existing_slot(&mut self, node: NodeId) -> Result<SlotId, LowerError> {
        if let Some(&Some(s)) = self.slot_of.get(node) {
            return Ok(s);
        }
        if let Some(Op::Constant { tensor }) = self.graph.nodes.get(node).map(|n| &n.op) {
            let t = tensor.clone();
            let s = self.slot_for(node);
            self.constants.push((s, t));
            return Ok(s);
        }
        Err(LowerError::Internal { reason: format!("node {node} is read before any step produced it") })
    }
}
