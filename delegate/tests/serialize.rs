//! Writer and loader: payload layout, round trips, determinism, flatc interop (each loader
//! rule has its own test in loader_rules.rs and loader_rules_nodes.rs).

mod serialize_common;

use delegate::serialize::{
    decode, diff_graphs, fb, load, node_counts, write, write_flatbuffer, LoadError, LoadLimits, XnnHeader,
};
use delegate::xnn::*;
use serialize_common::*;

fn strict() -> LoadLimits {
    LoadLimits::default()
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

#[test]
fn payload_layout_follows_the_xh00_header() {
    let g = all_kinds_example();
    let b = write(&g);
    assert_eq!(&b[0..4], &[0, 0, 0, 0]);
    assert_eq!(&b[4..8], b"XH00");
    assert_eq!(u16::from_le_bytes([b[8], b[9]]), 30);
    assert_eq!(u32_at(&b, 10), 32, "flatbuffer offset");
    let fb_size = u32_at(&b, 14) as usize;
    let cd_off = u32_at(&b, 18) as usize;
    let cd_size = u64::from_le_bytes(b[22..30].try_into().unwrap()) as usize;
    assert_eq!(&b[30..32], &[0, 0], "header padding");
    assert_eq!(cd_off, 32 + fb_size.div_ceil(16) * 16, "constant data after the flatbuffer padded to 16");
    assert_eq!(cd_size, g.constant_bytes.len());
    assert_eq!(b.len(), cd_off + cd_size);
    assert_eq!(&b[36..40], b"XN01", "flatbuffer identifier");
    assert!(b[32 + fb_size..cd_off].iter().all(|&x| x == 0), "zero padding");
    assert_eq!(&b[cd_off..], &g.constant_bytes[..]);
    let h = XnnHeader::parse(&b).unwrap();
    assert_eq!((h.flatbuffer_size as usize, h.constant_data_offset as usize), (fb_size, cd_off));
}

#[test]
fn gap_example_header() {
    // Notes 1.9 (flatc 2.0.8 wrote 736 bytes for this JSON; flatc 25.12.19 writes 732, see
    // `flatc_built_buffers_decode_to_the_same_graphs`).
    let b = write(&gap_example());
    assert_eq!(u32_at(&b, 14), 732);
    assert_eq!(u32_at(&b, 18), 32 + 736);
    assert_eq!(b.len(), 768);
}

#[test]
fn round_trip_is_exact_and_byte_stable() {
    for (name, g) in examples() {
        let b = write(&g);
        let back = load(&b, &strict()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(back, g, "{name}:\n{}", diff_graphs(&g, &back));
        assert_eq!(write(&back), b, "{name}: write(load(write(g))) == write(g)");
    }
}

#[test]
fn writing_is_deterministic_across_calls_and_threads() {
    for (name, g) in examples() {
        let a = write(&g);
        assert_eq!(write(&g.clone()), a, "{name}");
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || write(&g))
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), a, "{name} in another thread");
        }
    }
}

