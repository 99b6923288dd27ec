//! Every rule the loader enforces on nodes, one payload each that breaks exactly that rule,
//! and exactly the typed error it must get (framing, graph and values: loader_rules.rs).
//!
//! Over 700 lines as a table on purpose: one row per rule, so a rule without a row is visible.

mod raw;
mod serialize_common;

use delegate::serialize::{load, write, LoadError, LoadLimits};
use delegate::xnn::*;
use raw::{check, Raw, Row, F};
use serialize_common::*;

fn strict() -> LoadLimits {
    LoadLimits::default()
}

/// Each member's payload table and its number of fields, from the schema (independently of
/// the loader's own table): a vtable slot past `4 + 2 * (fields - 1)` is unknown.
const TABLES: [(&str, &str, u16); 48] = [
    ("XNNAdd", "_XNNNode2x1", 4),
    ("XNNFullyConnected", "XNNFullyConnected", 5),
    ("XNNSoftmax", "_XNNNode1x1", 3),
    ("XNNSigmoid", "_XNNNode1x1", 3),
    ("XNNStaticTranspose", "XNNStaticTranspose", 5),
    ("XNNClamp", "_XNNNode1x1", 3),
    ("XNNConv2d", "_XNNNodeConv", 20),
    ("XNNDiv", "_XNNNode2x1", 4),
    ("XNNStaticResizeBilinear2D", "XNNStaticResizeBilinear2D", 5),
    ("XNNStaticConstantPad", "XNNStaticConstantPad", 6),
    ("XNNAvgPooling2d", "_XNNPooling2D", 13),
    ("XNNMinimum", "_XNNNode2x1", 4),
    ("XNNDepthwiseConv2d", "_XNNNodeConv", 20),
    ("XNNMaxPooling2d", "_XNNPooling2D", 13),
    ("XNNMultiply", "_XNNNode2x1", 4),
    ("XNNSubtract", "_XNNNode2x1", 4),
    ("XNNFloor", "_XNNNode1x1", 3),
    ("XNNConvert", "_XNNNode1x1", 3),
    ("XNNGlobalAvgPooling2d", "_XNNNode1x1", 3),
    ("XNNStaticReshape", "XNNStaticReshape", 5),
    ("XNNArgMaxPooling2d", "XNNArgMaxPooling2d", 10),
    ("XNNSquareRoot", "_XNNNode1x1", 3),
    ("XNNCeiling", "_XNNNode1x1", 3),
    ("XNNHardswish", "_XNNNode1x1", 3),
    ("XNNLeakyReLU", "XNNLeakyReLU", 4),
    ("XNNMaximum", "_XNNNode2x1", 4),
    ("XNNNegate", "_XNNNode1x1", 3),
    ("XNNSquare", "_XNNNode1x1", 3),
    ("XNNELU", "XNNELU", 4),
    ("XNNAbs", "_XNNNode1x1", 3),
    ("XNNPReLU", "_XNNNode2x1", 4),
    ("XNNConcatenate2", "_XNNCat", 8),
    ("XNNConcatenate3", "_XNNCat", 8),
    ("XNNConcatenate4", "_XNNCat", 8),
    ("XNNStaticSlice", "XNNStaticSlice", 6),
    ("XNNScaledDotProductAttention", "XNNScaledDotProductAttention", 7),
    ("XNNBatchMatrixMultiply", "_XNNNode2x1", 4),
    ("XNNConcatenate5", "_XNNCat", 8),
    ("XNNConvTranspose2d", "_XNNNodeConv", 20),
    ("XNNReciprocalSquareRoot", "_XNNNode1x1", 3),
    ("XNNLog", "_XNNNode1x1", 3),
    ("XNNGelu", "_XNNNode1x1", 3),
    ("XNNTanh", "_XNNNode1x1", 3),
    ("XNNExp", "_XNNNode1x1", 3),
    ("XNNSin", "_XNNNode1x1", 3),
    ("XNNCopy", "_XNNNode1x1", 3),
    ("XNNCos", "_XNNNode1x1", 3),
    ("XNNStaticMean", "_XNNStaticReduce", 5),
];

