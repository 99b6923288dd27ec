//! `harness replay FILE...`: runs saved cases and prints every oracle's verdict, with the
//! full difference of each failure.
//!
//! A file holds one case per line (JSON; `//` and `#` lines are comments), as `harness fuzz`
//! writes them and as other tools (a PyTorch script) may. `-` reads standard input. A case
//! marked `"xfail"` is a known open bug: replay reports it and expects it to fail. After the
//! verdicts, every engine's outputs are printed side by side (the reference, our runtime and
//! real XNNPACK, per mode and thread count).

use crate::case::Case;
use crate::engine::Interpreter;
use crate::fuzz::check_caught;
use crate::oracle::CheckOptions;
use crate::report;
use anyhow::{Context, Result};
use reference::Tensor;
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
    /// Run without real XNNPACK.
    #[arg(long)]
    pub no_xnnpack: bool,
    /// Leave out the engines' outputs side by side.
    #[arg(long)]
    pub no_side_by_side: bool,
    /// Replay with this seeded bug active (`harness mutants` lists them; builds with
    /// `--features mutants` only), to see a reproducer from `reports/mutants.md` fail.
    #[cfg(feature = "mutants")]
    #[arg(long)]
    pub mutant: Option<String>,
}

/// Every engine's outputs side by side, for each run and output of a case: the reference,
/// then per mode our runtime and real XNNPACK at 1 thread and at the case's thread counts
/// above 1, each with its largest difference from the reference and its first values (or
/// what stopped it).
pub fn side_by_side(case: &Case) -> String {
    use crate::engine::{self, Config, Engine, Instance, Simd, Subject};
    use std::fmt::Write as _;
    let mut s = String::new();
    let Ok(built) = crate::patterns::build(case) else { return s };
    let Ok(runs) = crate::oracle::reference_runs(case, &built, crate::engine::Interpreter::Plain) else { return s };
    let lowered: Vec<_> = case.modes.iter().copied().zip(engine::lower_each(&built.graph, &case.modes)).collect();
    let xnnpack = engine::Xnnpack::new();
    let mut threads = vec![1];
    threads.extend(case.threads.iter().copied().filter(|&t| t > 1));
    threads.dedup();
    // (label, outputs per run) for every engine configuration.
    type Outputs = Vec<Result<Vec<Tensor>, String>>;
    let mut rows: Vec<(String, Outputs)> = vec![];
    let run_all =
        |inst: &mut dyn Instance| runs.iter().map(|r| inst.run(&r.inputs).map_err(|e| e.to_string())).collect();
    for (mode, p) in &lowered {
        let Ok(p) = p else { continue };
        let subject = Subject::lowered(&built.graph, p);
        for &t in &threads {
            let config = Config::new(t, Simd::Best);
            let ours = engine::Ours.build(subject, config).map(|mut i| run_all(&mut i));
            rows.push((
                format!("{} ours t{t}", mode.name()),
                ours.unwrap_or_else(|e| vec![Err(e.to_string()); runs.len()]),
            ));
            let folded = p.steps.iter().any(|s| {
                matches!(s, delegate::program::Step::Delegate(d) if crate::oracle::behaviours::folded_convert(&d.graph))
            });
            let xnn = match folded {
                // Behaviour 7: XNNPACK corrupts its heap on this payload; running it may abort.
                true => Ok(vec![
                    Err("not run: behaviour 7 (a converted value copied and read again)".to_string());
                    runs.len()
                ]),
                false => xnnpack.build(subject, config).map(|mut i| run_all(&mut i)),
            };
            rows.push((
                format!("{} xnnpack t{t}", mode.name()),
                xnn.unwrap_or_else(|e| vec![Err(e.to_string()); runs.len()]),
            ));
        }
    }
    let short = |v: &[f64]| v.iter().take(6).map(|x| format!("{x:.6e}")).collect::<Vec<_>>().join(" ");
    for (r, run) in runs.iter().enumerate() {
        let Ok(want) = &run.outputs else {
            let _ = writeln!(
                s,
                "  engines, run {r}: the reference rejects it: {}",
                run.outputs.as_ref().err().map_or(String::new(), |e| e.to_string())
            );
            continue;
        };
        for (o, w) in want.iter().enumerate() {
            let wv = w.values_f64();
            let _ = writeln!(s, "  engines, run {r} output {o} ({} {:?}):", w.dtype(), w.shape);
            let _ = writeln!(s, "    {:<24} {:<16} {}", "reference", "", short(&wv));
            for (label, outs) in &rows {
                let line = match outs.get(r) {
                    Some(Ok(got)) => match got.get(o) {
                        Some(g) if g.shape == w.shape => {
                            let gv = g.values_f64();
                            let diff = gv.iter().zip(&wv).fold(0.0f64, |m, (&a, &b)| {
                                let d = if a.is_nan() && b.is_nan() || a == b { 0.0 } else { (a - b).abs() };
                                if d.is_nan() || m.is_nan() {
                                    f64::NAN
                                } else {
                                    m.max(d)
                                }
                            });
                            format!("{:<16} {}", format!("max|d| {diff:.2e}"), short(&gv))
                        }
                        Some(g) => format!("shape {:?}", g.shape),
                        None => "no such output".into(),
                    },
                    Some(Err(e)) => format!("{:<16} {e}", "error:"),
                    None => String::new(),
                };
                let _ = writeln!(s, "    {label:<24} {line}");
            }
        }
    }
    s
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
    // The full matrix against the plain reference (the spec), outputs judged by the plain
    // comparison alone (what it prints is what decided).
    let opts = CheckOptions { plain: true, reference: Interpreter::Plain, ..CheckOptions::default() };
    let r = check_caught(case, &opts);
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
    if args.no_xnnpack {
        crate::engine::disable_xnnpack();
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
            if !args.no_side_by_side {
                print!("{}", side_by_side(case));
            }
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
