//! Element types, quantization parameters and memory formats.

use serde::{Deserialize, Serialize};

/// Element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElemType {
    F32,
    F16,
    Bf16,
    /// int8 with a per-tensor scale and zero point (carried by the tensor spec).
    Qs8,
}

impl ElemType {
    pub const ALL: [ElemType; 4] = [ElemType::F32, ElemType::F16, ElemType::Bf16, ElemType::Qs8];

    pub fn name(self) -> &'static str {
        match self {
            ElemType::F32 => "fp32",
            ElemType::F16 => "fp16",
            ElemType::Bf16 => "bf16",
            ElemType::Qs8 => "qs8",
        }
    }

    pub fn size_bytes(self) -> usize {
        match self {
            ElemType::F32 => 4,
            ElemType::F16 | ElemType::Bf16 => 2,
            ElemType::Qs8 => 1,
        }
    }

    pub fn is_float(self) -> bool {
        !matches!(self, ElemType::Qs8)
    }
}

impl std::fmt::Display for ElemType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Per-tensor affine quantization: `real = (q - zero_point) * scale`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuantParams {
    pub scale: f32,
    pub zero_point: i32,
}

impl QuantParams {
    pub fn new(scale: f32, zero_point: i32) -> Self {
        QuantParams { scale, zero_point }
    }
}

/// Where the values of a tensor live. Never changes what the values are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryFormat {
    #[default]
    Contiguous,
    /// NHWC storage of a 4-D NCHW tensor.
    ChannelsLast,
    /// NDHWC storage of a 5-D NCDHW tensor.
    ChannelsLast3d,
}

impl MemoryFormat {
    /// The rank this format applies to (`None` for contiguous: any rank).
    pub fn required_rank(self) -> Option<usize> {
        match self {
            MemoryFormat::Contiguous => None,
            MemoryFormat::ChannelsLast => Some(4),
            MemoryFormat::ChannelsLast3d => Some(5),
        }
    }

    /// Physical order of the logical dims: `physical[i] = logical dim perm[i]`.
    pub fn dim_order(self, rank: usize) -> Vec<usize> {
        match self {
            MemoryFormat::Contiguous => (0..rank).collect(),
            MemoryFormat::ChannelsLast => vec![0, 2, 3, 1],
            MemoryFormat::ChannelsLast3d => vec![0, 2, 3, 4, 1],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MemoryFormat::Contiguous => "contiguous",
            MemoryFormat::ChannelsLast => "channels_last",
            MemoryFormat::ChannelsLast3d => "channels_last_3d",
        }
    }
}
