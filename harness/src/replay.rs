//! `harness replay FILE...`: runs saved cases and prints every oracle's verdict, with the
//! full difference of each failure.
//!
//! A file holds one case per line (JSON; `//` and `#` lines are comments), as `harness fuzz`
//! writes them and as other tools (a PyTorch script) may. `-` reads standard input. A case
//! marked `"xfail"` is a known open bug: replay reports it and expects it to fail.

use crate::case::Case;
use crate::fuzz::check_caught;
use crate::oracle::CheckOptions;
use crate::report;
use anyhow::{Context, Result};
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

/// Command-line arguments of `harness replay`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ReplayArgs {
    /// Case files (`-` for standard input).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Print the case's graph (nodes and specs) too.
    #[arg(long)]
    pub graph: bool,
    /// Replay with this seeded bug active (`harness mutants` lists them; builds with
    /// `--features mutants` only), to see a reproducer from `reports/mutants.md` fail.
    #[cfg(feature = "mutants")]
    #[arg(long)]
    pub mutant: Option<String>,
}

/// How one replayed case went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail(String),
    /// Marked xfail and still failing.
    ExpectedFail(String),
    /// Marked xfail but passing now (the bug is fixed: drop the mark).
    UnexpectedPass,
    /// The case can not be run as written (see [`crate::case::InvalidCase`]).
    Invalid(String),
}

/// Replays one case; returns the outcome and the printable verdicts.
pub fn replay_case(case: &Case) -> (Outcome, String) {
    // The full matrix, outputs judged by the plain comparison alone (what it prints is what
    // decided).
    let r = check_caught(case, &CheckOptions { plain: true, ..CheckOptions::default() });
    let text = report::verdicts(&r);
    let label = r.first_failure().map(|c| c.label());
    if let Some(e) = &r.invalid {
        return (Outcome::Invalid(e.to_string()), text);
    }
    let outcome = match (label, &case.xfail) {
        (None, None) => Outcome::Pass,
        (Some(l), None) => Outcome::Fail(l),
        (Some(l), Some(_)) => Outcome::ExpectedFail(l),
        (None, Some(_)) => Outcome::UnexpectedPass,
    };
    (outcome, text)
}

pub fn run(args: ReplayArgs) -> Result<ExitCode> {
    #[cfg(feature = "mutants")]
    if let Some(name) = &args.mutant {
        use delegate::mutants::{set_active, Mutant};
        let Some(m) = Mutant::ALL.into_iter().find(|m| m.name() == *name) else {
            anyhow::bail!("no seeded bug named {name:?}; they are: {:?}", Mutant::ALL.map(|m| m.name()));
        };
        set_active(Some(m));
        println!("seeded bug {name} active");
    }
    let mut bad = 0;
    let mut invalid = 0;
    let mut total = 0;
    for f in &args.files {
        let cases = if f.as_os_str() == "-" {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s)?;
            s.lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with("//") && !l.starts_with('#'))
                .map(Case::from_json)
                .collect::<Result<Vec<_>>>()?
        } else {
            Case::read_file(f).with_context(|| format!("reading {}", f.display()))?
        };
        for (i, case) in cases.iter().enumerate() {
            total += 1;
            println!("{}[{}]: {}", f.display(), i, case.label());
            if args.graph {
                match crate::patterns::build(case) {
                    Ok(b) => {
                        for (id, n) in b.graph.nodes.iter().enumerate() {
                            let ins: Vec<String> = n.inputs.iter().map(|i| format!("%{i}")).collect();
                            println!(
                                "    %{id} = {}({}) -> {} {:?} {:?}",
                                n.op.name(),
                                ins.join(", "),
                                n.spec.dtype,
                                n.spec.max_shape(),
                                n.spec.format
                            );
                        }
                        println!("    outputs {:?}", b.graph.outputs);
                    }
                    Err(e) => println!("    {e}"),
                }
            }
            let (outcome, text) = replay_case(case);
            print!("{text}");
            match outcome {
                Outcome::Pass => println!("  => pass"),
                Outcome::Fail(l) => {
                    bad += 1;
                    println!("  => FAIL {l}");
                }
                Outcome::ExpectedFail(l) => {
                    println!("  => fails as expected (xfail: {}): {l}", case.xfail.as_deref().unwrap_or(""))
                }
                Outcome::UnexpectedPass => {
                    bad += 1;
                    println!("  => passes, but is marked xfail: the bug looks fixed, remove the \"xfail\" field");
                }
                Outcome::Invalid(e) => {
                    invalid += 1;
                    println!("  => {e}");
                }
            }
        }
    }
    println!(
        "replayed {total} case{}, {bad} unexpected{}",
        if total == 1 { "" } else { "s" },
        if invalid > 0 { format!(", {invalid} invalid (not run)") } else { String::new() }
    );
    // 2 when a case could not even be run (as for other usage errors), 1 when one failed.
    Ok(match (invalid, bad) {
        (0, 0) => ExitCode::SUCCESS,
        (0, _) => ExitCode::from(1),
        _ => ExitCode::from(2),
    })
}
