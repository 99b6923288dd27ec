//! Time per bound invoke of one named bench program (StaticMean unless `MODE`, cost model) at 1 and 2
//! threads, the minimum of several batches (robust to bursts on a shared machine):
//! `cargo run --release -p harness --example program_cost -- NAME [BATCHES] [RUNS]`
//! (`harness bench` names: `rmsnorm_1x64x512_qs8`, ...). `THREADS=N` times N threads only;
//! `SIMD=avx2` (or `scalar`) runs a narrower instruction set than the CPU's widest;
//! `MODE=nhwc_aware` (or `main`) lowers with that mode instead of StaticMean; `ENGINE=xnnpack` times
//! real XNNPACK's bound program instead of ours (as the sweep binds it); `POLICY=per_output` runs ours on
//! XNNPACK's per-output tasks instead of the cost model.
use delegate::runtime::{Program, RunOptions, SimdLevel, ThreadPolicy};
use delegate::LoweringMode;
use harness::engine::{Config, Engine, Simd, Subject};
use harness::{bench, engine};
use std::time::Instant;

fn main() {
    let mut a = std::env::args().skip(1);
    let name = a.next().expect("usage: program_cost NAME [BATCHES] [RUNS]");
    let batches: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(9);
    let runs: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(200);
    let p = harness::programs::find(&name).unwrap_or_else(|| panic!("no program {name}"));
    let graph = p.graph().expect("program graph");
    // Lowered and fed as the sweep does (its default seed is 1).
    let mode = match std::env::var("MODE").as_deref() {
        Ok("nhwc_aware") => LoweringMode::NhwcAware,
        Ok("main") => LoweringMode::Main,
        _ => LoweringMode::StaticMean,
    };
    let lowered = engine::payload::lower(&graph, mode, p.enable_bf16).expect("lowering");
    let inputs = bench::timing_inputs(&graph, 1);
    let threads: Vec<usize> = match std::env::var("THREADS").ok().and_then(|s| s.parse().ok()) {
        Some(t) => vec![t],
        None => vec![1, 2],
    };
    let simd = match std::env::var("SIMD").as_deref() {
        Ok("avx2") => SimdLevel::Avx2,
        Ok("scalar") => SimdLevel::Scalar,
        _ => SimdLevel::Auto,
    };
    let xnnpack = std::env::var("ENGINE").as_deref() == Ok("xnnpack");
    let policy = match std::env::var("POLICY").as_deref() {
        Ok("per_output") => ThreadPolicy::PerOutputTasks,
        _ => ThreadPolicy::CostModel,
    };
    for t in threads {
        if xnnpack {
            let config = Config { threads: t, simd: Simd::Best, policy: None, own_pool: true };
            let mut inst = engine::Xnnpack::new().build(Subject::lowered(&graph, &lowered), config).expect("xnnpack");
            let mut b = inst.bind(inputs.clone()).expect("bind");
            let best = best_of(batches, runs, || b.invoke().expect("invoke"));
            println!("{name} xnnpack threads {t}: {:.2} us (minimum of {batches} batches of {runs})", best / 1e3);
            continue;
        }
        let prog =
            Program::new(&lowered, &RunOptions { threads: t, policy, simd, ..RunOptions::default() }).expect("program");
        let mut b = prog.bind(inputs.clone()).expect("bind");
        let best = best_of(batches, runs, || b.invoke().expect("invoke"));
        println!("{name} threads {t}: {:.2} us (minimum of {batches} batches of {runs})", best / 1e3);
    }
}

/// Nanoseconds per call of `f`: the minimum over `batches` batches of `runs` calls.
fn best_of(batches: usize, runs: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..batches {
        let s = Instant::now();
        for _ in 0..runs {
            f();
        }
        best = best.min(s.elapsed().as_nanos() as f64 / runs as f64);
    }
    best
}
