//! Nodes: each `XNode` into an [`XNode`] with every field of its union member's table, then
//! its checks: ids defined before use and written once, and the member's own rules (ranks,
//! permutations, reduction axes, padding and slice lists, dtypes along the node).

use super::value::{is_float, ValueInfo};
use super::{fb, missing, modelled, unreadable, Fields, LoadError, MAX_DIMS};
use crate::xnn::{
    node_type as nt, node_type_name, CatNode, ConvNode, PoolingNode, XNode, XNodeKind, XValue, XnnDatatype,
    NODE_TYPE_NAMES, VALUE_FLAG_EXTERNAL_INPUT,
};

pub(super) fn decode_node(i: usize, xn: fb::XNode<'_>, known_node_types: u8) -> Result<XNode, LoadError> {
    modelled(xn._tab, "XNode", i, fb::XNode::VT_OUTPUT_MIN_MAX, &[])?;
    let type_id = xn.xnode_union_type().0;
    if type_id == 0 {
        return Err(LoadError::NoneNode { node: i });
    }
    if type_id as usize > NODE_TYPE_NAMES.len() || type_id > known_node_types {
        return Err(LoadError::UnknownNodeType { node: i, type_id });
    }
    let Some(table) = xn.xnode_union() else {
        return Err(missing("XNode", "xnode_union", i));
    };
    let kind = decode_kind(i, type_id, table, xn)?;
    let output_min_max = match xn.output_min_max() {
        None => None,
        Some(m) => {
            modelled(m._tab, "OutputMinMax", i, fb::OutputMinMax::VT_OUTPUT_MAX, &[])?;
            Some((m.output_min(), m.output_max()))
        }
    };
    if let Some((lo, hi)) = output_min_max {
        // NaN bounds are incomparable, so they are refused too.
        if !matches!(lo.partial_cmp(&hi), Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)) {
            return Err(LoadError::BadNode {
                node: i,
                node_type: kind.type_name(),
                field: "output_min_max",
                reason: format!("min {lo} is not at most max {hi}"),
            });
        }
    }
    Ok(XNode { kind, debug_handle: xn.debug_handle(), output_min_max })
}

/// The schema table name of each member's payload, for errors about the table itself.
fn table_name(type_id: u8) -> &'static str {
    match type_id {
        nt::ADD
        | nt::SUBTRACT
        | nt::MULTIPLY
        | nt::DIV
        | nt::MINIMUM
        | nt::MAXIMUM
        | nt::PRELU
        | nt::BATCH_MATRIX_MULTIPLY => "_XNNNode2x1",
        nt::CONV_2D | nt::DEPTHWISE_CONV_2D | nt::CONV_TRANSPOSE_2D => "_XNNNodeConv",
        nt::AVG_POOLING_2D | nt::MAX_POOLING_2D => "_XNNPooling2D",
        nt::CONCATENATE_2 | nt::CONCATENATE_3 | nt::CONCATENATE_4 | nt::CONCATENATE_5 => "_XNNCat",
        nt::STATIC_MEAN => "_XNNStaticReduce",
        // Members with a table of their own are named after it.
        nt::FULLY_CONNECTED
        | nt::STATIC_TRANSPOSE
        | nt::STATIC_RESIZE_BILINEAR_2D
        | nt::STATIC_CONSTANT_PAD
        | nt::STATIC_RESHAPE
        | nt::ARG_MAX_POOLING_2D
        | nt::LEAKY_RELU
        | nt::ELU
        | nt::STATIC_SLICE
        | nt::SCALED_DOT_PRODUCT_ATTENTION => node_type_name(type_id).unwrap_or(""),
        _ => "_XNNNode1x1",
    }
}

