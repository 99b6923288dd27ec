//! In-memory XNNPACK delegate graph: a faithful mirror of the `XNNGraph` flatbuffer
//! (`schema/xnnpack.fbs`). Lowering produces it, the serializer writes it, the loader
//! rebuilds it from untrusted bytes, the runtime executes what the loader returned.

use serde::{Deserialize, Serialize};

mod node;
pub use node::*;

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

/// `XNNQuantParams`: every union member, with all of its fields.
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
    /// Dynamic quantization (`qdint8`): parameters computed per batch at run time.
    PerTokenDynamic {
        num_nonbatch_dims: i32,
    },
    /// Blockwise quantization (`qbint4`): scales per channel and group of `group_size`,
    /// inline or in the named data store. The schema's deprecated `scale_bf16` is not
    /// modelled: the loader refuses a payload that sets it.
    PerChannelGroup {
        scale: Vec<f32>,
        channel_dim: i32,
        group_size: i32,
        scale_buffer_idx: u32,
        num_scales: u32,
    },
}

impl QuantParams {
    /// The schema's union member name.
    pub fn type_name(&self) -> &'static str {
        match self {
            QuantParams::PerTensor { .. } => "PerTensorQuant",
            QuantParams::PerChannel { .. } => "PerChannelQuant",
            QuantParams::PerTokenDynamic { .. } => "PerTokenDynamicQuant",
            QuantParams::PerChannelGroup { .. } => "PerChannelGroupQuant",
        }
    }
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
