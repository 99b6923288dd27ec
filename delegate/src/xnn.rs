//! In-memory XNNPACK delegate graph: a faithful mirror of the `XNNGraph` flatbuffer
//! (`schema/xnnpack.fbs`). Lowering produces it, the serializer writes it, the loader
//! rebuilds it from untrusted bytes, the runtime executes what the loader returned.

use serde::{Deserialize, Serialize};

/// `XNN_INVALID_VALUE_ID`: the external id of an internal value.
pub const INVALID_VALUE_ID: u32 = 0xFFFF_FFFF;
/// `XNN_FLAG_KEEP_DIMS`.
pub const FLAG_KEEP_DIMS: u32 = 0x40;
pub const VALUE_FLAG_EXTERNAL_INPUT: u32 = 1;
pub const VALUE_FLAG_EXTERNAL_OUTPUT: u32 = 2;
/// The runtime's limit on `num_externs`.
pub const MAX_EXTERNS: u32 = 4096;
/// `debug_handle` of nodes the layout pass inserted (ExecuTorch's default).
pub const DEFAULT_DEBUG_HANDLE: u32 = 65535;
pub const PERM_NCHW_TO_NHWC: [u32; 4] = [0, 2, 3, 1];
pub const PERM_NHWC_TO_NCHW: [u32; 4] = [0, 3, 1, 2];

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

/// Union type ids of the members this crate builds and reads field by field: the
/// position of the name in [`NODE_TYPE_NAMES`], plus one (a test checks each).
pub mod node_type {
    pub const ADD: u8 = 1;
    pub const FULLY_CONNECTED: u8 = 2;
    pub const STATIC_TRANSPOSE: u8 = 5;
    pub const CLAMP: u8 = 6;
    pub const CONV_2D: u8 = 7;
    pub const DIV: u8 = 8;
    pub const DEPTHWISE_CONV_2D: u8 = 13;
    pub const MULTIPLY: u8 = 15;
    pub const SUBTRACT: u8 = 16;
    pub const CONVERT: u8 = 18;
    pub const GLOBAL_AVG_POOLING_2D: u8 = 19;
    pub const STATIC_RESHAPE: u8 = 20;
    pub const SQUARE: u8 = 28;
    pub const RECIPROCAL_SQUARE_ROOT: u8 = 40;
    pub const COPY: u8 = 46;
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

/// `XNNDatatype` (schema enum `short`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(i16)]
pub enum XnnDatatype {
    Invalid = 0,
    Fp32 = 1,
    Fp16 = 2,
    Qint8 = 3,
    Quint8 = 4,
    Qint32 = 5,
    Qcint8 = 6,
    Qcint32 = 7,
    Qcint4 = 8,
    Qdint8 = 9,
    Qbint4 = 10,
    Qpint8 = 11,
    Int32 = 12,
    Pfp32 = 13,
    Bf16 = 14,
}

impl XnnDatatype {
    pub fn from_i16(v: i16) -> Option<XnnDatatype> {
        use XnnDatatype::*;
        Some(match v {
            0 => Invalid,
            1 => Fp32,
            2 => Fp16,
            3 => Qint8,
            4 => Quint8,
            5 => Qint32,
            6 => Qcint8,
            7 => Qcint32,
            8 => Qcint4,
            9 => Qdint8,
            10 => Qbint4,
            11 => Qpint8,
            12 => Int32,
            13 => Pfp32,
            14 => Bf16,
            _ => return None,
        })
    }

    /// The name ExecuTorch's manifest uses (`xnn_datatype_fp32`, ...).
    pub fn name(self) -> &'static str {
        use XnnDatatype::*;
        match self {
            Invalid => "xnn_datatype_invalid",
            Fp32 => "xnn_datatype_fp32",
            Fp16 => "xnn_datatype_fp16",
            Qint8 => "xnn_datatype_qint8",
            Quint8 => "xnn_datatype_quint8",
            Qint32 => "xnn_datatype_qint32",
            Qcint8 => "xnn_datatype_qcint8",
            Qcint32 => "xnn_datatype_qcint32",
            Qcint4 => "xnn_datatype_qcint4",
            Qdint8 => "xnn_datatype_qdint8",
            Qbint4 => "xnn_datatype_qbint4",
            Qpint8 => "xnn_datatype_qpint8",
            Int32 => "xnn_datatype_int32",
            Pfp32 => "xnn_datatype_pfp32",
            Bf16 => "xnn_datatype_bf16",
        }
    }

    /// Bytes per element for the types the runtime executes.
    pub fn elem_size(self) -> Option<usize> {
        use XnnDatatype::*;
        match self {
            Fp32 | Qint32 | Qcint32 | Int32 => Some(4),
            Fp16 | Bf16 => Some(2),
            Qint8 | Quint8 | Qcint8 => Some(1),
            _ => None,
        }
    }
}

