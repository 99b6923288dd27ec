//! Lowered programs end to end: every pattern of the issue-3 lowering table (plus fp16, bf16,
//! dynamic dims and linear), lowered in all three modes, serialized, loaded back and run at 1
//! and 2 threads, under both policies, on every instruction set; compared with
//! `reference::eval` (used only here, as the oracle).
//!
//! Tolerances per output dtype (u = 2^-24): the programs chain at most a conv (<= 27 products),
//! a mean (<= 256 terms) and a few elementwise ops on values |x| <= 16, so a reordered f32
//! evaluation stays within a few hundred u of the magnitudes involved:
//! fp32 `|got - want| <= 512u * (1 + |want|) * scale` with `scale` the largest |value| of
//! the output; fp16 and bf16 add one output ulp (results round once more than the oracle's
//! f64 chain may); qs8 one quantum.

use delegate::program::Step;
use delegate::runtime::plan::SegmentPlan;
use delegate::runtime::{Program, RunOptions, RuntimeError, SimdLevel, ThreadPolicy};
use delegate::{lower_with, LowerOptions, LoweringMode};
use reference::data::{generate, DataOptions};
use reference::graph::{Conv2dParams, Graph, GraphBuilder, TensorSpec};
use reference::{ElemType, MemoryFormat, Tensor};

const U: f64 = 1.0 / (1u64 << 24) as f64;

fn weights(shape: &[usize], seed: u64) -> Tensor {
    generate(&TensorSpec::f32(shape), seed, &DataOptions::default())
}

fn conv(g: &GraphBuilder, x: reference::T, cin: usize, cout: usize, k: usize, seed: u64) -> reference::T {
    let w = g.constant(weights(&[cout, cin, k, k], seed));
    let b = g.constant(weights(&[cout], seed + 1));
    g.conv2d(x, w, Some(b), Conv2dParams { padding: [k / 2, k / 2], ..Default::default() })
}

/// The patterns, by name.
fn patterns() -> Vec<(&'static str, Graph, bool)> {
    let mut v: Vec<(&'static str, Graph, bool)> = Vec::new();
    let mut add = |name: &'static str, bf16: bool, f: &dyn Fn(&GraphBuilder) -> Vec<reference::T>| {
        let g = GraphBuilder::new();
        let outs = f(&g);
        v.push((name, g.finish(&outs).unwrap_or_else(|e| panic!("{name}: {e}")), bf16));
    };
    add("gap_mean_1x8x6x6", false, &|g| {
        let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]));
        vec![g.mean(x, &[2, 3], true)]
    });
    add("conv_then_gap", false, &|g| {
        let x = g.input("x", TensorSpec::f32(&[1, 3, 6, 6]));
        let y = conv(g, x, 3, 8, 3, 10);
        vec![g.mean(y, &[2, 3], true)]
    });
    add("conv_mean1_conv", false, &|g| {
        let x = g.input("x", TensorSpec::f32(&[1, 3, 6, 6]));
        let y = conv(g, x, 3, 8, 3, 20);
        let m = g.mean(y, &[1], true);
        vec![conv(g, m, 1, 4, 1, 30)]
    });
    add("conv_minus_channel_mean", false, &|g| {
        let x = g.input("x", TensorSpec::f32(&[1, 3, 6, 6]));
        let y = conv(g, x, 3, 8, 3, 40);
        vec![g.sub(y, g.mean(y, &[1], true))]
    });
    add("channels_last_gap", false, &|g| {
        let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]).channels_last());
        vec![g.mean(x, &[2, 3], true)]
    });
    add("rmsnorm_1x16x256", false, &|g| {
        let x = g.input("x", TensorSpec::f32(&[1, 16, 256]));
        let ms = g.mean(g.mul(x, x), &[-1], true);
        let r = g.rsqrt(g.add(ms, g.scalar(1e-6)));
        let w = g.constant(weights(&[256], 50));
        vec![g.mul(g.mul(x, r), w)]
    });
    add("rmsnorm_then_linear", false, &|g| {
        let x = g.input("x", TensorSpec::f32(&[1, 4, 64]));
        let ms = g.mean(g.square(x), &[-1], true);
        let y = g.mul(x, g.rsqrt(g.add(ms, g.scalar(1e-5))));
        let w = g.constant(weights(&[32, 64], 60));
        let b = g.constant(weights(&[32], 61));
        vec![g.linear(y, w, Some(b))]
    });
    add("qs8_mean_innermost", false, &|g| {
        let x = g.input("x", TensorSpec::f32(&[2, 6, 40]));
        let q = g.quantize(x, 0.02, 3);
        let d = g.dequantize(q, 0.02, 3);
        let m = g.mean(d, &[-1], true);
        vec![g.dequantize(g.quantize(m, 0.01, -2), 0.01, -2)]
    });
    add("qs8_mean_middle", false, &|g| {
        let x = g.input("x", TensorSpec::f32(&[2, 6, 40]));
        let d = g.dequantize(g.quantize(x, 0.02, 3), 0.02, 3);
        let m = g.mean(d, &[1], true);
        vec![g.dequantize(g.quantize(m, 0.01, -2), 0.01, -2)]
    });
    add("mean_all_dims", false, &|g| {
        let x = g.input("x", TensorSpec::f32(&[2, 3, 4, 5]));
        vec![g.mean(x, &[], false)]
    });
    add("mean_dim3_nokeep", false, &|g| {
        let x = g.input("x", TensorSpec::f32(&[2, 3, 4, 5]));
        vec![g.mean(x, &[3], false)]
    });
    add("mean_dtype_arg", false, &|g| {
        let x = g.input("x", TensorSpec::f32(&[2, 3, 4, 5]));
        vec![g.mean_dtype(x, &[1, 3], true, ElemType::F32)]
    });
    add("mean_rank6_mixed_axes", false, &|g| {
        let x = g.input("x", TensorSpec::f32(&[2, 3, 2, 4, 3, 5]));
        vec![g.mean(x, &[0, 2, -1], false)]
    });
    add("fp16_mean_and_add", false, &|g| {
        let x = g.input("x", TensorSpec::f16(&[2, 8, 64]));
        let m = g.mean(x, &[-1], true);
        vec![g.sub(x, m)]
    });
    add("bf16_mean_enabled", true, &|g| {
        let x = g.input("x", TensorSpec::bf16(&[1, 8, 6, 6]));
        vec![g.mean(x, &[2, 3], true)]
    });
    add("dynamic_tokens_rmsnorm", false, &|g| {
        let x = g.input("x", TensorSpec::f32(&[1, 16, 128]).dynamic(1));
        let ms = g.mean(g.square(x), &[-1], true);
        vec![g.mul(x, g.rsqrt(g.add(ms, g.scalar(1e-6))))]
    });
    add("permute_reshape_clamp", false, &|g| {
        let x = g.input("x", TensorSpec::f32(&[2, 3, 4, 5]));
        let p = g.permute(x, &[0, 2, 3, 1]);
        let r = g.reshape(p, &[2, -1]);
        vec![g.clamp(r, Some(-0.5), Some(0.5)), g.relu(g.div(x, g.scalar(3.0)))]
    });
    v
}

