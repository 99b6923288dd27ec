//! `XNode` and every member of the schema's `XNodeUnion`, each with all of its table's
//! fields, so that a payload decodes and re-serializes without losing any of them.
//!
//! Over 700 lines on purpose: one table-like file models all 48 union members side by side.

use serde::{Deserialize, Serialize};

use super::INVALID_VALUE_ID;

/// `XNodeUnion` member names in schema order: the union type id of `NODE_TYPE_NAMES[i]`
/// is `i + 1` (0 is NONE). `XNNStaticMean` is appended last, as the change did.
pub const NODE_TYPE_NAMES: [&str; 48] = [
    "XNNAdd",
    "XNNFullyConnected",
    "XNNSoftmax",
    "XNNSigmoid",
    "XNNStaticTranspose",
    "XNNClamp",
    "XNNConv2d",
    "XNNDiv",
    "XNNStaticResizeBilinear2D",
    "XNNStaticConstantPad",
    "XNNAvgPooling2d",
    "XNNMinimum",
    "XNNDepthwiseConv2d",
    "XNNMaxPooling2d",
    "XNNMultiply",
    "XNNSubtract",
    "XNNFloor",
    "XNNConvert",
    "XNNGlobalAvgPooling2d",
    "XNNStaticReshape",
    "XNNArgMaxPooling2d",
    "XNNSquareRoot",
    "XNNCeiling",
    "XNNHardswish",
    "XNNLeakyReLU",
    "XNNMaximum",
    "XNNNegate",
    "XNNSquare",
    "XNNELU",
    "XNNAbs",
    "XNNPReLU",
    "XNNConcatenate2",
    "XNNConcatenate3",
    "XNNConcatenate4",
    "XNNStaticSlice",
    "XNNScaledDotProductAttention",
    "XNNBatchMatrixMultiply",
    "XNNConcatenate5",
    "XNNConvTranspose2d",
    "XNNReciprocalSquareRoot",
    "XNNLog",
    "XNNGelu",
    "XNNTanh",
    "XNNExp",
    "XNNSin",
    "XNNCopy",
    "XNNCos",
    "XNNStaticMean",
];

/// Union type ids of every member: the position of its name in [`NODE_TYPE_NAMES`], plus
/// one (a test checks each against the table and the generated code).
pub mod node_type {
    pub const ADD: u8 = 1;
    pub const FULLY_CONNECTED: u8 = 2;
    pub const SOFTMAX: u8 = 3;
    pub const SIGMOID: u8 = 4;
    pub const STATIC_TRANSPOSE: u8 = 5;
    pub const CLAMP: u8 = 6;
    pub const CONV_2D: u8 = 7;
    pub const DIV: u8 = 8;
    pub const STATIC_RESIZE_BILINEAR_2D: u8 = 9;
    pub const STATIC_CONSTANT_PAD: u8 = 10;
    pub const AVG_POOLING_2D: u8 = 11;
    pub const MINIMUM: u8 = 12;
    pub const DEPTHWISE_CONV_2D: u8 = 13;
    pub const MAX_POOLING_2D: u8 = 14;
    pub const MULTIPLY: u8 = 15;
    pub const SUBTRACT: u8 = 16;
    pub const FLOOR: u8 = 17;
    pub const CONVERT: u8 = 18;
    pub const GLOBAL_AVG_POOLING_2D: u8 = 19;
    pub const STATIC_RESHAPE: u8 = 20;
    pub const ARG_MAX_POOLING_2D: u8 = 21;
    pub const SQUARE_ROOT: u8 = 22;
    pub const CEILING: u8 = 23;
    pub const HARDSWISH: u8 = 24;
    pub const LEAKY_RELU: u8 = 25;
    pub const MAXIMUM: u8 = 26;
    pub const NEGATE: u8 = 27;
    pub const SQUARE: u8 = 28;
    pub const ELU: u8 = 29;
    pub const ABS: u8 = 30;
    pub const PRELU: u8 = 31;
    pub const CONCATENATE_2: u8 = 32;
    pub const CONCATENATE_3: u8 = 33;
    pub const CONCATENATE_4: u8 = 34;
    pub const STATIC_SLICE: u8 = 35;
    pub const SCALED_DOT_PRODUCT_ATTENTION: u8 = 36;
    pub const BATCH_MATRIX_MULTIPLY: u8 = 37;
    pub const CONCATENATE_5: u8 = 38;
    pub const CONV_TRANSPOSE_2D: u8 = 39;
    pub const RECIPROCAL_SQUARE_ROOT: u8 = 40;
    pub const LOG: u8 = 41;
    pub const GELU: u8 = 42;
    pub const TANH: u8 = 43;
    pub const EXP: u8 = 44;
    pub const SIN: u8 = 45;
    pub const COPY: u8 = 46;
    pub const COS: u8 = 47;
    pub const STATIC_MEAN: u8 = 48;
}

