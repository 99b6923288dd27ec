//! Runtime kernels against straightforward f64 computations, on every instruction set the CPU
//! has (scalar, AVX2, AVX-512), at 1 and 2 threads, under both scheduling policies.
//!
//! Tolerances (u = 2^-24, the f32 unit roundoff):
//! - fp32 mean of n values: any summation order is within `gamma(n-1) * sum|x|` of the exact
//!   sum (gamma(k) = k*u / (1 - k*u)); the mean divides that by n, and multiplying by the
//!   rounded `1/n` adds at most 2 roundings: `tol = gamma(n-1) * sum|x| / n + 2u * |mean|`
//!   (plus the smallest normal, for means that are 0).
//! - fp16/bf16 mean: the f32 bound above plus half an output ulp (one rounding to the output).
//! - qs8 mean: one quantum of the output.
//! - add/sub/mul/div: IEEE correctly rounded, so exactly the f64 result rounded to f32.
//! - rsqrt: two roundings (sqrt, then the division): 2 ulp. Converts and transposes: exact.
//!
//! - fp32 mean of small integers (sum|x| <= 2^24): every partial sum is exact in any order,
//!   so only the scale rounds: `tol = 2u * |mean|`. This is what catches a lost element or a
//!   wrong divisor at any size (the general bound grows with n and cannot, beyond a few hundred).
//!
//! `dropped_element_and_wrong_divisor_exceed_the_tolerance` proves both bounds are tight enough
//! to catch a mean that loses one element or divides by n+1.

use delegate::runtime::kernels::{self, mean, transpose, Ctx, Quant, Scratch, View, ViewMut};
use delegate::runtime::pool::Pool;
use delegate::runtime::simd::{self, available_isas, Isa};
use delegate::runtime::ThreadPolicy;
use half::{bf16, f16};

const U: f64 = 1.0 / (1u64 << 24) as f64;

/// Every (isa, threads, policy) combination, with its pool.
fn configs() -> Vec<(Isa, Pool)> {
    let mut v = Vec::new();
    for isa in available_isas() {
        for threads in [1, 2] {
            for policy in [ThreadPolicy::CostModel, ThreadPolicy::PerOutputTasks] {
                if threads == 1 && policy == ThreadPolicy::PerOutputTasks {
                    continue; // one thread: both policies are the same serial path
                }
                v.push((isa, Pool::new(threads, policy).unwrap()));
            }
        }
    }
    v
}

fn label(isa: Isa, pool: &Pool) -> String {
    format!("{} t{} {:?}", isa.name(), pool.threads(), pool.policy())
}

/// Deterministic values in [-2, 2] with varied magnitudes.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let m = (s >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
            let e = ((s >> 8) % 6) as i32 - 3;
            (m * 4.0 - 2.0) * 2f32.powi(e).min(1.0)
        })
        .collect()
}

/// Exact means (f64) and the sum of |x| per output, in the kept dims' row-major order.
fn mean_f64(x: &[f32], shape: &[usize], axes: &[usize]) -> (Vec<f64>, Vec<f64>, usize) {
    let st = kernels::strides(shape);
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !axes.contains(d)).collect();
    let kshape: Vec<usize> = kept.iter().map(|&d| shape[d]).collect();
    let nk: usize = kshape.iter().product();
    let n: usize = axes.iter().map(|&d| shape[d]).product();
    let (mut sums, mut abs) = (vec![0f64; nk], vec![0f64; nk]);
    for (i, &v) in x.iter().enumerate() {
        let mut o = 0;
        for &d in &kept {
            o = o * shape[d] + (i / st[d]) % shape[d];
        }
        sums[o] += v as f64;
        abs[o] += (v as f64).abs();
    }
    (sums.iter().map(|s| s / n as f64).collect(), abs, n)
}

fn gamma(k: usize) -> f64 {
    let ku = k as f64 * U;
    ku / (1.0 - ku)
}

/// The fp32 mean tolerance of the header.
fn mean_tol(abs_sum: f64, n: usize, exact: f64) -> f64 {
    gamma(n.saturating_sub(1)) * abs_sum / n as f64 + 2.0 * U * exact.abs() + f32::MIN_POSITIVE as f64
}

fn check_mean(got: &[f32], x: &[f32], shape: &[usize], axes: &[usize], what: &str) {
    let (want, abs, n) = mean_f64(x, shape, axes);
    assert_eq!(got.len(), want.len(), "{what}: output count");
    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
        let tol = mean_tol(abs[i], n, w);
        assert!((g as f64 - w).abs() <= tol, "{what}: output {i}: got {g}, exact {w}, tol {tol:e}");
    }
}

