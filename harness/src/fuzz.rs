//! `harness fuzz` (to be written).

/// Command-line arguments of `harness fuzz`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct FuzzArgs {}

pub fn run(_args: FuzzArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("harness fuzz: not implemented yet")
}
