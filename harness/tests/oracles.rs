//! The outputs oracle's tolerance is both valid (correct f32 implementations in any
//! summation order pass) and tight (a dropped element or a wrong divisor fails), checked
//! against simulated delegate outputs computed here, outside the delegate; and the qs8
//! tolerance is exact exactly where the derivation says so; an fp16/bf16 output that is
//! truncated instead of rounded to nearest fails in the normal range.

use harness::case::{Case, Pattern};
use harness::oracle::outputs::{compare_plain, compare_with as compare, tolerance, ulp, Given};
use harness::patterns::{build, magnitude_inputs, wide_inputs};
use reference::data::SplitMix64;
use reference::{ElemType, Tensor};

/// A mean over the last dim computed like a delegate would: f32 accumulation in the given
/// order, times the rounded reciprocal, then rounded to `dt`.
fn simulated_mean(
    x: &[f32],
    rows: usize,
    n: usize,
    order: &dyn Fn(usize) -> Vec<usize>,
    divisor: usize,
    drop: Option<usize>,
    dt: ElemType,
) -> Tensor {
    let mut out = vec![];
    for r in 0..rows {
        let row = &x[r * n..(r + 1) * n];
        let mut acc = 0f32;
        for k in order(n) {
            if Some(k) != drop {
                acc += row[k];
            }
        }
        out.push((acc * (1.0 / divisor as f32)) as f64);
    }
    Tensor::from_f64(&[rows, 1], dt, None, &out)
}

fn orders() -> Vec<Box<dyn Fn(usize) -> Vec<usize>>> {
    vec![
        Box::new(|n| (0..n).collect()),
        Box::new(|n| (0..n).rev().collect()),
        // 8 interleaved lanes, like a SIMD accumulator.
        Box::new(|n| (0..8).flat_map(|l| (l..n).step_by(8)).collect()),
    ]
}

fn check(dt: ElemType, sizes: &[usize], positive: bool) {
    let mut rng = SplitMix64::new(99);
    for &n in sizes {
        let rows = 3;
        let case = Case { dtype: dt, ..Case::new(Pattern::Mean, &[rows, n], &[-1], true) };
        let built = build(&case).unwrap();
        let x: Vec<f64> =
            (0..rows * n).map(|_| if positive { rng.range(0.5, 2.0) } else { rng.range(-1.0, 1.0) }).collect();
        let input = Tensor::from_f64(&[rows, n], dt, None, &x);
        let xs: Vec<f32> = input.values_f64().iter().map(|&v| v as f32).collect();
        let want = &reference::eval::run(&built.graph, std::slice::from_ref(&input)).unwrap()[0];
        let mag_in = magnitude_inputs(&case, std::slice::from_ref(&input));
        let mag = &reference::eval::run(built.magnitude(&case).unwrap(), &mag_in).unwrap()[0];
        // fp16/bf16: the rounding-mode rule applies too (a bare mean rounds once).
        let wide = built.wide(&case).map(|w| reference::eval::run(w, &wide_inputs(&[input])).unwrap()[0].values_f64());
        assert!(wide.is_some(), "a bare mean has a wide twin");
        let ev = Given { magnitude: Some(mag.values_f64()), peak: 0.0, wide, nan_reach: None };
        let tol = tolerance(&case, &built, 0, &case.shape);
        for order in orders() {
            let ok = simulated_mean(&xs, rows, n, &order, n, None, dt);
            assert!(compare_plain(want, &ok, &ev, &tol).is_none(), "{dt} n={n}: a correct mean failed");
            if positive {
                for wrong in [n + 1, n.saturating_sub(1).max(1)] {
                    if wrong == n {
                        continue;
                    }
                    let bad = simulated_mean(&xs, rows, n, &order, wrong, None, dt);
                    assert!(compare(want, &bad, Some(mag), &tol).is_some(), "{dt} n={n}: divisor {wrong} passed");
                }
                for dropped in [0, n - 1] {
                    let bad = simulated_mean(&xs, rows, n, &order, n, Some(dropped), dt);
                    assert!(compare(want, &bad, Some(mag), &tol).is_some(), "{dt} n={n}: dropping {dropped} passed");
                }
            }
        }
    }
}

