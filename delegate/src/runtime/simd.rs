//! The runtime's only `unsafe` code: CPU feature detection with `#[target_feature]` kernels
//! behind safe wrappers, byte-buffer reinterpretation, disjoint mutable chunks for worker
//! threads, and the lifetime erasure the persistent pool needs.
//!
//! Soundness rests on three private invariants, each checked here and nowhere else:
//! - an [`Isa`] other than scalar can only be built by [`Isa::avx2`]/[`Isa::avx512`], which
//!   check the CPU at run time, so holding one proves the `target_feature` calls are legal;
//! - every raw-pointer kernel is called only after its safe wrapper checked (with checked
//!   arithmetic) that every address it touches lies inside the slice;
//! - a [`JobRef`] never outlives the closure it points to ([`scoped_job`] waits for every clone
//!   to be dropped before it returns or unwinds).

use super::kernels::conv::ConvGeom;
use half::{bf16, f16};
use std::marker::PhantomData;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;

#[cfg(feature = "mutants")]
use crate::mutants::{is_active, Mutant};

// ------------------------------------------------------------------------------------------
// Instruction set selection

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Level {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// A detected instruction set. The field is private: a non-scalar `Isa` exists only if the
/// running CPU has the features its kernels are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Isa(Level);

impl Isa {
    /// Plain Rust (auto-vectorized for the build's baseline, SSE2 on x86-64).
    pub const SCALAR: Isa = Isa(Level::Scalar);

    /// AVX2 + FMA + F16C, if the CPU has them.
    pub fn avx2() -> Option<Isa> {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c") {
                return Some(Isa(Level::Avx2));
            }
        }
        None
    }

    /// AVX-512F plus everything [`Isa::avx2`] needs, if the CPU has them.
    pub fn avx512() -> Option<Isa> {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f") && Isa::avx2().is_some() {
                return Some(Isa(Level::Avx512));
            }
        }
        None
    }

    /// The widest available set.
    pub fn best() -> Isa {
        Isa::avx512().or_else(Isa::avx2).unwrap_or(Isa::SCALAR)
    }

    pub fn is_scalar(self) -> bool {
        self.0 == Level::Scalar
    }

    pub fn name(self) -> &'static str {
        match self.0 {
            Level::Scalar => "scalar",
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => "avx512",
        }
    }
}

/// Every available instruction set, scalar first (tests run all of them).
pub fn available_isas() -> Vec<Isa> {
    let mut v = vec![Isa::SCALAR];
    v.extend(Isa::avx2());
    v.extend(Isa::avx512());
    v
}

// ------------------------------------------------------------------------------------------
// Byte buffers viewed as typed slices

/// Element types a buffer may be viewed as: every bit pattern is a valid value and the
/// alignment divides 64.
pub trait Pod: Copy + Send + Sync + Default + 'static + sealed::Sealed {}

mod sealed {
    pub trait Sealed {}
}
macro_rules! pod {
    ($($t:ty),*) => {$( impl sealed::Sealed for $t {} impl Pod for $t {} )*};
}
pod!(f32, i8, u8, i32, u32, u16, f16, bf16);

/// 64 bytes aligned to a cache line: the unit of runtime buffers.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub struct Line(pub [u8; 64]);

impl Default for Line {
    fn default() -> Self {
        Line([0; 64])
    }
}

/// Lines needed for `n` elements of `T`.
pub fn lines_for<T: Pod>(n: usize) -> usize {
    n.saturating_mul(std::mem::size_of::<T>()).div_ceil(64)
}

/// A buffer of lines viewed as `T`s.
pub fn cast<T: Pod>(lines: &[Line]) -> &[T] {
    let n = lines.len() * 64 / std::mem::size_of::<T>();
    // SAFETY: `Line` is 64-aligned and 64 bytes with no padding, so the region is `n * size_of::<T>()`
    // initialized bytes aligned for any `Pod` type (alignment <= 8); every bit pattern is a valid
    // `T` (sealed trait: plain integers and floats, `half` types are `repr(transparent)` u16).
    // The returned slice borrows `lines` immutably for its lifetime.
    unsafe { std::slice::from_raw_parts(lines.as_ptr() as *const T, n) }
}

/// A buffer of lines viewed as mutable `T`s.
pub fn cast_mut<T: Pod>(lines: &mut [Line]) -> &mut [T] {
    let n = lines.len() * 64 / std::mem::size_of::<T>();
    // SAFETY: as in `cast`; the mutable borrow of `lines` is moved into the result, so no alias
    // exists, and any `T` written is a valid byte pattern for `Line`.
    unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr() as *mut T, n) }
}

/// `n` zeros, written by the pool's threads in the halves (thirds...) an elementwise operator
/// over `n` elements is split into, so each part of a large output is zeroed in the L2 of the
/// core that writes it next instead of by the caller alone (a 1 MiB memset was 18% of a
/// 1-thread RMSNorm, and serial at every thread count). Small buffers are a plain zeroed
/// allocation (no split to build).
pub fn zeros_par<T: Pod + Default + Send + Sync>(pool: &super::pool::Pool, n: usize) -> Vec<T> {
    let bytes = n.saturating_mul(2 * std::mem::size_of::<T>());
    if pool.runs_inline(n, bytes, 1024, false) {
        return vec![T::default(); n];
    }
    let mut v: Vec<T> = Vec::with_capacity(n);
    let written = std::sync::atomic::AtomicUsize::new(0);
    {
        let spare = &mut v.spare_capacity_mut()[..n];
        let split = pool.split(n, bytes, 1024, false);
        let parts = Parts::new(spare, split.bounds);
        pool.run_tasks(parts.len(), &|t| {
            if let Some(c) = parts.take(t) {
                c.fill(std::mem::MaybeUninit::new(T::default()));
                written.fetch_add(c.len(), Ordering::AcqRel);
            }
        });
    }
    // Chunks are disjoint and each is written at most once, so `n` written elements means
    // every one of `0..n`. A task that panicked re-raised its panic in `run_tasks` above.
    assert_eq!(written.load(Ordering::Acquire), n, "zeros_par: a chunk was not written");
    // SAFETY: capacity is `n` (`with_capacity`), and all `n` elements were initialized above
    // (checked just now), so the first `n` elements are valid `T`s.
    unsafe { v.set_len(n) };
    v
}

// ------------------------------------------------------------------------------------------
// Disjoint mutable chunks handed to worker threads

/// A mutable slice split at fixed boundaries; each chunk can be taken once, from any thread.
pub struct Parts<'a, T> {
    ptr: *mut T,
    bounds: Vec<usize>,
    claimed: Vec<AtomicBool>,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: `Parts` only hands out disjoint `&'a mut [T]` chunks, each at most once (atomic claim),
// which is what sending `&mut [T]` pieces to other threads requires (`T: Send`).
unsafe impl<T: Send> Send for Parts<'_, T> {}
// SAFETY: as above; shared access only performs atomic claims.
unsafe impl<T: Send> Sync for Parts<'_, T> {}

