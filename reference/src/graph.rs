//! The graph language: a small PyTorch-like dataflow graph with NCHW semantics.
//!
//! Build one with [`GraphBuilder`] (methods read like the PyTorch they mirror), or
//! construct [`Graph`] directly and call [`Graph::validate`]. Shape and dtype inference
//! ([`infer`]) is the single source of truth for what every op produces; every invalid
//! graph gets a [`GraphError`] naming the node and the reason, never a panic.

use crate::dtype::{ElemType, MemoryFormat, QuantParams};
use crate::tensor::Tensor;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;

/// XNNPACK's `XNN_MAX_TENSOR_DIMS`; the graph language shares the limit.
pub const MAX_RANK: usize = 6;
/// No tensor in a graph may hold more elements than this (keeps every allocation bounded).
pub const MAX_NUMEL: usize = 1 << 28;

/// One dimension: a static size, or a dynamic one whose `size` is its upper bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Dim {
    pub size: usize,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dynamic: bool,
}

impl Dim {
    pub fn fixed(size: usize) -> Dim {
        Dim { size, dynamic: false }
    }
    pub fn upto(bound: usize) -> Dim {
        Dim { size: bound, dynamic: true }
    }
}

/// Type of a value in the graph: shape (logical), element type, quant params, memory format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorSpec {
    pub shape: Vec<Dim>,
    pub dtype: ElemType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quant: Option<QuantParams>,
    #[serde(default)]
    pub format: MemoryFormat,
}

impl TensorSpec {
    pub fn new(dtype: ElemType, shape: &[usize]) -> TensorSpec {
        TensorSpec {
            shape: shape.iter().map(|&s| Dim::fixed(s)).collect(),
            dtype,
            quant: None,
            format: MemoryFormat::Contiguous,
        }
    }
    pub fn f32(shape: &[usize]) -> TensorSpec {
        Self::new(ElemType::F32, shape)
    }
    pub fn f16(shape: &[usize]) -> TensorSpec {
        Self::new(ElemType::F16, shape)
    }
    pub fn bf16(shape: &[usize]) -> TensorSpec {
        Self::new(ElemType::Bf16, shape)
    }
    pub fn qs8(shape: &[usize], q: QuantParams) -> TensorSpec {
        TensorSpec { quant: Some(q), ..Self::new(ElemType::Qs8, shape) }
    }
    /// The spec of a concrete tensor (all dims static).
    pub fn of(t: &Tensor) -> TensorSpec {
        TensorSpec { quant: t.quant, format: t.format, ..Self::new(t.dtype(), &t.shape) }
    }
    pub fn with_format(mut self, format: MemoryFormat) -> TensorSpec {
        self.format = format;
        self
    }
    pub fn channels_last(self) -> TensorSpec {
        let f = if self.shape.len() == 5 { MemoryFormat::ChannelsLast3d } else { MemoryFormat::ChannelsLast };
        self.with_format(f)
    }
    /// Marks dim `d` dynamic; its current size becomes the upper bound.
    pub fn dynamic(mut self, d: usize) -> TensorSpec {
        if let Some(dim) = self.shape.get_mut(d) {
            dim.dynamic = true;
        }
        self
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// Sizes with every dynamic dim at its upper bound.
    pub fn max_shape(&self) -> Vec<usize> {
        self.shape.iter().map(|d| d.size).collect()
    }
    pub fn max_numel(&self) -> usize {
        self.shape.iter().map(|d| d.size).product()
    }
    pub fn is_dynamic(&self) -> bool {
        self.shape.iter().any(|d| d.dynamic)
    }
    /// The same spec with concrete sizes (all static).
    pub fn concretize(&self, shape: &[usize]) -> TensorSpec {
        TensorSpec { shape: shape.iter().map(|&s| Dim::fixed(s)).collect(), ..self.clone() }
    }

    /// Checks that a concrete tensor may be bound to a value of this spec.
    pub fn check_tensor(&self, t: &Tensor) -> Result<(), GraphErrorKind> {
        if t.dtype() != self.dtype {
            return Err(GraphErrorKind::DtypeMismatch { expected: self.dtype, found: t.dtype() });
        }
        if t.quant != self.quant {
            return Err(GraphErrorKind::QuantParamsMismatch);
        }
        if t.format != self.format {
            return Err(GraphErrorKind::FormatMismatch { expected: self.format, found: t.format });
        }
        self.check_shape(&t.shape)?;
        let numel: Option<usize> = t.shape.iter().try_fold(1usize, |a, &s| a.checked_mul(s));
        if numel != Some(t.data.len()) {
            return Err(GraphErrorKind::DataLength { expected: numel.unwrap_or(usize::MAX), found: t.data.len() });
        }
        Ok(())
    }

    /// Checks concrete sizes against this spec: same rank, static dims equal, dynamic dims in 1..=bound.
    pub fn check_shape(&self, shape: &[usize]) -> Result<(), GraphErrorKind> {
        if shape.len() != self.shape.len() {
            return Err(GraphErrorKind::ShapeMismatch { expected: self.max_shape(), found: shape.to_vec() });
        }
        for (i, (d, &s)) in self.shape.iter().zip(shape).enumerate() {
            if d.dynamic {
                if s > d.size {
                    return Err(GraphErrorKind::DynamicAboveBound { dim: i, size: s, bound: d.size });
                }
                if s == 0 {
                    return Err(GraphErrorKind::ZeroSizedDim { dim: i });
                }
            } else if s != d.size {
                return Err(GraphErrorKind::ShapeMismatch { expected: self.max_shape(), found: shape.to_vec() });
            }
        }
        Ok(())
    }
}

/// Index of a node in [`Graph::nodes`].
pub type NodeId = usize;

/// A handle to a builder value (a node id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct T(pub NodeId);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Conv2dParams {
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
}

