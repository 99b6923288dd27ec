//! Portable kernels for ops left outside every delegate: plain scalar Rust, single-threaded,
//! f32 compute, like ExecuTorch's portable library (what "before" pays). Written here,
//! independently of the reference interpreter; only shape rules come from `reference::graph`.
//!
//! Conventions (those of ExecuTorch's portable kernels): a mean sums in f32 in index order and
//! divides by the count; fp16/bf16 values are widened to f32 and each op rounds once;
//! `quantize` is `clamp(zp + nearbyint(x * (1/scale)))` in f32, `dequantize` `(q - zp) * scale`.

use super::strides;
use half::slice::HalfFloatSliceExt;
use half::vec::HalfFloatVecExt;
use half::{bf16, f16};
use reference::graph::{broadcast, mean_axes, normalize_dims, Conv2dParams, Dim};
use reference::{ElemType, MemoryFormat, Op, QuantParams, Tensor, TensorData, TensorSpec};
use std::borrow::Cow;
use std::ops::Range;

/// Logical-order values: floats widened to f32, qs8 kept as integers. Borrowed from the input
/// tensor when its data already is in that type and order (no copy per op).
enum Vals<'a> {
    F(Cow<'a, [f32]>),
    Q(Cow<'a, [i8]>),
}

/// Calls `f` with `[sum_k idx[k] * strides[j][k]; N]` for every index of `shape` in row-major
/// order: an odometer over the outer dims and a strided run along the innermost one (no
/// division per element, no table of offsets).
fn walk<const N: usize>(shape: &[usize], strides: [&[usize]; N], mut f: impl FnMut([usize; N])) {
    let Some((&inner, outer)) = shape.split_last() else {
        f([0; N]);
        return;
    };
    if shape.contains(&0) {
        return;
    }
    let step: [usize; N] = std::array::from_fn(|j| strides[j][outer.len()]);
    let mut idx = vec![0usize; outer.len()];
    let mut base = [0usize; N];
    loop {
        let mut off = base;
        for _ in 0..inner {
            f(off);
            for j in 0..N {
                off[j] += step[j];
            }
        }
        // The next row: carry through the outer dims.
        let mut k = outer.len();
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            for j in 0..N {
                base[j] += strides[j][k];
            }
            if idx[k] < outer[k] {
                break;
            }
            for j in 0..N {
                base[j] -= strides[j][k] * idx[k];
            }
            idx[k] = 0;
        }
    }
}

/// `out.shape[k] = shape[perm[k]]`, row-major in and out.
fn permute<T: Copy>(x: &[T], shape: &[usize], perm: &[usize]) -> Vec<T> {
    let ist = strides(shape);
    let oshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let pst: Vec<usize> = perm.iter().map(|&p| ist[p]).collect();
    let mut out = Vec::with_capacity(x.len());
    walk(&oshape, [&pst], |[o]| out.push(x[o]));
    out
}

/// The physical dim order of `format` for a tensor of `rank` (identity when it does not apply).
fn order(format: MemoryFormat, rank: usize) -> Vec<usize> {
    if format.required_rank() == Some(rank) {
        format.dim_order(rank)
    } else {
        (0..rank).collect()
    }
}

fn is_identity(ord: &[usize]) -> bool {
    ord.iter().enumerate().all(|(i, &d)| i == d)
}

/// The stride of each logical dim of `t` in its physical data.
fn logical_strides(t: &Tensor) -> Vec<usize> {
    let ord = order(t.format, t.rank());
    let phys_shape: Vec<usize> = ord.iter().map(|&d| t.shape[d]).collect();
    let pst = strides(&phys_shape);
    let mut st = vec![0usize; ord.len()];
    for (pos, &d) in ord.iter().enumerate() {
        st[d] = pst[pos];
    }
    st
}

/// A float tensor's values widened to f32, in its physical order (fp32 data is borrowed).
fn physical_floats(t: &Tensor) -> Result<Cow<'_, [f32]>, String> {
    match &t.data {
        TensorData::F32(v) => Ok(Cow::Borrowed(v)),
        // Widening is exact, so the slice conversion (F16C where the CPU has it) gives the
        // same values as one element at a time.
        TensorData::F16(v) => Ok(Cow::Owned(v.to_f32_vec())),
        TensorData::Bf16(v) => Ok(Cow::Owned(v.to_f32_vec())),
        TensorData::Qs8(_) => Err("a float op got a qs8 tensor".into()),
    }
}