impl<'a, T> Parts<'a, T> {
    /// Splits `s` at `bounds` (starts with 0, non-decreasing, ends with `s.len()`).
    pub fn new(s: &'a mut [T], bounds: Vec<usize>) -> Parts<'a, T> {
        assert!(
            bounds.first() == Some(&0) && bounds.last() == Some(&s.len()) && bounds.windows(2).all(|w| w[0] <= w[1]),
            "chunk bounds must cover the slice in order"
        );
        let claimed = (0..bounds.len() - 1).map(|_| AtomicBool::new(false)).collect();
        Parts { ptr: s.as_mut_ptr(), bounds, claimed, _borrow: PhantomData }
    }

    /// Chunks of `chunk` elements (the last may be shorter).
    pub fn uniform(s: &'a mut [T], chunk: usize) -> Parts<'a, T> {
        let n = s.len();
        let chunk = chunk.max(1);
        let mut b: Vec<usize> = (0..n.div_ceil(chunk)).map(|i| i * chunk).collect();
        b.push(n);
        if b.len() == 1 {
            b.insert(0, 0);
        }
        Parts::new(s, b)
    }

    pub fn len(&self) -> usize {
        self.claimed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.claimed.is_empty()
    }

    /// Start offset of chunk `i` in the original slice.
    pub fn start(&self, i: usize) -> usize {
        self.bounds[i]
    }

    /// Takes chunk `i`; `None` if out of range or already taken.
    pub fn take(&self, i: usize) -> Option<&'a mut [T]> {
        let c = self.claimed.get(i)?;
        if c.swap(true, Ordering::AcqRel) {
            return None;
        }
        let (s, e) = (self.bounds[i], self.bounds[i + 1]);
        // SAFETY: `new` checked 0 = b0 <= b1 <= ... <= len, so chunk i is inside the slice and
        // disjoint from every other chunk; the atomic swap guarantees chunk i is handed out once.
        // The original `&'a mut` borrow is held by `self` (PhantomData) for `'a`.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.add(s), e - s) })
    }
}

// ------------------------------------------------------------------------------------------
// Jobs shared with persistent worker threads

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

// ------------------------------------------------------------------------------------------
// Row sums and column sums (the mean kernels)

/// A set of equal-length rows: `n[0] x n[1] x n[2]` rows of `len` contiguous elements starting
/// at `base + a*st[0] + b*st[1] + c*st[2]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    pub base: usize,
    pub n: [usize; 3],
    pub st: [usize; 3],
    pub len: usize,
}

impl Rows {
    pub fn count(&self) -> usize {
        self.n.iter().product()
    }

    /// One past the last element touched, or `None` on overflow. 0 rows touch nothing.
    fn end(&self) -> Option<usize> {
        if self.count() == 0 || self.len == 0 {
            return Some(0);
        }
        let mut last = self.base;
        for k in 0..3 {
            last = last.checked_add((self.n[k] - 1).checked_mul(self.st[k])?)?;
        }
        last.checked_add(self.len)
    }

    fn check(&self, slice_len: usize) {
        assert!(self.end().is_some_and(|e| e <= slice_len), "rows {self:?} exceed a buffer of {slice_len}");
    }

    #[inline(always)]
    fn for_each(&self, mut f: impl FnMut(usize)) {
        for a in 0..self.n[0] {
            for b in 0..self.n[1] {
                for c in 0..self.n[2] {
                    f(self.base + a * self.st[0] + b * self.st[1] + c * self.st[2]);
                }
            }
        }
    }
}

#[cfg(feature = "mutants")]
fn mut_drop_tail() -> bool {
    is_active(Mutant::DropSimdTail)
}
#[cfg(not(feature = "mutants"))]
#[inline(always)]
fn mut_drop_tail() -> bool {
    false
}

#[cfg(feature = "mutants")]
fn mut_nan(isa: Isa, v: f32) -> f32 {
    if !isa.is_scalar() && is_active(Mutant::SimdNanDropped) && v.is_nan() {
        0.0
    } else {
        v
    }
}
#[cfg(not(feature = "mutants"))]
#[inline(always)]
fn mut_nan(_isa: Isa, v: f32) -> f32 {
    v
}

