//! The graph language and its scalar reference interpreter.
//!
//! This crate is the spec: [`graph`] is the program a user writes (PyTorch-like, NCHW
//! semantics), [`eval`] runs it in f64 with a single rounding per op, [`data`] makes
//! seeded inputs. The delegate reads [`graph`] but never calls [`eval`], and shares no
//! kernel with it.

#![forbid(unsafe_code)]

pub mod data;
pub mod dtype;
pub mod eval;
pub mod graph;
pub mod tensor;

pub use dtype::{ElemType, MemoryFormat, QuantParams};
pub use graph::{Graph, GraphBuilder, GraphError, GraphErrorKind, NodeId, Op, TensorSpec, T};
pub use tensor::{Tensor, TensorData};
