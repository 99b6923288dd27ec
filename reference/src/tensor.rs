//! Concrete tensors: shape (logical, NCHW semantics), memory format, element data in
//! physical order.

use crate::dtype::{self, ElemType, MemoryFormat, QuantParams};
use half::slice::HalfFloatSliceExt;
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
                        None => dtype::round_half_even(x).clamp(-128.0, 127.0) as i8,
                    })
                    .collect(),
            ),
        }
    }

    /// The elements at `offsets`, in that order (bits unchanged).
    pub(crate) fn gather(&self, offsets: &[usize]) -> TensorData {
        fn pick<T: Copy>(v: &[T], offsets: &[usize]) -> Vec<T> {
            offsets.iter().map(|&o| v[o]).collect()
        }
        match self {
            TensorData::F32(v) => TensorData::F32(pick(v, offsets)),
            TensorData::F16(v) => TensorData::F16(pick(v, offsets)),
            TensorData::Bf16(v) => TensorData::Bf16(pick(v, offsets)),
            TensorData::Qs8(v) => TensorData::Qs8(pick(v, offsets)),
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

    /// Stride of each logical dim of this tensor's shape where its format stores it.
    pub(crate) fn physical_strides(&self) -> Vec<usize> {
        physical_strides(&self.shape, self.format)
    }

    /// The same values stored in another memory format: every element moves from where this
    /// tensor's format stores its logical index to where `format` stores it (bits unchanged).
    pub fn to_format(&self, format: MemoryFormat) -> Tensor {
        if format == self.format {
            return self.clone();
        }
        let from = offsets(&self.shape, &physical_strides(&self.shape, self.format));
        let to = offsets(&self.shape, &physical_strides(&self.shape, format));
        let data = match &self.data {
            TensorData::F32(v) => TensorData::F32(move_elements(v, &from, &to)),
            TensorData::F16(v) => TensorData::F16(move_elements(v, &from, &to)),
            TensorData::Bf16(v) => TensorData::Bf16(move_elements(v, &from, &to)),
            TensorData::Qs8(v) => TensorData::Qs8(move_elements(v, &from, &to)),
        };
        Tensor { shape: self.shape.clone(), format, quant: self.quant, data }
    }

    /// [`Tensor::to_format`] that moves the data when the format already matches.
    pub fn into_format(self, format: MemoryFormat) -> Tensor {
        if format == self.format {
            self
        } else {
            self.to_format(format)
        }
    }

    /// The same values in contiguous (logical row-major) order.
    pub fn to_contiguous(&self) -> Tensor {
        self.to_format(MemoryFormat::Contiguous)
    }

    /// Values in logical (row-major) order as real numbers, each widened exactly to f64;
    /// qs8 dequantized exactly ([`QuantParams::dequantize`]; raw integers without params).
    pub fn values_f64(&self) -> Vec<f64> {
        // Logical element k is stored at `at[k]` (at k itself when contiguous).
        let at = (self.format != MemoryFormat::Contiguous).then(|| offsets(&self.shape, &self.physical_strides()));
        fn read<T: Copy>(v: &[T], at: Option<&[usize]>, f: impl Fn(T) -> f64) -> Vec<f64> {
            match at {
                None => v.iter().map(|&x| f(x)).collect(),
                Some(at) => at.iter().map(|&o| f(v[o])).collect(),
            }
        }
        let at = at.as_deref();
        match (&self.data, self.quant) {
            (TensorData::F32(v), _) => read(v, at, f64::from),
            // half's slice conversion checks the CPU's features once per slice, not per value.
            (TensorData::F16(v), _) if at.is_none() => v.to_f64_vec(),
            (TensorData::F16(v), _) => read(v, at, f16::to_f64),
            (TensorData::Bf16(v), _) => read(v, at, dtype::bf16_to_f64),
            (TensorData::Qs8(v), Some(q)) => read(v, at, |x| q.dequantize(x)),
            (TensorData::Qs8(v), None) => read(v, at, f64::from),
        }
    }
}

/// Row-major (contiguous) strides of a logical shape: the last dim has stride 1.
pub(crate) fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

/// Stride of each logical dim of `shape` where `format` stores it: `format`'s dim order
/// (NHWC for channels_last, NDHWC for channels_last_3d) laid out row-major. A format made for
/// another rank stores the dims in order.
pub(crate) fn physical_strides(shape: &[usize], format: MemoryFormat) -> Vec<usize> {
    let order = if format.required_rank() == Some(shape.len()) {
        format.dim_order(shape.len())
    } else {
        (0..shape.len()).collect()
    };
    let stored_shape: Vec<usize> = order.iter().map(|&d| shape[d]).collect();
    let stored_strides = row_major_strides(&stored_shape);
    let mut strides = vec![0; shape.len()];
    for (k, &d) in order.iter().enumerate() {
        strides[d] = stored_strides[k];
    }
    strides
}

/// Where index `idx` lives under `strides`: `sum_k idx[k] * strides[k]`.
pub(crate) fn offset(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(&i, &s)| i * s).sum()
}

