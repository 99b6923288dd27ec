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

use super::Verdict;
use crate::case::Case;
use crate::patterns::Built;
use delegate::program::{Step, Summary};
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::Pattern;
    use crate::patterns;

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
