//! Lowering tests: the exact counts of issue 3's table in all three modes, the real
//! ExecuTorch 1.5.1 payloads (structure, ids, dims, flags), and a property test that no
//! graph the builder accepts makes `lower` panic ([`fixtures`], [`fuzz`]).
//!
//! Cells the issue leaves to derive (Main column), traced through the partitioner and
//! the layout pass:
//! - conv -> `y - y.mean(1, keepdim=True)`: the mean stays outside, and the sub cannot
//!   join the conv's delegate (conv -> mean(outside) -> sub would be a cycle), so 2
//!   delegates. The conv delegate has the input transpose and the NHWC->NCHW transpose of
//!   its output at the boundary; the sub delegate reads two NCHW placeholders: T = 2.
//! - RMSNorm over the last dim of 1x16x256: the rank-3 mean stays outside; `x*x` is one
//!   delegate, `add, rsqrt, mul, mul` another: 2 delegates, T = 0, G = 0, M = 0.
//! - qs8 `q -> dq -> mean -> q -> dq`: the mean stays outside, so no dq->mean->q group
//!   forms; `q, dq` before and after are claimed by the quantize/dequantize configs as
//!   explicit converts: 2 delegates with 2 XNNConvert each, C = 4, T = 0.

use delegate::program::{Step, Summary};
use delegate::xnn::{QuantParams as XQuant, XNodeKind, XnnGraph};
use delegate::{lower, lower_with, LowerError, LowerOptions, LoweredProgram, LoweringMode};
use reference::graph::{Conv2dParams, Graph, GraphBuilder, T};
use reference::{ElemType, MemoryFormat, QuantParams, Tensor, TensorSpec};
use serde_json::Value;

const MODES: [LoweringMode; 3] = LoweringMode::ALL;
use LoweringMode::{Main, NhwcAware, StaticMean};

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

fn conv(g: &GraphBuilder, x: T, cin: usize, cout: usize, k: usize, seed: u32) -> T {
    let w = g.constant(Tensor::f32(&[cout, cin, k, k], values(cout * cin * k * k, seed)));
    let b = g.constant(Tensor::f32(&[cout], values(cout, seed + 1)));
    g.conv2d(x, w, Some(b), Conv2dParams::default())
}

fn pattern_a() -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]));
    let m = g.mean(x, &[2, 3], true);
    g.finish(&[m]).unwrap()
}

fn pattern_b() -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
    let y = conv(&g, x, 3, 8, 3, 1);
    let m = g.mean(y, &[2, 3], true);
    g.finish(&[m]).unwrap()
}

fn pattern_c() -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
    let y = conv(&g, x, 3, 8, 3, 1);
    let m = g.mean(y, &[1], true);
    let z = conv(&g, m, 1, 4, 3, 7);
    g.finish(&[z]).unwrap()
}

fn pattern_sub_mean() -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
    let y = conv(&g, x, 3, 8, 3, 1);
    let m = g.mean(y, &[1], true);
    let d = g.sub(y, m);
    g.finish(&[d]).unwrap()
}

fn pattern_h() -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]).channels_last());
    let m = g.mean(x, &[2, 3], true);
    g.finish(&[m]).unwrap()
}

fn rmsnorm() -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 16, 256]));
    let x2 = g.mul(x, x);
    let ms = g.mean(x2, &[-1], true);
    let r = g.rsqrt(g.add(ms, g.scalar(1e-6)));
    let w = g.constant(Tensor::f32(&[256], values(256, 3)));
    let y = g.mul(g.mul(x, r), w);
    g.finish(&[y]).unwrap()
}

fn qs8_mean(dim: i64) -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[2, 5, 8]));
    let q = g.dequantize(g.quantize(x, 0.02, 3), 0.02, 3);
    let m = g.mean(q, &[dim], true);
    let y = g.dequantize(g.quantize(m, 0.01, -5), 0.01, -5);
    g.finish(&[y]).unwrap()
}

fn lone_mean(dims: &[i64], keepdim: bool, dtype: Option<ElemType>) -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]));
    let m = match dtype {
        Some(d) => g.mean_dtype(x, dims, keepdim, d),
        None => g.mean(x, dims, keepdim),
    };
    g.finish(&[m]).unwrap()
}

