//! A loaded program: delegate segments (serialized, loaded back, planned) and portable ops,
//! run in order over program-level slots.
//!
//! Two ways to run it: [`Program::run`] takes input tensors and returns fresh output tensors
//! (checked, allocated per call); [`Program::bind`] binds inputs and outputs once and
//! [`Bound::invoke`] reruns the program on them with no allocation and no re-check, as
//! XNNPACK's setup/invoke split does. Both execute the same steps on the same kernels.

use super::exec::{SegInput, SegmentState};
use super::kernels::{portable, Ctx, Scratch, View};
use super::plan::{BoundInput, Owned, SegmentOutput, SegmentPlan};
use super::pool::Pool;
use super::simd::Isa;
use super::{force_scalar, resolve_simd_with, RunOptions, RuntimeError, SimdLevel};
use crate::program::{LoweredProgram, PortableOp, SlotId, Step};
use crate::serialize::{self, LoadLimits};
use crate::xnn::XnnGraph;
use reference::{ElemType, GraphErrorKind, MemoryFormat, Tensor, TensorData, TensorSpec};
use std::sync::{Arc, Mutex};

enum ExecStep {
    Delegate { plan: SegmentPlan, inputs: Vec<SlotId>, outputs: Vec<SlotId> },
    Portable(PortableOp),
}

/// Where a slot's tensor is during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Home {
    /// The `k`-th program input.
    Input(usize),
    /// The `k`-th constant.
    Const(usize),
    /// Written by a step, into the run state's `k`-th written tensor.
    Written(usize),
    /// Never read or written.
    None,
}

/// Run-time buffers of a program, reused from run to run: segment states (intermediate
/// blocks, shapes), scratch, and the tensors of slots written by steps.
#[derive(Default)]
pub(super) struct RunState {
    segments: Vec<SegmentState>,
    scratch: Scratch,
    /// The tensor of each written slot. A run writes every one before reading it; the
    /// buffers stay for the next run (a program output's is moved out by `Program::run`).
    written: Vec<Option<Tensor>>,
    /// The run in which each written tensor was last written (`run` below): a step reading
    /// one not written in this run is refused, never served last run's data.
    written_in: Vec<u64>,
    run: u64,
    /// Per delegate step: its inputs' dims as handed to the segment, and its output buffers.
    seg_dims: Vec<Vec<Vec<usize>>>,
    seg_outs: Vec<Vec<Owned>>,
}

/// Run-time buffers kept for the next configuration of the same loaded program (see
/// `Loaded::spare`): a few are enough for the harness, which drops each configuration after
/// its runs; the bound keeps many programs alive at once from parking buffers forever.
const MAX_SPARE_STATES: usize = 4;

/// Run-time buffers of dropped programs kept per thread for the next program's first run (the
/// harness prepares a few programs per case, one after the other, on each thread): its blocks
/// and scratch are then neither allocated nor zeroed again (`SegmentPlan::fit_state` only grows
/// what is too small). Bounded in count and size so a thread never parks more than a few MiB.
const MAX_THREAD_STATES: usize = 4;
const MAX_THREAD_STATE_BYTES: usize = 4 << 20;

