//! Timing one row group: every program of a scenario at one thread count, on our runtime and
//! on real XNNPACK, built, bound to its inputs once, checked against the reference, then
//! invoked in interleaved rounds (see the method in [`super`]).

use super::{compare_outputs, policy_name, round4, stats, MachineInfo, Prepared, Row, VARIANTS};
use crate::engine::{self, Config, Engine, Simd, Subject};
use delegate::runtime::ThreadPolicy;
use delegate::{LoweredProgram, LoweringMode};
use reference::{Graph, Tensor};
use std::time::{Duration, Instant};

/// Our runtime's instance of a program at `threads` with `policy`, on a pool of its own.
fn build_ours(
    graph: &Graph,
    l: &LoweredProgram,
    threads: usize,
    policy: ThreadPolicy,
) -> Result<engine::Prepared, String> {
    let config = Config { threads, simd: Simd::Best, policy: Some(policy), own_pool: true };
    engine::Ours.build(Subject::lowered(graph, l), config).map_err(|e| e.to_string())
}

/// Real XNNPACK's instance of a program on a pthreadpool of `threads` of its own (XNNPACK's
/// default spinning workers, as ExecuTorch creates its runtimes).
fn build_xnnpack(
    x: &engine::Xnnpack,
    graph: &Graph,
    l: &LoweredProgram,
    threads: usize,
) -> Result<engine::XnnpackInstance, engine::EngineError> {
    let config = Config { threads, simd: Simd::Best, policy: None, own_pool: true };
    x.build(Subject::lowered(graph, l), config)
}

/// How long and how often to time one row group.
#[derive(Clone, Copy, Debug)]
pub struct RowBudget {
    pub time: Duration,
    pub max_runs: usize,
    pub min_runs: usize,
    pub min_rounds: usize,
}

/// One program of a row group, built and bound to its inputs.
enum Timed<'a> {
    Ours(Box<engine::BoundProgram<'a>>),
    Xnnpack(engine::BoundXnnpack<'a>),
}

impl Timed<'_> {
    fn invoke(&mut self) -> Result<(), engine::EngineError> {
        match self {
            Timed::Ours(b) => b.invoke(),
            Timed::Xnnpack(b) => b.invoke(),
        }
    }

    fn outputs(&self) -> &[Tensor] {
        match self {
            Timed::Ours(b) => b.outputs(),
            Timed::Xnnpack(b) => b.outputs(),
        }
    }

    fn timing(&self) -> &'static str {
        match self {
            Timed::Ours(_) => "bound",
            Timed::Xnnpack(b) => b.timing().name(),
        }
    }
}

/// What a row group times, in row order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// `VARIANTS[k]` on our runtime.
    Ours(usize),
    /// A mode on real XNNPACK.
    Xnnpack(LoweringMode),
    /// The before's mean alone (1 thread).
    MeanAlone,
    /// At more than one thread, `VARIANTS[k]` (a cost-model one) on one thread: the paired
    /// baseline of `vs_one_thread`, not a row of its own.
    OneThread(usize),
}

/// The modes timed on real XNNPACK (its own thread policy: one row per mode).
pub const XNNPACK_MODES: [LoweringMode; 3] = [LoweringMode::Main, LoweringMode::StaticMean, LoweringMode::NhwcAware];

