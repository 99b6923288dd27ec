//! Real XNNPACK as an engine: the payloads our loader returned, compiled by the `xnnpack`
//! crate, run with our runtime's portable ops and hand-offs between them
//! ([`delegate::runtime::Program::run_with`]).

use super::{
    pool_spin, prepare_with, runtime_class, Config, Engine, EngineError, EngineKind, Instance, Prepared, Simd, Stage,
    Subject,
};
use delegate::LoweredProgram;
use reference::Tensor;

/// Real XNNPACK (the ExecuTorch 1.5.1 wheel's library), on the payloads our loader returned.
/// `--no-xnnpack` and a missing library both make it unavailable.
pub struct Xnnpack {
    lib: Result<&'static xnnpack::Xnnpack, String>,
}

static XNNPACK_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns real XNNPACK off for this process (`--no-xnnpack`).
pub fn disable_xnnpack() {
    XNNPACK_OFF.store(true, std::sync::atomic::Ordering::Relaxed);
}

impl Xnnpack {
    /// The process's library (loaded and probed once), or why there is none.
    pub fn new() -> Xnnpack {
        if XNNPACK_OFF.load(std::sync::atomic::Ordering::Relaxed) {
            return Xnnpack { lib: Err("real XNNPACK is off (--no-xnnpack)".into()) };
        }
        Xnnpack { lib: xnnpack::library().map_err(|e| format!("real XNNPACK is unavailable: {e}")) }
    }

    /// The loaded library, when there is one.
    pub fn library(&self) -> Option<&'static xnnpack::Xnnpack> {
        self.lib.as_ref().ok().copied()
    }

    /// An instance reusing what our runtime already loaded for the same program (`ours`, from
    /// [`prepare`] of `program`): its loaded graphs, and its hand-offs run single-threaded.
    pub fn build_from(
        &self,
        ours: &Prepared,
        program: &LoweredProgram,
        config: Config,
    ) -> Result<XnnpackInstance, EngineError> {
        let lib = self.lib.as_ref().map_err(|e| EngineError::unavailable(Stage::Prepare, e))?;
        let hand_offs = ours.reconfigure(1, Simd::Best)?;
        let threads = config.threads.max(1);
        let (pool, flags) = xnnpack_pool(lib, threads, config.own_pool)?;
        let segments = xnnpack::program::Segments::compile(lib, program, ours.loaded_graphs(), &pool, flags).map_err(
            |(k, r)| {
                EngineError::refused(
                    Stage::Prepare,
                    xnnpack::Refusal { reason: format!("segment {k}: {}", r.reason), ..r },
                )
            },
        )?;
        let direct = direct_segment(program);
        Ok(XnnpackInstance { hand_offs, segments, threads, direct })
    }
}

impl Default for Xnnpack {
    fn default() -> Self {
        Xnnpack::new()
    }
}

impl Engine for Xnnpack {
    type Instance = XnnpackInstance;

    fn kind(&self) -> EngineKind {
        EngineKind::Xnnpack
    }

    fn unavailable(&self) -> Option<String> {
        self.lib.as_ref().err().cloned()
    }

    fn build(&self, subject: Subject<'_>, config: Config) -> Result<XnnpackInstance, EngineError> {
        if let Err(e) = &self.lib {
            return Err(EngineError::unavailable(Stage::Prepare, e));
        }
        let program = subject.program("real XNNPACK")?;
        let ours =
            prepare_with(program, Config { threads: 1, simd: Simd::Best, policy: None, own_pool: config.own_pool })?;
        self.build_from(&ours, program, config)
    }
}

/// A pthreadpool for `threads` and the runtime flags to create on it: the calling thread's
/// shared pool, whose workers yield after each run (`XNN_FLAG_DONT_SPIN_WORKERS`) and run at
/// the lowest priority unless every job's pool fits the CPUs (the rule of our own pools,
/// [`pool_spin`]); or, with `own`, a fresh
/// pool with XNNPACK's default spinning workers, as ExecuTorch creates its runtimes.
fn xnnpack_pool(
    lib: &'static xnnpack::Xnnpack,
    threads: usize,
    own: bool,
) -> Result<(xnnpack::ThreadPool, u32), EngineError> {
    use std::collections::HashMap;
    thread_local! {
        static POOLS: std::cell::RefCell<HashMap<usize, xnnpack::ThreadPool>> = Default::default();
    }
    if own {
        return Ok((lib.pool(threads).map_err(|r| EngineError::refused(Stage::Prepare, r))?, 0));
    }
    // More threads than CPUs: the workers also yield their core to the caller between
    // operators (`Xnnpack::pool_low_priority`).
    let crowded = pool_spin(threads).is_zero() && threads > 1;
    let flags = if crowded { xnnpack::compile::FLAG_DONT_SPIN_WORKERS } else { 0 };
    let fresh = || {
        if crowded { lib.pool_low_priority(threads) } else { lib.pool(threads) }
            .map_err(|r| EngineError::refused(Stage::Prepare, r))
    };
    let pool = POOLS.with(|pools| -> Result<_, EngineError> {
        if let Some(p) = pools.borrow().get(&threads) {
            return Ok(p.clone());
        }
        let p = fresh()?;
        pools.borrow_mut().insert(threads, p.clone());
        Ok(p)
    })?;
    Ok((pool, flags))
}

/// A lowered program with its delegate segments compiled for real XNNPACK.
pub struct XnnpackInstance {
    /// Our runtime's program, for portable ops and hand-offs between segments.
    hand_offs: Prepared,
    segments: xnnpack::program::Segments,
    threads: usize,
    /// The program is one delegate segment from the graph inputs (and constants) to the graph
    /// outputs, all contiguous: a set-up runtime's `xnn_invoke_runtime` is the whole program.
    direct: bool,
}

