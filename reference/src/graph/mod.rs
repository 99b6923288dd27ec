//! The graph language: a small PyTorch-like dataflow graph with NCHW semantics.
//!
//! Build one with [`GraphBuilder`] (methods read like the PyTorch they mirror), or
//! construct [`Graph`] directly and call [`Graph::validate`]. Shape and dtype inference
//! ([`infer`]) is the single source of truth for what every op produces; every invalid
//! graph gets a [`GraphError`] naming the node and the reason, never a panic.
//!
//! - [`ops`]: the operations ([`Op`]) and their parameters;
//! - [`spec`]: value types ([`TensorSpec`], [`Dim`]) and the checks every spec passes;
//! - [`dims`]: dims lists of means and permutes, broadcasting of shapes;
//! - [`infer`](mod@infer): what each op produces, one function per op;
//! - [`validate`]: whole-graph checks, run-time input checks, concrete specs;
//! - [`builder`], home of [`GraphBuilder`];
//! - [`error`]: [`GraphError`], its kinds and classes.

pub mod builder;
pub mod dims;
pub mod error;
pub mod infer;
pub mod ops;
pub mod spec;
pub mod validate;

pub use builder::GraphBuilder;
pub use dims::{broadcast, mean_axes, normalize_dims};
pub use error::{ErrorClass, GraphError, GraphErrorKind};
pub use infer::infer;
pub use ops::{BinaryOp, Conv2dParams, Op};
pub use spec::{check_spec, Dim, TensorSpec, MAX_NUMEL, MAX_RANK};

pub(crate) use validate::with_inputs;

use serde::{Deserialize, Serialize};

/// Index of a node in [`Graph::nodes`].
pub type NodeId = usize;

/// A handle to a builder value (a node id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct T(pub NodeId);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<NodeId>,
    /// The inferred output spec.
    pub spec: TensorSpec,
}

/// A validated graph: nodes in topological order, graph inputs in call order, outputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub inputs: Vec<NodeId>,
    pub outputs: Vec<NodeId>,
}
