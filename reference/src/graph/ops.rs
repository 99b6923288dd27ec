//! The operations of the graph language and their parameters.

use crate::dtype::{ElemType, MemoryFormat, QuantParams};
use crate::tensor::Tensor;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Conv2dParams {
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
}

impl Default for Conv2dParams {
    fn default() -> Self {
        Conv2dParams { stride: [1, 1], padding: [0, 0], dilation: [1, 1], groups: 1 }
    }
}

/// An operation. Inputs are listed in [`Node::inputs`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// A graph input; its spec is the node's spec.
    Input {
        name: String,
    },
    /// Constant data (weights). Stored contiguous.
    Constant {
        tensor: Tensor,
    },
    /// `aten.mean.dim(x, dims, keepdim, dtype=)`. Empty `dims` means every dim.
    Mean {
        dims: Vec<i64>,
        keepdim: bool,
        dtype: Option<ElemType>,
    },
    /// `aten.adaptive_avg_pool2d(x, output_size)` on [N,C,H,W] or [C,H,W]. Only output size
    /// [1, 1] is modelled: exactly `x.mean([-1, -2], keepdim=True)` (ATen's kernel for that
    /// size, which is what `to_edge` lowers). Other sizes are a [`GraphErrorKind::PoolOutputSize`].
    AdaptiveAvgPool2d {
        output_size: [usize; 2],
    },
    /// `aten.convolution` 2-D. Inputs: x [N,C,H,W], w [O,C/g,kh,kw], optional b [O].
    Conv2d(Conv2dParams),
    /// Elementwise with broadcasting.
    Binary(BinaryOp),
    Square,
    Rsqrt,
    /// `clamp(min, max)`; relu is `min = 0`, hardtanh is both.
    Clamp {
        min: Option<f32>,
        max: Option<f32>,
    },
    /// `aten.linear`. Inputs: x [..., K], w [N, K], optional b [N].
    Linear,
    /// `quantize_per_tensor` to qs8 (clamped to [-128, 127]).
    Quantize(QuantParams),
    /// `dequantize_per_tensor` from qs8 to fp32.
    Dequantize(QuantParams),
    /// `aten._to_copy(dtype=, memory_format=)`.
    ToCopy {
        dtype: Option<ElemType>,
        format: Option<MemoryFormat>,
    },
    /// `aten.view_copy`/`reshape`; one entry may be -1.
    Reshape {
        shape: Vec<i64>,
    },
    /// `aten.permute_copy`; negative entries count from the end.
    Permute {
        perm: Vec<i64>,
    },
}

impl Op {
    /// The ATen-style name users see in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::Constant { .. } => "constant",
            Op::Mean { .. } => "mean.dim",
            Op::AdaptiveAvgPool2d { .. } => "adaptive_avg_pool2d",
            Op::Conv2d(_) => "convolution",
            Op::Binary(BinaryOp::Add) => "add",
            Op::Binary(BinaryOp::Sub) => "sub",
            Op::Binary(BinaryOp::Mul) => "mul",
            Op::Binary(BinaryOp::Div) => "div",
            Op::Square => "square",
            Op::Rsqrt => "rsqrt",
            Op::Clamp { .. } => "clamp",
            Op::Linear => "linear",
            Op::Quantize(_) => "quantize_per_tensor",
            Op::Dequantize(_) => "dequantize_per_tensor",
            Op::ToCopy { .. } => "_to_copy",
            Op::Reshape { .. } => "view_copy",
            Op::Permute { .. } => "permute_copy",
        }
    }
}
