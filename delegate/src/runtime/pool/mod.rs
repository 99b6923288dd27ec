//! A persistent thread pool, one per program or shared by several (`Program::with_pool`,
//! as ExecuTorch shares one threadpool among its delegates). Workers spin on an epoch
//! counter for a bounded time (dispatch then costs about 0.2 us on this machine), then park
//! (a wake costs 25-40 us), so back-to-back operators never pay a wake-up and an idle
//! program burns no CPU.
//!
//! `threads == 1` creates no worker at all: every job runs inline on the caller.

// The lifetime erasure of a job borrowed by persistent workers: `unsafe` (see its docs).
#[allow(unsafe_code)]
mod job;
mod parts;

use super::ThreadPolicy;
use job::{scoped_job, JobRef};
pub use parts::Parts;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking: well above the gap between back-to-back
/// operators and runs, short enough that an idle program gives the core back quickly. A
/// caller that runs something else between two runs (a benchmark interleaving variants, whose
/// portable "before" run of a 1 MiB RMSNorm takes about 0.3 ms) would otherwise find the
/// worker parked at every run, and a wake (25-40 us) costs more than a 1 MiB mean takes.
/// pthreadpool, which XNNPACK runs on, spins longer still (1,000,000 pause iterations).
/// A pool with more threads than the process may run on (`taskset`, a CPU quota) does not
/// spin at all: a spinning worker would only take the caller's core away from it.
const SPIN_BEFORE_PARK: Duration = Duration::from_millis(2);

/// Below this many bytes touched, `CostModel` runs an operator inline: splitting saves less
/// than a dispatch plus moving the data to a second core's L2. Measured on this project's
/// 2-core machine: an isolated mean already splits profitably from 64 KiB
/// (`cargo bench -p delegate --bench runtime_quick -- inline`), but inside a program
/// (RMSNorm, `-- rmsnorm`) splitting every op at 64 or 128 KiB made 1x8x2048 and 1x16x1024
/// 1.3-1.5x slower at 2 threads, and at 256 KiB none of the sizes is slower.
pub const INLINE_BYTES: usize = 256 * 1024;

/// Below this many bytes of an operand written earlier in the same run (by an operator that
/// ran inline, so it sits in the calling core's L2), an elementwise operator runs inline too:
/// a second core would first pull its half over from the first core's cache, which cost more
/// than it saved (qs8 RMSNorm 1x64x512: quantize, dequantize, then a 256 KiB fp32 chain on the
/// dequantized values took 14-16 us at 1 thread and 15-31 us at 2). A heuristic only: inline
/// or split, an elementwise chain computes the same bits.
pub const FRESH_INLINE_BYTES: usize = 512 * 1024;

/// CPUs this process may run on (affinity and cgroup quota), read once: the query reads
/// files under /sys.
fn available_cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The dispatch in progress, read by workers under the lock.
struct Slot {
    epoch: u64,
    job: Option<JobRef>,
}

struct Shared {
    /// Mirrors `Slot::epoch` for lock-free spinning.
    epoch: AtomicU64,
    slot: Mutex<Slot>,
    /// Per thread (the caller first, then the workers): its share of the current dispatch.
    shares: Vec<Share>,
    /// Tasks finished in the current dispatch (each thread adds its count once).
    completed: AtomicUsize,
    /// Workers that checked in for the current dispatch (the `PerOutputTasks` barrier).
    done: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    /// Per worker: parked (or about to park) and needs an unpark.
    sleeping: Vec<AtomicBool>,
    /// How long an idle worker spins (zero when the pool has more threads than CPUs).
    spin: Duration,
}

pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// The thread count the program's splits are made for: `workers.len() + 1`, or more
    /// when [`Pool::with_os_threads`] runs them on fewer threads.
    threads: usize,
    policy: ThreadPolicy,
    /// Serializes dispatches from several caller threads (a `Program` is `Sync`).
    dispatch: Mutex<()>,
    /// Jobs handed to the workers so far ([`Pool::dispatches`]).
    dispatched: AtomicUsize,
}

impl Pool {
    /// Jobs handed to the workers so far: a caller compares two readings to learn whether the
    /// operators between them split (where their outputs were written).
    pub fn dispatches(&self) -> usize {
        self.dispatched.load(Ordering::Relaxed)
    }