/// Physical-order values in logical row-major order.
fn to_logical<'a, T: Copy>(v: Cow<'a, [T]>, t: &Tensor) -> Cow<'a, [T]> {
    if is_identity(&order(t.format, t.rank())) {
        return v;
    }
    let mut out = Vec::with_capacity(v.len());
    walk(&t.shape, [&logical_strides(t)], |[o]| out.push(v[o]));
    Cow::Owned(out)
}

fn logical(t: &Tensor) -> Vals<'_> {
    match &t.data {
        TensorData::Qs8(v) => Vals::Q(to_logical(Cow::Borrowed(v), t)),
        TensorData::F32(v) => Vals::F(to_logical(Cow::Borrowed(v), t)),
        TensorData::F16(v) => Vals::F(to_logical(Cow::Owned(v.to_f32_vec()), t)),
        TensorData::Bf16(v) => Vals::F(to_logical(Cow::Owned(v.to_f32_vec()), t)),
    }
}

fn floats(t: &Tensor) -> Result<Cow<'_, [f32]>, String> {
    Ok(to_logical(physical_floats(t)?, t))
}

/// Builds the output tensor: rounds to `dtype`, lays out in `format`.
fn finish(
    shape: Vec<usize>,
    vals: Vals,
    dtype: ElemType,
    format: MemoryFormat,
    quant: Option<QuantParams>,
) -> Result<Tensor, String> {
    let ord = order(format, shape.len());
    let identity = is_identity(&ord);
    let data = match (vals, dtype) {
        (Vals::F(v), ElemType::F32) => {
            TensorData::F32(if identity { v.into_owned() } else { permute(&v, &shape, &ord) })
        }
        (Vals::F(v), ElemType::F16) => {
            // Round to nearest even, as `f16::from_f32` per element (F16C where available).
            let h: Vec<f16> = Vec::from_f32_slice(&v);
            TensorData::F16(if identity { h } else { permute(&h, &shape, &ord) })
        }
        (Vals::F(v), ElemType::Bf16) => {
            let h: Vec<bf16> = Vec::from_f32_slice(&v);
            TensorData::Bf16(if identity { h } else { permute(&h, &shape, &ord) })
        }
        (Vals::Q(v), ElemType::Qs8) => {
            TensorData::Qs8(if identity { v.into_owned() } else { permute(&v, &shape, &ord) })
        }
        (_, d) => return Err(format!("cannot produce {d} from these values")),
    };
    Ok(Tensor { shape, format, quant, data })
}

/// Output positions `o` in `0..out` whose input position `o * stride + off - pad` lies in
/// `0..size` (the taps a convolution does not skip as padding).
fn valid_outputs(out: usize, stride: usize, off: usize, pad: usize, size: usize) -> Range<usize> {
    let lo = if pad > off { (pad - off).div_ceil(stride) } else { 0 };
    let hi = if size + pad > off { (size + pad - off - 1) / stride + 1 } else { 0 };
    let lo = lo.min(out);
    lo..hi.clamp(lo, out)
}

fn concrete(dims: &[Dim]) -> Vec<usize> {
    dims.iter().map(|d| d.size).collect()
}

fn as_dims(s: &[usize]) -> Vec<Dim> {
    s.iter().map(|&d| Dim::fixed(d)).collect()
}