impl Default for Conv2dParams {
    fn default() -> Self {
        Conv2dParams { stride: [1, 1], padding: [0, 0], dilation: [1, 1], groups: 1 }
    }
}

/// An operation. Inputs are listed in [`Node::inputs`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// A graph input; its spec is the node's spec.
    Input {
        name: String,
    },
    /// Constant data (weights). Stored contiguous.
    Constant {
        tensor: Tensor,
    },
    /// `aten.mean.dim(x, dims, keepdim, dtype=)`. Empty `dims` means every dim.
    Mean {
        dims: Vec<i64>,
        keepdim: bool,
        dtype: Option<ElemType>,
    },
    /// `aten.adaptive_avg_pool2d(x, output_size)` on [N,C,H,W] or [C,H,W]. Only output size
    /// [1, 1] is modelled: exactly `x.mean([-1, -2], keepdim=True)` (ATen's kernel for that
    /// size, which is what `to_edge` lowers). Other sizes are a [`GraphErrorKind::PoolOutputSize`].
    AdaptiveAvgPool2d {
        output_size: [usize; 2],
    },
    /// `aten.convolution` 2-D. Inputs: x [N,C,H,W], w [O,C/g,kh,kw], optional b [O].
    Conv2d(Conv2dParams),
    /// Elementwise with broadcasting.
    Binary(BinaryOp),
    Square,
    Rsqrt,
    /// `clamp(min, max)`; relu is `min = 0`, hardtanh is both.
    Clamp {
        min: Option<f32>,
        max: Option<f32>,
    },
    /// `aten.linear`. Inputs: x [..., K], w [N, K], optional b [N].
    Linear,
    /// `quantize_per_tensor` to qs8 (clamped to [-128, 127]).
    Quantize(QuantParams),
    /// `dequantize_per_tensor` from qs8 to fp32.
    Dequantize(QuantParams),
    /// `aten._to_copy(dtype=, memory_format=)`.
    ToCopy {
        dtype: Option<ElemType>,
        format: Option<MemoryFormat>,
    },
    /// `aten.view_copy`/`reshape`; one entry may be -1.
    Reshape {
        shape: Vec<i64>,
    },
    /// `aten.permute_copy`; negative entries count from the end.
    Permute {
        perm: Vec<i64>,
    },
}

impl Op {
    /// The ATen-style name users see in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::Constant { .. } => "constant",
            Op::Mean { .. } => "mean.dim",
            Op::AdaptiveAvgPool2d { .. } => "adaptive_avg_pool2d",
            Op::Conv2d(_) => "convolution",
            Op::Binary(BinaryOp::Add) => "add",
            Op::Binary(BinaryOp::Sub) => "sub",
            Op::Binary(BinaryOp::Mul) => "mul",
            Op::Binary(BinaryOp::Div) => "div",
            Op::Square => "square",
            Op::Rsqrt => "rsqrt",
            Op::Clamp { .. } => "clamp",
            Op::Linear => "linear",
            Op::Quantize(_) => "quantize_per_tensor",
            Op::Dequantize(_) => "dequantize_per_tensor",
            Op::ToCopy { .. } => "_to_copy",
            Op::Reshape { .. } => "view_copy",
            Op::Permute { .. } => "permute_copy",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<NodeId>,
    /// The inferred output spec.
    pub spec: TensorSpec,
}

/// A validated graph: nodes in topological order, graph inputs in call order, outputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub inputs: Vec<NodeId>,
    pub outputs: Vec<NodeId>,
}

/// Coarse class of a graph error, compared by the errors oracle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    Shape,
    Dtype,
    Quant,
    Conv,
    Dynamic,
    Structure,
}

