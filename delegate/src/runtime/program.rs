//! A loaded program: delegate segments (serialized, loaded back, planned) and portable ops,
//! run in order over program-level slots.

use super::kernels::{portable, Ctx, Scratch, View};
use super::plan::{BoundInput, Owned, SegmentOutput, SegmentPlan, SegmentState};
use super::pool::Pool;
use super::simd::Isa;
use super::{force_scalar, resolve_simd_with, RunOptions, RuntimeError, SimdLevel};
use crate::program::{LoweredProgram, PortableOp, SlotId, Step};
use crate::serialize::{self, LoadLimits};
use crate::xnn::XnnGraph;
use reference::{ElemType, GraphErrorKind, MemoryFormat, Tensor, TensorData, TensorSpec};
use std::borrow::Cow;
use std::sync::{Arc, Mutex};

enum ExecStep {
    Delegate { plan: SegmentPlan, inputs: Vec<SlotId>, outputs: Vec<SlotId> },
    Portable(PortableOp),
}

#[derive(Default)]
struct RunState {
    segments: Vec<SegmentState>,
    scratch: Scratch,
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
        blocks + 4 * (a.capacity() + b.capacity() + c.capacity())
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
    /// Per slot: index of the last step reading it (`usize::MAX` for program outputs).
    last_use: Vec<usize>,
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
    /// the outputs in segment output order.
    fn run_segment(&mut self, segment: usize, inputs: &[BoundInput]) -> Result<Vec<SegmentOutput>, RuntimeError>;
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

fn view_of(t: &Tensor) -> View<'_> {
    match &t.data {
        TensorData::F32(v) => View::F32(v),
        TensorData::F16(v) => View::F16(v),
        TensorData::Bf16(v) => View::Bf16(v),
        TensorData::Qs8(v) => View::I8(v),
    }
}

