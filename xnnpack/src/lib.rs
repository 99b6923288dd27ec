//! Real XNNPACK as a third engine: the library the change targets, run on our payloads.
//!
//! The `executorch==1.5.1` wheel ships `libexecutorch_backend_xnnpack.so`, which exports
//! XNNPACK's whole C API, and `libexecutorch_threadpool.so` (pthreadpool). This crate loads both
//! at run time (no link-time dependency: everything builds and tests without them), checks the
//! enum values it uses against the loaded build ([`probe`]), and compiles the graphs our loader
//! returns to XNNPACK subgraphs the way ExecuTorch's `XNNCompiler.cpp` does ([`compile`]);
//! [`program`] runs a whole lowered program with its delegate segments on XNNPACK.
//!
//! Where the libraries are: `XNNPACK_LIB_DIR` if set, else
//! `target/xnnpack/executorch-1.5.1/executorch/lib` under the workspace, which
//! `scripts/fetch-xnnpack.sh` (`just xnnpack`) fills.
//!
//! `unsafe` lives only in the `ffi` module.

#![deny(unsafe_code)]

pub mod compile;
#[allow(unsafe_code)]
mod ffi;
pub mod probe;
pub mod program;

pub use compile::{Refusal, Segment, Stage};
pub use ffi::{Buffer, Datatype, RawStatus, EXTRA_BYTES};
pub use probe::{Codes, ProbeError};

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::OnceLock;

/// Overrides where the libraries are looked for.
pub const LIB_DIR_ENV: &str = "XNNPACK_LIB_DIR";
/// The library with XNNPACK's C API.
pub const XNNPACK_FILE: &str = "libexecutorch_backend_xnnpack.so";
/// pthreadpool.
pub const THREADPOOL_FILE: &str = "libexecutorch_threadpool.so";
/// Where `scripts/fetch-xnnpack.sh` unpacks the libraries, under the workspace root.
pub const FETCHED_DIR: &str = "target/xnnpack/executorch-1.5.1/executorch/lib";
/// What makes tests that need the library fail (not skip) when it is absent.
pub const REQUIRE_ENV: &str = "REQUIRE_XNNPACK";

/// Why the library cannot be used.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LoadError {
    #[error("{} not found in {} ({how}); fetch it with scripts/fetch-xnnpack.sh (or `just xnnpack`)", file, dir.display())]
    NotFound { file: &'static str, dir: PathBuf, how: String },
    #[error("cannot load {}: {message}", path.display())]
    Open { path: PathBuf, message: String },
    #[error("{} lacks symbol {symbol}: {message}", file.display())]
    Symbol { file: PathBuf, symbol: &'static str, message: String },
    #[error("xnn_initialize failed with status {status} ({})", status_name(*status))]
    Initialize { status: RawStatus },
    #[error("this XNNPACK build does not match the declarations: {0}; refusing to run it")]
    Probe(#[from] ProbeError),
}

/// The name of an `enum xnn_status` value.
pub fn status_name(status: RawStatus) -> &'static str {
    match status {
        0 => "success",
        1 => "uninitialized",
        2 => "invalid_parameter",
        3 => "invalid_state",
        4 => "unsupported_parameter",
        5 => "unsupported_hardware",
        6 => "out_of_memory",
        7 => "reallocation_required",
        8 => "deprecated",
        _ => "unknown status",
    }
}

/// The workspace root this crate was built in (`CARGO_MANIFEST_DIR/..`).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Where the libraries are looked for, and why there: `XNNPACK_LIB_DIR` when set, else the
/// fetch step's folder under the workspace this crate was built in or, when that workspace
/// is gone (a copied binary), under the current directory.
pub fn lib_dir() -> (PathBuf, String) {
    if let Some(d) = std::env::var_os(LIB_DIR_ENV).filter(|d| !d.is_empty()) {
        return (PathBuf::from(d), format!("{LIB_DIR_ENV} is set"));
    }
    let built = workspace_root().join(FETCHED_DIR);
    if built.is_dir() || !Path::new(FETCHED_DIR).is_dir() {
        return (built, format!("the fetch step's folder; {LIB_DIR_ENV} is not set"));
    }
    (
        PathBuf::from(FETCHED_DIR),
        format!("the fetch step's folder under the current directory; {LIB_DIR_ENV} is not set"),
    )
}

/// The loaded library, its checked enum values and the folder it came from.
pub struct Xnnpack {
    api: &'static ffi::Api,
    codes: Codes,
    dir: PathBuf,
}

impl std::fmt::Debug for Xnnpack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Xnnpack").field("dir", &self.dir).field("codes", &self.codes).finish()
    }
}

