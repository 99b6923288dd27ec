//! Hand-built graphs shared by the serializer tests.
#![allow(dead_code)]

use delegate::xnn::*;

pub fn value(id: u32, datatype: XnnDatatype, dims: &[u32]) -> XValue {
    XValue {
        datatype,
        dims: dims.to_vec(),
        constant_buffer_idx: 0,
        external_id: INVALID_VALUE_ID,
        flags: 0,
        id_out: id,
        quant: None,
    }
}

pub fn input(id: u32, ext: u32, datatype: XnnDatatype, dims: &[u32]) -> XValue {
    XValue { external_id: ext, flags: VALUE_FLAG_EXTERNAL_INPUT, ..value(id, datatype, dims) }
}

pub fn output(id: u32, ext: u32, datatype: XnnDatatype, dims: &[u32]) -> XValue {
    XValue { external_id: ext, flags: VALUE_FLAG_EXTERNAL_OUTPUT, ..value(id, datatype, dims) }
}

pub fn node(kind: XNodeKind, debug_handle: u32) -> XNode {
    XNode { kind, debug_handle, output_min_max: None }
}

pub fn reserved() -> ConstantDataOffset {
    ConstantDataOffset { offset: 0, size: 0, named_key: Some(String::new()) }
}

pub fn graph(
    nodes: Vec<XNode>,
    values: Vec<XValue>,
    num_externs: u32,
    input_ids: Vec<u32>,
    output_ids: Vec<u32>,
) -> XnnGraph {
    XnnGraph {
        version: "0".into(),
        nodes,
        values,
        num_externs,
        input_ids,
        output_ids,
        constant_data: vec![reserved()],
        constant_bytes: Vec::new(),
    }
}

/// Notes 1.9: `y = x + x; mean(y, [-1,-2], keepdim=True)` on [1,5,4,4] fp32, GAP lowering.
pub fn gap_example() -> XnnGraph {
    use XnnDatatype::Fp32;
    graph(
        vec![
            node(XNodeKind::Add { input1_id: 0, input2_id: 0, output_id: 1, flags: 0 }, 0),
            node(
                XNodeKind::StaticTranspose { perm: PERM_NCHW_TO_NHWC.to_vec(), input_id: 1, output_id: 2, flags: 0 },
                DEFAULT_DEBUG_HANDLE,
            ),
            node(XNodeKind::GlobalAvgPooling2d { input_id: 2, output_id: 3, flags: FLAG_KEEP_DIMS }, 1),
            node(
                XNodeKind::StaticTranspose { perm: PERM_NHWC_TO_NCHW.to_vec(), input_id: 3, output_id: 4, flags: 0 },
                DEFAULT_DEBUG_HANDLE,
            ),
        ],
        vec![
            input(0, 0, Fp32, &[1, 5, 4, 4]),
            value(1, Fp32, &[1, 5, 4, 4]),
            value(2, Fp32, &[1, 4, 4, 5]),
            value(3, Fp32, &[1, 1, 1, 5]),
            output(4, 1, Fp32, &[1, 5, 1, 1]),
        ],
        2,
        vec![0],
        vec![4],
    )
}

/// A static mean over the last axis of a rank-3 input, keep_dims.
pub fn static_mean_example() -> XnnGraph {
    use XnnDatatype::Fp32;
    graph(
        vec![node(
            XNodeKind::StaticMean { reduction_axes: vec![2], input_id: 0, output_id: 1, flags: FLAG_KEEP_DIMS },
            3,
        )],
        vec![input(0, 0, Fp32, &[2, 3, 8]), output(1, 1, Fp32, &[2, 3, 1])],
        2,
        vec![0],
        vec![1],
    )
}

fn push_constant(g: &mut XnnGraph, data: &[u8]) -> u32 {
    while !g.constant_bytes.len().is_multiple_of(16) {
        g.constant_bytes.push(0);
    }
    g.constant_data.push(ConstantDataOffset {
        offset: g.constant_bytes.len() as u64,
        size: data.len() as u64,
        named_key: None,
    });
    g.constant_bytes.extend_from_slice(data);
    (g.constant_data.len() - 1) as u32
}

fn f32_bytes(n: usize, seed: f32) -> Vec<u8> {
    (0..n).flat_map(|i| (seed + i as f32 * 0.25).to_le_bytes()).collect()
}

