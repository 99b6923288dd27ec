//! `harness fuzz`: the main job. Generates cases, runs every oracle on each, and turns the
//! first failure (or every one, with `--keep-going`) into a minimized regression case under
//! `corpora/regressions/<oracle>-<hash>.json`, written before the process exits non-zero,
//! panics included.
//!
//! ```text
//! cargo run --release -p harness -- fuzz                       # 60 s, random seed
//! cargo run --release -p harness -- fuzz --duration 600 --shard 1/4 --seed 42
//! cargo run --release -p harness -- fuzz --cases 100000 --keep-going
//! cargo run --release -p harness -- fuzz --pattern rms_norm --dtype f16
//! ```
//!
//! Case `k` of a campaign depends only on `(seed, k)`; shard `i/n` runs the cases with
//! `k % n == i`, so `n` machines with the same seed split one campaign with no overlap, and
//! `--seed S --cases N --jobs 1` reproduces a run exactly. Within a process, `--jobs` workers
//! (default: one per CPU) take case numbers from one counter.

use crate::case::{Case, Pattern};
use crate::engine;
use crate::gen::{nth_case, GenConfig};
use crate::inflight;
use crate::minimize::{self, Budget};
use crate::oracle::{self, CaseReport, CheckOptions};
use crate::report::{self, Coverage};
use anyhow::{bail, Context, Result};
use delegate::program::Step;
use delegate::LoweringMode;
use indicatif::{ProgressBar, ProgressStyle};
use reference::ElemType;
use std::cell::RefCell;
use std::io::IsTerminal;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Command-line arguments of `harness fuzz`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct FuzzArgs {
    /// Time budget in seconds (default 60; with --cases and no --duration: no time limit).
    #[arg(long, allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// Stop after this many cases (of this shard).
    #[arg(long)]
    pub cases: Option<u64>,
    /// Campaign seed (default: from the clock, printed so the run can be repeated).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run shard I of N (`--shard 0/4`): cases with index % N == I.
    #[arg(long, default_value = "0/1")]
    pub shard: String,
    /// Keep fuzzing after a failure (each one is minimized and saved).
    #[arg(long)]
    pub keep_going: bool,
    /// Do not minimize failures (save them as found).
    #[arg(long)]
    pub no_minimize: bool,
    /// Where regression cases are written.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Largest input, in elements.
    #[arg(long, default_value_t = 4096)]
    pub max_elems: usize,
    /// The multi-threaded run's thread count (every case also runs at 1 thread).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Only these patterns (repeatable): mean, add_mean, gap, rms_norm, qk_norm,
    /// pre_norm_mlp, conv_mean, conv_mean_conv, conv_sub_mean, shared_input, adaptive_pool.
    #[arg(long = "pattern")]
    pub patterns: Vec<String>,
    /// Only these dtypes (repeatable): f32, f16, bf16, qs8.
    #[arg(long = "dtype")]
    pub dtypes: Vec<String>,
    /// Run the full configuration matrix on every case (every mode on both SIMD paths at
    /// every thread count); by default each case runs every mode at 1 thread on the SIMD
    /// path plus one rotating configuration (nine consecutive cases cover the matrix).
    #[arg(long)]
    pub full_matrix: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// A case still running after this many seconds is saved as `hang-<hash>.json` and the
    /// job exits with status 3 (0: no watchdog).
    #[arg(long, default_value_t = 30.0, allow_negative_numbers = true)]
    pub case_timeout: f64,
    /// Worker threads checking cases side by side (default: one per CPU). Each case still
    /// depends only on (seed, index) and `--cases N` runs the first N of the shard; with
    /// `--pattern`/`--dtype` filters that holds for `--jobs 1` only.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Run without real XNNPACK (by default every case also runs on it when the library is
    /// there: see `scripts/fetch-xnnpack.sh`).
    #[arg(long)]
    pub no_xnnpack: bool,
    /// Write cargo-fuzz seed corpora built from corpora/ into this folder, then exit.
    #[arg(long, value_name = "DIR")]
    pub export_fuzz_corpus: Option<PathBuf>,
}