#[test]
fn fp32_tolerance_accepts_any_order_and_rejects_dropped_elements_and_wrong_divisors() {
    check(ElemType::F32, &[1, 2, 3, 7, 8, 9, 31, 64, 100, 257, 1000, 2048], true);
}

#[test]
fn fp32_tolerance_accepts_mixed_sign_sums_in_any_order() {
    check(ElemType::F32, &[2, 17, 100, 1000, 4096], false);
}

#[test]
fn fp16_and_bf16_tolerance_is_one_ulp_plus_the_sum_bound() {
    // fp16 has 11 significant bits: an off-by-one divisor is visible up to n of about 500.
    check(ElemType::F16, &[1, 2, 3, 8, 17, 64, 255], true);
    check(ElemType::F16, &[5, 64, 1000], false);
    // bf16 has 8: up to n of about 60.
    check(ElemType::Bf16, &[1, 2, 3, 8, 17, 40], true);
    check(ElemType::Bf16, &[5, 64, 1000], false);
}

/// A qs8 mean over the last dim, `n` (even) elements in one row, whose exact mean is a tie:
/// 2.5 output steps. Returns the reference output, the half-to-even result (2 steps), the
/// half-away-from-zero one (3 steps) and the oracle's tolerance.
fn qs8_tie(n: usize) -> (Tensor, Tensor, Tensor, harness::oracle::outputs::Tolerance) {
    use harness::patterns::{Q_IN, Q_MEAN};
    assert_eq!(Q_IN.scale, Q_MEAN.scale, "the row below assumes one grid for input and output");
    // `%`, not `is_multiple_of`: the workspace supports Rust 1.80.
    #[allow(clippy::manual_is_multiple_of)]
    let even = n % 2 == 0;
    assert!(even, "a mean of n grid values is a tie only for even n");
    let case = Case { dtype: ElemType::Qs8, ..Case::new(Pattern::Mean, &[1, n], &[-1], true) };
    let built = build(&case).unwrap();
    // A row of 2s and 3s (grid units) summing to 2.5 n.
    let x: Vec<f64> = (0..n).map(|i| if i < n / 2 { 3.0 } else { 2.0 } * Q_IN.scale as f64).collect();
    let input = Tensor::from_f64(&[1, n], ElemType::F32, None, &x);
    let want = reference::eval::run(&built.graph, std::slice::from_ref(&input)).unwrap().remove(0);
    let steps = |k: f64| Tensor::f32(&[1, 1], vec![(k * Q_MEAN.scale as f64) as f32]);
    (want, steps(2.5f64.round_ties_even()), steps(2.5f64.round()), tolerance(&case, &built, 0, &case.shape))
}

#[test]
fn qs8_tolerance_is_exact_when_the_mean_count_is_a_power_of_two() {
    for n in [2usize, 4, 8, 64, 1024] {
        let (want, even, away, tol) = qs8_tie(n);
        assert!(tol.exact, "n={n}: a power-of-two count must compare exactly");
        assert!(compare(&want, &even, None, &tol).is_none(), "n={n}: the half-to-even result failed");
        assert!(compare(&want, &away, None, &tol).is_some(), "n={n}: a tie rounded away from zero passed");
    }
}

#[test]
fn qs8_tolerance_allows_one_step_when_the_mean_count_is_not_a_power_of_two() {
    for n in [6usize, 12, 100] {
        let (want, even, away, tol) = qs8_tie(n);
        // `1/n` is inexact: a correct requantization may land on either side of the tie.
        assert!(!tol.exact, "n={n}: 1/n is inexact, the last quantize may land one step away");
        assert!(compare(&want, &even, None, &tol).is_none(), "n={n}: the half-to-even result failed");
        assert!(compare(&want, &away, None, &tol).is_none(), "n={n}: one step off failed");
        let two_off = Tensor::f32(&[1, 1], vec![4.0 * harness::patterns::Q_MEAN.scale]);
        assert!(compare(&want, &two_off, None, &tol).is_some(), "n={n}: two steps off passed");
    }
}