/// Every named node kind, constants in the payload's constant region, a fused
/// activation, a reshape and a convert to fp16.
pub fn all_kinds_example() -> XnnGraph {
    use XnnDatatype::{Fp16, Fp32};
    let mut g = graph(vec![], vec![], 2, vec![0], vec![21]);
    let c_filter = push_constant(&mut g, &f32_bytes(8 * 3 * 3 * 4, 0.5));
    let c_bias = push_constant(&mut g, &f32_bytes(8, -1.0));
    let c_dw = push_constant(&mut g, &f32_bytes(3 * 3 * 8, 2.0));
    let c_fc = push_constant(&mut g, &f32_bytes(3 * 8, 0.125));
    let c_fcb = push_constant(&mut g, &f32_bytes(3, 7.0));
    let konst = |id: u32, idx: u32, dims: &[u32]| XValue { constant_buffer_idx: idx, ..value(id, Fp32, dims) };
    g.values = vec![
        input(0, 0, Fp32, &[1, 4, 6, 6]),
        value(1, Fp32, &[1, 6, 6, 4]),
        konst(2, c_filter, &[8, 3, 3, 4]),
        konst(3, c_bias, &[8]),
        value(4, Fp32, &[1, 4, 4, 8]),
        konst(5, c_dw, &[1, 3, 3, 8]),
        value(6, Fp32, &[1, 2, 2, 8]),
        value(7, Fp32, &[1, 2, 2, 8]),
        value(8, Fp32, &[1, 2, 2, 8]),
        value(9, Fp32, &[1, 2, 2, 8]),
        value(10, Fp32, &[1, 2, 2, 8]),
        value(11, Fp32, &[1, 2, 2, 8]),
        value(12, Fp32, &[1, 2, 2, 8]),
        value(13, Fp32, &[1, 2, 2, 8]),
        value(14, Fp32, &[1, 2, 2, 8]),
        value(15, Fp32, &[1, 1, 1, 8]),
        value(16, Fp32, &[1, 8]),
        konst(17, c_fc, &[3, 8]),
        konst(18, c_fcb, &[3]),
        value(19, Fp32, &[1, 3]),
        value(20, Fp16, &[1, 3]),
        output(21, 1, Fp16, &[1]),
    ];
    let conv = |input1_id, filter_id, bias_id, output_id, groups, gin, gout, k| ConvNode {
        padding_top: 0,
        padding_right: 0,
        padding_bottom: 0,
        padding_left: 0,
        kernel_height: k,
        kernel_width: k,
        subsampling_height: 1,
        subsampling_width: 1,
        dilation_height: 1,
        dilation_width: 1,
        group_input_channels: gin,
        group_output_channels: gout,
        groups,
        adjustment_height: 0,
        adjustment_width: 0,
        input1_id,
        filter_id,
        bias_id,
        output_id,
        flags: 0,
    };
    use XNodeKind::*;
    g.nodes = vec![
        node(
            StaticTranspose { perm: PERM_NCHW_TO_NHWC.to_vec(), input_id: 0, output_id: 1, flags: 0 },
            DEFAULT_DEBUG_HANDLE,
        ),
        node(Conv2d(conv(1, 2, 3, 4, 1, 4, 8, 3)), 1),
        node(DepthwiseConv2d(conv(4, 5, INVALID_VALUE_ID, 6, 8, 1, 1, 3)), 2),
        XNode {
            kind: Clamp { input_id: 6, output_id: 7, flags: 0 },
            debug_handle: 3,
            output_min_max: Some((0.0, 6.0)),
        },
        node(Square { input_id: 7, output_id: 8, flags: 0 }, 4),
        node(Add { input1_id: 7, input2_id: 8, output_id: 9, flags: 0 }, 5),
        node(Subtract { input1_id: 9, input2_id: 7, output_id: 10, flags: 0 }, 6),
        node(Multiply { input1_id: 10, input2_id: 10, output_id: 11, flags: 0 }, 7),
        node(Div { input1_id: 11, input2_id: 9, output_id: 12, flags: 0 }, 8),
        node(ReciprocalSquareRoot { input_id: 12, output_id: 13, flags: 0 }, 9),
        node(Copy { input_id: 13, output_id: 14, flags: 0 }, 10),
        node(GlobalAvgPooling2d { input_id: 14, output_id: 15, flags: FLAG_KEEP_DIMS }, 11),
        node(StaticReshape { new_shape: vec![1, 8], input_id: 15, output_id: 16, flags: 0 }, 12),
        node(FullyConnected { input1_id: 16, filter_id: 17, bias_id: 18, output_id: 19, flags: 0 }, 13),
        node(Convert { input_id: 19, output_id: 20, flags: 0 }, 14),
        node(StaticMean { reduction_axes: vec![1], input_id: 20, output_id: 21, flags: 0 }, 15),
    ];
    g
}

/// qs8: convert in, a per-tensor add, a fully connected layer with per-channel weights
/// and bias, convert out.
pub fn quantized_example() -> XnnGraph {
    use XnnDatatype::*;
    let pt = |scale, zero_point| Some(QuantParams::PerTensor { scale, zero_point });
    let mut g = graph(vec![], vec![], 2, vec![0], vec![6]);
    let w: Vec<u8> = (0..12).map(|i| (i as i8 - 6) as u8).collect();
    let c_w = push_constant(&mut g, &w);
    let c_b = push_constant(&mut g, &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]);
    g.values = vec![
        input(0, 0, Fp32, &[1, 4]),
        XValue { quant: pt(0.05, -3), ..value(1, Qint8, &[1, 4]) },
        XValue { quant: pt(0.1, 2), ..value(2, Qint8, &[1, 4]) },
        XValue {
            constant_buffer_idx: c_w,
            quant: Some(QuantParams::PerChannel {
                scale: vec![0.01, 0.02, 0.03],
                channel_dim: 0,
                scale_buffer_idx: 0,
                num_scales: 0,
            }),
            ..value(3, Qcint8, &[3, 4])
        },
        XValue {
            constant_buffer_idx: c_b,
            quant: Some(QuantParams::PerChannel {
                scale: vec![0.001, 0.002, 0.003],
                channel_dim: 0,
                scale_buffer_idx: 0,
                num_scales: 0,
            }),
            ..value(4, Qcint32, &[3])
        },
        XValue { quant: pt(0.2, 0), ..value(5, Qint8, &[1, 3]) },
        output(6, 1, Fp32, &[1, 3]),
    ];
    use XNodeKind::*;
    g.nodes = vec![
        node(Convert { input_id: 0, output_id: 1, flags: 0 }, 1),
        node(Add { input1_id: 1, input2_id: 1, output_id: 2, flags: 0 }, 2),
        node(FullyConnected { input1_id: 2, filter_id: 3, bias_id: 4, output_id: 5, flags: 0 }, 3),
        node(Convert { input_id: 5, output_id: 6, flags: 0 }, 4),
    ];
    g
}

pub fn examples() -> Vec<(&'static str, XnnGraph)> {
    vec![
        ("gap", gap_example()),
        ("static_mean", static_mean_example()),
        ("all_kinds", all_kinds_example()),
        ("quantized", quantized_example()),
    ]
}