/// Whether `program` is one delegate call that reads only the program's inputs and constants
/// and writes its outputs, in order, all contiguous (no layout change at the edge).
fn direct_segment(program: &LoweredProgram) -> bool {
    use delegate::program::Step;
    use reference::MemoryFormat;
    let [Step::Delegate(d)] = program.steps.as_slice() else { return false };
    let contiguous = |s: &usize| program.slots.get(*s).is_some_and(|t| t.format == MemoryFormat::Contiguous);
    // Constants fed from outside (ExecuTorch's constant segment) are bound once like inputs.
    let fixed = |s: &usize| program.inputs.contains(s) || program.constants.iter().any(|(c, _)| c == s);
    d.inputs.iter().all(fixed)
        && program.inputs.iter().all(|s| d.inputs.contains(s))
        && d.outputs == program.outputs
        && d.inputs.iter().chain(&d.outputs).all(contiguous)
}

/// What one [`BoundXnnpack::invoke`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XnnpackTiming {
    /// `xnn_invoke_runtime` alone: the program is one set-up runtime (XNNPACK's setup/invoke
    /// split, inputs and outputs bound once).
    Invoke,
    /// The whole program: portable ops and hand-offs on our runtime, and per segment what
    /// ExecuTorch's delegate does per call (reshape, setup, invoke) plus copies of the
    /// segment's inputs into and its outputs out of XNNPACK's padded buffers.
    Program,
}

impl XnnpackTiming {
    pub fn name(self) -> &'static str {
        match self {
            XnnpackTiming::Invoke => "xnn_invoke",
            XnnpackTiming::Program => "xnn_program",
        }
    }
}

/// An XNNPACK instance bound to its inputs ([`XnnpackInstance::bind`]).
pub struct BoundXnnpack<'a> {
    how: Bound<'a>,
}

enum Bound<'a> {
    /// One set-up runtime: `xnn_invoke_runtime` alone; the outputs of the bind-time run.
    Invoke { inst: &'a mut XnnpackInstance, outputs: Vec<Tensor> },
    /// The whole program, bound on our runtime's hand-offs, its segments on XNNPACK.
    Program { bound: Box<delegate::runtime::Bound<'a>>, segments: &'a mut xnnpack::program::Segments },
}

fn run_error(e: xnnpack::program::RunError) -> EngineError {
    match e {
        xnnpack::program::RunError::Refused { segment, refusal } => EngineError::refused(
            Stage::Run,
            xnnpack::Refusal { reason: format!("segment {segment}: {}", refusal.reason), ..refusal },
        ),
        xnnpack::program::RunError::Runtime(e) => EngineError::new(Stage::Run, runtime_class(&e), e),
    }
}

impl BoundXnnpack<'_> {
    /// Reruns on the bound inputs: see [`XnnpackTiming`].
    pub fn invoke(&mut self) -> Result<(), EngineError> {
        match &mut self.how {
            Bound::Invoke { inst, .. } => inst.invoke(0),
            Bound::Program { bound, segments } => segments.invoke_bound(bound).map_err(run_error),
        }
    }

    /// What [`BoundXnnpack::invoke`] times.
    pub fn timing(&self) -> XnnpackTiming {
        match self.how {
            Bound::Invoke { .. } => XnnpackTiming::Invoke,
            Bound::Program { .. } => XnnpackTiming::Program,
        }
    }

    /// The outputs of the bind-time run (of the last invoke, for [`XnnpackTiming::Program`]).
    pub fn outputs(&self) -> &[Tensor] {
        match &self.how {
            Bound::Invoke { outputs, .. } => outputs,
            Bound::Program { bound, .. } => bound.outputs(),
        }
    }
}

impl XnnpackInstance {
    /// The pthreadpool's threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Delegate segments (XNNPACK runtimes) of the program.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// `xnn_invoke_runtime` of segment `k` alone, on the inputs it had in the last
    /// [`Instance::run`] (which sets every segment up): what the bench times.
    pub fn invoke(&mut self, k: usize) -> Result<(), EngineError> {
        let seg = self
            .segments
            .segments_mut()
            .get_mut(k)
            .ok_or_else(|| EngineError::new(Stage::Run, None, format!("no segment {k}")))?;
        seg.invoke().map_err(|r| EngineError::refused(Stage::Run, r))
    }

    /// Successful `xnn_invoke_runtime` calls so far.
    pub fn invocations(&self) -> u64 {
        self.segments.invocations()
    }

    /// Runs once on `inputs` (which sets every segment up) and keeps them bound.
    pub fn bind(&mut self, inputs: Vec<Tensor>) -> Result<BoundXnnpack<'_>, EngineError> {
        if self.direct {
            let outputs = Instance::run(self, &inputs)?;
            return Ok(BoundXnnpack { how: Bound::Invoke { inst: self, outputs } });
        }
        let XnnpackInstance { hand_offs, segments, .. } = self;
        let bound = segments.bind(&hand_offs.program, inputs).map_err(run_error)?;
        Ok(BoundXnnpack { how: Bound::Program { bound: Box::new(bound), segments } })
    }
}

impl Instance for XnnpackInstance {
    fn run(&mut self, inputs: &[Tensor]) -> Result<Vec<Tensor>, EngineError> {
        self.segments.run(&self.hand_offs.program, inputs).map_err(run_error)
    }
}
