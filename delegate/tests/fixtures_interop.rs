//! Interop with real ExecuTorch 1.5.1 payloads (`tests/fixtures/executorch-1.5.1`, a copy of
//! `shared/fixtures/executorch-1.5.1`): every payload decodes to exactly what its
//! `manifest.json` says, the `.pte` reader finds the same payloads, and writing a decoded
//! graph gives back ExecuTorch's payload byte for byte.

use std::path::PathBuf;

use delegate::serialize::{decode, load_lenient, pte, write, LoadError, LoadLimits};
use delegate::xnn::{QuantParams, XnnGraph};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/executorch-1.5.1")
}

fn manifest() -> Value {
    let text = std::fs::read_to_string(dir().join("manifest.json")).expect("manifest.json");
    serde_json::from_str(&text).expect("manifest parses")
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn sha(b: &[u8]) -> String {
    Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

fn patterns(m: &Value) -> Vec<(&String, &Value)> {
    let p: Vec<_> = m["patterns"].as_object().expect("patterns").iter().collect();
    assert_eq!(p.len(), 6, "the fixture set has six patterns (f, with no delegate, is not in the manifest)");
    p
}

fn payloads(p: &Value) -> &Vec<Value> {
    p["payloads"].as_array().expect("payloads")
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an unsigned integer: {v}"))
}

fn check_graph(file: &str, g: &XnnGraph, m: &Value) {
    let ctx = |what: String| format!("{file}: {what}");
    assert_eq!(g.version, m["version"].as_str().unwrap(), "{}", ctx("version".into()));
    assert_eq!(g.num_externs as u64, u(&m["num_externs"]), "{}", ctx("num_externs".into()));
    let ids = |v: &Value| v.as_array().unwrap().iter().map(|x| u(x) as u32).collect::<Vec<_>>();
    assert_eq!(g.input_ids, ids(&m["input_ids"]), "{}", ctx("input_ids".into()));
    assert_eq!(g.output_ids, ids(&m["output_ids"]), "{}", ctx("output_ids".into()));

    // Nodes: type, debug handle, and every field both ways (no field we lack, none extra).
    let nodes = m["nodes"].as_array().unwrap();
    assert_eq!(g.nodes.len(), nodes.len(), "{}", ctx("node count".into()));
    for (i, (n, mn)) in g.nodes.iter().zip(nodes).enumerate() {
        let c = |w: &str| ctx(format!("node {i} {w}"));
        assert_eq!(u(&mn["index"]), i as u64);
        assert_eq!(n.kind.type_name(), mn["type"].as_str().unwrap(), "{}", c("type"));
        assert_eq!(
            n.kind.type_id() as usize,
            delegate::xnn::NODE_TYPE_NAMES.iter().position(|t| *t == mn["type"]).unwrap() + 1
        );
        assert_eq!(n.debug_handle as u64, u(&mn["debug_handle"]), "{}", c("debug_handle"));
        assert_eq!(n.output_min_max, None, "{}", c("output_min_max (none in the manifest)"));
        let ours = serde_json::to_value(&n.kind).unwrap();
        let fields = ours.as_object().unwrap().values().next().unwrap().as_object().unwrap().clone();
        let mut seen = 0;
        for (k, v) in mn.as_object().unwrap() {
            match k.as_str() {
                "index" | "type" | "debug_handle" => {}
                "num_dims" => {
                    let list = fields.get("perm").or(fields.get("new_shape")).expect("num_dims belongs to a list");
                    assert_eq!(list.as_array().unwrap().len() as u64, u(v), "{}", c("num_dims"));
                }
                _ => {
                    assert_eq!(fields.get(k), Some(v), "{}", c(k));
                    seen += 1;
                }
            }
        }
        assert_eq!(seen, fields.len(), "{}", c("field set (ours has fields the manifest lacks)"));
    }

    // Values.
    let values = m["values"].as_array().unwrap();
    assert_eq!(g.values.len(), values.len(), "{}", ctx("value count".into()));
    for (i, (v, mv)) in g.values.iter().zip(values).enumerate() {
        let c = |w: &str| ctx(format!("value {i} {w}"));
        assert_eq!(v.id_out as u64, u(&mv["id_out"]), "{}", c("id_out"));
        assert_eq!(v.datatype.name(), mv["datatype"].as_str().unwrap(), "{}", c("datatype"));
        assert_eq!(v.dims.len() as u64, u(&mv["num_dims"]), "{}", c("num_dims"));
        assert_eq!(v.dims, ids(&mv["dims"]), "{}", c("dims"));
        assert_eq!(v.external_id as u64, u(&mv["external_id"]), "{}", c("external_id"));
        assert_eq!(v.flags as u64, u(&mv["flags"]), "{}", c("flags"));
        assert_eq!(v.constant_buffer_idx as u64, u(&mv["constant_buffer_idx"]), "{}", c("constant_buffer_idx"));
        let want_type = if v.quant.is_some() { "XNNQuantizedTensorValue" } else { "XNNTensorValue" };
        assert_eq!(mv["value_type"].as_str().unwrap(), want_type, "{}", c("value_type"));
        match (&v.quant, &mv["quant_params"]) {
            (None, Value::Null) => {}
            (Some(QuantParams::PerTensor { scale, zero_point }), q) => {
                assert_eq!(q["type"], "PerTensorQuant", "{}", c("quant type"));
                let bits =
                    u32::from_str_radix(q["scale_f32_bits"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
                assert_eq!(scale.to_bits(), bits, "{}", c("scale bits"));
                assert_eq!(*zero_point as i64, q["zero_point"].as_i64().unwrap(), "{}", c("zero_point"));
            }
            (q, mq) => panic!("{}: {q:?} vs {mq}", c("quant params")),
        }
    }

    // Constant table; the manifest writes an absent key as "".
    let consts = m["constant_data"].as_array().unwrap();
    assert_eq!(g.constant_data.len(), consts.len(), "{}", ctx("constant_data count".into()));
    for (i, (cd, mc)) in g.constant_data.iter().zip(consts).enumerate() {
        assert_eq!(cd.offset, u(&mc["offset"]), "{}", ctx(format!("constant {i} offset")));
        assert_eq!(cd.size, u(&mc["size"]), "{}", ctx(format!("constant {i} size")));
        assert_eq!(
            cd.named_key.as_deref().unwrap_or(""),
            mc["named_key"].as_str().unwrap(),
            "{}",
            ctx(format!("constant {i} key"))
        );
    }
}

#[test]
fn every_payload_decodes_to_its_manifest() {
    let m = manifest();
    let mut checked = 0;
    for (name, p) in patterns(&m) {
        for pl in payloads(p) {
            let file = pl["file"].as_str().unwrap();
            let bytes = read(file);
            assert_eq!(bytes.len() as u64, u(&pl["size"]), "{file} size");
            assert_eq!(sha(&bytes), pl["sha256"].as_str().unwrap(), "{file} sha256");
            let d = decode(&bytes, &LoadLimits::lenient()).unwrap_or_else(|e| panic!("{name}/{file}: {e}"));
            assert_eq!(d.identifier, pl["flatbuffer_identifier"].as_str().unwrap());
            let h = d.header.expect("real payloads carry an XH00 header");
            let mh = &pl["header"];
            assert_eq!(mh["magic"], "XH00");
            assert_eq!(h.header_length as u64, u(&mh["header_length"]));
            assert_eq!(h.flatbuffer_offset as u64, u(&mh["flatbuffer_offset"]));
            assert_eq!(h.flatbuffer_size as u64, u(&mh["flatbuffer_size"]));
            assert_eq!(h.constant_data_offset as u64, u(&mh["constant_data_offset"]));
            assert_eq!(h.constant_data_size, u(&mh["constant_data_size"]));
            let hex: String = bytes[..32].iter().map(|x| format!("{x:02x}")).collect();
            assert_eq!(hex, mh["bytes_hex"].as_str().unwrap(), "{file} header bytes");
            check_graph(file, &d.graph, &pl["graph"]);
            checked += 1;
        }
    }
    assert_eq!(checked, 8, "eight payloads in the fixture set");
}

#[test]
fn strict_load_refuses_named_data_store_constants() {
    // Payloads with conv weights keep them in the .pte named data store; the runtime's
    // strict load cannot resolve them and says so.
    let err = delegate::serialize::load(&read("b.d0.xnn"), &LoadLimits::default()).unwrap_err();
    assert!(matches!(err, LoadError::BadConstant { index: 1, offset: u64::MAX, size: 864, .. }), "{err}");
    // A payload without constants loads strictly.
    assert!(delegate::serialize::load(&read("a.d0.xnn"), &LoadLimits::default()).is_ok());
}

#[test]
fn pte_reader_finds_the_manifest_payloads() {
    let m = manifest();
    for (name, p) in patterns(&m) {
        let mp = &p["pte"];
        let bytes = read(mp["file"].as_str().unwrap());
        assert_eq!(sha(&bytes), mp["sha256"].as_str().unwrap());
        assert!(pte::is_pte(&bytes));
        let f = pte::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let eh = f.extended_header.expect("extended header");
        let meh = &mp["extended_header"];
        assert_eq!(meh["magic"], "eh00");
        assert_eq!(eh.length as u64, u(&meh["length"]));
        assert_eq!(eh.program_size, u(&meh["program_size"]));
        assert_eq!(eh.segment_base_offset, u(&meh["segment_base_offset"]));
        assert_eq!(eh.segment_data_size, Some(u(&meh["segment_data_size"])));
        let msegs = mp["segments"].as_array().unwrap();
        assert_eq!(f.segments.len(), msegs.len(), "{name} segments");
        for (s, ms) in f.segments.iter().zip(msegs) {
            assert_eq!(s.index as u64, u(&ms["index"]));
            assert_eq!(s.file_offset, Some(u(&ms["file_offset"])));
            assert_eq!(s.offset, u(&ms["file_offset"]) - eh.segment_base_offset);
            assert_eq!(s.size, u(&ms["size"]));
            let b = s.bytes(&bytes).unwrap();
            assert_eq!(sha(b), ms["sha256"].as_str().unwrap(), "{name} segment {}", s.index);
        }
        let mdel = mp["delegates"].as_array().unwrap();
        assert_eq!(f.delegates.len(), mdel.len());
        for (d, md) in f.delegates.iter().zip(mdel) {
            assert_eq!(d.backend_id, md["id"].as_str().unwrap());
            assert_eq!(d.location, pte::DataLocation::Segment);
            assert_eq!(md["processed_location"], "SEGMENT");
            assert_eq!(d.index as u64, u(&md["processed_index"]));
        }
        let mnamed = mp["named_data"].as_array().unwrap();
        assert_eq!(f.named_data.len(), mnamed.len());
        for (n, mn) in f.named_data.iter().zip(mnamed) {
            assert_eq!(n.key, mn["key"].as_str().unwrap());
            assert_eq!(n.segment_index as u64, u(&mn["segment_index"]));
        }
        let mops: Vec<&str> = mp["operators"].as_array().unwrap().iter().map(|o| o.as_str().unwrap()).collect();
        assert_eq!(f.operators, mops, "{name} operators");
        // Same payloads, same bytes as the cut-out .xnn files.
        let xnn = pte::xnnpack_payloads(&bytes).unwrap();
        let mpl = payloads(p);
        assert_eq!(xnn.len(), mpl.len(), "{name} payload count");
        for (b, pl) in xnn.iter().zip(mpl) {
            assert_eq!(sha(b), pl["sha256"].as_str().unwrap(), "{name} payload sha256");
            assert_eq!(*b, &read(pl["file"].as_str().unwrap())[..]);
        }
    }
}

#[test]
fn decoded_fixtures_rewrite_to_the_same_bytes() {
    let m = manifest();
    for (_, p) in patterns(&m) {
        for pl in payloads(p) {
            let file = pl["file"].as_str().unwrap();
            let g = load_lenient(&read(file)).unwrap();
            let bytes = write(&g);
            let g2 = load_lenient(&bytes).unwrap_or_else(|e| panic!("{file} rewritten: {e}"));
            assert_eq!(g2, g, "{file}: {}", delegate::serialize::diff_graphs(&g, &g2));
            assert_eq!(write(&g2), bytes, "{file}: byte identity after a round trip");
            // The writer lays objects out as flatc does: ExecuTorch's bytes, exactly.
            let original = read(file);
            let first = bytes.iter().zip(&original).position(|(a, b)| a != b);
            assert!(
                bytes == original,
                "{file}: rewrite differs from ExecuTorch's payload at byte {first:?} ({} vs {} bytes)",
                bytes.len(),
                original.len()
            );
        }
    }
}

#[test]
fn named_constants_inline_from_the_pte() {
    // Every constant lives in the .pte named data store under the sha256 of its bytes;
    // inlined, the payload loads strictly (what our runtime needs) and keeps its graph.
    let m = manifest();
    for (name, p) in patterns(&m) {
        let bytes = read(p["pte"]["file"].as_str().unwrap());
        let f = pte::parse(&bytes).unwrap();
        for d in f.xnnpack() {
            let g = load_lenient(d.bytes).unwrap();
            let inlined = f.inline_named_constants(&g).unwrap_or_else(|e| panic!("{name}: {e}"));
            let strict = delegate::serialize::load(&write(&inlined), &LoadLimits::default())
                .unwrap_or_else(|e| panic!("{name}: inlined payload refused: {e}"));
            assert_eq!(strict, inlined);
            assert_eq!((strict.nodes.clone(), strict.values.clone()), (g.nodes.clone(), g.values.clone()));
            for (c, orig) in strict.constant_data.iter().zip(&g.constant_data).skip(1) {
                let data = &strict.constant_bytes[c.offset as usize..(c.offset + c.size) as usize];
                assert_eq!(&sha(data), orig.named_key.as_ref().unwrap(), "{name}: key is the sha256 of the data");
                assert_eq!(c.offset % 16, 0);
            }
        }
    }
}

#[test]
fn e_feeds_its_constants_from_the_program_constant_segment() {
    // RMSNorm's `eps` and weight are not XNNPACK constants: the second payload takes them as
    // external inputs (flags 1, no constant entry but the reserved one), and the .pte keeps
    // them in its constant segment (segment 0: the 1024-byte weight at offset 0, `eps` at
    // 1024), which no named-data key refers to.
    let m = manifest();
    let e = &m["patterns"]["e"];
    assert_eq!(e["program_constant_segment_used"], true);
    assert_eq!(e["pte"]["constant_segment"]["segment_index"], 0);
    assert_eq!(e["pte"]["constant_segment"]["offsets"], serde_json::json!([0, 0, 1024]));
    let bytes = read("e.pte");
    let f = pte::parse(&bytes).unwrap();
    assert!(f.named_data.is_empty());
    let seg = &f.segments[0];
    assert_eq!((seg.file_offset, seg.size), (Some(1664), 1028));
    let data = &bytes[1664..][..seg.size as usize];
    let eps = f32::from_le_bytes(data[1024..1028].try_into().unwrap());
    assert_eq!(eps, 1e-6);
    let g = load_lenient(&read("e.d1.xnn")).unwrap();
    assert_eq!((g.num_externs, g.input_ids.clone(), g.constant_data.len()), (5, vec![0, 1, 4, 6], 1));
    let ext_in: Vec<(u32, Vec<u32>)> = g
        .values
        .iter()
        .filter(|v| v.flags == delegate::xnn::VALUE_FLAG_EXTERNAL_INPUT)
        .map(|v| (v.external_id, v.dims.clone()))
        .collect();
    assert_eq!(ext_in, vec![(0, vec![1, 16, 1]), (1, vec![1]), (2, vec![1, 16, 256]), (3, vec![256])]);
}

#[test]
fn f_has_no_delegate_and_runs_the_portable_mean() {
    // x.mean(-1) with keepdim=False: ExecuTorch 1.5.1 (before the change) delegates nothing.
    let bytes = read("f.pte");
    assert_eq!(bytes.len(), 1024);
    assert_eq!(sha(&bytes), "20a39f959d340fac9082332415c1d074c47da6a804af019c0fa1fbc6c4185a34");
    let f = pte::parse(&bytes).unwrap();
    assert!(f.extended_header.is_none());
    assert_eq!(f.delegates.len(), 0);
    assert_eq!(f.operators, vec!["aten::mean.out"]);
    assert!(pte::xnnpack_payloads(&bytes).unwrap().is_empty());
}
