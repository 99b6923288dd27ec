//! fp16/bf16 elementwise chains evaluated in registers (AVX2 + F16C): each operand's elements
//! are loaded and widened into the registers that compute with them, every step runs on 64
//! lanes at a time, an fp16/bf16 node's rounding ([`ChainStep::Round`]) is a conversion there
//! and back inside the register, and the result is narrowed as it is stored. The tiled path
//! (`kernels::fused::run_chain_narrow` over [`super::chain_rows`]) widens each dense operand
//! into a tile, runs every step as a pass over it and narrows it in another: six passes over
//! L1 for RMSNorm's fp16 `x * r * w` where this makes one.
//!
//! The arithmetic per element is `chain_rows`' (the unfused kernels'): IEEE f32 add, sub, mul,
//! div and sqrt without contraction, `1 / sqrt(v)`, the same NaN-keeping clamp, and the
//! conversions of the unfused nodes on a non-scalar ISA (F16C's `vcvtph2ps` and `vcvtps2ph`
//! rounding to nearest even; `convert::round_bf16`'s rounding), so the same values: NaN where
//! they have NaN (a payload may differ, as it may between any two IEEE evaluations).
//! `delegate/tests/runtime_fusion.rs` compares the fused and unfused plans; this file's test
//! the two paths on NaNs, infinities, subnormals, fp16's overflow edge and rounding ties.

use super::convert::Narrow;
use super::elementwise::{ChainLayout, ChainStep, Src, CHAIN_ARGS, CHAIN_RANK};
use super::isa::Isa;
#[cfg(target_arch = "x86_64")]
use super::isa::Level;
use half::f16;

