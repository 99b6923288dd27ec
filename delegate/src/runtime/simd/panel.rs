//! Matrix product on weights packed once into panels of [`PANEL`] columns, XNNPACK's GEMM
//! layout: panel `p` holds columns `p * PANEL..` of the `[K, N]` product's right operand as `K`
//! consecutive rows of `PANEL` (zero past `N`). A tile of output rows times whole panels keeps
//! its sums in registers over `k` and reads each panel front to back, one stream, where the
//! `[N, K]` dot products read several rows at once: a large linear is memory-bound, and one
//! stream reached about twice the bandwidth of four (fp32 GEMV 2048x512, 32 MiB of weights:
//! 1.1 against 2.6 ms on this machine's Zen 4).
//!
//! Every output is `fma(x[k-1], w[k-1], ... fma(x[1], w[1], fma(x[0], w[0], bias)))`: one
//! fused multiply-add per term, in row order, as XNNPACK's GEMM microkernels compute it. An FMA
//! rounds once, so it has one correct result: the same bits whichever tile, thread split or
//! instruction set computes it (the scalar path's `f32::mul_add` is libm's correctly rounded
//! `fmaf`). Unfused (a rounded product, then a rounded sum, as [`super::gemm_rows`] does for
//! small weights) the 4x2 tile ran at 75 GFLOP/s against 93-110 fused on Zen 4 (AVX-512,
//! `gemm_cost` 32x512x512, 64x512x2048, 64x2048x512): its multiplies and additions share the
//! floating-point pipes an FMA uses once.

use super::isa::{Isa, Level};

/// Columns per panel: one AVX-512 vector, two AVX2 ones.
pub const PANEL: usize = 16;

/// Elements of `n` columns of `k` rows packed into panels.
pub fn packed_len(n: usize, k: usize) -> Option<usize> {
    n.div_ceil(PANEL).checked_mul(PANEL)?.checked_mul(k)
}

/// `[N, K]` weights (`[K, N]` with `k_by_n`) packed into panels, widened by `f`.
pub fn pack<T: Copy>(w: &[T], f: impl Fn(T) -> f32, k_by_n: bool, n: usize, k: usize) -> Option<Vec<f32>> {
    let len = packed_len(n, k)?;
    if n == 0 || k == 0 || w.len() != n.checked_mul(k)? {
        return None;
    }
    let mut out = vec![0f32; len];
    for (p, panel) in out.chunks_exact_mut(k * PANEL).enumerate() {
        for (i, row) in panel.chunks_exact_mut(PANEL).enumerate() {
            for (t, o) in row.iter_mut().enumerate().take(n.saturating_sub(p * PANEL)) {
                let j = p * PANEL + t;
                *o = f(if k_by_n { w[i * n + j] } else { w[j * k + i] });
            }
        }
    }
    Some(out)
}

/// Sizes of a product on packed panels: `x` `[m, k]`, `n` output columns.
#[derive(Clone, Copy, Debug)]
pub struct Panels {
    pub k: usize,
    pub n: usize,
}