fn configs() -> Vec<RunOptions> {
    let mut v = Vec::new();
    let simds: Vec<SimdLevel> = [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512]
        .into_iter()
        .filter(|&s| delegate::runtime::resolve_simd(s).is_ok())
        .collect();
    for simd in simds {
        v.push(RunOptions { threads: 1, policy: ThreadPolicy::CostModel, simd, ..RunOptions::default() });
        v.push(RunOptions { threads: 2, policy: ThreadPolicy::CostModel, simd, ..RunOptions::default() });
        v.push(RunOptions { threads: 2, policy: ThreadPolicy::PerOutputTasks, simd, ..RunOptions::default() });
    }
    v
}

fn ulp(dtype: ElemType, v: f64) -> f64 {
    let bits = match dtype {
        ElemType::F16 => 10,
        ElemType::Bf16 => 7,
        _ => 23,
    };
    let a = v.abs().max(if dtype == ElemType::F16 { 6.1e-5 } else { f32::MIN_POSITIVE as f64 });
    2f64.powi(a.log2().floor() as i32 - bits)
}

fn compare(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    assert_eq!(got.format, want.format, "{what}: format");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    assert_eq!(got.quant, want.quant, "{what}: quant");
    let (g, w) = (got.values_f64(), want.values_f64());
    let scale = w.iter().fold(1f64, |a, v| a.max(v.abs()));
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        if a.is_nan() && b.is_nan() {
            continue;
        }
        let tol = match got.dtype() {
            ElemType::Qs8 => got.quant.map_or(0.0, |q| q.scale as f64) * 1.0001,
            ElemType::F32 => 512.0 * U * scale,
            d => 512.0 * U * scale + ulp(d, *b),
        };
        assert!((a - b).abs() <= tol, "{what}: element {i}: got {a}, want {b}, tol {tol:e}");
    }
}

fn input_for(g: &Graph, k: usize, shape: Option<&[usize]>, seed: u64) -> Tensor {
    let spec = &g.nodes[g.inputs[k]].spec;
    let spec = match shape {
        Some(s) => spec.concretize(s),
        None => spec.concretize(&spec.max_shape()),
    };
    generate(&spec, seed, &DataOptions::default())
}

