//! Real XNNPACK against the reference: the outputs oracle's `xnnpack_mismatch` and the errors
//! oracle's `xnnpack_refuses`.
//!
//! Each distinct lowered program of a case runs on real XNNPACK at 1 thread and at the case's
//! thread counts above 1 (a pthreadpool of that many; the fuzz loop samples this matrix, see
//! [`super::CheckOptions::sampled`]), on the same inputs as our runtime, and is compared with the reference under the same derived tolerances
//! ([`super::outputs::tolerance`]): XNNPACK accumulates in f32 in its own order and rounds each
//! op to its tensor type, which is what those bounds cover.
//!
//! - `outputs/xnnpack_mismatch`: an output beyond its tolerance; the detail lists XNNPACK's and
//!   the reference's values of every differing element (an output bit-identical to one that
//!   passed at a lower thread count has that verdict without a second comparison);
//! - `errors/xnnpack_refuses`: our runtime runs the program but XNNPACK refuses it at define,
//!   create or reshape time (or at setup or invoke), or the reverse: our runtime refuses a
//!   program whose every segment XNNPACK defines and creates; the detail has the stage, node,
//!   datatypes and status. A refusal documented as real XNNPACK behaviour ([`KNOWN`]) is a
//!   skip with its explanation, and its outputs check a skip with the refusal, never a pass.
//!
//! Some behaviours of this XNNPACK build differ from PyTorch's (and the reference's)
//! semantics; [`super::behaviours`] says which and models each, narrowly. An output beyond its
//! tolerance of the reference passes only when it is within the same tolerance of a model of
//! a documented behaviour that applies to the program.

use super::behaviours::Models;
use super::outputs::compare::{compare, Evidence};
use super::outputs::tolerance;
use super::{RefRun, Verdict};
use crate::case::Case;
use crate::engine::{self, Config, EngineError, Instance, Prepared, Simd};
use crate::patterns::Built;
use delegate::program::Step;
use delegate::LoweredProgram;

/// The evidence of reference run `run` for its output `o` (as the outputs oracle's).
struct RunEvidence<'r, 'a> {
    run: &'r RefRun<'a>,
    o: usize,
}

impl Evidence for RunEvidence<'_, '_> {
    fn magnitude(&self) -> Option<&[f64]> {
        self.run.magnitude_values(self.o)
    }
    fn peak(&self) -> f64 {
        self.run.peak_magnitude()
    }
    fn wide(&self) -> Option<&[f64]> {
        self.run.wide_values(self.o)
    }
    fn nan_reach(&self) -> Option<&[f64]> {
        self.run.nan_reach_values(self.o)
    }
}

/// What real XNNPACK did with one lowered program.
pub struct RealExec {
    pub outputs: Verdict,
    pub errors: Verdict,
    /// `xnn_invoke_runtime` calls that succeeded.
    pub invocations: u64,
    /// Whether XNNPACK ran the program at all, or why not.
    pub ran: Result<(), String>,
}

/// A refusal documented as real XNNPACK behaviour, pinned by a regression case.
pub struct Known {
    /// Does this documented behaviour explain the refusal?
    pub matches: fn(&xnnpack::Refusal) -> bool,
    pub why: &'static str,
}

/// Refusals that are the library's documented behaviour rather than a bug of ours.
pub const KNOWN: &[Known] = &[];

fn known(r: &xnnpack::Refusal) -> Option<&'static str> {
    KNOWN.iter().find(|k| (k.matches)(r)).map(|k| k.why)
}

fn skip(why: impl Into<String>) -> RealExec {
    let why = why.into();
    RealExec { outputs: Verdict::Skip(why.clone()), errors: Verdict::Skip(why.clone()), invocations: 0, ran: Err(why) }
}

/// The verdicts when XNNPACK refused what our runtime ran.
fn refused(r: &xnnpack::Refusal, config: &str, invocations: u64) -> RealExec {
    let text = format!("{config}: {r}");
    let errors = match known(r) {
        Some(why) => Verdict::Skip(format!("known XNNPACK behaviour: {why} ({r})")),
        None => Verdict::fail("xnnpack_refuses", format!("our runtime runs it; {text}")),
    };
    RealExec { outputs: Verdict::Skip(text.clone()), errors, invocations, ran: Err(r.to_string()) }
}

