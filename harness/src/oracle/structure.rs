//! The structure oracle: each lowering mode's summary obeys that mode's rules.
//!
//! In every mode the summary agrees with the program it describes (delegate count, node
//! counts recounted from the segments: `summary_inconsistent`), and every GAP-eligible mean
//! that is delegated is an `XNNGlobalAvgPooling2d` (`gap_not_gap`, review finding B7).
//! - `Main`: only GAP means are lowered: no `XNNStaticMean` (`main_static_mean`), every other
//!   mean stays outside (`main_lowers_non_gap`), every GAP-eligible mean is delegated
//!   (`gap_outside`).
//! - `StaticMean`: no supported mean (fp32/fp16/bf16 input, no dtype argument, rank 1 to 6,
//!   not channels_last_3d) is left outside (`mean_outside`), and each non-GAP one is one `XNNStaticMean`
//!   (`static_mean_count`).
//! - `NhwcAware`: the `StaticMean` rules, and never more transposes than `StaticMean`
//!   (`more_transposes`).
//!
//! In every mode a delegated permute is exactly one `XNNStaticTranspose` under its debug
//! handle, whose perm is the graph's in the layout its input value has: the same perm on
//! NCHW dims, or on NHWC dims of a 4-D value `q[i] = nhwc_inv[p[nhwc[i]]]`
//! (`permute_transpose`).

use super::Verdict;
use crate::case::Case;
use crate::patterns::Built;
use delegate::program::{Step, Summary};
use delegate::xnn::XNodeKind;
use delegate::{LoweredProgram, LoweringMode};
use reference::graph::{mean_axes, Graph, NodeId, Op};
use reference::{ElemType, MemoryFormat};
use std::collections::BTreeMap;

/// How the lowering rules see one mean node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MeanInfo {
    pub node: NodeId,
    /// 4-D, dims {2,3}, keepdim, no dtype argument, not bf16.
    pub gap: bool,
    /// Lowered by `StaticMean` (GAP or static mean).
    pub supported: bool,
}

/// Classifies every mean of a graph.
pub fn means(graph: &Graph) -> Vec<MeanInfo> {
    let mut out = vec![];
    for (id, n) in graph.nodes.iter().enumerate() {
        // `to_edge` makes `adaptive_avg_pool2d(x, [1, 1])` this mean (as `lower` does).
        let (dims, keepdim, dtype): (&[i64], bool, Option<ElemType>) = match &n.op {
            Op::Mean { dims, keepdim, dtype } => (dims, *keepdim, *dtype),
            Op::AdaptiveAvgPool2d { .. } => (&[-1, -2], true, None),
            _ => continue,
        };
        let Some(x) = n.inputs.first().and_then(|&i| graph.nodes.get(i)) else { continue };
        let rank = x.spec.rank();
        let axes = mean_axes(dims, rank).unwrap_or_default();
        let float_in = matches!(x.spec.dtype, ElemType::F32 | ElemType::F16 | ElemType::Bf16);
        let gap = rank == 4 && axes == [2, 3] && keepdim && dtype.is_none() && x.spec.dtype != ElemType::Bf16;
        // channels_last_3d tensors are outside the delegate's scope (a generic constraint
        // of every op config, not a mean rule).
        let cl3d = x.spec.format == MemoryFormat::ChannelsLast3d || n.spec.format == MemoryFormat::ChannelsLast3d;
        let supported = float_in && dtype.is_none() && (1..=6).contains(&rank) && !cl3d;
        out.push(MeanInfo { node: id, gap: gap && float_in, supported });
    }
    out
}

/// Node counts recounted from the program's segments.
pub fn recount(program: &LoweredProgram) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for step in &program.steps {
        if let Step::Delegate(seg) = step {
            for n in &seg.graph.nodes {
                *counts.entry(n.kind.type_name().to_string()).or_insert(0) += 1;
            }
        }
    }
    counts
}

fn count(s: &Summary, name: &str) -> usize {
    s.node_counts.get(name).copied().unwrap_or(0)
}

