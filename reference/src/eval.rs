//! Scalar f64 reference interpreter: the oracle every delegate result is checked against.
//!
//! Deliberately simple: single-threaded, no SIMD, no `unsafe`, no kernel shared with the
//! delegate. Every op widens its inputs exactly to f64, computes in f64 and rounds once to
//! its output type (round to nearest, ties to even; see [`crate::dtype`]). fp16/bf16 results
//! are therefore rounded once per op, as PyTorch eager does per op.
//!
//! Sums (mean, conv, linear) use compensated (TwoSum) f64 accumulation: products of two
//! f32/f16/bf16 values are exact in f64, and the compensated sum is accurate to about one
//! f64 ulp of the result, far below an f32 ulp, so the final rounding is the only one that
//! matters except at (astronomically rare) near-ties. A mean is that sum divided by the
//! count in f64, then rounded once. Infinities and NaN propagate as in IEEE
//! arithmetic (a NaN anywhere in a reduced set makes the result NaN; +inf and -inf give NaN).
//!
//! Values live internally in contiguous (logical row-major) order; a memory format changes
//! where values are stored, never what they are, so outputs are converted to the format of
//! their node's spec only at the end.

use crate::dtype::MemoryFormat;
use crate::dtype::{round_f64, ElemType};
use crate::graph::{
    mean_axes, normalize_dims, with_inputs, BinaryOp, Conv2dParams, Graph, GraphError, GraphErrorKind, Op, TensorSpec,
};
use crate::tensor::{for_each_offset, for_each_offset2, strided_indices, Tensor, TensorData};
use std::borrow::Cow;

/// Why a graph could not be run. Both wrap the [`GraphError`] naming the node and the reason.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// The graph itself fails [`Graph::validate`].
    #[error("invalid graph: {0}")]
    InvalidGraph(GraphError),
    /// The run-time inputs do not fit the graph: wrong count, dtype, quant params, memory
    /// format, data length, static size, or a dynamic size above its bound (or one that makes
    /// a later op's shapes incompatible).
    #[error("bad inputs: {0}")]
    BadInput(GraphError),
}

impl EvalError {
    /// The underlying graph error (node, op, kind).
    pub fn graph_error(&self) -> &GraphError {
        match self {
            EvalError::InvalidGraph(e) | EvalError::BadInput(e) => e,
        }
    }

    pub fn kind(&self) -> &GraphErrorKind {
        &self.graph_error().kind
    }
}