/// One tile: rows `xs` (`k` each) times the `C` panels `ps` (`k * PANEL` each), sums started
/// from `bias` (the tile's first column on), stored into `out[r * ldo + j]` for the columns
/// `j < cols` (a tile's last panel may reach past the outputs it writes). The sums run in
/// registers on AVX2 and AVX-512 (explicit FMA: the compiler's vectorizer leaves `mul_add`
/// scalar in some tile shapes, 9.5 GFLOP/s on AVX2), as plain `mul_add` on the scalar path.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn tile<const R: usize, const C: usize>(
    isa: Isa,
    out: &mut [f32],
    ldo: usize,
    cols: usize,
    xs: [&[f32]; R],
    ps: [&[f32]; C],
    bias: Option<&[f32]>,
    k: usize,
) {
    let mut acc = [[[0f32; PANEL]; C]; R];
    if let Some(b) = bias {
        for r in acc.iter_mut() {
            for (j, v) in r.as_flattened_mut().iter_mut().enumerate().take(cols.min(b.len())) {
                *v = b[j];
            }
        }
    }
    let xs = xs.map(|x| &x[..k]);
    let ps = ps.map(|p| &p[..k * PANEL]);
    match isa.level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the token proves AVX2 and FMA; every row of `xs` holds `k` values and every
        // panel `k * PANEL` (sliced just above), which is all the kernel reads.
        Level::Avx2 => unsafe { x86::tile_avx2(&mut acc, xs.map(<[f32]>::as_ptr), ps.map(<[f32]>::as_ptr), k) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above for AVX-512F.
        Level::Avx512 => unsafe { x86::tile_avx512(&mut acc, xs.map(<[f32]>::as_ptr), ps.map(<[f32]>::as_ptr), k) },
        Level::Scalar => {
            for i in 0..k {
                for c in 0..C {
                    let w = &ps[c][i * PANEL..][..PANEL];
                    for r in 0..R {
                        for t in 0..PANEL {
                            acc[r][c][t] = xs[r][i].mul_add(w[t], acc[r][c][t]);
                        }
                    }
                }
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        out[r * ldo..r * ldo + cols].copy_from_slice(&a.as_flattened()[..cols]);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::PANEL;
    use std::arch::x86_64::*;

    /// The tile's sums at one vector width: `V` vectors of `PANEL / N` lanes, `N` per panel
    /// row; `acc` is loaded into registers, runs `k` fused multiply-adds per lane in order,
    /// and is stored back.
    macro_rules! tile_kernel {
        ($(#[$m:meta])* $name:ident, $feat:literal, $v:ty, $n:literal, $load:ident, $store:ident, $splat:ident, $fma:ident) => {
            $(#[$m])*
            #[target_feature(enable = $feat)]
            pub(super) unsafe fn $name<const R: usize, const C: usize>(
                acc: &mut [[[f32; PANEL]; C]; R],
                xs: [*const f32; R],
                ps: [*const f32; C],
                k: usize,
            ) {
                const W: usize = PANEL / $n;
                // SAFETY: the caller's guarantee: `k` values behind each row pointer and
                // `k * PANEL` behind each panel pointer; `acc` is an array of whole vectors.
                unsafe {
                    let mut v: [[[$v; $n]; C]; R] = std::array::from_fn(|r| {
                        std::array::from_fn(|c| std::array::from_fn(|h| $load(acc[r][c][h * W..].as_ptr())))
                    });
                    for i in 0..k {
                        let w: [[$v; $n]; C] =
                            std::array::from_fn(|c| std::array::from_fn(|h| $load(ps[c].add(i * PANEL + h * W))));
                        for r in 0..R {
                            let s = $splat(*xs[r].add(i));
                            for c in 0..C {
                                for h in 0..$n {
                                    v[r][c][h] = $fma(s, w[c][h], v[r][c][h]);
                                }
                            }
                        }
                    }
                    for r in 0..R {
                        for c in 0..C {
                            for h in 0..$n {
                                $store(acc[r][c][h * W..].as_mut_ptr(), v[r][c][h]);
                            }
                        }
                    }
                }
            }
        };
    }

    tile_kernel!(
        /// # Safety
        /// AVX2 and FMA available; `k` readable values behind each of `xs`, `k * PANEL`
        /// behind each of `ps`.
        tile_avx2, "avx2,fma", __m256, 2, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps, _mm256_fmadd_ps
    );
    tile_kernel!(
        /// # Safety
        /// AVX-512F available; as [`tile_avx2`] otherwise.
        tile_avx512, "avx512f,avx2,fma", __m512, 1, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps, _mm512_fmadd_ps
    );
}

/// Rows `x` (`rows` of `k`) times the columns `c0..c1`, into `out[r * ldo + (c - c0)]`:
/// `C` panels at a time (then one) over blocks of `R` rows (then one), so a group of panels
/// stays in cache while the rows stream past.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn rect<const R: usize, const C: usize>(
    isa: Isa,
    out: &mut [f32],
    ldo: usize,
    x: &[f32],
    rows: usize,
    w: &[f32],
    k: usize,
    (c0, c1): (usize, usize),
    bias: Option<&[f32]>,
) {
    let (p0, p1) = (c0 / PANEL, c1.div_ceil(PANEL));
    let mut p = p0;
    while p < p1 {
        let lo = p * PANEL;
        if lo < c0 {
            // Rows that start inside this panel (a thread's partial first row): the panel's
            // sums, then their part.
            let hi = (lo + PANEL).min(c1);
            let mut t = [0f32; PANEL];
            for i in 0..rows {
                group::<1, 1>(isa, &mut t, PANEL, &x[i * k..], 1, w, k, (lo, hi), bias);
                out[i * ldo..][..hi - c0].copy_from_slice(&t[c0 - lo..hi - lo]);
            }
            p += 1;
        } else if p + C <= p1 {
            let hi = ((p + C) * PANEL).min(c1);
            group::<R, C>(isa, &mut out[lo - c0..], ldo, x, rows, w, k, (lo, hi), bias);
            p += C;
        } else {
            let hi = (lo + PANEL).min(c1);
            group::<R, 1>(isa, &mut out[lo - c0..], ldo, x, rows, w, k, (lo, hi), bias);
            p += 1;
        }
    }
}

/// Every row of `x` times the `C` panels from column `lo` (a multiple of [`PANEL`]) into
/// `out[r * ldo + (c - lo)]`, `c < hi`: `R` rows at a time, then one.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn group<const R: usize, const C: usize>(
    isa: Isa,
    out: &mut [f32],
    ldo: usize,
    x: &[f32],
    rows: usize,
    w: &[f32],
    k: usize,
    (lo, hi): (usize, usize),
    bias: Option<&[f32]>,
) {
    let ps: [&[f32]; C] = std::array::from_fn(|q| &w[(lo / PANEL + q) * k * PANEL..][..k * PANEL]);
    let b = bias.map(|b| &b[lo..]);
    let xr = |i: usize| &x[i * k..(i + 1) * k];
    let mut i = 0;
    while i + R <= rows {
        tile::<R, C>(isa, &mut out[i * ldo..], ldo, hi - lo, std::array::from_fn(|r| xr(i + r)), ps, b, k);
        i += R;
    }
    while i < rows {
        tile::<1, C>(isa, &mut out[i * ldo..], ldo, hi - lo, [xr(i)], ps, b, k);
        i += 1;
    }
}

/// [`rect`] with the tile shapes for `rows` and the instruction set's registers: on AVX-512
/// (32 of them) tiles of four rows by two panels and single rows by four, else four rows by one
/// and single rows by two.
#[allow(clippy::too_many_arguments)]
fn shape(
    isa: Isa,
    o: &mut [f32],
    ldo: usize,
    x: &[f32],
    rows: usize,
    w: &[f32],
    k: usize,
    cols: (usize, usize),
    bias: Option<&[f32]>,
) {
    let wide = isa.wide_registers();
    if rows == 1 && wide {
        rect::<1, 4>(isa, o, ldo, x, 1, w, k, cols, bias);
    } else if rows == 1 {
        rect::<1, 2>(isa, o, ldo, x, 1, w, k, cols, bias);
    } else if wide {
        rect::<4, 2>(isa, o, ldo, x, rows, w, k, cols, bias);
    } else {
        rect::<4, 1>(isa, o, ldo, x, rows, w, k, cols, bias);
    }
}

/// Elements `first..first + out.len()` of the row-major `[m, n]` product `bias + x w`, `w`
/// packed into panels ([`packed_len`]`(n, k)` elements). Rows may be partial (threads split
/// anywhere).
pub fn gemm_panels(isa: Isa, out: &mut [f32], first: usize, x: &[f32], w: &[f32], d: Panels, bias: Option<&[f32]>) {
    let Panels { k, n } = d;
    if out.is_empty() || n == 0 {
        return;
    }
    // A partial first row, whole rows, then a partial last row.
    let (r0, c0) = (first / n, first % n);
    let head = if c0 == 0 { 0 } else { (n - c0).min(out.len()) };
    let (head_out, rest) = out.split_at_mut(head);
    if head > 0 {
        shape(isa, head_out, n, &x[r0 * k..], 1, w, k, (c0, c0 + head), bias);
    }
    let r1 = if head > 0 { r0 + 1 } else { r0 };
    let full = rest.len() / n;
    let (rows, tail) = rest.split_at_mut(full * n);
    if full > 0 {
        shape(isa, rows, n, &x[r1 * k..], full, w, k, (0, n), bias);
    }
    if !tail.is_empty() {
        shape(isa, tail, n, &x[(r1 + full) * k..], 1, w, k, (0, tail.len()), bias);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::simd::available_isas;

    /// Every chunk of the output (threads split anywhere: inside a row, inside a panel) gets
    /// the in-order fused sums, on every instruction set (AVX-512's tile shapes and the others').
    #[test]
    fn any_chunk_has_the_in_order_sums() {
        let val = |i: usize, s: usize| ((i * 37 + s * 11) % 23) as f32 / 7.0 - 1.5;
        for (m, k, n) in [(1, 3, 1), (1, 19, 100), (6, 5, 33), (9, 17, 70), (5, 1, 16)] {
            let x: Vec<f32> = (0..m * k).map(|i| val(i, 1)).collect();
            let w: Vec<f32> = (0..n * k).map(|i| val(i, 2)).collect();
            let b: Vec<f32> = (0..n).map(|i| val(i, 3)).collect();
            let wt: Vec<f32> = (0..k * n).map(|i| w[(i % n) * k + i / n]).collect();
            let want: Vec<f32> = (0..m * n)
                .map(|e| (0..k).fold(b[e % n], |s, j| x[e / n * k + j].mul_add(w[e % n * k + j], s)))
                .collect();
            let packed = pack(&w, |v| v, false, n, k).unwrap();
            assert_eq!(Some(packed.clone()), pack(&wt, |v| v, true, n, k), "{m}x{k}x{n}: [K, N] packs the same");
            for isa in available_isas() {
                for (first, len) in
                    [(0, m * n), (1, m * n - 1), (n / 2, n + 3), (n + 7, (2 * n).saturating_sub(9)), (m * n - 1, 1)]
                {
                    if len == 0 || first + len > m * n {
                        continue;
                    }
                    let mut out = vec![f32::NAN; len];
                    gemm_panels(isa, &mut out, first, &x, &packed, Panels { k, n }, Some(&b));
                    for (i, v) in out.iter().enumerate() {
                        let what = format!("{m}x{k}x{n} {} chunk {first}+{len}, [{}]", isa.name(), first + i);
                        assert_eq!(v.to_bits(), want[first + i].to_bits(), "{what}");
                    }
                }
            }
        }
        assert_eq!(pack(&[1f32; 6], |v| v, false, 2, 2), None, "weights not n x k");
        assert_eq!(pack::<f32>(&[], |v| v, false, 0, 4), None, "no outputs");
    }
}
