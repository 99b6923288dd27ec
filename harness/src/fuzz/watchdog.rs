//! The hang watchdog of the fuzz job: a case still running after `--case-timeout` is saved
//! and ends the process with status 3.

use super::campaign::{save_regression, Campaign};
use crate::case::Case;
use crate::oracle::{self, CaseReport};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Watches the case in progress from a second thread. A hang (a deadlocked pool, a kernel
/// looping forever) cannot be caught like a panic; without this a nightly run would be
/// killed by CI's job timeout with the case lost. `on_hang` gets the case, its index and how
/// long it has run, once.
pub struct Watchdog {
    current: Arc<Mutex<Option<(Case, u64, Instant)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    pub fn start(timeout: Duration, on_hang: impl Fn(&Case, u64, Duration) + Send + 'static) -> Watchdog {
        let current: Arc<Mutex<Option<(Case, u64, Instant)>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (cur, st) = (current.clone(), stop.clone());
        let tick = (timeout / 4).clamp(Duration::from_millis(1), Duration::from_secs(1));
        let thread = std::thread::Builder::new()
            .name("fuzz-watchdog".into())
            .spawn(move || {
                while !st.load(Ordering::Acquire) {
                    std::thread::park_timeout(tick);
                    let hung = {
                        let mut c = cur.lock().unwrap_or_else(|e| e.into_inner());
                        match c.as_ref() {
                            Some((_, _, t0)) if t0.elapsed() >= timeout => c.take(),
                            _ => None,
                        }
                    };
                    if let Some((case, index, t0)) = hung {
                        on_hang(&case, index, t0.elapsed());
                    }
                }
            })
            .ok();
        Watchdog { current, stop, thread }
    }

    /// `case` (number `index`) starts now.
    pub fn watch(&self, case: &Case, index: u64) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some((case.clone(), index, Instant::now()));
    }

    /// No case is running.
    pub fn clear(&self) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// What the fuzz job does with a hung case: save it as `hang-<hash>.json` (not minimized:
/// every candidate could hang too), say how to replay it, and exit with status 3.
pub(super) fn hang_handler(c: &Campaign) -> impl Fn(&Case, u64, Duration) + Send + 'static {
    let (dir, seed) = (c.out_dir.clone(), c.seed);
    move |case, index, ran| {
        let label = "hang/timeout";
        eprintln!("\nHANG case #{index} still running after {ran:.1?}: {}", case.to_json());
        let mut report = CaseReport::default();
        report.checks.push(oracle::Check {
            oracle: oracle::OracleKind::Panic,
            scope: "case".into(),
            verdict: oracle::Verdict::fail("timeout", format!("still running after {ran:.1?}")),
            engine: None,
        });
        if let Some(dir) = &dir {
            match save_regression(dir, case, label, &format!("harness fuzz --seed {seed} (case #{index})"), &report) {
                Ok(p) => eprintln!(
                    "  saved to {}; replay with: cargo run --release -p harness -- replay {}",
                    p.display(),
                    p.display()
                ),
                Err(e) => eprintln!("error: could not save the hung case: {e:#}"),
            }
        }
        std::process::exit(3);
    }
}
