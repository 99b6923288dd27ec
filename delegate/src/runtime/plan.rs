//! Execution plan of one loaded delegate segment: value ids mapped to storage (external
//! inputs borrowed, constants decoded once, outputs written straight into the returned
//! tensors, intermediates in blocks reused by liveness), nodes decoded into kernels, and
//! shapes propagated per node at run time (value dims are upper bounds). Running a plan is
//! `runtime::exec`'s.

pub use super::exec::{BoundInput, SegInput, SegmentOutput, SegmentState};

use super::fuse::Group;
use super::kernels::conv::ConvGeom;
use super::kernels::elementwise::{broadcast_dims, Unary};
use super::kernels::linear::FLAG_TRANSPOSE_WEIGHTS;
use super::kernels::{self, Quant, View, ViewMut};
use super::simd::{self, BinOp, Line};
use super::RuntimeError;
use crate::xnn::{
    QuantParams, XNode, XNodeKind, XnnDatatype, XnnGraph, FLAG_KEEP_DIMS, INVALID_VALUE_ID, VALUE_FLAG_EXTERNAL_INPUT,
    VALUE_FLAG_EXTERNAL_OUTPUT,
};
use half::{bf16, f16};
use std::collections::HashMap;

/// Value id -> value index. Serialized ids are dense (XNNPACK numbers values 0, 1, 2, ...),
/// so a table indexed by id serves them without hashing; sparse ids (a hand-made payload)
/// fall back to a hash map.
enum IdMap {
    Dense(Vec<usize>),
    Sparse(HashMap<u32, usize>),
}

impl IdMap {
    fn new(ids: impl Iterator<Item = u32>) -> IdMap {
        let (n, max) = ids.fold((0usize, 0u32), |(n, m), id| (n + 1, m.max(id)));
        if (max as usize) < 4 * n + 64 {
            IdMap::Dense(vec![usize::MAX; if n == 0 { 0 } else { max as usize + 1 }])
        } else {
            IdMap::Sparse(HashMap::with_capacity(n))
        }
    }

    /// Records `id -> vi`; false if `id` was recorded before.
    fn insert(&mut self, id: u32, vi: usize) -> bool {
        match self {
            IdMap::Dense(t) => {
                let i = id as usize;
                if i >= t.len() {
                    t.resize(i + 1, usize::MAX);
                }
                std::mem::replace(&mut t[i], vi) == usize::MAX
            }
            IdMap::Sparse(m) => m.insert(id, vi).is_none(),
        }
    }

    fn get(&self, id: u32) -> Option<usize> {
        match self {
            IdMap::Dense(t) => t.get(id as usize).copied().filter(|&v| v != usize::MAX),
            IdMap::Sparse(m) => m.get(&id).copied(),
        }
    }
}

/// Element storage type of a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dt {
    F32,
    F16,
    Bf16,
    I8,
    I32,
}

impl Dt {
    fn of(d: XnnDatatype) -> Option<Dt> {
        use XnnDatatype::*;
        Some(match d {
            Fp32 => Dt::F32,
            Fp16 => Dt::F16,
            Bf16 => Dt::Bf16,
            Qint8 | Qcint8 => Dt::I8,
            Qint32 | Qcint32 | Int32 => Dt::I32,
            _ => return None,
        })
    }
    pub fn size(self) -> usize {
        match self {
            Dt::F32 | Dt::I32 => 4,
            Dt::F16 | Dt::Bf16 => 2,
            Dt::I8 => 1,
        }
    }
}

/// The element type of an owned buffer.
pub fn dt_of_owned(o: &Owned) -> Dt {
    match o {
        Owned::F32(_) => Dt::F32,
        Owned::F16(_) => Dt::F16,
        Owned::Bf16(_) => Dt::Bf16,
        Owned::I8(_) => Dt::I8,
        Owned::I32(_) => Dt::I32,
    }
}

