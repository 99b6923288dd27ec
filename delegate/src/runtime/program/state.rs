//! Run-time buffers of a program, reused from run to run and parked for the next program.

use super::super::exec::SegmentState;
use super::super::kernels::Scratch;
use super::super::plan::Owned;
use reference::Tensor;

/// Run-time buffers of a program, reused from run to run: segment states (intermediate
/// blocks, shapes), scratch, and the tensors of slots written by steps.
#[derive(Default)]
pub(in crate::runtime) struct RunState {
    pub(super) segments: Vec<SegmentState>,
    pub(super) scratch: Scratch,
    /// The tensor of each written slot. A run writes every one before reading it; the
    /// buffers stay for the next run (a program output's is moved out by `Program::run`).
    pub(super) written: Vec<Option<Tensor>>,
    /// The run in which each written tensor was last written (`run` below): a step reading
    /// one not written in this run is refused, never served last run's data.
    pub(super) written_in: Vec<u64>,
    pub(super) run: u64,
    /// Per delegate step: its inputs' dims as handed to the segment, and its output buffers.
    pub(super) seg_dims: Vec<Vec<Vec<usize>>>,
    pub(super) seg_outs: Vec<Vec<Owned>>,
}

/// Run-time buffers kept for the next configuration of the same loaded program (see
/// `Loaded::spare`): a few are enough for the harness, which drops each configuration after
/// its runs; the bound keeps many programs alive at once from parking buffers forever.
pub(super) const MAX_SPARE_STATES: usize = 4;

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
    pub(super) fn bytes(&self) -> usize {
        let blocks: usize = self.segments.iter().map(|s| s.block_capacity_bytes()).sum();
        let Scratch { a, b, c, wide } = &self.scratch;
        let written: usize = self.written.iter().flatten().map(|t| t.data.len() * t.dtype().size_bytes()).sum();
        let wide: usize = wide.iter().map(|w| w.capacity()).sum();
        blocks + 4 * (a.capacity() + b.capacity() + c.capacity() + wide) + written
    }

    /// Parks the state for the next program on this thread (or drops it: too large, the pool
    /// full, or the thread exiting).
    pub(super) fn park_on_thread(self) {
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
    pub(super) fn from_thread() -> Option<RunState> {
        THREAD_STATES.try_with(|pool| pool.try_borrow_mut().ok()?.pop()).ok().flatten()
    }
}
