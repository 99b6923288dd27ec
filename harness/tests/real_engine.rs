//! Real XNNPACK through the harness's engine interface: every node type our lowering emits,
//! each against the reference at 1 and 2 threads under the outputs oracle's derived
//! tolerance, and every corpus seed case through all three engines (reference, our runtime,
//! XNNPACK). Without the library (`scripts/fetch-xnnpack.sh`) these tests skip with one line,
//! unless `REQUIRE_XNNPACK=1`.

use delegate::program::Step;
use delegate::LoweringMode;
use harness::case::Case;
use harness::engine::{self, Config, Engine, EngineKind, Instance, Simd, Subject};
use harness::fuzz::corpus_files;
use harness::oracle::outputs::compare::{compare_with, Tolerance};
use harness::oracle::{check, CheckOptions, OracleKind, Verdict};
use reference::graph::{Conv2dParams, Graph, GraphBuilder, TensorSpec};
use reference::{ElemType, MemoryFormat, Tensor};
use std::path::Path;

/// A graph for one node type: built twice, as is and as its magnitude twin (subtraction as
/// addition; the inputs are then taken in absolute value), with the tolerance's chain length
/// `L` and op count `k`.
struct NodeCase {
    node: &'static str,
    mode: LoweringMode,
    build: fn(twin: bool) -> Graph,
    acc_len: usize,
    ops: usize,
    compute: ElemType,
    /// qs8: the output step.
    step: Option<f32>,
}

fn w(shape: &[usize], k: usize) -> Tensor {
    // Fixed, mixed-sign, exactly representable weights.
    let n: usize = shape.iter().product();
    Tensor::f32(shape, (0..n).map(|i| ((i * 7 + k) % 11) as f32 * 0.125 - 0.625).collect())
}

fn abs(t: Tensor) -> Tensor {
    let v: Vec<f64> = t.values_f64().iter().map(|x| x.abs()).collect();
    Tensor::from_f64(&t.shape, t.dtype(), t.quant, &v).to_format(t.format)
}

fn weight(g: &GraphBuilder, shape: &[usize], k: usize, twin: bool) -> reference::graph::T {
    g.constant(if twin { abs(w(shape, k)) } else { w(shape, k) })
}

