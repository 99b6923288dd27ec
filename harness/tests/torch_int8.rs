//! The 20 int8 cases PyTorch's quantizers wrote (`scripts/torch-int8-cases.py`,
//! `corpora/seeds/torch_int8.jsonl`; `corpora.rs` replays them through every oracle): real
//! scales and zero points, and the reference agrees with torch's own int8 outputs (the
//! `// torch:` line before each case) under the tie rule of `oracle::outputs`: the same
//! integer, except one step where the value before the last quantize is within the rule's
//! margin of a rounding boundary (torch sums in f32 in its own order).

use harness::case::Case;
use harness::engine::{self, Interpreter};
use harness::oracle::case_inputs;
use harness::oracle::outputs::tie_steps;
use harness::patterns::{self, magnitude_inputs, q_out, wide_inputs};
use std::path::Path;

#[test]
fn torch_int8_cases_match_torch() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpora/seeds/torch_int8.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut expected: Option<Vec<i64>> = None;
    let (mut cases, mut elements, mut near_ties) = (0, 0, 0);
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("// torch: ") {
            expected = Some(serde_json::from_str(t).unwrap());
            continue;
        }
        if line.starts_with("//") || line.trim().is_empty() {
            continue;
        }
        let case = Case::from_json(line).unwrap();
        let want = expected.take().expect("a `// torch:` line before each case");
        let q = q_out(&case);
        assert!(q.scale.log2().fract() != 0.0, "a real quantizer's scale, not a power of two: {}", q.scale);
        let built = patterns::build(&case).unwrap();
        let inputs = case_inputs(&case, &built, 0, std::slice::from_ref(&case.shape)).unwrap();
        let got = engine::reference(&built.graph, &inputs, Interpreter::Plain).unwrap()[0].values_f64();
        let wide = engine::reference(built.wide(&case).unwrap(), &wide_inputs(&inputs), Interpreter::Plain).unwrap();
        let mag =
            engine::reference(built.magnitude(&case).unwrap(), &magnitude_inputs(&case, &inputs), Interpreter::Plain)
                .unwrap();
        let (w, m) = (wide[0].values_f64(), mag[0].values_f64());
        assert_eq!(got.len(), want.len(), "{}", case.label());
        for i in 0..got.len() {
            let ours = (got[i] / q.scale as f64).round() as i64 + q.zero_point as i64;
            let steps = tie_steps(q.scale, built.acc_len, Some(w[i]), Some(m[i]));
            near_ties += steps as usize;
            assert!(
                (ours - want[i]).abs() as f64 <= steps,
                "{} element {i}: reference {ours}, torch {} (before rounding {:e} steps)",
                case.label(),
                want[i],
                w[i] / q.scale as f64
            );
            elements += 1;
        }
        cases += 1;
    }
    assert_eq!(cases, 20);
    // The rule leaves torch no slack almost anywhere.
    assert!(near_ties * 20 < elements, "{near_ties} of {elements} elements near a tie");
}
