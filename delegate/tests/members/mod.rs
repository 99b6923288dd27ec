//! One row per `XNodeUnion` member: its table built with the generated flatbuffers builder
//! from literal field values (every field set, none at its default, no two alike where the
//! loader could swap them), and the node the loader must decode from it. Shared by the
//! round-trip test (serialize_members.rs) and the runtime's unsupported-node test.
#![allow(dead_code)]

use delegate::serialize::fb;
use delegate::xnn::*;
use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

pub type Payload = fn(&mut FlatBufferBuilder<'static>) -> WIPOffset<UnionWIPOffset>;

pub struct Member {
    pub name: &'static str,
    pub payload: Payload,
    pub expected: XNodeKind,
    /// (value id, dims) replacing the default `[1, 4, 4, 4]`.
    pub dims: &'static [(u32, &'static [u32])],
}

/// The graph every row runs in: values 0 to 4 are external inputs, 5 and 6 external
/// outputs, all fp32.
pub const INPUTS: u32 = 5;
pub const OUTPUTS: u32 = 2;
pub const DEFAULT_DIMS: [u32; 4] = [1, 4, 4, 4];

fn n1x1(b: &mut FlatBufferBuilder<'static>) -> WIPOffset<UnionWIPOffset> {
    fb::_XNNNode1x1::create(b, &fb::_XNNNode1x1Args { input_id: 2, output_id: 5, flags: 0x11 }).as_union_value()
}

fn n2x1(b: &mut FlatBufferBuilder<'static>) -> WIPOffset<UnionWIPOffset> {
    fb::_XNNNode2x1::create(b, &fb::_XNNNode2x1Args { input1_id: 3, input2_id: 1, output_id: 5, flags: 0x12 })
        .as_union_value()
}

fn conv(b: &mut FlatBufferBuilder<'static>) -> WIPOffset<UnionWIPOffset> {
    fb::_XNNNodeConv::create(
        b,
        &fb::_XNNNodeConvArgs {
            padding_top: 101,
            padding_right: 102,
            padding_bottom: 103,
            padding_left: 104,
            kernel_height: 105,
            kernel_width: 106,
            subsampling_height: 107,
            subsampling_width: 108,
            dilation_height: 109,
            dilation_width: 110,
            group_input_channels: 111,
            group_output_channels: 112,
            groups: 113,
            adjustment_height: 114,
            adjustment_width: 115,
            input1_id: 3,
            filter_id: 1,
            bias_id: 2,
            output_id: 5,
            flags: 0x13,
        },
    )
    .as_union_value()
}

const CONV: ConvNode = ConvNode {
    padding_top: 101,
    padding_right: 102,
    padding_bottom: 103,
    padding_left: 104,
    kernel_height: 105,
    kernel_width: 106,
    subsampling_height: 107,
    subsampling_width: 108,
    dilation_height: 109,
    dilation_width: 110,
    group_input_channels: 111,
    group_output_channels: 112,
    groups: 113,
    adjustment_height: 114,
    adjustment_width: 115,
    input1_id: 3,
    filter_id: 1,
    bias_id: 2,
    output_id: 5,
    flags: 0x13,
};

fn pooling(b: &mut FlatBufferBuilder<'static>) -> WIPOffset<UnionWIPOffset> {
    fb::_XNNPooling2D::create(
        b,
        &fb::_XNNPooling2DArgs {
            padding_top: 201,
            padding_right: 202,
            padding_bottom: 203,
            padding_left: 204,
            pooling_height: 205,
            pooling_width: 206,
            stride_height: 207,
            stride_width: 208,
            dilation_height: 209,
            dilation_width: 210,
            input_id: 4,
            output_id: 6,
            flags: 0x14,
        },
    )
    .as_union_value()
}

const POOLING: PoolingNode = PoolingNode {
    padding_top: 201,
    padding_right: 202,
    padding_bottom: 203,
    padding_left: 204,
    pooling_height: 205,
    pooling_width: 206,
    stride_height: 207,
    stride_width: 208,
    dilation_height: 209,
    dilation_width: 210,
    input_id: 4,
    output_id: 6,
    flags: 0x14,
};

fn cat(b: &mut FlatBufferBuilder<'static>) -> WIPOffset<UnionWIPOffset> {
    // Inputs beyond a member's count are not read; they are still kept as they were.
    fb::_XNNCat::create(
        b,
        &fb::_XNNCatArgs {
            axis: 3,
            input1_id: 4,
            input2_id: 3,
            input3_id: 2,
            input4_id: 1,
            output_id: 5,
            flags: 0x15,
            input5_id: 0,
        },
    )
    .as_union_value()
}