/// Sum of every element of every row (f32 accumulation, order depends on `isa`).
pub fn sum_rows_f32(isa: Isa, x: &[f32], rows: &Rows) -> f32 {
    rows.check(x.len());
    let s = match isa.0 {
        Level::Scalar => sum_rows_portable(x, rows),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa(Avx2)` exists only after detection; `rows.check` bounds every access.
        Level::Avx2 => unsafe { x86::sum_rows_avx2(x.as_ptr(), rows, mut_drop_tail()) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above for AVX-512F.
        Level::Avx512 => unsafe { x86::sum_rows_avx512(x.as_ptr(), rows, mut_drop_tail()) },
    };
    mut_nan(isa, s)
}

fn sum_rows_portable(x: &[f32], rows: &Rows) -> f32 {
    // 32 independent accumulators: the compiler vectorizes the inner loop without reassociating.
    let mut acc = [0f32; 32];
    let mut tail = 0f32;
    rows.for_each(|off| {
        let row = &x[off..off + rows.len];
        let mut it = row.chunks_exact(32);
        for c in &mut it {
            for j in 0..32 {
                acc[j] += c[j];
            }
        }
        for &v in it.remainder() {
            tail += v;
        }
    });
    let mut s = tail;
    for a in acc {
        s += a;
    }
    s
}

/// `out[r] = scale * sum(x[base + r*len .. base + (r+1)*len])`: consecutive rows, one call
/// (no per-row dispatch; short rows are where per-call overhead would dominate).
pub fn row_sums_f32(isa: Isa, x: &[f32], base: usize, len: usize, scale: f32, out: &mut [f32]) {
    let rows = Rows { base, n: [out.len(), 1, 1], st: [len, 0, 0], len };
    rows.check(x.len());
    if len == 0 {
        out.fill(0.0);
        return;
    }
    match isa.0 {
        Level::Scalar => {
            for (r, o) in out.iter_mut().enumerate() {
                let one = Rows { base: base + r * len, n: [1, 1, 1], st: [0, 0, 0], len };
                *o = sum_rows_portable(x, &one) * scale;
            }
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: detection proven by `Isa`; `rows.check` bounds every row; writes stay in `out`.
        Level::Avx2 => unsafe { x86::row_sums_avx2(x.as_ptr(), base, len, scale, out, mut_drop_tail()) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above for AVX-512F.
        Level::Avx512 => unsafe { x86::row_sums_avx512(x.as_ptr(), base, len, scale, out, mut_drop_tail()) },
    }
    #[cfg(feature = "mutants")]
    for v in out.iter_mut() {
        *v = mut_nan(isa, *v);
    }
}

/// `out[c] = scale * sum over rows of row[c]` for `c < rows.len` (f32 accumulation).
pub fn col_sums_f32(isa: Isa, x: &[f32], rows: &Rows, scale: f32, out: &mut [f32]) {
    rows.check(x.len());
    assert_eq!(out.len(), rows.len, "column-sum output length");
    match isa.0 {
        Level::Scalar => col_sums_portable(x, rows, scale, out),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: detection proven by `Isa`; `rows.check` bounds reads, `out.len() == rows.len` bounds writes.
        Level::Avx2 => unsafe { x86::col_sums_avx2(x.as_ptr(), rows, scale, out.as_mut_ptr(), mut_drop_tail()) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above for AVX-512F.
        Level::Avx512 => unsafe { x86::col_sums_avx512(x.as_ptr(), rows, scale, out.as_mut_ptr(), mut_drop_tail()) },
    }
    #[cfg(feature = "mutants")]
    for v in out.iter_mut() {
        *v = mut_nan(isa, *v);
    }
}

fn col_sums_portable(x: &[f32], rows: &Rows, scale: f32, out: &mut [f32]) {
    let width = rows.len;
    let mut c0 = 0;
    while c0 < width {
        let w = (width - c0).min(32);
        let mut acc = [0f32; 32];
        rows.for_each(|off| {
            let r = &x[off + c0..off + c0 + w];
            for j in 0..w {
                acc[j] += r[j];
            }
        });
        for j in 0..w {
            out[c0 + j] = acc[j] * scale;
        }
        c0 += w;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Rows;
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX2 available; every row of `rows` lies inside the allocation behind `x`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn sum_rows_avx2(x: *const f32, rows: &Rows, drop_tail: bool) -> f32 {
        let (mut a0, mut a1, mut a2, mut a3) =
            (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
        let len = rows.len;
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        rows.for_each(|off| {
            // SAFETY (whole closure): off + j + 8 <= off + len for the full-vector loads; the masked
            // load touches only lanes below `len - j`; the caller checked off + len <= slice length.
            unsafe {
                let p = x.add(off);
                let mut j = 0;
                while j + 32 <= len {
                    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p.add(j)));
                    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p.add(j + 8)));
                    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p.add(j + 16)));
                    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p.add(j + 24)));
                    j += 32;
                }
                while j + 8 <= len {
                    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p.add(j)));
                    j += 8;
                }
                if j < len && !drop_tail {
                    let m = _mm256_cmpgt_epi32(_mm256_set1_epi32((len - j) as i32), lanes);
                    a1 = _mm256_add_ps(a1, _mm256_maskload_ps(p.add(j), m));
                }
            }
        });
        let s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
        let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
        _mm_cvtss_f32(h)
    }

    /// # Safety
    /// AVX-512F available; every row of `rows` lies inside the allocation behind `x`.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub unsafe fn sum_rows_avx512(x: *const f32, rows: &Rows, drop_tail: bool) -> f32 {
        let (mut a0, mut a1, mut a2, mut a3) =
            (_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps());
        let len = rows.len;
        rows.for_each(|off| {
            // SAFETY (whole closure): full loads stay below off + len; the masked load reads only
            // the lanes below `len - j` (masked lanes never fault); off + len <= slice length.
            unsafe {
                let p = x.add(off);
                let mut j = 0;
                while j + 64 <= len {
                    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p.add(j)));
                    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p.add(j + 16)));
                    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p.add(j + 32)));
                    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p.add(j + 48)));
                    j += 64;
                }
                while j + 16 <= len {
                    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p.add(j)));
                    j += 16;
                }
                if j < len && !drop_tail {
                    let m: __mmask16 = ((1u32 << (len - j)) - 1) as u16;
                    a1 = _mm512_add_ps(a1, _mm512_maskz_loadu_ps(m, p.add(j)));
                }
            }
        });
        _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)))
    }

    /// # Safety
    /// AVX2 available; `src + r*ss + c` readable and `dst + c*ds + r` writable for r, c < 8.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn transpose8x8(src: *const f32, ss: usize, dst: *mut f32, ds: usize) {
        // SAFETY: the caller guarantees the 8 rows of 8 floats read and written.
        unsafe {
            let r0 = _mm256_loadu_ps(src);
            let r1 = _mm256_loadu_ps(src.add(ss));
            let r2 = _mm256_loadu_ps(src.add(2 * ss));
            let r3 = _mm256_loadu_ps(src.add(3 * ss));
            let r4 = _mm256_loadu_ps(src.add(4 * ss));
            let r5 = _mm256_loadu_ps(src.add(5 * ss));
            let r6 = _mm256_loadu_ps(src.add(6 * ss));
            let r7 = _mm256_loadu_ps(src.add(7 * ss));
            let t0 = _mm256_unpacklo_ps(r0, r1);
            let t1 = _mm256_unpackhi_ps(r0, r1);
            let t2 = _mm256_unpacklo_ps(r2, r3);
            let t3 = _mm256_unpackhi_ps(r2, r3);
            let t4 = _mm256_unpacklo_ps(r4, r5);
            let t5 = _mm256_unpackhi_ps(r4, r5);
            let t6 = _mm256_unpacklo_ps(r6, r7);
            let t7 = _mm256_unpackhi_ps(r6, r7);
            let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            _mm256_storeu_ps(dst, _mm256_permute2f128_ps::<0x20>(u0, u4));
            _mm256_storeu_ps(dst.add(ds), _mm256_permute2f128_ps::<0x20>(u1, u5));
            _mm256_storeu_ps(dst.add(2 * ds), _mm256_permute2f128_ps::<0x20>(u2, u6));
            _mm256_storeu_ps(dst.add(3 * ds), _mm256_permute2f128_ps::<0x20>(u3, u7));
            _mm256_storeu_ps(dst.add(4 * ds), _mm256_permute2f128_ps::<0x31>(u0, u4));
            _mm256_storeu_ps(dst.add(5 * ds), _mm256_permute2f128_ps::<0x31>(u1, u5));
            _mm256_storeu_ps(dst.add(6 * ds), _mm256_permute2f128_ps::<0x31>(u2, u6));
            _mm256_storeu_ps(dst.add(7 * ds), _mm256_permute2f128_ps::<0x31>(u3, u7));
        }
    }

    /// # Safety
    /// AVX2 available; rows `base + r*len .. + len` for `r < out.len()` inside `x`'s allocation.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn row_sums_avx2(x: *const f32, base: usize, len: usize, scale: f32, out: &mut [f32], drop_tail: bool) {
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let tail = len % 8;
        let m = _mm256_cmpgt_epi32(_mm256_set1_epi32(tail as i32), lanes);
        for (r, o) in out.iter_mut().enumerate() {
            // SAFETY: full loads end at or before the row's end; the masked load reads only the
            // `tail` lanes inside the row; the caller checked the last row's end.
            unsafe {
                let p = x.add(base + r * len);
                let (mut a0, mut a1, mut a2, mut a3) =
                    (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
                let mut j = 0;
                while j + 32 <= len {
                    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p.add(j)));
                    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p.add(j + 8)));
                    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p.add(j + 16)));
                    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p.add(j + 24)));
                    j += 32;
                }
                while j + 8 <= len {
                    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p.add(j)));
                    j += 8;
                }
                if tail != 0 && !drop_tail {
                    a2 = _mm256_add_ps(a2, _mm256_maskload_ps(p.add(j), m));
                }
                let s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
                let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
                let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
                let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
                *o = _mm_cvtss_f32(h) * scale;
            }
        }
    }

    /// # Safety
    /// AVX-512F available; rows `base + r*len .. + len` for `r < out.len()` inside `x`'s allocation.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub unsafe fn row_sums_avx512(
        x: *const f32,
        base: usize,
        len: usize,
        scale: f32,
        out: &mut [f32],
        drop_tail: bool,
    ) {
        let tail = len % 16;
        let m: __mmask16 = ((1u32 << tail) - 1) as u16;
        for (r, o) in out.iter_mut().enumerate() {
            // SAFETY: as in `row_sums_avx2`; masked lanes never fault.
            unsafe {
                let p = x.add(base + r * len);
                let (mut a0, mut a1, mut a2, mut a3) =
                    (_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps());
                let mut j = 0;
                while j + 64 <= len {
                    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p.add(j)));
                    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p.add(j + 16)));
                    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p.add(j + 32)));
                    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p.add(j + 48)));
                    j += 64;
                }
                while j + 16 <= len {
                    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p.add(j)));
                    j += 16;
                }
                if tail != 0 && !drop_tail {
                    a2 = _mm512_add_ps(a2, _mm512_maskz_loadu_ps(m, p.add(j)));
                }
                *o = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))) * scale;
            }
        }
    }

    /// # Safety
    /// AVX2 available; rows inside `x`'s allocation; `out` valid for `rows.len` writes.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn col_sums_avx2(x: *const f32, rows: &Rows, scale: f32, out: *mut f32, drop_tail: bool) {
        let width = rows.len;
        let vs = _mm256_set1_ps(scale);
        let mut c = 0;
        // SAFETY (all blocks below): column offsets c.. stay below `width`, rows are in bounds
        // (checked by the caller), masked loads/stores touch only lanes below `width - c`.
        while c + 32 <= width {
            let (mut a0, mut a1, mut a2, mut a3) =
                (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
            rows.for_each(|off| unsafe {
                let p = x.add(off + c);
                a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p));
                a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p.add(8)));
                a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p.add(16)));
                a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p.add(24)));
            });
            unsafe {
                _mm256_storeu_ps(out.add(c), _mm256_mul_ps(a0, vs));
                _mm256_storeu_ps(out.add(c + 8), _mm256_mul_ps(a1, vs));
                _mm256_storeu_ps(out.add(c + 16), _mm256_mul_ps(a2, vs));
                _mm256_storeu_ps(out.add(c + 24), _mm256_mul_ps(a3, vs));
            }
            c += 32;
        }
        while c + 8 <= width {
            let mut a0 = _mm256_setzero_ps();
            rows.for_each(|off| unsafe { a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x.add(off + c))) });
            unsafe { _mm256_storeu_ps(out.add(c), _mm256_mul_ps(a0, vs)) };
            c += 8;
        }
        if c < width {
            let m =
                _mm256_cmpgt_epi32(_mm256_set1_epi32((width - c) as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            let mut a0 = _mm256_setzero_ps();
            if !drop_tail {
                rows.for_each(|off| unsafe { a0 = _mm256_add_ps(a0, _mm256_maskload_ps(x.add(off + c), m)) });
            }
            unsafe { _mm256_maskstore_ps(out.add(c), m, _mm256_mul_ps(a0, vs)) };
        }
    }

    /// # Safety
    /// AVX-512F available; rows inside `x`'s allocation; `out` valid for `rows.len` writes.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub unsafe fn col_sums_avx512(x: *const f32, rows: &Rows, scale: f32, out: *mut f32, drop_tail: bool) {
        let width = rows.len;
        let vs = _mm512_set1_ps(scale);
        let mut c = 0;
        // SAFETY (all blocks below): as in `col_sums_avx2`; masked lanes never fault.
        while c + 64 <= width {
            let (mut a0, mut a1, mut a2, mut a3) =
                (_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps());
            rows.for_each(|off| unsafe {
                let p = x.add(off + c);
                a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p));
                a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p.add(16)));
                a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p.add(32)));
                a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p.add(48)));
            });
            unsafe {
                _mm512_storeu_ps(out.add(c), _mm512_mul_ps(a0, vs));
                _mm512_storeu_ps(out.add(c + 16), _mm512_mul_ps(a1, vs));
                _mm512_storeu_ps(out.add(c + 32), _mm512_mul_ps(a2, vs));
                _mm512_storeu_ps(out.add(c + 48), _mm512_mul_ps(a3, vs));
            }
            c += 64;
        }
        while c + 16 <= width {
            let mut a0 = _mm512_setzero_ps();
            rows.for_each(|off| unsafe { a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x.add(off + c))) });
            unsafe { _mm512_storeu_ps(out.add(c), _mm512_mul_ps(a0, vs)) };
            c += 16;
        }
        if c < width {
            let m: __mmask16 = ((1u32 << (width - c)) - 1) as u16;
            let mut a0 = _mm512_setzero_ps();
            if !drop_tail {
                rows.for_each(|off| unsafe { a0 = _mm512_add_ps(a0, _mm512_maskz_loadu_ps(m, x.add(off + c))) });
            }
            unsafe { _mm512_mask_storeu_ps(out.add(c), m, _mm512_mul_ps(a0, vs)) };
        }
    }
}

// ------------------------------------------------------------------------------------------
// Multiversioned plain-Rust kernels: one body, compiled for the baseline, AVX2 and AVX-512.

macro_rules! multiversion {
    ($(#[$meta:meta])* pub fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        pub fn $name(isa: Isa, $($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn body_avx2($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx2,fma,f16c")]
            unsafe fn body_avx512($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
            match isa.0 {
                Level::Scalar => body($($arg),*),
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `Isa(Avx2)` is only built after run-time detection of these features;
                // the body is safe Rust (bounds-checked), so the features are the only precondition.
                Level::Avx2 => unsafe { body_avx2($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as above for AVX-512F.
                Level::Avx512 => unsafe { body_avx512($($arg),*) },
            }
        }
    };
}

/// Binary operation of the elementwise kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
}

macro_rules! bin_loops {
    ($op:expr, $out:ident, $i:ident, $a:expr, $b:expr) => {
        match $op {
            BinOp::Add => {
                for $i in 0..$out.len() {
                    $out[$i] = $a + $b;
                }
            }
            BinOp::Sub => {
                for $i in 0..$out.len() {
                    $out[$i] = $a - $b;
                }
            }
            BinOp::Mul => {
                for $i in 0..$out.len() {
                    $out[$i] = $a * $b;
                }
            }
            BinOp::Div => {
                for $i in 0..$out.len() {
                    $out[$i] = $a / $b;
                }
            }
        }
    };
}

multiversion! {
    /// `out[i] = a[i] op b[i]`.
    pub fn bin_vv(op: BinOp, a: &[f32], b: &[f32], out: &mut [f32]) {
        let n = out.len();
        let (a, b) = (&a[..n], &b[..n]);
        bin_loops!(op, out, i, a[i], b[i]);
    }
}

multiversion! {
    /// `out[i] = a[i] op s`.
    pub fn bin_vs(op: BinOp, a: &[f32], s: f32, out: &mut [f32]) {
        let a = &a[..out.len()];
        bin_loops!(op, out, i, a[i], s);
    }
}

multiversion! {
    /// `out[i] = s op b[i]`.
    pub fn bin_sv(op: BinOp, s: f32, b: &[f32], out: &mut [f32]) {
        let b = &b[..out.len()];
        bin_loops!(op, out, i, s, b[i]);
    }
}

/// `a op b` for one element.
#[inline(always)]
pub fn bin_apply(op: BinOp, a: f32, b: f32) -> f32 {
    match op {
        BinOp::Add => a + b,
        BinOp::Sub => a - b,
        BinOp::Mul => a * b,
        BinOp::Div => a / b,
    }
}

multiversion! {
    /// Elements `start..start + out.len()` of a broadcast binary op over row-major `dims`
    /// (`layout = [dims, a strides, b strides]`, adjacent dims merged, an operand's stride 0
    /// where it broadcasts; innermost strides are 0 or 1). One dispatch for every row of the
    /// chunk: a broadcast's rows are often a few channels long, and a call per row cost more
    /// than its arithmetic. Chunks may start and end inside a row.
    pub fn bin_rows(op: BinOp, a: &[f32], b: &[f32], layout: [&[usize]; 3], start: usize, out: &mut [f32]) {
        let [dims, sa, sb] = layout;
        let r = dims.len();
        assert!((1..=8).contains(&r) && sa.len() == r && sb.len() == r, "binary layout of rank {r}");
        let inner = dims[r - 1];
        let (ia, ib) = (sa[r - 1], sb[r - 1]);
        if inner == 0 {
            return;
        }
        // Position of the chunk's first row: its index along each outer dim, and the operands'
        // offsets there; later rows follow by carrying (no division per row).
        let mut idx = [0usize; 8];
        let (mut oa, mut ob) = (0, 0);
        let mut rem = start / inner;
        for k in (0..r - 1).rev() {
            idx[k] = rem % dims[k];
            rem /= dims[k];
            oa += idx[k] * sa[k];
            ob += idx[k] * sb[k];
        }
        let mut col = start % inner;
        let mut done = 0;
        while done < out.len() {
            let len = (inner - col).min(out.len() - done);
            let o = &mut out[done..done + len];
            let (ca, cb) = (oa + col * ia, ob + col * ib);
            match (ia, ib) {
                (0, 0) => o.fill(bin_apply(op, a[oa], b[ob])),
                (_, 0) => {
                    let (x, s) = (&a[ca..ca + len], b[ob]);
                    bin_loops!(op, o, i, x[i], s);
                }
                (0, _) => {
                    let (s, y) = (a[oa], &b[cb..cb + len]);
                    bin_loops!(op, o, i, s, y[i]);
                }
                _ => {
                    let (x, y) = (&a[ca..ca + len], &b[cb..cb + len]);
                    bin_loops!(op, o, i, x[i], y[i]);
                }
            }
            done += len;
            col = 0;
            for k in (0..r - 1).rev() {
                idx[k] += 1;
                oa += sa[k];
                ob += sb[k];
                if idx[k] < dims[k] {
                    break;
                }
                oa -= sa[k] * idx[k];
                ob -= sb[k] * idx[k];
                idx[k] = 0;
            }
        }
    }
}

multiversion! {
    /// `x = min(max(x, lo), hi)`, NaN kept (comparisons, not `f32::max`, which drops NaN).
    pub fn clamp_inplace(x: &mut [f32], lo: f32, hi: f32) {
        for v in x.iter_mut() {
            let t = if *v < lo { lo } else { *v };
            *v = if t > hi { hi } else { t };
        }
    }
}

multiversion! {
    pub fn square(x: &[f32], out: &mut [f32]) {
        let x = &x[..out.len()];
        for i in 0..out.len() {
            out[i] = x[i] * x[i];
        }
    }
}

multiversion! {
    /// `1 / sqrt(x)` with two f32 roundings (at most about 1.5 ulp from the exact value).
    pub fn rsqrt(x: &[f32], out: &mut [f32]) {
        let x = &x[..out.len()];
        for i in 0..out.len() {
            out[i] = 1.0 / x[i].sqrt();
        }
    }
}

multiversion! {
    /// Dot product with 16 independent accumulators.
    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        let mut acc = [0f32; 16];
        let mut ia = a.chunks_exact(16);
        let mut ib = b.chunks_exact(16);
        for (ca, cb) in (&mut ia).zip(&mut ib) {
            for j in 0..16 {
                acc[j] += ca[j] * cb[j];
            }
        }
        let mut s = 0f32;
        for (x, y) in ia.remainder().iter().zip(ib.remainder()) {
            s += x * y;
        }
        for v in acc {
            s += v;
        }
        s
    }
}

multiversion! {
    /// `acc[i] += x[i] * w[i]` (depthwise convolution's inner loop).
    pub fn mul_acc(acc: &mut [f32], x: &[f32], w: &[f32]) {
        let n = acc.len();
        let (x, w) = (&x[..n], &w[..n]);
        for i in 0..n {
            acc[i] += x[i] * w[i];
        }
    }
}

/// Where an accumulator starts from in the product kernels below: a convolution pixel's
/// first window starts from the bias, later ones from the accumulator.
#[derive(Clone, Copy, Debug)]
pub enum Start<'a, T> {
    /// The accumulator's current values.
    Acc,
    /// Zero.
    Zero,
    /// These values (a bias), indexed like the accumulator.
    From(&'a [T]),
}

/// Accumulator arithmetic: f32 multiply then add (two roundings, never fused, so that every
/// path and instruction set gives the same bits), or wrapping i32 (exact in any order).
pub trait Lane: Copy + Default {
    fn mul_add(self, s: Self, w: Self) -> Self;
}

impl Lane for f32 {
    #[inline(always)]
    fn mul_add(self, s: f32, w: f32) -> f32 {
        self + s * w
    }
}

impl Lane for i32 {
    #[inline(always)]
    fn mul_add(self, s: i32, w: i32) -> i32 {
        self.wrapping_add(s.wrapping_mul(w))
    }
}

/// Where a product's rows lie (a convolution window, or rows of a matrix product): output
/// pixel `p < pixels` sums, for each run `r < runs`, the `len` inputs
/// `x[p * pixel_step + r * x_step..][..len]` times the `len` filter rows from
/// `w[r * w_step..]`, each `ld` long; the pixel's outputs are columns `col..` of those rows.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub pixels: usize,
    pub pixel_step: usize,
    /// Runs of rows per pixel (a convolution's kernel rows inside the input).
    pub runs: usize,
    pub x_step: usize,
    pub w_step: usize,
    /// Rows per run (a kernel row's taps inside the input times input channels).
    pub len: usize,
    /// Filter row length: at least `col` plus the outputs per pixel; columns past them are
    /// padding, computed and dropped.
    pub ld: usize,
    pub col: usize,
}

/// The blocks of `len <= B` outputs from `j` on of `P` consecutive pixels (outputs `n` apart in
/// `acc`), kept in registers across every row of every run: `acc[q n + j + t] = start[j + t] +
/// sum over rows of x_q * w[col + j + t]`, rows in order, for each pixel `q < P`. Each filter
/// row is loaded once for the `P` pixels (a convolution's few output channels make one pixel's
/// block a single register, and the per-run and per-block bookkeeping is then shared by `P`
/// pixels instead of paid by each). The filter columns past `len` must exist
/// (`col + j + B <= ld`): padding, computed and dropped. Partial loads and stores are element
/// loops over the fixed `B`, not copies of a run-time length (which would be calls to `memcpy`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn window_block<T: Lane, X: Copy, const B: usize, const P: usize>(
    acc: &mut [T],
    n: usize,
    start: Start<T>,
    x: &[X],
    xv: impl Fn(X) -> T,
    w: &[T],
    win: &Window,
    j: usize,
    len: usize,
) {
    let mut r = [[T::default(); B]; P];
    for (q, rq) in r.iter_mut().enumerate() {
        let from = match start {
            Start::Acc => Some(&acc[q * n + j..q * n + j + len]),
            Start::Zero => None,
            Start::From(b) => Some(&b[j..j + len]),
        };
        if let Some(from) = from {
            for t in 0..B {
                if t < len {
                    rq[t] = from[t];
                }
            }
        }
    }
    let c = win.col + j;
    assert!(c + B <= win.ld, "product block outside the filter rows");
    for run in 0..win.runs {
        let ws = &w[run * win.w_step..][..win.len * win.ld];
        let xs: [&[X]; P] = std::array::from_fn(|q| &x[q * win.pixel_step + run * win.x_step..][..win.len]);
        for (i, row) in (0..win.len).zip(ws.chunks_exact(win.ld)) {
            let wr = &row[c..c + B];
            for q in 0..P {
                let s = xv(xs[q][i]);
                for t in 0..B {
                    r[q][t] = r[q][t].mul_add(s, wr[t]);
                }
            }
        }
    }
    for (q, rq) in r.iter().enumerate() {
        let a = &mut acc[q * n + j..q * n + j + len];
        for t in 0..B {
            if t < len {
                a[t] = rq[t];
            }
        }
    }
}

/// The outputs of `P` consecutive pixels (`n` each, from `acc[0]` on, the first pixel's inputs
/// from `x[0]` on): blocks of 16, 8 and 4 outputs, a ragged end as one more 4-wide block when
/// the filter rows have room for it (packed filters are padded to a multiple of 4 columns),
/// else one output at a time.
#[inline(always)]
fn window_pixels<T: Lane, X: Copy, const P: usize>(
    acc: &mut [T],
    n: usize,
    start: Start<T>,
    x: &[X],
    xv: impl Fn(X) -> T + Copy,
    w: &[T],
    win: &Window,
) {
    let mut j = 0;
    while j + 16 <= n {
        window_block::<T, X, 16, P>(acc, n, start, x, xv, w, win, j, 16);
        j += 16;
    }
    if j + 8 <= n {
        window_block::<T, X, 8, P>(acc, n, start, x, xv, w, win, j, 8);
        j += 8;
    }
    if j + 4 <= n {
        window_block::<T, X, 4, P>(acc, n, start, x, xv, w, win, j, 4);
        j += 4;
    }
    if j < n && win.col + j + 4 <= win.ld {
        window_block::<T, X, 4, P>(acc, n, start, x, xv, w, win, j, n - j);
        j = n;
    }
    while j < n {
        window_block::<T, X, 1, P>(acc, n, start, x, xv, w, win, j, 1);
        j += 1;
    }
}

/// `P` consecutive pixels of a [`Window`] whose filter rows are exactly `L` columns from column
/// 0 (`ld == L`, `col == 0`, `n <= L` outputs per pixel): one block of `L` accumulators per
/// pixel, rows of a compile-time width. A convolution's few output channels (packed to 4 or 8
/// columns) on a small image make windows of a pixel or two and a handful of rows, where the
/// general path's block and bounds bookkeeping cost several times the arithmetic.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn window_narrow<T: Lane, X: Copy, const L: usize, const P: usize, const FULL: bool>(
    acc: &mut [T],
    n: usize,
    start: Start<T>,
    x: &[X],
    xv: impl Fn(X) -> T,
    w: &[T],
    win: &Window,
) {
    let mut r = [[T::default(); L]; P];
    for (q, rq) in r.iter_mut().enumerate() {
        let from = match start {
            Start::Acc => Some(&acc[q * n..q * n + n]),
            Start::Zero => None,
            Start::From(b) => Some(&b[..n]),
        };
        if let Some(from) = from {
            if FULL {
                // n == L: a copy of known length (one vector load, no test per element).
                rq.copy_from_slice(&from[..L]);
            } else {
                // n < L: the first n (the zip stops at `from`'s end; no test per element).
                for (d, &v) in rq.iter_mut().zip(from) {
                    *d = v;
                }
            }
        }
    }
    for run in 0..win.runs {
        let ws = &w[run * win.w_step..][..win.len * L];
        let xs: [&[X]; P] = std::array::from_fn(|q| &x[q * win.pixel_step + run * win.x_step..][..win.len]);
        for (i, wr) in ws.chunks_exact(L).enumerate() {
            for q in 0..P {
                let s = xv(xs[q][i]);
                for t in 0..L {
                    r[q][t] = r[q][t].mul_add(s, wr[t]);
                }
            }
        }
    }
    for (q, rq) in r.iter().enumerate() {
        let a = &mut acc[q * n..q * n + n];
        if FULL {
            a[..L].copy_from_slice(rq);
        } else {
            for (d, &v) in a.iter_mut().zip(rq) {
                *d = v;
            }
        }
    }
}

