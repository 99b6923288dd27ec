//! From our loaded graph to an XNNPACK runtime: the job ExecuTorch's
//! `backends/xnnpack/runtime/XNNCompiler.cpp` does for a payload.
//!
//! Input is what `delegate::serialize::load` returned for the payload bytes (never the
//! lowering's in-memory graph), so what reaches XNNPACK is what a real runtime would read.
//! Values are defined in payload order with their serialized datatype, dims, external id and
//! flags (quantized ones with their per-tensor or per-channel parameters, constants with the
//! payload's constant bytes), and each serialized id is remapped to the id XNNPACK returns, as
//! `defineTensor` does. Nodes follow `getDefineNodeFunc`: binary ops through `xnn_define_binary`
//! with the node's output range, unary ones through `xnn_define_unary`, GAP, transpose,
//! reshape, convolutions, fully connected, convert and copy through their own calls. The
//! change's `XNNStaticMean` is `xnn_define_static_reduce` with the mean operator, the
//! serialized axes and flags (`XNN_FLAG_KEEP_DIMS`) as they are; a bf16 mean gets fp32 twins of
//! its input and output and two converts around an fp32 mean, as the merged runtime's
//! `defineGenericReduceNode` does (XNNPACK has no bf16 reduction), and a bf16 fully connected
//! an fp32 output and a convert, as `defineFullyConnectedNode` does.
//!
//! Anything XNNPACK refuses, or that this compiler cannot hand it, is a [`Refusal`] naming the
//! stage, node, datatypes and status: the harness counts it as a skip with that reason.

use crate::ffi::{self, Buffer, Datatype, RawStatus, Static, Subgraph};
use crate::{status_name, ThreadPool, Xnnpack};
use delegate::runtime::kernels::View;
use delegate::runtime::plan::{Owned, SegmentOutput};
use delegate::xnn::{QuantParams, XNodeKind, XValue, XnnDatatype, XnnGraph, INVALID_VALUE_ID};
use half::{bf16, f16};
use std::collections::HashMap;

/// `XNN_FLAG_DONT_SPIN_WORKERS`: a runtime-creation flag; the pool's workers yield to the system
/// after each inference instead of spinning.
pub const FLAG_DONT_SPIN_WORKERS: u32 = 0x10;
/// `XNN_VALUE_FLAG_EXTERNAL_INPUT` / `_OUTPUT`.
const EXTERNAL_INPUT: u32 = 1;
const EXTERNAL_OUTPUT: u32 = 2;

/// Where XNNPACK (or this compiler, before XNNPACK saw it) refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Defining a value or a node (`xnn_define_*`).
    Define,
    /// `xnn_create_runtime_v2`.
    Create,
    /// `xnn_reshape_external_value` / `xnn_reshape_runtime`.
    Reshape,
    /// `xnn_setup_runtime_v2`.
    Setup,
    /// `xnn_invoke_runtime`.
    Invoke,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Define => "define",
            Stage::Create => "create",
            Stage::Reshape => "reshape",
            Stage::Setup => "setup",
            Stage::Invoke => "invoke",
        }
    }
}

/// XNNPACK cannot run a payload: the typed `Unsupported { node, datatype, status }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub stage: Stage,
    /// The node (index in the payload, schema type name), when one is at fault.
    pub node: Option<(usize, &'static str)>,
    /// The datatypes involved (`xnn_datatype_bf16 -> xnn_datatype_fp32`), when known.
    pub datatype: Option<String>,
    /// XNNPACK's status; `None` when this compiler refused before calling XNNPACK.
    pub status: Option<RawStatus>,
    pub reason: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "xnnpack refuses at {}", self.stage.name())?;
        if let Some((i, t)) = self.node {
            write!(f, " node {i} ({t})")?;
        }
        if let Some(d) = &self.datatype {
            write!(f, " [{d}]")?;
        }
        match self.status {
            Some(s) => write!(f, ": status {s} ({})", status_name(s))?,
            None => write!(f, ": not handed to XNNPACK")?,
        }
        if !self.reason.is_empty() {
            write!(f, ": {}", self.reason)?;
        }
        Ok(())
    }
}

impl std::error::Error for Refusal {}