    /// A pool of one thread (no workers), for operators that must not split.
    pub fn serial() -> &'static Pool {
        static SERIAL: std::sync::OnceLock<Pool> = std::sync::OnceLock::new();
        SERIAL.get_or_init(|| Pool::new(1, ThreadPolicy::CostModel).expect("a pool without workers starts no thread"))
    }

    /// A pool with `threads - 1` workers (the caller is thread 0).
    pub fn new(threads: usize, policy: ThreadPolicy) -> std::io::Result<Pool> {
        Pool::with_spin(threads, policy, SPIN_BEFORE_PARK)
    }

    /// The process's pool for `threads` and `policy`, shared by every program that asks while
    /// any holds it (ExecuTorch runs every delegate on one threadpool): programs run one after
    /// the other then find its workers still spinning, where a pool per program would find its
    /// own parked, and the machine holds one set of workers instead of one per program.
    pub fn shared(threads: usize, policy: ThreadPolicy) -> std::io::Result<Arc<Pool>> {
        type Registry = Vec<((usize, ThreadPolicy), std::sync::Weak<Pool>)>;
        static POOLS: Mutex<Registry> = Mutex::new(Vec::new());
        let threads = threads.max(1);
        let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
        pools.retain(|(_, w)| w.strong_count() > 0);
        if let Some(p) = pools.iter().find(|(k, _)| *k == (threads, policy)).and_then(|(_, w)| w.upgrade()) {
            return Ok(p);
        }
        let p = Arc::new(Pool::new(threads, policy)?);
        pools.push(((threads, policy), Arc::downgrade(&p)));
        Ok(p)
    }

    /// As [`Pool::new`], with idle workers spinning for `spin` before they park. A caller
    /// that dispatches every millisecond or so (the fuzz loop: one multi-threaded run per
    /// case, the reference and the lowering in between) pays a 25-40 us wake-up per run
    /// unless the spin outlasts the gap. Still no spin when the pool has more threads than
    /// CPUs.
    pub fn with_spin(threads: usize, policy: ThreadPolicy, spin: Duration) -> std::io::Result<Pool> {
        Pool::with_os_threads(threads, policy, spin, threads)
    }

    /// As [`Pool::with_spin`] for a `threads`-thread program whose tasks run on at most
    /// `os_threads` threads (the caller included). Every split, every partial result and the
    /// order they are combined in are the `threads`-thread program's: tasks are claimed
    /// dynamically and no kernel reads which thread runs it, so only the interleaving
    /// differs. A test harness on 2 cores uses it for 3 to 8 threads, where a real pool only
    /// time-slices the same core: under `PerOutputTasks` every reduction woke 7 workers,
    /// which cost the fuzz loop a third of its time. The barrier of `PerOutputTasks` waits
    /// for the threads that exist.
    pub fn with_os_threads(
        threads: usize,
        policy: ThreadPolicy,
        spin: Duration,
        os_threads: usize,
    ) -> std::io::Result<Pool> {
        let threads = threads.max(1);
        let os_threads = os_threads.clamp(1, threads);
        let n_workers = os_threads - 1;
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            slot: Mutex::new(Slot { epoch: 0, job: None }),
            shares: (0..os_threads).map(|_| Share::default()).collect(),
            completed: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            sleeping: (0..n_workers).map(|_| AtomicBool::new(false)).collect(),
            spin: if available_cpus() >= os_threads { spin } else { Duration::ZERO },
        });
        let mut pool = Pool {
            shared: shared.clone(),
            workers: Vec::new(),
            threads,
            policy,
            dispatch: Mutex::new(()),
            dispatched: AtomicUsize::new(0),
        };
        for w in 0..n_workers {
            let s = shared.clone();
            let h = std::thread::Builder::new().name(format!("delegate-rt-{w}")).spawn(move || worker(s, w))?;
            pool.workers.push(h);
        }
        Ok(pool)
    }

    /// The thread count splits are made for (see [`Pool::with_os_threads`]).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Threads that run tasks, the caller included.
    pub fn os_threads(&self) -> usize {
        self.workers.len() + 1
    }

    pub fn policy(&self) -> ThreadPolicy {
        self.policy
    }

    /// Runs `f(task)` for every task in `0..n_tasks` on all threads (the caller included) and
    /// returns when all are done. With one task or no workers it runs inline.
    ///
    /// Tasks are claimed dynamically, so the caller does every task no worker got to: under
    /// `CostModel` it waits only for the tasks, never for a worker that other load keeps off
    /// the CPU. `PerOutputTasks` also waits until every worker has checked in, as
    /// pthreadpool's barrier does (the wake-up cost it reproduces).
    pub fn run_tasks(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if n_tasks == 0 {
            return;
        }
        if self.workers.is_empty() || n_tasks == 1 {
            (0..n_tasks).for_each(f);
            return;
        }
        let _serial = self.dispatch.lock().unwrap_or_else(|e| e.into_inner());
        self.dispatched.fetch_add(1, Ordering::Relaxed);
        let s = &*self.shared;
        let barrier = self.policy == ThreadPolicy::PerOutputTasks;
        let panicked = scoped_job(f, |job| {
            let epoch = {
                let mut slot = s.slot.lock().unwrap_or_else(|e| e.into_inner());
                // No worker holds a job now (the previous `scoped_job` waited for every clone),
                // so resetting the counters cannot race with a late claim.
                s.completed.store(0, Ordering::Relaxed);
                s.done.store(0, Ordering::Relaxed);
                s.panicked.store(false, Ordering::Relaxed);
                let t = s.shares.len();
                for (k, share) in s.shares.iter().enumerate() {
                    share.set(k * n_tasks / t, (k + 1) * n_tasks / t);
                }
                slot.epoch += 1;
                slot.job = Some(job.clone());
                slot.epoch
            };
            s.epoch.store(epoch, Ordering::SeqCst);
            for (w, h) in self.workers.iter().enumerate() {
                if s.sleeping[w].load(Ordering::SeqCst) {
                    h.thread().unpark();
                }
            }
            run_share(s, job, 0);
            let mut spins = 0u32;
            while s.completed.load(Ordering::Acquire) < n_tasks
                || (barrier && s.done.load(Ordering::Acquire) < self.workers.len())
            {
                spins = spins.wrapping_add(1);
                if s.spin.is_zero() || spins.is_multiple_of(64) {
                    // A worker holding a task was descheduled by other load (or shares this
                    // thread's core): let it run.
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            // Drop the pool's clone so `scoped_job` can return.
            s.slot.lock().unwrap_or_else(|e| e.into_inner()).job.take();
            s.panicked.load(Ordering::Acquire)
        });
        if panicked {
            panic!("a runtime kernel panicked on a pool thread");
        }
    }
}

/// Iterations an idle worker spins without yielding (about a microsecond): back-to-back
/// dispatches land here.
const IDLE_PURE_SPINS: u32 = 256;

/// One thread's share of a dispatch's tasks, on cache lines of its own (pthreadpool's
/// per-thread range): its owner claims from the front, the other threads steal from the back
/// once their own share is done, and `left` grants every claim, so front and back never cross.
/// A claim takes half of what is left of the share (at least one task), as pthreadpool's
/// dynamic dispatch (`get_chunk`, which XNNPACK's reductions use) does: a thread claims a few
/// times per dispatch, on a line no other thread writes while it has work of its own. With one
/// counter shared by every thread and a claim per task, a 128-task mean at 2 threads took
/// 7.4 us where XNNPACK's pool took 0.85 (each claim moved the line between cores).
#[derive(Default)]
#[repr(align(128))]
struct Share {
    /// The next task claimed from the front (by the owner only).
    front: AtomicUsize,
    /// One past the next task stolen from the back.
    back: AtomicUsize,
    /// Tasks of the share not yet claimed.
    left: AtomicUsize,
}

impl Share {
    /// Makes the share tasks `first..end` (before the dispatch is published).
    fn set(&self, first: usize, end: usize) {
        self.front.store(first, Ordering::Relaxed);
        self.back.store(end, Ordering::Relaxed);
        self.left.store(end - first, Ordering::Relaxed);
    }

    /// How many tasks a claim got (half of those left, at least one; 0: none left).
    fn grant(&self) -> usize {
        let mut l = self.left.load(Ordering::Relaxed);
        while l > 0 {
            let c = (l / 2).max(1);
            match self.left.compare_exchange_weak(l, l - c, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return c,
                Err(now) => l = now,
            }
        }
        0
    }
}

/// Runs thread `me`'s share of the tasks, then steals from the other threads' shares until
/// none is left. A panicking task ends its claim, whose tasks all count as completed (the
/// caller re-raises the panic), so nobody waits forever.
///
/// Thread `me` owns tasks `me * n / threads..`, as pthreadpool splits a range: consecutive
/// operators split the same way then hand each thread the same part of the data, which stays
/// in that core's L2 (with first-come claiming the halves of an L2-sized tensor swapped cores
/// at random, which cost more than the split saved).
fn run_share(s: &Shared, job: &JobRef, me: usize) {
    let mut ran = 0;
    let mut run = |tasks: std::ops::Range<usize>| {
        ran += tasks.len();
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tasks.for_each(|i| job.call(i)))).is_err() {
            s.panicked.store(true, Ordering::Release);
        }
    };
    let own = &s.shares[me];
    loop {
        let c = own.grant();
        if c == 0 {
            break;
        }
        let first = own.front.fetch_add(c, Ordering::Relaxed);
        run(first..first + c);
    }
    let t = s.shares.len();
    for k in 1..t {
        let other = &s.shares[(me + k) % t];
        loop {
            let c = other.grant();
            if c == 0 {
                break;
            }
            let end = other.back.fetch_sub(c, Ordering::Relaxed);
            run(end - c..end);
        }
    }
    s.completed.fetch_add(ran, Ordering::Release);
}