impl Drop for Program {
    /// Hands the run-time buffers to the next configuration of the same loaded program (or,
    /// when it has enough, to the next program on this thread). A poisoned state (a kernel
    /// panicked mid-run, a block may be missing) is dropped instead, and one never run holds
    /// nothing to hand over.
    fn drop(&mut self) {
        if let Ok(state) = self.state.get_mut() {
            if state.segments.is_empty() {
                return;
            }
            let state = std::mem::take(state);
            let mut spare = self.l.spare.lock().unwrap_or_else(|e| e.into_inner());
            if spare.len() < MAX_SPARE_STATES {
                spare.push(state);
            } else {
                drop(spare);
                state.park_on_thread();
            }
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
    /// loader returned. Starts the pool (`opts.threads - 1` workers).
    pub fn new(lowered: &LoweredProgram, opts: &RunOptions) -> Result<Program, RuntimeError> {
        let pool = Pool::new(opts.threads.max(1), opts.policy).map_err(|e| RuntimeError::Pool(e.to_string()))?;
        Program::with_pool(lowered, opts.simd, Arc::new(pool))
    }

    /// As [`Program::new`], on a pool shared with other programs (as ExecuTorch shares one
    /// threadpool among its delegates): thread count and policy are the pool's. Operators of
    /// programs sharing a pool take turns on it.
    pub fn with_pool(lowered: &LoweredProgram, simd: SimdLevel, pool: Arc<Pool>) -> Result<Program, RuntimeError> {
        let opts = RunOptions { threads: pool.threads(), policy: pool.policy(), simd };
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
        for (s, t) in &lowered.constants {
            check_slot(*s, "constant")?;
            lowered.slots[*s]
                .check_tensor(t)
                .map_err(|e| RuntimeError::InvalidProgram(format!("constant slot {s}: {e}")))?;
        }
        let mut steps = Vec::with_capacity(lowered.steps.len());
        let mut payloads = Vec::new();
        let mut loaded_graphs = Vec::new();
        for (i, step) in lowered.steps.iter().enumerate() {
            match step {
                Step::Delegate(seg) => {
                    for &s in seg.inputs.iter().chain(&seg.outputs) {
                        check_slot(s, "segment")?;
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
                    steps.push(ExecStep::Portable(p.clone()));
                }
            }
        }
        let mut last_use = vec![0usize; nslots];
        for (i, st) in steps.iter().enumerate() {
            let reads: &[SlotId] = match st {
                ExecStep::Delegate { inputs, .. } => inputs,
                ExecStep::Portable(p) => &p.inputs,
            };
            for &s in reads {
                last_use[s] = i;
            }
        }
        for &s in &lowered.outputs {
            last_use[s] = usize::MAX;
        }
        let l = Loaded {
            slots: lowered.slots.clone(),
            constants: lowered.constants.clone(),
            inputs: lowered.inputs.clone(),
            outputs: lowered.outputs.clone(),
            steps,
            payloads,
            loaded: loaded_graphs,
            last_use,
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
    /// `DELEGATE_FORCE_SCALAR` override is the one read when the program was prepared.
    pub fn reconfigure(&self, simd: SimdLevel, pool: Arc<Pool>) -> Result<Program, RuntimeError> {
        let opts = RunOptions { threads: pool.threads(), policy: pool.policy(), simd };
        Ok(Program::assemble(self.l.clone(), resolve_simd_with(simd, self.l.force_scalar)?, opts, pool))
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
        mut exec: Option<&mut dyn SegmentExecutor>,
    ) -> Result<Vec<Tensor>, RuntimeError> {
        if inputs.len() != self.l.inputs.len() {
            return Err(RuntimeError::InputCount { expected: self.l.inputs.len(), found: inputs.len() });
        }
        for (index, (t, &s)) in inputs.iter().zip(&self.l.inputs).enumerate() {
            self.l.slots[s].check_tensor(t).map_err(|kind| match kind {
                GraphErrorKind::DtypeMismatch { expected, found } => {
                    RuntimeError::InputDtype { index, expected, found }
                }
                GraphErrorKind::FormatMismatch { expected, found } => {
                    RuntimeError::InputFormat { index, expected, found }
                }
                kind => RuntimeError::BadInput { index, kind },
            })?;
        }
        let mut slots: Vec<Option<Cow<Tensor>>> = (0..self.l.slots.len()).map(|_| None).collect();
        for (t, &s) in inputs.iter().zip(&self.l.inputs) {
            slots[s] = Some(Cow::Borrowed(t));
        }
        for (s, t) in &self.l.constants {
            slots[*s] = Some(Cow::Borrowed(t));
        }
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if guard.segments.is_empty() {
            // First run of a fresh configuration: a dropped program's buffers, if this thread
            // has some (`SegmentPlan::run` fits each segment's state to its plan).
            if let Some(parked) = RunState::from_thread() {
                *guard = parked;
            }
        }
        let RunState { segments, scratch } = &mut *guard;
        segments.resize_with(self.l.payloads.len(), SegmentState::default);
        let ctx = Ctx { isa: self.isa, pool: &self.pool };
        let mut seg_i = 0;
        for (i, st) in self.l.steps.iter().enumerate() {
            let missing =
                |s: SlotId| RuntimeError::InvalidProgram(format!("step {i} reads slot {s} before it is written"));
            match st {
                ExecStep::Delegate { plan, inputs, outputs } => {
                    let mut bound = Vec::with_capacity(inputs.len());
                    for (&s, &vi) in inputs.iter().zip(&plan.input_values) {
                        let t: &Tensor = slots[s].as_deref().ok_or_else(|| missing(s))?;
                        let ord = handoff_order(&self.l.slots[s], t.rank());
                        let mut dims: Vec<usize> = ord.iter().map(|&d| t.shape[d]).collect();
                        // ExecuTorch serializes a 0-D value as [1] (and `new` accepted only
                        // rank changes between static values of equal size): bind the value's dims.
                        let v = &plan.values[vi];
                        if dims.len() != v.dims.len() && t.numel() == v.max_numel && !self.l.slots[s].is_dynamic() {
                            dims = v.dims.clone();
                        }
                        bound.push(BoundInput { view: view_of(t), dims });
                    }
                    let outs = match exec.as_deref_mut() {
                        Some(e) => e.run_segment(seg_i, &bound)?,
                        None => plan.run(&ctx, &mut segments[seg_i], scratch, &bound, i)?,
                    };
                    seg_i += 1;
                    drop(bound);
                    for (o, &s) in outs.into_iter().zip(outputs) {
                        let t = self.to_tensor(&ctx, i, s, o.data, &o.dims)?;
                        slots[s] = Some(Cow::Owned(t));
                    }
                }
                ExecStep::Portable(p) => {
                    let ins: Vec<&Tensor> = p
                        .inputs
                        .iter()
                        .map(|&s| slots[s].as_deref().ok_or_else(|| missing(s)))
                        .collect::<Result<_, _>>()?;
                    let t = portable::run(&p.op, &ins, &self.l.slots[p.output])
                        .map_err(|what| RuntimeError::Shape { step: i, what })?;
                    slots[p.output] = Some(Cow::Owned(t));
                }
            }
            // Free hand-offs nobody reads any more.
            for (s, slot) in slots.iter_mut().enumerate() {
                if self.l.last_use[s] == i {
                    *slot = None;
                }
            }
        }
        drop(guard);
        let mut res = Vec::with_capacity(self.l.outputs.len());
        for (k, &s) in self.l.outputs.iter().enumerate() {
            let missing = || RuntimeError::InvalidProgram(format!("output slot {s} never written"));
            // Move the tensor out unless a later output repeats the slot (then copy).
            let t = if self.l.outputs[k + 1..].contains(&s) {
                slots[s].as_ref().ok_or_else(missing)?.clone().into_owned()
            } else {
                slots[s].take().ok_or_else(missing)?.into_owned()
            };
            res.push(t);
        }
        Ok(res)
    }

    /// A segment output (dims as the segment produced them) as a tensor of slot `s` (logical
    /// shape, slot format). ExecuTorch hands XNNPACK dims in the tensor's dim order, so the dims
    /// are normally physical; the layout pass may also produce an NCHW value for a slot tagged
    /// channels_last (harmless in ExecuTorch when H = W = 1, where both orders share bytes):
    /// such data is logical row-major and is laid out in the slot's format here.
    fn to_tensor(
        &self,
        ctx: &Ctx,
        step: usize,
        s: SlotId,
        mut data: Owned,
        dims: &[usize],
    ) -> Result<Tensor, RuntimeError> {
        let spec = &self.l.slots[s];
        let err = |what: String| RuntimeError::Shape { step, what };
        let ord = handoff_order(spec, dims.len());
        let mut as_physical = vec![0; dims.len()];
        for (pos, &d) in ord.iter().enumerate() {
            as_physical[d] = dims[pos];
        }
        let shape: Vec<usize> = if dims.len() == spec.rank() && spec.check_shape(&as_physical).is_ok() {
            as_physical
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
            dims.to_vec()
        } else if !spec.is_dynamic() && dims.iter().product::<usize>() == spec.max_numel() {
            // XNNPACK declares a 0-D value as [1]; the slot keeps the graph's rank.
            spec.max_shape()
        } else {
            return Err(err(format!("slot {s}: segment produced dims {dims:?} for shape {:?}", spec.max_shape())));
        };
        spec.check_shape(&shape).map_err(|e| err(format!("slot {s}: {e}")))?;
        let data = match (data, spec.dtype) {
            (Owned::F32(v), ElemType::F32) => TensorData::F32(v),
            (Owned::F16(v), ElemType::F16) => TensorData::F16(v),
            (Owned::Bf16(v), ElemType::Bf16) => TensorData::Bf16(v),
            (Owned::I8(v), ElemType::Qs8) => TensorData::Qs8(v),
            (_, d) => return Err(err(format!("slot {s}: segment output type differs from {d}"))),
        };
        Ok(Tensor { shape, format: spec.format, quant: spec.quant, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::ThreadPolicy;
    use crate::{lower, LoweringMode};
    use reference::graph::GraphBuilder;

    #[test]
    fn a_dropped_configuration_hands_its_buffers_to_the_next() {
        let g = GraphBuilder::new();
        let x = g.input("x", TensorSpec::f32(&[2, 3, 4]));
        let y = g.mean(g.square(x), &[2], true);
        let graph = g.finish(&[y]).unwrap();
        let lowered = lower(&graph, LoweringMode::StaticMean).unwrap();
        let p = Program::new(&lowered, &RunOptions::default()).unwrap();
        let x = Tensor::f32(&[2, 3, 4], (0..24).map(|i| i as f32 * 0.25 - 3.0).collect());
        let want = p.run(std::slice::from_ref(&x)).unwrap();
        let spare = || p.l.spare.lock().unwrap().len();
        let pool = Arc::new(Pool::new(2, ThreadPolicy::PerOutputTasks).unwrap());
        // A configuration never run allocates nothing and parks nothing.
        drop(p.reconfigure(SimdLevel::Auto, pool.clone()).unwrap());
        assert_eq!(spare(), 0);
        let q = p.reconfigure(SimdLevel::Auto, pool.clone()).unwrap();
        assert_eq!(q.run(std::slice::from_ref(&x)).unwrap(), want);
        drop(q);
        assert_eq!(spare(), 1);
        // The next configuration takes those buffers (blocks holding the last run's values).
        let r = p.reconfigure(SimdLevel::Auto, pool).unwrap();
        assert_eq!(spare(), 0);
        assert_eq!(r.run(std::slice::from_ref(&x)).unwrap(), want);
    }

    #[test]
    fn a_dropped_program_hands_its_buffers_to_the_next_one_on_its_thread() {
        // Two programs with intermediate blocks: the second runs on the first's stale blocks.
        let square_mean = || {
            let g = GraphBuilder::new();
            let x = g.input("x", TensorSpec::f32(&[2, 3, 4]));
            let y = g.mean(g.square(x), &[2], true);
            g.finish(&[y]).unwrap()
        };
        let mul_add = || {
            let g = GraphBuilder::new();
            let x = g.input("x", TensorSpec::f32(&[2, 3, 4]));
            let y = g.add(g.mul(x, x), g.square(x));
            let m = g.mean(y, &[1], false);
            g.finish(&[m]).unwrap()
        };
        let x = Tensor::f32(&[2, 3, 4], (0..24).map(|i| i as f32 * 0.5 - 5.0).collect());
        let run_fresh = |graph: reference::Graph, x: Tensor| {
            // On a thread of its own: no parked buffers there.
            std::thread::spawn(move || {
                let lowered = lower(&graph, LoweringMode::StaticMean).unwrap();
                Program::new(&lowered, &RunOptions::default()).unwrap().run(&[x]).unwrap()
            })
            .join()
            .unwrap()
        };
        let want = run_fresh(mul_add(), x.clone());
        let parked = || THREAD_STATES.with(|p| p.borrow().len());
        assert_eq!(parked(), 0);
        let first = lower(&square_mean(), LoweringMode::StaticMean).unwrap();
        let p = Program::new(&first, &RunOptions::default()).unwrap();
        p.run(std::slice::from_ref(&x)).unwrap();
        drop(p);
        assert_eq!(parked(), 1);
        let second = lower(&mul_add(), LoweringMode::StaticMean).unwrap();
        let q = Program::new(&second, &RunOptions::default()).unwrap();
        assert_eq!(parked(), 1, "a program takes parked buffers at its first run, not before");
        assert_eq!(q.run(std::slice::from_ref(&x)).unwrap(), want);
        assert_eq!(parked(), 0);
        assert_eq!(q.run(std::slice::from_ref(&x)).unwrap(), want);
    }
}
