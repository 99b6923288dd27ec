//! `harness mutants`: the mutation catalog. For each seeded bug of the delegate (feature
//! `mutants`, see `delegate::mutants`), turn it on, run the harness's own fuzz loop
//! ([`crate::fuzz::campaign`]) with a fixed seed and budget and the count gate
//! ([`crate::gate`], golden table), and report whether the bug was killed, by which oracle,
//! after how many cases and how long, with the failing case minimized.
//!
//! ```text
//! cargo run --release -p harness --features mutants -- mutants            # writes reports/mutants.{csv,md}
//! cargo run --release -p harness --features mutants -- mutants --only wrong_divisor --cases 500
//! ```
//!
//! A kill counts only if it is the bug's doing: the failing case (and its minimized form)
//! must pass with no bug active, and the gate must match the golden table with no bug
//! active. Otherwise the harness itself has a failure to fix first, and the row says so.
//!
//! The engine ([`hunt`]) takes the bug as an on/off switch, so it builds without the
//! feature; only the command needs `delegate::mutants`. Tests reach it through the
//! harness's dev-dependency on `delegate` with the feature (see `harness/tests/mutants.rs`).

use crate::case::Case;
use crate::fuzz;
use crate::gate::{self, Computed, Golden, PatternEntry, StoredGraph};
use crate::gen::{nth_case, GenConfig};
use crate::minimize;
use crate::oracle::{CheckOptions, Verdict};
use crate::programs;
use delegate::LoweringMode;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Command-line arguments of `harness mutants`.
#[derive(clap::Args, Debug, Clone)]
pub struct MutantsArgs {
    /// Campaign seed (fixed, so the table repeats).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Fuzz budget per bug, in cases.
    #[arg(long, default_value_t = 20_000)]
    pub cases: u64,
    /// Fuzz budget per bug, in seconds.
    #[arg(long, default_value_t = 30.0, allow_negative_numbers = true)]
    pub duration: f64,
    /// Only bugs whose name contains one of these (repeatable), e.g. `--only wrong_divisor`.
    #[arg(long)]
    pub only: Vec<String>,
    /// Skip minimizing the failing cases.
    #[arg(long)]
    pub no_minimize: bool,
    /// Skip the count gate (fuzz loop only).
    #[arg(long)]
    pub no_gate: bool,
    /// Where `mutants.csv` and `mutants.md` are written (default: the checkout's `reports/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Do not write the reports (print only).
    #[arg(long)]
    pub no_write: bool,
}

impl Default for MutantsArgs {
    fn default() -> Self {
        MutantsArgs {
            seed: 1,
            cases: 20_000,
            duration: 30.0,
            only: vec![],
            no_minimize: false,
            no_gate: false,
            out: None,
            no_write: false,
        }
    }
}

/// Seed and budget of one hunt.
#[derive(Clone, Debug)]
pub struct HuntBudget {
    pub seed: u64,
    pub max_cases: u64,
    pub duration: Duration,
    pub gen: GenConfig,
    pub minimize: bool,
    /// When to run the count gate (the oracle for count- and byte-only bugs).
    pub gate: GateUse,
}

/// When [`hunt`] runs the count gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateUse {
    Never,
    /// Always, so the report shows what each oracle family catches.
    Always,
    /// Only when the fuzz loop did not kill the bug (the cheap CI check).
    IfFuzzSurvives,
}

impl Default for HuntBudget {
    fn default() -> Self {
        HuntBudget {
            seed: 1,
            max_cases: 20_000,
            duration: Duration::from_secs(30),
            gen: GenConfig::default(),
            minimize: true,
            gate: GateUse::Always,
        }
    }
}

/// What one oracle family (the fuzz loop or the gate) did against one bug.
#[derive(Clone, Debug, Default)]
pub struct Attempt {
    pub killed: bool,
    /// `<oracle>/<kind>` of the kill (`structure/gap_not_gap`, `gate/node_count`...), or why
    /// the kill does not count.
    pub label: String,
    /// Fuzz: cases checked up to and including the kill. Gate: program x mode lowerings.
    pub cases: u64,
    /// Wall time to the kill (or of the whole budget when it survived).
    pub ms: f64,
    /// The fuzz loop's failing case as found.
    pub case: Option<Case>,
    /// One line saying what differed.
    pub detail: String,
    /// Fuzz: cases that also failed with no bug active (skipped), by their clean label.
    pub skipped: BTreeMap<String, u64>,
}

