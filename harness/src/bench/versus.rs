//! The summary's comparisons with real libraries: ours ÷ real XNNPACK per row and thread count,
//! the before/after ratios on both engines, issue 22's goal lines with the measured figures,
//! and ExecuTorch's portable `mean.out` (timed by scripts/time-executorch-portable.py) ÷ our
//! portable mean, the cost every before/after ratio divides by.

use super::report::{groups, numel, thread_counts, us};
use super::{MachineInfo, Row};
use std::fmt::Write as _;
use std::path::Path;

/// The ExecuTorch timings the script writes next to the sweep's CSVs.
pub const EXECUTORCH_CSV: &str = "executorch-portable.csv";

/// One program of scripts/time-executorch-portable.py.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct EtRow {
    pub scenario: String,
    pub shape: String,
    pub dtype: String,
    pub mean_shape: String,
    pub mean_dims: String,
    pub et_median_ns: f64,
    /// The pybindings' own cost per call (a one-element mean).
    pub call_ns: f64,
    pub net_ns: f64,
    pub runs: usize,
    pub cpu: String,
    pub commit: String,
    pub date: String,
}

/// The script's rows, or why there are none.
pub type ExecutorchTimes = Result<Vec<EtRow>, String>;

pub fn read_executorch(path: &Path) -> ExecutorchTimes {
    let mut r = csv::Reader::from_path(path).map_err(|e| format!("{}: {e}", path.display()))?;
    r.deserialize().collect::<Result<Vec<EtRow>, _>>().map_err(|e| format!("{}: {e}", path.display()))
}

/// Bytes of the tensor a scenario's mean reads (its shape label's elements x the dtype's size).
pub fn bytes(shape: &str, dtype: &str) -> usize {
    let size = match dtype {
        "fp32" => 4,
        "fp16" | "bf16" => 2,
        _ => 1,
    };
    numel(shape) * size
}

fn kib(b: usize) -> String {
    if b >= 1 << 20 {
        format!("{:.1} MiB", b as f64 / f64::from(1 << 20))
    } else {
        format!("{:.0} KiB", b as f64 / 1024.0)
    }
}

type Key<'a> = (&'a str, &'a str, &'a str);

/// The checked row of scenario key `k` for `engine`, `mode` (and `policy`, if given) at `t`
/// threads (the plot reads its times through it too).
pub(super) fn find<'a>(
    rows: &'a [Row],
    k: Key,
    engine: &str,
    mode: &str,
    policy: Option<&str>,
    t: usize,
) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.scenario == k.0
            && r.shape == k.1
            && r.dtype == k.2
            && r.engine == engine
            && r.mode == mode
            && policy.is_none_or(|p| r.policy == p)
            && r.threads == t
            && r.check == "ok"
    })
}

fn key(k: &(String, String, String)) -> Key<'_> {
    (&k.0, &k.1, &k.2)
}

fn ok(r: Option<&Row>) -> Option<&Row> {
    r.filter(|r| r.check == "ok")
}

fn vs_x(r: Option<&Row>) -> Option<(f64, f64, f64)> {
    let r = r?;
    Some((r.vs_xnnpack?, r.vs_xnnpack_low?, r.vs_xnnpack_high?))
}

fn fmt3(c: Option<(f64, f64, f64)>) -> String {
    c.map(|(x, lo, hi)| format!("{x:.2} [{lo:.2}, {hi:.2}]")).unwrap_or_else(|| "-".into())
}

fn r2(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into())
}

fn pass(ok: bool) -> &'static str {
    if ok {
        "**PASS**"
    } else {
        "**FAIL**"
    }
}