fn cases() -> Vec<NodeCase> {
    let f32 = ElemType::F32;
    vec![
        NodeCase {
            node: "XNNStaticMean",
            mode: LoweringMode::StaticMean,
            build: |_| {
                let g = GraphBuilder::new();
                let x = g.input("x", TensorSpec::f32(&[3, 5, 16]));
                let y = g.mean(x, &[0, 2], false);
                g.finish(&[y]).unwrap()
            },
            acc_len: 48,
            ops: 1,
            compute: f32,
            step: None,
        },
        NodeCase {
            node: "XNNGlobalAvgPooling2d",
            mode: LoweringMode::StaticMean,
            build: |_| {
                let g = GraphBuilder::new();
                let x = g.input("x", TensorSpec::f32(&[2, 6, 5, 7]).with_format(MemoryFormat::ChannelsLast));
                let y = g.mean(x, &[2, 3], true);
                g.finish(&[y]).unwrap()
            },
            acc_len: 35,
            ops: 1,
            compute: f32,
            step: None,
        },
        NodeCase {
            node: "XNNStaticTranspose",
            mode: LoweringMode::StaticMean,
            build: |_| {
                let g = GraphBuilder::new();
                let x = g.input("x", TensorSpec::f32(&[2, 3, 4, 5]));
                let y = g.permute(x, &[0, 2, 3, 1]);
                let z = g.add(y, y);
                g.finish(&[z]).unwrap()
            },
            acc_len: 0,
            ops: 1,
            compute: f32,
            step: None,
        },
        NodeCase {
            node: "XNNStaticReshape",
            mode: LoweringMode::StaticMean,
            build: |_| {
                let g = GraphBuilder::new();
                let x = g.input("x", TensorSpec::f32(&[2, 12]));
                let y = g.reshape(g.square(x), &[2, 3, 4]);
                let z = g.mean(y, &[1], true);
                g.finish(&[z]).unwrap()
            },
            acc_len: 3,
            ops: 2,
            compute: f32,
            step: None,
        },
        NodeCase {
            node: "XNNConv2d",
            mode: LoweringMode::StaticMean,
            build: |twin| {
                let g = GraphBuilder::new();
                let x = g.input("x", TensorSpec::f32(&[1, 3, 6, 5]));
                let p = Conv2dParams { padding: [1, 1], ..Default::default() };
                let y = g.conv2d(x, weight(&g, &[4, 3, 3, 3], 1, twin), Some(weight(&g, &[4], 2, twin)), p);
                g.finish(&[y]).unwrap()
            },
            acc_len: 28,
            ops: 1,
            compute: f32,
            step: None,
        },
        NodeCase {
            node: "XNNDepthwiseConv2d",
            mode: LoweringMode::StaticMean,
            build: |twin| {
                let g = GraphBuilder::new();
                let x = g.input("x", TensorSpec::f32(&[1, 4, 5, 5]));
                let p = Conv2dParams { padding: [1, 1], groups: 4, ..Default::default() };
                let y = g.conv2d(x, weight(&g, &[8, 1, 3, 3], 3, twin), Some(weight(&g, &[8], 4, twin)), p);
                g.finish(&[y]).unwrap()
            },
            acc_len: 10,
            ops: 1,
            compute: f32,
            step: None,
        },
        NodeCase {
            node: "XNNFullyConnected",
            mode: LoweringMode::StaticMean,
            build: |twin| {
                let g = GraphBuilder::new();
                let x = g.input("x", TensorSpec::f32(&[3, 2, 24]));
                let y = g.linear(x, weight(&g, &[10, 24], 5, twin), Some(weight(&g, &[10], 6, twin)));
                g.finish(&[y]).unwrap()
            },
            acc_len: 25,
            ops: 1,
            compute: f32,
            step: None,
        },
        NodeCase {
            node: "XNNAdd",
            mode: LoweringMode::StaticMean,
            build: |_| binary(reference::graph::BinaryOp::Add),
            acc_len: 0,
            ops: 1,
            compute: f32,
            step: None,
        },
        NodeCase {
            node: "XNNSubtract",
            mode: LoweringMode::StaticMean,
            build: |twin| binary(if twin { reference::graph::BinaryOp::Add } else { reference::graph::BinaryOp::Sub }),
            acc_len: 0,
            ops: 1,
            compute: f32,
            step: None,
        },
        NodeCase {
            node: "XNNMultiply",
            mode: LoweringMode::StaticMean,
            build: |_| binary(reference::graph::BinaryOp::Mul),
            acc_len: 0,
            ops: 1,
            compute: f32,
            step: None,
        },
        NodeCase {
            node: "XNNDiv",
            mode: LoweringMode::StaticMean,
            build: |_| binary(reference::graph::BinaryOp::Div),
            acc_len: 0,
            ops: 1,
            compute: f32,
            step: None,
        },
        NodeCase {
            node: "XNNClamp",
            mode: LoweringMode::StaticMean,
            build: |_| {
                let g = GraphBuilder::new();
                let x = g.input("x", TensorSpec::f32(&[4, 9]));
                let y = g.clamp(g.mean(x, &[1], true), Some(-0.25), Some(0.3));
                g.finish(&[y]).unwrap()
            },
            acc_len: 9,
            ops: 2,
            compute: f32,
            step: None,
        },
        NodeCase {
            node: "XNNSquare",
            mode: LoweringMode::StaticMean,
            build: |_| {
                let g = GraphBuilder::new();
                let x = g.input("x", TensorSpec::f32(&[5, 7]));
                let y = g.square(x);
                g.finish(&[y]).unwrap()
            },
            acc_len: 0,
            ops: 1,
            compute: f32,
            step: None,
        },
        NodeCase {
            node: "XNNReciprocalSquareRoot",
            mode: LoweringMode::StaticMean,
            build: |_| {
                let g = GraphBuilder::new();
                let x = g.input("x", TensorSpec::f32(&[5, 7]));
                let y = g.rsqrt(g.add(g.square(x), g.scalar(0.5)));
                g.finish(&[y]).unwrap()
            },
            acc_len: 0,
            ops: 3,
            compute: f32,
            step: None,
        },
        NodeCase {
            node: "XNNConvert",
            mode: LoweringMode::StaticMean,
            build: |_| {
                // A qs8 mean: the input quantize and the output dequantize are converts.
                let g = GraphBuilder::new();
                let x = g.input("x", TensorSpec::f32(&[3, 8]));
                let q = g.dequantize(g.quantize(x, 0.0625, 3), 0.0625, 3);
                let m = g.mean(q, &[1], true);
                let y = g.dequantize(g.quantize(m, 0.0625, 1), 0.0625, 1);
                g.finish(&[y]).unwrap()
            },
            acc_len: 8,
            ops: 3,
            compute: f32,
            step: Some(0.0625),
        },
        NodeCase {
            node: "XNNCopy",
            mode: LoweringMode::StaticMean,
            // A qs8 same-layout memory-format copy that requantizes (1/64 -> 1/32), as the
            // gate's program of that name: the copy stays a copy.
            build: |_| harness::programs::find("qs8_requant_copy_mean").unwrap().graph().unwrap(),
            acc_len: 16,
            ops: 4,
            compute: f32,
            step: Some(1.0 / 64.0),
        },
    ]
}