/// Runs `graph` on `inputs` (one tensor per graph input, in order). Returns one tensor per
/// graph output, laid out in the memory format of its node's spec.
pub fn run(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, EvalError> {
    let mut vals = eval_nodes(graph, inputs)?;
    // Each output's value is moved out at its last listing (a node may be listed twice).
    let mut listed = vec![0usize; vals.len()];
    graph.outputs.iter().for_each(|&o| listed[o] += 1);
    let mut outs = Vec::with_capacity(graph.outputs.len());
    for &o in &graph.outputs {
        listed[o] -= 1;
        // Concrete sizes never change a format (it follows ranks and formats only).
        let format = graph.nodes[o].spec.format;
        outs.push(if listed[o] == 0 {
            std::mem::replace(&mut vals[o], Cow::Borrowed(&TAKEN)).into_owned().into_format(format)
        } else {
            vals[o].to_format(format)
        });
    }
    Ok(outs)
}

/// Like [`run`], but returns the value of every node (index = node id), each in the memory
/// format of its spec: for locating the first node where another engine diverges.
pub fn run_all(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, EvalError> {
    let vals = eval_nodes(graph, inputs)?;
    Ok(vals.into_iter().zip(&graph.nodes).map(|(v, n)| v.into_owned().into_format(n.spec.format)).collect())
}

/// What [`run`] leaves in place of a value it moved out.
static TAKEN: Tensor =
    Tensor { shape: Vec::new(), format: MemoryFormat::Contiguous, quant: None, data: TensorData::F32(Vec::new()) };

/// A node's value: graph inputs and constants already contiguous are borrowed, not copied.
type Value<'a> = Cow<'a, Tensor>;

/// `t` in contiguous order, borrowed when it already is.
fn contiguous(t: &Tensor) -> Value<'_> {
    if t.format == MemoryFormat::Contiguous {
        Cow::Borrowed(t)
    } else {
        Cow::Owned(t.to_contiguous())
    }
}

/// Every node's value in contiguous order.
fn eval_nodes<'a>(graph: &'a Graph, inputs: &'a [Tensor]) -> Result<Vec<Value<'a>>, EvalError> {
    graph.validate().map_err(EvalError::InvalidGraph)?;
    graph.check_inputs(inputs).map_err(EvalError::BadInput)?;
    // Without a dynamic dim the concrete specs are the graph's own: its inputs' shapes are
    // then their specs' (checked above) and `validate` inferred every other spec from them.
    let concrete = match graph.inputs.iter().any(|&i| graph.nodes[i].spec.is_dynamic()) {
        true => {
            let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
            Some(graph.concrete_specs(&shapes).map_err(EvalError::BadInput)?)
        }
        false => None,
    };

    let mut vals: Vec<Value<'a>> = Vec::with_capacity(graph.nodes.len());
    for (id, node) in graph.nodes.iter().enumerate() {
        let spec = concrete.as_ref().map_or(&node.spec, |specs| &specs[id]);
        let out = with_inputs(&node.inputs, |i| &*vals[i], |ins| eval_node(graph, inputs, id, spec, ins))?;
        vals.push(out);
    }
    Ok(vals)
}

/// The value of node `id` (concrete spec `spec`) from those of its inputs, `ins`.
fn eval_node<'a>(
    graph: &'a Graph,
    inputs: &'a [Tensor],
    id: usize,
    spec: &TensorSpec,
    ins: &[&Tensor],
) -> Result<Value<'a>, EvalError> {
    let node = &graph.nodes[id];
    let shape = spec.max_shape(); // concrete: every dim static here
    let err = |kind| EvalError::InvalidGraph(GraphError { node: id, op: node.op.name().into(), kind });
    let out: Value<'a> = match &node.op {
        Op::Input { .. } => {
            // `validate` guarantees every input node is listed exactly once.
            let pos = graph.inputs.iter().position(|&i| i == id).ok_or_else(|| {
                err(GraphErrorKind::WrongInputCount { expected: "an entry in graph inputs".into(), found: 0 })
            })?;
            contiguous(&inputs[pos])
        }
        Op::Constant { tensor } => contiguous(tensor),
        Op::Mean { dims, dtype, .. } => {
            let axes = mean_axes(dims, ins[0].rank()).map_err(err)?;
            Cow::Owned(mean(ins[0], &axes, *dtype, &shape, spec.dtype))
        }
        // Exactly the mean over the last two dims (H, W), keepdim (output size [1, 1] only).
        Op::AdaptiveAvgPool2d { .. } => {
            let r = ins[0].rank();
            Cow::Owned(mean(ins[0], &[r - 2, r - 1], None, &shape, spec.dtype))
        }
        Op::Conv2d(p) => Cow::Owned(conv2d(ins[0], ins[1], ins.get(2).copied(), p, &shape, spec.dtype)),
        Op::Binary(op) => Cow::Owned(binary(*op, ins[0], ins[1], &shape, spec.dtype)),
        Op::Square => Cow::Owned(map(ins[0], spec.dtype, |x| x * x)),
        // 1/sqrt in f64: rsqrt(+0) = +inf, rsqrt(-0) = -inf, negative -> NaN, as PyTorch.
        Op::Rsqrt => Cow::Owned(map(ins[0], spec.dtype, |x| 1.0 / x.sqrt())),
        Op::Clamp { min, max } => {
            let (lo, hi) = (min.map(f64::from), max.map(f64::from));
            // NaN fails both comparisons and passes through, as in PyTorch. Comparing with
            // the unrounded bounds then rounding the result equals PyTorch's clamp with
            // bounds first rounded to the tensor's dtype (rounding is monotonic).
            Cow::Owned(map(ins[0], spec.dtype, |x| {
                let x = match lo {
                    Some(l) if x < l => l,
                    _ => x,
                };
                match hi {
                    Some(h) if x > h => h,
                    _ => x,
                }
            }))
        }
        Op::Linear => Cow::Owned(linear(ins[0], ins[1], ins.get(2).copied(), &shape, spec.dtype)),
        Op::Quantize(q) => Cow::Owned(Tensor::from_f64(&shape, ElemType::Qs8, Some(*q), &ins[0].values_f64())),
        Op::Dequantize(q) => {
            let v: Vec<f64> = match &ins[0].data {
                TensorData::Qs8(d) => d.iter().map(|&x| q.dequantize(x)).collect(),
                _ => return Err(err(GraphErrorKind::DtypeMismatch { expected: ElemType::Qs8, found: ins[0].dtype() })),
            };
            Cow::Owned(Tensor::from_f64(&shape, ElemType::F32, None, &v))
        }
        Op::ToCopy { .. } => {
            if spec.dtype == ElemType::Qs8 {
                // qs8 -> qs8 (inference forbids float <-> qs8 here): a pure copy.
                Cow::Owned(ins[0].clone())
            } else {
                Cow::Owned(Tensor::from_f64(&shape, spec.dtype, None, &ins[0].values_f64()))
            }
        }
        // Row-major reinterpretation of the logical values.
        Op::Reshape { .. } => Cow::Owned(Tensor { shape: shape.clone(), ..ins[0].clone() }),
        Op::Permute { perm } => {
            let x = ins[0];
            let p = normalize_dims(perm, x.rank()).map_err(err)?;
            let strides = row_major_strides(&x.shape);
            let st: Vec<usize> = p.iter().map(|&d| strides[d]).collect();
            Cow::Owned(Tensor { shape: shape.clone(), data: x.data.gather_strided(&shape, &st), ..x.clone() })
        }
    };
    if out.shape != shape || out.dtype() != spec.dtype || out.data.len() != out.numel() {
        // Inference and evaluation disagree: a bug in this crate, reported, not panicked.
        let kind = GraphErrorKind::ShapeMismatch { expected: shape, found: out.shape.clone() };
        return Err(err(kind));
    }
    Ok(out)
}

