//! Sweep outputs: one CSV per thread count, the Markdown summary with findings, and an SVG
//! plot per thread count of the ratios by scenario.

use super::{MachineInfo, Row, Sweep};
use anyhow::Context;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Thread counts present in `rows`, ascending.
pub fn thread_counts(rows: &[Row]) -> Vec<usize> {
    let mut t: Vec<usize> = rows.iter().map(|r| r.threads).collect();
    t.sort_unstable();
    t.dedup();
    t
}

pub fn csv_path(dir: &Path, threads: usize) -> PathBuf {
    dir.join(format!("bench-t{threads}.csv"))
}

pub fn write_csv(path: &Path, rows: &[&Row]) -> anyhow::Result<()> {
    let mut w = csv::Writer::from_path(path).with_context(|| format!("creating {}", path.display()))?;
    for r in rows {
        w.serialize(r)?;
    }
    w.flush()?;
    Ok(())
}

pub fn read_csv(path: &Path) -> anyhow::Result<Vec<Row>> {
    let mut r = csv::Reader::from_path(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for (i, rec) in r.deserialize().enumerate() {
        out.push(rec.with_context(|| format!("{}: data row {} is not a valid sweep row", path.display(), i + 1))?);
    }
    Ok(out)
}

/// Writes every output of a sweep; returns the paths written.
pub fn write_all(
    dir: &Path,
    sweep: &Sweep,
    info: &MachineInfo,
    wall: Duration,
    quick: bool,
) -> anyhow::Result<Vec<PathBuf>> {
    let rows = &sweep.rows;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    for t in thread_counts(rows) {
        let these: Vec<&Row> = rows.iter().filter(|r| r.threads == t).collect();
        let p = csv_path(dir, t);
        write_csv(&p, &these)?;
        written.push(p);
        let svg = dir.join(format!("bench-t{t}.svg"));
        super::plot::plot(&svg, &these, t, info).with_context(|| format!("plotting {}", svg.display()))?;
        written.push(svg);
    }
    let md = dir.join("bench-summary.md");
    let et = super::versus::read_executorch(&dir.join(super::versus::EXECUTORCH_CSV));
    let text = summary(rows, info, wall, quick, sweep.xnnpack_skipped.as_deref(), &et);
    std::fs::write(&md, text).with_context(|| format!("writing {}", md.display()))?;
    written.push(md);
    Ok(written)
}

/// Key of a row within a thread count: the scenario it times.
fn key(r: &Row) -> (String, String, String) {
    (r.scenario.clone(), r.shape.clone(), r.dtype.clone())
}

/// The variants of one scenario at one thread count, in sweep order.
pub(super) struct Group<'a> {
    pub main: Option<&'a Row>,
    pub sm_pot: Option<&'a Row>,
    pub sm_cost: Option<&'a Row>,
    pub nhwc: Option<&'a Row>,
}

pub(super) fn groups(rows: &[Row], threads: usize) -> Vec<((String, String, String), Group<'_>)> {
    let mut order: Vec<(String, String, String)> = Vec::new();
    let mut map: BTreeMap<(String, String, String), Group> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.threads == threads && r.engine == "ours") {
        let k = key(r);
        if !map.contains_key(&k) {
            order.push(k.clone());
        }
        let g = map.entry(k).or_insert(Group { main: None, sm_pot: None, sm_cost: None, nhwc: None });
        match (r.mode.as_str(), r.policy.as_str()) {
            ("main", _) => g.main = Some(r),
            ("static_mean", "per_output_tasks") => g.sm_pot = Some(r),
            ("static_mean", _) => g.sm_cost = Some(r),
            ("nhwc_aware", _) => g.nhwc = Some(r),
            _ => {}
        }
    }
    order.into_iter().filter_map(|k| map.remove(&k).map(|g| (k, g))).collect()
}

fn cell(r: Option<&Row>) -> String {
    match r {
        None => "-".into(),
        Some(r) if r.check != "ok" => "FAIL".into(),
        Some(r) => match (r.ratio_vs_main, r.ci_low, r.ci_high) {
            (Some(x), Some(lo), Some(hi)) => {
                format!("{x:.2} [{lo:.2}, {hi:.2}]{}", if r.within_noise { " ~" } else { "" })
            }
            _ => "n/a".into(),
        },
    }
}

pub(super) fn us(ns: Option<f64>) -> String {
    ns.map(|v| format!("{:.1}", v / 1000.0)).unwrap_or_else(|| "-".into())
}

