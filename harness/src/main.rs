//! `harness`: differential fuzzing, replay, payload inspection, count gates, latency
//! sweeps and the mutation catalog for the mean.dim delegate.

#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use harness::{bench, fuzz, gate, inspect, mutants, replay};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "harness",
    version,
    about = "Differential testing and benchmarking harness for the XNNPACK mean.dim lowering"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Time-boxed differential fuzz (the main job).
    Fuzz(fuzz::FuzzArgs),
    /// Run one saved case and print every oracle's verdict.
    Replay(replay::ReplayArgs),
    /// Print node counts of an XNNPACK payload or of each payload in a .pte file.
    Inspect(inspect::InspectArgs),
    /// Recompute the golden count table and diff it, or gate a .pte against limits.
    Gate(gate::GateArgs),
    /// Before/after latency sweep per thread count, or `bench check` against a baseline.
    Bench(bench::BenchArgs),
    /// Run the fuzz loop against each seeded bug and report kills.
    Mutants(mutants::MutantsArgs),
}

// Checking a small case makes about a thousand short-lived allocations (tensors, programs,
// payloads); mimalloc serves them in a fraction of the system allocator's instructions.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Fuzz(a) => fuzz::run(a),
        Cmd::Replay(a) => replay::run(a),
        Cmd::Inspect(a) => inspect::run(a),
        Cmd::Gate(a) => gate::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Mutants(a) => mutants::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