/// Row-major strides of a logical shape.
fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Compensated f64 accumulator: Knuth's branch-free TwoSum keeps the exact rounding error of
/// every addition, so the result is the exact sum to about one f64 ulp. Starts from -0.0, the
/// IEEE additive identity, so a sum of negative zeros stays -0.0. Once a non-finite value is
/// met, the plain IEEE sum (inf, or NaN for NaN and inf - inf) is the answer: that is `s`
/// itself, which is exactly the plain running sum (each step is `s = s + x`, rounded). Which
/// NaN comes out when two NaNs meet (sign, payload) is not fixed: the compiler picks the
/// operand order of each addition; every oracle treats a NaN as a NaN.
#[derive(Clone, Copy)]
struct Acc {
    s: f64,
    c: f64,
}

impl Acc {
    fn new() -> Acc {
        Acc { s: -0.0, c: 0.0 }
    }

    #[inline]
    fn add(&mut self, x: f64) {
        two_sum(&mut self.s, &mut self.c, x);
    }

    fn value(self) -> f64 {
        // Non-finite: the plain sum. No correction: s as is (-0.0 + 0.0 would lose the sign).
        if !self.s.is_finite() || self.c == 0.0 {
            self.s
        } else {
            self.s + self.c
        }
    }
}

/// One step of [`Acc::add`] on a sum `s` and its correction `c` held anywhere.
#[inline(always)]
fn two_sum(s: &mut f64, c: &mut f64, x: f64) {
    let t = *s + x;
    let bp = t - *s;
    *c += (*s - (t - bp)) + (x - bp);
    *s = t;
}

