//! `harness mutants` (to be written).

/// Command-line arguments of `harness mutants`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct MutantsArgs {}

pub fn run(_args: MutantsArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("harness mutants: not implemented yet")
}
