//! Graph builders for every [`Pattern`], plus the "magnitude" twin each oracle uses to
//! derive its tolerance.
//!
//! A case builds two graphs from the same knobs:
//! - the **graph under test**, exactly as the case describes it;
//! - its **magnitude graph** (fp32, same structure): inputs replaced by `|x|`, weights by
//!   `|w|`, subtraction by addition, quantize/dequantize dropped. Evaluated by the reference,
//!   it gives `M_i`, a bound on the sum of absolute values of everything that contributes to
//!   output `i`, which scales every rounding error made on the way (see `oracle::outputs`).
//!   Where a normalizer is computed from a value that itself carries rounding error (QK-norm
//!   after a linear), the magnitude graph multiplies by `1 + r / r_M` to cover the error of
//!   the normalizer (`r` from the true values, `r_M` from the magnitudes).
//!
//! qs8 patterns use power-of-two scales and inputs on the input's quantization grid, so every
//! quantize before the last one is exact in any correct implementation and the last one may
//! differ by one step only, and by none when the mean counts are powers of two
//! ([`qs8_exact`], derived in `oracle::outputs`).

use crate::case::{Case, InvalidKind, Pattern};
use crate::engine;
use reference::graph::{Conv2dParams, Dim, Graph, Op, TensorSpec, T};
use reference::{ElemType, GraphBuilder, MemoryFormat, QuantParams, Tensor, TensorData};

/// Quantization of the graph input (power of two: grid values quantize exactly).
pub const Q_IN: QuantParams = QuantParams { scale: 0.0625, zero_point: 3 };
/// Quantization after an add of two inputs (twice the range).
pub const Q_ADD: QuantParams = QuantParams { scale: 0.125, zero_point: -2 };
/// Quantization of a mean's output.
pub const Q_MEAN: QuantParams = QuantParams { scale: 0.0625, zero_point: 1 };
/// Requantization by a copy before a qs8 mean (coarser than [`Q_IN`]: grid values round
/// half to even, the same in any correct implementation).
pub const Q_REQ: QuantParams = QuantParams { scale: 0.125, zero_point: -1 };
/// Quantization of conv weights.
pub const Q_W: QuantParams = QuantParams { scale: 0.015625, zero_point: 0 };
/// Quantization of a conv's output.
pub const Q_CONV: QuantParams = QuantParams { scale: 0.25, zero_point: 0 };

/// What a case builds: the graph, and what its oracles need to know about it.
#[derive(Clone, Debug)]
pub struct Built {
    pub graph: Graph,
    /// The fp32 magnitude twin, built on first use: see [`Built::magnitude`].
    twin: std::cell::OnceCell<Option<Graph>>,
    /// Longest chain of f32 accumulations feeding an output (sum of reduction lengths and
    /// fan-ins along it, at the upper-bound shape).
    pub acc_len: usize,
    /// Number of ops that round to the compute dtype along the longest chain.
    pub ops: usize,
    /// qs8 cases: the quantization step of each output (the last quantize before it).
    pub out_step: Vec<Option<f32>>,
    /// qs8 cases: the scale of the graph input's grid (inputs are snapped to it).
    pub input_grid: Option<f32>,
    /// The graph contains only GAP-eligible means (4-D, dims {2,3}, keepdim, no dtype
    /// argument, not bf16): its programs must be byte-identical across modes.
    pub gap_only: bool,
}

/// Why a case can not be built (the oracles then skip it).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("case not applicable: {0}")]
pub struct NotApplicable(pub String);

fn na<T>(msg: impl Into<String>) -> Result<T, NotApplicable> {
    Err(NotApplicable(msg.into()))
}

/// Builds the graph under test (and its magnitude twin) for a case.
pub fn build(case: &Case) -> Result<Built, NotApplicable> {
    check_case(case)?;
    let (graph, out_step) = build_graph(case, false)?;
    let mut graph = graph;
    if let Some(kind) = case.invalid {
        corrupt(&mut graph, case, kind)?;
    }
    let (acc_len, ops) = chain_cost(case);
    Ok(Built {
        graph,
        twin: std::cell::OnceCell::new(),
        acc_len,
        ops,
        out_step,
        input_grid: (case.dtype == ElemType::Qs8).then_some(Q_IN.scale),
        gap_only: is_gap_only(case),
    })
}

impl Built {
    /// The fp32 magnitude twin of `case`, the case this was built from (None for invalid
    /// graphs and qs8 cases). Built on first use: the outputs oracle asks for it only when an
    /// element is beyond its bound at the reference's magnitude (about one case in six).
    pub fn magnitude(&self, case: &Case) -> Option<&Graph> {
        self.twin
            .get_or_init(|| {
                let wanted = case.invalid.is_none() && case.dtype != ElemType::Qs8;
                wanted.then(|| build_graph(case, true).ok().map(|(g, _)| g)).flatten()
            })
            .as_ref()
    }
}

