//! Direct tests for what `cargo mutants` found untested in the delegate (see
//! `reports/cargo-mutants.md`, "Missed"):
//! - the column-mean kernels (`discontiguous_f32` and `mean_qs8`, one walk: `column_runs`) when a thread's
//!   chunk of outputs starts in the middle of a row and runs past its end (the walk must
//!   advance by the columns it did);
//! - the layout guard of the merged change (review finding B1: a mean and a conv share one
//!   dequantize in `StaticMean`) names the refused mean's graph node (`PGraph::graph_node`).
//!
//! Tolerance of the fp32 means (that of `runtime_kernels.rs`, `u = 2^-24`): any summation
//! order is within `gamma(n-1) * sum|x|` of the exact sum, and the rounded `1/n` plus the
//! product add two roundings: `gamma(n-1) * sum|x| / n + 2u * |mean|` (plus the smallest normal).
//! The qs8 means use power-of-two scales and counts, so the requantization multiplier is exact
//! and the result is exactly the exact mean rounded half to even.

use delegate::runtime::kernels::{mean, Ctx, Quant, Scratch, View, ViewMut};
use delegate::runtime::pool::Pool;
use delegate::runtime::simd::available_isas;
use delegate::runtime::ThreadPolicy;
use delegate::{lower_with, LowerError, LowerOptions, LoweringMode};
use reference::graph::{Conv2dParams, GraphBuilder};
use reference::{MemoryFormat, QuantParams, Tensor, TensorData, TensorSpec};

const U: f64 = 1.0 / (1u64 << 24) as f64;

/// Deterministic values in [-2, 2).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

/// `[a, n, w]` reduced over the middle dim: `a * w` outputs in rows of `w` (the column-mean
/// layout), each the mean of `n` values. Returns (exact mean, sum of |x|) per output.
fn column_means(x: &[f64], a: usize, n: usize, w: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut mean, mut abs) = (vec![0f64; a * w], vec![0f64; a * w]);
    for i in 0..a {
        for k in 0..n {
            for c in 0..w {
                let v = x[(i * n + k) * w + c];
                mean[i * w + c] += v / n as f64;
                abs[i * w + c] += v.abs();
            }
        }
    }
    (mean, abs)
}

/// 2-thread pools of both policies, with a check that `pool` really splits `outputs` (rows of
/// `w`) so that some chunk starts inside a row and runs past that row's end: the case the
/// missed mutant (`pos += c1 + c0`, now `pos += run + c0`) gets wrong. Fails loudly if the split rule changes so
/// that the shapes below stop reaching it.
fn pools_splitting_mid_row(outputs: usize, bytes: usize, w: usize) -> Vec<Pool> {
    [ThreadPolicy::CostModel, ThreadPolicy::PerOutputTasks]
        .into_iter()
        .map(|policy| {
            let pool = Pool::new(2, policy).unwrap();
            let b = pool.split(outputs, bytes, 64, true).bounds;
            let mid_row = b.windows(2).any(|c| c[0] % w != 0 && c[1] > (c[0] / w + 1) * w);
            assert!(mid_row, "{policy:?}: split {b:?} of {outputs} outputs in rows of {w} has no chunk crossing a row");
            pool
        })
        .collect()
}

#[test]
fn column_mean_f32_is_right_when_a_thread_chunk_starts_mid_row() {
    // [3, 256, 100]: 300 outputs in rows of 100, 300 KiB (above the cost model's 256 KiB
    // inline threshold): CostModel splits at 192 (row 1, column 92), PerOutputTasks every 64.
    // [3, 128, 300]: rows of 300, 450 KiB, CostModel splits at 512 (row 1, column 212).
    for (a, n, w) in [(3usize, 256usize, 100usize), (3, 128, 300)] {
        let x = values(a * n * w, (a * n * w) as u64);
        let xd: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let (want, abs) = column_means(&xd, a, n, w);
        let gamma = (n - 1) as f64 * U / (1.0 - (n - 1) as f64 * U);
        for pool in pools_splitting_mid_row(a * w, x.len() * 4, w) {
            for isa in available_isas() {
                // NaN marks any output the kernel never writes.
                let mut out = vec![f32::NAN; a * w];
                mean::mean_f32(&Ctx { isa, pool: &pool }, &x, &[a, n, w], &[1], &mut out).unwrap();
                for (i, &g) in out.iter().enumerate() {
                    let tol = gamma * abs[i] / n as f64 + 2.0 * U * want[i].abs() + f32::MIN_POSITIVE as f64;
                    assert!(
                        (g as f64 - want[i]).abs() <= tol,
                        "[{a}, {n}, {w}] {} {:?}: output {i} (row {}, column {}) is {g}, want {} (tol {tol:e})",
                        isa.name(),
                        pool.policy(),
                        i / w,
                        i % w,
                        want[i]
                    );
                }
            }
        }
    }
}