/// The last vtable slot of each member's table (the generated `VT_*` of its last field).
fn last_slot(type_id: u8) -> u16 {
    match table_name(type_id) {
        "_XNNNode2x1" => fb::_XNNNode2x1::VT_FLAGS,
        "_XNNNodeConv" => fb::_XNNNodeConv::VT_FLAGS,
        "_XNNPooling2D" => fb::_XNNPooling2D::VT_FLAGS,
        "_XNNCat" => fb::_XNNCat::VT_INPUT5_ID,
        "_XNNStaticReduce" => fb::_XNNStaticReduce::VT_FLAGS,
        "XNNFullyConnected" => fb::XNNFullyConnected::VT_FLAGS,
        "XNNStaticTranspose" => fb::XNNStaticTranspose::VT_FLAGS,
        "XNNStaticResizeBilinear2D" => fb::XNNStaticResizeBilinear2D::VT_FLAGS,
        "XNNStaticConstantPad" => fb::XNNStaticConstantPad::VT_FLAGS,
        "XNNStaticReshape" => fb::XNNStaticReshape::VT_FLAGS,
        "XNNArgMaxPooling2d" => fb::XNNArgMaxPooling2d::VT_FLAGS,
        "XNNLeakyReLU" => fb::XNNLeakyReLU::VT_FLAGS,
        "XNNELU" => fb::XNNELU::VT_FLAGS,
        "XNNStaticSlice" => fb::XNNStaticSlice::VT_FLAGS,
        "XNNScaledDotProductAttention" => fb::XNNScaledDotProductAttention::VT_FLAGS,
        _ => fb::_XNNNode1x1::VT_FLAGS,
    }
}

/// A list field of a node: required (ExecuTorch's compiler dereferences it), and at most
/// `XNN_MAX_TENSOR_DIMS` long (it copies it into arrays of that size).
fn node_list(
    i: usize,
    type_id: u8,
    field: &'static str,
    list: Option<flatbuffers::Vector<'_, u32>>,
) -> Result<Vec<u32>, LoadError> {
    let list = list.ok_or_else(|| missing(table_name(type_id), field, i))?;
    if list.len() > MAX_DIMS {
        return Err(LoadError::BadNode {
            node: i,
            node_type: node_type_name(type_id).unwrap_or(""),
            field,
            reason: format!("{} entries, more than XNN_MAX_TENSOR_DIMS = {MAX_DIMS}", list.len()),
        });
    }
    Ok(list.iter().collect())
}

/// A count field checked against the list it counts (the graph keeps only the list, and
/// the writer writes its length).
fn counted(
    i: usize,
    type_id: u8,
    count_field: &'static str,
    count: u32,
    list_field: &'static str,
    list: &[u32],
) -> Result<(), LoadError> {
    if list.len() != count as usize {
        return Err(LoadError::CountMismatch {
            table: table_name(type_id),
            index: i,
            count_field,
            count,
            list: list_field,
            len: list.len(),
        });
    }
    Ok(())
}