/// Our runtime could not prepare the program: does XNNPACK define and create every segment?
fn reverse_check(program: &LoweredProgram, ours: &EngineError, lib: &'static xnnpack::Xnnpack) -> RealExec {
    let pool = match lib.pool(1) {
        Ok(p) => p,
        Err(r) => return skip(r.to_string()),
    };
    let segments = program.steps.iter().filter_map(|s| match s {
        Step::Delegate(d) => Some(d),
        Step::Portable(_) => None,
    });
    for (k, seg) in segments.enumerate() {
        let bytes = match engine::write(&seg.graph) {
            Ok(b) => b,
            Err(e) => return skip(format!("segment {k} does not serialize: {e}")),
        };
        let loaded = match engine::load(&bytes) {
            Ok(g) => g,
            Err(e) => return skip(format!("segment {k} does not load: {e}")),
        };
        if let Err(r) = xnnpack::compile::compile(lib, &loaded, seg.inputs.len(), &pool, 0) {
            // Both refuse: consistent.
            return skip(format!("our runtime and XNNPACK both refuse it ({ours}; {r})"));
        }
    }
    RealExec {
        outputs: Verdict::Skip(format!("our runtime refuses it: {ours}")),
        errors: Verdict::fail(
            "xnnpack_refuses",
            format!("XNNPACK defines and creates every segment, our runtime refuses the program: {ours}"),
        ),
        invocations: 0,
        ran: Err(format!("our runtime refuses it: {ours}")),
    }
}

/// Runs a lowered program on real XNNPACK at each of `threads` (pthreadpools of that size), on
/// every run of the case, comparing with the reference. `ours` is our runtime's prepared
/// program (its loaded graphs serve XNNPACK) or why it did not prepare; `ours_ran` says whether
/// our runtime ran every run without an error.
pub fn execute(
    case: &Case,
    built: &Built,
    runs: &[RefRun],
    program: &LoweredProgram,
    ours: Result<&Prepared, &EngineError>,
    ours_ran: bool,
    threads: &[usize],
) -> RealExec {
    if !program.steps.iter().any(|s| matches!(s, Step::Delegate(_))) {
        return skip("no delegate segment: nothing runs on XNNPACK");
    }
    let engine = engine::Xnnpack::new();
    let Some(lib) = engine.library() else {
        return skip(engine::Engine::unavailable(&engine).unwrap_or_default());
    };
    let ours = match ours {
        Ok(p) => p,
        Err(e) if e.unavailable => return skip(e.message.clone()),
        Err(e) => return reverse_check(program, e, lib),
    };
    if ours.loaded_graphs().iter().any(super::behaviours::folded_convert) {
        // Behaviour 7: XNNPACK corrupts its heap on this payload; running it would abort.
        return skip("behaviour 7: a converted value copied and read again (XNNPACK corrupts its heap)");
    }
    if ours.loaded_graphs().iter().any(super::behaviours::disjoint_clamps) {
        // Behaviour 8: XNNPACK fuses the clamps and refuses the empty range.
        return skip("behaviour 8: a clamp after a clamped node with a disjoint range (XNNPACK refuses it)");
    }
    // Behaviour 10: a long qs8 row may wrap; a difference there is explained, not a pass.
    let wraps = ours.loaded_graphs().iter().any(super::behaviours::qs8_wrapping_rows);
    let models = Models::new(built, program, ours.loaded_graphs(), runs);
    let dw_taps = ours.loaded_graphs().iter().map(super::behaviours::fp16_dwconv_taps).max().unwrap_or(0);
    let mut failing: Vec<String> = vec![];
    let mut first_detail: Option<String> = None;
    let mut errors = Verdict::Pass;
    // Each output that passed at an earlier thread count, by run: the same bits at the next one
    // get the same verdict (the comparison is a function of the values), so it is not redone.
    let mut passed: Vec<Vec<Option<reference::Tensor>>> = vec![vec![]; runs.len()];
    // Invocations of the instances done with, and of the one running.
    let mut done = 0;
    let mut invocations = 0;
    for &t in threads {
        let config = format!("{} xnnpack threads={t}", program.mode.name());
        let mut inst = match engine.build_from(ours, program, Config::new(t, Simd::Best)) {
            Ok(i) => i,
            Err(EngineError { refusal: Some(r), .. }) if ours_ran => return refused(&r, &config, invocations),
            Err(e) => return skip(format!("{config}: {e}")),
        };
        for (r, run) in runs.iter().enumerate() {
            let run_name = if runs.len() > 1 { format!(" run {r} shapes {:?}", run.shapes[0]) } else { String::new() };
            let got = inst.run(&run.inputs);
            invocations = done + inst.invocations();
            match (&run.outputs, got) {
                (Ok(want), Ok(got)) => {
                    if got.len() != want.len() {
                        failing.push(format!("{config}{run_name}"));
                        first_detail.get_or_insert_with(|| {
                            format!("{} outputs from XNNPACK, {} from the reference", got.len(), want.len())
                        });
                        continue;
                    }
                    passed[r].resize(got.len(), None);
                    for (o, (w, g)) in want.iter().zip(&got).enumerate() {
                        if passed[r][o].as_ref().is_some_and(|p| same_bits(p, g)) {
                            continue;
                        }
                        let ev = RunEvidence { run, o };
                        let mut tol = tolerance(case, built, o, run.shapes.first().map_or(&[], |s| s));
                        // Behaviour 6: fp16 depthwise taps round like ops.
                        tol.ops += dw_taps.div_ceil(2);
                        let mut differs = compare(w, run.values(o), g, &ev, &tol);
                        if differs.is_some() {
                            // A documented behaviour (see `behaviours`) may explain it.
                            let mut within =
                                |m: &reference::Tensor, g: &reference::Tensor| compare(m, None, g, &ev, &tol).is_none();
                            if models.explains(r, o, w, g, tol.step, &mut within) {
                                differs = None;
                            }
                        }
                        if differs.is_none() {
                            passed[r][o] = Some(g.clone());
                        }
                        if let Some(d) = differs {
                            failing.push(format!("{config}{run_name} output {o}"));
                            first_detail.get_or_insert_with(|| {
                                // The comparison names the engine under test "delegate".
                                format!("[{config}{run_name} output {o}] {}", d.replace("delegate", "xnnpack"))
                            });
                            break;
                        }
                    }
                }
                (Ok(_), Err(EngineError { refusal: Some(r), .. })) if ours_ran => {
                    return refused(&r, &format!("{config}{run_name}"), invocations)
                }
                (Ok(_), Err(e)) => {
                    // Our runtime's part (hand-offs, portable ops) failed or XNNPACK refused
                    // a run our runtime also failed: the runtime's own checks report it.
                    return RealExec { invocations, ..skip(format!("{config}{run_name}: {e}")) };
                }
                (Err(want), Ok(_)) => {
                    if !errors.is_fail() {
                        errors = Verdict::fail(
                            "xnnpack_refuses",
                            format!("{config}{run_name}: the reference rejects it ({want}), XNNPACK runs it"),
                        );
                    }
                }
                (Err(_), Err(_)) => {}
            }
        }
        done = invocations;
    }
    let outputs = match first_detail {
        Some(d) if wraps => Verdict::Skip(format!(
            "behaviour 10: a qs8 mean over a row of more than {} elements (XNNPACK's int16 lanes wrap): {d}",
            super::behaviours::QS8_EXACT_ROW
        )),
        Some(d) => Verdict::fail("xnnpack_mismatch", format!("fails at: {}\n{d}", failing.join("; "))),
        None => Verdict::Pass,
    };
    RealExec { outputs, errors, invocations, ran: Ok(()) }
}

