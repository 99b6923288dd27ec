//! Elementwise ops of the fast evaluator: one loop per op, and broadcasting a row at a time
//! over merged dims.

use super::round::tensor_from_f64;
use super::walk::{for_each_offset2, values_f64};
use crate::dtype::{ElemType, MemoryFormat};
use crate::graph::BinaryOp;
use crate::tensor::{row_major_strides, Tensor, TensorData};
use half::slice::HalfFloatSliceExt;
use half::vec::HalfFloatVecExt;
use std::borrow::Cow;

/// Applies `f` to every value in f64 and rounds once to `dtype`.
#[inline(never)]
pub(super) fn map(x: &Tensor, dtype: ElemType, f: impl Fn(f64) -> f64) -> Tensor {
    let v: Vec<f64> = values_f64(x).into_iter().map(f).collect();
    tensor_from_f64(&x.shape, dtype, None, &v)
}

/// [`map`] in f32 for a square or a clamp of a contiguous float tensor of `dtype`: the
/// square of an f32, fp16 or bf16 value is exact in f64 and in f32 for the halves (22 and 16
/// bits) and a single f32 operation for f32, and a clamp selects a value, so rounding the
/// f32 result once is the f64 path's one rounding. `None` for other inputs.
pub(super) fn map_f32(x: &Tensor, dtype: ElemType, f: impl Fn(f32) -> f32) -> Option<Tensor> {
    let out = f32_values(x, dtype)?.iter().map(|&v| f(v)).collect();
    Some(float_tensor(&x.shape, dtype, out))
}

/// The values of `t` in f32 when it is a contiguous float tensor of `dtype` (bulk-converted
/// for the halves), else `None`.
fn f32_values(t: &Tensor, dtype: ElemType) -> Option<Cow<'_, [f32]>> {
    match (&t.data, dtype) {
        _ if t.format != MemoryFormat::Contiguous => None,
        (TensorData::F32(v), ElemType::F32) => Some(Cow::Borrowed(v)),
        (TensorData::F16(v), ElemType::F16) => Some(Cow::Owned(v.to_f32_vec())),
        (TensorData::Bf16(v), ElemType::Bf16) => Some(Cow::Owned(v.to_f32_vec())),
        _ => None,
    }
}

/// A contiguous tensor of float `dtype` from f32 values, each rounded once (bulk for the
/// halves).
fn float_tensor(shape: &[usize], dtype: ElemType, v: Vec<f32>) -> Tensor {
    let data = match dtype {
        ElemType::F16 => TensorData::F16(Vec::from_f32_slice(&v)),
        ElemType::Bf16 => TensorData::Bf16(Vec::from_f32_slice(&v)),
        _ => TensorData::F32(v),
    };
    Tensor { shape: shape.to_vec(), format: MemoryFormat::Contiguous, quant: None, data }
}