/// Every field of the member table `table` (of type `type_id`, checked in range).
fn decode_kind(
    i: usize,
    type_id: u8,
    table: flatbuffers::Table<'_>,
    xn: fb::XNode<'_>,
) -> Result<XNodeKind, LoadError> {
    use XNodeKind::*;
    let f = modelled(table, table_name(type_id), i, last_slot(type_id), &[])?;
    // Scalar reads fail only if the verifier let a bad field through (never expected).
    let kind = match type_id {
        nt::STATIC_TRANSPOSE | nt::STATIC_RESHAPE | nt::STATIC_MEAN | nt::STATIC_CONSTANT_PAD | nt::STATIC_SLICE => {
            return list_kind(i, type_id, xn);
        }
        nt::ADD
        | nt::SUBTRACT
        | nt::MULTIPLY
        | nt::DIV
        | nt::MINIMUM
        | nt::MAXIMUM
        | nt::PRELU
        | nt::BATCH_MATRIX_MULTIPLY => node2x1(type_id, f),
        nt::FULLY_CONNECTED => {
            use fb::XNNFullyConnected as T;
            (|| {
                Some(FullyConnected {
                    input1_id: f.u32(T::VT_INPUT1_ID)?,
                    filter_id: f.u32(T::VT_FILTER_ID)?,
                    bias_id: f.u32(T::VT_BIAS_ID)?,
                    output_id: f.u32(T::VT_OUTPUT_ID)?,
                    flags: f.u32(T::VT_FLAGS)?,
                })
            })()
        }
        nt::CONV_2D => conv(f).map(Conv2d),
        nt::DEPTHWISE_CONV_2D => conv(f).map(DepthwiseConv2d),
        nt::CONV_TRANSPOSE_2D => conv(f).map(ConvTranspose2d),
        nt::AVG_POOLING_2D => pooling(f).map(AvgPooling2d),
        nt::MAX_POOLING_2D => pooling(f).map(MaxPooling2d),
        nt::CONCATENATE_2 => cat(f).map(Concatenate2),
        nt::CONCATENATE_3 => cat(f).map(Concatenate3),
        nt::CONCATENATE_4 => cat(f).map(Concatenate4),
        nt::CONCATENATE_5 => cat(f).map(Concatenate5),
        nt::STATIC_RESIZE_BILINEAR_2D => {
            use fb::XNNStaticResizeBilinear2D as T;
            (|| {
                Some(StaticResizeBilinear2D {
                    new_height: f.u32(T::VT_NEW_HEIGHT)?,
                    new_width: f.u32(T::VT_NEW_WIDTH)?,
                    input_id: f.u32(T::VT_INPUT_ID)?,
                    output_id: f.u32(T::VT_OUTPUT_ID)?,
                    flags: f.u32(T::VT_FLAGS)?,
                })
            })()
        }
        nt::ARG_MAX_POOLING_2D => {
            use fb::XNNArgMaxPooling2d as T;
            (|| {
                Some(ArgMaxPooling2d {
                    padding_top: f.u32(T::VT_PADDING_TOP)?,
                    padding_right: f.u32(T::VT_PADDING_RIGHT)?,
                    padding_bottom: f.u32(T::VT_PADDING_BOTTOM)?,
                    padding_left: f.u32(T::VT_PADDING_LEFT)?,
                    pooling_height: f.u32(T::VT_POOLING_HEIGHT)?,
                    pooling_width: f.u32(T::VT_POOLING_WIDTH)?,
                    input_id: f.u32(T::VT_INPUT_ID)?,
                    output_value_id: f.u32(T::VT_OUTPUT_VALUE_ID)?,
                    output_index_id: f.u32(T::VT_OUTPUT_INDEX_ID)?,
                    flags: f.u32(T::VT_FLAGS)?,
                })
            })()
        }
        nt::LEAKY_RELU => {
            use fb::XNNLeakyReLU as T;
            (|| {
                Some(LeakyReLU {
                    negative_slope: f.f32(T::VT_NEGATIVE_SLOPE)?,
                    input_id: f.u32(T::VT_INPUT_ID)?,
                    output_id: f.u32(T::VT_OUTPUT_ID)?,
                    flags: f.u32(T::VT_FLAGS)?,
                })
            })()
        }
        nt::ELU => {
            use fb::XNNELU as T;
            (|| {
                Some(Elu {
                    alpha: f.f32(T::VT_ALPHA)?,
                    input_id: f.u32(T::VT_INPUT_ID)?,
                    output_id: f.u32(T::VT_OUTPUT_ID)?,
                    flags: f.u32(T::VT_FLAGS)?,
                })
            })()
        }
        nt::SCALED_DOT_PRODUCT_ATTENTION => {
            use fb::XNNScaledDotProductAttention as T;
            (|| {
                Some(ScaledDotProductAttention {
                    query_id: f.u32(T::VT_QUERY_ID)?,
                    key_id: f.u32(T::VT_KEY_ID)?,
                    value_id: f.u32(T::VT_VALUE_ID)?,
                    scale_id: f.u32(T::VT_SCALE_ID)?,
                    mask_id: f.u32(T::VT_MASK_ID)?,
                    output_id: f.u32(T::VT_OUTPUT_ID)?,
                    flags: f.u32(T::VT_FLAGS)?,
                })
            })()
        }
        _ => node1x1(type_id, f),
    };
    kind.ok_or_else(|| unreadable("node", i))
}

/// The `_XNNNode2x1` members.
fn node2x1(type_id: u8, f: Fields<'_>) -> Option<XNodeKind> {
    use fb::_XNNNode2x1 as T;
    use XNodeKind::*;
    let (input1_id, input2_id, output_id, flags) =
        (f.u32(T::VT_INPUT1_ID)?, f.u32(T::VT_INPUT2_ID)?, f.u32(T::VT_OUTPUT_ID)?, f.u32(T::VT_FLAGS)?);
    Some(match type_id {
        nt::ADD => Add { input1_id, input2_id, output_id, flags },
        nt::SUBTRACT => Subtract { input1_id, input2_id, output_id, flags },
        nt::MULTIPLY => Multiply { input1_id, input2_id, output_id, flags },
        nt::DIV => Div { input1_id, input2_id, output_id, flags },
        nt::MINIMUM => Minimum { input1_id, input2_id, output_id, flags },
        nt::MAXIMUM => Maximum { input1_id, input2_id, output_id, flags },
        nt::PRELU => PReLU { input1_id, input2_id, output_id, flags },
        nt::BATCH_MATRIX_MULTIPLY => BatchMatrixMultiply { input1_id, input2_id, output_id, flags },
        _ => return None,
    })
}

