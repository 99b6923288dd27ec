//! The errors oracle: the delegate and the reference accept and reject the same graphs and
//! the same runs, and reject them with the same [`ErrorClass`].
//!
//! Graph-level defects (every [`InvalidKind`] but `dynamic_above_bound`) must make lowering
//! fail; run-level ones (a dynamic size above its bound) must make the run fail; a valid case
//! must lower, prepare and run in every mode. Failure kinds: `reference_rejects_valid`,
//! `reference_accepts_invalid`, `delegate_rejects_valid`, `delegate_accepts_invalid`,
//! `class_mismatch`, `prepare_failed`, `delegate_run_rejects`, `delegate_run_accepts`.

use super::{RefRun, Verdict};
use crate::case::{Case, InvalidKind};
use crate::engine::EngineError;
use delegate::LoweringMode;
use reference::graph::ErrorClass;

/// Whether the case's defect is in the graph itself (caught at lowering).
pub fn graph_invalid(case: &Case) -> bool {
    matches!(case.invalid, Some(k) if k != InvalidKind::DynamicAboveBound)
}

/// The class the reference gave (the first run's error).
fn reference_class(runs: &[RefRun]) -> Option<Option<ErrorClass>> {
    runs.iter().find_map(|r| r.outputs.as_ref().err().map(|e| e.class))
}

/// The reference rejects exactly the invalid cases.
pub fn reference_verdict(case: &Case, runs: &[RefRun]) -> Verdict {
    let rejected = runs.iter().find_map(|r| r.outputs.as_ref().err());
    match (case.invalid, rejected) {
        (None, None) | (Some(_), Some(_)) => Verdict::Pass,
        (None, Some(e)) => Verdict::fail("reference_rejects_valid", format!("the reference rejects a valid case: {e}")),
        (Some(k), None) => {
            Verdict::fail("reference_accepts_invalid", format!("the reference accepts a case made invalid by {k:?}"))
        }
    }
}

/// Lowering failed: right only for a graph-level defect, and with the reference's class.
///
/// One exception, by design: `StaticMean` reproduces the change as merged, whose layout
/// guard raises at lowering time when a mean and a conv share one dequantize (review
/// findings B1/B2; ExecuTorch raises there too). That is skipped with its reason in
/// `StaticMean`; the same error in `Main` or `NhwcAware` is a failure.
pub fn lower_verdict(case: &Case, runs: &[RefRun], mode: LoweringMode, e: &EngineError) -> Verdict {
    if e.unavailable {
        return Verdict::Skip(e.message.clone());
    }
    if !graph_invalid(case) && mode == LoweringMode::StaticMean && e.message.contains("internal layout error") {
        return Verdict::Skip(format!("the merged change's layout guard (B1), as in ExecuTorch: {}", e.message));
    }
    if !graph_invalid(case) {
        return Verdict::fail("delegate_rejects_valid", format!("lowering rejects a valid graph: {e}"));
    }
    match reference_class(runs) {
        Some(want) if want == e.class => Verdict::Pass,
        Some(want) => Verdict::fail(
            "class_mismatch",
            format!("reference rejects with class {want:?}, lowering with {:?}: {e}", e.class),
        ),
        None => Verdict::Skip("the reference accepted it (reported by the reference check)".into()),
    }
}

/// Lowering succeeded: wrong for a graph-level defect.
pub fn accepted_verdict(case: &Case) -> Option<Verdict> {
    graph_invalid(case).then(|| {
        Verdict::fail(
            "delegate_accepts_invalid",
            format!(
                "lowering accepted a graph made invalid by {:?}",
                case.invalid.unwrap_or(InvalidKind::DimOutOfRange)
            ),
        )
    })
}
