//! Why a graph is rejected: [`GraphError`] (node, op, kind) and the coarse [`ErrorClass`]
//! the errors oracle compares.

use super::NodeId;
use crate::dtype::{ElemType, MemoryFormat};
use serde::{Deserialize, Serialize};

/// Coarse class of a graph error, compared by the errors oracle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    Shape,
    Dtype,
    Quant,
    Conv,
    Dynamic,
    Structure,
}

#[derive(Clone, Debug, PartialEq, thiserror::Error, Serialize, Deserialize)]
pub enum GraphErrorKind {
    #[error("dim {dim} out of range for rank {rank}")]
    DimOutOfRange { dim: i64, rank: usize },
    #[error("dim {dim} repeated in the dims list")]
    RepeatedDim { dim: usize },
    #[error("rank {rank} above the maximum of 6")]
    RankTooHigh { rank: usize },
    #[error("expected rank {expected}, found rank {found}")]
    RankMismatch { expected: String, found: usize },
    #[error("dtype mismatch: expected {expected}, found {found}")]
    DtypeMismatch { expected: ElemType, found: ElemType },
    #[error("dtype {dtype} not supported by this op")]
    UnsupportedDtype { dtype: ElemType },
    #[error("qs8 scale {scale} is not finite and positive")]
    BadQuantScale { scale: f32 },
    #[error("qs8 zero point {zero_point} outside int8 [-128, 127]")]
    BadZeroPoint { zero_point: i32 },
    #[error("quantization parameters do not match the input's")]
    QuantParamsMismatch,
    #[error("conv channel mismatch: input has {input_channels} channels, weight expects {weight_channels} per group x {groups} groups")]
    ConvChannelMismatch { input_channels: usize, weight_channels: usize, groups: usize },
    #[error("conv group mismatch: {what} {channels} not divisible by groups {groups}")]
    ConvGroupMismatch { what: String, channels: usize, groups: usize },
    #[error("bad conv parameters: {reason}")]
    BadConvParams { reason: String },
    #[error("shapes {a:?} and {b:?} are not broadcastable")]
    NotBroadcastable { a: Vec<usize>, b: Vec<usize> },
    #[error("dynamic dim {dim}: size {size} above its bound {bound}")]
    DynamicAboveBound { dim: usize, size: usize, bound: usize },
    #[error("{what} does not support dynamic dims")]
    DynamicUnsupported { what: String },
    #[error("shape mismatch: expected {expected:?}, found {found:?}")]
    ShapeMismatch { expected: Vec<usize>, found: Vec<usize> },
    #[error("memory format mismatch: expected {expected:?}, found {found:?}")]
    FormatMismatch { expected: MemoryFormat, found: MemoryFormat },
    #[error("memory format {format:?} needs a tensor of another rank, not {rank}")]
    FormatRankMismatch { format: MemoryFormat, rank: usize },
    #[error("dim {dim} has size 0")]
    ZeroSizedDim { dim: usize },
    #[error("tensor of {numel} elements is above the limit")]
    TooLarge { numel: String },
    #[error("data holds {found} elements, shape needs {expected}")]
    DataLength { expected: usize, found: usize },
    #[error("cannot reshape {from:?} to {to:?}")]
    BadReshape { from: Vec<usize>, to: Vec<i64> },
    #[error("{perm:?} is not a permutation of rank {rank}")]
    BadPermute { perm: Vec<i64>, rank: usize },
    #[error("clamp bounds invalid: min {min:?}, max {max:?}")]
    BadClamp { min: Option<f32>, max: Option<f32> },
    #[error(
        "adaptive_avg_pool2d output size {output_size:?} not supported: only [1, 1] (the mean over H and W) is \
         modelled; other sizes decompose to avg_pool2d, which the graph language does not have"
    )]
    PoolOutputSize { output_size: [usize; 2] },
    #[error("expected {expected} inputs, found {found}")]
    WrongInputCount { expected: String, found: usize },
    #[error("input refers to node {id}, which is not defined before this node")]
    UnknownNode { id: NodeId },
    #[error("graph has no outputs")]
    NoOutputs,
    #[error("stored spec differs from the inferred one")]
    SpecMismatch,
}

impl GraphErrorKind {
    pub fn class(&self) -> ErrorClass {
        use GraphErrorKind::*;
        match self {
            DimOutOfRange { .. }
            | RepeatedDim { .. }
            | RankTooHigh { .. }
            | RankMismatch { .. }
            | NotBroadcastable { .. }
            | ShapeMismatch { .. }
            | FormatMismatch { .. }
            | FormatRankMismatch { .. }
            | ZeroSizedDim { .. }
            | TooLarge { .. }
            | DataLength { .. }
            | BadReshape { .. }
            | BadPermute { .. }
            | PoolOutputSize { .. } => ErrorClass::Shape,
            DtypeMismatch { .. } | UnsupportedDtype { .. } => ErrorClass::Dtype,
            BadQuantScale { .. } | BadZeroPoint { .. } | QuantParamsMismatch => ErrorClass::Quant,
            ConvChannelMismatch { .. } | ConvGroupMismatch { .. } | BadConvParams { .. } => ErrorClass::Conv,
            DynamicAboveBound { .. } | DynamicUnsupported { .. } => ErrorClass::Dynamic,
            BadClamp { .. } | WrongInputCount { .. } | UnknownNode { .. } | NoOutputs | SpecMismatch => {
                ErrorClass::Structure
            }
        }
    }
}

/// A rejected graph: which node, which op, why.
#[derive(Clone, Debug, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[error("node {node} ({op}): {kind}")]
pub struct GraphError {
    pub node: NodeId,
    pub op: String,
    pub kind: GraphErrorKind,
}
