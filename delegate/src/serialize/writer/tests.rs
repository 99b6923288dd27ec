//! The encoder against the generated `FlatBufferBuilder` API on random graphs of every
//! node and quant params member.

use super::{encode, write, write_flatbuffer};
use crate::xnn::{ConstantDataOffset, QuantParams, XNode, XValue, XnnDatatype, XnnGraph, NODE_TYPE_NAMES};

/// A small deterministic generator (xorshift), so the cases need no extra dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Mostly small ids, sometimes 0 (the default, omitted) or the invalid id.
    fn id(&mut self) -> u32 {
        match self.below(8) {
            0 => 0,
            1 => u32::MAX,
            2 => self.next() as u32,
            _ => self.below(40) as u32,
        }
    }
    fn f32(&mut self) -> f32 {
        match self.below(8) {
            0 => 0.0,
            1 => -0.0,
            2 => f32::NAN,
            3 => f32::INFINITY,
            4 => f32::NEG_INFINITY,
            _ => f32::from_bits(self.next() as u32),
        }
    }
    fn list(&mut self) -> Vec<u32> {
        (0..self.below(7)).map(|_| self.id()).collect()
    }
}

fn random_graph(r: &mut Rng) -> XnnGraph {
    let mut g = XnnGraph {
        version: ["", "0", "1.5.1-xyz"][r.below(3) as usize].to_string(),
        num_externs: r.id(),
        ..Default::default()
    };
    for _ in 0..r.below(12) {
        let type_id = 1 + r.below(NODE_TYPE_NAMES.len() as u64) as u8;
        let r = std::cell::RefCell::new(&mut *r);
        let kind =
            crate::xnn::kind_with(type_id, &mut || r.borrow_mut().id(), &mut || r.borrow_mut().list(), &mut || {
                r.borrow_mut().f32()
            });
        let r = r.into_inner();
        let output_min_max = (r.below(2) == 0).then(|| (r.f32(), r.f32()));
        g.nodes.push(XNode { kind, debug_handle: r.id(), output_min_max });
    }
    for _ in 0..r.below(16) {
        let quant = match r.below(6) {
            0 | 1 => None,
            2 => Some(QuantParams::PerTensor { scale: r.f32(), zero_point: r.id() as i32 }),
            3 => Some(QuantParams::PerChannel {
                scale: (0..r.below(5)).map(|_| r.f32()).collect(),
                channel_dim: r.id() as i32,
                scale_buffer_idx: r.id(),
                num_scales: r.id(),
            }),
            4 => Some(QuantParams::PerTokenDynamic { num_nonbatch_dims: r.id() as i32 }),
            _ => Some(QuantParams::PerChannelGroup {
                scale: (0..r.below(5)).map(|_| r.f32()).collect(),
                channel_dim: r.id() as i32,
                group_size: r.id() as i32,
                scale_buffer_idx: r.id(),
                num_scales: r.id(),
            }),
        };
        let datatype = XnnDatatype::from_i16(r.below(15) as i16).unwrap();
        g.values.push(XValue {
            datatype,
            dims: r.list(),
            constant_buffer_idx: r.id(),
            external_id: r.id(),
            flags: r.id(),
            id_out: r.id(),
            quant,
        });
    }
    g.input_ids = r.list();
    g.output_ids = r.list();
    for _ in 0..r.below(5) {
        let offset = if r.below(3) == 0 { u64::MAX } else { r.next() % 100_000 };
        let named_key = match r.below(3) {
            0 => None,
            1 => Some(String::new()),
            _ => Some(format!("key-{}", r.below(1000))),
        };
        g.constant_data.push(ConstantDataOffset { offset, size: r.next() % 3, named_key });
    }
    g.constant_bytes = (0..r.below(40)).map(|_| r.next() as u8).collect();
    g
}

#[test]
fn encoder_matches_the_flatbuffers_builder_byte_for_byte() {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    for case in 0..2000 {
        let g = random_graph(&mut r);
        let want = builder_reference::write_flatbuffer(&g);
        let got = write_flatbuffer(&g);
        // Starting from an empty buffer, the encoder grows many times on the way and
        // must still make the same bytes.
        assert_eq!(encode(&g, 0).bytes(), &got[..], "case {case}: growing from an empty buffer");
        let first = got.iter().zip(&want).position(|(a, b)| a != b);
        assert!(got == want, "case {case}: differs at byte {first:?} ({} vs {} bytes)\n{g:?}", got.len(), want.len());
        // The payload is the same flatbuffer behind the header, padded, then the constants.
        let payload = write(&g);
        assert_eq!(&payload[32..32 + want.len()], &want[..], "case {case}");
        assert_eq!(&payload[payload.len() - g.constant_bytes.len()..], &g.constant_bytes[..], "case {case}");
    }
}