thread_local! {
    static THREAD_STATES: std::cell::RefCell<Vec<RunState>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl RunState {
    /// Bytes of the buffers it holds.
    fn bytes(&self) -> usize {
        let blocks: usize = self.segments.iter().map(|s| s.block_capacity_bytes()).sum();
        let Scratch { a, b, c } = &self.scratch;
        let written: usize = self.written.iter().flatten().map(|t| t.data.len() * t.dtype().size_bytes()).sum();
        blocks + 4 * (a.capacity() + b.capacity() + c.capacity()) + written
    }

    /// Parks the state for the next program on this thread (or drops it: too large, the pool
    /// full, or the thread exiting).
    fn park_on_thread(self) {
        if self.segments.is_empty() || self.bytes() > MAX_THREAD_STATE_BYTES {
            return;
        }
        let _ = THREAD_STATES.try_with(|pool| {
            if let Ok(mut pool) = pool.try_borrow_mut() {
                if pool.len() < MAX_THREAD_STATES {
                    pool.push(self);
                }
            }
        });
    }

    /// A state parked by a dropped program on this thread, if any.
    fn from_thread() -> Option<RunState> {
        THREAD_STATES.try_with(|pool| pool.try_borrow_mut().ok()?.pop()).ok().flatten()
    }
}

/// What loading and planning produced: read-only, shared by every configuration of a program.
struct Loaded {
    slots: Vec<TensorSpec>,
    constants: Vec<(SlotId, Tensor)>,
    inputs: Vec<SlotId>,
    outputs: Vec<SlotId>,
    steps: Vec<ExecStep>,
    payloads: Vec<Vec<u8>>,
    /// What the loader returned for each payload (kept so a caller can check that
    /// re-serializing it gives the payload back without loading a second time).
    loaded: Vec<XnnGraph>,
    /// Per slot: where its tensor is during a run.
    homes: Vec<Home>,
    /// Slots written by steps.
    n_written: usize,
    /// Per slot: the order its logical dims are handed to a segment in (`handoff_order`).
    orders: Vec<Vec<usize>>,
    /// Run-time buffers (intermediate blocks, scratch) of dropped configurations: the next
    /// `reconfigure` takes one instead of allocating and zeroing its own (the harness runs
    /// each program in several configurations, one after the other).
    spare: Mutex<Vec<RunState>>,
    /// `DELEGATE_FORCE_SCALAR=1` as it was when the program was prepared.
    force_scalar: bool,
}

/// Runs delegate segments in place of the runtime's plans ([`Program::run_with`]).
pub trait SegmentExecutor {
    /// Runs segment `segment` (an index into [`Program::loaded_graphs`]) on `inputs`, bound
    /// (typed data, physical dims) exactly as the runtime's own plan would get them; returns
    /// the outputs in segment output order. `reuse` holds the last run's output buffers of the
    /// segment (in output order; empty on a first run): an executor may fill and return them
    /// instead of allocating (no page faults per run on large outputs).
    fn run_segment(
        &mut self,
        segment: usize,
        inputs: &[BoundInput],
        reuse: &mut Vec<Owned>,
    ) -> Result<Vec<SegmentOutput>, RuntimeError>;
}

/// An executable program. `run` takes `&self`; concurrent calls are serialized.
pub struct Program {
    l: Arc<Loaded>,
    pool: Arc<Pool>,
    isa: Isa,
    opts: RunOptions,
    state: Mutex<RunState>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("steps", &self.l.steps.len())
            .field("threads", &self.pool.threads())
            .field("isa", &self.isa.name())
            .field("opts", &self.opts)
            .finish()
    }
}

fn storage_type(dt: ElemType) -> super::plan::Dt {
    use super::plan::Dt;
    match dt {
        ElemType::F32 => Dt::F32,
        ElemType::F16 => Dt::F16,
        ElemType::Bf16 => Dt::Bf16,
        ElemType::Qs8 => Dt::I8,
    }
}

/// Order in which a slot's dims are handed to a segment: NHWC only where the lowering treats
/// the slot as NHWC (`slot_is_nhwc`). An "ambiguous" channels_last slot (C == 1 or H == W == 1,
/// also contiguous) is handed off with NCHW dims, as ExecuTorch does; both orders share bytes.
fn handoff_order(spec: &TensorSpec, rank: usize) -> Vec<usize> {
    if crate::lower::slot_is_nhwc(spec) {
        dim_order(spec.format, rank)
    } else {
        (0..rank).collect()
    }
}

/// Physical order of a tensor's logical dims in `format` (identity where it does not apply).
fn dim_order(format: MemoryFormat, rank: usize) -> Vec<usize> {
    if format.required_rank() == Some(rank) {
        format.dim_order(rank)
    } else {
        (0..rank).collect()
    }
}

/// `0..n` for the ranks a segment value can have (at most 6).
const IDENTITY: [usize; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

fn view_of(t: &Tensor) -> View<'_> {
    match &t.data {
        TensorData::F32(v) => View::F32(v),
        TensorData::F16(v) => View::F16(v),
        TensorData::Bf16(v) => View::Bf16(v),
        TensorData::Qs8(v) => View::I8(v),
    }
}

