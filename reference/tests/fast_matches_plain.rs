//! `reference::fast` gives every node the value `reference::eval` gives it, bit for bit, on
//! random graphs: every op, fp32/fp16/bf16/qs8, contiguous and channels-last values, dynamic
//! dims run below their bounds, inputs and weights with +-0, subnormals, +-inf, NaN and the
//! largest finite value; errors (bad inputs) are the same too. NaN is compared as NaN: which
//! NaN a sum of two NaNs gives (sign, payload) depends on the compiler's operand order.

use proptest::prelude::*;
use reference::data::{generate, generate_inputs, DataOptions, Distribution};
use reference::eval::EvalError;
use reference::graph::{BinaryOp, Conv2dParams, Graph, GraphBuilder, T};
use reference::{ElemType, MemoryFormat, QuantParams, Tensor, TensorData, TensorSpec};

/// One step of a random graph: an op applied to an earlier value (`src`, modulo the count).
#[derive(Clone, Debug)]
enum Step {
    Mean {
        src: u8,
        dims: Vec<i64>,
        keepdim: bool,
        cast: u8,
    },
    /// Output size [1, 1] mostly; `big` asks for [2, 2], which both must reject alike.
    Pool {
        src: u8,
        big: bool,
    },
    Conv {
        src: u8,
        per_group: usize,
        k: [usize; 2],
        stride: [usize; 2],
        pad: [usize; 2],
        dil: [usize; 2],
        groups: usize,
        bias: bool,
    },
    /// `other`: an earlier value, or (`konst`) a constant of a shape broadcastable with `src`.
    Binary {
        src: u8,
        op: u8,
        other: u8,
        konst: u8,
    },
    Unary {
        src: u8,
        kind: u8,
        lo: i8,
        hi: i8,
    },
    Linear {
        src: u8,
        n: usize,
        bias: bool,
    },
    Quant {
        src: u8,
        scale: u8,
        zero_point: i8,
        dequantize: bool,
    },
    ToDtype {
        src: u8,
        dtype: u8,
    },
    ToFormat {
        src: u8,
        format: u8,
    },
    Reshape {
        src: u8,
        kind: u8,
    },
    Permute {
        src: u8,
        seed: u8,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let src = any::<u8>();
    prop_oneof![
        3 => (src, prop::collection::vec(-6i64..6, 0..4), any::<bool>(), 0u8..6)
            .prop_map(|(src, dims, keepdim, cast)| Step::Mean { src, dims, keepdim, cast }),
        1 => (src, prop::bool::weighted(0.1)).prop_map(|(src, big)| Step::Pool { src, big }),
        3 => (src, 1usize..3, prop::array::uniform2(1usize..4), prop::array::uniform2(1usize..3), prop::array::uniform2(0usize..3), prop::array::uniform2(1usize..3), 1usize..3, any::<bool>())
            .prop_map(|(src, per_group, k, stride, pad, dil, groups, bias)| Step::Conv { src, per_group, k, stride, pad, dil, groups, bias }),
        1 => (src, 0u8..4, any::<u8>(), 0u8..8).prop_map(|(src, op, other, konst)| Step::Binary { src, op, other, konst }),
        1 => (src, 0u8..3, -4i8..4, -4i8..4).prop_map(|(src, kind, lo, hi)| Step::Unary { src, kind, lo, hi }),
        1 => (src, 1usize..5, any::<bool>()).prop_map(|(src, n, bias)| Step::Linear { src, n, bias }),
        1 => (src, 0u8..4, -5i8..5, any::<bool>()).prop_map(|(src, scale, zero_point, dequantize)| Step::Quant { src, scale, zero_point, dequantize }),
        1 => (src, 0u8..3).prop_map(|(src, dtype)| Step::ToDtype { src, dtype }),
        1 => (src, 0u8..3).prop_map(|(src, format)| Step::ToFormat { src, format }),
        1 => (src, 0u8..3).prop_map(|(src, kind)| Step::Reshape { src, kind }),
        1 => (src, any::<u8>()).prop_map(|(src, seed)| Step::Permute { src, seed }),
    ]
}

const FLOATS: [ElemType; 3] = [ElemType::F32, ElemType::F16, ElemType::Bf16];
const FORMATS: [MemoryFormat; 3] = [MemoryFormat::Contiguous, MemoryFormat::ChannelsLast, MemoryFormat::ChannelsLast3d];

/// A constant of `spec`'s shape and dtype, values from the seed with specials.
fn constant(g: &GraphBuilder, dtype: ElemType, shape: &[usize], seed: u64) -> T {
    let spec = TensorSpec::new(dtype, shape);
    g.constant(generate(&spec, seed, &DataOptions { specials: seed.is_multiple_of(3), distribution: None }))
}

/// Applies `s` to one of `vals` (the builder rejects steps that do not fit; the caller drops them).
fn apply(g: &GraphBuilder, vals: &[T], s: &Step, seed: u64) -> T {
    let pick = |i: u8| vals[i as usize % vals.len()];
    let spec = |t: T| g.spec(t).unwrap_or_else(|| TensorSpec::f32(&[1]));
    match s {
        Step::Mean { src, dims, keepdim, cast } => {
            let x = pick(*src);
            // Dims in -rank..rank (mostly valid; repeats are rejected).
            let r = spec(x).rank().max(1) as i64;
            let dims: Vec<i64> = dims.iter().map(|&d| d.rem_euclid(2 * r) - r).collect();
            match cast {
                0..=2 => g.mean_dtype(x, &dims, *keepdim, FLOATS[*cast as usize]),
                _ => g.mean(x, &dims, *keepdim),
            }
        }
        Step::Pool { src, big } => g.adaptive_avg_pool2d(pick(*src), if *big { [2, 2] } else { [1, 1] }),
        Step::Conv { src, per_group, k, stride, pad, dil, groups, bias } => {
            let x = pick(*src);
            let xs = spec(x);
            let c = xs.shape.get(1).map_or(1, |d| d.size);
            let o = per_group * groups;
            let w = constant(g, xs.dtype, &[o, (c / groups).max(1), k[0], k[1]], seed);
            let b = bias.then(|| constant(g, xs.dtype, &[o], seed ^ 1));
            g.conv2d(x, w, b, Conv2dParams { stride: *stride, padding: *pad, dilation: *dil, groups: *groups })
        }
        Step::Binary { src, op, other, konst } => {
            let x = pick(*src);
            let xs = spec(x);
            let op = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div][*op as usize];
            let y = match konst {
                // 0-D, a trailing row, the full shape, the shape with leading ones dropped.
                0 => constant(g, xs.dtype, &[], seed),
                1 => constant(g, xs.dtype, &xs.max_shape()[xs.rank().saturating_sub(1)..], seed),
                2 => constant(g, xs.dtype, &xs.max_shape(), seed),
                3 => {
                    let s: Vec<usize> =
                        xs.max_shape().iter().map(|&d| if seed.is_multiple_of(2) { 1 } else { d }).collect();
                    constant(g, xs.dtype, &s, seed)
                }
                _ => pick(*other),
            };
            if konst % 2 == 0 {
                g.binary(op, x, y)
            } else {
                g.binary(op, y, x)
            }
        }
        Step::Unary { src, kind: 0, .. } => g.square(pick(*src)),
        Step::Unary { src, kind: 1, .. } => g.rsqrt(pick(*src)),
        Step::Unary { src, lo, hi, .. } => {
            let (lo, hi) = (*lo as f32 / 2.0, *hi as f32 / 2.0);
            match (lo <= hi, lo < 0.0) {
                (true, _) => g.hardtanh(pick(*src), lo, hi),
                (false, true) => g.clamp(pick(*src), Some(lo), None),
                (false, false) => g.clamp(pick(*src), None, Some(hi)),
            }
        }
        Step::Linear { src, n, bias } => {
            let x = pick(*src);
            let xs = spec(x);
            let k = xs.shape.last().map_or(1, |d| d.size);
            let w = constant(g, xs.dtype, &[*n, k], seed);
            let b = bias.then(|| constant(g, xs.dtype, &[*n], seed ^ 1));
            g.linear(x, w, b)
        }
        Step::Quant { src, scale, zero_point, dequantize } => {
            let x = pick(*src);
            match spec(x).quant {
                Some(q) => g.dequantize(x, q.scale, q.zero_point),
                None => {
                    let scale = [0.05, 0.0123, 1.0, 3.0e-3][*scale as usize];
                    let q = g.quantize(x, scale, *zero_point as i32);
                    if *dequantize {
                        g.dequantize(q, scale, *zero_point as i32)
                    } else {
                        q
                    }
                }
            }
        }
        Step::ToDtype { src, dtype } => g.to_dtype(pick(*src), FLOATS[*dtype as usize]),
        Step::ToFormat { src, format } => g.to_format(pick(*src), FORMATS[*format as usize]),
        Step::Reshape { src, kind } => {
            let x = pick(*src);
            let shape = spec(x).max_shape();
            match kind {
                0 => g.reshape(x, &[-1]),
                1 => g.reshape(x, &[shape.first().map_or(1, |&d| d as i64), -1]),
                _ => {
                    let mut s: Vec<i64> = shape.iter().rev().map(|&d| d as i64).collect();
                    s.insert(0, 1);
                    g.reshape(x, &s)
                }
            }
        }
        Step::Permute { src, seed } => {
            let x = pick(*src);
            let rank = spec(x).rank();
            // A permutation from the seed: rotate, then maybe reverse; some dims negative.
            let mut p: Vec<i64> = (0..rank as i64).collect();
            p.rotate_left(*seed as usize % rank.max(1));
            if seed & 16 != 0 {
                p.reverse();
            }
            for (i, d) in p.iter_mut().enumerate() {
                if seed >> 5 & (1 << (i % 3)) != 0 {
                    *d -= rank as i64;
                }
            }
            g.permute(x, &p)
        }
    }
}