fn ratio(r: Option<&Row>) -> Option<(f64, f64, f64)> {
    let r = r?;
    if r.check != "ok" {
        return None;
    }
    Some((r.ratio_vs_main?, r.ci_low?, r.ci_high?))
}

/// "faster", "slower" or "within noise" from an interval.
fn verdict(ci: Option<(f64, f64, f64)>) -> &'static str {
    match ci {
        None => "not measured",
        Some((_, _, hi)) if hi < 1.0 => "faster",
        Some((_, lo, _)) if lo > 1.0 => "slower",
        Some(_) => "within noise",
    }
}

pub(super) fn numel(shape: &str) -> usize {
    shape.split('x').filter_map(|s| s.parse::<usize>().ok()).product()
}

fn outputs_of_mean(shape: &str) -> usize {
    let dims: Vec<usize> = shape.split('x').filter_map(|s| s.parse().ok()).collect();
    dims.iter().rev().skip(1).product()
}

/// Small multi-output means: the change's "< 8K elements" shapes with more than one output.
fn small_multi(scenario: &str, shape: &str) -> bool {
    matches!(scenario, "rmsnorm" | "mean_last") && numel(shape) < 8192 && outputs_of_mean(shape) > 1
}

fn find<'a>(
    rows: &'a [Row],
    scenario: &str,
    shape: &str,
    dtype: &str,
    mode: &str,
    policy: &str,
    t: usize,
) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.scenario == scenario
            && r.shape == shape
            && r.dtype == dtype
            && r.mode == mode
            && r.policy == policy
            && r.threads == t
    })
}

fn fmt_ci(c: Option<(f64, f64, f64)>) -> String {
    c.map(|(x, lo, hi)| format!("{x:.2}x [{lo:.2}, {hi:.2}]")).unwrap_or_else(|| "not measured".into())
}

/// A scenario where after is slower: key, variants, ratio with interval, cause.
type Slower<'a> = (&'a (String, String, String), &'a Group<'a>, (f64, f64, f64), &'static str);

/// Causes of "after slower than before", in the order they are attributed.
const CAUSES: [(&str, &str); 4] = [
    ("copies", "because the static mean needs NCHW and the lowering adds layout copies (B22)"),
    ("pool", "because a multi-output mean split into per-output tasks wakes the pool for little work (B16)"),
    ("oversubscribed", "with no structural cause beyond more threads than cores"),
    ("unexplained", "with no structural cause in the counts (the delegated kernels cost more here, or noise from the shared machine)"),
];

/// The first cause that explains a slower row of the change, from what the sweep knows.
fn cause(g: &Group, _k: &(String, String, String), threads: usize, cores: usize) -> &'static str {
    if let (Some(m), Some(s)) = (g.main, g.sm_pot) {
        if s.transposes > m.transposes {
            return "copies";
        }
    }
    if let (Some(p), Some(c)) = (ratio(g.sm_pot), ratio(g.sm_cost)) {
        if threads > 1 && c.2 < p.1 {
            return "pool";
        }
    }
    if threads > cores {
        return "oversubscribed";
    }
    "unexplained"
}