#[test]
fn encoder_matches_the_builder_on_an_empty_graph() {
    let g = XnnGraph::default();
    assert_eq!(write_flatbuffer(&g), builder_reference::write_flatbuffer(&g));
}

/// The same walk through the generated `FlatBufferBuilder` API, as the writer was before
/// [`Enc`]: the tests check that both produce the same bytes.
mod builder_reference {
    use super::super::value_order;
    use crate::serialize::fb;
    use crate::xnn::{ConstantDataOffset, QuantParams, XNode, XNodeKind, XValue, XnnGraph};
    use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

    pub fn write_flatbuffer(graph: &XnnGraph) -> Vec<u8> {
        let mut b = FlatBufferBuilder::with_capacity(1024);
        let version = b.create_string(&graph.version);
        let nodes: Vec<_> = graph.nodes.iter().map(|n| write_node(&mut b, n)).collect();
        let xnodes = b.create_vector(&nodes);
        let values: Vec<_> = value_order(graph).iter().map(|&i| write_value(&mut b, &graph.values[i])).collect();
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

    fn write_constant<'a>(
        b: &mut FlatBufferBuilder<'a>,
        c: &ConstantDataOffset,
    ) -> WIPOffset<fb::ConstantDataOffset<'a>> {
        // A key is written exactly when present, empty included: ExecuTorch's reserved entry 0
        // carries a present-but-empty key (flatc writes empty strings), which the lowering
        // mirrors as `Some("")`.
        let key = c.named_key.as_deref().map(|k| b.create_string(k));
        fb::ConstantDataOffset::create(
            b,
            &fb::ConstantDataOffsetArgs { offset: c.offset, size: c.size, named_key: key },
        )
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

