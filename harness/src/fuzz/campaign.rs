//! A campaign: its settings, the workers that check cases, and what happens to a failure
//! (minimized, saved under the regressions folder, printed).

use super::watchdog::{hang_handler, Watchdog};
use crate::case::{Case, Pattern};
use crate::engine;
use crate::gen::{nth_case, GenConfig};
use crate::inflight;
use crate::minimize::{self, Budget};
use crate::oracle::{self, CaseReport, CheckOptions};
use crate::report::{self, Coverage};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use reference::ElemType;
use std::cell::RefCell;
use std::io::IsTerminal;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    pub(super) static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `f`, turning a panic into `Err(message with location)`. While a campaign runs the
/// panic hook records the message instead of printing it.
pub(super) fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
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
fn loop_options(c: &Campaign, index: u64, case: &Case) -> CheckOptions {
    let mut o = if c.full_matrix {
        CheckOptions { reference: engine::Interpreter::Fast, ..CheckOptions::default() }
    } else {
        CheckOptions::sampled(index).sized_for(case)
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
        let report = check_caught(&case, &loop_options(c, this, &case));
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
