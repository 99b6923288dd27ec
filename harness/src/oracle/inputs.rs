//! A case's concrete inputs: inline tensors checked against what the graph takes, or
//! seeded data (put on the input quantization grid for qs8 cases).

use crate::case::{Case, InvalidCase};
use crate::engine;
use crate::patterns::{self, Built};
use reference::{ElemType, Tensor};

/// Concrete inputs of run `r` of a case: inline when the case carries them, else seeded.
/// Inline tensors must be what the graph's inputs take (dtype, layout, a shape that fits
/// the input and is this run's), one per graph input per run, no more: anything else is
/// the case's mistake, reported as such, never a rejection by the reference.
pub fn case_inputs(case: &Case, built: &Built, r: usize, shapes: &[Vec<usize>]) -> Result<Vec<Tensor>, InvalidCase> {
    let n_in = built.graph.inputs.len();
    if let Some(inline) = &case.inputs {
        let want = case.runs().len() * n_in;
        if inline.len() != want {
            return Err(InvalidCase::new(
                "inputs",
                format!(
                    "{} inline tensors, but the case takes {want} (one per graph input per run: {} x {n_in})",
                    inline.len(),
                    case.runs().len(),
                ),
            ));
        }
        let mut out = vec![];
        for (j, (it, &id)) in inline[r * n_in..(r + 1) * n_in].iter().zip(&built.graph.inputs).enumerate() {
            let k = r * n_in + j;
            let field = format!("inputs[{k}]");
            let spec = &built.graph.nodes[id].spec;
            let t = it.to_tensor().map_err(|e| InvalidCase::new(&field, format!("{e:#}")))?;
            let t = match (case.dtype, t.dtype(), t.quant) {
                // A qs8 case's graph takes fp32 and quantizes it with its input quantization
                // inside (`patterns::q_in`): an int8 tensor on that grid is its own
                // dequantization, `fl32(scale (q - zp))` as PyTorch's `dequantize` gives it,
                // which that quantize maps back to `q` exactly; any other would be
                // requantized, not run as written.
                (ElemType::Qs8, ElemType::Qs8, Some(q)) if q == patterns::q_in(case) => {
                    Tensor::from_f64(&t.shape, ElemType::F32, None, &t.values_f64()).to_format(t.format)
                }
                (ElemType::Qs8, ElemType::Qs8, q) => {
                    let given = q.map_or("no quantization".into(), |q| {
                        format!("scale {} and zero point {}", q.scale, q.zero_point)
                    });
                    return Err(InvalidCase::new(
                        &field,
                        format!(
                            "an int8 tensor with {given}; a qs8 case's graph quantizes its fp32 input \
                             with scale {} and zero point {}: give that quantization, or the fp32 values",
                            patterns::q_in(case).scale,
                            patterns::q_in(case).zero_point
                        ),
                    ));
                }
                _ => t,
            };
            if built.ties && !on_input_grid(case, &t) {
                return Err(InvalidCase::new(
                    &field,
                    "a qs8 case with `qparams` takes inputs on its input grid (the tie rule assumes \
                     an exact first quantize): give the int8 tensor, or its exact dequantization",
                ));
            }
            if case.invalid.is_none() {
                spec.check_tensor(&t)
                    .map_err(|e| InvalidCase::new(&field, format!("not what the graph input takes: {e}")))?;
            }
            if shapes.get(j).is_some_and(|s| *s != t.shape) {
                let s = &shapes[j];
                return Err(InvalidCase::new(&field, format!("shape {:?}, but run {r}'s shape is {s:?}", t.shape)));
            }
            out.push(t);
        }
        return Ok(out);
    }
    let seed = case.seed.wrapping_add((r as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut inputs = engine::generate_inputs(&built.graph, shapes, seed, case.specials);
    if let Some(q) = built.input_grid {
        // Put qs8 inputs on the input quantization grid (see `patterns`): exact quantize.
        // Under a real quantizer's parameters, on its int8 range too (`fl32(s (q - zp))`):
        // the twins drop the quantize, so a saturating one would not be their input.
        let (step, zp) = (q.scale as f64, q.zero_point as f64);
        let grid = |x: &f64| match built.ties {
            true => ((x / step).round().clamp(-128.0 - zp, 127.0 - zp) as f32 * q.scale) as f64,
            false => (x / step).round() * step,
        };
        for t in &mut inputs {
            let v: Vec<f64> = t.values_f64().iter().map(grid).collect();
            *t = Tensor::from_f64(&t.shape, t.dtype(), t.quant, &v).to_format(t.format);
        }
    }
    Ok(inputs)
}

/// Whether every value of `t` is `fl32(scale k)` for an integer `k` that the input
/// quantization maps to itself (`q = k + zp` in -128..=127).
fn on_input_grid(case: &Case, t: &Tensor) -> bool {
    let q = patterns::q_in(case);
    t.values_f64().iter().all(|&x| {
        let k = (x / q.scale as f64).round();
        (-128.0..=127.0).contains(&(k + q.zero_point as f64)) && (k as f32 * q.scale) as f64 == x
    })
}