/// Role of a value in [`one_node`].
#[derive(Clone, Copy)]
enum Role {
    In,
    Out,
    Mid,
}

/// A graph of values `(dims, datatype, role)` (ids in order, external ids in order) and
/// `nodes`, written by our writer.
fn graph_of(values: &[(&[u32], XnnDatatype, Role)], nodes: Vec<XNodeKind>) -> Vec<u8> {
    let mut ext = 0;
    let mut vs = vec![];
    let (mut ins, mut outs) = (vec![], vec![]);
    for (id, &(dims, dt, role)) in values.iter().enumerate() {
        let id = id as u32;
        vs.push(match role {
            Role::In => {
                ext += 1;
                ins.push(id);
                input(id, ext - 1, dt, dims)
            }
            Role::Out => {
                ext += 1;
                outs.push(id);
                output(id, ext - 1, dt, dims)
            }
            Role::Mid => value(id, dt, dims),
        });
    }
    let nodes = nodes.into_iter().enumerate().map(|(i, k)| node(k, i as u32)).collect();
    write(&graph(nodes, vs, ext, ins, outs))
}

/// `x [dims_in] -> kind -> y [dims_out]`, fp32.
fn one_node(dims_in: &[u32], dims_out: &[u32], kind: XNodeKind) -> Vec<u8> {
    use XnnDatatype::Fp32;
    graph_of(&[(dims_in, Fp32, Role::In), (dims_out, Fp32, Role::Out)], vec![kind])
}

fn bad(node: usize, node_type: &'static str, field: &'static str, reason: &str) -> LoadError {
    LoadError::BadNode { node, node_type, field, reason: reason.into() }
}

fn count(table: &'static str, count_field: &'static str, count: u32, list: &'static str, len: usize) -> LoadError {
    LoadError::CountMismatch { table, index: 0, count_field, count, list, len }
}

fn table_rules() -> Vec<Row> {
    let mut rows: Vec<Row> = vec![
        (
            "XNode has no field past output_min_max",
            raw::negate(|r| r.n1x1(0, 1), &[(12, F::U32(1))]),
            strict(),
            LoadError::UnknownField { table: "XNode", index: 0, slot: 12 },
        ),
        ("a node has a type", raw::unary(|r| r.table(&[(8, F::U32(1))])), strict(), LoadError::NoneNode { node: 0 }),
        (
            "a node's type is a union member",
            raw::unary(|r| {
                let p = r.n1x1(0, 1);
                r.node(49, Some(p), &[])
            }),
            strict(),
            LoadError::UnknownNodeType { node: 0, type_id: 49 },
        ),
        (
            "a runtime before the change does not know XNNStaticMean",
            write(&static_mean_example()),
            LoadLimits::old_runtime(),
            LoadError::UnknownNodeType { node: 0, type_id: 48 },
        ),
        (
            "OutputMinMax has no field past output_max",
            raw::negate(
                |r| r.n1x1(0, 1),
                &[], // replaced below
            ),
            strict(),
            LoadError::UnknownField { table: "OutputMinMax", index: 0, slot: 8 },
        ),
        (
            "output_min is not NaN",
            gap_with(|g| g.nodes[0].output_min_max = Some((f32::NAN, 1.0))),
            strict(),
            bad(0, "XNNAdd", "output_min_max", "min NaN is not at most max 1"),
        ),
        (
            "output_min is at most output_max",
            gap_with(|g| g.nodes[0].output_min_max = Some((2.0, 1.0))),
            strict(),
            bad(0, "XNNAdd", "output_min_max", "min 2 is not at most max 1"),
        ),
    ];
    // The OutputMinMax row needs the bounds table itself to carry the slot.
    rows[4].1 = raw::unary(|r| {
        let p = r.n1x1(0, 1);
        let mm = r.table(&[(4, F::F32(0.0)), (6, F::F32(1.0)), (8, F::U32(1))]);
        r.node(node_type::NEGATE, Some(p), &[(10, F::Off(mm))])
    });
    for (i, &(member, table, fields)) in TABLES.iter().enumerate() {
        let slot = 4 + 2 * fields;
        rows.push((
            member,
            raw::unary(|r| {
                let p = r.table(&[(slot, F::U32(1))]);
                r.node(i as u8 + 1, Some(p), &[])
            }),
            strict(),
            LoadError::UnknownField { table, index: 0, slot },
        ));
    }
    rows
}