/// The verdict on one bug.
#[derive(Clone, Debug)]
pub struct Kill {
    pub mutant: String,
    pub fuzz: Attempt,
    pub gate: Option<Attempt>,
    /// The fuzz loop's case, minimized (it still fails with the bug, passes without it).
    pub minimized: Option<Case>,
}

impl Kill {
    pub fn killed(&self) -> bool {
        self.best().is_some()
    }

    /// The attempt that killed first (by wall time).
    pub fn best(&self) -> Option<&Attempt> {
        let mut best: Option<&Attempt> = None;
        for a in std::iter::once(&self.fuzz).chain(self.gate.as_ref()) {
            if a.killed && best.is_none_or(|b| a.ms < b.ms) {
                best = Some(a);
            }
        }
        best
    }

    /// The row's reproducer: the minimized case's JSON, or the gate's change.
    pub fn reproducer(&self) -> String {
        match self.best() {
            Some(a) if std::ptr::eq(a, &self.fuzz) => {
                self.minimized.as_ref().or(a.case.as_ref()).map(Case::to_json).unwrap_or_default()
            }
            Some(a) => a.detail.clone(),
            None => String::new(),
        }
    }
}

/// Turns a bug on for as long as it lives; off again when dropped (a panic included).
struct On<'a>(&'a dyn Fn(bool));

impl<'a> On<'a> {
    fn new(switch: &'a dyn Fn(bool)) -> Self {
        switch(true);
        On(switch)
    }
}

impl Drop for On<'_> {
    fn drop(&mut self) {
        (self.0)(false)
    }
}

/// Runs `f` with panics silenced (they become verdicts or errors; the default hook would
/// print every one the minimizer provokes).
fn quietly<T>(f: impl FnOnce() -> T) -> T {
    let prev = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    let r = panic::catch_unwind(AssertUnwindSafe(f));
    panic::set_hook(prev);
    match r {
        Ok(v) => v,
        Err(p) => panic::resume_unwind(p),
    }
}

/// The fuzz loop's label for a case (`None`: every oracle passed).
fn label_of(case: &Case) -> Option<String> {
    fuzz::failure_label(&fuzz::check_caught(case, &CheckOptions::default()))
}

/// The fuzz loop against one bug: the case sequence of `harness fuzz` (`nth_case(seed, k)`)
/// checked by every oracle as the loop checks it (`fuzz::check_caught`, default options).
/// One difference from `fuzz::campaign`, which the catalog needs: a case that also fails
/// with no bug active is an open failure of the harness or the delegate, not a kill, so it
/// is counted and skipped. (`Campaign` stops at its first failure and has no start index,
/// so it cannot skip one; hence this wrapper over its public pieces.)
fn fuzz_attempt(switch: &dyn Fn(bool), b: &HuntBudget) -> Attempt {
    quietly(|| {
        let start = Instant::now();
        let opts = CheckOptions::default();
        let mut skipped: BTreeMap<String, u64> = BTreeMap::new();
        let mut k = 0u64;
        while k < b.max_cases && start.elapsed() < b.duration {
            let case = nth_case(b.seed, k, &b.gen);
            k += 1;
            let report = {
                let _on = On::new(switch);
                fuzz::check_caught(&case, &opts)
            };
            let Some(label) = fuzz::failure_label(&report) else { continue };
            if let Some(clean) = label_of(&case) {
                *skipped.entry(clean).or_default() += 1;
                continue;
            }
            let ms = start.elapsed().as_secs_f64() * 1e3;
            let detail = report
                .first_failure()
                .map(|c| match &c.verdict {
                    Verdict::Fail { detail, .. } => {
                        format!("{}: {}", c.scope, detail.lines().next().unwrap_or("").trim())
                    }
                    _ => String::new(),
                })
                .unwrap_or_default();
            return Attempt { killed: true, label, cases: k, ms, case: Some(case), detail, skipped };
        }
        let ms = start.elapsed().as_secs_f64() * 1e3;
        Attempt { label: format!("survived {k} cases"), cases: k, ms, skipped, ..Attempt::default() }
    })
}

/// Shrinks a killing case while it still fails with the same label under the bug and
/// passes without it.
fn minimize_kill(switch: &dyn Fn(bool), case: &Case, label: &str) -> Case {
    let budget = minimize::Budget { max_tries: 600, max_time: Duration::from_secs(10) };
    quietly(|| {
        minimize::minimize(case, budget, |cand| {
            let with = {
                let _on = On::new(switch);
                label_of(cand)
            };
            with.as_deref() == Some(label) && label_of(cand).is_none()
        })
        .case
    })
}

