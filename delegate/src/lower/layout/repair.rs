//! Our repairs after the pass: an input rewired by `replace_all_uses_with` into a layout
//! its reader was not planned for, and an output not in the layout its slot holds, get a
//! copy for that one reader.

use super::convert::{clone_param, new_copy, node_id_for_error};
use super::ir::{Ins, Kind, PGraph, Tag, Target};
use super::tag::gap_in_pass;
use crate::lower::LowerError;
use crate::LoweringMode;
use reference::graph::{Graph, Op, TensorSpec};
use reference::ElemType;
use std::borrow::Cow;

/// Rewires one reader: a node's every use of `old`, or a single output entry.
fn replace_one(pg: &mut PGraph, target: Target, old: usize, new: usize) {
    match target {
        Target::OutputAt(k) => {
            if pg.outputs.get(k) == Some(&old) {
                pg.outputs[k] = new;
            }
        }
        t => pg.replace_input(t, old, new),
    }
}

/// After `replace_all_uses_with` moved the users of a dequantize onto the new one, an op
/// processed earlier can read a value in a layout it was not planned for. ExecuTorch
/// re-checks only binary ops (above); there a conv would read NCHW data under NHWC dims
/// and a unary op would mix layouts. Those programs never worked, so converting the
/// input back into the op's layout changes no program ExecuTorch lowers correctly. A
/// non-GAP mean is left to the visitor's guard, as merged (a typed error).
/// A copy of `x` into the layout `target` needs, rewiring `target` alone (never
/// `replace_all_uses_with`, which is how the mismatch arose). An implicit dequantize keeps
/// the copy on the int8 value inside an implicit q/dq pair.
fn repair_convert(pg: &mut PGraph, g: &Graph, x: usize, target: Target, nhwc: bool) -> Result<(), LowerError> {
    if pg.is_param(x) {
        clone_param(pg, x, target, nhwc);
        return Ok(());
    }
    if nhwc && pg.nodes[x].spec.rank() != 4 {
        return Err(LowerError::InternalLayout {
            node: node_id_for_error(pg, x),
            reason: format!("a rank-{} value cannot be converted to NHWC", pg.nodes[x].spec.rank()),
        });
    }
    let copy = new_copy(pg, x, nhwc);
    let wrap = if pg.is_dequant(x, g) && pg.nodes[x].implicit { pg.qparams(x, g) } else { None };
    match wrap {
        Some(qp) => {
            let handle = crate::xnn::DEFAULT_DEBUG_HANDLE;
            let qspec = TensorSpec { dtype: ElemType::Qs8, quant: Some(qp), ..pg.nodes[copy].spec.as_ref().clone() };
            let q = pg.push(Kind::Quant(qp), Ins::from_slice(&[copy]), Cow::Owned(qspec), handle);
            pg.nodes[q].tag = Tag::of(nhwc);
            pg.nodes[q].implicit = true;
            pg.insert_after(copy, q);
            let dspec = TensorSpec { dtype: ElemType::F32, quant: None, ..pg.nodes[copy].spec.as_ref().clone() };
            let dq = pg.push(Kind::Dequant(qp), Ins::from_slice(&[q]), Cow::Owned(dspec), handle);
            pg.nodes[dq].tag = Tag::of(nhwc);
            pg.nodes[dq].implicit = true;
            pg.insert_after(q, dq);
            replace_one(pg, target, x, dq);
        }
        None => replace_one(pg, target, x, copy),
    }
    Ok(())
}

pub(super) fn repair_rewired_inputs(pg: &mut PGraph, g: &Graph) -> Result<(), LowerError> {
    let order = pg.order_snapshot();
    for &i in &order {
        if !pg.nodes[i].alive || pg.nodes[i].inputs.is_empty() || pg.nodes[i].implicit {
            continue;
        }
        if matches!(pg.nodes[i].kind, Kind::Copy { .. }) || pg.is_format_copy(i, g) {
            continue;
        }
        let Some(op) = pg.op(i, g) else { continue };
        // The layout each input must have: Some(layout) for the first input only, or for all.
        let (want, first_only) = match op {
            Op::Conv2d(_) => (Some(true), true),
            Op::Mean { .. } if gap_in_pass(pg, i, g)? => (Some(true), true),
            Op::Mean { .. } if pg.nodes[i].nhwc_mean => (Some(true), true),
            // As merged, a non-GAP mean handed an NHWC input is the visitor's typed error;
            // NhwcAware, our follow-up, copies it back instead.
            Op::Mean { .. } if pg.mode == LoweringMode::NhwcAware => (Some(false), true),
            Op::Mean { .. } => (None, true),
            Op::Linear | Op::Reshape { .. } => (Some(false), false),
            _ => (Some(pg.nodes[i].tag.is_nhwc()), false),
        };
        let Some(want) = want else { continue };
        let first = [pg.nodes[i].inputs[0]];
        let all;
        let inputs: &[usize] = if first_only {
            &first
        } else {
            all = pg.input_nodes(i);
            &all
        };
        for &x in inputs {
            if pg.actual_nhwc(x, g) != want && !(pg.is_param(x) && !want && pg.nodes[x].spec.rank() != 4) {
                repair_convert(pg, g, x, Target::Node(i), want)?;
            }
        }
    }
    pg.spare = order;
    Ok(())
}

/// Every hand-off leaves in the layout its slot holds, whatever the rewiring did.
pub(super) fn repair_outputs(pg: &mut PGraph, g: &Graph) -> Result<(), LowerError> {
    for k in 0..pg.outputs.len() {
        let o = pg.outputs[k];
        if pg.actual_nhwc(o, g) != pg.out_nhwc[k] {
            repair_convert(pg, g, o, Target::OutputAt(k), pg.out_nhwc[k])?;
        }
    }
    Ok(())
}
