//! `XnnGraph` -> payload bytes: the `XH00` header, the `XN01` flatbuffer padded to 16, then
//! the constant region.
//!
//! Deterministic by construction: tables are built in one fixed walk of the graph, there is
//! no hash map anywhere, and the flatbuffers builder omits scalars equal to their schema
//! default, as flatc does. Objects are created in the order flatc's JSON parser creates them
//! for the JSON ExecuTorch feeds it, so the bytes are ExecuTorch's own: the tests rewrite
//! every real ExecuTorch 1.5.1 payload byte for byte, and match flatc 25.12.19 on our
//! schema's JSON.

use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

use super::fb;
use super::header::{align16, XnnHeader};
use crate::xnn::{ConstantDataOffset, QuantParams, XNode, XNodeKind, XValue, XnnGraph};

/// Serializes `graph` into an ExecuTorch XNNPACK delegate payload.
pub fn write(graph: &XnnGraph) -> Vec<u8> {
    let fb_bytes = write_flatbuffer(graph);
    let header = XnnHeader::for_sizes(fb_bytes.len() as u32, graph.constant_bytes.len() as u64);
    let padded = align16(fb_bytes.len()).unwrap_or(fb_bytes.len());
    let mut out = Vec::with_capacity(32 + padded + graph.constant_bytes.len());
    out.extend_from_slice(&header.to_bytes());
    out.extend_from_slice(&fb_bytes);
    out.resize(32 + padded, 0);
    out.extend_from_slice(&graph.constant_bytes);
    out
}

/// The bare `XN01` flatbuffer of `graph` (no header, no constant data).
pub fn write_flatbuffer(graph: &XnnGraph) -> Vec<u8> {
    let mut b = FlatBufferBuilder::with_capacity(1024);
    let version = b.create_string(&graph.version);

    // Objects are created in the order flatc meets them in ExecuTorch's JSON (children
    // before parents, fields in declaration order), so the layout matches flatc's.
    let nodes: Vec<_> = graph.nodes.iter().map(|n| write_node(&mut b, n)).collect();
    let xnodes = b.create_vector(&nodes);

    let value_order = value_order(graph);
    let values: Vec<_> = value_order.iter().map(|&i| write_value(&mut b, &graph.values[i])).collect();
    let xvalues = b.create_vector(&values);

    let input_ids = b.create_vector(&graph.input_ids);
    let output_ids = b.create_vector(&graph.output_ids);
    let constants: Vec<_> = graph.constant_data.iter().map(|c| write_constant(&mut b, c)).collect();
    let constant_data = b.create_vector(&constants);

    let root = fb::XNNGraph::create(
        &mut b,
        &fb::XNNGraphArgs {
            version: Some(version),
            xnodes: Some(xnodes),
            xvalues: Some(xvalues),
            num_externs: graph.num_externs,
            input_ids: Some(input_ids),
            output_ids: Some(output_ids),
            constant_data: Some(constant_data),
        },
    );
    b.finish(root, Some(fb::XNNGRAPH_IDENTIFIER));
    b.finished_data().to_vec()
}

/// The order in which values are emitted: their order in the graph (ExecuTorch's
/// first-definition order).
fn value_order(graph: &XnnGraph) -> Vec<usize> {
    #[cfg(feature = "mutants")]
    if crate::mutants::is_active(crate::mutants::Mutant::HashOrderValueIds) {
        // Seeded bug: a per-process randomly seeded hash map decides the order, so two
        // processes emit different bytes for the same graph.
        let map: std::collections::HashMap<u32, usize> =
            graph.values.iter().enumerate().map(|(i, v)| (v.id_out, i)).collect();
        return map.into_values().collect();
    }
    (0..graph.values.len()).collect()
}

/// The wire union type id of a node kind.
fn wire_type_id(kind: &XNodeKind) -> u8 {
    let id = kind.type_id();
    #[cfg(feature = "mutants")]
    if crate::mutants::is_active(crate::mutants::Mutant::StaticMeanMidUnion) {
        // Seeded bug: XNNStaticMean declared right after XNNStaticTranspose (id 5), so it
        // takes id 6 and every later member shifts up by one.
        let mean = crate::xnn::node_type_id("XNNStaticMean").unwrap_or(u8::MAX);
        return if id == mean {
            6
        } else if id >= 6 && id < mean {
            id + 1
        } else {
            id
        };
    }
    id
}

