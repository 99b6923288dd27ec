//! Graph builders for every [`Pattern`], plus the "magnitude" twin each oracle uses to
//! derive its tolerance.
//!
//! A case builds up to three graphs from the same knobs:
//! - the **graph under test**, exactly as the case describes it;
//! - its **magnitude graph** (fp32, same structure): inputs replaced by `|x|`, weights by
//!   `|w|`, subtraction by addition, quantize/dequantize dropped. Evaluated by the reference,
//!   it gives `M_i`, a bound on the sum of absolute values of everything that contributes to
//!   output `i`, which scales every rounding error made on the way (see `oracle::outputs`).
//!   Where a normalizer is computed from a value that itself carries rounding error (QK-norm
//!   after a linear), the magnitude graph multiplies by `1 + r / r_M` to cover the error of
//!   the normalizer (`r` from the true values, `r_M` from the magnitudes). Each op that
//!   rounds and may underflow is clamped to at least the smallest normal value of the type
//!   the graph rounds to, and an RMSNorm output is multiplied by `1 + λ r^2` (the underflow
//!   term, derived in `oracle::outputs`). Weights and scalars are the graph's own, made
//!   exactly fp32 before their absolute values are taken;
//! - for cases whose output is their only rounding below fp32 (a mean, a mean of `x + x`),
//!   a **wide twin**: the same graph in fp32 (fp16/bf16 inputs and constants converted
//!   exactly), which gives the exact value rounded to fp32 for the rounding-mode rule.
//!
//! qs8 patterns use power-of-two scales and inputs on the input's quantization grid, so every
//! quantize before the last one is exact in any correct implementation and the last one may
//! differ by one step only, and by none when the mean counts are powers of two
//! ([`qs8_exact`], derived in `oracle::outputs`).

use crate::case::{Case, InvalidCase, InvalidKind, Pattern};
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
    /// The fp32 wide twin, built on first use: see [`Built::wide`].
    wide: std::cell::OnceCell<Option<Graph>>,
    /// The output's last op is the only one that may round to a precision below fp32 (its
    /// earlier ops are exact: `x + x`), so the rounding-mode rule of `oracle::outputs`
    /// applies to fp16/bf16 outputs.
    pub rounds_once: bool,
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

/// Why a case can not be built: see [`InvalidCase`].
pub type NotApplicable = InvalidCase;

/// A combination of knobs the pattern does not build, with the field at fault.
fn invalid_field<T>(field: &str, msg: impl Into<String>) -> Result<T, NotApplicable> {
    Err(InvalidCase::new(field, msg))
}

/// Builds the graph under test (and its magnitude twin) for a case.
pub fn build(case: &Case) -> Result<Built, NotApplicable> {
    check_case(case)?;
    let (graph, out_step) = build_graph(case, Kind::UnderTest)?;
    let mut graph = graph;
    if let Some(kind) = case.invalid {
        corrupt(&mut graph, case, kind)?;
    }
    let (acc_len, ops) = chain_cost(case);
    Ok(Built {
        graph,
        twin: std::cell::OnceCell::new(),
        wide: std::cell::OnceCell::new(),
        rounds_once: case.invalid.is_none()
            && case.dtype != ElemType::Qs8
            && matches!(case.pattern, Pattern::Mean | Pattern::AddMean | Pattern::Gap),
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
                wanted.then(|| build_graph(case, Kind::Magnitude).ok().map(|(g, _)| g)).flatten()
            })
            .as_ref()
    }

    /// The wide twin of `case`: the graph under test with every fp16/bf16 type made fp32
    /// (inputs and constants converted exactly, a mean's `dtype=` dropped), so the reference
    /// gives each output's exact value rounded once to fp32 (see the rounding-mode rule in
    /// `oracle::outputs`). Only for [`Built::rounds_once`] cases; built on first use.
    pub fn wide(&self, case: &Case) -> Option<&Graph> {
        self.wide
            .get_or_init(|| self.rounds_once.then(|| build_graph(case, Kind::Wide).ok().map(|(g, _)| g)).flatten())
            .as_ref()
    }
}

