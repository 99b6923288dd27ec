//! Byte buffers viewed as typed slices: the runtime's cache-line blocks ([`Line`]) seen as
//! any plain element type, bf16 seen as its bits, and output buffers zeroed by the pool's
//! threads.

use super::super::pool::{Parts, Pool};
use half::{bf16, f16};
use std::sync::atomic::Ordering;

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
pub fn zeros_par<T: Pod + Default + Send + Sync>(pool: &Pool, n: usize) -> Vec<T> {
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
}
