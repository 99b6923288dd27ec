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

fn permute_naive<T: Copy>(x: &[T], shape: &[usize], perm: &[usize]) -> Vec<T> {
    let st = kernels::strides(shape);
    let oshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let ost = kernels::strides(&oshape);
    let n = x.len();
    (0..n)
        .map(|o| {
            let mut off = 0;
            for k in 0..perm.len() {
                off += ((o / ost[k]) % oshape[k]) * st[perm[k]];
            }
            x[off]
        })
        .collect()
}

fn permutations(r: usize) -> Vec<Vec<usize>> {
    if r == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for p in permutations(r - 1) {
        for i in 0..=p.len() {
            let mut q = p.clone();
            q.insert(i, r - 1);
            out.push(q);
        }
    }
    out
}

#[test]
fn transposes_of_every_permutation_are_exact() {
    let shapes: [&[usize]; 5] = [&[70, 45], &[3, 1, 40], &[2, 5, 33, 3], &[1, 8, 6, 6], &[2, 3, 1, 4, 5]];
    let configs = configs();
    for shape in shapes {
        let n: usize = shape.iter().product();
        let x = values(n, 17);
        let xi: Vec<i8> = (0..n).map(|i| i as i8).collect();
        for perm in permutations(shape.len()) {
            let want = permute_naive(&x, shape, &perm);
            let want_i = permute_naive(&xi, shape, &perm);
            for (isa, pool) in &configs {
                let ctx = Ctx { isa: *isa, pool };
                let mut out = vec![0f32; n];
                transpose::transpose(&ctx, View::F32(&x), shape, &perm, ViewMut::F32(&mut out)).unwrap();
                assert_eq!(out, want, "{shape:?} {perm:?} {}", label(*isa, pool));
                let mut oi = vec![0i8; n];
                transpose::transpose(&ctx, View::I8(&xi), shape, &perm, ViewMut::I8(&mut oi)).unwrap();
                assert_eq!(oi, want_i, "int8 {shape:?} {perm:?}");
            }
        }
    }
    // A 6-D case and a large NCHW->NHWC that splits across threads.
    let shape = [2, 3, 2, 4, 3, 5];
    let x = values(shape.iter().product(), 19);
    let perm = [5, 0, 3, 1, 4, 2];
    let shape2 = [1, 96, 56, 56];
    let x2 = values(shape2.iter().product(), 23);
    for (isa, pool) in &configs {
        let ctx = Ctx { isa: *isa, pool };
        let mut out = vec![0f32; x.len()];
        transpose::transpose(&ctx, View::F32(&x), &shape, &perm, ViewMut::F32(&mut out)).unwrap();
        assert_eq!(out, permute_naive(&x, &shape, &perm));
        let mut out2 = vec![0f32; x2.len()];
        transpose::transpose(&ctx, View::F32(&x2), &shape2, &[0, 2, 3, 1], ViewMut::F32(&mut out2)).unwrap();
        assert_eq!(out2, permute_naive(&x2, &shape2, &[0, 2, 3, 1]), "{}", label(*isa, pool));
        // Power-of-two output rows (tiles of 16 rows, several bands of row groups), f32 and int8.
        let shape3 = [64, 32, 24];
        let x3 = values(shape3.iter().product(), 29);
        let mut out3 = vec![0f32; x3.len()];
        transpose::transpose(&ctx, View::F32(&x3), &shape3, &[2, 0, 1], ViewMut::F32(&mut out3)).unwrap();
        assert_eq!(out3, permute_naive(&x3, &shape3, &[2, 0, 1]), "{}", label(*isa, pool));
        let xi3: Vec<i8> = (0..x3.len()).map(|i| (i * 7) as i8).collect();
        let mut oi3 = vec![0i8; x3.len()];
        transpose::transpose(&ctx, View::I8(&xi3), &shape3, &[2, 0, 1], ViewMut::I8(&mut oi3)).unwrap();
        assert_eq!(oi3, permute_naive(&xi3, &shape3, &[2, 0, 1]), "int8 {}", label(*isa, pool));
    }
    let bad = transpose::transpose(
        &Ctx { isa: Isa::SCALAR, pool: &configs[0].1 },
        View::F32(&x),
        &shape,
        &[0, 0, 1, 2, 3, 4],
        ViewMut::F32(&mut vec![0.0; x.len()]),
    );
    assert!(bad.is_err());
}