/// Which of a case's graphs [`build_graph`] builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// The graph under test.
    UnderTest,
    /// The magnitude twin (see the module docs).
    Magnitude,
    /// The wide twin (see [`Built::wide`]).
    Wide,
}

fn check_case(case: &Case) -> Result<(), NotApplicable> {
    case.check()?;
    let rank = case.shape.len();
    if case.pattern.needs_rank4() && rank != 4 {
        return invalid_field(
            "shape",
            format!("pattern {} needs a 4-D input, not {:?}", case.pattern.name(), case.shape),
        );
    }
    if let Some(r) = case.format.required_rank() {
        if r != rank {
            return invalid_field(
                "format",
                format!("{} needs rank {r}, the input has rank {rank}", case.format.name()),
            );
        }
    }
    match case.pattern {
        Pattern::QkNorm => {
            let heads = heads(case);
            // `%`, not `is_multiple_of`: the workspace supports Rust 1.80.
            #[allow(clippy::manual_is_multiple_of)]
            let splits = case.shape.get(2).is_some_and(|&e| e % heads == 0);
            if rank != 3 || !splits {
                return invalid_field("param", "qk_norm needs [B, S, H*Dh] with param = H dividing the last dim");
            }
        }
        Pattern::PreNormMlp | Pattern::RmsNorm if case.dynamic.contains(&(rank - 1)) => {
            return invalid_field("dynamic", "the normalized (last) dim can not be dynamic");
        }
        _ => {}
    }
    if case.dtype == ElemType::Qs8 && case.mean_dtype.is_some() {
        return invalid_field("mean_dtype", "qs8 cases take no dtype argument");
    }
    if matches!(case.pattern, Pattern::QkNorm | Pattern::PreNormMlp) && !case.dynamic.is_empty() {
        return invalid_field("dynamic", "reshape and linear patterns take static shapes");
    }
    if case.pattern.needs_rank4() && case.dynamic.contains(&1) {
        return invalid_field("dynamic", "conv channels can not be dynamic");
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
        _ => (case.dims.clone(), case.keepdim),
    }
}

