//! `harness bench`: before/after latency sweeps per thread count, CSV reports, a summary,
//! SVG plots, and `harness bench check`, a latency gate against a committed baseline.
//!
//! Method (issues 8, 18, 22): for each scenario of [`crate::programs`] and each thread count,
//! the four programs being compared (`Main` before, `StaticMean` after with both thread
//! policies, `NhwcAware`) on our runtime, the three modes on real XNNPACK (same payloads, a
//! pthreadpool of the same size) and, at 1 thread, the before's mean alone are built on the
//! same inputs, bound to them once (our `Program::bind`, XNNPACK's setup) and invoked
//! alternately after a reference check and a warm-up: at 1 thread one run each per round with
//! the starting program rotating, at more in blocks of rounds per program once the other
//! programs' pool workers have parked (`timing::settle`). Each round gives paired ratios
//! against the engine's own `Main` and of ours against XNNPACK in the same mode; the reported ratio is their median with a
//! distribution-free 95% interval ([`stats::paired_ratio`]), "within noise" when it holds 1.
//! Rows stop at `--max-runs` rounds or when their share of the time budget is spent (never
//! below `--min-rounds`), so the default sweep fits its budget on a 2-core machine.

pub mod check;
pub mod plot;
pub mod report;
pub mod stats;
pub mod timing;
pub mod versus;

pub use timing::{time_group, RowBudget, XNNPACK_MODES};

