//! Plan-time fusion (`runtime::fuse`) gives the unfused plan's bits: random programs of
//! elementwise chains with broadcast operands, squares feeding means, means feeding further
//! ops and RMSNorms, in fp32, fp16 and bf16, run with fusion on and off, at every instruction
//! set and at 1 and 2 threads (both policies), and must agree bit for bit (NaN only with NaN:
//! its payload is not part of the IEEE result). The run counts the drawn programs that have a
//! fused group and requires most of them to, so the property is not a comparison of two
//! unfused runs.

use delegate::program::Step;
use delegate::runtime::fuse::Group;
use delegate::runtime::plan::SegmentPlan;
use delegate::runtime::{Program, RunOptions, SimdLevel, ThreadPolicy};
use delegate::{lower, LoweringMode};
use proptest::prelude::*;
use reference::graph::{GraphBuilder, TensorSpec};
use reference::{ElemType, Tensor, TensorData, T};

/// One operation applied to the running value `v`.
#[derive(Clone, Debug)]
enum OpDesc {
    /// `v op operand` (or `operand op v` when `swap`).
    Bin {
        op: u8,
        operand: Operand,
        swap: bool,
    },
    Square,
    Rsqrt,
    Clamp {
        lo: f32,
        hi: f32,
    },
    /// `mean(v, -1, keepdim)`: later operations broadcast it back.
    MeanLast,
    /// `mean(v * v, -1, keepdim)` (the square written as a multiply).
    MeanOfSelfProduct,
    /// `v * rsqrt(mean(v * v, -1, keepdim) + eps)`: an RMSNorm without its weight
    /// (`fuse::Group::Norm`; later operations may extend its chain).
    Normalize {
        eps: f32,
    },
}

#[derive(Clone, Debug)]
enum Operand {
    /// The program input.
    X,
    /// A constant of this many trailing dims of the input's shape (the others 1).
    Const { dims: u8, seed: u32 },
    /// The running value of `back` operations ago (a value with a second reader).
    Earlier { back: u8 },
}

fn op_strategy() -> impl Strategy<Value = OpDesc> {
    let operand = prop_oneof![
        3 => Just(Operand::X),
        4 => (0u8..4, any::<u32>()).prop_map(|(dims, seed)| Operand::Const { dims, seed }),
        1 => (1u8..4).prop_map(|back| Operand::Earlier { back }),
    ];
    prop_oneof![
        6 => (0u8..4, operand, any::<bool>()).prop_map(|(op, operand, swap)| OpDesc::Bin { op, operand, swap }),
        2 => Just(OpDesc::Square),
        1 => Just(OpDesc::Rsqrt),
        1 => (-2.0f32..0.0, 0.0f32..2.0).prop_map(|(lo, hi)| OpDesc::Clamp { lo, hi }),
        1 => Just(OpDesc::MeanLast),
        1 => Just(OpDesc::MeanOfSelfProduct),
        1 => (1e-6f32..1.0).prop_map(|eps| OpDesc::Normalize { eps }),
    ]
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed as u64 | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

/// A tensor of `dt` holding `values(n, seed)` rounded to it.
fn tensor(shape: &[usize], dt: ElemType, seed: u32) -> Tensor {
    let v: Vec<f64> = values(shape.iter().product(), seed).into_iter().map(f64::from).collect();
    Tensor::from_f64(shape, dt, None, &v)
}

fn build(shape: &[usize], dt: ElemType, ops: &[OpDesc]) -> reference::Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::new(dt, shape));
    let mut v = x;
    let mut history: Vec<T> = vec![x];
    for op in ops {
        v = match op {
            OpDesc::Bin { op, operand, swap } => {
                let other = match operand {
                    Operand::X => x,
                    Operand::Const { dims, seed } => {
                        let k = (*dims as usize).min(shape.len());
                        let cshape = &shape[shape.len() - k..];
                        g.constant(tensor(cshape, dt, *seed))
                    }
                    Operand::Earlier { back } => history[history.len().saturating_sub(*back as usize + 1)],
                };
                let (a, b) = if *swap { (other, v) } else { (v, other) };
                match op {
                    0 => g.add(a, b),
                    1 => g.sub(a, b),
                    2 => g.mul(a, b),
                    _ => g.div(a, b),
                }
            }
            OpDesc::Square => g.square(v),
            OpDesc::Rsqrt => g.rsqrt(v),
            OpDesc::Clamp { lo, hi } => g.clamp(v, Some(*lo), Some(*hi)),
            OpDesc::MeanLast => g.mean(v, &[-1], true),
            OpDesc::MeanOfSelfProduct => g.mean(g.mul(v, v), &[-1], true),
            OpDesc::Normalize { eps } => {
                let ms = g.mean(g.square(v), &[-1], true);
                let e = g.constant(Tensor::from_f64(&[], dt, None, &[f64::from(*eps)]));
                g.mul(v, g.rsqrt(g.add(ms, e)))
            }
        };
        history.push(v);
    }
    g.finish(&[v]).unwrap()
}

fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    fn all<T: Copy>(x: &[T], y: &[T], bits: impl Fn(T) -> u32, nan: impl Fn(T) -> bool) -> bool {
        x.len() == y.len() && x.iter().zip(y).all(|(&p, &q)| bits(p) == bits(q) || (nan(p) && nan(q)))
    }
    a.shape == b.shape
        && match (&a.data, &b.data) {
            (TensorData::F32(x), TensorData::F32(y)) => all(x, y, f32::to_bits, f32::is_nan),
            (TensorData::F16(x), TensorData::F16(y)) => all(x, y, |v| v.to_bits().into(), |v| v.is_nan()),
            (TensorData::Bf16(x), TensorData::Bf16(y)) => all(x, y, |v| v.to_bits().into(), |v| v.is_nan()),
            _ => false,
        }
}

/// The groups of every delegate segment's plan.
fn groups(lowered: &delegate::LoweredProgram) -> Vec<Group> {
    lowered
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Delegate(seg) => {
                let loaded =
                    delegate::serialize::load(&delegate::serialize::write(&seg.graph), &Default::default()).ok()?;
                let plan = SegmentPlan::compile(0, &loaded, seg.inputs.len(), seg.outputs.len()).ok()?;
                Some(plan.groups)
            }
            Step::Portable(_) => None,
        })
        .flatten()
        .collect()
}

/// How many fused groups the segments' plans have.
fn fused_groups(lowered: &delegate::LoweredProgram) -> usize {
    groups(lowered).iter().filter(|g| !matches!(g, Group::Node(_))).count()
}

/// Whether a plan runs elementwise nodes on a mean's output in its group (`fuse::Tail`).
fn has_tail(lowered: &delegate::LoweredProgram) -> bool {
    groups(lowered)
        .iter()
        .any(|g| matches!(g, Group::SquareMean { tail: Some(_), .. } | Group::Norm { tail: Some(_), .. }))
}

fn configs() -> Vec<RunOptions> {
    let mut v = Vec::new();
    for simd in [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512] {
        if delegate::runtime::resolve_simd(simd).is_err() {
            continue;
        }
        for (threads, policy) in
            [(1, ThreadPolicy::CostModel), (2, ThreadPolicy::CostModel), (2, ThreadPolicy::PerOutputTasks)]
        {
            v.push(RunOptions { threads, policy, simd, ..RunOptions::default() });
        }
    }
    v
}

fn check(shape: &[usize], dt: ElemType, ops: &[OpDesc], seed: u32) -> Result<(), TestCaseError> {
    let graph = build(shape, dt, ops);
    let lowered = lower(&graph, LoweringMode::StaticMean).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let x = tensor(shape, dt, seed);
    for opts in configs() {
        let fused = Program::new(&lowered, &opts).unwrap();
        let mut unfused = Program::new(&lowered, &opts).unwrap();
        unfused.set_fusion(false);
        let a = fused.run(std::slice::from_ref(&x)).unwrap();
        let b = unfused.run(std::slice::from_ref(&x)).unwrap();
        prop_assert!(same_bits(&a[0], &b[0]), "{opts:?}: fused and unfused differ for {ops:?} on {shape:?} {dt:?}");
        // The bound path runs the same plan into its own buffers.
        let mut bound = fused.bind(vec![x.clone()]).unwrap();
        bound.invoke().unwrap();
        prop_assert!(same_bits(&bound.outputs()[0], &b[0]), "{opts:?}: bound run differs for {ops:?}");
    }
    Ok(())
}