fn is_gap_only(case: &Case) -> bool {
    let gap_patterns = [Pattern::Mean, Pattern::AddMean, Pattern::Gap, Pattern::ConvMean, Pattern::SharedInput];
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
        Pattern::ConvMean => {
            // The mean reads the conv's output, which has `conv_out` channels (H and W kept):
            // its count is taken there, not on the input (a mean over dim 1 or over every dim
            // of a conv with more output than input channels averages more terms).
            let mut y = case.shape.clone();
            y[1] = conv_out(case);
            (c * k * k + reduced_count(&dims, &y).max(1), 2)
        }
        Pattern::ConvMeanConv => (c * k * k + conv_out(case) + k * k, 3),
        Pattern::ConvSubMean => (c * k * k + conv_out(case), 3),
        Pattern::SharedInput => ((c * k * k).max(n), 1),
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
        (Pattern::ConvMean, 0) => {
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
    /// Building the wide twin.
    wide: bool,
    /// Float type every op computes in (fp32 for qs8 and both twins).
    dt: ElemType,
    /// Wrap ops in quantize/dequantize.
    q: bool,
    /// Magnitude twin: the smallest normal value `λ` of the types the graph under test
    /// rounds to (see [`Ctx::rounded`]).
    floor: Option<f32>,
    next_weight: std::cell::Cell<u64>,
}

/// The smallest positive normal value of a float type (below it a rounding errs by up to
/// half the smallest subnormal, absolutely).
fn smallest_normal(dt: ElemType) -> f32 {
    match dt {
        ElemType::F16 => 6.103_515_6e-5, // 2^-14
        _ => f32::MIN_POSITIVE,          // 2^-126, fp32 and bf16 alike
    }
}

impl Ctx<'_> {
    /// A seeded weight of `shape` in the case's dtype, as the graph under test has it; in a
    /// twin, converted exactly to fp32 (magnitude: its absolute values).
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
        let t = engine::generate(&TensorSpec::new(self.case.dtype, shape), seed, false);
        self.g.constant(match (self.abs, self.wide) {
            (true, _) => abs_f32(&t),
            (_, true) => to_f32(&t),
            _ => t,
        })
    }

    /// A 0-D constant in the compute dtype, of the value the graph under test has (rounded
    /// to the case's dtype first, so a twin's `eps` is the graph's own).
    fn scalar(&self, v: f64) -> T {
        let v = match self.case.dtype {
            ElemType::Qs8 => v,
            dt => Tensor::from_f64(&[], dt, None, &[v]).values_f64()[0],
        };
        self.g.constant(Tensor::from_f64(&[], self.dt, None, &[v]))
    }

    /// The result of an op that rounds and may underflow (a product, a mean's scaling, a
    /// conv or linear): in the magnitude twin, at least `λ` (see `oracle::outputs`,
    /// underflow); elsewhere `x` itself. Sums need none: a sum that lands below `λ` is exact.
    fn rounded(&self, x: T) -> T {
        match self.floor {
            Some(l) => self.g.clamp(x, Some(l), None),
            None => x,
        }
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
            Some(d) if with_dtype && self.wide => {
                // `dtype=` casts the input before the mean (PyTorch, and the reference): the
                // wide twin casts it too, then widens the cast values exactly.
                let cast = self.g.to_dtype(self.g.to_dtype(x, d), ElemType::F32);
                self.g.mean(cast, dims, keepdim)
            }
            Some(d) if with_dtype && !self.abs => self.g.mean_dtype(x, dims, keepdim, d),
            _ => self.rounded(self.g.mean(x, dims, keepdim)),
        }
    }

    fn conv(&self, x: T, cin: usize, cout: usize, k: usize) -> T {
        let w = self.weight(&[cout, cin, k, k]);
        let b = if self.q { None } else { Some(self.weight(&[cout])) };
        let p = Conv2dParams { padding: [k / 2, k / 2], ..Default::default() };
        self.rounded(self.g.conv2d(x, w, b, p))
    }

    fn linear(&self, x: T, w: T, b: Option<T>) -> T {
        self.rounded(self.g.linear(x, w, b))
    }

    /// `x * rsqrt(mean(x^2, -1, keepdim) + eps) * w` over a last dim of `d`.
    /// `actual` (magnitude graphs only) is the true-valued twin of `x`, used for the
    /// normalizer when `x` carries error (see the module docs).
    fn rms_norm(&self, x: T, d: usize, actual: Option<T>) -> T {
        let eps = self.scalar(1e-5);
        let w = self.weight(&[d]);
        // The normalizer's own ops get no floor: `rsqrt` falls as its input grows.
        let normalizer = |v: T| {
            let ms = self.g.mean(self.g.square(v), &[-1], true);
            self.g.rsqrt(self.g.add(ms, eps))
        };
        let Some(l) = self.floor.filter(|_| self.abs) else {
            return self.g.mul(self.g.mul(x, normalizer(x)), w);
        };
        let one = self.scalar(1.0);
        let (r, factor) = match actual {
            Some(a) => {
                let r = normalizer(a);
                let r_m = normalizer(x);
                (r, Some(self.g.add(one, self.g.div(r, r_m))))
            }
            None => (normalizer(x), None),
        };
        // Underflow in the normalizer's input moves `r` by a relative `λ r^2` at most
        // (see `oracle::outputs`, underflow).
        let lambda = self.g.constant(Tensor::from_f64(&[], ElemType::F32, None, &[l as f64]));
        let under = self.g.add(one, self.g.mul(lambda, self.g.square(r)));
        let xr = self.rounded(self.g.mul(x, r));
        let xr = match factor {
            Some(f) => self.g.mul(xr, f),
            None => xr,
        };
        self.rounded(self.g.mul(self.g.mul(xr, under), w))
    }
}

fn abs_f32(t: &Tensor) -> Tensor {
    let v: Vec<f64> = t.values_f64().into_iter().map(f64::abs).collect();
    let shape = t.shape.clone();
    Tensor::from_f64(&shape, ElemType::F32, None, &v).to_format(t.format)
}

/// `t` in fp32, exactly (every fp16/bf16 value is an fp32 value), in its layout.
fn to_f32(t: &Tensor) -> Tensor {
    Tensor::from_f64(&t.shape, ElemType::F32, None, &t.values_f64()).to_format(t.format)
}

