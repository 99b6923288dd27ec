//! Seeded bugs for `harness mutants`.
//!
//! One mutant is active at a time, chosen at run time with [`set_active`] (only with the
//! `mutants` feature). Each module plants its own mutants and asks [`is_active`] with a
//! [`Mutant`] variant, so a misspelt mutant does not compile with the feature on or off;
//! with it off, [`is_active`] is a constant `false` and the seeded branches compile away.

use serde::{Deserialize, Serialize};
#[cfg(feature = "mutants")]
use std::sync::atomic::{AtomicUsize, Ordering};

/// Declares [`Mutant`] and [`Mutant::ALL`] from one list, so `ALL` holds every variant.
macro_rules! mutants {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Mutant {
            $($(#[doc = $doc])* $name,)*
        }

        impl Mutant {
            /// Every mutant, in declaration order.
            pub const ALL: [Mutant; [$(stringify!($name)),*].len()] = [$(Mutant::$name),*];
        }
    };
}

mutants! {
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
    /// Runtime: a mean with fewer outputs than threads splits each output's rows and adds
    /// only the first two partial sums (right at 2 threads, wrong at 3 or more).
    MeanSplitThreePlus,
    /// Runtime: fp32 -> bf16 conversion truncates instead of rounding to nearest even.
    Bf16Truncates,
    /// Layout: the converge rule asks only the first operand whether any input is NHWC, as
    /// if the NHWC one always came first (`y - mean(y)`, `x * r`): with it second, the op
    /// stays NCHW and the repair converts the NHWC operand (other transposes, same values).
    ConvergeSecondOperand,
    /// Runtime: a transpose that keeps the innermost dim copies its rows in input order, as
    /// if rows that stay contiguous also stayed in place.
    PermuteKeepsInnermost,
}

impl Mutant {
    pub fn name(self) -> String {
        serde_json::to_value(self).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
    }
}

// 0 = none; otherwise index + 1 into `Mutant::ALL`.
#[cfg(feature = "mutants")]
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Activates one mutant for the whole process (or none).
#[cfg(feature = "mutants")]
pub fn set_active(m: Option<Mutant>) {
    let v = m.and_then(|m| Mutant::ALL.iter().position(|x| *x == m)).map_or(0, |i| i + 1);
    ACTIVE.store(v, Ordering::SeqCst);
}

#[cfg(feature = "mutants")]
pub fn active() -> Option<Mutant> {
    let v = ACTIVE.load(Ordering::Relaxed);
    v.checked_sub(1).map(|i| Mutant::ALL[i])
}

#[cfg(feature = "mutants")]
#[inline]
pub fn is_active(m: Mutant) -> bool {
    active() == Some(m)
}

/// Without the `mutants` feature no mutant is ever active.
#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub const fn is_active(_m: Mutant) -> bool {
    false
}