/// Runs one portable op. `out` is the output slot's spec (its dtype, format and quant).
pub fn run(op: &Op, ins: &[&Tensor], out: &TensorSpec) -> Result<Tensor, String> {
    let x = ins.first().ok_or("portable op without inputs")?;
    let (shape, vals) = match op {
        Op::Input { .. } | Op::Constant { .. } => return Err("inputs and constants are not ops".into()),
        // Output size [1, 1] (validated): the mean over H and W, keepdim.
        Op::AdaptiveAvgPool2d { .. } => {
            return run(&Op::Mean { dims: vec![-1, -2], keepdim: true, dtype: None }, ins, out);
        }
        Op::Mean { dims, keepdim, dtype } => mean(x, dims, keepdim, dtype)?,
        Op::Binary(b) => binary(op, b, ins)?,
        Op::Square => (x.shape.clone(), Vals::F(floats(x)?.iter().map(|v| v * v).collect())),
        Op::Rsqrt => (x.shape.clone(), Vals::F(floats(x)?.iter().map(|v| 1.0 / v.sqrt()).collect())),
        Op::Clamp { min, max } => {
            let f = |v: f32| {
                let v = match min {
                    Some(m) if v < *m => *m,
                    _ => v,
                };
                match max {
                    Some(m) if v > *m => *m,
                    _ => v,
                }
            };
            (x.shape.clone(), Vals::F(floats(x)?.iter().map(|&v| f(v)).collect()))
        }
        Op::Linear => linear(op, x, ins)?,
        Op::Conv2d(p) => conv2d(op, x, ins, p)?,
        Op::Quantize(q) => {
            let inv = 1.0f32 / q.scale;
            let zp = q.zero_point as f32;
            let r = floats(x)?
                .iter()
                .map(|&v| {
                    let t = zp + (v * inv).round_ties_even();
                    if t.is_nan() {
                        q.zero_point as i8
                    } else {
                        t.clamp(-128.0, 127.0) as i8
                    }
                })
                .collect();
            (x.shape.clone(), Vals::Q(r))
        }
        Op::Dequantize(q) => match logical(x) {
            Vals::Q(v) => {
                (x.shape.clone(), Vals::F(v.iter().map(|&i| (i as i32 - q.zero_point) as f32 * q.scale).collect()))
            }
            Vals::F(_) => return Err("dequantize of a float tensor".into()),
        },
        Op::ToCopy { .. } => (x.shape.clone(), logical(x)),
        Op::Reshape { shape } => {
            let n = x.numel();
            let known: usize = shape.iter().filter(|&&s| s > 0).map(|&s| s as usize).product();
            let s: Vec<usize> = shape.iter().map(|&d| if d < 0 { n / known.max(1) } else { d as usize }).collect();
            if s.iter().product::<usize>() != n {
                return Err(format!("cannot reshape {:?} to {shape:?}", x.shape));
            }
            (s, logical(x))
        }
        Op::Permute { perm } => {
            let p = normalize_dims(perm, x.rank()).map_err(|e| e.to_string())?;
            if p.len() != x.rank() {
                return Err(format!("{perm:?} is not a permutation of rank {}", x.rank()));
            }
            let oshape = p.iter().map(|&d| x.shape[d]).collect();
            let vals = match logical(x) {
                Vals::F(v) => Vals::F(permute(&v, &x.shape, &p).into()),
                Vals::Q(v) => Vals::Q(permute(&v, &x.shape, &p).into()),
            };
            (oshape, vals)
        }
    };
    out.check_shape(&shape).map_err(|e| format!("{} produced {shape:?}: {e}", op.name()))?;
    finish(shape, vals, out.dtype, out.format, out.quant)
}