/// An owned typed buffer (constants, segment outputs).
#[derive(Clone, Debug)]
pub enum Owned {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    I8(Vec<i8>),
    I32(Vec<i32>),
}

impl Owned {
    /// `n` zeros, written by the pool's threads (see `simd::zeros_par`).
    pub fn zeros_par(pool: &crate::runtime::pool::Pool, dt: Dt, n: usize) -> Owned {
        match dt {
            Dt::F32 => Owned::F32(simd::zeros_par(pool, n)),
            Dt::F16 => Owned::F16(simd::zeros_par(pool, n)),
            Dt::Bf16 => Owned::Bf16(simd::zeros_par(pool, n)),
            Dt::I8 => Owned::I8(simd::zeros_par(pool, n)),
            Dt::I32 => Owned::I32(simd::zeros_par(pool, n)),
        }
    }

    pub fn zeros(dt: Dt, n: usize) -> Owned {
        match dt {
            Dt::F32 => Owned::F32(vec![0.0; n]),
            Dt::F16 => Owned::F16(vec![f16::ZERO; n]),
            Dt::Bf16 => Owned::Bf16(vec![bf16::ZERO; n]),
            Dt::I8 => Owned::I8(vec![0; n]),
            Dt::I32 => Owned::I32(vec![0; n]),
        }
    }
    pub fn view(&self) -> View<'_> {
        match self {
            Owned::F32(v) => View::F32(v),
            Owned::F16(v) => View::F16(v),
            Owned::Bf16(v) => View::Bf16(v),
            Owned::I8(v) => View::I8(v),
            Owned::I32(v) => View::I32(v),
        }
    }
    pub fn view_mut(&mut self) -> ViewMut<'_> {
        match self {
            Owned::F32(v) => ViewMut::F32(v),
            Owned::F16(v) => ViewMut::F16(v),
            Owned::Bf16(v) => ViewMut::Bf16(v),
            Owned::I8(v) => ViewMut::I8(v),
            Owned::I32(v) => ViewMut::I32(v),
        }
    }
    pub fn truncate(&mut self, n: usize) {
        match self {
            Owned::F32(v) => v.truncate(n),
            Owned::F16(v) => v.truncate(n),
            Owned::Bf16(v) => v.truncate(n),
            Owned::I8(v) => v.truncate(n),
            Owned::I32(v) => v.truncate(n),
        }
    }
}

pub(super) fn block_view(b: &[Line], dt: Dt, n: usize) -> View<'_> {
    match dt {
        Dt::F32 => View::F32(&simd::cast::<f32>(b)[..n]),
        Dt::F16 => View::F16(&simd::cast::<f16>(b)[..n]),
        Dt::Bf16 => View::Bf16(&simd::cast::<bf16>(b)[..n]),
        Dt::I8 => View::I8(&simd::cast::<i8>(b)[..n]),
        Dt::I32 => View::I32(&simd::cast::<i32>(b)[..n]),
    }
}

pub(super) fn block_view_mut(b: &mut [Line], dt: Dt, n: usize) -> ViewMut<'_> {
    match dt {
        Dt::F32 => ViewMut::F32(&mut simd::cast_mut::<f32>(b)[..n]),
        Dt::F16 => ViewMut::F16(&mut simd::cast_mut::<f16>(b)[..n]),
        Dt::Bf16 => ViewMut::Bf16(&mut simd::cast_mut::<bf16>(b)[..n]),
        Dt::I8 => ViewMut::I8(&mut simd::cast_mut::<i8>(b)[..n]),
        Dt::I32 => ViewMut::I32(&mut simd::cast_mut::<i32>(b)[..n]),
    }
}

/// Where a value lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    /// The segment's `k`-th input tensor (external id `k`).
    Input(usize),
    /// The segment's `k`-th output (external id `num_inputs + k`).
    Output(usize),
    Const(usize),
    /// An intermediate block, shared with values whose lifetimes do not overlap.
    Block(usize),
    /// Defined by the graph but never read or written by a node we run.
    Unused,
}

