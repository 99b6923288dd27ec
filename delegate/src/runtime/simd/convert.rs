//! Element type conversions: f32 <-> bf16 (bit-level), f32 <-> qs8, f32 <-> f16 (through
//! `half`, F16C when the CPU has it).

use super::isa::{multiversion, Isa};
use half::f16;

multiversion! {
    /// f32 -> bf16, round to nearest even; NaN becomes a quiet NaN (as `half` does).
    pub fn f32_to_bf16(x: &[f32], out: &mut [u16]) {
        let x = &x[..out.len()];
        for i in 0..out.len() {
            let b = x[i].to_bits();
            let nan = (b & 0x7fff_ffff) > 0x7f80_0000;
            // Wrapping: a negative NaN's bits can carry out (its result is the NaN branch's).
            let r = (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16;
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

/// f32 -> qs8: `clamp(round_half_even(x * inv_scale) + zp, -128, 127)`; NaN maps to `zp`.
/// With AVX2, 32 values per iteration with saturating packs (the plain loop's per-lane
/// narrowing took 3 instructions per value); the tail and the scalar path run the plain loop,
/// whose arithmetic the vector body repeats step by step.
pub fn quantize(isa: Isa, x: &[f32], inv_scale: f32, zp: i32, out: &mut [i8]) {
    let x = &x[..out.len()];
    #[cfg(target_arch = "x86_64")]
    if !isa.is_scalar() {
        let mut done = 0;
        if isa.level() == super::isa::Level::Avx512 {
            // SAFETY: an AVX-512 `Isa` proves AVX-512F and BW (run-time detection); `x` and
            // `out` have the same length.
            done = unsafe { x86::quantize_avx512(x, inv_scale, zp, out) };
        }
        // SAFETY: a non-scalar `Isa` proves AVX2; `x` and `out` have the same length.
        done += unsafe { x86::quantize_avx2(&x[done..], inv_scale, zp, &mut out[done..]) };
        return quantize_plain(isa, &x[done..], inv_scale, zp, &mut out[done..]);
    }
    quantize_plain(isa, x, inv_scale, zp, out)
}

multiversion! {
    /// [`quantize`] one value at a time.
    pub fn quantize_plain(x: &[f32], inv_scale: f32, zp: i32, out: &mut [i8]) {
        let x = &x[..out.len()];
        let zpf = (zp as f32).clamp(-128.0, 127.0);
        for i in 0..out.len() {
            // Rounding in f32 then adding the zero point keeps ties-to-even on the scaled value;
            // the clamp in f32 makes infinities saturate.
            let r = (x[i] * inv_scale).round_ties_even() + zpf;
            let r = if r.is_nan() { zpf } else { r.clamp(-128.0, 127.0) };
            // `r` is an integer in [-128, 127]: added to 1.5 * 2^23 it is the low bits of the
            // sum's mantissa, exactly. (`r as i8` would not vectorize: it saturates per lane.)
            out[i] = ((r + 12_582_912.0).to_bits() as i32 - 0x4b40_0000) as i8;
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
    /// f32 -> qs8 -> f32 in one pass, the int8 values never written: [`quantize`]'s value `r`
    /// with `inv_scale` and `zp` (an integer in [-128, 127], the clamped zero point for NaN),
    /// then [`dequantize`]'s `(r - back_zp) * scale`: `r - back_zp` is exact in f32 for
    /// `|back_zp| < 2^23`, as is the int32 difference `dequantize` converts, so the same bits.
    pub fn quantize_round_trip(x: &[f32], inv_scale: f32, zp: i32, scale: f32, back_zp: i32, out: &mut [f32]) {
        let x = &x[..out.len()];
        let zpf = (zp as f32).clamp(-128.0, 127.0);
        let zd = back_zp as f32;
        for i in 0..out.len() {
            let r = (x[i] * inv_scale).round_ties_even() + zpf;
            let r = if r.is_nan() { zpf } else { r.clamp(-128.0, 127.0) };
            out[i] = (r - zd) * scale;
        }
    }
}

/// f32 -> f16 (round to nearest even). Non-scalar paths use F16C's `vcvtps2ph` eight at a
/// time (the tail through a padded block); the scalar path converts element by element in
/// software (`half`). (`half`'s slice conversion detects F16C on every call and converts the
/// tail in software: a fifth of a small RMSNorm's time.)
pub fn f32_to_f16(isa: Isa, x: &[f32], out: &mut [f16]) {
    let x = &x[..out.len()];
    #[cfg(target_arch = "x86_64")]
    if !isa.is_scalar() {
        // SAFETY: a non-scalar `Isa` proves AVX2 and F16C (see `isa`); `x` and `out` have the
        // same length (sliced above), which is all the kernel assumes.
        return unsafe { x86::f32_to_f16_f16c(x, out) };
    }
    let _ = isa;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f16::from_f32(v);
    }
}

/// f16 -> f32 (exact); as [`f32_to_f16`], F16C's `vcvtph2ps` on the non-scalar paths.
pub fn f16_to_f32(isa: Isa, x: &[f16], out: &mut [f32]) {
    let x = &x[..out.len()];
    #[cfg(target_arch = "x86_64")]
    if !isa.is_scalar() {
        // SAFETY: as in `f32_to_f16`.
        return unsafe { x86::f16_to_f32_f16c(x, out) };
    }
    let _ = isa;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v.to_f32();
    }
}

/// The float type a value is rounded to after each op of an fp16/bf16 elementwise chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Narrow {
    F16,
    Bf16,
}

/// Rounds f32 values in place to `to` and back (exactly what narrowing them with
/// [`f32_to_f16`]/[`f32_to_bf16`] and widening with [`f16_to_f32`]/[`bf16_to_f32`] on the same
/// `isa` gives, NaNs included), so a fused fp16/bf16 chain keeps every node's rounding.
pub fn round_to(isa: Isa, to: Narrow, x: &mut [f32]) {
    match to {
        Narrow::Bf16 => {
            #[cfg(feature = "mutants")]
            if crate::mutants::is_active(crate::mutants::Mutant::Bf16Truncates) {
                // The seeded bug of `kernels::convert::f32_to_bf16`, on every narrowing.
                for v in x.iter_mut().filter(|v| !v.is_nan()) {
                    *v = f32::from_bits(v.to_bits() & 0xffff_0000);
                }
                return;
            }
            round_bf16(isa, x)
        }
        Narrow::F16 => {
            #[cfg(target_arch = "x86_64")]
            if !isa.is_scalar() {
                // SAFETY: a non-scalar `Isa` proves AVX2 and F16C (see `f32_to_f16`).
                return unsafe { x86::round_f16_f16c(x) };
            }
            for v in x.iter_mut() {
                *v = f16::from_f32(*v).to_f32();
            }
        }
    }
}

multiversion! {
    /// `bf16_to_f32(f32_to_bf16(x))` in place, with the same bit formulas.
    pub fn round_bf16(x: &mut [f32]) {
        for v in x.iter_mut() {
            let b = v.to_bits();
            let nan = (b & 0x7fff_ffff) > 0x7f80_0000;
            let r = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
            let q = if nan { (b >> 16) | 0x0040 } else { r };
            *v = f32::from_bits(q << 16);
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use half::f16;
    use std::arch::x86_64::*;

    /// f32 rounded to bf16 in 8 lanes, as f32 bits whose low half is zero: round to nearest
    /// even, a NaN truncated and quieted (`f32_to_bf16` and `round_bf16`, lane by lane).
    /// For the register kernels of `narrow_chain` and `mean`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(in crate::runtime::simd) fn round_bf16_8(v: __m256) -> __m256i {
        let b = _mm256_castps_si256(v);
        let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(b), _mm256_set1_epi32(1));
        let r = _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb);
        let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
        let q = _mm256_blendv_epi8(r, _mm256_or_si256(b, _mm256_set1_epi32(0x0040_0000)), nan);
        _mm256_and_si256(q, _mm256_set1_epi32(0xffff_0000_u32 as i32))
    }

    /// [`round_bf16_8`] in 16 lanes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(in crate::runtime::simd) fn round_bf16_16(v: __m512) -> __m512i {
        let b = _mm512_castps_si512(v);
        let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(b), _mm512_set1_epi32(1));
        let r = _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb);
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
        let q = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(b, _mm512_set1_epi32(0x0040_0000)));
        _mm512_and_si512(q, _mm512_set1_epi32(0xffff_0000_u32 as i32))
    }

    /// # Safety
    /// AVX2 and F16C available; `x.len() == out.len()`.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn f32_to_f16_f16c(x: &[f32], out: &mut [f16]) {
        let n = out.len();
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n = x.len() = out.len(): 8 f32 read and 8 f16 written in bounds.
            unsafe {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(x.as_ptr().add(i)));
                _mm_storeu_si128(out.as_mut_ptr().add(i) as *mut __m128i, h);
            }
            i += 8;
        }
        // The last values one at a time, the same conversion on one lane (see `round_f16_f16c`).
        for (o, &v) in out[i..].iter_mut().zip(&x[i..]) {
            let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(v));
            *o = f16::from_bits(_mm_cvtsi128_si32(h) as u16);
        }
    }

    /// `round_half_even(v * inv)` as int32 for the 8 values at `p`, clamped above to `127 - zp`
    /// first (an integer bound: 127 comes out exactly where the unclamped value would
    /// saturate, and the conversion cannot overflow upwards), converted with the default
    /// rounding (half to even; Rust never changes MXCSR), NaN lanes zeroed (they come out as
    /// `zp`). Below, a value under -2^31 converts to -2^31; [`quantize_avx2`]'s saturating
    /// packs and zero-point add clamp it to -128 as any value under `-128 - zp`.
    ///
    /// # Safety
    /// AVX2 available; 8 f32 readable at `p`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn quantize8(p: *const f32, inv: __m256, hi: __m256) -> __m256i {
        // SAFETY: 8 values at `p` (the caller's guarantee).
        let v = _mm256_mul_ps(unsafe { _mm256_loadu_ps(p) }, inv);
        let ordered = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_ORD_Q>(v, v));
        _mm256_and_si256(_mm256_cvtps_epi32(_mm256_min_ps(v, hi)), ordered)
    }

    /// # Safety
    /// AVX2 available; `x.len() == out.len()`. Returns how many leading values it quantized
    /// (a multiple of 32; the caller does the rest).
    #[target_feature(enable = "avx2")]
    pub unsafe fn quantize_avx2(x: &[f32], inv_scale: f32, zp: i32, out: &mut [i8]) -> usize {
        let n = out.len() / 32 * 32;
        let zpf = (zp as f32).clamp(-128.0, 127.0);
        let (inv, hi) = (_mm256_set1_ps(inv_scale), _mm256_set1_ps(127.0 - zpf));
        // The zero point added to the int16 values with saturation, then the saturating pack
        // to int8 is the clamp to [-128, 127].
        let z = _mm256_set1_epi16(zpf as i16);
        // `packs` interleaves 128-bit lanes: this puts the 8 groups of 4 bytes back in order.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let mut i = 0;
        while i < n {
            // SAFETY: i + 32 <= n <= x.len() = out.len(): 32 values read and 32 bytes written.
            unsafe {
                let p = x.as_ptr().add(i);
                let (a, b) = (quantize8(p, inv, hi), quantize8(p.add(8), inv, hi));
                let (c, d) = (quantize8(p.add(16), inv, hi), quantize8(p.add(24), inv, hi));
                let ab = _mm256_adds_epi16(_mm256_packs_epi32(a, b), z);
                let cd = _mm256_adds_epi16(_mm256_packs_epi32(c, d), z);
                let q = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), order);
                _mm256_storeu_si256(out.as_mut_ptr().add(i) as *mut __m256i, q);
            }
            i += 32;
        }
        n
    }

    /// [`quantize_avx2`] in 16 lanes: the scaled value clamped above to `127 - zp`, rounded
    /// half to even into int32 with NaN lanes zeroed (so they come out as `zp`); then narrowed
    /// to int16 by a saturating pack, `zp` added with int16 saturation, and narrowed to int8 by
    /// a saturating pack, which is the clamp below (a value under -2^31 converts to -2^31 and
    /// saturates the same way), one permute per 64 values. XNNPACK's f32 -> qs8 kernel leaves
    /// the clamp below to the packs and adds the zero point the same way.
    ///
    /// # Safety
    /// AVX-512F and AVX-512BW available; `x.len() == out.len()`. Returns how many leading
    /// values it quantized (a multiple of 64; the caller does the rest).
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn quantize_avx512(x: &[f32], inv_scale: f32, zp: i32, out: &mut [i8]) -> usize {
        let n = out.len() / 64 * 64;
        let zpf = (zp as f32).clamp(-128.0, 127.0);
        let (inv, hi) = (_mm512_set1_ps(inv_scale), _mm512_set1_ps(127.0 - zpf));
        let z = _mm512_set1_epi16(zpf as i16);
        let q16 = |v: __m512| {
            let v = _mm512_mul_ps(v, inv);
            let ordered = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(v, v);
            _mm512_maskz_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                ordered,
                _mm512_min_ps(v, hi),
            )
        };
        // The packs work per 128-bit lane: dword `4k + j` of the packed bytes is dword `k` of
        // input `j`; this puts them back in order.
        let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        let mut i = 0;
        while i < n {
            // SAFETY: i + 64 <= n <= x.len() = out.len(): 64 values read and 64 bytes written.
            unsafe {
                let p = x.as_ptr().add(i);
                let ab = _mm512_packs_epi32(q16(_mm512_loadu_ps(p)), q16(_mm512_loadu_ps(p.add(16))));
                let cd = _mm512_packs_epi32(q16(_mm512_loadu_ps(p.add(32))), q16(_mm512_loadu_ps(p.add(48))));
                let (ab, cd) = (_mm512_adds_epi16(ab, z), _mm512_adds_epi16(cd, z));
                let q = _mm512_permutexvar_epi32(order, _mm512_packs_epi16(ab, cd));
                _mm512_storeu_si512(out.as_mut_ptr().add(i) as *mut __m512i, q);
            }
            i += 64;
        }
        n
    }

    /// # Safety
    /// AVX2 and F16C available.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn round_f16_f16c(x: &mut [f32]) {
        let n = x.len();
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n = x.len(): 8 f32 read and written in bounds.
            unsafe {
                let p = x.as_mut_ptr().add(i);
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(p));
                _mm256_storeu_ps(p, _mm256_cvtph_ps(h));
            }
            i += 8;
        }
        // The last values one at a time, with the same conversion on one lane (a padded block
        // copied in and out cost ~220 instructions for one value: an fp16 RMSNorm's tail rounds
        // one value per row three times).
        for v in &mut x[i..] {
            *v = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(*v))));
        }
    }

    /// # Safety
    /// AVX2 and F16C available; `x.len() == out.len()`.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn f16_to_f32_f16c(x: &[f16], out: &mut [f32]) {
        let n = out.len();
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n = x.len() = out.len(): 8 f16 read and 8 f32 written in bounds.
            unsafe {
                let h = _mm_loadu_si128(x.as_ptr().add(i) as *const __m128i);
                _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
            }
            i += 8;
        }
        // The last values one at a time, the same conversion on one lane (see `round_f16_f16c`).
        for (o, &v) in out[i..].iter_mut().zip(&x[i..]) {
            *o = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(v.to_bits()))));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::simd::available_isas;
    use half::bf16;

    #[test]
    fn f16_conversions_match_half_on_every_isa_and_length() {
        let vals: Vec<f32> = [0.0f32, -0.0, 1.0, 65504.0, 65520.0, 65519.0, -7.0e4, 1e-8, 3.0e-5, 6.1e-5]
            .into_iter()
            .chain((0..40).map(|i| (i as f32 - 20.0) * 0.337_7))
            .chain([f32::INFINITY, f32::NEG_INFINITY, 2.0f32.powi(-25), 1.000_488_3, 1.001_464_8])
            .collect();
        for isa in available_isas() {
            for n in [0, 1, 7, 8, 9, 17, vals.len()] {
                let mut h = vec![f16::ZERO; n];
                f32_to_f16(isa, &vals[..n], &mut h);
                for (v, o) in vals.iter().zip(&h) {
                    assert_eq!(o.to_bits(), f16::from_f32(*v).to_bits(), "{} {v}", isa.name());
                }
                let mut back = vec![0f32; n];
                f16_to_f32(isa, &h, &mut back);
                for (o, b) in h.iter().zip(&back) {
                    assert_eq!(b.to_bits(), o.to_f32().to_bits(), "{}", isa.name());
                }
            }
            // NaN stays NaN both ways.
            let mut h = [f16::ZERO; 1];
            f32_to_f16(isa, &[f32::NAN], &mut h);
            assert!(h[0].is_nan());
        }
    }

    #[test]
    fn quantize_rounds_half_to_even_saturates_and_maps_nan_to_the_zero_point() {
        let x = [0.5f32, 1.5, 2.5, -0.5, -1.5, 126.5, 127.5, 1e9, -1e9, f32::INFINITY, f32::NAN, -130.0, 3.49];
        let want_zp0: [i8; 13] = [0, 2, 2, 0, -2, 126, 127, 127, -128, 127, 0, -128, 3];
        for isa in available_isas() {
            for n in 0..=x.len() {
                let mut out = vec![0i8; n];
                quantize(isa, &x[..n], 1.0, 0, &mut out);
                assert_eq!(out[..], want_zp0[..n], "{}", isa.name());
            }
            let mut out = [0i8; 13];
            quantize(isa, &x, 0.5, -3, &mut out);
            // x / 2 rounded half to even, minus 3, saturated; NaN -> -3.
            assert_eq!(out, [-3, -2, -2, -3, -4, 60, 61, 127, -128, 127, -3, -68, -1], "{}", isa.name());
        }
    }

    #[test]
    fn vector_quantize_is_the_plain_loop() {
        // The special values twice: in the first and in the second half of a 64-value block.
        let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e30, 0.5, 1.5, 2.5, -2.5, -0.0];
        let mut x: Vec<f32> = specials.to_vec();
        x.extend((0..290).map(|i| (i as f32 - 150.0) * 0.37 + 0.5));
        x.extend(specials);
        x.extend((0..90).map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 0.5));
        for isa in available_isas() {
            for (inv, zp) in [(1.0, 0), (2.0, -3), (0.031_25, 127), (127.5, -128), (3.7, 300)] {
                for n in [0, 31, 32, 33, 64, 95, x.len()] {
                    let (mut got, mut want) = (vec![0i8; n], vec![0i8; n]);
                    quantize(isa, &x[..n], inv, zp, &mut got);
                    quantize_plain(Isa::SCALAR, &x[..n], inv, zp, &mut want);
                    assert_eq!(got, want, "{} inv {inv} zp {zp} n {n}", isa.name());
                }
            }
        }
    }

    #[test]
    fn a_quantize_round_trip_is_quantize_then_dequantize() {
        let mut x: Vec<f32> = (0..200).map(|i| (i as f32 - 100.0) * 0.37 + 0.5).collect();
        x.extend([f32::NAN, -f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e30, 0.5, 1.5, 2.5, -2.5, -0.0]);
        for isa in available_isas() {
            for (scale, zp) in [(1.0f32, 0), (0.5, -3), (1.0 / 64.0, 127), (1.0 / 32.0, -128), (0.27, 300)] {
                for n in [0, 7, 32, 33, x.len()] {
                    let (mut q, mut want, mut got) = (vec![0i8; n], vec![0f32; n], vec![f32::NAN; n]);
                    quantize(isa, &x[..n], 1.0 / scale, zp, &mut q);
                    dequantize(isa, &q, scale, zp, &mut want);
                    quantize_round_trip(isa, &x[..n], 1.0 / scale, zp, scale, zp, &mut got);
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "{} scale {scale} zp {zp} n {n}", isa.name());
                }
            }
        }
    }

    #[test]
    fn rounding_in_place_is_narrowing_then_widening() {
        let mut vals = vec![0.0f32, -0.0, 1.0, 1.000_488_3, 1.000_976_6, 1.003_906_2, 65519.0, 65520.0, 1e-7, 3e-8];
        vals.extend([-3.3e38, 1e-40, 3.3e-39, 1.011_718_8, f32::INFINITY, f32::NAN, f32::from_bits(0x7f80_0001)]);
        vals.extend((0..40).map(|i| (i as f32 - 20.0) * 0.123_456_7));
        for isa in available_isas() {
            for n in 0..=vals.len() {
                let x = &vals[..n];
                let (mut h, mut b) = (vec![f16::ZERO; n], vec![0u16; n]);
                let (mut wh, mut wb) = (vec![0f32; n], vec![0f32; n]);
                f32_to_f16(isa, x, &mut h);
                f16_to_f32(isa, &h, &mut wh);
                f32_to_bf16(isa, x, &mut b);
                bf16_to_f32(isa, &b, &mut wb);
                let (mut rh, mut rb) = (x.to_vec(), x.to_vec());
                round_to(isa, Narrow::F16, &mut rh);
                round_to(isa, Narrow::Bf16, &mut rb);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&rh), bits(&wh), "f16 on {}", isa.name());
                assert_eq!(bits(&rb), bits(&wb), "bf16 on {}", isa.name());
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