fn gap_with(f: impl FnOnce(&mut XnnGraph)) -> Vec<u8> {
    let mut g = gap_example();
    f(&mut g);
    write(&g)
}

/// A list member (type `ty`) whose table is `fields`, plus input and output ids.
fn list_node(ty: u8, fields: impl FnOnce(&mut Raw) -> Vec<(u16, F)>) -> Vec<u8> {
    raw::unary(|r| {
        let f = fields(r);
        let p = r.table(&f);
        r.node(ty, Some(p), &[])
    })
}

fn list_rules() -> Vec<Row> {
    use node_type::*;
    let missing = |table, field| LoadError::MissingField { table, field, index: 0 };
    let long = |t, field| bad(0, t, field, "7 entries, more than XNN_MAX_TENSOR_DIMS = 6");
    let seven = vec![0u32; 7];
    let pad = |pre: Vec<u32>, post: Vec<u32>| XNodeKind::StaticConstantPad {
        pre_paddings: pre,
        post_paddings: post,
        padding_value: 0.0,
        input_id: 0,
        output_id: 1,
        flags: 0,
    };
    let slice = |offsets: Vec<u32>, sizes: Vec<u32>| XNodeKind::StaticSlice {
        offsets,
        sizes,
        input_id: 0,
        output_id: 1,
        flags: 0,
    };
    let (i, o) = (F::U32(0), F::U32(1));
    vec![
        (
            "a transpose has its perm",
            list_node(STATIC_TRANSPOSE, |_| vec![(8, i), (10, o)]),
            strict(),
            missing("XNNStaticTranspose", "perm"),
        ),
        (
            "a reshape has its new_shape",
            list_node(STATIC_RESHAPE, |_| vec![(8, i), (10, o)]),
            strict(),
            missing("XNNStaticReshape", "new_shape"),
        ),
        (
            "a mean has its reduction_axes",
            list_node(STATIC_MEAN, |_| vec![(8, i), (10, o)]),
            strict(),
            missing("_XNNStaticReduce", "reduction_axes"),
        ),
        (
            "a pad has its pre_paddings",
            list_node(STATIC_CONSTANT_PAD, |r| vec![(6, F::Off(r.u32s(&[0, 0]))), (10, i), (12, o)]),
            strict(),
            missing("XNNStaticConstantPad", "pre_paddings"),
        ),
        (
            "a pad has its post_paddings",
            list_node(STATIC_CONSTANT_PAD, |r| vec![(4, F::Off(r.u32s(&[0, 0]))), (10, i), (12, o)]),
            strict(),
            missing("XNNStaticConstantPad", "post_paddings"),
        ),
        (
            "a slice has its offsets",
            list_node(STATIC_SLICE, |r| vec![(4, F::U32(2)), (8, F::Off(r.u32s(&[2, 3]))), (10, i), (12, o)]),
            strict(),
            missing("XNNStaticSlice", "offsets"),
        ),
        (
            "a slice has its sizes",
            list_node(STATIC_SLICE, |r| vec![(4, F::U32(2)), (6, F::Off(r.u32s(&[0, 0]))), (10, i), (12, o)]),
            strict(),
            missing("XNNStaticSlice", "sizes"),
        ),
        (
            "perm holds at most 6",
            one_node(
                &[2, 3],
                &[2, 3],
                XNodeKind::StaticTranspose { perm: seven.clone(), input_id: 0, output_id: 1, flags: 0 },
            ),
            strict(),
            long("XNNStaticTranspose", "perm"),
        ),
        (
            "new_shape holds at most 6",
            one_node(
                &[2, 3],
                &[6],
                XNodeKind::StaticReshape { new_shape: seven.clone(), input_id: 0, output_id: 1, flags: 0 },
            ),
            strict(),
            long("XNNStaticReshape", "new_shape"),
        ),
        (
            "reduction_axes holds at most 6",
            one_node(
                &[2, 3],
                &[1],
                XNodeKind::StaticMean { reduction_axes: seven.clone(), input_id: 0, output_id: 1, flags: 0 },
            ),
            strict(),
            long("XNNStaticMean", "reduction_axes"),
        ),
        (
            "pre_paddings holds at most 6",
            one_node(&[2, 3], &[2, 3], pad(seven.clone(), vec![0, 0])),
            strict(),
            long("XNNStaticConstantPad", "pre_paddings"),
        ),
        (
            "post_paddings holds at most 6",
            one_node(&[2, 3], &[2, 3], pad(vec![0, 0], seven.clone())),
            strict(),
            long("XNNStaticConstantPad", "post_paddings"),
        ),
        (
            "offsets holds at most 6",
            one_node(&[2, 3], &[2, 3], slice(seven.clone(), vec![2, 3])),
            strict(),
            long("XNNStaticSlice", "offsets"),
        ),
        (
            "sizes holds at most 6",
            one_node(&[2, 3], &[2, 3], slice(vec![0, 0], seven.clone())),
            strict(),
            long("XNNStaticSlice", "sizes"),
        ),
        (
            "num_dims counts the perm",
            list_node(STATIC_TRANSPOSE, |r| vec![(4, F::U32(3)), (6, F::Off(r.u32s(&[1, 0]))), (8, i), (10, o)]),
            strict(),
            count("XNNStaticTranspose", "num_dims", 3, "perm", 2),
        ),
        (
            "num_dims counts the new_shape",
            list_node(STATIC_RESHAPE, |r| vec![(4, F::U32(1)), (6, F::Off(r.u32s(&[3, 2]))), (8, i), (10, o)]),
            strict(),
            count("XNNStaticReshape", "num_dims", 1, "new_shape", 2),
        ),
        (
            "num_reduction_axes counts the reduction_axes",
            list_node(STATIC_MEAN, |r| {
                vec![(4, F::U32(2)), (6, F::Off(r.u32s(&[1]))), (8, i), (10, o), (12, F::U32(0x40))]
            }),
            strict(),
            count("_XNNStaticReduce", "num_reduction_axes", 2, "reduction_axes", 1),
        ),
        (
            "num_dims counts the offsets",
            list_node(STATIC_SLICE, |r| {
                let (off, sz) = (r.u32s(&[0]), r.u32s(&[2, 3]));
                vec![(4, F::U32(2)), (6, F::Off(off)), (8, F::Off(sz)), (10, i), (12, o)]
            }),
            strict(),
            count("XNNStaticSlice", "num_dims", 2, "offsets", 1),
        ),
        (
            "num_dims counts the sizes",
            list_node(STATIC_SLICE, |r| {
                let (off, sz) = (r.u32s(&[0, 0]), r.u32s(&[2, 3, 1]));
                vec![(4, F::U32(2)), (6, F::Off(off)), (8, F::Off(sz)), (10, i), (12, o)]
            }),
            strict(),
            count("XNNStaticSlice", "num_dims", 2, "sizes", 3),
        ),
    ]
}