/// Every pixel of a [`Window`] of `L`-column filter rows (see [`window_narrow`]), four at a
/// time while four are left.
#[inline(always)]
fn window_narrow_all<T: Lane, X: Copy, const L: usize, const FULL: bool>(
    out: &mut [T],
    n: usize,
    start: Start<T>,
    x: &[X],
    xv: impl Fn(X) -> T + Copy,
    w: &[T],
    win: &Window,
) {
    let mut p = 0;
    while p + 4 <= win.pixels {
        window_narrow::<T, X, L, 4, FULL>(&mut out[p * n..], n, start, &x[p * win.pixel_step..], xv, w, win);
        p += 4;
    }
    while p < win.pixels {
        window_narrow::<T, X, L, 1, FULL>(&mut out[p * n..], n, start, &x[p * win.pixel_step..], xv, w, win);
        p += 1;
    }
}

/// Every pixel of a [`Window`], four at a time while four are left (see [`window_block`]),
/// then one at a time. Each output's sum runs in the same order either way.
#[inline(always)]
fn window_body<T: Lane, X: Copy>(
    out: &mut [T],
    start: Start<T>,
    x: &[X],
    xv: impl Fn(X) -> T + Copy,
    w: &[T],
    win: Window,
) {
    if win.pixels == 0 || out.is_empty() {
        return;
    }
    assert!(out.len().is_multiple_of(win.pixels), "outputs are not whole pixels");
    let n = out.len() / win.pixels;
    if win.col == 0 && n <= win.ld {
        match win.ld {
            // Every output column a filter column (the common 4 or 8 output channels), or
            // padding columns past the outputs.
            4 if n == 4 => return window_narrow_all::<T, X, 4, true>(out, n, start, x, xv, w, &win),
            8 if n == 8 => return window_narrow_all::<T, X, 8, true>(out, n, start, x, xv, w, &win),
            4 => return window_narrow_all::<T, X, 4, false>(out, n, start, x, xv, w, &win),
            8 => return window_narrow_all::<T, X, 8, false>(out, n, start, x, xv, w, &win),
            _ => {}
        }
    }
    let mut p = 0;
    while p + 4 <= win.pixels {
        window_pixels::<T, X, 4>(&mut out[p * n..], n, start, &x[p * win.pixel_step..], xv, w, &win);
        p += 4;
    }
    while p < win.pixels {
        window_pixels::<T, X, 1>(&mut out[p * n..], n, start, &x[p * win.pixel_step..], xv, w, &win);
        p += 1;
    }
}