#[test]
fn column_mean_qs8_is_exact_when_a_thread_chunk_starts_mid_row() {
    let qi = Quant { scale: 0.0625, zero_point: 3 };
    let qo = Quant { scale: 0.0625, zero_point: 1 };
    // Counts 1024 and 512 (powers of two) and power-of-two scales: the multiplier is exact.
    // Sizes above the 256 KiB inline threshold in int8 bytes, so the cost model splits too
    // (at 192 and at 512, both inside a row).
    for (a, n, w) in [(3usize, 1024usize, 100usize), (3, 512, 300)] {
        let x: Vec<i8> = values(a * n * w, 7 + w as u64).iter().map(|&v| (v * 60.0) as i8).collect();
        let centered: Vec<f64> = x.iter().map(|&q| (q as i32 - qi.zero_point) as f64).collect();
        let (mean_units, _) = column_means(&centered, a, n, w);
        let want: Vec<i8> = mean_units
            .iter()
            .map(|&m| {
                let v = (m * qi.scale as f64 / qo.scale as f64).round_ties_even() + qo.zero_point as f64;
                v.clamp(-128.0, 127.0) as i8
            })
            .collect();
        // -128 marks any output the kernel never writes: it is no right answer here.
        assert!(want.iter().all(|&v| v != i8::MIN));
        for pool in pools_splitting_mid_row(a * w, x.len(), w) {
            for isa in available_isas() {
                let mut out = vec![i8::MIN; a * w];
                let ctx = Ctx { isa, pool: &pool };
                let mut scratch = Scratch::default();
                let (xv, ov) = (View::I8(&x), ViewMut::I8(&mut out));
                mean::mean(&ctx, xv, &[a, n, w], &[1], ov, Some((qi, qo)), &mut scratch).unwrap();
                for (i, (&g, &e)) in out.iter().zip(&want).enumerate() {
                    assert_eq!(
                        g,
                        e,
                        "[{a}, {n}, {w}] {} {:?}: output {i} (row {}, column {})",
                        isa.name(),
                        pool.policy(),
                        i / w,
                        i % w
                    );
                }
            }
        }
    }
}

/// Review finding B1 as merged (`StaticMean`): one dequantize feeds a mean over channels
/// (visited first) and a conv; the conv tags the shared value NHWC, and the mean's guard
/// refuses it with a typed error that must name the mean's graph node, not some other node.
#[test]
fn b1_layout_guard_names_the_refused_mean() {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
    let dq = g.dequantize(g.quantize(x, 0.0625, 3), 0.0625, 3);
    let m = g.mean(dq, &[1], true);
    let mq = g.dequantize(g.quantize(m, 0.0625, 1), 0.0625, 1);
    // An int8 weight constant dequantized in the graph (as ExecuTorch's quantizer leaves it).
    let wv: Vec<i8> = values(12, 5).iter().map(|v| (v * 30.0) as i8).collect();
    let qw = QuantParams { scale: 0.015625, zero_point: 0 };
    let wt = Tensor {
        shape: vec![4, 3, 1, 1],
        format: MemoryFormat::Contiguous,
        quant: Some(qw),
        data: TensorData::Qs8(wv),
    };
    let wq = g.dequantize(g.constant(wt), qw.scale, qw.zero_point);
    let y = g.conv2d(dq, wq, None, Conv2dParams::default());
    let yq = g.dequantize(g.quantize(y, 0.25, 0), 0.25, 0);
    let graph = g.finish(&[mq, yq]).unwrap();
    assert!(m.0 > 0, "node 0 would not tell a right name from a default one");

    let opts = LowerOptions { mode: LoweringMode::StaticMean, enable_bf16: false };
    match lower_with(&graph, &opts) {
        Err(e @ LowerError::InternalLayout { node, .. }) => {
            assert_eq!(node, m.0, "the guard names node {node}, the mean is node {}: {e}", m.0);
            assert!(e.to_string().contains(&format!("at node {}", m.0)), "{e}");
            assert!(e.to_string().contains("mean"), "{e}");
        }
        Err(e) => panic!("expected the B1 layout guard, got another error: {e}"),
        Ok(_) => panic!("expected the B1 layout guard, StaticMean lowered the shared dequantize"),
    }
    // The other modes lower it (the guard is StaticMean's, as merged).
    for mode in [LoweringMode::Main, LoweringMode::NhwcAware] {
        let r = lower_with(&graph, &LowerOptions { mode, enable_bf16: false });
        assert!(r.is_ok(), "{mode}: {:?}", r.err());
    }
}
