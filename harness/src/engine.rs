//! The one place the harness calls the reference, the delegate and real XNNPACK.
//!
//! Three engines implement one small interface, in the spirit of wasmtime's `DiffEngine`:
//! [`Engine::build`] makes an [`Instance`] of a case's subject (its graph and, for the
//! delegate's engines, one lowering of it) in one [`Config`], [`Instance::run`] runs it on
//! inputs, and what an engine cannot do comes back as an [`EngineError`] that says so
//! ([`Engine::unavailable`] for a missing library, [`EngineError::refusal`] for a payload
//! XNNPACK refuses). The engines are [`Reference`] (the scalar interpreter, the spec),
//! [`Ours`] (our serializer, loader and threaded SIMD runtime) and [`Xnnpack`] (real XNNPACK
//! from the ExecuTorch 1.5.1 wheel, on the payloads our loader returned; portable ops and
//! hand-offs stay our runtime's, as ExecuTorch's are its portable kernels').
//!
//! Oracles and jobs go through this module only, so an API change in any crate is absorbed
//! here, and every error comes back as one [`EngineError`] carrying the stage that failed and,
//! where the crate reports one, the [`ErrorClass`] the errors oracle compares.

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

/// An error from any engine, with its class when the crate reports one.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineError {
    pub stage: Stage,
    pub class: Option<ErrorClass>,
    pub message: String,
    /// The engine or the API this stage needs is not there (the oracles skip instead of failing).
    pub unavailable: bool,
    /// Real XNNPACK refused the payload (at define, create, reshape, setup or invoke time).
    pub refusal: Option<xnnpack::Refusal>,
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
        EngineError { stage, class, message: message.to_string(), unavailable: false, refusal: None }
    }

    fn unavailable(stage: Stage, why: impl std::fmt::Display) -> Self {
        EngineError { stage, class: None, message: why.to_string(), unavailable: true, refusal: None }
    }

    fn refused(stage: Stage, r: xnnpack::Refusal) -> Self {
        EngineError { stage, class: None, message: r.to_string(), unavailable: false, refusal: Some(r) }
    }
}

/// The three engines, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EngineKind {
    Reference,
    Ours,
    Xnnpack,
}

impl EngineKind {
    pub const ALL: [EngineKind; 3] = [EngineKind::Reference, EngineKind::Ours, EngineKind::Xnnpack];

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Reference => "reference",
            EngineKind::Ours => "ours",
            EngineKind::Xnnpack => "xnnpack",
        }
    }
}

/// What an engine builds from: a case's graph and, for the delegate's engines, one lowering.
#[derive(Clone, Copy)]
pub struct Subject<'a> {
    pub graph: &'a Graph,
    pub program: Option<&'a LoweredProgram>,
}

impl<'a> Subject<'a> {
    pub fn graph(graph: &'a Graph) -> Subject<'a> {
        Subject { graph, program: None }
    }

    pub fn lowered(graph: &'a Graph, program: &'a LoweredProgram) -> Subject<'a> {
        Subject { graph, program: Some(program) }
    }

    fn program(&self, engine: &str) -> Result<&'a LoweredProgram, EngineError> {
        self.program.ok_or_else(|| EngineError::new(Stage::Prepare, None, format!("{engine} needs a lowered program")))
    }
}

/// How an instance runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// Threads, the caller included (our pool, or a pthreadpool of this many for XNNPACK).
    pub threads: usize,
    /// Our runtime's SIMD path (the other engines have one each).
    pub simd: Simd,
    /// Our runtime's thread policy; `None`: XNNPACK's per-output tasks on multi-threaded SIMD
    /// runs, the cost model otherwise (see [`prepare`]).
    pub policy: Option<ThreadPolicy>,
    /// A pool of the instance's own, with the library's default spinning (the bench), instead
    /// of the calling thread's shared one (the fuzz loop's, which spins only while the jobs'
    /// pools fit the CPUs).
    pub own_pool: bool,
}

impl Config {
    pub fn new(threads: usize, simd: Simd) -> Config {
        Config { threads, simd, policy: None, own_pool: false }
    }
}

/// One engine of the differential test.
pub trait Engine {
    type Instance: Instance;

    fn kind(&self) -> EngineKind;

    /// Why this engine cannot run at all on this machine, if so (every build then fails with
    /// an `unavailable` error saying it).
    fn unavailable(&self) -> Option<String> {
        None
    }