/// The count gate's reference: the committed golden table when the clean lowering (no bug
/// active) matches it, else the clean lowering computed now, so a table that other work
/// has made stale does not blind the catalog (the gate job itself reports the staleness).
pub struct GateBaseline {
    golden: Golden,
    stored: Vec<StoredGraph>,
    /// `committed golden table` or why the fresh clean computation is used instead.
    pub source: String,
}

impl GateBaseline {
    pub fn load() -> anyhow::Result<GateBaseline> {
        let path = gate::default_golden_path();
        let committed = Golden::load(&path).and_then(|g| Ok((g, gate::load_graphs(&gate::graphs_path(&path))?)));
        if let Ok((golden, stored)) = committed {
            let base = GateBaseline { golden, stored, source: "committed golden table".into() };
            let a = quietly(|| base.attempt(None));
            if !a.killed {
                return Ok(base);
            }
            let fresh = quietly(|| gate::compute(&[]))?;
            return Ok(GateBaseline {
                golden: fresh.golden,
                stored: fresh.graphs,
                source: format!("clean lowering computed at start (the committed golden table is stale: {})", a.detail),
            });
        }
        let fresh = quietly(|| gate::compute(&[]))?;
        Ok(GateBaseline {
            golden: fresh.golden,
            stored: fresh.graphs,
            source: "clean lowering computed at start (no committed golden table)".into(),
        })
    }

    /// Walks the catalog, one program (three modes) at a time, until the table differs.
    fn attempt(&self, switch: Option<&dyn Fn(bool)>) -> Attempt {
        let _on = switch.map(On::new);
        let start = Instant::now();
        let mut entries = 0u64;
        let catalog = programs::catalog();
        for p in catalog {
            let Ok(graph) = p.graph() else { continue };
            let mut modes = BTreeMap::new();
            let mut graphs = vec![];
            for mode in LoweringMode::ALL {
                entries += 1;
                match panic::catch_unwind(AssertUnwindSafe(|| gate::compute_entry(&p, &graph, mode))) {
                    Ok((e, g)) => {
                        modes.insert(mode.name().to_string(), e);
                        graphs.extend(g);
                    }
                    Err(_) => {
                        return Attempt {
                            killed: true,
                            label: "gate/panic".into(),
                            cases: entries,
                            ms: start.elapsed().as_secs_f64() * 1e3,
                            detail: format!(
                                "pattern {}, mode {}: lowering or serializing panicked",
                                p.name,
                                mode.name()
                            ),
                            ..Attempt::default()
                        };
                    }
                }
            }
            let mut patterns = BTreeMap::new();
            patterns
                .insert(p.name.clone(), PatternEntry { description: p.description.clone(), family: p.family, modes });
            let computed = Computed {
                golden: Golden { version: self.golden.version, note: self.golden.note.clone(), patterns },
                graphs,
            };
            let out = gate::check_against(&self.golden, &self.stored, computed, true);
            if !out.passed() {
                let (label, detail) = match out.changes.first() {
                    Some(c) => (format!("gate/{}", field_kind(&c.field)), one_line(&c.to_string())),
                    None => ("gate/inconsistent".to_string(), out.inconsistent.join("; ")),
                };
                return Attempt {
                    killed: true,
                    label,
                    cases: entries,
                    ms: start.elapsed().as_secs_f64() * 1e3,
                    detail,
                    ..Attempt::default()
                };
            }
        }
        Attempt {
            label: format!("survived {entries} lowerings"),
            cases: entries,
            ms: start.elapsed().as_secs_f64() * 1e3,
            ..Attempt::default()
        }
    }
}

/// Collapses whitespace runs (a flatbuffer verifier message spans lines) for CSV and tables.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `node count XNNStaticMean` -> `node_count`, `sha256 [segment 0]` -> `sha256`.
fn field_kind(field: &str) -> String {
    let f = field.split(" [").next().unwrap_or(field);
    let f = if f.starts_with("node count") { "node count" } else { f };
    f.replace(' ', "_")
}

