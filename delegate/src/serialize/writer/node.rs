//! Node tables: every `XNodeUnion` member with all of its fields. Scalars go in the order
//! the generated `create` functions add them (last field first; all of this schema's node
//! fields are four bytes wide), lists before their table in declaration order, as flatc
//! creates them from ExecuTorch's JSON.

use super::{wire_type_id, Enc};
use crate::serialize::fb;
use crate::xnn::{CatNode, ConvNode, PoolingNode, XNode, XNodeKind};

/// `_XNNNode1x1`.
fn enc_1x1(e: &mut Enc, input_id: u32, output_id: u32, flags: u32) -> usize {
    use fb::_XNNNode1x1 as T;
    let t = e.start_table();
    e.slot_u32(T::VT_FLAGS, flags);
    e.slot_u32(T::VT_OUTPUT_ID, output_id);
    e.slot_u32(T::VT_INPUT_ID, input_id);
    e.end_table(t)
}

/// `_XNNNode2x1`.
fn enc_2x1(e: &mut Enc, input1_id: u32, input2_id: u32, output_id: u32, flags: u32) -> usize {
    use fb::_XNNNode2x1 as T;
    let t = e.start_table();
    e.slot_u32(T::VT_FLAGS, flags);
    e.slot_u32(T::VT_OUTPUT_ID, output_id);
    e.slot_u32(T::VT_INPUT2_ID, input2_id);
    e.slot_u32(T::VT_INPUT1_ID, input1_id);
    e.end_table(t)
}

/// `XNNStaticTranspose`, `XNNStaticReshape` and `_XNNStaticReduce`: a count (4), a list
/// (6), input_id 8, output_id 10, flags 12.
fn enc_list_node(e: &mut Enc, list: &[u32], input_id: u32, output_id: u32, flags: u32) -> usize {
    let l = e.u32_vector(list);
    let t = e.start_table();
    e.slot_u32(12, flags);
    e.slot_u32(10, output_id);
    e.slot_u32(8, input_id);
    e.slot_offset(6, l);
    e.slot_u32(4, list.len() as u32);
    e.end_table(t)
}

/// `_XNNNodeConv`: fields 4 (padding_top) to 42 (flags), two bytes apart.
fn enc_conv(e: &mut Enc, c: &ConvNode) -> usize {
    let t = e.start_table();
    e.slot_u32(42, c.flags);
    e.slot_u32(40, c.output_id);
    e.slot_u32(38, c.bias_id);
    e.slot_u32(36, c.filter_id);
    e.slot_u32(34, c.input1_id);
    e.slot_u32(32, c.adjustment_width);
    e.slot_u32(30, c.adjustment_height);
    e.slot_u32(28, c.groups);
    e.slot_u32(26, c.group_output_channels);
    e.slot_u32(24, c.group_input_channels);
    e.slot_u32(22, c.dilation_width);
    e.slot_u32(20, c.dilation_height);
    e.slot_u32(18, c.subsampling_width);
    e.slot_u32(16, c.subsampling_height);
    e.slot_u32(14, c.kernel_width);
    e.slot_u32(12, c.kernel_height);
    e.slot_u32(10, c.padding_left);
    e.slot_u32(8, c.padding_bottom);
    e.slot_u32(6, c.padding_right);
    e.slot_u32(4, c.padding_top);
    e.end_table(t)
}

fn enc_pooling(e: &mut Enc, p: &PoolingNode) -> usize {
    use fb::_XNNPooling2D as T;
    let t = e.start_table();
    e.slot_u32(T::VT_FLAGS, p.flags);
    e.slot_u32(T::VT_OUTPUT_ID, p.output_id);
    e.slot_u32(T::VT_INPUT_ID, p.input_id);
    e.slot_u32(T::VT_DILATION_WIDTH, p.dilation_width);
    e.slot_u32(T::VT_DILATION_HEIGHT, p.dilation_height);
    e.slot_u32(T::VT_STRIDE_WIDTH, p.stride_width);
    e.slot_u32(T::VT_STRIDE_HEIGHT, p.stride_height);
    e.slot_u32(T::VT_POOLING_WIDTH, p.pooling_width);
    e.slot_u32(T::VT_POOLING_HEIGHT, p.pooling_height);
    e.slot_u32(T::VT_PADDING_LEFT, p.padding_left);
    e.slot_u32(T::VT_PADDING_BOTTOM, p.padding_bottom);
    e.slot_u32(T::VT_PADDING_RIGHT, p.padding_right);
    e.slot_u32(T::VT_PADDING_TOP, p.padding_top);
    e.end_table(t)
}

