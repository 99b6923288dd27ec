//! The reference interpreter: the spec every delegate result is checked against.
//!
//! Plain on purpose: one function per op in [`ops`], each a loop over its output elements in
//! row-major order that reads its inputs by index, as the PyTorch definition quoted on it
//! reads; single-threaded, no SIMD, no kernel shared with the delegate. Every op widens its
//! inputs exactly to f64 ([`Tensor::values_f64`]), computes in f64 and rounds once to its
//! output type ([`Tensor::from_f64`]: round to nearest, ties to even, see [`crate::dtype`]),
//! so fp16/bf16 results are rounded once per op, as PyTorch eager does per op.
//!
//! Sums (mean, conv, linear) use one compensated accumulator (`sum::Acc`): products of two
//! f32/f16/bf16 values are exact in f64, and the compensated sum is accurate to about one f64
//! ulp of the result, far below an f32 ulp, so the final rounding is the only one that
//! matters except at (astronomically rare) near-ties. A mean is that sum divided by the count
//! in f64, then rounded once. Infinities and NaN propagate as in IEEE arithmetic (a NaN
//! anywhere in a reduced set makes the result NaN; +inf and -inf give NaN).
//!
//! A memory format changes where values are stored, never what they are: ops read logical
//! values and every node's value is stored in the format of its spec.
//!
//! [`crate::fast`] computes the same values faster (the fuzz loop uses it); a proptest checks
//! it against this interpreter bit for bit.

pub mod ops;
pub(crate) mod sum;

use crate::graph::{Graph, GraphError, GraphErrorKind, Op, TensorSpec};
use crate::tensor::Tensor;

/// Why a graph could not be run. Both wrap the [`GraphError`] naming the node and the reason.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// The graph itself fails [`Graph::validate`].
    #[error("invalid graph: {0}")]
    InvalidGraph(GraphError),
    /// The run-time inputs do not fit the graph: wrong count, dtype, quant params, memory
    /// format, data length, static size, or a dynamic size above its bound (or one that makes
    /// a later op's shapes incompatible).
    #[error("bad inputs: {0}")]
    BadInput(GraphError),
}

impl EvalError {
    /// The underlying graph error (node, op, kind).
    pub fn graph_error(&self) -> &GraphError {
        match self {
            EvalError::InvalidGraph(e) | EvalError::BadInput(e) => e,
        }
    }

    pub fn kind(&self) -> &GraphErrorKind {
        &self.graph_error().kind
    }
}

/// Runs `graph` on `inputs` (one tensor per graph input, in order). Returns one tensor per
/// graph output, laid out in the memory format of its node's spec.
pub fn run(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, EvalError> {
    let values = run_all(graph, inputs)?;
    Ok(graph.outputs.iter().map(|&o| values[o].clone()).collect())
}

/// Like [`run`], but returns the value of every node (index = node id), each in the memory
/// format of its spec: for locating the first node where another engine diverges.
pub fn run_all(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, EvalError> {
    let specs = concrete_specs(graph, inputs)?;
    let mut values: Vec<Tensor> = Vec::with_capacity(graph.nodes.len());
    for (id, node) in graph.nodes.iter().enumerate() {
        let spec = &specs[id];
        let ins: Vec<&Tensor> = node.inputs.iter().map(|&i| &values[i]).collect();
        let value = eval_node(graph, inputs, id, spec, &ins)?;
        values.push(value.into_format(spec.format));
    }
    Ok(values)
}

/// Checks the graph and the inputs, then gives every node's spec at the inputs' concrete
/// shapes (dynamic dims resolved).
pub(crate) fn concrete_specs(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<TensorSpec>, EvalError> {
    graph.validate().map_err(EvalError::InvalidGraph)?;
    graph.check_inputs(inputs).map_err(EvalError::BadInput)?;
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    graph.concrete_specs(&shapes).map_err(EvalError::BadInput)
}

/// The value of node `id` (concrete spec `spec`) from those of its inputs, `ins`.
fn eval_node(
    graph: &Graph,
    inputs: &[Tensor],
    id: usize,
    spec: &TensorSpec,
    ins: &[&Tensor],
) -> Result<Tensor, EvalError> {
    let node = &graph.nodes[id];
    let shape = spec.max_shape(); // concrete: every dim static here
    let err = |kind| EvalError::InvalidGraph(GraphError { node: id, op: node.op.name().into(), kind });
    let out = match &node.op {
        Op::Input { .. } => {
            // `validate` guarantees every input node is listed exactly once.
            let pos = graph.inputs.iter().position(|&i| i == id).ok_or_else(|| {
                err(GraphErrorKind::WrongInputCount { expected: "an entry in graph inputs".into(), found: 0 })
            })?;
            inputs[pos].clone()
        }
        Op::Constant { tensor } => tensor.clone(),
        Op::Mean { dims, dtype, .. } => ops::mean(ins[0], dims, *dtype, &shape, spec.dtype).map_err(err)?,
        // Output size [1, 1] (the only one that validates) is exactly the mean over H and W.
        Op::AdaptiveAvgPool2d { .. } => ops::mean(ins[0], &[-2, -1], None, &shape, spec.dtype).map_err(err)?,
        Op::Conv2d(p) => ops::conv2d(ins[0], ins[1], ins.get(2).copied(), p, &shape, spec.dtype),
        Op::Binary(op) => ops::binary(*op, ins[0], ins[1], &shape, spec.dtype),
        Op::Square => ops::square(ins[0], spec.dtype),
        Op::Rsqrt => ops::rsqrt(ins[0], spec.dtype),
        Op::Clamp { min, max } => ops::clamp(ins[0], *min, *max, spec.dtype),
        Op::Linear => ops::linear(ins[0], ins[1], ins.get(2).copied(), &shape, spec.dtype),
        Op::Quantize(q) => ops::quantize(ins[0], *q),
        Op::Dequantize(q) => ops::dequantize(ins[0], *q).map_err(err)?,
        Op::ToCopy { .. } => ops::to_copy(ins[0], spec.dtype),
        Op::Reshape { .. } => ops::reshape(ins[0], &shape),
        Op::Permute { perm } => ops::permute(ins[0], perm).map_err(err)?,
    };
    if out.shape != shape || out.dtype() != spec.dtype || out.quant != spec.quant || out.data.len() != out.numel() {
        // Inference and evaluation disagree: a bug in this crate, reported, not panicked.
        let kind = GraphErrorKind::ShapeMismatch { expected: shape, found: out.shape.clone() };
        return Err(err(kind));
    }
    Ok(out)
}
