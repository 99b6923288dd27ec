//! Oracles: each judges one property of a case and gives one [`Verdict`] per check.
//!
//! - [`outputs`]: delegate vs reference values, every lowering mode, every thread count,
//!   SIMD and fallback paths, within a derived per-dtype tolerance;
//! - [`errors`]: both sides accept and reject the same graphs and runs, with the same
//!   [`reference::graph::ErrorClass`];
//! - [`bytes`]: serialization is deterministic (twice, and at every thread count), load then
//!   re-serialize is the identity, GAP-only programs are identical across modes;
//! - [`structure`]: each mode's summary obeys the mode's rules.
//!
//! A failure is labelled `<oracle>/<kind>` (for example `outputs/mismatch`,
//! `errors/class_mismatch`, `bytes/nondeterministic`, `structure/mean_outside`); a panic
//! anywhere is labelled `panic`. [`check`] runs every oracle on one case.

pub mod bytes;
pub mod errors;
pub mod outputs;
pub mod structure;

use crate::case::Case;
use crate::engine::{self, EngineError, Simd};
use crate::patterns::{self, Built};
use delegate::{LoweredProgram, LoweringMode};
use reference::Tensor;
use serde::{Deserialize, Serialize};

/// Which oracle a check belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OracleKind {
    Outputs,
    Errors,
    Bytes,
    Structure,
    /// Something panicked while checking the case.
    Panic,
}

impl OracleKind {
    pub const ALL: [OracleKind; 5] =
        [OracleKind::Outputs, OracleKind::Errors, OracleKind::Bytes, OracleKind::Structure, OracleKind::Panic];

    pub fn name(self) -> &'static str {
        match self {
            OracleKind::Outputs => "outputs",
            OracleKind::Errors => "errors",
            OracleKind::Bytes => "bytes",
            OracleKind::Structure => "structure",
            OracleKind::Panic => "panic",
        }
    }
}

/// The outcome of one check.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Pass,
    Skip(String),
    /// `kind` is the failure label after the oracle's name (`mismatch`, `class_mismatch`...).
    Fail {
        kind: String,
        detail: String,
    },
}

impl Verdict {
    pub fn fail(kind: &str, detail: impl Into<String>) -> Verdict {
        Verdict::Fail { kind: kind.to_string(), detail: detail.into() }
    }
    pub fn is_fail(&self) -> bool {
        matches!(self, Verdict::Fail { .. })
    }
}

/// One oracle's verdict on one scope of a case (a mode, or the whole case).
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    pub oracle: OracleKind,
    /// `main`, `static_mean`, `nhwc_aware`, or `case`.
    pub scope: String,
    pub verdict: Verdict,
}

impl Check {
    /// `outputs/mismatch` for a failure, `outputs` otherwise.
    pub fn label(&self) -> String {
        match &self.verdict {
            Verdict::Fail { kind, .. } => format!("{}/{}", self.oracle.name(), kind),
            _ => self.oracle.name().to_string(),
        }
    }
}

/// Every check made on one case.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CaseReport {
    pub checks: Vec<Check>,
}

impl CaseReport {
    pub fn first_failure(&self) -> Option<&Check> {
        self.checks.iter().find(|c| c.verdict.is_fail())
    }

    pub fn failed(&self) -> bool {
        self.first_failure().is_some()
    }

    fn push(&mut self, oracle: OracleKind, scope: &str, verdict: Verdict) {
        self.checks.push(Check { oracle, scope: scope.to_string(), verdict });
    }

    /// A panic while checking (caught by the caller).
    pub fn panicked(message: String) -> CaseReport {
        let mut r = CaseReport::default();
        r.push(OracleKind::Panic, "case", Verdict::fail("panic", message));
        r
    }
}

/// What [`check`] runs besides the case's own lists.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// SIMD paths to run at 1 thread.
    pub simd_paths: Vec<Simd>,
    /// SIMD paths to run at the case's other thread counts.
    pub threaded_simd_paths: Vec<Simd>,
    /// Modes whose programs run at the other thread counts (`None`: every mode).
    pub threaded_modes: Option<Vec<LoweringMode>>,
}

impl Default for CheckOptions {
    /// The full matrix: both paths at every thread count.
    fn default() -> Self {
        CheckOptions {
            simd_paths: vec![Simd::Best, Simd::Fallback],
            threaded_simd_paths: vec![Simd::Best, Simd::Fallback],
            threaded_modes: None,
        }
    }
}

impl CheckOptions {
    /// The fuzz loop's matrix for case `index`: every mode on both paths at 1 thread, and
    /// one mode on one path at N threads, rotating by case (every mode and path meet N
    /// threads over any six consecutive cases). Starting a pool costs a thread spawn, the
    /// largest fixed cost of a small case.
    pub fn sampled(index: u64) -> CheckOptions {
        let path = if index % 2 == 0 { Simd::Best } else { Simd::Fallback };
        let mode = LoweringMode::ALL[(index / 2 % 3) as usize];
        CheckOptions {
            simd_paths: vec![Simd::Best, Simd::Fallback],
            threaded_simd_paths: vec![path],
            threaded_modes: Some(vec![mode]),
        }
    }
}

/// The reference's view of one run: inputs, outputs (or its error) and magnitudes.
pub struct RefRun {
    pub shapes: Vec<Vec<usize>>,
    pub inputs: Vec<Tensor>,
    pub outputs: Result<Vec<Tensor>, EngineError>,
    pub magnitude: Option<Vec<Tensor>>,
}