/// `XNNQuantParams` union members we read and write.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum QuantParams {
    PerTensor {
        scale: f32,
        zero_point: i32,
    },
    /// Scales either inline or in the named data store (`scale_buffer_idx`).
    PerChannel {
        scale: Vec<f32>,
        channel_dim: i32,
        scale_buffer_idx: u32,
        num_scales: u32,
    },
    /// Any other union member, kept by type id so a real payload still decodes.
    Other {
        type_id: u8,
    },
}

/// `XValue`: `XNNTensorValue`, or `XNNQuantizedTensorValue` when `quant` is present.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct XValue {
    pub datatype: XnnDatatype,
    pub dims: Vec<u32>,
    /// Index into `XnnGraph::constant_data`; 0 = no constant data.
    pub constant_buffer_idx: u32,
    /// External id, or [`INVALID_VALUE_ID`].
    pub external_id: u32,
    pub flags: u32,
    pub id_out: u32,
    pub quant: Option<QuantParams>,
}

/// `_XNNNodeConv` fields (shared by Conv2d and DepthwiseConv2d).
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

/// One node. Variants cover what the lowering emits and what the real fixtures hold;
/// `Other` keeps any other union member (by type id) so real payloads still decode.
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
    StaticTranspose {
        perm: Vec<u32>,
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    StaticReshape {
        new_shape: Vec<u32>,
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Conv2d(ConvNode),
    DepthwiseConv2d(ConvNode),
    /// The change's new node: a mean over sorted, unique, non-negative `reduction_axes`.
    StaticMean {
        reduction_axes: Vec<u32>,
        input_id: u32,
        output_id: u32,
        flags: u32,
    },
    Other {
        type_id: u8,
    },
}

impl XNodeKind {
    /// The schema's union member name.
    pub fn type_name(&self) -> &'static str {
        use XNodeKind::*;
        match self {
            Add { .. } => "XNNAdd",
            Subtract { .. } => "XNNSubtract",
            Multiply { .. } => "XNNMultiply",
            Div { .. } => "XNNDiv",
            FullyConnected { .. } => "XNNFullyConnected",
            Clamp { .. } => "XNNClamp",
            Square { .. } => "XNNSquare",
            ReciprocalSquareRoot { .. } => "XNNReciprocalSquareRoot",
            Convert { .. } => "XNNConvert",
            Copy { .. } => "XNNCopy",
            GlobalAvgPooling2d { .. } => "XNNGlobalAvgPooling2d",
            StaticTranspose { .. } => "XNNStaticTranspose",
            StaticReshape { .. } => "XNNStaticReshape",
            Conv2d(_) => "XNNConv2d",
            DepthwiseConv2d(_) => "XNNDepthwiseConv2d",
            StaticMean { .. } => "XNNStaticMean",
            Other { type_id } => node_type_name(*type_id).unwrap_or(""),
        }
    }

    /// The union type id this node serializes with: the position of its
    /// [`type_name`](Self::type_name) in [`NODE_TYPE_NAMES`], plus one (a test checks
    /// every variant against the table).
    pub fn type_id(&self) -> u8 {
        use node_type::*;
        match self {
            XNodeKind::Add { .. } => ADD,
            XNodeKind::FullyConnected { .. } => FULLY_CONNECTED,
            XNodeKind::StaticTranspose { .. } => STATIC_TRANSPOSE,
            XNodeKind::Clamp { .. } => CLAMP,
            XNodeKind::Conv2d(_) => CONV_2D,
            XNodeKind::Div { .. } => DIV,
            XNodeKind::DepthwiseConv2d(_) => DEPTHWISE_CONV_2D,
            XNodeKind::Multiply { .. } => MULTIPLY,
            XNodeKind::Subtract { .. } => SUBTRACT,
            XNodeKind::Convert { .. } => CONVERT,
            XNodeKind::GlobalAvgPooling2d { .. } => GLOBAL_AVG_POOLING_2D,
            XNodeKind::StaticReshape { .. } => STATIC_RESHAPE,
            XNodeKind::Square { .. } => SQUARE,
            XNodeKind::ReciprocalSquareRoot { .. } => RECIPROCAL_SQUARE_ROOT,
            XNodeKind::Copy { .. } => COPY,
            XNodeKind::StaticMean { .. } => STATIC_MEAN,
            XNodeKind::Other { type_id } => *type_id,
        }
    }

    /// Value ids this node reads, in order.
    pub fn inputs(&self) -> Vec<u32> {
        use XNodeKind::*;
        match self {
            Add { input1_id, input2_id, .. }
            | Subtract { input1_id, input2_id, .. }
            | Multiply { input1_id, input2_id, .. }
            | Div { input1_id, input2_id, .. } => vec![*input1_id, *input2_id],
            FullyConnected { input1_id, filter_id, bias_id, .. } => {
                let mut v = vec![*input1_id, *filter_id];
                if *bias_id != INVALID_VALUE_ID {
                    v.push(*bias_id);
                }
                v
            }
            Clamp { input_id, .. }
            | Square { input_id, .. }
            | ReciprocalSquareRoot { input_id, .. }
            | Convert { input_id, .. }
            | Copy { input_id, .. }
            | GlobalAvgPooling2d { input_id, .. }
            | StaticTranspose { input_id, .. }
            | StaticReshape { input_id, .. }
            | StaticMean { input_id, .. } => vec![*input_id],
            Conv2d(c) | DepthwiseConv2d(c) => {
                let mut v = vec![c.input1_id, c.filter_id];
                if c.bias_id != INVALID_VALUE_ID {
                    v.push(c.bias_id);
                }
                v
            }
            Other { .. } => vec![],
        }
    }

    /// Value id this node writes (`None` for `Other`).
    pub fn output(&self) -> Option<u32> {
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
            | StaticMean { output_id, .. } => Some(*output_id),
            Conv2d(c) | DepthwiseConv2d(c) => Some(c.output_id),
            Other { .. } => None,
        }
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

/// `ConstantDataOffset`: an offset into the payload's constant region, or (real ExecuTorch
/// payloads) `offset = u64::MAX` with a named key into the `.pte` named data store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConstantDataOffset {
    pub offset: u64,
    pub size: u64,
    pub named_key: Option<String>,
}

