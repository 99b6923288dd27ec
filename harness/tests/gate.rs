//! The count gate in CI: the committed golden table must match the lowering, a doctored
//! table must fail with a diff naming pattern, mode and count, a misspelled node name must be
//! rejected, and real ExecuTorch programs must be gated against limits.

use harness::gate::{self, Computed, Golden, Limits};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The table is recomputed once per test binary (every catalog program in three modes).
fn computed() -> &'static Computed {
    static C: OnceLock<Computed> = OnceLock::new();
    C.get_or_init(|| gate::compute(&[]).expect("every catalog program builds"))
}

fn golden_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpora/gates/golden.json")
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../delegate/tests/fixtures/executorch-1.5.1")
}

#[test]
fn lowering_matches_the_committed_golden_table() {
    let path = golden_path();
    let golden = Golden::load(&path).expect("committed golden table loads and validates");
    let stored = gate::load_graphs(&gate::graphs_path(&path)).expect("stored graphs parse");
    let out = gate::check_against(&golden, &stored, computed().clone(), false);
    assert!(out.changes.is_empty(), "a lowering count moved without `harness gate --bless`:\n{}", out.report);
    assert!(out.report.contains("savings per pattern"), "{}", out.report);
}

#[test]
fn a_doctored_golden_fails_with_a_diff_naming_pattern_mode_and_count() {
    let c = computed();
    let mut doctored = c.golden.clone();
    let e = doctored
        .patterns
        .get_mut("conv_sub_mean")
        .and_then(|p| p.modes.get_mut("static_mean"))
        .expect("conv_sub_mean is in the catalog");
    let actual = e.transposes;
    e.transposes = actual + 3;
    let mut stored = c.graphs.clone();
    let g = stored
        .iter_mut()
        .find(|g| g.pattern == "conv_sub_mean" && g.mode == "static_mean" && g.segment == 0)
        .expect("its segment graph is stored");
    g.graph.nodes.pop();
    doctored.patterns.get_mut("conv_sub_mean").unwrap().modes.get_mut("static_mean").unwrap().sha256[0] =
        "0".repeat(64);

    let out = gate::check_against(&doctored, &stored, c.clone(), false);
    assert!(!out.passed());
    let want = format!("pattern conv_sub_mean, mode static_mean: transposes {} -> {actual}", actual + 3);
    assert!(out.report.contains(&want), "missing {want:?} in:\n{}", out.report);
    assert!(
        out.report.contains("decoded-graph diff, pattern conv_sub_mean, mode static_mean, segment 0"),
        "{}",
        out.report
    );
    assert!(out.report.contains("nodes: "), "the graph diff shows the node count change:\n{}", out.report);
    assert_eq!(out.changes.len(), 2, "{:?}", out.changes);
}

