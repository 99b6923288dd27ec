//! `ChannelsLastTaggedReshapePass`'s main loop: each node's layout class, the copies its
//! inputs need, its tag; then each output handed off in its eager layout.

use super::converge::converge;
use super::convert::{input_to_nchw, input_to_nhwc};
use super::ir::{eager_nhwc, Kind, PGraph, Tag, Target};
use crate::lower::partition::is_gap;
use crate::lower::LowerError;
use crate::mutants::{is_active, Mutant};
use crate::LoweringMode;
use reference::graph::{mean_axes, Graph, Op, TensorSpec};
use reference::MemoryFormat;

/// Layout class of a node for the main loop.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Class {
    Nhwc,
    Nchw,
    FormatCopy,
    /// NhwcAware: a non-GAP mean reading an NHWC input in place.
    NhwcMean {
        keep: bool,
    },
    Agnostic,
}

/// Whether a mean over `axes` of an NHWC [N,H,W,C] tensor without keepdim leaves the
/// kept dims in NCHW order (then its output is plain NCHW with no copy).
pub(crate) fn kept_order_preserved(axes: &[usize]) -> bool {
    let kept_phys: Vec<usize> = [0usize, 2, 3, 1].into_iter().filter(|d| !axes.contains(d)).collect();
    kept_phys.windows(2).all(|w| w[0] < w[1])
}

/// Whether the pass treats this mean as GAP (reads the rank from the mean's own output;
/// the `GapRankFromInput` mutant reads it from the input, which for an inserted node
/// has no shape: ExecuTorch's KeyError).
pub(super) fn gap_in_pass(pg: &PGraph, i: usize, g: &Graph) -> Result<bool, LowerError> {
    let Some(op) = pg.op(i, g) else { return Ok(false) };
    if is_active(Mutant::GapRankFromInput) {
        if let Some(&x) = pg.nodes[i].inputs.first() {
            if matches!(pg.nodes[x].kind, Kind::Copy { .. } | Kind::Quant(_) | Kind::Dequant(_)) {
                return Err(LowerError::Internal {
                    reason: "mean input has no shape metadata (KeyError 'val')".into(),
                });
            }
        }
    }
    Ok(treated_as_gap(op, &pg.nodes[i].spec))
}

/// A mean the pass lowers as GAP in every mode.
fn treated_as_gap(op: &Op, out: &TensorSpec) -> bool {
    is_gap(op, out) && !is_active(Mutant::GapAsStaticMean)
}

/// Whether the pass and the visitors read the lowering mode at this op: only at a mean
/// they do not treat as GAP (`class`, `repair_rewired_inputs`, and `nhwc_mean` in the
/// visitors). A subgraph without such a mean lowers the same in every mode.
pub(crate) fn reads_mode(op: &Op, out: &TensorSpec) -> bool {
    matches!(op, Op::Mean { .. }) && !treated_as_gap(op, out)
}

fn class(pg: &PGraph, i: usize, g: &Graph) -> Result<Class, LowerError> {
    let n = &pg.nodes[i];
    if let Kind::Copy { .. } = n.kind {
        return Ok(Class::FormatCopy);
    }
    let Some(op) = pg.op(i, g) else { return Ok(Class::Agnostic) };
    Ok(match op {
        Op::Conv2d(_) => Class::Nhwc,
        Op::Mean { dims, keepdim, .. } => {
            if gap_in_pass(pg, i, g)? {
                Class::Nhwc
            } else if is_active(Mutant::NhwcIntoStaticMean) {
                Class::Agnostic
            } else {
                let x = n.inputs[0];
                let xs = &pg.nodes[x].spec;
                let axes = mean_axes(dims, xs.rank()).unwrap_or_default();
                if pg.mode == LoweringMode::NhwcAware
                    && xs.rank() == 4
                    && pg.is_nhwc(x, g)
                    && !pg.is_copy_of_nchw(x, g)
                    && (*keepdim || kept_order_preserved(&axes))
                {
                    Class::NhwcMean { keep: *keepdim }
                } else {
                    Class::Nchw
                }
            }
        }
        Op::Linear | Op::Reshape { .. } => Class::Nchw,
        Op::ToCopy { .. } if pg.is_format_copy(i, g) => Class::FormatCopy,
        _ => Class::Agnostic,
    })
}

/// Tags every node in graph order, inserting the copies its inputs need, then converts
/// each output into the layout its slot holds.
pub(super) fn tag_nodes(pg: &mut PGraph, g: &Graph) -> Result<(), LowerError> {
    let snapshot = pg.order_snapshot();
    for &i in &snapshot {
        if !pg.nodes[i].alive {
            continue;
        }
        if pg.nodes[i].inputs.is_empty() {
            if pg.nodes[i].spec.rank() == 4 {
                pg.nodes[i].tag = Tag::of(eager_nhwc(&pg.nodes[i].spec));
            }
            continue;
        }
        match class(pg, i, g)? {
            Class::Nhwc => {
                let x = pg.nodes[i].inputs[0];
                input_to_nhwc(pg, g, x, Target::Node(i))?;
                pg.nodes[i].tag = Tag::Nhwc;
            }
            Class::Nchw => {
                for &x in &pg.input_nodes(i) {
                    input_to_nchw(pg, g, x, Target::Node(i))?;
                }
            }
            Class::FormatCopy => {
                let nhwc = match pg.nodes[i].kind {
                    Kind::Copy { nhwc } => nhwc,
                    _ => pg.nodes[i].spec.format == MemoryFormat::ChannelsLast,
                };
                pg.nodes[i].tag = Tag::of(nhwc);
            }
            Class::NhwcMean { keep } => {
                pg.nodes[i].nhwc_mean = true;
                pg.nodes[i].tag = if keep { Tag::Nhwc } else { Tag::Untagged };
            }
            Class::Agnostic => converge(pg, g, i, false)?,
        }
    }
    // The outputs as they were before this loop rewires any of them.
    let mut outs = snapshot;
    outs.clear();
    outs.extend_from_slice(&pg.outputs);
    for (k, &o) in outs.iter().enumerate() {
        if pg.out_nhwc[k] {
            input_to_nhwc(pg, g, o, Target::Output)?;
        } else {
            input_to_nchw(pg, g, o, Target::Output)?;
        }
    }
    pg.spare = outs;
    for n in &mut pg.nodes {
        n.partner = None;
    }
    Ok(())
}