/// The graph of `steps` over one input of `input`; outputs are picked from every value.
fn build(input: &TensorSpec, steps: &[Step], outputs: &[u8], seed: u64) -> Result<Graph, reference::GraphError> {
    let g = GraphBuilder::new();
    let mut vals = vec![g.input("x", input.clone())];
    for (k, s) in steps.iter().enumerate() {
        vals.push(apply(&g, &vals, s, seed.wrapping_add(k as u64)));
    }
    let mut outs: Vec<T> = outputs.iter().map(|&o| vals[o as usize % vals.len()]).collect();
    outs.push(*vals.last().unwrap_or(&T(0)));
    g.finish(&outs)
}

/// `steps` with every step the builder rejects dropped.
fn valid_graph(input: &TensorSpec, steps: &[Step], outputs: &[u8], seed: u64) -> Option<Graph> {
    let mut kept: Vec<Step> = vec![];
    for s in steps {
        kept.push(s.clone());
        if build(input, &kept, &[], seed).is_err() {
            kept.pop();
        }
    }
    build(input, &kept, outputs, seed).ok()
}

/// Same dtype, shape, format, quant params and element bits; a NaN equals any NaN.
fn same_tensor(a: &Tensor, b: &Tensor) -> Result<(), String> {
    if a.shape != b.shape || a.format != b.format || a.quant != b.quant || a.dtype() != b.dtype() {
        return Err(format!(
            "tensor types differ: {:?} {:?} {:?} vs {:?} {:?} {:?}",
            a.shape,
            a.format,
            a.dtype(),
            b.shape,
            b.format,
            b.dtype()
        ));
    }
    let nan = |t: &TensorData, i: usize| match t {
        TensorData::F32(v) => v[i].is_nan(),
        TensorData::F16(v) => v[i].is_nan(),
        TensorData::Bf16(v) => v[i].is_nan(),
        TensorData::Qs8(_) => false,
    };
    if a.data.len() != b.data.len() {
        return Err(format!("lengths differ: {} vs {}", a.data.len(), b.data.len()));
    }
    for i in 0..a.data.len() {
        let same = a.data.bits(i) == b.data.bits(i) || (nan(&a.data, i) && nan(&b.data, i));
        if !same {
            return Err(format!(
                "element {i}: plain {:#x} ({}), fast {:#x} ({})",
                a.data.bits(i),
                a.data.get_f64(i),
                b.data.bits(i),
                b.data.get_f64(i)
            ));
        }
    }
    Ok(())
}