/// Concrete inputs of run `r` of a case: inline when the case carries them, else seeded.
pub fn case_inputs(case: &Case, built: &Built, r: usize, shapes: &[Vec<usize>]) -> Result<Vec<Tensor>, String> {
    let n_in = built.graph.inputs.len();
    if let Some(inline) = &case.inputs {
        let chunk = inline
            .get(r * n_in..(r + 1) * n_in)
            .ok_or_else(|| format!("case has {} inline tensors, run {r} needs {} more", inline.len(), n_in))?;
        return chunk.iter().map(|t| t.to_tensor().map_err(|e| format!("{e:#}"))).collect();
    }
    let seed = case.seed.wrapping_add((r as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut inputs = engine::generate_inputs(&built.graph, shapes, seed, case.specials);
    if let Some(step) = built.input_grid {
        // Put qs8 inputs on the input quantization grid (see `patterns`): exact quantize.
        for t in &mut inputs {
            let v: Vec<f64> = t.values_f64().iter().map(|x| (x / step as f64).round() * step as f64).collect();
            *t = Tensor::from_f64(&t.shape, t.dtype(), t.quant, &v).to_format(t.format);
        }
    }
    Ok(inputs)
}

/// The reference runs of a case (one per run shape).
pub fn reference_runs(case: &Case, built: &Built) -> Result<Vec<RefRun>, String> {
    let mut runs = vec![];
    for (r, run) in case.runs().iter().enumerate() {
        let shapes = patterns::run_input_shapes(case, &built.graph, run);
        let inputs = case_inputs(case, built, r, &shapes)?;
        let outputs = engine::reference(&built.graph, &inputs);
        let magnitude = match (&outputs, &built.magnitude) {
            (Ok(_), Some(m)) => {
                let mi = patterns::magnitude_inputs(case, &inputs);
                Some(engine::reference(m, &mi).map_err(|e| format!("magnitude graph: {e}"))?)
            }
            _ => None,
        };
        runs.push(RefRun { shapes, inputs, outputs, magnitude });
    }
    Ok(runs)
}

/// Runs every oracle on a case.
pub fn check(case: &Case, opts: &CheckOptions) -> CaseReport {
    let mut report = CaseReport::default();
    let built = match patterns::build(case) {
        Ok(b) => b,
        Err(e) => {
            for o in [OracleKind::Outputs, OracleKind::Errors, OracleKind::Bytes, OracleKind::Structure] {
                report.push(o, "case", Verdict::Skip(e.to_string()));
            }
            return report;
        }
    };
    let runs = match reference_runs(case, &built) {
        Ok(r) => r,
        Err(e) => {
            report.push(OracleKind::Errors, "case", Verdict::Skip(format!("inputs: {e}")));
            return report;
        }
    };
    // The reference must accept exactly the valid cases.
    report.push(OracleKind::Errors, "reference", errors::reference_verdict(case, &runs));

    // Lower every mode the case asks for, plus StaticMean when NhwcAware needs its summary.
    let mut programs: Vec<(LoweringMode, Result<LoweredProgram, EngineError>)> = vec![];
    let mut modes = case.modes.clone();
    if modes.contains(&LoweringMode::NhwcAware) && !modes.contains(&LoweringMode::StaticMean) {
        modes.push(LoweringMode::StaticMean);
    }
    for &mode in &modes {
        programs.push((mode, engine::lower(&built.graph, mode)));
    }
    let static_summary = programs
        .iter()
        .find(|(m, _)| *m == LoweringMode::StaticMean)
        .and_then(|(_, p)| p.as_ref().ok())
        .map(|p| p.summary.clone());

    let mut mode_payloads: Vec<(LoweringMode, Vec<Vec<u8>>)> = vec![];
    for (mode, program) in &programs {
        if !case.modes.contains(mode) {
            continue;
        }
        let scope = mode.name();
        let program = match program {
            Ok(p) => p,
            Err(e) => {
                let v = errors::lower_verdict(case, &runs, e);
                report.push(OracleKind::Errors, scope, v);
                for o in [OracleKind::Outputs, OracleKind::Bytes, OracleKind::Structure] {
                    report.push(o, scope, Verdict::Skip(format!("lowering failed: {e}")));
                }
                continue;
            }
        };
        if let Some(v) = errors::accepted_verdict(case) {
            report.push(OracleKind::Errors, scope, v);
            continue;
        }
        report.push(OracleKind::Structure, scope, structure::verdict(case, &built, program, static_summary.as_ref()));
        let (bytes_verdict, payloads) = bytes::segment_verdict(program);
        let exec = outputs::execute(case, &built, &runs, program, payloads.as_deref(), opts);
        if let Some(p) = payloads {
            mode_payloads.push((*mode, p));
        }
        let bytes_verdict = match (bytes_verdict, &exec.payload_mismatch) {
            (Verdict::Pass, Some(d)) => Verdict::fail("thread_dependent", d.clone()),
            (v, _) => v,
        };
        report.push(OracleKind::Bytes, scope, bytes_verdict);
        report.push(OracleKind::Errors, scope, exec.errors);
        report.push(OracleKind::Outputs, scope, exec.outputs);
    }
    if built.gap_only {
        report.push(OracleKind::Bytes, "gap_modes", bytes::gap_identity(&mode_payloads));
    }
    report
}
