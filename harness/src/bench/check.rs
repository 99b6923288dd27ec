//! `harness bench check`: validates a sweep's CSVs and compares their ratios with a committed
//! baseline. A row fails when its ratio moved beyond both intervals: the new ratio lies
//! outside the baseline's interval and the baseline's ratio outside the new interval, and by
//! more than `--tolerance` of the baseline's ratio (default 25%; 0 = strict).

use super::report::read_csv;
use super::Row;
use anyhow::{bail, Context};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args, Debug, Clone)]
pub struct CheckArgs {
    /// Directory holding the sweep's bench-t<N>.csv.
    #[arg(long, default_value = "reports")]
    pub dir: PathBuf,
    /// Directory holding the baseline's bench-t<N>.csv.
    #[arg(long, default_value = "reports/baseline")]
    pub baseline: PathBuf,
    /// Fail only on rows that got slower (moves to faster are reported, not failed).
    #[arg(long)]
    pub slower_only: bool,
    /// Also require the ratio to move by more than this fraction of the baseline's (0 = any
    /// move beyond both intervals). The intervals come from one run's paired rounds and do
    /// not cover run-to-run drift of a shared machine, which this absorbs.
    #[arg(long, default_value_t = 0.25)]
    pub tolerance: f64,
}

/// The columns every sweep CSV must have (issues 8, 18, 22), in any order.
pub const REQUIRED_COLUMNS: [&str; 21] = [
    "scenario",
    "shape",
    "dtype",
    "engine",
    "mode",
    "policy",
    "threads",
    "median_ns",
    "p10_ns",
    "p90_ns",
    "runs",
    "ratio_vs_main",
    "ci_low",
    "ci_high",
    "oversubscribed",
    "timed",
    "commit",
    "cpu",
    "simd",
    "cores",
    "date",
];

type Key = (String, String, String, String, String, usize, String);

fn key(r: &Row) -> Key {
    (
        r.scenario.clone(),
        r.shape.clone(),
        r.dtype.clone(),
        r.mode.clone(),
        r.policy.clone(),
        r.threads,
        r.engine.clone(),
    )
}

/// A row's name in messages (the engine named when it is not ours).
fn label(k: &Key) -> String {
    let engine = if k.6 == "ours" { String::new() } else { format!("{} ", k.6) };
    format!("{engine}{} {} {} {}/{} t{}", k.0, k.1, k.2, k.3, k.4, k.5)
}

/// The sweep CSVs of a directory, by thread count.
pub fn csv_files(dir: &Path) -> anyhow::Result<BTreeMap<usize, PathBuf>> {
    let mut out = BTreeMap::new();
    let rd = std::fs::read_dir(dir).with_context(|| format!("reading directory {}", dir.display()))?;
    for e in rd {
        let p = e?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        if let Some(t) = name.strip_prefix("bench-t").and_then(|s| s.strip_suffix(".csv")) {
            let t: usize = t.parse().with_context(|| format!("{}: thread count {t:?} is not a number", p.display()))?;
            out.insert(t, p);
        }
    }
    Ok(out)
}

/// Problems in one CSV file (empty = valid).
pub fn validate_file(path: &Path, threads: usize) -> anyhow::Result<(Vec<Row>, Vec<String>)> {
    let mut errs = Vec::new();
    let mut rdr = csv::Reader::from_path(path).with_context(|| format!("reading {}", path.display()))?;
    let headers = rdr.headers()?.clone();
    for c in REQUIRED_COLUMNS {
        if !headers.iter().any(|h| h == c) {
            errs.push(format!("{}: missing column {c}", path.display()));
        }
    }
    if !errs.is_empty() {
        return Ok((vec![], errs));
    }
    let rows = read_csv(path)?;
    if rows.is_empty() {
        errs.push(format!("{}: no rows", path.display()));
    }
    let mut seen = BTreeMap::new();
    for r in &rows {
        let k = key(r);
        let l = label(&k);
        let mut e = |m: String| errs.push(format!("{}: {l}: {m}", path.display()));
        if r.threads != threads {
            e(format!("threads {} in the file of t{threads}", r.threads));
        }
        if seen.insert(k.clone(), ()).is_some() {
            e("duplicate row".into());
        }
        if r.oversubscribed != (r.threads > r.cores) {
            e(format!("oversubscribed={} but {} threads on {} cores", r.oversubscribed, r.threads, r.cores));
        }
        if r.skipped() {
            // Real XNNPACK refused the program: no timing, not a failure of ours.
            continue;
        }
        if r.check != "ok" {
            e(format!("output check failed: {}", r.check));
            continue;
        }
        match (r.p10_ns, r.median_ns, r.p90_ns) {
            (Some(a), Some(m), Some(b)) if a > 0.0 && a <= m && m <= b => {}
            x => e(format!("p10/median/p90 {x:?} are not positive and ordered")),
        }
        if r.runs == 0 {
            e("0 runs".into());
        }
        if let Some(x) = r.vs_xnnpack {
            match (r.vs_xnnpack_low, r.vs_xnnpack_high) {
                (Some(lo), Some(hi)) if lo > 0.0 && lo <= x && x <= hi => {}
                y => e(format!("vs_xnnpack {x} outside its interval {y:?}")),
            }
        }
        match (r.ci_low, r.ratio_vs_main, r.ci_high) {
            // An XNNPACK row has no ratio when XNNPACK refused its Main program.
            (None, None, None) if r.engine == "xnnpack" => {}
            (Some(lo), Some(x), Some(hi)) if lo > 0.0 && lo <= x && x <= hi => {
                if r.within_noise != (lo <= 1.0 && 1.0 <= hi) {
                    e(format!("within_noise={} disagrees with the interval [{lo}, {hi}]", r.within_noise));
                }
                if r.mode == "main" && (x - 1.0).abs() > 1e-9 {
                    e(format!("Main's ratio to itself is {x}"));
                }
            }
            x => e(format!("ci_low/ratio/ci_high {x:?} are not positive and ordered")),
        }
    }
    Ok((rows, errs))
}

