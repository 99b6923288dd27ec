//! Whole programs through `Program::run`: fp32 RMSNorm (`x * rsqrt(mean(x*x, -1) + eps)`)
//! lowered with the change (`StaticMean`), on shapes from 1x1x128 to 1x32x2048, at 1 and 2
//! threads under both policies (`t1`, `t2_cost`, `t2_per_output`). Throughput: input bytes.
//!
//! `cargo bench -p delegate --bench runtime_rmsnorm -- --warm-up-time 1 --measurement-time 2`

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use delegate::runtime::{Program, RunOptions, SimdLevel, ThreadPolicy};
use delegate::{lower, LoweringMode};
use reference::data::{generate, DataOptions};
use reference::graph::{GraphBuilder, TensorSpec};

fn rmsnorm(t: usize, d: usize) -> reference::Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, t, d]));
    let ms = g.mean(g.mul(x, x), &[-1], true);
    let y = g.mul(x, g.rsqrt(g.add(ms, g.scalar(1e-6))));
    g.finish(&[y]).unwrap()
}

fn bench_rmsnorm(c: &mut Criterion) {
    let shapes = [(1, 128), (1, 2048), (4, 512), (8, 256), (8, 2048), (16, 1024), (32, 2048), (128, 2048)];
    let mut g = c.benchmark_group("rmsnorm_f32");
    for (t, d) in shapes {
        let graph = rmsnorm(t, d);
        let lowered = lower(&graph, LoweringMode::StaticMean).unwrap();
        let x = generate(&graph.nodes[0].spec, 1, &DataOptions::default());
        g.throughput(Throughput::Bytes((t * d * 4) as u64));
        for (label, threads, policy) in [
            ("t1", 1, ThreadPolicy::CostModel),
            ("t2_cost", 2, ThreadPolicy::CostModel),
            ("t2_per_output", 2, ThreadPolicy::PerOutputTasks),
        ] {
            let p =
                Program::new(&lowered, &RunOptions { threads, policy, simd: SimdLevel::Auto, ..RunOptions::default() })
                    .unwrap();
            g.bench_with_input(BenchmarkId::new(format!("1x{t}x{d}"), label), &(), |b, _| {
                b.iter(|| p.run(black_box(std::slice::from_ref(&x))).unwrap())
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench_rmsnorm);
criterion_main!(benches);