/// The Markdown summary: machine, method, findings, reproduction, one table per thread count.
pub fn summary(
    rows: &[Row],
    info: &MachineInfo,
    wall: Duration,
    quick: bool,
    xnnpack_skipped: Option<&str>,
    executorch: &super::versus::ExecutorchTimes,
) -> String {
    let mut s = String::new();
    let threads = thread_counts(rows);
    let _ = writeln!(s, "# Latency sweep: Main (before) vs StaticMean (after) vs NhwcAware\n");
    let _ = writeln!(
        s,
        "- Machine: {} ({} cores), our kernels' SIMD level {}, commit `{}`, {}\n- Sweep: {}, thread counts {:?}, {} rows, wall time {:.0} s\n- Load average (1/5/15 min): {}",
        info.cpu,
        info.cores,
        info.simd,
        info.commit,
        info.date,
        if quick { "`--quick` (smoke test of the pipeline, not of the numbers)" } else { "default" },
        threads,
        rows.len(),
        wall.as_secs_f64(),
        info.loadavg
    );
    let _ = writeln!(
        s,
        "- Reproduce: `cargo run --release -p harness -- bench` (or `just bench`); gate: `cargo run --release -p harness -- bench check`.\n"
    );
    let _ = writeln!(s, "## Method\n");
    let _ = writeln!(
        s,
        "Per scenario and thread count, the four programs (Main with XNNPACK's per-output tasks, StaticMean with per-output tasks and with the cost model, NhwcAware with the cost model) are checked once against the reference interpreter, warmed up (3 runs each), then run alternately on the same inputs. At 1 thread: one run each per round, the starting program rotating. At more threads every program has a pool whose workers spin after a job (ours 2 ms, pthreadpool's 1,000,000 pauses), and programs run in turn found the previous ones' workers still spinning on their cores: each program runs a block of rounds by itself (about 20 ms of the slowest program, after 2 untimed runs), once no other thread of the process is runnable; round `r` of a block pairs with round `r` of the other programs' blocks; each cost-model program's block is followed by one of the same program built for one thread (`vs_one_thread` in the CSVs, not a row of its own). `ratio` is the median of the per-round ratios program / Main; the bracket is its distribution-free 95% interval (sign-test order statistics over the paired rounds); `~` marks \"within noise\" (the interval contains 1). Rows above {} threads are oversubscribed on this machine. A row stops after 2000 rounds or when its share of the time budget is spent (never below 5 rounds), so slow scenarios have fewer than 200 runs: see the `runs` column of the CSVs.\n",
        info.cores
    );
    let _ = writeln!(
        s,
        "Noise: this machine has {} cores shared with other work during the sweep (the load average above); ratios come from paired rounds, which cancels slow drifts but not bursts that hit one program of a round, and thread counts above the core count measure scheduling as much as kernels. Treat single rows within ~10% of 1 with care.\n",
        info.cores
    );

    s.push_str(&super::versus::sections(rows, info, xnnpack_skipped, executorch));

    let _ = writeln!(s, "## Findings on our runtime\n");
    let failed: Vec<&Row> = rows.iter().filter(|r| r.check != "ok" && !r.skipped()).collect();
    if !failed.is_empty() {
        let _ = writeln!(s, "- **{} rows failed their output check or did not run** (no timing):", failed.len());
        for r in failed.iter().take(20) {
            let _ = writeln!(s, "  - {} {} {} {} t{}: {}", r.program, r.engine, r.mode, r.policy, r.threads, r.check);
        }
    }
    let _ = writeln!(
        s,
        "How to read these: \"after\" is StaticMean with XNNPACK's per-output tasks. Before the change a non-GAP mean ran outside the delegate on the portable (scalar, single-threaded) kernel and split the delegate, so after wins wherever the mean itself dominates. After loses where (a) a multi-output mean is split into one pool task per output and every call wakes the pool for little work (B16; the cost model runs such means inline or in a few chunks), (b) the static mean needs NCHW after an NHWC conv and the lowering adds layout copies (B22), or (c) more threads than cores make workers wait for each other.\n"
    );
    for &t in &threads {
        let gs = groups(rows, t);
        let mut slower: Vec<Slower> = Vec::new();
        let mut faster = Vec::new();
        let mut cost_faster = 0;
        let mut cost_slower = 0;
        for (k, g) in &gs {
            let c = ratio(g.sm_pot);
            match verdict(c) {
                "slower" => {
                    let c = c.unwrap_or((1.0, 1.0, 1.0));
                    slower.push((k, g, c, cause(g, k, t, info.cores)))
                }
                "faster" => faster.push((k, c.unwrap_or((1.0, 1.0, 1.0)))),
                _ => {}
            }
            match verdict(ratio(g.sm_cost)) {
                "slower" => cost_slower += 1,
                "faster" => cost_faster += 1,
                _ => {}
            }
        }
        let _ = writeln!(
            s,
            "- **{t} thread(s){}**: after is faster than before in {} of {} scenarios, slower in {}, within noise in {}; with the cost model instead of per-output tasks: faster in {cost_faster}, slower in {cost_slower}.",
            if t > info.cores { ", oversubscribed" } else { "" },
            faster.len(),
            gs.len(),
            slower.len(),
            gs.len() - faster.len() - slower.len()
        );
        faster.sort_by(|a, b| a.1 .0.total_cmp(&b.1 .0));
        if !faster.is_empty() {
            let best: Vec<String> =
                faster.iter().take(3).map(|(k, c)| format!("{} {} {} {}", k.0, k.1, k.2, fmt_ci(Some(*c)))).collect();
            let _ = writeln!(s, "  - largest gains: {}", best.join("; "));
        }
        slower.sort_by(|a, b| b.2 .0.total_cmp(&a.2 .0));
        for (cause_name, text) in CAUSES {
            let these: Vec<_> = slower.iter().filter(|x| x.3 == cause_name).collect();
            if these.is_empty() {
                continue;
            }
            let worst: Vec<String> = these
                .iter()
                .take(4)
                .map(|(k, g, c, _)| {
                    let extra = match cause_name {
                        "pool" => format!(" (cost model {})", fmt_ci(ratio(g.sm_cost))),
                        "copies" => format!(
                            " (transposes {} -> {})",
                            g.main.map(|r| r.transposes).unwrap_or(0),
                            g.sm_pot.map(|r| r.transposes).unwrap_or(0)
                        ),
                        _ => String::new(),
                    };
                    format!("{} {} {} {}{extra}", k.0, k.1, k.2, fmt_ci(Some(*c)))
                })
                .collect();
            let _ = writeln!(
                s,
                "  - after slower than before, {text}: {} scenario(s), worst: {}",
                these.len(),
                worst.join("; ")
            );
        }
        for (k, g) in &gs {
            let Some(n) = g.nhwc.filter(|r| r.check == "ok") else { continue };
            let tf = g.sm_cost.map(|r| r.transposes).unwrap_or(0);
            if n.transposes >= tf {
                continue;
            }
            if let (Some(x), Some(lo), Some(hi)) = (n.vs_static_mean, n.vs_static_mean_low, n.vs_static_mean_high) {
                let _ = writeln!(
                    s,
                    "  - NhwcAware removes copies in {} {} (transposes {tf} -> {}): {x:.2}x [{lo:.2}, {hi:.2}] the time of StaticMean, paired, both cost model ({})",
                    k.0,
                    k.1,
                    n.transposes,
                    verdict(Some((x, lo, hi)))
                );
            }
        }
    }

    s.push_str(&reproduction(rows, &threads, info.cores));

    for &t in &threads {
        let _ = writeln!(
            s,
            "\n## Our runtime, {t} thread(s){}: ratios to Main\n",
            if t > info.cores { " (oversubscribed)" } else { "" }
        );
        let _ = writeln!(s, "| scenario | shape | dtype | Main median us | StaticMean per-output | StaticMean cost model | NhwcAware | T main/sm/nhwc | runs |");
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
        for (k, g) in groups(rows, t) {
            let tr = |r: Option<&Row>| r.map(|r| r.transposes.to_string()).unwrap_or_else(|| "-".into());
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {}/{}/{} | {} |",
                k.0,
                k.1,
                k.2,
                us(g.main.and_then(|r| r.median_ns)),
                cell(g.sm_pot),
                cell(g.sm_cost),
                cell(g.nhwc),
                tr(g.main),
                tr(g.sm_pot),
                tr(g.nhwc),
                g.main.map(|r| r.runs).unwrap_or(0)
            );
        }
        let _ = writeln!(s, "\nPlot: `bench-t{t}.svg`.");
    }
    s
}