/// The `_XNNNode1x1` members.
fn node1x1(type_id: u8, f: Fields<'_>) -> Option<XNodeKind> {
    use fb::_XNNNode1x1 as T;
    use XNodeKind::*;
    let (input_id, output_id, flags) = (f.u32(T::VT_INPUT_ID)?, f.u32(T::VT_OUTPUT_ID)?, f.u32(T::VT_FLAGS)?);
    Some(match type_id {
        nt::CLAMP => Clamp { input_id, output_id, flags },
        nt::SQUARE => Square { input_id, output_id, flags },
        nt::RECIPROCAL_SQUARE_ROOT => ReciprocalSquareRoot { input_id, output_id, flags },
        nt::CONVERT => Convert { input_id, output_id, flags },
        nt::COPY => Copy { input_id, output_id, flags },
        nt::GLOBAL_AVG_POOLING_2D => GlobalAvgPooling2d { input_id, output_id, flags },
        nt::SOFTMAX => Softmax { input_id, output_id, flags },
        nt::SIGMOID => Sigmoid { input_id, output_id, flags },
        nt::FLOOR => Floor { input_id, output_id, flags },
        nt::SQUARE_ROOT => SquareRoot { input_id, output_id, flags },
        nt::CEILING => Ceiling { input_id, output_id, flags },
        nt::HARDSWISH => Hardswish { input_id, output_id, flags },
        nt::NEGATE => Negate { input_id, output_id, flags },
        nt::ABS => Abs { input_id, output_id, flags },
        nt::LOG => Log { input_id, output_id, flags },
        nt::GELU => Gelu { input_id, output_id, flags },
        nt::TANH => Tanh { input_id, output_id, flags },
        nt::EXP => Exp { input_id, output_id, flags },
        nt::SIN => Sin { input_id, output_id, flags },
        nt::COS => Cos { input_id, output_id, flags },
        _ => return None,
    })
}

fn conv(f: Fields<'_>) -> Option<ConvNode> {
    use fb::_XNNNodeConv as T;
    Some(ConvNode {
        padding_top: f.u32(T::VT_PADDING_TOP)?,
        padding_right: f.u32(T::VT_PADDING_RIGHT)?,
        padding_bottom: f.u32(T::VT_PADDING_BOTTOM)?,
        padding_left: f.u32(T::VT_PADDING_LEFT)?,
        kernel_height: f.u32(T::VT_KERNEL_HEIGHT)?,
        kernel_width: f.u32(T::VT_KERNEL_WIDTH)?,
        subsampling_height: f.u32(T::VT_SUBSAMPLING_HEIGHT)?,
        subsampling_width: f.u32(T::VT_SUBSAMPLING_WIDTH)?,
        dilation_height: f.u32(T::VT_DILATION_HEIGHT)?,
        dilation_width: f.u32(T::VT_DILATION_WIDTH)?,
        group_input_channels: f.u32(T::VT_GROUP_INPUT_CHANNELS)?,
        group_output_channels: f.u32(T::VT_GROUP_OUTPUT_CHANNELS)?,
        groups: f.u32(T::VT_GROUPS)?,
        adjustment_height: f.u32(T::VT_ADJUSTMENT_HEIGHT)?,
        adjustment_width: f.u32(T::VT_ADJUSTMENT_WIDTH)?,
        input1_id: f.u32(T::VT_INPUT1_ID)?,
        filter_id: f.u32(T::VT_FILTER_ID)?,
        bias_id: f.u32(T::VT_BIAS_ID)?,
        output_id: f.u32(T::VT_OUTPUT_ID)?,
        flags: f.u32(T::VT_FLAGS)?,
    })
}