/// Hunts one bug: the fuzz loop, then (when given a baseline) the gate, then minimizes the
/// fuzz loop's case. `switch(true)` turns the bug on, `switch(false)` off; it is off again
/// when this returns.
pub fn hunt(mutant: &str, switch: &dyn Fn(bool), b: &HuntBudget, gate: Option<&GateBaseline>) -> Kill {
    let fuzz = fuzz_attempt(switch, b);
    let run_gate = match b.gate {
        GateUse::Never => false,
        GateUse::Always => true,
        GateUse::IfFuzzSurvives => !fuzz.killed,
    };
    let gate = gate.filter(|_| run_gate).map(|g| quietly(|| g.attempt(Some(switch))));
    let minimized = match (&fuzz.case, b.minimize && fuzz.killed) {
        (Some(c), true) => Some(minimize_kill(switch, c, &fuzz.label)),
        _ => None,
    };
    Kill { mutant: mutant.to_string(), fuzz, gate, minimized }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// `reports/mutants.csv`: one row per bug.
pub fn to_csv(kills: &[Kill]) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(vec![]);
    w.write_record([
        "mutant",
        "killed",
        "oracle",
        "cases_to_kill",
        "ms_to_kill",
        "minimized_case",
        "fuzz_oracle",
        "fuzz_cases",
        "fuzz_ms",
        "gate_oracle",
        "gate_lowerings",
        "gate_ms",
        "fuzz_skipped_clean_failures",
    ])?;
    for k in kills {
        let best = k.best();
        let (g_label, g_cases, g_ms) = match &k.gate {
            Some(g) => (g.label.clone(), g.cases.to_string(), format!("{:.1}", g.ms)),
            None => ("not run".into(), String::new(), String::new()),
        };
        w.write_record([
            k.mutant.clone(),
            k.killed().to_string(),
            best.map_or(String::new(), |a| a.label.clone()),
            best.map_or(String::new(), |a| a.cases.to_string()),
            best.map_or(String::new(), |a| format!("{:.1}", a.ms)),
            k.reproducer(),
            k.fuzz.label.clone(),
            k.fuzz.cases.to_string(),
            format!("{:.1}", k.fuzz.ms),
            g_label,
            g_cases,
            g_ms,
            k.fuzz.skipped.values().sum::<u64>().to_string(),
        ])?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

/// `reports/mutants.md`: the table and its figures.
pub fn to_markdown(kills: &[Kill], b: &HuntBudget, command: &str, total: Duration, gate_source: &str) -> String {
    let mut s = String::new();
    let killed = kills.iter().filter(|k| k.killed()).count();
    let times: Vec<f64> = kills.iter().filter_map(|k| k.best().map(|a| a.ms)).collect();
    let med = median(times.clone());
    let max = times.iter().copied().fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))));
    let _ = writeln!(s, "# Mutation catalog: seeded bugs vs the harness\n");
    let _ = writeln!(s, "Command: `{command}` (seed {}, budget per bug: {} cases or {:.0} s of fuzzing, then the count gate over the program catalog). Whole run: {:.1} s.\n", b.seed, b.max_cases, b.duration.as_secs_f64(), total.as_secs_f64());
    let _ = writeln!(
        s,
        "**{killed} of {} seeded bugs killed.** Time to kill (fastest oracle): median {}, max {}. Targets: every bug killed, median under 1 s, none over 30 s.\n",
        kills.len(),
        med.map_or("n/a".into(), |m| format!("{m:.0} ms")),
        max.map_or("n/a".into(), |m| format!("{m:.0} ms")),
    );
    let fuzz_times: Vec<f64> = kills.iter().filter(|k| k.fuzz.killed).map(|k| k.fuzz.ms).collect();
    let _ = writeln!(
        s,
        "The fuzz loop alone kills {} of {}: median {}, max {}.\n",
        fuzz_times.len(),
        kills.len(),
        median(fuzz_times.clone()).map_or("n/a".into(), |m| format!("{m:.0} ms")),
        fuzz_times.iter().copied().reduce(f64::max).map_or("n/a".into(), |m| format!("{m:.0} ms")),
    );
    let _ = writeln!(s, "A kill counts only when the failing case passes with no bug active (and the minimized case too). The gate compares with the committed golden table when the clean lowering matches it, else with the clean lowering computed at start. Times run from the start of the hunt to the verdict on the killing case, its clean re-check included; gate cases are lowerings (program x mode), walked in catalog order.\n");
    let _ = writeln!(s, "Gate reference: {gate_source}.\n");
    let _ = writeln!(s, "| bug | killed | oracle | cases | ms | fuzz loop | gate |");
    let _ = writeln!(s, "|---|---|---|---:|---:|---|---|");
    for k in kills {
        let best = k.best();
        let g = k.gate.as_ref().map_or("not run".to_string(), |g| {
            if g.killed {
                format!("{} after {} lowerings, {:.0} ms", g.label, g.cases, g.ms)
            } else {
                g.label.clone()
            }
        });
        let f = if k.fuzz.killed {
            format!("{} at case {}, {:.0} ms", k.fuzz.label, k.fuzz.cases, k.fuzz.ms)
        } else {
            format!("{} ({:.0} ms)", k.fuzz.label, k.fuzz.ms)
        };
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} | {} | {} | {} |",
            k.mutant,
            if k.killed() { "yes" } else { "**NO**" },
            best.map_or("-".into(), |a| format!("`{}`", a.label)),
            best.map_or("-".into(), |a| a.cases.to_string()),
            best.map_or("-".into(), |a| format!("{:.1}", a.ms)),
            f,
            g
        );
    }
    let mut open: BTreeMap<&str, u64> = BTreeMap::new();
    for k in kills {
        for (l, n) in &k.fuzz.skipped {
            let e = open.entry(l.as_str()).or_default();
            *e = (*e).max(*n);
        }
    }
    if !open.is_empty() {
        let _ = writeln!(s, "\n## Open failures with no bug active\n");
        let _ = writeln!(s, "These cases of the same campaign fail on the clean build too, so they are skipped, not counted as kills (most per bug run shown; `harness fuzz --seed {} --keep-going` lists them):\n", b.seed);
        for (l, n) in &open {
            let _ = writeln!(s, "- `{l}`: {n}");
        }
    }
    let _ = writeln!(s, "\n## Reproducers\n");
    let _ = writeln!(s, "Fuzz kills: the minimized case (replay with `cargo run --release -p harness --features mutants -- replay --mutant NAME FILE`; without `--mutant` it passes). Gate kills: the first changed count.\n");
    for k in kills {
        let _ = writeln!(s, "- `{}`: {}", k.mutant, if k.killed() { "" } else { "SURVIVED" });
        if let Some(m) = k.minimized.as_ref().or(k.fuzz.case.as_ref()) {
            let _ = writeln!(s, "  - case: `{}`", m.to_json());
        }
        if !k.fuzz.detail.is_empty() {
            let _ =
                writeln!(s, "  - fuzz (the case as found, before minimizing): {}", k.fuzz.detail.replace('|', "\\|"));
        }
        if let Some(g) = k.gate.as_ref().filter(|g| g.killed) {
            let _ = writeln!(s, "  - gate: {}", g.detail.replace('|', "\\|"));
        }
    }
    s
}