/// What the change reported for a (scenario, shape, dtype) at a thread count, as a direction.
struct Claim {
    scenario: &'static str,
    shape: &'static str,
    dtype: &'static str,
    threads: usize,
    expect: &'static str,
    there: &'static str,
}

const CLAIMS: &[Claim] = &[
    Claim {
        scenario: "rmsnorm",
        shape: "1x128x2048",
        dtype: "fp32",
        threads: 1,
        expect: "faster",
        there: "0.43-0.97x over the 10 shapes at 1 thread",
    },
    Claim { scenario: "rmsnorm", shape: "1x128x2048", dtype: "fp32", threads: 16, expect: "faster", there: "0.48x" },
    Claim {
        scenario: "mean_last",
        shape: "1x128x2048",
        dtype: "fp32",
        threads: 16,
        expect: "faster",
        there: "0.45x (3-D last-dim mean)",
    },
    Claim { scenario: "mean_last", shape: "1x128x128", dtype: "fp32", threads: 4, expect: "slower", there: "1.14x" },
    Claim { scenario: "mean_last", shape: "1x128x128", dtype: "fp32", threads: 16, expect: "slower", there: "3.26x" },
    Claim {
        scenario: "rmsnorm_linear",
        shape: "1x32x512",
        dtype: "fp32",
        threads: 16,
        expect: "faster",
        there: "0.77x",
    },
    Claim {
        scenario: "mlp4_decode",
        shape: "1x1x512",
        dtype: "fp32",
        threads: 16,
        expect: "within noise",
        there: "0.99x",
    },
    Claim { scenario: "mlp4_prefill", shape: "1x64x512", dtype: "fp32", threads: 16, expect: "faster", there: "0.80x" },
    Claim {
        scenario: "conv_mean_c",
        shape: "1x96x56x56",
        dtype: "fp32",
        threads: 16,
        expect: "faster",
        there: "0.88x",
    },
    Claim {
        scenario: "conv_sub_mean",
        shape: "1x96x56x56",
        dtype: "fp32",
        threads: 1,
        expect: "faster",
        there: "0.75x",
    },
    Claim {
        scenario: "conv_sub_mean",
        shape: "1x96x56x56",
        dtype: "fp32",
        threads: 4,
        expect: "faster",
        there: "0.85x",
    },
    Claim {
        scenario: "conv_sub_mean",
        shape: "1x96x56x56",
        dtype: "fp32",
        threads: 16,
        expect: "slower",
        there: "1.12x",
    },
    Claim {
        scenario: "conv_mean_conv",
        shape: "1x96x56x56",
        dtype: "fp32",
        threads: 1,
        expect: "faster",
        there: "0.54x",
    },
    Claim {
        scenario: "conv_mean_conv",
        shape: "1x96x56x56",
        dtype: "fp32",
        threads: 4,
        expect: "faster",
        there: "0.70x",
    },
    Claim {
        scenario: "conv_mean_conv",
        shape: "1x96x56x56",
        dtype: "fp32",
        threads: 16,
        expect: "faster",
        there: "0.90x",
    },
    Claim {
        scenario: "qknorm",
        shape: "8x64",
        dtype: "fp32",
        threads: 16,
        expect: "slower",
        there: "3.3x (11.8 -> 39.1 us)",
    },
    Claim {
        scenario: "qknorm",
        shape: "16x128",
        dtype: "fp32",
        threads: 16,
        expect: "slower",
        there: "1.09x (222 -> 241 us)",
    },
    Claim {
        scenario: "mean_last",
        shape: "1x128x128",
        dtype: "bf16",
        threads: 1,
        expect: "faster",
        there: "faster at 1 thread",
    },
    Claim { scenario: "mean_last", shape: "1x128x128", dtype: "bf16", threads: 4, expect: "slower", there: "1.35x" },
    Claim { scenario: "mean_last", shape: "1x128x128", dtype: "bf16", threads: 16, expect: "slower", there: "5.7x" },
    Claim { scenario: "mean_last", shape: "1x128x2048", dtype: "bf16", threads: 16, expect: "faster", there: "0.42x" },
    Claim { scenario: "rmsnorm", shape: "1x128x2048", dtype: "bf16", threads: 16, expect: "faster", there: "0.56x" },
];