fn enc_cat(e: &mut Enc, c: &CatNode) -> usize {
    use fb::_XNNCat as T;
    let t = e.start_table();
    e.slot_u32(T::VT_INPUT5_ID, c.input5_id);
    e.slot_u32(T::VT_FLAGS, c.flags);
    e.slot_u32(T::VT_OUTPUT_ID, c.output_id);
    e.slot_u32(T::VT_INPUT4_ID, c.input4_id);
    e.slot_u32(T::VT_INPUT3_ID, c.input3_id);
    e.slot_u32(T::VT_INPUT2_ID, c.input2_id);
    e.slot_u32(T::VT_INPUT1_ID, c.input1_id);
    e.slot_u32(T::VT_AXIS, c.axis);
    e.end_table(t)
}

/// The member's table; returns its position.
fn enc_payload(e: &mut Enc, kind: &XNodeKind) -> usize {
    use XNodeKind::*;
    match kind {
        Add { input1_id, input2_id, output_id, flags }
        | Subtract { input1_id, input2_id, output_id, flags }
        | Multiply { input1_id, input2_id, output_id, flags }
        | Div { input1_id, input2_id, output_id, flags }
        | Minimum { input1_id, input2_id, output_id, flags }
        | Maximum { input1_id, input2_id, output_id, flags }
        | PReLU { input1_id, input2_id, output_id, flags }
        | BatchMatrixMultiply { input1_id, input2_id, output_id, flags } => {
            enc_2x1(e, *input1_id, *input2_id, *output_id, *flags)
        }
        FullyConnected { input1_id, filter_id, bias_id, output_id, flags } => {
            use fb::XNNFullyConnected as T;
            let t = e.start_table();
            e.slot_u32(T::VT_FLAGS, *flags);
            e.slot_u32(T::VT_OUTPUT_ID, *output_id);
            e.slot_u32(T::VT_BIAS_ID, *bias_id);
            e.slot_u32(T::VT_FILTER_ID, *filter_id);
            e.slot_u32(T::VT_INPUT1_ID, *input1_id);
            e.end_table(t)
        }
        Clamp { input_id, output_id, flags }
        | Square { input_id, output_id, flags }
        | ReciprocalSquareRoot { input_id, output_id, flags }
        | Convert { input_id, output_id, flags }
        | Copy { input_id, output_id, flags }
        | GlobalAvgPooling2d { input_id, output_id, flags }
        | Softmax { input_id, output_id, flags }
        | Sigmoid { input_id, output_id, flags }
        | Floor { input_id, output_id, flags }
        | SquareRoot { input_id, output_id, flags }
        | Ceiling { input_id, output_id, flags }
        | Hardswish { input_id, output_id, flags }
        | Negate { input_id, output_id, flags }
        | Abs { input_id, output_id, flags }
        | Log { input_id, output_id, flags }
        | Gelu { input_id, output_id, flags }
        | Tanh { input_id, output_id, flags }
        | Exp { input_id, output_id, flags }
        | Sin { input_id, output_id, flags }
        | Cos { input_id, output_id, flags } => enc_1x1(e, *input_id, *output_id, *flags),
        StaticTranspose { perm: list, input_id, output_id, flags }
        | StaticReshape { new_shape: list, input_id, output_id, flags }
        | StaticMean { reduction_axes: list, input_id, output_id, flags } => {
            enc_list_node(e, list, *input_id, *output_id, *flags)
        }
        Conv2d(c) | DepthwiseConv2d(c) | ConvTranspose2d(c) => enc_conv(e, c),
        AvgPooling2d(p) | MaxPooling2d(p) => enc_pooling(e, p),
        Concatenate2(c) | Concatenate3(c) | Concatenate4(c) | Concatenate5(c) => enc_cat(e, c),
        StaticResizeBilinear2D { new_height, new_width, input_id, output_id, flags } => {
            use fb::XNNStaticResizeBilinear2D as T;
            let t = e.start_table();
            e.slot_u32(T::VT_FLAGS, *flags);
            e.slot_u32(T::VT_OUTPUT_ID, *output_id);
            e.slot_u32(T::VT_INPUT_ID, *input_id);
            e.slot_u32(T::VT_NEW_WIDTH, *new_width);
            e.slot_u32(T::VT_NEW_HEIGHT, *new_height);
            e.end_table(t)
        }
        StaticConstantPad { pre_paddings, post_paddings, padding_value, input_id, output_id, flags } => {
            use fb::XNNStaticConstantPad as T;
            let pre = e.u32_vector(pre_paddings);
            let post = e.u32_vector(post_paddings);
            let t = e.start_table();
            e.slot_u32(T::VT_FLAGS, *flags);
            e.slot_u32(T::VT_OUTPUT_ID, *output_id);
            e.slot_u32(T::VT_INPUT_ID, *input_id);
            e.slot_f32(T::VT_PADDING_VALUE, *padding_value);
            e.slot_offset(T::VT_POST_PADDINGS, post);
            e.slot_offset(T::VT_PRE_PADDINGS, pre);
            e.end_table(t)
        }
        StaticSlice { offsets, sizes, input_id, output_id, flags } => {
            use fb::XNNStaticSlice as T;
            let o = e.u32_vector(offsets);
            let s = e.u32_vector(sizes);
            let t = e.start_table();
            e.slot_u32(T::VT_FLAGS, *flags);
            e.slot_u32(T::VT_OUTPUT_ID, *output_id);
            e.slot_u32(T::VT_INPUT_ID, *input_id);
            e.slot_offset(T::VT_SIZES, s);
            e.slot_offset(T::VT_OFFSETS, o);
            // num_dims: the loader accepts only lists of this one length.
            e.slot_u32(T::VT_NUM_DIMS, offsets.len() as u32);
            e.end_table(t)
        }
        ArgMaxPooling2d {
            padding_top,
            padding_right,
            padding_bottom,
            padding_left,
            pooling_height,
            pooling_width,
            input_id,
            output_value_id,
            output_index_id,
            flags,
        } => {
            use fb::XNNArgMaxPooling2d as T;
            let t = e.start_table();
            e.slot_u32(T::VT_FLAGS, *flags);
            e.slot_u32(T::VT_OUTPUT_INDEX_ID, *output_index_id);
            e.slot_u32(T::VT_OUTPUT_VALUE_ID, *output_value_id);
            e.slot_u32(T::VT_INPUT_ID, *input_id);
            e.slot_u32(T::VT_POOLING_WIDTH, *pooling_width);
            e.slot_u32(T::VT_POOLING_HEIGHT, *pooling_height);
            e.slot_u32(T::VT_PADDING_LEFT, *padding_left);
            e.slot_u32(T::VT_PADDING_BOTTOM, *padding_bottom);
            e.slot_u32(T::VT_PADDING_RIGHT, *padding_right);
            e.slot_u32(T::VT_PADDING_TOP, *padding_top);
            e.end_table(t)
        }
        LeakyReLU { negative_slope: x, input_id, output_id, flags } | Elu { alpha: x, input_id, output_id, flags } => {
            // XNNLeakyReLU and XNNELU share one layout: a float (4), then input_id 6,
            // output_id 8, flags 10.
            let t = e.start_table();
            e.slot_u32(fb::XNNELU::VT_FLAGS, *flags);
            e.slot_u32(fb::XNNELU::VT_OUTPUT_ID, *output_id);
            e.slot_u32(fb::XNNELU::VT_INPUT_ID, *input_id);
            e.slot_f32(fb::XNNELU::VT_ALPHA, *x);
            e.end_table(t)
        }
        ScaledDotProductAttention { query_id, key_id, value_id, scale_id, mask_id, output_id, flags } => {
            use fb::XNNScaledDotProductAttention as T;
            let t = e.start_table();
            e.slot_u32(T::VT_FLAGS, *flags);
            e.slot_u32(T::VT_OUTPUT_ID, *output_id);
            e.slot_u32(T::VT_MASK_ID, *mask_id);
            e.slot_u32(T::VT_SCALE_ID, *scale_id);
            e.slot_u32(T::VT_VALUE_ID, *value_id);
            e.slot_u32(T::VT_KEY_ID, *key_id);
            e.slot_u32(T::VT_QUERY_ID, *query_id);
            e.end_table(t)
        }
    }
}

pub(super) fn enc_node(e: &mut Enc, n: &XNode) -> usize {
    let payload = enc_payload(e, &n.kind);
    let mm = n.output_min_max.map(|(lo, hi)| {
        let t = e.start_table();
        e.slot_f32(6, hi);
        e.slot_f32(4, lo);
        e.end_table(t)
    });
    let type_id = wire_type_id(&n.kind);
    // XNode: xnode_union_type 4, xnode_union 6, debug_handle 8, output_min_max 10.
    let t = e.start_table();
    if let Some(m) = mm {
        e.slot_offset(10, m);
    }
    e.slot_u32(8, n.debug_handle);
    e.slot_offset(6, payload);
    e.slot_u8(4, type_id);
    e.end_table(t)
}