#[test]
fn converts_are_exact_and_match_half() {
    let mut x = values(10_000, 29);
    x.extend([0.0, -0.0, 1e-40, -1e-40, 65504.0, 65520.0, 1e9, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 3.0e38]);
    let n = x.len();
    let q = Quant { scale: 0.0125, zero_point: 7 };
    for (isa, pool) in &configs() {
        let ctx = Ctx { isa: *isa, pool };
        let mut h = vec![f16::ZERO; n];
        kernels::convert::convert(&ctx, View::F32(&x), ViewMut::F16(&mut h), None).unwrap();
        let mut b = vec![bf16::ZERO; n];
        kernels::convert::convert(&ctx, View::F32(&x), ViewMut::Bf16(&mut b), None).unwrap();
        for i in 0..n {
            assert_eq!(h[i].to_bits(), f16::from_f32(x[i]).to_bits(), "f16 {} {}", x[i], label(*isa, pool));
            assert_eq!(b[i].to_bits(), bf16::from_f32(x[i]).to_bits(), "bf16 {} {}", x[i], label(*isa, pool));
        }
        let mut back = vec![0f32; n];
        kernels::convert::convert(&ctx, View::F16(&h), ViewMut::F32(&mut back), None).unwrap();
        assert!(back.iter().zip(&h).all(|(a, b)| a.to_bits() == b.to_f32().to_bits()));
        kernels::convert::convert(&ctx, View::Bf16(&b), ViewMut::F32(&mut back), None).unwrap();
        assert!(back.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_f32().to_bits()));
        let mut qv = vec![0i8; n];
        kernels::convert::convert(&ctx, View::F32(&x), ViewMut::I8(&mut qv), Some(q)).unwrap();
        for i in 0..n {
            let r = (x[i] * (1.0 / q.scale)).round_ties_even() + q.zero_point as f32;
            let want = if r.is_nan() { q.zero_point as i8 } else { r.clamp(-128.0, 127.0) as i8 };
            assert_eq!(qv[i], want, "quantize {}", x[i]);
        }
        kernels::convert::convert(&ctx, View::I8(&qv), ViewMut::F32(&mut back), Some(q)).unwrap();
        for i in 0..n {
            assert_eq!(back[i], (qv[i] as i32 - q.zero_point) as f32 * q.scale);
        }
    }
}

