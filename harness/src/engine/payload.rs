//! The delegate's serializer, loader and `.pte` reader, for the jobs that work on payload
//! bytes rather than run them (`gate`, `inspect`): re-exported here so that every job reaches
//! the delegate through [`crate::engine`].

pub use delegate::lower::LowerError;
pub use delegate::serialize::{
    decode, diff, diff_graphs, load, node_counts, pte, write, Decoded, LoadError, LoadLimits, XnnHeader,
};

use delegate::lower::{lower_with, LowerOptions};
use delegate::{LoweredProgram, LoweringMode};
use reference::Graph;

/// Lowers `graph` in `mode` with bf16 lowering on or off, keeping the delegate's own error
/// (the gate's golden table records its text).
pub fn lower(graph: &Graph, mode: LoweringMode, enable_bf16: bool) -> Result<LoweredProgram, LowerError> {
    lower_with(graph, &LowerOptions { enable_bf16, ..LowerOptions::new(mode) })
}
