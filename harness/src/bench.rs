//! `harness bench`: before/after latency sweeps per thread count, CSV reports, a summary,
//! SVG plots, and `harness bench check`, a latency gate against a committed baseline.
//!
//! Method (issue 8): for each scenario of [`crate::programs`] and each thread count, the four
//! programs being compared (`Main` before, `StaticMean` after with both thread policies,
//! `NhwcAware`) are built on the same inputs and run alternately, one run each per round with
//! the starting program rotating, after a reference check and a warm-up. Each round gives one
//! paired ratio per program against `Main`; the reported ratio is their median with a
//! distribution-free 95% interval ([`stats::paired_ratio`]), "within noise" when it holds 1.
//! Rows stop at `--max-runs` rounds or when their share of the time budget is spent (never
//! below `--min-rounds`), so the default sweep fits its budget on a 2-core machine.

pub mod check;
pub mod report;
pub mod stats;

use crate::programs::{self, NamedProgram};
use anyhow::{bail, Context};
use delegate::lower::{lower_with, LowerOptions};
use delegate::runtime::{Program, RunOptions, SimdLevel, ThreadPolicy};
use delegate::{LoweredProgram, LoweringMode};
use reference::data::{generate_inputs, DataOptions, Distribution};
use reference::{ElemType, Graph, Tensor};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Command-line arguments of `harness bench`.
#[derive(clap::Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub cmd: Option<BenchCmd>,
    #[command(flatten)]
    pub sweep: SweepArgs,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum BenchCmd {
    /// Validate a sweep's CSVs and compare them with a baseline (non-zero exit on a move).
    Check(check::CheckArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct SweepArgs {
    /// Thread counts to sweep (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    pub threads: Vec<usize>,
    /// The CI smoke test: a few scenarios at 1 and 2 threads within about 40 s.
    #[arg(long)]
    pub quick: bool,
    /// Only scenarios whose program name contains one of these substrings.
    #[arg(long)]
    pub only: Vec<String>,
    /// Directory for bench-t<N>.csv, bench-summary.md and the plots.
    #[arg(long, default_value = "reports")]
    pub out: PathBuf,
    /// Total time budget in seconds (default 470, or 35 with --quick).
    #[arg(long, allow_negative_numbers = true)]
    pub budget: Option<f64>,
    /// Stop a row after this many rounds (one timed run of each program per round).
    #[arg(long, default_value_t = 2000)]
    pub max_runs: usize,
    /// Target rounds per row; a row that cannot reach it in its time share stops earlier.
    #[arg(long, default_value_t = 200)]
    pub min_runs: usize,
    /// Never fewer rounds than this, whatever the budget.
    #[arg(long, default_value_t = 5)]
    pub min_rounds: usize,
    /// Seed of the input data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

impl Default for SweepArgs {
    fn default() -> Self {
        SweepArgs {
            threads: vec![1, 2, 4, 8, 16],
            quick: false,
            only: vec![],
            out: PathBuf::from("reports"),
            budget: None,
            max_runs: 2000,
            min_runs: 200,
            min_rounds: 5,
            seed: 1,
            no_progress: false,
        }
    }
}

/// One program being compared: a lowering mode and a thread policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    pub mode: LoweringMode,
    pub policy: ThreadPolicy,
}

/// `Main` runs with XNNPACK's own policy (per-output tasks), as upstream main does; the
/// change is timed with both policies; `NhwcAware` with the cost model, our follow-up.
pub const VARIANTS: [Variant; 4] = [
    Variant { mode: LoweringMode::Main, policy: ThreadPolicy::PerOutputTasks },
    Variant { mode: LoweringMode::StaticMean, policy: ThreadPolicy::PerOutputTasks },
    Variant { mode: LoweringMode::StaticMean, policy: ThreadPolicy::CostModel },
    Variant { mode: LoweringMode::NhwcAware, policy: ThreadPolicy::CostModel },
];

pub fn policy_name(p: ThreadPolicy) -> &'static str {
    match p {
        ThreadPolicy::PerOutputTasks => "per_output_tasks",
        ThreadPolicy::CostModel => "cost_model",
    }
}

/// One CSV row: one program of one scenario at one thread count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub scenario: String,
    pub shape: String,
    pub dtype: String,
    pub mode: String,
    pub policy: String,
    pub threads: usize,
    pub median_ns: Option<f64>,
    pub p10_ns: Option<f64>,
    pub p90_ns: Option<f64>,
    /// Timed rounds (one run of this program per round).
    pub runs: usize,
    /// Median of the per-round ratios this / Main (1 for Main itself).
    pub ratio_vs_main: Option<f64>,
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    pub within_noise: bool,
    /// NhwcAware rows only: paired ratio NhwcAware / StaticMean (both cost model) and its
    /// interval, so the copies NhwcAware removes are judged on their own pairs.
    #[serde(default)]
    pub vs_static_mean: Option<f64>,
    #[serde(default)]
    pub vs_static_mean_low: Option<f64>,
    #[serde(default)]
    pub vs_static_mean_high: Option<f64>,
    /// `ok`, or why the outputs were not accepted (then no timing).
    pub check: String,
    pub delegates: usize,
    pub transposes: usize,
    pub oversubscribed: bool,
    pub program: String,
    pub commit: String,
    pub cpu: String,
    pub cores: usize,
    pub date: String,
}