#[derive(Clone, Debug, PartialEq, thiserror::Error, Serialize, Deserialize)]
pub enum GraphErrorKind {
    #[error("dim {dim} out of range for rank {rank}")]
    DimOutOfRange { dim: i64, rank: usize },
    #[error("dim {dim} repeated in the dims list")]
    RepeatedDim { dim: usize },
    #[error("rank {rank} above the maximum of 6")]
    RankTooHigh { rank: usize },
    #[error("expected rank {expected}, found rank {found}")]
    RankMismatch { expected: String, found: usize },
    #[error("dtype mismatch: expected {expected}, found {found}")]
    DtypeMismatch { expected: ElemType, found: ElemType },
    #[error("dtype {dtype} not supported by this op")]
    UnsupportedDtype { dtype: ElemType },
    #[error("qs8 scale {scale} is not finite and positive")]
    BadQuantScale { scale: f32 },
    #[error("qs8 zero point {zero_point} outside int8 [-128, 127]")]
    BadZeroPoint { zero_point: i32 },
    #[error("quantization parameters do not match the input's")]
    QuantParamsMismatch,
    #[error("conv channel mismatch: input has {input_channels} channels, weight expects {weight_channels} per group x {groups} groups")]
    ConvChannelMismatch { input_channels: usize, weight_channels: usize, groups: usize },
    #[error("conv group mismatch: {what} {channels} not divisible by groups {groups}")]
    ConvGroupMismatch { what: String, channels: usize, groups: usize },
    #[error("bad conv parameters: {reason}")]
    BadConvParams { reason: String },
    #[error("shapes {a:?} and {b:?} are not broadcastable")]
    NotBroadcastable { a: Vec<usize>, b: Vec<usize> },
    #[error("dynamic dim {dim}: size {size} above its bound {bound}")]
    DynamicAboveBound { dim: usize, size: usize, bound: usize },
    #[error("{what} does not support dynamic dims")]
    DynamicUnsupported { what: String },
    #[error("shape mismatch: expected {expected:?}, found {found:?}")]
    ShapeMismatch { expected: Vec<usize>, found: Vec<usize> },
    #[error("memory format mismatch: expected {expected:?}, found {found:?}")]
    FormatMismatch { expected: MemoryFormat, found: MemoryFormat },
    #[error("memory format {format:?} needs a tensor of another rank, not {rank}")]
    FormatRankMismatch { format: MemoryFormat, rank: usize },
    #[error("dim {dim} has size 0")]
    ZeroSizedDim { dim: usize },
    #[error("tensor of {numel} elements is above the limit")]
    TooLarge { numel: String },
    #[error("data holds {found} elements, shape needs {expected}")]
    DataLength { expected: usize, found: usize },
    #[error("cannot reshape {from:?} to {to:?}")]
    BadReshape { from: Vec<usize>, to: Vec<i64> },
    #[error("{perm:?} is not a permutation of rank {rank}")]
    BadPermute { perm: Vec<i64>, rank: usize },
    #[error("clamp bounds invalid: min {min:?}, max {max:?}")]
    BadClamp { min: Option<f32>, max: Option<f32> },
    #[error(
        "adaptive_avg_pool2d output size {output_size:?} not supported: only [1, 1] (the mean over H and W) is \
         modelled; other sizes decompose to avg_pool2d, which the graph language does not have"
    )]
    PoolOutputSize { output_size: [usize; 2] },
    #[error("expected {expected} inputs, found {found}")]
    WrongInputCount { expected: String, found: usize },
    #[error("input refers to node {id}, which is not defined before this node")]
    UnknownNode { id: NodeId },
    #[error("graph has no outputs")]
    NoOutputs,
    #[error("stored spec differs from the inferred one")]
    SpecMismatch,
}

impl GraphErrorKind {
    pub fn class(&self) -> ErrorClass {
        use GraphErrorKind::*;
        match self {
            DimOutOfRange { .. }
            | RepeatedDim { .. }
            | RankTooHigh { .. }
            | RankMismatch { .. }
            | NotBroadcastable { .. }
            | ShapeMismatch { .. }
            | FormatMismatch { .. }
            | FormatRankMismatch { .. }
            | ZeroSizedDim { .. }
            | TooLarge { .. }
            | DataLength { .. }
            | BadReshape { .. }
            | BadPermute { .. }
            | PoolOutputSize { .. } => ErrorClass::Shape,
            DtypeMismatch { .. } | UnsupportedDtype { .. } => ErrorClass::Dtype,
            BadQuantScale { .. } | BadZeroPoint { .. } | QuantParamsMismatch => ErrorClass::Quant,
            ConvChannelMismatch { .. } | ConvGroupMismatch { .. } | BadConvParams { .. } => ErrorClass::Conv,
            DynamicAboveBound { .. } | DynamicUnsupported { .. } => ErrorClass::Dynamic,
            BadClamp { .. } | WrongInputCount { .. } | UnknownNode { .. } | NoOutputs | SpecMismatch => {
                ErrorClass::Structure
            }
        }
    }
}

/// A rejected graph: which node, which op, why.
#[derive(Clone, Debug, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[error("node {node} ({op}): {kind}")]
pub struct GraphError {
    pub node: NodeId,
    pub op: String,
    pub kind: GraphErrorKind,
}

fn check_quant(q: QuantParams) -> Result<(), GraphErrorKind> {
    if !(q.scale.is_finite() && q.scale > 0.0) {
        return Err(GraphErrorKind::BadQuantScale { scale: q.scale });
    }
    if !(-128..=127).contains(&q.zero_point) {
        return Err(GraphErrorKind::BadZeroPoint { zero_point: q.zero_point });
    }
    Ok(())
}

/// Rank, nonzero dims, bounded element count, quant params and format of a spec.
pub fn check_spec(s: &TensorSpec) -> Result<(), GraphErrorKind> {
    if s.rank() > MAX_RANK {
        return Err(GraphErrorKind::RankTooHigh { rank: s.rank() });
    }
    if let Some(i) = s.shape.iter().position(|d| d.size == 0) {
        return Err(GraphErrorKind::ZeroSizedDim { dim: i });
    }
    let numel = s.shape.iter().try_fold(1usize, |a, d| a.checked_mul(d.size));
    match numel {
        Some(n) if n <= MAX_NUMEL => {}
        _ => return Err(GraphErrorKind::TooLarge { numel: format!("{:?}", s.max_shape()) }),
    }
    match (s.dtype, s.quant) {
        (ElemType::Qs8, Some(q)) => check_quant(q)?,
        (ElemType::Qs8, None) | (_, Some(_)) => return Err(GraphErrorKind::QuantParamsMismatch),
        _ => {}
    }
    if let Some(r) = s.format.required_rank() {
        if r != s.rank() {
            return Err(GraphErrorKind::FormatRankMismatch { format: s.format, rank: s.rank() });
        }
    }
    Ok(())
}

