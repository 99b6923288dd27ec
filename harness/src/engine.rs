//! The one place the harness calls the reference and the delegate.
//!
//! Oracles and jobs go through these functions only, so an API change in either crate is
//! absorbed here, and every error comes back as one [`EngineError`] carrying the stage that
//! failed and, where the crate reports one, the [`ErrorClass`] the errors oracle compares.

use delegate::lower::{lower_modes, lower_with, LowerError, LowerOptions};
use delegate::runtime::pool::Pool;
use delegate::runtime::{Program, RuntimeError, SimdLevel, ThreadPolicy};
use delegate::serialize::{self, LoadLimits};
use delegate::xnn::XnnGraph;
use delegate::{LoweredProgram, LoweringMode};
use reference::data::{self, DataOptions};
use reference::graph::{ErrorClass, Graph, TensorSpec};
use reference::Tensor;

/// Where an error came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    Reference,
    Lower,
    Serialize,
    Load,
    Prepare,
    Run,
}

/// An error from either side, with its class when the crate reports one.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineError {
    pub stage: Stage,
    pub class: Option<ErrorClass>,
    pub message: String,
    /// The API this stage needs is not wired in yet (the oracles skip instead of failing).
    pub unavailable: bool,
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.stage)?;
        if let Some(c) = self.class {
            write!(f, " ({c:?})")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl EngineError {
    fn new(stage: Stage, class: Option<ErrorClass>, message: impl std::fmt::Display) -> Self {
        EngineError { stage, class, message: message.to_string(), unavailable: false }
    }

    #[allow(dead_code)]
    fn unavailable(stage: Stage) -> Self {
        EngineError { stage, class: None, message: format!("{stage:?} API not available yet"), unavailable: true }
    }
}

/// Which SIMD path a run takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Simd {
    /// The best path the machine supports.
    Best,
    /// The portable fallback.
    Fallback,
}

impl Simd {
    pub fn name(self) -> &'static str {
        match self {
            Simd::Best => "simd",
            Simd::Fallback => "fallback",
        }
    }
}

/// Seeded data for one tensor spec (concrete or at its bounds).
pub fn generate(spec: &TensorSpec, seed: u64, specials: bool) -> Tensor {
    data::generate(spec, seed, &DataOptions { specials, distribution: None })
}

/// Seeded inputs for every graph input, at the given concrete shapes.
pub fn generate_inputs(graph: &Graph, shapes: &[Vec<usize>], seed: u64, specials: bool) -> Vec<Tensor> {
    data::generate_inputs(graph, shapes, seed, &DataOptions { specials, distribution: None })
}

/// Which evaluator of the reference computes the expected values. Both give the same values
/// bit for bit (NaN payloads aside), which `reference/tests/fast_matches_plain.rs` checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Interpreter {
    /// `reference::eval`, the plain interpreter: the spec. Replay, minimization and saved
    /// failures use it.
    Plain,
    /// `reference::fast`: the fuzz loop's, for throughput.
    Fast,
}

fn reference_error(e: reference::eval::EvalError) -> EngineError {
    EngineError::new(Stage::Reference, Some(e.kind().class()), e)
}

/// The reference's outputs.
pub fn reference(graph: &Graph, inputs: &[Tensor], interp: Interpreter) -> Result<Vec<Tensor>, EngineError> {
    match interp {
        Interpreter::Plain => reference::eval::run(graph, inputs),
        Interpreter::Fast => reference::fast::run(graph, inputs),
    }
    .map_err(reference_error)
}

/// The reference's value of every node (for the magnitude twin's peak).
pub fn reference_all(graph: &Graph, inputs: &[Tensor], interp: Interpreter) -> Result<Vec<Tensor>, EngineError> {
    match interp {
        Interpreter::Plain => reference::eval::run_all(graph, inputs),
        Interpreter::Fast => reference::fast::run_all(graph, inputs),
    }
    .map_err(reference_error)
}

/// The options a mode is lowered with: bf16 lowering enabled, as a user exporting bf16 would.
fn lower_options(mode: LoweringMode) -> LowerOptions {
    LowerOptions { enable_bf16: true, ..LowerOptions::new(mode) }
}

fn lower_error(e: LowerError) -> EngineError {
    let class = match &e {
        LowerError::InvalidGraph(g) => Some(g.kind.class()),
        _ => None,
    };
    EngineError::new(Stage::Lower, class, e)
}

/// Lowers a graph in one mode.
pub fn lower(graph: &Graph, mode: LoweringMode) -> Result<LoweredProgram, EngineError> {
    lower_with(graph, &lower_options(mode)).map_err(lower_error)
}

/// Lowers a graph in each of `modes` (element `k` is `lower(graph, modes[k])`), validating
/// and partitioning once for all of them.
pub fn lower_each(graph: &Graph, modes: &[LoweringMode]) -> Vec<Result<LoweredProgram, EngineError>> {
    let opts: Vec<LowerOptions> = modes.iter().map(|&m| lower_options(m)).collect();
    lower_modes(graph, &opts).into_iter().map(|r| r.map_err(lower_error)).collect()
}

/// Serializes one delegate segment to payload bytes.
pub fn write(graph: &XnnGraph) -> Result<Vec<u8>, EngineError> {
    Ok(serialize::write(graph))
}

