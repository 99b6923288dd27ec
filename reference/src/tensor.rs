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
                        None => x.round_ties_even().clamp(-128.0, 127.0) as i8,
                    })
                    .collect(),
            ),
        }
    }

    /// `self[o]` for every offset `o` of `shape` under `strides` (row-major order), keeping
    /// the element type.
    pub(crate) fn gather_strided(&self, shape: &[usize], strides: &[usize]) -> TensorData {
        match self {
            TensorData::F32(v) => TensorData::F32(gather_strided(v, shape, strides)),
            TensorData::F16(v) => TensorData::F16(gather_strided(v, shape, strides)),
            TensorData::Bf16(v) => TensorData::Bf16(gather_strided(v, shape, strides)),
            TensorData::Qs8(v) => TensorData::Qs8(gather_strided(v, shape, strides)),
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

/// Calls `f(a, b)` for every index of `shape` in row-major order, where `a` and `b` are the
/// index's offsets under `sa` and `sb` (`sum_k idx[k] * s[k]`); an empty shape has exactly one
/// index (offsets 0). The offsets are carried along (an odometer over the outer dims, a plain
/// loop over the last), not recomputed per element, and no index list is built.
pub(crate) fn for_each_offset2(shape: &[usize], sa: &[usize], sb: &[usize], mut f: impl FnMut(usize, usize)) {
    for_each_row2(shape, sa, sb, |a, b, len, step_a, step_b| {
        for k in 0..len {
            f(a + k * step_a, b + k * step_b);
        }
    });
}

/// [`for_each_offset2`] one row at a time: `f(a, b, len, step_a, step_b)` stands for the
/// `len` offsets `(a + k * step_a, b + k * step_b)`, in order. Size-1 dims are dropped and
/// adjacent dims that both stride sets step through as one are merged first (the same offsets
/// in the same order, over fewer and longer rows).
pub(crate) fn for_each_row2(
    shape: &[usize],
    sa: &[usize],
    sb: &[usize],
    f: impl FnMut(usize, usize, usize, usize, usize),
) {
    if shape.contains(&0) {
        return;
    }
    // (size, stride a, stride b) of each merged dim; a shape of many dims (never one of a
    // valid graph) is walked as it is.
    if shape.len() > MERGED {
        let dims: Vec<_> = shape.iter().zip(sa).zip(sb).map(|((&n, &x), &y)| (n, x, y)).collect();
        return walk_rows(&dims, f);
    }
    let mut dims = [(1usize, 0usize, 0usize); MERGED];
    let mut rank = 0usize;
    for ((&n, &x), &y) in shape.iter().zip(sa).zip(sb) {
        if n == 1 {
            continue;
        }
        match rank.checked_sub(1).map(|r| &mut dims[r]) {
            Some(last) if last.1 == x * n && last.2 == y * n => *last = (last.0 * n, x, y),
            _ => {
                dims[rank] = (n, x, y);
                rank += 1;
            }
        }
    }
    walk_rows(&dims[..rank], f)
}

/// Dims [`for_each_row2`] merges and walks without an allocation.
const MERGED: usize = 8;

/// The odometer of [`for_each_row2`] over `dims` (size, stride a, stride b).
fn walk_rows(dims: &[(usize, usize, usize)], mut f: impl FnMut(usize, usize, usize, usize, usize)) {
    let Some(last) = dims.len().checked_sub(1) else {
        f(0, 0, 1, 0, 0);
        return;
    };
    let (len, step_a, step_b) = dims[last];
    let mut idx = [0usize; MERGED];
    let mut idx_vec = vec![];
    let idx: &mut [usize] = if last <= idx.len() {
        &mut idx[..last]
    } else {
        idx_vec.resize(last, 0);
        &mut idx_vec
    };
    let (mut base_a, mut base_b) = (0usize, 0usize);
    loop {
        f(base_a, base_b, len, step_a, step_b);
        // Next index of the outer dims; done when every one wrapped around.
        let mut d = last;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            let (n, x, y) = dims[d];
            idx[d] += 1;
            base_a += x;
            base_b += y;
            if idx[d] < n {
                break;
            }
            base_a -= x * n;
            base_b -= y * n;
            idx[d] = 0;
        }
    }
}

/// [`for_each_offset2`] with one set of strides.
pub(crate) fn for_each_offset(shape: &[usize], strides: &[usize], mut f: impl FnMut(usize)) {
    for_each_offset2(shape, strides, strides, |a, _| f(a));
}

/// For every index of `shape` in row-major order, `sum_k idx[k] * strides[k]`; an empty
/// shape has exactly one index (offset 0).
pub(crate) fn strided_indices(shape: &[usize], strides: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(shape.iter().product());
    for_each_offset(shape, strides, |o| out.push(o));
    out
}

/// `v[o]` for every offset `o` of `shape` under `strides`, in row-major order.
fn gather_strided<T: Copy>(v: &[T], shape: &[usize], strides: &[usize]) -> Vec<T> {
    let mut out = Vec::with_capacity(shape.iter().product());
    for_each_row2(shape, strides, strides, |o, _, len, step, _| match step {
        1 => out.extend_from_slice(&v[o..o + len]),
        _ => out.extend((0..len).map(|k| v[o + k * step])),
    });
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

    /// The order in which `format` stores the logical dims of a rank-`rank` tensor
    /// (`physical[i] = logical dim order[i]`); a format for another rank stores them in order.
    fn storage_order(format: MemoryFormat, rank: usize) -> Vec<usize> {
        if format.required_rank() == Some(rank) {
            format.dim_order(rank)
        } else {
            (0..rank).collect()
        }
    }

    /// Stride of each logical dim of `shape` in the physical layout of `format`.
    fn physical_strides(shape: &[usize], format: MemoryFormat) -> Vec<usize> {
        let mut strides = vec![0usize; shape.len()];
        let mut s = 1usize;
        for &d in Self::storage_order(format, shape.len()).iter().rev() {
            strides[d] = s;
            s *= shape[d];
        }
        strides
    }

    /// The same values stored in another memory format.
    pub fn to_format(&self, format: MemoryFormat) -> Tensor {
        if format == self.format {
            return self.clone();
        }
        // Walk the target's physical order (its dims in storage order) and read each element
        // where this tensor's format stores it.
        let src = Self::physical_strides(&self.shape, self.format);
        let order = Self::storage_order(format, self.rank());
        let shape: Vec<usize> = order.iter().map(|&d| self.shape[d]).collect();
        let strides: Vec<usize> = order.iter().map(|&d| src[d]).collect();
        Tensor {
            shape: self.shape.clone(),
            format,
            quant: self.quant,
            data: self.data.gather_strided(&shape, &strides),
        }
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

    /// Values in logical order as real numbers (qs8 dequantized exactly in f64).
    pub fn values_f64(&self) -> Vec<f64> {
        // One match per tensor (this is the oracles' hot path); a non-contiguous tensor is
        // read straight from where its format stores each logical element.
        match (&self.data, self.quant) {
            (TensorData::F32(v), _) => self.widen(v, |x| x as f64),
            // half's slice conversion checks the CPU's features once per slice, not per value.
            (TensorData::F16(v), _) if self.format == MemoryFormat::Contiguous => v.to_f64_vec(),
            (TensorData::F16(v), _) => self.widen(v, |x| x.to_f64()),
            (TensorData::Bf16(v), _) => self.widen(v, dtype::bf16_to_f64),
            (TensorData::Qs8(v), Some(q)) => {
                let (zp, scale) = (q.zero_point as f64, q.scale as f64);
                self.widen(v, |x| (x as f64 - zp) * scale)
            }
            (TensorData::Qs8(v), None) => self.widen(v, |x| x as f64),
        }
    }

    /// `f` of every element of `v` (this tensor's data), in logical order.
    fn widen<T: Copy>(&self, v: &[T], f: impl Fn(T) -> f64) -> Vec<f64> {
        if self.format == MemoryFormat::Contiguous || v.is_empty() {
            return v.iter().map(|&x| f(x)).collect();
        }
        let mut out = Vec::with_capacity(v.len());
        let strides = Self::physical_strides(&self.shape, self.format);
        for_each_row2(&self.shape, &strides, &strides, |o, _, len, step, _| {
            out.extend((0..len).map(|k| f(v[o + k * step])));
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every index of `shape` in row-major order, with its offsets computed from scratch.
    fn naive(shape: &[usize], sa: &[usize], sb: &[usize]) -> Vec<(usize, usize)> {
        let n: usize = shape.iter().product();
        (0..n)
            .map(|mut flat| {
                let (mut a, mut b) = (0, 0);
                for d in (0..shape.len()).rev() {
                    let i = flat % shape[d];
                    flat /= shape[d];
                    a += i * sa[d];
                    b += i * sb[d];
                }
                (a, b)
            })
            .collect()
    }

    #[test]
    fn merged_rows_visit_the_offsets_of_the_plain_walk_in_order() {
        let cases: [(&[usize], &[usize], &[usize]); 7] = [
            (&[], &[], &[]),
            (&[1, 1], &[5, 3], &[0, 0]),
            (&[2, 3, 4], &[12, 4, 1], &[0, 1, 0]),
            (&[2, 1, 3, 4], &[12, 99, 1, 3], &[12, 0, 4, 1]),
            (&[3, 2, 2], &[0, 0, 1], &[4, 2, 1]),
            (&[2, 0, 3], &[3, 3, 1], &[3, 3, 1]),
            (&[2, 1, 2, 1, 2, 1, 2, 1, 2, 2], &[256, 9, 128, 9, 64, 9, 32, 9, 1, 16], &[1; 10]),
        ];
        for (shape, sa, sb) in cases {
            let mut seen = vec![];
            for_each_offset2(shape, sa, sb, |a, b| seen.push((a, b)));
            assert_eq!(seen, naive(shape, sa, sb), "shape {shape:?} strides {sa:?} {sb:?}");
        }
    }
}
