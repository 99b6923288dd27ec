//! Transpose tiles: full 8x8 blocks through AVX2 register transposes, the edges scalar.

use super::isa::Isa;

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

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

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
}