fn dataflow_rules() -> Vec<Row> {
    use XnnDatatype::Fp32;
    let d: &[u32] = &[2, 3];
    let cat3 = CatNode {
        axis: 0,
        input1_id: 0,
        input2_id: 1,
        input3_id: 2,
        input4_id: 99,
        output_id: 3,
        flags: 0,
        input5_id: 99,
    };
    let sdpa = |mask_id| XNodeKind::ScaledDotProductAttention {
        query_id: 0,
        key_id: 0,
        value_id: 0,
        scale_id: 0,
        mask_id,
        output_id: 1,
        flags: 0,
    };
    let argmax = |output_value_id, output_index_id| XNodeKind::ArgMaxPooling2d {
        padding_top: 0,
        padding_right: 0,
        padding_bottom: 0,
        padding_left: 0,
        pooling_height: 2,
        pooling_width: 2,
        input_id: 0,
        output_value_id,
        output_index_id,
        flags: 0,
    };
    let undefined = |node_type, field, id| LoadError::UndefinedId { node: 0, node_type, field, id };
    vec![
        (
            "a read names a value",
            gap_with(|g| g.nodes[0].kind = XNodeKind::Add { input1_id: 0, input2_id: 40, output_id: 1, flags: 0 }),
            strict(),
            undefined("XNNAdd", "input2_id", 40),
        ),
        (
            "a write names a value",
            one_node(d, d, XNodeKind::Negate { input_id: 0, output_id: 5, flags: 0 }),
            strict(),
            undefined("XNNNegate", "output_id", 5),
        ),
        (
            "a value is read after it is written",
            gap_with(|g| g.nodes.swap(1, 2)),
            strict(),
            LoadError::UseBeforeDef { node: 1, node_type: "XNNGlobalAvgPooling2d", field: "input_id", id: 2 },
        ),
        (
            "an input is not written",
            gap_with(|g| g.nodes[0].kind = XNodeKind::Add { input1_id: 0, input2_id: 0, output_id: 0, flags: 0 }),
            strict(),
            LoadError::Redefined { node: 0, node_type: "XNNAdd", field: "output_id", id: 0 },
        ),
        (
            "a value is written once",
            gap_with(|g| g.nodes.push(g.nodes[3].clone())),
            strict(),
            LoadError::Redefined { node: 4, node_type: "XNNStaticTranspose", field: "output_id", id: 4 },
        ),
        (
            "a concatenation reads its own inputs only (the third of three)",
            graph_of(
                &[(d, Fp32, Role::In), (d, Fp32, Role::In), (d, Fp32, Role::Mid), (&[6, 3], Fp32, Role::Out)],
                vec![XNodeKind::Concatenate3(cat3.clone())],
            ),
            strict(),
            LoadError::UseBeforeDef { node: 0, node_type: "XNNConcatenate3", field: "input3_id", id: 2 },
        ),
        (
            "an attention mask, when given, names a value",
            one_node(d, d, sdpa(7)),
            strict(),
            undefined("XNNScaledDotProductAttention", "mask_id", 7),
        ),
        (
            "an argmax index output is written once",
            one_node(d, d, argmax(1, 0)),
            strict(),
            LoadError::Redefined { node: 0, node_type: "XNNArgMaxPooling2d", field: "output_index_id", id: 0 },
        ),
    ]
}