/// The library datatype of a serialized one (the schema's enum is ExecuTorch's, not XNNPACK's:
/// `getDataType` maps them by name). Only the datatypes the probe checks; quint8, which our
/// lowering never emits, is left out with them.
pub fn datatype(d: XnnDatatype) -> Option<Datatype> {
    Some(match d {
        XnnDatatype::Fp32 => Datatype::Fp32,
        XnnDatatype::Fp16 => Datatype::Fp16,
        XnnDatatype::Bf16 => Datatype::Bf16,
        XnnDatatype::Qint8 => Datatype::Qint8,
        XnnDatatype::Qint32 => Datatype::Qint32,
        XnnDatatype::Qcint8 => Datatype::Qcint8,
        XnnDatatype::Qcint32 => Datatype::Qcint32,
        _ => return None,
    })
}

/// A compiled payload: an XNNPACK runtime and the datatypes of its arguments. Argument `k` is
/// external id `k`: the payload's inputs first, then its outputs (ExecuTorch's order).
pub struct Segment {
    runtime: ffi::Runtime,
    inputs: Vec<Datatype>,
    outputs: Vec<Datatype>,
    /// Nodes in the payload (for what a refusal at run time names).
    nodes: usize,
}

/// What the compiler builds up while defining values and nodes.
struct Builder<'g> {
    g: &'g XnnGraph,
    sub: Subgraph,
    /// Serialized id -> XNNPACK id (and the serialized value).
    ids: HashMap<u32, (u32, &'g XValue)>,
    codes: crate::Codes,
}