/// Every configuration twice: a program of its own (`Program::new`, its own pool) and the
/// same lowering loaded once per mode and reconfigured onto pools shared by every program
/// (`Program::with_pool`, `Program::reconfigure`), as the harness runs them.
#[test]
fn every_pattern_in_every_mode_matches_the_reference() {
    use delegate::runtime::pool::Pool;
    use std::sync::Arc;
    let configs = configs();
    let pools: Vec<Arc<Pool>> =
        configs.iter().map(|o| Arc::new(Pool::new(o.threads, o.policy).expect("pool"))).collect();
    for (name, graph, bf16) in patterns() {
        let inputs: Vec<Tensor> = (0..graph.inputs.len()).map(|k| input_for(&graph, k, None, 7 + k as u64)).collect();
        let want = reference::eval::run(&graph, &inputs).unwrap_or_else(|e| panic!("{name}: oracle: {e}"));
        for mode in LoweringMode::ALL {
            let lowered = lower_with(&graph, &LowerOptions { mode, enable_bf16: bf16 })
                .unwrap_or_else(|e| panic!("{name} {mode}: lowering: {e}"));
            let base = Program::with_pool(&lowered, configs[0].simd, pools[0].clone())
                .unwrap_or_else(|e| panic!("{name} {mode}: load: {e}"));
            for (opts, pool) in configs.iter().zip(&pools) {
                let what = format!("{name} {mode} {opts:?}");
                let own = Program::new(&lowered, opts).unwrap_or_else(|e| panic!("{what}: load: {e}"));
                let shared = base.reconfigure(opts.simd, pool.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(shared.options(), *opts, "{what}");
                assert_eq!(shared.payloads(), own.payloads(), "{what}");
                // The own program runs twice: the second run reuses its blocks and its pool.
                for (p, how) in [(&own, "own pool"), (&shared, "reconfigured, shared pool"), (&own, "own pool, again")]
                {
                    let got = p.run(&inputs).unwrap_or_else(|e| panic!("{what} {how}: run: {e}"));
                    assert_eq!(got.len(), want.len(), "{what} {how}");
                    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                        compare(g, w, &format!("{what} {how} output {k}"));
                    }
                }
            }
        }
    }
}

#[test]
fn print_summaries() {
    if std::env::var("RT_PRINT").is_err() {
        return;
    }
    for (name, graph, bf16) in patterns() {
        for mode in LoweringMode::ALL {
            let l = lower_with(&graph, &LowerOptions { mode, enable_bf16: bf16 }).unwrap();
            let s = &l.summary;
            let outside: Vec<&str> = s.outside.iter().map(|o| o.op.as_str()).collect();
            println!("{name:28} {mode:12} delegates {} outside {outside:?} nodes {:?}", s.delegates, s.node_counts);
        }
    }
}

#[test]
fn payloads_are_the_serializer_bytes_and_load_back() {
    for (name, graph, bf16) in patterns() {
        for mode in LoweringMode::ALL {
            let lowered = lower_with(&graph, &LowerOptions { mode, enable_bf16: bf16 }).unwrap();
            let p = Program::new(&lowered, &RunOptions::default()).unwrap();
            let segs: Vec<_> = lowered
                .steps
                .iter()
                .filter_map(|s| match s {
                    Step::Delegate(d) => Some(d),
                    _ => None,
                })
                .collect();
            assert_eq!(p.payloads().len(), segs.len(), "{name} {mode}");
            for (bytes, seg) in p.payloads().iter().zip(segs) {
                assert_eq!(bytes, &delegate::serialize::write(&seg.graph), "{name} {mode}");
                let back = delegate::serialize::load(bytes, &Default::default()).unwrap();
                assert_eq!(back.nodes, seg.graph.nodes, "{name} {mode}: the loader returns the nodes written");
            }
        }
    }
}

#[test]
fn dynamic_dims_resize_within_bounds() {
    let (_, graph, _) = patterns().into_iter().find(|p| p.0 == "dynamic_tokens_rmsnorm").unwrap();
    for mode in LoweringMode::ALL {
        let lowered = lower_with(&graph, &LowerOptions::new(mode)).unwrap();
        for opts in configs() {
            let p = Program::new(&lowered, &opts).unwrap();
            for tokens in [16, 1, 5, 16, 9] {
                let x = input_for(&graph, 0, Some(&[1, tokens, 128]), tokens as u64);
                let want = reference::eval::run(&graph, std::slice::from_ref(&x)).unwrap();
                let got = p.run(std::slice::from_ref(&x)).unwrap();
                compare(&got[0], &want[0], &format!("{mode} {opts:?} tokens {tokens}"));
            }
            let too_big = input_for(&graph, 0, Some(&[1, 16, 128]), 1);
            let mut big = too_big.clone();
            big.shape = vec![1, 17, 128];
            big.data = reference::TensorData::F32(vec![0.0; 17 * 128]);
            assert!(matches!(p.run(&[big]), Err(RuntimeError::BadInput { index: 0, .. })), "{mode}: above the bound");
        }
    }
}

