//! Oracles: each judges one property of a case and gives one [`Verdict`] per check.
//!
//! - [`outputs`]: delegate vs reference values, every lowering mode, every thread count,
//!   SIMD and fallback paths, within a derived per-dtype tolerance;
//! - [`errors`]: both sides accept and reject the same graphs and runs, with the same
//!   [`reference::graph::ErrorClass`];
//! - [`bytes`]: load then re-serialize is the identity (which also shows the writer gives
//!   equal graphs equal bytes), GAP-only programs are identical across modes;
//! - [`structure`]: each mode's summary obeys the mode's rules;
//! - [`operand_order`]: the commuted twin (`a + b` as `b + a`, `a * b` as `b * a`) lowers to
//!   the same counts and gives the same values, bit for bit, in every mode;
//! - [`real`]: real XNNPACK against the reference, in every mode at 1 and N threads, under the
//!   outputs oracle's tolerances (`outputs/xnnpack_mismatch`), and whether it accepts what our
//!   runtime runs (`errors/xnnpack_refuses`).
//!
//! A failure is labelled `<oracle>/<kind>` (for example `outputs/mismatch`,
//! `errors/class_mismatch`, `bytes/nondeterministic`, `structure/mean_outside`); a panic
//! anywhere is labelled `panic`. [`check`] runs every oracle on one case.

pub mod behaviours;
pub mod bytes;
pub mod errors;
mod inputs;
pub mod operand_order;
pub mod outputs;
pub mod real;
pub mod structure;

pub use inputs::case_inputs;

use crate::case::{Case, InvalidCase};
use crate::engine::{self, EngineError, EngineKind, Interpreter, Simd};
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
    /// The engine checked against the reference, where it is not our runtime (real XNNPACK).
    pub engine: Option<EngineKind>,
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

/// What one engine did with a case: ran it (with how many XNNPACK invocations), or why not.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineUse {
    pub ran: bool,
    /// Why it did not run (the first reason met), when it did not.
    pub skipped: Option<String>,
    /// `xnn_invoke_runtime` calls (real XNNPACK only).
    pub invocations: u64,
}

impl EngineUse {
    fn note(&mut self, ran: Result<(), String>) {
        match ran {
            Ok(()) => self.ran = true,
            Err(why) => {
                self.skipped.get_or_insert(why);
            }
        }
    }
}

/// Every check made on one case.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CaseReport {
    pub checks: Vec<Check>,
    /// Per engine: whether it ran the case (the coverage summary's engine lines).
    pub engines: std::collections::BTreeMap<EngineKind, EngineUse>,
    /// The case can not be run as written (every oracle skipped it): `replay` fails on it,
    /// the fuzz job counts a skip, a fuzz target finds it uninteresting.
    pub invalid: Option<InvalidCase>,
}

impl CaseReport {
    pub fn first_failure(&self) -> Option<&Check> {
        self.checks.iter().find(|c| c.verdict.is_fail())
    }

    pub fn failed(&self) -> bool {
        self.first_failure().is_some()
    }

    fn push(&mut self, oracle: OracleKind, scope: &str, verdict: Verdict) {
        self.checks.push(Check { oracle, scope: scope.to_string(), verdict, engine: None });
    }

    fn push_engine(&mut self, engine: EngineKind, oracle: OracleKind, scope: &str, verdict: Verdict) {
        self.checks.push(Check { oracle, scope: scope.to_string(), verdict, engine: Some(engine) });
    }

    fn engine(&mut self, engine: EngineKind) -> &mut EngineUse {
        self.engines.entry(engine).or_default()
    }

    /// A case that can not be run as written: every oracle skips it, saying why.
    pub fn invalid(e: InvalidCase) -> CaseReport {
        let mut r = CaseReport::default();
        for o in [OracleKind::Outputs, OracleKind::Errors, OracleKind::Bytes, OracleKind::Structure] {
            r.push(o, "case", Verdict::Skip(e.to_string()));
        }
        for k in EngineKind::ALL {
            r.engine(k).note(Err(format!("not applicable: {e}")));
        }
        r.invalid = Some(e);
        r
    }

    /// A panic while checking (caught by the caller).
    pub fn panicked(message: String) -> CaseReport {
        let mut r = CaseReport::default();
        r.push(OracleKind::Panic, "case", Verdict::fail("panic", message));
        r
    }
}