/// The same shape, layout, quantization and element bits (NaN payloads and signed zeros
/// included): two such outputs get the same comparison verdict.
pub(super) fn same_bits(a: &reference::Tensor, b: &reference::Tensor) -> bool {
    use reference::tensor::TensorData as D;
    fn bits<T, U: PartialEq>(x: &[T], y: &[T], f: impl Fn(&T) -> U) -> bool {
        x.len() == y.len() && x.iter().zip(y).all(|(p, q)| f(p) == f(q))
    }
    a.shape == b.shape
        && a.format == b.format
        && a.quant == b.quant
        && match (&a.data, &b.data) {
            (D::F32(x), D::F32(y)) => bits(x, y, |v| v.to_bits()),
            (D::F16(x), D::F16(y)) => bits(x, y, |v| v.to_bits()),
            (D::Bf16(x), D::Bf16(y)) => bits(x, y, |v| v.to_bits()),
            (D::Qs8(x), D::Qs8(y)) => x == y,
            _ => false,
        }
}

#[cfg(test)]
mod tests {
    use super::same_bits;
    use reference::Tensor;

    #[test]
    fn same_bits_tells_signed_zeros_nan_payloads_and_shapes_apart() {
        let t = |v: Vec<f32>| Tensor::f32(&[2], v);
        assert!(same_bits(&t(vec![1.5, f32::NAN]), &t(vec![1.5, f32::NAN])));
        assert!(!same_bits(&t(vec![0.0, 1.0]), &t(vec![-0.0, 1.0])));
        assert!(!same_bits(&t(vec![f32::NAN, 1.0]), &t(vec![f32::from_bits(0x7fc0_0001), 1.0])));
        assert!(!same_bits(&t(vec![1.0, 2.0]), &Tensor::f32(&[2, 1], vec![1.0, 2.0])));
        assert!(!same_bits(&t(vec![1.0, 2.0]), &t(vec![1.0, 2.0000002])));
    }
}
