//! NhwcAware's last choice for one partition: its own layout or StaticMean's, whichever has
//! fewer transposes. Its rule (a non-GAP mean reads an NHWC input in place) saves the copy
//! before that mean, but the converge rule downstream can then pick NHWC for ops StaticMean
//! kept NCHW, and pay more copies later than it saved (random graphs found it: 6 transposes
//! against StaticMean's 5, `corpora/regressions/structure-random-nhwc-aware-*.json`; the plan's mode is replaced by StaticMean for the second try). Both
//! lowerings compute the partition's values; taking the one with fewer transposes keeps the
//! mode's promise, never more transposes than StaticMean.

use crate::xnn::{XNodeKind, XnnGraph};

/// `XNNStaticTranspose` nodes of a payload (the summary's `transposes`).
pub(crate) fn transposes(g: &XnnGraph) -> usize {
    g.nodes.iter().filter(|n| matches!(n.kind, XNodeKind::StaticTranspose { .. })).count()
}

/// `own` unless `other` (StaticMean's lowering of the same partition) has fewer transposes.
pub(crate) fn fewest<E>(own: XnnGraph, other: impl FnOnce() -> Result<XnnGraph, E>) -> XnnGraph {
    match other() {
        Ok(o) if transposes(&o) < transposes(&own) => o,
        _ => own,
    }
}