/// Facts about the machine and checkout recorded in every row.
#[derive(Clone, Debug, PartialEq)]
pub struct MachineInfo {
    pub commit: String,
    pub cpu: String,
    pub cores: usize,
    pub date: String,
    pub loadavg: String,
}

impl MachineInfo {
    pub fn collect() -> MachineInfo {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        let mut commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
        if git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty()) {
            commit.push_str("-dirty");
        }
        MachineInfo { commit, cpu, cores, date: utc_now(), loadavg: loadavg() }
    }
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Current UTC time as `YYYY-MM-DDTHH:MM:SSZ` (no date crate in the workspace).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (days, rem) = ((secs / 86400) as i64, secs % 86400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Tolerance of the once-per-row output check, by the program's dtype.
fn tolerance(dtype: ElemType) -> (f64, f64) {
    match dtype {
        ElemType::F32 => (1e-4, 1e-3),
        ElemType::F16 => (1e-2, 1e-2),
        ElemType::Bf16 => (6e-2, 3e-2),
        // qs8 programs end in a dequantize with a scale of at most 1/32: allow 2 quanta.
        ElemType::Qs8 => (2.0 / 32.0 + 1e-6, 0.0),
    }
}

/// Checks runtime outputs against the reference's.
pub fn compare_outputs(got: &[Tensor], want: &[Tensor], dtype: ElemType) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} outputs, reference has {}", got.len(), want.len()));
    }
    let (atol, rtol) = tolerance(dtype);
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        if g.shape != w.shape {
            return Err(format!("output {k}: shape {:?}, reference {:?}", g.shape, w.shape));
        }
        let (gv, wv) = (g.values_f64(), w.values_f64());
        let mut worst: Option<(usize, f64, f64)> = None;
        let mut bad = 0usize;
        for (i, (&a, &b)) in gv.iter().zip(&wv).enumerate() {
            let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= atol + rtol * b.abs();
            if !ok {
                bad += 1;
                if worst.is_none_or(|(_, x, y)| (a - b).abs() > (x - y).abs()) {
                    worst = Some((i, a, b));
                }
            }
        }
        if let Some((i, a, b)) = worst {
            return Err(format!("output {k}: {bad} values off, worst at {i}: {a} vs reference {b}"));
        }
    }
    Ok(())
}

/// Everything prepared once per scenario: inputs, reference outputs, the three lowerings.
pub struct Prepared {
    pub program: NamedProgram,
    pub graph: Graph,
    pub inputs: Vec<Tensor>,
    pub reference: Result<Vec<Tensor>, String>,
    pub lowered: Vec<(LoweringMode, Result<LoweredProgram, String>)>,
}

pub fn prepare(p: &NamedProgram, seed: u64) -> anyhow::Result<Prepared> {
    let graph = p.graph().with_context(|| format!("program {} does not build", p.name))?;
    // Uniform data: representative timings, no NaN from rsqrt, qs8 inputs in range.
    let opts = DataOptions { specials: false, distribution: Some(Distribution::Uniform) };
    let inputs = generate_inputs(&graph, &[], seed, &opts);
    let reference = reference::eval::run(&graph, &inputs).map_err(|e| format!("reference: {e}"));
    let lowered = LoweringMode::ALL
        .iter()
        .map(|&mode| {
            let o = LowerOptions { enable_bf16: p.enable_bf16, ..LowerOptions::new(mode) };
            (mode, lower_with(&graph, &o).map_err(|e| format!("lowering: {e}")))
        })
        .collect();
    Ok(Prepared { program: p.clone(), graph, inputs, reference, lowered })
}

