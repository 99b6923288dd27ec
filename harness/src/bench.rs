//! `harness bench` (to be written).

/// Command-line arguments of `harness bench`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BenchArgs {}

pub fn run(_args: BenchArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("harness bench: not implemented yet")
}