/// Every section of the summary that compares with real XNNPACK or ExecuTorch.
pub fn sections(rows: &[Row], info: &MachineInfo, skipped: Option<&str>, et: &ExecutorchTimes) -> String {
    let mut s = String::new();
    let threads = thread_counts(rows);
    let xnn_rows = rows.iter().filter(|r| r.engine == "xnnpack").count();
    let _ = writeln!(s, "## Real XNNPACK next to our runtime\n");
    match skipped {
        Some(why) => {
            let _ = writeln!(s, "Real XNNPACK was **skipped**: {why}. Every ratio below is our runtime's alone.\n");
        }
        None => {
            let refused = rows.iter().filter(|r| r.engine == "xnnpack" && r.skipped()).count();
            let _ = writeln!(
                s,
                "Real XNNPACK (the ExecuTorch 1.5.1 wheel's `libexecutorch_backend_xnnpack.so`) ran {} of {xnn_rows} programs on the same payloads, inputs and rounds as our runtime ({refused} refused, listed as `skipped` in the CSVs), on a pthreadpool of its own per program with XNNPACK's default spinning workers.\n",
                xnn_rows - refused
            );
        }
    }
    let _ = writeln!(
        s,
        "Both engines are timed the same way: built, bound to their inputs once, checked against the reference, then one invoke per round. Ours: `Program::bind`, then `Bound::invoke` (outputs written in place). XNNPACK (`timed` column): `xnn_invoke` where the program is one delegate segment from the graph inputs to the graph outputs (XNNPACK's setup/invoke split: `xnn_invoke_runtime` alone); `xnn_program` otherwise (Main's portable mean, several segments): the whole program, with the portable ops and hand-offs on our runtime (as ExecuTorch's portable kernels run them) and per segment the reshape, setup and invoke ExecuTorch's delegate does per call, plus copies of each segment's inputs and outputs into and out of XNNPACK's padded buffers, which ExecuTorch does not make. Those copies make XNNPACK's `xnn_program` rows slower than ExecuTorch's would be, so its before/after ratios lean towards \"after faster\" by their cost.\n"
    );
    if xnn_rows > 0 {
        s.push_str(&goals(rows, &threads));
        for &t in &threads {
            s.push_str(&table(rows, t, info));
        }
    }
    s.push_str(&executorch(rows, et));
    s
}