#[test]
fn fused_plans_give_the_unfused_bits() {
    use proptest::test_runner::{Config, TestRunner};
    let strategy = (
        1usize..3,
        prop::sample::select(vec![1usize, 2, 3, 8]),
        prop::sample::select(vec![1usize, 3, 8, 17, 64, 130, 1030]),
        prop::collection::vec(op_strategy(), 1..7),
        any::<u32>(),
        prop::sample::select(vec![ElemType::F32, ElemType::F16, ElemType::Bf16]),
    );
    // Seeded: the same programs on every run (`PROPTEST_RNG_SEED` still overrides).
    let config = Config { cases: 192, rng_seed: proptest::test_runner::RngSeed::Fixed(20261203), ..Config::default() };
    let mut runner = TestRunner::new(config);
    let (cases, fused) = (std::cell::Cell::new(0usize), std::cell::Cell::new(0usize));
    // fp16 programs drawn and fused: the narrow chains must be exercised too (bf16 programs
    // lower with converts around their fp32 means and fuse less; they are compared all the same).
    let (narrow, narrow_fused) = (std::cell::Cell::new(0usize), std::cell::Cell::new(0usize));
    let (tails, norms) = (std::cell::Cell::new(0usize), std::cell::Cell::new(0usize));
    runner
        .run(&strategy, |(b, t, d, ops, seed, dt)| {
            cases.set(cases.get() + 1);
            let graph = build(&[b, t, d], dt, &ops);
            let is_narrow = dt == ElemType::F16;
            narrow.set(narrow.get() + usize::from(is_narrow));
            if let Ok(l) = lower(&graph, LoweringMode::StaticMean) {
                if fused_groups(&l) > 0 {
                    fused.set(fused.get() + 1);
                    narrow_fused.set(narrow_fused.get() + usize::from(is_narrow));
                }
                tails.set(tails.get() + usize::from(has_tail(&l)));
                norms.set(norms.get() + usize::from(kinds(&l).iter().any(|k| k.starts_with("norm"))));
            }
            check(&[b, t, d], dt, &ops, seed)
        })
        .unwrap();
    // Means with elementwise tails are drawn too (a scalar operand, a square, rsqrt or clamp
    // after a mean of squares).
    assert!(tails.get() >= 5, "only {} of {} programs have a mean with a tail", tails.get(), cases.get());
    // And square-means whose chain reads their input (`Group::Norm`).
    assert!(norms.get() >= 5, "only {} of {} programs have a norm group", norms.get(), cases.get());
    // Not a comparison of two unfused runs: most drawn programs have a fused group.
    assert!(2 * fused.get() >= cases.get(), "only {} of {} programs fused", fused.get(), cases.get());
    assert!(
        2 * narrow_fused.get() >= narrow.get(),
        "only {} of {} fp16 programs fused",
        narrow_fused.get(),
        narrow.get()
    );
}

/// The kinds of a program's groups, in order.
fn kinds(lowered: &delegate::LoweredProgram) -> Vec<&'static str> {
    groups(lowered)
        .iter()
        .map(|g| match g {
            Group::Node(_) => "node",
            Group::SquareMean { tail: None, .. } => "square_mean",
            Group::SquareMean { tail: Some(_), .. } => "square_mean+tail",
            Group::Chain { .. } => "chain",
            Group::Norm { tail: None, .. } => "norm",
            Group::Norm { tail: Some(_), .. } => "norm+tail",
            Group::QuantRoundTrip(_) => "quant_round_trip",
        })
        .collect()
}

/// `lowered` run on `x` with fusion on and off, and bound, at every configuration: the same
/// bits, in the input's type.
fn assert_fused_gives_unfused_bits(lowered: &delegate::LoweredProgram, x: &Tensor, what: &str) {
    for opts in configs() {
        let p = Program::new(lowered, &opts).unwrap();
        let mut q = Program::new(lowered, &opts).unwrap();
        q.set_fusion(false);
        let a = &p.run(std::slice::from_ref(x)).unwrap()[0];
        let b = &q.run(std::slice::from_ref(x)).unwrap()[0];
        assert_eq!(a.dtype(), x.dtype(), "{what}");
        assert!(same_bits(a, b), "{what} {opts:?}");
        let mut bound = p.bind(vec![x.clone()]).unwrap();
        bound.invoke().unwrap();
        assert!(same_bits(&bound.outputs()[0], b), "bound {what} {opts:?}");
    }
}

