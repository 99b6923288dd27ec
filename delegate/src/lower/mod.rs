//! Lowering of a [`reference::Graph`] into a [`LoweredProgram`], mirroring ExecuTorch's
//! XNNPACK flow: `to_edge`'s decompositions ([`decompose`]), the partitioner ([`partition`]) claims ops per config and groups them into
//! connected delegates; each delegate runs the channels-last tagged layout pass and the
//! redundant-copy removal ([`layout`]); the visitors ([`emit`]) turn the result into an
//! [`XnnGraph`](crate::xnn::XnnGraph) with ExecuTorch's value-id order; [`summary`] counts
//! what came out.

pub mod debug_handle;
pub mod decompose;
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
    let graph = &*decompose::run(graph);
    let plan = partition::plan(graph, opts);
    lower_planned(graph, opts, &plan, None)
}

/// Lowers `graph` once per entry of `opts`: element `k` equals `lower_with(graph, &opts[k])`
/// (the same program, or the same error), with the mode-independent work done once: the
/// graph is validated once, the partitioner's user lists are built once, the previous
/// entry's plan is reused when the per-op configs give the same verdicts (they read the
/// mode only at means), and a delegate whose partition holds no mean but GAP means is
/// lowered once and cloned into every later entry with the same partition.
pub fn lower_modes(graph: &Graph, opts: &[LowerOptions]) -> Vec<Result<LoweredProgram, LowerError>> {
    if let Err(e) = graph.validate() {
        let e = LowerError::from(e);
        return opts.iter().map(|_| Err(e.clone())).collect();
    }
    let graph = &*decompose::run(graph);
    let users = partition::users(graph);
    let mut cache = SegmentCache::default();
    let mut last_plan: Option<(partition::Verdicts, partition::Plan)> = None;
    let mut out = Vec::with_capacity(opts.len());
    for (k, o) in opts.iter().enumerate() {
        // The plan follows from the configs' verdicts alone; the mode changes only those
        // of means, and often not even those (a GAP mean is claimed in every mode).
        let verdicts = partition::verdicts(graph, o);
        let plan = match last_plan.take() {
            Some((v, mut p)) if v == verdicts => {
                p.mode = o.mode;
                p
            }
            _ => partition::plan_from_verdicts(graph, o.mode, &users, verdicts.clone()),
        };
        // The last entry has no one to share its delegates with.
        let remember = k + 1 < opts.len();
        out.push(lower_planned(graph, o, &plan, Some((&mut cache, remember))));
        last_plan = Some((verdicts, plan));
    }
    out
}

/// Delegates already lowered by an earlier [`lower_modes`] entry, keyed by what their
/// XNNPACK graph depends on. The layout pass and the visitors read the mode only at means
/// they do not treat as GAP ([`layout::reads_mode`]), and `emit` reads no option at all,
/// so a partition without such a mean lowers to the same graph in every mode given the
/// same members, hand-offs and implicit q/dq flags (the program slots of its hand-offs
/// are not part of the graph; they are allocated per entry).
#[derive(Default)]
struct SegmentCache {
    entries: Vec<CachedSegment>,
}

struct CachedSegment {
    partition: partition::Partition,
    /// `plan.implicit` of each member, in member order.
    implicit: Vec<bool>,
    graph: Result<crate::xnn::XnnGraph, LowerError>,
}

/// Lowers one delegate partition: subgraph, layout pass, visitors.
fn lower_partition(
    graph: &Graph,
    plan: &partition::Plan,
    p: &partition::Partition,
    ext_inputs: &[SlotId],
    opts: &LowerOptions,
) -> Result<crate::xnn::XnnGraph, LowerError> {
    let mut pg = layout::PGraph::build(graph, plan, p, ext_inputs)?;
    // The layout rules of `opts.mode` (the plan's mode, except for `fewest`'s second try).
    pg.mode = opts.mode;
    layout::run(&mut pg, graph, opts)?;
    let own = emit::emit(&pg, graph, opts)?;
    // Only a mean the pass does not treat as GAP reads the mode (`layout::reads_mode`).
    let reads_mode = p.nodes.iter().any(|&m| layout::reads_mode(&graph.nodes[m].op, &graph.nodes[m].spec));
    if opts.mode != LoweringMode::NhwcAware || !reads_mode {
        return Ok(own);
    }
    let static_mean = LowerOptions { mode: LoweringMode::StaticMean, ..opts.clone() };
    Ok(layout::fewest::fewest(own, || lower_partition(graph, plan, p, ext_inputs, &static_mean)))
}

fn lower_planned(
    graph: &Graph,
    opts: &LowerOptions,
    plan: &partition::Plan,
    mut cache: Option<(&mut SegmentCache, bool)>,
) -> Result<LoweredProgram, LowerError> {
    let mut b = Builder { graph, slots: Vec::new(), constants: Vec::new(), slot_of: vec![None; graph.nodes.len()] };

    let inputs: Vec<SlotId> = graph.inputs.iter().map(|&i| b.slot_for(i)).collect();
    let mut steps = Vec::with_capacity(plan.units.len());
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
                let xg = match cache.as_mut() {
                    Some((c, remember)) => segment_graph(graph, plan, p, &ext_inputs, opts, c, *remember)?,
                    None => lower_partition(graph, plan, p, &ext_inputs, opts)?,
                };
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

/// The XNNPACK graph of partition `p`: from `cache` when an earlier entry lowered the same
/// mode-free partition (see [`layout::reads_mode`]), else lowered now (and remembered,
/// when `remember`, if mode-free).
fn segment_graph(
    graph: &Graph,
    plan: &partition::Plan,
    p: &partition::Partition,
    ext_inputs: &[SlotId],
    opts: &LowerOptions,
    cache: &mut SegmentCache,
    remember: bool,
) -> Result<crate::xnn::XnnGraph, LowerError> {
    let mode_free = !p.nodes.iter().any(|&m| layout::reads_mode(&graph.nodes[m].op, &graph.nodes[m].spec));
    if !mode_free {
        return lower_partition(graph, plan, p, ext_inputs, opts);
    }
    let same = |c: &CachedSegment| {
        c.partition == *p && c.implicit.iter().zip(&p.nodes).all(|(&imp, &m)| imp == plan.implicit[m])
    };
    if let Some(c) = cache.entries.iter().find(|c| same(c)) {
        return c.graph.clone();
    }
    let xg = lower_partition(graph, plan, p, ext_inputs, opts);
    if !remember {
        return xg;
    }
    cache.entries.push(CachedSegment {
        partition: p.clone(),
        implicit: p.nodes.iter().map(|&m| plan.implicit[m]).collect(),
        graph: xg.clone(),
    });
    xg
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