/// The runtime's constructor (kept in one place with [`run_program`]: the only calls into the
/// runtime).
fn build_program(l: &LoweredProgram, opts: &RunOptions) -> Result<Program, String> {
    Program::new(l, opts).map_err(|e| e.to_string())
}

fn run_program(p: &mut Program, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    p.run(inputs).map_err(|e| e.to_string())
}

/// How long and how often to time one row group.
#[derive(Clone, Copy, Debug)]
pub struct RowBudget {
    pub time: Duration,
    pub max_runs: usize,
    pub min_runs: usize,
    pub min_rounds: usize,
}

/// Times the four variants of one scenario at `threads`; returns one row per variant.
pub fn time_group(prep: &Prepared, threads: usize, budget: RowBudget, info: &MachineInfo) -> Vec<Row> {
    let p = &prep.program;
    let mut rows: Vec<Row> = Vec::new();
    let mut progs: Vec<Option<Program>> = Vec::new();
    for v in VARIANTS {
        let lowered = prep.lowered.iter().find(|(m, _)| *m == v.mode).map(|(_, l)| l);
        let mut row = Row {
            scenario: p.scenario.clone(),
            shape: p.shape.clone(),
            dtype: p.dtype.name().to_string(),
            mode: v.mode.name().to_string(),
            policy: policy_name(v.policy).to_string(),
            threads,
            median_ns: None,
            p10_ns: None,
            p90_ns: None,
            runs: 0,
            ratio_vs_main: None,
            ci_low: None,
            ci_high: None,
            within_noise: false,
            vs_static_mean: None,
            vs_static_mean_low: None,
            vs_static_mean_high: None,
            check: "ok".into(),
            delegates: 0,
            transposes: 0,
            oversubscribed: threads > info.cores,
            program: p.name.clone(),
            commit: info.commit.clone(),
            cpu: info.cpu.clone(),
            cores: info.cores,
            date: info.date.clone(),
        };
        let prog = match (lowered, &prep.reference) {
            (Some(Ok(l)), Ok(want)) => {
                row.delegates = l.summary.delegates;
                row.transposes = l.summary.transposes;
                let opts = RunOptions { threads, policy: v.policy, simd: SimdLevel::Auto };
                match build_program(l, &opts) {
                    Ok(mut prog) => match run_program(&mut prog, &prep.inputs) {
                        Ok(out) => match compare_outputs(&out, want, p.dtype) {
                            Ok(()) => Some(prog),
                            Err(e) => {
                                row.check = format!("mismatch: {e}");
                                None
                            }
                        },
                        Err(e) => {
                            row.check = format!("run: {e}");
                            None
                        }
                    },
                    Err(e) => {
                        row.check = format!("load: {e}");
                        None
                    }
                }
            }
            (Some(Err(e)), _) => {
                row.check = e.clone();
                None
            }
            (None, _) => {
                row.check = "not lowered".into();
                None
            }
            (_, Err(e)) => {
                row.check = e.clone();
                None
            }
        };
        progs.push(prog);
        rows.push(row);
    }

    // Warm-up: a few runs of each, so caches, pools and allocations are in steady state.
    for _ in 0..3 {
        for (k, prog) in progs.iter_mut().enumerate() {
            if let Some(pr) = prog {
                if let Err(e) = run_program(pr, &prep.inputs) {
                    rows[k].check = format!("run: {e}");
                    *prog = None;
                }
            }
        }
    }

    let n = VARIANTS.len();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); n];
    let start = Instant::now();
    let mut rounds = 0usize;
    while progs.iter().any(Option::is_some) {
        let elapsed = start.elapsed();
        // A row stops at `max_runs` rounds, or once its time share is spent and it has
        // `min_rounds`: a fast program gets its 200+ runs well within the share, a slow one
        // gets the share (the "minimum time per row") and never starves the rows after it.
        let done = rounds >= budget.max_runs || (rounds >= budget.min_rounds && elapsed >= budget.time);
        if done {
            break;
        }
        for j in 0..n {
            let k = (rounds + j) % n;
            if let Some(pr) = progs[k].as_mut() {
                let t0 = Instant::now();
                let out = run_program(pr, &prep.inputs);
                let dt = t0.elapsed().as_nanos() as f64;
                match out {
                    Ok(o) => {
                        drop(o);
                        samples[k].push(dt);
                    }
                    Err(e) => {
                        rows[k].check = format!("run: {e}");
                        progs[k] = None;
                    }
                }
            }
        }
        rounds += 1;
    }
    drop(progs);

    let main = samples[0].clone();
    for (k, row) in rows.iter_mut().enumerate() {
        if row.check != "ok" || samples[k].is_empty() {
            continue;
        }
        let s = stats::spread(&samples[k]);
        row.median_ns = Some(s.median.round());
        row.p10_ns = Some(s.p10.round());
        row.p90_ns = Some(s.p90.round());
        row.runs = samples[k].len();
        if main.len() == samples[k].len() {
            if let Some(r) = stats::paired_ratio(&main, &samples[k]) {
                row.ratio_vs_main = Some(round4(r.ratio));
                row.ci_low = Some(round4(r.low));
                row.ci_high = Some(round4(r.high));
                row.within_noise = r.within_noise();
            }
        }
    }
    // NhwcAware (index 3) against StaticMean with the same policy (index 2).
    if rows[2].check == "ok" && rows[3].check == "ok" && samples[2].len() == samples[3].len() {
        if let Some(r) = stats::paired_ratio(&samples[2], &samples[3]) {
            rows[3].vs_static_mean = Some(round4(r.ratio));
            rows[3].vs_static_mean_low = Some(round4(r.low));
            rows[3].vs_static_mean_high = Some(round4(r.high));
        }
    }
    rows
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// The programs a sweep times.
pub fn selected(args: &SweepArgs) -> Vec<NamedProgram> {
    programs::catalog()
        .into_iter()
        .filter(|p| p.bench && (!args.quick || p.quick))
        .filter(|p| args.only.is_empty() || args.only.iter().any(|o| p.name.contains(o.as_str())))
        .collect()
}

