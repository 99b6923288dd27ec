//! Value types: [`TensorSpec`] (shape of [`Dim`]s, dtype, quant params, memory format)
//! and the checks every spec of a graph passes ([`check_spec`]).

use super::GraphErrorKind;
use crate::dtype::{ElemType, MemoryFormat, QuantParams};
use crate::tensor::Tensor;
use serde::{Deserialize, Serialize};

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

pub(crate) fn check_quant(q: QuantParams) -> Result<(), GraphErrorKind> {
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