/// Bit-identical tensors (shape, format and every element's bits).
fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    use reference::TensorData as D;
    a.shape == b.shape
        && a.format == b.format
        && match (&a.data, &b.data) {
            (D::F32(x), D::F32(y)) => x.iter().map(|v| v.to_bits()).eq(y.iter().map(|v| v.to_bits())),
            (D::F16(x), D::F16(y)) => x.iter().map(|v| v.to_bits()).eq(y.iter().map(|v| v.to_bits())),
            (D::Bf16(x), D::Bf16(y)) => x.iter().map(|v| v.to_bits()).eq(y.iter().map(|v| v.to_bits())),
            (D::Qs8(x), D::Qs8(y)) => x == y,
            _ => false,
        }
}

#[test]
fn bound_invokes_give_the_run_bits_on_every_pattern() {
    // `bind` + `invoke` (the direct path where the program is one segment, else the step loop)
    // against `run`, after rewriting the inputs in place and, for dynamic inputs, after
    // `set_input` with other dims (which leaves the direct path until the next run resolves it).
    let mut direct = 0;
    for (name, graph, bf16) in patterns() {
        for mode in LoweringMode::ALL {
            let lowered = lower_with(&graph, &LowerOptions { mode, enable_bf16: bf16 }).unwrap();
            let one_segment = matches!(lowered.steps.as_slice(), [Step::Delegate(_)]);
            for opts in [RunOptions::default(), RunOptions::threads(2)] {
                let p = Program::new(&lowered, &opts).unwrap();
                let what = format!("{name} {mode} {opts:?}");
                let inputs: Vec<Tensor> =
                    (0..graph.inputs.len()).map(|k| input_for(&graph, k, None, 7 + k as u64)).collect();
                let mut b = p.bind(inputs.clone()).unwrap();
                assert!(!b.runs_direct() || one_segment, "{what}: direct path on a program of several steps");
                direct += usize::from(b.runs_direct());
                for round in 0..3u64 {
                    let fresh: Vec<Tensor> =
                        (0..graph.inputs.len()).map(|k| input_for(&graph, k, None, 100 * round + k as u64)).collect();
                    for (k, t) in fresh.iter().enumerate() {
                        *b.input_data_mut(k).unwrap() = t.data.clone();
                    }
                    b.invoke().unwrap();
                    let want = p.run(&fresh).unwrap();
                    for (k, (got, want)) in b.outputs().iter().zip(&want).enumerate() {
                        assert!(same_bits(got, want), "{what} round {round}: output {k}");
                    }
                }
                if graph.nodes[graph.inputs[0]].spec.is_dynamic() {
                    let was = b.runs_direct();
                    for tokens in [5, 16, 1] {
                        let x = input_for(&graph, 0, Some(&[1, tokens, 128]), tokens as u64);
                        b.set_input(0, x.clone()).unwrap();
                        assert!(!b.runs_direct(), "{what}: new dims leave the direct path");
                        b.invoke().unwrap();
                        assert_eq!(b.runs_direct(), was, "{what}: the run after set_input resolves it again");
                        assert!(
                            same_bits(&b.outputs()[0], &p.run(std::slice::from_ref(&x)).unwrap()[0]),
                            "{what} {tokens}"
                        );
                        b.invoke().unwrap();
                        assert!(same_bits(&b.outputs()[0], &p.run(&[x]).unwrap()[0]), "{what} {tokens} again");
                    }
                }
            }
        }
    }
    // Most one-segment programs take it (a channels_last output a segment hands over in
    // NCHW order, an output that is an input, and portable steps do not).
    assert!(direct >= 60, "only {direct} bound programs run direct");
}