fn refuse(
    stage: Stage,
    node: Option<(usize, &'static str)>,
    status: Option<RawStatus>,
    reason: impl Into<String>,
) -> Refusal {
    Refusal { stage, node, datatype: None, status, reason: reason.into() }
}

impl Builder<'_> {
    fn define_value(&mut self, vi: usize, v: &XValue) -> Result<u32, Refusal> {
        let what = |reason: String| Refusal {
            stage: Stage::Define,
            node: None,
            datatype: Some(v.datatype.name().to_string()),
            status: None,
            reason: format!("value {vi} (id {}): {reason}", v.id_out),
        };
        let dt = datatype(v.datatype).ok_or_else(|| what("no XNNPACK datatype for it here".into()))?;
        let dims: Vec<usize> = v.dims.iter().map(|&d| d as usize).collect();
        let data = match v.constant_buffer_idx {
            0 => None,
            k => Some(Static(Buffer::from_bytes(self.constant(k).map_err(what)?))),
        };
        let status = |s: RawStatus| Refusal {
            stage: Stage::Define,
            node: None,
            datatype: Some(dt.name().to_string()),
            status: Some(s),
            reason: format!("value {vi} (id {}, dims {dims:?})", v.id_out),
        };
        let (ext, flags) = (v.external_id, v.flags);
        match &v.quant {
            None => self.sub.tensor(dt, &dims, data, ext, flags).map_err(status),
            Some(QuantParams::PerTensor { scale, zero_point }) => {
                self.sub.quantized_tensor(dt, *zero_point, *scale, &dims, data, ext, flags).map_err(status)
            }
            Some(QuantParams::PerChannel { scale, channel_dim, scale_buffer_idx, num_scales }) => {
                let scales = match *scale_buffer_idx {
                    0 => scale.clone(),
                    k => {
                        let bytes = self.constant(k).map_err(what)?;
                        let s: Vec<f32> =
                            bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                        if s.len() < *num_scales as usize {
                            return Err(what(format!("{} scales in buffer {k}, {num_scales} declared", s.len())));
                        }
                        s
                    }
                };
                let cd = usize::try_from(*channel_dim).map_err(|_| what(format!("channel_dim {channel_dim}")))?;
                if dims.get(cd).is_none_or(|&c| scales.len() < c) {
                    return Err(what(format!("{} scales for channel dim {cd} of {dims:?}", scales.len())));
                }
                self.sub.channelwise_tensor(dt, scales, cd, &dims, data, ext, flags).map_err(status)
            }
            Some(q @ (QuantParams::PerTokenDynamic { .. } | QuantParams::PerChannelGroup { .. })) => {
                Err(what(format!("quantization parameters {}", q.type_name())))
            }
        }
    }

    /// The bytes of constant buffer `k`, from the payload's constant region.
    fn constant(&self, k: u32) -> Result<&[u8], String> {
        let cd = self.g.constant_data.get(k as usize).ok_or_else(|| format!("constant buffer {k} missing"))?;
        if cd.named_key.is_some() || cd.offset == u64::MAX {
            return Err(format!("constant buffer {k} is named data (not in the payload)"));
        }
        let start = usize::try_from(cd.offset).ok();
        let end = start.and_then(|s| s.checked_add(usize::try_from(cd.size).ok()?));
        match (start, end) {
            (Some(s), Some(e)) if e <= self.g.constant_bytes.len() => Ok(&self.g.constant_bytes[s..e]),
            _ => Err(format!("constant buffer {k} lies outside the constant region")),
        }
    }

    /// The XNNPACK id of serialized id `id` (`XNN_INVALID_VALUE_ID` stays).
    fn id(&self, node: (usize, &'static str), id: u32) -> Result<u32, Refusal> {
        if id == INVALID_VALUE_ID {
            return Ok(INVALID_VALUE_ID);
        }
        self.ids
            .get(&id)
            .map(|&(x, _)| x)
            .ok_or_else(|| refuse(Stage::Define, Some(node), None, format!("unknown value id {id}")))
    }

    fn value(&self, id: u32) -> Option<&XValue> {
        self.ids.get(&id).map(|&(_, v)| v)
    }

    fn datatypes(&self, ins: &[u32], out: u32) -> String {
        let name = |id: u32| self.value(id).map_or("?", |v| v.datatype.name());
        let ins: Vec<&str> = ins.iter().filter(|&&i| i != INVALID_VALUE_ID).map(|&i| name(i)).collect();
        format!("{} -> {}", ins.join(", "), name(out))
    }

    /// An fp32 internal value with the dims of serialized value `id`.
    fn fp32_twin(&mut self, node: (usize, &'static str), id: u32) -> Result<u32, Refusal> {
        let dims: Vec<usize> = self.value(id).map(|v| v.dims.iter().map(|&d| d as usize).collect()).unwrap_or_default();
        self.sub
            .tensor(Datatype::Fp32, &dims, None, INVALID_VALUE_ID, 0)
            .map_err(|s| refuse(Stage::Define, Some(node), Some(s), "the fp32 twin of a bf16 value"))
    }

    fn is_bf16(&self, id: u32) -> bool {
        self.value(id).is_some_and(|v| v.datatype == XnnDatatype::Bf16)
    }

    fn define_node(&mut self, ni: usize, n: &delegate::xnn::XNode) -> Result<(), Refusal> {
        let at = (ni, n.kind.type_name());
        let (min, max) = n.output_min_max.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        let codes = self.codes;
        // The datatypes are filled in by `compile` on the way out (only refusals pay for them).
        let failed = |s: RawStatus| Refusal {
            stage: Stage::Define,
            node: Some(at),
            datatype: None,
            status: Some(s),
            reason: String::new(),
        };
        let us = |b: &Self, id: u32| b.id(at, id);
        use XNodeKind::*;
        match &n.kind {
            Add { input1_id, input2_id, output_id, flags }
            | Subtract { input1_id, input2_id, output_id, flags }
            | Multiply { input1_id, input2_id, output_id, flags }
            | Div { input1_id, input2_id, output_id, flags } => {
                let op = match &n.kind {
                    Add { .. } => codes.binary_add,
                    Subtract { .. } => codes.binary_subtract,
                    Multiply { .. } => codes.binary_multiply,
                    _ => codes.binary_divide,
                };
                let ids = [us(self, *input1_id)?, us(self, *input2_id)?, us(self, *output_id)?];
                self.sub.binary(op, min as f64, max as f64, ids, *flags).map_err(failed)
            }
            Clamp { input_id, output_id, flags } => {
                let (i, o) = (us(self, *input_id)?, us(self, *output_id)?);
                self.sub.unary(codes.unary_clamp, Some((min, max)), i, o, *flags).map_err(failed)
            }
            Square { input_id, output_id, flags } | ReciprocalSquareRoot { input_id, output_id, flags } => {
                let op = if matches!(n.kind, Square { .. }) { codes.unary_square } else { codes.unary_rsqrt };
                let (i, o) = (us(self, *input_id)?, us(self, *output_id)?);
                self.sub.unary(op, None, i, o, *flags).map_err(failed)
            }
            Convert { input_id, output_id, flags } => {
                let (i, o) = (us(self, *input_id)?, us(self, *output_id)?);
                self.sub.convert(i, o, *flags).map_err(failed)
            }
            Copy { input_id, output_id, flags } => {
                let (i, o) = (us(self, *input_id)?, us(self, *output_id)?);
                self.sub.copy(i, o, *flags).map_err(failed)
            }
            GlobalAvgPooling2d { input_id, output_id, flags } => {
                let (i, o) = (us(self, *input_id)?, us(self, *output_id)?);
                self.sub.global_average_pooling_2d(min, max, i, o, *flags).map_err(failed)
            }
            StaticTranspose { perm, input_id, output_id, flags } => {
                let perm: Vec<usize> = perm.iter().map(|&p| p as usize).collect();
                let (i, o) = (us(self, *input_id)?, us(self, *output_id)?);
                self.sub.static_transpose(&perm, i, o, *flags).map_err(failed)
            }
            StaticReshape { new_shape, input_id, output_id, flags } => {
                let shape: Vec<usize> = new_shape.iter().map(|&p| p as usize).collect();
                let (i, o) = (us(self, *input_id)?, us(self, *output_id)?);
                self.sub.static_reshape(&shape, i, o, *flags).map_err(failed)
            }
            StaticMean { reduction_axes, input_id, output_id, flags } => {
                let axes: Vec<usize> = reduction_axes.iter().map(|&a| a as usize).collect();
                let (i, o) = (us(self, *input_id)?, us(self, *output_id)?);
                if self.is_bf16(*input_id) && self.is_bf16(*output_id) {
                    // The merged runtime's bf16 scheme: convert, fp32 mean, convert back.
                    let (ti, to) = (self.fp32_twin(at, *input_id)?, self.fp32_twin(at, *output_id)?);
                    self.sub.convert(i, ti, 0).map_err(&failed)?;
                    self.sub.static_reduce(codes.reduce_mean, &axes, ti, to, *flags).map_err(&failed)?;
                    self.sub.convert(to, o, 0).map_err(failed)
                } else {
                    self.sub.static_reduce(codes.reduce_mean, &axes, i, o, *flags).map_err(failed)
                }
            }
            Conv2d(c) | DepthwiseConv2d(c) => {
                let ids =
                    [us(self, c.input1_id)?, us(self, c.filter_id)?, us(self, c.bias_id)?, us(self, c.output_id)?];
                let geom = |last: u32| {
                    [
                        c.padding_top,
                        c.padding_right,
                        c.padding_bottom,
                        c.padding_left,
                        c.kernel_height,
                        c.kernel_width,
                        c.subsampling_height,
                        c.subsampling_width,
                        c.dilation_height,
                        c.dilation_width,
                        last,
                    ]
                };
                if matches!(n.kind, Conv2d(_)) {
                    let (gi, go) = (c.group_input_channels as usize, c.group_output_channels as usize);
                    self.sub.convolution_2d(geom(c.groups), gi, go, min, max, ids, c.flags).map_err(failed)
                } else {
                    // ExecuTorch: depth multiplier = group outputs / group inputs, input channels =
                    // groups (a zero divisor would be a division by zero there).
                    if c.group_input_channels == 0 {
                        return Err(refuse(
                            Stage::Define,
                            Some(at),
                            None,
                            "depthwise conv with 0 group input channels",
                        ));
                    }
                    let dm = c.group_output_channels / c.group_input_channels;
                    self.sub
                        .depthwise_convolution_2d(geom(dm), c.groups as usize, min, max, ids, c.flags)
                        .map_err(failed)
                }
            }
            FullyConnected { input1_id, filter_id, bias_id, output_id, flags } => {
                let (i, w, b, o) =
                    (us(self, *input1_id)?, us(self, *filter_id)?, us(self, *bias_id)?, us(self, *output_id)?);
                if self.is_bf16(*input1_id) && self.is_bf16(*filter_id) && self.is_bf16(*output_id) {
                    // XNNPACK's bf16 fully connected writes fp32: ExecuTorch converts it back.
                    let t = self.fp32_twin(at, *output_id)?;
                    self.sub.fully_connected(min, max, [i, w, b, t], *flags).map_err(&failed)?;
                    self.sub.convert(t, o, 0).map_err(failed)
                } else {
                    self.sub.fully_connected(min, max, [i, w, b, o], *flags).map_err(failed)
                }
            }
            // Every other union member: ExecuTorch's compiler defines many more, this one only
            // what our lowering emits.
            _ => Err(refuse(Stage::Define, Some(at), None, "node type not handled by this compiler")),
        }
    }
}

/// The element bytes of a view, native order (what XNNPACK reads).
fn view_bytes(v: &View, out: &mut [u8]) {
    fn fill<T: Copy, const N: usize>(src: &[T], out: &mut [u8], enc: impl Fn(T) -> [u8; N]) {
        for (d, &x) in out.chunks_exact_mut(N).zip(src) {
            d.copy_from_slice(&enc(x));
        }
    }
    match v {
        View::F32(s) => fill(s, out, f32::to_ne_bytes),
        View::F16(s) => fill(s, out, |x: f16| x.to_bits().to_ne_bytes()),
        View::Bf16(s) => fill(s, out, |x: bf16| x.to_bits().to_ne_bytes()),
        View::I8(s) => fill(s, out, |x: i8| x.to_ne_bytes()),
        View::I32(s) => fill(s, out, i32::to_ne_bytes),
    }
}

fn view_datatype_ok(v: &View, dt: Datatype) -> bool {
    matches!(
        (v, dt),
        (View::F32(_), Datatype::Fp32)
            | (View::F16(_), Datatype::Fp16)
            | (View::Bf16(_), Datatype::Bf16)
            | (View::I8(_), Datatype::Qint8 | Datatype::Qcint8)
            | (View::I32(_), Datatype::Qint32 | Datatype::Qcint32)
    )
}

/// Overwrites `o` with `b`'s values when it holds `dt`'s type and exactly their count.
fn fill(o: &mut Owned, dt: Datatype, b: &[u8]) -> bool {
    match (o, dt) {
        (Owned::F32(v), Datatype::Fp32) if v.len() * 4 == b.len() => {
            v.iter_mut().zip(b.chunks_exact(4)).for_each(|(x, c)| *x = f32::from_ne_bytes([c[0], c[1], c[2], c[3]]));
        }
        (Owned::F16(v), Datatype::Fp16) if v.len() * 2 == b.len() => {
            v.iter_mut()
                .zip(b.chunks_exact(2))
                .for_each(|(x, c)| *x = f16::from_bits(u16::from_ne_bytes([c[0], c[1]])));
        }
        (Owned::Bf16(v), Datatype::Bf16) if v.len() * 2 == b.len() => {
            v.iter_mut()
                .zip(b.chunks_exact(2))
                .for_each(|(x, c)| *x = bf16::from_bits(u16::from_ne_bytes([c[0], c[1]])));
        }
        (Owned::I8(v), Datatype::Qint8 | Datatype::Qcint8) if v.len() == b.len() => {
            v.iter_mut().zip(b).for_each(|(x, &c)| *x = c as i8);
        }
        (Owned::I32(v), Datatype::Qint32 | Datatype::Qcint32) if v.len() * 4 == b.len() => {
            v.iter_mut().zip(b.chunks_exact(4)).for_each(|(x, c)| *x = i32::from_ne_bytes([c[0], c[1], c[2], c[3]]));
        }
        _ => return false,
    }
    true
}

fn owned_from(dt: Datatype, b: &[u8]) -> Option<Owned> {
    Some(match dt {
        Datatype::Fp32 => Owned::F32(b.chunks_exact(4).map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect()),
        Datatype::Fp16 => {
            Owned::F16(b.chunks_exact(2).map(|c| f16::from_bits(u16::from_ne_bytes([c[0], c[1]]))).collect())
        }
        Datatype::Bf16 => {
            Owned::Bf16(b.chunks_exact(2).map(|c| bf16::from_bits(u16::from_ne_bytes([c[0], c[1]]))).collect())
        }
        Datatype::Qint8 | Datatype::Qcint8 => Owned::I8(b.iter().map(|&x| x as i8).collect()),
        Datatype::Qint32 | Datatype::Qcint32 => {
            Owned::I32(b.chunks_exact(4).map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect())
        }
        Datatype::Quint8 => return None,
    })
}

/// Compiles a loaded payload for `pool`: values, nodes, then the runtime (`flags` are
/// runtime-creation flags, e.g. [`FLAG_DONT_SPIN_WORKERS`]). `n_inputs` is how many of the
/// external ids are inputs (the segment's input count).
pub fn compile(x: &Xnnpack, g: &XnnGraph, n_inputs: usize, pool: &ThreadPool, flags: u32) -> Result<Segment, Refusal> {
    let sub = Subgraph::new(x.api(), g.num_externs)
        .map_err(|s| refuse(Stage::Define, None, Some(s), format!("xnn_create_subgraph({})", g.num_externs)))?;
    let mut b = Builder { g, sub, ids: HashMap::with_capacity(g.values.len()), codes: *x.codes() };
    // Argument datatypes by external id; every id below the last must be bound.
    let mut args: Vec<Option<Datatype>> = Vec::new();
    for (vi, v) in g.values.iter().enumerate() {
        let id = b.define_value(vi, v)?;
        if b.ids.insert(v.id_out, (id, v)).is_some() {
            return Err(refuse(Stage::Define, None, None, format!("value id {} defined twice", v.id_out)));
        }
        if v.flags & (EXTERNAL_INPUT | EXTERNAL_OUTPUT) != 0 && v.constant_buffer_idx == 0 {
            let k = v.external_id as usize;
            let is_input = v.flags & EXTERNAL_INPUT != 0;
            if v.external_id == INVALID_VALUE_ID || is_input != (k < n_inputs) {
                return Err(refuse(
                    Stage::Define,
                    None,
                    None,
                    format!(
                        "value {vi}: external id {} is not a segment {}",
                        v.external_id,
                        if is_input { "input" } else { "output" }
                    ),
                ));
            }
            if args.len() <= k {
                args.resize(k + 1, None);
            }
            if args[k].replace(datatype(v.datatype).unwrap_or(Datatype::Fp32)).is_some() {
                return Err(refuse(Stage::Define, None, None, format!("external id {k} bound twice")));
            }
        }
    }
    if let Some(k) = args.iter().position(Option::is_none) {
        return Err(refuse(Stage::Define, None, None, format!("no value for argument {k}")));
    }
    let args: Vec<Datatype> = args.into_iter().flatten().collect();
    if args.len() < n_inputs {
        return Err(refuse(
            Stage::Define,
            None,
            None,
            format!("{} external inputs for {n_inputs} segment inputs", args.len()),
        ));
    }
    for (ni, n) in g.nodes.iter().enumerate() {
        b.define_node(ni, n).map_err(|mut r| {
            if r.datatype.is_none() {
                r.datatype = Some(b.datatypes(&n.kind.inputs(), n.kind.output().unwrap_or(INVALID_VALUE_ID)));
            }
            r
        })?;
    }
    let runtime = b.sub.create_runtime(&pool.0, flags).map_err(|s| {
        refuse(Stage::Create, None, Some(s), format!("xnn_create_runtime_v2 on {} threads", pool.threads()))
    })?;
    let (inputs, outputs) = args.split_at(n_inputs);
    Ok(Segment { runtime, inputs: inputs.to_vec(), outputs: outputs.to_vec(), nodes: g.nodes.len() })
}

impl Segment {
    /// Argument counts: (inputs, outputs).
    pub fn arity(&self) -> (usize, usize) {
        (self.inputs.len(), self.outputs.len())
    }

    /// Binds the inputs (copied into padded buffers: XNNPACK may read `XNN_EXTRA_BYTES` past
    /// them), reshapes the runtime to their dims (physical order, as ExecuTorch hands them),
    /// allocates the outputs at the shapes XNNPACK computes, and sets the runtime up. After this,
    /// [`Segment::invoke`] alone runs the same inputs again.
    pub fn set_inputs(&mut self, inputs: &[(View, &[usize])]) -> Result<(), Refusal> {
        let reshape = |s: RawStatus, what: String| refuse(Stage::Reshape, None, Some(s), what);
        if inputs.len() != self.inputs.len() {
            return Err(refuse(Stage::Setup, None, None, format!("{} inputs for {}", inputs.len(), self.inputs.len())));
        }
        for (k, ((v, dims), &dt)) in inputs.iter().zip(&self.inputs).enumerate() {
            let n: usize = dims.iter().product();
            if !view_datatype_ok(v, dt) || v.len() != n {
                return Err(refuse(
                    Stage::Setup,
                    None,
                    None,
                    format!("input {k}: {} {} elements for {} dims {dims:?}", v.len(), v.type_name(), dt.name()),
                ));
            }
            let id = k as u32;
            self.runtime.reshape_external(id, dims).map_err(|s| reshape(s, format!("input {k} to {dims:?}")))?;
            // The last run's buffer when it is large enough (then no allocation).
            let bytes = n * dt.size();
            match self.runtime.buffer_mut(id).filter(|b| b.len() >= bytes) {
                Some(b) => view_bytes(v, &mut b[..bytes]),
                None => {
                    let mut buf = Buffer::zeroed(bytes);
                    view_bytes(v, buf.as_bytes_mut());
                    self.runtime
                        .bind(id, buf)
                        .map_err(|s| refuse(Stage::Setup, None, Some(s), format!("binding input {k}")))?;
                }
            }
        }
        self.runtime.reshape().map_err(|s| reshape(s, format!("xnn_reshape_runtime over {} nodes", self.nodes)))?;
        for (k, &dt) in self.outputs.iter().enumerate() {
            let id = (self.inputs.len() + k) as u32;
            let dims = self.runtime.external_shape(id).map_err(|s| reshape(s, format!("shape of output {k}")))?;
            let bytes = dims.iter().product::<usize>() * dt.size();
            if self.runtime.buffer(id).is_none_or(|b| b.len() < bytes) {
                self.runtime
                    .bind(id, Buffer::zeroed(bytes))
                    .map_err(|s| refuse(Stage::Setup, None, Some(s), format!("binding output {k}")))?;
            }
        }
        self.runtime.setup().map_err(|s| refuse(Stage::Setup, None, Some(s), "xnn_setup_runtime_v2"))
    }

    /// `xnn_invoke_runtime` on the inputs of the last [`Segment::set_inputs`].
    pub fn invoke(&mut self) -> Result<(), Refusal> {
        self.runtime.invoke().map_err(|s| refuse(Stage::Invoke, None, Some(s), "xnn_invoke_runtime"))
    }

    /// The outputs of the last invoke, with the dims XNNPACK gives them.
    pub fn outputs(&self) -> Result<Vec<SegmentOutput>, Refusal> {
        self.outputs_reusing(&mut Vec::new())
    }

    /// As [`Segment::outputs`], copying into `reuse[k]` where it has output `k`'s type and
    /// length (a bound caller's buffers from the last run) instead of allocating.
    pub fn outputs_reusing(&self, reuse: &mut [Owned]) -> Result<Vec<SegmentOutput>, Refusal> {
        let mut res = Vec::with_capacity(self.outputs.len());
        for (k, &dt) in self.outputs.iter().enumerate() {
            let id = (self.inputs.len() + k) as u32;
            let dims =
                self.runtime.external_shape(id).map_err(|s| refuse(Stage::Reshape, None, Some(s), "output shape"))?;
            let buf = self.runtime.buffer(id).ok_or_else(|| refuse(Stage::Setup, None, None, "output not bound"))?;
            let n: usize = dims.iter().product::<usize>() * dt.size();
            let bytes =
                buf.as_bytes().get(..n).ok_or_else(|| refuse(Stage::Setup, None, None, "output buffer short"))?;
            let reused =
                reuse.get_mut(k).and_then(|o| fill(o, dt, bytes).then(|| std::mem::replace(o, Owned::F32(Vec::new()))));
            let data = match reused {
                Some(o) => o,
                None => owned_from(dt, bytes)
                    .ok_or_else(|| refuse(Stage::Setup, None, None, format!("output {k} of datatype {}", dt.name())))?,
            };
            res.push(SegmentOutput { data, dims });
        }
        Ok(res)
    }

    /// [`Segment::set_inputs`], [`Segment::invoke`], [`Segment::outputs_reusing`].
    pub fn run(&mut self, inputs: &[(View, &[usize])], reuse: &mut [Owned]) -> Result<Vec<SegmentOutput>, Refusal> {
        self.set_inputs(inputs)?;
        self.invoke()?;
        self.outputs_reusing(reuse)
    }
}
