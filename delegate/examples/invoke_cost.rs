//! Instructions (under callgrind) and time per bound invoke of a bench RMSNorm:
//! `valgrind --tool=callgrind --toggle-collect='*Bound*invoke_inner*' target/release/examples/invoke_cost 10000 [f32|f16|bf16] [ROWS] [DIM]`
//! (collected instructions / runs = one invoke's cost; `THREADS=N` for N threads; default: f32, 1 row of 128, the
//! bench's smallest).

use delegate::runtime::{Program, RunOptions, ThreadPolicy};
use delegate::{lower_with, LowerOptions, LoweringMode};
use reference::graph::{GraphBuilder, TensorSpec};
use reference::{ElemType, Tensor, TensorData};

fn tensor(dt: ElemType, shape: &[usize], v: Vec<f32>) -> Tensor {
    let data = match dt {
        ElemType::F16 => TensorData::F16(v.into_iter().map(half::f16::from_f32).collect()),
        ElemType::Bf16 => TensorData::Bf16(v.into_iter().map(half::bf16::from_f32).collect()),
        _ => TensorData::F32(v),
    };
    Tensor::new(shape.to_vec(), data)
}

fn main() {
    let arg = |i: usize| std::env::args().nth(i);
    let runs: usize = arg(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let dt = match arg(2).as_deref() {
        None | Some("f32") => ElemType::F32,
        Some("f16") => ElemType::F16,
        Some("bf16") => ElemType::Bf16,
        Some(o) => panic!("dtype {o}: f32, f16 or bf16"),
    };
    let rows: usize = arg(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let d: usize = arg(4).and_then(|s| s.parse().ok()).unwrap_or(128);
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::new(dt, &[1, rows, d]));
    let ms = g.mean(g.square(x), &[-1], true);
    let inv = g.rsqrt(g.add(ms, g.constant(tensor(dt, &[], vec![1e-6]))));
    let w = g.constant(tensor(dt, &[d], (0..d).map(|i| 1.0 + i as f32 / 256.0).collect()));
    let y = g.mul(g.mul(x, inv), w);
    let graph = g.finish(&[y]).unwrap();
    // bf16 delegated as the bench lowers it (`XnnpackPartitioner(enable_bf16=True)`).
    let lowered =
        lower_with(&graph, &LowerOptions { enable_bf16: true, ..LowerOptions::new(LoweringMode::StaticMean) }).unwrap();
    let threads = std::env::var("THREADS").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let opts = RunOptions { threads, policy: ThreadPolicy::CostModel, ..RunOptions::default() };
    let p = Program::new(&lowered, &opts).unwrap();
    let n = rows * d;
    let input = tensor(dt, &[1, rows, d], (0..n).map(|i| (i % 128) as f32 / 64.0 - 1.0).collect());
    let mut b = p.bind(vec![input]).unwrap();
    let t = std::time::Instant::now();
    for _ in 0..runs {
        b.invoke().unwrap();
    }
    let ns = t.elapsed().as_nanos() as f64 / runs as f64;
    println!("{runs} invokes, {:.0} ns each, output[0] = {:?}", ns, b.outputs()[0].values_f64()[0]);
}