fn all_axes_subsets(rank: usize) -> Vec<Vec<usize>> {
    (1u32..(1 << rank)).map(|m| (0..rank).filter(|&d| m & (1 << d) != 0).collect()).collect()
}

#[test]
fn fp32_mean_every_axes_subset_rank_1_to_4_every_config() {
    let shapes: [&[usize]; 5] = [&[37], &[5, 19], &[3, 1, 18], &[2, 7, 5, 33], &[4, 3, 17, 2]];
    let configs = configs();
    for shape in shapes {
        let x = values(shape.iter().product(), shape.len() as u64);
        for axes in all_axes_subsets(shape.len()) {
            let r = mean::normalize(shape, &axes);
            let mut out = vec![0f32; r.outputs];
            for (isa, pool) in &configs {
                let ctx = Ctx { isa: *isa, pool };
                mean::mean_f32(&ctx, &x, shape, &axes, &mut out).unwrap();
                check_mean(&out, &x, shape, &axes, &format!("{shape:?} {axes:?} {}", label(*isa, pool)));
            }
        }
    }
}

#[test]
fn fp32_mean_rank_5_and_6_and_both_paths() {
    let cases: [(&[usize], &[usize]); 6] = [
        (&[2, 3, 4, 5, 6], &[1, 3]),
        (&[2, 3, 4, 5, 6], &[0, 2, 4]),
        (&[2, 2, 3, 2, 3, 5], &[0, 1, 3, 5]),
        (&[2, 2, 3, 2, 3, 5], &[2, 4]),
        (&[8, 512, 64], &[1]),    // strided (column sums)
        (&[8, 512, 64], &[0, 2]), // innermost with a reduced outer dim
    ];
    let configs = configs();
    for (shape, axes) in cases {
        let x = values(shape.iter().product(), 7);
        let r = mean::normalize(shape, axes);
        let mut out = vec![0f32; r.outputs];
        for (isa, pool) in &configs {
            mean::mean_f32(&Ctx { isa: *isa, pool }, &x, shape, axes, &mut out).unwrap();
            check_mean(&out, &x, shape, axes, &format!("{shape:?} {axes:?} {}", label(*isa, pool)));
        }
    }
}

#[test]
fn large_inputs_split_across_threads_match() {
    // Above the inline threshold: CostModel splits outputs, or rows when outputs are few.
    let cases: [(&[usize], &[usize]); 4] =
        [(&[64, 1024], &[1]), (&[64, 1024], &[0]), (&[65536], &[0]), (&[3, 40000], &[1])];
    let configs = configs();
    for (shape, axes) in cases {
        let x = values(shape.iter().product(), 11);
        let mut out = vec![0f32; mean::normalize(shape, axes).outputs];
        for (isa, pool) in &configs {
            mean::mean_f32(&Ctx { isa: *isa, pool }, &x, shape, axes, &mut out).unwrap();
            check_mean(&out, &x, shape, axes, &format!("{shape:?} {axes:?} {}", label(*isa, pool)));
        }
    }
}

/// Tolerance when every value is an integer and sum|x| <= 2^24: every partial sum in any order
/// is an exactly representable integer, so the sum is exact and only the `* (1/n)` rounds
/// (twice: 1/n, then the product).
fn mean_tol_exact_sum(exact: f64) -> f64 {
    2.0 * U * exact.abs() + f32::MIN_POSITIVE as f64
}

fn small_integers(n: usize, seed: u64) -> Vec<f32> {
    // 1..=8: positive, so dropping any element changes the sum.
    values(n, seed).iter().map(|v| (v.abs() * 3.5).round() + 1.0).collect()
}

