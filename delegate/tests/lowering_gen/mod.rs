//! Random builder graphs shared by the lowering tests: a chain of steps over one input,
//! each step kept only if the builder accepts it.

use proptest::prelude::*;
use reference::graph::{BinaryOp, Conv2dParams, Graph, GraphBuilder, T};
use reference::{ElemType, MemoryFormat, QuantParams, Tensor, TensorSpec};

/// The binary ops a generated step may pick, by index.
const BINARY_OPS: [BinaryOp; 4] = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];

pub fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

#[derive(Clone, Debug)]
pub enum Step {
    Mean(Vec<i64>, bool, bool),
    Conv(usize, usize, usize),
    Binary(u8, usize),
    BinaryConst(u8),
    Unary(u8),
    Linear(usize),
    Qdq,
    QConv(usize),
    Copy(u8),
    Reshape,
    Permute(Vec<i64>),
}

pub fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (proptest::collection::vec(-4i64..4, 0..3), any::<bool>(), any::<bool>()).prop_map(|(d, k, t)| {
            let two = d.len() == 2;
            Step::Mean(d, k, t && two)
        }),
        (1usize..5, 1usize..3, 1usize..3).prop_map(|(o, k, g)| Step::Conv(o, k, g)),
        (0u8..4, 0usize..8).prop_map(|(o, j)| Step::Binary(o, j)),
        (0u8..4).prop_map(Step::BinaryConst),
        (0u8..3).prop_map(Step::Unary),
        (1usize..5).prop_map(Step::Linear),
        Just(Step::Qdq),
        (1usize..4).prop_map(Step::QConv),
        (0u8..4).prop_map(Step::Copy),
        Just(Step::Reshape),
        proptest::collection::vec(-4i64..4, 3..5).prop_map(Step::Permute),
    ]
}

/// Builds a graph from the steps, skipping any step the builder rejects.
pub fn build(shape: &[usize], cl: bool, dt: ElemType, steps: &[Step], n_out: usize) -> Option<Graph> {
    let mut spec = TensorSpec::new(dt, shape);
    if cl && shape.len() == 4 {
        spec = spec.channels_last();
    }
    let mut kept: Vec<Step> = Vec::new();
    for s in steps {
        // A quantize may legitimately land one step away from the reference (non-power-of-two
        // means before it); a later division by a small constant, a square or an rsqrt turns
        // that step into an unbounded difference. Layout is what these graphs test, so the
        // amplifiers stay upstream of quantization.
        let quantized = kept.iter().any(|k| matches!(k, Step::Qdq | Step::QConv(_)));
        let amplifies = matches!(s, Step::Binary(3, _) | Step::BinaryConst(3) | Step::Unary(0 | 1));
        if quantized && amplifies {
            continue;
        }
        let mut trial = kept.clone();
        trial.push(s.clone());
        if build_graph(&spec, &trial, 1).is_ok() {
            kept = trial;
        }
    }
    build_graph(&spec, &kept, n_out).ok()
}

pub fn build_graph(spec: &TensorSpec, steps: &[Step], n_out: usize) -> Result<Graph, reference::GraphError> {
    let g = GraphBuilder::new();
    let x = g.input("x", spec.clone());
    let mut vals = vec![x];
    for (k, s) in steps.iter().enumerate() {
        let cur = *vals.last().unwrap();
        let cs = g.spec(cur).unwrap();
        let v = match s {
            Step::Mean(d, keep, dtype) => {
                if *dtype {
                    g.mean_dtype(cur, d, *keep, ElemType::F32)
                } else {
                    g.mean(cur, d, *keep)
                }
            }
            Step::Conv(o, kk, groups) => {
                let c = cs.shape.get(1).map_or(1, |d| d.size);
                let gi = (c / groups).max(1);
                let w =
                    g.constant(Tensor::f32(&[*o * groups, gi, *kk, *kk], values(o * groups * gi * kk * kk, k as u32)));
                let p = Conv2dParams { groups: *groups, ..Default::default() };
                g.conv2d(cur, w, None, p)
            }
            Step::Binary(o, j) => {
                let other = vals[j % vals.len()];
                g.binary(BINARY_OPS[*o as usize], cur, other)
            }
            Step::BinaryConst(o) => {
                let c = if o % 2 == 0 {
                    g.scalar(0.5)
                } else {
                    let shape = cs.max_shape();
                    let n = shape.iter().product();
                    g.constant(Tensor::f32(&shape, values(n, 9)))
                };
                g.binary(BINARY_OPS[*o as usize], cur, c)
            }
            Step::Unary(0) => g.square(cur),
            Step::Unary(1) => g.rsqrt(cur),
            Step::Unary(_) => g.relu(cur),
            Step::Linear(n) => {
                let kdim = cs.shape.last().map_or(1, |d| d.size);
                let w = g.constant(Tensor::f32(&[*n, kdim], values(n * kdim, 2)));
                g.linear(cur, w, None)
            }
            Step::Qdq => g.dequantize(g.quantize(cur, 0.05, 1), 0.05, 1),
            Step::QConv(o) => {
                let c = cs.shape.get(1).map_or(1, |d| d.size);
                let xd = g.dequantize(g.quantize(cur, 0.05, 1), 0.05, 1);
                let wq: Vec<i8> = (0..o * c * 4).map(|i| (i % 7) as i8 - 3).collect();
                let w = g.constant(Tensor::qs8(&[*o, c, 2, 2], wq, QuantParams::new(0.02, 0)));
                let b = g.constant(Tensor::f32(&[*o], values(*o, 4)));
                let y = g.conv2d(xd, g.dequantize(w, 0.02, 0), Some(b), Conv2dParams::default());
                g.dequantize(g.quantize(y, 0.1, -2), 0.1, -2)
            }
            Step::Copy(0) => g.to_format(cur, MemoryFormat::ChannelsLast),
            Step::Copy(1) => g.to_format(cur, MemoryFormat::Contiguous),
            Step::Copy(2) => g.to_dtype(cur, ElemType::F16),
            Step::Copy(_) => g.to_dtype(cur, ElemType::F32),
            Step::Reshape => g.reshape(cur, &[-1]),
            Step::Permute(p) => g.permute(cur, p),
        };
        vals.push(v);
    }
    let outs: Vec<T> = vals.iter().rev().take(n_out.max(1)).copied().collect();
    g.finish(&outs)
}