/// f32 -> `dt` by truncation toward zero (the planted bug: a conversion that drops bits).
fn truncate_to(dt: ElemType, v: f32) -> f64 {
    match dt {
        ElemType::Bf16 => f32::from_bits(v.to_bits() & 0xffff_0000) as f64,
        _ => {
            let x = v as f64;
            let step = ulp(dt, x);
            (x / step).trunc() * step
        }
    }
}

#[test]
fn a_truncating_fp16_or_bf16_conversion_fails_in_the_normal_range() {
    let mut rng = SplitMix64::new(7);
    for dt in [ElemType::F16, ElemType::Bf16] {
        for n in [2usize, 3, 5, 8, 17, 64] {
            let rows = 64;
            let case = Case { dtype: dt, ..Case::new(Pattern::Mean, &[rows, n], &[-1], true) };
            let built = build(&case).unwrap();
            let x: Vec<f64> = (0..rows * n).map(|_| rng.range(0.5, 2.0)).collect();
            let input = Tensor::from_f64(&[rows, n], dt, None, &x);
            let want = &reference::eval::run(&built.graph, std::slice::from_ref(&input)).unwrap()[0];
            let mag = reference::eval::run(
                built.magnitude(&case).unwrap(),
                &magnitude_inputs(&case, std::slice::from_ref(&input)),
            )
            .unwrap()[0]
                .values_f64();
            let wide = reference::eval::run(built.wide(&case).unwrap(), &wide_inputs(std::slice::from_ref(&input)))
                .unwrap()[0]
                .values_f64();
            let ev = Given { magnitude: Some(mag.clone()), peak: 0.0, wide: Some(wide), nan_reach: None };
            let tol = tolerance(&case, &built, 0, &case.shape);
            // The delegate's f32 mean, then the conversion to `dt`.
            let xs: Vec<f32> = input.values_f64().iter().map(|&v| v as f32).collect();
            let f32_means: Vec<f32> =
                (0..rows).map(|r| xs[r * n..(r + 1) * n].iter().sum::<f32>() * (1.0 / n as f32)).collect();
            let rounded =
                Tensor::from_f64(&[rows, 1], dt, None, &f32_means.iter().map(|&v| v as f64).collect::<Vec<_>>());
            let truncated = Tensor::from_f64(
                &[rows, 1],
                dt,
                None,
                &f32_means.iter().map(|&v| truncate_to(dt, v)).collect::<Vec<_>>(),
            );
            assert!(compare_plain(want, &rounded, &ev, &tol).is_none(), "{dt} n={n}: rounding to nearest failed");
            assert_ne!(rounded, truncated, "{dt} n={n}: no row where truncation differs");
            let why = compare_plain(want, &truncated, &ev, &tol);
            assert!(
                why.as_deref().is_some_and(|w| w.contains("not rounded to nearest")),
                "{dt} n={n}: a truncating conversion passed: {why:?}"
            );
            // The general bound (one ulp plus 2 k u_c M) alone lets it pass: the rule is what
            // catches it.
            let no_rule = Given { wide: None, ..ev.clone() };
            assert!(compare_plain(want, &truncated, &no_rule, &tol).is_none(), "{dt} n={n}");
        }
    }
}