/// Delegates, transposes, GAP, static means, converts, outside op names.
fn counts(s: &Summary) -> (usize, usize, usize, usize, usize, Vec<String>) {
    let gap = s.count("XNNGlobalAvgPooling2d").unwrap();
    let mean = s.count("XNNStaticMean").unwrap();
    let outside = s.outside.iter().map(|o| o.op.clone()).collect();
    (s.delegates, s.transposes, gap, mean, s.converts, outside)
}

fn low(g: &Graph, mode: LoweringMode) -> LoweredProgram {
    lower(g, mode).unwrap_or_else(|e| panic!("{mode}: {e}"))
}

fn xgraphs(p: &LoweredProgram) -> Vec<&XnnGraph> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Delegate(d) => Some(&d.graph),
            Step::Portable(_) => None,
        })
        .collect()
}

fn mean_out() -> Vec<String> {
    vec!["mean.dim".to_string()]
}

#[test]
fn table_gap_patterns_identical_in_all_modes() {
    for (g, t) in [(pattern_a(), 2), (pattern_b(), 2), (pattern_h(), 1)] {
        let main = low(&g, Main);
        assert_eq!(counts(&main.summary), (1, t, 1, 0, 0, vec![]));
        for mode in [StaticMean, NhwcAware] {
            let p = low(&g, mode);
            assert_eq!(counts(&p.summary), (1, t, 1, 0, 0, vec![]), "{mode}");
            // Byte identity: the same XNNPACK graph, constants included.
            assert_eq!(xgraphs(&p), xgraphs(&main), "{mode}");
        }
    }
}

#[test]
fn table_conv_mean_conv() {
    let g = pattern_c();
    assert_eq!(counts(&low(&g, Main).summary), (2, 4, 0, 0, 0, mean_out()));
    assert_eq!(counts(&low(&g, StaticMean).summary), (1, 4, 0, 1, 0, vec![]));
    assert_eq!(counts(&low(&g, NhwcAware).summary), (1, 2, 0, 1, 0, vec![]));
}

#[test]
fn table_conv_sub_mean() {
    let g = pattern_sub_mean();
    assert_eq!(counts(&low(&g, Main).summary), (2, 2, 0, 0, 0, mean_out()));
    assert_eq!(counts(&low(&g, StaticMean).summary), (1, 4, 0, 1, 0, vec![]));
    assert_eq!(counts(&low(&g, NhwcAware).summary), (1, 2, 0, 1, 0, vec![]));
}

#[test]
fn table_rmsnorm() {
    let g = rmsnorm();
    assert_eq!(counts(&low(&g, Main).summary), (2, 0, 0, 0, 0, mean_out()));
    for mode in [StaticMean, NhwcAware] {
        let p = low(&g, mode);
        assert_eq!(counts(&p.summary), (1, 0, 0, 1, 0, vec![]), "{mode}");
        assert_eq!(p.summary.count("XNNMultiply").unwrap(), 3);
        assert_eq!(p.summary.count("XNNReciprocalSquareRoot").unwrap(), 1);
        assert_eq!(p.summary.count("XNNAdd").unwrap(), 1);
    }
}

#[test]
fn table_qs8_mean_innermost_and_middle() {
    for dim in [-1, 1] {
        let g = qs8_mean(dim);
        assert_eq!(counts(&low(&g, Main).summary), (2, 0, 0, 0, 4, mean_out()), "dim {dim}");
        for mode in [StaticMean, NhwcAware] {
            let p = low(&g, mode);
            assert_eq!(counts(&p.summary), (1, 0, 0, 1, 2, vec![]), "{mode} dim {dim}");
            // The mean runs on int8 values: in and out qint8 with their own params.
            let xg = xgraphs(&p)[0];
            let m = xg.nodes.iter().find(|n| n.kind.type_name() == "XNNStaticMean").unwrap();
            let XNodeKind::StaticMean { reduction_axes, input_id, output_id, flags } = &m.kind else { unreachable!() };
            assert_eq!(reduction_axes, &vec![if dim < 0 { 2 } else { 1 }]);
            assert_eq!(*flags, 0x40);
            let q = |id: u32| xg.values[id as usize].quant.clone();
            assert_eq!(q(*input_id), Some(XQuant::PerTensor { scale: 0.02, zero_point: 3 }));
            assert_eq!(q(*output_id), Some(XQuant::PerTensor { scale: 0.01, zero_point: -5 }));
        }
    }
}