/// A campaign, independent of the command line (the `mutants` job drives it too).
#[derive(Clone, Debug)]
pub struct Campaign {
    pub seed: u64,
    pub shard: (u64, u64),
    pub max_cases: Option<u64>,
    pub duration: Option<Duration>,
    pub gen: GenConfig,
    pub keep_going: bool,
    pub minimize: bool,
    /// Where to save regressions (`None`: keep them in memory only).
    pub out_dir: Option<PathBuf>,
    pub progress: bool,
    pub full_matrix: bool,
    pub patterns: Vec<Pattern>,
    pub dtypes: Vec<ElemType>,
    /// A case running longer than this is saved (when `out_dir` is set) and ends the process
    /// with status 3: see [`Watchdog`].
    pub case_timeout: Option<Duration>,
    /// Worker threads, each checking its own cases (1: cases run in index order).
    pub jobs: usize,
    /// Also check every case on real XNNPACK (when the library is there).
    pub xnnpack: bool,
    /// Set from outside (SIGINT/SIGTERM): workers finish the case in hand and stop, a
    /// failure being minimized stops shrinking, and the outcome says so.
    pub interrupt: Option<Arc<AtomicBool>>,
}

impl Campaign {
    /// Whether the interrupt flag is set.
    pub fn interrupted(&self) -> bool {
        self.interrupt.as_ref().is_some_and(|f| f.load(Ordering::Acquire))
    }
}

impl Default for Campaign {
    fn default() -> Self {
        Campaign {
            seed: 0,
            shard: (0, 1),
            max_cases: None,
            duration: Some(Duration::from_secs(60)),
            gen: GenConfig::default(),
            keep_going: false,
            minimize: true,
            out_dir: None,
            progress: false,
            full_matrix: false,
            patterns: vec![],
            dtypes: vec![],
            case_timeout: Some(Duration::from_secs(30)),
            jobs: 1,
            xnnpack: true,
            interrupt: None,
        }
    }
}

/// Watches the case in progress from a second thread. A hang (a deadlocked pool, a kernel
/// looping forever) cannot be caught like a panic; without this a nightly run would be
/// killed by CI's job timeout with the case lost. `on_hang` gets the case, its index and how
/// long it has run, once.
pub struct Watchdog {
    current: Arc<Mutex<Option<(Case, u64, Instant)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    pub fn start(timeout: Duration, on_hang: impl Fn(&Case, u64, Duration) + Send + 'static) -> Watchdog {
        let current: Arc<Mutex<Option<(Case, u64, Instant)>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (cur, st) = (current.clone(), stop.clone());
        let tick = (timeout / 4).clamp(Duration::from_millis(1), Duration::from_secs(1));
        let thread = std::thread::Builder::new()
            .name("fuzz-watchdog".into())
            .spawn(move || {
                while !st.load(Ordering::Acquire) {
                    std::thread::park_timeout(tick);
                    let hung = {
                        let mut c = cur.lock().unwrap_or_else(|e| e.into_inner());
                        match c.as_ref() {
                            Some((_, _, t0)) if t0.elapsed() >= timeout => c.take(),
                            _ => None,
                        }
                    };
                    if let Some((case, index, t0)) = hung {
                        on_hang(&case, index, t0.elapsed());
                    }
                }
            })
            .ok();
        Watchdog { current, stop, thread }
    }

    /// `case` (number `index`) starts now.
    pub fn watch(&self, case: &Case, index: u64) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some((case.clone(), index, Instant::now()));
    }

    /// No case is running.
    pub fn clear(&self) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// What the fuzz job does with a hung case: save it as `hang-<hash>.json` (not minimized:
/// every candidate could hang too), say how to replay it, and exit with status 3.
fn hang_handler(c: &Campaign) -> impl Fn(&Case, u64, Duration) + Send + 'static {
    let (dir, seed) = (c.out_dir.clone(), c.seed);
    move |case, index, ran| {
        let label = "hang/timeout";
        eprintln!("\nHANG case #{index} still running after {ran:.1?}: {}", case.to_json());
        let mut report = CaseReport::default();
        report.checks.push(oracle::Check {
            oracle: oracle::OracleKind::Panic,
            scope: "case".into(),
            verdict: oracle::Verdict::fail("timeout", format!("still running after {ran:.1?}")),
            engine: None,
        });
        if let Some(dir) = &dir {
            match save_regression(dir, case, label, &format!("harness fuzz --seed {seed} (case #{index})"), &report) {
                Ok(p) => eprintln!(
                    "  saved to {}; replay with: cargo run --release -p harness -- replay {}",
                    p.display(),
                    p.display()
                ),
                Err(e) => eprintln!("error: could not save the hung case: {e:#}"),
            }
        }
        std::process::exit(3);
    }
}