/// qs8 means under a real quantizer's scales (`qparams`), requantized as a delegate does:
/// an exact integer sum times an f32 multiplier, then `round` (half to even, the correct
/// one), or truncated toward zero (a planted wrong rounding).
#[test]
fn qs8_tie_rule_passes_correct_requantizations_and_fails_a_truncating_one() {
    use harness::case::CaseQuant;
    use reference::QuantParams;
    let (q_in, q_out) =
        (QuantParams { scale: 0.007_843_138, zero_point: -1 }, QuantParams { scale: 0.0031, zero_point: 17 });
    let mut rng = SplitMix64::new(5);
    let (mut caught, mut near) = (0, 0);
    for trial in 0..200 {
        let n = 3 + trial % 29;
        let mut case = Case { dtype: ElemType::Qs8, ..Case::new(Pattern::Mean, &[4, n], &[-1], true) };
        case.qparams = Some(CaseQuant { input: Some(q_in), output: Some(q_out) });
        let built = build(&case).unwrap();
        assert!(built.ties);
        let k: Vec<i64> = (0..4 * n).map(|_| rng.below(256) as i64 - 128 - q_in.zero_point as i64).collect();
        let k: Vec<i64> =
            k.into_iter().map(|v| v.clamp(-128 - q_in.zero_point as i64, 127 - q_in.zero_point as i64)).collect();
        let x: Vec<f64> = k.iter().map(|&v| (v as f32 * q_in.scale) as f64).collect();
        let input = Tensor::from_f64(&[4, n], ElemType::F32, None, &x);
        let inputs = [input];
        let want = reference::eval::run(&built.graph, &inputs).unwrap().remove(0);
        let wide = reference::eval::run(built.wide(&case).unwrap(), &wide_inputs(&inputs)).unwrap().remove(0);
        let mag = reference::eval::run(built.magnitude(&case).unwrap(), &magnitude_inputs(&case, &inputs)).unwrap();
        let ev =
            Given { magnitude: Some(mag[0].values_f64()), peak: 0.0, wide: Some(wide.values_f64()), nan_reach: None };
        let tol = tolerance(&case, &built, 0, &case.shape);
        assert!(tol.ties && !tol.exact);
        let mult = q_in.scale * (1.0 / n as f32) / q_out.scale;
        let requant = |round: &dyn Fn(f32) -> f32| {
            let v: Vec<f32> = (0..4)
                .map(|r| {
                    let s: i64 = k[r * n..(r + 1) * n].iter().sum();
                    let q = (round(s as f32 * mult) + q_out.zero_point as f32).clamp(-128.0, 127.0);
                    ((q as f64 - q_out.zero_point as f64) * q_out.scale as f64) as f32
                })
                .collect();
            Tensor::f32(&[4, 1], v)
        };
        // Another correct implementation: the exact quotient in f64, rounded half to even.
        let exact: Vec<f32> = (0..4)
            .map(|r| {
                let s: i64 = k[r * n..(r + 1) * n].iter().sum();
                let t = q_in.scale as f64 * s as f64 / (n as f64 * q_out.scale as f64);
                let q = (t.round_ties_even() + q_out.zero_point as f64).clamp(-128.0, 127.0);
                ((q - q_out.zero_point as f64) * q_out.scale as f64) as f32
            })
            .collect();
        let even = requant(&|v: f32| v.round_ties_even());
        assert!(compare_plain(&want, &even, &ev, &tol).is_none(), "trial {trial}: half to even failed");
        assert!(compare_plain(&want, &Tensor::f32(&[4, 1], exact), &ev, &tol).is_none(), "trial {trial}: exact failed");
        if compare_plain(&want, &requant(&|v: f32| v.trunc()), &ev, &tol).is_some() {
            caught += 1;
        }
        let w = wide.values_f64();
        let m = mag[0].values_f64();
        near += (0..4)
            .filter(|&i| harness::oracle::outputs::tie_steps(q_out.scale, tol.acc_len, Some(w[i]), Some(m[i])) > 0.0)
            .count();
    }
    // Truncation is a step off wherever the fraction is nonzero on the wrong side: almost
    // every trial; the tie margin lets a step through on almost no element.
    assert!(caught >= 150, "a truncating requantization passed {} of 200 trials", 200 - caught);
    assert!(near <= 8, "{near} of 800 elements allowed a step");
}