fn binary(op: reference::graph::BinaryOp) -> Graph {
    let g = GraphBuilder::new();
    let a = g.input("a", TensorSpec::f32(&[3, 1, 8]));
    let b = g.input("b", TensorSpec::f32(&[3, 4, 8]));
    let y = g.binary(op, a, b);
    g.finish(&[y]).unwrap()
}

/// Positive inputs away from zero for the divisor, seeded.
fn inputs(graph: &Graph, seed: u64) -> Vec<Tensor> {
    engine::generate_inputs(graph, &[], seed, false)
        .into_iter()
        .map(|t| {
            let v: Vec<f64> = t.values_f64().iter().map(|x| x.abs() + 0.25).collect();
            Tensor::from_f64(&t.shape, t.dtype(), t.quant, &v).to_format(t.format)
        })
        .collect()
}

#[test]
fn every_node_type_matches_the_reference_at_1_and_2_threads() {
    if xnnpack::for_test("every_node_type_matches_the_reference_at_1_and_2_threads").is_none() {
        return;
    }
    let xnn = engine::Xnnpack::new();
    for c in cases() {
        let graph = (c.build)(false);
        let twin = (c.build)(true);
        let program = engine::lower(&graph, c.mode).unwrap_or_else(|e| panic!("{}: {e}", c.node));
        let has_node = program.steps.iter().any(|s| match s {
            Step::Delegate(d) => d.graph.nodes.iter().any(|n| n.kind.type_name() == c.node),
            Step::Portable(_) => false,
        });
        assert!(has_node, "{}: the lowering emits no such node: {:?}", c.node, program.summary.node_counts);
        for seed in [1, 2] {
            let ins = inputs(&graph, seed);
            let want = engine::reference(&graph, &ins, engine::Interpreter::Plain).unwrap();
            let magnitude = engine::reference(&twin, &ins, engine::Interpreter::Plain).unwrap();
            for threads in [1, 2] {
                let mut inst = xnn
                    .build(Subject::lowered(&graph, &program), Config::new(threads, Simd::Best))
                    .unwrap_or_else(|e| panic!("{} at {threads} threads: {e}", c.node));
                let got = inst.run(&ins).unwrap_or_else(|e| panic!("{} at {threads} threads: {e}", c.node));
                assert!(inst.invocations() >= 1, "{}: XNNPACK never ran", c.node);
                assert_eq!(got.len(), want.len(), "{}", c.node);
                for (o, (w, g)) in want.iter().zip(&got).enumerate() {
                    let tol = Tolerance {
                        acc_len: c.acc_len,
                        ops: c.ops,
                        compute: c.compute,
                        range: c.compute,
                        step: c.step,
                        exact: false,
                        rounds_once: false,
                        ties: false,
                    };
                    if let Some(d) = compare_with(w, g, Some(&magnitude[o]), &tol) {
                        panic!("{} seed {seed} at {threads} threads, output {o}: {d}", c.node);
                    }
                }
            }
        }
    }
}