fn write_constant<'a>(b: &mut FlatBufferBuilder<'a>, c: &ConstantDataOffset) -> WIPOffset<fb::ConstantDataOffset<'a>> {
    // A key is written exactly when present, empty included: ExecuTorch's reserved entry 0
    // carries a present-but-empty key (flatc writes empty strings), which the lowering
    // mirrors as `Some("")`.
    let key = c.named_key.as_deref().map(|k| b.create_string(k));
    fb::ConstantDataOffset::create(b, &fb::ConstantDataOffsetArgs { offset: c.offset, size: c.size, named_key: key })
}

fn write_tensor<'a>(b: &mut FlatBufferBuilder<'a>, v: &XValue) -> WIPOffset<fb::XNNTensorValue<'a>> {
    let dims = b.create_vector(&v.dims);
    fb::XNNTensorValue::create(
        b,
        &fb::XNNTensorValueArgs {
            datatype: fb::XNNDatatype(v.datatype as i16),
            num_dims: v.dims.len() as u32,
            dims: Some(dims),
            constant_buffer_idx: v.constant_buffer_idx,
            external_id: v.external_id,
            flags: v.flags,
            id_out: v.id_out,
        },
    )
}

fn write_value<'a>(b: &mut FlatBufferBuilder<'a>, v: &XValue) -> WIPOffset<fb::XValue<'a>> {
    let (ty, off): (fb::XValueUnion, WIPOffset<UnionWIPOffset>) = match &v.quant {
        None => (fb::XValueUnion::XNNTensorValue, write_tensor(b, v).as_union_value()),
        Some(q) => {
            let tensor = write_tensor(b, v);
            let (qty, qoff) = write_quant(b, q);
            let qt = fb::XNNQuantizedTensorValue::create(
                b,
                &fb::XNNQuantizedTensorValueArgs {
                    tensor_value: Some(tensor),
                    quant_params_type: qty,
                    quant_params: (qty.0 != 0).then_some(qoff),
                },
            );
            (fb::XValueUnion::XNNQuantizedTensorValue, qt.as_union_value())
        }
    };
    fb::XValue::create(b, &fb::XValueArgs { xvalue_union_type: ty, xvalue_union: Some(off) })
}

fn write_quant<'a>(b: &mut FlatBufferBuilder<'a>, q: &QuantParams) -> (fb::XNNQuantParams, WIPOffset<UnionWIPOffset>) {
    match q {
        QuantParams::PerTensor { scale, zero_point } => (
            fb::XNNQuantParams::PerTensorQuant,
            fb::PerTensorQuant::create(b, &fb::PerTensorQuantArgs { scale: *scale, zero_point: *zero_point })
                .as_union_value(),
        ),
        QuantParams::PerChannel { scale, channel_dim, scale_buffer_idx, num_scales } => {
            let s = b.create_vector(scale);
            let t = fb::PerChannelQuant::create(
                b,
                &fb::PerChannelQuantArgs {
                    scale: Some(s),
                    channel_dim: *channel_dim,
                    scale_buffer_idx: *scale_buffer_idx,
                    num_scales: *num_scales,
                },
            );
            (fb::XNNQuantParams::PerChannelQuant, t.as_union_value())
        }
        // Another member kept only by its type id: an empty table of that type.
        QuantParams::Other { type_id } => (fb::XNNQuantParams(*type_id), empty_table(b)),
    }
}

fn empty_table(b: &mut FlatBufferBuilder<'_>) -> WIPOffset<UnionWIPOffset> {
    let start = b.start_table();
    let t: WIPOffset<flatbuffers::TableFinishedWIPOffset> = b.end_table(start);
    WIPOffset::new(t.value())
}

fn node1x1(b: &mut FlatBufferBuilder<'_>, input_id: u32, output_id: u32, flags: u32) -> WIPOffset<UnionWIPOffset> {
    fb::_XNNNode1x1::create(b, &fb::_XNNNode1x1Args { input_id, output_id, flags }).as_union_value()
}

fn node2x1(
    b: &mut FlatBufferBuilder<'_>,
    input1_id: u32,
    input2_id: u32,
    output_id: u32,
    flags: u32,
) -> WIPOffset<UnionWIPOffset> {
    fb::_XNNNode2x1::create(b, &fb::_XNNNode2x1Args { input1_id, input2_id, output_id, flags }).as_union_value()
}