fn semantic_rules() -> Vec<Row> {
    use XnnDatatype::{Fp16, Fp32};
    let dt =
        |node_type, field, expected, found| LoadError::DtypeMismatch { node: 0, node_type, field, expected, found };
    let transpose = |perm: Vec<u32>| XNodeKind::StaticTranspose { perm, input_id: 0, output_id: 1, flags: 0 };
    let mean = |axes: Vec<u32>, flags| XNodeKind::StaticMean { reduction_axes: axes, input_id: 0, output_id: 1, flags };
    let fp = |d: &'static [u32]| (d, Fp32, Role::In);
    let conv = |dims: [&'static [u32]; 3]| {
        graph_of(
            &[fp(dims[0]), fp(dims[1]), (dims[2], Fp32, Role::Out)],
            vec![XNodeKind::Conv2d(ConvNode {
                padding_top: 0,
                padding_right: 0,
                padding_bottom: 0,
                padding_left: 0,
                kernel_height: 1,
                kernel_width: 1,
                subsampling_height: 1,
                subsampling_width: 1,
                dilation_height: 1,
                dilation_width: 1,
                group_input_channels: 2,
                group_output_channels: 2,
                groups: 1,
                adjustment_height: 0,
                adjustment_width: 0,
                input1_id: 0,
                filter_id: 1,
                bias_id: INVALID_VALUE_ID,
                output_id: 2,
                flags: 0,
            })],
        )
    };
    let fc = |filter: &'static [u32], out_dt| {
        graph_of(
            &[fp(&[1, 4]), fp(filter), (&[1, 3], out_dt, Role::Out)],
            vec![XNodeKind::FullyConnected {
                input1_id: 0,
                filter_id: 1,
                bias_id: INVALID_VALUE_ID,
                output_id: 2,
                flags: 0,
            }],
        )
    };
    let pad = |pre: Vec<u32>, post: Vec<u32>| XNodeKind::StaticConstantPad {
        pre_paddings: pre,
        post_paddings: post,
        padding_value: 0.0,
        input_id: 0,
        output_id: 1,
        flags: 0,
    };
    let r4: &[u32] = &[1, 2, 2, 2];
    vec![
        (
            "a binary node's inputs share a dtype",
            graph_of(
                &[fp(&[2]), (&[2], Fp16, Role::In), (&[2], Fp32, Role::Out)],
                vec![XNodeKind::Add { input1_id: 0, input2_id: 1, output_id: 2, flags: 0 }],
            ),
            strict(),
            dt("XNNAdd", "input2_id", "xnn_datatype_fp32", "xnn_datatype_fp16"),
        ),
        (
            "a binary node's output has their dtype",
            gap_with(|g| g.values[1].datatype = Fp16),
            strict(),
            dt("XNNAdd", "output_id", "xnn_datatype_fp32", "xnn_datatype_fp16"),
        ),
        (
            "a unary node's output has its input's dtype",
            graph_of(
                &[fp(&[2]), (&[2], Fp16, Role::Out)],
                vec![XNodeKind::Clamp { input_id: 0, output_id: 1, flags: 0 }],
            ),
            strict(),
            dt("XNNClamp", "output_id", "xnn_datatype_fp32", "xnn_datatype_fp16"),
        ),
        (
            "global average pooling is 4-D",
            one_node(&[2, 3], &[2, 1], XNodeKind::GlobalAvgPooling2d { input_id: 0, output_id: 1, flags: 0 }),
            strict(),
            bad(
                0,
                "XNNGlobalAvgPooling2d",
                "input_id",
                "global average pooling needs 4-D NHWC input and output, got ranks 2 and 2",
            ),
        ),
        (
            "a perm has one entry per input dim",
            one_node(&[2, 3, 4], &[2, 3, 4], transpose(vec![1, 0])),
            strict(),
            bad(0, "XNNStaticTranspose", "perm", "2 entries for a rank-3 input"),
        ),
        (
            "a perm has no repeated entry",
            one_node(&[2, 3, 4], &[2, 3, 4], transpose(vec![0, 2, 2])),
            strict(),
            bad(0, "XNNStaticTranspose", "perm", "[0, 2, 2] is not a permutation of 0..3"),
        ),
        (
            "a perm entry is below the rank",
            one_node(&[2, 3, 4], &[2, 3, 4], transpose(vec![0, 1, 3])),
            strict(),
            bad(0, "XNNStaticTranspose", "perm", "[0, 1, 3] is not a permutation of 0..3"),
        ),
        (
            "a transpose's output dims are its input's permuted",
            one_node(&[2, 3, 4], &[2, 3, 4], transpose(vec![0, 2, 1])),
            strict(),
            bad(
                0,
                "XNNStaticTranspose",
                "output_id",
                "output dims [2, 3, 4] are not the input dims [2, 3, 4] permuted by [0, 2, 1]",
            ),
        ),
        (
            "a mean reduces some axis",
            one_node(&[2, 3], &[2, 3], mean(vec![], FLAG_KEEP_DIMS)),
            strict(),
            bad(0, "XNNStaticMean", "reduction_axes", "is empty"),
        ),
        (
            "reduction axes ascend",
            one_node(&[2, 3, 4], &[2, 1, 1], mean(vec![2, 1], FLAG_KEEP_DIMS)),
            strict(),
            bad(0, "XNNStaticMean", "reduction_axes", "[2, 1] are not strictly ascending"),
        ),
        (
            "reduction axes are unique",
            one_node(&[2, 3, 4], &[2, 1, 4], mean(vec![1, 1], FLAG_KEEP_DIMS)),
            strict(),
            bad(0, "XNNStaticMean", "reduction_axes", "[1, 1] are not strictly ascending"),
        ),
        (
            "reduction axes are below the rank",
            one_node(&[2, 3], &[2, 3], mean(vec![2], FLAG_KEEP_DIMS)),
            strict(),
            bad(0, "XNNStaticMean", "reduction_axes", "[2] out of range for rank 2"),
        ),
        (
            "a mean's output rank follows keep_dims",
            one_node(&[2, 3, 4], &[2, 3, 1], mean(vec![2], 0)),
            strict(),
            bad(0, "XNNStaticMean", "output_id", "rank 3, expected 2 (keep_dims false)"),
        ),
        (
            "a fully connected output has its input's dtype",
            fc(&[3, 4], Fp16),
            strict(),
            dt("XNNFullyConnected", "output_id", "xnn_datatype_fp32", "xnn_datatype_fp16"),
        ),
        (
            "a fully connected filter is 2-D",
            fc(&[3, 4, 1], Fp32),
            strict(),
            bad(0, "XNNFullyConnected", "filter_id", "filter rank 3 is not 2"),
        ),
        (
            "a convolution's output has its input's dtype",
            graph_of(
                &[fp(r4), fp(r4), (r4, Fp16, Role::Out)],
                vec![XNodeKind::DepthwiseConv2d(ConvNode {
                    padding_top: 0,
                    padding_right: 0,
                    padding_bottom: 0,
                    padding_left: 0,
                    kernel_height: 1,
                    kernel_width: 1,
                    subsampling_height: 1,
                    subsampling_width: 1,
                    dilation_height: 1,
                    dilation_width: 1,
                    group_input_channels: 1,
                    group_output_channels: 1,
                    groups: 2,
                    adjustment_height: 0,
                    adjustment_width: 0,
                    input1_id: 0,
                    filter_id: 1,
                    bias_id: INVALID_VALUE_ID,
                    output_id: 2,
                    flags: 0,
                })],
            ),
            strict(),
            dt("XNNDepthwiseConv2d", "output_id", "xnn_datatype_fp32", "xnn_datatype_fp16"),
        ),
        (
            "a convolution's input is 4-D",
            conv([&[2, 2, 2], r4, r4]),
            strict(),
            bad(0, "XNNConv2d", "input1_id", "rank 3 is not 4"),
        ),
        (
            "a convolution's filter is 4-D",
            conv([r4, &[2, 2], r4]),
            strict(),
            bad(0, "XNNConv2d", "filter_id", "rank 2 is not 4"),
        ),
        (
            "a convolution's output is 4-D",
            conv([r4, r4, &[1, 2, 2, 2, 1]]),
            strict(),
            bad(0, "XNNConv2d", "output_id", "rank 5 is not 4"),
        ),
        (
            "one pre padding per input dim",
            one_node(&[2, 3], &[4, 5], pad(vec![1], vec![1, 1])),
            strict(),
            bad(0, "XNNStaticConstantPad", "pre_paddings", "1 entries for a rank-2 input"),
        ),
        (
            "one post padding per input dim",
            one_node(&[2, 3], &[4, 5], pad(vec![1, 1], vec![1, 1, 0])),
            strict(),
            bad(0, "XNNStaticConstantPad", "post_paddings", "3 entries for a rank-2 input"),
        ),
        (
            "one slice offset per input dim",
            one_node(
                &[2, 3],
                &[1, 1],
                XNodeKind::StaticSlice { offsets: vec![0], sizes: vec![1], input_id: 0, output_id: 1, flags: 0 },
            ),
            strict(),
            bad(0, "XNNStaticSlice", "offsets", "1 entries for a rank-2 input"),
        ),
    ]
}