#[test]
fn table_lone_means() {
    let cases: [(&[i64], bool, Vec<u32>, u32); 3] =
        [(&[], true, vec![0, 1, 2, 3], 0x40), (&[3], true, vec![3], 0x40), (&[2, 3], false, vec![2, 3], 0)];
    for (dims, keep, axes, flags) in cases {
        let g = lone_mean(dims, keep, None);
        let p = low(&g, Main);
        assert_eq!(counts(&p.summary), (0, 0, 0, 0, 0, mean_out()), "{dims:?}");
        for mode in [StaticMean, NhwcAware] {
            let p = low(&g, mode);
            assert_eq!(counts(&p.summary), (1, 0, 0, 1, 0, vec![]), "{mode} {dims:?}");
            let xg = xgraphs(&p)[0];
            assert_eq!(
                xg.nodes[0].kind,
                XNodeKind::StaticMean { reduction_axes: axes.clone(), input_id: 1, output_id: 0, flags }
            );
        }
    }
    let g = lone_mean(&[2, 3], true, Some(ElemType::F32));
    for mode in MODES {
        let p = low(&g, mode);
        assert_eq!(counts(&p.summary), (0, 0, 0, 0, 0, mean_out()), "{mode}");
        assert_eq!(p.summary.outside[0].reason, "mean.dim does not support dtype");
    }
}

#[test]
fn keepdim_false_all_dims_is_declared_as_one_element() {
    let g = lone_mean(&[], false, None);
    let p = low(&g, StaticMean);
    let xg = xgraphs(&p)[0];
    assert_eq!(xg.values[0].dims, vec![1]);
    assert_eq!(xg.values[1].dims, vec![1, 8, 6, 6]);
}

#[test]
fn nhwc_aware_head_without_keepdim_needs_no_copy_but_w_mean_does() {
    // x.mean([2,3]) after a conv: kept dims N, C stay in order in NHWC.
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
    let y = conv(&g, x, 3, 8, 3, 1);
    let m = g.mean(y, &[2, 3], false);
    let gr = g.finish(&[m]).unwrap();
    assert_eq!(counts(&low(&gr, StaticMean).summary), (1, 2, 0, 1, 0, vec![]));
    let p = low(&gr, NhwcAware);
    assert_eq!(counts(&p.summary), (1, 1, 0, 1, 0, vec![]));
    let xg = xgraphs(&p)[0];
    let m = xg.nodes.iter().find(|n| n.kind.type_name() == "XNNStaticMean").unwrap();
    assert!(matches!(&m.kind, XNodeKind::StaticMean { reduction_axes, flags: 0, .. } if reduction_axes == &vec![1, 2]));
    // mean over W only, no keepdim: [N, C, H] is not in NHWC order, so a copy stays.
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
    let y = conv(&g, x, 3, 8, 3, 1);
    let m = g.mean(y, &[3], false);
    let gr = g.finish(&[m]).unwrap();
    assert_eq!(counts(&low(&gr, NhwcAware).summary), (1, 2, 0, 1, 0, vec![]));
}

#[test]
fn bf16_mean_needs_enable_bf16_and_never_takes_gap() {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::bf16(&[1, 8, 6, 6]));
    let m = g.mean(x, &[2, 3], true);
    let gr = g.finish(&[m]).unwrap();
    for mode in MODES {
        let p = low(&gr, mode);
        assert_eq!(p.summary.delegates, 0, "{mode}");
    }
    let opts = |mode| LowerOptions { mode, enable_bf16: true };
    let p = lower_with(&gr, &opts(Main)).unwrap();
    assert_eq!(counts(&p.summary), (0, 0, 0, 0, 0, mean_out()));
    for mode in [StaticMean, NhwcAware] {
        let p = lower_with(&gr, &opts(mode)).unwrap();
        assert_eq!(counts(&p.summary), (1, 0, 0, 1, 0, vec![]), "{mode}");
        assert_eq!(xgraphs(&p)[0].values[0].datatype, delegate::xnn::XnnDatatype::Bf16);
    }
}

