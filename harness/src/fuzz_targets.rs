//! The bodies of the cargo-fuzz targets (`fuzz/fuzz_targets/*.rs` are one line each), so
//! that `cargo test` replays saved inputs through exactly the check the fuzzer ran
//! (`harness/tests/fuzz_regressions.rs` replays every file under `fuzz/regressions/`).
//!
//! Each returns `Ok(true)` for an input worth keeping in the corpus, `Ok(false)` for one
//! that means nothing to the target (bytes that are no case, a case that does not build),
//! and `Err` with the finding; the targets panic on `Err`, which libFuzzer reports as a
//! crash and saves under `fuzz/artifacts/<target>/`.

use crate::case::Case;
use crate::oracle::{self, CheckOptions};
use crate::report;
use delegate::serialize::{self, fb, LoadError, LoadLimits, XnnHeader};
use delegate::xnn::XnnGraph;
use delegate::LoweringMode;

/// The case a cargo-fuzz input means: a JSON case line when the input is one (the seed
/// corpora are the `corpora/` cases), otherwise [`Case`]'s `Arbitrary` decoding (the
/// generator `harness fuzz` draws from).
pub fn case_from_fuzz_input(data: &[u8]) -> Option<Case> {
    if data.first() == Some(&b'{') {
        if let Some(c) = std::str::from_utf8(data).ok().and_then(|s| Case::from_json(s).ok()) {
            return Some(c);
        }
    }
    let mut u = arbitrary::Unstructured::new(data);
    <Case as arbitrary::Arbitrary>::arbitrary(&mut u).ok()
}