/// One failure found by a campaign.
#[derive(Clone, Debug)]
pub struct Found {
    /// Index of the case in the campaign.
    pub index: u64,
    /// `<oracle>/<kind>`.
    pub label: String,
    pub original: Case,
    pub minimized: Case,
    /// The minimized case's verdicts, in full.
    pub detail: String,
    pub path: Option<PathBuf>,
}

/// What a campaign did.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub coverage: Coverage,
    pub found: Vec<Found>,
    pub elapsed: Duration,
    /// Cases generated but filtered out by `--pattern`/`--dtype`.
    pub filtered: u64,
    /// Case numbers of the shard handed out: every one below it was checked (or filtered
    /// out), so `--cases` of this many repeats an unfiltered campaign exactly.
    pub taken: u64,
    /// The campaign stopped on its interrupt flag.
    pub interrupted: bool,
}

impl Outcome {
    pub fn cases_per_second(&self) -> f64 {
        self.coverage.cases as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

thread_local! {
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `f`, turning a panic into `Err(message with location)`. While a campaign runs the
/// panic hook records the message instead of printing it.
fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    LAST_PANIC.with(|p| p.borrow_mut().take());
    panic::catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        LAST_PANIC.with(|p| p.borrow_mut().take()).unwrap_or_else(|| {
            payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic with a non-string payload".into())
        })
    })
}

/// Every oracle on a case, a panic becoming a `panic` verdict.
pub fn check_caught(case: &Case, opts: &CheckOptions) -> CaseReport {
    catch(|| oracle::check(case, opts)).unwrap_or_else(CaseReport::panicked)
}

/// The check options the fuzz loop uses for case `index` (see [`CheckOptions::sampled`]),
/// or the full matrix; either way with the fast reference (a failure is then checked again
/// with the plain one, see `handle_failure`), and without real XNNPACK under `--no-xnnpack`.
fn loop_options(c: &Campaign, index: u64) -> CheckOptions {
    let mut o = if c.full_matrix {
        CheckOptions { reference: engine::Interpreter::Fast, ..CheckOptions::default() }
    } else {
        CheckOptions::sampled(index)
    };
    if !c.xnnpack {
        o.xnnpack = None;
    }
    o
}

/// The label of a report's first failure.
pub fn failure_label(r: &CaseReport) -> Option<String> {
    r.first_failure().map(|c| c.label())
}

/// Runs a campaign.
pub fn campaign(c: &Campaign) -> Outcome {
    let prev_hook = panic::take_hook();
    panic::set_hook(Box::new(|info| {
        let msg = info.to_string();
        LAST_PANIC.with(|p| *p.borrow_mut() = Some(msg));
    }));
    let out = campaign_inner(c);
    panic::set_hook(prev_hook);
    out
}

/// State the workers of one campaign share.
struct Shared {
    start: Instant,
    /// Next case number of this shard (case index `shard + nshards * t`).
    next: AtomicU64,
    /// Cases taken (filtered ones excluded), for `max_cases` under `--pattern`/`--dtype`.
    taken: AtomicU64,
    checked: AtomicU64,
    filtered: AtomicU64,
    failures: AtomicU64,
    stop: AtomicBool,
    last_status: Mutex<Instant>,
    outcome: Mutex<Outcome>,
}