/// Which configurations [`check`] runs each lowered program in.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// (threads, SIMD path, modes) triples; `threads == 0` means "each of the case's thread
    /// counts above 1"; `None` modes means every mode.
    pub configs: Vec<(usize, Simd, Option<Vec<LoweringMode>>)>,
    /// Compare outputs with the plain comparison alone, without the pre-filter (`replay`
    /// does: same verdicts, see `outputs::compare`).
    pub plain: bool,
    /// The reference evaluator: plain everywhere but in the fuzz loop.
    pub reference: Interpreter,
    /// Which programs also run on real XNNPACK, when the library is there ([`real`]); `None`:
    /// none.
    pub xnnpack: Option<XnnpackPlan>,
    /// `Some(k)`: "each of the case's thread counts above 1" (here and in [`XnnpackPlan`])
    /// means only the `k`-th of them, cyclically (the fuzz loop rotates it by case).
    pub multi_pick: Option<u64>,
    /// Multi-threaded runs of our runtime on real threads (the pools' default); `false`: on
    /// the calling thread alone, the same splits and values ([`engine::caller_only`]).
    pub real_threads: bool,
    /// The operand-order oracle checks values on the cases whose seed is a multiple of this
    /// (1: every case; its structure check runs on every case).
    pub operand_values_every: u64,
}

/// Which programs of a case run on real XNNPACK.
#[derive(Clone, Debug, PartialEq)]
pub struct XnnpackPlan {
    /// The modes whose programs run (`None`: every mode), at 1 thread.
    pub modes: Option<Vec<LoweringMode>>,
    /// Also at each of the case's thread counts above 1 (a pthreadpool of that many).
    pub multi_thread: bool,
}

impl XnnpackPlan {
    /// Every mode at 1 and N threads.
    pub const FULL: XnnpackPlan = XnnpackPlan { modes: None, multi_thread: true };

    fn runs(&self, modes: &[LoweringMode]) -> bool {
        self.modes.as_ref().is_none_or(|m| modes.iter().any(|x| m.contains(x)))
    }
}

impl Default for CheckOptions {
    /// The full matrix: both paths at every thread count, in every mode.
    fn default() -> Self {
        CheckOptions {
            configs: vec![
                (1, Simd::Best, None),
                (1, Simd::Fallback, None),
                (0, Simd::Best, None),
                (0, Simd::Fallback, None),
            ],
            plain: false,
            reference: Interpreter::Plain,
            xnnpack: Some(XnnpackPlan::FULL),
            multi_pick: None,
            real_threads: true,
            operand_values_every: 1,
        }
    }
}

impl CheckOptions {
    /// The fuzz loop's matrix for case `index`: every mode at 1 thread on the SIMD path, plus
    /// one more configuration rotating by case over (1 thread fallback, N threads SIMD,
    /// N threads fallback) x (three modes), so nine consecutive cases cover the full matrix.
    /// Each program start serializes, loads and plans every segment (and a pool start costs
    /// a thread spawn): the largest fixed costs of a small case.
    ///
    /// Real XNNPACK runs one mode's program per case, rotating (`index % 3`), at 1 thread, and
    /// at N threads every third case of each mode (`index / 3 % 3 == 0`): nine consecutive
    /// cases cover its matrix too. Each program there costs an XNNPACK runtime's creation
    /// (about 18 k instructions, most of them XNNPACK zeroing its operator tables) and a run
    /// of the whole program, its portable ops included.
    pub fn sampled(index: u64) -> CheckOptions {
        let extra = [(1, Simd::Fallback), (0, Simd::Best), (0, Simd::Fallback)][(index % 3) as usize];
        let mode = LoweringMode::ALL[(index / 3 % 3) as usize];
        let configs = vec![(1, Simd::Best, None), (extra.0, extra.1, Some(vec![mode]))];
        let xnnpack = XnnpackPlan {
            modes: Some(vec![LoweringMode::ALL[(index % 3) as usize]]),
            multi_thread: (index / 3).is_multiple_of(3),
        };
        // Cases run at 1, 2 and a third count: the multi-threaded configurations take one of
        // the two, alternating every 9 cases (each run is a pool dispatch at every op, and
        // running both cost a quarter of the loop's throughput).
        let multi_pick = Some(index / 9);
        // Real threads one case in four (coprime with the rotations above, so every
        // configuration gets them): a parked worker's wake-up at each dispatch cost the loop
        // 8 to 14% of its CPU time.
        let real_threads = index.is_multiple_of(4);
        CheckOptions {
            configs,
            plain: false,
            reference: Interpreter::Fast,
            xnnpack: Some(xnnpack),
            multi_pick,
            real_threads,
            operand_values_every: OPERAND_VALUES_EVERY,
        }
    }