fn pooling(f: Fields<'_>) -> Option<PoolingNode> {
    use fb::_XNNPooling2D as T;
    Some(PoolingNode {
        padding_top: f.u32(T::VT_PADDING_TOP)?,
        padding_right: f.u32(T::VT_PADDING_RIGHT)?,
        padding_bottom: f.u32(T::VT_PADDING_BOTTOM)?,
        padding_left: f.u32(T::VT_PADDING_LEFT)?,
        pooling_height: f.u32(T::VT_POOLING_HEIGHT)?,
        pooling_width: f.u32(T::VT_POOLING_WIDTH)?,
        stride_height: f.u32(T::VT_STRIDE_HEIGHT)?,
        stride_width: f.u32(T::VT_STRIDE_WIDTH)?,
        dilation_height: f.u32(T::VT_DILATION_HEIGHT)?,
        dilation_width: f.u32(T::VT_DILATION_WIDTH)?,
        input_id: f.u32(T::VT_INPUT_ID)?,
        output_id: f.u32(T::VT_OUTPUT_ID)?,
        flags: f.u32(T::VT_FLAGS)?,
    })
}

fn cat(f: Fields<'_>) -> Option<CatNode> {
    use fb::_XNNCat as T;
    Some(CatNode {
        axis: f.u32(T::VT_AXIS)?,
        input1_id: f.u32(T::VT_INPUT1_ID)?,
        input2_id: f.u32(T::VT_INPUT2_ID)?,
        input3_id: f.u32(T::VT_INPUT3_ID)?,
        input4_id: f.u32(T::VT_INPUT4_ID)?,
        output_id: f.u32(T::VT_OUTPUT_ID)?,
        flags: f.u32(T::VT_FLAGS)?,
        input5_id: f.u32(T::VT_INPUT5_ID)?,
    })
}

/// The members with list fields, through the generated accessors (the verifier checked
/// each list's bounds).
fn list_kind(i: usize, type_id: u8, xn: fb::XNode<'_>) -> Result<XNodeKind, LoadError> {
    let table = table_name(type_id);
    let absent = || missing("XNode", "xnode_union", i);
    Ok(match type_id {
        nt::STATIC_TRANSPOSE => {
            let t = xn.xnode_union_as_xnnstatic_transpose().ok_or_else(absent)?;
            let perm = node_list(i, type_id, "perm", t.perm())?;
            counted(i, type_id, "num_dims", t.num_dims(), "perm", &perm)?;
            XNodeKind::StaticTranspose { perm, input_id: t.input_id(), output_id: t.output_id(), flags: t.flags() }
        }
        nt::STATIC_RESHAPE => {
            let t = xn.xnode_union_as_xnnstatic_reshape().ok_or_else(absent)?;
            let new_shape = node_list(i, type_id, "new_shape", t.new_shape())?;
            counted(i, type_id, "num_dims", t.num_dims(), "new_shape", &new_shape)?;
            XNodeKind::StaticReshape { new_shape, input_id: t.input_id(), output_id: t.output_id(), flags: t.flags() }
        }
        nt::STATIC_MEAN => {
            let t = xn.xnode_union_as_xnnstatic_mean().ok_or_else(absent)?;
            let axes = node_list(i, type_id, "reduction_axes", t.reduction_axes())?;
            counted(i, type_id, "num_reduction_axes", t.num_reduction_axes(), "reduction_axes", &axes)?;
            XNodeKind::StaticMean {
                reduction_axes: axes,
                input_id: t.input_id(),
                output_id: t.output_id(),
                flags: t.flags(),
            }
        }
        nt::STATIC_CONSTANT_PAD => {
            let t = xn.xnode_union_as_xnnstatic_constant_pad().ok_or_else(absent)?;
            XNodeKind::StaticConstantPad {
                pre_paddings: node_list(i, type_id, "pre_paddings", t.pre_paddings())?,
                post_paddings: node_list(i, type_id, "post_paddings", t.post_paddings())?,
                padding_value: t.padding_value(),
                input_id: t.input_id(),
                output_id: t.output_id(),
                flags: t.flags(),
            }
        }
        nt::STATIC_SLICE => {
            let t = xn.xnode_union_as_xnnstatic_slice().ok_or_else(absent)?;
            let offsets = node_list(i, type_id, "offsets", t.offsets())?;
            let sizes = node_list(i, type_id, "sizes", t.sizes())?;
            counted(i, type_id, "num_dims", t.num_dims(), "offsets", &offsets)?;
            counted(i, type_id, "num_dims", t.num_dims(), "sizes", &sizes)?;
            XNodeKind::StaticSlice {
                offsets,
                sizes,
                input_id: t.input_id(),
                output_id: t.output_id(),
                flags: t.flags(),
            }
        }
        _ => return Err(unreadable(table, i)),
    })
}