multiversion! {
    /// The f32 sums of a [`Window`] into `out` (`win.pixels` pixels of equal width), each
    /// output `start + x[0] w[0] + x[1] w[1] + ...` in row order: an axpy per row, the
    /// outputs kept in registers across the rows, so a convolution's row of output pixels
    /// that share a window shape is one call.
    pub fn window_f32(out: &mut [f32], start: Start<f32>, x: &[f32], w: &[f32], win: Window) {
        window_body(out, start, x, |v| v, w, win);
    }
}

multiversion! {
    /// Output pixels `first..` of a convolution whose windows are products
    /// ([`ConvGeom::windows`]) into `out` (whole pixels), `shapes` the NHWC input and
    /// output shapes, `w` the packed filter with rows of `ld`: every window of the chunk in one
    /// dispatch (a small image's windows are a pixel or two each, and a call per window cost
    /// more than its arithmetic).
    #[allow(clippy::too_many_arguments)]
    pub fn conv_windows_f32(
        g: &ConvGeom,
        shapes: [&[usize]; 2],
        ld: usize,
        first: usize,
        out: &mut [f32],
        start: Start<f32>,
        x: &[f32],
        w: &[f32],
    ) {
        let oc = shapes[1][3];
        if oc == 0 {
            return;
        }
        for (p, xb, wb, win) in g.windows(shapes[0], shapes[1], ld, first, out.len() / oc) {
            let o = &mut out[p * oc..(p + win.pixels) * oc];
            window_body(o, start, &x[xb..], |v| v, &w[wb..], win);
        }
    }
}

