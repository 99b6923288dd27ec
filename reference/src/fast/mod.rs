//! The fast evaluator: the values of [`crate::eval`], bit for bit, about 4.4 times faster.
//!
//! The fuzz loop runs the reference on every case, and [`crate::eval`]'s plain loops (an
//! index computed per term) would cost it about 40% of its throughput (callgrind, 300 cases of
//! the default fuzz job: 263 M instructions of reference against 59 M). This evaluator gives
//! every node the same value: each sum is the same compensated `Acc` sum over the same terms
//! in the same order, each op rounds once to the same result. Only the walks differ: many
//! outputs' accumulators advanced at once over contiguous runs ([`reduce`], [`conv`]),
//! broadcasting a row at a time ([`elementwise`]), strided walks over merged dims ([`walk`]),
//! and a fast path for the common case of the fp16/bf16 rounding ([`round`]; input generation
//! in [`crate::data`] uses it and [`walk`]'s layout conversion too).
//!
//! `tests/fast_matches_plain.rs` checks it against [`crate::eval`] on random graphs over every
//! op, dtype, memory format and special value (NaN compared as NaN: which NaN a sum of two
//! NaNs gives is up to the compiler's operand order). `harness replay`, minimization and the
//! reference's own tests use [`crate::eval`]; the fuzz loop uses this.
//!
//! Values live internally in contiguous (logical row-major) order, and graph inputs and
//! constants already contiguous are borrowed; outputs are converted to the format of their
//! node's spec only at the end.

mod conv;
mod elementwise;
mod reduce;
mod round;
mod walk;

use crate::dtype::{ElemType, MemoryFormat};
use crate::eval::EvalError;
use crate::graph::{mean_axes, normalize_dims, with_inputs, Graph, GraphError, GraphErrorKind, Op, TensorSpec};
use crate::tensor::{row_major_strides, Tensor, TensorData};
use round::tensor_from_f64;
use std::borrow::Cow;
use walk::{gather_data, into_format, values_f64};

pub(crate) use round::data_from_f64;
pub(crate) use walk::to_format;