    /// An instance of `subject` in `config`.
    fn build(&self, subject: Subject<'_>, config: Config) -> Result<Self::Instance, EngineError>;
}

/// A built program of one engine.
pub trait Instance {
    /// Runs on `inputs` (graph-input order, each in its graph input's memory format); outputs in
    /// graph-output order and formats.
    fn run(&mut self, inputs: &[Tensor]) -> Result<Vec<Tensor>, EngineError>;
}

/// The reference interpreter as an engine (configuration-independent).
pub struct Reference;

/// A graph for the reference.
pub struct ReferenceInstance {
    graph: Graph,
}

impl Engine for Reference {
    type Instance = ReferenceInstance;

    fn kind(&self) -> EngineKind {
        EngineKind::Reference
    }

    fn build(&self, subject: Subject<'_>, _config: Config) -> Result<ReferenceInstance, EngineError> {
        Ok(ReferenceInstance { graph: subject.graph.clone() })
    }
}

impl Instance for ReferenceInstance {
    fn run(&mut self, inputs: &[Tensor]) -> Result<Vec<Tensor>, EngineError> {
        reference(&self.graph, inputs, Interpreter::Plain)
    }
}

/// Our delegate: serializer, loader and runtime.
pub struct Ours;

impl Engine for Ours {
    type Instance = Prepared;

    fn kind(&self) -> EngineKind {
        EngineKind::Ours
    }