#[test]
fn channels_last_output_stays_nhwc_and_slot_says_so() {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]).channels_last());
    let y = conv(&g, x, 3, 8, 3, 1);
    let gr = g.finish(&[y]).unwrap();
    let p = low(&gr, Main);
    assert_eq!(p.summary.transposes, 0);
    assert_eq!(p.slots[p.outputs[0]].format, MemoryFormat::ChannelsLast);
    let xg = xgraphs(&p)[0];
    assert_eq!(xg.values[xg.output_ids[0] as usize].dims, vec![1, 6, 6, 8]);
    assert_eq!(xg.values[xg.input_ids[0] as usize].dims, vec![1, 8, 8, 3]);
}

#[test]
fn portable_split_hands_off_through_slots_in_order() {
    let p = low(&pattern_c(), Main);
    assert_eq!(p.steps.len(), 3);
    let (Step::Delegate(d0), Step::Portable(m), Step::Delegate(d1)) = (&p.steps[0], &p.steps[1], &p.steps[2]) else {
        panic!("expected delegate, portable mean, delegate")
    };
    assert_eq!(d0.inputs, p.inputs);
    assert_eq!(m.inputs, d0.outputs);
    assert_eq!(d1.inputs, vec![m.output]);
    assert_eq!(p.outputs, d1.outputs);
    assert!(m.reason.contains("innermost"), "{}", m.reason);
    // Both payload inputs and outputs are NCHW hand-offs.
    assert_eq!(p.slots[m.output].format, MemoryFormat::Contiguous);
}

#[test]
fn conv_constants_are_ohwi_and_16_byte_aligned() {
    let p = low(&pattern_b(), Main);
    let xg = xgraphs(&p)[0];
    assert_eq!(xg.constant_data[0].named_key.as_deref(), Some(""));
    assert_eq!(xg.constant_data.len(), 3);
    let w = &xg.constant_data[1];
    assert_eq!((w.offset, w.size), (0, 8 * 3 * 3 * 3 * 4));
    let b = &xg.constant_data[2];
    assert_eq!((b.offset % 16, b.size), (0, 32));
    // OHWI: element (o=0, h=0, w=0, i=1) comes second; in OIHW it sits at index 9.
    let raw = |k: usize| f32::from_le_bytes(xg.constant_bytes[k * 4..k * 4 + 4].try_into().unwrap());
    let oihw = values(8 * 3 * 3 * 3, 1);
    assert_eq!(raw(1), oihw[9]);
    assert_eq!(raw(2), oihw[18]);
    assert_eq!(raw(3), oihw[1]);
}

#[test]
fn summary_is_printable_and_serde() {
    let s = low(&pattern_c(), Main).summary;
    let text = s.to_string();
    assert!(text.contains("2 delegate(s)"), "{text}");
    assert!(text.contains("XNNStaticTranspose"), "{text}");
    assert!(text.contains("mean.dim"), "{text}");
    let back: Summary = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(back, s);
    assert!(s.count("XNNStaticTransposee").is_err());
}