fn worker(s: Arc<Shared>, w: usize) {
    // The epoch at creation, not at thread start: a dispatch may come before this thread runs.
    let mut seen = 0u64;
    loop {
        // Wait for a new epoch: spin, then park.
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            if s.epoch.load(Ordering::Acquire) != seen {
                break;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) && start.elapsed() >= s.spin {
                s.sleeping[w].store(true, Ordering::SeqCst);
                // Re-check after announcing sleep: a dispatcher that bumped the epoch before
                // reading `sleeping` would not unpark us.
                if s.epoch.load(Ordering::SeqCst) == seen && !s.shutdown.load(Ordering::SeqCst) {
                    std::thread::park_timeout(Duration::from_millis(50));
                }
                s.sleeping[w].store(false, Ordering::SeqCst);
            } else if spins > IDLE_PURE_SPINS {
                // Past a short pure spin, offer the core to anything else runnable on it
                // (another process's pool, or the caller when both share a core): a pure
                // spin held it for the whole spin time, and two fuzz shards on two cores
                // then ran 8x slower. With nothing else runnable this returns at once.
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        // Epoch and job are read together: a late worker either joins the dispatch in
        // progress (whose shares were set before it was published) or finds it finished
        // (job taken), never a mix of two.
        let (epoch, job) = {
            let slot = s.slot.lock().unwrap_or_else(|e| e.into_inner());
            (slot.epoch, slot.job.clone())
        };
        seen = epoch;
        if let Some(job) = job {
            run_share(&s, &job, w + 1);
            drop(job);
        }
        s.done.fetch_add(1, Ordering::Release);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for h in &self.workers {
            h.thread().unpark();
        }
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

/// XNNPACK's tile under `PerOutputTasks`; pthreadpool runs inline only when there is a single
/// tile, so any reduction with more than one output wakes the pool.
fn per_output_tile(items: usize, granule: usize, per_output: bool) -> usize {
    if per_output {
        granule
    } else {
        items.div_ceil(64).div_ceil(granule) * granule
    }
}

/// How an operator's work is cut into tasks under the pool's policy.
pub struct Split {
    /// Task boundaries in work items: `bounds[t]..bounds[t + 1]`.
    pub bounds: Vec<usize>,
}

impl Pool {
    /// Whether [`Pool::split`] gives a single task for this work, which the caller then runs
    /// inline: checked first so that small operators allocate no split at all.
    pub fn runs_inline(&self, items: usize, bytes: usize, granule: usize, per_output: bool) -> bool {
        let granule = granule.max(1);
        if items == 0 || self.threads() == 1 {
            return true;
        }
        match self.policy {
            ThreadPolicy::PerOutputTasks => items <= per_output_tile(items, granule, per_output),
            ThreadPolicy::CostModel => bytes < INLINE_BYTES || items <= granule,
        }
    }

    /// Splits `items` work items. `bytes` is the operator's memory traffic; `granule` the
    /// smallest useful task in items (XNNPACK's tile); `per_output` marks a reduction whose
    /// items are its outputs.
    pub fn split(&self, items: usize, bytes: usize, granule: usize, per_output: bool) -> Split {
        let granule = granule.max(1);
        if self.runs_inline(items, bytes, granule, per_output) {
            return Split { bounds: vec![0, items] };
        }
        match self.policy {
            ThreadPolicy::PerOutputTasks if per_output => {
                // pthreadpool's dynamic dispatch, which XNNPACK's reductions use
                // (`parallelize_3d_tile_1d_dynamic`, `get_chunk`): each thread owns an equal
                // share of the tiles and takes it in halves of what is left, each half one
                // task call. One task per tile instead cost a claim and a call per output,
                // which pthreadpool does not pay (a 128-output mean at 2 threads: 2.8 us
                // against XNNPACK's 0.85).
                let (tiles, t) = (items.div_ceil(granule), self.threads());
                let mut b = Vec::with_capacity(2 * t * (usize::BITS - tiles.leading_zeros()) as usize + 1);
                for k in 0..t {
                    let (mut a, end) = (k * tiles / t, (k + 1) * tiles / t);
                    while a < end {
                        b.push(a * granule);
                        a += ((end - a) / 2).max(1);
                    }
                }
                b.push(items);
                Split { bounds: b }
            }
            ThreadPolicy::PerOutputTasks => {
                let tile = per_output_tile(items, granule, per_output);
                let n = items.div_ceil(tile);
                let mut b: Vec<usize> = (0..n).map(|i| i * tile).collect();
                b.push(items);
                Split { bounds: b }
            }
            ThreadPolicy::CostModel => {
                let t = self.threads().min(items.div_ceil(granule));
                let per = items.div_ceil(t).div_ceil(granule) * granule;
                let mut b: Vec<usize> = (0..t).map(|i| (i * per).min(items)).collect();
                b.push(items);
                b.dedup();
                Split { bounds: b }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_task_runs_once_at_every_thread_count() {
        for (threads, policy) in [
            (1, ThreadPolicy::CostModel),
            (2, ThreadPolicy::CostModel),
            (3, ThreadPolicy::PerOutputTasks),
            (4, ThreadPolicy::CostModel),
        ] {
            let pool = Pool::new(threads, policy).unwrap();
            for round in 0..60 {
                // Fewer tasks than threads, uneven shares, many tasks per thread.
                let n = if round < 40 { 1 + round % 17 } else { [63, 64, 65, 128, 1000][round % 5] };
                let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
                pool.run_tasks(n, &|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "threads {threads} round {round}");
            }
        }
    }

    #[test]
    fn parked_workers_wake_up() {
        let pool = Pool::new(2, ThreadPolicy::PerOutputTasks).unwrap();
        std::thread::sleep(SPIN_BEFORE_PARK * 3);
        let sum = AtomicUsize::new(0);
        pool.run_tasks(8, &|i| {
            sum.fetch_add(i, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 28);
    }

    #[test]
    fn per_output_reductions_split_each_threads_share_in_halves() {
        // pthreadpool's dynamic dispatch: 128 outputs on 2 threads are two shares of 64, each
        // taken as 32, 16, 8, 4, 2, 1, 1; in tiles of 4 outputs the last tile is short.
        let pool = Pool::new(2, ThreadPolicy::PerOutputTasks).unwrap();
        let want: Vec<usize> = vec![0, 32, 48, 56, 60, 62, 63, 64, 96, 112, 120, 124, 126, 127, 128];
        assert_eq!(pool.split(128, 512, 1, true).bounds, want);
        assert_eq!(pool.split(10, 40, 4, true).bounds, vec![0, 4, 8, 10]);
        // A single tile runs inline; other operators keep one task per tile.
        assert_eq!(pool.split(4, 16, 4, true).bounds, vec![0, 4]);
        assert_eq!(pool.split(128, 512, 1, false).bounds, (0..=64).map(|i| 2 * i).collect::<Vec<_>>());
    }

    #[test]
    fn a_panicking_task_is_reraised_after_every_other_task_ran() {
        let pool = Pool::new(2, ThreadPolicy::PerOutputTasks).unwrap();
        let hits: Vec<AtomicU32> = (0..100).map(|_| AtomicU32::new(0)).collect();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run_tasks(100, &|i| {
                assert_ne!(i, 37, "task 37 fails");
                hits[i].fetch_add(1, Ordering::Relaxed);
            })
        }));
        assert!(r.is_err());
        // Task 37 ended its claim; tasks of other claims all ran once, and the pool still works.
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) <= 1));
        assert!(hits.iter().filter(|h| h.load(Ordering::Relaxed) == 1).count() >= 50);
        let n = AtomicUsize::new(0);
        pool.run_tasks(10, &|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 10);
    }

    #[test]
    fn splits_cover_all_items() {
        for policy in [ThreadPolicy::CostModel, ThreadPolicy::PerOutputTasks] {
            let pool = Pool::new(2, policy).unwrap();
            for items in [1, 2, 3, 100, 1001] {
                let s = pool.split(items, 1 << 20, 4, true);
                assert_eq!(s.bounds[0], 0);
                assert_eq!(*s.bounds.last().unwrap(), items);
                assert!(s.bounds.windows(2).all(|w| w[0] <= w[1]));
            }
        }
    }
}
