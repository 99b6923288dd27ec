//! `harness gate` (to be written).

/// Command-line arguments of `harness gate`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct GateArgs {}

pub fn run(_args: GateArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("harness gate: not implemented yet")
}
