//! Time of the packed-panel f32 GEMM kernel alone (`simd::gemm_panels`), one thread:
//! `cargo run --release -p delegate --example gemm_cost -- M K N [RUNS]`; `SIMD=avx2` runs the
//! AVX2 kernel, `COPIES=8` cycles through eight copies of the weights (out of cache, as in a
//! program whose layers each read their own).
use delegate::runtime::simd::{self, Isa, Panels};
use std::time::Instant;

fn main() {
    let a: Vec<usize> = std::env::args().skip(1).map(|s| s.parse().expect("number")).collect();
    let (m, k, n) = (a[0], a[1], a[2]);
    let runs = a.get(3).copied().unwrap_or(50);
    let isa = match std::env::var("SIMD").as_deref() {
        Ok("avx2") => Isa::avx2().expect("avx2"),
        _ => Isa::best(),
    };
    let x: Vec<f32> = (0..m * k).map(|i| (i % 17) as f32 / 8.0 - 1.0).collect();
    let w: Vec<f32> = (0..n * k).map(|i| (i % 13) as f32 / 6.0 - 1.0).collect();
    let b: Vec<f32> = (0..n).map(|i| i as f32 / 100.0).collect();
    let copies: usize = std::env::var("COPIES").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let ps: Vec<Vec<f32>> = (0..copies).map(|_| simd::pack_panels(&w, |v| v, false, n, k).expect("pack")).collect();
    let mut out = vec![0f32; m * n];
    let mut best = f64::INFINITY;
    for _ in 0..7 {
        let s = Instant::now();
        for i in 0..runs {
            simd::gemm_panels(isa, &mut out, 0, &x, &ps[i % copies], Panels { k, n }, Some(&b));
        }
        best = best.min(s.elapsed().as_secs_f64() / runs as f64);
    }
    let gflops = 2.0 * (m * k * n) as f64 / best / 1e9;
    println!(
        "{m}x{k}x{n} {}: {:.1} us, {gflops:.1} GFLOP/s (checksum {})",
        isa.name(),
        best * 1e6,
        out.iter().sum::<f32>()
    );
}
