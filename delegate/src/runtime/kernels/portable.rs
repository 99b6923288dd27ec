//! Portable kernels for ops left outside every delegate: plain scalar Rust, single-threaded,
//! f32 compute, like ExecuTorch's portable library (what "before" pays). Written here,
//! independently of the reference interpreter; only shape rules come from `reference::graph`.
//!
//! Conventions (those of ExecuTorch's portable kernels): a mean sums in f32 in index order and
//! divides by the count; fp16/bf16 values are widened to f32 and each op rounds once;
//! `quantize` is `clamp(zp + nearbyint(x * (1/scale)))` in f32, `dequantize` `(q - zp) * scale`.

use super::strides;
use half::{bf16, f16};
use reference::graph::{broadcast, mean_axes, normalize_dims, Dim};
use reference::{ElemType, MemoryFormat, Op, QuantParams, Tensor, TensorData, TensorSpec};

/// Logical-order values: floats widened to f32, qs8 kept as integers.
enum Vals {
    F(Vec<f32>),
    Q(Vec<i8>),
}

/// For every index of `shape` in row-major order, `sum_k idx[k] * strides[k]`, carried along
/// as an odometer (no division per element).
fn offsets(shape: &[usize], strides: &[usize]) -> Vec<usize> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    let mut off = 0usize;
    for _ in 0..n {
        out.push(off);
        for k in (0..shape.len()).rev() {
            idx[k] += 1;
            off += strides[k];
            if idx[k] < shape[k] {
                break;
            }
            off -= strides[k] * idx[k];
            idx[k] = 0;
        }
    }
    out
}

/// `out.shape[k] = shape[perm[k]]`, row-major in and out.
fn permute<T: Copy>(x: &[T], shape: &[usize], perm: &[usize]) -> Vec<T> {
    let ist = strides(shape);
    let oshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let pst: Vec<usize> = perm.iter().map(|&p| ist[p]).collect();
    offsets(&oshape, &pst).into_iter().map(|o| x[o]).collect()
}

/// The physical dim order of `format` for a tensor of `rank` (identity when it does not apply).
fn order(format: MemoryFormat, rank: usize) -> Vec<usize> {
    if format.required_rank() == Some(rank) {
        format.dim_order(rank)
    } else {
        (0..rank).collect()
    }
}

fn logical(t: &Tensor) -> Vals {
    let ord = order(t.format, t.rank());
    let identity = ord.iter().enumerate().all(|(i, &d)| i == d);
    let phys_shape: Vec<usize> = ord.iter().map(|&d| t.shape[d]).collect();
    let mut inv = vec![0usize; ord.len()];
    for (pos, &d) in ord.iter().enumerate() {
        inv[d] = pos;
    }
    let fix = |v: Vec<f32>| if identity { v } else { permute(&v, &phys_shape, &inv) };
    match &t.data {
        TensorData::F32(v) => Vals::F(fix(v.clone())),
        TensorData::F16(v) => Vals::F(fix(v.iter().map(|x| x.to_f32()).collect())),
        TensorData::Bf16(v) => Vals::F(fix(v.iter().map(|x| x.to_f32()).collect())),
        TensorData::Qs8(v) => Vals::Q(if identity { v.clone() } else { permute(v, &phys_shape, &inv) }),
    }
}