fn check_case(case: &Case) -> Result<(), NotApplicable> {
    let rank = case.shape.len();
    // (`rank_too_high` cases stay at rank 6: the corruption adds the seventh dim.)
    if rank == 0 || rank > 6 {
        return na(format!("input rank {rank} outside 1..=6"));
    }
    if case.shape.contains(&0) && case.invalid != Some(InvalidKind::ZeroSizedDim) {
        return na("zero-sized dim without invalid=zero_sized_dim");
    }
    if case.numel() > 1 << 22 {
        return na("input above 4M elements");
    }
    if case.pattern.needs_rank4() && rank != 4 {
        return na(format!("pattern {} needs a 4-D input", case.pattern.name()));
    }
    if let Some(r) = case.format.required_rank() {
        if r != rank {
            return na(format!("format {} needs rank {r}", case.format.name()));
        }
    }
    if case.dynamic.iter().any(|&d| d >= rank) {
        return na("dynamic dim out of range");
    }
    if case.threads.is_empty() || case.threads.iter().any(|&t| t == 0 || t > 64) {
        return na("thread counts must be in 1..=64");
    }
    if case.modes.is_empty() {
        return na("no lowering mode");
    }
    match case.pattern {
        Pattern::QkNorm => {
            let heads = heads(case);
            // `%`, not `is_multiple_of`: the workspace supports Rust 1.80.
            #[allow(clippy::manual_is_multiple_of)]
            let splits = case.shape.get(2).is_some_and(|&e| e % heads == 0);
            if rank != 3 || !splits {
                return na("qk_norm needs [B, S, H*Dh] with param = H dividing the last dim");
            }
        }
        Pattern::PreNormMlp | Pattern::RmsNorm if case.dynamic.contains(&(rank - 1)) => {
            return na("the normalized (last) dim can not be dynamic");
        }
        _ => {}
    }
    if case.dtype == ElemType::Qs8 && case.mean_dtype.is_some() {
        return na("qs8 cases take no dtype argument");
    }
    if case.pattern == Pattern::AdaptivePool && case.mean_dtype.is_some() {
        return na("adaptive_avg_pool2d takes no dtype argument");
    }
    if matches!(case.pattern, Pattern::QkNorm | Pattern::PreNormMlp) && !case.dynamic.is_empty() {
        return na("reshape and linear patterns take static shapes");
    }
    if case.pattern.needs_rank4() && case.dynamic.contains(&1) {
        return na("conv channels can not be dynamic");
    }
    Ok(())
}

/// Conv output channels (param, default 4).
fn conv_out(case: &Case) -> usize {
    if case.param == 0 {
        4
    } else {
        case.param.min(64)
    }
}

/// Conv kernel: 3x3 (padding 1) when variant bit 0 is set, else 1x1.
fn kernel(case: &Case) -> usize {
    if case.variant & 1 == 1 {
        3
    } else {
        1
    }
}

/// `adaptive_pool`: a conv before the pool (variant bit 1 clear).
fn pool_conv(case: &Case) -> bool {
    case.variant & 2 == 0
}

fn heads(case: &Case) -> usize {
    case.param.clamp(1, 16)
}

/// The dims the case's main mean reduces (pattern-fixed ones included).
pub fn mean_dims(case: &Case) -> (Vec<i64>, bool) {
    match case.pattern {
        Pattern::Gap => {
            let d = [[2i64, 3], [-1, -2], [3, 2], [-2, -1]][(case.variant as usize >> 1) % 4];
            (d.to_vec(), true)
        }
        Pattern::RmsNorm | Pattern::QkNorm | Pattern::PreNormMlp => (vec![-1], true),
        Pattern::ConvMeanConv | Pattern::ConvSubMean => (vec![1], true),
        // What `to_edge` makes of the pool.
        Pattern::AdaptivePool => (vec![-1, -2], true),
        _ => (case.dims.clone(), case.keepdim),
    }
}

fn is_gap_only(case: &Case) -> bool {
    let gap_patterns =
        [Pattern::Mean, Pattern::AddMean, Pattern::Gap, Pattern::ConvMean, Pattern::SharedInput, Pattern::AdaptivePool];
    if case.invalid.is_some() || case.dtype == ElemType::Bf16 || case.shape.len() != 4 {
        return false;
    }
    if !gap_patterns.contains(&case.pattern) || case.mean_dtype.is_some() {
        return false;
    }
    let (dims, keepdim) = mean_dims(case);
    let mut norm: Vec<i64> = dims.iter().map(|d| d.rem_euclid(4)).collect();
    norm.sort_unstable();
    keepdim && norm == [2, 3]
}