#[test]
fn bad_inputs_get_typed_errors() {
    let (_, graph, _) = patterns().into_iter().find(|p| p.0 == "channels_last_gap").unwrap();
    let lowered = lower_with(&graph, &LowerOptions::new(LoweringMode::StaticMean)).unwrap();
    let p = Program::new(&lowered, &RunOptions::threads(2)).unwrap();
    let good = input_for(&graph, 0, None, 3);
    assert!(p.run(std::slice::from_ref(&good)).is_ok());
    assert!(matches!(p.run(&[]), Err(RuntimeError::InputCount { expected: 1, found: 0 })));
    assert!(matches!(p.run(&[good.clone(), good.clone()]), Err(RuntimeError::InputCount { .. })));
    let contiguous = good.to_contiguous();
    assert!(matches!(p.run(&[contiguous]), Err(RuntimeError::InputFormat { index: 0, .. })));
    let mut half = good.clone();
    half.data = reference::TensorData::F16(vec![half::f16::ZERO; good.numel()]);
    assert!(matches!(p.run(&[half]), Err(RuntimeError::InputDtype { index: 0, .. })));
    let mut shape = good.clone();
    shape.shape = vec![1, 8, 6, 5];
    assert!(matches!(p.run(&[shape]), Err(RuntimeError::BadInput { index: 0, .. })));
    let mut short = good.clone();
    short.data = reference::TensorData::F32(vec![0.0; 3]);
    assert!(matches!(p.run(&[short]), Err(RuntimeError::BadInput { index: 0, .. })));
    // An instruction set the CPU lacks is refused at load time, not at run time.
    if delegate::runtime::simd::Isa::avx512().is_none() {
        let opts = RunOptions { simd: SimdLevel::Avx512, ..Default::default() };
        assert!(matches!(Program::new(&lowered, &opts), Err(RuntimeError::SimdUnavailable { .. })));
    }
}

#[test]
fn intermediate_buffers_are_reused_by_liveness() {
    // A chain of elementwise ops: at most two intermediates are live at once.
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[4, 256]));
    let mut y = g.square(x);
    for _ in 0..6 {
        y = g.add(g.rsqrt(g.add(y, g.scalar(1.0))), x);
    }
    let graph = g.finish(&[y]).unwrap();
    let lowered = lower_with(&graph, &LowerOptions::new(LoweringMode::StaticMean)).unwrap();
    let Step::Delegate(seg) = &lowered.steps[0] else { panic!("expected one delegate") };
    let loaded = delegate::serialize::load(&delegate::serialize::write(&seg.graph), &Default::default()).unwrap();
    let plan = SegmentPlan::compile(0, &loaded, seg.inputs.len(), seg.outputs.len()).unwrap();
    let intermediates = plan.nodes.len() - 1;
    assert!(intermediates >= 10, "{intermediates}");
    assert!(plan.block_lines.len() <= 3, "{} blocks for {intermediates} intermediates", plan.block_lines.len());
    let x = input_for(&graph, 0, None, 1);
    let p = Program::new(&lowered, &RunOptions::default()).unwrap();
    compare(&p.run(std::slice::from_ref(&x)).unwrap()[0], &reference::eval::run(&graph, &[x]).unwrap()[0], "chain");
}

#[test]
fn large_constant_linear_weights_are_packed_once_and_give_the_in_order_sums() {
    // One linear of `n` outputs: its plan's packed weights (their length), and the program.
    let (m, k) = (3, 300);
    let build = |n: usize| {
        let g = GraphBuilder::new();
        let x = g.input("x", TensorSpec::f32(&[m, k]));
        let (w, b) = (weights(&[n, k], 11), weights(&[n], 12));
        let y = g.linear(x, g.constant(w.clone()), Some(g.constant(b.clone())));
        let graph = g.finish(&[y]).unwrap();
        let lowered = lower_with(&graph, &LowerOptions::new(LoweringMode::StaticMean)).unwrap();
        let Step::Delegate(seg) = &lowered.steps[0] else { panic!("expected one delegate") };
        let loaded = delegate::serialize::load(&delegate::serialize::write(&seg.graph), &Default::default()).unwrap();
        let plan = SegmentPlan::compile(0, &loaded, seg.inputs.len(), seg.outputs.len()).unwrap();
        let packed: Vec<Option<usize>> = plan.nodes.iter().map(|nd| nd.packed.as_ref().map(Vec::len)).collect();
        (graph, lowered, w, b, packed)
    };
    // 4 x 300 weights are copied per call; 70 x 300 (past 16 K) are packed into 5 panels of 16.
    assert_eq!(build(4).4, [None]);
    let n = 70;
    let (graph, lowered, w, b, packed) = build(n);
    assert_eq!(packed, [Some(5 * 16 * k)]);
    let xt = input_for(&graph, 0, None, 3);
    let (xv, wv, bv) = (xt.values_f64(), w.values_f64(), b.values_f64());
    for threads in [1, 2] {
        for policy in [ThreadPolicy::CostModel, ThreadPolicy::PerOutputTasks] {
            let p = Program::new(&lowered, &RunOptions { threads, policy, ..Default::default() }).unwrap();
            let got = p.run(std::slice::from_ref(&xt)).unwrap()[0].values_f64();
            for r in 0..m {
                for c in 0..n {
                    // The packed path's order, in f32: the bias, then one fused multiply-add
                    // per product in k order (the dot products it replaced sum in 16 lanes;
                    // unfused, other bits).
                    let mut s = bv[c] as f32;
                    for j in 0..k {
                        s = (xv[r * k + j] as f32).mul_add(wv[c * k + j] as f32, s);
                    }
                    assert_eq!((got[r * n + c] as f32).to_bits(), s.to_bits(), "[{r}, {c}] t{threads} {policy:?}");
                }
            }
        }
    }
}