/// A row whose ratio moved beyond both intervals.
#[derive(Clone, Debug, PartialEq)]
pub struct Move {
    pub row: String,
    pub slower: bool,
    pub baseline: (f64, f64, f64),
    pub now: (f64, f64, f64),
}

/// Compares rows present in both; Main rows (ratio 1 by definition) are skipped.
pub fn compare(now: &[Row], base: &[Row], tolerance: f64) -> (Vec<Move>, usize) {
    let b: BTreeMap<Key, &Row> = base.iter().map(|r| (key(r), r)).collect();
    let mut moves = Vec::new();
    let mut compared = 0;
    for r in now.iter().filter(|r| r.mode != "main" && r.check == "ok") {
        let Some(o) = b.get(&key(r)).filter(|o| o.check == "ok") else { continue };
        let (Some(x), Some(lo), Some(hi), Some(bx), Some(blo), Some(bhi)) =
            (r.ratio_vs_main, r.ci_low, r.ci_high, o.ratio_vs_main, o.ci_low, o.ci_high)
        else {
            continue;
        };
        compared += 1;
        let big = (x - bx).abs() > tolerance * bx;
        let slower = x > bhi && bx < lo && big;
        let faster = x < blo && bx > hi && big;
        if slower || faster {
            moves.push(Move { row: label(&key(r)), slower, baseline: (bx, blo, bhi), now: (x, lo, hi) });
        }
    }
    (moves, compared)
}

/// Runs the whole check; returns (passed, report).
pub fn check(dir: &Path, baseline: &Path, slower_only: bool, tolerance: f64) -> anyhow::Result<(bool, String)> {
    let files = csv_files(dir)?;
    if files.is_empty() {
        bail!("no bench-t<N>.csv in {} (run `harness bench` first)", dir.display());
    }
    let base_files = csv_files(baseline)
        .with_context(|| format!("no baseline at {} (copy a sweep's CSVs there)", baseline.display()))?;
    let mut out = String::new();
    let mut ok = true;
    // Every thread count the baseline has must be in the sweep: a missing CSV would leave
    // its rows unchecked and the check passing.
    for t in base_files.keys().filter(|t| !files.contains_key(t)) {
        let _ = writeln!(
            out,
            "FAIL missing {}: the baseline has {} threads, the sweep does not",
            dir.join(format!("bench-t{t}.csv")).display(),
            t
        );
        ok = false;
    }
    let mut now_rows = Vec::new();
    for (&t, p) in &files {
        let (rows, errs) = validate_file(p, t)?;
        for e in &errs {
            let _ = writeln!(out, "INVALID {e}");
        }
        ok &= errs.is_empty();
        now_rows.extend(rows);
    }
    let mut base_rows = Vec::new();
    for (&t, p) in &base_files {
        let (rows, errs) = validate_file(p, t)?;
        for e in &errs {
            let _ = writeln!(out, "INVALID baseline {e}");
        }
        ok &= errs.is_empty();
        base_rows.extend(rows);
    }
    let (moves, compared) = compare(&now_rows, &base_rows, tolerance);
    if compared == 0 {
        let _ = writeln!(out, "FAIL no row in common with the baseline (different scenarios or thread counts?)");
        ok = false;
    }
    for m in &moves {
        let fails = m.slower || !slower_only;
        ok &= !fails;
        let _ = writeln!(
            out,
            "{} {}: ratio {:.3} [{:.3}, {:.3}] -> {:.3} [{:.3}, {:.3}] ({})",
            if fails { "MOVED" } else { "moved" },
            m.row,
            m.baseline.0,
            m.baseline.1,
            m.baseline.2,
            m.now.0,
            m.now.1,
            m.now.2,
            if m.slower { "slower" } else { "faster" }
        );
    }
    if let (Some(a), Some(b)) = (now_rows.first(), base_rows.first()) {
        if a.cpu != b.cpu || a.cores != b.cores {
            let _ = writeln!(
                out,
                "note: baseline from {} ({} cores), sweep from {} ({} cores)",
                b.cpu, b.cores, a.cpu, a.cores
            );
        }
    }
    let _ = writeln!(
        out,
        "bench check: {} rows validated, {compared} ratios compared with {}, {} moved beyond both intervals and by more than {:.0}%: {}",
        now_rows.len(),
        baseline.display(),
        moves.len(),
        tolerance * 100.0,
        if ok { "PASS" } else { "FAIL" }
    );
    Ok((ok, out))
}

pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    if !(args.tolerance >= 0.0 && args.tolerance.is_finite()) {
        bail!("--tolerance must be a non-negative fraction, got {}", args.tolerance);
    }
    let (ok, report) = check(&args.dir, &args.baseline, args.slower_only, args.tolerance)?;
    print!("{report}");
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
