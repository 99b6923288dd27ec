//! The case in flight, kept on disk while the fuzz job checks it: real XNNPACK is C and trusts
//! its caller, and a segfault or an abort inside it kills the process with no unwinding, so no
//! panic handler can save the case. Each worker overwrites one small file with the case it is
//! about to check (`<out>/.in-flight/<pid>-<worker>.json`: a page-cache write, no fsync: a
//! process crash keeps it, only a machine crash could lose it) and removes it when it stops.
//! The next fuzz run ([`collect`]) finds the files of processes that are gone, saves each case
//! as `<out>/crash-<hash>.json` (a regression case `replay` reruns) and reports it as a
//! `crash/signal` failure.

use crate::case::Case;
use anyhow::{Context, Result};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Environment variable for tests: abort (as a crash in the library would) right after
/// recording case number N as in flight.
pub const TEST_ABORT_ENV: &str = "HARNESS_TEST_ABORT_AT_CASE";

/// The folder of in-flight files under a regression folder.
fn folder(out: &Path) -> PathBuf {
    out.join(".in-flight")
}

/// One worker's in-flight file.
pub struct InFlight {
    file: File,
    path: PathBuf,
    /// Case number to abort at (tests, [`TEST_ABORT_ENV`]).
    abort_at: Option<u64>,
    buf: String,
    /// Bytes in the file now.
    len: usize,
}

impl InFlight {
    /// Creates `<out>/.in-flight/<pid>-<worker>.json`.
    pub fn open(out: &Path, worker: usize) -> Result<InFlight> {
        let dir = folder(out);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{}-{worker}.json", std::process::id()));
        let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let abort_at = std::env::var(TEST_ABORT_ENV).ok().and_then(|v| v.parse().ok());
        Ok(InFlight { file, path, abort_at, buf: String::new(), len: 0 })
    }

    /// Records case `index` of campaign `seed` as the one being checked (overwriting the last).
    pub fn record(&mut self, case: &Case, index: u64, seed: u64) {
        use std::fmt::Write as _;
        use std::os::unix::fs::FileExt;
        self.buf.clear();
        let _ = writeln!(self.buf, "// harness fuzz --seed {seed} (case #{index}), pid {}", std::process::id());
        self.buf.push_str(&case.to_json());
        self.buf.push('\n');
        // One write at offset 0, the one system call per case (no truncate), padded with
        // spaces over the tail of a longer case before: `collect` reads the first line and the
        // line that starts with `{`, and a line of spaces is neither.
        let pad = self.len.saturating_sub(self.buf.len());
        self.buf.extend(std::iter::repeat_n(' ', pad));
        // (Even a failed write may have written part of it.)
        let _ = self.file.write_all_at(self.buf.as_bytes(), 0);
        self.len = self.buf.len();
        if self.abort_at == Some(index) {
            let _ = self.file.flush();
            std::process::abort();
        }
    }
}

impl Drop for InFlight {
    /// The worker stopped normally: nothing is in flight.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A case that was in flight when its process died.
#[derive(Clone, Debug)]
pub struct Crashed {
    pub case: Case,
    /// The in-flight file's first line (campaign, case number, process).
    pub origin: String,
    /// Where the case is saved now.
    pub saved: PathBuf,
}

/// Whether process `pid` is alive (Linux: `/proc/<pid>` exists).
fn alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Finds the in-flight files under `out` that dead processes left, saves each case as
/// `<out>/crash-<hash>.json` and removes the file. Files of live processes (another fuzz job
/// on the same folder) are left alone.
pub fn collect(out: &Path) -> Vec<Crashed> {
    let Ok(entries) = std::fs::read_dir(folder(out)) else { return vec![] };
    let mut found = vec![];
    for e in entries.flatten() {
        let path = e.path();
        let pid =
            path.file_stem().and_then(|s| s.to_str()).and_then(|s| s.split('-').next()).and_then(|p| p.parse().ok());
        let Some(pid) = pid else { continue };
        if pid == std::process::id() || alive(pid) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let origin = text.lines().next().unwrap_or("").trim_start_matches("// ").to_string();
        let case = text.lines().find(|l| l.starts_with('{')).and_then(|l| Case::from_json(l).ok());
        if let Some(case) = case {
            let saved = out.join(format!("crash-{}.json", case.hash()));
            let body = format!(
                "// crash/signal: the process died while checking this case (`{origin}`)\n{}\n",
                case.to_json()
            );
            if std::fs::write(&saved, body).is_ok() {
                found.push(Crashed { case, origin, saved });
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    found
}