#[test]
fn force_scalar_env_is_honoured_by_resolution() {
    // The variable is read at load time; other tests may run concurrently, so only check the
    // function that reads it when it is set for this process.
    if std::env::var("DELEGATE_FORCE_SCALAR").is_ok_and(|v| v == "1") {
        assert_eq!(delegate::runtime::resolve_simd(SimdLevel::Auto).unwrap().name(), "scalar");
    } else {
        assert_ne!(delegate::runtime::resolve_simd(SimdLevel::Scalar).unwrap().name(), "avx2");
    }
    let _ = MemoryFormat::Contiguous;
}

#[test]
fn portable_kernels_match_the_reference_for_every_op() {
    use delegate::runtime::kernels::portable;
    let cases: Vec<(&str, Graph)> = {
        let mut v = Vec::new();
        let mut add = |name: &'static str, f: &dyn Fn(&GraphBuilder) -> reference::T| {
            let g = GraphBuilder::new();
            let o = f(&g);
            v.push((name, g.finish(&[o]).unwrap_or_else(|e| panic!("{name}: {e}"))));
        };
        add("mean", &|g| g.mean(g.input("x", TensorSpec::f32(&[2, 3, 4, 5])), &[1, -1], false));
        add("mean_dtype_f16", &|g| g.mean_dtype(g.input("x", TensorSpec::f32(&[2, 3, 4])), &[0], true, ElemType::F16));
        add("mean_bf16_cl", &|g| g.mean(g.input("x", TensorSpec::bf16(&[1, 4, 3, 5]).channels_last()), &[1], true));
        add("conv_grouped", &|g| {
            let x = g.input("x", TensorSpec::f32(&[1, 4, 5, 6]));
            let w = g.constant(weights(&[6, 2, 3, 2], 70));
            g.conv2d(x, w, None, Conv2dParams { stride: [2, 1], padding: [1, 0], dilation: [1, 2], groups: 2 })
        });
        add("binary_broadcast", &|g| {
            g.div(g.input("a", TensorSpec::f32(&[2, 1, 5])), g.input("b", TensorSpec::f32(&[3, 1])))
        });
        add("square", &|g| g.square(g.input("x", TensorSpec::f16(&[3, 7]))));
        add("rsqrt", &|g| g.rsqrt(g.input("x", TensorSpec::f32(&[3, 7]))));
        add("clamp", &|g| g.hardtanh(g.input("x", TensorSpec::f32(&[3, 7])), -0.25, 0.5));
        add("linear", &|g| {
            let x = g.input("x", TensorSpec::f32(&[2, 3, 8]));
            g.linear(x, g.constant(weights(&[5, 8], 71)), Some(g.constant(weights(&[5], 72))))
        });
        add("quantize", &|g| g.quantize(g.input("x", TensorSpec::f32(&[4, 9])), 0.03, -7));
        add("dequantize", &|g| {
            let q = reference::QuantParams::new(0.05, 4);
            g.dequantize(g.input("x", TensorSpec::qs8(&[4, 9], q)), 0.05, 4)
        });
        add("reshape", &|g| g.reshape(g.input("x", TensorSpec::f32(&[2, 3, 4])), &[4, -1]));
        add("permute", &|g| g.permute(g.input("x", TensorSpec::f32(&[2, 3, 4])), &[2, 0, -2]));
        // `_to_copy(dtype=bf16, memory_format=channels_last)` as one node.
        let xs = TensorSpec::f32(&[1, 3, 4, 5]);
        let op = reference::Op::ToCopy { dtype: Some(ElemType::Bf16), format: Some(MemoryFormat::ChannelsLast) };
        let spec = reference::graph::infer(&op, &[&xs]).unwrap();
        let nodes = vec![
            reference::graph::Node { op: reference::Op::Input { name: "x".into() }, inputs: vec![], spec: xs },
            reference::graph::Node { op, inputs: vec![0], spec },
        ];
        v.push(("to_copy_dtype_format", Graph { nodes, inputs: vec![0], outputs: vec![1] }));
        v
    };
    for (name, graph) in cases {
        graph.validate().unwrap();
        let inputs: Vec<Tensor> = (0..graph.inputs.len()).map(|k| input_for(&graph, k, None, 90 + k as u64)).collect();
        let want = reference::eval::run(&graph, &inputs).unwrap();
        let node = &graph.nodes[graph.outputs[0]];
        let ins: Vec<&Tensor> = node
            .inputs
            .iter()
            .map(|&i| match &graph.nodes[i].op {
                reference::Op::Constant { tensor } => tensor,
                _ => &inputs[graph.inputs.iter().position(|&k| k == i).unwrap()],
            })
            .collect();
        let got = portable::run(&node.op, &ins, &node.spec).unwrap_or_else(|e| panic!("{name}: {e}"));
        compare(&got, &want[0], name);
    }
}