#[test]
fn binary_broadcasting_is_correctly_rounded() {
    use simd::BinOp::*;
    let cases: [(&[usize], &[usize]); 6] = [
        (&[3, 40], &[3, 40]),
        (&[3, 40], &[40]),
        (&[3, 40], &[3, 1]),
        (&[1], &[5, 7]),
        (&[2, 1, 9], &[4, 1]),
        (&[300, 500], &[1]),
    ];
    for (ash, bsh) in cases {
        let a = values(ash.iter().product(), 31);
        let b: Vec<f32> = values(bsh.iter().product(), 37).iter().map(|v| v + 2.5).collect();
        let osh: Vec<usize> = kernels::elementwise::broadcast_dims(ash, bsh).collect::<Option<_>>().unwrap();
        let n: usize = osh.iter().product();
        for op in [Add, Sub, Mul, Div] {
            // Reference: index each operand with broadcasting, compute in f64, round once.
            let r = osh.len();
            let pad =
                |s: &[usize]| -> Vec<usize> { std::iter::repeat_n(1, r - s.len()).chain(s.iter().copied()).collect() };
            let (pa, pb) = (pad(ash), pad(bsh));
            let (sa, sb, so) = (kernels::strides(&pa), kernels::strides(&pb), kernels::strides(&osh));
            let want: Vec<f32> = (0..n)
                .map(|o| {
                    let (mut ia, mut ib) = (0, 0);
                    for k in 0..r {
                        let i = (o / so[k]) % osh[k];
                        ia += if pa[k] == 1 { 0 } else { i * sa[k] };
                        ib += if pb[k] == 1 { 0 } else { i * sb[k] };
                    }
                    let (x, y) = (a[ia] as f64, b[ib] as f64);
                    (match op {
                        Add => x + y,
                        Sub => x - y,
                        Mul => x * y,
                        Div => x / y,
                    }) as f32
                })
                .collect();
            for (isa, pool) in &configs() {
                let mut out = vec![0f32; n];
                let mut s = Scratch::default();
                let ctx = Ctx { isa: *isa, pool };
                kernels::elementwise::binary(
                    &ctx,
                    op,
                    View::F32(&a),
                    ash,
                    View::F32(&b),
                    bsh,
                    ViewMut::F32(&mut out),
                    &osh,
                    None,
                    &mut s,
                )
                .unwrap();
                assert_eq!(out, want, "{op:?} {ash:?} {bsh:?} {}", label(*isa, pool));
            }
        }
    }
}

#[test]
fn unary_ops_and_fused_clamp() {
    use kernels::elementwise::Unary;
    let x: Vec<f32> = values(5000, 41).iter().map(|v| v.abs() + 0.01).collect();
    for (isa, pool) in &configs() {
        let ctx = Ctx { isa: *isa, pool };
        let mut s = Scratch::default();
        let mut out = vec![0f32; x.len()];
        kernels::elementwise::unary(&ctx, Unary::Square, View::F32(&x), ViewMut::F32(&mut out), None, &mut s).unwrap();
        assert!(out.iter().zip(&x).all(|(o, v)| *o == ((*v as f64) * (*v as f64)) as f32));
        kernels::elementwise::unary(&ctx, Unary::Rsqrt, View::F32(&x), ViewMut::F32(&mut out), None, &mut s).unwrap();
        for (o, v) in out.iter().zip(&x) {
            let want = 1.0 / (*v as f64).sqrt();
            assert!(((*o as f64) - want).abs() <= 2.0 * want * 2.0 * U, "rsqrt {v}: {o} vs {want}");
        }
        kernels::elementwise::unary(&ctx, Unary::Copy, View::F32(&x), ViewMut::F32(&mut out), Some((0.1, 0.5)), &mut s)
            .unwrap();
        assert!(out.iter().zip(&x).all(|(o, v)| *o == v.clamp(0.1, 0.5)));
    }
}