/// Times one scenario at `threads`: the four variants on our runtime, the three modes on real
/// XNNPACK (when `xnn` has the library), and at 1 thread the before's mean alone, all in the
/// same interleaved rounds; returns one row per program.
pub fn time_group(
    prep: &Prepared,
    threads: usize,
    budget: RowBudget,
    info: &MachineInfo,
    xnn: &engine::Xnnpack,
) -> Vec<Row> {
    let p = &prep.program;
    // At more than one thread each cost-model variant's one-thread twin right after it, so
    // their blocks run back to back (the least time between paired rounds).
    let twin = |k: usize| threads > 1 && VARIANTS[k].policy == ThreadPolicy::CostModel;
    let mut slots: Vec<Slot> = Vec::new();
    for k in 0..VARIANTS.len() {
        slots.push(Slot::Ours(k));
        if twin(k) {
            slots.push(Slot::OneThread(k));
        }
    }
    if xnn.unavailable().is_none() {
        slots.extend(XNNPACK_MODES.map(Slot::Xnnpack));
    }
    if threads == 1 && prep.mean_alone.is_some() {
        slots.push(Slot::MeanAlone);
    }
    let blank = |engine: &str, mode: &str, policy: &str| Row {
        scenario: p.scenario.clone(),
        shape: p.shape.clone(),
        dtype: p.dtype.name().to_string(),
        engine: engine.into(),
        mode: mode.into(),
        policy: policy.into(),
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
        vs_xnnpack: None,
        vs_xnnpack_low: None,
        vs_xnnpack_high: None,
        vs_one_thread: None,
        vs_one_thread_low: None,
        vs_one_thread_high: None,
        timed: String::new(),
        check: "ok".into(),
        delegates: 0,
        transposes: 0,
        oversubscribed: threads > info.cores,
        program: p.name.clone(),
        commit: info.commit.clone(),
        cpu: info.cpu.clone(),
        simd: info.simd.clone(),
        cores: info.cores,
        date: info.date.clone(),
    };
    let lowered_of = |m: LoweringMode| prep.lowered.iter().find(|(x, _)| *x == m).map(|(_, l)| l);
    let mut rows: Vec<Row> = Vec::new();
    // Build every program first (the bound ones borrow these).
    let mut ours: Vec<Option<engine::Prepared>> = Vec::new();
    let mut xnns: Vec<Option<engine::XnnpackInstance>> = Vec::new();
    for &slot in &slots {
        let (mut row, graph, lowered, reference) = match slot {
            Slot::Ours(k) | Slot::OneThread(k) => {
                let v = VARIANTS[k];
                (blank("ours", v.mode.name(), policy_name(v.policy)), &prep.graph, lowered_of(v.mode), &prep.reference)
            }
            Slot::Xnnpack(m) => {
                (blank("xnnpack", m.name(), "pthreadpool"), &prep.graph, lowered_of(m), &prep.reference)
            }
            Slot::MeanAlone => {
                let a = prep.mean_alone.as_ref().expect("slot pushed only with a mean");
                (blank("ours", "portable_mean", "portable"), &a.graph, Some(&a.lowered), &a.reference)
            }
        };
        let mut o = None;
        let mut x = None;
        match (lowered, reference) {
            (Some(Ok(l)), Ok(_)) => {
                row.delegates = l.summary.delegates;
                row.transposes = l.summary.transposes;
                // Ours: the row's thread count, or one thread (the twin, the mean alone).
                let ours_at = match slot {
                    Slot::Ours(k) => Some((threads, VARIANTS[k].policy)),
                    Slot::OneThread(k) => Some((1, VARIANTS[k].policy)),
                    Slot::MeanAlone => Some((1, ThreadPolicy::CostModel)),
                    Slot::Xnnpack(_) => None,
                };
                match ours_at {
                    Some((t, policy)) => match build_ours(graph, l, t, policy) {
                        Ok(pr) => o = Some(pr),
                        Err(e) => row.check = format!("load: {e}"),
                    },
                    None => match build_xnnpack(xnn, graph, l, threads) {
                        Ok(i) => x = Some(i),
                        Err(e) if e.refusal.is_some() || e.unavailable => row.check = format!("skipped: {e}"),
                        Err(e) => row.check = format!("load: {e}"),
                    },
                }
            }
            (Some(Err(e)), _) => row.check = e.clone(),
            (None, _) => row.check = "not lowered".into(),
            (_, Err(e)) => row.check = e.clone(),
        }
        ours.push(o);
        xnns.push(x);
        rows.push(row);
    }
    // Bind each to its inputs (one run, whose outputs are checked against the reference).
    let mut timed: Vec<Option<Timed>> = Vec::new();
    for (k, (o, x)) in ours.iter().zip(xnns.iter_mut()).enumerate() {
        let (inputs, want) = match slots[k] {
            Slot::MeanAlone => {
                let a = prep.mean_alone.as_ref().expect("slot pushed only with a mean");
                (&a.inputs, &a.reference)
            }
            _ => (&prep.inputs, &prep.reference),
        };
        let bound = match (o, x) {
            (Some(o), _) => o.bind(inputs.clone()).map(|b| Timed::Ours(Box::new(b))),
            (_, Some(x)) => x.bind(inputs.clone()).map(Timed::Xnnpack),
            _ => {
                timed.push(None);
                continue;
            }
        };
        let row = &mut rows[k];
        let t = match bound {
            Ok(b) => match want.as_ref().map(|w| compare_outputs(b.outputs(), w, p.dtype)) {
                Ok(Ok(())) => {
                    row.timed = b.timing().into();
                    Some(b)
                }
                Ok(Err(e)) => {
                    row.check = format!("mismatch: {e}");
                    None
                }
                Err(e) => {
                    row.check = e.clone();
                    None
                }
            },
            Err(e) if e.refusal.is_some() => {
                row.check = format!("skipped: {e}");
                None
            }
            Err(e) => {
                row.check = format!("run: {e}");
                None
            }
        };
        timed.push(t);
    }

    // Warm-up: a few runs of each, so caches, pools and allocations are in steady state.
    for _ in 0..3 {
        for (k, t) in timed.iter_mut().enumerate() {
            if let Some(b) = t {
                if let Err(e) = b.invoke() {
                    rows[k].check = format!("run: {e}");
                    *t = None;
                }
            }
        }
    }

    let n = slots.len();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); n];
    // Rounds per block: one round at 1 thread (no workers: the tightest pairing); at more,
    // a block of about BLOCK_TIME of the slowest program (see `settle`).
    let per_block = if threads > 1 { block_rounds(&mut timed) } else { 1 };
    let start = Instant::now();
    let mut rounds = 0usize;
    let mut blocks = 0usize;
    while timed.iter().any(Option::is_some) {
        let elapsed = start.elapsed();
        // A row stops at `max_runs` rounds, or once its time share is spent and it has
        // `min_rounds`: a fast program gets its 200+ runs well within the share, a slow one
        // gets the share (the "minimum time per row") and never starves the rows after it.
        let done = rounds >= budget.max_runs || (rounds >= budget.min_rounds && elapsed >= budget.time);
        if done {
            break;
        }
        let m = per_block.min(budget.max_runs - rounds);
        for j in 0..n {
            let k = (blocks + j) % n;
            let Some(b) = timed[k].as_mut() else { continue };
            if threads > 1 {
                settle();
                // The first runs after a settle wake the parked workers: not what a program
                // invoked back to back pays (one run for a block of one, a slow program).
                for _ in 0..BLOCK_WARMUP.min(m) {
                    let _ = b.invoke();
                }
            }
            for _ in 0..m {
                let t0 = Instant::now();
                let out = b.invoke();
                let dt = t0.elapsed().as_nanos() as f64;
                match out {
                    Ok(()) => samples[k].push(dt),
                    Err(e) => {
                        rows[k].check = format!("run: {e}");
                        timed[k] = None;
                        break;
                    }
                }
            }
        }
        rounds += m;
        blocks += 1;
    }
    drop(timed);
    drop(xnns);
    drop(ours);
    summarize(&slots, &mut rows, &samples);
    rows.into_iter().zip(&slots).filter(|(_, s)| !matches!(s, Slot::OneThread(_))).map(|(r, _)| r).collect()
}