/// A tensor's buffer as a segment output buffer (no copy).
fn owned_of(data: TensorData) -> Owned {
    match data {
        TensorData::F32(v) => Owned::F32(v),
        TensorData::F16(v) => Owned::F16(v),
        TensorData::Bf16(v) => Owned::Bf16(v),
        TensorData::Qs8(v) => Owned::I8(v),
    }
}

/// Maps a checked input's error to the runtime's typed input errors.
pub(super) fn input_error(index: usize, kind: GraphErrorKind) -> RuntimeError {
    match kind {
        GraphErrorKind::DtypeMismatch { expected, found } => RuntimeError::InputDtype { index, expected, found },
        GraphErrorKind::FormatMismatch { expected, found } => RuntimeError::InputFormat { index, expected, found },
        kind => RuntimeError::BadInput { index, kind },
    }
}

impl Drop for Program {
    /// Hands the run-time buffers to the next configuration of the same loaded program (or,
    /// when it has enough, to the next program on this thread). A poisoned state (a kernel
    /// panicked mid-run, a block may be missing) is dropped instead, and one never run holds
    /// nothing to hand over.
    fn drop(&mut self) {
        if let Ok(state) = self.state.get_mut() {
            let state = std::mem::take(state);
            self.give_back(state);
        }
    }
}

impl Drop for Loaded {
    /// The last configuration is gone: its buffers go to the next program on this thread.
    fn drop(&mut self) {
        let spare = self.spare.get_mut().map(std::mem::take).unwrap_or_default();
        for state in spare {
            state.park_on_thread();
        }
    }
}

impl Program {
    /// Serializes every delegate segment, loads it back through the loader, and plans what the
    /// loader returned. Runs on the process's shared pool for `opts.threads` and `opts.policy`
    /// (`Pool::shared`; ExecuTorch also runs every delegate on one threadpool).
    pub fn new(lowered: &LoweredProgram, opts: &RunOptions) -> Result<Program, RuntimeError> {
        let pool = Pool::shared(opts.threads.max(1), opts.policy).map_err(|e| RuntimeError::Pool(e.to_string()))?;
        let mut p = Program::with_pool(lowered, opts.simd, pool)?;
        p.opts.fuse = opts.fuse;
        Ok(p)
    }