const CAT: CatNode = CatNode {
    axis: 3,
    input1_id: 4,
    input2_id: 3,
    input3_id: 2,
    input4_id: 1,
    output_id: 5,
    flags: 0x15,
    input5_id: 0,
};

macro_rules! one {
    ($name:literal, $v:ident) => {
        Member {
            name: $name,
            payload: n1x1,
            expected: XNodeKind::$v { input_id: 2, output_id: 5, flags: 0x11 },
            dims: &[],
        }
    };
}

macro_rules! two {
    ($name:literal, $v:ident) => {
        Member {
            name: $name,
            payload: n2x1,
            expected: XNodeKind::$v { input1_id: 3, input2_id: 1, output_id: 5, flags: 0x12 },
            dims: &[],
        }
    };
}

/// Every member, in union order.
pub fn members() -> Vec<Member> {
    vec![
        two!("XNNAdd", Add),
        Member {
            name: "XNNFullyConnected",
            payload: |b| {
                fb::XNNFullyConnected::create(
                    b,
                    &fb::XNNFullyConnectedArgs { input1_id: 3, filter_id: 1, bias_id: 2, output_id: 5, flags: 1 },
                )
                .as_union_value()
            },
            expected: XNodeKind::FullyConnected { input1_id: 3, filter_id: 1, bias_id: 2, output_id: 5, flags: 1 },
            dims: &[(1, &[4, 4])],
        },
        one!("XNNSoftmax", Softmax),
        one!("XNNSigmoid", Sigmoid),
        Member {
            name: "XNNStaticTranspose",
            payload: |b| {
                let perm = b.create_vector(&[0u32, 2, 3, 1]);
                fb::XNNStaticTranspose::create(
                    b,
                    &fb::XNNStaticTransposeArgs {
                        num_dims: 4,
                        perm: Some(perm),
                        input_id: 2,
                        output_id: 5,
                        flags: 0x16,
                    },
                )
                .as_union_value()
            },
            expected: XNodeKind::StaticTranspose { perm: vec![0, 2, 3, 1], input_id: 2, output_id: 5, flags: 0x16 },
            dims: &[(2, &[1, 2, 3, 4]), (5, &[1, 3, 4, 2])],
        },
        one!("XNNClamp", Clamp),
        Member { name: "XNNConv2d", payload: conv, expected: XNodeKind::Conv2d(CONV), dims: &[] },
        two!("XNNDiv", Div),
        Member {
            name: "XNNStaticResizeBilinear2D",
            payload: |b| {
                fb::XNNStaticResizeBilinear2D::create(
                    b,
                    &fb::XNNStaticResizeBilinear2DArgs {
                        new_height: 301,
                        new_width: 302,
                        input_id: 2,
                        output_id: 5,
                        flags: 0x17,
                    },
                )
                .as_union_value()
            },
            expected: XNodeKind::StaticResizeBilinear2D {
                new_height: 301,
                new_width: 302,
                input_id: 2,
                output_id: 5,
                flags: 0x17,
            },
            dims: &[],
        },
        Member {
            name: "XNNStaticConstantPad",
            payload: |b| {
                let pre = b.create_vector(&[1u32, 2, 3, 4]);
                let post = b.create_vector(&[5u32, 6, 7, 8]);
                fb::XNNStaticConstantPad::create(
                    b,
                    &fb::XNNStaticConstantPadArgs {
                        pre_paddings: Some(pre),
                        post_paddings: Some(post),
                        padding_value: -2.5,
                        input_id: 2,
                        output_id: 5,
                        flags: 0x18,
                    },
                )
                .as_union_value()
            },
            expected: XNodeKind::StaticConstantPad {
                pre_paddings: vec![1, 2, 3, 4],
                post_paddings: vec![5, 6, 7, 8],
                padding_value: -2.5,
                input_id: 2,
                output_id: 5,
                flags: 0x18,
            },
            dims: &[],
        },
        Member { name: "XNNAvgPooling2d", payload: pooling, expected: XNodeKind::AvgPooling2d(POOLING), dims: &[] },
        two!("XNNMinimum", Minimum),
        Member { name: "XNNDepthwiseConv2d", payload: conv, expected: XNodeKind::DepthwiseConv2d(CONV), dims: &[] },
        Member { name: "XNNMaxPooling2d", payload: pooling, expected: XNodeKind::MaxPooling2d(POOLING), dims: &[] },
        two!("XNNMultiply", Multiply),
        two!("XNNSubtract", Subtract),
        one!("XNNFloor", Floor),
        one!("XNNConvert", Convert),
        one!("XNNGlobalAvgPooling2d", GlobalAvgPooling2d),
        Member {
            name: "XNNStaticReshape",
            payload: |b| {
                let shape = b.create_vector(&[16u32, 4]);
                fb::XNNStaticReshape::create(
                    b,
                    &fb::XNNStaticReshapeArgs {
                        num_dims: 2,
                        new_shape: Some(shape),
                        input_id: 2,
                        output_id: 5,
                        flags: 0x19,
                    },
                )
                .as_union_value()
            },
            expected: XNodeKind::StaticReshape { new_shape: vec![16, 4], input_id: 2, output_id: 5, flags: 0x19 },
            dims: &[(5, &[16, 4])],
        },
        Member {
            name: "XNNArgMaxPooling2d",
            payload: |b| {
                fb::XNNArgMaxPooling2d::create(
                    b,
                    &fb::XNNArgMaxPooling2dArgs {
                        padding_top: 401,
                        padding_right: 402,
                        padding_bottom: 403,
                        padding_left: 404,
                        pooling_height: 405,
                        pooling_width: 406,
                        input_id: 1,
                        output_value_id: 6,
                        output_index_id: 5,
                        flags: 0x1a,
                    },
                )
                .as_union_value()
            },
            expected: XNodeKind::ArgMaxPooling2d {
                padding_top: 401,
                padding_right: 402,
                padding_bottom: 403,
                padding_left: 404,
                pooling_height: 405,
                pooling_width: 406,
                input_id: 1,
                output_value_id: 6,
                output_index_id: 5,
                flags: 0x1a,
            },
            dims: &[],
        },
        one!("XNNSquareRoot", SquareRoot),
        one!("XNNCeiling", Ceiling),
        one!("XNNHardswish", Hardswish),
        Member {
            name: "XNNLeakyReLU",
            payload: |b| {
                fb::XNNLeakyReLU::create(
                    b,
                    &fb::XNNLeakyReLUArgs { negative_slope: 0.125, input_id: 2, output_id: 5, flags: 0x1b },
                )
                .as_union_value()
            },
            expected: XNodeKind::LeakyReLU { negative_slope: 0.125, input_id: 2, output_id: 5, flags: 0x1b },
            dims: &[],
        },
        two!("XNNMaximum", Maximum),
        one!("XNNNegate", Negate),
        one!("XNNSquare", Square),
        Member {
            name: "XNNELU",
            payload: |b| {
                fb::XNNELU::create(b, &fb::XNNELUArgs { alpha: 1.5, input_id: 2, output_id: 5, flags: 0x1c })
                    .as_union_value()
            },
            expected: XNodeKind::Elu { alpha: 1.5, input_id: 2, output_id: 5, flags: 0x1c },
            dims: &[],
        },
        one!("XNNAbs", Abs),
        two!("XNNPReLU", PReLU),
        Member { name: "XNNConcatenate2", payload: cat, expected: XNodeKind::Concatenate2(CAT), dims: &[] },
        Member { name: "XNNConcatenate3", payload: cat, expected: XNodeKind::Concatenate3(CAT), dims: &[] },
        Member { name: "XNNConcatenate4", payload: cat, expected: XNodeKind::Concatenate4(CAT), dims: &[] },
        Member {
            name: "XNNStaticSlice",
            payload: |b| {
                let offsets = b.create_vector(&[0u32, 1, 2, 3]);
                let sizes = b.create_vector(&[1u32, 3, 2, 1]);
                fb::XNNStaticSlice::create(
                    b,
                    &fb::XNNStaticSliceArgs {
                        num_dims: 4,
                        offsets: Some(offsets),
                        sizes: Some(sizes),
                        input_id: 2,
                        output_id: 5,
                        flags: 0x1d,
                    },
                )
                .as_union_value()
            },
            expected: XNodeKind::StaticSlice {
                offsets: vec![0, 1, 2, 3],
                sizes: vec![1, 3, 2, 1],
                input_id: 2,
                output_id: 5,
                flags: 0x1d,
            },
            dims: &[],
        },
        Member {
            name: "XNNScaledDotProductAttention",
            payload: |b| {
                fb::XNNScaledDotProductAttention::create(
                    b,
                    &fb::XNNScaledDotProductAttentionArgs {
                        query_id: 4,
                        key_id: 3,
                        value_id: 2,
                        scale_id: 1,
                        mask_id: 0,
                        output_id: 6,
                        flags: 0x1e,
                    },
                )
                .as_union_value()
            },
            expected: XNodeKind::ScaledDotProductAttention {
                query_id: 4,
                key_id: 3,
                value_id: 2,
                scale_id: 1,
                mask_id: 0,
                output_id: 6,
                flags: 0x1e,
            },
            dims: &[],
        },
        two!("XNNBatchMatrixMultiply", BatchMatrixMultiply),
        Member { name: "XNNConcatenate5", payload: cat, expected: XNodeKind::Concatenate5(CAT), dims: &[] },
        Member { name: "XNNConvTranspose2d", payload: conv, expected: XNodeKind::ConvTranspose2d(CONV), dims: &[] },
        one!("XNNReciprocalSquareRoot", ReciprocalSquareRoot),
        one!("XNNLog", Log),
        one!("XNNGelu", Gelu),
        one!("XNNTanh", Tanh),
        one!("XNNExp", Exp),
        one!("XNNSin", Sin),
        one!("XNNCopy", Copy),
        one!("XNNCos", Cos),
        Member {
            name: "XNNStaticMean",
            payload: |b| {
                let axes = b.create_vector(&[1u32, 2]);
                fb::_XNNStaticReduce::create(
                    b,
                    &fb::_XNNStaticReduceArgs {
                        num_reduction_axes: 2,
                        reduction_axes: Some(axes),
                        input_id: 2,
                        output_id: 5,
                        flags: FLAG_KEEP_DIMS,
                    },
                )
                .as_union_value()
            },
            expected: XNodeKind::StaticMean {
                reduction_axes: vec![1, 2],
                input_id: 2,
                output_id: 5,
                flags: FLAG_KEEP_DIMS,
            },
            dims: &[(5, &[1, 1, 1, 4])],
        },
    ]
}

