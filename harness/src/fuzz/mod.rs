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

mod campaign;
mod corpus;
mod watchdog;

pub use campaign::*;
pub use corpus::{corpora_dir, corpus_files, export_fuzz_corpus};
pub use watchdog::Watchdog;

use crate::case::Pattern;
use crate::gen::{nth_case, GenConfig};
use anyhow::{bail, Context, Result};
use reference::ElemType;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

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
    /// Every case also runs at a third thread count drawn from 3 to this (below 3: none).
    #[arg(long, default_value_t = 8)]
    pub max_threads: usize,
    /// About one case in fifty has an input of 256 KiB up to this many bytes, so the cost
    /// model splits its work across threads (0: no large cases).
    #[arg(long, default_value_t = 1 << 20)]
    pub large_bytes: usize,
    /// Only these patterns (repeatable): mean, add_mean, gap, rms_norm, qk_norm,
    /// pre_norm_mlp, conv_mean, conv_mean_conv, conv_sub_mean, shared_input, adaptive_pool,
    /// random (random graphs, about one case in twelve).
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
        .into_iter()
        .chain([Pattern::Random])
        .find(|p| p.name() == s)
        .with_context(|| format!("unknown pattern {s:?}; one of {:?} or random", Pattern::ALL.map(|p| p.name())))
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
    if args.max_threads > crate::case::MAX_THREADS {
        bail!("--max-threads {}: at most {}", args.max_threads, crate::case::MAX_THREADS);
    }
    if args.large_bytes > crate::case::MAX_ELEMS {
        bail!(
            "--large-bytes {}: at most {} (the largest input a case may have)",
            args.large_bytes,
            crate::case::MAX_ELEMS
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
        gen: GenConfig {
            max_elems: args.max_elems,
            threads: args.threads,
            max_threads: args.max_threads,
            large_bytes: args.large_bytes,
            ..GenConfig::default()
        },
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
        "harness fuzz: seed {seed}, shard {}/{}, {limit}, {} job{}, inputs up to {} elements, threads 1 and {}{}{}",
        shard.0,
        shard.1,
        campaign.jobs,
        if campaign.jobs == 1 { "" } else { "s" },
        campaign.gen.max_elems,
        args.threads,
        if args.max_threads >= 3 { format!(" and one of 3..={}", args.max_threads) } else { String::new() },
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
    use crate::case::Case;
    use std::panic;

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