fn same_results(plain: &Result<Vec<Tensor>, EvalError>, fast: &Result<Vec<Tensor>, EvalError>) -> Result<(), String> {
    match (plain, fast) {
        (Ok(p), Ok(f)) if p.len() == f.len() => p
            .iter()
            .zip(f)
            .enumerate()
            .try_for_each(|(k, (p, f))| same_tensor(p, f).map_err(|e| format!("value {k}: {e}"))),
        (Err(p), Err(f)) if p == f => Ok(()),
        _ => Err(format!("plain {:?} vs fast {:?}", plain.as_ref().map(Vec::len), fast.as_ref().map(Vec::len))),
    }
}

fn input_spec(dtype: u8, shape: &[usize], format: u8, dynamic: u8) -> TensorSpec {
    let mut spec = match dtype {
        0..=2 => TensorSpec::new(FLOATS[dtype as usize], shape),
        _ => TensorSpec::qs8(shape, QuantParams::new(0.05, -3)),
    };
    let f = FORMATS[format as usize % 3];
    if f.required_rank() == Some(shape.len()) {
        spec = spec.with_format(f);
    }
    for d in 0..shape.len() {
        if dynamic & (1 << d) != 0 {
            spec = spec.dynamic(d);
        }
    }
    spec
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn fast_evaluator_gives_the_plain_values(
        dtype in 0u8..4,
        shape in prop_oneof![prop::collection::vec(1usize..9, 4..5), prop::collection::vec(1usize..6, 1..6)],
        format in 0u8..3,
        dynamic in prop_oneof![3 => Just(0u8), 1 => any::<u8>()],
        shrink in any::<u8>(),
        steps in prop::collection::vec(step(), 1..9),
        outputs in prop::collection::vec(any::<u8>(), 0..3),
        seed in any::<u64>(),
        specials in any::<bool>(),
        distribution in prop::option::of(0usize..6),
        bad_input in 0u8..16,
    ) {
        let input = input_spec(dtype, &shape, format, dynamic);
        let Some(graph) = valid_graph(&input, &steps, &outputs, seed) else { return Ok(()) };
        // Dynamic dims at a seeded size up to their bound (or, rarely, above it: bad input).
        let run_shape: Vec<usize> = input.shape.iter().enumerate().map(|(d, dim)| match (dim.dynamic, bad_input) {
            (true, 0) => dim.size + 1,
            (true, _) => 1 + (shrink as usize >> d) % dim.size,
            (false, _) => dim.size,
        }).collect();
        let opts = DataOptions { specials, distribution: distribution.map(|d| Distribution::ALL[d]) };
        let mut inputs = generate_inputs(&graph, &[run_shape], seed, &opts);
        if bad_input == 1 {
            inputs.push(inputs[0].clone());
        }
        let plain = reference::eval::run_all(&graph, &inputs);
        let fast = reference::fast::run_all(&graph, &inputs);
        same_results(&plain, &fast).map_err(|e| TestCaseError::fail(format!("run_all: {e}\n{graph:?}")))?;
        let plain = reference::eval::run(&graph, &inputs);
        let fast = reference::fast::run(&graph, &inputs);
        same_results(&plain, &fast).map_err(|e| TestCaseError::fail(format!("run: {e}\n{graph:?}")))?;
    }
}

