//! A borrowed job shared with the pool's persistent workers: the one lifetime erasure the
//! pool needs. Workers outlive any one dispatch, so the closure they call (which borrows the
//! caller's tensors) is handed to them as a pointer whose lifetime is erased; [`scoped_job`]
//! makes that sound by not returning (or unwinding) until every handle to it is dropped. Safe
//! Rust cannot express this (it is what `std::thread::scope` does inside the standard library
//! with its own `unsafe`), so this module keeps its `unsafe`, two blocks and one `Send` impl.

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

type DynJob<'a> = dyn Fn(usize) + Sync + 'a;

/// A borrowed job that can be sent to pool workers. Valid while its [`scoped_job`] runs.
#[derive(Clone)]
pub struct JobRef {
    f: *const DynJob<'static>,
    /// Never read: its reference count is what `scoped_job` waits on.
    #[allow(dead_code)]
    alive: Arc<()>,
}

// SAFETY: the pointee is `Sync`, so calling it from another thread is allowed; the pointer stays
// valid while any `JobRef` clone exists (see `scoped_job`).
unsafe impl Send for JobRef {}

impl JobRef {
    pub fn call(&self, i: usize) {
        // SAFETY: `scoped_job` does not return (or unwind past its frame) until every clone of
        // this `JobRef` has been dropped, so the closure behind `f` is still alive here.
        unsafe { (*self.f)(i) }
    }
}

/// Runs `body` with a sendable handle to `f`; returns only after every clone of the handle
/// has been dropped (on unwind too), so workers can never call `f` after it is gone.
pub fn scoped_job<R>(f: &DynJob<'_>, body: impl FnOnce(&JobRef) -> R) -> R {
    struct WaitClones(Arc<()>);
    impl Drop for WaitClones {
        fn drop(&mut self) {
            let mut spins = 0u32;
            while Arc::strong_count(&self.0) > 1 {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(64) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            // Pairs with the release decrement of each dropped clone: the workers' calls of
            // `f` happen before this function returns.
            fence(Ordering::Acquire);
        }
    }
    let alive = Arc::new(());
    let raw: *const DynJob<'_> = f;
    // SAFETY: only the lifetime bound of the trait object changes (same layout). The pointer is
    // dereferenced only through `JobRef::call`, and the guard below keeps this frame alive until
    // no `JobRef` remains.
    let raw: *const DynJob<'static> = unsafe { std::mem::transmute(raw) };
    let guard = WaitClones(alive.clone());
    let job = JobRef { f: raw, alive };
    let r = body(&job);
    drop(job);
    drop(guard);
    r
}