fn campaign_inner(c: &Campaign) -> Outcome {
    let start = Instant::now();
    // Cases a previous run died on (a crash inside real XNNPACK): reported as failures.
    let crashed = c.out_dir.as_deref().map(inflight::collect).unwrap_or_default();
    for k in &crashed {
        eprintln!(
            "a previous run died while checking a case (`{}`); saved to {}; replay with: cargo run --release -p harness -- replay {}",
            k.origin,
            k.saved.display(),
            k.saved.display()
        );
    }
    let bar = if c.progress { Some(progress_bar(c)) } else { None };
    let shared = Shared {
        start,
        next: AtomicU64::new(0),
        taken: AtomicU64::new(0),
        checked: AtomicU64::new(0),
        filtered: AtomicU64::new(0),
        failures: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        last_status: Mutex::new(start),
        outcome: Mutex::new(Outcome::default()),
    };
    engine::set_checkers(c.jobs);
    std::thread::scope(|s| {
        for w in 1..c.jobs.max(1) {
            let (shared, bar) = (&shared, bar.as_ref());
            // A worker that cannot start leaves its share to the others.
            let _ = std::thread::Builder::new()
                .name(format!("fuzz-{w}"))
                .spawn_scoped(s, move || worker(c, shared, bar, w));
        }
        worker(c, &shared, bar.as_ref(), 0);
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let mut outcome = shared.outcome.into_inner().unwrap_or_else(|e| e.into_inner());
    outcome.found.sort_by_key(|f| f.index);
    for k in crashed {
        let detail = format!("  the process died while checking it ({})\n", k.origin);
        let (original, minimized) = (k.case.clone(), k.case);
        outcome.found.insert(
            0,
            Found { index: 0, label: "crash/signal".into(), original, minimized, detail, path: Some(k.saved) },
        );
    }
    outcome.filtered = shared.filtered.into_inner();
    // A worker that hit `max_cases` took one number past it and ran nothing for it.
    let next = shared.next.into_inner();
    outcome.taken = match c.max_cases {
        Some(m) if c.patterns.is_empty() && c.dtypes.is_empty() => next.min(m),
        _ => next,
    };
    outcome.interrupted = c.interrupted();
    outcome.elapsed = start.elapsed();
    outcome
}

/// One worker of a campaign: takes case numbers from the shared counter until a limit, a
/// failure (without `--keep-going`) or another worker stops the campaign.
fn worker(c: &Campaign, sh: &Shared, bar: Option<&ProgressBar>, id: usize) {
    let (shard, nshards) = c.shard;
    let plain_status = c.progress && !std::io::stderr().is_terminal();
    let watchdog = c.case_timeout.map(|t| Watchdog::start(t, hang_handler(c)));
    let mut local = Outcome::default();
    let unfiltered = c.patterns.is_empty() && c.dtypes.is_empty();
    // The case in flight, on disk while it runs (real XNNPACK, and our SIMD kernels, are code
    // that can crash the process: see `inflight`).
    let mut in_flight = c.out_dir.as_deref().and_then(|d| inflight::InFlight::open(d, id).ok());
    while !sh.stop.load(Ordering::Acquire) && !c.interrupted() && c.duration.is_none_or(|d| sh.start.elapsed() < d) {
        let t = sh.next.fetch_add(1, Ordering::Relaxed);
        if unfiltered && c.max_cases.is_some_and(|m| t >= m) {
            // Every number is a case: the first `m` numbers, whatever the number of workers.
            break;
        }
        let this = shard + nshards * t;
        let case = nth_case(c.seed, this, &c.gen);
        if (!c.patterns.is_empty() && !c.patterns.contains(&case.pattern))
            || (!c.dtypes.is_empty() && !c.dtypes.contains(&case.dtype))
        {
            let f = sh.filtered.fetch_add(1, Ordering::Relaxed) + 1;
            if f > 1_000_000 && sh.checked.load(Ordering::Relaxed) == 0 {
                sh.stop.store(true, Ordering::Release);
            }
            continue;
        }
        if !unfiltered && c.max_cases.is_some_and(|m| sh.taken.fetch_add(1, Ordering::Relaxed) >= m) {
            break;
        }
        if let Some(w) = &watchdog {
            w.watch(&case, this);
        }
        if let Some(f) = &mut in_flight {
            f.record(&case, this, c.seed);
        }
        let report = check_caught(&case, &loop_options(c, this));
        if let Some(w) = &watchdog {
            // Minimizing a failure runs many cases and may take longer than one case.
            w.clear();
        }
        local.coverage.record(&case, &report);
        let n = sh.checked.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(label) = failure_label(&report) {
            sh.failures.fetch_add(1, Ordering::Relaxed);
            if !c.keep_going {
                // The other workers finish their case and stop; this one minimizes.
                sh.stop.store(true, Ordering::Release);
            }
            if let Some(b) = bar {
                b.suspend(|| eprintln!("\nfailure {label} at case #{this}: {}\nminimizing...", case.label()));
            }
            let found = handle_failure(c, this, &case, &label, &report);
            if let Some(b) = bar {
                b.suspend(|| print_found(&found));
            }
            local.found.push(found);
            if !c.keep_going {
                break;
            }
        }
        let el = sh.start.elapsed().as_secs_f64();
        let failures = sh.failures.load(Ordering::Relaxed);
        if let Some(b) = bar.filter(|_| n.is_multiple_of(64)) {
            match c.max_cases {
                Some(_) => b.set_position(n),
                None => b.set_position(el as u64),
            }
            b.set_message(format!(
                "{n} cases, {:.0} cases/s, {failures} failures{}",
                n as f64 / el.max(1e-9),
                c.out_dir.as_ref().map_or(String::new(), |d| format!(" (saved under {})", d.display()))
            ));
        }
        if plain_status && n.is_multiple_of(64) {
            let mut last = sh.last_status.lock().unwrap_or_else(|e| e.into_inner());
            if last.elapsed() > Duration::from_secs(10) {
                *last = Instant::now();
                eprintln!("fuzz: {n} cases in {el:.0} s ({:.0} cases/s), {failures} failures", n as f64 / el);
            }
        }
    }
    let mut out = sh.outcome.lock().unwrap_or_else(|e| e.into_inner());
    out.coverage.merge(&local.coverage);
    out.found.append(&mut local.found);
}

fn progress_bar(c: &Campaign) -> ProgressBar {
    let (len, unit) = match (c.max_cases, c.duration) {
        (Some(n), _) => (n, "cases"),
        (None, Some(d)) => (d.as_secs().max(1), "s"),
        (None, None) => (0, "cases"),
    };
    let bar = ProgressBar::new(len);
    let tmpl = format!("{{spinner}} [{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} {unit}  {{msg}}");
    bar.set_style(ProgressStyle::with_template(&tmpl).unwrap_or_else(|_| ProgressStyle::default_bar()));
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Minimizes (unless disabled), saves, and describes one failure.
fn handle_failure(c: &Campaign, index: u64, case: &Case, label: &str, report: &CaseReport) -> Found {
    let origin = format!("harness fuzz --seed {} (case #{index})", c.seed);
    // On disk before minimizing (which may take long, or be interrupted).
    let first = c.out_dir.as_ref().and_then(|dir| save_regression(dir, case, label, &origin, report).ok());
    // The minimizer and replay check the full matrix with the plain reference, so what we
    // save replays anywhere.
    let full = CheckOptions { xnnpack: c.xnnpack.then_some(oracle::XnnpackPlan::FULL), ..CheckOptions::default() };
    let minimized = if c.minimize {
        // Interrupted, it stops shrinking (every further candidate "passes") and keeps the
        // smallest failing case so far.
        let m = minimize::minimize(case, Budget::default(), |cand| {
            !c.interrupted() && failure_label(&check_caught(cand, &full)).as_deref() == Some(label)
        });
        m.case
    } else {
        case.clone()
    };
    let final_report = check_caught(&minimized, &full);
    // If the full matrix does not reproduce the loop's failure, keep the case as found.
    let (minimized, final_report) =
        if failure_label(&final_report).is_some() { (minimized, final_report) } else { (case.clone(), report.clone()) };
    let detail = report::verdicts(&final_report);
    let path =
        c.out_dir.as_ref().and_then(|dir| match save_regression(dir, &minimized, label, &origin, &final_report) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("error: could not save the regression case: {e:#}");
                first.clone()
            }
        });
    // The minimized case replaces the one saved as found.
    if let (Some(f), Some(p)) = (&first, &path) {
        if f != p {
            let _ = std::fs::remove_file(f);
        }
    }
    Found { index, label: label.to_string(), original: case.clone(), minimized, detail, path }
}

/// Writes `<dir>/<oracle>-<hash>.json`: two comment lines (label, origin, first detail
/// line) and the case as one JSON line.
pub fn save_regression(dir: &Path, case: &Case, label: &str, origin: &str, report: &CaseReport) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let oracle = label.split('/').next().unwrap_or("fail");
    let path = dir.join(format!("{oracle}-{}.json", case.hash()));
    let first = report
        .first_failure()
        .map(|f| match &f.verdict {
            oracle::Verdict::Fail { detail, .. } => {
                format!("{}: {}", f.scope, detail.lines().next().unwrap_or(""))
            }
            _ => String::new(),
        })
        .unwrap_or_default();
    let text = format!("// {label}, found by `{origin}`\n// {first}\n{}\n", case.to_json());
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

fn print_found(f: &Found) {
    eprintln!("FAIL {} (case #{})", f.label, f.index);
    eprintln!("  found:     {}", f.original.to_json());
    eprintln!("  minimized: {}", f.minimized.to_json());
    eprint!("{}", f.detail);
    if let Some(p) = &f.path {
        eprintln!("  saved to {}; replay with: cargo run --release -p harness -- replay {}", p.display(), p.display());
    }
}

fn parse_shard(s: &str) -> Result<(u64, u64)> {
    let (i, n) = s.split_once('/').context("--shard wants I/N, e.g. 0/4")?;
    let (i, n): (u64, u64) = (i.trim().parse()?, n.trim().parse()?);
    if n == 0 || i >= n {
        bail!("--shard {s}: need 0 <= I < N");
    }
    Ok((i, n))
}

fn parse_pattern(s: &str) -> Result<Pattern> {
    Pattern::ALL
        .iter()
        .copied()
        .find(|p| p.name() == s)
        .with_context(|| format!("unknown pattern {s:?}; one of {:?}", Pattern::ALL.map(|p| p.name())))
}

fn parse_dtype(s: &str) -> Result<ElemType> {
    ElemType::ALL
        .iter()
        .copied()
        .find(|d| d.name() == s || format!("{d:?}").to_lowercase() == s)
        .with_context(|| format!("unknown dtype {s:?}; one of f32, f16, bf16, qs8"))
}

/// The default place for regressions: `corpora/regressions` under the current directory
/// (never a path compiled into the binary: a copy built elsewhere saves where it runs).
fn default_out_dir() -> PathBuf {
    corpora_dir().join("regressions")
}

/// The `corpora/` folder under the current directory.
pub fn corpora_dir() -> PathBuf {
    PathBuf::from("corpora")
}

/// Every case file under `corpora/seeds` and `corpora/regressions`, sorted.
pub fn corpus_files(corpora: &Path) -> Result<Vec<PathBuf>> {
    let mut files = vec![];
    for sub in ["seeds", "regressions"] {
        let dir = corpora.join(sub);
        if !dir.is_dir() {
            continue;
        }
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
                let p = e?.path();
                if p.is_dir() {
                    // Not `.in-flight/` (see `inflight`): the fuzz job's own working files.
                    if !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')) {
                        stack.push(p);
                    }
                } else if p.extension().is_some_and(|x| x == "json" || x == "jsonl") {
                    files.push(p);
                }
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Writes cargo-fuzz seed corpora built from `corpora/`: every case as JSON for
/// `differential` and `roundtrip` (their targets read a JSON case when the input is one),
/// and every payload of every mode's lowering for `load_bytes`.
pub fn export_fuzz_corpus(corpora: &Path, out: &Path) -> Result<usize> {
    let mut written = 0;
    for t in ["differential", "roundtrip", "load_bytes"] {
        std::fs::create_dir_all(out.join(t))?;
    }
    for f in corpus_files(corpora)? {
        for case in Case::read_file(&f)? {
            let json = case.to_json();
            for t in ["differential", "roundtrip"] {
                std::fs::write(out.join(t).join(format!("case-{}", case.hash())), &json)?;
                written += 1;
            }
            let Ok(built) = crate::patterns::build(&case) else { continue };
            for mode in LoweringMode::ALL {
                let Ok(p) = crate::engine::lower(&built.graph, mode) else { continue };
                for (k, step) in p.steps.iter().enumerate() {
                    if let Step::Delegate(seg) = step {
                        let bytes = crate::engine::write(&seg.graph).unwrap_or_default();
                        let name = format!("payload-{}-{}-{k}", case.hash(), mode.name());
                        std::fs::write(out.join("load_bytes").join(name), bytes)?;
                        written += 1;
                    }
                }
            }
        }
    }
    Ok(written)
}

pub fn run(args: FuzzArgs) -> Result<ExitCode> {
    if let Some(out) = &args.export_fuzz_corpus {
        let n = export_fuzz_corpus(&corpora_dir(), out)?;
        println!("wrote {n} seed inputs under {}", out.display());
        return Ok(ExitCode::SUCCESS);
    }
    let seed = args.seed.unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        (t.as_nanos() as u64) ^ (std::process::id() as u64) << 32
    });
    let shard = parse_shard(&args.shard)?;
    let duration = match (args.duration, args.cases) {
        (Some(d), _) => Some(crate::args::seconds("--duration", d)?),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(60)),
    };
    // Options under which no generated case could run would make every case a skip:
    // refused here, before the campaign starts.
    if args.threads < 2 || args.threads > crate::case::MAX_THREADS {
        bail!(
            "--threads {}: the multi-threaded run's count, 2 to {} (every case also runs at 1 thread)",
            args.threads,
            crate::case::MAX_THREADS
        );
    }
    if args.max_elems == 0 || args.max_elems > crate::case::MAX_ELEMS {
        bail!("--max-elems {}: 1 to {} elements", args.max_elems, crate::case::MAX_ELEMS);
    }
    if args.cases == Some(0) {
        bail!("--cases 0: nothing to run");
    }
    let campaign = Campaign {
        seed,
        shard,
        max_cases: args.cases,
        duration,
        gen: GenConfig { max_elems: args.max_elems, threads: args.threads, ..GenConfig::default() },
        keep_going: args.keep_going,
        minimize: !args.no_minimize,
        out_dir: Some(args.out.clone().unwrap_or_else(default_out_dir)),
        progress: !args.quiet,
        full_matrix: args.full_matrix,
        patterns: args.patterns.iter().map(|p| parse_pattern(p)).collect::<Result<_>>()?,
        dtypes: args.dtypes.iter().map(|d| parse_dtype(d)).collect::<Result<_>>()?,
        case_timeout: crate::args::seconds_or_off("--case-timeout", args.case_timeout)?,
        jobs: match args.jobs {
            Some(0) => bail!("--jobs must be at least 1"),
            Some(j) => j,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        },
        xnnpack: !args.no_xnnpack,
        interrupt: None,
    };
    if let Err(why) = first_runnable(&campaign) {
        bail!("no case of this campaign can run under these options, so every one would be a skip: {why}");
    }
    let interrupt = match crate::interrupt::Interrupt::install() {
        Ok(i) => Some(i),
        Err(e) => {
            eprintln!("warning: no SIGINT/SIGTERM handler ({e}): an interrupt will not print the summary");
            None
        }
    };
    let campaign = Campaign { interrupt: interrupt.as_ref().map(|i| i.stop.clone()), ..campaign };
    let limit = match (campaign.max_cases, campaign.duration) {
        (Some(n), Some(d)) => format!("{n} cases or {:.0} s", d.as_secs_f64()),
        (Some(n), None) => format!("{n} cases"),
        (None, Some(d)) => format!("{:.0} s", d.as_secs_f64()),
        (None, None) => "no limit".into(),
    };
    eprintln!(
        "harness fuzz: seed {seed}, shard {}/{}, {limit}, {} job{}, inputs up to {} elements, threads 1 and {}{}",
        shard.0,
        shard.1,
        campaign.jobs,
        if campaign.jobs == 1 { "" } else { "s" },
        campaign.gen.max_elems,
        args.threads,
        if campaign.keep_going { ", keep going" } else { "" }
    );
    if let Some(dir) = &campaign.out_dir {
        eprintln!("failures are saved under {}", dir.display());
    }
    let outcome = self::campaign(&campaign);
    let cov = &outcome.coverage;
    println!(
        "fuzz: {} cases in {:.1} s ({:.0} cases/s), seed {seed}, shard {}/{}, {} failure{}",
        cov.cases,
        outcome.elapsed.as_secs_f64(),
        outcome.cases_per_second(),
        shard.0,
        shard.1,
        outcome.found.len(),
        if outcome.found.len() == 1 { "" } else { "s" }
    );
    print!("{}", cov.summary());
    for f in outcome.found.iter().take(20) {
        println!(
            "FAIL {} (case #{}) -> {}",
            f.label,
            f.index,
            f.path.as_ref().map_or("(not saved)".to_string(), |p| p.display().to_string())
        );
    }
    let interrupted = interrupt.as_ref().filter(|i| i.fired()).map(|i| i.which());
    if let Some((name, _)) = interrupted {
        println!("interrupted by {name} after {} cases: the cases in flight finished, nothing was lost", cov.cases);
    }
    if !outcome.found.is_empty() || interrupted.is_some() {
        println!("rerun this campaign with: {}", rerun_command(&args, seed, &outcome));
    }
    if let Some((_, status)) = interrupted {
        return Ok(ExitCode::from(status));
    }
    if !outcome.found.is_empty() {
        return Ok(ExitCode::from(1));
    }
    if cov.cases > 0 && cov.per_oracle.values().all(|[pass, _, fail]| pass + fail == 0) {
        // Every check of every case was a skip: nothing was tested.
        eprintln!("error: every one of the {} cases was skipped: nothing was checked", cov.cases);
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

/// The command that repeats this campaign's cases exactly: its seed, shard and options,
/// with `--cases` set to the case numbers it handed out (for an unfiltered campaign the
/// first N of the shard, whatever the number of jobs; with `--pattern`/`--dtype`, exact
/// with `--jobs 1`).
fn rerun_command(args: &FuzzArgs, seed: u64, outcome: &Outcome) -> String {
    let mut cmd = format!("cargo run --release -p harness -- fuzz --seed {seed} --shard {}", args.shard);
    let filtered = !args.patterns.is_empty() || !args.dtypes.is_empty();
    let n = if filtered { outcome.coverage.cases } else { outcome.taken };
    cmd.push_str(&format!(" --cases {n}"));
    for p in &args.patterns {
        cmd.push_str(&format!(" --pattern {p}"));
    }
    for d in &args.dtypes {
        cmd.push_str(&format!(" --dtype {d}"));
    }
    if filtered {
        cmd.push_str(" --jobs 1");
    }
    if args.threads != 2 {
        cmd.push_str(&format!(" --threads {}", args.threads));
    }
    if args.max_elems != 4096 {
        cmd.push_str(&format!(" --max-elems {}", args.max_elems));
    }
    if args.full_matrix {
        cmd.push_str(" --full-matrix");
    }
    if args.keep_going {
        cmd.push_str(" --keep-going");
    }
    cmd
}

/// The first case number of the campaign whose case passes its filters and builds (up
/// to a million numbers, generated only: a few tenths of a second when none does), or
/// why none does. Options under which none would run make every case a skip.
fn first_runnable(c: &Campaign) -> Result<u64, String> {
    let mut why = None;
    for t in 0..1_000_000u64 {
        let case = nth_case(c.seed, c.shard.0 + c.shard.1 * t, &c.gen);
        if (!c.patterns.is_empty() && !c.patterns.contains(&case.pattern))
            || (!c.dtypes.is_empty() && !c.dtypes.contains(&case.dtype))
        {
            continue;
        }
        match crate::patterns::build(&case) {
            Ok(_) => return Ok(t),
            Err(e) if why.is_none() => why = Some(e.to_string()),
            Err(_) => {}
        }
        if t >= 10_000 && why.is_some() {
            break;
        }
    }
    Err(why.unwrap_or_else(|| "no generated case has the --pattern and --dtype asked for".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_parsing() {
        assert_eq!(parse_shard("1/4").unwrap(), (1, 4));
        assert!(parse_shard("4/4").is_err());
        assert!(parse_shard("1-4").is_err());
        assert!(parse_shard("0/0").is_err());
    }

    #[test]
    fn pattern_and_dtype_names() {
        assert_eq!(parse_pattern("rms_norm").unwrap(), Pattern::RmsNorm);
        assert!(parse_pattern("rmsnorm").is_err());
        assert_eq!(parse_dtype("bf16").unwrap(), ElemType::Bf16);
        assert_eq!(parse_dtype("fp16").unwrap(), ElemType::F16);
    }

    #[test]
    fn the_watchdog_reports_a_case_past_its_timeout_once_and_not_a_finished_one() {
        let (tx, rx) = std::sync::mpsc::channel();
        let w = Watchdog::start(Duration::from_millis(40), move |case: &Case, index, ran| {
            tx.send((case.to_json(), index, ran)).unwrap();
        });
        let quick = Case::new(Pattern::Mean, &[4, 4], &[1], true);
        w.watch(&quick, 1);
        w.clear();
        std::thread::sleep(Duration::from_millis(150));
        assert!(rx.try_recv().is_err(), "a case that finished in time was reported");
        let slow = Case::new(Pattern::Gap, &[1, 2, 3, 3], &[2, 3], true);
        w.watch(&slow, 7);
        let (json, index, ran) = rx.recv_timeout(Duration::from_secs(5)).expect("the hung case is reported");
        assert_eq!((json, index), (slow.to_json(), 7));
        assert!(ran >= Duration::from_millis(40));
        std::thread::sleep(Duration::from_millis(150));
        assert!(rx.try_recv().is_err(), "reported twice");
        drop(w);
    }

    #[test]
    fn a_panic_becomes_a_message_with_its_text() {
        let prev = panic::take_hook();
        panic::set_hook(Box::new(|info| {
            let msg = info.to_string();
            LAST_PANIC.with(|p| *p.borrow_mut() = Some(msg));
        }));
        let r: Result<(), String> = catch(|| panic!("boom {}", 7));
        panic::set_hook(prev);
        assert!(r.unwrap_err().contains("boom 7"));
    }
}