/// The union type id of a node type name, or `None` for a name the schema lacks.
pub fn node_type_id(name: &str) -> Option<u8> {
    NODE_TYPE_NAMES.iter().position(|n| *n == name).map(|i| i as u8 + 1)
}

/// The node type name of a union type id, or `None` when out of range.
pub fn node_type_name(id: u8) -> Option<&'static str> {
    (id as usize).checked_sub(1).and_then(|i| NODE_TYPE_NAMES.get(i)).copied()
}

/// `_XNNNodeConv` fields (Conv2d, DepthwiseConv2d, ConvTranspose2d).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvNode {
    pub padding_top: u32,
    pub padding_right: u32,
    pub padding_bottom: u32,
    pub padding_left: u32,
    pub kernel_height: u32,
    pub kernel_width: u32,
    pub subsampling_height: u32,
    pub subsampling_width: u32,
    pub dilation_height: u32,
    pub dilation_width: u32,
    pub group_input_channels: u32,
    pub group_output_channels: u32,
    pub groups: u32,
    pub adjustment_height: u32,
    pub adjustment_width: u32,
    pub input1_id: u32,
    pub filter_id: u32,
    pub bias_id: u32,
    pub output_id: u32,
    pub flags: u32,
}

/// `_XNNPooling2D` fields (AvgPooling2d, MaxPooling2d).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolingNode {
    pub padding_top: u32,
    pub padding_right: u32,
    pub padding_bottom: u32,
    pub padding_left: u32,
    pub pooling_height: u32,
    pub pooling_width: u32,
    pub stride_height: u32,
    pub stride_width: u32,
    pub dilation_height: u32,
    pub dilation_width: u32,
    pub input_id: u32,
    pub output_id: u32,
    pub flags: u32,
}

/// `_XNNCat` fields (Concatenate2 to Concatenate5). Every member has all five input
/// fields; `ConcatenateN` reads the first `N` and the others are kept as they were.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatNode {
    pub axis: u32,
    pub input1_id: u32,
    pub input2_id: u32,
    pub input3_id: u32,
    pub input4_id: u32,
    pub output_id: u32,
    pub flags: u32,
    pub input5_id: u32,
}

