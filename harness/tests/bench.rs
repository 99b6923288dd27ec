//! The latency gate: `bench check` passes on the committed sweep against the committed
//! baseline and fails on a doctored CSV; a tiny sweep writes every output and checks its
//! programs against the reference.

use harness::bench::check::{self, REQUIRED_COLUMNS};
use harness::bench::report::{self, read_csv, write_csv};
use harness::bench::{self, MachineInfo, SweepArgs};
use std::path::{Path, PathBuf};

fn reports() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports")
}

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("harness-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn check_passes_on_the_committed_sweep_and_baseline() {
    let (ok, out) = check::check(&reports(), &reports().join("baseline"), false, 0.25).unwrap();
    assert!(ok, "{out}");
    assert!(out.contains("PASS"), "{out}");
}

#[test]
fn check_fails_when_a_thread_count_of_the_baseline_is_missing() {
    let dir = temp("missing");
    let files = check::csv_files(&reports()).unwrap();
    let (&dropped, _) = files.iter().last().expect("the sweep holds CSVs");
    for (&t, p) in &files {
        if t != dropped {
            std::fs::copy(p, report::csv_path(&dir, t)).unwrap();
        }
    }
    let (ok, out) = check::check(&dir, &reports().join("baseline"), false, 0.25).unwrap();
    assert!(!ok, "{out}");
    assert!(out.contains(&format!("missing {}", report::csv_path(&dir, dropped).display())), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_fails_on_a_doctored_csv_naming_the_row() {
    let dir = temp("doctored");
    let files = check::csv_files(&reports().join("baseline")).unwrap();
    let (&t, src) = files.iter().next().expect("the baseline holds at least one CSV");
    let mut rows = read_csv(src).unwrap();
    let victim = rows
        .iter_mut()
        .find(|r| r.mode == "static_mean" && r.check == "ok" && r.ratio_vs_main.is_some())
        .expect("a timed StaticMean row");
    let base = victim.ratio_vs_main.unwrap();
    let moved = victim.ci_high.unwrap() * 3.0;
    victim.ratio_vs_main = Some(moved);
    victim.ci_low = Some(moved * 0.99);
    victim.ci_high = Some(moved * 1.01);
    victim.within_noise = false;
    let name = format!("{} {} {} static_mean/{} t{t}", victim.scenario, victim.shape, victim.dtype, victim.policy);
    let refs: Vec<&harness::bench::Row> = rows.iter().collect();
    write_csv(&report::csv_path(&dir, t), &refs).unwrap();

    let (ok, out) = check::check(&dir, &reports().join("baseline"), false, 0.25).unwrap();
    assert!(!ok, "{out}");
    assert!(out.contains(&format!("MOVED {name}: ratio {base:.3}")), "{out}");
    assert!(out.contains("slower"), "{out}");

    // A CSV that lost a required column is invalid.
    let text = std::fs::read_to_string(report::csv_path(&dir, t)).unwrap();
    let bad = text.replacen("ratio_vs_main", "ratio", 1);
    std::fs::write(report::csv_path(&dir, t), bad).unwrap();
    let (ok, out) = check::check(&dir, &reports().join("baseline"), false, 0.25).unwrap();
    assert!(!ok && out.contains("missing column ratio_vs_main"), "{out}");
    assert!(REQUIRED_COLUMNS.contains(&"oversubscribed"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_tiny_sweep_checks_outputs_and_writes_every_report() {
    let args = SweepArgs {
        threads: vec![1, 2],
        only: vec!["rmsnorm_1x8x64_fp32".into()],
        budget: Some(0.5),
        max_runs: 30,
        min_runs: 10,
        min_rounds: 3,
        no_progress: true,
        ..SweepArgs::default()
    };
    let info = MachineInfo::collect();
    let sweep = bench::sweep(&args, &info).unwrap();
    let rows = &sweep.rows;
    // Ours: 4 programs x 2 thread counts, and the before's mean alone at 1 thread; real
    // XNNPACK: 3 modes x 2 thread counts when the library is there.
    let xnn = if sweep.xnnpack_skipped.is_none() { 6 } else { 0 };
    assert_eq!(rows.len(), 9 + xnn, "{rows:#?}");
    assert_eq!(rows.iter().filter(|r| r.engine == "xnnpack").count(), xnn);
    for r in rows {
        assert_eq!(r.check, "ok", "{r:?}");
        assert!(r.runs >= 3, "{r:?}");
        assert_eq!(r.oversubscribed, r.threads > info.cores);
        assert!(!r.simd.is_empty() && !r.commit.is_empty() && !r.cpu.is_empty(), "{r:?}");
        assert!(["bound", "xnn_invoke", "xnn_program"].contains(&r.timed.as_str()), "{r:?}");
        if r.engine == "ours" && r.mode != "portable_mean" && xnn > 0 {
            let (lo, x, hi) = (r.vs_xnnpack_low.unwrap(), r.vs_xnnpack.unwrap(), r.vs_xnnpack_high.unwrap());
            assert!(lo <= x && x <= hi && lo > 0.0, "{r:?}");
        }
        // Cost-model rows at 2 threads carry their ratio to the same program on one thread,
        // paired in the same rounds; no other row does (the twin is not a row of its own).
        let paired = r.engine == "ours" && r.policy == "cost_model" && r.threads > 1;
        assert_eq!(r.vs_one_thread.is_some(), paired, "{r:?}");
        if let (Some(lo), Some(x), Some(hi)) = (r.vs_one_thread_low, r.vs_one_thread, r.vs_one_thread_high) {
            assert!(lo <= x && x <= hi && lo > 0.0, "{r:?}");
        }
    }
    for engine in ["ours", "xnnpack"].iter().take(1 + usize::from(xnn > 0)) {
        let main = rows.iter().find(|r| r.mode == "main" && r.threads == 1 && r.engine == *engine).unwrap();
        assert_eq!(main.ratio_vs_main, Some(1.0), "{main:?}");
    }
    if xnn > 0 {
        // One segment from the graph inputs to the outputs: XNNPACK's invoke alone; Main
        // (portable mean between two segments): the whole program.
        let sm = rows.iter().find(|r| r.engine == "xnnpack" && r.mode == "static_mean").unwrap();
        assert_eq!(sm.timed, "xnn_invoke");
        let main = rows.iter().find(|r| r.engine == "xnnpack" && r.mode == "main").unwrap();
        assert_eq!(main.timed, "xnn_program");
    }
    let dir = temp("tiny");
    let written = report::write_all(&dir, &sweep, &info, std::time::Duration::from_secs(1), true).unwrap();
    for f in ["bench-t1.csv", "bench-t2.csv", "bench-t1.svg", "bench-t2.svg", "bench-summary.md"] {
        assert!(written.contains(&dir.join(f)), "{f} not written: {written:?}");
    }
    let svg = std::fs::read_to_string(dir.join("bench-t1.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("rmsnorm 1x8x64 fp32"), "{}", &svg[..svg.len().min(300)]);
    let md = std::fs::read_to_string(dir.join("bench-summary.md")).unwrap();
    assert!(md.contains("## Our runtime, 1 thread(s)") && md.contains("## Which of the change's findings"), "{md}");
    assert!(md.contains(&info.simd), "{md}");
    if xnn > 0 {
        assert!(md.contains("## Goals of issue 22") && md.contains("## Ours ÷ real XNNPACK, 2 thread(s)"), "{md}");
        assert!(svg.contains("XNNPACK StaticMean"), "the plot has the absolute times");
    } else {
        assert!(md.contains("Real XNNPACK was **skipped**"), "{md}");
    }
    let (ok, out) = check::check(&dir, &dir, false, 0.0).unwrap();
    assert!(ok, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_wrong_program_fails_its_check_and_gets_no_timing() {
    let want = vec![reference::Tensor::f32(&[2], vec![1.0, 2.0])];
    let got = vec![reference::Tensor::f32(&[2], vec![1.0, 2.5])];
    let e = bench::compare_outputs(&got, &want, reference::ElemType::F32).unwrap_err();
    assert!(e.contains("1 values off"), "{e}");
    assert!(bench::compare_outputs(&want, &want, reference::ElemType::F32).is_ok());
}
