//! A loaded program: delegate segments (serialized, loaded back, planned) and portable ops,
//! run in order over program-level slots.
//!
//! Two ways to run it: [`Program::run`] takes input tensors and returns fresh output tensors
//! (checked, allocated per call); [`Program::bind`] binds inputs and outputs once and
//! [`Bound::invoke`] reruns the program on them with no allocation and no re-check, as
//! XNNPACK's setup/invoke split does. Both execute the same steps on the same kernels.
//!
//! [`load`] checks and plans a lowered program, [`execute`] runs its steps, [`direct`] runs a
//! bound one-segment program without the step loop, [`handoff`] moves tensors between slots
//! and segments, [`state`] holds the buffers reused across runs.

mod direct;
mod execute;
mod handoff;
mod load;
mod state;

pub(in crate::runtime) use direct::Direct;
use handoff::input_error;
pub(in crate::runtime) use state::RunState;
use state::MAX_SPARE_STATES;

use super::exec::SegmentState;
use super::plan::{BoundInput, Owned, SegmentOutput, SegmentPlan};
use super::pool::Pool;
use super::simd::Isa;
use super::{resolve_simd_with, RunOptions, RuntimeError, SimdLevel};
use crate::program::{LoweredProgram, PortableOp, SlotId};
use crate::xnn::XnnGraph;
use reference::{Tensor, TensorSpec};
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