/// The structure verdict of one mode's program. `static_summary` is the `StaticMean`
/// summary of the same graph (for the NhwcAware transpose rule).
pub fn verdict(_case: &Case, built: &Built, program: &LoweredProgram, static_summary: Option<&Summary>) -> Verdict {
    let s = &program.summary;
    let delegates = program.steps.iter().filter(|st| matches!(st, Step::Delegate(_))).count();
    if delegates != s.delegates {
        return Verdict::fail(
            "summary_inconsistent",
            format!("summary says {} delegates, program has {delegates}", s.delegates),
        );
    }
    let recounted = recount(program);
    if recounted != s.node_counts {
        return Verdict::fail(
            "summary_inconsistent",
            format!("summary node counts {:?}, segments hold {:?}", s.node_counts, recounted),
        );
    }
    let infos = means(&built.graph);
    let outside = |m: &MeanInfo| s.outside.iter().any(|o| o.node == m.node);
    let delegated_gap = infos.iter().filter(|m| m.gap && !outside(m)).count();
    let gap_nodes = count(s, "XNNGlobalAvgPooling2d");
    if gap_nodes != delegated_gap {
        return Verdict::fail(
            "gap_not_gap",
            format!("{delegated_gap} GAP-eligible means delegated, {gap_nodes} XNNGlobalAvgPooling2d nodes"),
        );
    }
    if let Some(v) = permute_verdict(&built.graph, program) {
        return v;
    }
    let static_means = count(s, "XNNStaticMean");
    match program.mode {
        LoweringMode::Main => {
            if static_means != 0 {
                return Verdict::fail("main_static_mean", format!("{static_means} XNNStaticMean nodes in Main"));
            }
            if let Some(m) = infos.iter().find(|m| !m.gap && !outside(m)) {
                return Verdict::fail(
                    "main_lowers_non_gap",
                    format!("Main delegated the non-GAP mean at node {}", m.node),
                );
            }
            if let Some(m) = infos.iter().find(|m| m.gap && outside(m)) {
                return Verdict::fail("gap_outside", format!("Main left the GAP mean at node {} outside", m.node));
            }
        }
        LoweringMode::StaticMean | LoweringMode::NhwcAware => {
            if let Some(m) = infos.iter().find(|m| m.supported && outside(m)) {
                let reason = s.outside.iter().find(|o| o.node == m.node).map(|o| o.reason.clone()).unwrap_or_default();
                return Verdict::fail(
                    "mean_outside",
                    format!("{}: the supported mean at node {} stays outside ({reason})", program.mode, m.node),
                );
            }
            let want = infos.iter().filter(|m| m.supported && !m.gap).count();
            if static_means != want {
                return Verdict::fail(
                    "static_mean_count",
                    format!("{}: {want} non-GAP supported means, {static_means} XNNStaticMean nodes", program.mode),
                );
            }
            if program.mode == LoweringMode::NhwcAware {
                if let Some(st) = static_summary {
                    if s.transposes > st.transposes {
                        return Verdict::fail(
                            "more_transposes",
                            format!("NhwcAware has {} transposes, StaticMean {}", s.transposes, st.transposes),
                        );
                    }
                }
            }
        }
    }
    Verdict::Pass
}

