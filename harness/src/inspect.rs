//! `harness inspect` (to be written).

/// Command-line arguments of `harness inspect`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct InspectArgs {}

pub fn run(_args: InspectArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("harness inspect: not implemented yet")
}