#[test]
fn relu_and_hardtanh_fuse_into_the_op_before_them() {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
    let y = g.relu(conv(&g, x, 3, 8, 3, 1));
    let s = g.hardtanh(g.add(y, y), -1.0, 6.0);
    let c = g.clamp(g.mul(s, s), None, Some(2.0));
    let gr = g.finish(&[c]).unwrap();
    let p = low(&gr, Main);
    assert_eq!(p.summary.count("XNNClamp").unwrap(), 1, "clamp(max=) is not a fuseable activation");
    let xg = xgraphs(&p)[0];
    let range = |t: &str| xg.nodes.iter().find(|n| n.kind.type_name() == t).unwrap().output_min_max;
    assert_eq!(range("XNNConv2d"), Some((0.0, f32::INFINITY)));
    assert_eq!(range("XNNAdd"), Some((-1.0, 6.0)));
    assert_eq!(range("XNNMultiply"), None);
    assert_eq!(range("XNNClamp"), Some((f32::NEG_INFINITY, 2.0)));
    // In a static-quant group the activation between the conv and its quantize is claimed
    // with the group and fused: one qs8 conv, no clamp, converts only at the edges.
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
    let xd = g.dequantize(g.quantize(x, 0.02, 0), 0.02, 0);
    let w = g.constant(Tensor::qs8(&[4, 3, 3, 3], vec![1; 108], QuantParams::new(0.01, 0)));
    let y = g.relu(g.conv2d(xd, g.dequantize(w, 0.01, 0), None, Conv2dParams::default()));
    let out = g.dequantize(g.quantize(y, 0.05, -128), 0.05, -128);
    let gr = g.finish(&[out]).unwrap();
    let p = low(&gr, Main);
    assert_eq!(counts(&p.summary), (1, 2, 0, 0, 2, vec![]));
    assert_eq!(p.summary.count("XNNClamp").unwrap(), 0);
    let xg = xgraphs(&p)[0];
    let conv_node = xg.nodes.iter().find(|n| n.kind.type_name() == "XNNConv2d").unwrap();
    assert_eq!(conv_node.output_min_max, Some((0.0, f32::INFINITY)));
    let XNodeKind::Conv2d(c) = &conv_node.kind else { unreachable!() };
    assert_eq!(xg.values[c.output_id as usize].datatype, delegate::xnn::XnnDatatype::Qint8);
    // An op read by something else as well keeps its activation as a node.
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
    let y = conv(&g, x, 3, 8, 3, 1);
    let r = g.relu(y);
    let gr = g.finish(&[r, y]).unwrap();
    let p = low(&gr, Main);
    assert_eq!(p.summary.count("XNNClamp").unwrap(), 1);
}

#[test]
fn dynamic_dims_serialize_as_their_upper_bound() {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[2, 7, 16]).dynamic(0).dynamic(2));
    let m = g.mean(x, &[-1], true);
    let gr = g.finish(&[m]).unwrap();
    assert_eq!(counts(&low(&gr, Main).summary), (0, 0, 0, 0, 0, mean_out()));
    let p = low(&gr, StaticMean);
    let xg = xgraphs(&p)[0];
    assert_eq!(xg.values[xg.input_ids[0] as usize].dims, vec![2, 7, 16]);
    assert_eq!(xg.values[xg.output_ids[0] as usize].dims, vec![2, 7, 1]);
    assert_eq!(p.slots[p.inputs[0]], gr.nodes[0].spec, "the hand-off keeps the dynamic spec");
}

#[test]
fn invalid_graph_is_a_typed_error() {
    let mut g = pattern_a();
    g.outputs = vec![99];
    assert!(matches!(lower(&g, Main), Err(LowerError::InvalidGraph(_))));
}

#[test]
fn dequantize_rewired_by_an_output_copy_keeps_every_reader_consistent() {
    // conv -> q1 -> dq1 -> q2 -> dq2 with dq1 also a (NCHW) graph output: the output copy
    // moves every user of dq1, q2 included, onto the new NCHW dequantize, after which q2
    // (planned NHWC) and the dq2 output would leave in the wrong layout. Both are repaired
    // with local copies instead of mixing layouts.
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
    let y = conv(&g, x, 3, 8, 3, 1);
    let d1 = g.dequantize(g.quantize(y, 0.05, 1), 0.05, 1);
    let d2 = g.dequantize(g.quantize(d1, 0.05, 1), 0.05, 1);
    let gr = g.finish(&[d2, d1]).unwrap();
    for mode in MODES {
        let p = low(&gr, mode);
        assert_eq!(p.summary.delegates, 1, "{mode}");
        // q1; dq1 after its int8 output transpose; dq2 (= dq(q1), the removal pass folds
        // q2's round trip) before the transpose that repairs its layout.
        assert_eq!((p.summary.converts, p.summary.transposes), (3, 3), "{mode}");
        let xg = xgraphs(&p)[0];
        for id in xg.output_ids.iter() {
            assert_eq!(xg.values[*id as usize].dims, vec![1, 8, 6, 6], "{mode}: outputs are NCHW");
        }
    }
}

// The real ExecuTorch 1.5.1 payloads.
mod fixtures;

#[path = "../lowering_gen/mod.rs"]
mod gen;

mod fuzz;