/// FNV-1a of the input: which of the sampled configurations an input runs in, the same
/// for every run of the same bytes (so a crash replays).
fn input_index(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// `differential`: every oracle, on the fuzz loop's sampled configurations
/// ([`CheckOptions::sampled`], the `harness fuzz` fast path: every mode single-threaded on
/// the SIMD path plus one rotating configuration, instead of the full matrix at every
/// thread count). A case that does not build is not a finding: the input is rejected.
pub fn differential(data: &[u8]) -> Result<bool, String> {
    let Some(case) = case_from_fuzz_input(data) else { return Ok(false) };
    if case.numel() > 1 << 16 || crate::patterns::build(&case).is_err() {
        return Ok(false);
    }
    let r = oracle::check(&case, &CheckOptions::sampled(input_index(data)));
    if r.invalid.is_some() {
        // A case that can not be run as written (inline tensors of the wrong dtype, run
        // shapes that contradict the input): no verdict, uninteresting.
        return Ok(false);
    }
    match r.first_failure() {
        Some(f) => Err(format!("{}\ncase: {}\n{}", f.label(), case.to_json(), report::verdicts(&r))),
        None => Ok(true),
    }
}

/// `roundtrip`: lowers a case in every mode and runs the bytes oracle (deterministic
/// writes, load/re-serialize identity, GAP programs identical across modes).
pub fn roundtrip(data: &[u8]) -> Result<bool, String> {
    let Some(case) = case_from_fuzz_input(data) else { return Ok(false) };
    let Ok(built) = crate::patterns::build(&case) else { return Ok(false) };
    let mut payloads = vec![];
    for (mode, p) in LoweringMode::ALL.into_iter().zip(crate::engine::lower_each(&built.graph, &LoweringMode::ALL)) {
        let Ok(p) = p else { continue };
        match oracle::bytes::segment_verdict(&p) {
            (oracle::Verdict::Fail { kind, detail }, _) => {
                return Err(format!("bytes/{kind} in {mode}: {detail}\ncase: {}", case.to_json()))
            }
            (_, Some(p)) => payloads.push((mode, p)),
            _ => {}
        }
    }
    if built.gap_only {
        if let oracle::Verdict::Fail { kind, detail } = oracle::bytes::gap_identity(&payloads) {
            return Err(format!("bytes/{kind}: {detail}\ncase: {}", case.to_json()));
        }
    }
    Ok(true)
}

/// `load_bytes`: arbitrary bytes into the loader. It may refuse them with a typed error,
/// never panic. What it accepts (with the inspection limits, the widest) must be what our
/// writer produces, field for field:
/// - every count field of the input equals the length of the list it counts (the graph
///   keeps only the list, so a count the loader let through would silently change);
/// - the loaded graph, written and loaded again, equals itself, and writing is idempotent;
/// - the runtime's strict limits give the same graph, or refuse only its named constants.
///
/// Every input is worth keeping, refused ones included: the refusals are the loader's code.
pub fn load_bytes(data: &[u8]) -> Result<bool, String> {
    let Ok(graph) = serialize::load(data, &LoadLimits::lenient()) else { return Ok(true) };
    counts_match(data)?;
    let bytes = serialize::write(&graph);
    let again = serialize::load(&bytes, &LoadLimits::lenient())
        .map_err(|e| format!("a loaded graph re-serialized to bytes the loader refuses: {e}"))?;
    let bytes2 = serialize::write(&again);
    if bytes != bytes2 {
        return Err(format!("load/write is not idempotent: {}", oracle::bytes::first_difference(&bytes, &bytes2)));
    }
    if !same_graph(&graph, &again) {
        return Err(format!("the reloaded graph differs:\n{}", serialize::diff_graphs(&graph, &again)));
    }
    match serialize::load(data, &LoadLimits::default()) {
        Ok(strict) if same_graph(&strict, &graph) => {}
        Ok(strict) => {
            return Err(format!("strict and lenient loads differ:\n{}", serialize::diff_graphs(&graph, &strict)))
        }
        Err(LoadError::BadConstant { .. }) if has_named_constant(&graph) => {}
        Err(e) => return Err(format!("the strict limits refuse what the lenient ones accept: {e}")),
    }
    Ok(true)
}

/// Equal graphs, or graphs that differ only where a field is NaN (`NaN != NaN`; a NaN
/// padding value is a legal field): then their bytes, every field bit for bit, are equal.
fn same_graph(a: &XnnGraph, b: &XnnGraph) -> bool {
    a == b || serialize::write(a) == serialize::write(b)
}

fn has_named_constant(g: &XnnGraph) -> bool {
    g.constant_data.iter().any(|c| c.named_key.as_deref().is_some_and(|k| !k.is_empty()))
}

/// Checks, through the generated accessors and independently of the loader's own checks,
/// that every count field of an accepted payload matches its list: each value's
/// `num_dims`, and `num_dims` / `num_reduction_axes` of the transpose, reshape, slice and
/// mean nodes.
pub fn counts_match(data: &[u8]) -> Result<(), String> {
    let fb_bytes = match XnnHeader::has_magic(data) {
        true => XnnHeader::parse(data).map_err(|e| e.to_string())?.flatbuffer(data),
        false => data,
    };
    // The loader's verifier options (LoadLimits::lenient), so that what it verified verifies here.
    let limits = LoadLimits::lenient();
    let opts = flatbuffers::VerifierOptions {
        max_depth: limits.max_depth,
        max_tables: limits.max_tables,
        max_apparent_size: 1 << 31,
        ignore_missing_null_terminator: false,
    };
    let root = fb::root_as_xnngraph_with_opts(&opts, fb_bytes)
        .map_err(|e| format!("an accepted payload fails verification: {e}"))?;
    let check = |what: String, count: u32, len: Option<usize>| match len {
        Some(len) if len == count as usize => Ok(()),
        _ => Err(format!("{what} = {count} but its list holds {len:?} entries, and the loader accepted it")),
    };
    for (i, v) in root.xvalues().iter().flatten().enumerate() {
        let t = v
            .xvalue_union_as_xnntensor_value()
            .or_else(|| v.xvalue_union_as_xnnquantized_tensor_value().and_then(|q| q.tensor_value()));
        if let Some(t) = t {
            check(format!("value {i} num_dims"), t.num_dims(), Some(t.dims().map_or(0, |d| d.len())))?;
        }
    }
    for (i, n) in root.xnodes().iter().flatten().enumerate() {
        if let Some(t) = n.xnode_union_as_xnnstatic_transpose() {
            check(format!("node {i} XNNStaticTranspose.num_dims"), t.num_dims(), t.perm().map(|l| l.len()))?;
        }
        if let Some(t) = n.xnode_union_as_xnnstatic_reshape() {
            check(format!("node {i} XNNStaticReshape.num_dims"), t.num_dims(), t.new_shape().map(|l| l.len()))?;
        }
        if let Some(t) = n.xnode_union_as_xnnstatic_slice() {
            check(format!("node {i} XNNStaticSlice.num_dims (offsets)"), t.num_dims(), t.offsets().map(|l| l.len()))?;
            check(format!("node {i} XNNStaticSlice.num_dims (sizes)"), t.num_dims(), t.sizes().map(|l| l.len()))?;
        }
        if let Some(t) = n.xnode_union_as_xnnstatic_mean() {
            let len = t.reduction_axes().map(|l| l.len());
            check(format!("node {i} _XNNStaticReduce.num_reduction_axes"), t.num_reduction_axes(), len)?;
        }
    }
    Ok(())
}