fn write_node<'a>(b: &mut FlatBufferBuilder<'a>, n: &XNode) -> WIPOffset<fb::XNode<'a>> {
    use XNodeKind::*;
    let payload = match &n.kind {
        Add { input1_id, input2_id, output_id, flags }
        | Subtract { input1_id, input2_id, output_id, flags }
        | Multiply { input1_id, input2_id, output_id, flags }
        | Div { input1_id, input2_id, output_id, flags } => node2x1(b, *input1_id, *input2_id, *output_id, *flags),
        FullyConnected { input1_id, filter_id, bias_id, output_id, flags } => fb::XNNFullyConnected::create(
            b,
            &fb::XNNFullyConnectedArgs {
                input1_id: *input1_id,
                filter_id: *filter_id,
                bias_id: *bias_id,
                output_id: *output_id,
                flags: *flags,
            },
        )
        .as_union_value(),
        Clamp { input_id, output_id, flags }
        | Square { input_id, output_id, flags }
        | ReciprocalSquareRoot { input_id, output_id, flags }
        | Convert { input_id, output_id, flags }
        | Copy { input_id, output_id, flags }
        | GlobalAvgPooling2d { input_id, output_id, flags } => node1x1(b, *input_id, *output_id, *flags),
        StaticTranspose { perm, input_id, output_id, flags } => {
            let p = b.create_vector(perm);
            fb::XNNStaticTranspose::create(
                b,
                &fb::XNNStaticTransposeArgs {
                    num_dims: perm.len() as u32,
                    perm: Some(p),
                    input_id: *input_id,
                    output_id: *output_id,
                    flags: *flags,
                },
            )
            .as_union_value()
        }
        StaticReshape { new_shape, input_id, output_id, flags } => {
            let s = b.create_vector(new_shape);
            fb::XNNStaticReshape::create(
                b,
                &fb::XNNStaticReshapeArgs {
                    num_dims: new_shape.len() as u32,
                    new_shape: Some(s),
                    input_id: *input_id,
                    output_id: *output_id,
                    flags: *flags,
                },
            )
            .as_union_value()
        }
        Conv2d(c) | DepthwiseConv2d(c) => fb::_XNNNodeConv::create(
            b,
            &fb::_XNNNodeConvArgs {
                padding_top: c.padding_top,
                padding_right: c.padding_right,
                padding_bottom: c.padding_bottom,
                padding_left: c.padding_left,
                kernel_height: c.kernel_height,
                kernel_width: c.kernel_width,
                subsampling_height: c.subsampling_height,
                subsampling_width: c.subsampling_width,
                dilation_height: c.dilation_height,
                dilation_width: c.dilation_width,
                group_input_channels: c.group_input_channels,
                group_output_channels: c.group_output_channels,
                groups: c.groups,
                adjustment_height: c.adjustment_height,
                adjustment_width: c.adjustment_width,
                input1_id: c.input1_id,
                filter_id: c.filter_id,
                bias_id: c.bias_id,
                output_id: c.output_id,
                flags: c.flags,
            },
        )
        .as_union_value(),
        StaticMean { reduction_axes, input_id, output_id, flags } => {
            let a = b.create_vector(reduction_axes);
            fb::_XNNStaticReduce::create(
                b,
                &fb::_XNNStaticReduceArgs {
                    num_reduction_axes: reduction_axes.len() as u32,
                    reduction_axes: Some(a),
                    input_id: *input_id,
                    output_id: *output_id,
                    flags: *flags,
                },
            )
            .as_union_value()
        }
        // A member kept only by its type id: an empty table of that type (every field at
        // its default), which decodes back to the same `Other`.
        Other { .. } => empty_table(b),
    };
    let mm = n
        .output_min_max
        .map(|(output_min, output_max)| fb::OutputMinMax::create(b, &fb::OutputMinMaxArgs { output_min, output_max }));
    let type_id = wire_type_id(&n.kind);
    fb::XNode::create(
        b,
        &fb::XNodeArgs {
            xnode_union_type: fb::XNodeUnion(type_id),
            // Type NONE has no value (the verifier requires both or neither).
            xnode_union: (type_id != 0).then_some(payload),
            debug_handle: n.debug_handle,
            output_min_max: mm,
        },
    )
}