use crate::engine::{self, Config, Engine, Instance, Simd, Subject};
use crate::programs::{self, NamedProgram};
use anyhow::{bail, Context};
use delegate::runtime::ThreadPolicy;
use delegate::{LoweredProgram, LoweringMode};
use reference::data::{DataOptions, Distribution};
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
    /// Rewrite the summary and plots from a sweep's CSVs (after new ExecuTorch timings).
    Summary(SummaryArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct SummaryArgs {
    /// Directory holding the sweep's bench-t<N>.csv (the outputs go there too).
    #[arg(long, default_value = "reports")]
    pub dir: PathBuf,
    /// The sweep's wall time in seconds, as it printed it (not in the CSVs).
    #[arg(long)]
    pub wall: f64,
    /// The load averages the sweep's summary gave (not in the CSVs).
    #[arg(long, default_value = "not recorded")]
    pub loadavg: String,
}

/// `bench summary`: the summary and plots of the CSVs in a directory.
fn resummarize(a: SummaryArgs) -> anyhow::Result<ExitCode> {
    let mut rows = Vec::new();
    for p in check::csv_files(&a.dir)?.values() {
        rows.extend(report::read_csv(p)?);
    }
    let Some(first) = rows.first() else { bail!("no sweep rows in {}", a.dir.display()) };
    let info = MachineInfo {
        commit: first.commit.clone(),
        cpu: first.cpu.clone(),
        simd: first.simd.clone(),
        cores: first.cores,
        date: first.date.clone(),
        loadavg: a.loadavg.clone(),
    };
    let xnnpack_skipped =
        (!rows.iter().any(|r| r.engine == "xnnpack")).then(|| "no XNNPACK rows in the sweep's CSVs".to_string());
    let sw = Sweep { rows, xnnpack_skipped };
    let wall = Duration::from_secs_f64(a.wall.max(0.0));
    for w in report::write_all(&a.dir, &sw, &info, wall, false)? {
        println!("wrote {}", w.display());
    }
    Ok(ExitCode::SUCCESS)
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
    /// `ours` or `xnnpack` (real XNNPACK on the same payloads; CSVs older than it: `ours`).
    #[serde(default = "ours")]
    pub engine: String,
    pub mode: String,
    /// Our runtime's thread policy; `pthreadpool` on XNNPACK rows; `portable` on the
    /// `portable_mean` rows (the before's mean alone, on our portable kernel).
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
    /// Ours rows: paired ratio ours / real XNNPACK in the same mode (same rounds) and its
    /// interval.
    #[serde(default)]
    pub vs_xnnpack: Option<f64>,
    #[serde(default)]
    pub vs_xnnpack_low: Option<f64>,
    #[serde(default)]
    pub vs_xnnpack_high: Option<f64>,
    /// Ours cost-model rows at more than one thread: paired ratio this / the same program on
    /// one thread, timed in the same rounds (its blocks interleaved with this row group's), and
    /// its interval; thread counts compared without the noise between row groups.
    #[serde(default)]
    pub vs_one_thread: Option<f64>,
    #[serde(default)]
    pub vs_one_thread_low: Option<f64>,
    #[serde(default)]
    pub vs_one_thread_high: Option<f64>,
    /// What one timed run is: `bound` (ours: [`engine::Prepared::bind`] then invoke),
    /// `xnn_invoke` or `xnn_program` ([`engine::XnnpackTiming`]).
    #[serde(default)]
    pub timed: String,
    /// `ok`, or why the outputs were not accepted (then no timing); `skipped: ...` when real
    /// XNNPACK refused the program (not a failure of ours).
    pub check: String,
    pub delegates: usize,
    pub transposes: usize,
    pub oversubscribed: bool,
    pub program: String,
    pub commit: String,
    pub cpu: String,
    /// The instruction set our kernels take (`avx512`, `avx2`, `scalar`).
    #[serde(default)]
    pub simd: String,
    pub cores: usize,
    pub date: String,
}

fn ours() -> String {
    "ours".into()
}

impl Row {
    /// A row whose program did not run for a reason that is not ours (XNNPACK refused it).
    pub fn skipped(&self) -> bool {
        self.check.starts_with("skipped")
    }
}

/// Facts about the machine and checkout recorded in every row.
#[derive(Clone, Debug, PartialEq)]
pub struct MachineInfo {
    pub commit: String,
    pub cpu: String,
    /// Our kernels' instruction set ([`engine::simd_level`]).
    pub simd: String,
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
        MachineInfo { commit, cpu, simd: engine::simd_level().into(), cores, date: utc_now(), loadavg: loadavg() }
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

/// Everything prepared once per scenario: inputs, reference outputs, the three lowerings, and
/// the before's mean alone.
pub struct Prepared {
    pub program: NamedProgram,
    pub graph: Graph,
    pub inputs: Vec<Tensor>,
    pub reference: Result<Vec<Tensor>, String>,
    pub lowered: Vec<(LoweringMode, Result<LoweredProgram, String>)>,
    /// The scenario's first mean as a program of its own, lowered in `Main` (where it is a
    /// portable op), with its inputs and reference outputs: what the before pays for the mean,
    /// compared with ExecuTorch's portable `mean.out` (scripts/time-executorch-portable.py).
    pub mean_alone: Option<Alone>,
}

/// A one-op program (see [`Prepared::mean_alone`]).
pub struct Alone {
    pub graph: Graph,
    pub inputs: Vec<Tensor>,
    pub reference: Result<Vec<Tensor>, String>,
    pub lowered: Result<LoweredProgram, String>,
}

pub fn prepare(p: &NamedProgram, seed: u64) -> anyhow::Result<Prepared> {
    let graph = p.graph().with_context(|| format!("program {} does not build", p.name))?;
    let (inputs, reference) = inputs_and_reference(&graph, seed);
    let lowered = LoweringMode::ALL
        .iter()
        .map(|&mode| (mode, engine::payload::lower(&graph, mode, p.enable_bf16).map_err(|e| format!("lowering: {e}"))))
        .collect();
    let mean_alone = mean_alone(&graph).map(|g| {
        let (inputs, reference) = inputs_and_reference(&g, seed);
        let lowered =
            engine::payload::lower(&g, LoweringMode::Main, p.enable_bf16).map_err(|e| format!("lowering: {e}"));
        Alone { graph: g, inputs, reference, lowered }
    });
    Ok(Prepared { program: p.clone(), graph, inputs, reference, lowered, mean_alone })
}

/// The sweep's inputs for `graph`: uniform data (representative timings, no NaN from rsqrt,
/// qs8 inputs in range).
pub fn timing_inputs(graph: &Graph, seed: u64) -> Vec<Tensor> {
    let opts = DataOptions { specials: false, distribution: Some(Distribution::Uniform) };
    engine::generate_inputs_with(graph, &[], seed, &opts)
}

fn inputs_and_reference(graph: &Graph, seed: u64) -> (Vec<Tensor>, Result<Vec<Tensor>, String>) {
    let inputs = timing_inputs(graph, seed);
    let reference = engine::Reference
        .build(Subject::graph(graph), Config::new(1, Simd::Best))
        .and_then(|mut r| r.run(&inputs))
        .map_err(|e| format!("reference: {e}"));
    (inputs, reference)
}

/// `x -> mean` with the first mean node of `graph` (its input's spec, dims, keepdim, dtype).
fn mean_alone(graph: &Graph) -> Option<Graph> {
    let node = graph.nodes.iter().find(|n| matches!(n.op, reference::graph::Op::Mean { .. }))?;
    let reference::graph::Op::Mean { dims, keepdim, dtype } = &node.op else { return None };
    let spec = graph.nodes.get(*node.inputs.first()?)?.spec.clone();
    let g = reference::graph::GraphBuilder::new();
    let x = g.input("x", spec);
    let m = match dtype {
        Some(d) => g.mean_dtype(x, dims, *keepdim, *d),
        None => g.mean(x, dims, *keepdim),
    };
    g.finish(&[m]).ok()
}

pub(crate) fn round4(x: f64) -> f64 {
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

/// What a sweep measured.
pub struct Sweep {
    /// In catalog order, then thread count, then program.
    pub rows: Vec<Row>,
    /// Why real XNNPACK did not run, if it did not (then there are no XNNPACK rows).
    pub xnnpack_skipped: Option<String>,
}

/// Runs the sweep.
pub fn sweep(args: &SweepArgs, info: &MachineInfo) -> anyhow::Result<Sweep> {
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
    let xnn = engine::Xnnpack::new();
    if let Some(why) = xnn.unavailable() {
        eprintln!("bench: real XNNPACK skipped ({why}); timing our runtime only");
    }
    let start = Instant::now();
    let groups = progs.len() * threads.len();
    let pb = if args.no_progress {
        indicatif::ProgressBar::hidden()
    } else {
        let pb = indicatif::ProgressBar::new(groups as u64);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} scenarios x threads ({eta} left) {msg}",
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
            rows.extend(time_group(&prep, t, rb, info, &xnn));
            done += 1;
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    Ok(Sweep { rows, xnnpack_skipped: xnn.unavailable() })
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    match args.cmd {
        Some(BenchCmd::Check(c)) => return check::run(c),
        Some(BenchCmd::Summary(a)) => return resummarize(a),
        None => {}
    }
    let a = args.sweep;
    let mut info = MachineInfo::collect();
    let load_before = info.loadavg.clone();
    let t0 = Instant::now();
    let sw = sweep(&a, &info)?;
    info.loadavg = format!("{load_before} before, {} after", loadavg());
    let wall = t0.elapsed();
    let written = report::write_all(&a.out, &sw, &info, wall, a.quick)?;
    let rows = sw.rows;
    for w in &written {
        println!("wrote {}", w.display());
    }
    let failed: Vec<&Row> = rows.iter().filter(|r| r.check != "ok" && !r.skipped()).collect();
    for r in &failed {
        eprintln!("check failed: {} {} {} {} t{}: {}", r.program, r.engine, r.mode, r.policy, r.threads, r.check);
    }
    for r in rows.iter().filter(|r| r.skipped()) {
        eprintln!("skipped: {} {} {} t{}: {}", r.program, r.engine, r.mode, r.threads, r.check);
    }
    println!("sweep: {} rows in {:.1} s", rows.len(), wall.as_secs_f64());
    Ok(if failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