#[test]
fn every_gate_program_matches_the_reference_on_xnnpack() {
    // The golden table's programs (every pattern family, dtype and layout the gate pins), in
    // every mode at 1 and 2 threads, within the bench's per-row output check.
    if xnnpack::for_test("every_gate_program_matches_the_reference_on_xnnpack").is_none() {
        return;
    }
    let xnn = engine::Xnnpack::new();
    let mut runs = 0;
    for p in harness::programs::catalog() {
        let prep = harness::bench::prepare(&p, 1).unwrap();
        let want = prep.reference.as_ref().unwrap_or_else(|e| panic!("{}: {e}", p.name));
        for (mode, l) in &prep.lowered {
            let Ok(l) = l else { continue };
            for t in [1, 2] {
                let got = xnn
                    .build(Subject::lowered(&prep.graph, l), Config::new(t, Simd::Best))
                    .and_then(|mut i| i.run(&prep.inputs))
                    .unwrap_or_else(|e| panic!("{} {mode} at {t} threads: {e}", p.name));
                if let Err(e) = harness::bench::compare_outputs(&got, want, p.dtype) {
                    panic!("{} {mode} at {t} threads: {e}", p.name);
                }
                runs += 1;
            }
        }
    }
    assert!(runs >= 400, "{runs}");
}

#[test]
fn a_wrong_result_does_not_pass_the_node_comparison() {
    // The comparison above can fail: one element off by 1% fails it.
    let graph = binary(reference::graph::BinaryOp::Add);
    let ins = inputs(&graph, 1);
    let want = engine::reference(&graph, &ins, engine::Interpreter::Plain).unwrap();
    let mut v = want[0].values_f64();
    v[3] *= 1.01;
    let bad = Tensor::from_f64(&want[0].shape, want[0].dtype(), None, &v);
    let tol = Tolerance {
        acc_len: 0,
        ops: 1,
        compute: ElemType::F32,
        range: ElemType::F32,
        step: None,
        exact: false,
        rounds_once: false,
        ties: false,
    };
    assert!(compare_with(&want[0], &bad, Some(&want[0]), &tol).is_some());
}

#[test]
fn every_corpus_seed_case_runs_on_all_three_engines() {
    if xnnpack::for_test("every_corpus_seed_case_runs_on_all_three_engines").is_none() {
        return;
    }
    let corpora = Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpora");
    let (mut ran, mut portable_only) = (0, 0);
    for f in corpus_files(&corpora).unwrap().iter().filter(|f| f.to_string_lossy().contains("seeds")) {
        for case in Case::read_file(f).unwrap() {
            let report = check(&case, &CheckOptions::default());
            let label = format!("{} {}", f.display(), case.to_json());
            assert!(!report.failed(), "{label}:\n{}", harness::report::verdicts(&report));
            if case.invalid.is_some() || harness::patterns::build(&case).is_err() {
                continue;
            }
            // Every mean of it stays outside in every mode (5-D channels_last3d, say): nothing
            // for XNNPACK; said so, and that is all.
            let xnn = report.engines.get(&EngineKind::Xnnpack).cloned().unwrap_or_default();
            if !xnn.ran && xnn.skipped.as_deref() == Some("no delegate segment: nothing runs on XNNPACK") {
                portable_only += 1;
                continue;
            }
            for k in EngineKind::ALL {
                let u = report.engines.get(&k).cloned().unwrap_or_default();
                assert!(u.ran, "{label}: {} did not run: {:?}", k.name(), u.skipped);
            }
            // XNNPACK ran and its outputs were compared (a pass, not a skip) in some mode.
            let compared = report.checks.iter().any(|c| {
                c.engine == Some(EngineKind::Xnnpack) && c.oracle == OracleKind::Outputs && c.verdict == Verdict::Pass
            });
            assert!(compared, "{label}: no XNNPACK outputs check passed:\n{}", harness::report::verdicts(&report));
            assert!(report.engines[&EngineKind::Xnnpack].invocations > 0, "{label}");
            ran += 1;
        }
    }
    assert!(ran >= 30, "only {ran} seed cases ran on all three engines");
    assert!(portable_only <= 5, "{portable_only} seed cases have no delegate at all");
}