    fn write_quant<'a>(
        b: &mut FlatBufferBuilder<'a>,
        q: &QuantParams,
    ) -> (fb::XNNQuantParams, WIPOffset<UnionWIPOffset>) {
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
            QuantParams::PerTokenDynamic { num_nonbatch_dims } => (
                fb::XNNQuantParams::PerTokenDynamicQuant,
                fb::PerTokenDynamicQuant::create(
                    b,
                    &fb::PerTokenDynamicQuantArgs { num_nonbatch_dims: *num_nonbatch_dims },
                )
                .as_union_value(),
            ),
            QuantParams::PerChannelGroup { scale, channel_dim, group_size, scale_buffer_idx, num_scales } => {
                let s = b.create_vector(scale);
                let t = fb::PerChannelGroupQuant::create(
                    b,
                    &fb::PerChannelGroupQuantArgs {
                        scale: Some(s),
                        channel_dim: *channel_dim,
                        group_size: *group_size,
                        scale_buffer_idx: *scale_buffer_idx,
                        num_scales: *num_scales,
                    },
                );
                (fb::XNNQuantParams::PerChannelGroupQuant, t.as_union_value())
            }
        }
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

    fn conv(b: &mut FlatBufferBuilder<'_>, c: &crate::xnn::ConvNode) -> WIPOffset<UnionWIPOffset> {
        fb::_XNNNodeConv::create(
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
        .as_union_value()
    }

    fn pooling(b: &mut FlatBufferBuilder<'_>, p: &crate::xnn::PoolingNode) -> WIPOffset<UnionWIPOffset> {
        fb::_XNNPooling2D::create(
            b,
            &fb::_XNNPooling2DArgs {
                padding_top: p.padding_top,
                padding_right: p.padding_right,
                padding_bottom: p.padding_bottom,
                padding_left: p.padding_left,
                pooling_height: p.pooling_height,
                pooling_width: p.pooling_width,
                stride_height: p.stride_height,
                stride_width: p.stride_width,
                dilation_height: p.dilation_height,
                dilation_width: p.dilation_width,
                input_id: p.input_id,
                output_id: p.output_id,
                flags: p.flags,
            },
        )
        .as_union_value()
    }

    fn cat(b: &mut FlatBufferBuilder<'_>, c: &crate::xnn::CatNode) -> WIPOffset<UnionWIPOffset> {
        fb::_XNNCat::create(
            b,
            &fb::_XNNCatArgs {
                axis: c.axis,
                input1_id: c.input1_id,
                input2_id: c.input2_id,
                input3_id: c.input3_id,
                input4_id: c.input4_id,
                output_id: c.output_id,
                flags: c.flags,
                input5_id: c.input5_id,
            },
        )
        .as_union_value()
    }

    fn write_node<'a>(b: &mut FlatBufferBuilder<'a>, n: &XNode) -> WIPOffset<fb::XNode<'a>> {
        use XNodeKind::*;
        let payload = match &n.kind {
            Add { input1_id, input2_id, output_id, flags }
            | Subtract { input1_id, input2_id, output_id, flags }
            | Multiply { input1_id, input2_id, output_id, flags }
            | Div { input1_id, input2_id, output_id, flags }
            | Minimum { input1_id, input2_id, output_id, flags }
            | Maximum { input1_id, input2_id, output_id, flags }
            | PReLU { input1_id, input2_id, output_id, flags }
            | BatchMatrixMultiply { input1_id, input2_id, output_id, flags } => {
                node2x1(b, *input1_id, *input2_id, *output_id, *flags)
            }
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
            | Cos { input_id, output_id, flags } => node1x1(b, *input_id, *output_id, *flags),
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
            Conv2d(c) | DepthwiseConv2d(c) | ConvTranspose2d(c) => conv(b, c),
            AvgPooling2d(p) | MaxPooling2d(p) => pooling(b, p),
            Concatenate2(c) | Concatenate3(c) | Concatenate4(c) | Concatenate5(c) => cat(b, c),
            StaticResizeBilinear2D { new_height, new_width, input_id, output_id, flags } => {
                fb::XNNStaticResizeBilinear2D::create(
                    b,
                    &fb::XNNStaticResizeBilinear2DArgs {
                        new_height: *new_height,
                        new_width: *new_width,
                        input_id: *input_id,
                        output_id: *output_id,
                        flags: *flags,
                    },
                )
                .as_union_value()
            }
            StaticConstantPad { pre_paddings, post_paddings, padding_value, input_id, output_id, flags } => {
                let pre = b.create_vector(pre_paddings);
                let post = b.create_vector(post_paddings);
                fb::XNNStaticConstantPad::create(
                    b,
                    &fb::XNNStaticConstantPadArgs {
                        pre_paddings: Some(pre),
                        post_paddings: Some(post),
                        padding_value: *padding_value,
                        input_id: *input_id,
                        output_id: *output_id,
                        flags: *flags,
                    },
                )
                .as_union_value()
            }
            StaticSlice { offsets, sizes, input_id, output_id, flags } => {
                let o = b.create_vector(offsets);
                let s = b.create_vector(sizes);
                fb::XNNStaticSlice::create(
                    b,
                    &fb::XNNStaticSliceArgs {
                        num_dims: offsets.len() as u32,
                        offsets: Some(o),
                        sizes: Some(s),
                        input_id: *input_id,
                        output_id: *output_id,
                        flags: *flags,
                    },
                )
                .as_union_value()
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
            } => fb::XNNArgMaxPooling2d::create(
                b,
                &fb::XNNArgMaxPooling2dArgs {
                    padding_top: *padding_top,
                    padding_right: *padding_right,
                    padding_bottom: *padding_bottom,
                    padding_left: *padding_left,
                    pooling_height: *pooling_height,
                    pooling_width: *pooling_width,
                    input_id: *input_id,
                    output_value_id: *output_value_id,
                    output_index_id: *output_index_id,
                    flags: *flags,
                },
            )
            .as_union_value(),
            LeakyReLU { negative_slope, input_id, output_id, flags } => fb::XNNLeakyReLU::create(
                b,
                &fb::XNNLeakyReLUArgs {
                    negative_slope: *negative_slope,
                    input_id: *input_id,
                    output_id: *output_id,
                    flags: *flags,
                },
            )
            .as_union_value(),
            Elu { alpha, input_id, output_id, flags } => fb::XNNELU::create(
                b,
                &fb::XNNELUArgs { alpha: *alpha, input_id: *input_id, output_id: *output_id, flags: *flags },
            )
            .as_union_value(),
            ScaledDotProductAttention { query_id, key_id, value_id, scale_id, mask_id, output_id, flags } => {
                fb::XNNScaledDotProductAttention::create(
                    b,
                    &fb::XNNScaledDotProductAttentionArgs {
                        query_id: *query_id,
                        key_id: *key_id,
                        value_id: *value_id,
                        scale_id: *scale_id,
                        mask_id: *mask_id,
                        output_id: *output_id,
                        flags: *flags,
                    },
                )
                .as_union_value()
            }
        };
        let mm = n.output_min_max.map(|(output_min, output_max)| {
            fb::OutputMinMax::create(b, &fb::OutputMinMaxArgs { output_min, output_max })
        });
        let type_id = super::super::wire_type_id(&n.kind);
        fb::XNode::create(
            b,
            &fb::XNodeArgs {
                xnode_union_type: fb::XNodeUnion(type_id),
                xnode_union: Some(payload),
                debug_handle: n.debug_handle,
                output_min_max: mm,
            },
        )
    }
}