/// Loads payload bytes (untrusted) with the default limits.
pub fn load(bytes: &[u8]) -> Result<XnnGraph, EngineError> {
    serialize::load(bytes, &LoadLimits::default()).map_err(|e| EngineError::new(Stage::Load, None, e))
}

/// A program ready to run at one thread count and SIMD path.
pub struct Prepared {
    program: Program,
}

fn runtime_class(e: &RuntimeError) -> Option<ErrorClass> {
    match e {
        RuntimeError::BadInput { kind, .. } => Some(kind.class()),
        RuntimeError::InputCount { .. } => Some(ErrorClass::Structure),
        RuntimeError::InputDtype { .. } => Some(ErrorClass::Dtype),
        RuntimeError::InputFormat { .. } | RuntimeError::Shape { .. } => Some(ErrorClass::Shape),
        _ => None,
    }
}

/// Builds a runnable program (serializing and loading every segment).
pub fn prepare(program: &LoweredProgram, threads: usize, simd: Simd) -> Result<Prepared, EngineError> {
    let (pool, level) = config(threads, simd)?;
    Program::with_pool(program, level, pool)
        .map(|program| Prepared { program })
        .map_err(|e| EngineError::new(Stage::Prepare, runtime_class(&e), e))
}

/// The pool and SIMD level of a configuration: XNNPACK's per-output tasks on multi-threaded
/// SIMD runs (even small reductions are split across threads); the cost model otherwise.
fn config(threads: usize, simd: Simd) -> Result<(std::sync::Arc<Pool>, SimdLevel), EngineError> {
    let policy = if threads > 1 && simd == Simd::Best { ThreadPolicy::PerOutputTasks } else { ThreadPolicy::CostModel };
    let level = match simd {
        Simd::Best => SimdLevel::Auto,
        Simd::Fallback => SimdLevel::Scalar,
    };
    let pool = shared_pool(threads.max(1), policy).map_err(|e| EngineError::new(Stage::Prepare, None, e))?;
    Ok((pool, level))
}

/// Idle spin of the harness's pools: longer than the gap between two multi-threaded runs of
/// the fuzz loop (about a case, under a millisecond), so a run does not start with a wake-up
/// (measured, default fuzz job, seed 20261130: 1,660 cases/s with the runtime's 200 us over
/// 60 s; 1,720 to 1,916 in 20-30 s runs with 5 ms).
const POOL_SPIN: std::time::Duration = std::time::Duration::from_millis(5);

/// Threads of this process that check cases at once (the fuzz job's `--jobs`).
static CHECKERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);

/// Tells the pools how many checking threads share the CPUs. Their workers spin only while
/// every job's pool fits on a CPU of its own: a worker spinning for 5 ms takes its core from
/// another job's checker: with two jobs on two cores the second job added nothing (4,418
/// cases/s for both against 5,003 for one job on one core; about 9,000 without the spin).
pub fn set_checkers(jobs: usize) {
    CHECKERS.store(jobs.max(1), std::sync::atomic::Ordering::Relaxed);
}

/// The idle spin of a new pool of `threads`.
fn pool_spin(threads: usize) -> std::time::Duration {
    let jobs = CHECKERS.load(std::sync::atomic::Ordering::Relaxed);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if jobs * threads <= cpus {
        POOL_SPIN
    } else {
        std::time::Duration::ZERO
    }
}

/// One pool per (threads, policy) and calling thread, kept for the thread's life: a case
/// prepares several programs, and a fresh pool per program made every multi-threaded run
/// pay a thread spawn and the new worker's first wake-up. The runtime's own API still gets
/// tested with a pool per program (`Program::new`, in `delegate`'s tests and the bench).
fn shared_pool(threads: usize, policy: ThreadPolicy) -> Result<std::sync::Arc<Pool>, String> {
    use std::collections::HashMap;
    use std::sync::Arc;
    thread_local! {
        static POOLS: std::cell::RefCell<HashMap<(usize, ThreadPolicy), Arc<Pool>>> = Default::default();
    }
    POOLS.with(|pools| {
        if let Some(p) = pools.borrow().get(&(threads, policy)) {
            return Ok(p.clone());
        }
        let p = Pool::with_spin(threads, policy, pool_spin(threads))
            .map(Arc::new)
            .map_err(|e| format!("starting a {threads}-thread pool: {e}"))?;
        pools.borrow_mut().insert((threads, policy), p.clone());
        Ok(p)
    })
}

impl Prepared {
    /// The same loaded program in another configuration (no second serialize, load and plan).
    pub fn reconfigure(&self, threads: usize, simd: Simd) -> Result<Prepared, EngineError> {
        let (pool, level) = config(threads, simd)?;
        self.program
            .reconfigure(level, pool)
            .map(|program| Prepared { program })
            .map_err(|e| EngineError::new(Stage::Prepare, runtime_class(&e), e))
    }

    pub fn run(&mut self, inputs: &[Tensor]) -> Result<Vec<Tensor>, EngineError> {
        self.program.run(inputs).map_err(|e| EngineError::new(Stage::Run, runtime_class(&e), e))
    }

    /// The payload bytes of each segment, as the runtime loaded them.
    pub fn payloads(&self) -> &[Vec<u8>] {
        self.program.payloads()
    }

    /// What the runtime's loader returned for each payload.
    pub fn loaded_graphs(&self) -> &[XnnGraph] {
        self.program.loaded_graphs()
    }

    /// The instruction set the kernels run with.
    pub fn isa_name(&self) -> &'static str {
        self.program.isa_name()
    }
}
