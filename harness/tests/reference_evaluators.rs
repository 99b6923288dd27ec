//! The fuzz loop's reference (`reference::fast`) gives the plain interpreter's values on the
//! fuzz generator's own cases: every run's outputs and every node of the magnitude twin, bit
//! for bit (a NaN equals any NaN), errors included. `reference/tests/fast_matches_plain.rs`
//! covers random graphs of every op; this covers what the fuzz loop actually runs.

use harness::engine::{reference, reference_all, Interpreter};
use harness::gen::{nth_case, GenConfig};
use harness::oracle::case_inputs;
use harness::patterns;
use reference::{Tensor, TensorData};

fn same(a: &[Tensor], b: &[Tensor]) -> Result<(), String> {
    if a.len() != b.len() {
        return Err(format!("{} tensors vs {}", a.len(), b.len()));
    }
    for (k, (a, b)) in a.iter().zip(b).enumerate() {
        if (&a.shape, a.format, a.quant, a.dtype()) != (&b.shape, b.format, b.quant, b.dtype()) {
            return Err(format!("tensor {k}: types differ"));
        }
        let nan = |t: &TensorData, i: usize| match t {
            TensorData::F32(v) => v[i].is_nan(),
            TensorData::F16(v) => v[i].is_nan(),
            TensorData::Bf16(v) => v[i].is_nan(),
            TensorData::Qs8(_) => false,
        };
        if let Some(i) =
            (0..a.data.len()).find(|&i| a.data.bits(i) != b.data.bits(i) && !(nan(&a.data, i) && nan(&b.data, i)))
        {
            return Err(format!("tensor {k} element {i}: {:#x} vs {:#x}", a.data.bits(i), b.data.bits(i)));
        }
    }
    Ok(())
}

#[test]
fn fast_reference_matches_the_plain_one_on_fuzz_cases() {
    let cfg = GenConfig::default();
    let (mut compared, mut twins) = (0, 0);
    for index in 0..1500 {
        let case = nth_case(20261130, index, &cfg);
        let Ok(built) = patterns::build(&case) else { continue };
        for (r, run) in case.runs().iter().enumerate() {
            let shapes = patterns::run_input_shapes(&case, &built.graph, run);
            let Ok(inputs) = case_inputs(&case, &built, r, &shapes) else { continue };
            let plain = reference(&built.graph, &inputs, Interpreter::Plain);
            let fast = reference(&built.graph, &inputs, Interpreter::Fast);
            match (&plain, &fast) {
                (Ok(p), Ok(f)) => {
                    same(p, f).unwrap_or_else(|e| panic!("case {index} run {r}: {e}\n{}", case.to_json()))
                }
                (Err(p), Err(f)) => assert_eq!(p, f, "case {index} run {r}"),
                _ => panic!("case {index} run {r}: plain {plain:?} vs fast {fast:?}"),
            }
            compared += 1;
            if let Some(twin) = built.magnitude(&case) {
                let tin = patterns::magnitude_inputs(&case, &inputs);
                let (p, f) =
                    (reference_all(twin, &tin, Interpreter::Plain), reference_all(twin, &tin, Interpreter::Fast));
                match (&p, &f) {
                    (Ok(p), Ok(f)) => same(p, f).unwrap_or_else(|e| panic!("case {index} twin: {e}")),
                    _ => assert_eq!(p, f, "case {index} twin"),
                }
                twins += 1;
            }
        }
    }
    // Most cases build and run (about 5% are deliberately invalid graphs, still compared).
    assert!(compared > 1400 && twins > 800, "compared {compared} runs and {twins} twins");
}