/// Damaged segments (what a buggy lowering or a fuzzed payload could hand over) are refused or
/// run with typed errors; nothing panics.
#[test]
fn damaged_segments_never_panic() {
    use delegate::xnn::{XNodeKind, XnnGraph};
    type Damage = fn(&mut XnnGraph);
    let damages: [(&str, Damage); 12] = [
        ("dim zero", |g| g.values.iter_mut().for_each(|v| v.dims.iter_mut().take(1).for_each(|d| *d = 0))),
        ("dims huge", |g| g.values.iter_mut().for_each(|v| v.dims.iter_mut().take(1).for_each(|d| *d = u32::MAX))),
        ("dims shrunk", |g| g.values.iter_mut().for_each(|v| v.dims.iter_mut().for_each(|d| *d = (*d / 2).max(1)))),
        ("rank 7", |g| g.values.iter_mut().for_each(|v| v.dims.resize(7, 1))),
        ("external ids swapped", |g| g.values.iter_mut().for_each(|v| v.external_id = v.external_id.wrapping_add(1))),
        ("axes out of range", |g| {
            g.nodes.iter_mut().for_each(|n| {
                if let XNodeKind::StaticMean { reduction_axes, .. } = &mut n.kind {
                    *reduction_axes = vec![9];
                }
            })
        }),
        ("perm repeated", |g| {
            g.nodes.iter_mut().for_each(|n| {
                if let XNodeKind::StaticTranspose { perm, .. } = &mut n.kind {
                    perm.iter_mut().for_each(|p| *p = 0);
                }
            })
        }),
        ("conv huge kernel", |g| {
            g.nodes.iter_mut().for_each(|n| {
                if let XNodeKind::Conv2d(c) | XNodeKind::DepthwiseConv2d(c) = &mut n.kind {
                    c.kernel_height = u32::MAX;
                    c.padding_top = u32::MAX;
                    c.groups = u32::MAX;
                }
            })
        }),
        ("nodes reversed", |g| g.nodes.reverse()),
        ("output never written", |g| {
            g.nodes.pop();
        }),
        ("datatype changed", |g| g.values.iter_mut().for_each(|v| v.datatype = delegate::xnn::XnnDatatype::Fp16)),
        ("quant dropped", |g| g.values.iter_mut().for_each(|v| v.quant = None)),
    ];
    for (name, graph, bf16) in patterns() {
        let inputs: Vec<Tensor> = (0..graph.inputs.len()).map(|k| input_for(&graph, k, None, 3)).collect();
        for mode in LoweringMode::ALL {
            let lowered = lower_with(&graph, &LowerOptions { mode, enable_bf16: bf16 }).unwrap();
            for (dname, damage) in &damages {
                let mut l = lowered.clone();
                for s in l.steps.iter_mut() {
                    if let Step::Delegate(d) = s {
                        damage(&mut d.graph);
                    }
                }
                let r = std::panic::catch_unwind(|| {
                    Program::new(&l, &RunOptions::threads(2)).and_then(|p| p.run(&inputs)).map(|_| ())
                });
                assert!(r.is_ok(), "{name} {mode} {dname}: panicked");
            }
        }
    }
}

#[test]
fn programs_can_be_shared_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Program>();
    let (_, graph, _) = patterns().into_iter().find(|p| p.0 == "rmsnorm_1x16x256").unwrap();
    let lowered = lower_with(&graph, &LowerOptions::new(LoweringMode::StaticMean)).unwrap();
    let p = Program::new(&lowered, &RunOptions::threads(2)).unwrap();
    let x = input_for(&graph, 0, None, 5);
    let want = reference::eval::run(&graph, std::slice::from_ref(&x)).unwrap();
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                for _ in 0..5 {
                    compare(&p.run(std::slice::from_ref(&x)).unwrap()[0], &want[0], "concurrent runs");
                }
            });
        }
    });
}

