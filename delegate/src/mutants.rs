//! Seeded bugs for `harness mutants` (compiled only with the `mutants` feature).
//!
//! One mutant is active at a time, chosen at run time with [`set_active`]. Each module
//! plants its own mutants behind `#[cfg(feature = "mutants")]` and asks [`is_active`].

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mutant {
    /// Layout: the q/dq look-through tests a lower-rank slice, so a quantized channels_last input reads as NCHW.
    LookThroughRankSlice,
    /// Lowering: the GAP case goes through a static mean with extra transposes.
    GapAsStaticMean,
    /// Layout: a non-GAP mean receives an NHWC input with no copy.
    NhwcIntoStaticMean,
    /// Layout: the GAP check reads the rank from an inserted node without shape information.
    GapRankFromInput,
    /// Partitioner: the dtype-argument check is removed.
    NoDtypeArgCheck,
    /// Partitioner: an 8192-element cut-off leaves small multi-output means outside.
    SizeCutoff8192,
    /// Lowering: an empty dims list is not expanded to all dims.
    EmptyDimsNotExpanded,
    /// Lowering: negative dims are not normalized.
    NegativeDimsNotNormalized,
    /// Lowering: keepdim is ignored in the output shape.
    KeepdimIgnored,
    /// Runtime: the mean divides by the wrong count.
    WrongDivisor,
    /// Runtime: the last partial SIMD vector of a row is dropped.
    DropSimdTail,
    /// Runtime: the thread split drops or repeats the last chunk at some thread counts.
    ThreadSplitLastChunk,
    /// Runtime: a SIMD path does not propagate NaN.
    SimdNanDropped,
    /// Runtime: qs8 requantization rounds half away from zero.
    Qs8RoundHalfAway,
    /// Runtime: fp16 means accumulate in fp16.
    Fp16AccumulateInFp16,
    /// Serializer: value ids follow a hash order.
    HashOrderValueIds,
    /// Serializer: XNNStaticMean inserted in the middle of the node union.
    StaticMeanMidUnion,
    /// Summary: the node counter treats an unknown type name as zero.
    UnknownNameCountsZero,
    /// Lowering: a bf16 mean takes the GAP path.
    Bf16TakesGap,
    /// Layout: the redundant-copy pass folds `dq -> to_copy -> q` without comparing the
    /// quantization on each side (as ExecuTorch's `RemoveRedundantCopyPass` does).
    RequantCopyFolded,
    /// Partitioner: `dq -> reshape -> q` with different parameters becomes one qs8 reshape.
    RequantReshapeGrouped,
}

impl Mutant {
    pub const ALL: [Mutant; 21] = [
        Mutant::LookThroughRankSlice,
        Mutant::GapAsStaticMean,
        Mutant::NhwcIntoStaticMean,
        Mutant::GapRankFromInput,
        Mutant::NoDtypeArgCheck,
        Mutant::SizeCutoff8192,
        Mutant::EmptyDimsNotExpanded,
        Mutant::NegativeDimsNotNormalized,
        Mutant::KeepdimIgnored,
        Mutant::WrongDivisor,
        Mutant::DropSimdTail,
        Mutant::ThreadSplitLastChunk,
        Mutant::SimdNanDropped,
        Mutant::Qs8RoundHalfAway,
        Mutant::Fp16AccumulateInFp16,
        Mutant::HashOrderValueIds,
        Mutant::StaticMeanMidUnion,
        Mutant::UnknownNameCountsZero,
        Mutant::Bf16TakesGap,
        Mutant::RequantCopyFolded,
        Mutant::RequantReshapeGrouped,
    ];

    pub fn name(self) -> String {
        serde_json::to_value(self).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
    }
}

// 0 = none; otherwise index + 1 into `Mutant::ALL`.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Activates one mutant for the whole process (or none).
pub fn set_active(m: Option<Mutant>) {
    let v = m.and_then(|m| Mutant::ALL.iter().position(|x| *x == m)).map_or(0, |i| i + 1);
    ACTIVE.store(v, Ordering::SeqCst);
}

pub fn active() -> Option<Mutant> {
    let v = ACTIVE.load(Ordering::Relaxed);
    v.checked_sub(1).map(|i| Mutant::ALL[i])
}

#[inline]
pub fn is_active(m: Mutant) -> bool {
    active() == Some(m)
}