/// The wide twin's inputs for concrete inputs of the graph under test: each in fp32.
pub fn wide_inputs(inputs: &[Tensor]) -> Vec<Tensor> {
    inputs.iter().map(to_f32).collect()
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
fn build_graph(case: &Case, kind: Kind) -> Result<(Graph, Vec<Option<f32>>), NotApplicable> {
    let (abs, wide) = (kind == Kind::Magnitude, kind == Kind::Wide);
    let q = case.dtype == ElemType::Qs8 && kind == Kind::UnderTest;
    let dt = if kind != Kind::UnderTest || case.dtype == ElemType::Qs8 { ElemType::F32 } else { case.dtype };
    // The floor is the largest smallest-normal of the types the graph rounds to.
    let floor = abs.then(|| {
        let l = smallest_normal(case.dtype);
        case.mean_dtype.map_or(l, |d| l.max(smallest_normal(d)))
    });
    let cx = Ctx { g: GraphBuilder::new(), case, abs, wide, dt, q, floor, next_weight: std::cell::Cell::new(0) };
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
                return invalid_field("dtype", "rms_norm has no qs8 form");
            }
            vec![cx.rms_norm(x, case.shape[rank - 1], None)]
        }
        Pattern::QkNorm => {
            if q {
                return invalid_field("dtype", "qk_norm has no qs8 form");
            }
            let (b, s, e) = (case.shape[0] as i64, case.shape[1] as i64, case.shape[2]);
            let h = heads(case);
            let dh = e / h;
            let heads = |v: T| g.reshape(v, &[b, s, h as i64, dh as i64]);
            let wq = cx.weight(&[e, e]);
            let qh = heads(cx.linear(x, wq, None));
            let normed = match actual_in {
                Some(a) => {
                    // The true-valued projection needs the signed weights (and no floor).
                    let wq_true = signed_weight_like(&cx, &[e, e], 0);
                    let qa = heads(g.linear(a, wq_true, None));
                    cx.rms_norm(qh, dh, Some(qa))
                }
                None => cx.rms_norm(qh, dh, None),
            };
            let flat = g.reshape(normed, &[b, s, e as i64]);
            let wo = cx.weight(&[e, e]);
            vec![cx.linear(flat, wo, None)]
        }
        Pattern::PreNormMlp => {
            if q {
                return invalid_field("dtype", "pre_norm_mlp has no qs8 form");
            }
            let d = case.shape[rank - 1];
            let f = mlp_hidden(case);
            let n = cx.rms_norm(x, d, None);
            let (w1, b1) = (cx.weight(&[f, d]), cx.weight(&[f]));
            let h = g.relu(cx.linear(n, w1, Some(b1)));
            let (w2, b2) = (cx.weight(&[d, f]), cx.weight(&[d]));
            vec![g.add(x, cx.linear(h, w2, Some(b2)))]
        }
        Pattern::ConvMean => {
            let y = cx.qdq(cx.conv(x, case.shape[1], conv_out(case), kernel(case)), Q_CONV);
            steps.push(step(Q_MEAN));
            vec![cx.qdq(cx.mean(y, &dims, keepdim, false), Q_MEAN)]
        }
        Pattern::ConvMeanConv => {
            if q {
                return invalid_field(
                    "dtype",
                    "conv_mean_conv has no qs8 form (the last conv would amplify the mean's step)",
                );
            }
            let y = cx.conv(x, case.shape[1], conv_out(case), kernel(case));
            let m = cx.mean(y, &dims, keepdim, false);
            vec![cx.conv(m, 1, 4, kernel(case))]
        }
        Pattern::ConvSubMean => {
            if q {
                return invalid_field("dtype", "conv_sub_mean has no qs8 form");
            }
            let y = cx.conv(x, case.shape[1], conv_out(case), kernel(case));
            vec![cx.sub(y, cx.mean(y, &dims, keepdim, false))]
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
    let graph =
        cx.g.finish(&outputs).map_err(|e| InvalidCase::new("pattern", format!("the case does not build: {e}")))?;
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
            let Some(m) = mean else { return invalid_field("invalid", "no mean to corrupt") };
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
            let Some(m) = mean else { return invalid_field("invalid", "no mean to corrupt") };
            let src = graph.nodes[m].inputs[0];
            match &graph.nodes[src].op {
                Op::Dequantize(_) => {
                    let q = graph.nodes[src].inputs[0];
                    graph.nodes[m].inputs[0] = q;
                }
                _ => return invalid_field("invalid", "mean_on_qs8 needs a qs8 case"),
            }
        }
        InvalidKind::BadQuantScale | InvalidKind::BadZeroPoint => {
            let Some(qn) = find(graph, &|op| matches!(op, Op::Quantize(_))) else {
                return invalid_field("invalid", "no quantize to corrupt (needs dtype qs8)");
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
            let Some(c) = find(graph, &|op| matches!(op, Op::Conv2d(_))) else {
                return invalid_field("invalid", "no conv to corrupt");
            };
            let mut w = graph.nodes[c].inputs[1];
            if matches!(graph.nodes[w].op, Op::Dequantize(_)) {
                // Corrupt the int8 constant under the dequantize, and the dequantize's spec.
                let dq = w;
                w = graph.nodes[dq].inputs[0];
                graph.nodes[dq].spec.shape[1].size += 1;
            }
            let Op::Constant { tensor } = &graph.nodes[w].op else {
                return invalid_field("invalid", "conv weight is not a constant");
            };
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
            let Some(a) = find(graph, &|op| matches!(op, Op::Binary(_))) else {
                return invalid_field("invalid", "no binary op");
            };
            let other = graph.nodes[a].inputs[1];
            let spec = graph.nodes[other].spec.clone();
            let mut shape = spec.max_shape();
            let Some(last) = shape.last_mut() else { return invalid_field("invalid", "0-D operand") };
            *last += 1;
            let n: usize = shape.iter().product();
            let t = Tensor::from_f64(&shape, spec.dtype, None, &vec![1.0; n]);
            // Constants may appear anywhere before their user: put it first, shifting ids.
            insert_front(graph, Op::Constant { tensor: t.clone() }, TensorSpec::of(&t));
            graph.nodes[a + 1].inputs[1] = 0;
        }
        InvalidKind::DynamicAboveBound => {
            if case.dynamic.is_empty() {
                return invalid_field("invalid", "dynamic_above_bound needs a dynamic dim");
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
        for p in [Pattern::Mean, Pattern::AddMean, Pattern::Gap, Pattern::ConvMean, Pattern::SharedInput] {
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
        ];
        for (kind, class) in expect {
            let mut c = case(Pattern::ConvMean, &[1, 3, 4, 5]);
            if matches!(kind, MeanOnQs8 | BadQuantScale | BadZeroPoint | NotBroadcastable) {
                c = case(Pattern::AddMean, &[1, 3, 4, 5]);
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
    }

    #[test]
    fn a_conv_means_count_is_taken_on_the_conv_output() {
        // [1,1,1,22] with 8 output channels, mean over dims 1 and 3: 8 * 22 terms, not the
        // input's 1 * 22 (fuzz seed 1796117805173093017, case 56964: a false alarm).
        let mut c = Case::new(Pattern::ConvMean, &[1, 1, 1, 22], &[1, 3], false);
        c.param = 8;
        assert_eq!(build(&c).unwrap().acc_len, 1 + 8 * 22);
        // [4,1,6,6], 8 channels, 3x3 kernel, every dim: 9 + 4 * 8 * 6 * 6.
        let mut c = Case::new(Pattern::ConvMean, &[4, 1, 6, 6], &[], false);
        (c.param, c.variant) = (8, 1);
        assert_eq!(build(&c).unwrap().acc_len, 9 + 1152);
        // Dims that keep the channels count as before.
        let c = Case::new(Pattern::ConvMean, &[2, 3, 4, 5], &[2, 3], true);
        assert_eq!(build(&c).unwrap().acc_len, 3 + 20);
    }

    /// The magnitude twin's output 0 for inputs `x` of `case`.
    fn twin_of(case: &Case, x: Tensor) -> Vec<f64> {
        let b = build(case).unwrap();
        let m = b.magnitude(case).unwrap();
        reference::eval::run(m, &magnitude_inputs(case, &[x])).unwrap()[0].values_f64()
    }

    #[test]
    fn the_magnitude_twin_floors_each_rounding_at_the_smallest_normal() {
        // RMSNorm of [tiny, 1, 1, 1]: x * r is subnormal in fp32, where a rounding errs by
        // half the smallest subnormal, absolutely; the twin makes it at least 2^-126 before
        // the weight scales it (fuzz seed 4298143141532721928: a false alarm without).
        let c = Case::new(Pattern::RmsNorm, &[1, 4], &[-1], true);
        let w = engine::generate(
            &TensorSpec::new(ElemType::F32, &[4]),
            c.seed ^ 0x5EED_0000_0000_0000 ^ 1u64.wrapping_mul(0x9E37_79B9),
            false,
        );
        let w0 = w.values_f64()[0].abs();
        let x = Tensor::f32(&[1, 4], vec![1.0e-40, 1.0, 1.0, 1.0]);
        let m = twin_of(&c, x.clone());
        assert!(
            m[0] >= f32::MIN_POSITIVE as f64 * w0 * (1.0 - 1e-6),
            "{} < 2^-126 |w| = {}",
            m[0],
            f32::MIN_POSITIVE as f64 * w0
        );
        // Normal values are left alone (to f32 rounding).
        let plain = reference::eval::run(&build(&c).unwrap().graph, &[x]).unwrap()[0].values_f64();
        assert!((m[1] - plain[1].abs()).abs() <= 1e-6 * m[1]);
        // fp16 rounds to a type whose smallest normal is 2^-14.
        let c16 = Case { dtype: ElemType::F16, ..Case::new(Pattern::Mean, &[1, 4], &[-1], true) };
        let x16 = Tensor::from_f64(&[1, 4], ElemType::F16, None, &[1e-7, 0.0, 0.0, 0.0]);
        assert_eq!(twin_of(&c16, x16)[0], 2f64.powi(-14));
    }

    #[test]
    fn the_wide_twin_is_the_graph_in_fp32_for_single_rounding_cases_only() {
        let c = Case { dtype: ElemType::Bf16, ..Case::new(Pattern::AddMean, &[2, 3], &[-1], true) };
        let b = build(&c).unwrap();
        assert!(b.rounds_once);
        let w = b.wide(&c).expect("a bf16 add_mean has a wide twin");
        assert!(w.nodes.iter().all(|n| n.spec.dtype == ElemType::F32));
        let x = Tensor::from_f64(&[2, 3], ElemType::Bf16, None, &[1.0, 2.0, 4.0, 1.0, 1.0, 1.0 + 2f64.powi(-7)]);
        let v = reference::eval::run(w, &wide_inputs(&[x])).unwrap()[0].values_f64();
        // 2 (1 + 2 + 4) / 3 = 14/3 in f32, not in bf16; 2 (3 + 2^-7) / 3 likewise.
        assert_eq!(v[0], (14.0f32 / 3.0) as f64);
        assert_eq!(v[1], ((6.0 + 2f64.powi(-6)) / 3.0) as f32 as f64);
        let c = Case { dtype: ElemType::F16, ..Case::new(Pattern::RmsNorm, &[2, 4], &[-1], true) };
        let b = build(&c).unwrap();
        assert!(!b.rounds_once && b.wide(&c).is_none());
        // `mean(dtype=fp16)` of fp32 values averages the values cast to fp16 (fuzz seed
        // 20261202, case 3215045: a false alarm while the wide twin averaged the fp32 ones).
        let c = Case { mean_dtype: Some(ElemType::F16), ..Case::new(Pattern::Mean, &[1, 2], &[-1], true) };
        let b = build(&c).unwrap();
        let x = Tensor::f32(&[1, 2], vec![1.0 + 2f32.powi(-12), 3.0]);
        let v = reference::eval::run(b.wide(&c).unwrap(), &wide_inputs(&[x])).unwrap()[0].values_f64();
        assert_eq!(v, vec![2.0]);
    }
}