/// Issue 22's goal lines, each with the figures measured in this sweep.
fn goals(rows: &[Row], threads: &[usize]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Goals of issue 22, measured in this sweep\n");
    let _ = writeln!(
        s,
        "\"Ours\" is StaticMean with the cost model (the issue's table), against XNNPACK's StaticMean program; ratios are paired medians of one run's rounds with their 95% interval; sizes are the mean's input (shape label x dtype size). Goal 3 pairs each 2-thread program with the same program on one thread timed in the same rounds (`vs_one_thread`); goal 2 divides medians of different row groups (not paired).\n"
    );
    let ts: Vec<usize> = threads.iter().copied().filter(|&t| t == 1 || t == 2).collect();
    let keys: Vec<(String, String, String)> = {
        let mut v: Vec<_> = Vec::new();
        for r in rows.iter().filter(|r| r.engine == "ours" && r.mode == "static_mean") {
            let k = (r.scenario.clone(), r.shape.clone(), r.dtype.clone());
            if !v.contains(&k) {
                v.push(k);
            }
        }
        v
    };
    // 1. ours / XNNPACK <= 1.0 everywhere, <= 0.67 on RMSNorm of 1 MiB or more.
    let mut measured = 0;
    let mut over: Vec<(f64, String)> = Vec::new();
    let mut big: Vec<String> = Vec::new();
    let mut big_ok = true;
    for &t in &ts {
        for k in &keys {
            let r = find(rows, key(k), "ours", "static_mean", Some("cost_model"), t);
            let Some((x, lo, hi)) = vs_x(r) else { continue };
            measured += 1;
            let x_us = find(rows, key(k), "xnnpack", "static_mean", None, t).and_then(|r| r.median_ns);
            let label = format!(
                "{} {} {} t{t}: {x:.2} [{lo:.2}, {hi:.2}] ({} vs {} us)",
                k.0,
                k.1,
                k.2,
                us(r.and_then(|r| r.median_ns)),
                us(x_us)
            );
            if x > 1.0 {
                over.push((x, label.clone()));
            }
            if k.0 == "rmsnorm" && bytes(&k.1, &k.2) >= 1 << 20 {
                big_ok &= x <= 0.67;
                big.push(label);
            }
        }
    }
    over.sort_by(|a, b| b.0.total_cmp(&a.0));
    let worst: Vec<String> = over.iter().take(8).map(|(_, l)| l.clone()).collect();
    let _ = writeln!(
        s,
        "1. ours ÷ XNNPACK ≤ 1.0 on every scenario at 1 and 2 threads: {} of {measured} rows at or below 1.0 {}{}",
        measured - over.len(),
        pass(measured > 0 && over.is_empty()),
        if worst.is_empty() { String::new() } else { format!("; worst: {}", worst.join("; ")) }
    );
    let _ = writeln!(
        s,
        "   and ≤ 0.67 on RMSNorm of 1 MiB or more: {} {}",
        if big.is_empty() { "not measured".to_string() } else { big.join("; ") },
        pass(!big.is_empty() && big_ok)
    );
    // 2. a mean of 1 MiB or more: 2 threads at least 1.7x faster than 1.
    let mut lines = Vec::new();
    let mut ok2 = true;
    for k in keys.iter().filter(|k| k.0 == "mean_last" && bytes(&k.1, &k.2) >= 1 << 20) {
        let sp = |engine: &str, policy: Option<&str>| {
            let a = find(rows, key(k), engine, "static_mean", policy, 1)?.median_ns?;
            let b = find(rows, key(k), engine, "static_mean", policy, 2)?.median_ns?;
            Some((a / b, a, b))
        };
        let Some((x, a, b)) = sp("ours", Some("cost_model")) else { continue };
        ok2 &= x >= 1.7;
        let xn = sp("xnnpack", None).map(|(x, _, _)| format!("{x:.2}x")).unwrap_or_else(|| "-".into());
        lines.push(format!("{} {} {}: {x:.2}x ({} -> {} us; XNNPACK {xn})", k.0, k.1, k.2, us(Some(a)), us(Some(b))));
    }
    let _ = writeln!(
        s,
        "2. a mean of 1 MiB or more at 2 threads at least 1.7x faster than at 1 thread: {} {}",
        if lines.is_empty() { "not measured".to_string() } else { lines.join("; ") },
        pass(!lines.is_empty() && ok2)
    );
    // 3. under 64 KiB, 2 threads never above 1.05x our 1-thread time: the 2-thread row's
    // paired ratio against the same program on one thread in its rounds (`vs_one_thread`);
    // CSVs without it divide the medians of the two row groups.
    let mut n3 = 0;
    let mut bad3: Vec<(f64, String)> = Vec::new();
    for k in keys.iter().filter(|k| bytes(&k.1, &k.2) < 64 << 10) {
        for (mode, policy) in [("static_mean", "cost_model"), ("nhwc_aware", "cost_model")] {
            let Some(r2) = find(rows, key(k), "ours", mode, Some(policy), 2) else { continue };
            let (x, how) = match (r2.vs_one_thread, r2.vs_one_thread_low, r2.vs_one_thread_high) {
                (Some(x), Some(lo), Some(hi)) => (x, format!("[{lo:.2}, {hi:.2}], paired")),
                _ => {
                    let a = find(rows, key(k), "ours", mode, Some(policy), 1).and_then(|r| r.median_ns);
                    let (Some(a), Some(b)) = (a, r2.median_ns) else { continue };
                    (b / a, format!("{} -> {} us, medians", us(Some(a)), us(Some(b))))
                }
            };
            n3 += 1;
            if x > 1.05 {
                bad3.push((x, format!("{} {} {} {mode}: {x:.2}x ({how})", k.0, k.1, k.2)));
            }
        }
    }
    bad3.sort_by(|a, b| b.0.total_cmp(&a.0));
    let worst3: Vec<String> = bad3.iter().take(6).map(|(_, l)| l.clone()).collect();
    let _ = writeln!(
        s,
        "3. 2 threads never above 1.05x our own 1-thread time on any scenario under 64 KiB (StaticMean and NhwcAware, cost model): {} of {n3} within {}{}",
        n3 - bad3.len(),
        pass(n3 > 0 && bad3.is_empty()),
        if worst3.is_empty() { String::new() } else { format!("; above: {}", worst3.join("; ")) }
    );
    // 4. before/after on ours within 15% of the same ratio on XNNPACK.
    let mut n4 = 0;
    let mut bad4: Vec<(f64, String)> = Vec::new();
    for &t in &ts {
        for k in &keys {
            let o =
                find(rows, key(k), "ours", "static_mean", Some("per_output_tasks"), t).and_then(|r| r.ratio_vs_main);
            let x = find(rows, key(k), "xnnpack", "static_mean", None, t).and_then(|r| r.ratio_vs_main);
            let (Some(o), Some(x)) = (o, x) else { continue };
            n4 += 1;
            let off = o / x - 1.0;
            if off.abs() > 0.15 {
                bad4.push((
                    off.abs(),
                    format!("{} {} {} t{t}: ours {o:.2} vs XNNPACK {x:.2} ({:+.0}%)", k.0, k.1, k.2, off * 100.0),
                ));
            }
        }
    }
    bad4.sort_by(|a, b| b.0.total_cmp(&a.0));
    let worst4: Vec<String> = bad4.iter().take(8).map(|(_, l)| l.clone()).collect();
    let _ = writeln!(
        s,
        "4. before/after ratios (StaticMean ÷ Main; ours with XNNPACK's per-output tasks) on our runtime within 15% of the same ratio on real XNNPACK: {} of {n4} within {}{}\n",
        n4 - bad4.len(),
        pass(n4 > 0 && bad4.is_empty()),
        if worst4.is_empty() { String::new() } else { format!("; furthest: {}", worst4.join("; ")) }
    );
    s
}