/// (accumulation length, rounding ops) along the longest chain, at the bound shape.
fn chain_cost(case: &Case) -> (usize, usize) {
    let rank = case.shape.len();
    let reduced = |dims: &[i64]| -> usize {
        if dims.is_empty() {
            return case.numel().max(1);
        }
        let mut seen = vec![false; rank.max(1)];
        for &d in dims {
            let r = rank.max(1) as i64;
            if d >= -r && d < r {
                seen[d.rem_euclid(r) as usize] = true;
            }
        }
        seen.iter().enumerate().filter(|(_, &s)| s).map(|(i, _)| case.shape.get(i).copied().unwrap_or(1)).product()
    };
    let (dims, _) = mean_dims(case);
    let n = reduced(&dims).max(1);
    let last = case.shape.last().copied().unwrap_or(1);
    let k = kernel(case);
    let c = case.shape.get(1).copied().unwrap_or(1);
    match case.pattern {
        Pattern::Mean => (n, 1),
        Pattern::AddMean | Pattern::Gap => (n, 2),
        Pattern::RmsNorm => (last, 5),
        Pattern::QkNorm => {
            let dh = last / heads(case);
            (2 * last + dh, 8)
        }
        Pattern::PreNormMlp => (last + 2 * last.max(1) + mlp_hidden(case), 9),
        Pattern::ConvMean => (c * k * k + n, 2),
        Pattern::ConvMeanConv => (c * k * k + conv_out(case) + k * k, 3),
        Pattern::ConvSubMean => (c * k * k + conv_out(case), 3),
        Pattern::SharedInput => ((c * k * k).max(n), 1),
        Pattern::AdaptivePool if pool_conv(case) => (c * k * k + n, 2),
        Pattern::AdaptivePool => (n, 1),
    }
}

/// Elements a mean over `dims` (empty: all) averages on a tensor of `shape`.
fn reduced_count(dims: &[i64], shape: &[usize]) -> usize {
    let rank = shape.len().max(1) as i64;
    let mut seen = vec![dims.is_empty(); shape.len()];
    for &d in dims {
        if d >= -rank && d < rank {
            seen[d.rem_euclid(rank) as usize] = true;
        }
    }
    shape.iter().zip(&seen).filter(|(_, &s)| s).map(|(&n, _)| n).product()
}

/// Largest mean count for which every partial sum of grid values is exact in f32: each
/// term is at most 255 grid units (`|q - zp|` of an int8), so `2^16` terms stay below 2^24.
const EXACT_MEAN_MAX: usize = 1 << 16;
/// Largest qs8 conv fan-in with exact f32 partial sums: a product of an input and a weight
/// is at most `131 * 128 < 2^15` units of `2^-10` (`Q_IN` times `Q_W`), `2^9` of them < 2^24.
const EXACT_CONV_FAN_IN: usize = 1 << 9;

/// qs8 cases: whether a correct delegate must give exactly the reference's value for
/// output `o`, on a run whose main input has `shape` (see `oracle::outputs`, qs8): every
/// mean count along the chain is a power of two (its `1/n` and requantization multiplier are
/// exact) and every accumulation is short enough for exact f32 partial sums.
pub fn qs8_exact(case: &Case, shape: &[usize], o: usize) -> bool {
    if case.dtype != ElemType::Qs8 || shape.len() != case.shape.len() {
        return false;
    }
    let mean_ok = |n: usize| n.is_power_of_two() && n <= EXACT_MEAN_MAX;
    let conv_ok = || shape.get(1).is_some_and(|&c| c * kernel(case) * kernel(case) <= EXACT_CONV_FAN_IN);
    let (dims, _) = mean_dims(case);
    match (case.pattern, o) {
        (Pattern::Mean | Pattern::AddMean | Pattern::Gap, 0) | (Pattern::SharedInput, 0) => {
            mean_ok(reduced_count(&dims, shape))
        }
        (Pattern::AdaptivePool, 0) if !pool_conv(case) => mean_ok(reduced_count(&dims, shape)),
        (Pattern::ConvMean | Pattern::AdaptivePool, 0) => {
            // The conv keeps H and W (stride 1, padding k/2) and gives `conv_out` channels.
            let mut y = shape.to_vec();
            y[1] = conv_out(case);
            conv_ok() && mean_ok(reduced_count(&dims, &y))
        }
        (Pattern::SharedInput, 1) => conv_ok(),
        _ => false,
    }
}

fn mlp_hidden(case: &Case) -> usize {
    let d = case.shape.last().copied().unwrap_or(1);
    if case.param == 0 {
        2 * d
    } else {
        case.param.min(256)
    }
}

