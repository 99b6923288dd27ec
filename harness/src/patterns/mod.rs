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
//! differ by one step only, and by none when the mean counts are powers of two. A case with
//! a real quantizer's parameters (`qparams`, `mean` and `adaptive_pool` without conv: the
//! input's quantize is exact on its grid whatever the scale) gets a magnitude twin (the mean
//! of `|x|`) and a wide twin (the mean before the last quantize), for the tie rule.
//!
//! [`knobs`] reads the case's knobs, [`ctx`] is the builder, [`graph`] builds each
//! pattern's graph, [`twins`] makes the twins' inputs, [`corrupt`] makes invalid cases.

pub mod corrupt;
pub mod ctx;
pub mod graph;
pub mod knobs;
pub mod random;
pub mod twins;

pub use knobs::{mean_dims, qs8_exact};
pub use twins::{magnitude_inputs, wide_inputs};

use crate::case::{Case, InvalidCase, InvalidKind, Pattern};
use corrupt::corrupt;
use graph::build_graph;
use knobs::{chain_cost, check_case, is_gap_only};
use reference::graph::Graph;
use reference::{ElemType, QuantParams};

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

/// The graph input's quantization: the case's (a real quantizer's), else [`Q_IN`].
pub fn q_in(case: &Case) -> QuantParams {
    case.qparams.and_then(|q| q.input).unwrap_or(Q_IN)
}

/// The output's quantization (after the mean or pool): the case's, else [`Q_MEAN`].
pub fn q_out(case: &Case) -> QuantParams {
    case.qparams.and_then(|q| q.output).unwrap_or(Q_MEAN)
}

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
    /// qs8 cases: the graph input's quantization (inputs are snapped to its grid).
    pub input_grid: Option<QuantParams>,
    /// qs8 with a real quantizer's parameters (`Case::qparams`): the output's one quantize
    /// is the only inexact step, judged per element by the tie rule of `oracle::outputs`,
    /// from the magnitude twin and the wide twin (the value before that quantize).
    pub ties: bool,
    /// The graph contains only GAP-eligible means (4-D, dims {2,3}, keepdim, no dtype
    /// argument, not bf16): its programs must be byte-identical across modes.
    pub gap_only: bool,
    /// The float type of smallest range the graph computes in (see `Tolerance::range`).
    pub range: ElemType,
}

/// Why a case can not be built: see [`InvalidCase`].
pub type NotApplicable = InvalidCase;

/// A combination of knobs the pattern does not build, with the field at fault.
fn invalid_field<T>(field: &str, msg: impl Into<String>) -> Result<T, NotApplicable> {
    Err(InvalidCase::new(field, msg))
}

/// Builds the graph under test (and its magnitude twin) for a case.
pub fn build(case: &Case) -> Result<Built, NotApplicable> {
    if case.pattern == Pattern::Random {
        return build_random(case);
    }
    if case.graph.is_some() {
        return invalid_field("graph", "only `random` cases carry a graph");
    }
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
        input_grid: (case.dtype == ElemType::Qs8).then_some(q_in(case)),
        ties: case.qparams.is_some() && case.invalid.is_none(),
        gap_only: is_gap_only(case),
        range: if case.dtype == ElemType::Qs8 { ElemType::F32 } else { case.dtype },
    })
}

/// A `random` case: its stored graph, checked (see `random`), and its chain costs.
fn build_random(case: &Case) -> Result<Built, NotApplicable> {
    case.check()?;
    let Some(rg) = &case.graph else { return invalid_field("graph", "a `random` case needs its graph") };
    let specs = random::build::specs(rg)?;
    let first = &rg.inputs[0];
    let fixed = [
        ("shape", case.shape != first.shape, "the first input's shape"),
        ("format", case.format != first.format, "the first input's format"),
        ("dtype", case.dtype != rg.coarsest(), "the graph's coarsest float type"),
        ("dynamic", !case.dynamic.is_empty(), "none (random graphs are static)"),
        ("run_shapes", !case.run_shapes.is_empty(), "none"),
        ("mean_dtype", case.mean_dtype.is_some(), "none (a mean node says its dtype)"),
        ("qparams", case.qparams.is_some(), "none (a qdq node says its own)"),
        ("invalid", case.invalid.is_some(), "none"),
        ("specials", case.specials, "false"),
    ];
    if let Some((field, _, want)) = fixed.iter().find(|f| f.1) {
        return invalid_field(field, format!("a `random` case's {field} must be {want}"));
    }
    let (largest, macs) = random::build::size_cost(rg, &specs);
    if largest > crate::case::MAX_ELEMS || macs > knobs::MAX_MACS {
        return invalid_field(
            "graph",
            format!(
                "a value of {largest} elements and {macs} multiply-accumulates; at most {} and {}",
                crate::case::MAX_ELEMS,
                knobs::MAX_MACS
            ),
        );
    }
    let graph = random::build::graph(rg, &specs, case.seed, random::build::Kind::UnderTest)?;
    let costs = random::build::costs(rg, &specs);
    let (acc_len, ops) = rg.outputs.iter().fold((1, 1), |(l, k), &o| (l.max(costs[o].0), k.max(costs[o].1)));
    Ok(Built {
        out_step: vec![None; graph.outputs.len()],
        graph,
        twin: std::cell::OnceCell::new(),
        wide: std::cell::OnceCell::new(),
        rounds_once: false,
        acc_len,
        ops,
        input_grid: None,
        ties: false,
        gap_only: false,
        range: rg.narrowest_range(),
    })
}

impl Built {
    /// The fp32 magnitude twin of `case`, the case this was built from (None for invalid
    /// graphs and qs8 cases). Built on first use: the outputs oracle asks for it only when an
    /// element is beyond its bound at the reference's magnitude (about one case in six).
    pub fn magnitude(&self, case: &Case) -> Option<&Graph> {
        self.twin
            .get_or_init(|| {
                if let Some(rg) = case.graph.as_ref().filter(|_| case.pattern == Pattern::Random) {
                    let specs = random::build::specs(rg).ok()?;
                    let kind = random::build::Kind::Magnitude { floor: random::build::floor_of(rg) };
                    return random::build::graph(rg, &specs, case.seed, kind).ok();
                }
                let wanted = case.invalid.is_none() && (case.dtype != ElemType::Qs8 || self.ties);
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
            .get_or_init(|| {
                (self.rounds_once || self.ties).then(|| build_graph(case, Kind::Wide).ok().map(|(g, _)| g)).flatten()
            })
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

/// The concrete input shapes of one run: the case's run shape for the main input (and its
/// twin), with a dynamic dim pushed above its bound for `dynamic_above_bound`.
pub fn run_input_shapes(case: &Case, graph: &Graph, run: &[usize]) -> Vec<Vec<usize>> {
    if case.pattern == Pattern::Random {
        // Each input at its own (static) shape.
        return graph.inputs.iter().map(|&i| graph.nodes[i].spec.max_shape()).collect();
    }
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
    use crate::engine;
    use reference::graph::{ErrorClass, Op, TensorSpec};
    use reference::Tensor;

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
            assert_eq!(b.input_grid, Some(Q_IN));
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