#[test]
fn bless_writes_a_table_that_then_passes() {
    let dir = std::env::temp_dir().join(format!("harness-gate-bless-{}", std::process::id()));
    let path = dir.join("golden.json");
    gate::bless(&path, computed()).unwrap();
    let golden = Golden::load(&path).unwrap();
    let stored = gate::load_graphs(&gate::graphs_path(&path)).unwrap();
    let out = gate::check_against(&golden, &stored, computed().clone(), false);
    assert!(out.changes.is_empty(), "{}", out.report);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_misspelled_node_name_in_the_golden_table_is_an_error() {
    let text = std::fs::read_to_string(golden_path()).unwrap();
    assert!(Golden::parse(&text).is_ok());
    let bad = text.replacen("\"XNNStaticTranspose\"", "\"XNNStaticTranpose\"", 1);
    assert_ne!(bad, text, "the table pins at least one transpose count");
    let err = format!("{:#}", Golden::parse(&bad).unwrap_err());
    assert!(err.contains("XNNStaticTranpose") && err.contains("not a member of XNodeUnion"), "{err}");
}

#[test]
fn every_pinned_count_uses_a_schema_name_and_the_catalog_is_complete() {
    let g = &computed().golden;
    g.validate().unwrap();
    for name in [
        "gap_1x8x6x6",
        "conv_gap",
        "conv_mean_conv",
        "conv_sub_mean",
        "cl_gap_1x8x6x6",
        "rmsnorm_1x16x256_table",
        "qs8_mean_inner",
        "qs8_mean_middle",
        "mean_all_dims",
        "mean_dim3",
        "mean_dim3_nokeep",
        "mean_dtype_arg",
        "rmsnorm_linear_1x32x512",
        "qknorm_8x64",
        "mlp4_decode",
        "mlp4_prefill",
    ] {
        let p = g.patterns.get(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(p.modes.len(), 3, "{name}");
    }
}

#[test]
fn golden_table_carries_executorchs_reasons_and_pool_payloads() {
    // The committed table names why each mean stays outside in ExecuTorch 1.5.1's words:
    // the manifest's `mean_why_not` of c (conv -> mean(1) -> conv) and e (RMSNorm 1x16x256).
    let golden = Golden::load(&golden_path()).unwrap();
    let text = std::fs::read_to_string(fixtures().join("manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mode = |p: &str, m: &str| &golden.patterns[p].modes[m];
    for (row, fixture) in [("conv_mean_conv", "c"), ("rmsnorm_1x16x256_table", "e")] {
        let want: Vec<String> = manifest["patterns"][fixture]["mean_why_not"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| format!("mean.dim: {}", r.as_str().unwrap()))
            .collect();
        assert_eq!(mode(row, "main").outside, want, "{row}");
    }
    assert_eq!(mode("mean_dtype_arg", "static_mean").outside, vec!["mean.dim: mean.dim does not support dtype"]);
    assert_eq!(
        mode("mean_dim3", "main").outside,
        vec!["mean.dim: mean.dim only supports averaging 4D tensors across the innermost dimensions"]
    );
    assert_eq!(
        mode("mean_dim3_nokeep", "main").outside,
        vec!["mean.dim: mean.dim only supports averaging 4D tensors across the innermost dimensions"]
    );
    // AdaptiveAvgPool2d(1) rows hash like their mean rows, in every mode.
    for (pool, mean) in [
        ("pool_1x8x6x6", "gap_1x8x6x6"),
        ("cl_pool_1x8x6x6", "cl_gap_1x8x6x6"),
        ("conv_pool", "conv_gap"),
        ("qs8_conv_pool", "qs8_conv_gap"),
    ] {
        for m in ["main", "static_mean", "nhwc_aware"] {
            assert_eq!(mode(pool, m).sha256, mode(mean, m).sha256, "{pool} {m}");
            assert!(!mode(pool, m).sha256.is_empty());
        }
    }
    // e's second payload is the committed hash of the RMSNorm rows' (its sha256 in the
    // manifest): 1x16x256 dynamic in dim 1 serializes its bound, 16.
    let e1 = manifest["patterns"]["e"]["payloads"][1]["sha256"].as_str().unwrap();
    assert_eq!(mode("p14_rmsnorm_dynamic", "main").sha256[1], e1);
}

fn limits(max: &[&str], forbid: &[&str], max_delegates: Option<usize>) -> Limits {
    let args = gate::GateArgs {
        max: max.iter().map(|s| s.to_string()).collect(),
        forbid: forbid.iter().map(|s| s.to_string()).collect(),
        max_delegates,
        ..Default::default()
    };
    Limits::from_args(&args).unwrap()
}

#[test]
fn real_pte_programs_are_gated_against_limits() {
    let a = std::fs::read(fixtures().join("a.pte")).expect("fixture a.pte");
    let (ok, report) = gate::gate_pte(&a, &limits(&["XNNStaticTranspose=2"], &[], Some(1))).unwrap();
    assert!(ok, "{report}");
    let (ok, report) =
        gate::gate_pte(&a, &limits(&["XNNStaticTranspose=1"], &["XNNGlobalAvgPooling2d"], None)).unwrap();
    assert!(!ok);
    assert!(report.contains("XNNStaticTranspose: 2 > at most 1"), "{report}");
    assert!(report.contains("XNNGlobalAvgPooling2d: 1 present, forbidden"), "{report}");

    // c: the mean stays outside on ExecuTorch 1.5.1, so the program has two delegates.
    let c = std::fs::read(fixtures().join("c.pte")).expect("fixture c.pte");
    let (ok, report) = gate::gate_pte(&c, &limits(&[], &[], Some(1))).unwrap();
    assert!(!ok && report.contains("delegates: 2 > at most 1"), "{report}");

    assert!(gate::gate_pte(b"not a pte file at all", &limits(&["XNNStaticTranspose=2"], &[], None)).is_err());
}

#[test]
fn a_program_without_delegates_is_gated() {
    // f: x.mean(-1) stays a portable operator on ExecuTorch 1.5.1; the file has no extended
    // header and one empty segment at offset 0.
    let f = std::fs::read(fixtures().join("f.pte")).expect("fixture f.pte");
    let (ok, report) = gate::gate_pte(&f, &limits(&["XNNStaticTranspose=0"], &[], Some(0))).unwrap();
    assert!(ok, "{report}");
    assert!(report.contains("operators outside delegates: aten::mean.out"), "{report}");
    assert!(report.contains("total: 0 delegates, {}"), "{report}");
    let mut at_least_one_mean = limits(&[], &[], None);
    at_least_one_mean.min.insert("XNNStaticMean".into(), 1);
    let (ok, report) = gate::gate_pte(&f, &at_least_one_mean).unwrap();
    assert!(!ok && report.contains("XNNStaticMean: 0 < at least 1"), "{report}");
}

#[test]
fn only_with_a_name_that_matches_nothing_is_an_error() {
    let e = gate::compute(&["no_such_program".into()]).expect_err("--only matching nothing must fail");
    assert!(e.to_string().contains("matches no program"), "{e}");
    assert!(gate::compute(&["gap_1x8x6x6".into()]).is_ok());
}