/// Builder state shared by every pattern.
struct Ctx<'a> {
    g: GraphBuilder,
    case: &'a Case,
    /// Building the magnitude twin.
    abs: bool,
    /// Float type every op computes in (fp32 for qs8 and magnitude graphs).
    dt: ElemType,
    /// Wrap ops in quantize/dequantize.
    q: bool,
    next_weight: std::cell::Cell<u64>,
}

impl Ctx<'_> {
    /// A seeded weight of `shape` in the compute dtype (magnitude: its absolute values).
    fn weight(&self, shape: &[usize]) -> T {
        let k = self.next_weight.get();
        self.next_weight.set(k + 1);
        let seed = self.case.seed ^ 0x5EED_0000_0000_0000 ^ k.wrapping_mul(0x9E37_79B9);
        if self.q {
            // qs8 weights: an int8 constant on Q_W, dequantized inside the graph.
            let t = engine::generate(&TensorSpec::qs8(shape, Q_W), seed, false);
            let c = self.g.constant(t);
            return self.g.dequantize(c, Q_W.scale, Q_W.zero_point);
        }
        let real_dt = if self.abs { ElemType::F32 } else { self.case.dtype };
        let mut t = engine::generate(&TensorSpec::new(real_dt, shape), seed, false);
        if self.abs {
            t = abs_f32(&t);
        }
        self.g.constant(t)
    }

    /// A 0-D constant in the compute dtype.
    fn scalar(&self, v: f64) -> T {
        self.g.constant(Tensor::from_f64(&[], self.dt, None, &[v]))
    }

    fn qdq(&self, x: T, q: QuantParams) -> T {
        if self.q {
            let qx = self.g.quantize(x, q.scale, q.zero_point);
            self.g.dequantize(qx, q.scale, q.zero_point)
        } else {
            x
        }
    }

    fn sub(&self, a: T, b: T) -> T {
        if self.abs {
            self.g.add(a, b)
        } else {
            self.g.sub(a, b)
        }
    }

    fn mean(&self, x: T, dims: &[i64], keepdim: bool, with_dtype: bool) -> T {
        match self.case.mean_dtype {
            Some(d) if with_dtype && !self.abs => self.g.mean_dtype(x, dims, keepdim, d),
            _ => self.g.mean(x, dims, keepdim),
        }
    }

    fn conv(&self, x: T, cin: usize, cout: usize, k: usize) -> T {
        let w = self.weight(&[cout, cin, k, k]);
        let b = if self.q { None } else { Some(self.weight(&[cout])) };
        let p = Conv2dParams { padding: [k / 2, k / 2], ..Default::default() };
        self.g.conv2d(x, w, b, p)
    }

    /// `x * rsqrt(mean(x^2, -1, keepdim) + eps) * w` over a last dim of `d`.
    /// `actual` (magnitude graphs only) is the true-valued twin of `x`, used for the
    /// normalizer when `x` carries error (see the module docs).
    fn rms_norm(&self, x: T, d: usize, actual: Option<T>) -> T {
        let eps = self.scalar(1e-5);
        let w = self.weight(&[d]);
        let normalizer = |v: T| {
            let ms = self.g.mean(self.g.square(v), &[-1], true);
            self.g.rsqrt(self.g.add(ms, eps))
        };
        match actual {
            Some(a) if self.abs => {
                let r = normalizer(a);
                let r_m = normalizer(x);
                let one = self.scalar(1.0);
                let factor = self.g.add(one, self.g.div(r, r_m));
                self.g.mul(self.g.mul(self.g.mul(x, r), factor), w)
            }
            _ => self.g.mul(self.g.mul(x, normalizer(x)), w),
        }
    }
}

fn abs_f32(t: &Tensor) -> Tensor {
    let v: Vec<f64> = t.values_f64().into_iter().map(f64::abs).collect();
    let shape = t.shape.clone();
    Tensor::from_f64(&shape, ElemType::F32, None, &v).to_format(t.format)
}

/// The magnitude twin's inputs for concrete inputs of the graph under test: `|x|` in fp32
/// (plus the true values in fp32 for patterns with a normalizer after a linear).
pub fn magnitude_inputs(case: &Case, inputs: &[Tensor]) -> Vec<Tensor> {
    let mut out: Vec<Tensor> = inputs.iter().map(abs_f32).collect();
    if case.pattern == Pattern::QkNorm {
        for t in inputs {
            let v = t.values_f64();
            out.push(Tensor::from_f64(&t.shape, ElemType::F32, None, &v).to_format(t.format));
        }
    }
    out
}

fn input_spec(case: &Case, dt: ElemType) -> TensorSpec {
    let mut spec = TensorSpec::new(dt, &case.shape).with_format(case.format);
    for &d in &case.dynamic {
        spec = spec.dynamic(d);
    }
    spec
}

