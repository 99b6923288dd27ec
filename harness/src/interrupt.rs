//! SIGINT and SIGTERM as flags a long job polls, so that it can stop cleanly: finish the
//! case in hand, keep what it found on disk, print its summary and how to repeat it, and
//! exit with the shell's status for the signal (130 or 143). A second signal of either
//! kind ends the process at once with that status.
//!
//! `signal-hook` installs the handlers: its `flag` module is a safe API over `sigaction`
//! whose handler only stores to an atomic (async-signal-safe), which is all a job needs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The two signals, as seen by a job.
#[derive(Clone)]
pub struct Interrupt {
    /// Set by either signal: the job should stop.
    pub stop: Arc<AtomicBool>,
    term: Arc<AtomicBool>,
}

impl Interrupt {
    /// Installs the handlers. Fails only if the OS refuses them (the job then runs without).
    pub fn install() -> std::io::Result<Interrupt> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        use signal_hook::flag;
        let (stop, term) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        // Registered first, so they see the flag as the previous signal left it: a second
        // signal exits at once.
        flag::register_conditional_shutdown(SIGINT, 130, stop.clone())?;
        flag::register_conditional_shutdown(SIGTERM, 143, stop.clone())?;
        flag::register(SIGTERM, term.clone())?;
        flag::register(SIGINT, stop.clone())?;
        flag::register(SIGTERM, stop.clone())?;
        Ok(Interrupt { stop, term })
    }

    /// Whether a signal came.
    pub fn fired(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The signal's name and the exit status that reports it (128 + its number).
    pub fn which(&self) -> (&'static str, u8) {
        if self.term.load(Ordering::Acquire) {
            ("SIGTERM", 143)
        } else {
            ("SIGINT", 130)
        }
    }
}
