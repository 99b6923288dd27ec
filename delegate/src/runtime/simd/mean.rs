//! Row sums and column sums, the mean kernels: f32 sums with hand-written AVX2/AVX-512 bodies
//! (several accumulators, masked tails), and the int8 sums multiversioned.

use super::isa::{multiversion, Isa, Level};

#[cfg(feature = "mutants")]
use crate::mutants::{is_active, Mutant};

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

    /// The rows' start offsets, in [`Rows::for_each`]'s order (a plain iterator, for the
    /// multiversioned bodies: see `sum_rows_i8`).
    #[inline(always)]
    fn offsets(&self) -> Offsets {
        Offsets { rows: *self, idx: [0; 3], done: self.count() == 0 }
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

/// See [`Rows::offsets`]: an odometer over the three row counts.
struct Offsets {
    rows: Rows,
    idx: [usize; 3],
    done: bool,
}

impl Iterator for Offsets {
    type Item = usize;

    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        if self.done {
            return None;
        }
        let (r, i) = (&self.rows, self.idx);
        let off = r.base + i[0] * r.st[0] + i[1] * r.st[1] + i[2] * r.st[2];
        // Advance the innermost count first, carrying outwards.
        let mut k = 3;
        loop {
            if k == 0 {
                self.done = true;
                break;
            }
            k -= 1;
            self.idx[k] += 1;
            if self.idx[k] < r.n[k] {
                break;
            }
            self.idx[k] = 0;
        }
        Some(off)
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

/// What each element adds to a sum: itself, or its square. A square is rounded to f32 and
/// then added (two roundings, never a fused multiply-add), so summing squares here gives the
/// same bits as summing the output of the square kernel: a fused `mean(x * x)` reads `x`
/// once and matches the unfused plan exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Term {
    Value,
    Square,
}

#[inline(always)]
fn term<const SQ: bool>(v: f32) -> f32 {
    if SQ {
        v * v
    } else {
        v
    }
}

/// Sum of every element (or its square) of every row (f32 accumulation, order depends on
/// `isa`, not on `term`).
pub fn sum_rows_f32(isa: Isa, x: &[f32], rows: &Rows, t: Term) -> f32 {
    match t {
        Term::Value => sum_rows::<false>(isa, x, rows),
        Term::Square => sum_rows::<true>(isa, x, rows),
    }
}

fn sum_rows<const SQ: bool>(isa: Isa, x: &[f32], rows: &Rows) -> f32 {
    rows.check(x.len());
    let s = match isa.level() {
        Level::Scalar => sum_rows_portable::<SQ>(x, rows),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa(Avx2)` exists only after detection; `rows.check` bounds every access.
        Level::Avx2 => unsafe { x86::sum_rows_avx2::<SQ>(x.as_ptr(), rows, mut_drop_tail()) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above for AVX-512F.
        Level::Avx512 => unsafe { x86::sum_rows_avx512::<SQ>(x.as_ptr(), rows, mut_drop_tail()) },
    };
    mut_nan(isa, s)
}

fn sum_rows_portable<const SQ: bool>(x: &[f32], rows: &Rows) -> f32 {
    // 32 independent accumulators: the compiler vectorizes the inner loop without reassociating.
    let mut acc = [0f32; 32];
    let mut tail = 0f32;
    rows.for_each(|off| {
        let row = &x[off..off + rows.len];
        let mut it = row.chunks_exact(32);
        for c in &mut it {
            for j in 0..32 {
                acc[j] += term::<SQ>(c[j]);
            }
        }
        for &v in it.remainder() {
            tail += term::<SQ>(v);
        }
    });
    let mut s = tail;
    for a in acc {
        s += a;
    }
    s
}

/// `out[r] = scale * sum(t(x[base + r*len .. base + (r+1)*len]))`: consecutive rows, one call
/// (no per-row dispatch; short rows are where per-call overhead would dominate).
pub fn row_sums_f32(isa: Isa, x: &[f32], base: usize, len: usize, scale: f32, out: &mut [f32], t: Term) {
    match t {
        Term::Value => row_sums::<false>(isa, x, base, len, scale, out),
        Term::Square => row_sums::<true>(isa, x, base, len, scale, out),
    }
}

fn row_sums<const SQ: bool>(isa: Isa, x: &[f32], base: usize, len: usize, scale: f32, out: &mut [f32]) {
    let rows = Rows { base, n: [out.len(), 1, 1], st: [len, 0, 0], len };
    rows.check(x.len());
    if len == 0 {
        out.fill(0.0);
        return;
    }
    match isa.level() {
        Level::Scalar => {
            for (r, o) in out.iter_mut().enumerate() {
                let one = Rows { base: base + r * len, n: [1, 1, 1], st: [0, 0, 0], len };
                *o = sum_rows_portable::<SQ>(x, &one) * scale;
            }
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: detection proven by `Isa`; `rows.check` bounds every row; writes stay in `out`.
        Level::Avx2 => unsafe {
            x86::row_sums_avx2::<SQ, SRC_F32, RND_NONE>(x.as_ptr() as *const u8, base, len, scale, out, mut_drop_tail())
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above for AVX-512F.
        Level::Avx512 => unsafe {
            x86::row_sums_avx512::<SQ, SRC_F32, RND_NONE>(
                x.as_ptr() as *const u8,
                base,
                len,
                scale,
                out,
                mut_drop_tail(),
            )
        },
    }
    #[cfg(feature = "mutants")]
    for v in out.iter_mut() {
        *v = mut_nan(isa, *v);
    }
}

/// The element type a row-sum kernel reads (widened to f32 as it loads).
const SRC_F32: u8 = 0;
const SRC_F16: u8 = 1;
const SRC_BF16: u8 = 2;
/// The rounding of each term before it is summed: none, to fp16 or to bf16 and back (a fused
/// square node's output).
const RND_NONE: u8 = 0;
const RND_F16: u8 = 1;
const RND_BF16: u8 = 2;

/// A half-width float array for [`row_sums_half`].
#[derive(Clone, Copy)]
pub enum Half<'a> {
    F16(&'a [half::f16]),
    /// bf16 bit patterns.
    Bf16(&'a [u16]),
}

/// [`row_sums_f32`] (`Term::Value`) of fp16/bf16 rows, each value widened as it is loaded:
/// the same sums of the same f32 values in the same order, so the same bits as widening the
/// rows first, without writing them. With `squares`, of the values' squares each rounded to
/// the input's type (a fused fp16/bf16 square and mean: the same bits as squaring, rounding
/// and summing in three passes). `false` (nothing done) on the scalar path, and for squares
/// of bf16 under the `Bf16Truncates` mutant (its tiled path applies the seeded bug).
pub fn row_sums_half(isa: Isa, x: Half, base: usize, len: usize, scale: f32, out: &mut [f32], squares: bool) -> bool {
    let (ptr, n) = match x {
        Half::F16(h) => (h.as_ptr() as *const u8, h.len()),
        Half::Bf16(b) => (b.as_ptr() as *const u8, b.len()),
    };
    let rows = Rows { base, n: [out.len(), 1, 1], st: [len, 0, 0], len };
    rows.check(n);
    let f16 = matches!(x, Half::F16(_));
    #[cfg(feature = "mutants")]
    if squares && !f16 && crate::mutants::is_active(crate::mutants::Mutant::Bf16Truncates) {
        return false;
    }
    if isa.is_scalar() {
        return false;
    }
    if len == 0 {
        out.fill(0.0);
        return true;
    }
    let drop = mut_drop_tail();
    match isa.level() {
        Level::Scalar => return false,
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a non-scalar `Isa` proves AVX2 and F16C; `rows.check` bounds every row.
        Level::Avx2 => unsafe {
            match (f16, squares) {
                (true, false) => x86::row_sums_avx2::<false, SRC_F16, RND_NONE>(ptr, base, len, scale, out, drop),
                (true, true) => x86::row_sums_avx2::<true, SRC_F16, RND_F16>(ptr, base, len, scale, out, drop),
                (false, false) => x86::row_sums_avx2::<false, SRC_BF16, RND_NONE>(ptr, base, len, scale, out, drop),
                (false, true) => x86::row_sums_avx2::<true, SRC_BF16, RND_BF16>(ptr, base, len, scale, out, drop),
            }
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above for AVX-512F.
        Level::Avx512 => unsafe {
            match (f16, squares) {
                (true, false) => x86::row_sums_avx512::<false, SRC_F16, RND_NONE>(ptr, base, len, scale, out, drop),
                (true, true) => x86::row_sums_avx512::<true, SRC_F16, RND_F16>(ptr, base, len, scale, out, drop),
                (false, false) => x86::row_sums_avx512::<false, SRC_BF16, RND_NONE>(ptr, base, len, scale, out, drop),
                (false, true) => x86::row_sums_avx512::<true, SRC_BF16, RND_BF16>(ptr, base, len, scale, out, drop),
            }
        },
    }
    #[cfg(feature = "mutants")]
    for v in out.iter_mut() {
        *v = mut_nan(isa, *v);
    }
    true
}

/// `out[c] = scale * sum over rows of t(row[c])` for `c < rows.len` (f32 accumulation).
pub fn col_sums_f32(isa: Isa, x: &[f32], rows: &Rows, scale: f32, out: &mut [f32], t: Term) {
    match t {
        Term::Value => col_sums::<false>(isa, x, rows, scale, out),
        Term::Square => col_sums::<true>(isa, x, rows, scale, out),
    }
}

fn col_sums<const SQ: bool>(isa: Isa, x: &[f32], rows: &Rows, scale: f32, out: &mut [f32]) {
    rows.check(x.len());
    assert_eq!(out.len(), rows.len, "column-sum output length");
    match isa.level() {
        Level::Scalar => col_sums_portable::<SQ>(x, rows, scale, out),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: detection proven by `Isa`; `rows.check` bounds reads, `out.len() == rows.len` bounds writes.
        Level::Avx2 => unsafe { x86::col_sums_avx2::<SQ>(x.as_ptr(), rows, scale, out.as_mut_ptr(), mut_drop_tail()) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above for AVX-512F.
        Level::Avx512 => unsafe {
            x86::col_sums_avx512::<SQ>(x.as_ptr(), rows, scale, out.as_mut_ptr(), mut_drop_tail())
        },
    }
    #[cfg(feature = "mutants")]
    for v in out.iter_mut() {
        *v = mut_nan(isa, *v);
    }
}

fn col_sums_portable<const SQ: bool>(x: &[f32], rows: &Rows, scale: f32, out: &mut [f32]) {
    let width = rows.len;
    let mut c0 = 0;
    while c0 < width {
        let w = (width - c0).min(32);
        let mut acc = [0f32; 32];
        rows.for_each(|off| {
            let r = &x[off + c0..off + c0 + w];
            for j in 0..w {
                acc[j] += term::<SQ>(r[j]);
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

    /// What a loaded vector contributes to a sum: itself, or its square (rounded to f32 as
    /// the square kernel rounds it, then added: never fused into a multiply-add).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn t8<const SQ: bool>(v: __m256) -> __m256 {
        if SQ {
            _mm256_mul_ps(v, v)
        } else {
            v
        }
    }

    /// [`t8`], then with `RND` rounded to fp16 or bf16 and back (nearest-even, as `round_to`
    /// rounds a square node's output before the mean reads it).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn r8<const SQ: bool, const RND: u8>(v: __m256) -> __m256 {
        let t = t8::<SQ>(v);
        match RND {
            super::RND_F16 => _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(t)),
            super::RND_BF16 => _mm256_castsi256_ps(crate::runtime::simd::convert::x86::round_bf16_8(t)),
            _ => t,
        }
    }

    /// [`r8`] for 16 lanes.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    fn r16<const SQ: bool, const RND: u8>(v: __m512) -> __m512 {
        let t = t16::<SQ>(v);
        match RND {
            super::RND_F16 => _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(t)),
            super::RND_BF16 => _mm512_castsi512_ps(crate::runtime::simd::convert::x86::round_bf16_16(t)),
            _ => t,
        }
    }

    /// [`t8`] for 16 lanes.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    fn t16<const SQ: bool>(v: __m512) -> __m512 {
        if SQ {
            _mm512_mul_ps(v, v)
        } else {
            v
        }
    }

    /// `v ^ 0x80` is `v + 128` as an unsigned byte: `vpsadbw` against zero adds 8 of them into
    /// each 64-bit lane of `acc`, exactly. Adds the `len / 32 * 32` leading bytes at `p` (biased
    /// by 128 each) and returns the plain sum of the rest.
    ///
    /// # Safety
    /// AVX2 available; `len` bytes readable at `p`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sad_row(p: *const i8, len: usize, acc: &mut __m256i) -> i64 {
        let (bias, zero) = (_mm256_set1_epi8(-128), _mm256_setzero_si256());
        let full = len / 32 * 32;
        let mut j = 0;
        let mut tail = 0i64;
        // SAFETY: every read is below `len` bytes from `p` (the caller's guarantee).
        unsafe {
            while j < full {
                let v = _mm256_xor_si256(_mm256_loadu_si256(p.add(j) as *const __m256i), bias);
                *acc = _mm256_add_epi64(*acc, _mm256_sad_epu8(v, zero));
                j += 32;
            }
            while j < len {
                tail += *p.add(j) as i64;
                j += 1;
            }
        }
        tail
    }

    /// The four 64-bit lanes of `acc` added.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn hsum64(acc: __m256i) -> i64 {
        let h = _mm_add_epi64(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        _mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)
    }

    /// # Safety
    /// AVX2 available; every row of `rows` lies inside the allocation behind `x`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn sum_rows_i8_avx2(x: *const i8, rows: &Rows) -> i32 {
        let mut acc = _mm256_setzero_si256();
        let mut tail = 0i64;
        for off in rows.offsets() {
            // SAFETY: the caller checked that the row `off..off + len` lies inside `x`.
            tail += unsafe { sad_row(x.add(off), rows.len, &mut acc) };
        }
        (hsum64(acc) - 128 * (rows.count() * (rows.len / 32 * 32)) as i64 + tail) as i32
    }

    /// The sum of the `len` int8 values at `p`.
    ///
    /// # Safety
    /// AVX2 available; `len` bytes readable at `p`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn sum_i8_avx2(p: *const i8, len: usize) -> i32 {
        let mut acc = _mm256_setzero_si256();
        // SAFETY: the caller's guarantee.
        let tail = unsafe { sad_row(p, len, &mut acc) };
        (hsum64(acc) - 128 * (len / 32 * 32) as i64 + tail) as i32
    }

    /// # Safety
    /// AVX2 available; every row of `rows` lies inside the allocation behind `x`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn sum_rows_avx2<const SQ: bool>(x: *const f32, rows: &Rows, drop_tail: bool) -> f32 {
        let (mut a0, mut a1, mut a2, mut a3) =
            (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
        let len = rows.len;
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        rows.for_each(|off| {
            // SAFETY: off + j + 8 <= off + len for the full-vector loads; the masked load touches
            // only lanes below `len - j`; the caller checked off + len <= slice length.
            unsafe {
                let p = x.add(off);
                let mut j = 0;
                while j + 32 <= len {
                    a0 = _mm256_add_ps(a0, t8::<SQ>(_mm256_loadu_ps(p.add(j))));
                    a1 = _mm256_add_ps(a1, t8::<SQ>(_mm256_loadu_ps(p.add(j + 8))));
                    a2 = _mm256_add_ps(a2, t8::<SQ>(_mm256_loadu_ps(p.add(j + 16))));
                    a3 = _mm256_add_ps(a3, t8::<SQ>(_mm256_loadu_ps(p.add(j + 24))));
                    j += 32;
                }
                while j + 8 <= len {
                    a0 = _mm256_add_ps(a0, t8::<SQ>(_mm256_loadu_ps(p.add(j))));
                    j += 8;
                }
                if j < len && !drop_tail {
                    let m = _mm256_cmpgt_epi32(_mm256_set1_epi32((len - j) as i32), lanes);
                    a1 = _mm256_add_ps(a1, t8::<SQ>(_mm256_maskload_ps(p.add(j), m)));
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
    pub unsafe fn sum_rows_avx512<const SQ: bool>(x: *const f32, rows: &Rows, drop_tail: bool) -> f32 {
        let (mut a0, mut a1, mut a2, mut a3) =
            (_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps());
        let len = rows.len;
        rows.for_each(|off| {
            // SAFETY: full loads stay below off + len; the masked load reads only the lanes below
            // `len - j` (masked lanes never fault); off + len <= slice length.
            unsafe {
                let p = x.add(off);
                let mut j = 0;
                while j + 64 <= len {
                    a0 = _mm512_add_ps(a0, t16::<SQ>(_mm512_loadu_ps(p.add(j))));
                    a1 = _mm512_add_ps(a1, t16::<SQ>(_mm512_loadu_ps(p.add(j + 16))));
                    a2 = _mm512_add_ps(a2, t16::<SQ>(_mm512_loadu_ps(p.add(j + 32))));
                    a3 = _mm512_add_ps(a3, t16::<SQ>(_mm512_loadu_ps(p.add(j + 48))));
                    j += 64;
                }
                while j + 16 <= len {
                    a0 = _mm512_add_ps(a0, t16::<SQ>(_mm512_loadu_ps(p.add(j))));
                    j += 16;
                }
                if j < len && !drop_tail {
                    let m: __mmask16 = ((1u32 << (len - j)) - 1) as u16;
                    a1 = _mm512_add_ps(a1, t16::<SQ>(_mm512_maskz_loadu_ps(m, p.add(j))));
                }
            }
        });
        _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)))
    }

    /// 8 values at element `j` of `x`, an array of `SRC` (`SRC_F32`, `SRC_F16` or `SRC_BF16`)
    /// widened to f32.
    ///
    /// # Safety
    /// AVX2 and F16C available; 8 elements readable at `j`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn ld8<const SRC: u8>(x: *const u8, j: usize) -> __m256 {
        // SAFETY: the caller's guarantee.
        unsafe {
            match SRC {
                super::SRC_F16 => _mm256_cvtph_ps(_mm_loadu_si128(x.add(2 * j) as *const __m128i)),
                super::SRC_BF16 => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(
                    _mm_loadu_si128(x.add(2 * j) as *const __m128i),
                ))),
                _ => _mm256_loadu_ps(x.add(4 * j) as *const f32),
            }
        }
    }

    /// The `tail < 8` values at element `j` widened, zero in the other lanes (`m` masks them
    /// for f32; a half-width tail goes through a zeroed block).
    ///
    /// # Safety
    /// AVX2 and F16C available; `tail` elements readable at `j`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn ld8_tail<const SRC: u8>(x: *const u8, j: usize, tail: usize, m: __m256i) -> __m256 {
        if SRC == super::SRC_F32 {
            // SAFETY: masked lanes are not read.
            return unsafe { _mm256_maskload_ps(x.add(4 * j) as *const f32, m) };
        }
        let mut b = [0u16; 8];
        // SAFETY: `tail` elements at `j` (the caller's guarantee) into an 8-element block.
        unsafe {
            std::ptr::copy_nonoverlapping(x.add(2 * j) as *const u16, b.as_mut_ptr(), tail);
            ld8::<SRC>(b.as_ptr() as *const u8, 0)
        }
    }

    /// # Safety
    /// AVX2 and F16C available; rows `base + r*len .. + len` for `r < out.len()` inside the
    /// allocation behind `x`, an array of `SRC`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn row_sums_avx2<const SQ: bool, const SRC: u8, const RND: u8>(
        x: *const u8,
        base: usize,
        len: usize,
        scale: f32,
        out: &mut [f32],
        drop_tail: bool,
    ) {
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let tail = len % 8;
        let m = _mm256_cmpgt_epi32(_mm256_set1_epi32(tail as i32), lanes);
        for (r, o) in out.iter_mut().enumerate() {
            // SAFETY: full loads end at or before the row's end; the masked load reads only the
            // `tail` lanes inside the row; the caller checked the last row's end.
            unsafe {
                let p = base + r * len;
                let (mut a0, mut a1, mut a2, mut a3) =
                    (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
                let mut j = 0;
                while j + 32 <= len {
                    a0 = _mm256_add_ps(a0, r8::<SQ, RND>(ld8::<SRC>(x, p + j)));
                    a1 = _mm256_add_ps(a1, r8::<SQ, RND>(ld8::<SRC>(x, p + j + 8)));
                    a2 = _mm256_add_ps(a2, r8::<SQ, RND>(ld8::<SRC>(x, p + j + 16)));
                    a3 = _mm256_add_ps(a3, r8::<SQ, RND>(ld8::<SRC>(x, p + j + 24)));
                    j += 32;
                }
                while j + 8 <= len {
                    a1 = _mm256_add_ps(a1, r8::<SQ, RND>(ld8::<SRC>(x, p + j)));
                    j += 8;
                }
                if tail != 0 && !drop_tail {
                    a2 = _mm256_add_ps(a2, r8::<SQ, RND>(ld8_tail::<SRC>(x, p + j, tail, m)));
                }
                let s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
                let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
                let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
                let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
                *o = _mm_cvtss_f32(h) * scale;
            }
        }
    }

    /// [`ld8`] for 16 lanes.
    ///
    /// # Safety
    /// AVX-512F available; 16 elements readable at `j`.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    unsafe fn ld16<const SRC: u8>(x: *const u8, j: usize) -> __m512 {
        // SAFETY: the caller's guarantee.
        unsafe {
            match SRC {
                super::SRC_F16 => _mm512_cvtph_ps(_mm256_loadu_si256(x.add(2 * j) as *const __m256i)),
                super::SRC_BF16 => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(
                    _mm256_loadu_si256(x.add(2 * j) as *const __m256i),
                ))),
                _ => _mm512_loadu_ps(x.add(4 * j) as *const f32),
            }
        }
    }

    /// [`ld8_tail`] for 16 lanes (`m` masks f32 lanes).
    ///
    /// # Safety
    /// AVX-512F available; `tail < 16` elements readable at `j`.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    unsafe fn ld16_tail<const SRC: u8>(x: *const u8, j: usize, tail: usize, m: __mmask16) -> __m512 {
        if SRC == super::SRC_F32 {
            // SAFETY: masked lanes never fault.
            return unsafe { _mm512_maskz_loadu_ps(m, x.add(4 * j) as *const f32) };
        }
        let mut b = [0u16; 16];
        // SAFETY: `tail` elements at `j` (the caller's guarantee) into a 16-element block.
        unsafe {
            std::ptr::copy_nonoverlapping(x.add(2 * j) as *const u16, b.as_mut_ptr(), tail);
            ld16::<SRC>(b.as_ptr() as *const u8, 0)
        }
    }

    /// # Safety
    /// AVX-512F and F16C available; rows `base + r*len .. + len` for `r < out.len()` inside the
    /// allocation behind `x`, an array of `SRC`.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub unsafe fn row_sums_avx512<const SQ: bool, const SRC: u8, const RND: u8>(
        x: *const u8,
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
                let p = base + r * len;
                let (mut a0, mut a1, mut a2, mut a3) =
                    (_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps());
                let mut j = 0;
                while j + 64 <= len {
                    a0 = _mm512_add_ps(a0, r16::<SQ, RND>(ld16::<SRC>(x, p + j)));
                    a1 = _mm512_add_ps(a1, r16::<SQ, RND>(ld16::<SRC>(x, p + j + 16)));
                    a2 = _mm512_add_ps(a2, r16::<SQ, RND>(ld16::<SRC>(x, p + j + 32)));
                    a3 = _mm512_add_ps(a3, r16::<SQ, RND>(ld16::<SRC>(x, p + j + 48)));
                    j += 64;
                }
                while j + 16 <= len {
                    a1 = _mm512_add_ps(a1, r16::<SQ, RND>(ld16::<SRC>(x, p + j)));
                    j += 16;
                }
                if tail != 0 && !drop_tail {
                    a2 = _mm512_add_ps(a2, r16::<SQ, RND>(ld16_tail::<SRC>(x, p + j, tail, m)));
                }
                *o = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))) * scale;
            }
        }
    }

    /// # Safety
    /// AVX2 available; rows inside `x`'s allocation; `out` valid for `rows.len` writes.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn col_sums_avx2<const SQ: bool>(
        x: *const f32,
        rows: &Rows,
        scale: f32,
        out: *mut f32,
        drop_tail: bool,
    ) {
        let width = rows.len;
        let vs = _mm256_set1_ps(scale);
        let mut c = 0;
        // Every block below: the caller checked that each row lies inside `x` and that `out`
        // holds `width` floats; column offsets stay below `width`.
        while c + 32 <= width {
            let (mut a0, mut a1, mut a2, mut a3) =
                (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
            // SAFETY: columns c..c + 32 <= width of an in-bounds row.
            rows.for_each(|off| unsafe {
                let p = x.add(off + c);
                a0 = _mm256_add_ps(a0, t8::<SQ>(_mm256_loadu_ps(p)));
                a1 = _mm256_add_ps(a1, t8::<SQ>(_mm256_loadu_ps(p.add(8))));
                a2 = _mm256_add_ps(a2, t8::<SQ>(_mm256_loadu_ps(p.add(16))));
                a3 = _mm256_add_ps(a3, t8::<SQ>(_mm256_loadu_ps(p.add(24))));
            });
            // SAFETY: outputs c..c + 32 <= width.
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
            // SAFETY: columns c..c + 8 <= width of an in-bounds row.
            rows.for_each(|off| unsafe { a0 = _mm256_add_ps(a0, t8::<SQ>(_mm256_loadu_ps(x.add(off + c)))) });
            // SAFETY: outputs c..c + 8 <= width.
            unsafe { _mm256_storeu_ps(out.add(c), _mm256_mul_ps(a0, vs)) };
            c += 8;
        }
        if c < width {
            let m =
                _mm256_cmpgt_epi32(_mm256_set1_epi32((width - c) as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            let mut a0 = _mm256_setzero_ps();
            if !drop_tail {
                // SAFETY: the mask enables only the `width - c` lanes inside the row.
                rows.for_each(|off| unsafe { a0 = _mm256_add_ps(a0, t8::<SQ>(_mm256_maskload_ps(x.add(off + c), m))) });
            }
            // SAFETY: the mask enables only outputs below `width`.
            unsafe { _mm256_maskstore_ps(out.add(c), m, _mm256_mul_ps(a0, vs)) };
        }
    }

    /// # Safety
    /// AVX-512F available; rows inside `x`'s allocation; `out` valid for `rows.len` writes.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub unsafe fn col_sums_avx512<const SQ: bool>(
        x: *const f32,
        rows: &Rows,
        scale: f32,
        out: *mut f32,
        drop_tail: bool,
    ) {
        let width = rows.len;
        let vs = _mm512_set1_ps(scale);
        let mut c = 0;
        // Every block below: as in `col_sums_avx2`; masked lanes never fault.
        while c + 64 <= width {
            let (mut a0, mut a1, mut a2, mut a3) =
                (_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps());
            // SAFETY: columns c..c + 64 <= width of an in-bounds row.
            rows.for_each(|off| unsafe {
                let p = x.add(off + c);
                a0 = _mm512_add_ps(a0, t16::<SQ>(_mm512_loadu_ps(p)));
                a1 = _mm512_add_ps(a1, t16::<SQ>(_mm512_loadu_ps(p.add(16))));
                a2 = _mm512_add_ps(a2, t16::<SQ>(_mm512_loadu_ps(p.add(32))));
                a3 = _mm512_add_ps(a3, t16::<SQ>(_mm512_loadu_ps(p.add(48))));
            });
            // SAFETY: outputs c..c + 64 <= width.
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
            // SAFETY: columns c..c + 16 <= width of an in-bounds row.
            rows.for_each(|off| unsafe { a0 = _mm512_add_ps(a0, t16::<SQ>(_mm512_loadu_ps(x.add(off + c)))) });
            // SAFETY: outputs c..c + 16 <= width.
            unsafe { _mm512_storeu_ps(out.add(c), _mm512_mul_ps(a0, vs)) };
            c += 16;
        }
        if c < width {
            let m: __mmask16 = ((1u32 << (width - c)) - 1) as u16;
            let mut a0 = _mm512_setzero_ps();
            if !drop_tail {
                // SAFETY: the mask enables only the `width - c` lanes inside the row.
                rows.for_each(|off| unsafe {
                    a0 = _mm512_add_ps(a0, t16::<SQ>(_mm512_maskz_loadu_ps(m, x.add(off + c))))
                });
            }
            // SAFETY: the mask enables only outputs below `width`.
            unsafe { _mm512_mask_storeu_ps(out.add(c), m, _mm512_mul_ps(a0, vs)) };
        }
    }
}

/// Sum of rows of int8 values in int32 (exact for fewer than 2^24 elements per output). With
/// AVX2, 32 bytes per `vpsadbw` (biased to unsigned); else plain loops.
pub fn sum_rows_i8(isa: Isa, x: &[i8], rows: &Rows) -> i32 {
    rows.check(x.len());
    match isa.level() {
        Level::Scalar => sum_rows_i8_plain(isa, x, rows),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a non-scalar `Isa` proves AVX2; `rows.check` bounds every row.
        Level::Avx2 | Level::Avx512 => unsafe { x86::sum_rows_i8_avx2(x.as_ptr(), rows) },
    }
}

/// `out[r] = sum(x[base + r*len .. base + (r+1)*len])` for consecutive int8 rows, in int32
/// (a last-dim mean: one call for all its rows, no per-row set-up).
pub fn row_sums_i8(isa: Isa, x: &[i8], base: usize, len: usize, out: &mut [i32]) {
    let rows = Rows { base, n: [out.len(), 1, 1], st: [len, 0, 0], len };
    rows.check(x.len());
    match isa.level() {
        Level::Scalar => {
            for (r, o) in out.iter_mut().enumerate() {
                *o = sum_rows_i8_plain(isa, x, &Rows { base: base + r * len, n: [1, 1, 1], st: [0, 0, 0], len });
            }
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a non-scalar `Isa` proves AVX2; `rows.check` bounds every row.
        Level::Avx2 | Level::Avx512 => unsafe {
            for (r, o) in out.iter_mut().enumerate() {
                *o = x86::sum_i8_avx2(x.as_ptr().add(base + r * len), len);
            }
        },
    }
}

multiversion! {
    /// [`sum_rows_i8`] in plain loops, not `Rows::for_each`: a closure made in the
    /// multiversioned body is compiled for the baseline, not for the body's instruction set.
    pub fn sum_rows_i8_plain(x: &[i8], rows: &Rows) -> i32 {
        rows.check(x.len());
        let mut acc = [0i32; 32];
        let mut tail = 0i32;
        for off in rows.offsets() {
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
        }
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
        for off in rows.offsets() {
            let r = &x[off..off + width];
            for j in 0..width {
                out[j] += r[j] as i32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::simd::available_isas;

    #[test]
    fn offsets_walk_the_rows_in_for_each_order() {
        for n in [[2, 3, 4], [1, 1, 1], [3, 1, 2], [0, 2, 2], [2, 0, 1]] {
            let rows = Rows { base: 7, n, st: [100, 10, 1], len: 1 };
            let mut want = vec![];
            rows.for_each(|o| want.push(o));
            assert_eq!(rows.offsets().collect::<Vec<_>>(), want, "{n:?}");
        }
    }

    #[test]
    fn int8_sums_are_exact_on_every_isa() {
        let mut x: Vec<i8> = (0..5000).map(|i| ((i * 7919) % 256) as u8 as i8).collect();
        // Runs of the extremes, where a biased or saturating sum would go wrong.
        x[100..400].fill(-128);
        x[1000..1300].fill(127);
        for len in [1, 31, 32, 33, 64, 100, 257] {
            let rows = Rows { base: 3, n: [2, 3, 2], st: [len * 7 + 3, len * 2 + 1, len + 1], len };
            let mut want = 0i32;
            let mut cols = vec![0i32; len];
            rows.for_each(|off| {
                for j in 0..len {
                    want += x[off + j] as i32;
                    cols[j] += x[off + j] as i32;
                }
            });
            for isa in available_isas() {
                assert_eq!(sum_rows_i8(isa, &x, &rows), want, "{} len {len}", isa.name());
                // Consecutive rows in one call: each row's own sum.
                let mut sums = vec![0i32; 7];
                row_sums_i8(isa, &x, 5, len, &mut sums);
                let each: Vec<i32> =
                    (0..7).map(|r| x[5 + r * len..5 + (r + 1) * len].iter().map(|&v| v as i32).sum()).collect();
                assert_eq!(sums, each, "{} len {len}", isa.name());
                let mut out = vec![0i32; len];
                col_sums_i8(isa, &x, &rows, &mut out);
                assert_eq!(out, cols, "{} len {len}", isa.name());
            }
        }
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
                let got = sum_rows_f32(isa, &x, &rows, Term::Value);
                assert!((got as f64 - want).abs() < 1e-3, "{} len {len}: {got} vs {want}", isa.name());
                let mut sums = vec![0f32; 5];
                row_sums_f32(isa, &x, 2, len, 2.0, &mut sums, Term::Value);
                for (r, v) in sums.iter().enumerate() {
                    let w: f64 = x[2 + r * len..2 + (r + 1) * len].iter().map(|&v| v as f64).sum();
                    assert!((*v as f64 - 2.0 * w).abs() < 1e-3, "{} row {r} len {len}", isa.name());
                }
                let mut out = vec![0f32; len];
                col_sums_f32(isa, &x, &rows, 0.5, &mut out, Term::Value);
                for j in 0..len {
                    assert!((out[j] as f64 - want_cols[j] * 0.5).abs() < 1e-3, "{} col {j}", isa.name());
                }
            }
        }
    }

    #[test]
    fn half_row_sums_are_the_widened_rows_sums_bit_for_bit() {
        // Values whose squares round in fp16, overflow it (300^2 > 65504) or fall subnormal.
        let x: Vec<half::f16> = (0..3000)
            .map(|i| half::f16::from_f32(((i * 7919 % 613) as f32 - 306.0) * if i % 5 == 0 { 1e-3 } else { 0.37 }))
            .collect();
        let b: Vec<half::bf16> = x.iter().map(|v| half::bf16::from_f32(v.to_f32())).collect();
        let b16 = crate::runtime::simd::bf16_bits(&b);
        for len in [1, 7, 8, 9, 31, 32, 33, 64, 100, 257] {
            for isa in available_isas() {
                let (base, rows) = (5, 3);
                let mut wide: Vec<f32> = x[base..base + rows * len].iter().map(|v| v.to_f32()).collect();
                let mut want = vec![0f32; rows];
                row_sums_f32(isa, &wide, 0, len, 0.5, &mut want, Term::Value);
                let mut got = vec![f32::NAN; rows];
                if row_sums_half(isa, Half::F16(&x), base, len, 0.5, &mut got, false) {
                    assert_eq!(bits(&got), bits(&want), "{} len {len}", isa.name());
                }
                // Squares rounded to fp16, then summed: the unfused square and mean.
                for v in wide.iter_mut() {
                    *v = half::f16::from_f32(*v * *v).to_f32();
                }
                row_sums_f32(isa, &wide, 0, len, 0.5, &mut want, Term::Value);
                let mut got = vec![f32::NAN; rows];
                let done = row_sums_half(isa, Half::F16(&x), base, len, 0.5, &mut got, true);
                assert_eq!(done, !isa.is_scalar(), "{}", isa.name());
                if done {
                    assert_eq!(bits(&got), bits(&want), "{} len {len} squares", isa.name());
                }
                // bf16: squares rounded to bf16 by the unfused square's rounding, then summed.
                let mut wide: Vec<f32> = b[base..base + rows * len].iter().map(|v| v.to_f32()).collect();
                for v in wide.iter_mut() {
                    *v *= *v;
                }
                crate::runtime::simd::round_to(isa, crate::runtime::simd::Narrow::Bf16, &mut wide);
                row_sums_f32(isa, &wide, 0, len, 0.5, &mut want, Term::Value);
                let mut got = vec![f32::NAN; rows];
                let done = row_sums_half(isa, Half::Bf16(b16), base, len, 0.5, &mut got, true);
                assert_eq!(done, !isa.is_scalar(), "{}", isa.name());
                if done {
                    assert_eq!(bits(&got), bits(&want), "{} len {len} bf16 squares", isa.name());
                }
            }
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn sums_of_squares_are_bit_identical_to_sums_of_squared_values() {
        // The fused `mean(x * x)` must give the unfused plan's bits: same roundings, same order.
        let x: Vec<f32> = (0..4000).map(|i| ((i * 7919 % 1009) as f32) * 0.013 - 6.5).collect();
        let sq: Vec<f32> = x.iter().map(|v| v * v).collect();
        for len in [1, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 130, 257] {
            let rows = Rows { base: 5, n: [2, 3, 2], st: [len * 7 + 3, len * 2 + 1, len + 1], len };
            for isa in available_isas() {
                let name = isa.name();
                let (a, b) = (sum_rows_f32(isa, &x, &rows, Term::Square), sum_rows_f32(isa, &sq, &rows, Term::Value));
                assert_eq!(a.to_bits(), b.to_bits(), "{name} sum_rows len {len}");
                let (mut a, mut b) = (vec![0f32; 9], vec![0f32; 9]);
                row_sums_f32(isa, &x, 3, len, 0.37, &mut a, Term::Square);
                row_sums_f32(isa, &sq, 3, len, 0.37, &mut b, Term::Value);
                assert_eq!(
                    a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{name} row_sums len {len}"
                );
                let (mut a, mut b) = (vec![0f32; len], vec![0f32; len]);
                col_sums_f32(isa, &x, &rows, 0.37, &mut a, Term::Square);
                col_sums_f32(isa, &sq, &rows, 0.37, &mut b, Term::Value);
                assert_eq!(
                    a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{name} col_sums len {len}"
                );
            }
        }
    }
}
