//! Hand-offs between the lowering and the runtime that the corpora exercise: qs8 add/sub/mul
//! and convolutions (regular and depthwise), ambiguous channels_last slots (handed off with
//! NCHW dims, as ExecuTorch does), 0-D slots bound to `[1]` values, fp16 convolutions whose
//! filter and bias are stored as fp32. Every program runs in every lowering mode against
//! `reference::eval`.
//!
//! Tolerances: qs8 outputs one quantization step (inputs sit on power-of-two grids, so only
//! the last requantization can differ); fp32 `2^-16` of the output's largest magnitude
//! (short sums of values of magnitude <= 16); fp16 adds one output ulp.

use delegate::program::Step;
use delegate::runtime::{Program, RunOptions};
use delegate::xnn::XnnDatatype;
use delegate::{lower_with, LowerOptions, LoweringMode};
use reference::data::{generate, DataOptions};
use reference::graph::{Conv2dParams, Graph, GraphBuilder, TensorSpec};
use reference::{ElemType, QuantParams, Tensor};

const Q_IN: QuantParams = QuantParams { scale: 0.0625, zero_point: 3 };
const Q_W: QuantParams = QuantParams { scale: 0.015625, zero_point: 0 };
const Q_OUT: QuantParams = QuantParams { scale: 0.25, zero_point: -1 };

fn qdq(g: &GraphBuilder, x: reference::T, q: QuantParams) -> reference::T {
    g.dequantize(g.quantize(x, q.scale, q.zero_point), q.scale, q.zero_point)
}

fn qs8_weight(g: &GraphBuilder, shape: &[usize], seed: u64) -> reference::T {
    let t = generate(&TensorSpec::qs8(shape, Q_W), seed, &DataOptions::default());
    let c = g.constant(t);
    g.dequantize(c, Q_W.scale, Q_W.zero_point)
}

fn build(f: &dyn Fn(&GraphBuilder) -> Vec<reference::T>) -> Graph {
    let g = GraphBuilder::new();
    let outs = f(&g);
    g.finish(&outs).expect("valid graph")
}

/// Inputs on the qs8 input grid (exact quantize), or plain seeded data.
fn inputs(graph: &Graph, snap: bool) -> Vec<Tensor> {
    (0..graph.inputs.len())
        .map(|k| {
            let spec = &graph.nodes[graph.inputs[k]].spec;
            let mut t = generate(&spec.concretize(&spec.max_shape()), 11 + k as u64, &DataOptions::default());
            if snap {
                let v: Vec<f64> = t
                    .values_f64()
                    .iter()
                    .map(|&x| {
                        let q = (x / Q_IN.scale as f64).round().clamp(-100.0, 100.0);
                        q * Q_IN.scale as f64
                    })
                    .collect();
                t = Tensor::from_f64(&t.shape, t.dtype(), None, &v).to_format(t.format);
            }
            t
        })
        .collect()
}

/// Whether some delegate segment holds a `kind` node whose output is qint8.
fn has_qs8_node(lowered: &delegate::LoweredProgram, kind: &str) -> bool {
    lowered.steps.iter().any(|st| match st {
        Step::Delegate(seg) => seg.graph.nodes.iter().any(|n| {
            n.kind.type_name() == kind
                && n.kind
                    .output()
                    .and_then(|o| seg.graph.values.iter().find(|v| v.id_out == o))
                    .is_some_and(|v| v.datatype == XnnDatatype::Qint8)
        }),
        Step::Portable(_) => false,
    })
}

