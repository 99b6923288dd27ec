//! `harness inspect FILE`: header fields and node counts by type of an XNNPACK payload, or
//! of each XNNPACK payload inside an ExecuTorch `.pte` program, so that real exported
//! models can be gated on transpose and node counts. `--json` prints the same report as
//! one JSON object.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::engine::payload::{self as serialize, decode, pte, Decoded, LoadLimits, XnnHeader};
use anyhow::Context;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// Command-line arguments of `harness inspect`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct InspectArgs {
    /// An XNNPACK payload (`XH00` header or bare `XN01`/`XN00` flatbuffer) or a `.pte` file;
    /// the kind is detected from the identifier, not the extension.
    pub file: PathBuf,
    /// Print one machine-readable JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also list every node and value of each payload.
    #[arg(long)]
    pub nodes: bool,
}

#[derive(Serialize, Debug)]
struct Report {
    file: String,
    kind: &'static str,
    size: usize,
    sha256: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    program: Option<ProgramReport>,
    payloads: Vec<PayloadReport>,
}

#[derive(Serialize, Debug)]
struct ProgramReport {
    extended_header: Option<pte::ExtendedHeader>,
    segments: Vec<pte::Segment>,
    delegates: Vec<DelegateReport>,
    operators: Vec<String>,
    named_data: usize,
}

#[derive(Serialize, Debug)]
struct DelegateReport {
    plan: String,
    index: usize,
    backend_id: String,
    location: pte::DataLocation,
    data_index: u32,
    file_offset: Option<u64>,
    size: usize,
}

#[derive(Serialize, Debug)]
struct PayloadReport {
    /// Where it came from: the file itself, or `plan/delegate` inside a `.pte`.
    source: String,
    size: usize,
    sha256: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    graph: Option<GraphReport>,
}

#[derive(Serialize, Debug)]
struct GraphReport {
    /// `None` for a bare flatbuffer.
    header: Option<XnnHeader>,
    identifier: String,
    version: String,
    num_externs: u32,
    input_ids: Vec<u32>,
    output_ids: Vec<u32>,
    num_nodes: usize,
    num_values: usize,
    node_counts: BTreeMap<String, usize>,
    constants: usize,
    named_constants: usize,
    constant_data_bytes: usize,
    /// Whether a runtime built before `XNNStaticMean` was appended loads it (notes 6-B11).
    loads_on_old_runtime: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    nodes: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    values: Option<Vec<String>>,
}

