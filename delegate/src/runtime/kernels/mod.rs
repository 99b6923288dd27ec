//! Delegate kernels (threaded, SIMD through [`super::simd`]) and the portable kernels for ops
//! left outside (scalar, single-threaded, in `portable`).

pub mod conv;
pub mod convert;
pub mod elementwise;
pub mod fused;
pub mod gap;
pub mod linear;
pub mod mean;
pub mod norm;
pub mod portable;
pub mod qs8;
pub mod transpose;

use super::pool::{Parts, Pool};
use super::simd::Isa;

/// What every delegate kernel runs with: the instruction set and the program's pool.
#[derive(Clone, Copy)]
pub struct Ctx<'p> {
    pub isa: Isa,
    pub pool: &'p Pool,
}

impl Ctx<'_> {
    /// Splits `out` into tasks under the pool's policy and runs `f(start, chunk)` on each,
    /// where `chunk = out[start..start + chunk.len()]`. `bytes` is the operator's memory
    /// traffic, `granule` its smallest task in elements of `out`, `per_output` marks a reduction.
    pub fn par_chunks<T: Send>(
        &self,
        out: &mut [T],
        bytes: usize,
        granule: usize,
        per_output: bool,
        f: impl Fn(usize, &mut [T]) + Sync,
    ) {
        if self.pool.runs_inline(out.len(), bytes, granule, per_output) {
            f(0, out);
            return;
        }
        let split = self.pool.split(out.len(), bytes, granule, per_output);
        let parts = Parts::new(out, split.bounds);
        #[cfg(feature = "mutants")]
        let skip = if crate::mutants::is_active(crate::mutants::Mutant::ThreadSplitLastChunk) {
            // Seeded bug: the last chunk of a split is never computed.
            parts.len() - 1
        } else {
            usize::MAX
        };
        #[cfg(not(feature = "mutants"))]
        let skip = usize::MAX;
        self.pool.run_tasks(parts.len(), &|t| {
            if t == skip {
                return;
            }
            if let Some(chunk) = parts.take(t) {
                f(parts.start(t), chunk);
            }
        });
    }
}

/// Row-major strides of a shape.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

use half::{bf16, f16};

/// A typed read-only buffer.
#[derive(Clone, Copy, Debug)]
pub enum View<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    Bf16(&'a [bf16]),
    I8(&'a [i8]),
    I32(&'a [i32]),
}

/// A typed writable buffer.
#[derive(Debug)]
pub enum ViewMut<'a> {
    F32(&'a mut [f32]),
    F16(&'a mut [f16]),
    Bf16(&'a mut [bf16]),
    I8(&'a mut [i8]),
    I32(&'a mut [i32]),
}

impl View<'_> {
    pub fn len(&self) -> usize {
        match self {
            View::F32(v) => v.len(),
            View::F16(v) => v.len(),
            View::Bf16(v) => v.len(),
            View::I8(v) => v.len(),
            View::I32(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn type_name(&self) -> &'static str {
        match self {
            View::F32(_) => "fp32",
            View::F16(_) => "fp16",
            View::Bf16(_) => "bf16",
            View::I8(_) => "int8",
            View::I32(_) => "int32",
        }
    }
}

impl ViewMut<'_> {
    pub fn len(&self) -> usize {
        match self {
            ViewMut::F32(v) => v.len(),
            ViewMut::F16(v) => v.len(),
            ViewMut::Bf16(v) => v.len(),
            ViewMut::I8(v) => v.len(),
            ViewMut::I32(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn type_name(&self) -> &'static str {
        match self {
            ViewMut::F32(_) => "fp32",
            ViewMut::F16(_) => "fp16",
            ViewMut::Bf16(_) => "bf16",
            ViewMut::I8(_) => "int8",
            ViewMut::I32(_) => "int32",
        }
    }
    /// Shortens the view to its first `n` elements (buffers are sized for upper bounds).
    pub fn prefix(self, n: usize) -> Self {
        match self {
            ViewMut::F32(v) => ViewMut::F32(&mut v[..n]),
            ViewMut::F16(v) => ViewMut::F16(&mut v[..n]),
            ViewMut::Bf16(v) => ViewMut::Bf16(&mut v[..n]),
            ViewMut::I8(v) => ViewMut::I8(&mut v[..n]),
            ViewMut::I32(v) => ViewMut::I32(&mut v[..n]),
        }
    }
}

impl<'a> View<'a> {
    pub fn prefix(self, n: usize) -> Self {
        match self {
            View::F32(v) => View::F32(&v[..n]),
            View::F16(v) => View::F16(&v[..n]),
            View::Bf16(v) => View::Bf16(&v[..n]),
            View::I8(v) => View::I8(&v[..n]),
            View::I32(v) => View::I32(&v[..n]),
        }
    }
}

/// Reusable f32 work buffers (fp16/bf16 kernels compute through f32).
#[derive(Default, Debug)]
pub struct Scratch {
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub c: Vec<f32>,
    /// The widened operands of a fused fp16/bf16 chain, one per operand.
    pub wide: Vec<Vec<f32>>,
}

thread_local! {
    /// This thread's work tile for [`with_f32_tile`], kept between calls.
    static TILE: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Runs `f` on a work tile of `n` f32s whose contents are unspecified: `f` writes every
/// element before it reads it. The tile is the calling thread's, reused across calls (a
/// fresh zeroed tile per call, 16 to 80 KiB for an fp16 chain, was 28% of a 1x128x128
/// fp16 RMSNorm's instructions); a nested call gets a fresh one. Debug builds fill it with
/// NaN first, so a kernel that reads before writing fails the tests instead of reading the
/// last call's values.
pub fn with_f32_tile<R>(n: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    let mut v = TILE.take();
    if v.len() < n {
        v.resize(n, 0.0);
    }
    if cfg!(debug_assertions) {
        v[..n].fill(f32::NAN);
    }
    let r = f(&mut v[..n]);
    TILE.set(v);
    r
}

/// `v` as `n` elements for a kernel that overwrites every one of them: capacity and stale
/// contents are reused, only growth is zero-filled (no memset per call).
pub fn sized_for_overwrite(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

/// Per-tensor quantization of an int8 value (`real = (q - zero_point) * scale`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quant {
    pub scale: f32,
    pub zero_point: i32,
}

/// Copies a view into a same-typed view of the same length (reshape).
pub fn copy(x: View, out: ViewMut) -> Result<(), String> {
    if x.len() != out.len() {
        return Err(format!("copy of {} elements into {}", x.len(), out.len()));
    }
    match (x, out) {
        (View::F32(x), ViewMut::F32(o)) => o.copy_from_slice(x),
        (View::F16(x), ViewMut::F16(o)) => o.copy_from_slice(x),
        (View::Bf16(x), ViewMut::Bf16(o)) => o.copy_from_slice(x),
        (View::I8(x), ViewMut::I8(o)) => o.copy_from_slice(x),
        (View::I32(x), ViewMut::I32(o)) => o.copy_from_slice(x),
        (x, o) => return Err(format!("copy from {} to {}", x.type_name(), o.type_name())),
    }
    Ok(())
}