/// The `permute_transpose` rule (module docs): a failure, or None.
fn permute_verdict(graph: &Graph, program: &LoweredProgram) -> Option<Verdict> {
    const NHWC: [usize; 4] = [0, 2, 3, 1];
    const NHWC_INV: [usize; 4] = [0, 3, 1, 2];
    let mut handles: Option<Vec<u32>> = None;
    for (id, n) in graph.nodes.iter().enumerate() {
        let Op::Permute { perm } = &n.op else { continue };
        if program.summary.outside.iter().any(|o| o.node == id) {
            continue;
        }
        let Some(x) = n.inputs.first().map(|&i| &graph.nodes[i].spec) else { continue };
        let Ok(p) = reference::graph::normalize_dims(perm, x.rank()) else { continue };
        let handle = handles.get_or_insert_with(|| delegate::lower::debug_handle::assign(graph))[id];
        let mut found = vec![];
        for st in &program.steps {
            let Step::Delegate(seg) = st else { continue };
            for xn in seg.graph.nodes.iter().filter(|xn| xn.debug_handle == handle) {
                if let XNodeKind::StaticTranspose { perm: q, input_id, .. } = &xn.kind {
                    let dims = seg.graph.values.iter().find(|v| v.id_out == *input_id).map(|v| v.dims.clone());
                    found.push((q.clone(), dims));
                }
            }
        }
        let fail = |why: String| {
            Some(Verdict::fail("permute_transpose", format!("{}: permute {p:?} at node {id}: {why}", program.mode)))
        };
        let [(q, dims)] = found.as_slice() else {
            return fail(format!("{} XNNStaticTranspose nodes under its debug handle {handle}", found.len()));
        };
        let logical: Vec<u32> = x.max_shape().iter().map(|&d| d as u32).collect();
        let plain: Vec<u32> = p.iter().map(|&d| d as u32).collect();
        let as_nchw = *q == plain && dims.as_ref() == Some(&logical);
        let as_nhwc = x.rank() == 4 && {
            let phys: Vec<u32> = NHWC.iter().map(|&d| logical[d]).collect();
            let conj: Vec<u32> = NHWC.iter().map(|&d| NHWC_INV[p[d]] as u32).collect();
            *q == conj && dims.as_ref() == Some(&phys)
        };
        if !as_nchw && !as_nhwc {
            return fail(format!("the transpose has perm {q:?} on input dims {dims:?} (logical {logical:?})"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::Pattern;
    use crate::patterns;

    #[test]
    fn a_delegated_permute_is_one_transpose_of_its_perm() {
        // [2,3,4,5] by [0,2,1,3] (param 2 keeps the innermost dim), and a channels_last
        // input by [0,2,3,1] (param 7), whose transpose runs on NHWC dims.
        for (format, param) in [(MemoryFormat::Contiguous, 2), (MemoryFormat::ChannelsLast, 7)] {
            let mut c = Case::new(Pattern::Mean, &[2, 3, 4, 5], &[1, -1], true);
            (c.variant, c.param, c.format) = (patterns::knobs::PERMUTE, param, format);
            let b = patterns::build(&c).unwrap();
            for mode in LoweringMode::ALL {
                let mut p = delegate::lower(&b.graph, mode).unwrap();
                assert_eq!(verdict(&c, &b, &p, None), Verdict::Pass, "{format:?} {mode}");
                // The same node with another perm breaks the rule, and only it.
                let handle = delegate::lower::debug_handle::assign(&b.graph)[1];
                let mut changed = 0;
                for st in &mut p.steps {
                    let Step::Delegate(seg) = st else { continue };
                    for xn in seg.graph.nodes.iter_mut().filter(|n| n.debug_handle == handle) {
                        if let XNodeKind::StaticTranspose { perm, .. } = &mut xn.kind {
                            perm.swap(0, 1);
                            changed += 1;
                        }
                    }
                }
                assert_eq!(changed, 1, "{format:?} {mode}");
                let v = verdict(&c, &b, &p, None);
                assert!(matches!(&v, Verdict::Fail { kind, .. } if kind == "permute_transpose"), "{v:?}");
            }
        }
    }

    #[test]
    fn means_are_classified_like_the_partitioner_rules() {
        let gap = patterns::build(&Case::new(Pattern::Gap, &[1, 2, 3, 3], &[], true)).unwrap();
        assert_eq!(means(&gap.graph).iter().map(|m| (m.gap, m.supported)).collect::<Vec<_>>(), vec![(true, true)]);
        let rms = patterns::build(&Case::new(Pattern::RmsNorm, &[2, 8], &[], true)).unwrap();
        assert_eq!(means(&rms.graph).iter().map(|m| (m.gap, m.supported)).collect::<Vec<_>>(), vec![(false, true)]);
        let mut c = Case::new(Pattern::Mean, &[1, 2, 3, 3], &[2, 3], true);
        c.dtype = ElemType::F16;
        c.mean_dtype = Some(ElemType::F32);
        let b = patterns::build(&c).unwrap();
        assert_eq!(means(&b.graph).iter().map(|m| (m.gap, m.supported)).collect::<Vec<_>>(), vec![(false, false)]);
        let mut c = Case::new(Pattern::Mean, &[1, 2, 3, 3], &[-1, -2], true);
        c.dtype = ElemType::Bf16;
        let b = patterns::build(&c).unwrap();
        assert_eq!(means(&b.graph).iter().map(|m| (m.gap, m.supported)).collect::<Vec<_>>(), vec![(false, true)]);
    }
}