/// Behaviour 8's rule is XNNPACK's: an fp16 clamp range that meets in one point is refused
/// and skipped with the behaviour's reason; the same graph in fp32 (bounds need only be
/// ordered there) runs on XNNPACK and its outputs are compared.
#[test]
fn clamp_ranges_meeting_in_a_point_are_refused_in_fp16_only() {
    if xnnpack::for_test("clamp_ranges_meeting_in_a_point_are_refused_in_fp16_only").is_none() {
        return;
    }
    let case = |dtype: &str| {
        Case::from_json(&format!(
            r#"{{"pattern":"random","shape":[1,1,1,1],"dims":[],"dtype":"{dtype}","modes":["Main"],"threads":[1],"graph":{{"inputs":[{{"shape":[1,1,1,1],"dtype":"{dtype}"}}],"nodes":[{{"op":"conv","out":4,"kernel":1,"padding":0,"args":[0]}},{{"op":"clamp","min":-1.0,"max":1.0,"args":[1]}},{{"op":"rsqrt","floor":1.0,"args":[2]}}],"outputs":[3]}}}}"#
        ))
        .unwrap()
    };
    let xnn_outputs = |r: &harness::oracle::CaseReport| -> Vec<Verdict> {
        r.checks
            .iter()
            .filter(|c| c.engine == Some(EngineKind::Xnnpack) && c.oracle == OracleKind::Outputs)
            .map(|c| c.verdict.clone())
            .collect()
    };
    let fp16 = check(&case("f16"), &CheckOptions::default());
    assert!(!fp16.failed(), "{}", harness::report::verdicts(&fp16));
    let v = xnn_outputs(&fp16);
    assert!(
        !v.is_empty() && v.iter().all(|v| matches!(v, Verdict::Skip(why) if why.starts_with("behaviour 8"))),
        "{v:?}"
    );
    let fp32 = check(&case("f32"), &CheckOptions::default());
    assert!(!fp32.failed(), "{}", harness::report::verdicts(&fp32));
    let v = xnn_outputs(&fp32);
    assert!(!v.is_empty() && v.iter().all(|v| *v == Verdict::Pass), "{v:?}");
}

/// Behaviour 6: a convolution over one input channel lowers to `XNNDepthwiseConv2d`; with one
/// output channel (depth multiplier 1) XNNPACK runs its depthwise kernel, which rounds the
/// fp16 accumulator after every tap, with two a GEMM that sums in fp32. Taps of 1 then eight
/// of 2^-11 over an input of ones: 1 + 2^-8 exactly, but each 2^-11 alone is half an ulp of 1
/// (a tie, kept at the even 1). The probe of finding 19.
#[test]
fn fp16_one_to_one_channel_convolutions_accumulate_in_fp16() {
    if xnnpack::for_test("fp16_one_to_one_channel_convolutions_accumulate_in_fp16").is_none() {
        return;
    }
    let xnn = engine::Xnnpack::new();
    let conv = |out: usize| {
        let g = GraphBuilder::new();
        let x = g.input("x", TensorSpec::new(ElemType::F16, &[1, 1, 3, 3]));
        let taps: Vec<f64> = (0..out * 9).map(|i| if i % 9 == 0 { 1.0 } else { 2f64.powi(-11) }).collect();
        let w = g.constant(Tensor::from_f64(&[out, 1, 3, 3], ElemType::F16, None, &taps));
        let y = g.conv2d(x, w, None, Conv2dParams::default());
        g.finish(&[y]).unwrap()
    };
    let ones = Tensor::from_f64(&[1, 1, 3, 3], ElemType::F16, None, &[1.0; 9]);
    for (out, want) in [(1, 1.0), (2, 1.0 + 2f64.powi(-8))] {
        let graph = conv(out);
        let program = engine::lower(&graph, LoweringMode::StaticMean).unwrap();
        let kinds: Vec<&str> = program
            .steps
            .iter()
            .flat_map(|s| match s {
                Step::Delegate(d) => d.graph.nodes.iter().map(|n| n.kind.type_name()).collect(),
                Step::Portable(_) => vec![],
            })
            .collect();
        assert_eq!(kinds, ["XNNStaticTranspose", "XNNDepthwiseConv2d", "XNNStaticTranspose"], "{out}");
        let exact = engine::reference(&graph, std::slice::from_ref(&ones), engine::Interpreter::Plain).unwrap();
        assert_eq!(exact[0].values_f64(), vec![1.0 + 2f64.powi(-8); out], "the reference rounds once");
        let mut inst = xnn.build(Subject::lowered(&graph, &program), Config::new(1, Simd::Best)).unwrap();
        let got = inst.run(std::slice::from_ref(&ones)).unwrap();
        assert_eq!(got[0].values_f64(), vec![want; out], "{out} output channel(s): {:?}", program.summary.node_counts);
    }
}

