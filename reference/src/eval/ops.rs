//! One function per op of the graph language, each the PyTorch definition quoted on it,
//! written as a loop over the output elements in row-major order.
//!
//! Inputs may be stored in any memory format: every op reads logical values (row-major
//! order, [`Tensor::values_f64`]) and returns a contiguous tensor; the interpreter then
//! stores it in the format of the node's spec. Shapes, dtypes and parameters were checked by
//! shape inference ([`crate::graph::infer`]) before any of these runs.

use super::sum::Acc;
use crate::dtype::{round_f64, ElemType, QuantParams};
use crate::graph::{mean_axes, normalize_dims, BinaryOp, Conv2dParams, GraphErrorKind};
use crate::tensor::{next_index, offset, row_major_strides, Tensor, TensorData};

/// `aten::mean.dim(self, dim, keepdim=False, *, dtype=None)`, as `torch.mean` documents it:
/// "Returns the mean value of each row of the input tensor in the given dimension dim. If dim
/// is a list of dimensions, reduce over all of them." An empty `dims` reduces every dim.
/// `dtype`: "If specified, the input tensor is casted to dtype before the operation is
/// performed." `keepdim` keeps the reduced dims with size 1: it changes the output's shape,
/// not the order of its elements.
///
/// Output element by output element (row-major over the kept dims): the compensated sum of
/// its inputs (row-major over the reduced dims), divided by their count, rounded once to
/// `out_dtype`.
pub fn mean(
    x: &Tensor,
    dims: &[i64],
    cast: Option<ElemType>,
    out_shape: &[usize],
    out_dtype: ElemType,
) -> Result<Tensor, GraphErrorKind> {
    let axes = mean_axes(dims, x.rank())?;
    let mut v = x.values_f64();
    if let Some(dt) = cast {
        v = v.iter().map(|&e| round_f64(dt, e)).collect();
    }
    let strides = row_major_strides(&x.shape);
    let (reduced, kept): (Vec<usize>, Vec<usize>) = (0..x.rank()).partition(|d| axes.contains(d));
    let kept_shape: Vec<usize> = kept.iter().map(|&d| x.shape[d]).collect();
    let reduced_shape: Vec<usize> = reduced.iter().map(|&d| x.shape[d]).collect();
    let count: usize = reduced_shape.iter().product();

    let mut out = Vec::new();
    let mut k_idx = vec![0; kept.len()];
    let mut r_idx = vec![0; reduced.len()];
    let mut idx = vec![0; x.rank()];
    for _ in 0..kept_shape.iter().product::<usize>() {
        let mut acc = Acc::ZERO;
        for _ in 0..count {
            // The input index: kept dims from the output, reduced dims from the inner walk.
            kept.iter().zip(&k_idx).for_each(|(&d, &i)| idx[d] = i);
            reduced.iter().zip(&r_idx).for_each(|(&d, &i)| idx[d] = i);
            acc.add(v[offset(&idx, &strides)]);
            next_index(&mut r_idx, &reduced_shape);
        }
        out.push(acc.value() / count as f64);
        next_index(&mut k_idx, &kept_shape);
    }
    Ok(Tensor::from_f64(out_shape, out_dtype, None, &out))
}

/// `aten::convolution` in 2-D, as `torch.nn.Conv2d` documents it:
/// "out(N_i, C_out_j) = bias(C_out_j) + sum_{k=0}^{C_in - 1} weight(C_out_j, k) * input(N_i, k)"
/// where `*` is the 2-D cross-correlation, over an input zero-padded by `padding` on both
/// sides, with taps `dilation` apart and outputs `stride` apart; with `groups`, output
/// channel `o` sees only the `C_in / groups` input channels of its group `o / (O / groups)`.
///
/// Output element [n, o, y, x]: the compensated sum, over ci (channels of o's group), ky, kx
/// in that order, of `input[n, g * cg + ci, y * sy + ky * dy - py, x * sx + kx * dx - px] *
/// weight[o, ci, ky, kx]`, then the bias, rounded once. A tap that lands in the padding is
/// absent from the sum: it stands for an exact zero (multiplying a padding zero by an
/// infinite weight would give NaN instead).
pub fn conv2d(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    p: &Conv2dParams,
    out_shape: &[usize],
    dtype: ElemType,
) -> Tensor {
    let (xv, wv) = (x.values_f64(), w.values_f64());
    let bv = b.map(|b| b.values_f64());
    let (xs, ws) = (row_major_strides(&x.shape), row_major_strides(&w.shape));
    let (h, wd) = (x.shape[2] as isize, x.shape[3] as isize);
    let (cg, kh, kw) = (w.shape[1], w.shape[2], w.shape[3]);
    let (n, o, oh, ow) = (out_shape[0], out_shape[1], out_shape[2], out_shape[3]);
    let og = o / p.groups; // output channels per group
    let [sy, sx] = p.stride.map(|s| s as isize);
    let [dy, dx] = p.dilation.map(|d| d as isize);
    let [py, px] = p.padding.map(|q| q as isize);

    let mut out = Vec::with_capacity(n * o * oh * ow);
    for ni in 0..n {
        for oc in 0..o {
            let g = oc / og;
            for y in 0..oh as isize {
                for xo in 0..ow as isize {
                    let mut acc = Acc::ZERO;
                    for ci in 0..cg {
                        for ky in 0..kh {
                            let iy = y * sy + ky as isize * dy - py;
                            if iy < 0 || iy >= h {
                                continue;
                            }
                            for kx in 0..kw {
                                let ix = xo * sx + kx as isize * dx - px;
                                if ix < 0 || ix >= wd {
                                    continue;
                                }
                                let xi = offset(&[ni, g * cg + ci, iy as usize, ix as usize], &xs);
                                let wi = offset(&[oc, ci, ky, kx], &ws);
                                acc.add(xv[xi] * wv[wi]);
                            }
                        }
                    }
                    if let Some(bv) = &bv {
                        acc.add(bv[oc]);
                    }
                    out.push(acc.value());
                }
            }
        }
    }
    Tensor::from_f64(out_shape, dtype, None, &out)
}