#[test]
fn node_table_rules() {
    check(table_rules());
}

#[test]
fn node_list_rules() {
    check(list_rules());
}

#[test]
fn node_dataflow_rules() {
    check(dataflow_rules());
}

#[test]
fn node_semantic_rules() {
    check(semantic_rules());
}

#[test]
fn the_accepted_neighbours_of_the_rules_load() {
    use XnnDatatype::*;
    // What sits right next to a rule is accepted, so each row fails for its rule alone.
    let ok = |b: Vec<u8>| load(&b, &strict()).map(|_| ()).map_err(|e| e.to_string());
    // A full reduction without keep_dims gives [1], as ExecuTorch serializes 0-D tensors.
    let full = XNodeKind::StaticMean { reduction_axes: vec![0, 1], input_id: 0, output_id: 1, flags: 0 };
    assert_eq!(ok(one_node(&[2, 3], &[1], full)), Ok(()));
    // A dynamically quantized input gives a float output.
    let fc =
        XNodeKind::FullyConnected { input1_id: 0, filter_id: 1, bias_id: INVALID_VALUE_ID, output_id: 2, flags: 0 };
    let dq =
        XValue { quant: Some(QuantParams::PerTokenDynamic { num_nonbatch_dims: 1 }), ..input(0, 0, Qdint8, &[1, 4]) };
    let g = graph(
        vec![node(fc, 0)],
        vec![dq, input(1, 1, Fp32, &[3, 4]), output(2, 2, Fp32, &[1, 3])],
        3,
        vec![0, 1],
        vec![2],
    );
    assert_eq!(ok(write(&g)), Ok(()));
    // Optional ids left out are not reads; unread concatenation inputs are kept, not checked.
    let cat = CatNode {
        axis: 0,
        input1_id: 0,
        input2_id: 0,
        input3_id: 7,
        input4_id: 8,
        output_id: 1,
        flags: 0,
        input5_id: 9,
    };
    assert_eq!(ok(one_node(&[2, 3], &[4, 3], XNodeKind::Concatenate2(cat))), Ok(()));
    let sdpa = XNodeKind::ScaledDotProductAttention {
        query_id: 0,
        key_id: 0,
        value_id: 0,
        scale_id: 0,
        mask_id: INVALID_VALUE_ID,
        output_id: 1,
        flags: 0,
    };
    assert_eq!(ok(one_node(&[2, 3], &[2, 3], sdpa)), Ok(()));
    // Every member with no table field past its last loads (the table rows' neighbours).
    for (i, &(member, _, _)) in TABLES.iter().enumerate() {
        let b = raw::unary(|r| {
            let p = r.table(&[]);
            r.node(i as u8 + 1, Some(p), &[])
        });
        let e = load(&b, &strict()).err();
        assert!(!matches!(e, Some(LoadError::UnknownField { .. })), "{member}: {e:?}");
    }
}