fn sha256(b: &[u8]) -> String {
    Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

fn payload_report(source: String, bytes: &[u8], list: bool) -> PayloadReport {
    // Lenient: real payloads keep their weights in the .pte named data store.
    let decoded = decode(bytes, &LoadLimits::lenient());
    let (graph, error) = match decoded {
        Ok(Decoded { header, identifier, graph: g }) => (
            Some(GraphReport {
                header,
                identifier,
                version: g.version.clone(),
                num_externs: g.num_externs,
                input_ids: g.input_ids.clone(),
                output_ids: g.output_ids.clone(),
                num_nodes: g.nodes.len(),
                num_values: g.values.len(),
                node_counts: serialize::node_counts(&g),
                constants: g.constant_data.iter().skip(1).count(),
                named_constants: g
                    .constant_data
                    .iter()
                    .filter(|c| c.named_key.as_deref().is_some_and(|k| !k.is_empty()))
                    .count(),
                constant_data_bytes: g.constant_bytes.len(),
                loads_on_old_runtime: decode(
                    bytes,
                    &LoadLimits {
                        known_node_types: LoadLimits::old_runtime().known_node_types,
                        ..LoadLimits::lenient()
                    },
                )
                .is_ok(),
                nodes: list.then(|| g.nodes.iter().map(serialize::diff::describe_node).collect()),
                values: list.then(|| g.values.iter().map(serialize::diff::describe_value).collect()),
            }),
            None,
        ),
        Err(e) => (None, Some(e.to_string())),
    };
    PayloadReport { source, size: bytes.len(), sha256: sha256(bytes), error, graph }
}

/// Builds the report of `bytes` (named `file`).
fn report(file: String, bytes: &[u8], list: bool) -> anyhow::Result<Report> {
    if pte::is_pte(bytes) {
        let p = pte::parse(bytes).context("reading the .pte program")?;
        let delegates = p
            .delegates
            .iter()
            .map(|d| DelegateReport {
                plan: d.plan.clone(),
                index: d.delegate_index,
                backend_id: d.backend_id.clone(),
                location: d.location,
                data_index: d.index,
                file_offset: d.file_offset,
                size: d.bytes.len(),
            })
            .collect();
        let payloads = p
            .xnnpack()
            .map(|d| payload_report(format!("{}/delegate {}", d.plan, d.delegate_index), d.bytes, list))
            .collect();
        return Ok(Report {
            file,
            kind: "pte",
            size: bytes.len(),
            sha256: sha256(bytes),
            program: Some(ProgramReport {
                extended_header: p.extended_header,
                segments: p.segments.clone(),
                delegates,
                operators: p.operators.clone(),
                named_data: p.named_data.len(),
            }),
            payloads,
        });
    }
    let ident = bytes.get(4..8).unwrap_or(&[]);
    if !(XnnHeader::has_magic(bytes) || ident == b"XN01" || ident == b"XN00") {
        anyhow::bail!(
            "{file}: neither a .pte (ET12) nor an XNNPACK payload (XH00, XN01, XN00); identifier {:?}",
            String::from_utf8_lossy(ident)
        );
    }
    let payloads = vec![payload_report(file.clone(), bytes, list)];
    Ok(Report { file, kind: "xnnpack_payload", size: bytes.len(), sha256: sha256(bytes), program: None, payloads })
}

/// The text report (built as a string so that a closed pipe is not a panic).
fn render_text(r: &Report) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    macro_rules! out {
        ($($t:tt)*) => {{
            let _ = writeln!(o, $($t)*);
        }};
    }
    out!("{} ({}, {} bytes, sha256 {})", r.file, r.kind, r.size, r.sha256);
    if let Some(p) = &r.program {
        match &p.extended_header {
            Some(h) => out!(
                "  extended header eh00: length {}, program_size {}, segment_base_offset {}, segment_data_size {}",
                h.length,
                h.program_size,
                h.segment_base_offset,
                h.segment_data_size.map_or("-".into(), |s| s.to_string())
            ),
            None => out!("  no extended header"),
        }
        out!("  segments: {}", p.segments.len());
        for s in &p.segments {
            match s.file_offset {
                Some(at) => out!("    [{}] offset {} size {} (file offset {at})", s.index, s.offset, s.size),
                None => out!("    [{}] offset {} size {} (no segment base)", s.index, s.offset, s.size),
            }
        }
        out!("  named data entries: {}", p.named_data);
        if !p.operators.is_empty() {
            out!("  operators outside delegates: {}", p.operators.join(", "));
        }
        out!("  delegates: {}", p.delegates.len());
        for d in &p.delegates {
            out!(
                "    {}/{}: {} {:?}[{}] {} bytes{}",
                d.plan,
                d.index,
                d.backend_id,
                d.location,
                d.data_index,
                d.size,
                d.file_offset.map_or(String::new(), |o| format!(" at {o}"))
            );
        }
    }
    for pl in &r.payloads {
        out!("payload {} ({} bytes, sha256 {})", pl.source, pl.size, pl.sha256);
        if let Some(e) = &pl.error {
            out!("  ERROR: {e}");
        }
        let Some(g) = &pl.graph else { continue };
        match &g.header {
            Some(h) => out!(
                "  header XH00: length {}, flatbuffer {}+{}, constant data {}+{}",
                h.header_length,
                h.flatbuffer_offset,
                h.flatbuffer_size,
                h.constant_data_offset,
                h.constant_data_size
            ),
            None => out!("  no XH00 header (bare flatbuffer)"),
        }
        out!(
            "  {} version {:?}, num_externs {}, input_ids {:?}, output_ids {:?}",
            g.identifier,
            g.version,
            g.num_externs,
            g.input_ids,
            g.output_ids
        );
        out!(
            "  {} nodes, {} values, {} constants ({} in the .pte named data store), {} constant bytes",
            g.num_nodes,
            g.num_values,
            g.constants,
            g.named_constants,
            g.constant_data_bytes
        );
        if !g.loads_on_old_runtime {
            out!("  needs a runtime with XNNStaticMean: older runtimes fail with \"Unhandled node type\"");
        }
        out!("  node counts:");
        for (name, n) in &g.node_counts {
            out!("    {name:<28} {n}");
        }
        for (i, n) in g.nodes.iter().flatten().enumerate() {
            out!("  node {i}: {n}");
        }
        for (i, v) in g.values.iter().flatten().enumerate() {
            out!("  value {i}: {v}");
        }
    }
    o
}

