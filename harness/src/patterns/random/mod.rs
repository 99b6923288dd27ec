//! Random graphs: a DAG over the whole graph language, stored in the case itself
//! (`Case::graph`), next to the templates.
//!
//! A [`RandomGraph`] lists its inputs (shape, dtype, memory format) and its nodes, each a
//! generator op ([`RandomOp`]) over earlier values: value `i` is input `i` for `i` below the
//! input count, node `i - inputs` after. Each generator op expands to one to three ops of the
//! graph language ([`build`]), so the rules that keep the outputs oracle's tolerance derivable
//! hold by construction, whatever a shrinker removes:
//! - a division only by a seeded constant in `[0.5, 2]` (a computed divisor near zero turns
//!   any rounding upstream into an unbounded difference);
//! - an `rsqrt` only of `clamp(x, min = c)`, `c > 0`, whose derivative is bounded there
//!   (see [`build`], the magnitude twin);
//! - a quantize always followed by its dequantize (outputs stay float; the pair may land one
//!   step away, which the twin accounts for).
//!
//! Constants (weights, biases, binary operands) are not stored: they are drawn from the
//! case seed and the node's index, like the templates' weights, so a case stays one short
//! line. Shapes are inferred forward with `reference::graph::infer` ([`build::specs`]): a
//! stored graph that does not infer is the case's mistake, reported as [`InvalidCase`].
//!
//! [`build`] expands a graph (under test, or its magnitude twin) and derives its chain costs;
//! [`shrink`] removes nodes and shrinks dims while keeping the graph valid. The draws live in
//! `gen::random`.

pub mod build;
pub mod shrink;

use reference::graph::BinaryOp;
use reference::{ElemType, MemoryFormat};
use serde::{Deserialize, Serialize};

/// A whole random graph (see the module docs); one JSON object in the case line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomGraph {
    pub inputs: Vec<RandomInput>,
    pub nodes: Vec<RandomNode>,
    /// Value ids of the graph outputs.
    pub outputs: Vec<usize>,
}

fn is_f32(d: &ElemType) -> bool {
    *d == ElemType::F32
}
fn f32_type() -> ElemType {
    ElemType::F32
}
fn is_contiguous(f: &MemoryFormat) -> bool {
    *f == MemoryFormat::Contiguous
}
fn is_false(b: &bool) -> bool {
    !*b
}
fn is_one(v: &usize) -> bool {
    *v == 1
}
fn one() -> usize {
    1
}

/// One graph input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomInput {
    pub shape: Vec<usize>,
    #[serde(default = "f32_type", skip_serializing_if = "is_f32")]
    pub dtype: ElemType,
    #[serde(default, skip_serializing_if = "is_contiguous")]
    pub format: MemoryFormat,
}

/// One node: a generator op over earlier values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RandomNode {
    #[serde(flatten)]
    pub op: RandomOp,
    /// Value ids it reads (earlier inputs or nodes).
    pub args: Vec<usize>,
}

/// A generator op; each expands to the graph-language ops named (see [`build`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum RandomOp {
    /// `mean.dim(x, dims, keepdim, dtype=)`.
    Mean {
        #[serde(default)]
        dims: Vec<i64>,
        #[serde(default, skip_serializing_if = "is_false")]
        keepdim: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dtype: Option<ElemType>,
    },
    /// `adaptive_avg_pool2d(x, 1)`.
    Pool,
    /// `conv2d(x, w, b)`: `w` is `[out, C / groups, kernel, kernel]`, seeded; with `qs8` an
    /// int8 constant on `patterns::Q_W`, dequantized in the graph (fp32 inputs only).
    Conv {
        out: usize,
        kernel: usize,
        #[serde(default = "one", skip_serializing_if = "is_one")]
        stride: usize,
        #[serde(default)]
        padding: usize,
        #[serde(default = "one", skip_serializing_if = "is_one")]
        dilation: usize,
        #[serde(default = "one", skip_serializing_if = "is_one")]
        groups: usize,
        #[serde(default, skip_serializing_if = "is_false")]
        bias: bool,
        #[serde(default, skip_serializing_if = "is_false")]
        qs8: bool,
    },
    /// `a op b` of two values (add, sub, mul; broadcasting).
    Binary {
        binary: BinaryOp,
    },
    /// `x op c` (or `c op x` with `first`) with a seeded constant `c` of `shape`
    /// (broadcasting either way); a divisor is always the constant, in `[0.5, 2]`.
    Constant {
        binary: BinaryOp,
        shape: Vec<usize>,
        #[serde(default, skip_serializing_if = "is_false")]
        first: bool,
    },
    Square,
    /// `rsqrt(clamp(x, min = floor))`.
    Rsqrt {
        floor: f32,
    },
    /// `clamp(x, min, max)`.
    Clamp {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min: Option<f32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max: Option<f32>,
    },
    /// `linear(x, w, b)`, `w` `[out, K]` seeded.
    Linear {
        out: usize,
        #[serde(default, skip_serializing_if = "is_false")]
        bias: bool,
    },
    /// `dequantize(quantize(x, scale, zero_point))`.
    Qdq {
        scale: f32,
        zero_point: i32,
    },
    /// `_to_copy(dtype=, memory_format=)`.
    ToCopy {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dtype: Option<ElemType>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        format: Option<MemoryFormat>,
    },
    Reshape {
        shape: Vec<i64>,
    },
    Permute {
        perm: Vec<i64>,
    },
}

impl RandomOp {
    /// The short name the coverage summary counts.
    pub fn name(&self) -> &'static str {
        match self {
            RandomOp::Mean { .. } => "mean",
            RandomOp::Pool => "pool",
            RandomOp::Conv { .. } => "conv",
            RandomOp::Binary { .. } => "binary",
            RandomOp::Constant { .. } => "constant",
            RandomOp::Square => "square",
            RandomOp::Rsqrt { .. } => "rsqrt",
            RandomOp::Clamp { .. } => "clamp",
            RandomOp::Linear { .. } => "linear",
            RandomOp::Qdq { .. } => "qdq",
            RandomOp::ToCopy { .. } => "to_copy",
            RandomOp::Reshape { .. } => "reshape",
            RandomOp::Permute { .. } => "permute",
        }
    }
}

impl RandomGraph {
    /// Number of values (inputs, then nodes).
    pub fn values(&self) -> usize {
        self.inputs.len() + self.nodes.len()
    }

    /// Every float dtype a value of the graph has (inputs, copies, means' dtype arguments).
    pub fn dtypes(&self) -> Vec<ElemType> {
        let mut out: Vec<ElemType> = self.inputs.iter().map(|i| i.dtype).collect();
        for n in &self.nodes {
            match n.op {
                RandomOp::ToCopy { dtype: Some(d), .. } | RandomOp::Mean { dtype: Some(d), .. } => out.push(d),
                _ => {}
            }
        }
        out.sort_by_key(|d| d.name());
        out.dedup();
        out
    }

    /// The float type whose rounding is coarsest among the graph's (bf16, then fp16, then
    /// fp32): the outputs oracle's compute type for the whole graph.
    pub fn coarsest(&self) -> ElemType {
        let d = self.dtypes();
        [ElemType::Bf16, ElemType::F16].into_iter().find(|t| d.contains(t)).unwrap_or(ElemType::F32)
    }

    /// The float type of smallest range among the graph's (fp16, then bf16, then fp32):
    /// where a partial sum overflows first.
    pub fn narrowest_range(&self) -> ElemType {
        let d = self.dtypes();
        [ElemType::F16, ElemType::Bf16].into_iter().find(|t| d.contains(t)).unwrap_or(ElemType::F32)
    }
}