fn floats(t: &Tensor) -> Result<Vec<f32>, String> {
    match logical(t) {
        Vals::F(v) => Ok(v),
        Vals::Q(_) => Err("a float op got a qs8 tensor".into()),
    }
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
    let identity = ord.iter().enumerate().all(|(i, &d)| i == d);
    let data = match (vals, dtype) {
        (Vals::F(v), ElemType::F32) => TensorData::F32(if identity { v } else { permute(&v, &shape, &ord) }),
        (Vals::F(v), ElemType::F16) => {
            let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
            TensorData::F16(if identity { h } else { permute(&h, &shape, &ord) })
        }
        (Vals::F(v), ElemType::Bf16) => {
            let h: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
            TensorData::Bf16(if identity { h } else { permute(&h, &shape, &ord) })
        }
        (Vals::Q(v), ElemType::Qs8) => TensorData::Qs8(if identity { v } else { permute(&v, &shape, &ord) }),
        (_, d) => return Err(format!("cannot produce {d} from these values")),
    };
    Ok(Tensor { shape, format, quant, data })
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
    let want = |n: usize| if ins.len() < n { Err(format!("{} needs {n} inputs", op.name())) } else { Ok(()) };
    let (shape, vals) = match op {
        Op::Input { .. } | Op::Constant { .. } => return Err("inputs and constants are not ops".into()),
        Op::Mean { dims, keepdim, dtype } => {
            let axes = mean_axes(dims, x.rank()).map_err(|e| e.to_string())?;
            let mut v = floats(x)?;
            // `dtype=`: the input is cast to it before the reduction (PyTorch's definition).
            match dtype {
                Some(ElemType::F16) => v.iter_mut().for_each(|e| *e = f16::from_f32(*e).to_f32()),
                Some(ElemType::Bf16) => v.iter_mut().for_each(|e| *e = bf16::from_f32(*e).to_f32()),
                _ => {}
            }
            let st = strides(&x.shape);
            let kept: Vec<usize> = (0..x.rank()).filter(|d| !axes.contains(d)).collect();
            let kshape: Vec<usize> = kept.iter().map(|&d| x.shape[d]).collect();
            let rshape: Vec<usize> = axes.iter().map(|&d| x.shape[d]).collect();
            let kst: Vec<usize> = kept.iter().map(|&d| st[d]).collect();
            let rst: Vec<usize> = axes.iter().map(|&d| st[d]).collect();
            let nr: usize = rshape.iter().product();
            let red = offsets(&rshape, &rst);
            let res: Vec<f32> = offsets(&kshape, &kst)
                .into_iter()
                .map(|base| red.iter().fold(0f32, |sum, &o| sum + v[base + o]) / nr as f32)
                .collect();
            let mut oshape = Vec::new();
            for (d, &s) in x.shape.iter().enumerate() {
                if !axes.contains(&d) {
                    oshape.push(s);
                } else if *keepdim {
                    oshape.push(1);
                }
            }
            (oshape, Vals::F(res))
        }
        Op::Binary(b) => {
            want(2)?;
            let (a, bb) = (floats(ins[0])?, floats(ins[1])?);
            let oshape =
                concrete(&broadcast(&as_dims(&ins[0].shape), &as_dims(&ins[1].shape)).map_err(|e| e.to_string())?);
            let r = oshape.len();
            let bst = |s: &[usize]| -> Vec<usize> {
                let st = strides(s);
                (0..r)
                    .map(|i| if i + s.len() >= r && s[i + s.len() - r] != 1 { st[i + s.len() - r] } else { 0 })
                    .collect()
            };
            let (sa, sb) = (bst(&ins[0].shape), bst(&ins[1].shape));
            let res: Vec<f32> = offsets(&oshape, &sa)
                .into_iter()
                .zip(offsets(&oshape, &sb))
                .map(|(oa, ob)| {
                    let (p, q) = (a[oa], bb[ob]);
                    match b {
                        reference::graph::BinaryOp::Add => p + q,
                        reference::graph::BinaryOp::Sub => p - q,
                        reference::graph::BinaryOp::Mul => p * q,
                        reference::graph::BinaryOp::Div => p / q,
                    }
                })
                .collect();
            (oshape, Vals::F(res))
        }
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
            (x.shape.clone(), Vals::F(floats(x)?.into_iter().map(f).collect()))
        }
        Op::Linear => {
            want(2)?;
            let (v, w) = (floats(x)?, floats(ins[1])?);
            let b = ins.get(2).map(|t| floats(t)).transpose()?;
            let k = *x.shape.last().ok_or("linear of a 0-D tensor")?;
            let n = ins[1].shape[0];
            if ins[1].shape != [n, k] {
                return Err(format!("linear weight {:?} for in_features {k}", ins[1].shape));
            }
            let m = v.len() / k.max(1);
            let mut res = Vec::with_capacity(m * n);
            for r in 0..m {
                for c in 0..n {
                    let mut s = 0f32;
                    for j in 0..k {
                        s += v[r * k + j] * w[c * k + j];
                    }
                    res.push(s + b.as_ref().map_or(0.0, |b| b[c]));
                }
            }
            let mut oshape = x.shape.clone();
            *oshape.last_mut().unwrap_or(&mut 0) = n;
            (oshape, Vals::F(res))
        }
        Op::Conv2d(p) => {
            want(2)?;
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
            let mut res = Vec::with_capacity(n * o * oh * ow);
            for bi in 0..n {
                for oc in 0..o {
                    let gi = oc / og;
                    for y in 0..oh {
                        for xo in 0..ow {
                            let mut s = b.as_ref().map_or(0.0, |b| b[oc]);
                            for ic in 0..cg {
                                let ch = gi * cg + ic;
                                for ky in 0..kh {
                                    let iy = (y * p.stride[0] + ky * p.dilation[0]) as isize - p.padding[0] as isize;
                                    if iy < 0 || iy >= h as isize {
                                        continue;
                                    }
                                    for kx in 0..kw {
                                        let ix =
                                            (xo * p.stride[1] + kx * p.dilation[1]) as isize - p.padding[1] as isize;
                                        if ix < 0 || ix >= wd as isize {
                                            continue;
                                        }
                                        let xv = v[((bi * c + ch) * h + iy as usize) * wd + ix as usize];
                                        s += xv * w[((oc * cg + ic) * kh + ky) * kw + kx];
                                    }
                                }
                            }
                            res.push(s);
                        }
                    }
                }
            }
            (vec![n, o, oh, ow], Vals::F(res))
        }
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
                Vals::F(v) => Vals::F(permute(&v, &x.shape, &p)),
                Vals::Q(v) => Vals::Q(permute(&v, &x.shape, &p)),
            };
            (oshape, vals)
        }
    };
    out.check_shape(&shape).map_err(|e| format!("{} produced {shape:?}: {e}", op.name()))?;
    finish(shape, vals, out.dtype, out.format, out.quant)
}