multiversion! {
    /// [`window_f32`] for qs8: `start + sum (x - zx) * w` in wrapping i32, `w` the packed
    /// filter minus its zero point.
    pub fn window_qs8(out: &mut [i32], start: Start<i32>, x: &[i8], zx: i32, w: &[i32], win: Window) {
        window_body(out, start, x, |v| (v as i32).wrapping_sub(zx), w, win);
    }
}

/// Requantization of a qs8 convolution: the output scale multiplier, the fused range in output
/// quanta (`lo <= hi`) and the output zero point.
#[derive(Clone, Copy, Debug)]
pub struct Requant {
    pub mult: f32,
    pub lo: f32,
    pub hi: f32,
    pub zp: f32,
}

/// int32 accumulators to qs8: `clamp(round_half_even(clamp(acc * mult, lo, hi)) + zp)` to
/// [-128, 127] (rounding here is one instruction, not a call to `rintf`).
#[inline(always)]
fn requantize_body(acc: &[i32], rq: Requant, out: &mut [i8]) {
    let acc = &acc[..out.len()];
    for i in 0..out.len() {
        let v = (acc[i] as f32 * rq.mult).clamp(rq.lo, rq.hi);
        out[i] = (v.round_ties_even() + rq.zp).clamp(-128.0, 127.0) as i8;
    }
}