/// Normalizes a mean/permute dims list against `rank`: negatives wrap, out of range and
/// repeats are errors. An empty list is returned empty (callers decide what it means).
pub fn normalize_dims(dims: &[i64], rank: usize) -> Result<Vec<usize>, GraphErrorKind> {
    let r = rank as i64;
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        // A 0-D tensor accepts dim 0 and -1, as PyTorch does.
        let rr = r.max(1);
        if d < -rr || d >= rr {
            return Err(GraphErrorKind::DimOutOfRange { dim: d, rank });
        }
        let n = d.rem_euclid(rr) as usize;
        if out.contains(&n) {
            return Err(GraphErrorKind::RepeatedDim { dim: n });
        }
        out.push(n);
    }
    Ok(out)
}

/// The dims a mean reduces, sorted: the normalized list, or every dim when empty.
pub fn mean_axes(dims: &[i64], rank: usize) -> Result<Vec<usize>, GraphErrorKind> {
    let mut axes = normalize_dims(dims, rank)?;
    if axes.is_empty() {
        axes = (0..rank).collect();
    }
    axes.retain(|&a| a < rank);
    axes.sort_unstable();
    Ok(axes)
}

/// [`mean_axes`] as a bit set (bit d: dim d is reduced), with the same errors, for a rank of
/// a valid spec (at most [`MAX_RANK`]): no list allocated.
fn mean_axes_mask(dims: &[i64], rank: usize) -> Result<u64, GraphErrorKind> {
    let rr = (rank as i64).max(1);
    let mut axes = 0u64;
    for &d in dims {
        // A 0-D tensor accepts dim 0 and -1, as PyTorch does.
        if d < -rr || d >= rr {
            return Err(GraphErrorKind::DimOutOfRange { dim: d, rank });
        }
        let n = d.rem_euclid(rr) as usize;
        if axes & (1 << n) != 0 {
            return Err(GraphErrorKind::RepeatedDim { dim: n });
        }
        axes |= 1 << n;
    }
    let all = (1u64 << rank) - 1;
    Ok(if dims.is_empty() { all } else { axes & all })
}

fn want_inputs(inputs: &[&TensorSpec], lo: usize, hi: usize) -> Result<(), GraphErrorKind> {
    if inputs.len() < lo || inputs.len() > hi {
        let expected = if lo == hi { lo.to_string() } else { format!("{lo} to {hi}") };
        return Err(GraphErrorKind::WrongInputCount { expected, found: inputs.len() });
    }
    Ok(())
}

fn want_float(s: &TensorSpec) -> Result<(), GraphErrorKind> {
    if s.dtype.is_float() {
        Ok(())
    } else {
        Err(GraphErrorKind::UnsupportedDtype { dtype: s.dtype })
    }
}

fn same_dtype(a: &TensorSpec, b: &TensorSpec) -> Result<(), GraphErrorKind> {
    if a.dtype != b.dtype {
        return Err(GraphErrorKind::DtypeMismatch { expected: a.dtype, found: b.dtype });
    }
    Ok(())
}

fn keep_format(first: &TensorSpec, rank: usize) -> MemoryFormat {
    if first.format.required_rank() == Some(rank) {
        first.format
    } else {
        MemoryFormat::Contiguous
    }
}

/// Numpy/PyTorch broadcasting of two shapes (right-aligned).
pub fn broadcast(a: &[Dim], b: &[Dim]) -> Result<Vec<Dim>, GraphErrorKind> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    let err = || GraphErrorKind::NotBroadcastable {
        a: a.iter().map(|d| d.size).collect(),
        b: b.iter().map(|d| d.size).collect(),
    };
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { Dim::fixed(1) };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { Dim::fixed(1) };
        let d = if da == db {
            da
        } else if da == Dim::fixed(1) {
            db
        } else if db == Dim::fixed(1) {
            da
        } else if da.size == db.size {
            // One static, one dynamic with the same bound: the static size wins at run time,
            // the dynamic side must then equal it.
            Dim { size: da.size, dynamic: da.dynamic && db.dynamic }
        } else {
            return Err(err());
        };
        out.push(d);
    }
    Ok(out)
}

/// Shape and dtype inference for one op: the single definition of what it produces.
pub fn infer(op: &Op, inputs: &[&TensorSpec]) -> Result<TensorSpec, GraphErrorKind> {
    for s in inputs {
        check_spec(s)?;
    }
    infer_from_valid(op, inputs)
}