/// The dims of value `id` in `m`'s graph.
pub fn dims_of(m: &Member, id: u32) -> Vec<u32> {
    m.dims.iter().find(|(v, _)| *v == id).map_or(DEFAULT_DIMS.to_vec(), |(_, d)| d.to_vec())
}

/// `m`'s graph through the generated builder, in the order our writer (and flatc on
/// ExecuTorch's JSON) creates objects: version, node (payload, bounds, node), node vector,
/// values (dims, tensor, value), value vector, id lists, constants, root.
pub fn build(m: &Member) -> Vec<u8> {
    let mut b = FlatBufferBuilder::new();
    let version = b.create_string("0");
    let payload = (m.payload)(&mut b);
    let mm = fb::OutputMinMax::create(&mut b, &fb::OutputMinMaxArgs { output_min: -6.0, output_max: 6.0 });
    let node = fb::XNode::create(
        &mut b,
        &fb::XNodeArgs {
            xnode_union_type: fb::XNodeUnion(node_type_id(m.name).expect("a schema member")),
            xnode_union: Some(payload),
            debug_handle: 77,
            output_min_max: Some(mm),
        },
    );
    let xnodes = b.create_vector(&[node]);
    let mut values = vec![];
    for id in 0..INPUTS + OUTPUTS {
        let dims = b.create_vector(&dims_of(m, id));
        let input = id < INPUTS;
        let t = fb::XNNTensorValue::create(
            &mut b,
            &fb::XNNTensorValueArgs {
                datatype: fb::XNNDatatype::xnn_datatype_fp32,
                num_dims: dims_of(m, id).len() as u32,
                dims: Some(dims),
                constant_buffer_idx: 0,
                external_id: id,
                flags: if input { VALUE_FLAG_EXTERNAL_INPUT } else { VALUE_FLAG_EXTERNAL_OUTPUT },
                id_out: id,
            },
        );
        values.push(fb::XValue::create(
            &mut b,
            &fb::XValueArgs {
                xvalue_union_type: fb::XValueUnion::XNNTensorValue,
                xvalue_union: Some(t.as_union_value()),
            },
        ));
    }
    let xvalues = b.create_vector(&values);
    let input_ids = b.create_vector(&(0..INPUTS).collect::<Vec<u32>>());
    let output_ids = b.create_vector(&(INPUTS..INPUTS + OUTPUTS).collect::<Vec<u32>>());
    let key = b.create_string("");
    let reserved = fb::ConstantDataOffset::create(
        &mut b,
        &fb::ConstantDataOffsetArgs { offset: 0, size: 0, named_key: Some(key) },
    );
    let constant_data = b.create_vector(&[reserved]);
    let root = fb::XNNGraph::create(
        &mut b,
        &fb::XNNGraphArgs {
            version: Some(version),
            xnodes: Some(xnodes),
            xvalues: Some(xvalues),
            num_externs: INPUTS + OUTPUTS,
            input_ids: Some(input_ids),
            output_ids: Some(output_ids),
            constant_data: Some(constant_data),
        },
    );
    b.finish(root, Some("XN01"));
    b.finished_data().to_vec()
}