/// The NaN-reach twin is NaN exactly where a NaN input reaches, unlike the magnitude twin,
/// which is also NaN where its own overflow meets a zero weight (full-matrix seed 20261207,
/// case 1958557: real XNNPACK's +inf for the reference's overflow NaN at [3,3,1,3], run 2).
#[test]
fn the_nan_reach_twin_tells_a_nan_input_from_the_twins_own_overflow() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../corpora/regressions/xnnpack-fp32-inf-for-nan.json");
    let case = Case::read_file(std::path::Path::new(path)).unwrap().remove(0);
    let built = build(&case).unwrap();
    let runs = harness::oracle::reference_runs(&case, &built, harness::engine::Interpreter::Plain).unwrap();
    let run = &runs[2];
    let (r, m, reach) = (run.values(0).unwrap(), run.magnitude_values(0).unwrap(), run.nan_reach_values(0).unwrap());
    // [3,3,1,3] of [4,4,9,8], logical order.
    let i = ((3 * 4 + 3) * 9 + 1) * 8 + 3;
    assert!(r[i].is_nan() && m[i].is_nan() && !reach[i].is_nan(), "{} {} {}", r[i], m[i], reach[i]);
    // The case's NaN inputs do reach other outputs, and there the reference is NaN too.
    let reached = (0..r.len()).filter(|&j| reach[j].is_nan()).collect::<Vec<_>>();
    assert!(!reached.is_empty() && reached.iter().all(|&j| r[j].is_nan() && m[j].is_nan()));
}

/// Behaviour 9's model: a bf16 chain's intermediate is not rounded to bf16 (the library's
/// probe, `xnnpack-bf16-chain-in-fp32-*.json`, gives 65280; the reference 65536).
#[test]
fn bf16_chain_model_skips_the_intermediate_rounding() {
    use harness::engine::{reference, Interpreter};
    use harness::oracle::behaviours::bf16_in_fp32;
    use reference::graph::{GraphBuilder, TensorSpec};
    let b = GraphBuilder::new();
    let (x, y) =
        (b.input("x", TensorSpec::new(ElemType::Bf16, &[1])), b.input("y", TensorSpec::new(ElemType::Bf16, &[1])));
    let q = b.square(b.add(x, y));
    let g = b.finish(&[q]).unwrap();
    let inputs =
        [Tensor::from_f64(&[1], ElemType::Bf16, None, &[255.0]), Tensor::from_f64(&[1], ElemType::Bf16, None, &[0.5])];
    let plain = reference(&g, &inputs, Interpreter::Plain).unwrap();
    assert_eq!(plain[0].values_f64(), [65536.0]);
    let model = bf16_in_fp32(&g, &[]).expect("add and square have no bf16 kernel");
    let m = reference(&model, &inputs, Interpreter::Plain).unwrap();
    assert_eq!(m[0].values_f64(), [65280.0]);
    assert_eq!(m[0].dtype(), ElemType::Bf16);
    // Left to the portable runtime, the ops round like the reference: no model.
    assert!(bf16_in_fp32(&g, &[2, 3]).is_none());
}

/// Behaviour 3's model sees through a same-type copy between the square and the mean
/// (`xnnpack-fp16-mean-of-copied-square.json`: the library gives 44992, the reference inf).
#[test]
fn fused_mean_model_sees_through_a_copy() {
    use harness::engine::{reference, Interpreter};
    use harness::oracle::behaviours::fused_mean_square;
    use reference::graph::{GraphBuilder, TensorSpec};
    use reference::MemoryFormat;
    let b = GraphBuilder::new();
    let x = b.input("x", TensorSpec::new(ElemType::F16, &[1, 4]));
    let m = b.mean(b.to_format(b.square(x), MemoryFormat::Contiguous), &[-1], false);
    let g = b.finish(&[m]).unwrap();
    let inputs = [Tensor::from_f64(&[1, 4], ElemType::F16, None, &[300.0, 300.0, 1.0, 1.0])];
    assert!(reference(&g, &inputs, Interpreter::Plain).unwrap()[0].values_f64()[0].is_infinite());
    let model = fused_mean_square(&g, &[]).expect("the copy does not stop the fusion");
    let got = reference(&model, &inputs, Interpreter::Plain).unwrap();
    assert_eq!(got[0].values_f64(), [44992.0]);
    assert_eq!(got[0].dtype(), ElemType::F16);
}
