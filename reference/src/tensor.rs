//! Concrete tensors: shape (logical, NCHW semantics), memory format, element data in
//! physical order.

use crate::dtype::{self, ElemType, MemoryFormat, QuantParams};
use half::{bf16, f16};
use serde::{Deserialize, Serialize};

/// Element storage, in physical (memory-format) order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum TensorData {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    Qs8(Vec<i8>),
}

impl TensorData {
    pub fn len(&self) -> usize {
        match self {
            TensorData::F32(v) => v.len(),
            TensorData::F16(v) => v.len(),
            TensorData::Bf16(v) => v.len(),
            TensorData::Qs8(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn dtype(&self) -> ElemType {
        match self {
            TensorData::F32(_) => ElemType::F32,
            TensorData::F16(_) => ElemType::F16,
            TensorData::Bf16(_) => ElemType::Bf16,
            TensorData::Qs8(_) => ElemType::Qs8,
        }
    }

    /// Raw value of element `i`, widened exactly to f64 (qs8: the integer, not dequantized).
    pub fn get_f64(&self, i: usize) -> f64 {
        match self {
            TensorData::F32(v) => v[i] as f64,
            TensorData::F16(v) => v[i].to_f64(),
            TensorData::Bf16(v) => v[i].to_f64(),
            TensorData::Qs8(v) => v[i] as f64,
        }
    }

    /// Raw bit pattern of element `i` (for reports and inline case files).
    pub fn bits(&self, i: usize) -> u32 {
        match self {
            TensorData::F32(v) => v[i].to_bits(),
            TensorData::F16(v) => v[i].to_bits() as u32,
            TensorData::Bf16(v) => v[i].to_bits() as u32,
            TensorData::Qs8(v) => v[i] as u8 as u32,
        }
    }

    /// Values rounded once each to `dtype` (round to nearest even). For qs8, `quant` gives
    /// the real-to-int8 mapping ([`QuantParams::quantize`]); without it the values are taken
    /// as raw integers (rounded half to even, saturated to int8).
    pub fn from_f64(dtype: ElemType, values: &[f64], quant: Option<QuantParams>) -> TensorData {
        match dtype {
            ElemType::F32 => TensorData::F32(values.iter().map(|&x| dtype::f32_from_f64(x)).collect()),
            ElemType::F16 => TensorData::F16(values.iter().map(|&x| dtype::f16_from_f64(x)).collect()),
            ElemType::Bf16 => TensorData::Bf16(values.iter().map(|&x| dtype::bf16_from_f64(x)).collect()),
            ElemType::Qs8 => TensorData::Qs8(
                values
                    .iter()
                    .map(|&x| match quant {
                        Some(q) => q.quantize(x),
                        // NaN -> 0 here: raw integers have no NaN convention to follow.
                        None => x.round_ties_even().clamp(-128.0, 127.0) as i8,
                    })
                    .collect(),
            ),
        }
    }

    /// Gathers `self[idx[k]]` for every k, keeping the element type.
    pub fn gather(&self, idx: &[usize]) -> TensorData {
        match self {
            TensorData::F32(v) => TensorData::F32(idx.iter().map(|&i| v[i]).collect()),
            TensorData::F16(v) => TensorData::F16(idx.iter().map(|&i| v[i]).collect()),
            TensorData::Bf16(v) => TensorData::Bf16(idx.iter().map(|&i| v[i]).collect()),
            TensorData::Qs8(v) => TensorData::Qs8(idx.iter().map(|&i| v[i]).collect()),
        }
    }
}

/// A concrete tensor. `shape` is logical (NCHW for 4-D); `data` is laid out in `format`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub format: MemoryFormat,
    /// Present iff the element type is qs8.
    pub quant: Option<QuantParams>,
    pub data: TensorData,
}

/// For every index of `shape` in row-major order, `sum_k idx[k] * strides[k]`; an empty
/// shape has exactly one index (offset 0). The offset is carried along (an odometer), not
/// recomputed per element.
pub(crate) fn strided_indices(shape: &[usize], strides: &[usize]) -> Vec<usize> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    let mut off = 0usize;
    for _ in 0..n {
        out.push(off);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            off += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            off -= strides[d] * idx[d];
            idx[d] = 0;
        }
    }
    out
}