/// The reproduction table: each finding of the change checked against this sweep.
fn reproduction(rows: &[Row], threads: &[usize], cores: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## Which of the change's findings this machine reproduces\n");
    let _ = writeln!(
        s,
        "\"After\" is StaticMean with XNNPACK's per-output tasks, as merged. The change measured on an Apple M-series CPU (12P + 4E cores) at 16 threads unless said; here thread counts above {cores} are oversubscribed, so its 4- and 16-thread findings are compared with oversubscribed rows.\n"
    );
    let _ = writeln!(s, "| finding of the change | there | here | verdict |\n|---|---|---|---|");
    let mut missing = 0usize;
    let pot = "per_output_tasks";
    let r = |sc: &str, sh: &str, dt: &str, mode: &str, pol: &str, t: usize| ratio(find(rows, sc, sh, dt, mode, pol, t));
    for c in CLAIMS {
        let got = r(c.scenario, c.shape, c.dtype, "static_mean", pot, c.threads);
        if got.is_none() {
            missing += 1;
            continue;
        }
        let _ = writeln!(
            s,
            "| {} {} {} after vs before at {} thread(s): {} | {} | {} | {} |",
            c.dtype,
            c.scenario,
            c.shape,
            c.threads,
            c.expect,
            c.there,
            fmt_ci(got),
            repro(verdict(got), c.expect)
        );
    }
    let all: Vec<String> = programs_shapes();
    let t1: Vec<_> = all.iter().map(|sh| r("rmsnorm", sh, "fp32", "static_mean", pot, 1)).collect();
    let measured = t1.iter().filter(|c| c.is_some()).count();
    if measured > 0 {
        let fast = t1.iter().filter(|c| verdict(**c) == "faster").count();
        let v = if fast == measured { "reproduced".to_string() } else { format!("partly ({fast} of {measured})") };
        let _ = writeln!(s, "| every fp32 RMSNorm shape faster after at 1 thread | 10 of 10 (0.43-0.97x) | {fast} of {measured} faster ({}) | {v} |", range(&t1));
    }
    for t in threads.iter().copied().filter(|&t| t >= 2) {
        let small: Vec<&String> = all.iter().filter(|sh| small_multi("rmsnorm", sh)).collect();
        let p: Vec<_> = small.iter().map(|sh| r("rmsnorm", sh, "fp32", "static_mean", pot, t)).collect();
        let c: Vec<_> = small.iter().map(|sh| r("rmsnorm", sh, "fp32", "static_mean", "cost_model", t)).collect();
        let measured = p.iter().filter(|x| x.is_some()).count();
        if measured == 0 {
            missing += 1;
            continue;
        }
        let ps = p.iter().filter(|x| verdict(**x) == "slower").count();
        let cs = c.iter().filter(|x| verdict(**x) == "slower").count();
        let v = if ps == measured && cs == 0 {
            "reproduced"
        } else if ps > cs {
            "partly"
        } else {
            "not reproduced"
        };
        let _ = writeln!(
            s,
            "| small multi-output fp32 RMSNorm (< 8K elements) at {t} threads: slower with per-output tasks, not with the cost model | 1.19-1.55x at 4 threads, 3.7-5.7x at 16 | per-output tasks: {ps} of {measured} slower ({}); cost model: {cs} of {measured} slower ({}) | {v} |",
            range(&p),
            range(&c)
        );
        let rest: Vec<&String> = all.iter().filter(|sh| !small_multi("rmsnorm", sh)).collect();
        let q: Vec<_> = rest.iter().map(|sh| r("rmsnorm", sh, "fp32", "static_mean", pot, t)).collect();
        let m = q.iter().filter(|x| x.is_some()).count();
        if m > 0 && (t == 4 || t == 16) {
            let f = q.iter().filter(|x| verdict(**x) == "faster").count();
            let v = if f == m { "reproduced".to_string() } else { format!("partly ({f} of {m})") };
            let _ = writeln!(s, "| the other fp32 RMSNorm shapes faster after at {t} threads | 0.44-0.93x at 4, 0.70-0.98x at 16 | {f} of {m} faster ({}) | {v} |", range(&q));
        }
    }
    for sc in ["conv_sub_mean", "conv_mean_conv"] {
        for t in threads.iter().copied() {
            let n = find(rows, sc, "1x96x56x56", "fp32", "nhwc_aware", "cost_model", t).filter(|r| r.check == "ok");
            let paired = n.and_then(|r| Some((r.vs_static_mean?, r.vs_static_mean_low?, r.vs_static_mean_high?)));
            let Some(p) = paired else {
                missing += 1;
                continue;
            };
            let v = match verdict(Some(p)) {
                "faster" => "reproduced".to_string(),
                "slower" => "not reproduced (NhwcAware slower)".to_string(),
                _ => "inconclusive (within noise)".to_string(),
            };
            let _ = writeln!(
                s,
                "| {sc} 96 ch 56x56 at {t} thread(s): the copies NhwcAware removes save time | follow-up left open by the change (transposes 4 -> 2) | NhwcAware / StaticMean, paired, cost model: {} | {v} |",
                fmt_ci(Some(p))
            );
        }
    }
    if missing > 0 {
        let _ = writeln!(s, "\n{missing} finding(s) not measured by this sweep (scenario or thread count not swept).");
    }
    s
}

fn range(v: &[Option<(f64, f64, f64)>]) -> String {
    let xs: Vec<f64> = v.iter().flatten().map(|x| x.0).collect();
    if xs.is_empty() {
        return "-".into();
    }
    let lo = xs.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().cloned().fold(0.0, f64::max);
    format!("{lo:.2}-{hi:.2}x")
}

fn repro(v: &str, expected: &str) -> String {
    match v {
        x if x == expected => "reproduced".into(),
        "within noise" => "inconclusive (within noise)".into(),
        "not measured" => "not measured".into(),
        other => format!("not reproduced ({other})"),
    }
}

fn programs_shapes() -> Vec<String> {
    crate::programs::RMSNORM_SHAPES
        .iter()
        .map(|s| s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x"))
        .collect()
}