    /// [`CheckOptions::sampled`] for `case`: a large one (an input above the pool's inline
    /// threshold, see `GenConfig::large_bytes`) exists to reach the cost model's splits, so
    /// its rotating configuration is always N threads on the SIMD path. The fallback path's
    /// per-element code is the same at every size and the small cases run it; on a large
    /// fp16 input it took 5 to 15 ms a run, most of a large case's time.
    pub fn sized_for(mut self, case: &Case) -> CheckOptions {
        if large_case(case) {
            for c in self.configs.iter_mut().filter(|c| c.2.is_some()) {
                (c.0, c.1) = (0, Simd::Best);
            }
        }
        self
    }

    /// The case's thread counts above 1 that "each count above 1" stands for.
    pub fn multi_threads(&self, threads: &[usize]) -> Vec<usize> {
        let above: Vec<usize> = threads.iter().copied().filter(|&t| t > 1).collect();
        match self.multi_pick {
            Some(k) if !above.is_empty() => vec![above[(k % above.len() as u64) as usize]],
            _ => above,
        }
    }

    /// The (threads, path) pairs to run `mode` in, for a case with thread counts `threads`.
    pub fn for_mode(&self, mode: LoweringMode, threads: &[usize]) -> Vec<(usize, Simd)> {
        let multi = self.multi_threads(threads);
        let mut out = vec![];
        for (t, simd, modes) in &self.configs {
            if modes.as_ref().is_some_and(|m| !m.contains(&mode)) {
                continue;
            }
            for &ct in threads {
                let take = if *t == 0 { multi.contains(&ct) } else { ct == *t };
                if take && !out.contains(&(ct, *simd)) {
                    out.push((ct, *simd));
                }
            }
        }
        out
    }
}

/// Whether `case`'s main input is above the pool's inline threshold, where the cost model
/// splits work across threads (what `GenConfig::large_bytes` draws).
pub fn large_case(case: &Case) -> bool {
    case.numel().saturating_mul(case.dtype.size_bytes()) > delegate::runtime::pool::INLINE_BYTES
}

/// The fuzz loop's [`CheckOptions::operand_values_every`]; its cost is in `operand_order`.
pub const OPERAND_VALUES_EVERY: u64 = 4;

/// The magnitude twin's value of every node, and its outputs' values as f64.
type Twin = (Vec<Tensor>, Vec<Vec<f64>>);

/// The wide twin's outputs' values as f64.
type Wide = Vec<Vec<f64>>;

/// The reference's view of one run: inputs, outputs (or its error) and, computed on first
/// use, the outputs as f64 and the magnitude twin's values (see `patterns`).
pub struct RefRun<'a> {
    pub shapes: Vec<Vec<usize>>,
    pub inputs: Vec<Tensor>,
    pub outputs: Result<Vec<Tensor>, EngineError>,
    case: &'a Case,
    built: &'a Built,
    interp: Interpreter,
    values: std::cell::OnceCell<Vec<Vec<f64>>>,
    /// The twin's value of every node, and its outputs' values as f64.
    twin: std::cell::OnceCell<Option<Twin>>,
    peak: std::cell::OnceCell<f64>,
    wide: std::cell::OnceCell<Option<Wide>>,
    reach: std::cell::OnceCell<Option<Wide>>,
}

