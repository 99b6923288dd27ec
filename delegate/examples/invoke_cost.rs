//! Instructions per bound invoke of the bench's smallest RMSNorm, for callgrind:
//! `valgrind --tool=callgrind --toggle-collect='*Bound*invoke_inner*' target/release/examples/invoke_cost 10000`
//! (collected instructions / runs = one invoke's cost).

use delegate::runtime::{Program, RunOptions, ThreadPolicy};
use delegate::{lower, LoweringMode};
use reference::graph::{GraphBuilder, TensorSpec};
use reference::Tensor;

fn main() {
    let runs: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let d = 128;
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 1, d]));
    let ms = g.mean(g.square(x), &[-1], true);
    let inv = g.rsqrt(g.add(ms, g.constant(Tensor::f32(&[], vec![1e-6]))));
    let w = g.constant(Tensor::f32(&[d], (0..d).map(|i| 1.0 + i as f32 / 256.0).collect()));
    let y = g.mul(g.mul(x, inv), w);
    let graph = g.finish(&[y]).unwrap();
    let lowered = lower(&graph, LoweringMode::StaticMean).unwrap();
    let opts = RunOptions { threads: 1, policy: ThreadPolicy::CostModel, ..RunOptions::default() };
    let p = Program::new(&lowered, &opts).unwrap();
    let input = Tensor::f32(&[1, 1, d], (0..d).map(|i| i as f32 / 64.0 - 1.0).collect());
    let mut b = p.bind(vec![input]).unwrap();
    for _ in 0..runs {
        b.invoke().unwrap();
    }
    println!("{runs} invokes, output[0] = {:?}", b.outputs()[0].values_f64()[0]);
}