/// Hand-written analysis lives after a `## Notes` heading of the summary; a rerun keeps it.
#[cfg_attr(not(feature = "mutants"), allow(dead_code))]
fn keep_notes(path: &Path, generated: &str) -> String {
    let old = std::fs::read_to_string(path).unwrap_or_default();
    match old.find("\n## Notes\n") {
        Some(i) => format!("{}{}", generated.trim_end(), &old[i..]),
        None => generated.to_string(),
    }
}

/// The checkout's `reports/` folder.
#[cfg_attr(not(feature = "mutants"), allow(dead_code))]
fn default_reports_dir() -> PathBuf {
    let here = Path::new("reports");
    if here.is_dir() {
        return here.to_path_buf();
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("reports")
}

/// Runs the catalog over the given bugs, printing one line per bug.
/// Also returns what the gate compared against.
pub fn run_catalog(targets: &[(String, &dyn Fn(bool))], b: &HuntBudget) -> anyhow::Result<(Vec<Kill>, String)> {
    let base = if b.gate != GateUse::Never { Some(GateBaseline::load()?) } else { None };
    let source = base.as_ref().map_or("gate not run".to_string(), |g| g.source.clone());
    eprintln!("gate reference: {source}");
    let mut kills = vec![];
    for (name, switch) in targets {
        let k = hunt(name, *switch, b, base.as_ref());
        match k.best() {
            Some(a) => eprintln!("{name:<28} killed   {:<34} {:>7} cases {:>9.1} ms", a.label, a.cases, a.ms),
            None => eprintln!("{name:<28} SURVIVED {}", k.fuzz.label),
        }
        kills.push(k);
    }
    Ok((kills, source))
}

pub fn run(args: MutantsArgs) -> anyhow::Result<ExitCode> {
    #[cfg(feature = "mutants")]
    {
        use delegate::mutants::{set_active, Mutant};
        let b = HuntBudget {
            seed: args.seed,
            max_cases: args.cases,
            duration: crate::args::seconds("--duration", args.duration)?,
            gen: GenConfig::default(),
            minimize: !args.no_minimize,
            gate: if args.no_gate { GateUse::Never } else { GateUse::Always },
        };
        type Switch = Box<dyn Fn(bool)>;
        let switches: Vec<(String, Switch)> = Mutant::ALL
            .iter()
            .filter(|m| args.only.is_empty() || args.only.iter().any(|o| m.name().contains(o.as_str())))
            .map(|&m| (m.name(), Box::new(move |on: bool| set_active(on.then_some(m))) as Switch))
            .collect();
        if switches.is_empty() {
            anyhow::bail!("--only matches no seeded bug; they are: {:?}", Mutant::ALL.map(|m| m.name()));
        }
        let targets: Vec<(String, &dyn Fn(bool))> = switches.iter().map(|(n, f)| (n.clone(), f.as_ref())).collect();
        eprintln!(
            "harness mutants: {} bug(s), seed {}, {} cases or {:.0} s of fuzzing each{}",
            targets.len(),
            b.seed,
            b.max_cases,
            args.duration,
            if b.gate == GateUse::Always { ", then the count gate" } else { "" }
        );
        let start = Instant::now();
        let (kills, source) = run_catalog(&targets, &b)?;
        let total = start.elapsed();
        let command = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
        let command = format!("cargo run --release -p harness --features mutants -- {command}");
        let md = to_markdown(&kills, &b, &command, total, &source);
        if !args.no_write {
            let dir = args.out.clone().unwrap_or_else(default_reports_dir);
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join("mutants.csv"), to_csv(&kills)?)?;
            std::fs::write(dir.join("mutants.md"), keep_notes(&dir.join("mutants.md"), &md))?;
            eprintln!("wrote {} and {}", dir.join("mutants.csv").display(), dir.join("mutants.md").display());
        }
        let survived: Vec<&str> = kills.iter().filter(|k| !k.killed()).map(|k| k.mutant.as_str()).collect();
        println!("{}", md.lines().find(|l| l.starts_with("**")).unwrap_or(""));
        if !survived.is_empty() {
            println!("survived: {}", survived.join(", "));
            return Ok(ExitCode::from(1));
        }
        Ok(ExitCode::SUCCESS)
    }
    #[cfg(not(feature = "mutants"))]
    {
        let _ = args;
        anyhow::bail!(
            "this harness was built without the seeded bugs; run \
             `cargo run --release -p harness --features mutants -- mutants`"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_fields_collapse_to_kinds() {
        assert_eq!(field_kind("node count XNNStaticMean"), "node_count");
        assert_eq!(field_kind("sha256 [segment 0]"), "sha256");
        assert_eq!(field_kind("ops outside"), "ops_outside");
    }

    #[test]
    fn the_fastest_kill_wins_and_the_median_is_the_middle() {
        let fuzz = Attempt { killed: true, label: "outputs/mismatch".into(), cases: 9, ms: 40.0, ..Default::default() };
        let gate = Attempt { killed: true, label: "gate/sha256".into(), cases: 3, ms: 5.0, ..Default::default() };
        let k = Kill { mutant: "m".into(), fuzz: fuzz.clone(), gate: Some(gate), minimized: None };
        assert_eq!(k.best().unwrap().label, "gate/sha256");
        let k = Kill { mutant: "m".into(), fuzz, gate: Some(Attempt::default()), minimized: None };
        assert_eq!(k.best().unwrap().label, "outputs/mismatch");
        let none = Kill { mutant: "m".into(), fuzz: Attempt::default(), gate: None, minimized: None };
        assert!(!none.killed());
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }

    #[test]
    fn the_csv_has_the_columns_and_one_row_per_bug() {
        let fuzz = Attempt { killed: true, label: "outputs/mismatch".into(), cases: 9, ms: 40.0, ..Default::default() };
        let k = Kill { mutant: "wrong_divisor".into(), fuzz, gate: None, minimized: None };
        let text = to_csv(&[k]).unwrap();
        let mut lines = text.lines();
        assert!(lines.next().unwrap().starts_with("mutant,killed,oracle,cases_to_kill,ms_to_kill,minimized_case"));
        assert!(lines.next().unwrap().starts_with("wrong_divisor,true,outputs/mismatch,9,40.0,"));
        assert!(lines.next().is_none());
    }
}