    /// As [`Program::new`], on a pool shared with other programs (as ExecuTorch shares one
    /// threadpool among its delegates): thread count and policy are the pool's. Operators of
    /// programs sharing a pool take turns on it.
    pub fn with_pool(lowered: &LoweredProgram, simd: SimdLevel, pool: Arc<Pool>) -> Result<Program, RuntimeError> {
        let opts = RunOptions { threads: pool.threads(), policy: pool.policy(), simd, ..RunOptions::default() };
        let force_scalar = force_scalar();
        let isa = resolve_simd_with(opts.simd, force_scalar)?;
        let nslots = lowered.slots.len();
        let check_slot = |s: SlotId, what: &str| {
            if s < nslots {
                Ok(s)
            } else {
                Err(RuntimeError::InvalidProgram(format!("{what} refers to slot {s} of {nslots}")))
            }
        };
        for &s in lowered.inputs.iter().chain(&lowered.outputs) {
            check_slot(s, "program input/output")?;
        }
        let mut homes = vec![Home::None; nslots];
        for (k, &s) in lowered.inputs.iter().enumerate() {
            homes[s] = Home::Input(k);
        }
        for (c, (s, t)) in lowered.constants.iter().enumerate() {
            check_slot(*s, "constant")?;
            lowered.slots[*s]
                .check_tensor(t)
                .map_err(|e| RuntimeError::InvalidProgram(format!("constant slot {s}: {e}")))?;
            homes[*s] = Home::Const(c);
        }
        let mut n_written = 0;
        let mut write = |s: SlotId, i: usize, reads: &[SlotId]| {
            if homes[s] != Home::None || reads.contains(&s) {
                return Err(RuntimeError::InvalidProgram(format!(
                    "step {i} writes slot {s}, which is an input, a constant, read by the step or written before"
                )));
            }
            homes[s] = Home::Written(n_written);
            n_written += 1;
            Ok(())
        };
        let mut steps = Vec::with_capacity(lowered.steps.len());
        let mut payloads = Vec::new();
        let mut loaded_graphs = Vec::new();
        for (i, step) in lowered.steps.iter().enumerate() {
            match step {
                Step::Delegate(seg) => {
                    for &s in seg.inputs.iter().chain(&seg.outputs) {
                        check_slot(s, "segment")?;
                    }
                    for &s in &seg.outputs {
                        write(s, i, &seg.inputs)?;
                    }
                    let segment = payloads.len();
                    let bytes = serialize::write(&seg.graph);
                    let loaded = serialize::load(&bytes, &LoadLimits::default())
                        .map_err(|e| RuntimeError::Load { segment, message: e.to_string() })?;
                    let plan = SegmentPlan::compile(segment, &loaded, seg.inputs.len(), seg.outputs.len())?;
                    // Hand-offs must agree on element types and ranks.
                    let pairs =
                        seg.inputs.iter().zip(&plan.input_values).chain(seg.outputs.iter().zip(&plan.output_values));
                    for (&slot, &vi) in pairs {
                        let (spec, v) = (&lowered.slots[slot], &plan.values[vi]);
                        let rank_ok =
                            spec.rank() == v.dims.len() || (spec.max_numel() == v.max_numel && !spec.is_dynamic());
                        if storage_type(spec.dtype) != v.dt || !rank_ok {
                            return Err(RuntimeError::InvalidProgram(format!(
                                "step {i}: slot {slot} ({} {:?}) does not match segment value {vi} ({:?} {:?})",
                                spec.dtype,
                                spec.max_shape(),
                                v.dt,
                                v.dims
                            )));
                        }
                    }
                    payloads.push(bytes);
                    loaded_graphs.push(loaded);
                    steps.push(ExecStep::Delegate { plan, inputs: seg.inputs.clone(), outputs: seg.outputs.clone() });
                }
                Step::Portable(p) => {
                    for &s in p.inputs.iter().chain([&p.output]) {
                        check_slot(s, "portable op")?;
                    }
                    write(p.output, i, &p.inputs)?;
                    steps.push(ExecStep::Portable(p.clone()));
                }
            }
        }
        let orders = lowered.slots.iter().map(|spec| handoff_order(spec, spec.rank())).collect();
        let l = Loaded {
            slots: lowered.slots.clone(),
            constants: lowered.constants.clone(),
            inputs: lowered.inputs.clone(),
            outputs: lowered.outputs.clone(),
            steps,
            payloads,
            loaded: loaded_graphs,
            homes,
            n_written,
            orders,
            spare: Mutex::new(Vec::new()),
            force_scalar,
        };
        Ok(Program::assemble(Arc::new(l), isa, opts, pool))
    }

    /// A program over `l`. Its run-time buffers are a dropped configuration's, or are made at
    /// the first run (a configuration that is never run, such as the harness's loaded program
    /// that only serves `reconfigure` and `payloads`, allocates none).
    fn assemble(l: Arc<Loaded>, isa: Isa, opts: RunOptions, pool: Arc<Pool>) -> Program {
        let spare = l.spare.lock().unwrap_or_else(|e| e.into_inner()).pop();
        Program { l, pool, isa, opts, state: Mutex::new(spare.unwrap_or_default()) }
    }

    /// The same loaded program at another SIMD level and pool, without serializing, loading
    /// and planning again (the plans are shared; run-time buffers are not). The
    /// `DELEGATE_FORCE_SCALAR` override is the one read when the program was prepared; fusion
    /// is this program's setting.
    pub fn reconfigure(&self, simd: SimdLevel, pool: Arc<Pool>) -> Result<Program, RuntimeError> {
        let opts = RunOptions { threads: pool.threads(), policy: pool.policy(), simd, fuse: self.opts.fuse };
        Ok(Program::assemble(self.l.clone(), resolve_simd_with(simd, self.l.force_scalar)?, opts, pool))
    }