/// Builds one of the two graphs; also returns the qs8 output steps.
fn build_graph(case: &Case, abs: bool) -> Result<(Graph, Vec<Option<f32>>), NotApplicable> {
    let q = case.dtype == ElemType::Qs8 && !abs;
    let dt = if abs || case.dtype == ElemType::Qs8 { ElemType::F32 } else { case.dtype };
    let cx = Ctx { g: GraphBuilder::new(), case, abs, dt, q, next_weight: std::cell::Cell::new(0) };
    let g = &cx.g;
    let x_in = g.input("x", input_spec(case, dt));
    // QK-norm's magnitude twin also takes the true values.
    let actual_in = (abs && case.pattern == Pattern::QkNorm).then(|| g.input("x_true", input_spec(case, dt)));
    let x = cx.qdq(x_in, Q_IN);
    let (dims, keepdim) = mean_dims(case);
    let rank = case.shape.len();
    let step = |qp: QuantParams| q.then_some(qp.scale);
    let mut steps = vec![];
    let outputs: Vec<T> = match case.pattern {
        Pattern::Mean => {
            // qs8, variant bit 0: the mean reads a requantizing copy, `dq -> copy -> q` with
            // other parameters on each side (a same-layout memory-format copy, or with bit 1
            // a same-shape reshape), which no pass may fold into one qs8 copy.
            let x = if q && case.variant & 1 == 1 {
                let copy = if case.variant & 2 != 0 && case.dynamic.is_empty() {
                    let shape: Vec<i64> = case.shape.iter().map(|&d| d as i64).collect();
                    g.reshape(x, &shape)
                } else {
                    g.to_format(x, case.format)
                };
                cx.qdq(copy, Q_REQ)
            } else {
                x
            };
            steps.push(step(Q_MEAN));
            vec![cx.qdq(cx.mean(x, &dims, keepdim, true), Q_MEAN)]
        }
        Pattern::AddMean | Pattern::Gap => {
            let s = cx.qdq(g.add(x, x), Q_ADD);
            steps.push(step(Q_MEAN));
            vec![cx.qdq(cx.mean(s, &dims, keepdim, case.pattern == Pattern::AddMean), Q_MEAN)]
        }
        Pattern::RmsNorm => {
            if q {
                return na("rms_norm has no qs8 form");
            }
            vec![cx.rms_norm(x, case.shape[rank - 1], None)]
        }
        Pattern::QkNorm => {
            if q {
                return na("qk_norm has no qs8 form");
            }
            let (b, s, e) = (case.shape[0] as i64, case.shape[1] as i64, case.shape[2]);
            let h = heads(case);
            let dh = e / h;
            let proj = |v: T, wq: T| g.reshape(g.linear(v, wq, None), &[b, s, h as i64, dh as i64]);
            let wq = cx.weight(&[e, e]);
            let qh = proj(x, wq);
            let normed = match actual_in {
                Some(a) => {
                    // The true-valued projection uses the signed weights: rebuild them.
                    // The true-valued projection needs the signed weights.
                    let wq_true = signed_weight_like(&cx, &[e, e], 0);
                    let qa = proj(a, wq_true);
                    cx.rms_norm(qh, dh, Some(qa))
                }
                None => cx.rms_norm(qh, dh, None),
            };
            let flat = g.reshape(normed, &[b, s, e as i64]);
            let wo = cx.weight(&[e, e]);
            vec![g.linear(flat, wo, None)]
        }
        Pattern::PreNormMlp => {
            if q {
                return na("pre_norm_mlp has no qs8 form");
            }
            let d = case.shape[rank - 1];
            let f = mlp_hidden(case);
            let n = cx.rms_norm(x, d, None);
            let (w1, b1) = (cx.weight(&[f, d]), cx.weight(&[f]));
            let h = g.relu(g.linear(n, w1, Some(b1)));
            let (w2, b2) = (cx.weight(&[d, f]), cx.weight(&[d]));
            vec![g.add(x, g.linear(h, w2, Some(b2)))]
        }
        Pattern::ConvMean => {
            let y = cx.qdq(cx.conv(x, case.shape[1], conv_out(case), kernel(case)), Q_CONV);
            steps.push(step(Q_MEAN));
            vec![cx.qdq(cx.mean(y, &dims, keepdim, false), Q_MEAN)]
        }
        Pattern::ConvMeanConv => {
            if q {
                return na("conv_mean_conv has no qs8 form (the last conv would amplify the mean's step)");
            }
            let y = cx.conv(x, case.shape[1], conv_out(case), kernel(case));
            let m = cx.mean(y, &dims, keepdim, false);
            vec![cx.conv(m, 1, 4, kernel(case))]
        }
        Pattern::ConvSubMean => {
            if q {
                return na("conv_sub_mean has no qs8 form");
            }
            let y = cx.conv(x, case.shape[1], conv_out(case), kernel(case));
            vec![cx.sub(y, cx.mean(y, &dims, keepdim, false))]
        }
        Pattern::AdaptivePool => {
            let y = if pool_conv(case) {
                cx.qdq(cx.conv(x, case.shape[1], conv_out(case), kernel(case)), Q_CONV)
            } else {
                x
            };
            steps.push(step(Q_MEAN));
            vec![cx.qdq(g.adaptive_avg_pool2d(y, [1, 1]), Q_MEAN)]
        }
        Pattern::SharedInput => {
            // Variant bit 1: the conv is defined (visited) before the mean.
            let conv_first = case.variant & 2 != 0;
            let mut conv = None;
            if conv_first {
                conv = Some(cx.conv(x, case.shape[1], conv_out(case), kernel(case)));
            }
            let m = cx.qdq(cx.mean(x, &dims, keepdim, false), Q_MEAN);
            let c = conv.unwrap_or_else(|| cx.conv(x, case.shape[1], conv_out(case), kernel(case)));
            steps.push(step(Q_MEAN));
            steps.push(step(Q_CONV));
            vec![m, cx.qdq(c, Q_CONV)]
        }
    };
    steps.resize(outputs.len(), None);
    let graph = cx.g.finish(&outputs).map_err(|e| NotApplicable(format!("the case does not build: {e}")))?;
    Ok((graph, steps))
}