/// Runs `graph` in every mode; `qs8_node` names a node that must be delegated as qs8.
fn check(name: &str, graph: &Graph, snap: bool, qstep: Option<f64>, qs8_node: Option<&str>) {
    let ins = inputs(graph, snap);
    let want = reference::eval::run(graph, &ins).unwrap_or_else(|e| panic!("{name}: oracle: {e}"));
    for mode in LoweringMode::ALL {
        let lowered = lower_with(graph, &LowerOptions::new(mode)).unwrap_or_else(|e| panic!("{name} {mode}: {e}"));
        if let Some(kind) = qs8_node {
            assert!(has_qs8_node(&lowered, kind), "{name} {mode}: no qs8 {kind} delegated");
        }
        for threads in [1, 2] {
            let what = format!("{name} {mode} threads {threads}");
            let p = Program::new(&lowered, &RunOptions::threads(threads)).unwrap_or_else(|e| panic!("{what}: {e}"));
            let got = p.run(&ins).unwrap_or_else(|e| panic!("{what}: run: {e}"));
            assert_eq!(got.len(), want.len(), "{what}");
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.shape, w.shape, "{what} output {k}: shape");
                assert_eq!(g.format, w.format, "{what} output {k}: format");
                assert_eq!(g.dtype(), w.dtype(), "{what} output {k}: dtype");
                let (gv, wv) = (g.values_f64(), w.values_f64());
                let scale = wv.iter().fold(1f64, |a, v| a.max(v.abs()));
                for (i, (a, b)) in gv.iter().zip(&wv).enumerate() {
                    let tol = match (qstep, g.dtype()) {
                        (Some(s), _) => s * 1.0001,
                        (None, ElemType::F16) => scale / 65536.0 + b.abs() / 1024.0,
                        _ => scale / 65536.0,
                    };
                    assert!((a - b).abs() <= tol, "{what} output {k} element {i}: got {a}, want {b}, tol {tol:e}");
                }
            }
        }
    }
}

#[test]
fn qs8_add_sub_mul_run_and_match() {
    for (name, op) in [("add", 0), ("sub", 1), ("mul", 2)] {
        let graph = build(&|g| {
            let a = qdq(g, g.input("a", TensorSpec::f32(&[2, 3, 8])), Q_IN);
            let b = qdq(g, g.input("b", TensorSpec::f32(&[3, 1])), Q_IN);
            let y = match op {
                0 => g.add(a, b),
                1 => g.sub(a, b),
                _ => g.mul(a, b),
            };
            vec![qdq(g, y, Q_OUT)]
        });
        let kind = ["XNNAdd", "XNNSubtract", "XNNMultiply"][op];
        check(&format!("qs8 {name}"), &graph, true, Some(Q_OUT.scale as f64), Some(kind));
    }
}

#[test]
fn qs8_conv_regular_and_depthwise_run_and_match() {
    for (name, groups) in [("regular", 1), ("depthwise", 4)] {
        let graph = build(&|g| {
            let x = qdq(g, g.input("x", TensorSpec::f32(&[1, 4, 5, 5])), Q_IN);
            let cout = if groups == 1 { 6 } else { 4 };
            let w = qs8_weight(g, &[cout, 4 / groups, 3, 3], 5);
            let p = Conv2dParams { padding: [1, 1], groups, ..Default::default() };
            vec![qdq(g, g.conv2d(x, w, None, p), Q_OUT)]
        });
        let kind = if groups == 1 { "XNNConv2d" } else { "XNNDepthwiseConv2d" };
        check(&format!("qs8 conv {name}"), &graph, true, Some(Q_OUT.scale as f64), Some(kind));
    }
}

#[test]
fn ambiguous_channels_last_slots_hand_off_nchw_dims() {
    // C == 1 and H == W == 1 channels_last inputs feeding a delegated op.
    for shape in [[1, 1, 4, 6], [2, 5, 1, 1]] {
        let graph = build(&|g| {
            let x = g.input("x", TensorSpec::f32(&shape).channels_last());
            vec![g.sub(x, g.mean(x, &[1], true))]
        });
        check(&format!("channels_last {shape:?}"), &graph, false, None, None);
    }
}

#[test]
fn zero_d_slot_binds_to_a_one_element_value() {
    let graph = build(&|g| {
        let s = g.input("s", TensorSpec::f32(&[]));
        let x = g.input("x", TensorSpec::f32(&[2, 3]));
        vec![g.mul(g.add(x, s), s)]
    });
    check("0-D input", &graph, false, None, None);
}

#[test]
fn fp16_conv_with_fp32_stored_weights_runs() {
    let graph = build(&|g| {
        let x = g.input("x", TensorSpec::f16(&[1, 3, 5, 5]));
        let w = g.constant(generate(&TensorSpec::f16(&[4, 3, 3, 3]), 3, &DataOptions::default()));
        let b = g.constant(generate(&TensorSpec::f16(&[4]), 4, &DataOptions::default()));
        vec![g.conv2d(x, w, Some(b), Conv2dParams { padding: [1, 1], ..Default::default() })]
    });
    for mode in LoweringMode::ALL {
        let l = lower_with(&graph, &LowerOptions::new(mode)).unwrap();
        assert!(l.summary.node_counts.contains_key("XNNConv2d"), "{mode}: the fp16 conv is not delegated");
    }
    check("fp16 conv", &graph, false, None, None);
}