pub fn run(args: InspectArgs) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let r = report(args.file.display().to_string(), &bytes, args.nodes)?;
    let text = if args.json { serde_json::to_string_pretty(&r)? + "\n" } else { render_text(&r) };
    // A reader that stops early (`| head`) is not an error.
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
    // A payload that does not decode fails the command, so scripts can gate on it.
    Ok(if r.payloads.iter().any(|p| p.error.is_some()) { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let p =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../delegate/tests/fixtures/executorch-1.5.1").join(name);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn inspects_every_fixture_file() {
        let files = ["a", "b", "c", "h", "i_b", "e"];
        for f in files {
            let r = report(f.into(), &fixture(&format!("{f}.pte")), true).unwrap();
            assert_eq!(r.kind, "pte");
            assert!(!r.payloads.is_empty());
            for pl in &r.payloads {
                assert!(pl.error.is_none(), "{f}: {:?}", pl.error);
                let payload = fixture(&format!("{f}.d0.xnn"));
                let single = report(f.into(), &payload, false).unwrap();
                assert_eq!(single.kind, "xnnpack_payload");
                assert!(single.payloads[0].graph.is_some());
            }
        }
        let r = report("c.d1.xnn".into(), &fixture("c.d1.xnn"), false).unwrap();
        assert!(r.payloads[0].graph.is_some());
    }

    #[test]
    fn counts_match_the_fixture_graphs() {
        // b: transpose, conv, GAP, transpose (manifest.json).
        let r = report("b.pte".into(), &fixture("b.pte"), false).unwrap();
        let p = r.program.as_ref().unwrap();
        assert_eq!(p.extended_header.unwrap().program_size, 1232);
        assert_eq!(p.segments.len(), 4);
        assert_eq!(p.named_data, 2);
        let g = r.payloads[0].graph.as_ref().unwrap();
        let want: BTreeMap<String, usize> = [("XNNConv2d", 1), ("XNNGlobalAvgPooling2d", 1), ("XNNStaticTranspose", 2)]
            .map(|(k, v)| (k.to_string(), v))
            .into();
        assert_eq!(g.node_counts, want);
        assert_eq!(g.named_constants, 2);
        assert_eq!(g.header.unwrap().flatbuffer_size, 1176);
        assert!(g.loads_on_old_runtime, "real 1.5.1 payloads predate the change");
        // c has two XNNPACK delegates and the mean outside.
        let r = report("c.pte".into(), &fixture("c.pte"), false).unwrap();
        assert_eq!(r.payloads.len(), 2);
        assert_eq!(r.program.as_ref().unwrap().operators, vec!["aten::mean.out".to_string()]);
        assert_eq!(r.payloads[1].graph.as_ref().unwrap().node_counts["XNNDepthwiseConv2d"], 1);
        let text = render_text(&r);
        assert!(text.contains("operators outside delegates: aten::mean.out"), "{text}");
        assert!(text.contains("XNNDepthwiseConv2d           1"), "{text}");
        // JSON carries the same numbers.
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["payloads"][1]["graph"]["node_counts"]["XNNStaticTranspose"], 2);
        assert_eq!(j["program"]["extended_header"]["segment_base_offset"], 2048);
    }

    #[test]
    fn flags_payloads_that_need_the_new_node() {
        use delegate::xnn::*;
        let v = |id, ext, flags, dims: &[u32]| XValue {
            datatype: XnnDatatype::Fp32,
            dims: dims.to_vec(),
            constant_buffer_idx: 0,
            external_id: ext,
            flags,
            id_out: id,
            quant: None,
        };
        let g = XnnGraph {
            version: "0".into(),
            nodes: vec![XNode {
                kind: XNodeKind::StaticMean {
                    reduction_axes: vec![1],
                    input_id: 0,
                    output_id: 1,
                    flags: FLAG_KEEP_DIMS,
                },
                debug_handle: 1,
                output_min_max: None,
            }],
            values: vec![v(0, 0, 1, &[2, 16]), v(1, 1, 2, &[2, 1])],
            num_externs: 2,
            input_ids: vec![0],
            output_ids: vec![1],
            constant_data: vec![ConstantDataOffset { offset: 0, size: 0, named_key: Some(String::new()) }],
            constant_bytes: vec![],
        };
        let r = report("mean.xnn".into(), &serialize::write(&g), false).unwrap();
        let gr = r.payloads[0].graph.as_ref().unwrap();
        assert!(!gr.loads_on_old_runtime);
        assert_eq!(gr.node_counts["XNNStaticMean"], 1);
        assert!(render_text(&r).contains("Unhandled node type"));
    }

    #[test]
    fn inspects_a_program_without_delegates() {
        // f: no extended header, one empty segment at offset 0, the mean a portable operator.
        let r = report("f.pte".into(), &fixture("f.pte"), true).unwrap();
        let p = r.program.as_ref().unwrap();
        assert_eq!(p.extended_header, None);
        assert_eq!(p.segments, vec![pte::Segment { index: 0, offset: 0, file_offset: None, size: 0 }]);
        assert!(p.delegates.is_empty() && r.payloads.is_empty());
        assert_eq!(p.operators, vec!["aten::mean.out".to_string()]);
        let text = render_text(&r);
        assert!(text.contains("no extended header") && text.contains("delegates: 0"), "{text}");
        assert!(text.contains("[0] offset 0 size 0 (no segment base)"), "{text}");
    }

    #[test]
    fn lists_every_field_of_every_node() {
        use delegate::xnn::*;
        let v = |id, flags, dims: &[u32]| XValue {
            datatype: XnnDatatype::Fp32,
            dims: dims.to_vec(),
            constant_buffer_idx: 0,
            external_id: id,
            flags,
            id_out: id,
            quant: None,
        };
        let pad = XNodeKind::StaticConstantPad {
            pre_paddings: vec![0, 1],
            post_paddings: vec![2, 3],
            padding_value: -1.5,
            input_id: 0,
            output_id: 1,
            flags: 0,
        };
        let neg = XNodeKind::Negate { input_id: 1, output_id: 2, flags: 0 };
        let g = XnnGraph {
            version: "0".into(),
            nodes: [pad, neg].map(|kind| XNode { kind, debug_handle: 4, output_min_max: None }).to_vec(),
            values: vec![v(0, 1, &[2, 3]), v(1, 0, &[4, 8]), v(2, 2, &[4, 8])],
            num_externs: 3,
            input_ids: vec![0],
            output_ids: vec![2],
            constant_data: vec![],
            constant_bytes: vec![],
        };
        let mut g = g;
        g.values[1].external_id = INVALID_VALUE_ID;
        let text = render_text(&report("nodes.xnn".into(), &serialize::write(&g), true).unwrap());
        assert!(
            text.contains(
                "node 0: StaticConstantPad { pre_paddings: [0, 1], post_paddings: [2, 3], padding_value: -1.5, \
                 input_id: 0, output_id: 1, flags: 0 } debug_handle=4"
            ),
            "{text}"
        );
        assert!(text.contains("node 1: Negate { input_id: 1, output_id: 2, flags: 0 }"), "{text}");
        assert!(text.contains("XNNNegate                    1"), "{text}");
    }

    #[test]
    fn refuses_other_files_and_reports_bad_payloads() {
        assert!(report("x".into(), b"not a payload at all", false).is_err());
        let mut b = fixture("a.d0.xnn");
        b.truncate(300);
        let r = report("a".into(), &b, false).unwrap();
        assert!(r.payloads[0].error.as_deref().unwrap().contains("flatbuffer_size"));
    }
}