/// The signed fp32 version of weight number `k` of a magnitude graph, as a constant in it.
fn signed_weight_like(cx: &Ctx, shape: &[usize], k: u64) -> T {
    let seed = cx.case.seed ^ 0x5EED_0000_0000_0000 ^ k.wrapping_mul(0x9E37_79B9);
    let t = engine::generate(&TensorSpec::new(cx.case.dtype, shape), seed, false);
    let v = t.values_f64();
    cx.g.constant(Tensor::from_f64(shape, ElemType::F32, None, &v))
}

/// Applies an [`InvalidKind`] to a valid graph. Specs stay as they were, so `validate`
/// (and the delegate's own checks) must notice.
fn corrupt(graph: &mut Graph, case: &Case, kind: InvalidKind) -> Result<(), NotApplicable> {
    let find = |g: &Graph, f: &dyn Fn(&Op) -> bool| g.nodes.iter().position(|n| f(&n.op));
    let mean = find(graph, &|op| matches!(op, Op::Mean { .. }));
    match kind {
        InvalidKind::DimOutOfRange | InvalidKind::RepeatedDim | InvalidKind::MeanDtypeQs8 => {
            let Some(m) = mean else { return na("no mean to corrupt") };
            let rank = graph.nodes[graph.nodes[m].inputs[0]].spec.rank() as i64;
            if let Op::Mean { dims, dtype, .. } = &mut graph.nodes[m].op {
                match kind {
                    InvalidKind::DimOutOfRange => *dims = vec![rank],
                    InvalidKind::RepeatedDim => *dims = vec![0, -rank.max(1)],
                    _ => *dtype = Some(ElemType::Qs8),
                }
            }
        }
        InvalidKind::RankTooHigh => {
            let x = graph.inputs[0];
            graph.nodes[x].spec.shape.insert(0, Dim::fixed(1));
            graph.nodes[x].spec.format = MemoryFormat::Contiguous;
        }
        InvalidKind::ZeroSizedDim => {
            let x = graph.inputs[0];
            graph.nodes[x].spec.shape[0] = Dim::fixed(0);
        }
        InvalidKind::MeanOnQs8 => {
            let Some(m) = mean else { return na("no mean to corrupt") };
            let src = graph.nodes[m].inputs[0];
            match &graph.nodes[src].op {
                Op::Dequantize(_) => {
                    let q = graph.nodes[src].inputs[0];
                    graph.nodes[m].inputs[0] = q;
                }
                _ => return na("mean_on_qs8 needs a qs8 case"),
            }
        }
        InvalidKind::BadQuantScale | InvalidKind::BadZeroPoint => {
            let Some(qn) = find(graph, &|op| matches!(op, Op::Quantize(_))) else {
                return na("no quantize to corrupt (needs dtype qs8)");
            };
            if let Op::Quantize(p) = &mut graph.nodes[qn].op {
                if kind == InvalidKind::BadQuantScale {
                    p.scale = 0.0;
                } else {
                    p.zero_point = 300;
                }
            }
        }
        InvalidKind::ConvChannelMismatch => {
            let Some(c) = find(graph, &|op| matches!(op, Op::Conv2d(_))) else { return na("no conv to corrupt") };
            let mut w = graph.nodes[c].inputs[1];
            if matches!(graph.nodes[w].op, Op::Dequantize(_)) {
                // Corrupt the int8 constant under the dequantize, and the dequantize's spec.
                let dq = w;
                w = graph.nodes[dq].inputs[0];
                graph.nodes[dq].spec.shape[1].size += 1;
            }
            let Op::Constant { tensor } = &graph.nodes[w].op else { return na("conv weight is not a constant") };
            let mut shape = tensor.shape.clone();
            shape[1] += 1;
            let n: usize = shape.iter().product();
            let data = match &tensor.data {
                TensorData::Qs8(_) => TensorData::Qs8(vec![1; n]),
                d => TensorData::from_f64(d.dtype(), &vec![0.5; n], None),
            };
            let t = Tensor { shape, format: MemoryFormat::Contiguous, quant: tensor.quant, data };
            graph.nodes[w].spec = TensorSpec::of(&t);
            graph.nodes[w].op = Op::Constant { tensor: t };
        }
        InvalidKind::NotBroadcastable => {
            // Replace the second operand of the first add with a constant whose last dim
            // is one longer (never 1, never equal): it can not broadcast.
            let Some(a) = find(graph, &|op| matches!(op, Op::Binary(_))) else { return na("no binary op") };
            let other = graph.nodes[a].inputs[1];
            let spec = graph.nodes[other].spec.clone();
            let mut shape = spec.max_shape();
            let Some(last) = shape.last_mut() else { return na("0-D operand") };
            *last += 1;
            let n: usize = shape.iter().product();
            let t = Tensor::from_f64(&shape, spec.dtype, None, &vec![1.0; n]);
            // Constants may appear anywhere before their user: put it first, shifting ids.
            insert_front(graph, Op::Constant { tensor: t.clone() }, TensorSpec::of(&t));
            graph.nodes[a + 1].inputs[1] = 0;
        }
        InvalidKind::PoolOutputSize => {
            let Some(p) = find(graph, &|op| matches!(op, Op::AdaptiveAvgPool2d { .. })) else {
                return na("no adaptive_avg_pool2d to corrupt");
            };
            graph.nodes[p].op = Op::AdaptiveAvgPool2d { output_size: [2, 2] };
        }
        InvalidKind::DynamicAboveBound => {
            if case.dynamic.is_empty() {
                return na("dynamic_above_bound needs a dynamic dim");
            }
        }
    }
    Ok(())
}