/// A qs8 transpose or reshape whose output quantization differs from its input's would be a
/// requantization XNNPACK refuses (`xnn_subgraph_check_quantization_parameter_matches`): the
/// runtime refuses it at load with the node named, instead of moving the bytes and reading
/// them at the wrong scale.
#[test]
fn qs8_copy_with_mismatched_quantization_is_refused() {
    use delegate::xnn::{QuantParams, XNodeKind};
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[2, 3, 4]));
    let a = g.dequantize(g.quantize(x, 0.1, -2), 0.1, -2);
    let p = g.permute(a, &[2, 0, 1]);
    let y = g.dequantize(g.quantize(p, 0.1, -2), 0.1, -2);
    let graph = g.finish(&[y]).unwrap();
    let mut lowered = lower_with(&graph, &LowerOptions::default()).unwrap();
    Program::new(&lowered, &RunOptions::default()).expect("matching quantization loads");
    let mut damaged = 0;
    for s in lowered.steps.iter_mut() {
        if let Step::Delegate(d) = s {
            let outs: Vec<u32> = d
                .graph
                .nodes
                .iter()
                .filter_map(|n| match n.kind {
                    XNodeKind::StaticTranspose { output_id, .. } => Some(output_id),
                    _ => None,
                })
                .collect();
            for v in d.graph.values.iter_mut().filter(|v| outs.contains(&v.id_out)) {
                if let Some(QuantParams::PerTensor { scale, .. }) = &mut v.quant {
                    *scale = 0.05;
                    damaged += 1;
                }
            }
        }
    }
    assert_eq!(damaged, 1, "the lowering should emit one qs8 transpose");
    match Program::new(&lowered, &RunOptions::default()) {
        Err(RuntimeError::InvalidGraph { what, .. }) => {
            assert!(what.contains("Transpose") && what.contains("quantization"), "{what}")
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a requantizing qs8 transpose was accepted"),
    }
}

/// A pool that runs an N-thread program's tasks on two threads (`Pool::with_os_threads`, the
/// harness's pools above two threads) gives that program's bits: the splits, partial results
/// and combination order are the N-thread ones, only the interleaving differs.
#[test]
fn n_thread_splits_on_fewer_os_threads_give_the_n_thread_bits() {
    use delegate::runtime::pool::Pool;
    use std::sync::Arc;
    let simd = SimdLevel::Auto;
    // A 1 MiB mean with fewer outputs than threads: the cost model splits each output's rows
    // into one piece per thread, so a pool that split for its two threads gives other bits.
    let big = GraphBuilder::new();
    let x = big.input("x", TensorSpec::f32(&[2, 1 << 17]));
    let m = big.mean(x, &[1], false);
    let big = big.finish(&[m]).unwrap();
    for (name, graph, bf16) in patterns().into_iter().chain([("mean_2x131072", big, false)]) {
        let inputs: Vec<Tensor> = (0..graph.inputs.len()).map(|k| input_for(&graph, k, None, 11 + k as u64)).collect();
        for mode in LoweringMode::ALL {
            let lowered = lower_with(&graph, &LowerOptions { mode, enable_bf16: bf16 }).unwrap();
            // (The fuzz loop runs 2 to 8 threads' splits on 2 OS threads, or on its own.)
            for (threads, os) in [(2, 1), (3, 1), (3, 2), (5, 2), (8, 1), (8, 2)] {
                for policy in [ThreadPolicy::CostModel, ThreadPolicy::PerOutputTasks] {
                    let what = format!("{name} {mode} {threads} threads on {os} {policy:?}");
                    let real = Arc::new(Pool::new(threads, policy).unwrap());
                    let few = Pool::with_os_threads(threads, policy, std::time::Duration::ZERO, os).unwrap();
                    assert_eq!((few.threads(), few.os_threads(), real.os_threads()), (threads, os, threads), "{what}");
                    let want = Program::with_pool(&lowered, simd, real).unwrap().run(&inputs).unwrap();
                    let got = Program::with_pool(&lowered, simd, Arc::new(few)).unwrap().run(&inputs).unwrap();
                    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(g.shape, w.shape, "{what} output {k}");
                        let bits = |t: &Tensor| -> Vec<u64> {
                            t.values_f64().iter().map(|v| if v.is_nan() { 1 } else { v.to_bits() }).collect()
                        };
                        assert_eq!(bits(g), bits(w), "{what} output {k}");
                    }
                }
            }
        }
    }
}