fn sum(terms: impl IntoIterator<Item = f64>) -> f64 {
    let mut acc = Acc::new();
    terms.into_iter().for_each(|x| acc.add(x));
    acc.value()
}

/// Applies `f` to every value in f64 and rounds once to `dtype`.
#[inline(never)]
fn map(x: &Tensor, dtype: ElemType, f: impl Fn(f64) -> f64) -> Tensor {
    let v: Vec<f64> = x.values_f64().into_iter().map(f).collect();
    Tensor::from_f64(&x.shape, dtype, None, &v)
}

/// `mean.dim`: `axes` sorted and normalized. With `cast`, every input value is first
/// converted to that dtype (PyTorch casts the input before reducing), then the mean of the
/// cast values is rounded once to `out_dtype`.
#[inline(never)]
fn mean(x: &Tensor, axes: &[usize], cast: Option<ElemType>, out_shape: &[usize], out_dtype: ElemType) -> Tensor {
    let mut v = x.values_f64();
    if let Some(dt) = cast {
        v.iter_mut().for_each(|e| *e = round_f64(dt, *e));
    }
    let strides = row_major_strides(&x.shape);
    let (mut kept, mut kept_st, mut red, mut red_st) = (vec![], vec![], vec![], vec![]);
    for (d, (&s, &st)) in x.shape.iter().zip(&strides).enumerate() {
        if axes.contains(&d) {
            red.push(s);
            red_st.push(st);
        } else {
            kept.push(s);
            kept_st.push(st);
        }
    }
    let count = red.iter().product::<usize>() as f64;
    let offsets = strided_indices(&red, &red_st);
    let mut out = Vec::with_capacity(kept.iter().product());
    if offsets.iter().enumerate().all(|(k, &o)| k == o) {
        // The reduced dims are the trailing ones: each mean reads one contiguous run.
        let len = offsets.len();
        for_each_offset(&kept, &kept_st, |base| out.push(sum(v[base..base + len].iter().copied()) / count));
    } else if let Some(&last) = axes.last().filter(|&&d| d + 1 < x.rank()) {
        // The kept dims after the last reduced one hold `inner` contiguous values, one per
        // output: those outputs sum their terms (in the same order, `offsets`) all at once
        // (`x * 1.0` is `x` exactly).
        let inner: usize = x.shape[last + 1..].iter().product();
        let outer = kept.len() - (x.rank() - 1 - last);
        let (mut sums, mut comps) = (vec![0.0; inner], vec![0.0; inner]);
        for_each_offset(&kept[..outer], &kept_st[..outer], |base| {
            sums.fill(Acc::new().s);
            comps.fill(Acc::new().c);
            // Four terms per pass over the accumulators, then the rest one at a time.
            let quads = offsets.chunks_exact(4);
            let rest = quads.remainder();
            for o4 in quads {
                let x4 = std::array::from_fn(|t| &v[base + o4[t]..][..inner]);
                add_products_n(&mut sums, &mut comps, x4, [1.0; 4], None);
            }
            for &o in rest {
                add_products(&mut sums, &mut comps, &v[base + o..][..inner], 1.0);
            }
            out.extend(sums.iter().zip(&comps).map(|(&s, &c)| Acc { s, c }.value() / count));
        });
    } else {
        for_each_offset(&kept, &kept_st, |base| out.push(sum(offsets.iter().map(|&o| v[base + o])) / count));
    }
    Tensor::from_f64(out_shape, out_dtype, None, &out)
}