/// Runs the sweep and returns every row (in catalog order, then thread count, then variant).
pub fn sweep(args: &SweepArgs, info: &MachineInfo) -> anyhow::Result<Vec<Row>> {
    let threads: Vec<usize> =
        if args.quick && args.threads == SweepArgs::default().threads { vec![1, 2] } else { args.threads.clone() };
    if threads.is_empty() || threads.contains(&0) {
        bail!("--threads needs positive thread counts, got {threads:?}");
    }
    let progs = selected(args);
    if progs.is_empty() {
        bail!("no benchmark scenario matches --only {:?}", args.only);
    }
    // Preparation (lowering, reference runs) and the last rounds of each row come on top of
    // the timed share: 470 s keeps the default sweep under 10 minutes on 2 cores.
    let budget = crate::args::seconds("--budget", args.budget.unwrap_or(if args.quick { 35.0 } else { 470.0 }))?
        .max(Duration::from_secs(1));
    let start = Instant::now();
    let groups = progs.len() * threads.len();
    let pb = if args.no_progress {
        indicatif::ProgressBar::hidden()
    } else {
        let pb = indicatif::ProgressBar::new(groups as u64);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} rows of 4 ({eta} left) {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        pb
    };
    let mut rows = Vec::new();
    let mut done = 0usize;
    for p in &progs {
        pb.set_message(format!("{} (preparing)", p.name));
        let prep = prepare(p, args.seed)?;
        for &t in &threads {
            pb.set_message(format!("{} t{t}", p.name));
            // An equal share of the budget, plus what earlier rows left unused.
            let left = budget.saturating_sub(start.elapsed());
            let share = (left / (groups - done).max(1) as u32).max(budget / groups.max(1) as u32);
            let rb = RowBudget {
                time: share,
                max_runs: args.max_runs,
                min_runs: args.min_runs,
                min_rounds: args.min_rounds,
            };
            rows.extend(time_group(&prep, t, rb, info));
            done += 1;
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    Ok(rows)
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if let Some(BenchCmd::Check(c)) = args.cmd {
        return check::run(c);
    }
    let a = args.sweep;
    let mut info = MachineInfo::collect();
    let load_before = info.loadavg.clone();
    let t0 = Instant::now();
    let rows = sweep(&a, &info)?;
    info.loadavg = format!("{load_before} before, {} after", loadavg());
    let wall = t0.elapsed();
    let written = report::write_all(&a.out, &rows, &info, wall, a.quick)?;
    for w in &written {
        println!("wrote {}", w.display());
    }
    let failed: Vec<&Row> = rows.iter().filter(|r| r.check != "ok").collect();
    for r in &failed {
        eprintln!("check failed: {} {} {} t{}: {}", r.program, r.mode, r.policy, r.threads, r.check);
    }
    println!("sweep: {} rows in {:.1} s", rows.len(), wall.as_secs_f64());
    Ok(if failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
