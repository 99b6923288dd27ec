//! Threaded SIMD runtime: executes a [`crate::LoweredProgram`] the way the XNNPACK delegate
//! would. Every delegate segment is serialized with [`crate::serialize::write`] and loaded back
//! with [`crate::serialize::load`]; only what the loader returned is executed. Ops left outside
//! run on the portable kernels (scalar, single-threaded, f32 compute), which is what "before"
//! pays.
//!
//! `unsafe` lives only in [`simd`] (the kernels) and in the pool's job erasure; the crate
//! denies it everywhere else.

mod bound;
mod exec;
pub mod fuse;
pub mod kernels;
pub mod plan;
pub mod pool;
mod program;
#[allow(unsafe_code)]
pub mod simd;

pub use bound::Bound;
pub use program::{Program, SegmentExecutor};

use reference::{ElemType, GraphErrorKind, MemoryFormat};

/// How a program schedules operator work on its pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ThreadPolicy {
    /// XNNPACK's: a reduction with more than one output has a tile per output and always
    /// wakes the pool (each thread takes its share in halves, as pthreadpool's dynamic
    /// dispatch does); other operators wake it whenever they have more than one tile.
    PerOutputTasks,
    /// Inline below a measured size threshold, otherwise one contiguous chunk per thread.
    #[default]
    CostModel,
}

/// Which kernels to run. `DELEGATE_FORCE_SCALAR=1` in the environment forces `Scalar`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum SimdLevel {
    /// The widest instruction set the CPU has.
    #[default]
    Auto,
    Avx512,
    Avx2,
    /// The portable fallback (plain Rust).
    Scalar,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunOptions {
    /// Threads of the program's pool, the caller included; 0 and 1 both mean serial.
    pub threads: usize,
    pub policy: ThreadPolicy,
    pub simd: SimdLevel,
    /// Run fused groups (`runtime::fuse`) as one pass each; off runs every node by itself
    /// (the same bits: for A/B runs of the passes over memory).
    #[serde(default = "fuse_default")]
    pub fuse: bool,
}

fn fuse_default() -> bool {
    true
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { threads: 1, policy: ThreadPolicy::CostModel, simd: SimdLevel::Auto, fuse: true }
    }
}

impl RunOptions {
    pub fn threads(threads: usize) -> RunOptions {
        RunOptions { threads, ..Default::default() }
    }
}

/// Resolves a requested level to a detected instruction set.
pub fn resolve_simd(level: SimdLevel) -> Result<simd::Isa, RuntimeError> {
    resolve_simd_with(level, force_scalar())
}

/// Whether `DELEGATE_FORCE_SCALAR=1` is set. Read once per prepared program (its
/// reconfigurations reuse the answer): an environment lookup takes the process's environment
/// lock and copies the value.
fn force_scalar() -> bool {
    std::env::var_os("DELEGATE_FORCE_SCALAR").is_some_and(|v| v == "1")
}

/// [`resolve_simd`] with the environment's override already read.
fn resolve_simd_with(level: SimdLevel, force_scalar: bool) -> Result<simd::Isa, RuntimeError> {
    if force_scalar {
        return Ok(simd::Isa::SCALAR);
    }
    match level {
        SimdLevel::Auto => Ok(simd::Isa::best()),
        SimdLevel::Scalar => Ok(simd::Isa::SCALAR),
        SimdLevel::Avx2 => simd::Isa::avx2().ok_or(RuntimeError::SimdUnavailable { level }),
        SimdLevel::Avx512 => simd::Isa::avx512().ok_or(RuntimeError::SimdUnavailable { level }),
    }
}

/// Everything that can go wrong when loading or running a program. Never a panic.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    #[error("SIMD level {level:?} is not available on this CPU")]
    SimdUnavailable { level: SimdLevel },
    #[error("cannot start the thread pool: {0}")]
    Pool(String),
    #[error("segment {segment}: serializing the delegate payload failed: {message}")]
    Serialize { segment: usize, message: String },
    #[error("segment {segment}: the loader rejected the payload: {message}")]
    Load { segment: usize, message: String },
    #[error("segment {segment}: unsupported: {what}")]
    Unsupported { segment: usize, what: String },
    /// A node of a type the loader reads but this runtime does not run (it has no kernel).
    #[error("segment {segment}, node {node}: {node_type} is not supported by this runtime")]
    UnsupportedNode { segment: usize, node: usize, node_type: &'static str },
    #[error("segment {segment}, node {node}: {what}")]
    InvalidGraph { segment: usize, node: usize, what: String },
    #[error("program: {0}")]
    InvalidProgram(String),
    #[error("expected {expected} inputs, got {found}")]
    InputCount { expected: usize, found: usize },
    #[error("input {index}: {kind}")]
    BadInput { index: usize, kind: GraphErrorKind },
    #[error("input {index}: dtype {found} where {expected} is expected")]
    InputDtype { index: usize, expected: ElemType, found: ElemType },
    #[error("input {index}: memory format {found:?} where {expected:?} is expected")]
    InputFormat { index: usize, expected: MemoryFormat, found: MemoryFormat },
    #[error("step {step}: shape error at run time: {what}")]
    Shape { step: usize, what: String },
    #[error("step {step}: unsupported at run time: {what}")]
    UnsupportedOp { step: usize, what: String },
}