/// An operand of an fp16/bf16 chain.
#[derive(Clone, Copy, Debug)]
pub enum NarrowOpd<'a> {
    /// f32 values laid out by the chain layout's strides (a broadcast operand, widened whole).
    F32(&'a [f32]),
    /// fp16 or bf16 (its bits) values of the output's shape, element `i` under output element `i`.
    F16(&'a [f16]),
    Bf16(&'a [u16]),
}

/// Where an fp16/bf16 chain's results go (bf16 as its bits).
pub enum NarrowDst<'a> {
    F16(&'a mut [f16]),
    Bf16(&'a mut [u16]),
}

impl NarrowDst<'_> {
    fn len(&self) -> usize {
        match self {
            NarrowDst::F16(o) => o.len(),
            NarrowDst::Bf16(o) => o.len(),
        }
    }
}

/// Whether [`chain_narrow`] has a kernel for `isa` (every non-scalar x86 level: AVX2 and F16C
/// are in each).
pub fn narrow_chain_available(isa: Isa) -> bool {
    cfg!(target_arch = "x86_64") && !isa.is_scalar()
}

/// Elements `start..start + out.len()` of an fp16/bf16 chain over `lay` (`steps` as in
/// [`super::chain_rows`], the last node's narrowing being the store into `out`). Chunks may
/// start and end inside a row.
///
/// # Panics
/// If [`narrow_chain_available`] is false for `isa`, a step reads an operand beyond `opds`,
/// or an operand is shorter than `lay` says (the caller built `lay` from the operands' shapes).
pub fn chain_narrow(
    isa: Isa,
    steps: &[ChainStep],
    opds: &[NarrowOpd],
    lay: &ChainLayout,
    start: usize,
    out: NarrowDst,
) {
    assert!(narrow_chain_available(isa), "no register chain kernel for {}", isa.name());
    let missing = |s: Src| matches!(s, Src::Arg(k) if k >= opds.len());
    assert!(
        !steps.iter().any(|s| match *s {
            ChainStep::Bin { a, b, .. } => missing(a) || missing(b),
            ChainStep::Square(a) | ChainStep::Rsqrt(a) | ChainStep::Copy(a) => missing(a),
            _ => false,
        }),
        "chain step reads an operand the chain does not have"
    );
    #[cfg(target_arch = "x86_64")]
    rows(isa, steps, opds, lay, start, out);
}

/// [`chain_narrow`]'s walk over its chunk: a call of the rows kernel per block of whole rows
/// (as many as stay inside the dim just outside them, as `chain_rows` makes its blocks), or
/// per part of a row where the chunk starts or ends inside one.
#[cfg(target_arch = "x86_64")]
fn rows(isa: Isa, steps: &[ChainStep], opds: &[NarrowOpd], lay: &ChainLayout, start: usize, mut out: NarrowDst) {
    let (r, na, n) = (lay.rank, opds.len(), out.len());
    assert!((1..=CHAIN_RANK).contains(&r) && na <= CHAIN_ARGS, "chain of rank {r} with {na} operands");
    let inner = lay.dims[r - 1];
    if inner == 0 || n == 0 {
        return;
    }
    let wide = isa.level() == Level::Avx512;
    let rd = r.checked_sub(2);
    // Per operand, its element under the current row's start (row-major odometer over the
    // outer dims, as `chain_rows` walks them).
    let (mut idx, mut off, mut col) = lay.position(na, start);
    let mut done = 0;
    while done < n {
        let left = n - done;
        let (rows, w) = match rd {
            Some(k) if col == 0 && left >= inner => ((left / inner).min(lay.dims[k] - idx[k]), inner),
            _ => (1, (inner - col).min(left)),
        };
        let mut ops = [x86::RowsOpd { data: x86::Data::F32(&[]), stride: 0, splat: true }; CHAIN_ARGS];
        for (a, (ro, &o)) in ops.iter_mut().zip(opds).enumerate() {
            // Innermost strides are 0 (one value along the row) or 1 (`chain_layout`).
            let st = lay.st[a][r - 1];
            let at = off[a] + col * st;
            let data = match o {
                NarrowOpd::F32(x) => x86::Data::F32(&x[at..]),
                NarrowOpd::F16(x) => x86::Data::F16(&x[at..]),
                NarrowOpd::Bf16(x) => x86::Data::Bf16(&x[at..]),
            };
            let stride = match rd {
                Some(k) if rows > 1 => lay.st[a][k],
                _ => 0,
            };
            *ro = x86::RowsOpd { data, stride, splat: st == 0 };
        }
        let m = rows * w;
        let dst = match &mut out {
            NarrowDst::F16(o) => x86::RowDst::F16(&mut o[done..done + m]),
            NarrowDst::Bf16(o) => x86::RowDst::Bf16(&mut o[done..done + m]),
        };
        // SAFETY: `chain_narrow` asserted a non-scalar `Isa`, which exists only where AVX2, FMA
        // and F16C were detected, and an AVX-512 one only where AVX-512F was too; `rows_*`
        // check their slices' lengths.
        unsafe {
            if wide {
                x86::rows_avx512(steps, &ops[..na], rows, dst)
            } else {
                x86::rows_avx2(steps, &ops[..na], rows, dst)
            }
        };
        done += m;
        if col + w < inner {
            col += w;
            continue;
        }
        col = 0;
        lay.advance_rows(na, &mut idx, &mut off, rows);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Src;
    use super::{ChainStep, Narrow, CHAIN_ARGS};
    use crate::runtime::simd::convert::x86::{round_bf16_16, round_bf16_8};
    use crate::runtime::simd::elementwise::BinOp;
    use half::f16;
    use std::arch::x86_64::*;

    /// Vectors per block: a step is dispatched once per `U` vectors (8 x 8 lanes: 32 elements
    /// took 8% longer than 64 on fp16 RMSNorm 1x16x256 with AVX2: the dispatch is most of a
    /// block's instructions; AVX-512's 32 registers hold 8 x 16 lanes of two operands and
    /// the running value, so a dispatch serves 128 elements there).
    const U: usize = 8;

    /// An operand's values from the element under a block's first output on.
    #[derive(Clone, Copy)]
    pub(super) enum Data<'a> {
        F32(&'a [f32]),
        F16(&'a [f16]),
        Bf16(&'a [u16]),
    }

    /// One operand over a block of rows of `w` elements: row `j` is `w` elements from
    /// `data[j * stride..]`, or the one value `data[j * stride]` where `splat`.
    #[derive(Clone, Copy)]
    pub(super) struct RowsOpd<'a> {
        pub data: Data<'a>,
        pub stride: usize,
        pub splat: bool,
    }

    pub(super) enum RowDst<'a> {
        F16(&'a mut [f16]),
        Bf16(&'a mut [u16]),
    }

    /// Raw form of a row operand inside a block (lengths checked by `rows_kernel`).
    #[derive(Clone, Copy)]
    enum Ptr {
        F32(*const f32),
        F16(*const f16),
        Bf16(*const u16),
        Splat,
    }

    #[derive(Clone, Copy)]
    enum Out {
        F16(*mut f16),
        Bf16(*mut u16),
    }

    /// A vector of `L` f32 lanes and the operations of a chain on it, the same per lane at
    /// either width (the conversions are F16C's and `round_bf16_*`'s in both). The methods
    /// inline into the `#[target_feature]` kernels below, which provide their features.
    ///
    /// # Safety
    /// Every method needs its width's features (AVX2, FMA, F16C; AVX-512F besides for
    /// `__m512`); loads and stores read or write `L` elements at the pointer.
    trait Lanes: Copy {
        const L: usize;
        unsafe fn splat(v: f32) -> Self;
        unsafe fn load_f32(p: *const f32) -> Self;
        unsafe fn load_f16(p: *const f16) -> Self;
        /// bf16 bits to f32. A signalling NaN stays signalling here where
        /// `convert::bf16_to_f32` quiets it: every use quiets it the same way (an arithmetic
        /// step, or the rounding and narrowing below), so the results are the same.
        unsafe fn load_bf16(p: *const u16) -> Self;
        unsafe fn bin(op: BinOp, a: Self, b: Self) -> Self;
        /// `1 / sqrt(v)` (two roundings).
        unsafe fn rsqrt(v: Self) -> Self;
        /// `t = if v < lo { lo } else { v }; if t > hi { hi } else { t }`: ordered compares
        /// are false on NaN, which stays.
        unsafe fn clamp(v: Self, lo: f32, hi: f32) -> Self;
        /// Rounded to fp16 (nearest even) and back.
        unsafe fn round_f16(v: Self) -> Self;
        /// Rounded to bf16 (`round_bf16_*`: low half zero).
        unsafe fn round_bf16(v: Self) -> Self;
        unsafe fn store_f16(p: *mut f16, v: Self);
        unsafe fn store_bf16(p: *mut u16, v: Self);
    }

    impl Lanes for __m256 {
        const L: usize = 8;
        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            _mm256_set1_ps(v)
        }
        #[inline(always)]
        unsafe fn load_f32(p: *const f32) -> Self {
            // SAFETY: the trait's contract.
            unsafe { _mm256_loadu_ps(p) }
        }
        #[inline(always)]
        unsafe fn load_f16(p: *const f16) -> Self {
            // SAFETY: the trait's contract.
            unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
        }
        #[inline(always)]
        unsafe fn load_bf16(p: *const u16) -> Self {
            // SAFETY: the trait's contract.
            let h = unsafe { _mm_loadu_si128(p as *const __m128i) };
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
        }
        #[inline(always)]
        unsafe fn bin(op: BinOp, a: Self, b: Self) -> Self {
            match op {
                BinOp::Add => _mm256_add_ps(a, b),
                BinOp::Sub => _mm256_sub_ps(a, b),
                BinOp::Mul => _mm256_mul_ps(a, b),
                BinOp::Div => _mm256_div_ps(a, b),
            }
        }
        #[inline(always)]
        unsafe fn rsqrt(v: Self) -> Self {
            _mm256_div_ps(_mm256_set1_ps(1.0), _mm256_sqrt_ps(v))
        }
        #[inline(always)]
        unsafe fn clamp(v: Self, lo: f32, hi: f32) -> Self {
            let (lo, hi) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
            let t = _mm256_blendv_ps(v, lo, _mm256_cmp_ps::<_CMP_LT_OQ>(v, lo));
            _mm256_blendv_ps(t, hi, _mm256_cmp_ps::<_CMP_GT_OQ>(t, hi))
        }
        #[inline(always)]
        unsafe fn round_f16(v: Self) -> Self {
            _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
        }
        #[inline(always)]
        unsafe fn round_bf16(v: Self) -> Self {
            _mm256_castsi256_ps(round_bf16_8(v))
        }
        #[inline(always)]
        unsafe fn store_f16(p: *mut f16, v: Self) {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
            // SAFETY: the trait's contract.
            unsafe { _mm_storeu_si128(p as *mut __m128i, h) }
        }
        #[inline(always)]
        unsafe fn store_bf16(p: *mut u16, v: Self) {
            let b = _mm256_srli_epi32::<16>(round_bf16_8(v));
            let q = _mm256_permute4x64_epi64::<0b1000>(_mm256_packus_epi32(b, b));
            // SAFETY: the trait's contract.
            unsafe { _mm_storeu_si128(p as *mut __m128i, _mm256_castsi256_si128(q)) }
        }
    }

    impl Lanes for __m512 {
        const L: usize = 16;
        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            _mm512_set1_ps(v)
        }
        #[inline(always)]
        unsafe fn load_f32(p: *const f32) -> Self {
            // SAFETY: the trait's contract.
            unsafe { _mm512_loadu_ps(p) }
        }
        #[inline(always)]
        unsafe fn load_f16(p: *const f16) -> Self {
            // SAFETY: the trait's contract.
            unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
        }
        #[inline(always)]
        unsafe fn load_bf16(p: *const u16) -> Self {
            // SAFETY: the trait's contract.
            let h = unsafe { _mm256_loadu_si256(p as *const __m256i) };
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
        }
        #[inline(always)]
        unsafe fn bin(op: BinOp, a: Self, b: Self) -> Self {
            match op {
                BinOp::Add => _mm512_add_ps(a, b),
                BinOp::Sub => _mm512_sub_ps(a, b),
                BinOp::Mul => _mm512_mul_ps(a, b),
                BinOp::Div => _mm512_div_ps(a, b),
            }
        }
        #[inline(always)]
        unsafe fn rsqrt(v: Self) -> Self {
            _mm512_div_ps(_mm512_set1_ps(1.0), _mm512_sqrt_ps(v))
        }
        #[inline(always)]
        unsafe fn clamp(v: Self, lo: f32, hi: f32) -> Self {
            let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
            let t = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, lo), v, lo);
            _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(t, hi), t, hi)
        }
        #[inline(always)]
        unsafe fn round_f16(v: Self) -> Self {
            _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
        }
        #[inline(always)]
        unsafe fn round_bf16(v: Self) -> Self {
            _mm512_castsi512_ps(round_bf16_16(v))
        }
        #[inline(always)]
        unsafe fn store_f16(p: *mut f16, v: Self) {
            let h = _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
            // SAFETY: the trait's contract.
            unsafe { _mm256_storeu_si256(p as *mut __m256i, h) }
        }
        #[inline(always)]
        unsafe fn store_bf16(p: *mut u16, v: Self) {
            // The high halves, narrowed by truncation (`vpmovdw`).
            let b = _mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(round_bf16_16(v)));
            // SAFETY: the trait's contract.
            unsafe { _mm256_storeu_si256(p as *mut __m256i, b) }
        }
    }

    /// Rows of a chain into `dst` (`rows` rows, `dst.len() / rows` elements each), 8 lanes
    /// at a time.
    ///
    /// # Safety
    /// AVX2, FMA and F16C available.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn rows_avx2(steps: &[ChainStep], ops: &[RowsOpd], rows: usize, dst: RowDst) {
        // SAFETY: the features `__m256`'s methods need are enabled here.
        unsafe { rows_kernel::<__m256>(steps, ops, rows, dst) }
    }

    /// [`rows_avx2`] 16 lanes at a time.
    ///
    /// # Safety
    /// AVX-512F, AVX2, FMA and F16C available.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn rows_avx512(steps: &[ChainStep], ops: &[RowsOpd], rows: usize, dst: RowDst) {
        // SAFETY: the features `__m512`'s methods need are enabled here.
        unsafe { rows_kernel::<__m512>(steps, ops, rows, dst) }
    }

    /// Rows of a chain: every operand's bounds checked once for the whole block, then a
    /// [`row`] per row with the operands' pointers moved on by their strides (and a per-row
    /// value widened again only where it changes per row).
    ///
    /// # Safety
    /// `V`'s features available.
    #[inline(always)]
    unsafe fn rows_kernel<V: Lanes>(steps: &[ChainStep], ops: &[RowsOpd], rows: usize, dst: RowDst) {
        let n = match &dst {
            RowDst::F16(o) => o.len(),
            RowDst::Bf16(o) => o.len(),
        };
        if rows == 0 || n == 0 {
            return;
        }
        let w = n / rows;
        // Every element a row reads lies in its operand's slice. (Steps reading an operand the
        // block lacks: `chain_narrow` refuses them once per call, and `block`'s `ptr[k]` is a
        // checked index besides.)
        let fits = |o: &RowsOpd| {
            let len = match o.data {
                Data::F32(x) => x.len(),
                Data::F16(x) => x.len(),
                Data::Bf16(x) => x.len(),
            };
            let last = (rows - 1).checked_mul(o.stride).and_then(|e| e.checked_add(if o.splat { 1 } else { w }));
            last.is_some_and(|e| e <= len)
        };
        assert!(ops.len() <= CHAIN_ARGS && n == rows * w && ops.iter().all(fits), "chain rows operands");
        let na = ops.len();
        let pair = Pair::of(steps);
        // SAFETY: the caller's contract (`V`'s features).
        let mut splat = [unsafe { V::splat(0.0) }; CHAIN_ARGS];
        let mut ptr = [Ptr::Splat; CHAIN_ARGS];
        let out = match dst {
            RowDst::F16(o) => Out::F16(o.as_mut_ptr()),
            RowDst::Bf16(o) => Out::Bf16(o.as_mut_ptr()),
        };
        for j in 0..rows {
            for ((o, s), p) in ops.iter().zip(&mut splat).zip(&mut ptr) {
                if j > 0 && o.stride == 0 {
                    continue;
                }
                let at = j * o.stride;
                // Checked indexing (within the slices by `fits`): once per operand and row.
                // A per-row value widened exactly (a NaN quieted as F16C quiets it).
                let v = match (o.data, o.splat) {
                    (Data::F32(x), false) => {
                        *p = Ptr::F32(x[at..at + w].as_ptr());
                        continue;
                    }
                    (Data::F16(x), false) => {
                        *p = Ptr::F16(x[at..at + w].as_ptr());
                        continue;
                    }
                    (Data::Bf16(x), false) => {
                        *p = Ptr::Bf16(x[at..at + w].as_ptr());
                        continue;
                    }
                    (Data::F32(x), true) => x[at],
                    (Data::F16(x), true) => x[at].to_f32(),
                    (Data::Bf16(x), true) => f32::from_bits((x[at] as u32) << 16),
                };
                // SAFETY: the caller's contract (`V`'s features).
                *s = unsafe { V::splat(v) };
            }
            let o = match out {
                // SAFETY: row j's w elements are within `dst` (n = rows * w).
                Out::F16(p) => Out::F16(unsafe { p.add(j * w) }),
                // SAFETY: as above.
                Out::Bf16(p) => Out::Bf16(unsafe { p.add(j * w) }),
            };
            // SAFETY: every pointer holds w elements from its row's start (above).
            unsafe { row::<V>(steps, pair, &ptr[..na], &splat, w, o) };
        }
    }

    /// One row of `w` elements: blocks of `U` vectors, a half block, single vectors, then the
    /// last partial vector through padded copies.
    ///
    /// # Safety
    /// `V`'s features available; every non-splat pointer and `out` valid for `w` elements.
    #[inline(always)]
    unsafe fn row<V: Lanes>(
        steps: &[ChainStep],
        pair: Option<Pair>,
        ptr: &[Ptr],
        splat: &[V; CHAIN_ARGS],
        w: usize,
        out: Out,
    ) {
        let l = V::L;
        let full = w - w % (l * U);
        let mut i = 0;
        while i < full {
            // SAFETY: i + U * L <= w, the caller's contract.
            unsafe { run_block::<V, U>(steps, pair, ptr, splat, i, out) };
            i += l * U;
        }
        // The rest half a block, then a vector at a time, in place (rows of 64 at 16 lanes
        // in one dispatch per step, not four).
        if i + l * (U / 2) <= w {
            // SAFETY: i + U / 2 * L <= w, as above.
            unsafe { run_block::<V, { U / 2 }>(steps, pair, ptr, splat, i, out) };
            i += l * (U / 2);
        }
        while i + l <= w {
            // SAFETY: i + L <= w, as above.
            unsafe { run_block::<V, 1>(steps, pair, ptr, splat, i, out) };
            i += l;
        }
        if i == w {
            return;
        }
        // The last partial vector through zero-padded copies (padding lanes are computed and
        // dropped; no FP exception traps).
        const MAX_L: usize = 16;
        let m = w - i;
        let (mut f, mut h) = ([[0f32; MAX_L]; CHAIN_ARGS], [[0u16; MAX_L]; CHAIN_ARGS]);
        let mut tp = [Ptr::Splat; CHAIN_ARGS];
        for (k, (t, p)) in tp.iter_mut().zip(ptr).enumerate() {
            // SAFETY: elements i..w of each dense operand are valid (the caller's contract);
            // f16 is a u16 (`repr(transparent)`).
            *t = unsafe {
                match *p {
                    Ptr::F32(x) => {
                        std::ptr::copy_nonoverlapping(x.add(i), f[k].as_mut_ptr(), m);
                        Ptr::F32(f[k].as_ptr())
                    }
                    Ptr::F16(x) => {
                        std::ptr::copy_nonoverlapping(x.add(i) as *const u16, h[k].as_mut_ptr(), m);
                        Ptr::F16(h[k].as_ptr() as *const f16)
                    }
                    Ptr::Bf16(x) => {
                        std::ptr::copy_nonoverlapping(x.add(i), h[k].as_mut_ptr(), m);
                        Ptr::Bf16(h[k].as_ptr())
                    }
                    Ptr::Splat => Ptr::Splat,
                }
            };
        }
        let mut o = [0u16; MAX_L];
        let tout = match out {
            Out::F16(_) => Out::F16(o.as_mut_ptr() as *mut f16),
            Out::Bf16(_) => Out::Bf16(o.as_mut_ptr()),
        };
        // SAFETY: every padded buffer holds MAX_L >= L elements.
        unsafe { run_block::<V, 1>(steps, pair, &tp[..ptr.len()], splat, 0, tout) };
        // SAFETY: `out` holds w = i + m elements (the caller's contract).
        unsafe {
            match out {
                Out::F16(p) => std::ptr::copy_nonoverlapping(o.as_ptr() as *const f16, p.add(i), m),
                Out::Bf16(p) => std::ptr::copy_nonoverlapping(o.as_ptr(), p.add(i), m),
            }
        }
    }

    /// A chain of two products, the first of two operands, the second of its result and a
    /// third operand, each optionally rounded to fp16/bf16: RMSNorm's `x * r * w` after its
    /// square-mean (`[x * r, round, acc * w, round]`). [`block_pair`] runs it without
    /// dispatching steps, where [`block`] dispatches each step per block (about 4
    /// instructions per element on fp16 RMSNorm 1x16x256, callgrind, AVX2).
    #[derive(Clone, Copy)]
    struct Pair {
        a: usize,
        b: usize,
        round1: Option<Narrow>,
        c: usize,
        /// The first product is the second's left operand (else its right).
        acc_left: bool,
        round2: Option<Narrow>,
    }

    impl Pair {
        fn of(steps: &[ChainStep]) -> Option<Pair> {
            fn round(s: &[ChainStep]) -> (Option<Narrow>, &[ChainStep]) {
                match s.split_first() {
                    Some((&ChainStep::Round(t), rest)) => (Some(t), rest),
                    _ => (None, s),
                }
            }
            let (&ChainStep::Bin { op: BinOp::Mul, a: Src::Arg(a), b: Src::Arg(b) }, rest) = steps.split_first()?
            else {
                return None;
            };
            let (round1, rest) = round(rest);
            let (c, acc_left) = match *rest.first()? {
                ChainStep::Bin { op: BinOp::Mul, a: Src::Acc, b: Src::Arg(c) } => (c, true),
                ChainStep::Bin { op: BinOp::Mul, a: Src::Arg(c), b: Src::Acc } => (c, false),
                _ => return None,
            };
            let (round2, rest) = round(&rest[1..]);
            rest.is_empty().then_some(Pair { a, b, round1, c, acc_left, round2 })
        }
    }

    /// Where a [`block_pair`] operand's vectors come from, fixed at compile time so that the
    /// per-vector loop has no dispatch.
    trait Source<V>: Copy {
        /// The vector at element `i`.
        ///
        /// # Safety
        /// `V`'s features available; a pointer valid for `i + L` elements.
        unsafe fn at(self, i: usize) -> V;
    }

    #[derive(Clone, Copy)]
    struct Dense32(*const f32);
    #[derive(Clone, Copy)]
    struct Dense16(*const f16);
    #[derive(Clone, Copy)]
    struct DenseBf16(*const u16);
    #[derive(Clone, Copy)]
    struct Same<V>(V);

    impl<V: Lanes> Source<V> for Dense32 {
        #[inline(always)]
        unsafe fn at(self, i: usize) -> V {
            // SAFETY: the trait's contract.
            unsafe { V::load_f32(self.0.add(i)) }
        }
    }
    impl<V: Lanes> Source<V> for Dense16 {
        #[inline(always)]
        unsafe fn at(self, i: usize) -> V {
            // SAFETY: the trait's contract.
            unsafe { V::load_f16(self.0.add(i)) }
        }
    }
    impl<V: Lanes> Source<V> for DenseBf16 {
        #[inline(always)]
        unsafe fn at(self, i: usize) -> V {
            // SAFETY: the trait's contract.
            unsafe { V::load_bf16(self.0.add(i)) }
        }
    }
    impl<V: Lanes> Source<V> for Same<V> {
        #[inline(always)]
        unsafe fn at(self, _: usize) -> V {
            self.0
        }
    }

    /// [`block_pair`] where the chain is a [`Pair`], else [`block`].
    ///
    /// # Safety
    /// As [`block`].
    #[inline(always)]
    unsafe fn run_block<V: Lanes, const N: usize>(
        steps: &[ChainStep],
        pair: Option<Pair>,
        ptr: &[Ptr],
        splat: &[V; CHAIN_ARGS],
        i: usize,
        out: Out,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            if !pair.is_some_and(|p| block_pair::<V, N>(p, ptr, splat, i, out)) {
                block::<V, N>(steps, ptr, splat, i, out);
            }
        }
    }

    /// [`block`] for a [`Pair`] whose first operand is a dense fp16/bf16 row, second a
    /// per-row value and third a dense row (RMSNorm's `x`, `r` and `w`); `false` (nothing
    /// done) for other operands.
    ///
    /// # Safety
    /// As [`block`].
    #[inline(always)]
    unsafe fn block_pair<V: Lanes, const N: usize>(
        p: Pair,
        ptr: &[Ptr],
        splat: &[V; CHAIN_ARGS],
        i: usize,
        out: Out,
    ) -> bool {
        let r = Same(splat[p.b]);
        // SAFETY: the caller's contract.
        unsafe {
            match (ptr[p.a], ptr[p.b], ptr[p.c]) {
                (Ptr::F16(x), Ptr::Splat, Ptr::F32(w)) => {
                    pair_loop::<V, N, _, _, _>(p, Dense16(x), r, Dense32(w), i, out)
                }
                (Ptr::F16(x), Ptr::Splat, Ptr::F16(w)) => {
                    pair_loop::<V, N, _, _, _>(p, Dense16(x), r, Dense16(w), i, out)
                }
                (Ptr::Bf16(x), Ptr::Splat, Ptr::F32(w)) => {
                    pair_loop::<V, N, _, _, _>(p, DenseBf16(x), r, Dense32(w), i, out)
                }
                (Ptr::Bf16(x), Ptr::Splat, Ptr::Bf16(w)) => {
                    pair_loop::<V, N, _, _, _>(p, DenseBf16(x), r, DenseBf16(w), i, out)
                }
                _ => return false,
            }
        }
        true
    }

    /// The vectors of a [`Pair`]'s block: step by step over all `N` vectors (independent
    /// work between the dependent steps), the steps' operations in their order (so the same
    /// bits as [`block`]), then the narrowed stores.
    ///
    /// # Safety
    /// As [`block`].
    #[inline(always)]
    unsafe fn pair_loop<V: Lanes, const N: usize, A: Source<V>, B: Source<V>, C: Source<V>>(
        p: Pair,
        a: A,
        b: B,
        c: C,
        i: usize,
        out: Out,
    ) {
        // Plain loops, not closures: a closure would be compiled apart from the caller's
        // target features.
        // SAFETY: the caller's contract: `V`'s features available, every pointer valid for
        // `i + N * L` elements.
        unsafe {
            let mut v = [V::splat(0.0); N];
            for (u, x) in v.iter_mut().enumerate() {
                let at = i + u * V::L;
                *x = V::bin(BinOp::Mul, a.at(at), b.at(at));
            }
            for (t, second) in [(p.round1, false), (p.round2, true)] {
                if second {
                    for (u, x) in v.iter_mut().enumerate() {
                        let z = c.at(i + u * V::L);
                        *x = if p.acc_left { V::bin(BinOp::Mul, *x, z) } else { V::bin(BinOp::Mul, z, *x) };
                    }
                }
                match t {
                    None => {}
                    Some(Narrow::F16) => {
                        for x in v.iter_mut() {
                            *x = V::round_f16(*x);
                        }
                    }
                    Some(Narrow::Bf16) => {
                        for x in v.iter_mut() {
                            *x = V::round_bf16(*x);
                        }
                    }
                }
            }
            for (u, x) in v.iter().enumerate() {
                let at = i + u * V::L;
                match out {
                    Out::F16(o) => V::store_f16(o.add(at), *x),
                    Out::Bf16(o) => V::store_bf16(o.add(at), *x),
                }
            }
        }
    }

    /// `N` vectors of an operand from element `i` on, widened.
    ///
    /// # Safety
    /// `V`'s features available; a non-splat pointer valid for `i + N * L` elements.
    #[inline(always)]
    unsafe fn load<V: Lanes, const N: usize>(p: Ptr, splat: V, i: usize) -> [V; N] {
        let mut v = [splat; N];
        for (u, r) in v.iter_mut().enumerate() {
            let at = i + u * V::L;
            // SAFETY: the caller's contract (`at + L <= i + N * L`).
            *r = unsafe {
                match p {
                    Ptr::F32(x) => V::load_f32(x.add(at)),
                    Ptr::F16(x) => V::load_f16(x.add(at)),
                    Ptr::Bf16(x) => V::load_bf16(x.add(at)),
                    Ptr::Splat => splat,
                }
            };
        }
        v
    }

    /// Elements `i..i + N * L` of a row: every step on operands loaded (and widened) as the
    /// step reads them, then the narrowed store. Inlined into the `row_*` kernels, whose
    /// target features it uses.
    ///
    /// # Safety
    /// `V`'s features available; every non-splat pointer and `out` valid for `i + N * L`
    /// elements; every `Src::Arg` of `steps` below `ptr.len()`.
    #[inline(always)]
    unsafe fn block<V: Lanes, const N: usize>(
        steps: &[ChainStep],
        ptr: &[Ptr],
        splat: &[V; CHAIN_ARGS],
        i: usize,
        out: Out,
    ) {
        // SAFETY: the caller's contract (`V`'s features), as for every `V` method below.
        let mut acc = [unsafe { V::splat(0.0) }; N];
        macro_rules! src {
            ($s:expr) => {
                match $s {
                    Src::Acc => acc,
                    // SAFETY: the caller's contract.
                    Src::Arg(k) => unsafe { load::<V, N>(ptr[k], splat[k], i) },
                }
            };
        }
        macro_rules! each {
            (|$u:ident| $e:expr) => {
                for $u in 0..N {
                    // SAFETY: the caller's contract (`V`'s features).
                    acc[$u] = unsafe { $e };
                }
            };
        }
        for s in steps {
            match *s {
                ChainStep::Bin { op, a, b } => {
                    let (x, y) = (src!(a), src!(b));
                    match op {
                        BinOp::Add => each!(|u| V::bin(BinOp::Add, x[u], y[u])),
                        BinOp::Sub => each!(|u| V::bin(BinOp::Sub, x[u], y[u])),
                        BinOp::Mul => each!(|u| V::bin(BinOp::Mul, x[u], y[u])),
                        BinOp::Div => each!(|u| V::bin(BinOp::Div, x[u], y[u])),
                    }
                }
                ChainStep::Square(a) => {
                    let x = src!(a);
                    each!(|u| V::bin(BinOp::Mul, x[u], x[u]));
                }
                ChainStep::Rsqrt(a) => {
                    let x = src!(a);
                    each!(|u| V::rsqrt(x[u]));
                }
                ChainStep::Copy(a) => acc = src!(a),
                ChainStep::Clamp { lo, hi } => each!(|u| V::clamp(acc[u], lo, hi)),
                ChainStep::Round(Narrow::F16) => each!(|u| V::round_f16(acc[u])),
                ChainStep::Round(Narrow::Bf16) => each!(|u| V::round_bf16(acc[u])),
            }
        }
        for (u, a) in acc.iter().enumerate() {
            match out {
                // SAFETY: the caller's contract, as for the loads.
                Out::F16(o) => unsafe { V::store_f16(o.add(i + u * V::L), *a) },
                // SAFETY: as above.
                Out::Bf16(o) => unsafe { V::store_bf16(o.add(i + u * V::L), *a) },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::simd::{self, available_isas, BinOp};
    use half::bf16;

    /// The tiled path's arithmetic, element by element: operands widened by the unfused
    /// conversions, `chain_rows` (its `Round` steps), the output narrowed by them.
    fn tiled(
        isa: Isa,
        steps: &[ChainStep],
        opds: &[NarrowOpd],
        lay: &ChainLayout,
        f16_out: bool,
        n: usize,
    ) -> Vec<u16> {
        let wide: Vec<Vec<f32>> = opds
            .iter()
            .map(|o| match o {
                NarrowOpd::F32(x) => x.to_vec(),
                NarrowOpd::F16(x) => {
                    let mut w = vec![0f32; x.len()];
                    simd::f16_to_f32(isa, x, &mut w);
                    w
                }
                NarrowOpd::Bf16(x) => {
                    let mut w = vec![0f32; x.len()];
                    simd::bf16_to_f32(isa, x, &mut w);
                    w
                }
            })
            .collect();
        let args: Vec<&[f32]> = wide.iter().map(|w| &w[..]).collect();
        let mut o = vec![0f32; n];
        simd::chain_rows(isa, steps, &args, &[0; CHAIN_ARGS], lay, 0, &mut o, isa);
        if f16_out {
            let mut h = vec![f16::ZERO; n];
            simd::f32_to_f16(isa, &o, &mut h);
            h.iter().map(|v| v.to_bits()).collect()
        } else {
            let mut b = vec![0u16; n];
            simd::f32_to_bf16(isa, &o, &mut b);
            b
        }
    }

    /// Values that test each conversion: NaNs (quiet, signalling, negative, largest payload),
    /// infinities, signed zeros, subnormals of both types, fp16's overflow edge (65504, 65520),
    /// bf16 and fp16 rounding ties, and ordinary values.
    fn specials() -> Vec<f32> {
        let mut v = vec![
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7f80_0001),
            f32::from_bits(0xffff_ffff),
            f32::from_bits(0xff80_0001),
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            65504.0,
            65519.0,
            65520.0,
            -65520.0,
            5.960_464_5e-8,
            2.980_232_2e-8,
            6.097_555e-5,
            1.0e-40,
            f32::MAX,
            f32::from_bits(0x3f80_8000),
            f32::from_bits(0x3f81_8000),
            1.0 + 2f32.powi(-11),
            1.0 + 3.0 * 2f32.powi(-11),
        ];
        let mut s = 0x2545_f491u32;
        for _ in 0..42 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            v.push((s >> 8) as f32 / (1u32 << 22) as f32 - 2.0);
        }
        v
    }

    #[test]
    fn register_chains_give_the_tiled_paths_bits() {
        let sp = specials();
        let src = [Src::Acc, Src::Arg(0), Src::Arg(1), Src::Arg(2)];
        let ops = [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div];
        // Output [rows, d] with a dense operand, a per-row scalar [rows, 1] and a row [d].
        // With `outer` > 1 the row operand is [rows, d] (broadcast over the outer dim), so the
        // dims do not merge and blocks of rows stop at the outer dim's carries.
        for (outer, rows, d) in [(1usize, 3usize, 37usize), (1, 2, 64), (1, 1, 5), (1, 4, 1), (2, 3, 37), (3, 2, 130)] {
            let n = outer * rows * d;
            let wd = if outer > 1 { rows * d } else { d };
            let ws: &[usize] = if outer > 1 { &[rows, d] } else { &[d] };
            let lay = crate::runtime::kernels::fused::chain_layout(
                &[outer, rows, d],
                &[&[outer, rows, d], &[outer, rows, 1], ws],
            )
            .unwrap();
            let x: Vec<f32> = (0..n).map(|i| sp[(i * 7 + rows) % sp.len()]).collect();
            let r: Vec<f32> = (0..outer * rows).map(|i| sp[(i * 5 + 3) % sp.len()]).collect();
            let w: Vec<f32> = (0..wd).map(|i| sp[(i * 11 + 1) % sp.len()]).collect();
            let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
            let xb: Vec<u16> = x.iter().map(|&v| bf16::from_f32(v).to_bits()).collect();
            // RMSNorm's `x * r * w` in the forms `block_pair` takes (the last rounding
            // dropped for an fp16 output, the product's operands either way), then one whose
            // first product does not start with the dense operand (the general block's).
            let mul = |a, b| ChainStep::Bin { op: BinOp::Mul, a, b };
            let (x_, r_, w_) = (Src::Arg(0), Src::Arg(1), Src::Arg(2));
            let pairs = |t| {
                vec![
                    vec![mul(x_, r_), ChainStep::Round(t), mul(Src::Acc, w_)],
                    vec![mul(x_, r_), ChainStep::Round(t), mul(w_, Src::Acc), ChainStep::Round(t)],
                    vec![mul(x_, r_), mul(Src::Acc, w_), ChainStep::Round(t)],
                    vec![mul(r_, x_), ChainStep::Round(t), mul(Src::Acc, w_)],
                ]
            };
            let mut chains: Vec<(Narrow, Vec<ChainStep>)> = Vec::new();
            for k in 0..96usize {
                // Three or four steps drawn from every kind, each round after a node.
                let narrow = if k % 2 == 0 { Narrow::F16 } else { Narrow::Bf16 };
                let first = ChainStep::Bin { op: ops[k % 4], a: src[1 + k % 3], b: src[1 + (k / 3) % 3] };
                let second = match k % 6 {
                    0 => ChainStep::Rsqrt(Src::Acc),
                    1 => ChainStep::Square(Src::Acc),
                    // Bounds of either zero's sign too: `<` and `>` keep the other zero.
                    2 if k % 4 == 0 => ChainStep::Clamp { lo: 0.0, hi: 0.75 },
                    2 => ChainStep::Clamp { lo: -1.5, hi: -0.0 },
                    3 => ChainStep::Copy(Src::Arg(2)),
                    _ => ChainStep::Bin { op: ops[(k / 4) % 4], a: src[(k / 2) % 4], b: Src::Acc },
                };
                let third = ChainStep::Bin { op: ops[(k / 7) % 4], a: Src::Acc, b: src[1 + k % 3] };
                chains.push((narrow, vec![first, ChainStep::Round(narrow), second, ChainStep::Round(narrow), third]));
            }
            for t in [Narrow::F16, Narrow::Bf16] {
                chains.extend(pairs(t).into_iter().map(|c| (t, c)));
            }
            for isa in available_isas().into_iter().filter(|&i| narrow_chain_available(i)) {
                for (narrow, steps) in &chains {
                    let (narrow, steps) = (*narrow, steps.as_slice());
                    let dense = match narrow {
                        Narrow::F16 => NarrowOpd::F16(&xh),
                        Narrow::Bf16 => NarrowOpd::Bf16(&xb),
                    };
                    let opds = [dense, NarrowOpd::F32(&r), NarrowOpd::F32(&w)];
                    let want = tiled(isa, steps, &opds, &lay, narrow == Narrow::F16, n);
                    // Whole, and in chunks starting inside rows (as the pool splits it).
                    for chunk in [n, 7, 1] {
                        let got: Vec<u16> = match narrow {
                            Narrow::F16 => {
                                let mut g = vec![f16::ZERO; n];
                                for (c, part) in g.chunks_mut(chunk).enumerate() {
                                    chain_narrow(isa, steps, &opds, &lay, c * chunk, NarrowDst::F16(part));
                                }
                                g.iter().map(|v| v.to_bits()).collect()
                            }
                            Narrow::Bf16 => {
                                let mut g = vec![0u16; n];
                                for (c, part) in g.chunks_mut(chunk).enumerate() {
                                    chain_narrow(isa, steps, &opds, &lay, c * chunk, NarrowDst::Bf16(part));
                                }
                                g
                            }
                        };
                        // NaN only with NaN: which operand's payload an IEEE operation keeps
                        // is not part of its result (the compiler may swap a commutative one's).
                        let nan = |b: u16| match narrow {
                            Narrow::F16 => b & 0x7fff > 0x7c00,
                            Narrow::Bf16 => b & 0x7fff > 0x7f80,
                        };
                        let same = got.iter().zip(&want).all(|(&g, &w)| g == w || (nan(g) && nan(w)));
                        assert!(
                            same,
                            "{} [{outer}, {rows}, {d}] in chunks of {chunk}: {steps:?}\n{got:?}\n{want:?}",
                            isa.name()
                        );
                    }
                }
            }
        }
    }
}