/// Elementwise with numpy broadcasting (right-aligned; size-1 dims repeat).
#[inline(never)]
fn binary(op: BinaryOp, a: &Tensor, b: &Tensor, out_shape: &[usize], dtype: ElemType) -> Tensor {
    // Strides of an operand over the output's dims: 0 where it repeats.
    let strides = |t: &Tensor| -> Vec<usize> {
        let st = row_major_strides(&t.shape);
        let lead = out_shape.len() - t.rank();
        (0..out_shape.len()).map(|k| if k < lead || t.shape[k - lead] == 1 { 0 } else { st[k - lead] }).collect()
    };
    let (sa, sb) = (strides(a), strides(b));
    let (av, bv) = (a.values_f64(), b.values_f64());
    let same = a.shape == out_shape && b.shape == out_shape;
    // One loop per op (generic `f`), so the op is not matched per element; operands of the
    // output's shape are simply zipped.
    let out = match op {
        BinaryOp::Add => broadcast(out_shape, same, &sa, &sb, &av, &bv, |x, y| x + y),
        BinaryOp::Sub => broadcast(out_shape, same, &sa, &sb, &av, &bv, |x, y| x - y),
        BinaryOp::Mul => broadcast(out_shape, same, &sa, &sb, &av, &bv, |x, y| x * y),
        BinaryOp::Div => broadcast(out_shape, same, &sa, &sb, &av, &bv, |x, y| x / y),
    };
    Tensor::from_f64(out_shape, dtype, None, &out)
}