#[test]
fn rmsnorm_fuses_and_keeps_its_bits() {
    // x * rsqrt(mean(x * x) + eps) * w: in fp32 one group (square+mean, [add, rsqrt] as its
    // tail, [mul, mul] over the same rows block by block); in fp16 square+mean with [add,
    // rsqrt] as its tail, then [mul, mul] (its steps round after each node as the unfused nodes
    // do; a bf16 RMSNorm lowers with converts around an fp32 mean). With `then_mean`
    // the RMSNorm's output is an intermediate the mean reads: its block must not be the
    // norm's, which the chain reads while writing it. Shapes: one row per thread or fewer
    // (the mean splits rows at 2 threads: the groups run one after the other), rows shorter
    // and longer than a block, rows not a multiple of a block.
    for (t, d) in [(8, 64), (1, 4096), (3, 130), (64, 2048), (37, 3)] {
        for dt in [ElemType::F32, ElemType::F16] {
            for then_mean in [false, true] {
                let g = GraphBuilder::new();
                let x = g.input("x", TensorSpec::new(dt, &[1, t, d]));
                let ms = g.mean(g.square(x), &[-1], true);
                let inv = g.rsqrt(g.add(ms, g.constant(Tensor::from_f64(&[], dt, None, &[1e-6]))));
                let w = g.constant(tensor(&[d], dt, 3));
                let y = g.mul(g.mul(x, inv), w);
                let y = if then_mean { g.mean(y, &[-1], true) } else { y };
                let graph = g.finish(&[y]).unwrap();
                let lowered = lower(&graph, LoweringMode::StaticMean).unwrap();
                let want: &[&str] = match (dt, then_mean) {
                    (ElemType::F32, false) => &["norm+tail"],
                    (ElemType::F32, true) => &["norm+tail", "node"],
                    (_, false) => &["square_mean+tail", "chain"],
                    (_, true) => &["square_mean+tail", "chain", "node"],
                };
                assert_eq!(kinds(&lowered), want, "{dt:?} [{t}, {d}]");
                let what = format!("{dt:?} [{t}, {d}] then_mean {then_mean}");
                assert_fused_gives_unfused_bits(&lowered, &tensor(&[1, t, d], dt, 9), &what);
            }
        }
    }
}

#[test]
fn rmsnorm_products_in_any_operand_order_keep_their_bits() {
    // `x * r * w` runs as one kernel over rows (`simd::scale_rows`) whichever side of each
    // product its operands are on; a weight of the whole input's shape (not one row for all
    // rows) or a sum in place of a product stays a chain. Every form against the unfused nodes.
    for (t, d) in [(1, 128), (8, 64), (37, 3), (5, 1030)] {
        for form in 0..6 {
            let g = GraphBuilder::new();
            let x = g.input("x", TensorSpec::new(ElemType::F32, &[1, t, d]));
            let ms = g.mean(g.square(x), &[-1], true);
            let r = g.rsqrt(g.add(ms, g.constant(Tensor::from_f64(&[], ElemType::F32, None, &[1e-5]))));
            let w_row = g.constant(tensor(&[d], ElemType::F32, 5));
            let y = match form {
                0 => g.mul(g.mul(x, r), w_row),
                1 => g.mul(g.mul(r, x), w_row),
                2 => g.mul(w_row, g.mul(x, r)),
                3 => g.mul(w_row, g.mul(r, x)),
                4 => g.mul(g.mul(x, r), g.constant(tensor(&[1, t, d], ElemType::F32, 6))),
                _ => g.add(g.mul(x, r), w_row),
            };
            let graph = g.finish(&[y]).unwrap();
            let lowered = lower(&graph, LoweringMode::StaticMean).unwrap();
            assert_eq!(kinds(&lowered), ["norm+tail"], "form {form} [{t}, {d}]");
            let x = tensor(&[1, t, d], ElemType::F32, 11);
            assert_fused_gives_unfused_bits(&lowered, &x, &format!("form {form} [{t}, {d}]"));
        }
    }
}

#[test]
fn random_programs_do_fuse() {
    // The property above compares fused with unfused runs: on the shapes it draws, a chain of
    // two elementwise ops and a square feeding a mean must be fused groups, in fp32 and fp16.
    for dt in [ElemType::F32, ElemType::F16] {
        let ops = [OpDesc::Bin { op: 2, operand: Operand::X, swap: false }, OpDesc::Square];
        let chain = build(&[2, 3, 17], dt, &ops);
        assert!(fused_groups(&lower(&chain, LoweringMode::StaticMean).unwrap()) >= 1, "{dt:?}");
        let sq_mean = build(&[2, 3, 17], dt, &[OpDesc::MeanOfSelfProduct]);
        assert!(fused_groups(&lower(&sq_mean, LoweringMode::StaticMean).unwrap()) >= 1, "{dt:?}");
    }
}