/// Runs `graph` on `inputs` (one tensor per graph input, in order). Returns one tensor per
/// graph output, laid out in the memory format of its node's spec.
pub fn run(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, EvalError> {
    let mut vals = eval_nodes(graph, inputs)?;
    // Each output's value is moved out at its last listing (a node may be listed twice).
    let mut listed = vec![0usize; vals.len()];
    graph.outputs.iter().for_each(|&o| listed[o] += 1);
    let mut outs = Vec::with_capacity(graph.outputs.len());
    for &o in &graph.outputs {
        listed[o] -= 1;
        // Concrete sizes never change a format (it follows ranks and formats only).
        let format = graph.nodes[o].spec.format;
        outs.push(if listed[o] == 0 {
            into_format(std::mem::replace(&mut vals[o], Cow::Borrowed(&TAKEN)).into_owned(), format)
        } else {
            to_format(&vals[o], format)
        });
    }
    Ok(outs)
}

/// Like [`run`], but returns the value of every node (index = node id), each in the memory
/// format of its spec: for locating the first node where another engine diverges.
pub fn run_all(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, EvalError> {
    let vals = eval_nodes(graph, inputs)?;
    Ok(vals.into_iter().zip(&graph.nodes).map(|(v, n)| into_format(v.into_owned(), n.spec.format)).collect())
}

/// What [`run`] leaves in place of a value it moved out.
static TAKEN: Tensor =
    Tensor { shape: Vec::new(), format: MemoryFormat::Contiguous, quant: None, data: TensorData::F32(Vec::new()) };

/// A node's value: graph inputs and constants already contiguous are borrowed, not copied.
type Value<'a> = Cow<'a, Tensor>;

/// `t` in contiguous order, borrowed when it already is.
fn contiguous(t: &Tensor) -> Value<'_> {
    if t.format == MemoryFormat::Contiguous {
        Cow::Borrowed(t)
    } else {
        Cow::Owned(to_format(t, MemoryFormat::Contiguous))
    }
}

/// Every node's value in contiguous order.
fn eval_nodes<'a>(graph: &'a Graph, inputs: &'a [Tensor]) -> Result<Vec<Value<'a>>, EvalError> {
    graph.validate().map_err(EvalError::InvalidGraph)?;
    graph.check_inputs(inputs).map_err(EvalError::BadInput)?;
    // Without a dynamic dim the concrete specs are the graph's own: its inputs' shapes are
    // then their specs' (checked above) and `validate` inferred every other spec from them.
    let concrete = match graph.inputs.iter().any(|&i| graph.nodes[i].spec.is_dynamic()) {
        true => {
            let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
            Some(graph.concrete_specs(&shapes).map_err(EvalError::BadInput)?)
        }
        false => None,
    };

    let mut vals: Vec<Value<'a>> = Vec::with_capacity(graph.nodes.len());
    for (id, node) in graph.nodes.iter().enumerate() {
        let spec = concrete.as_ref().map_or(&node.spec, |specs| &specs[id]);
        let out = with_inputs(&node.inputs, |i| &*vals[i], |ins| eval_node(graph, inputs, id, spec, ins))?;
        vals.push(out);
    }
    Ok(vals)
}

/// The value of node `id` (concrete spec `spec`) from those of its inputs, `ins`.
fn eval_node<'a>(
    graph: &'a Graph,
    inputs: &'a [Tensor],
    id: usize,
    spec: &TensorSpec,
    ins: &[&Tensor],
) -> Result<Value<'a>, EvalError> {
    let node = &graph.nodes[id];
    let shape = spec.max_shape(); // concrete: every dim static here
    let err = |kind| EvalError::InvalidGraph(GraphError { node: id, op: node.op.name().into(), kind });
    let out: Value<'a> = match &node.op {
        Op::Input { .. } => {
            // `validate` guarantees every input node is listed exactly once.
            let pos = graph.inputs.iter().position(|&i| i == id).ok_or_else(|| {
                err(GraphErrorKind::WrongInputCount { expected: "an entry in graph inputs".into(), found: 0 })
            })?;
            contiguous(&inputs[pos])
        }
        Op::Constant { tensor } => contiguous(tensor),
        Op::Mean { dims, dtype, .. } => {
            let axes = mean_axes(dims, ins[0].rank()).map_err(err)?;
            Cow::Owned(reduce::mean(ins[0], &axes, *dtype, &shape, spec.dtype))
        }
        Op::AdaptiveAvgPool2d { .. } => {
            let r = ins[0].rank();
            Cow::Owned(reduce::mean(ins[0], &[r - 2, r - 1], None, &shape, spec.dtype))
        }
        Op::Conv2d(p) => Cow::Owned(conv::conv2d(ins[0], ins[1], ins.get(2).copied(), p, &shape, spec.dtype)),
        Op::Binary(op) => Cow::Owned(elementwise::binary(*op, ins[0], ins[1], &shape, spec.dtype)),
        Op::Square => Cow::Owned(
            elementwise::map_f32(ins[0], spec.dtype, |x| x * x)
                .unwrap_or_else(|| elementwise::map(ins[0], spec.dtype, |x| x * x)),
        ),
        Op::Rsqrt => Cow::Owned(elementwise::map(ins[0], spec.dtype, |x| 1.0 / x.sqrt())),
        Op::Clamp { min, max } => {
            // The same selection in f32 or f64 (the bounds are f32 values).
            fn clamp<T: PartialOrd + Copy>(x: T, lo: Option<T>, hi: Option<T>) -> T {
                let x = match lo {
                    Some(l) if x < l => l,
                    _ => x,
                };
                match hi {
                    Some(h) if x > h => h,
                    _ => x,
                }
            }
            let (lo, hi) = (*min, *max);
            Cow::Owned(elementwise::map_f32(ins[0], spec.dtype, |x| clamp(x, lo, hi)).unwrap_or_else(|| {
                let (lo, hi) = (lo.map(f64::from), hi.map(f64::from));
                elementwise::map(ins[0], spec.dtype, |x| clamp(x, lo, hi))
            }))
        }
        Op::Linear => Cow::Owned(reduce::linear(ins[0], ins[1], ins.get(2).copied(), &shape, spec.dtype)),
        Op::Quantize(q) => Cow::Owned(tensor_from_f64(&shape, ElemType::Qs8, Some(*q), &values_f64(ins[0]))),
        Op::Dequantize(q) => {
            let v: Vec<f64> = match &ins[0].data {
                TensorData::Qs8(d) => d.iter().map(|&x| q.dequantize(x)).collect(),
                _ => return Err(err(GraphErrorKind::DtypeMismatch { expected: ElemType::Qs8, found: ins[0].dtype() })),
            };
            Cow::Owned(tensor_from_f64(&shape, ElemType::F32, None, &v))
        }
        Op::ToCopy { .. } => {
            if spec.dtype == ins[0].dtype() {
                // The same dtype (qs8 included: inference forbids float <-> qs8 here): a copy.
                Cow::Owned(ins[0].clone())
            } else {
                Cow::Owned(tensor_from_f64(&shape, spec.dtype, None, &values_f64(ins[0])))
            }
        }
        // Row-major reinterpretation of the logical values.
        Op::Reshape { .. } => Cow::Owned(Tensor { shape: shape.clone(), ..ins[0].clone() }),
        Op::Permute { perm } => {
            let x = ins[0];
            let p = normalize_dims(perm, x.rank()).map_err(err)?;
            let strides = row_major_strides(&x.shape);
            let st: Vec<usize> = p.iter().map(|&d| strides[d]).collect();
            Cow::Owned(Tensor { shape: shape.clone(), data: gather_data(&x.data, &shape, &st), ..x.clone() })
        }
    };
    if out.shape != shape || out.dtype() != spec.dtype || out.quant != spec.quant || out.data.len() != out.numel() {
        // Inference and evaluation disagree: a bug in this crate, reported, not panicked.
        let kind = GraphErrorKind::ShapeMismatch { expected: shape, found: out.shape.clone() };
        return Err(err(kind));
    }
    Ok(out)
}