/// Behaviour 10, the probe of finding 23: a qs8 mean of a constant row `q` sums it in 32
/// int16 lanes, one pair of elements per lane per 64, widened every 16,384 elements; a lane
/// past 128 pairs wraps. `(input scale, zero point)` as a real quantizer gives them.
#[test]
fn qs8_mean_rows_past_8192_elements_wrap() {
    if xnnpack::for_test("qs8_mean_rows_past_8192_elements_wrap").is_none() {
        return;
    }
    use harness::oracle::behaviours::{qs8_wrapping_rows, QS8_EXACT_ROW};
    let (si, zi, so, zo) = (0.016345099f32, 98, 0.023670588f32, 27);
    let graph = |shape: &[usize], dims: &[i64]| {
        let g = GraphBuilder::new();
        let x = g.input("x", TensorSpec::f32(shape));
        let m = g.mean(g.dequantize(g.quantize(x, si, zi), si, zi), dims, true);
        let y = g.dequantize(g.quantize(m, so, zo), so, zo);
        g.finish(&[y]).unwrap()
    };
    let wrap16 = |v: i64| (v + 32768).rem_euclid(65536) - 32768;
    // The measured kernel's sum of a row of `n` elements `q`, and the mean's output code.
    let xnn_sum = |q: i64, n: usize| {
        let (blocks, rest) = (n / 16384, n % 16384);
        let lanes = |len: usize| 32 * wrap16(2 * q * (len / 64) as i64) + q * (len % 64) as i64;
        blocks as i64 * lanes(16384) + lanes(rest)
    };
    let to_code = |v: f64| (v / so as f64).round() as i64 + zo as i64;
    let code = |sum: i64, n: usize| {
        let m = (sum - n as i64 * zi as i64) as f64 * si as f64 / (so as f64 * n as f64);
        (m.round_ties_even() as i64 + zo as i64).clamp(-128, 127)
    };
    // x86 without AVX-512 runs the kernel measured here; others may assign lanes otherwise.
    let measured_kernel = !cfg!(target_arch = "x86_64") || !std::is_x86_feature_detected!("avx512bw");
    let xnn = engine::Xnnpack::new();
    // (shape, dims, row length, q, the measured kernel wraps): rows of 8,192 and fewer never
    // wrap, nor do reductions that keep the innermost dim (rdsum, row 0); 8,255 elements of
    // -128 are flagged but fit (128 pairs per lane, -32768 at most, the tail of 63 its own lanes).
    type Probe = (&'static [usize], &'static [i64], usize, i64, bool);
    let probes: [Probe; 8] = [
        (&[8192], &[0], 8192, -128, false),
        (&[8255], &[0], 8255, -128, false),
        (&[8256], &[0], 8256, -128, true),
        (&[13341], &[0], 13341, -100, true),
        (&[40000], &[0], 40000, 127, true),
        (&[2, 1, 100, 100], &[1, 2, 3], 10000, -128, true),
        (&[20000, 16], &[0], 0, -128, false),
        (&[100, 100, 1], &[0, 1], 0, -128, false),
    ];
    for (shape, dims, row, q, wrapped) in probes {
        let g = graph(shape, dims);
        let program = engine::lower(&g, LoweringMode::StaticMean).unwrap();
        let wraps = program.steps.iter().any(|s| matches!(s, Step::Delegate(d) if qs8_wrapping_rows(&d.graph)));
        assert_eq!(wraps, row > QS8_EXACT_ROW, "{shape:?} {dims:?}");
        let n: usize = shape.iter().product();
        let x = Tensor::from_f64(shape, ElemType::F32, None, &vec![(q - zi as i64) as f64 * si as f64; n]);
        let exact = engine::reference(&g, std::slice::from_ref(&x), engine::Interpreter::Plain).unwrap();
        let exact_code = to_code(exact[0].values_f64()[0]);
        let per_output = n / exact[0].numel();
        assert_eq!(exact_code, code(q * per_output as i64, per_output), "{shape:?}: the exact mean");
        for threads in [1, 2] {
            let mut inst = xnn.build(Subject::lowered(&g, &program), Config::new(threads, Simd::Best)).unwrap();
            let got = inst.run(std::slice::from_ref(&x)).unwrap();
            let got: Vec<i64> = got[0].values_f64().into_iter().map(to_code).collect();
            let want = if row > QS8_EXACT_ROW && measured_kernel { code(xnn_sum(q, row), row) } else { exact_code };
            assert!(
                got.iter().all(|&c| c == want),
                "{shape:?} {dims:?} q {q} at {threads} threads: {got:?}, want {want}"
            );
            assert_eq!(want != exact_code, wrapped && measured_kernel, "{shape:?}: the model wraps");
        }
    }
}