impl RefRun<'_> {
    /// The values of reference output `o` as f64 (converted once, compared in every
    /// configuration); None if the reference failed or has no such output.
    pub fn values(&self, o: usize) -> Option<&[f64]> {
        let outs = self.outputs.as_ref().ok()?;
        self.values.get_or_init(|| outs.iter().map(|t| t.values_f64()).collect()).get(o).map(|v| v.as_slice())
    }

    /// The magnitude twin's output `o` as f64 (None for qs8 and invalid cases, or if it
    /// failed), converted once for every configuration that asks.
    pub fn magnitude_values(&self, o: usize) -> Option<&[f64]> {
        self.twin()?.1.get(o).map(|v| v.as_slice())
    }

    /// The largest finite magnitude of any value in the graph (every node, not only the
    /// outputs): where it nears the largest finite value, a partial sum may overflow.
    /// Asked for only when some output is not finite.
    pub fn peak_magnitude(&self) -> f64 {
        *self.peak.get_or_init(|| {
            self.twin().map_or(0.0, |(all, _)| {
                all.iter().flat_map(|t| t.values_f64()).filter(|v| v.is_finite()).fold(0.0f64, |a, v| a.max(v.abs()))
            })
        })
    }

    /// The wide twin's output `o` as f64 (None where the case has no wide twin: see
    /// `Built::wide`), evaluated once for every configuration that asks.
    pub fn wide_values(&self, o: usize) -> Option<&[f64]> {
        self.wide
            .get_or_init(|| {
                self.outputs.as_ref().ok()?;
                let g = self.built.wide(self.case)?;
                let outs = engine::reference(g, &patterns::wide_inputs(&self.inputs), self.interp).ok()?;
                Some(outs.iter().map(|t| t.values_f64()).collect())
            })
            .as_ref()?
            .get(o)
            .map(|v| v.as_slice())
    }

    /// The NaN-reach twin's output `o` as f64: the magnitude twin's graph on its inputs with
    /// every NaN kept and every other value zeroed, so NaN exactly where a NaN input reaches
    /// (its clamps to `λ` keep every rsqrt finite; an infinity or an overflow of the twin
    /// never appears). Evaluated once, only when some NaN of the reference meets an infinity.
    pub fn nan_reach_values(&self, o: usize) -> Option<&[f64]> {
        self.reach
            .get_or_init(|| {
                self.outputs.as_ref().ok()?;
                let g = self.built.magnitude(self.case)?;
                let inputs: Vec<Tensor> = patterns::magnitude_inputs(self.case, &self.inputs)
                    .iter()
                    .map(|t| {
                        let v: Vec<f64> =
                            t.values_f64().into_iter().map(|x| if x.is_nan() { x } else { 0.0 }).collect();
                        Tensor::from_f64(&t.shape, t.dtype(), None, &v).to_format(t.format)
                    })
                    .collect();
                let outs = engine::reference(g, &inputs, self.interp).ok()?;
                Some(outs.iter().map(|t| t.values_f64()).collect())
            })
            .as_ref()?
            .get(o)
            .map(|v| v.as_slice())
    }

    fn twin(&self) -> Option<&Twin> {
        self.twin
            .get_or_init(|| {
                self.outputs.as_ref().ok()?;
                let g = self.built.magnitude(self.case)?;
                let inputs = patterns::magnitude_inputs(self.case, &self.inputs);
                let all = engine::reference_all(g, &inputs, self.interp).ok()?;
                let outputs = g.outputs.iter().map(|&o| all.get(o).map(|t| t.values_f64())).collect::<Option<_>>()?;
                Some((all, outputs))
            })
            .as_ref()
    }
}

/// The reference runs of a case (one per run shape). A run shape that does not fit the
/// graph's input (a static dim changed, a dynamic one above its bound) is the case's
/// mistake, unless the case asks for `dynamic_above_bound`; graph-level invalid kinds leave
/// the runs to the graph's rejection. `interp` evaluates them.
pub fn reference_runs<'a>(
    case: &'a Case,
    built: &'a Built,
    interp: Interpreter,
) -> Result<Vec<RefRun<'a>>, InvalidCase> {
    let mut runs = vec![];
    for (r, run) in case.runs().iter().enumerate() {
        let shapes = patterns::run_input_shapes(case, &built.graph, run);
        if case.invalid.is_none() && !case.run_shapes.is_empty() {
            for (&id, s) in built.graph.inputs.iter().zip(&shapes) {
                let spec = &built.graph.nodes[id].spec;
                spec.check_shape(s).map_err(|e| {
                    let dynamic = if case.dynamic.is_empty() { "none".into() } else { format!("{:?}", case.dynamic) };
                    InvalidCase::new(
                        format!("run_shapes[{r}]"),
                        format!("{s:?} does not fit the input {:?} (dynamic dims: {dynamic}): {e}", case.shape),
                    )
                })?;
            }
        }
        let inputs = case_inputs(case, built, r, &shapes)?;
        let outputs = engine::reference(&built.graph, &inputs, interp);
        let (values, twin, peak, wide, reach) = Default::default();
        runs.push(RefRun { shapes, inputs, outputs, case, built, interp, values, twin, peak, wide, reach });
    }
    Ok(runs)
}

