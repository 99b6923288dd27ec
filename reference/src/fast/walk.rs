//! Strided walks of the fast evaluator and its memory-format conversions: the offsets of
//! [`crate::tensor::offset`] over every index, carried along instead of recomputed, with
//! size-1 dims dropped and dims both stride sets step through as one merged (the same
//! offsets in the same order, over fewer and longer rows).

use crate::dtype::{self, MemoryFormat};
use crate::tensor::{physical_strides, Tensor, TensorData};
use half::slice::HalfFloatSliceExt;

/// Calls `f(a, b)` for every index of `shape` in row-major order, where `a` and `b` are the
/// index's offsets under `sa` and `sb` (`sum_k idx[k] * s[k]`); an empty shape has exactly one
/// index (offsets 0). The offsets are carried along (an odometer over the outer dims, a plain
/// loop over the last), not recomputed per element, and no index list is built.
pub(super) fn for_each_offset2(shape: &[usize], sa: &[usize], sb: &[usize], mut f: impl FnMut(usize, usize)) {
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
pub(super) fn for_each_row2(
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
pub(super) fn for_each_offset(shape: &[usize], strides: &[usize], mut f: impl FnMut(usize)) {
    for_each_offset2(shape, strides, strides, |a, _| f(a));
}

/// For every index of `shape` in row-major order, `sum_k idx[k] * strides[k]`; an empty
/// shape has exactly one index (offset 0).
pub(super) fn strided_indices(shape: &[usize], strides: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(shape.iter().product());
    for_each_offset(shape, strides, |o| out.push(o));
    out
}

/// `v[o]` for every offset `o` of `shape` under `strides`, in row-major order.
pub(super) fn gather_strided<T: Copy>(v: &[T], shape: &[usize], strides: &[usize]) -> Vec<T> {
    let mut out = Vec::with_capacity(shape.iter().product());
    for_each_row2(shape, strides, strides, |o, _, len, step, _| match step {
        1 => out.extend_from_slice(&v[o..o + len]),
        _ => out.extend((0..len).map(|k| v[o + k * step])),
    });
    out
}

/// `data[o]` for every offset `o` of `shape` under `strides` (row-major order), keeping the
/// element type.
pub(super) fn gather_data(data: &TensorData, shape: &[usize], strides: &[usize]) -> TensorData {
    match data {
        TensorData::F32(v) => TensorData::F32(gather_strided(v, shape, strides)),
        TensorData::F16(v) => TensorData::F16(gather_strided(v, shape, strides)),
        TensorData::Bf16(v) => TensorData::Bf16(gather_strided(v, shape, strides)),
        TensorData::Qs8(v) => TensorData::Qs8(gather_strided(v, shape, strides)),
    }
}

/// [`Tensor::to_format`]: walks the target's physical order (its dims in storage order) and
/// reads each element where `t`'s format stores it, a row at a time.
pub(crate) fn to_format(t: &Tensor, format: MemoryFormat) -> Tensor {
    if format == t.format {
        return t.clone();
    }
    let src = physical_strides(&t.shape, t.format);
    let order = storage_order(format, t.rank());
    let shape: Vec<usize> = order.iter().map(|&d| t.shape[d]).collect();
    let strides: Vec<usize> = order.iter().map(|&d| src[d]).collect();
    Tensor { shape: t.shape.clone(), format, quant: t.quant, data: gather_data(&t.data, &shape, &strides) }
}

/// [`to_format`] that moves the data when the format already matches.
pub(super) fn into_format(t: Tensor, format: MemoryFormat) -> Tensor {
    if format == t.format {
        t
    } else {
        to_format(&t, format)
    }
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

/// [`Tensor::values_f64`], one match per tensor; a non-contiguous tensor is read straight
/// from where its format stores each logical element, a row at a time.
pub(super) fn values_f64(t: &Tensor) -> Vec<f64> {
    match (&t.data, t.quant) {
        (TensorData::F32(v), _) => widen(t, v, |x| x as f64),
        // half's slice conversion checks the CPU's features once per slice, not per value.
        (TensorData::F16(v), _) if t.format == MemoryFormat::Contiguous => v.to_f64_vec(),
        (TensorData::F16(v), _) => widen(t, v, |x| x.to_f64()),
        (TensorData::Bf16(v), _) => widen(t, v, dtype::bf16_to_f64),
        (TensorData::Qs8(v), Some(q)) => {
            let (zp, scale) = (q.zero_point as f64, q.scale as f64);
            widen(t, v, |x| (x as f64 - zp) * scale)
        }
        (TensorData::Qs8(v), None) => widen(t, v, |x| x as f64),
    }
}

/// `f` of every element of `v` (`t`'s data), in logical order.
fn widen<T: Copy>(t: &Tensor, v: &[T], f: impl Fn(T) -> f64) -> Vec<f64> {
    if t.format == MemoryFormat::Contiguous || v.is_empty() {
        return v.iter().map(|&x| f(x)).collect();
    }
    let mut out = Vec::with_capacity(v.len());
    let strides = physical_strides(&t.shape, t.format);
    for_each_row2(&t.shape, &strides, &strides, |o, _, len, step, _| {
        out.extend((0..len).map(|k| f(v[o + k * step])));
    });
    out
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