multiversion! {
    /// int32 accumulators to qs8 (see [`Requant`]).
    pub fn requantize(acc: &[i32], rq: Requant, out: &mut [i8]) {
        requantize_body(acc, rq, out);
    }
}

multiversion! {
    /// [`conv_windows_f32`] for qs8: each window's int32 sums `start + sum (x - zx) * w` (`w`
    /// the packed filter minus its zero point) into `acc` (scratch of at least a window's
    /// outputs), then requantized into `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn conv_windows_qs8(
        g: &ConvGeom,
        shapes: [&[usize]; 2],
        ld: usize,
        first: usize,
        out: &mut [i8],
        acc: &mut [i32],
        start: Start<i32>,
        x: &[i8],
        zx: i32,
        w: &[i32],
        rq: Requant,
    ) {
        let oc = shapes[1][3];
        if oc == 0 {
            return;
        }
        for (p, xb, wb, win) in g.windows(shapes[0], shapes[1], ld, first, out.len() / oc) {
            let a = &mut acc[..win.pixels * oc];
            window_body(a, start, &x[xb..], |v| (v as i32).wrapping_sub(zx), &w[wb..], win);
            requantize_body(a, rq, &mut out[p * oc..(p + win.pixels) * oc]);
        }
    }
}

/// Sizes of a matrix product `[m, k] x [k, n]` whose right operand has rows of `ld >= n`.
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    pub k: usize,
    pub n: usize,
    pub ld: usize,
}

multiversion! {
    /// Elements `first..first + out.len()` of the row-major `[m, n]` product `bias + x w`
    /// (`x` `[m, k]`, `w` `[k, ld]`, `bias` per column), each element's sum in row order as in
    /// [`window_f32`]. Rows may be partial (threads split anywhere); one dispatch for all of
    /// them, as the rows of a small linear are often only a few elements long.
    pub fn gemm_rows(out: &mut [f32], first: usize, x: &[f32], w: &[f32], d: Gemm, bias: Option<&[f32]>) {
        let Gemm { k, n, ld } = d;
        if out.is_empty() || n == 0 {
            return;
        }
        let start = |c0: usize| match bias {
            Some(b) => Start::From(&b[c0..]),
            None => Start::Zero,
        };
        let row = |pixels: usize, col: usize| Window { pixels, pixel_step: k, runs: 1, x_step: 0, w_step: 0, len: k, ld, col };
        // A partial first row, whole rows, then a partial last row.
        let (r0, c0) = (first / n, first % n);
        let head = if c0 == 0 { 0 } else { (n - c0).min(out.len()) };
        let (head_out, rest) = out.split_at_mut(head);
        window_body(head_out, start(c0), &x[r0 * k..], |v| v, w, row(1, c0));
        let r1 = if head > 0 { r0 + 1 } else { r0 };
        let full = rest.len() / n;
        let (rows, tail) = rest.split_at_mut(full * n);
        window_body(rows, start(0), &x[r1 * k..], |v| v, w, row(full, 0));
        window_body(tail, start(0), &x[(r1 + full) * k..], |v| v, w, row(1, 0));
    }
}

multiversion! {
    /// f32 -> bf16, round to nearest even; NaN becomes a quiet NaN (as `half` does).
    pub fn f32_to_bf16(x: &[f32], out: &mut [u16]) {
        let x = &x[..out.len()];
        for i in 0..out.len() {
            let b = x[i].to_bits();
            let nan = (b & 0x7fff_ffff) > 0x7f80_0000;
            let r = ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16;
            out[i] = if nan { ((b >> 16) as u16) | 0x0040 } else { r };
        }
    }
}

multiversion! {
    /// bf16 -> f32 (exact); a signalling NaN is quieted (as `half` does).
    pub fn bf16_to_f32(x: &[u16], out: &mut [f32]) {
        let x = &x[..out.len()];
        for i in 0..out.len() {
            let b = x[i];
            let q = if (b & 0x7fff) > 0x7f80 { b | 0x0040 } else { b };
            out[i] = f32::from_bits((q as u32) << 16);
        }
    }
}

multiversion! {
    /// f32 -> qs8: `clamp(round_half_even(x * inv_scale) + zp, -128, 127)`; NaN maps to `zp`.
    pub fn quantize(x: &[f32], inv_scale: f32, zp: i32, out: &mut [i8]) {
        let x = &x[..out.len()];
        let zpf = zp as f32;
        for i in 0..out.len() {
            // Rounding in f32 then adding the zero point keeps ties-to-even on the scaled value;
            // the clamp in f32 makes infinities saturate.
            let r = (x[i] * inv_scale).round_ties_even() + zpf;
            let r = r.clamp(-128.0, 127.0);
            out[i] = if r.is_nan() { zp as i8 } else { r as i8 };
        }
    }
}

multiversion! {
    /// qs8 -> f32: `(q - zp) * scale`.
    pub fn dequantize(x: &[i8], scale: f32, zp: i32, out: &mut [f32]) {
        let x = &x[..out.len()];
        for i in 0..out.len() {
            out[i] = (x[i] as i32 - zp) as f32 * scale;
        }
    }
}

multiversion! {
    /// Sum of rows of int8 values in int32 (exact for fewer than 2^24 elements per output).
    pub fn sum_rows_i8(x: &[i8], rows: &Rows) -> i32 {
        rows.check(x.len());
        let mut acc = [0i32; 32];
        let mut tail = 0i32;
        rows.for_each(|off| {
            let row = &x[off..off + rows.len];
            let mut it = row.chunks_exact(32);
            for c in &mut it {
                for j in 0..32 {
                    acc[j] += c[j] as i32;
                }
            }
            for &v in it.remainder() {
                tail += v as i32;
            }
        });
        acc.iter().sum::<i32>() + tail
    }
}

multiversion! {
    /// `out[c] = sum over rows of row[c]` for int8 rows, in int32.
    pub fn col_sums_i8(x: &[i8], rows: &Rows, out: &mut [i32]) {
        rows.check(x.len());
        let width = rows.len;
        let out = &mut out[..width];
        out.fill(0);
        rows.for_each(|off| {
            let r = &x[off..off + width];
            for j in 0..width {
                out[j] += r[j] as i32;
            }
        });
    }
}

