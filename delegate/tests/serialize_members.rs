//! Every member of the schema's `XNodeUnion`, built with the generated flatbuffers builder
//! (every field set), loads into the node it describes, writes back byte for byte, and is
//! either run by the runtime or refused with a typed `UnsupportedNode` naming it.

mod members;

use delegate::runtime::plan::SegmentPlan;
use delegate::runtime::RuntimeError;
use delegate::serialize::{load, write, write_flatbuffer, LoadLimits};
use delegate::xnn::{node_type_id, NODE_TYPE_NAMES};
use members::{build, members, INPUTS, OUTPUTS};

/// The members the runtime has kernels for (the lowering emits these).
const RUN: [&str; 16] = [
    "XNNAdd",
    "XNNSubtract",
    "XNNMultiply",
    "XNNDiv",
    "XNNFullyConnected",
    "XNNClamp",
    "XNNSquare",
    "XNNReciprocalSquareRoot",
    "XNNConvert",
    "XNNCopy",
    "XNNGlobalAvgPooling2d",
    "XNNStaticTranspose",
    "XNNStaticReshape",
    "XNNConv2d",
    "XNNDepthwiseConv2d",
    "XNNStaticMean",
];

#[test]
fn the_table_has_every_member_once_in_union_order() {
    let names: Vec<&str> = members().iter().map(|m| m.name).collect();
    assert_eq!(names, NODE_TYPE_NAMES.to_vec());
}

#[test]
fn every_member_loads_with_all_its_fields_and_writes_back_byte_for_byte() {
    for m in members() {
        let bytes = build(&m);
        let g = load(&bytes, &LoadLimits::default()).unwrap_or_else(|e| panic!("{}: {e}", m.name));
        assert_eq!(g.nodes.len(), 1, "{}", m.name);
        let n = &g.nodes[0];
        assert_eq!(n.kind, m.expected, "{}", m.name);
        assert_eq!(n.kind.type_name(), m.name);
        assert_eq!(Some(n.kind.type_id()), node_type_id(m.name));
        assert_eq!((n.debug_handle, n.output_min_max), (77, Some((-6.0, 6.0))), "{}", m.name);
        let ours = write_flatbuffer(&g);
        let first = ours.iter().zip(&bytes).position(|(a, b)| a != b);
        assert!(ours == bytes, "{}: differs at byte {first:?} ({} vs {} bytes)", m.name, ours.len(), bytes.len());
        // Behind the XH00 header too.
        assert_eq!(load(&write(&g), &LoadLimits::default()).as_ref(), Ok(&g), "{}", m.name);
    }
}

#[test]
fn the_runtime_runs_its_members_and_names_every_other_one() {
    for m in members() {
        let g = load(&build(&m), &LoadLimits::default()).unwrap();
        let r = SegmentPlan::compile(0, &g, INPUTS as usize, OUTPUTS as usize);
        if RUN.contains(&m.name) {
            // Their geometry here is arbitrary, so other errors may come; never this one.
            assert!(!matches!(r, Err(RuntimeError::UnsupportedNode { .. })), "{}: {:?}", m.name, r.err());
        } else {
            let e = r.err().unwrap_or_else(|| panic!("{}: compiled", m.name));
            assert_eq!(e, RuntimeError::UnsupportedNode { segment: 0, node: 0, node_type: m.name });
            assert!(e.to_string().contains(m.name), "{e}");
        }
    }
}