/// Wall time of one slot's block at more than one thread (the slowest program's; faster ones
/// run as many rounds in less).
const BLOCK_TIME: Duration = Duration::from_millis(20);
/// Untimed runs at the start of each block (at most as many as the block times).
const BLOCK_WARMUP: usize = 2;
/// Longest wait for the other programs' workers to park.
const SETTLE_MAX: Duration = Duration::from_millis(200);

/// Rounds per block: `BLOCK_TIME` of the slowest bound program (timed once each), 1 to 500.
fn block_rounds(timed: &mut [Option<Timed>]) -> usize {
    let slowest = timed
        .iter_mut()
        .flatten()
        .map(|b| {
            let t0 = Instant::now();
            let _ = b.invoke();
            t0.elapsed()
        })
        .max()
        .unwrap_or(BLOCK_TIME);
    (BLOCK_TIME.as_nanos() / slowest.as_nanos().max(1)).clamp(1, 500) as usize
}

/// Waits until no other thread of this process is runnable (at most `SETTLE_MAX`): at more
/// than one thread every program has a pool, ours spin 2 ms after a job and pthreadpool's
/// 1,000,000 pauses, so programs timed in turn on a 2-core machine found the previous ones'
/// workers still spinning on their cores (7 pools: 2-thread XNNPACK RMSNorm 1x8x64 fp16 took
/// 38 us against 0.6 us at 1 thread). So at more than one thread each program runs a block
/// of rounds by itself after the others' workers have parked; round `r` of a block pairs
/// with round `r` of the other programs' blocks. Linux: reads the threads' states in
/// `/proc/self/task`; elsewhere waits `SETTLE_MAX`.
fn settle() {
    let me = std::fs::read_link("/proc/thread-self").ok().and_then(|p| p.file_name().map(|n| n.to_owned()));
    let start = Instant::now();
    while start.elapsed() < SETTLE_MAX {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            std::thread::sleep(SETTLE_MAX);
            return;
        };
        let busy = tasks.flatten().any(|t| {
            Some(t.file_name()) != me
                && std::fs::read_to_string(t.path().join("stat"))
                    .ok()
                    .and_then(|st| st.rsplit_once(") ").map(|(_, rest)| rest.starts_with('R')))
                    .unwrap_or(false)
        });
        if !busy {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Medians, spreads and the paired ratios of a timed row group.
fn summarize(slots: &[Slot], rows: &mut [Row], samples: &[Vec<f64>]) {
    let idx = |s: Slot| slots.iter().position(|&x| x == s);
    let ours_main = idx(Slot::Ours(0));
    let xnn_main = idx(Slot::Xnnpack(LoweringMode::Main));
    let ok = |rows: &[Row], k: usize| rows[k].check == "ok" && !samples[k].is_empty();
    let paired = |a: usize, b: usize| {
        if samples[a].len() == samples[b].len() {
            stats::paired_ratio(&samples[a], &samples[b])
        } else {
            None
        }
    };
    for k in 0..slots.len() {
        if !ok(rows, k) {
            continue;
        }
        let s = stats::spread(&samples[k]);
        let row = &mut rows[k];
        row.median_ns = Some(s.median.round());
        row.p10_ns = Some(s.p10.round());
        row.p90_ns = Some(s.p90.round());
        row.runs = samples[k].len();
        // Each engine's rows against its own Main; the mean alone against our Main.
        let main = match slots[k] {
            Slot::Xnnpack(_) => xnn_main,
            _ => ours_main,
        };
        if let Some(r) = main.filter(|&m| ok(rows, m) || m == k).and_then(|m| paired(m, k)) {
            let (row, r) = (&mut rows[k], r.rounded());
            row.ratio_vs_main = Some(r.ratio);
            row.ci_low = Some(r.low);
            row.ci_high = Some(r.high);
            row.within_noise = r.within_noise();
        }
        if let Slot::Ours(v) = slots[k] {
            if let Some(r) = idx(Slot::OneThread(v)).filter(|&o| ok(rows, o)).and_then(|o| paired(o, k)) {
                let row = &mut rows[k];
                row.vs_one_thread = Some(round4(r.ratio));
                row.vs_one_thread_low = Some(round4(r.low));
                row.vs_one_thread_high = Some(round4(r.high));
            }
            if let Some(x) = idx(Slot::Xnnpack(VARIANTS[v].mode)).filter(|&x| ok(rows, x)) {
                if let Some(r) = paired(x, k) {
                    let row = &mut rows[k];
                    row.vs_xnnpack = Some(round4(r.ratio));
                    row.vs_xnnpack_low = Some(round4(r.low));
                    row.vs_xnnpack_high = Some(round4(r.high));
                }
            }
        }
    }
    // NhwcAware (VARIANTS[3]) against StaticMean with the same policy (VARIANTS[2]).
    if let (Some(a), Some(b)) = (idx(Slot::Ours(2)), idx(Slot::Ours(3))) {
        if ok(rows, a) && ok(rows, b) {
            if let Some(r) = paired(a, b) {
                rows[b].vs_static_mean = Some(round4(r.ratio));
                rows[b].vs_static_mean_low = Some(round4(r.low));
                rows[b].vs_static_mean_high = Some(round4(r.high));
            }
        }
    }
}