/// `mean.dim`: reads in place (physical data, logical strides), sums each output's inputs in
/// logical index order, then divides.
fn mean<'a>(
    x: &'a Tensor,
    dims: &[i64],
    keepdim: &bool,
    dtype: &Option<ElemType>,
) -> Result<(Vec<usize>, Vals<'a>), String> {
    let axes = mean_axes(dims, x.rank()).map_err(|e| e.to_string())?;
    // Read in place: physical data, logical strides (no copy into logical order).
    let (mut v, st) = (physical_floats(x)?, logical_strides(x));
    // `dtype=`: the input is cast to it before the reduction (PyTorch's definition).
    match dtype {
        Some(ElemType::F16) => v.to_mut().iter_mut().for_each(|e| *e = f16::from_f32(*e).to_f32()),
        Some(ElemType::Bf16) => v.to_mut().iter_mut().for_each(|e| *e = bf16::from_f32(*e).to_f32()),
        _ => {}
    }
    let kept: Vec<usize> = (0..x.rank()).filter(|d| !axes.contains(d)).collect();
    let kshape: Vec<usize> = kept.iter().map(|&d| x.shape[d]).collect();
    let rshape: Vec<usize> = axes.iter().map(|&d| x.shape[d]).collect();
    let kst: Vec<usize> = kept.iter().map(|&d| st[d]).collect();
    let rst: Vec<usize> = axes.iter().map(|&d| st[d]).collect();
    let nr: usize = rshape.iter().product();
    let mut res = Vec::with_capacity(kshape.iter().product());
    // Each output sums its inputs in logical index order, then divides. As ExecuTorch's
    // `apply_on_flat_ix_with_stride_and_base` does for one reduced dim: a strided loop per
    // output (a plain slice when the stride is 1); several reduced dims go through a table of
    // their offsets (its `apply_on_flat_ix_with_dim_mask_and_base` walks them per element).
    if let ([_], [stride]) = (&rshape[..], &rst[..]) {
        let stride = *stride;
        walk(&kshape, [&kst], |[base]| {
            let sum = if stride == 1 {
                v[base..base + nr].iter().fold(0f32, |sum, &e| sum + e)
            } else {
                v[base..].iter().step_by(stride).take(nr).fold(0f32, |sum, &e| sum + e)
            };
            res.push(sum / nr as f32)
        });
    } else {
        let mut red = Vec::with_capacity(nr);
        walk(&rshape, [&rst], |[o]| red.push(o));
        walk(&kshape, [&kst], |[base]| res.push(red.iter().fold(0f32, |sum, &o| sum + v[base + o]) / nr as f32));
    }
    let mut oshape = Vec::new();
    for (d, &s) in x.shape.iter().enumerate() {
        if !axes.contains(&d) {
            oshape.push(s);
        } else if *keepdim {
            oshape.push(1);
        }
    }
    Ok((oshape, Vals::F(res.into())))
}

/// A broadcasting binary op over the operands' physical data.
fn binary(op: &Op, b: &reference::graph::BinaryOp, ins: &[&Tensor]) -> Result<(Vec<usize>, Vals<'static>), String> {
    want(op, ins, 2)?;
    let (a, bb) = (physical_floats(ins[0])?, physical_floats(ins[1])?);
    let oshape = concrete(&broadcast(&as_dims(&ins[0].shape), &as_dims(&ins[1].shape)).map_err(|e| e.to_string())?);
    let r = oshape.len();
    // Each operand's stride per output dim (0 where it broadcasts), into its physical data.
    let bst = |t: &Tensor| -> Vec<usize> {
        let (s, st) = (&t.shape, logical_strides(t));
        (0..r).map(|i| if i + s.len() >= r && s[i + s.len() - r] != 1 { st[i + s.len() - r] } else { 0 }).collect()
    };
    let (sa, sb) = (bst(ins[0]), bst(ins[1]));
    let mut res = Vec::with_capacity(oshape.iter().product());
    walk(&oshape, [&sa, &sb], |[oa, ob]| {
        let (p, q) = (a[oa], bb[ob]);
        res.push(match b {
            reference::graph::BinaryOp::Add => p + q,
            reference::graph::BinaryOp::Sub => p - q,
            reference::graph::BinaryOp::Mul => p * q,
            reference::graph::BinaryOp::Div => p / q,
        })
    });
    Ok((oshape, Vals::F(Cow::Owned(res))))
}

/// `linear`: `x @ w^T + b`, a row at a time.
fn linear(op: &Op, x: &Tensor, ins: &[&Tensor]) -> Result<(Vec<usize>, Vals<'static>), String> {
    want(op, ins, 2)?;
    let (v, w) = (floats(x)?, floats(ins[1])?);
    let b = ins.get(2).map(|t| floats(t)).transpose()?;
    let k = *x.shape.last().ok_or("linear of a 0-D tensor")?;
    let n = ins[1].shape[0];
    if ins[1].shape != [n, k] {
        return Err(format!("linear weight {:?} for in_features {k}", ins[1].shape));
    }
    let m = v.len() / k.max(1);
    let mut res = Vec::with_capacity(m * n);
    for row in v.chunks_exact(k.max(1)).take(m) {
        for (c, wrow) in w.chunks_exact(k.max(1)).take(n).enumerate() {
            let s = row.iter().zip(wrow).fold(0f32, |s, (&a, &b)| s + a * b);
            res.push(s + b.as_ref().map_or(0.0, |b| b[c]));
        }
    }
    let mut oshape = x.shape.clone();
    *oshape.last_mut().unwrap_or(&mut 0) = n;
    Ok((oshape, Vals::F(res.into())))
}