    /// Turns plan-time fusion (`RunOptions::fuse`) on or off: the outputs are the same bits
    /// either way, only the number of passes over memory differs.
    pub fn set_fusion(&mut self, fuse: bool) {
        self.opts.fuse = fuse;
    }

    /// The serialized payload of each delegate segment, in program order.
    pub fn payloads(&self) -> &[Vec<u8>] {
        &self.l.payloads
    }

    /// The loader's result for each payload, in program order.
    pub fn loaded_graphs(&self) -> &[XnnGraph] {
        &self.l.loaded
    }

    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// The instruction set the kernels run with (`scalar`, `avx2`, `avx512`).
    pub fn isa_name(&self) -> &'static str {
        self.isa.name()
    }

    pub fn options(&self) -> RunOptions {
        self.opts
    }

    /// Checks `inputs` against the program's input slots (count, then each tensor).
    pub(super) fn check_inputs(&self, inputs: &[Tensor]) -> Result<(), RuntimeError> {
        if inputs.len() != self.l.inputs.len() {
            return Err(RuntimeError::InputCount { expected: self.l.inputs.len(), found: inputs.len() });
        }
        for (index, (t, &s)) in inputs.iter().zip(&self.l.inputs).enumerate() {
            self.l.slots[s].check_tensor(t).map_err(|kind| input_error(index, kind))?;
        }
        Ok(())
    }

    /// Checks one input against its slot.
    pub(super) fn check_input(&self, index: usize, t: &Tensor) -> Result<(), RuntimeError> {
        self.l.slots[self.l.inputs[index]].check_tensor(t).map_err(|kind| input_error(index, kind))
    }

    /// Checks input `index` after its data may have changed in place: only type and length
    /// can have (a bound input's shape, format and quantization are the bound tensor's).
    pub(super) fn recheck_input(&self, index: usize, t: &Tensor) -> Result<(), RuntimeError> {
        let spec = &self.l.slots[self.l.inputs[index]];
        if t.dtype() == spec.dtype && t.data.len() == t.numel() {
            return Ok(());
        }
        spec.check_tensor(t).map_err(|kind| input_error(index, kind))
    }

    /// Runs the program on `inputs` (in graph-input order, each in its slot's memory format).
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        self.run_steps(inputs, None)
    }

    /// As [`Program::run`], with every delegate segment run by `exec` instead of this
    /// runtime's plans (portable ops and hand-offs stay this runtime's): how a whole program
    /// runs with its segments on another engine.
    pub fn run_with(&self, inputs: &[Tensor], exec: &mut dyn SegmentExecutor) -> Result<Vec<Tensor>, RuntimeError> {
        self.run_steps(inputs, Some(exec))
    }

    fn run_steps(
        &self,
        inputs: &[Tensor],
        exec: Option<&mut dyn SegmentExecutor>,
    ) -> Result<Vec<Tensor>, RuntimeError> {
        self.check_inputs(inputs)?;
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if guard.segments.is_empty() {
            // First run of a fresh configuration: a dropped program's buffers, if this thread
            // has some (`SegmentPlan::run_into` fits each segment's state to its plan).
            if let Some(parked) = RunState::from_thread() {
                *guard = parked;
            }
        }
        let state = &mut *guard;
        // Outputs are returned, so each run writes them into fresh buffers.
        for &s in &self.l.outputs {
            if let Home::Written(w) = self.l.homes[s] {
                state.written.get_mut(w).map(Option::take);
            }
        }
        self.execute(state, inputs, exec)?;
        self.collect_outputs(state, inputs)
    }

    /// The program's outputs after a run, moved out of `state` (copied where a slot is also an
    /// input or a constant, or repeats as a later output).
    fn collect_outputs(&self, state: &mut RunState, inputs: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        let mut res = Vec::with_capacity(self.l.outputs.len());
        for (k, &s) in self.l.outputs.iter().enumerate() {
            let t = match self.l.homes[s] {
                Home::Input(i) => inputs.get(i).cloned(),
                Home::Const(c) => Some(self.l.constants[c].1.clone()),
                Home::Written(w) if self.l.outputs[k + 1..].contains(&s) => state.written[w].clone(),
                Home::Written(w) => state.written[w].take(),
                Home::None => None,
            };
            res.push(t.ok_or_else(|| RuntimeError::InvalidProgram(format!("output slot {s} never written")))?);
        }
        Ok(res)
    }

    /// Makes `state` hold this program's shape of buffers (a fresh or parked state).
    fn fit(&self, state: &mut RunState) {
        let n_seg = self.l.payloads.len();
        state.segments.resize_with(n_seg, SegmentState::default);
        state.seg_dims.resize_with(n_seg, Vec::new);
        state.seg_outs.resize_with(n_seg, Vec::new);
        if state.written.len() != self.l.n_written {
            state.written.clear();
            state.written.resize_with(self.l.n_written, || None);
            state.written_in.clear();
            state.written_in.resize(self.l.n_written, 0);
        }
    }

    /// Runs every step on `inputs` (checked), writing every written slot's tensor in `state`;
    /// delegate segments on `exec` where one is given, else on this runtime's plans.
    pub(super) fn execute(
        &self,
        state: &mut RunState,
        inputs: &[Tensor],
        mut exec: Option<&mut dyn SegmentExecutor>,
    ) -> Result<(), RuntimeError> {
        self.fit(state);
        state.run += 1;
        let ctx = Ctx { isa: self.isa, pool: &self.pool };
        let RunState { segments, scratch, written, written_in, run, seg_dims, seg_outs } = state;
        let run = *run;
        let mut seg_i = 0;
        for (i, st) in self.l.steps.iter().enumerate() {
            let missing =
                |s: SlotId| RuntimeError::InvalidProgram(format!("step {i} reads slot {s} before it is written"));
            match st {
                ExecStep::Delegate { plan, inputs: ins, outputs: outs } => {
                    // Output buffers first: the last run's tensors (the step never reads them).
                    let bufs = &mut seg_outs[seg_i];
                    bufs.clear();
                    for &s in outs {
                        let Home::Written(w) = self.l.homes[s] else { unreachable!("`with_pool` checked") };
                        let data =
                            written[w].as_mut().map(|t| std::mem::replace(&mut t.data, TensorData::F32(Vec::new())));
                        bufs.push(data.map_or(Owned::F32(Vec::new()), owned_of));
                    }
                    let dims = &mut seg_dims[seg_i];
                    dims.resize_with(ins.len(), Vec::new);
                    for (k, (&s, &vi)) in ins.iter().zip(&plan.input_values).enumerate() {
                        let t = self.slot(s, inputs, written, written_in, run).ok_or_else(|| missing(s))?;
                        let d = &mut dims[k];
                        d.clear();
                        let v = &plan.values[vi];
                        let spec = &self.l.slots[s];
                        // ExecuTorch serializes a 0-D value as [1] (and `with_pool` accepted only
                        // rank changes between static values of equal size): bind the value's dims.
                        if t.rank() != v.dims.len() && t.numel() == v.max_numel && !spec.is_dynamic() {
                            d.extend_from_slice(&v.dims);
                        } else {
                            let ord = &self.l.orders[s];
                            let ord = if ord.len() == t.rank() { ord.as_slice() } else { &IDENTITY[..t.rank().min(8)] };
                            d.extend(ord.iter().map(|&o| t.shape[o]));
                        }
                    }
                    if let Some(e) = exec.as_deref_mut() {
                        // Another engine runs the segment: bound inputs as this runtime's plan
                        // would get them, its outputs settled into the slots as ours are.
                        let mut bound = Vec::with_capacity(ins.len());
                        for (k, &s) in ins.iter().enumerate() {
                            let t = self.slot(s, inputs, written, written_in, run).ok_or_else(|| missing(s))?;
                            bound.push(BoundInput { view: view_of(t), dims: dims[k].clone() });
                        }
                        let produced = e.run_segment(seg_i, &bound, bufs)?;
                        drop(bound);
                        if produced.len() != outs.len() {
                            return Err(RuntimeError::InvalidProgram(format!(
                                "step {i}: the segment executor returned {} outputs for {}",
                                produced.len(),
                                outs.len()
                            )));
                        }
                        for (o, &s) in produced.into_iter().zip(outs) {
                            let Home::Written(w) = self.l.homes[s] else { unreachable!("`with_pool` checked") };
                            self.settle(&ctx, i, s, o.data, &o.dims, &mut written[w])?;
                            written_in[w] = run;
                        }
                        seg_i += 1;
                        continue;
                    }
                    // On the stack for the usual few inputs (no allocation per run).
                    const FEW: usize = 4;
                    let mut few = [SegInput { view: View::F32(&[]), dims: &[] }; FEW];
                    let mut many = Vec::new();
                    for (k, &s) in ins.iter().enumerate() {
                        let t = self.slot(s, inputs, written, written_in, run).ok_or_else(|| missing(s))?;
                        let b = SegInput { view: view_of(t), dims: &dims[k] };
                        match few.get_mut(k) {
                            Some(f) if ins.len() <= FEW => *f = b,
                            _ => many.push(b),
                        }
                    }
                    let seg_inputs = if ins.len() <= FEW { &few[..ins.len()] } else { &many[..] };
                    plan.run_into(&ctx, &mut segments[seg_i], scratch, seg_inputs, bufs, i, self.opts.fuse)?;
                    for (k, &s) in outs.iter().enumerate() {
                        let Home::Written(w) = self.l.homes[s] else { unreachable!("`with_pool` checked") };
                        let data = std::mem::replace(&mut bufs[k], Owned::F32(Vec::new()));
                        self.settle(&ctx, i, s, data, plan.output_dims(&segments[seg_i], k), &mut written[w])?;
                        written_in[w] = run;
                    }
                    seg_i += 1;
                }
                ExecStep::Portable(p) => {
                    let ins: Vec<&Tensor> = p
                        .inputs
                        .iter()
                        .map(|&s| self.slot(s, inputs, written, written_in, run).ok_or_else(|| missing(s)))
                        .collect::<Result<_, _>>()?;
                    let t = portable::run(&p.op, &ins, &self.l.slots[p.output])
                        .map_err(|what| RuntimeError::Shape { step: i, what })?;
                    let Home::Written(w) = self.l.homes[p.output] else { unreachable!("`with_pool` checked") };
                    written[w] = Some(t);
                    written_in[w] = run;
                }
            }
        }
        Ok(())
    }

    /// Slot `s`'s tensor in the run in progress, if it has one.
    fn slot<'a>(
        &'a self,
        s: SlotId,
        inputs: &'a [Tensor],
        written: &'a [Option<Tensor>],
        written_in: &[u64],
        run: u64,
    ) -> Option<&'a Tensor> {
        match self.l.homes[s] {
            Home::Input(k) => inputs.get(k),
            Home::Const(c) => Some(&self.l.constants[c].1),
            Home::Written(w) if written_in[w] == run => written[w].as_ref(),
            Home::Written(_) | Home::None => None,
        }
    }

    /// Makes segment output `data` (dims as the segment produced them) the tensor of slot `s`
    /// in `dest` (logical shape, slot format), reusing `dest`'s shape buffer. ExecuTorch hands
    /// XNNPACK dims in the tensor's dim order, so the dims are normally physical; the layout
    /// pass may also produce an NCHW value for a slot tagged channels_last (harmless in
    /// ExecuTorch when H = W = 1, where both orders share bytes): such data is logical
    /// row-major and is laid out in the slot's format here.
    fn settle(
        &self,
        ctx: &Ctx,
        step: usize,
        s: SlotId,
        mut data: Owned,
        dims: &[usize],
        dest: &mut Option<Tensor>,
    ) -> Result<(), RuntimeError> {
        let spec = &self.l.slots[s];
        let err = |what: String| RuntimeError::Shape { step, what };
        let mut shape = dest.take().map(|t| t.shape).unwrap_or_default();
        let ord = &self.l.orders[s];
        let ord = if ord.len() == dims.len() { ord.as_slice() } else { &IDENTITY[..dims.len().min(8)] };
        shape.clear();
        shape.resize(dims.len(), 0);
        for (pos, &d) in ord.iter().enumerate() {
            shape[d] = dims[pos];
        }
        let physical = dims.len() == spec.rank() && spec.check_shape(&shape).is_ok();
        if physical {
            // Physical dims: the data is already in the slot's layout.
        } else if dims.len() == spec.rank() && spec.check_shape(dims).is_ok() {
            // Logical row-major data: lay it out in the slot's format.
            let fmt_ord = dim_order(spec.format, dims.len());
            let identity = fmt_ord.iter().enumerate().all(|(i, &d)| i == d);
            if !identity {
                let mut moved = Owned::zeros(super::plan::dt_of_owned(&data), dims.iter().product());
                super::kernels::transpose::transpose(ctx, data.view(), dims, &fmt_ord, moved.view_mut())
                    .map_err(|e| err(format!("slot {s}: {e}")))?;
                data = moved;
            }
            shape.copy_from_slice(dims);
        } else if !spec.is_dynamic() && dims.iter().product::<usize>() == spec.max_numel() {
            // XNNPACK declares a 0-D value as [1]; the slot keeps the graph's rank.
            shape = spec.max_shape();
        } else {
            return Err(err(format!("slot {s}: segment produced dims {dims:?} for shape {:?}", spec.max_shape())));
        }
        if !physical {
            spec.check_shape(&shape).map_err(|e| err(format!("slot {s}: {e}")))?;
        }
        let data = match (data, spec.dtype) {
            (Owned::F32(v), ElemType::F32) => TensorData::F32(v),
            (Owned::F16(v), ElemType::F16) => TensorData::F16(v),
            (Owned::Bf16(v), ElemType::Bf16) => TensorData::Bf16(v),
            (Owned::I8(v), ElemType::Qs8) => TensorData::Qs8(v),
            (_, d) => return Err(err(format!("slot {s}: segment output type differs from {d}"))),
        };
        *dest = Some(Tensor { shape, format: spec.format, quant: spec.quant, data });
        Ok(())
    }

    /// A run state for a bound program: a dropped configuration's, a parked one, or new.
    pub(super) fn take_state(&self) -> RunState {
        let spare = self.l.spare.lock().unwrap_or_else(|e| e.into_inner()).pop();
        spare.or_else(RunState::from_thread).unwrap_or_default()
    }

    /// Hands a run state to the next configuration of the same loaded program (or, when it
    /// has enough, to the next program on this thread). One never run holds nothing.
    pub(super) fn give_back(&self, state: RunState) {
        if state.segments.is_empty() {
            return;
        }
        let mut spare = self.l.spare.lock().unwrap_or_else(|e| e.into_inner());
        if spare.len() < MAX_SPARE_STATES {
            spare.push(state);
        } else {
            drop(spare);
            state.park_on_thread();
        }
    }

    /// Program output `k`'s written slot, if its tensor is written by a step (not an input
    /// or a constant) and no earlier output is the same slot.
    pub(super) fn written_output(&self, k: usize) -> Option<usize> {
        let s = self.l.outputs[k];
        match self.l.homes[s] {
            Home::Written(w) if !self.l.outputs[..k].contains(&s) => Some(w),
            _ => None,
        }
    }

    /// The tensor of written slot `w` in `state`, moved in or out around a bound run.
    pub(super) fn written_slot(state: &mut RunState, w: usize) -> &mut Option<Tensor> {
        &mut state.written[w]
    }

    /// Output `k` after a bound run where it is not a written slot's first occurrence: a copy
    /// of the input, constant or earlier output it is (`outputs` holds the earlier outputs).
    pub(super) fn outputs_of_slot(&self, inputs: &[Tensor], outputs: &[Tensor], k: usize) -> Option<Tensor> {
        let s = self.l.outputs[k];
        match self.l.homes[s] {
            Home::Input(i) => inputs.get(i).cloned(),
            Home::Const(c) => Some(self.l.constants[c].1.clone()),
            Home::Written(_) => self.l.outputs[..k].iter().position(|&o| o == s).map(|j| outputs[j].clone()),
            Home::None => None,
        }
    }

    /// Program outputs after a bound run, as [`Program::run`] returns them.
    pub(super) fn outputs_of(&self, state: &mut RunState, inputs: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        self.collect_outputs(state, inputs)
    }
}