    fn build(&self, subject: Subject<'_>, config: Config) -> Result<Prepared, EngineError> {
        prepare_with(subject.program("our runtime")?, config)
    }
}

/// The instruction set our runtime's kernels take on this CPU (`Simd::Best`): `avx512`,
/// `avx2` or `scalar`.
pub fn simd_level() -> &'static str {
    delegate::runtime::simd::Isa::best().name()
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

/// Seeded inputs for every graph input, at the given concrete shapes (empty: the bounds), with
/// any data options (the bench draws uniform data).
pub fn generate_inputs_with(graph: &Graph, shapes: &[Vec<usize>], seed: u64, opts: &DataOptions) -> Vec<Tensor> {
    data::generate_inputs(graph, shapes, seed, opts)
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

/// Builds a runnable program on our runtime (serializing and loading every segment), on the
/// calling thread's shared pool: `Ours.build` in the default [`Config`].
pub fn prepare(program: &LoweredProgram, threads: usize, simd: Simd) -> Result<Prepared, EngineError> {
    prepare_with(program, Config::new(threads, simd))
}

fn prepare_with(program: &LoweredProgram, config: Config) -> Result<Prepared, EngineError> {
    let (pool, level) = pool_config(config)?;
    Program::with_pool(program, level, pool)
        .map(|program| Prepared { program })
        .map_err(|e| EngineError::new(Stage::Prepare, runtime_class(&e), e))
}

/// The pool and SIMD level of a configuration: XNNPACK's per-output tasks on multi-threaded
/// SIMD runs (even small reductions are split across threads), the cost model otherwise,
/// unless the configuration names a policy.
fn pool_config(c: Config) -> Result<(std::sync::Arc<Pool>, SimdLevel), EngineError> {
    let threads = c.threads.max(1);
    let policy = c.policy.unwrap_or(if threads > 1 && c.simd == Simd::Best {
        ThreadPolicy::PerOutputTasks
    } else {
        ThreadPolicy::CostModel
    });
    let level = match c.simd {
        Simd::Best => SimdLevel::Auto,
        Simd::Fallback => SimdLevel::Scalar,
    };
    let pool = if c.own_pool {
        Pool::new(threads, policy)
            .map(std::sync::Arc::new)
            .map_err(|e| format!("starting a {threads}-thread pool: {e}"))
    } else {
        shared_pool(threads, policy)
    };
    Ok((pool.map_err(|e| EngineError::new(Stage::Prepare, None, e))?, level))
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

/// CPUs this process may run on, read once (each `available_parallelism` call reads the
/// affinity mask and cgroup limits: 15 M instructions over 300 fuzz cases).
fn cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The threads a shared pool starts for a `threads`-thread run: no more than the CPUs one
/// checking job has, but at least two, so a multi-threaded run always has two threads at
/// once. Above that the pool runs the `threads`-way splits on these threads
/// (`Pool::with_os_threads`: the same tasks, partial results and combination order): on 2
/// cores, 3 to 8 real threads only time-slice, and under `PerOutputTasks` each reduction
/// woke every worker (default job, 3,000 cases of seed 20261130: 660 us of CPU per case,
/// 430 us with the third count at 2).
fn os_threads(threads: usize) -> usize {
    if CALLER_ONLY.get() {
        return 1;
    }
    let jobs = CHECKERS.load(std::sync::atomic::Ordering::Relaxed);
    threads.min((cpus() / jobs).max(2))
}

thread_local! {
    /// This thread's shared pools run every split on the calling thread (see [`caller_only`]).
    static CALLER_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the calling thread's shared pools running their `threads`-way splits on
/// the calling thread alone (`on`) or on [`os_threads`] threads (`!on`, the default). The
/// tasks, partial results and their combination order are the N-thread program's
/// (`Pool::with_os_threads`), so the values are too
/// (`runtime_programs::n_thread_splits_on_fewer_os_threads_give_the_n_thread_bits`): what
/// only real threads test is the pool's concurrency. A wake-up of a parked worker costs
/// about as much as a small case's whole run, so the fuzz loop keeps real threads for one
/// case in four ([`crate::oracle::CheckOptions::sampled`]).
pub fn caller_only<T>(on: bool, f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            CALLER_ONLY.set(self.0);
        }
    }
    let _restore = Restore(CALLER_ONLY.replace(on));
    f()
}

/// The idle spin of a new pool that starts `threads` threads.
fn pool_spin(threads: usize) -> std::time::Duration {
    let jobs = CHECKERS.load(std::sync::atomic::Ordering::Relaxed);
    if jobs * threads <= cpus() {
        POOL_SPIN
    } else {
        std::time::Duration::ZERO
    }
}

/// One pool per (threads, policy) and calling thread, kept for the thread's life: a case
/// prepares several programs, and a fresh pool per program made every multi-threaded run
/// pay a thread spawn and the new worker's first wake-up. The runtime's own API still gets
/// tested with a pool per program (`Program::new`, in `delegate`'s tests and the bench).
/// Above two threads a pool starts only [`os_threads`] of them.
fn shared_pool(threads: usize, policy: ThreadPolicy) -> Result<std::sync::Arc<Pool>, String> {
    use std::collections::HashMap;
    use std::sync::Arc;
    thread_local! {
        static POOLS: std::cell::RefCell<HashMap<(usize, ThreadPolicy, usize), Arc<Pool>>> = Default::default();
    }
    let os = os_threads(threads);
    POOLS.with(|pools| {
        if let Some(p) = pools.borrow().get(&(threads, policy, os)) {
            return Ok(p.clone());
        }
        let p = Pool::with_os_threads(threads, policy, pool_spin(os), os)
            .map(Arc::new)
            .map_err(|e| format!("starting a {threads}-thread pool: {e}"))?;
        pools.borrow_mut().insert((threads, policy, os), p.clone());
        Ok(p)
    })
}

impl Prepared {
    /// The same loaded program in another configuration (no second serialize, load and plan).
    pub fn reconfigure(&self, threads: usize, simd: Simd) -> Result<Prepared, EngineError> {
        let (pool, level) = pool_config(Config::new(threads, simd))?;
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

/// Our program with its inputs and outputs bound once ([`Prepared::bind`]): each
/// [`BoundProgram::invoke`] reruns it into the same outputs, as `xnn_invoke_runtime` reruns a
/// set-up runtime. What the bench times.
pub struct BoundProgram<'p> {
    bound: delegate::runtime::Bound<'p>,
}

impl Prepared {
    /// Binds `inputs` and runs once (so every buffer has its size and [`BoundProgram::outputs`]
    /// holds the outputs).
    pub fn bind(&self, inputs: Vec<Tensor>) -> Result<BoundProgram<'_>, EngineError> {
        self.program
            .bind(inputs)
            .map(|bound| BoundProgram { bound })
            .map_err(|e| EngineError::new(Stage::Run, runtime_class(&e), e))
    }
}

impl BoundProgram<'_> {
    /// Reruns the program on the bound inputs into the bound outputs.
    pub fn invoke(&mut self) -> Result<(), EngineError> {
        self.bound.invoke().map_err(|e| EngineError::new(Stage::Run, runtime_class(&e), e))
    }

    /// The outputs of the last run.
    pub fn outputs(&self) -> &[Tensor] {
        self.bound.outputs()
    }
}

impl Instance for Prepared {
    fn run(&mut self, inputs: &[Tensor]) -> Result<Vec<Tensor>, EngineError> {
        Prepared::run(self, inputs)
    }
}

mod real;
pub use self::real::{disable_xnnpack, BoundXnnpack, Xnnpack, XnnpackInstance, XnnpackTiming};

pub mod payload;