/// Per scenario at `t` threads: absolute times of both engines, ours ÷ XNNPACK, before/after on
/// both.
fn table(rows: &[Row], t: usize, info: &MachineInfo) -> String {
    let mut s = String::new();
    let _ =
        writeln!(s, "## Ours ÷ real XNNPACK, {t} thread(s){}\n", if t > info.cores { " (oversubscribed)" } else { "" });
    let _ = writeln!(
        s,
        "Medians in us; `o/x` = ours ÷ XNNPACK, paired, with its 95% interval (StaticMean: ours with the cost model; Main: ours with per-output tasks); `before/after` = StaticMean ÷ Main on each engine (ours: per-output tasks / cost model). `P` marks an XNNPACK `xnn_program` timing (see above).\n"
    );
    let _ = writeln!(s, "| scenario | shape | dtype | size | Main ours | Main XNNPACK | Main o/x | StaticMean ours | StaticMean XNNPACK | StaticMean o/x | NhwcAware o/x | before/after ours | before/after XNNPACK |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (k, g) in groups(rows, t) {
        let kk = (k.0.as_str(), k.1.as_str(), k.2.as_str());
        let xm = find(rows, kk, "xnnpack", "main", None, t);
        let xs = find(rows, kk, "xnnpack", "static_mean", None, t);
        let mark = |r: Option<&Row>| {
            let p = if r.is_some_and(|r| r.timed == "xnn_program") { " P" } else { "" };
            format!("{}{p}", us(r.and_then(|r| r.median_ns)))
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} |",
            k.0,
            k.1,
            k.2,
            kib(bytes(&k.1, &k.2)),
            us(ok(g.main).and_then(|r| r.median_ns)),
            mark(xm),
            fmt3(vs_x(ok(g.main))),
            us(ok(g.sm_cost).and_then(|r| r.median_ns)),
            mark(xs),
            fmt3(vs_x(ok(g.sm_cost))),
            fmt3(vs_x(ok(g.nhwc))),
            r2(ok(g.sm_pot).and_then(|r| r.ratio_vs_main)),
            r2(ok(g.sm_cost).and_then(|r| r.ratio_vs_main)),
            r2(xs.and_then(|r| r.ratio_vs_main)),
        );
    }
    s.push('\n');
    s
}

