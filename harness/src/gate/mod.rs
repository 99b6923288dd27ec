//! `harness gate`: regression gates on delegate, node and transpose counts and payload bytes.
//!
//! Two jobs:
//! - **Golden table** ([`golden`], the default): every program of [`crate::programs`] is lowered in the three
//!   modes; delegates, ops left outside, node counts by type (read back from the serialized
//!   payloads, cross-checked with the lowering's summary), transposes, converts, payload sizes
//!   and sha256 are compared with `corpora/gates/golden.json`. Any change is a readable diff
//!   naming pattern, mode, count, old and new; a hash change also shows the decoded-graph diff
//!   against the graph stored in `corpora/gates/graphs.jsonl`. `--bless` rewrites both.
//! - **`.pte` limits** ([`pte`]; `harness gate FILE.pte --max XNNStaticTranspose=2 --forbid
//!   XNNGlobalAvgPooling2d`, or `--limits FILE.json`): gates a real ExecuTorch program's
//!   XNNPACK payloads.
//!
//! Node type names, wherever they come from (golden file, limits, command line), must be
//! members of the schema's `XNodeUnion` (B6: a misspelled name must not count as zero).

pub mod golden;
pub mod names;
pub mod pte;

pub use golden::{
    bless, check_against, compute, compute_entry, default_golden_path, diff, graphs_path, hash_diffs, json_safe,
    load_graphs, savings_report, sha256_hex, Change, Computed, GateOutcome, Golden, ModeEntry, PatternEntry,
    StoredGraph, GOLDEN_VERSION,
};
pub use names::check_node_name;
pub use pte::{gate_pte, pte_payloads, Limits};

use std::path::PathBuf;
use std::process::ExitCode;

/// Command-line arguments of `harness gate`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct GateArgs {
    /// An ExecuTorch `.pte` file to gate against limits (instead of the golden table).
    pub pte: Option<PathBuf>,
    /// Rewrite the golden table (and stored graphs) from the current lowering.
    #[arg(long)]
    pub bless: bool,
    /// The golden table (default: corpora/gates/golden.json of this checkout).
    #[arg(long)]
    pub golden: Option<PathBuf>,
    /// Only programs whose name contains one of these substrings (no bless allowed then).
    #[arg(long)]
    pub only: Vec<String>,
    /// `.pte` mode: at most N nodes of a type, as `NODE=N` (repeatable).
    #[arg(long = "max", value_name = "NODE=N")]
    pub max: Vec<String>,
    /// `.pte` mode: at least N nodes of a type, as `NODE=N` (repeatable).
    #[arg(long = "min", value_name = "NODE=N")]
    pub min: Vec<String>,
    /// `.pte` mode: no node of this type (repeatable).
    #[arg(long, value_name = "NODE")]
    pub forbid: Vec<String>,
    /// `.pte` mode: at most this many XNNPACK delegates.
    #[arg(long)]
    pub max_delegates: Option<usize>,
    /// `.pte` mode: limits in a JSON file: {"max": {NODE: N}, "min": {..}, "forbid": [..], "max_delegates": N}.
    #[arg(long, value_name = "FILE")]
    pub limits: Option<PathBuf>,
}

pub fn run(args: GateArgs) -> anyhow::Result<ExitCode> {
    match &args.pte {
        Some(pte) => pte::run(pte, &args),
        None => golden::run(&args),
    }
}