/// Which values hold data at the current node: external inputs, constants, and outputs of
/// earlier nodes.
pub(super) struct Flow {
    ready: Vec<bool>,
}

impl Flow {
    pub(super) fn new(values: &[XValue], info: &ValueInfo) -> Flow {
        let mut ready = vec![false; values.len()];
        for v in values {
            if v.flags & VALUE_FLAG_EXTERNAL_INPUT != 0 || v.constant_buffer_idx != 0 {
                if let Some(i) = info.index_of(v.id_out) {
                    ready[i] = true;
                }
            }
        }
        Flow { ready }
    }
}

pub(super) fn check_node(
    i: usize,
    node: &XNode,
    values: &[XValue],
    info: &ValueInfo,
    flow: &mut Flow,
) -> Result<(), LoadError> {
    let node_type = node.kind.type_name();
    let (reads, writes) = (node.kind.reads(), node.kind.writes());
    let val = |field: &'static str, id: u32| -> Result<usize, LoadError> {
        info.index_of(id).ok_or(LoadError::UndefinedId { node: i, node_type, field, id })
    };
    for &(field, id) in reads.as_slice() {
        let vi = val(field, id)?;
        if !flow.ready[vi] {
            return Err(LoadError::UseBeforeDef { node: i, node_type, field, id });
        }
    }
    for &(field, id) in writes.as_slice() {
        let vi = val(field, id)?;
        if flow.ready[vi] {
            return Err(LoadError::Redefined { node: i, node_type, field, id });
        }
        flow.ready[vi] = true;
    }
    let v = |id: u32| &values[info.index_of(id).unwrap_or(0)];
    let bad = |field: &'static str, reason: String| Err(LoadError::BadNode { node: i, node_type, field, reason });
    let same = |field: &'static str, a: u32, b: u32| -> Result<(), LoadError> {
        let (ea, eb) = (v(a).datatype, v(b).datatype);
        if ea != eb {
            return Err(LoadError::DtypeMismatch { node: i, node_type, field, expected: ea.name(), found: eb.name() });
        }
        Ok(())
    };
    use XNodeKind::*;
    match &node.kind {
        Add { input1_id, input2_id, output_id, .. }
        | Subtract { input1_id, input2_id, output_id, .. }
        | Multiply { input1_id, input2_id, output_id, .. }
        | Div { input1_id, input2_id, output_id, .. } => {
            same("input2_id", *input1_id, *input2_id)?;
            same("output_id", *input1_id, *output_id)?;
        }
        Clamp { input_id, output_id, .. }
        | Square { input_id, output_id, .. }
        | ReciprocalSquareRoot { input_id, output_id, .. }
        | Copy { input_id, output_id, .. }
        | StaticReshape { input_id, output_id, .. } => same("output_id", *input_id, *output_id)?,
        StaticConstantPad { pre_paddings, post_paddings, input_id, .. } => {
            // One padding per input dim on each side (ExecuTorch's compiler reads the
            // input's rank of them).
            let rank = v(*input_id).dims.len();
            for (field, list) in [("pre_paddings", pre_paddings), ("post_paddings", post_paddings)] {
                if list.len() != rank {
                    return bad(field, format!("{} entries for a rank-{rank} input", list.len()));
                }
            }
        }
        StaticSlice { offsets, input_id, .. } => {
            // The count rule already tied offsets and sizes to num_dims.
            let rank = v(*input_id).dims.len();
            if offsets.len() != rank {
                return bad("offsets", format!("{} entries for a rank-{rank} input", offsets.len()));
            }
        }
        // Dataflow only: the runtime refuses these members as unsupported.
        Convert { .. }
        | Softmax { .. }
        | Sigmoid { .. }
        | Floor { .. }
        | SquareRoot { .. }
        | Ceiling { .. }
        | Hardswish { .. }
        | Negate { .. }
        | Abs { .. }
        | Log { .. }
        | Gelu { .. }
        | Tanh { .. }
        | Exp { .. }
        | Sin { .. }
        | Cos { .. }
        | Minimum { .. }
        | Maximum { .. }
        | PReLU { .. }
        | BatchMatrixMultiply { .. }
        | ConvTranspose2d(_)
        | AvgPooling2d(_)
        | MaxPooling2d(_)
        | Concatenate2(_)
        | Concatenate3(_)
        | Concatenate4(_)
        | Concatenate5(_)
        | StaticResizeBilinear2D { .. }
        | ArgMaxPooling2d { .. }
        | LeakyReLU { .. }
        | Elu { .. }
        | ScaledDotProductAttention { .. } => {}
        GlobalAvgPooling2d { input_id, output_id, .. } => {
            same("output_id", *input_id, *output_id)?;
            let (ri, ro) = (v(*input_id).dims.len(), v(*output_id).dims.len());
            if ri != 4 || ro != 4 {
                return bad(
                    "input_id",
                    format!("global average pooling needs 4-D NHWC input and output, got ranks {ri} and {ro}"),
                );
            }
        }
        StaticTranspose { perm, input_id, output_id, .. } => {
            same("output_id", *input_id, *output_id)?;
            let (din, dout) = (&v(*input_id).dims, &v(*output_id).dims);
            if perm.len() != din.len() {
                return bad("perm", format!("{} entries for a rank-{} input", perm.len(), din.len()));
            }
            let mut seen = [false; MAX_DIMS];
            for &p in perm {
                match seen.get_mut(p as usize).filter(|_| (p as usize) < perm.len()) {
                    Some(s) if !*s => *s = true,
                    _ => return bad("perm", format!("{perm:?} is not a permutation of 0..{}", perm.len())),
                }
            }
            let expect: Vec<u32> = perm.iter().map(|&p| din[p as usize]).collect();
            if &expect != dout {
                return bad(
                    "output_id",
                    format!("output dims {dout:?} are not the input dims {din:?} permuted by {perm:?}"),
                );
            }
        }
        StaticMean { reduction_axes, input_id, output_id, flags } => {
            same("output_id", *input_id, *output_id)?;
            let (rin, rout) = (v(*input_id).dims.len(), v(*output_id).dims.len());
            if reduction_axes.is_empty() {
                return bad("reduction_axes", "is empty".into());
            }
            if reduction_axes.windows(2).any(|w| w[0] >= w[1]) {
                return bad("reduction_axes", format!("{reduction_axes:?} are not strictly ascending"));
            }
            if reduction_axes.iter().any(|&a| a as usize >= rin) {
                return bad("reduction_axes", format!("{reduction_axes:?} out of range for rank {rin}"));
            }
            let keep = flags & crate::xnn::FLAG_KEEP_DIMS != 0;
            let want = if keep { rin } else { rin - reduction_axes.len() };
            // ExecuTorch serializes a 0-D tensor as [1] (notes 1.8), so a full reduction
            // without keep_dims has a [1] output.
            let scalar_as_1 = want == 0 && v(*output_id).dims == [1];
            if rout != want && !scalar_as_1 {
                return bad("output_id", format!("rank {rout}, expected {want} (keep_dims {keep})"));
            }
        }
        FullyConnected { input1_id, filter_id, output_id, .. } => {
            check_weighted(i, node_type, v(*input1_id), v(*output_id))?;
            if v(*filter_id).dims.len() != 2 {
                return bad("filter_id", format!("filter rank {} is not 2", v(*filter_id).dims.len()));
            }
        }
        Conv2d(c) | DepthwiseConv2d(c) => {
            check_weighted(i, node_type, v(c.input1_id), v(c.output_id))?;
            for (field, id) in [("input1_id", c.input1_id), ("filter_id", c.filter_id), ("output_id", c.output_id)] {
                if v(id).dims.len() != 4 {
                    return bad(field, format!("rank {} is not 4", v(id).dims.len()));
                }
            }
        }
    }
    Ok(())
}

/// Convolution / fully connected: the output has the input's dtype, except that a
/// dynamically quantized input produces a float output.
fn check_weighted(node: usize, node_type: &'static str, input: &XValue, output: &XValue) -> Result<(), LoadError> {
    let ok = input.datatype == output.datatype || (input.datatype == XnnDatatype::Qdint8 && is_float(output.datatype));
    if ok {
        Ok(())
    } else {
        Err(LoadError::DtypeMismatch {
            node,
            node_type,
            field: "output_id",
            expected: input.datatype.name(),
            found: output.datatype.name(),
        })
    }
}
