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
    rows(steps, opds, lay, start, out);
}

/// [`chain_narrow`]'s walk over the rows of its chunk, a call of the row kernel per row.
#[cfg(target_arch = "x86_64")]
fn rows(steps: &[ChainStep], opds: &[NarrowOpd], lay: &ChainLayout, start: usize, mut out: NarrowDst) {
    let (r, na, n) = (lay.rank, opds.len(), out.len());
    assert!((1..=CHAIN_RANK).contains(&r) && na <= CHAIN_ARGS, "chain of rank {r} with {na} operands");
    let inner = lay.dims[r - 1];
    if inner == 0 || n == 0 {
        return;
    }
    // Per operand, its element under the current row's start (row-major odometer over the
    // outer dims, as `chain_rows` walks them).
    let (mut idx, mut off, mut col) = lay.position(na, start);
    let mut done = 0;
    while done < n {
        let w = (inner - col).min(n - done);
        let mut row = [x86::RowOpd::Splat(0.0); CHAIN_ARGS];
        for (a, (ro, &o)) in row.iter_mut().zip(opds).enumerate() {
            // Innermost strides are 0 (one value along the row) or 1 (`chain_layout`).
            let st = lay.st[a][r - 1];
            let at = off[a] + col * st;
            *ro = match (o, st) {
                (NarrowOpd::F32(x), 0) => x86::RowOpd::Splat(x[at]),
                (NarrowOpd::F32(x), _) => x86::RowOpd::F32(&x[at..at + w]),
                (NarrowOpd::F16(x), 0) => x86::RowOpd::SplatF16(x[at]),
                (NarrowOpd::F16(x), _) => x86::RowOpd::F16(&x[at..at + w]),
                (NarrowOpd::Bf16(x), 0) => x86::RowOpd::SplatBf16(x[at]),
                (NarrowOpd::Bf16(x), _) => x86::RowOpd::Bf16(&x[at..at + w]),
            };
        }
        let dst = match &mut out {
            NarrowDst::F16(o) => x86::RowDst::F16(&mut o[done..done + w]),
            NarrowDst::Bf16(o) => x86::RowDst::Bf16(&mut o[done..done + w]),
        };
        // SAFETY: `chain_narrow` asserted a non-scalar `Isa`, which exists only where AVX2, FMA
        // and F16C were detected; `row` checks its slices' lengths.
        unsafe { x86::row(steps, &row[..na], dst) };
        done += w;
        if col + w < inner {
            col += w;
            continue;
        }
        col = 0;
        lay.advance_rows(na, &mut idx, &mut off, 1);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Src;
    use super::{ChainStep, Narrow, CHAIN_ARGS};
    use crate::runtime::simd::convert::x86::round_bf16_8 as round_bf16;
    use crate::runtime::simd::elementwise::BinOp;
    use half::f16;
    use std::arch::x86_64::*;

    /// Lanes per vector, vectors per block: a step is dispatched once per 64 elements (32 took
    /// 8% longer on fp16 RMSNorm 1x16x256: the dispatch is most of a block's instructions).
    const L: usize = 8;
    const U: usize = 8;
    const B: usize = L * U;

    /// One operand over one row: `w` elements, or one value for the whole row.
    #[derive(Clone, Copy)]
    pub(super) enum RowOpd<'a> {
        F32(&'a [f32]),
        F16(&'a [f16]),
        Bf16(&'a [u16]),
        Splat(f32),
        SplatF16(f16),
        SplatBf16(u16),
    }

    pub(super) enum RowDst<'a> {
        F16(&'a mut [f16]),
        Bf16(&'a mut [u16]),
    }

    /// Raw form of a row operand inside a block (lengths checked by `row`).
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

    /// bf16 bits (zero-extended into 32-bit lanes) to f32. A signalling NaN stays signalling
    /// here where `convert::bf16_to_f32` quiets it: every use quiets it the same way (an
    /// arithmetic step, or the rounding and narrowing below), so the results are the same.
    #[inline(always)]
    unsafe fn widen_bf16(x: __m256i) -> __m256 {
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(x))
    }

    #[inline(always)]
    unsafe fn round_f16(v: __m256) -> __m256 {
        _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
    }

    /// One row of a chain into `dst`.
    ///
    /// # Safety
    /// AVX2, FMA and F16C available.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn row(steps: &[ChainStep], ops: &[RowOpd], dst: RowDst) {
        let w = match &dst {
            RowDst::F16(o) => o.len(),
            RowDst::Bf16(o) => o.len(),
        };
        let wide = |o: &RowOpd| match o {
            RowOpd::F32(s) => Some(s.len()),
            RowOpd::F16(s) => Some(s.len()),
            RowOpd::Bf16(s) => Some(s.len()),
            _ => None,
        };
        // (Steps reading an operand the row lacks: `chain_narrow` refuses them once per call,
        // and `block`'s `ptr[k]` is a checked index besides.)
        assert!(ops.len() <= CHAIN_ARGS && ops.iter().all(|o| wide(o).is_none_or(|l| l == w)), "chain row operands");
        let mut splat = [_mm256_setzero_ps(); CHAIN_ARGS];
        let mut ptr = [Ptr::Splat; CHAIN_ARGS];
        for ((o, s), p) in ops.iter().zip(&mut splat).zip(&mut ptr) {
            match *o {
                RowOpd::F32(x) => *p = Ptr::F32(x.as_ptr()),
                RowOpd::F16(x) => *p = Ptr::F16(x.as_ptr()),
                RowOpd::Bf16(x) => *p = Ptr::Bf16(x.as_ptr()),
                RowOpd::Splat(v) => *s = _mm256_set1_ps(v),
                RowOpd::SplatF16(h) => *s = _mm256_cvtph_ps(_mm_set1_epi16(h.to_bits() as i16)),
                RowOpd::SplatBf16(b) => *s = widen_bf16(_mm256_set1_epi32(b as i32)),
            }
        }
        let na = ops.len();
        let full = w - w % B;
        let out = match dst {
            RowDst::F16(o) => Out::F16(o.as_mut_ptr()),
            RowDst::Bf16(o) => Out::Bf16(o.as_mut_ptr()),
        };
        let mut i = 0;
        while i < full {
            // SAFETY: i + B <= w, and every pointer holds w elements (asserted above).
            unsafe { block::<U>(steps, &ptr[..na], &splat, i, out) };
            i += B;
        }
        // The rest a vector at a time, in place.
        while i + L <= w {
            // SAFETY: i + L <= w, as above.
            unsafe { block::<1>(steps, &ptr[..na], &splat, i, out) };
            i += L;
        }
        if i == w {
            return;
        }
        // The last partial vector through zero-padded copies (padding lanes are computed and
        // dropped; no FP exception traps).
        let m = w - i;
        let (mut f, mut h) = ([[0f32; L]; CHAIN_ARGS], [[0u16; L]; CHAIN_ARGS]);
        for (k, o) in ops.iter().enumerate() {
            match *o {
                RowOpd::F32(x) => f[k][..m].copy_from_slice(&x[i..]),
                RowOpd::F16(x) => h[k][..m].iter_mut().zip(&x[i..]).for_each(|(d, s)| *d = s.to_bits()),
                RowOpd::Bf16(x) => h[k][..m].copy_from_slice(&x[i..]),
                _ => {}
            }
        }
        let mut tp = [Ptr::Splat; CHAIN_ARGS];
        for (k, (t, p)) in tp.iter_mut().zip(&ptr).take(na).enumerate() {
            *t = match p {
                Ptr::F32(_) => Ptr::F32(f[k].as_ptr()),
                Ptr::F16(_) => Ptr::F16(h[k].as_ptr() as *const f16),
                Ptr::Bf16(_) => Ptr::Bf16(h[k].as_ptr()),
                Ptr::Splat => Ptr::Splat,
            };
        }
        let mut o = [0u16; L];
        let tout = match out {
            Out::F16(_) => Out::F16(o.as_mut_ptr() as *mut f16),
            Out::Bf16(_) => Out::Bf16(o.as_mut_ptr()),
        };
        // SAFETY: every padded buffer holds L elements; f16 is a u16 (`repr(transparent)`).
        unsafe { block::<1>(steps, &tp[..na], &splat, 0, tout) };
        // SAFETY: `out` holds w = i + m elements (its slice's length).
        unsafe {
            match out {
                Out::F16(p) => std::ptr::copy_nonoverlapping(o.as_ptr() as *const f16, p.add(i), m),
                Out::Bf16(p) => std::ptr::copy_nonoverlapping(o.as_ptr(), p.add(i), m),
            }
        }
    }

    /// `N` vectors of an operand from element `i` on, widened.
    ///
    /// # Safety
    /// AVX2 and F16C available; a non-splat pointer valid for `i + N * L` elements.
    #[inline(always)]
    unsafe fn load<const N: usize>(p: Ptr, splat: __m256, i: usize) -> [__m256; N] {
        let mut v = [splat; N];
        for (u, r) in v.iter_mut().enumerate() {
            let at = i + u * L;
            // SAFETY: the caller's contract (`at + L <= i + N * L`).
            *r = unsafe {
                match p {
                    Ptr::F32(x) => _mm256_loadu_ps(x.add(at)),
                    Ptr::F16(x) => _mm256_cvtph_ps(_mm_loadu_si128(x.add(at) as *const __m128i)),
                    Ptr::Bf16(x) => widen_bf16(_mm256_cvtepu16_epi32(_mm_loadu_si128(x.add(at) as *const __m128i))),
                    Ptr::Splat => splat,
                }
            };
        }
        v
    }

    /// Elements `i..i + N * L` of a row: every step on operands loaded (and widened) as the
    /// step reads them, then the narrowed store. Inlined into `row`, whose target features it
    /// uses.
    ///
    /// # Safety
    /// AVX2, FMA and F16C available; every non-splat pointer and `out` valid for `i + N * L`
    /// elements; every `Src::Arg` of `steps` below `ptr.len()`.
    #[inline(always)]
    unsafe fn block<const N: usize>(
        steps: &[ChainStep],
        ptr: &[Ptr],
        splat: &[__m256; CHAIN_ARGS],
        i: usize,
        out: Out,
    ) {
        let mut acc = [_mm256_setzero_ps(); N];
        macro_rules! src {
            ($s:expr) => {
                match $s {
                    Src::Acc => acc,
                    // SAFETY: the caller's contract.
                    Src::Arg(k) => unsafe { load::<N>(ptr[k], splat[k], i) },
                }
            };
        }
        macro_rules! each {
            (|$u:ident| $e:expr) => {
                for $u in 0..N {
                    acc[$u] = $e;
                }
            };
        }
        for s in steps {
            match *s {
                ChainStep::Bin { op, a, b } => {
                    let (x, y) = (src!(a), src!(b));
                    match op {
                        BinOp::Add => each!(|u| _mm256_add_ps(x[u], y[u])),
                        BinOp::Sub => each!(|u| _mm256_sub_ps(x[u], y[u])),
                        BinOp::Mul => each!(|u| _mm256_mul_ps(x[u], y[u])),
                        BinOp::Div => each!(|u| _mm256_div_ps(x[u], y[u])),
                    }
                }
                ChainStep::Square(a) => {
                    let x = src!(a);
                    each!(|u| _mm256_mul_ps(x[u], x[u]));
                }
                ChainStep::Rsqrt(a) => {
                    let x = src!(a);
                    each!(|u| _mm256_div_ps(_mm256_set1_ps(1.0), _mm256_sqrt_ps(x[u])));
                }
                ChainStep::Copy(a) => acc = src!(a),
                ChainStep::Clamp { lo, hi } => {
                    // `t = if v < lo { lo } else { v }; if t > hi { hi } else { t }`: ordered
                    // compares are false on NaN, which stays.
                    let (lo, hi) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
                    each!(|u| {
                        let t = _mm256_blendv_ps(acc[u], lo, _mm256_cmp_ps::<_CMP_LT_OQ>(acc[u], lo));
                        _mm256_blendv_ps(t, hi, _mm256_cmp_ps::<_CMP_GT_OQ>(t, hi))
                    });
                }
                ChainStep::Round(Narrow::F16) => each!(|u| round_f16(acc[u])),
                ChainStep::Round(Narrow::Bf16) => {
                    each!(|u| _mm256_castsi256_ps(round_bf16(acc[u])))
                }
            }
        }
        for (u, a) in acc.iter().enumerate() {
            match out {
                // SAFETY: the caller's contract, as for the loads.
                Out::F16(o) => unsafe {
                    let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(*a);
                    _mm_storeu_si128(o.add(i + u * L) as *mut __m128i, h)
                },
                // SAFETY: as above.
                Out::Bf16(o) => unsafe {
                    let b = _mm256_srli_epi32::<16>(round_bf16(*a));
                    let p = _mm256_permute4x64_epi64::<0b1000>(_mm256_packus_epi32(b, b));
                    _mm_storeu_si128(o.add(i + u * L) as *mut __m128i, _mm256_castsi256_si128(p))
                },
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
        for (rows, d) in [(3usize, 37usize), (2, 64), (1, 5), (4, 1)] {
            let n = rows * d;
            let lay =
                crate::runtime::kernels::fused::chain_layout(&[rows, d], &[&[rows, d], &[rows, 1], &[d]]).unwrap();
            let x: Vec<f32> = (0..n).map(|i| sp[(i * 7 + rows) % sp.len()]).collect();
            let r: Vec<f32> = (0..rows).map(|i| sp[(i * 5 + 3) % sp.len()]).collect();
            let w: Vec<f32> = (0..d).map(|i| sp[(i * 11 + 1) % sp.len()]).collect();
            let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
            let xb: Vec<u16> = x.iter().map(|&v| bf16::from_f32(v).to_bits()).collect();
            for isa in available_isas().into_iter().filter(|&i| narrow_chain_available(i)) {
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
                    let steps = [first, ChainStep::Round(narrow), second, ChainStep::Round(narrow), third];
                    let dense = match narrow {
                        Narrow::F16 => NarrowOpd::F16(&xh),
                        Narrow::Bf16 => NarrowOpd::Bf16(&xb),
                    };
                    let opds = [dense, NarrowOpd::F32(&r), NarrowOpd::F32(&w)];
                    let want = tiled(isa, &steps, &opds, &lay, narrow == Narrow::F16, n);
                    // Whole, and in chunks starting inside rows (as the pool splits it).
                    for chunk in [n, 7, 1] {
                        let got: Vec<u16> = match narrow {
                            Narrow::F16 => {
                                let mut g = vec![f16::ZERO; n];
                                for (c, part) in g.chunks_mut(chunk).enumerate() {
                                    chain_narrow(isa, &steps, &opds, &lay, c * chunk, NarrowDst::F16(part));
                                }
                                g.iter().map(|v| v.to_bits()).collect()
                            }
                            Narrow::Bf16 => {
                                let mut g = vec![0u16; n];
                                for (c, part) in g.chunks_mut(chunk).enumerate() {
                                    chain_narrow(isa, &steps, &opds, &lay, c * chunk, NarrowDst::Bf16(part));
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
                            "{} [{rows}, {d}] in chunks of {chunk}: {steps:?}\n{got:?}\n{want:?}",
                            isa.name()
                        );
                    }
                }
            }
        }
    }
}