/// `f(a[i], b[j])` for every output element, `i` and `j` its offsets under `sa` and `sb`;
/// `same`: both operands have the output's shape (their offsets are the element's index).
fn broadcast(
    shape: &[usize],
    same: bool,
    sa: &[usize],
    sb: &[usize],
    a: &[f64],
    b: &[f64],
    f: impl Fn(f64, f64) -> f64,
) -> Vec<f64> {
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

/// 2-D convolution, NCHW semantics. Padding positions are skipped (they contribute an exact
/// zero mathematically; multiplying them would turn an inf weight into NaN).
#[inline(never)]
fn conv2d(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    p: &Conv2dParams,
    out_shape: &[usize],
    dtype: ElemType,
) -> Tensor {
    let (xv, wv) = (x.values_f64(), w.values_f64());
    let bv = b.map(|b| b.values_f64());
    let (c, h, wd) = (x.shape[1], x.shape[2], x.shape[3]);
    let (cg, kh, kw) = (w.shape[1], w.shape[2], w.shape[3]);
    let (n, o, oh, ow) = (out_shape[0], out_shape[1], out_shape[2], out_shape[3]);
    let og = o / p.groups;
    let (st, dil, pad) = (p.stride, p.dilation, p.padding);
    // For kernel index `k` along axis `ax` (input length `len`): the output positions whose
    // tap lands inside the input, `first..end`. The input index `pos * stride + k * dilation
    // - padding` grows with the position, so they are one range; padding positions are
    // absent (they contribute an exact zero; multiplying them would turn an inf weight into
    // NaN).
    let inside = |ax: usize, k: usize, len: usize, outs: usize| -> (usize, usize) {
        let at = |pos: usize| (pos * st[ax] + k * dil[ax]).checked_sub(pad[ax]).filter(|&v| v < len);
        let first = (0..outs).find(|&pos| at(pos).is_some()).unwrap_or(outs);
        let end = (first..outs).find(|&pos| at(pos).is_none()).unwrap_or(outs);
        (first, end)
    };
    let ys: Vec<_> = (0..kh).map(|i| inside(0, i, h, oh)).collect();
    let xs: Vec<_> = (0..kw).map(|j| inside(1, j, wd, ow)).collect();
    let (plane, oplane) = (h * wd, oh * ow);
    // Every output position of every batch, `ni * oplane + k`, is one accumulator, so a tap
    // (ci, i, j) adds its terms to all of them in one run: `src[off + pos]`, its input value
    // at position `pos` (see below), times its weight. Kernel position (i, j) reaches the
    // input from output rows y0..y1 and columns x0..x1 only; `keep[i * kw + j]` is its mask
    // over the positions (all ones inside, zero outside), or None when it covers them all. A
    // position outside adds -0.0 instead (see `add_products_n`).
    let positions = n * oplane;
    let keep: Vec<Option<Vec<u64>>> = (0..kh * kw)
        .map(|t| {
            let ((y0, y1), (x0, x1)) = (ys[t / kw], xs[t % kw]);
            (y1 - y0 < oh || x1 - x0 < ow).then(|| {
                // One plane's mask (rows outside zero, inside rows zero outside x0..x1), then
                // a copy of it per further batch.
                let mut mask = vec![0u64; positions];
                for row in mask[y0 * ow..y1 * ow].chunks_exact_mut(ow) {
                    row[x0..x1].fill(u64::MAX);
                }
                for b in 1..n {
                    mask.copy_within(..oplane, b * oplane);
                }
                mask
            })
        })
        .collect();
    // Stride 1 and an output the size of the input (1x1 and "same" convolutions): the input
    // itself, with each channel's batches side by side (`(ch * n + ni) * plane`), is `src`,
    // as output position `pos` of a tap reads input position `pos` plus a fixed shift (`base`
    // zeros before it and enough after serve the masked positions that fall off either
    // end). Otherwise each tap's terms for all positions are gathered into a run of their own
    // (masked positions hold 0.0).
    let same = st == [1, 1] && (oh, ow) == (h, wd);
    let (src, base, chstride, toff): (Vec<f64>, usize, usize, Vec<isize>) = if same {
        let toff: Vec<isize> = (0..kh * kw)
            .map(|t| {
                let (i, j) = ((t / kw) as isize, (t % kw) as isize);
                (i * dil[0] as isize - pad[0] as isize) * wd as isize + j * dil[1] as isize - pad[1] as isize
            })
            .collect();
        let (lo, hi) = toff.iter().fold((0isize, 0isize), |(lo, hi), &s| (lo.min(s), hi.max(s)));
        let lead = lo.unsigned_abs();
        let mut src = vec![0.0; lead + xv.len() + hi.max(0) as usize];
        for (k, xc) in xv.chunks_exact(plane).enumerate() {
            let (ni, ch) = (k / c, k % c);
            src[lead + (ch * n + ni) * plane..][..plane].copy_from_slice(xc);
        }
        (src, lead, n * plane, toff)
    } else {
        let mut src = vec![0.0; c * kh * kw * positions];
        for (k, xc) in xv.chunks_exact(plane).enumerate() {
            let (ni, ch) = (k / c, k % c);
            for (i, &(y0, y1)) in ys.iter().enumerate() {
                for (j, &(x0, x1)) in xs.iter().enumerate() {
                    if y0 == y1 || x0 == x1 {
                        continue;
                    }
                    let run = &mut src[((ch * kh + i) * kw + j) * positions + ni * oplane..][..oplane];
                    let ix0 = x0 * st[1] + j * dil[1] - pad[1];
                    for y in y0..y1 {
                        let iy = y * st[0] + i * dil[0] - pad[0];
                        let from = xc[iy * wd + ix0..].iter().step_by(st[1]);
                        run[y * ow + x0..y * ow + x1].iter_mut().zip(from).for_each(|(d, &v)| *d = v);
                    }
                }
            }
        }
        (src, 0, kh * kw * positions, (0..kh * kw).map(|t| (t * positions) as isize).collect())
    };
    let mut out = vec![0.0; n * o * oplane];
    // One accumulator (sum, correction) per position. Each one is summed in the order ci,
    // kernel row, kernel column, then the bias: the loops below visit (ci, i, j) in that
    // order and, for each, add the tap to every position.
    let (mut sums, mut comps) = (vec![0.0; positions], vec![0.0; positions]);
    // Taps go `TAPS` at a time (consecutive in that order) through one pass over the
    // accumulators; a tap without a mask then takes the all-ones one.
    let ones = vec![u64::MAX; if keep.iter().any(Option::is_some) { positions } else { 0 }];
    let mut group: Vec<Tap> = Vec::with_capacity(TAPS);
    for oi in 0..o {
        let g = oi / og;
        sums.fill(Acc::new().s);
        comps.fill(Acc::new().c);
        for ci in 0..cg {
            let wc = &wv[(oi * cg + ci) * kh * kw..][..kh * kw];
            let chbase = base + (g * cg + ci) * chstride;
            for (t, &we) in wc.iter().enumerate() {
                if ys[t / kw].0 == ys[t / kw].1 || xs[t % kw].0 == xs[t % kw].1 {
                    continue;
                }
                let from = &src[(chbase as isize + toff[t]) as usize..][..positions];
                group.push((from, we, keep[t].as_deref()));
                if group.len() == TAPS {
                    add_tap_group(&mut sums, &mut comps, &group, &ones);
                    group.clear();
                }
            }
        }
        add_tap_group(&mut sums, &mut comps, &group, &ones);
        group.clear();
        for (ni, (s, cm)) in sums.chunks_exact(oplane).zip(comps.chunks_exact(oplane)).enumerate() {
            let dst = &mut out[(ni * o + oi) * oplane..][..oplane];
            for (d, (&s, &c)) in dst.iter_mut().zip(s.iter().zip(cm)) {
                let mut acc = Acc { s, c };
                if let Some(bv) = &bv {
                    acc.add(bv[oi]);
                }
                *d = acc.value();
            }
        }
    }
    Tensor::from_f64(out_shape, dtype, None, &out)
}

/// `two_sum(s[k], c[k], x[k] * w)` for every k: one accumulator per position, as sums and
/// corrections in two arrays (so the loop vectorizes). Out of line: called with distinct
/// slices, the loop needs no run-time overlap checks.
#[inline(never)]
fn add_products(s: &mut [f64], c: &mut [f64], x: &[f64], w: f64) {
    for ((s, c), &xe) in s.iter_mut().zip(c).zip(x) {
        two_sum(s, c, xe * w);
    }
}

/// How many taps [`add_tap_group`] adds in one pass.
const TAPS: usize = 4;

/// One conv tap: its input run, its weight and, when some positions miss the input, the mask
/// of those it hits.
type Tap<'a> = (&'a [f64], f64, Option<&'a [u64]>);

/// Adds up to [`TAPS`] taps (input run, weight, mask) to every accumulator, in their order:
/// [`add_products_n`] for their number, masked when any of them is (`ones`: an all-ones mask
/// as long as the accumulators, for those without one).
fn add_tap_group(s: &mut [f64], c: &mut [f64], group: &[Tap], ones: &[u64]) {
    /// The group's inputs, weights and (when any tap has one) masks, as arrays.
    type Split<'a, const T: usize> = ([&'a [f64]; T], [f64; T], Option<[&'a [u64]; T]>);
    fn split<'a, const T: usize>(group: &[Tap<'a>], ones: &'a [u64]) -> Split<'a, T> {
        let masked = group.iter().any(|g| g.2.is_some());
        (
            std::array::from_fn(|t| group[t].0),
            std::array::from_fn(|t| group[t].1),
            masked.then(|| std::array::from_fn(|t| group[t].2.unwrap_or(ones))),
        )
    }
    match group.len() {
        0 => {}
        1 => {
            let (x, w, keep) = split::<1>(group, ones);
            add_products_n(s, c, x, w, keep)
        }
        2 => {
            let (x, w, keep) = split::<2>(group, ones);
            add_products_n(s, c, x, w, keep)
        }
        3 => {
            let (x, w, keep) = split::<3>(group, ones);
            add_products_n(s, c, x, w, keep)
        }
        _ => {
            let (x, w, keep) = split::<TAPS>(group, ones);
            add_products_n(s, c, x, w, keep)
        }
    }
}