/// The generator reaches what the property is about: most graphs valid and several ops
/// deep, every dtype and format, special values in the outputs.
#[test]
fn random_graphs_cover_the_interesting_cases() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut deep, mut nan, mut inf, mut cl, mut qs8, mut half) = (0, 0, 0, 0, 0, 0);
    for _ in 0..300 {
        let dtype = (0u8..4).new_tree(&mut runner).unwrap().current();
        let shape = prop::collection::vec(1usize..6, 4..5).new_tree(&mut runner).unwrap().current();
        let steps = prop::collection::vec(step(), 4..9).new_tree(&mut runner).unwrap().current();
        let seed = any::<u64>().new_tree(&mut runner).unwrap().current();
        let input = input_spec(dtype, &shape, 1, 0);
        let Some(graph) = valid_graph(&input, &steps, &[], seed) else { continue };
        deep += usize::from(graph.nodes.len() >= 5);
        let inputs = generate_inputs(&graph, &[], seed, &DataOptions { specials: true, distribution: None });
        let all = reference::eval::run_all(&graph, &inputs).expect("valid graph");
        let values: Vec<f64> = all.iter().flat_map(|t| t.values_f64()).collect();
        nan += usize::from(values.iter().any(|v| v.is_nan()));
        inf += usize::from(values.iter().any(|v| v.is_infinite()));
        cl += usize::from(all.iter().any(|t| t.format == MemoryFormat::ChannelsLast));
        qs8 += usize::from(all.iter().any(|t| t.dtype() == ElemType::Qs8));
        half += usize::from(all.iter().any(|t| matches!(t.dtype(), ElemType::F16 | ElemType::Bf16)));
    }
    for (what, n) in [("deep", deep), ("nan", nan), ("inf", inf), ("channels_last", cl), ("qs8", qs8), ("half", half)] {
        assert!(n >= 30, "only {n} of 300 graphs have {what}");
    }
}
