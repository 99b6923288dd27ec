//! Per-run cost of whole programs measured as XNNPACK's timings are (`xnn_invoke_runtime`
//! only): the program is bound once (`Program::bind`) and each iteration is one
//! `Bound::invoke` on the bound buffers. The sweep's fp32 programs (StaticMean lowering):
//! RMSNorm `x * rsqrt(mean(x^2, -1) + eps) * w` on its ten shapes and the bare last-dim mean
//! on its two, at 1 and 2 threads (CostModel), each as:
//! - `invoke`: bound, fused plan (the default);
//! - `invoke_unfused`: bound, every node by itself (the same bits, more passes over memory);
//! - `run`: `Program::run` (checks the inputs and allocates the outputs every call).
//!
//! `cargo bench -p delegate --bench runtime_invoke -- --warm-up-time 1 --measurement-time 2 [FILTER]`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use delegate::runtime::{Program, RunOptions, ThreadPolicy};
use delegate::{lower, LoweringMode};
use reference::data::{generate, DataOptions, Distribution};
use reference::graph::{GraphBuilder, TensorSpec};
use reference::Tensor;
use std::hint::black_box;

/// The harness's RMSNorm (`programs.rs`): square, mean, add eps, rsqrt, multiply, multiply by
/// a weight of the last dim's size.
fn rmsnorm(shape: [usize; 3]) -> reference::Graph {
    let d = shape[2];
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&shape));
    let ms = g.mean(g.square(x), &[-1], true);
    let inv = g.rsqrt(g.add(ms, g.constant(Tensor::f32(&[], vec![1e-6]))));
    let w = g.constant(Tensor::f32(&[d], (0..d).map(|i| 1.0 + 0.25 * ((i % 7) as f32 / 7.0 - 0.5)).collect()));
    let y = g.mul(g.mul(x, inv), w);
    g.finish(&[y]).unwrap()
}

fn mean_last(shape: [usize; 3]) -> reference::Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&shape));
    let y = g.mean(x, &[-1], true);
    g.finish(&[y]).unwrap()
}

const RMSNORM_SHAPES: [[usize; 3]; 10] = [
    [1, 1, 128],
    [1, 8, 64],
    [1, 8, 128],
    [1, 16, 256],
    [1, 32, 128],
    [1, 32, 512],
    [1, 64, 512],
    [1, 128, 128],
    [1, 32, 2048],
    [1, 128, 2048],
];
const MEAN_SHAPES: [[usize; 3]; 2] = [[1, 128, 128], [1, 128, 2048]];

fn bench_program(c: &mut Criterion, group: &str, graph: &reference::Graph, shape: [usize; 3]) {
    let lowered = lower(graph, LoweringMode::StaticMean).unwrap();
    let opts = DataOptions { specials: false, distribution: Some(Distribution::Uniform) };
    let x = generate(&graph.nodes[0].spec, 7, &opts);
    let label = format!("1x{}x{}", shape[1], shape[2]);
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Bytes((shape.iter().product::<usize>() * 4) as u64));
    for threads in [1, 2] {
        let run_opts = RunOptions { threads, policy: ThreadPolicy::CostModel, ..RunOptions::default() };
        let p = Program::new(&lowered, &run_opts).unwrap();
        let mut q = Program::new(&lowered, &run_opts).unwrap();
        q.set_fusion(false);
        let mut fused = p.bind(vec![x.clone()]).unwrap();
        let mut unfused = q.bind(vec![x.clone()]).unwrap();
        assert_eq!(fused.outputs(), unfused.outputs(), "{group} {label}: fused and unfused differ");
        g.bench_function(BenchmarkId::new(format!("{label}/invoke"), format!("t{threads}")), |b| {
            b.iter(|| fused.invoke().unwrap())
        });
        g.bench_function(BenchmarkId::new(format!("{label}/invoke_unfused"), format!("t{threads}")), |b| {
            b.iter(|| unfused.invoke().unwrap())
        });
        g.bench_function(BenchmarkId::new(format!("{label}/run"), format!("t{threads}")), |b| {
            b.iter(|| black_box(p.run(std::slice::from_ref(&x)).unwrap()))
        });
    }
    g.finish();
}

fn bench_all(c: &mut Criterion) {
    for shape in RMSNORM_SHAPES {
        bench_program(c, "rmsnorm_f32", &rmsnorm(shape), shape);
    }
    for shape in MEAN_SHAPES {
        bench_program(c, "mean_last_f32", &mean_last(shape), shape);
    }
}

criterion_group!(benches, bench_all);
criterion_main!(benches);