#[test]
fn conv_and_depthwise_and_linear_match_f64() {
    use kernels::conv::ConvGeom;
    // Regular grouped conv: 1x6x7x4 NHWC, 2 groups, 3x2 kernel, stride 2x1, dilation 1x2, padding.
    let g = ConvGeom {
        padding: [1, 2, 0, 1],
        kernel: [3, 2],
        stride: [2, 1],
        dilation: [1, 2],
        groups: 2,
        group_in: 2,
        group_out: 3,
        depthwise: false,
    };
    let dw = ConvGeom {
        padding: [1, 1, 1, 1],
        kernel: [3, 3],
        stride: [1, 1],
        dilation: [1, 1],
        groups: 4,
        group_in: 1,
        group_out: 2,
        depthwise: true,
    };
    let ish = [2, 6, 7, 4];
    let x = values(ish.iter().product(), 43);
    for geom in [g, dw] {
        let osh = geom.output_shape(&ish).unwrap();
        let w = values(geom.filter_len().unwrap(), 47);
        let b = values(osh[3], 53);
        let n_out: usize = osh.iter().product();
        // f64 reference with XNNPACK's filter layouts.
        let mut want = vec![0f64; n_out];
        let mut mag = vec![0f64; n_out];
        for i in 0..n_out {
            let (oc, ox, oy, bn) =
                (i % osh[3], (i / osh[3]) % osh[2], (i / (osh[3] * osh[2])) % osh[1], i / (osh[3] * osh[2] * osh[1]));
            let (mut s, mut m) = (b[oc] as f64, (b[oc] as f64).abs());
            for ky in 0..geom.kernel[0] {
                for kx in 0..geom.kernel[1] {
                    let iy = (oy * geom.stride[0] + ky * geom.dilation[0]) as isize - geom.padding[0] as isize;
                    let ix = (ox * geom.stride[1] + kx * geom.dilation[1]) as isize - geom.padding[3] as isize;
                    if iy < 0 || ix < 0 || iy >= ish[1] as isize || ix >= ish[2] as isize {
                        continue;
                    }
                    let xb = ((bn * ish[1] + iy as usize) * ish[2] + ix as usize) * ish[3];
                    let terms: Vec<(f64, f64)> = if geom.depthwise {
                        let c = oc / geom.group_out;
                        vec![(x[xb + c] as f64, w[(ky * geom.kernel[1] + kx) * osh[3] + oc] as f64)]
                    } else {
                        let gi = oc / geom.group_out;
                        (0..geom.group_in)
                            .map(|ic| {
                                let wi = ((oc * geom.kernel[0] + ky) * geom.kernel[1] + kx) * geom.group_in + ic;
                                (x[xb + gi * geom.group_in + ic] as f64, w[wi] as f64)
                            })
                            .collect()
                    };
                    for (a, c) in terms {
                        s += a * c;
                        m += (a * c).abs();
                    }
                }
            }
            want[i] = s;
            mag[i] = m;
        }
        // Packed per call, and packed ahead (as the plan does for constant filters).
        let ahead = (!geom.depthwise).then(|| kernels::conv::pack_filter(&geom, &w));
        for ((isa, pool), packed) in configs().iter().flat_map(|c| [(c, None), (c, ahead.as_deref())]) {
            let mut out = vec![0f32; n_out];
            let mut sc = Scratch::default();
            kernels::conv::conv2d(
                &Ctx { isa: *isa, pool },
                &geom,
                View::F32(&x),
                &ish,
                View::F32(&w),
                packed,
                Some(View::F32(&b)),
                ViewMut::F32(&mut out),
                &osh,
                None,
                &mut sc,
            )
            .unwrap();
            for i in 0..n_out {
                // Each output is a sum of at most 13 products: gamma(14) * sum|terms|.
                assert!((out[i] as f64 - want[i]).abs() <= gamma(14) * mag[i] + 1e-30, "{geom:?} {i}");
            }
        }
    }
    // Linear [5, 37] x [11, 37]^T + b.
    let (m, k, n) = (5, 37, 11);
    let xv = values(m * k, 59);
    let w = values(n * k, 61);
    let b = values(n, 67);
    for (isa, pool) in &configs() {
        let mut out = vec![0f32; m * n];
        let mut sc = Scratch::default();
        kernels::linear::fully_connected(
            &Ctx { isa: *isa, pool },
            View::F32(&xv),
            m,
            k,
            View::F32(&w),
            n,
            false,
            Some(View::F32(&b)),
            ViewMut::F32(&mut out),
            None,
            &mut sc,
        )
        .unwrap();
        for r in 0..m {
            for c in 0..n {
                let terms: Vec<f64> = (0..k).map(|j| xv[r * k + j] as f64 * w[c * k + j] as f64).collect();
                let want = terms.iter().sum::<f64>() + b[c] as f64;
                let mag = terms.iter().map(|t| t.abs()).sum::<f64>() + (b[c] as f64).abs();
                assert!((out[r * n + c] as f64 - want).abs() <= gamma(k + 1) * mag, "linear {r} {c}");
            }
        }
    }
}