#[derive(Clone, Debug)]
pub struct ValuePlan {
    pub dt: Dt,
    /// Upper bounds (physical order).
    pub dims: Vec<usize>,
    pub max_numel: usize,
    pub quant: Option<Quant>,
    pub loc: Loc,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Kernel {
    Binary(BinOp),
    Unary(Unary),
    Convert,
    Gap { keep: bool },
    Mean { axes: Vec<usize>, keep: bool },
    Transpose { perm: Vec<usize> },
    Reshape { new_shape: Vec<usize> },
    Conv(ConvGeom),
    FullyConnected { transpose_weights: bool },
}

#[derive(Clone, Debug)]
pub struct NodePlan {
    /// Index in the loaded graph's `nodes`.
    pub index: usize,
    pub kernel: Kernel,
    /// Value indices read (bias optional, last).
    pub inputs: Vec<usize>,
    pub output: usize,
    pub act: Option<(f32, f32)>,
    /// A regular float convolution's constant filter, or a large float linear's constant
    /// weights, packed once here (as XNNPACK packs at operator creation).
    pub packed: Option<Vec<f32>>,
}

/// A compiled segment.
#[derive(Debug)]
pub struct SegmentPlan {
    pub segment: usize,
    pub values: Vec<ValuePlan>,
    pub nodes: Vec<NodePlan>,
    /// The nodes as they run with fusion on (`runtime::fuse`), in order.
    pub groups: Vec<Group>,
    pub consts: Vec<Owned>,
    /// Value index bound to each segment input / output.
    pub input_values: Vec<usize>,
    pub output_values: Vec<usize>,
    /// Capacity in lines of each intermediate block.
    pub block_lines: Vec<usize>,
    /// Unique per compiled plan (never 0): marks the states fitted to it (`fit_state`).
    pub(super) id: u64,
}

/// Source of `SegmentPlan::id`.
static NEXT_PLAN_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn bad(segment: usize, node: usize, what: impl Into<String>) -> RuntimeError {
    RuntimeError::InvalidGraph { segment, node, what: what.into() }
}

impl SegmentPlan {
    /// Compiles a graph returned by the loader. `n_inputs`/`n_outputs` are the segment's
    /// slot counts: external ids `0..n_inputs` are inputs, the next `n_outputs` outputs.
    pub fn compile(
        segment: usize,
        g: &XnnGraph,
        n_inputs: usize,
        n_outputs: usize,
    ) -> Result<SegmentPlan, RuntimeError> {
        let ValuePlans { ids, mut values, input_values, output_values, consts } =
            plan_values(segment, g, n_inputs, n_outputs)?;
        let nodes = plan_nodes(segment, g, &ids, &values, &consts, &output_values)?;
        let groups = super::fuse::groups(&nodes, &values);
        let block_lines = assign_blocks(&nodes, &groups, &mut values);
        let id = NEXT_PLAN_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(SegmentPlan { segment, values, nodes, groups, consts, input_values, output_values, block_lines, id })
    }
}

/// The value table of a segment: every value planned, bound to its external slot or constant.
struct ValuePlans {
    /// id_out -> value index.
    ids: IdMap,
    values: Vec<ValuePlan>,
    input_values: Vec<usize>,
    output_values: Vec<usize>,
    consts: Vec<Owned>,
}

/// Plans every value: type, dims, quantization, and where it lives (segment input or output,
/// constant, or intermediate); every segment input and output must have its value.
fn plan_values(segment: usize, g: &XnnGraph, n_inputs: usize, n_outputs: usize) -> Result<ValuePlans, RuntimeError> {
    let unsupported = |what: String| RuntimeError::Unsupported { segment, what };
    let mut ids = IdMap::new(g.values.iter().map(|v| v.id_out));
    let mut values = Vec::with_capacity(g.values.len());
    let mut input_values = vec![usize::MAX; n_inputs];
    let mut output_values = vec![usize::MAX; n_outputs];
    let mut consts = Vec::new();
    for (vi, v) in g.values.iter().enumerate() {
        if !ids.insert(v.id_out, vi) {
            return Err(bad(segment, vi, format!("value id {} defined twice", v.id_out)));
        }
        let dt =
            Dt::of(v.datatype).ok_or_else(|| unsupported(format!("value {vi}: datatype {}", v.datatype.name())))?;
        if v.dims.len() > 6 {
            return Err(bad(segment, vi, format!("value of rank {} above 6", v.dims.len())));
        }
        let dims: Vec<usize> = v.dims.iter().map(|&d| d as usize).collect();
        let max_numel = dims
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .filter(|&n| n <= reference::graph::MAX_NUMEL)
            .ok_or_else(|| bad(segment, vi, format!("value dims {dims:?} too large")))?;
        let quant = match &v.quant {
            None => None,
            Some(QuantParams::PerTensor { scale, zero_point }) => {
                if !(scale.is_finite() && *scale > 0.0) {
                    return Err(bad(segment, vi, format!("quantization scale {scale}")));
                }
                Some(Quant { scale: *scale, zero_point: *zero_point })
            }
            Some(other) => return Err(unsupported(format!("value {vi}: quantization {other:?}"))),
        };
        if dt == Dt::I8 && quant.is_none() && v.datatype == XnnDatatype::Qint8 {
            return Err(bad(segment, vi, "qint8 value without quantization parameters"));
        }
        let ext = v.external_id != INVALID_VALUE_ID;
        let loc = if ext && v.flags & VALUE_FLAG_EXTERNAL_INPUT != 0 {
            let k = v.external_id as usize;
            if k >= n_inputs || input_values[k] != usize::MAX {
                return Err(bad(segment, vi, format!("external input id {k} not bound to a segment input")));
            }
            input_values[k] = vi;
            Loc::Input(k)
        } else if ext && v.flags & VALUE_FLAG_EXTERNAL_OUTPUT != 0 {
            let k = (v.external_id as usize).checked_sub(n_inputs).filter(|&k| k < n_outputs);
            let k = k.ok_or_else(|| bad(segment, vi, format!("external output id {} out of range", v.external_id)))?;
            if output_values[k] != usize::MAX {
                return Err(bad(segment, vi, format!("external output id {} bound twice", v.external_id)));
            }
            output_values[k] = vi;
            Loc::Output(k)
        } else if v.constant_buffer_idx != 0 {
            consts.push(decode_constant(segment, vi, g, v.constant_buffer_idx as usize, dt, max_numel)?);
            Loc::Const(consts.len() - 1)
        } else {
            Loc::Unused
        };
        values.push(ValuePlan { dt, dims, max_numel, quant, loc });
    }
    if let Some(k) = input_values.iter().position(|&v| v == usize::MAX) {
        return Err(RuntimeError::InvalidProgram(format!("segment {segment}: input {k} has no external value")));
    }
    if let Some(k) = output_values.iter().position(|&v| v == usize::MAX) {
        return Err(RuntimeError::InvalidProgram(format!("segment {segment}: output {k} has no external value")));
    }

    Ok(ValuePlans { ids, values, input_values, output_values, consts })
}

/// Plans every node in order: its kernel, operands, fused output range and packed filter;
/// each reads only values defined before it, writes one value once, and every segment
/// output is written.
fn plan_nodes(
    segment: usize,
    g: &XnnGraph,
    ids: &IdMap,
    values: &[ValuePlan],
    consts: &[Owned],
    output_values: &[usize],
) -> Result<Vec<NodePlan>, RuntimeError> {
    let id = |node: usize, id: u32| -> Result<usize, RuntimeError> {
        ids.get(id).ok_or_else(|| bad(segment, node, format!("unknown value id {id}")))
    };
    let mut nodes = Vec::with_capacity(g.nodes.len());
    let mut defined: Vec<bool> = values.iter().map(|v| matches!(v.loc, Loc::Input(_) | Loc::Const(_))).collect();
    for (ni, n) in g.nodes.iter().enumerate() {
        let kernel = kernel_of(segment, ni, n)?;
        let inputs = n.kind.inputs().iter().map(|&i| id(ni, i)).collect::<Result<Vec<_>, _>>()?;
        let output = id(ni, n.kind.output().unwrap_or(INVALID_VALUE_ID))?;
        if let Some(&u) = inputs.iter().find(|&&i| !defined[i]) {
            return Err(bad(segment, ni, format!("reads value {u} before any node defines it")));
        }
        match values[output].loc {
            Loc::Input(_) | Loc::Const(_) => {
                return Err(bad(segment, ni, "writes an external input or a constant"));
            }
            _ if defined[output] => return Err(bad(segment, ni, "writes a value defined earlier")),
            _ => {}
        }
        defined[output] = true;
        let act = n.output_min_max.filter(|(lo, hi)| lo.is_finite() || hi.is_finite());
        if let Some((lo, hi)) = act {
            if lo.is_nan() || hi.is_nan() || lo > hi {
                return Err(bad(segment, ni, format!("output range [{lo}, {hi}]")));
            }
        }
        check_types(segment, ni, &kernel, &inputs, output, values)?;
        let filter = inputs.get(1).map(|&w| values[w].loc);
        let packed = match (&kernel, filter) {
            (Kernel::Conv(cg), Some(Loc::Const(k))) if !cg.depthwise && values[output].dt != Dt::I8 => {
                let w = consts.get(k).map(|c| kernels::conv::float_cow(c.view()));
                // Only a filter of the geometry's size: its loops are then bounded by
                // the filter (a damaged geometry is refused when the node runs).
                let w = w.and_then(Result::ok).filter(|w| Some(w.len()) == cg.filter_len());
                w.map(|w| kernels::conv::pack_filter(cg, &w))
            }
            (Kernel::FullyConnected { transpose_weights }, Some(Loc::Const(k))) if values[output].dt != Dt::I8 => {
                consts
                    .get(k)
                    .and_then(|c| kernels::linear::pack_weights(c.view(), &values[inputs[1]].dims, *transpose_weights))
            }
            _ => None,
        };
        nodes.push(NodePlan { index: ni, kernel, inputs, output, act, packed });
    }
    if let Some(k) = output_values.iter().position(|&v| !defined[v]) {
        return Err(RuntimeError::InvalidProgram(format!("segment {segment}: output {k} is never written")));
    }

    Ok(nodes)
}

/// The kernel of node `ni`, with its parameters checked (every other node type is refused).
fn kernel_of(segment: usize, ni: usize, n: &XNode) -> Result<Kernel, RuntimeError> {
    Ok(match &n.kind {
        XNodeKind::Add { .. } => Kernel::Binary(BinOp::Add),
        XNodeKind::Subtract { .. } => Kernel::Binary(BinOp::Sub),
        XNodeKind::Multiply { .. } => Kernel::Binary(BinOp::Mul),
        XNodeKind::Div { .. } => Kernel::Binary(BinOp::Div),
        XNodeKind::Square { .. } => Kernel::Unary(Unary::Square),
        XNodeKind::ReciprocalSquareRoot { .. } => Kernel::Unary(Unary::Rsqrt),
        // XNNClamp's bounds are the node's output_min/max.
        XNodeKind::Clamp { .. } | XNodeKind::Copy { .. } => Kernel::Unary(Unary::Copy),
        XNodeKind::Convert { .. } => Kernel::Convert,
        XNodeKind::GlobalAvgPooling2d { flags, .. } => Kernel::Gap { keep: flags & FLAG_KEEP_DIMS != 0 },
        XNodeKind::StaticMean { reduction_axes, flags, .. } => {
            let axes: Vec<usize> = reduction_axes.iter().map(|&a| a as usize).collect();
            if axes.is_empty() || axes.windows(2).any(|w| w[0] >= w[1]) {
                return Err(bad(segment, ni, format!("reduction axes {axes:?} must be sorted, unique, non-empty")));
            }
            Kernel::Mean { axes, keep: flags & FLAG_KEEP_DIMS != 0 }
        }
        XNodeKind::StaticTranspose { perm, .. } => {
            Kernel::Transpose { perm: perm.iter().map(|&p| p as usize).collect() }
        }
        XNodeKind::StaticReshape { new_shape, .. } => {
            Kernel::Reshape { new_shape: new_shape.iter().map(|&p| p as usize).collect() }
        }
        XNodeKind::Conv2d(c) | XNodeKind::DepthwiseConv2d(c) => Kernel::Conv(ConvGeom {
            padding: [c.padding_top, c.padding_right, c.padding_bottom, c.padding_left].map(|p| p as usize),
            kernel: [c.kernel_height as usize, c.kernel_width as usize],
            stride: [c.subsampling_height as usize, c.subsampling_width as usize],
            dilation: [c.dilation_height as usize, c.dilation_width as usize],
            groups: c.groups as usize,
            group_in: c.group_input_channels as usize,
            group_out: c.group_output_channels as usize,
            depthwise: matches!(n.kind, XNodeKind::DepthwiseConv2d(_)),
        }),
        XNodeKind::FullyConnected { flags, .. } => {
            Kernel::FullyConnected { transpose_weights: flags & FLAG_TRANSPOSE_WEIGHTS != 0 }
        }
        other => return Err(RuntimeError::UnsupportedNode { segment, node: ni, node_type: other.type_name() }),
    })
}

/// Liveness-based block assignment for intermediates; returns each block's size in lines.
/// A value a group reads from outside the group stays live until the group's last node, so a
/// fused group never writes its output over an operand it still reads, and the same blocks
/// serve the unfused run (where values inside a group die as their last reader runs). So does
/// a `Norm`'s square-mean result, which its chain reads while writing its output.
fn assign_blocks(nodes: &[NodePlan], groups: &[Group], values: &mut [ValuePlan]) -> Vec<usize> {
    let mut last_use = vec![0usize; values.len()];
    for (i, n) in nodes.iter().enumerate() {
        for &v in &n.inputs {
            last_use[v] = i;
        }
        last_use[n.output] = last_use[n.output].max(i);
    }
    for g in groups {
        let (first, last) = g.span();
        if let Some(v) = g.norm_value(nodes) {
            last_use[v] = last_use[v].max(last);
        }
        for n in &nodes[first..=last] {
            for &v in &n.inputs {
                if !nodes[first..=last].iter().any(|m| m.output == v) {
                    last_use[v] = last_use[v].max(last);
                }
            }
        }
    }
    let mut dies_at: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for n in nodes {
        if !dies_at[last_use[n.output]].contains(&n.output) {
            dies_at[last_use[n.output]].push(n.output);
        }
    }
    let mut block_lines: Vec<usize> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let o = n.output;
        if values[o].loc == Loc::Unused {
            let need = (values[o].max_numel * values[o].dt.size()).div_ceil(64).max(1);
            // Best fit among free blocks; otherwise grow the largest free one or add a block.
            let pick = free
                .iter()
                .enumerate()
                .filter(|(_, &b)| block_lines[b] >= need)
                .min_by_key(|(_, &b)| block_lines[b])
                .or_else(|| free.iter().enumerate().max_by_key(|(_, &b)| block_lines[b]))
                .map(|(k, _)| k);
            let b = match pick {
                Some(k) => free.swap_remove(k),
                None => {
                    block_lines.push(0);
                    block_lines.len() - 1
                }
            };
            block_lines[b] = block_lines[b].max(need);
            values[o].loc = Loc::Block(b);
        }
        for &v in &dies_at[i] {
            if let Loc::Block(b) = values[v].loc {
                if !free.contains(&b) {
                    free.push(b);
                }
            }
        }
    }
    block_lines
}