/// `dst[d0 + c*ds + r] = src[s0 + r*ss + c]` for `r < rows`, `c < cols`: one transpose tile.
/// Full 8x8 blocks go through AVX2 register transposes; the edges are scalar.
#[allow(clippy::too_many_arguments)]
pub fn transpose_block_f32(
    isa: Isa,
    src: &[f32],
    s0: usize,
    ss: usize,
    rows: usize,
    cols: usize,
    dst: &mut [f32],
    d0: usize,
    ds: usize,
) {
    if rows == 0 || cols == 0 {
        return;
    }
    let end = |o: usize, stride: usize, n: usize, len: usize| {
        (n - 1).checked_mul(stride).and_then(|v| v.checked_add(o)).and_then(|v| v.checked_add(len))
    };
    assert!(end(s0, ss, rows, cols).is_some_and(|e| e <= src.len()), "transpose tile reads out of bounds");
    assert!(end(d0, ds, cols, rows).is_some_and(|e| e <= dst.len()), "transpose tile writes out of bounds");
    let (mut r8, mut c8) = (0, 0);
    #[cfg(target_arch = "x86_64")]
    if !isa.is_scalar() {
        (r8, c8) = (rows / 8 * 8, cols / 8 * 8);
        // Destination rows outermost: each group of 8 destination rows is finished before the
        // next starts, so only 8 of them are live even when their stride maps them all to one
        // cache set (NCHW planes, power-of-two rows).
        for c in (0..c8).step_by(8) {
            for r in (0..r8).step_by(8) {
                // SAFETY: AVX2 is implied by any non-scalar `Isa`; the block reads rows r..r+8,
                // cols c..c+8 and writes rows c..c+8, cols r..r+8, inside the extents checked above.
                unsafe {
                    x86::transpose8x8(src.as_ptr().add(s0 + r * ss + c), ss, dst.as_mut_ptr().add(d0 + c * ds + r), ds)
                };
            }
        }
    }
    let _ = isa;
    // Edges: the columns right of the 8x8 blocks, then the rows below them (each source row
    // sliced once, so only the destination index is checked per element).
    for r in 0..r8 {
        let srow = &src[s0 + r * ss..][..cols];
        for (c, &v) in srow.iter().enumerate().skip(c8) {
            dst[d0 + c * ds + r] = v;
        }
    }
    for r in r8..rows {
        let srow = &src[s0 + r * ss..][..cols];
        for (c, &v) in srow.iter().enumerate() {
            dst[d0 + c * ds + r] = v;
        }
    }
}

/// f32 -> f16 (round to nearest even). Non-scalar paths use `half`'s slice conversion, which
/// uses F16C when the CPU has it; the scalar path converts element by element in software.
pub fn f32_to_f16(isa: Isa, x: &[f32], out: &mut [f16]) {
    use half::slice::HalfFloatSliceExt;
    let x = &x[..out.len()];
    if isa.is_scalar() {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = f16::from_f32(v);
        }
    } else {
        out.convert_from_f32_slice(x);
    }
}

/// f16 -> f32 (exact).
pub fn f16_to_f32(isa: Isa, x: &[f16], out: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    let x = &x[..out.len()];
    if isa.is_scalar() {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = v.to_f32();
        }
    } else {
        x.convert_to_f32_slice(out);
    }
}

/// bf16 as its bits (for the bit-level kernels above).
pub fn bf16_bits(x: &[bf16]) -> &[u16] {
    // SAFETY: `bf16` is `repr(transparent)` over `u16`: same size, alignment and valid bit patterns.
    unsafe { std::slice::from_raw_parts(x.as_ptr() as *const u16, x.len()) }
}

/// Mutable bf16 as its bits.
pub fn bf16_bits_mut(x: &mut [bf16]) -> &mut [u16] {
    // SAFETY: as in `bf16_bits`; every u16 is a valid bf16.
    unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr() as *mut u16, x.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_par_is_all_zeros_at_every_size_and_thread_count() {
        use crate::runtime::pool::Pool;
        use crate::runtime::ThreadPolicy;
        for threads in 1..=3 {
            for policy in [ThreadPolicy::CostModel, ThreadPolicy::PerOutputTasks] {
                let pool = Pool::new(threads, policy).unwrap();
                for n in [0usize, 1, 1023, 1025, 40_000, 100_001] {
                    let f: Vec<f32> = zeros_par(&pool, n);
                    assert_eq!((f.len(), f.iter().all(|&x| x.to_bits() == 0)), (n, true), "f32 {n} t{threads}");
                    let h: Vec<f16> = zeros_par(&pool, n);
                    assert_eq!((h.len(), h.iter().all(|x| x.to_bits() == 0)), (n, true), "f16 {n} t{threads}");
                    let q: Vec<i8> = zeros_par(&pool, n);
                    assert_eq!((q.len(), q.iter().all(|&x| x == 0)), (n, true), "i8 {n} t{threads}");
                }
            }
        }
    }

    #[test]
    fn parts_hand_out_each_chunk_once() {
        let mut v: Vec<u32> = (0..10).collect();
        let p = Parts::uniform(&mut v, 4);
        assert_eq!(p.len(), 3);
        let c = p.take(2).unwrap();
        assert_eq!(c, &[8, 9]);
        assert!(p.take(2).is_none());
        assert!(p.take(3).is_none());
        c[0] = 100;
        drop(p);
        assert_eq!(v[8], 100);
    }

    #[test]
    fn row_and_column_sums_agree_across_isas() {
        let x: Vec<f32> = (0..1000).map(|i| ((i * 37 % 101) as f32) * 0.25 - 12.0).collect();
        for len in [1, 7, 8, 15, 16, 17, 33, 63, 64, 65, 130] {
            let rows = Rows { base: 3, n: [2, 3, 1], st: [len * 3 + 5, len + 1, 0], len };
            let mut want = 0f64;
            let mut want_cols = vec![0f64; len];
            rows.for_each(|off| {
                for j in 0..len {
                    want += x[off + j] as f64;
                    want_cols[j] += x[off + j] as f64;
                }
            });
            for isa in available_isas() {
                let got = sum_rows_f32(isa, &x, &rows);
                assert!((got as f64 - want).abs() < 1e-3, "{} len {len}: {got} vs {want}", isa.name());
                let mut sums = vec![0f32; 5];
                row_sums_f32(isa, &x, 2, len, 2.0, &mut sums);
                for (r, v) in sums.iter().enumerate() {
                    let w: f64 = x[2 + r * len..2 + (r + 1) * len].iter().map(|&v| v as f64).sum();
                    assert!((*v as f64 - 2.0 * w).abs() < 1e-3, "{} row {r} len {len}", isa.name());
                }
                let mut out = vec![0f32; len];
                col_sums_f32(isa, &x, &rows, 0.5, &mut out);
                for j in 0..len {
                    assert!((out[j] as f64 - want_cols[j] * 0.5).abs() < 1e-3, "{} col {j}", isa.name());
                }
            }
        }
    }

    #[test]
    fn bf16_bit_conversions_match_half() {
        let vals = [0.0f32, -0.0, 1.0, 1.003_906_2, 1.011_718_8, -3.3e38, 1e-40, f32::INFINITY, f32::NAN, 3.3e-39];
        for isa in available_isas() {
            let mut out = vec![0u16; vals.len()];
            f32_to_bf16(isa, &vals, &mut out);
            for (v, o) in vals.iter().zip(&out) {
                assert_eq!(*o, bf16::from_f32(*v).to_bits(), "{v}");
            }
        }
    }
}