/// For every position k, `two_sum(s[k], c[k], x[t][k] * w[t])` for t = 0, 1, .. in turn: the
/// terms of `T` taps in one pass, each accumulator loaded and stored once. With `keep`, a
/// position whose mask of tap t is zero adds -0.0 for that tap instead, which leaves its
/// accumulator as skipping the term would: `x + -0.0` is `x` for every x (-0.0, infinities
/// and NaN included), so TwoSum keeps `s` and adds an exact zero to `c`, whose sign of zero
/// never matters ([`Acc::value`] reads `c` only when it is not zero).
#[inline(never)]
fn add_products_n<const T: usize>(
    s: &mut [f64],
    c: &mut [f64],
    x: [&[f64]; T],
    w: [f64; T],
    keep: Option<[&[u64]; T]>,
) {
    let n = s.len().min(c.len());
    let (s, c) = (&mut s[..n], &mut c[..n]);
    let x = x.map(|x| &x[..n]);
    match keep {
        None => {
            for k in 0..n {
                let (mut sk, mut ck) = (s[k], c[k]);
                for t in 0..T {
                    two_sum(&mut sk, &mut ck, x[t][k] * w[t]);
                }
                (s[k], c[k]) = (sk, ck);
            }
        }
        Some(keep) => {
            let keep = keep.map(|m| &m[..n]);
            for k in 0..n {
                let (mut sk, mut ck) = (s[k], c[k]);
                for t in 0..T {
                    // A select by bit masks (the product's bits, or those of -0.0), so the
                    // loop vectorizes.
                    let m = keep[t][k];
                    let term = f64::from_bits((x[t][k] * w[t]).to_bits() & m | (-0.0f64).to_bits() & !m);
                    two_sum(&mut sk, &mut ck, term);
                }
                (s[k], c[k]) = (sk, ck);
            }
        }
    }
}