/// Two lowerings that hand the runtime the same program (the mode and summary aside).
fn same_program(a: &LoweredProgram, b: &LoweredProgram) -> bool {
    a.steps == b.steps
        && a.slots == b.slots
        && a.inputs == b.inputs
        && a.outputs == b.outputs
        && a.constants == b.constants
}

/// Runs every oracle on a case.
pub fn check(case: &Case, opts: &CheckOptions) -> CaseReport {
    engine::caller_only(!opts.real_threads, || check_on(case, opts))
}

fn check_on(case: &Case, opts: &CheckOptions) -> CaseReport {
    let mut report = CaseReport::default();
    let built = match patterns::build(case) {
        Ok(b) => b,
        Err(e) => return CaseReport::invalid(e),
    };
    let runs = match reference_runs(case, &built, opts.reference) {
        Ok(r) => r,
        Err(e) => return CaseReport::invalid(e),
    };
    // The reference must accept exactly the valid cases.
    report.push(OracleKind::Errors, "reference", errors::reference_verdict(case, &runs));
    report.engine(EngineKind::Reference).note(Ok(()));

    // Lower every mode the case asks for, plus StaticMean when NhwcAware needs its summary.
    let mut programs: Vec<(LoweringMode, Result<LoweredProgram, EngineError>)> = vec![];
    let mut modes = case.modes.clone();
    if modes.contains(&LoweringMode::NhwcAware) && !modes.contains(&LoweringMode::StaticMean) {
        modes.push(LoweringMode::StaticMean);
    }
    programs.extend(modes.iter().copied().zip(engine::lower_each(&built.graph, &modes)));
    let static_summary = programs
        .iter()
        .find(|(m, _)| *m == LoweringMode::StaticMean)
        .and_then(|(_, p)| p.as_ref().ok())
        .map(|p| p.summary.clone());

    // Modes that lowered to the same program share one preparation and one set of runs (in
    // the union of their configurations) and its verdicts: the runtime sees the same bytes.
    struct Shared {
        program: usize,
        modes: Vec<LoweringMode>,
        verdicts: Option<(Verdict, Verdict, Verdict)>,
        payloads: Option<Vec<Vec<u8>>>,
        /// Real XNNPACK's errors and outputs verdicts.
        real: Option<(Verdict, Verdict)>,
        /// Its outputs at 1 thread on the SIMD path (see [`outputs::Exec::single`]).
        single: Option<Vec<Vec<Tensor>>>,
    }
    let mut shared: Vec<Shared> = vec![];
    let mut mode_payloads: Vec<(LoweringMode, Vec<Vec<u8>>)> = vec![];
    for (k, (mode, program)) in programs.iter().enumerate() {
        if !case.modes.contains(mode) {
            continue;
        }
        let scope = mode.name();
        let program = match program {
            Ok(p) => p,
            Err(e) => {
                let v = errors::lower_verdict(case, &runs, *mode, e);
                report.push(OracleKind::Errors, scope, v);
                let why = if errors::graph_invalid(case) {
                    "invalid graph, rejected at lowering as it must be".to_string()
                } else {
                    format!("lowering failed: {e}")
                };
                for o in [OracleKind::Outputs, OracleKind::Bytes, OracleKind::Structure] {
                    report.push(o, scope, Verdict::Skip(why.clone()));
                }
                report.engine(EngineKind::Ours).note(Err(why.clone()));
                report.engine(EngineKind::Xnnpack).note(Err(why));
                continue;
            }
        };
        if let Some(v) = errors::accepted_verdict(case) {
            report.push(OracleKind::Errors, scope, v);
            continue;
        }
        report.push(OracleKind::Structure, scope, structure::verdict(case, &built, program, static_summary.as_ref()));
        let same = |s: &&mut Shared| programs[s.program].1.as_ref().is_ok_and(|p| same_program(p, program));
        match shared.iter_mut().find(|s| same(s)) {
            Some(s) => s.modes.push(*mode),
            None => shared.push(Shared {
                program: k,
                modes: vec![*mode],
                verdicts: None,
                payloads: None,
                real: None,
                single: None,
            }),
        }
    }
    for s in &mut shared {
        let Ok(program) = &programs[s.program].1 else { continue };
        let mut configs: Vec<(usize, engine::Simd)> = vec![];
        for &m in &s.modes {
            for c in opts.for_mode(m, &case.threads) {
                if !configs.contains(&c) {
                    configs.push(c);
                }
            }
        }
        let prepared_r = configs.first().map(|&(t, simd)| engine::prepare(program, t, simd));
        let prepared = prepared_r.as_ref().and_then(|r| r.as_ref().ok());
        let (bytes_verdict, payloads) = match prepared {
            Some(p) => {
                let v = bytes::written_verdict(program, p.payloads(), p.loaded_graphs());
                // Payloads are copied only for the GAP-identity check below.
                let keep = v == Verdict::Pass && built.gap_only;
                (v, keep.then(|| p.payloads().to_vec()))
            }
            None => bytes::segment_verdict(program),
        };
        let exec = outputs::execute(case, &built, &runs, program, prepared, &configs, opts.plain);
        report.engine(EngineKind::Ours).note(match &prepared_r {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(format!("prepare: {e}")),
            None => Err("no configuration runs this mode".into()),
        });
        if let Some(plan) = opts.xnnpack.as_ref().filter(|p| p.runs(&s.modes)) {
            // XNNPACK reuses our runtime's loaded graphs (a 1-thread preparation when the
            // configurations asked for none).
            let single;
            let ours = match &prepared_r {
                Some(r) => r.as_ref(),
                None => {
                    single = engine::prepare(program, 1, Simd::Best);
                    single.as_ref()
                }
            };
            let ours_ran = ours.is_ok() && exec.errors == Verdict::Pass;
            let mut threads = vec![1];
            if plan.multi_thread {
                threads.extend(opts.multi_threads(&case.threads));
            }
            threads.sort_unstable();
            threads.dedup();
            let r = real::execute(case, &built, &runs, program, ours, ours_ran, &threads);
            let xnn = report.engine(EngineKind::Xnnpack);
            xnn.invocations += r.invocations;
            xnn.note(r.ran);
            s.real = Some((r.errors, r.outputs));
        }
        s.verdicts = Some((bytes_verdict, exec.errors, exec.outputs));
        s.single = exec.single;
        s.payloads = payloads;
    }
    for s in &shared {
        let Some((b, e, o)) = &s.verdicts else { continue };
        for &mode in &s.modes {
            let note = |v: &Verdict| match v {
                Verdict::Fail { kind, detail } if mode != s.modes[0] => {
                    Verdict::fail(kind, format!("(the same program as {}) {detail}", s.modes[0]))
                }
                v => v.clone(),
            };
            report.push(OracleKind::Bytes, mode.name(), note(b));
            report.push(OracleKind::Errors, mode.name(), note(e));
            report.push(OracleKind::Outputs, mode.name(), note(o));
            if let Some((re, ro)) = &s.real {
                report.push_engine(EngineKind::Xnnpack, OracleKind::Errors, mode.name(), note(re));
                report.push_engine(EngineKind::Xnnpack, OracleKind::Outputs, mode.name(), note(ro));
            }
            if let Some(p) = &s.payloads {
                mode_payloads.push((mode, p.clone()));
            }
        }
    }
    if built.gap_only {
        report.push(OracleKind::Bytes, "gap_modes", bytes::gap_identity(&mode_payloads));
    }
    if case.invalid.is_none() {
        let values = case.seed.is_multiple_of(opts.operand_values_every.max(1));
        let single = |m: &LoweringMode| shared.iter().find(|s| s.modes.contains(m)).and_then(|s| s.single.as_deref());
        let mine: Vec<_> =
            programs.iter().filter(|(m, _)| case.modes.contains(m)).map(|(m, p)| (*m, p, single(m))).collect();
        for (on_values, mode, v) in operand_order::check(case, &built.graph, &mine, &runs, values) {
            report.push(if on_values { OracleKind::Outputs } else { OracleKind::Structure }, mode.name(), v);
        }
    }
    report
}