fn decode_constant(
    segment: usize,
    vi: usize,
    g: &XnnGraph,
    idx: usize,
    dt: Dt,
    n: usize,
) -> Result<Owned, RuntimeError> {
    let cd = g.constant_data.get(idx).ok_or_else(|| bad(segment, vi, format!("constant buffer {idx} missing")))?;
    if cd.named_key.is_some() || cd.offset == u64::MAX {
        return Err(RuntimeError::Unsupported { segment, what: format!("value {vi}: named constant data") });
    }
    let bytes = n * dt.size();
    let start = usize::try_from(cd.offset).ok();
    let range = start.and_then(|s| Some(s..s.checked_add(bytes)?)).filter(|r| r.end <= g.constant_bytes.len());
    let range = range.filter(|_| cd.size as usize >= bytes);
    let r = range.ok_or_else(|| bad(segment, vi, format!("constant of {bytes} bytes outside the constant region")))?;
    let b = &g.constant_bytes[r];
    Ok(match dt {
        Dt::F32 => Owned::F32(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
        Dt::I32 => Owned::I32(b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
        Dt::F16 => Owned::F16(b.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect()),
        Dt::Bf16 => Owned::Bf16(b.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]])).collect()),
        Dt::I8 => Owned::I8(b.iter().map(|&v| v as i8).collect()),
    })
}

