//! Whole-graph checks ([`Graph::validate`]), run-time input checks and concrete specs for
//! concrete input shapes.

use super::infer::{infer, infer_from_valid};
use super::{check_spec, Graph, GraphError, GraphErrorKind, NodeId, Op, TensorSpec};
use crate::tensor::Tensor;

/// `f` of the items of `inputs` (`get(i)` each: their specs, their values), listed without an
/// allocation for the usual one to three inputs.
pub(crate) fn with_inputs<'a, X: ?Sized + 'a, R>(
    inputs: &[NodeId],
    get: impl Fn(NodeId) -> &'a X,
    f: impl FnOnce(&[&'a X]) -> R,
) -> R {
    match *inputs {
        [] => f(&[]),
        [a] => f(&[get(a)]),
        [a, b] => f(&[get(a), get(b)]),
        [a, b, c] => f(&[get(a), get(b), get(c)]),
        _ => f(&inputs.iter().map(|&i| get(i)).collect::<Vec<_>>()),
    }
}

impl Graph {
    /// Re-checks every node: inputs defined earlier, specs valid and equal to inference.
    pub fn validate(&self) -> Result<(), GraphError> {
        for (id, node) in self.nodes.iter().enumerate() {
            let err = |kind| GraphError { node: id, op: node.op.name().to_string(), kind };
            if let Some(&bad) = node.inputs.iter().find(|&&i| i >= id) {
                return Err(err(GraphErrorKind::UnknownNode { id: bad }));
            }
            if let Op::Input { .. } = node.op {
                if !node.inputs.is_empty() {
                    return Err(err(GraphErrorKind::WrongInputCount {
                        expected: "0".into(),
                        found: node.inputs.len(),
                    }));
                }
                check_spec(&node.spec).map_err(err)?;
                continue;
            }
            let spec = with_inputs(&node.inputs, |i| &self.nodes[i].spec, |ins| infer_from_valid(&node.op, ins))
                .map_err(err)?;
            if spec != node.spec {
                return Err(err(GraphErrorKind::SpecMismatch));
            }
        }
        let n = self.nodes.len();
        for &i in self.inputs.iter().chain(&self.outputs) {
            if i >= n {
                return Err(GraphError { node: i, op: "graph".into(), kind: GraphErrorKind::UnknownNode { id: i } });
            }
        }
        for &i in &self.inputs {
            if !matches!(self.nodes[i].op, Op::Input { .. }) {
                let kind = GraphErrorKind::WrongInputCount { expected: "an input node".into(), found: 0 };
                return Err(GraphError { node: i, op: self.nodes[i].op.name().into(), kind });
            }
        }
        // Every input node must be bound by exactly one entry of `inputs`: an unlisted one
        // would have no value at run time, a repeated one would take two.
        for (id, node) in self.nodes.iter().enumerate() {
            if let Op::Input { .. } = node.op {
                let found = self.inputs.iter().filter(|&&i| i == id).count();
                if found != 1 {
                    let kind = GraphErrorKind::WrongInputCount { expected: "1 entry in graph inputs".into(), found };
                    return Err(GraphError { node: id, op: node.op.name().into(), kind });
                }
            }
        }
        if self.outputs.is_empty() {
            return Err(GraphError { node: n, op: "graph".into(), kind: GraphErrorKind::NoOutputs });
        }
        Ok(())
    }

    /// Checks concrete run-time inputs (count, dtype, quant, format, dynamic bounds).
    pub fn check_inputs(&self, inputs: &[Tensor]) -> Result<(), GraphError> {
        if inputs.len() != self.inputs.len() {
            let kind = GraphErrorKind::WrongInputCount { expected: self.inputs.len().to_string(), found: inputs.len() };
            return Err(GraphError { node: self.nodes.len(), op: "graph inputs".into(), kind });
        }
        for (&id, t) in self.inputs.iter().zip(inputs) {
            let node = &self.nodes[id];
            node.spec.check_tensor(t).map_err(|kind| GraphError { node: id, op: node.op.name().into(), kind })?;
        }
        Ok(())
    }

    /// Concrete output specs for concrete input shapes (dynamic dims resolved).
    pub fn concrete_specs(&self, input_shapes: &[Vec<usize>]) -> Result<Vec<TensorSpec>, GraphError> {
        let mut specs: Vec<TensorSpec> = Vec::with_capacity(self.nodes.len());
        let mut next_input = 0;
        for (id, node) in self.nodes.iter().enumerate() {
            let err = |kind| GraphError { node: id, op: node.op.name().to_string(), kind };
            let spec = if let Op::Input { .. } = node.op {
                let pos = self.inputs.iter().position(|&i| i == id).unwrap_or(next_input);
                next_input += 1;
                let shape = input_shapes.get(pos).ok_or_else(|| {
                    err(GraphErrorKind::WrongInputCount {
                        expected: self.inputs.len().to_string(),
                        found: input_shapes.len(),
                    })
                })?;
                node.spec.check_shape(shape).map_err(err)?;
                node.spec.concretize(shape)
            } else {
                let ins: Vec<&TensorSpec> = node.inputs.iter().map(|&i| &specs[i]).collect();
                infer(&node.op, &ins).map_err(err)?
            };
            specs.push(spec);
        }
        Ok(specs)
    }
}