/// One node: a variant per `XNodeUnion` member (named as the member without `XNN`), each
/// with every field of its table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum XNodeKind {
    Add {
        input1_id: u32,
        input2_id: u32,
        output_id: u32,
        flags: u32,
    },
    Subtract {
        input1_id: u32,
        input2_id: u32,
        output_id: u32,
        flags: u32,
    },
    Multiply {
        input1_id: u32,
        input2_id: u32,
        output_id: u32,
        flags: u32,
    },
    Div {
        input1_id: u32,
        input2_id: u32,
        output_id: u32,
        flags: u32,
    },
    FullyConnected {
        input1_id: u32,
        filter_id: u32,
        bias_id: u32,
        output_id: u32,
        flags: u32,
    },
    Clamp {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Square {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    ReciprocalSquareRoot {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Convert {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Copy {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    GlobalAvgPooling2d {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    /// `num_dims` is `perm.len()` (the loader refuses a payload where they differ).
    StaticTranspose {
        perm: Vec<u32>,
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    /// `num_dims` is `new_shape.len()`.
    StaticReshape {
        new_shape: Vec<u32>,
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Conv2d(ConvNode),
    DepthwiseConv2d(ConvNode),
    /// The change's new node: a mean over sorted, unique, non-negative `reduction_axes`
    /// (`num_reduction_axes` is their count).
    StaticMean {
        reduction_axes: Vec<u32>,
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    // The members below are decoded, written and inspected, and the runtime refuses them
    // as unsupported.
    Softmax {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Sigmoid {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Floor {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    SquareRoot {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Ceiling {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Hardswish {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Negate {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Abs {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Log {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Gelu {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Tanh {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Exp {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Sin {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Cos {
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Minimum {
        input1_id: u32,
        input2_id: u32,
        output_id: u32,
        flags: u32,
    },
    Maximum {
        input1_id: u32,
        input2_id: u32,
        output_id: u32,
        flags: u32,
    },
    /// `input2_id` is the slope.
    PReLU {
        input1_id: u32,
        input2_id: u32,
        output_id: u32,
        flags: u32,
    },
    BatchMatrixMultiply {
        input1_id: u32,
        input2_id: u32,
        output_id: u32,
        flags: u32,
    },
    ConvTranspose2d(ConvNode),
    AvgPooling2d(PoolingNode),
    MaxPooling2d(PoolingNode),
    Concatenate2(CatNode),
    Concatenate3(CatNode),
    Concatenate4(CatNode),
    Concatenate5(CatNode),
    StaticResizeBilinear2D {
        new_height: u32,
        new_width: u32,
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    /// One pre and one post padding per input dim.
    StaticConstantPad {
        pre_paddings: Vec<u32>,
        post_paddings: Vec<u32>,
        padding_value: f32,
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    /// `num_dims` is the common length of `offsets` and `sizes`.
    StaticSlice {
        offsets: Vec<u32>,
        sizes: Vec<u32>,
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    ArgMaxPooling2d {
        padding_top: u32,
        padding_right: u32,
        padding_bottom: u32,
        padding_left: u32,
        pooling_height: u32,
        pooling_width: u32,
        input_id: u32,
        output_value_id: u32,
        output_index_id: u32,
        flags: u32,
    },
    LeakyReLU {
        negative_slope: f32,
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Elu {
        alpha: f32,
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    /// `mask_id` may be `XNN_INVALID_VALUE_ID` (no mask).
    ScaledDotProductAttention {
        query_id: u32,
        key_id: u32,
        value_id: u32,
        scale_id: u32,
        mask_id: u32,
        output_id: u32,
        flags: u32,
    },
}

/// A node's value ids with the schema names of their fields, inline: at most five (the
/// most any member reads), because every node of every payload builds two.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FieldIds {
    len: usize,
    items: [(&'static str, u32); 5],
}

impl FieldIds {
    fn of(items: &[(&'static str, u32)]) -> FieldIds {
        let mut ids = FieldIds::default();
        for &(f, id) in items {
            ids.push(f, id);
        }
        ids
    }

    fn push(&mut self, field: &'static str, id: u32) {
        self.items[self.len] = (field, id);
        self.len += 1;
    }

    /// Pushes an optional id unless it is `XNN_INVALID_VALUE_ID`.
    fn push_opt(mut self, field: &'static str, id: u32) -> FieldIds {
        if id != INVALID_VALUE_ID {
            self.push(field, id);
        }
        self
    }

    /// (field name, value id) pairs in the schema's field order.
    pub fn as_slice(&self) -> &[(&'static str, u32)] {
        &self.items[..self.len]
    }

    /// The value ids alone.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.as_slice().iter().map(|&(_, id)| id)
    }
}

impl XNodeKind {
    /// The union type id this node serializes with; its name is [`type_name`](Self::type_name)
    /// (a test checks every variant's name against the member the id names).
    pub fn type_id(&self) -> u8 {
        use node_type::*;
        use XNodeKind::*;
        match self {
            Add { .. } => ADD,
            FullyConnected { .. } => FULLY_CONNECTED,
            Softmax { .. } => SOFTMAX,
            Sigmoid { .. } => SIGMOID,
            StaticTranspose { .. } => STATIC_TRANSPOSE,
            Clamp { .. } => CLAMP,
            Conv2d(_) => CONV_2D,
            Div { .. } => DIV,
            StaticResizeBilinear2D { .. } => STATIC_RESIZE_BILINEAR_2D,
            StaticConstantPad { .. } => STATIC_CONSTANT_PAD,
            AvgPooling2d(_) => AVG_POOLING_2D,
            Minimum { .. } => MINIMUM,
            DepthwiseConv2d(_) => DEPTHWISE_CONV_2D,
            MaxPooling2d(_) => MAX_POOLING_2D,
            Multiply { .. } => MULTIPLY,
            Subtract { .. } => SUBTRACT,
            Floor { .. } => FLOOR,
            Convert { .. } => CONVERT,
            GlobalAvgPooling2d { .. } => GLOBAL_AVG_POOLING_2D,
            StaticReshape { .. } => STATIC_RESHAPE,
            ArgMaxPooling2d { .. } => ARG_MAX_POOLING_2D,
            SquareRoot { .. } => SQUARE_ROOT,
            Ceiling { .. } => CEILING,
            Hardswish { .. } => HARDSWISH,
            LeakyReLU { .. } => LEAKY_RELU,
            Maximum { .. } => MAXIMUM,
            Negate { .. } => NEGATE,
            Square { .. } => SQUARE,
            Elu { .. } => ELU,
            Abs { .. } => ABS,
            PReLU { .. } => PRELU,
            Concatenate2(_) => CONCATENATE_2,
            Concatenate3(_) => CONCATENATE_3,
            Concatenate4(_) => CONCATENATE_4,
            StaticSlice { .. } => STATIC_SLICE,
            ScaledDotProductAttention { .. } => SCALED_DOT_PRODUCT_ATTENTION,
            BatchMatrixMultiply { .. } => BATCH_MATRIX_MULTIPLY,
            Concatenate5(_) => CONCATENATE_5,
            ConvTranspose2d(_) => CONV_TRANSPOSE_2D,
            ReciprocalSquareRoot { .. } => RECIPROCAL_SQUARE_ROOT,
            Log { .. } => LOG,
            Gelu { .. } => GELU,
            Tanh { .. } => TANH,
            Exp { .. } => EXP,
            Sin { .. } => SIN,
            Copy { .. } => COPY,
            Cos { .. } => COS,
            StaticMean { .. } => STATIC_MEAN,
        }
    }

    /// The schema's union member name (`XNNAdd`, ...).
    pub fn type_name(&self) -> &'static str {
        node_type_name(self.type_id()).unwrap_or("")
    }

    /// The value ids this node reads, with their field names, in schema order; optional
    /// ids (`bias_id`, `mask_id`) are left out when `XNN_INVALID_VALUE_ID`.
    pub fn reads(&self) -> FieldIds {
        use XNodeKind::*;
        match self {
            Add { input1_id, input2_id, .. }
            | Subtract { input1_id, input2_id, .. }
            | Multiply { input1_id, input2_id, .. }
            | Div { input1_id, input2_id, .. }
            | Minimum { input1_id, input2_id, .. }
            | Maximum { input1_id, input2_id, .. }
            | PReLU { input1_id, input2_id, .. }
            | BatchMatrixMultiply { input1_id, input2_id, .. } => {
                FieldIds::of(&[("input1_id", *input1_id), ("input2_id", *input2_id)])
            }
            FullyConnected { input1_id, filter_id, bias_id, .. } => {
                FieldIds::of(&[("input1_id", *input1_id), ("filter_id", *filter_id)]).push_opt("bias_id", *bias_id)
            }
            Conv2d(c) | DepthwiseConv2d(c) | ConvTranspose2d(c) => {
                FieldIds::of(&[("input1_id", c.input1_id), ("filter_id", c.filter_id)]).push_opt("bias_id", c.bias_id)
            }
            AvgPooling2d(p) | MaxPooling2d(p) => FieldIds::of(&[("input_id", p.input_id)]),
            Concatenate2(c) | Concatenate3(c) | Concatenate4(c) | Concatenate5(c) => {
                let all = [
                    ("input1_id", c.input1_id),
                    ("input2_id", c.input2_id),
                    ("input3_id", c.input3_id),
                    ("input4_id", c.input4_id),
                    ("input5_id", c.input5_id),
                ];
                let n = match self {
                    Concatenate2(_) => 2,
                    Concatenate3(_) => 3,
                    Concatenate4(_) => 4,
                    _ => 5,
                };
                FieldIds::of(&all[..n])
            }
            ScaledDotProductAttention { query_id, key_id, value_id, scale_id, mask_id, .. } => FieldIds::of(&[
                ("query_id", *query_id),
                ("key_id", *key_id),
                ("value_id", *value_id),
                ("scale_id", *scale_id),
            ])
            .push_opt("mask_id", *mask_id),
            Clamp { input_id, .. }
            | Square { input_id, .. }
            | ReciprocalSquareRoot { input_id, .. }
            | Convert { input_id, .. }
            | Copy { input_id, .. }
            | GlobalAvgPooling2d { input_id, .. }
            | StaticTranspose { input_id, .. }
            | StaticReshape { input_id, .. }
            | StaticMean { input_id, .. }
            | Softmax { input_id, .. }
            | Sigmoid { input_id, .. }
            | Floor { input_id, .. }
            | SquareRoot { input_id, .. }
            | Ceiling { input_id, .. }
            | Hardswish { input_id, .. }
            | Negate { input_id, .. }
            | Abs { input_id, .. }
            | Log { input_id, .. }
            | Gelu { input_id, .. }
            | Tanh { input_id, .. }
            | Exp { input_id, .. }
            | Sin { input_id, .. }
            | Cos { input_id, .. }
            | StaticResizeBilinear2D { input_id, .. }
            | StaticConstantPad { input_id, .. }
            | StaticSlice { input_id, .. }
            | ArgMaxPooling2d { input_id, .. }
            | LeakyReLU { input_id, .. }
            | Elu { input_id, .. } => FieldIds::of(&[("input_id", *input_id)]),
        }
    }

    /// The value ids this node writes, with their field names: one, or two for
    /// `ArgMaxPooling2d` (values, then indices).
    pub fn writes(&self) -> FieldIds {
        match self {
            XNodeKind::ArgMaxPooling2d { output_value_id, output_index_id, .. } => {
                FieldIds::of(&[("output_value_id", *output_value_id), ("output_index_id", *output_index_id)])
            }
            _ => FieldIds::of(&[("output_id", self.output_id())]),
        }
    }

    /// The first (for every member but `ArgMaxPooling2d`, the only) value id it writes.
    fn output_id(&self) -> u32 {
        use XNodeKind::*;
        match self {
            Add { output_id, .. }
            | Subtract { output_id, .. }
            | Multiply { output_id, .. }
            | Div { output_id, .. }
            | FullyConnected { output_id, .. }
            | Clamp { output_id, .. }
            | Square { output_id, .. }
            | ReciprocalSquareRoot { output_id, .. }
            | Convert { output_id, .. }
            | Copy { output_id, .. }
            | GlobalAvgPooling2d { output_id, .. }
            | StaticTranspose { output_id, .. }
            | StaticReshape { output_id, .. }
            | StaticMean { output_id, .. }
            | Softmax { output_id, .. }
            | Sigmoid { output_id, .. }
            | Floor { output_id, .. }
            | SquareRoot { output_id, .. }
            | Ceiling { output_id, .. }
            | Hardswish { output_id, .. }
            | Negate { output_id, .. }
            | Abs { output_id, .. }
            | Log { output_id, .. }
            | Gelu { output_id, .. }
            | Tanh { output_id, .. }
            | Exp { output_id, .. }
            | Sin { output_id, .. }
            | Cos { output_id, .. }
            | Minimum { output_id, .. }
            | Maximum { output_id, .. }
            | PReLU { output_id, .. }
            | BatchMatrixMultiply { output_id, .. }
            | StaticResizeBilinear2D { output_id, .. }
            | StaticConstantPad { output_id, .. }
            | StaticSlice { output_id, .. }
            | LeakyReLU { output_id, .. }
            | Elu { output_id, .. }
            | ScaledDotProductAttention { output_id, .. } => *output_id,
            ArgMaxPooling2d { output_value_id, .. } => *output_value_id,
            Conv2d(c) | DepthwiseConv2d(c) | ConvTranspose2d(c) => c.output_id,
            AvgPooling2d(p) | MaxPooling2d(p) => p.output_id,
            Concatenate2(c) | Concatenate3(c) | Concatenate4(c) | Concatenate5(c) => c.output_id,
        }
    }

    /// Value ids this node reads, in order (see [`reads`](Self::reads)).
    pub fn inputs(&self) -> Vec<u32> {
        self.reads().ids().collect()
    }

    /// The value id this node writes (the values output of `ArgMaxPooling2d`, whose
    /// indices are in [`writes`](Self::writes)). Always `Some`.
    pub fn output(&self) -> Option<u32> {
        Some(self.output_id())
    }
}

/// `XNode`: payload, debug handle, optional fused activation bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct XNode {
    pub kind: XNodeKind,
    pub debug_handle: u32,
    /// `OutputMinMax`; absent means (-inf, +inf).
    pub output_min_max: Option<(f32, f32)>,
}

/// A node of member `type_id` with every field drawn from `u` (scalars), `list` (lists)
/// and `float`, for tests that cover every member.
#[cfg(test)]
pub(crate) fn kind_with(
    type_id: u8,
    u: &mut dyn FnMut() -> u32,
    list: &mut dyn FnMut() -> Vec<u32>,
    float: &mut dyn FnMut() -> f32,
) -> XNodeKind {
    use node_type::*;
    use XNodeKind::*;
    let mut conv = || ConvNode {
        padding_top: u(),
        padding_right: u(),
        padding_bottom: u(),
        padding_left: u(),
        kernel_height: u(),
        kernel_width: u(),
        subsampling_height: u(),
        subsampling_width: u(),
        dilation_height: u(),
        dilation_width: u(),
        group_input_channels: u(),
        group_output_channels: u(),
        groups: u(),
        adjustment_height: u(),
        adjustment_width: u(),
        input1_id: u(),
        filter_id: u(),
        bias_id: u(),
        output_id: u(),
        flags: u(),
    };
    let conv = conv();
    let pool = PoolingNode {
        padding_top: u(),
        padding_right: u(),
        padding_bottom: u(),
        padding_left: u(),
        pooling_height: u(),
        pooling_width: u(),
        stride_height: u(),
        stride_width: u(),
        dilation_height: u(),
        dilation_width: u(),
        input_id: u(),
        output_id: u(),
        flags: u(),
    };
    let cat = CatNode {
        axis: u(),
        input1_id: u(),
        input2_id: u(),
        input3_id: u(),
        input4_id: u(),
        output_id: u(),
        flags: u(),
        input5_id: u(),
    };
    let (a, b, c, d) = (u(), u(), u(), u());
    match type_id {
        ADD => Add { input1_id: a, input2_id: b, output_id: c, flags: d },
        SUBTRACT => Subtract { input1_id: a, input2_id: b, output_id: c, flags: d },
        MULTIPLY => Multiply { input1_id: a, input2_id: b, output_id: c, flags: d },
        DIV => Div { input1_id: a, input2_id: b, output_id: c, flags: d },
        MINIMUM => Minimum { input1_id: a, input2_id: b, output_id: c, flags: d },
        MAXIMUM => Maximum { input1_id: a, input2_id: b, output_id: c, flags: d },
        PRELU => PReLU { input1_id: a, input2_id: b, output_id: c, flags: d },
        BATCH_MATRIX_MULTIPLY => BatchMatrixMultiply { input1_id: a, input2_id: b, output_id: c, flags: d },
        FULLY_CONNECTED => FullyConnected { input1_id: a, filter_id: b, bias_id: c, output_id: d, flags: u() },
        CLAMP => Clamp { input_id: a, output_id: b, flags: c },
        SQUARE => Square { input_id: a, output_id: b, flags: c },
        RECIPROCAL_SQUARE_ROOT => ReciprocalSquareRoot { input_id: a, output_id: b, flags: c },
        CONVERT => Convert { input_id: a, output_id: b, flags: c },
        COPY => Copy { input_id: a, output_id: b, flags: c },
        GLOBAL_AVG_POOLING_2D => GlobalAvgPooling2d { input_id: a, output_id: b, flags: c },
        SOFTMAX => Softmax { input_id: a, output_id: b, flags: c },
        SIGMOID => Sigmoid { input_id: a, output_id: b, flags: c },
        FLOOR => Floor { input_id: a, output_id: b, flags: c },
        SQUARE_ROOT => SquareRoot { input_id: a, output_id: b, flags: c },
        CEILING => Ceiling { input_id: a, output_id: b, flags: c },
        HARDSWISH => Hardswish { input_id: a, output_id: b, flags: c },
        NEGATE => Negate { input_id: a, output_id: b, flags: c },
        ABS => Abs { input_id: a, output_id: b, flags: c },
        LOG => Log { input_id: a, output_id: b, flags: c },
        GELU => Gelu { input_id: a, output_id: b, flags: c },
        TANH => Tanh { input_id: a, output_id: b, flags: c },
        EXP => Exp { input_id: a, output_id: b, flags: c },
        SIN => Sin { input_id: a, output_id: b, flags: c },
        COS => Cos { input_id: a, output_id: b, flags: c },
        STATIC_TRANSPOSE => StaticTranspose { perm: list(), input_id: a, output_id: b, flags: c },
        STATIC_RESHAPE => StaticReshape { new_shape: list(), input_id: a, output_id: b, flags: c },
        STATIC_MEAN => StaticMean { reduction_axes: list(), input_id: a, output_id: b, flags: c },
        CONV_2D => Conv2d(conv),
        DEPTHWISE_CONV_2D => DepthwiseConv2d(conv),
        CONV_TRANSPOSE_2D => ConvTranspose2d(conv),
        AVG_POOLING_2D => AvgPooling2d(pool),
        MAX_POOLING_2D => MaxPooling2d(pool),
        CONCATENATE_2 => Concatenate2(cat),
        CONCATENATE_3 => Concatenate3(cat),
        CONCATENATE_4 => Concatenate4(cat),
        CONCATENATE_5 => Concatenate5(cat),
        STATIC_RESIZE_BILINEAR_2D => {
            StaticResizeBilinear2D { new_height: a, new_width: b, input_id: c, output_id: d, flags: u() }
        }
        STATIC_CONSTANT_PAD => StaticConstantPad {
            pre_paddings: list(),
            post_paddings: list(),
            padding_value: float(),
            input_id: a,
            output_id: b,
            flags: c,
        },
        STATIC_SLICE => StaticSlice { offsets: list(), sizes: list(), input_id: a, output_id: b, flags: c },
        ARG_MAX_POOLING_2D => ArgMaxPooling2d {
            padding_top: a,
            padding_right: b,
            padding_bottom: c,
            padding_left: d,
            pooling_height: u(),
            pooling_width: u(),
            input_id: u(),
            output_value_id: u(),
            output_index_id: u(),
            flags: u(),
        },
        LEAKY_RELU => LeakyReLU { negative_slope: float(), input_id: a, output_id: b, flags: c },
        ELU => Elu { alpha: float(), input_id: a, output_id: b, flags: c },
        SCALED_DOT_PRODUCT_ATTENTION => ScaledDotProductAttention {
            query_id: a,
            key_id: b,
            value_id: c,
            scale_id: d,
            mask_id: u(),
            output_id: u(),
            flags: u(),
        },
        other => panic!("no union member has type id {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_has_a_variant_named_after_it() {
        let mut n = 0;
        let mut seen = std::collections::BTreeSet::new();
        for id in 1..=NODE_TYPE_NAMES.len() as u8 {
            let k = kind_with(id, &mut || 7, &mut || vec![1, 2], &mut || 0.5);
            assert_eq!(k.type_id(), id);
            // The variant's name is the member's without `XNN` (case aside: `Elu`).
            let debug = format!("{k:?}");
            let variant = debug.split(|c: char| !c.is_alphanumeric()).next().unwrap();
            assert_eq!(format!("XNN{variant}").to_lowercase(), NODE_TYPE_NAMES[id as usize - 1].to_lowercase());
            assert_eq!(k.type_name(), NODE_TYPE_NAMES[id as usize - 1]);
            assert!(seen.insert(variant.to_string()), "{variant} twice");
            n += 1;
        }
        assert_eq!(n, 48);
        for (name, id) in [("XNNAdd", 1), ("XNNStaticTranspose", 5), ("XNNCos", 47), ("XNNStaticMean", 48)] {
            assert_eq!(node_type_id(name), Some(id));
            assert_eq!(node_type_name(id), Some(name));
        }
        assert_eq!(node_type_name(0), None);
        assert_eq!(node_type_name(49), None);
    }

    #[test]
    fn reads_and_writes_name_the_schema_fields() {
        use node_type::*;
        let mut next = 0u32;
        let mut u = || {
            next += 1;
            next
        };
        let k = kind_with(CONCATENATE_3, &mut u, &mut Vec::new, &mut || 0.0);
        let XNodeKind::Concatenate3(c) = &k else { unreachable!() };
        assert_eq!(
            k.reads().as_slice(),
            &[("input1_id", c.input1_id), ("input2_id", c.input2_id), ("input3_id", c.input3_id)]
        );
        assert_eq!(k.writes().as_slice(), &[("output_id", c.output_id)]);
        let mut u = || INVALID_VALUE_ID;
        let k = kind_with(SCALED_DOT_PRODUCT_ATTENTION, &mut u, &mut Vec::new, &mut || 0.0);
        assert_eq!(k.reads().as_slice().len(), 4, "no mask");
        let mut next = 10u32;
        let mut u = || {
            next += 1;
            next
        };
        let k = kind_with(ARG_MAX_POOLING_2D, &mut u, &mut Vec::new, &mut || 0.0);
        let XNodeKind::ArgMaxPooling2d { input_id, output_value_id, output_index_id, .. } = k else { unreachable!() };
        assert_eq!(k.inputs(), vec![input_id]);
        assert_eq!(k.writes().ids().collect::<Vec<_>>(), vec![output_value_id, output_index_id]);
        assert_eq!(k.output(), Some(output_value_id));
        let k = kind_with(CONV_TRANSPOSE_2D, &mut || INVALID_VALUE_ID, &mut Vec::new, &mut || 0.0);
        assert_eq!(k.reads().as_slice().len(), 2, "no bias");
    }
}