#[test]
fn a_norm_on_values_just_dequantized_stays_on_the_calling_core() {
    // A qs8 RMSNorm [1, 48, 512] is q/dq around an fp32 RMSNorm: its `x` is dequantized
    // inline just before the norm group (192 KiB of traffic, under the pool's 256 KiB), so
    // splitting the group (296 KiB) would have the second core read its half from the first
    // core's cache (2x the 1-thread time in the sweep). The same RMSNorm on a graph input
    // splits at 2 threads.
    use delegate::runtime::pool::Pool;
    use std::sync::Arc;
    let (t, d) = (48, 512);
    for qs8 in [false, true] {
        let g = GraphBuilder::new();
        let x = g.input("x", TensorSpec::new(ElemType::F32, &[1, t, d]));
        let q = |v, s: f32| g.dequantize(g.quantize(v, s, 0), s, 0);
        let xin = if qs8 { q(x, 1.0 / 64.0) } else { x };
        let ms = g.mean(g.square(xin), &[-1], true);
        let inv = g.rsqrt(g.add(ms, g.constant(Tensor::from_f64(&[], ElemType::F32, None, &[1e-6]))));
        let y = g.mul(g.mul(xin, inv), g.constant(tensor(&[d], ElemType::F32, 3)));
        let y = if qs8 { q(y, 1.0 / 32.0) } else { y };
        let lowered = lower(&g.finish(&[y]).unwrap(), LoweringMode::StaticMean).unwrap();
        let want: &[&str] = if qs8 { &["quant_round_trip", "norm+tail", "quant_round_trip"] } else { &["norm+tail"] };
        assert_eq!(kinds(&lowered), want, "qs8 {qs8}");
        let pool = Arc::new(Pool::new(2, ThreadPolicy::CostModel).unwrap());
        let p =
            Program::new(&lowered, &RunOptions::default()).unwrap().reconfigure(SimdLevel::Auto, pool.clone()).unwrap();
        let mut b = p.bind(vec![tensor(&[1, t, d], ElemType::F32, 5)]).unwrap();
        let before = pool.dispatches();
        b.invoke().unwrap();
        let jobs = pool.dispatches() - before;
        if qs8 {
            assert_eq!(jobs, 0, "the qs8 RMSNorm split");
        } else {
            assert!(jobs >= 1, "the fp32 RMSNorm on its input ran on one core");
        }
    }
}

#[test]
fn a_quantize_round_trip_keeps_the_two_converts_bits() {
    // q/dq at a qs8 program's edges, fused into one pass (`Group::QuantRoundTrip`), against the
    // two converts: ties, saturation both ways, infinities, NaN and -0 in the input; scales and
    // zero points of both converts differ.
    let (t, d) = (5, 67);
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::new(ElemType::F32, &[1, t, d]));
    let a = g.dequantize(g.quantize(x, 1.0 / 64.0, 3), 1.0 / 64.0, 3);
    let y = g.mul(a, g.constant(tensor(&[d], ElemType::F32, 4)));
    let y = g.dequantize(g.quantize(y, 0.37, -7), 0.37, -7);
    let lowered = lower(&g.finish(&[y]).unwrap(), LoweringMode::StaticMean).unwrap();
    assert_eq!(kinds(&lowered), ["quant_round_trip", "node", "quant_round_trip"]);
    let mut v: Vec<f64> = values(t * d, 11).into_iter().map(|v| f64::from(v) * 3.0).collect();
    v[..10].copy_from_slice(&[
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        0.5 / 64.0,
        1.5 / 64.0,
        1e9,
        -1e9,
        2.0,
        -2.1,
    ]);
    let xv = Tensor::from_f64(&[1, t, d], ElemType::F32, None, &v);
    for opts in configs() {
        let p = Program::new(&lowered, &opts).unwrap();
        let mut q = Program::new(&lowered, &opts).unwrap();
        q.set_fusion(false);
        let (a, b) = (&p.run(std::slice::from_ref(&xv)).unwrap()[0], &q.run(std::slice::from_ref(&xv)).unwrap()[0]);
        assert!(same_bits(a, b), "{opts:?}");
    }
}