/// ExecuTorch's portable mean ÷ ours, per scenario, from the script's CSV.
fn executorch(rows: &[Row], et: &ExecutorchTimes) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## The before's mean: ExecuTorch's portable kernel ÷ ours\n");
    let et = match et {
        Ok(v) => v,
        Err(e) => {
            let _ = writeln!(s, "No ExecuTorch timings ({e}); `scripts/time-executorch-portable.py` writes them.\n");
            return s;
        }
    };
    let first = et.first();
    let _ = writeln!(
        s,
        "`ET` is ExecuTorch 1.5.1's portable `mean.out` on the same mean (input shape, dims, dtype; the qs8 programs' mean is on dequantized fp32) through its Python bindings, timed by `scripts/time-executorch-portable.py` ({}, commit `{}`, {}); `net` subtracts the bindings' own cost per call ({} us, a one-element mean). `ours` is the sweep's `portable_mean` row: the scenario's mean alone, lowered in Main (a portable op on our scalar kernel), bound and invoked at 1 thread. The two were measured in different processes at different times (not paired): ratios within ~10% are noise on this shared machine; ExecuTorch's loop runs the mean hot in cache, while in the sweep's rounds it follows the scenario's other programs, so where those hold MiB of weights (rmsnorm_linear, mlp4, qknorm) ours starts cold. Where `net ÷ ours` is off 1 by more than 20% the row says so; where ExecuTorch's net is below the bindings' call cost it is not compared. Our kernel follows ExecuTorch's algorithm (per output, a scalar f32 sum in index order; one reduced dim as a strided loop, as its `apply_on_flat_ix_with_stride_and_base`); where ours is faster, the before/after ratios on our runtime understate the change's speed-up rather than overstate it.\n",
        first.map(|r| r.cpu.as_str()).unwrap_or("-"),
        first.map(|r| r.commit.as_str()).unwrap_or("-"),
        first.map(|r| r.date.as_str()).unwrap_or("-"),
        first.map(|r| format!("{:.1}", r.call_ns / 1000.0)).unwrap_or_else(|| "-".into()),
    );
    let _ = writeln!(s, "| scenario | shape | dtype | mean | ET us | ET net us | ours us | ET net ÷ ours | |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    let mut off = 0;
    let mut n = 0usize;
    for e in et {
        n += 1;
        let ours =
            find(rows, (&e.scenario, &e.shape, &e.dtype), "ours", "portable_mean", None, 1).and_then(|r| r.median_ns);
        let ratio = ours.map(|o| e.net_ns / o);
        let note = match ratio {
            // The bindings' call is most of ExecuTorch's figure: its net is not measurable.
            Some(_) if e.net_ns < e.call_ns => {
                n -= 1;
                "ExecuTorch's figure is mostly the bindings' call: not compared".to_string()
            }
            Some(x) if !(0.8..=1.2).contains(&x) => {
                off += 1;
                if x > 1.0 {
                    format!("ours {:.0}% faster than ExecuTorch's", (1.0 - 1.0 / x) * 100.0)
                } else {
                    format!("ours {:.0}% slower than ExecuTorch's", (1.0 / x - 1.0) * 100.0)
                }
            }
            Some(_) => String::new(),
            None => "not in this sweep".into(),
        };
        if ratio.is_none() {
            n -= 1;
        }
        let _ = writeln!(
            s,
            "| {} | {} | {} | mean({}) of {} | {} | {} | {} | {} | {note} |",
            e.scenario,
            e.shape,
            e.dtype,
            e.mean_dims,
            e.mean_shape,
            us(Some(e.et_median_ns)),
            us(Some(e.net_ns)),
            us(ours),
            r2(ratio)
        );
    }
    let _ = writeln!(s, "\nOurs is off ExecuTorch's portable mean by more than 20% in {off} of {n} scenarios.\n");
    s
}