/// `aten::linear(input, weight, bias=None)`, as `torch.nn.functional.linear` documents it:
/// "y = x A^T + b", that is `y[..., j] = sum_k x[..., k] * weight[j, k] + bias[j]`.
///
/// Output element [r, j] (r: a row of x, every dim but the last): the compensated sum over k
/// in order of `x[r, k] * weight[j, k]`, then the bias, rounded once.
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>, out_shape: &[usize], dtype: ElemType) -> Tensor {
    let (xv, wv) = (x.values_f64(), w.values_f64());
    let bv = b.map(|b| b.values_f64());
    let (n_out, k) = (w.shape[0], w.shape[1]);
    let rows: usize = x.shape[..x.rank() - 1].iter().product();
    let mut out = Vec::with_capacity(rows * n_out);
    for r in 0..rows {
        for j in 0..n_out {
            let mut acc = Acc::ZERO;
            for kk in 0..k {
                acc.add(xv[r * k + kk] * wv[j * k + kk]);
            }
            if let Some(bv) = &bv {
                acc.add(bv[j]);
            }
            out.push(acc.value());
        }
    }
    Tensor::from_f64(out_shape, dtype, None, &out)
}

/// `aten::add.Tensor`, `sub.Tensor` (alpha = 1), `mul.Tensor`, `div.Tensor` (true division),
/// with PyTorch's broadcasting: "When iterating over the dimension sizes, starting at the
/// trailing dimension, the dimension sizes must either be equal, one of them is 1, or one of
/// them does not exist"; a dim of size 1 (or a missing one) repeats its one element.
///
/// Each output element: `a op b` of the operands' elements at its index in f64, rounded once.
/// For f32, f16 and bf16 operands that is the correctly rounded result of the op in the
/// output type (f64 carries more than twice their precision plus two bits, so the first
/// rounding never changes the second).
pub fn binary(op: BinaryOp, a: &Tensor, b: &Tensor, out_shape: &[usize], dtype: ElemType) -> Tensor {
    let (av, bv) = (a.values_f64(), b.values_f64());
    let (sa, sb) = (broadcast_strides(&a.shape, out_shape), broadcast_strides(&b.shape, out_shape));
    let mut out = Vec::with_capacity(out_shape.iter().product());
    let mut idx = vec![0; out_shape.len()];
    for _ in 0..out_shape.iter().product::<usize>() {
        let (x, y) = (av[offset(&idx, &sa)], bv[offset(&idx, &sb)]);
        out.push(match op {
            BinaryOp::Add => x + y,
            BinaryOp::Sub => x - y,
            BinaryOp::Mul => x * y,
            BinaryOp::Div => x / y,
        });
        next_index(&mut idx, out_shape);
    }
    Tensor::from_f64(out_shape, dtype, None, &out)
}

/// Strides of an operand of shape `shape` over the dims of the broadcast output `out_shape`
/// (right-aligned): its row-major stride where it has the dim, 0 where the dim is missing or
/// of size 1 (its one element repeats).
fn broadcast_strides(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let own = row_major_strides(shape);
    let lead = out_shape.len() - shape.len();
    (0..out_shape.len()).map(|d| if d < lead || shape[d - lead] == 1 { 0 } else { own[d - lead] }).collect()
}

/// `aten::square`: `x * x`, rounded once.
pub fn square(x: &Tensor, dtype: ElemType) -> Tensor {
    map(x, dtype, |v| v * v)
}