/// `XNNGraph` plus the constant bytes that follow the flatbuffer in the payload.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct XnnGraph {
    pub version: String,
    pub nodes: Vec<XNode>,
    pub values: Vec<XValue>,
    pub num_externs: u32,
    pub input_ids: Vec<u32>,
    pub output_ids: Vec<u32>,
    pub constant_data: Vec<ConstantDataOffset>,
    /// The payload's constant-data region (weights), 16-byte aligned entries.
    #[serde(skip)]
    pub constant_bytes: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_ids_follow_the_union_order() {
        let c = ConvNode {
            padding_top: 0,
            padding_right: 0,
            padding_bottom: 0,
            padding_left: 0,
            kernel_height: 0,
            kernel_width: 0,
            subsampling_height: 0,
            subsampling_width: 0,
            dilation_height: 0,
            dilation_width: 0,
            group_input_channels: 0,
            group_output_channels: 0,
            groups: 0,
            adjustment_height: 0,
            adjustment_width: 0,
            input1_id: 0,
            filter_id: 0,
            bias_id: 0,
            output_id: 0,
            flags: 0,
        };
        let (i, o, f) = (0, 0, 0);
        let kinds = [
            XNodeKind::Add { input1_id: i, input2_id: i, output_id: o, flags: f },
            XNodeKind::Subtract { input1_id: i, input2_id: i, output_id: o, flags: f },
            XNodeKind::Multiply { input1_id: i, input2_id: i, output_id: o, flags: f },
            XNodeKind::Div { input1_id: i, input2_id: i, output_id: o, flags: f },
            XNodeKind::FullyConnected { input1_id: i, filter_id: i, bias_id: i, output_id: o, flags: f },
            XNodeKind::Clamp { input_id: i, output_id: o, flags: f },
            XNodeKind::Square { input_id: i, output_id: o, flags: f },
            XNodeKind::ReciprocalSquareRoot { input_id: i, output_id: o, flags: f },
            XNodeKind::Convert { input_id: i, output_id: o, flags: f },
            XNodeKind::Copy { input_id: i, output_id: o, flags: f },
            XNodeKind::GlobalAvgPooling2d { input_id: i, output_id: o, flags: f },
            XNodeKind::StaticTranspose { perm: vec![], input_id: i, output_id: o, flags: f },
            XNodeKind::StaticReshape { new_shape: vec![], input_id: i, output_id: o, flags: f },
            XNodeKind::Conv2d(c.clone()),
            XNodeKind::DepthwiseConv2d(c),
            XNodeKind::StaticMean { reduction_axes: vec![], input_id: i, output_id: o, flags: f },
        ];
        for k in &kinds {
            assert_eq!(Some(k.type_id()), node_type_id(k.type_name()), "{}", k.type_name());
        }
        for id in 1..=NODE_TYPE_NAMES.len() as u8 {
            assert_eq!(XNodeKind::Other { type_id: id }.type_id(), id);
        }
    }
}