/// [`infer`] for inputs known to pass [`check_spec`] (earlier nodes of a graph being
/// validated: each passed it, as an input or as the output of this function).
fn infer_from_valid(op: &Op, inputs: &[&TensorSpec]) -> Result<TensorSpec, GraphErrorKind> {
    use GraphErrorKind as E;
    let out = match op {
        Op::Input { .. } => unreachable_input()?,
        Op::Constant { tensor } => {
            want_inputs(inputs, 0, 0)?;
            let s = TensorSpec::of(tensor);
            check_spec(&s)?;
            if tensor.data.len() != tensor.numel() {
                return Err(E::DataLength { expected: tensor.numel(), found: tensor.data.len() });
            }
            s
        }
        Op::Mean { dims, keepdim, dtype } => {
            want_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            want_float(x)?;
            if let Some(d) = dtype {
                if !d.is_float() {
                    return Err(E::UnsupportedDtype { dtype: *d });
                }
            }
            let axes = mean_axes_mask(dims, x.rank())?;
            let mut shape = Vec::with_capacity(x.rank());
            for (i, d) in x.shape.iter().enumerate() {
                if axes & (1 << i) != 0 {
                    if *keepdim {
                        shape.push(Dim::fixed(1));
                    }
                } else {
                    shape.push(*d);
                }
            }
            let format = if *keepdim { keep_format(x, shape.len()) } else { MemoryFormat::Contiguous };
            TensorSpec { shape, dtype: dtype.unwrap_or(x.dtype), quant: None, format }
        }
        Op::AdaptiveAvgPool2d { output_size } => {
            want_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            want_float(x)?;
            if !matches!(x.rank(), 3 | 4) {
                return Err(E::RankMismatch { expected: "3 or 4".into(), found: x.rank() });
            }
            if *output_size != [1, 1] {
                return Err(E::PoolOutputSize { output_size: *output_size });
            }
            infer_from_valid(&Op::Mean { dims: vec![-1, -2], keepdim: true, dtype: None }, inputs)?
        }
        Op::Conv2d(p) => {
            want_inputs(inputs, 2, 3)?;
            let (x, w) = (inputs[0], inputs[1]);
            want_float(x)?;
            same_dtype(x, w)?;
            if x.rank() != 4 {
                return Err(E::RankMismatch { expected: "4".into(), found: x.rank() });
            }
            if w.rank() != 4 {
                return Err(E::RankMismatch { expected: "4 (weight)".into(), found: w.rank() });
            }
            if w.is_dynamic() || x.shape[1].dynamic {
                return Err(E::DynamicUnsupported { what: "conv channels and weights".into() });
            }
            if p.groups == 0 || p.stride.contains(&0) || p.dilation.contains(&0) {
                return Err(E::BadConvParams { reason: format!("groups, stride and dilation must be >= 1: {p:?}") });
            }
            let (c, o) = (x.shape[1].size, w.shape[0].size);
            if c % p.groups != 0 {
                return Err(E::ConvGroupMismatch { what: "input channels".into(), channels: c, groups: p.groups });
            }
            if o % p.groups != 0 {
                return Err(E::ConvGroupMismatch { what: "output channels".into(), channels: o, groups: p.groups });
            }
            if w.shape[1].size * p.groups != c {
                return Err(E::ConvChannelMismatch {
                    input_channels: c,
                    weight_channels: w.shape[1].size,
                    groups: p.groups,
                });
            }
            if let Some(b) = inputs.get(2) {
                same_dtype(x, b)?;
                if b.max_shape() != [o] {
                    return Err(E::ShapeMismatch { expected: vec![o], found: b.max_shape() });
                }
            }
            let mut shape = vec![x.shape[0], Dim::fixed(o)];
            for k in 0..2 {
                let (inp, ker) = (x.shape[2 + k], w.shape[2 + k].size);
                let span = p.dilation[k].checked_mul(ker - 1).and_then(|v| v.checked_add(1));
                let padded = inp.size.checked_add(2usize.saturating_mul(p.padding[k]));
                match (span, padded) {
                    (Some(span), Some(padded)) if padded >= span => {
                        shape.push(Dim { size: (padded - span) / p.stride[k] + 1, dynamic: inp.dynamic })
                    }
                    _ => {
                        return Err(E::BadConvParams {
                            reason: format!("kernel larger than padded input in dim {}", 2 + k),
                        })
                    }
                }
            }
            TensorSpec { shape, dtype: x.dtype, quant: None, format: keep_format(x, 4) }
        }
        Op::Binary(_) => {
            want_inputs(inputs, 2, 2)?;
            let (a, b) = (inputs[0], inputs[1]);
            want_float(a)?;
            same_dtype(a, b)?;
            let shape = broadcast(&a.shape, &b.shape)?;
            let format =
                if a.rank() == shape.len() { keep_format(a, shape.len()) } else { keep_format(b, shape.len()) };
            TensorSpec { shape, dtype: a.dtype, quant: None, format }
        }
        Op::Square | Op::Rsqrt => {
            want_inputs(inputs, 1, 1)?;
            want_float(inputs[0])?;
            inputs[0].clone()
        }
        Op::Clamp { min, max } => {
            want_inputs(inputs, 1, 1)?;
            want_float(inputs[0])?;
            let bad = min.is_some_and(f32::is_nan)
                || max.is_some_and(f32::is_nan)
                || matches!((min, max), (Some(a), Some(b)) if a > b)
                || (min.is_none() && max.is_none());
            if bad {
                return Err(E::BadClamp { min: *min, max: *max });
            }
            inputs[0].clone()
        }
        Op::Linear => {
            want_inputs(inputs, 2, 3)?;
            let (x, w) = (inputs[0], inputs[1]);
            want_float(x)?;
            same_dtype(x, w)?;
            if x.rank() == 0 {
                return Err(E::RankMismatch { expected: "1 to 6".into(), found: 0 });
            }
            if w.rank() != 2 {
                return Err(E::RankMismatch { expected: "2 (weight)".into(), found: w.rank() });
            }
            let k = *x.shape.last().unwrap_or(&Dim::fixed(1));
            if k.dynamic || w.is_dynamic() {
                return Err(E::DynamicUnsupported { what: "linear in_features and weights".into() });
            }
            if w.shape[1].size != k.size {
                return Err(E::ShapeMismatch { expected: vec![w.shape[0].size, k.size], found: w.max_shape() });
            }
            let n = w.shape[0].size;
            if let Some(b) = inputs.get(2) {
                same_dtype(x, b)?;
                if b.max_shape() != [n] {
                    return Err(E::ShapeMismatch { expected: vec![n], found: b.max_shape() });
                }
            }
            let mut shape = x.shape.clone();
            *shape.last_mut().unwrap_or(&mut Dim::fixed(1)) = Dim::fixed(n);
            TensorSpec { shape, dtype: x.dtype, quant: None, format: MemoryFormat::Contiguous }
        }
        Op::Quantize(q) => {
            want_inputs(inputs, 1, 1)?;
            check_quant(*q)?;
            if inputs[0].dtype != ElemType::F32 {
                return Err(E::DtypeMismatch { expected: ElemType::F32, found: inputs[0].dtype });
            }
            TensorSpec { dtype: ElemType::Qs8, quant: Some(*q), ..inputs[0].clone() }
        }
        Op::Dequantize(q) => {
            want_inputs(inputs, 1, 1)?;
            check_quant(*q)?;
            let x = inputs[0];
            if x.dtype != ElemType::Qs8 {
                return Err(E::DtypeMismatch { expected: ElemType::Qs8, found: x.dtype });
            }
            if x.quant != Some(*q) {
                return Err(E::QuantParamsMismatch);
            }
            TensorSpec { dtype: ElemType::F32, quant: None, ..x.clone() }
        }
        Op::ToCopy { dtype, format } => {
            want_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            let dt = dtype.unwrap_or(x.dtype);
            if dt.is_float() != x.dtype.is_float() {
                // Changing between float and qs8 is quantize/dequantize, not a copy.
                return Err(E::UnsupportedDtype { dtype: dt });
            }
            let fmt = format.unwrap_or(x.format);
            if let Some(r) = fmt.required_rank() {
                if r != x.rank() {
                    return Err(E::FormatRankMismatch { format: fmt, rank: x.rank() });
                }
            }
            TensorSpec { dtype: dt, format: fmt, ..x.clone() }
        }
        Op::Reshape { shape } => {
            want_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            if x.is_dynamic() {
                return Err(E::DynamicUnsupported { what: "reshape".into() });
            }
            let n = x.max_numel();
            let bad = || E::BadReshape { from: x.max_shape(), to: shape.clone() };
            if shape.len() > MAX_RANK {
                return Err(E::RankTooHigh { rank: shape.len() });
            }
            let infer_at: Vec<usize> = shape.iter().enumerate().filter(|(_, &s)| s == -1).map(|(i, _)| i).collect();
            if infer_at.len() > 1 || shape.iter().any(|&s| s == 0 || s < -1) {
                return Err(bad());
            }
            let known =
                shape.iter().filter(|&&s| s > 0).try_fold(1usize, |a, &s| a.checked_mul(s as usize)).ok_or_else(bad)?;
            let mut dims: Vec<usize> = shape.iter().map(|&s| s.max(0) as usize).collect();
            if let Some(&i) = infer_at.first() {
                if known == 0 || !n.is_multiple_of(known) {
                    return Err(bad());
                }
                dims[i] = n / known;
            } else if known != n {
                return Err(bad());
            }
            TensorSpec {
                shape: dims.into_iter().map(Dim::fixed).collect(),
                format: MemoryFormat::Contiguous,
                ..x.clone()
            }
        }
        Op::Permute { perm } => {
            want_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            let p = normalize_dims(perm, x.rank()).map_err(|_| E::BadPermute { perm: perm.clone(), rank: x.rank() })?;
            if p.len() != x.rank() {
                return Err(E::BadPermute { perm: perm.clone(), rank: x.rank() });
            }
            TensorSpec { shape: p.iter().map(|&i| x.shape[i]).collect(), format: MemoryFormat::Contiguous, ..x.clone() }
        }
    };
    check_spec(&out)?;
    Ok(out)
}

