//! Concrete inputs for the wide and magnitude twins.

use crate::case::{Case, Pattern};
use reference::{ElemType, Tensor};

pub(super) fn abs_f32(t: &Tensor) -> Tensor {
    let v: Vec<f64> = t.values_f64().into_iter().map(f64::abs).collect();
    let shape = t.shape.clone();
    Tensor::from_f64(&shape, ElemType::F32, None, &v).to_format(t.format)
}

/// `t` in fp32, exactly (every fp16/bf16 value is an fp32 value), in its layout.
pub(super) fn to_f32(t: &Tensor) -> Tensor {
    Tensor::from_f64(&t.shape, ElemType::F32, None, &t.values_f64()).to_format(t.format)
}

/// The wide twin's inputs for concrete inputs of the graph under test: each in fp32.
pub fn wide_inputs(inputs: &[Tensor]) -> Vec<Tensor> {
    inputs.iter().map(to_f32).collect()
}

/// The magnitude twin's inputs for concrete inputs of the graph under test: `|x|` in fp32
/// (plus the true values in fp32 for patterns with a normalizer after a linear).
pub fn magnitude_inputs(case: &Case, inputs: &[Tensor]) -> Vec<Tensor> {
    let mut out: Vec<Tensor> = inputs.iter().map(abs_f32).collect();
    if case.pattern == Pattern::QkNorm {
        for t in inputs {
            let v = t.values_f64();
            out.push(Tensor::from_f64(&t.shape, ElemType::F32, None, &v).to_format(t.format));
        }
    }
    out
}