/// `aten::rsqrt`, as `torch.rsqrt` documents it: "out_i = 1 / sqrt(input_i)": `1 / sqrt(x)`
/// in f64, rounded once. rsqrt(+0) = +inf, rsqrt(-0) = -inf, a negative input gives NaN, as in
/// PyTorch.
pub fn rsqrt(x: &Tensor, dtype: ElemType) -> Tensor {
    map(x, dtype, |v| 1.0 / v.sqrt())
}

/// `aten::clamp(self, min=None, max=None)`, as `torch.clamp` documents it:
/// "y_i = min(max(x_i, min_value_i), max_value_i)", a missing bound not applied. NaN fails
/// both comparisons and passes through, as in PyTorch. Comparing with the unrounded f32 bounds
/// and then rounding equals PyTorch's clamp with bounds first rounded to the tensor's dtype
/// (rounding is monotonic).
pub fn clamp(x: &Tensor, min: Option<f32>, max: Option<f32>, dtype: ElemType) -> Tensor {
    map(x, dtype, |v| {
        let v = match min.map(f64::from) {
            Some(lo) if v < lo => lo,
            _ => v,
        };
        match max.map(f64::from) {
            Some(hi) if v > hi => hi,
            _ => v,
        }
    })
}

/// `f` of every value in f64, rounded once to `dtype`.
fn map(x: &Tensor, dtype: ElemType, f: impl Fn(f64) -> f64) -> Tensor {
    let v: Vec<f64> = x.values_f64().into_iter().map(f).collect();
    Tensor::from_f64(&x.shape, dtype, None, &v)
}

/// `quantized_decomposed::quantize_per_tensor(input, scale, zero_point, -128, 127, int8)`:
/// each value by [`QuantParams::quantize`] (`clamp(round(x * (1 / scale)) + zero_point,
/// -128, 127)` in the f32 arithmetic of PyTorch's and ExecuTorch's kernels).
pub fn quantize(x: &Tensor, q: QuantParams) -> Tensor {
    Tensor::from_f64(&x.shape, ElemType::Qs8, Some(q), &x.values_f64())
}

/// `quantized_decomposed::dequantize_per_tensor(input, scale, zero_point, -128, 127, int8)`:
/// `(q - zero_point) * scale` ([`QuantParams::dequantize`], exact in f64), rounded once to
/// fp32.
pub fn dequantize(x: &Tensor, q: QuantParams) -> Result<Tensor, GraphErrorKind> {
    let TensorData::Qs8(raw) = &x.to_contiguous().data else {
        return Err(GraphErrorKind::DtypeMismatch { expected: ElemType::Qs8, found: x.dtype() });
    };
    let v: Vec<f64> = raw.iter().map(|&e| q.dequantize(e)).collect();
    Ok(Tensor::from_f64(&x.shape, ElemType::F32, None, &v))
}

/// `aten::_to_copy(self, dtype=, memory_format=)`: every element converted to `dtype`
/// (rounded once; the same dtype, qs8 included, copies the elements as they are). The new
/// memory format is the node's spec's, which the interpreter stores every value in.
pub fn to_copy(x: &Tensor, dtype: ElemType) -> Tensor {
    if x.dtype() == dtype {
        return x.clone();
    }
    Tensor::from_f64(&x.shape, dtype, None, &x.values_f64())
}

/// `aten::view_copy(self, size)`: "a tensor with the same data and number of elements as
/// input, but with the specified shape": the k-th element in row-major order stays the k-th.
pub fn reshape(x: &Tensor, out_shape: &[usize]) -> Tensor {
    Tensor { shape: out_shape.to_vec(), ..x.to_contiguous() }
}

/// `aten::permute_copy(self, dims)`: output dim k is input dim `dims[k]`, that is
/// `out[i_0, .., i_{r-1}] = x[j]` with `j[dims[k]] = i_k`. Elements are copied as they are.
pub fn permute(x: &Tensor, perm: &[i64]) -> Result<Tensor, GraphErrorKind> {
    let perm = normalize_dims(perm, x.rank())?;
    let out_shape: Vec<usize> = perm.iter().map(|&d| x.shape[d]).collect();
    let strides = row_major_strides(&x.shape);
    let x = x.to_contiguous();
    let mut picks = Vec::with_capacity(x.numel());
    let mut idx = vec![0; out_shape.len()];
    let mut src = vec![0; x.rank()];
    for _ in 0..x.numel() {
        perm.iter().zip(&idx).for_each(|(&d, &i)| src[d] = i);
        picks.push(offset(&src, &strides));
        next_index(&mut idx, &out_shape);
    }
    Ok(Tensor { shape: out_shape, data: x.data.gather(&picks), ..x })
}