/// Inserts a node at id 0, renumbering every reference.
fn insert_front(graph: &mut Graph, op: Op, spec: TensorSpec) {
    for n in &mut graph.nodes {
        n.inputs.iter_mut().for_each(|i| *i += 1);
    }
    graph.inputs.iter_mut().for_each(|i| *i += 1);
    graph.outputs.iter_mut().for_each(|i| *i += 1);
    graph.nodes.insert(0, reference::graph::Node { op, inputs: vec![], spec });
}

/// The concrete input shapes of one run: the case's run shape for the main input (and its
/// twin), with a dynamic dim pushed above its bound for `dynamic_above_bound`.
pub fn run_input_shapes(case: &Case, graph: &Graph, run: &[usize]) -> Vec<Vec<usize>> {
    let mut s = run.to_vec();
    if case.invalid == Some(InvalidKind::DynamicAboveBound) {
        if let Some(&d) = case.dynamic.first() {
            if d < s.len() {
                s[d] = case.shape[d] + 1;
            }
        }
    }
    graph.inputs.iter().map(|_| s.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use reference::graph::ErrorClass;

    fn case(p: Pattern, shape: &[usize]) -> Case {
        Case::new(p, shape, &[-1], true)
    }

    #[test]
    fn every_pattern_builds_in_every_float_dtype() {
        for p in Pattern::ALL {
            let shape: &[usize] = match p {
                Pattern::QkNorm | Pattern::PreNormMlp | Pattern::RmsNorm => &[2, 3, 8],
                _ => &[1, 3, 4, 5],
            };
            for dt in [ElemType::F32, ElemType::F16, ElemType::Bf16] {
                let mut c = case(p, shape);
                c.dtype = dt;
                let b = build(&c).unwrap_or_else(|e| panic!("{p:?} {dt}: {e}"));
                assert!(b.graph.validate().is_ok());
                let m = b.magnitude(&c).expect("float cases have a magnitude twin");
                assert_eq!(m.outputs.len(), b.graph.outputs.len());
                assert!(b.acc_len >= 1);
            }
        }
    }

    #[test]
    fn qs8_patterns_wrap_in_quantize_and_know_their_step() {
        for p in [
            Pattern::Mean,
            Pattern::AddMean,
            Pattern::Gap,
            Pattern::ConvMean,
            Pattern::SharedInput,
            Pattern::AdaptivePool,
        ] {
            let mut c = case(p, &[1, 3, 4, 5]);
            c.dtype = ElemType::Qs8;
            let b = build(&c).unwrap();
            assert!(b.graph.nodes.iter().any(|n| matches!(n.op, Op::Quantize(_))));
            assert_eq!(b.out_step[0], Some(Q_MEAN.scale));
            assert_eq!(b.input_grid, Some(Q_IN.scale));
        }
        let mut c = case(Pattern::RmsNorm, &[2, 8]);
        c.dtype = ElemType::Qs8;
        assert!(build(&c).is_err());
    }

    #[test]
    fn every_invalid_kind_is_rejected_by_the_reference_with_its_class() {
        use InvalidKind::*;
        let expect = [
            (DimOutOfRange, ErrorClass::Shape),
            (RepeatedDim, ErrorClass::Shape),
            (RankTooHigh, ErrorClass::Shape),
            (ZeroSizedDim, ErrorClass::Shape),
            (MeanDtypeQs8, ErrorClass::Dtype),
            (MeanOnQs8, ErrorClass::Dtype),
            (BadQuantScale, ErrorClass::Quant),
            (BadZeroPoint, ErrorClass::Quant),
            (ConvChannelMismatch, ErrorClass::Conv),
            (NotBroadcastable, ErrorClass::Shape),
            (PoolOutputSize, ErrorClass::Shape),
        ];
        for (kind, class) in expect {
            let mut c = case(Pattern::ConvMean, &[1, 3, 4, 5]);
            if matches!(kind, MeanOnQs8 | BadQuantScale | BadZeroPoint | NotBroadcastable) {
                c = case(Pattern::AddMean, &[1, 3, 4, 5]);
            }
            if kind == PoolOutputSize {
                c = case(Pattern::AdaptivePool, &[1, 3, 4, 5]);
            }
            if matches!(kind, MeanOnQs8 | BadQuantScale | BadZeroPoint) {
                c.dtype = ElemType::Qs8;
            }
            c.invalid = Some(kind);
            let b = build(&c).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            let err = b.graph.validate().expect_err(&format!("{kind:?} must be invalid"));
            assert_eq!(err.kind.class(), class, "{kind:?}: {err}");
        }
    }

    #[test]
    fn gap_only_is_exactly_the_gap_eligible_cases() {
        let mut c = Case::new(Pattern::Gap, &[1, 2, 3, 3], &[], true);
        assert!(build(&c).unwrap().gap_only);
        c.dtype = ElemType::Bf16;
        assert!(!build(&c).unwrap().gap_only);
        let c = Case::new(Pattern::ConvMean, &[1, 2, 3, 3], &[-1, -2], true);
        assert!(build(&c).unwrap().gap_only);
        let c = Case::new(Pattern::ConvMean, &[1, 2, 3, 3], &[-1, -2], false);
        assert!(!build(&c).unwrap().gap_only);
        let c = Case::new(Pattern::Mean, &[1, 2, 3, 3], &[3, -2], true);
        assert!(build(&c).unwrap().gap_only);
        let c = Case::new(Pattern::Mean, &[2, 3, 3], &[1, 2], true);
        assert!(!build(&c).unwrap().gap_only);
        let c = Case::new(Pattern::ConvSubMean, &[1, 2, 3, 3], &[], true);
        assert!(!build(&c).unwrap().gap_only);
        let c = Case::new(Pattern::AdaptivePool, &[1, 2, 3, 3], &[], false);
        assert!(build(&c).unwrap().gap_only);
    }

    #[test]
    fn adaptive_pool_is_the_pool_of_the_conv_or_the_input() {
        let mut c = Case::new(Pattern::AdaptivePool, &[1, 3, 4, 5], &[], false);
        let pools = |b: &Built| b.graph.nodes.iter().filter(|n| matches!(n.op, Op::AdaptiveAvgPool2d { .. })).count();
        let convs = |b: &Built| b.graph.nodes.iter().filter(|n| matches!(n.op, Op::Conv2d(_))).count();
        let b = build(&c).unwrap();
        assert_eq!((pools(&b), convs(&b)), (1, 1));
        let out = &b.graph.nodes[b.graph.outputs[0]].spec;
        assert_eq!(out.max_shape(), vec![1, 4, 1, 1]);
        c.variant = 2;
        let b = build(&c).unwrap();
        assert_eq!((pools(&b), convs(&b)), (1, 0));
        c.mean_dtype = Some(ElemType::F16);
        assert!(build(&c).is_err());
    }
}
