//! The delegate under test: lowering of a [`reference::Graph`] to XNNPACK-style
//! programs in three [`LoweringMode`]s, ExecuTorch-compatible serialization, and a
//! threaded SIMD runtime.
//!
//! `unsafe` is denied here and allowed only in `runtime::simd` (the kernels), the pool's job
//! erasure (`runtime::pool::job`) and the generated flatbuffers code.

#![deny(unsafe_code)]

pub mod lower;
pub mod mutants;
pub mod program;
pub mod runtime;
pub mod serialize;
pub mod xnn;

pub use lower::{lower, lower_modes, lower_with, LowerError, LowerOptions};
pub use program::{LoweredProgram, Summary};

/// Which lowering of `mean.dim` to reproduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum LoweringMode {
    /// Before the change: a mean lowers only as Global Average Pooling.
    Main,
    /// The change as merged: every other mean lowers to an NCHW static mean.
    StaticMean,
    /// Our follow-up: a mean on an NHWC-tagged input remaps its axes instead of copying.
    NhwcAware,
}

impl LoweringMode {
    pub const ALL: [LoweringMode; 3] = [LoweringMode::Main, LoweringMode::StaticMean, LoweringMode::NhwcAware];

    pub fn name(self) -> &'static str {
        match self {
            LoweringMode::Main => "main",
            LoweringMode::StaticMean => "static_mean",
            LoweringMode::NhwcAware => "nhwc_aware",
        }
    }
}

impl std::fmt::Display for LoweringMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