/// `linear`: `y[..., n] = sum_k x[..., k] * w[n, k] + b[n]`.
#[inline(never)]
fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>, out_shape: &[usize], dtype: ElemType) -> Tensor {
    let (xv, wv) = (x.values_f64(), w.values_f64());
    let bv = b.map(|b| b.values_f64());
    let (nout, k) = (w.shape[0], w.shape[1]);
    let rows = xv.len().checked_div(k).unwrap_or(0);
    // The input transposed, `xt[kk * rows + r] = x[r, kk]`: a column of it times one weight
    // adds term kk of output n to every row at once, so each output still sums its terms in
    // the order kk, then the bias.
    let mut xt = vec![0.0; rows * k];
    for (r, xr) in xv.chunks_exact(k.max(1)).take(rows).enumerate() {
        for (kk, &xe) in xr.iter().enumerate() {
            xt[kk * rows + r] = xe;
        }
    }
    let mut out = vec![0.0; rows * nout];
    let (mut sums, mut comps) = (vec![0.0; rows], vec![0.0; rows]);
    for n in 0..nout {
        sums.fill(Acc::new().s);
        comps.fill(Acc::new().c);
        // Four terms per pass over the accumulators, then the rest one at a time.
        let ws = &wv[n * k..(n + 1) * k];
        let quads = ws.chunks_exact(4);
        let rest = quads.remainder();
        for (q, w4) in quads.enumerate() {
            let x4 = std::array::from_fn(|t| &xt[(4 * q + t) * rows..][..rows]);
            add_products_n(&mut sums, &mut comps, x4, [w4[0], w4[1], w4[2], w4[3]], None);
        }
        for (t, &we) in rest.iter().enumerate() {
            let kk = k - rest.len() + t;
            add_products(&mut sums, &mut comps, &xt[kk * rows..(kk + 1) * rows], we);
        }
        for (r, (&s, &c)) in sums.iter().zip(&comps).enumerate() {
            let mut acc = Acc { s, c };
            if let Some(bv) = &bv {
                acc.add(bv[n]);
            }
            out[r * nout + n] = acc.value();
        }
    }
    Tensor::from_f64(out_shape, dtype, None, &out)
}