/// Steps `idx` to the next index of `shape` in row-major order (the last dim fastest);
/// returns false, with `idx` back at all zeros, after the last one.
pub(crate) fn next_index(idx: &mut [usize], shape: &[usize]) -> bool {
    for d in (0..shape.len()).rev() {
        idx[d] += 1;
        if idx[d] < shape[d] {
            return true;
        }
        idx[d] = 0;
    }
    false
}

/// [`offset`] of every index of `shape` under `strides`, in row-major order. The offset is
/// carried along as the index steps ([`next_index`]): the last dim's stride added, a dim that
/// wraps around steps back by its size times its stride.
pub(crate) fn offsets(shape: &[usize], strides: &[usize]) -> Vec<usize> {
    let numel: usize = shape.iter().product();
    let mut out = Vec::with_capacity(numel);
    let mut idx = vec![0; shape.len()];
    let mut at = 0;
    for _ in 0..numel {
        out.push(at);
        for ((i, &n), &s) in idx.iter_mut().zip(shape).zip(strides).rev() {
            *i += 1;
            at += s;
            if *i < n {
                break;
            }
            *i = 0;
            at -= n * s;
        }
    }
    out
}

/// `v` with element k moved from offset `from[k]` to offset `to[k]` (the offsets of the same
/// logical indices under two layouts).
fn move_elements<T: Copy>(v: &[T], from: &[usize], to: &[usize]) -> Vec<T> {
    let mut out = v.to_vec();
    for (&f, &t) in from.iter().zip(to) {
        out[t] = v[f];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_last_strides_are_nhwc() {
        assert_eq!(physical_strides(&[2, 3, 4, 5], MemoryFormat::ChannelsLast), vec![60, 1, 15, 3]);
        assert_eq!(physical_strides(&[2, 3, 4, 5, 6], MemoryFormat::ChannelsLast3d), vec![360, 1, 90, 18, 3]);
        assert_eq!(physical_strides(&[2, 3, 4], MemoryFormat::ChannelsLast), vec![12, 4, 1]);
        assert_eq!(physical_strides(&[], MemoryFormat::Contiguous), Vec::<usize>::new());
    }

    #[test]
    fn next_index_walks_row_major_and_wraps() {
        let shape = [2, 1, 3];
        let mut idx = [0; 3];
        let mut seen = vec![idx];
        while next_index(&mut idx, &shape) {
            seen.push(idx);
        }
        assert_eq!(seen, [[0, 0, 0], [0, 0, 1], [0, 0, 2], [1, 0, 0], [1, 0, 1], [1, 0, 2]]);
        assert_eq!(idx, [0, 0, 0]);
        assert!(!next_index(&mut [], &[]));
    }

    #[test]
    fn carried_offsets_equal_offsets_computed_per_index() {
        let cases: [(&[usize], &[usize]); 5] = [
            (&[], &[]),
            (&[3], &[2]),
            (&[2, 3, 4], &[12, 1, 3]),
            (&[2, 1, 3, 2], &[0, 5, 1, 9]),
            (&[2, 0, 3], &[3, 3, 1]),
        ];
        for (shape, strides) in cases {
            let mut want = vec![];
            let mut idx = vec![0; shape.len()];
            for _ in 0..shape.iter().product::<usize>() {
                want.push(offset(&idx, strides));
                next_index(&mut idx, shape);
            }
            assert_eq!(offsets(shape, strides), want, "shape {shape:?} strides {strides:?}");
        }
    }

    #[test]
    fn to_format_moves_each_element_to_its_nhwc_place() {
        // x[n, c, h, w] = 1000 n + 100 c + 10 h + w, so each value names its index.
        let shape = [2, 3, 2, 2];
        let mut v = vec![];
        for n in 0..2 {
            for c in 0..3 {
                for h in 0..2 {
                    for w in 0..2 {
                        v.push((1000 * n + 100 * c + 10 * h + w) as f32);
                    }
                }
            }
        }
        let cl = Tensor::f32(&shape, v.clone()).to_format(MemoryFormat::ChannelsLast);
        let TensorData::F32(stored) = &cl.data else { panic!("f32") };
        // NHWC: the channel varies fastest.
        assert_eq!(stored[..6], [0.0, 100.0, 200.0, 1.0, 101.0, 201.0]);
        assert_eq!(stored[12..15], [1000.0, 1100.0, 1200.0]);
        assert_eq!(cl.values_f64(), v.iter().map(|&x| x as f64).collect::<Vec<_>>());
        assert_eq!(cl.to_contiguous(), Tensor::f32(&shape, v));
    }
}
