//! [`GraphBuilder`]: graphs built with PyTorch-like calls.

use super::validate::with_inputs;
use super::{
    check_spec, infer, BinaryOp, Conv2dParams, Graph, GraphError, GraphErrorKind, Node, NodeId, Op, TensorSpec, T,
};
use crate::dtype::{ElemType, MemoryFormat, QuantParams};
use crate::tensor::Tensor;
use std::cell::RefCell;

/// Builds a [`Graph`] with PyTorch-like calls. Methods take `&self` so calls nest:
/// `g.mean(g.square(x), &[-1], true)`. The first error is kept and returned by
/// [`GraphBuilder::finish`]; later calls still return usable handles.
#[derive(Default)]
pub struct GraphBuilder {
    inner: RefCell<Inner>,
}

#[derive(Default)]
struct Inner {
    nodes: Vec<Node>,
    inputs: Vec<NodeId>,
    error: Option<GraphError>,
}

impl GraphBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    fn push(&self, op: Op, inputs: &[T]) -> T {
        let mut g = self.inner.borrow_mut();
        let id = g.nodes.len();
        let ids: Vec<NodeId> = inputs.iter().map(|t| t.0).collect();
        let result = if let Some(&bad) = ids.iter().find(|&&i| i >= id) {
            Err(GraphErrorKind::UnknownNode { id: bad })
        } else {
            with_inputs(&ids, |i| &g.nodes[i].spec, |ins| infer(&op, ins))
        };
        let spec = match result {
            Ok(s) => s,
            Err(kind) => {
                if g.error.is_none() {
                    g.error = Some(GraphError { node: id, op: op.name().to_string(), kind });
                }
                ids.first()
                    .and_then(|&i| g.nodes.get(i))
                    .map(|n| n.spec.clone())
                    .unwrap_or_else(|| TensorSpec::f32(&[1]))
            }
        };
        g.nodes.push(Node { op, inputs: ids, spec });
        T(id)
    }

    /// The inferred spec of a value.
    pub fn spec(&self, t: T) -> Option<TensorSpec> {
        self.inner.borrow().nodes.get(t.0).map(|n| n.spec.clone())
    }

    pub fn input(&self, name: &str, spec: TensorSpec) -> T {
        let mut g = self.inner.borrow_mut();
        let id = g.nodes.len();
        if let Err(kind) = check_spec(&spec) {
            if g.error.is_none() {
                g.error = Some(GraphError { node: id, op: "input".into(), kind });
            }
        }
        g.nodes.push(Node { op: Op::Input { name: name.to_string() }, inputs: vec![], spec });
        g.inputs.push(id);
        T(id)
    }

    pub fn constant(&self, tensor: Tensor) -> T {
        self.push(Op::Constant { tensor }, &[])
    }

    /// A 0-D fp32 constant (`x + eps`).
    pub fn scalar(&self, v: f32) -> T {
        self.constant(Tensor::f32(&[], vec![v]))
    }

    /// A 0-D constant of `like`'s float dtype (`x + eps` on an fp16/bf16 `x`; binary ops
    /// require equal dtypes, unlike PyTorch's scalar promotion). `v` is rounded once to that
    /// dtype; a qs8 or unknown `like` gives fp32.
    pub fn scalar_like(&self, v: f32, like: T) -> T {
        let dtype = self.spec(like).map(|s| s.dtype).filter(|d| d.is_float()).unwrap_or(ElemType::F32);
        self.constant(Tensor::from_f64(&[], dtype, None, &[v as f64]))
    }

    /// `x.mean(dims, keepdim)`; an empty `dims` reduces every dim.
    pub fn mean(&self, x: T, dims: &[i64], keepdim: bool) -> T {
        self.push(Op::Mean { dims: dims.to_vec(), keepdim, dtype: None }, &[x])
    }

    /// `x.mean(dims, keepdim, dtype=dtype)`.
    pub fn mean_dtype(&self, x: T, dims: &[i64], keepdim: bool, dtype: ElemType) -> T {
        self.push(Op::Mean { dims: dims.to_vec(), keepdim, dtype: Some(dtype) }, &[x])
    }

    /// `F.adaptive_avg_pool2d(x, output_size)` (`nn.AdaptiveAvgPool2d`); only [1, 1] is valid.
    pub fn adaptive_avg_pool2d(&self, x: T, output_size: [usize; 2]) -> T {
        self.push(Op::AdaptiveAvgPool2d { output_size }, &[x])
    }

    pub fn conv2d(&self, x: T, w: T, b: Option<T>, p: Conv2dParams) -> T {
        let mut ins = vec![x, w];
        ins.extend(b);
        self.push(Op::Conv2d(p), &ins)
    }

    pub fn add(&self, a: T, b: T) -> T {
        self.push(Op::Binary(BinaryOp::Add), &[a, b])
    }
    pub fn sub(&self, a: T, b: T) -> T {
        self.push(Op::Binary(BinaryOp::Sub), &[a, b])
    }
    pub fn mul(&self, a: T, b: T) -> T {
        self.push(Op::Binary(BinaryOp::Mul), &[a, b])
    }
    pub fn div(&self, a: T, b: T) -> T {
        self.push(Op::Binary(BinaryOp::Div), &[a, b])
    }
    pub fn binary(&self, op: BinaryOp, a: T, b: T) -> T {
        self.push(Op::Binary(op), &[a, b])
    }
    pub fn square(&self, x: T) -> T {
        self.push(Op::Square, &[x])
    }
    pub fn rsqrt(&self, x: T) -> T {
        self.push(Op::Rsqrt, &[x])
    }
    pub fn clamp(&self, x: T, min: Option<f32>, max: Option<f32>) -> T {
        self.push(Op::Clamp { min, max }, &[x])
    }
    pub fn relu(&self, x: T) -> T {
        self.clamp(x, Some(0.0), None)
    }
    pub fn hardtanh(&self, x: T, min: f32, max: f32) -> T {
        self.clamp(x, Some(min), Some(max))
    }
    pub fn linear(&self, x: T, w: T, b: Option<T>) -> T {
        let mut ins = vec![x, w];
        ins.extend(b);
        self.push(Op::Linear, &ins)
    }
    pub fn quantize(&self, x: T, scale: f32, zero_point: i32) -> T {
        self.push(Op::Quantize(QuantParams::new(scale, zero_point)), &[x])
    }
    pub fn dequantize(&self, x: T, scale: f32, zero_point: i32) -> T {
        self.push(Op::Dequantize(QuantParams::new(scale, zero_point)), &[x])
    }
    pub fn to_dtype(&self, x: T, dtype: ElemType) -> T {
        self.push(Op::ToCopy { dtype: Some(dtype), format: None }, &[x])
    }
    pub fn to_format(&self, x: T, format: MemoryFormat) -> T {
        self.push(Op::ToCopy { dtype: None, format: Some(format) }, &[x])
    }
    pub fn reshape(&self, x: T, shape: &[i64]) -> T {
        self.push(Op::Reshape { shape: shape.to_vec() }, &[x])
    }
    pub fn permute(&self, x: T, perm: &[i64]) -> T {
        self.push(Op::Permute { perm: perm.to_vec() }, &[x])
    }

    /// Finishes the graph with these outputs, or returns the first error met.
    pub fn finish(self, outputs: &[T]) -> Result<Graph, GraphError> {
        let inner = self.inner.into_inner();
        if let Some(e) = inner.error {
            return Err(e);
        }
        let graph = Graph { nodes: inner.nodes, inputs: inner.inputs, outputs: outputs.iter().map(|t| t.0).collect() };
        graph.validate()?;
        Ok(graph)
    }
}