impl Tensor {
    pub fn new(shape: Vec<usize>, data: TensorData) -> Self {
        Tensor { shape, format: MemoryFormat::Contiguous, quant: None, data }
    }

    pub fn f32(shape: &[usize], values: Vec<f32>) -> Self {
        Tensor::new(shape.to_vec(), TensorData::F32(values))
    }

    pub fn qs8(shape: &[usize], values: Vec<i8>, q: QuantParams) -> Self {
        Tensor {
            shape: shape.to_vec(),
            format: MemoryFormat::Contiguous,
            quant: Some(q),
            data: TensorData::Qs8(values),
        }
    }

    /// A contiguous tensor of `dtype` from real values, each rounded once (qs8: quantized
    /// with `quant`, see [`TensorData::from_f64`]).
    pub fn from_f64(shape: &[usize], dtype: ElemType, quant: Option<QuantParams>, values: &[f64]) -> Self {
        Tensor {
            shape: shape.to_vec(),
            format: MemoryFormat::Contiguous,
            quant: if dtype == ElemType::Qs8 { quant } else { None },
            data: TensorData::from_f64(dtype, values, quant),
        }
    }

    pub fn dtype(&self) -> ElemType {
        self.data.dtype()
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Physical index of every element, listed in logical row-major order.
    pub fn logical_to_physical(shape: &[usize], format: MemoryFormat) -> Vec<usize> {
        let rank = shape.len();
        let order = if format.required_rank() == Some(rank) { format.dim_order(rank) } else { (0..rank).collect() };
        // Stride of each logical dim in the physical layout.
        let mut strides = vec![0usize; rank];
        let mut s = 1usize;
        for &d in order.iter().rev() {
            strides[d] = s;
            s *= shape[d];
        }
        strided_indices(shape, &strides)
    }

    /// The same values stored in another memory format.
    pub fn to_format(&self, format: MemoryFormat) -> Tensor {
        if format == self.format {
            return self.clone();
        }
        let logical = self.to_contiguous();
        let phys = Self::logical_to_physical(&self.shape, format);
        // phys[logical_i] = physical position; invert to gather.
        let mut inv = vec![0usize; phys.len()];
        for (l, &p) in phys.iter().enumerate() {
            inv[p] = l;
        }
        Tensor { shape: self.shape.clone(), format, quant: self.quant, data: logical.data.gather(&inv) }
    }

    /// The same values in contiguous (logical row-major) order.
    pub fn to_contiguous(&self) -> Tensor {
        if self.format == MemoryFormat::Contiguous {
            return self.clone();
        }
        let phys = Self::logical_to_physical(&self.shape, self.format);
        Tensor {
            shape: self.shape.clone(),
            format: MemoryFormat::Contiguous,
            quant: self.quant,
            data: self.data.gather(&phys),
        }
    }

    /// Values in logical order as real numbers (qs8 dequantized exactly in f64).
    pub fn values_f64(&self) -> Vec<f64> {
        // Converted in physical order with one match per tensor (this is the oracles' hot
        // path), then gathered into logical order when the format is not contiguous.
        let phys: Vec<f64> = match (&self.data, self.quant) {
            (TensorData::F32(v), _) => v.iter().map(|&x| x as f64).collect(),
            (TensorData::F16(v), _) => v.iter().map(|x| x.to_f64()).collect(),
            (TensorData::Bf16(v), _) => v.iter().map(|x| x.to_f64()).collect(),
            (TensorData::Qs8(v), Some(q)) => {
                v.iter().map(|&x| (x as f64 - q.zero_point as f64) * q.scale as f64).collect()
            }
            (TensorData::Qs8(v), None) => v.iter().map(|&x| x as f64).collect(),
        };
        if self.format == MemoryFormat::Contiguous || phys.is_empty() {
            return phys;
        }
        Self::logical_to_physical(&self.shape, self.format).iter().map(|&p| phys[p]).collect()
    }
}