#[test]
fn dropped_element_and_wrong_divisor_exceed_the_tolerance() {
    // Random data, general bound (any order, depth n-1): provably catches a dropped element of
    // magnitude >= min|x| while n * gamma(n-1) * mean|x| < min|x|, i.e. for the small sizes here.
    for n in [5usize, 37, 200] {
        let x: Vec<f32> = values(n, 3).iter().map(|v| 1.0 + v.abs().min(1.0) * 0.5).collect();
        let exact: f64 = x.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let abs: f64 = x.iter().map(|&v| v as f64).sum();
        let tol = mean_tol(abs, n, exact);
        let min_x = x.iter().copied().fold(f32::INFINITY, f32::min) as f64;
        assert!(((abs - min_x) / n as f64 - exact).abs() > tol, "n {n}: a dropped element passes {tol:e}");
        assert!((abs / (n + 1) as f64 - exact).abs() > tol, "n {n}: dividing by n+1 passes {tol:e}");
    }
    // Integer data: the sum is exact in every order, so the bound is 2 roundings of the scale and
    // catches a dropped element or a wrong divisor at every size, on both mean paths.
    let configs = configs();
    for (shape, axes) in [
        (vec![4, 65536], vec![1]),
        (vec![65536, 4], vec![0]),
        (vec![3, 4096, 5], vec![0, 2]),
        (vec![64, 600, 3], vec![1]),
    ] {
        let nx: usize = shape.iter().product();
        let x = small_integers(nx, 5);
        let (want, abs, n) = mean_f64(&x, &shape, &axes);
        assert!(abs.iter().all(|&a| a <= (1u64 << 24) as f64));
        let (dropped, _, _) = {
            // The same mean with the first element of every output's reduction missing.
            let mut xd = x.clone();
            let st = kernels::strides(&shape);
            let mut seen = std::collections::HashSet::new();
            for (i, v) in xd.iter_mut().enumerate() {
                let key: Vec<usize> =
                    (0..shape.len()).filter(|d| !axes.contains(d)).map(|d| (i / st[d]) % shape[d]).collect();
                if seen.insert(key) {
                    *v = 0.0;
                }
            }
            mean_f64(&xd, &shape, &axes)
        };
        for i in 0..want.len() {
            let tol = mean_tol_exact_sum(want[i]);
            assert!(
                (dropped[i] - want[i]).abs() > tol || x.iter().all(|&v| v == 0.0),
                "{shape:?}: a dropped element passes"
            );
            assert!(
                (want[i] * n as f64 / (n + 1) as f64 - want[i]).abs() > tol || want[i] == 0.0,
                "{shape:?}: n+1 passes"
            );
        }
        let mut out = vec![0f32; want.len()];
        for (isa, pool) in &configs {
            mean::mean_f32(&Ctx { isa: *isa, pool }, &x, &shape, &axes, &mut out).unwrap();
            for i in 0..want.len() {
                let tol = mean_tol_exact_sum(want[i]);
                assert!(
                    (out[i] as f64 - want[i]).abs() <= tol,
                    "{shape:?} {axes:?} {} output {i}: {} vs {}",
                    label(*isa, pool),
                    out[i],
                    want[i]
                );
            }
        }
    }
}

#[test]
fn nan_and_infinity_propagate_on_every_path() {
    for (isa, pool) in &configs() {
        let ctx = Ctx { isa: *isa, pool };
        for len in [3usize, 17, 64, 100] {
            for pos in [0, len / 2, len - 1] {
                let mut x = vec![1f32; len * 2];
                x[pos] = f32::NAN;
                x[len + pos] = f32::INFINITY;
                let mut out = [0f32; 2];
                mean::mean_f32(&ctx, &x, &[2, len], &[1], &mut out).unwrap();
                assert!(
                    out[0].is_nan() && out[1] == f32::INFINITY,
                    "{} len {len} pos {pos}: {out:?}",
                    label(*isa, pool)
                );
                // Column path: NaN in column `pos % 2` of a [len, 2] view.
                let mut out2 = [0f32; 2];
                mean::mean_f32(&ctx, &x, &[len, 2], &[0], &mut out2).unwrap();
                assert!(out2.iter().any(|v| v.is_nan()), "{} columns len {len}: {out2:?}", label(*isa, pool));
            }
        }
    }
}

#[test]
fn gap_on_nhwc_matches_mean_over_h_and_w() {
    let shape = [2, 7, 5, 19];
    let x = values(shape.iter().product(), 5);
    for (isa, pool) in &configs() {
        let mut out = vec![0f32; 2 * 19];
        let mut scratch = Scratch::default();
        kernels::gap::gap_nhwc(
            &Ctx { isa: *isa, pool },
            View::F32(&x),
            &shape,
            ViewMut::F32(&mut out),
            None,
            &mut scratch,
        )
        .unwrap();
        check_mean(&out, &x, &shape, &[1, 2], &format!("gap {}", label(*isa, pool)));
    }
}

fn ulp_f16(v: f64) -> f64 {
    let a = v.abs().max(6.103515625e-05); // smallest normal: subnormal spacing below
    2f64.powi(a.log2().floor() as i32 - 10)
}