/// Datatype combinations each kernel runs (checked at load time, like XNNPACK's define step).
fn check_types(
    segment: usize,
    ni: usize,
    k: &Kernel,
    ins: &[usize],
    out: usize,
    v: &[ValuePlan],
) -> Result<(), RuntimeError> {
    let dt = |i: usize| v[i].dt;
    let float = |d: Dt| matches!(d, Dt::F32 | Dt::F16 | Dt::Bf16);
    let o = dt(out);
    let ok = match k {
        Kernel::Binary(op) => {
            ins.len() == 2 && (float(o) || (o == Dt::I8 && *op != BinOp::Div)) && dt(ins[0]) == o && dt(ins[1]) == o
        }
        // Copy and Clamp also on int8 (a requantizing clamp); the other unary ops on floats.
        Kernel::Unary(u) => ins.len() == 1 && (float(o) || (o == Dt::I8 && *u == Unary::Copy)) && dt(ins[0]) == o,
        Kernel::Convert => {
            ins.len() == 1
                && matches!(
                    (dt(ins[0]), o),
                    (Dt::F32, Dt::F16 | Dt::Bf16 | Dt::I8 | Dt::F32) | (Dt::F16 | Dt::Bf16 | Dt::I8, Dt::F32)
                )
        }
        Kernel::Gap { .. } | Kernel::Mean { .. } => {
            ins.len() == 1 && (float(o) && float(dt(ins[0])) || (o == Dt::I8 && dt(ins[0]) == Dt::I8))
        }
        Kernel::Transpose { .. } | Kernel::Reshape { .. } => ins.len() == 1 && dt(ins[0]) == o,
        // qs8 conv: int8 input and filter, optional int32 bias (scale x_scale * w_scale).
        Kernel::Conv(_) if o == Dt::I8 => {
            (2..=3).contains(&ins.len())
                && dt(ins[0]) == Dt::I8
                && dt(ins[1]) == Dt::I8
                && ins.get(2).is_none_or(|&b| dt(b) == Dt::I32)
        }
        Kernel::Conv(_) | Kernel::FullyConnected { .. } => {
            (2..=3).contains(&ins.len()) && float(o) && ins.iter().all(|&i| float(dt(i))) && dt(ins[0]) == o
        }
    };
    if !ok {
        let types: Vec<Dt> = ins.iter().map(|&i| dt(i)).collect();
        return Err(RuntimeError::Unsupported { segment, what: format!("node {ni}: {k:?} from {types:?} to {o:?}") });
    }
    let needs_q = |i: usize| v[i].dt == Dt::I8 && v[i].quant.is_none();
    if ins.iter().chain([&out]).any(|&i| needs_q(i)) && !matches!(k, Kernel::Transpose { .. } | Kernel::Reshape { .. })
    {
        return Err(bad(segment, ni, "int8 value without per-tensor quantization"));
    }
    // A qs8 transpose or reshape moves bytes: XNNPACK refuses one whose output scale or zero
    // point differs from its input's, since that would be a requantization.
    if matches!(k, Kernel::Transpose { .. } | Kernel::Reshape { .. }) && o == Dt::I8 && v[ins[0]].quant != v[out].quant
    {
        return Err(bad(
            segment,
            ni,
            format!(
                "{k:?}: int8 output quantization {:?} differs from the input's {:?}",
                v[out].quant, v[ins[0]].quant
            ),
        ));
    }
    Ok(())
}