/// `conv2d`, output plane by plane and tap by tap (padding taps skipped through each tap's
/// valid output range).
fn conv2d(op: &Op, x: &Tensor, ins: &[&Tensor], p: &Conv2dParams) -> Result<(Vec<usize>, Vals<'static>), String> {
    want(op, ins, 2)?;
    let (v, w) = (floats(x)?, floats(ins[1])?);
    let b = ins.get(2).map(|t| floats(t)).transpose()?;
    let (n, c, h, wd) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let ws = &ins[1].shape;
    let (o, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    let g = p.groups.max(1);
    if cg * g != c || o % g != 0 {
        return Err(format!("conv channels: input {c}, weight {ws:?}, groups {g}"));
    }
    let span = |k: usize, i: usize| p.dilation[i] * (k - 1) + 1;
    let (ph, pw) = (h + 2 * p.padding[0], wd + 2 * p.padding[1]);
    if ph < span(kh, 0) || pw < span(kw, 1) {
        return Err("conv kernel larger than the padded input".into());
    }
    let oh = (ph - span(kh, 0)) / p.stride[0] + 1;
    let ow = (pw - span(kw, 1)) / p.stride[1] + 1;
    let og = o / g;
    let [sy, sx] = p.stride;
    // The valid output rows of each ky and columns of each kx (the same for every plane).
    let rows: Vec<Range<usize>> =
        (0..kh).map(|ky| valid_outputs(oh, sy, ky * p.dilation[0], p.padding[0], h)).collect();
    let cols: Vec<Range<usize>> =
        (0..kw).map(|kx| valid_outputs(ow, sx, kx * p.dilation[1], p.padding[1], wd)).collect();
    let mut res = vec![0f32; n * o * oh * ow];
    // Three-wide unit-stride kernel rows (3x3 and the like): the output columns whose
    // three taps are all inside the input add them in one pass (`lo..hi`); the columns
    // near the edges take their taps one by one.
    let three = sx == 1 && kw == 3 && p.dilation[1] == 1;
    let (lo, hi) = (cols.iter().map(|r| r.start).max().unwrap_or(0), cols.iter().map(|r| r.end).min().unwrap_or(0));
    let (lo, hi) = if lo < hi { (lo, hi) } else { (ow, ow) };
    // Output plane by plane, tap by tap: every output still adds its bias, then its taps
    // in (input channel, ky, kx) order, as a loop per output would; padding taps are
    // skipped through the valid output range of each tap instead of a test per tap.
    for (plane_i, plane) in res.chunks_exact_mut((oh * ow).max(1)).enumerate().take(n * o) {
        let (bi, oc) = (plane_i / o, plane_i % o);
        let gi = oc / og;
        plane.fill(b.as_ref().map_or(0.0, |b| b[oc]));
        for ic in 0..cg {
            let ch = gi * cg + ic;
            let xin = &v[(bi * c + ch) * h * wd..][..h * wd];
            for ky in 0..kh {
                let ys = &rows[ky];
                let wk = &w[((oc * cg + ic) * kh + ky) * kw..][..kw];
                if three {
                    let (w0, w1, w2) = (wk[0], wk[1], wk[2]);
                    for y in ys.clone() {
                        let iy = y * sy + ky * p.dilation[0] - p.padding[0];
                        let irow = &xin[iy * wd..(iy + 1) * wd];
                        let orow = &mut plane[y * ow..(y + 1) * ow];
                        // Edge columns: each inside tap, kx in order.
                        for x in (0..lo).chain(hi..ow) {
                            for (kx, xs) in cols.iter().enumerate() {
                                if xs.contains(&x) {
                                    orow[x] += irow[x + kx - p.padding[1]] * wk[kx];
                                }
                            }
                        }
                        if lo < hi {
                            // Column x reads input columns x - pad + 0, 1, 2.
                            let (n, ib) = (hi - lo, lo - p.padding[1]);
                            let (i0, i1, i2) =
                                (&irow[ib..ib + n], &irow[ib + 1..ib + 1 + n], &irow[ib + 2..ib + 2 + n]);
                            for (j, o) in orow[lo..hi].iter_mut().enumerate() {
                                *o = ((*o + i0[j] * w0) + i1[j] * w1) + i2[j] * w2;
                            }
                        }
                    }
                    continue;
                }
                for (kx, &wv) in wk.iter().enumerate() {
                    let xs = &cols[kx];
                    if xs.is_empty() {
                        continue;
                    }
                    // Input column of output column xs.start (in range by construction).
                    let ix0 = xs.start * sx + kx * p.dilation[1] - p.padding[1];
                    let len = xs.len();
                    for y in ys.clone() {
                        let iy = y * sy + ky * p.dilation[0] - p.padding[0];
                        let irow = &xin[iy * wd + ix0..(iy + 1) * wd];
                        let orow = &mut plane[y * ow + xs.start..][..len];
                        // Unit stride: a plain zip the compiler can vectorize (each
                        // output still adds this one tap; the order per output is kept).
                        if sx == 1 {
                            for (o, &xv) in orow.iter_mut().zip(&irow[..len]) {
                                *o += xv * wv;
                            }
                        } else {
                            for (o, &xv) in orow.iter_mut().zip(irow.iter().step_by(sx)) {
                                *o += xv * wv;
                            }
                        }
                    }
                }
            }
        }
    }
    Ok((vec![n, o, oh, ow], Vals::F(res.into())))
}

/// An op's input count check.
fn want(op: &Op, ins: &[&Tensor], n: usize) -> Result<(), String> {
    if ins.len() < n {
        Err(format!("{} needs {n} inputs", op.name()))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Means over NCHW channels, over H and W of channels_last and of NCHW data, and over
    /// channels_last channels give each output's in-order f32 sum divided by the count, bit for
    /// bit (ExecuTorch's portable mean).
    #[test]
    fn means_sum_each_output_in_index_order() {
        let shape = [2, 3, 4, 5];
        let vals: Vec<f32> = (0..120).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.37 + 1e-3 * i as f32).collect();
        let x = Tensor::f32(&shape, vals.clone());
        let at = |i: [usize; 4]| vals[((i[0] * 3 + i[1]) * 4 + i[2]) * 5 + i[3]];
        for (axes, format) in [
            (vec![1i64], MemoryFormat::Contiguous),
            (vec![2, 3], MemoryFormat::ChannelsLast),
            (vec![2, 3], MemoryFormat::Contiguous),
            (vec![1], MemoryFormat::ChannelsLast),
        ] {
            let op = Op::Mean { dims: axes.clone(), keepdim: false, dtype: None };
            let input = x.to_format(format);
            let spec = reference::graph::infer(&op, &[&TensorSpec::f32(&shape).with_format(format)]).unwrap();
            let got = run(&op, &[&input], &spec).unwrap();
            let red: Vec<usize> = axes.iter().map(|&a| a as usize).collect();
            let kept: Vec<usize> = (0..4).filter(|d| !red.contains(d)).collect();
            let nr: usize = red.iter().map(|&d| shape[d]).product();
            let mut want = Vec::new();
            let mut k_idx = vec![0usize; kept.len()];
            loop {
                let mut sum = 0f32;
                let mut r_idx = vec![0usize; red.len()];
                loop {
                    let mut i = [0usize; 4];
                    for (j, &d) in kept.iter().enumerate() {
                        i[d] = k_idx[j];
                    }
                    for (j, &d) in red.iter().enumerate() {
                        i[d] = r_idx[j];
                    }
                    sum += at(i);
                    if !next(&mut r_idx, &red.iter().map(|&d| shape[d]).collect::<Vec<_>>()) {
                        break;
                    }
                }
                want.push(sum / nr as f32);
                if !next(&mut k_idx, &kept.iter().map(|&d| shape[d]).collect::<Vec<_>>()) {
                    break;
                }
            }
            let TensorData::F32(g) = &got.to_contiguous().data else { panic!("fp32 mean") };
            let same = g.len() == want.len() && g.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "axes {axes:?} {format:?}: {g:?} vs {want:?}");
        }
    }

    /// Convolutions (3x3 rows in one pass, other widths tap by tap) give each output's bias
    /// plus its inside taps in (input channel, ky, kx) order, bit for bit, also with images
    /// narrower than the kernel and with an infinite weight (a padding tap must add nothing).
    #[test]
    fn convs_sum_each_output_in_tap_order() {
        use reference::graph::Conv2dParams;
        let cases = [
            ([2, 3, 5, 6], [4, 3, 3, 3], [1, 1], [1, 1], [1, 1], 1),
            ([1, 2, 4, 2], [2, 2, 3, 3], [1, 1], [1, 1], [1, 1], 1),
            ([1, 2, 3, 1], [2, 1, 3, 3], [1, 1], [1, 1], [1, 1], 2),
            ([1, 1, 6, 7], [2, 1, 3, 3], [2, 1], [0, 2], [1, 1], 1),
            ([1, 2, 6, 7], [2, 2, 3, 2], [1, 2], [1, 1], [2, 2], 1),
            ([1, 3, 4, 4], [2, 3, 1, 1], [1, 1], [0, 0], [1, 1], 1),
        ];
        for (t, (xs, ws, stride, padding, dilation, groups)) in cases.into_iter().enumerate() {
            let val = |i: usize, k: usize| ((i * 37 + k * 11) % 23) as f32 * 0.31 - 3.3 + 1e-3 * i as f32;
            let xv: Vec<f32> = (0..xs.iter().product()).map(|i| val(i, t)).collect();
            let mut wv: Vec<f32> = (0..ws.iter().product()).map(|i| val(i, t + 5)).collect();
            // An infinite corner weight: its padding taps must be skipped, not multiplied by 0.
            wv[0] = f32::INFINITY;
            let bv: Vec<f32> = (0..ws[0]).map(|i| val(i, t + 9)).collect();
            let (x, w, b) =
                (Tensor::f32(&xs, xv.clone()), Tensor::f32(&ws, wv.clone()), Tensor::f32(&[ws[0]], bv.clone()));
            let op = Op::Conv2d(Conv2dParams { stride, padding, dilation, groups });
            let specs = [TensorSpec::f32(&xs), TensorSpec::f32(&ws), TensorSpec::f32(&[ws[0]])];
            let spec = reference::graph::infer(&op, &[&specs[0], &specs[1], &specs[2]]).unwrap();
            let got = run(&op, &[&x, &w, &b], &spec).unwrap();
            let TensorData::F32(g) = &got.data else { panic!("fp32 conv") };
            let (oh, ow) = (got.shape[2], got.shape[3]);
            let (cg, og) = (ws[1], ws[0] / groups);
            let mut want = Vec::new();
            for bi in 0..xs[0] {
                for oc in 0..ws[0] {
                    for y in 0..oh {
                        for xo in 0..ow {
                            let mut acc = bv[oc];
                            for ic in 0..cg {
                                let ch = (oc / og) * cg + ic;
                                for ky in 0..ws[2] {
                                    for kx in 0..ws[3] {
                                        let iy = (y * stride[0] + ky * dilation[0]) as isize - padding[0] as isize;
                                        let ix = (xo * stride[1] + kx * dilation[1]) as isize - padding[1] as isize;
                                        if iy < 0 || ix < 0 || iy >= xs[2] as isize || ix >= xs[3] as isize {
                                            continue;
                                        }
                                        let xi = ((bi * xs[1] + ch) * xs[2] + iy as usize) * xs[3] + ix as usize;
                                        acc += xv[xi] * wv[((oc * cg + ic) * ws[2] + ky) * ws[3] + kx];
                                    }
                                }
                            }
                            want.push(acc);
                        }
                    }
                }
            }
            let same = g.len() == want.len() && g.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "case {t}: {g:?} vs {want:?}");
        }
    }

    /// Row-major increment of `idx` within `shape`; false after the last index.
    fn next(idx: &mut [usize], shape: &[usize]) -> bool {
        for k in (0..idx.len()).rev() {
            idx[k] += 1;
            if idx[k] < shape[k] {
                return true;
            }
            idx[k] = 0;
        }
        false
    }
}