fn ulp_bf16(v: f64) -> f64 {
    let a = v.abs().max(f32::MIN_POSITIVE as f64);
    2f64.powi(a.log2().floor() as i32 - 7)
}

#[test]
fn fp16_and_bf16_means_accumulate_in_f32() {
    // 4096 values: an fp16 accumulator would be off by far more than half an ulp.
    let shape = [3, 4096];
    let xf = values(shape.iter().product(), 9);
    let xh: Vec<f16> = xf.iter().map(|&v| f16::from_f32(v)).collect();
    let xb: Vec<bf16> = xf.iter().map(|&v| bf16::from_f32(v)).collect();
    let xh32: Vec<f32> = xh.iter().map(|v| v.to_f32()).collect();
    let xb32: Vec<f32> = xb.iter().map(|v| v.to_f32()).collect();
    for (isa, pool) in &configs() {
        let ctx = Ctx { isa: *isa, pool };
        let mut scratch = Scratch::default();
        let mut oh = vec![f16::ZERO; 3];
        mean::mean(&ctx, View::F16(&xh), &shape, &[1], ViewMut::F16(&mut oh), None, &mut scratch).unwrap();
        let (want, abs, n) = mean_f64(&xh32, &shape, &[1]);
        for i in 0..3 {
            let tol = mean_tol(abs[i], n, want[i]) + ulp_f16(want[i]) / 2.0;
            assert!(
                (oh[i].to_f64() - want[i]).abs() <= tol,
                "fp16 {} {i}: {} vs {}",
                label(*isa, pool),
                oh[i],
                want[i]
            );
        }
        let mut ob = vec![bf16::ZERO; 4096];
        mean::mean(&ctx, View::Bf16(&xb), &shape, &[0], ViewMut::Bf16(&mut ob), None, &mut scratch).unwrap();
        let (want, abs, n) = mean_f64(&xb32, &shape, &[0]);
        for i in 0..4096 {
            let tol = mean_tol(abs[i], n, want[i]) + ulp_bf16(want[i]) / 2.0;
            assert!((ob[i].to_f64() - want[i]).abs() <= tol, "bf16 {} {i}", label(*isa, pool));
        }
    }
}

#[test]
fn qs8_mean_within_one_quantum() {
    let shape = [4, 33, 70];
    let xf = values(shape.iter().product(), 13);
    let qi = Quant { scale: 0.02, zero_point: -3 };
    let qo = Quant { scale: 0.01, zero_point: 5 };
    let x: Vec<i8> =
        xf.iter().map(|&v| ((v / qi.scale).round() as i32 + qi.zero_point).clamp(-128, 127) as i8).collect();
    let real: Vec<f32> = x.iter().map(|&q| (q as i32 - qi.zero_point) as f32 * qi.scale).collect();
    for axes in [vec![2], vec![1], vec![0, 2], vec![0, 1, 2]] {
        let (want, _, _) = mean_f64(&real, &shape, &axes);
        for (isa, pool) in &configs() {
            let mut out = vec![0i8; want.len()];
            let mut scratch = Scratch::default();
            mean::mean(
                &Ctx { isa: *isa, pool },
                View::I8(&x),
                &shape,
                &axes,
                ViewMut::I8(&mut out),
                Some((qi, qo)),
                &mut scratch,
            )
            .unwrap();
            for (i, (&g, &w)) in out.iter().zip(&want).enumerate() {
                let wq = (w / qo.scale as f64 + qo.zero_point as f64).clamp(-128.0, 127.0);
                assert!((g as f64 - wq).abs() <= 1.0, "{axes:?} {} {i}: {g} vs {wq}", label(*isa, pool));
            }
        }
    }
}

#[test]
fn qs8_requantization_rounds_half_to_even() {
    // sum - n*zp = 5 over n = 2 with scales 1: 2.5 rounds to 2 (even), -2.5 to -2.
    let q = Quant { scale: 1.0, zero_point: 0 };
    assert_eq!(mean::requantize(5, 2, q, 0.5, q), 2);
    assert_eq!(mean::requantize(-5, 2, q, 0.5, q), -2);
    assert_eq!(mean::requantize(7, 2, q, 0.5, q), 4);
    assert_eq!(mean::requantize(1000, 1, q, 1.0, q), 127);
}

// Transposes, converts, binary and unary ops, conv and linear.
mod other_kernels;