/// Elementwise with numpy broadcasting (right-aligned; size-1 dims repeat).
#[inline(never)]
pub(super) fn binary(op: BinaryOp, a: &Tensor, b: &Tensor, out_shape: &[usize], dtype: ElemType) -> Tensor {
    // Strides of an operand over the output's dims: 0 where it repeats.
    let strides = |t: &Tensor| -> Vec<usize> {
        let st = row_major_strides(&t.shape);
        let lead = out_shape.len() - t.rank();
        (0..out_shape.len()).map(|k| if k < lead || t.shape[k - lead] == 1 { 0 } else { st[k - lead] }).collect()
    };
    let (sa, sb) = (strides(a), strides(b));
    let same = a.shape == out_shape && b.shape == out_shape;
    // Float operands of the output's type: in f32. The f64 result of `+ - * /` on two
    // values of a format of p bits, rounded to that format, is the f32 operation's result
    // rounded to it: f64 and f32 have at least 2p + 2 bits for p = 24 and p = 11, 8
    // respectively, so rounding twice gives the once-rounded value (Figueroa 1995), and a
    // NaN operand propagates the same way. Bulk conversions, one loop per op.
    if let (Some(x), Some(y)) = (f32_values(a, dtype), f32_values(b, dtype)) {
        let out = match op {
            BinaryOp::Add => broadcast(out_shape, same, &sa, &sb, &x, &y, |x, y| x + y),
            BinaryOp::Sub => broadcast(out_shape, same, &sa, &sb, &x, &y, |x, y| x - y),
            BinaryOp::Mul => broadcast(out_shape, same, &sa, &sb, &x, &y, |x, y| x * y),
            BinaryOp::Div => broadcast(out_shape, same, &sa, &sb, &x, &y, |x, y| x / y),
        };
        return float_tensor(out_shape, dtype, out);
    }
    let (av, bv) = (values_f64(a), values_f64(b));
    // One loop per op (generic `f`), so the op is not matched per element; operands of the
    // output's shape are simply zipped.
    let out = match op {
        BinaryOp::Add => broadcast(out_shape, same, &sa, &sb, &av, &bv, |x, y| x + y),
        BinaryOp::Sub => broadcast(out_shape, same, &sa, &sb, &av, &bv, |x, y| x - y),
        BinaryOp::Mul => broadcast(out_shape, same, &sa, &sb, &av, &bv, |x, y| x * y),
        BinaryOp::Div => broadcast(out_shape, same, &sa, &sb, &av, &bv, |x, y| x / y),
    };
    tensor_from_f64(out_shape, dtype, None, &out)
}

/// `f(a[i], b[j])` for every output element, `i` and `j` its offsets under `sa` and `sb`;
/// `same`: both operands have the output's shape (their offsets are the element's index).
fn broadcast<T: Copy>(
    shape: &[usize],
    same: bool,
    sa: &[usize],
    sb: &[usize],
    a: &[T],
    b: &[T],
    f: impl Fn(T, T) -> T,
) -> Vec<T> {
    if same {
        return a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect();
    }
    let mut out = Vec::with_capacity(shape.iter().product());
    let (shape, sa, sb) = coalesce(shape, sa, sb);
    let Some(last) = shape.len().checked_sub(1) else {
        return vec![f(a[0], b[0])];
    };
    // One row (the last dim) at a time; in a row an operand steps by 1 or repeats (0).
    let len = shape[last];
    for_each_offset2(&shape[..last], &sa[..last], &sb[..last], |i, j| match (sa[last], sb[last]) {
        (1, 1) => out.extend(a[i..i + len].iter().zip(&b[j..j + len]).map(|(&x, &y)| f(x, y))),
        (1, 0) => out.extend(a[i..i + len].iter().map(|&x| f(x, b[j]))),
        (0, 1) => out.extend(b[j..j + len].iter().map(|&y| f(a[i], y))),
        (da, db) => out.extend((0..len).map(|k| f(a[i + k * da], b[j + k * db]))),
    });
    out
}

/// `shape` and two stride sets over it, with the size-1 dims dropped and each pair of
/// adjacent dims that both stride sets step through as one (`s[d] == s[d + 1] * shape[d + 1]`)
/// merged: the same offsets in the same order, over fewer and longer dims.
fn coalesce(shape: &[usize], sa: &[usize], sb: &[usize]) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let (mut dims, mut ta, mut tb) = (vec![], vec![], vec![]);
    for ((&n, &x), &y) in shape.iter().zip(sa).zip(sb) {
        if n == 1 {
            continue;
        }
        match (dims.last_mut(), ta.last_mut(), tb.last_mut()) {
            (Some(pn), Some(px), Some(py)) if *px == x * n && *py == y * n => {
                (*pn, *px, *py) = (*pn * n, x, y);
            }
            _ => {
                dims.push(n);
                ta.push(x);
                tb.push(y);
            }
        }
    }
    (dims, ta, tb)
}