impl Xnnpack {
    /// Loads the two libraries from `dir`, resolves every symbol, initializes XNNPACK, and runs
    /// the [`probe`] with `codes` (refusing the library when a computed value disagrees).
    /// Each call loads the libraries (the operating system shares one copy) and keeps them for
    /// the rest of the process: XNNPACK objects may be alive in other threads at any time.
    pub fn open(dir: &Path, how: &str, codes: Codes) -> Result<Xnnpack, LoadError> {
        let path = |file: &'static str| {
            let p = dir.join(file);
            if p.is_file() {
                Ok(p)
            } else {
                Err(LoadError::NotFound { file, dir: dir.to_path_buf(), how: how.to_string() })
            }
        };
        let (x, t) = (path(XNNPACK_FILE)?, path(THREADPOOL_FILE)?);
        let api: &'static ffi::Api = Box::leak(Box::new(ffi::Api::load(&x, &t)?));
        let lib = Xnnpack { api, codes, dir: dir.to_path_buf() };
        probe::check(&lib)?;
        Ok(lib)
    }

    /// The folder the libraries came from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The enum values in use (checked by the probe).
    pub fn codes(&self) -> &Codes {
        &self.codes
    }

    /// A pthreadpool of `threads` (the caller included), for [`compile::compile`].
    pub fn pool(&self, threads: usize) -> Result<ThreadPool, Refusal> {
        ffi::ThreadPool::new(self.api, threads)
            .map(ThreadPool)
            .ok_or_else(|| pool_refusal(format!("pthreadpool_create({threads}) failed")))
    }

    /// As [`Xnnpack::pool`], its workers at the lowest scheduling priority: for a pool with more
    /// threads than the CPUs it may run on (see `ThreadPool::new_low_priority` in `ffi`).
    pub fn pool_low_priority(&self, threads: usize) -> Result<ThreadPool, Refusal> {
        ffi::ThreadPool::new_low_priority(self.api, threads)
            .map(ThreadPool)
            .ok_or_else(|| pool_refusal(format!("pthreadpool_create({threads}) at low priority failed")))
    }

    pub(crate) fn api(&self) -> &'static ffi::Api {
        self.api
    }
}

/// A pthreadpool shared by the runtimes created on it (one thread uses them all).
#[derive(Clone)]
pub struct ThreadPool(Rc<ffi::ThreadPool>);

impl ThreadPool {
    /// Threads of the pool, the caller included.
    pub fn threads(&self) -> usize {
        self.0.threads()
    }
}

static LIBRARY: OnceLock<Result<Xnnpack, LoadError>> = OnceLock::new();

/// The process's library, loaded and probed on first use from [`lib_dir`].
pub fn library() -> Result<&'static Xnnpack, &'static LoadError> {
    LIBRARY
        .get_or_init(|| {
            let (dir, how) = lib_dir();
            Xnnpack::open(&dir, &how, Codes::HEADER)
        })
        .as_ref()
}

/// Whether `REQUIRE_XNNPACK=1` is set: tests that need the library then fail when it is absent.
pub fn required() -> bool {
    std::env::var_os(REQUIRE_ENV).is_some_and(|v| v == "1")
}

/// For tests that need the library: the library, or `None` after printing one line saying why
/// the test is skipped. Panics instead when `REQUIRE_XNNPACK=1` (CI fetches the library).
pub fn for_test(test: &str) -> Option<&'static Xnnpack> {
    match library() {
        Ok(l) => Some(l),
        Err(e) if required() => panic!("{REQUIRE_ENV}=1 but real XNNPACK is unavailable: {e}"),
        Err(e) => {
            // Straight to the process's stderr: the test harness captures `eprintln!`.
            use std::io::Write;
            let _ = writeln!(std::io::stderr().lock(), "skipping {test}: real XNNPACK is unavailable: {e}");
            None
        }
    }
}

/// A pool that pthreadpool could not create: refused at create time, with `reason`.
fn pool_refusal(reason: String) -> Refusal {
    Refusal { stage: Stage::Create, node: None, datatype: None, status: None, reason }
}
