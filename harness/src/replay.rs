//! `harness replay` (to be written).

/// Command-line arguments of `harness replay`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ReplayArgs {}

pub fn run(_args: ReplayArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("harness replay: not implemented yet")
}