#[test]
fn writing_is_deterministic_across_processes() {
    use sha2::{Digest, Sha256};
    let digest = || -> String {
        let mut h = Sha256::new();
        for (_, g) in examples() {
            h.update(write(&g));
        }
        h.finalize().iter().map(|x| format!("{x:02x}")).collect()
    };
    if std::env::var_os("SERIALIZE_CHILD").is_some() {
        println!("DIGEST={}", digest());
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--exact", "writing_is_deterministic_across_processes", "--nocapture", "--test-threads=1"])
        .env("SERIALIZE_CHILD", "1")
        .output()
        .expect("spawn the test binary");
    let text = String::from_utf8_lossy(&out.stdout);
    let child = text.split("DIGEST=").nth(1).and_then(|s| s.get(..64)).unwrap_or_else(|| panic!("child said: {text}"));
    assert_eq!(child, digest());
}

#[test]
fn default_scalars_are_omitted_and_the_reserved_key_is_written() {
    let g = gap_example();
    let b = write(&g);
    let root = fb::root_as_xnngraph(&b[32..32 + u32_at(&b, 14) as usize]).unwrap();
    let values = root.xvalues().unwrap();
    // Value 0: id_out 0 and external_id 0 are defaults (omitted); flags 1 is written.
    let v0 = values.get(0).xvalue_union_as_xnntensor_value().unwrap();
    let vt = v0._tab.vtable();
    assert_eq!(vt.get(fb::XNNTensorValue::VT_ID_OUT), 0, "id_out 0 omitted");
    assert_eq!(vt.get(fb::XNNTensorValue::VT_EXTERNAL_ID), 0, "external_id 0 omitted");
    assert_ne!(vt.get(fb::XNNTensorValue::VT_FLAGS), 0, "flags 1 written");
    // Value 1: internal, so XNN_INVALID_VALUE_ID is written and flags 0 omitted.
    let v1 = values.get(1).xvalue_union_as_xnntensor_value().unwrap();
    assert_ne!(v1._tab.vtable().get(fb::XNNTensorValue::VT_EXTERNAL_ID), 0);
    assert_eq!(v1._tab.vtable().get(fb::XNNTensorValue::VT_FLAGS), 0);
    assert_eq!(v1.external_id(), INVALID_VALUE_ID);
    // No fused activation: output_min_max absent.
    let n0 = root.xnodes().unwrap().get(0);
    assert!(n0.output_min_max().is_none());
    // The reserved constant entry keeps its empty key.
    let c0 = root.constant_data().unwrap().get(0);
    assert_eq!(c0.named_key(), Some(""));
    assert_eq!(root.version(), Some("0"));
}

#[test]
fn union_ids_follow_the_schema_order() {
    assert_eq!(fb::XNodeUnion::XNNStaticTranspose.0, 5);
    assert_eq!(fb::XNodeUnion::XNNConv2d.0, 7);
    assert_eq!(fb::XNodeUnion::XNNGlobalAvgPooling2d.0, 19);
    assert_eq!(fb::XNodeUnion::XNNCos.0, 47);
    assert_eq!(fb::XNodeUnion::XNNStaticMean.0, 48, "appended last");
    assert_eq!(fb::XNodeUnion::ENUM_MAX as usize, NODE_TYPE_NAMES.len());
    for (i, name) in NODE_TYPE_NAMES.iter().enumerate() {
        assert_eq!(fb::XNodeUnion((i + 1) as u8).variant_name(), Some(*name), "member {}", i + 1);
    }
    let b = write(&static_mean_example());
    let root = fb::root_as_xnngraph(&b[32..32 + u32_at(&b, 14) as usize]).unwrap();
    assert_eq!(root.xnodes().unwrap().get(0).xnode_union_type(), fb::XNodeUnion::XNNStaticMean);
}

#[test]
fn legacy_bare_flatbuffer_and_xn00_are_accepted() {
    let g = gap_example();
    let bare = write_flatbuffer(&g);
    let d = decode(&bare, &strict()).unwrap();
    assert_eq!(d.header, None);
    assert_eq!(d.graph, g);
    let mut xn00 = write(&g);
    xn00[36..40].copy_from_slice(b"XN00");
    let d = decode(&xn00, &strict()).unwrap();
    assert_eq!(d.identifier, "XN00");
    assert_eq!(d.graph, g);
}

#[test]
fn node_counts_and_diffs() {
    let g = all_kinds_example();
    let c = node_counts(&g);
    assert_eq!(c["XNNStaticTranspose"], 1);
    assert_eq!(c["XNNConv2d"], 1);
    assert_eq!(c["XNNStaticMean"], 1);
    assert_eq!(c.values().sum::<usize>(), g.nodes.len());
    assert_eq!(node_counts(&gap_example())["XNNStaticTranspose"], 2);
    assert_eq!(diff_graphs(&g, &g), "");
    let mut h = g.clone();
    h.nodes[3].output_min_max = Some((0.0, 1.0));
    h.values[7].dims = vec![1, 2, 2, 9];
    let d = diff_graphs(&g, &h);
    assert!(d.contains("node 3:") && d.contains("output_min_max=(0, 1)"), "{d}");
    assert!(d.contains("value 7:") && d.contains("[1, 2, 2, 9]"), "{d}");
    assert!(!d.contains("node 2:"), "{d}");
    let mut k = g.clone();
    k.nodes.remove(0);
    assert!(diff_graphs(&g, &k).contains("node counts:"));
}

#[test]
fn flatc_built_buffers_decode_to_the_same_graphs() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/flatc");
    for (file, g) in [("gap.bin", gap_example()), ("mean.bin", static_mean_example())] {
        let flatc = std::fs::read(dir.join(file)).unwrap();
        // Bare flatbuffer (legacy path), as flatc wrote it.
        let d = decode(&flatc, &strict()).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(d.graph, g, "{file}:\n{}", diff_graphs(&g, &d.graph));
        // The writer reproduces flatc's layout byte for byte.
        let ours = write_flatbuffer(&g);
        let first = ours.iter().zip(&flatc).position(|(a, b)| a != b);
        assert!(
            ours == flatc,
            "{file}: differs from flatc at byte {first:?} ({} vs {} bytes)",
            ours.len(),
            flatc.len()
        );
    }
}

#[test]
fn old_runtime_refuses_static_mean_cleanly() {
    // Notes 6-B11: a runtime built before the change does not know XNNStaticMean.
    let old = LoadLimits::old_runtime();
    assert_eq!(old.known_node_types, 47);
    let e = load(&write(&static_mean_example()), &old).unwrap_err();
    assert_eq!(e, LoadError::UnknownNodeType { node: 0, type_id: 48 });
    assert!(e.to_string().contains("unhandled node type"), "{e}");
    assert_eq!(load(&write(&gap_example()), &old).unwrap(), gap_example());
    assert!(load(&write(&all_kinds_example()), &old).is_err());
}
