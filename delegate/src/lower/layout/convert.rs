//! Layout conversions: a `_to_copy` into NHWC or NCHW for one reader, reused through
//! partners and wrapped in implicit q/dq around quantized values; a pinned constant is
//! cloned instead.

use super::ir::{eager_nhwc, Ins, Kind, PGraph, Tag, Target};
use crate::lower::LowerError;
use reference::graph::{Graph, NodeId, TensorSpec};
use reference::ElemType;
use std::borrow::Cow;

/// A constant already pinned to the other layout: ExecuTorch asserts; we give this use
/// its own copy of the constant, pinned to the layout it needs (bytes permuted at
/// serialization, never a runtime copy).
pub(super) fn clone_param(pg: &mut PGraph, x: usize, target: Target, nhwc: bool) {
    let mut n = pg.nodes[x].clone();
    n.tag = Tag::of(nhwc);
    n.partner = None;
    pg.nodes.push(n);
    let k = pg.nodes.len() - 1;
    pg.insert_after(x, k);
    pg.replace_input(target, x, k);
}

pub(super) fn node_id_for_error(pg: &PGraph, i: usize) -> NodeId {
    pg.graph_node(i).unwrap_or(usize::MAX)
}

pub(super) fn input_to_nhwc(pg: &mut PGraph, g: &Graph, x: usize, target: Target) -> Result<(), LowerError> {
    if pg.is_param(x) {
        if pg.nodes[x].tag == Tag::Nchw {
            if pg.nodes[x].spec.rank() != 4 {
                return Err(LowerError::InternalLayout {
                    node: node_id_for_error(pg, x),
                    reason: "a non-4-D constant cannot be made NHWC".into(),
                });
            }
            clone_param(pg, x, target, true);
            return Ok(());
        }
        pg.nodes[x].tag = Tag::Nhwc;
        return Ok(());
    }
    if pg.is_placeholder(x) {
        if eager_nhwc(&pg.nodes[x].spec) {
            return Ok(());
        }
    } else if pg.is_nhwc(x, g) {
        return Ok(());
    }
    if !pg.can_be_nhwc(x, g) {
        return Err(LowerError::InternalLayout {
            node: node_id_for_error(pg, x),
            reason: format!("a rank-{} value cannot be converted to NHWC", pg.nodes[x].spec.rank()),
        });
    }
    let copy = match pg.nodes[x].partner {
        Some(p) => p,
        None => new_copy(pg, x, true),
    };
    insert_copy(pg, g, x, copy, target);
    Ok(())
}

pub(super) fn input_to_nchw(pg: &mut PGraph, g: &Graph, x: usize, target: Target) -> Result<(), LowerError> {
    if pg.is_param(x) {
        if pg.nodes[x].tag.is_nhwc() {
            clone_param(pg, x, target, false);
            return Ok(());
        }
        pg.nodes[x].tag = Tag::Nchw;
        return Ok(());
    }
    if pg.is_placeholder(x) {
        if !eager_nhwc(&pg.nodes[x].spec) {
            return Ok(());
        }
    } else if !pg.is_nhwc(x, g) {
        return Ok(());
    }
    let copy = match pg.nodes[x].partner {
        Some(p) => p,
        None => new_copy(pg, x, false),
    };
    insert_copy(pg, g, x, copy, target);
    Ok(())
}

pub(super) fn new_copy(pg: &mut PGraph, x: usize, nhwc: bool) -> usize {
    let spec = pg.nodes[x].spec.clone();
    let k = pg.push(Kind::Copy { nhwc }, Ins::from_slice(&[x]), spec, crate::xnn::DEFAULT_DEBUG_HANDLE);
    pg.nodes[k].tag = Tag::of(nhwc);
    pg.insert_after(x, k);
    k
}

/// `insert_copy_and_assign_partner_nodes_quantization_sensitive`.
fn insert_copy(pg: &mut PGraph, g: &Graph, x: usize, copy: usize, target: Target) {
    let qp = pg.qparams(x, g);
    let tag = pg.nodes[copy].tag;
    let handle = crate::xnn::DEFAULT_DEBUG_HANDLE;
    if let (true, Some(qp)) = (pg.is_dequant(x, g), qp) {
        // dq_old -> copy -> q_new -> dq_new; every user of dq_old moves to dq_new.
        let qspec = TensorSpec { dtype: ElemType::Qs8, quant: Some(qp), ..pg.nodes[copy].spec.as_ref().clone() };
        let q = pg.push(Kind::Quant(qp), Ins::from_slice(&[copy]), Cow::Owned(qspec), handle);
        pg.nodes[q].tag = tag;
        pg.nodes[q].implicit = true;
        pg.insert_after(copy, q);
        let dspec = TensorSpec { dtype: ElemType::F32, quant: None, ..pg.nodes[copy].spec.as_ref().clone() };
        let dq = pg.push(Kind::Dequant(qp), Ins::from_slice(&[q]), Cow::Owned(dspec), handle);
        pg.nodes[dq].tag = tag;
        pg.insert_after(q, dq);
        if pg.nodes[x].implicit {
            pg.nodes[dq].implicit = true;
        }
        pg.nodes[x].implicit = true;
        pg.replace_all_uses(x, dq);
        pg.replace_input(Target::Node(copy), dq, x);
    } else if let (true, Some(qp)) = (pg.is_quant(x, g), qp) {
        // q_old -> dq_new -> copy -> q_new -> target, both new nodes implicit.
        let dspec = TensorSpec { dtype: ElemType::F32, quant: None, ..pg.nodes[x].spec.as_ref().clone() };
        let dq = pg.push(Kind::Dequant(qp), Ins::from_slice(&[x]), Cow::Owned(dspec), handle);
        pg.nodes[dq].tag = pg.nodes[x].tag;
        pg.nodes[dq].implicit = true;
        pg.insert_after(x, dq);
        let qspec = TensorSpec { dtype: ElemType::Qs8, quant: Some(qp), ..pg.nodes[copy].spec.as_ref().clone() };
        let q = pg.push(Kind::Quant(qp), Ins::from_slice(&[copy]), Cow::Owned(qspec), handle);
        pg.nodes[q].tag = tag;
        pg.nodes[q].implicit = true;
        pg.insert_after(copy, q);
        pg.nodes[copy].spec =
            Cow::Owned(TensorSpec { dtype: ElemType::F32, quant: None, ..pg.nodes[copy].spec.as_ref().clone() });
        pg.replace_input(Target::Node(copy), x, dq);
        pg.replace_input(target, x, q);
    } else {
        pg.replace_input(target, x, copy);
        pg.nodes[x].partner = Some(copy);
        pg.nodes[copy].partner = Some(x);
    }
}