fn unreachable_input() -> Result<TensorSpec, GraphErrorKind> {
    // Input specs are given, not inferred; `Graph::validate` checks them with `check_spec`.
    Err(GraphErrorKind::WrongInputCount { expected: "0 (inputs are not inferred)".into(), found: 0 })
}

/// `f` of the items of `inputs` (`get(i)` each: their specs, their values), listed without an
/// allocation for the usual one to three inputs.
pub(crate) fn with_inputs<'a, X: ?Sized + 'a, R>(
    inputs: &[NodeId],
    get: impl Fn(NodeId) -> &'a X,
    f: impl FnOnce(&[&'a X]) -> R,
) -> R {
    match *inputs {
        [] => f(&[]),
        [a] => f(&[get(a)]),
        [a, b] => f(&[get(a), get(b)]),
        [a, b, c] => f(&[get(a), get(b), get(c)]),
        _ => f(&inputs.iter().map(|&i| get(i)).collect::<Vec<_>>()),
    }
}

impl Graph {
    /// Re-checks every node: inputs defined earlier, specs valid and equal to inference.
    pub fn validate(&self) -> Result<(), GraphError> {
        for (id, node) in self.nodes.iter().enumerate() {
            let err = |kind| GraphError { node: id, op: node.op.name().to_string(), kind };
            if let Some(&bad) = node.inputs.iter().find(|&&i| i >= id) {
                return Err(err(GraphErrorKind::UnknownNode { id: bad }));
            }
            if let Op::Input { .. } = node.op {
                if !node.inputs.is_empty() {
                    return Err(err(GraphErrorKind::WrongInputCount {
                        expected: "0".into(),
                        found: node.inputs.len(),
                    }));
                }
                check_spec(&node.spec).map_err(err)?;
                continue;
            }
            let spec = with_inputs(&node.inputs, |i| &self.nodes[i].spec, |ins| infer_from_valid(&node.op, ins))
                .map_err(err)?;
            if spec != node.spec {
                return Err(err(GraphErrorKind::SpecMismatch));
            }
        }
        let n = self.nodes.len();
        for &i in self.inputs.iter().chain(&self.outputs) {
            if i >= n {
                return Err(GraphError { node: i, op: "graph".into(), kind: GraphErrorKind::UnknownNode { id: i } });
            }
        }
        for &i in &self.inputs {
            if !matches!(self.nodes[i].op, Op::Input { .. }) {
                let kind = GraphErrorKind::WrongInputCount { expected: "an input node".into(), found: 0 };
                return Err(GraphError { node: i, op: self.nodes[i].op.name().into(), kind });
            }
        }
        // Every input node must be bound by exactly one entry of `inputs`: an unlisted one
        // would have no value at run time, a repeated one would take two.
        for (id, node) in self.nodes.iter().enumerate() {
            if let Op::Input { .. } = node.op {
                let found = self.inputs.iter().filter(|&&i| i == id).count();
                if found != 1 {
                    let kind = GraphErrorKind::WrongInputCount { expected: "1 entry in graph inputs".into(), found };
                    return Err(GraphError { node: id, op: node.op.name().into(), kind });
                }
            }
        }
        if self.outputs.is_empty() {
            return Err(GraphError { node: n, op: "graph".into(), kind: GraphErrorKind::NoOutputs });
        }
        Ok(())
    }

    /// Checks concrete run-time inputs (count, dtype, quant, format, dynamic bounds).
    pub fn check_inputs(&self, inputs: &[Tensor]) -> Result<(), GraphError> {
        if inputs.len() != self.inputs.len() {
            let kind = GraphErrorKind::WrongInputCount { expected: self.inputs.len().to_string(), found: inputs.len() };
            return Err(GraphError { node: self.nodes.len(), op: "graph inputs".into(), kind });
        }
        for (&id, t) in self.inputs.iter().zip(inputs) {
            let node = &self.nodes[id];
            node.spec.check_tensor(t).map_err(|kind| GraphError { node: id, op: node.op.name().into(), kind })?;
        }
        Ok(())
    }

    /// Concrete output specs for concrete input shapes (dynamic dims resolved).
    pub fn concrete_specs(&self, input_shapes: &[Vec<usize>]) -> Result<Vec<TensorSpec>, GraphError> {
        let mut specs: Vec<TensorSpec> = Vec::with_capacity(self.nodes.len());
        let mut next_input = 0;
        for (id, node) in self.nodes.iter().enumerate() {
            let err = |kind| GraphError { node: id, op: node.op.name().to_string(), kind };
            let spec = if let Op::Input { .. } = node.op {
                let pos = self.inputs.iter().position(|&i| i == id).unwrap_or(next_input);
                next_input += 1;
                let shape = input_shapes.get(pos).ok_or_else(|| {
                    err(GraphErrorKind::WrongInputCount {
                        expected: self.inputs.len().to_string(),
                        found: input_shapes.len(),
                    })
                })?;
                node.spec.check_shape(shape).map_err(err)?;
                node.spec.concretize(shape)
            } else {
                let ins: Vec<&TensorSpec> = node.inputs.iter().map(|&i| &specs[i]).collect();
                infer(&node.op, &ins).map_err(err)?
            };
            specs.push(spec);
        }
        Ok(specs)
    }
}

/// Builds a [`Graph`] with PyTorch-like calls. Methods take `&self` so calls nest:
/// `g.mean(g.square(x), &[-1], true)`. The first error is kept and returned by
/// [`GraphBuilder::finish`]; later calls still return usable handles.
#[derive(Default)]
pub struct GraphBuilder {
    inner: RefCell<Inner>,
}

#[derive(Default)]
struct Inner {
    nodes: Vec<Node>,
    inputs: Vec<NodeId>,
    error: Option<GraphError>,
}

impl GraphBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    fn push(&self, op: Op, inputs: &[T]) -> T {
        let mut g = self.inner.borrow_mut();
        let id = g.nodes.len();
        let ids: Vec<NodeId> = inputs.iter().map(|t| t.0).collect();
        let result = if let Some(&bad) = ids.iter().find(|&&i| i >= id) {
            Err(GraphErrorKind::UnknownNode { id: bad })
        } else {
            with_inputs(&ids, |i| &g.nodes[i].spec, |ins| infer(&op, ins))
        };
        let spec = match result {
            Ok(s) => s,
            Err(kind) => {
                if g.error.is_none() {
                    g.error = Some(GraphError { node: id, op: op.name().to_string(), kind });
                }
                ids.first()
                    .and_then(|&i| g.nodes.get(i))
                    .map(|n| n.spec.clone())
                    .unwrap_or_else(|| TensorSpec::f32(&[1]))
            }
        };
        g.nodes.push(Node { op, inputs: ids, spec });
        T(id)
    }

    /// The inferred spec of a value.
    pub fn spec(&self, t: T) -> Option<TensorSpec> {
        self.inner.borrow().nodes.get(t.0).map(|n| n.spec.clone())
    }

    pub fn input(&self, name: &str, spec: TensorSpec) -> T {
        let mut g = self.inner.borrow_mut();
        let id = g.nodes.len();
        if let Err(kind) = check_spec(&spec) {
            if g.error.is_none() {
                g.error = Some(GraphError { node: id, op: "input".into(), kind });
            }
        }
        g.nodes.push(Node { op: Op::Input { name: name.to_string() }, inputs: vec![], spec });
        g.inputs.push(id);
        T(id)
    }

    pub fn constant(&self, tensor: Tensor) -> T {
        self.push(Op::Constant { tensor }, &[])
    }

    /// A 0-D fp32 constant (`x + eps`).
    pub fn scalar(&self, v: f32) -> T {
        self.constant(Tensor::f32(&[], vec![v]))
    }

    /// A 0-D constant of `like`'s float dtype (`x + eps` on an fp16/bf16 `x`; binary ops
    /// require equal dtypes, unlike PyTorch's scalar promotion). `v` is rounded once to that
    /// dtype; a qs8 or unknown `like` gives fp32.
    pub fn scalar_like(&self, v: f32, like: T) -> T {
        let dtype = self.spec(like).map(|s| s.dtype).filter(|d| d.is_float()).unwrap_or(ElemType::F32);
        self.constant(Tensor::from_f64(&[], dtype, None, &[v as f64]))
    }

    /// `x.mean(dims, keepdim)`; an empty `dims` reduces every dim.
    pub fn mean(&self, x: T, dims: &[i64], keepdim: bool) -> T {
        self.push(Op::Mean { dims: dims.to_vec(), keepdim, dtype: None }, &[x])
    }

    /// `x.mean(dims, keepdim, dtype=dtype)`.
    pub fn mean_dtype(&self, x: T, dims: &[i64], keepdim: bool, dtype: ElemType) -> T {
        self.push(Op::Mean { dims: dims.to_vec(), keepdim, dtype: Some(dtype) }, &[x])
    }

    /// `F.adaptive_avg_pool2d(x, output_size)` (`nn.AdaptiveAvgPool2d`); only [1, 1] is valid.
    pub fn adaptive_avg_pool2d(&self, x: T, output_size: [usize; 2]) -> T {
        self.push(Op::AdaptiveAvgPool2d { output_size }, &[x])
    }

    pub fn conv2d(&self, x: T, w: T, b: Option<T>, p: Conv2dParams) -> T {
        let mut ins = vec![x, w];
        ins.extend(b);
        self.push(Op::Conv2d(p), &ins)
    }

    pub fn add(&self, a: T, b: T) -> T {
        self.push(Op::Binary(BinaryOp::Add), &[a, b])
    }
    pub fn sub(&self, a: T, b: T) -> T {
        self.push(Op::Binary(BinaryOp::Sub), &[a, b])
    }
    pub fn mul(&self, a: T, b: T) -> T {
        self.push(Op::Binary(BinaryOp::Mul), &[a, b])
    }
    pub fn div(&self, a: T, b: T) -> T {
        self.push(Op::Binary(BinaryOp::Div), &[a, b])
    }
    pub fn binary(&self, op: BinaryOp, a: T, b: T) -> T {
        self.push(Op::Binary(op), &[a, b])
    }
    pub fn square(&self, x: T) -> T {
        self.push(Op::Square, &[x])
    }
    pub fn rsqrt(&self, x: T) -> T {
        self.push(Op::Rsqrt, &[x])
    }
    pub fn clamp(&self, x: T, min: Option<f32>, max: Option<f32>) -> T {
        self.push(Op::Clamp { min, max }, &[x])
    }
    pub fn relu(&self, x: T) -> T {
        self.clamp(x, Some(0.0), None)
    }
    pub fn hardtanh(&self, x: T, min: f32, max: f32) -> T {
        self.clamp(x, Some(min), Some(max))
    }
    pub fn linear(&self, x: T, w: T, b: Option<T>) -> T {
        let mut ins = vec![x, w];
        ins.extend(b);
        self.push(Op::Linear, &ins)
    }
    pub fn quantize(&self, x: T, scale: f32, zero_point: i32) -> T {
        self.push(Op::Quantize(QuantParams::new(scale, zero_point)), &[x])
    }
    pub fn dequantize(&self, x: T, scale: f32, zero_point: i32) -> T {
        self.push(Op::Dequantize(QuantParams::new(scale, zero_point)), &[x])
    }
    pub fn to_dtype(&self, x: T, dtype: ElemType) -> T {
        self.push(Op::ToCopy { dtype: Some(dtype), format: None }, &[x])
    }
    pub fn to_format(&self, x: T, format: MemoryFormat) -> T {
        self.push(Op::ToCopy { dtype: None, format: Some(format) }, &[x])
    }
    pub fn reshape(&self, x: T, shape: &[i64]) -> T {
        self.push(Op::Reshape { shape: shape.to_vec() }, &[x])
    }
    pub fn permute(&self, x: T, perm: &[i64]) -> T {
        self.push(Op::Permute { perm: perm.to_vec() }, &[x])
    }

    /// Finishes the graph with these outputs, or returns the first error met.
    pub fn finish(self, outputs: &[T]) -> Result<Graph, GraphError> {
        let inner = self.inner.into_inner();
        if let Some(e) = inner.error {
            return Err(e);
        }
        let graph = Graph { nodes: inner.nodes, inputs: inner.inputs, outputs: outputs.iter().map(|t| t.0).collect() };
        graph.validate()?;
        Ok(graph)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_axes_mask_matches_mean_axes() {
        let lists: [&[i64]; 10] = [&[], &[0], &[-1], &[1, -1], &[2, 0], &[0, 0], &[-1, 5], &[3, -7], &[1, 2, 3], &[6]];
        for rank in 0..=MAX_RANK {
            for dims in lists {
                let want = mean_axes(dims, rank).map(|a| a.iter().fold(0u64, |m, &d| m | 1 << d));
                assert_eq!(mean_axes_mask(dims, rank), want, "dims {dims:?} rank {rank}");
            }
        }
    }
}