pub(super) fn checked_numel(s: &[usize]) -> Option<usize> {
    s.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// Output shape of a node for concrete input shapes, written into `s` (cleared first; the
/// value's shape buffer of the previous run, so no allocation per node).
pub(super) fn infer_shape(
    k: &Kernel,
    shapes: &[&[usize]],
    w_dims: Option<&[usize]>,
    in_numel: usize,
    s: &mut Vec<usize>,
) -> Result<(), String> {
    let x = shapes[0];
    s.clear();
    match k {
        Kernel::Binary(_) => {
            let (a, b) = (shapes[0], shapes[1]);
            for d in broadcast_dims(a, b) {
                s.push(d.ok_or_else(|| format!("shapes {a:?} and {b:?} do not broadcast"))?);
            }
        }
        Kernel::Unary(_) | Kernel::Convert => s.extend_from_slice(x),
        Kernel::Gap { keep } => {
            if x.len() != 4 {
                return Err(format!("global average pooling of rank {}", x.len()));
            }
            if *keep {
                s.extend_from_slice(&[x[0], 1, 1, x[3]]);
            } else {
                s.extend_from_slice(&[x[0], x[3]]);
            }
        }
        Kernel::Mean { axes, keep } => {
            if axes.iter().any(|&a| a >= x.len()) {
                return Err(format!("reduction axes {axes:?} out of range for rank {}", x.len()));
            }
            for (i, &d) in x.iter().enumerate() {
                if !axes.contains(&i) {
                    s.push(d);
                } else if *keep {
                    s.push(1);
                }
            }
        }
        Kernel::Transpose { perm } => {
            if perm.len() != x.len() {
                return Err(format!("permutation {perm:?} for rank {}", x.len()));
            }
            for &p in perm {
                s.push(x.get(p).copied().ok_or_else(|| format!("bad permutation {perm:?}"))?);
            }
        }
        Kernel::Reshape { new_shape } => {
            // XNNPACK: a 0 entry is inferred from the element count.
            let known = new_shape.iter().filter(|&&d| d != 0).try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or(0);
            let zeros = new_shape.iter().filter(|&&d| d == 0).count();
            s.extend_from_slice(new_shape);
            if zeros == 1 && known > 0 && in_numel.is_multiple_of(known) {
                for d in s.iter_mut().filter(|d| **d == 0) {
                    *d = in_numel / known;
                }
            }
            if checked_numel(s) != Some(in_numel) || zeros > 1 {
                return Err(format!("cannot reshape {x:?} to {new_shape:?}"));
            }
        }
        Kernel::Conv(g) => s.extend_from_slice(&g.output_shape(x)?),
        Kernel::FullyConnected { transpose_weights } => {
            let w = w_dims.ok_or("fully connected without filter")?;
            if w.len() != 2 || x.is_empty() {
                return Err(format!("fully connected input {x:?} filter {w:?}"));
            }
            let (n, k) = if *transpose_weights { (w[1], w[0]) } else { (w[0], w[1]) };
            if x[x.len() - 1] != k {
                return Err(format!("fully connected input {x:?} with filter {w:?}"));
            }
            s.extend_from_slice(&x[..x.len() - 1]);
            s.push(n);
        }
    }
    Ok(())
}
