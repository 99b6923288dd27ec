//! Every lowering mutant is reachable: on its trigger graph the lowering (or the summary)
//! differs from the unmutated one, so a gate or oracle can see it.
#![cfg(feature = "mutants")]

use delegate::mutants::{set_active, Mutant};
use delegate::{lower_with, LowerOptions, LoweringMode};
use reference::graph::{Conv2dParams, Graph, GraphBuilder};
use reference::{ElemType, Tensor, TensorSpec};

fn finish(g: GraphBuilder, outs: &[reference::T]) -> Graph {
    g.finish(outs).unwrap()
}

fn lone_mean(dims: &[i64], keep: bool, dtype: Option<ElemType>) -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]));
    let m = match dtype {
        Some(d) => g.mean_dtype(x, dims, keep, d),
        None => g.mean(x, dims, keep),
    };
    finish(g, &[m])
}

fn conv_mean(dims: &[i64]) -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
    let w = g.constant(Tensor::f32(&[8, 3, 3, 3], vec![0.01; 216]));
    let y = g.conv2d(x, w, None, Conv2dParams::default());
    let m = g.mean(y, dims, true);
    finish(g, &[m])
}

fn qs8_cl_mean() -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 4, 3, 5]).channels_last());
    let d = g.dequantize(g.quantize(x, 0.05, 2), 0.05, 2);
    let a = g.dequantize(g.quantize(g.add(d, d), 0.1, 0), 0.1, 0);
    let m = g.dequantize(g.quantize(g.mean(a, &[1], true), 0.1, 0), 0.1, 0);
    finish(g, &[m])
}

/// `dq -> copy -> q` requantizing from scale 0.0625 to 0.125 before a mean: a same-layout
/// memory-format copy, or a same-shape reshape.
fn qs8_requant_mean(reshape: bool) -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 4, 4]));
    let a = g.dequantize(g.quantize(x, 0.0625, 3), 0.0625, 3);
    let c = if reshape { g.reshape(a, &[1, 3, 4, 4]) } else { g.to_format(a, reference::MemoryFormat::Contiguous) };
    let b = g.dequantize(g.quantize(c, 0.125, -1), 0.125, -1);
    let m = g.mean(b, &[-1], true);
    let y = g.dequantize(g.quantize(m, 0.0625, 1), 0.0625, 1);
    finish(g, &[y])
}

fn bf16_gap() -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::bf16(&[1, 8, 6, 6]));
    let m = g.mean(x, &[2, 3], true);
    finish(g, &[m])
}

/// `(-1 * mean(y, [1])) + y` of a conv output `y`: the NHWC operand of the add second.
fn sub_mean_swapped() -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", TensorSpec::f32(&[1, 3, 6, 6]));
    let w = g.constant(Tensor::f32(&[8, 3, 1, 1], vec![0.01; 24]));
    let y = g.conv2d(x, w, None, Conv2dParams::default());
    let m = g.mean(y, &[1], true);
    let neg = g.mul(m, g.constant(Tensor::f32(&[], vec![-1.0])));
    let out = g.add(neg, y);
    finish(g, &[out])
}

/// Lowering outcome as comparable text: the error, or summary plus every XNNPACK graph.
fn outcome(g: &Graph, mode: LoweringMode) -> String {
    match lower_with(g, &LowerOptions { mode, enable_bf16: true }) {
        Ok(p) => format!("{:?}", p.steps) + &p.summary.to_string(),
        Err(e) => format!("error: {e}"),
    }
}

#[test]
fn every_lowering_mutant_changes_its_trigger() {
    use LoweringMode::*;
    let cases: Vec<(Mutant, Graph, LoweringMode)> = vec![
        (Mutant::LookThroughRankSlice, qs8_cl_mean(), StaticMean),
        (Mutant::GapAsStaticMean, conv_mean(&[2, 3]), Main),
        (Mutant::NhwcIntoStaticMean, conv_mean(&[1]), StaticMean),
        (Mutant::GapRankFromInput, lone_mean(&[2, 3], true, None), Main),
        (Mutant::NoDtypeArgCheck, lone_mean(&[-1], true, Some(ElemType::F32)), StaticMean),
        (Mutant::SizeCutoff8192, lone_mean(&[3], true, None), StaticMean),
        (Mutant::EmptyDimsNotExpanded, lone_mean(&[], true, None), StaticMean),
        (Mutant::NegativeDimsNotNormalized, lone_mean(&[-1], true, None), StaticMean),
        (Mutant::KeepdimIgnored, lone_mean(&[3], false, None), StaticMean),
        (Mutant::Bf16TakesGap, bf16_gap(), StaticMean),
        (Mutant::RequantCopyFolded, qs8_requant_mean(false), StaticMean),
        (Mutant::RequantReshapeGrouped, qs8_requant_mean(true), StaticMean),
        (Mutant::ConvergeSecondOperand, sub_mean_swapped(), StaticMean),
    ];
    for (m, g, mode) in cases {
        set_active(None);
        let clean = outcome(&g, mode);
        set_active(Some(m));
        let mutated = outcome(&g, mode);
        set_active(None);
        assert_ne!(clean, mutated, "{m:?} has no effect on its trigger");
        // With the feature on but the mutant off, lowering is the plain one.
        assert_eq!(outcome(&g, mode), clean, "{m:?}");
    }
    let s = lower_with(&conv_mean(&[2, 3]), &LowerOptions::new(Main)).unwrap().summary;
    assert!(s.count("XNNGlobalAvgPool").is_err());
    set_active(Some(Mutant::UnknownNameCountsZero));
    assert_eq!(s.count("XNNGlobalAvgPool"), Ok(0));
    set_active(None);
}
