//! Fully connected (linear): `out[m, n] = sum_k x[m, k] * w[n, k] + b[n]` with XNNPACK's
//! `[N, K]` filter (`[K, N]` under `XNN_FLAG_TRANSPOSE_WEIGHTS`), f32 compute, threaded over
//! outputs.

use super::conv::{float_cow, float_vec};
use super::convert::{from_f32, to_f32};
use super::{sized_for_overwrite, Ctx, Scratch, View, ViewMut};
use crate::runtime::simd;
use half::{bf16, f16};
use std::borrow::Cow;

pub const FLAG_TRANSPOSE_WEIGHTS: u32 = 1;

/// Largest weight (elements) copied per call into the axpy layout: 64 KiB, in L1/L2, where
/// the copy is cheap next to the products. Larger weights are read in place.
const SMALL_WEIGHTS: usize = 16 * 1024;

/// `out[i * ld + j] = w[j, i]` from `[N, K]` weights (`w[i, j]` from `[K, N]`), widened.
#[allow(clippy::too_many_arguments)]
fn to_k_by_n<T: Copy>(w: &[T], f: impl Fn(T) -> f32, k_by_n: bool, k: usize, n: usize, ld: usize, out: &mut [f32]) {
    for i in 0..k {
        let row = &mut out[i * ld..i * ld + n];
        if k_by_n {
            for (j, o) in row.iter_mut().enumerate() {
                *o = f(w[i * n + j]);
            }
        } else {
            for (j, o) in row.iter_mut().enumerate() {
                *o = f(w[j * k + i]);
            }
        }
    }
}

/// Bytes of `[N, K]` weight rows one pass over the rows of `x` reuses (in L1/L2 while the
/// rows of `x` stream past): each weight row is then read from memory once per call, not once
/// per row of `x`.
const WEIGHT_BLOCK_BYTES: usize = 16 * 1024;

/// Elements `first..first + out.len()` of the row-major `[m, n]` product of `x` (`[m, k]`)
/// with the `[n, k]` weights `w`, without bias, each one [`simd::dot`]: a partial first row,
/// the whole rows a block of weight rows at a time, then a partial last row.
fn dots_in_place(isa: simd::Isa, out: &mut [f32], first: usize, x: &[f32], w: &[f32], n: usize, k: usize) {
    if out.is_empty() || n == 0 {
        return;
    }
    let (r0, c0) = (first / n, first % n);
    let head = if c0 == 0 { 0 } else { (n - c0).min(out.len()) };
    let (head_out, rest) = out.split_at_mut(head);
    simd::dot_tile(isa, head_out, head, &x[r0 * k..(r0 + 1) * k], &w[c0 * k..], (1, head, k));
    let r1 = if head > 0 { r0 + 1 } else { r0 };
    let full = rest.len() / n;
    let (rows, tail) = rest.split_at_mut(full * n);
    let block = (WEIGHT_BLOCK_BYTES / (4 * k.max(1))).max(2);
    if full > 0 {
        for cb in (0..n).step_by(block) {
            let cols = block.min(n - cb);
            simd::dot_tile(isa, &mut rows[cb..], n, &x[r1 * k..], &w[cb * k..], (full, cols, k));
        }
    }
    let r2 = r1 + full;
    simd::dot_tile(isa, tail, tail.len(), &x[r2 * k..], w, (usize::from(!tail.is_empty()), tail.len(), k));
}

/// Large float weights (more than [`SMALL_WEIGHTS`]) of dims `[N, K]` (`[K, N]` transposed)
/// packed into the panels [`simd::gemm_panels`] reads; `None` for small ones (copied per call,
/// see [`fully_connected`]) and for weights that do not match their dims.
pub fn pack_weights(w: View, dims: &[usize], transpose_weights: bool) -> Option<Vec<f32>> {
    let &[d0, d1] = dims else { return None };
    let (n, k) = if transpose_weights { (d1, d0) } else { (d0, d1) };
    if n.checked_mul(k)? <= SMALL_WEIGHTS {
        return None;
    }
    match w {
        View::F32(w) => simd::pack_panels(w, |v| v, transpose_weights, n, k),
        View::F16(w) => simd::pack_panels(w, f16::to_f32, transpose_weights, n, k),
        View::Bf16(w) => simd::pack_panels(w, bf16::to_f32, transpose_weights, n, k),
        _ => None,
    }
}

/// The weights as the kernel reads them.
enum Weights<'a> {
    /// `[K, N]` with rows of `ld >= N` (padded).
    KByN(&'a [f32], simd::Gemm),
    /// `[N, K]`.
    NByK(Cow<'a, [f32]>),
    /// Packed once by the plan ([`pack_weights`]).
    Panels(&'a [f32]),
}

#[allow(clippy::too_many_arguments)]
pub fn fully_connected(
    ctx: &Ctx,
    x: View,
    m: usize,
    k: usize,
    w: View,
    packed: Option<&[f32]>,
    n: usize,
    transpose_weights: bool,
    b: Option<View>,
    out: ViewMut,
    act: Option<(f32, f32)>,
    scratch: &mut Scratch,
) -> Result<(), String> {
    if x.len() != m * k || w.len() != n * k || out.len() != m * n {
        return Err(format!(
            "fully connected sizes: x {} (m {m} k {k}), w {} (n {n}), out {}",
            x.len(),
            w.len(),
            out.len()
        ));
    }
    let bf = b.map(float_cow).transpose()?;
    if bf.as_ref().is_some_and(|b| b.len() != n) {
        return Err(format!("bias length differs from {n} outputs"));
    }
    let Scratch { a: sa, b: sb, c: sc, .. } = scratch;
    let xf = to_f32(ctx, x, sa)?;
    let isa = ctx.isa;
    let packed = packed.filter(|p| Some(p.len()) == simd::packed_len(n, k) && n * k > SMALL_WEIGHTS);
    let weights = if let Some(p) = packed {
        Weights::Panels(p)
    } else if n * k <= SMALL_WEIGHTS {
        // Small weights: copied per call to `[K, N]` (rows padded to a multiple of 4), so each
        // output row is one axpy per input element with no horizontal sums: with the few
        // inputs per output of small linears, a dot product's reduction cost more than its
        // products. Each output is still `bias + x[0] w[0] + x[1] w[1] + ...` in order.
        let ld = n.div_ceil(4) * 4;
        sb.clear();
        sb.resize(k * ld, 0.0);
        match w {
            View::F32(w) => to_k_by_n(w, |v| v, transpose_weights, k, n, ld, sb),
            View::F16(w) => to_k_by_n(w, f16::to_f32, transpose_weights, k, n, ld, sb),
            View::Bf16(w) => to_k_by_n(w, bf16::to_f32, transpose_weights, k, n, ld, sb),
            other => return Err(format!("{} weights are not supported", other.type_name())),
        }
        Weights::KByN(&sb[..], simd::Gemm { k, n, ld })
    } else {
        // Large weights the plan did not pack (not constants): fp32 [N, K] read in place, as
        // copying them per call doubled the memory traffic of a large (memory-bound) linear;
        // other dtypes and [K, N] widened or reordered.
        Weights::NByK(match (w, transpose_weights) {
            (w, false) => float_cow(w)?,
            (w, true) => {
                // [K, N] -> [N, K] so every output is one contiguous dot product.
                let wk = float_vec(w)?;
                Cow::Owned((0..n * k).map(|i| wk[(i % k) * n + i / k]).collect())
            }
        })
    };
    let bf = bf.as_deref();
    let run = |o: &mut [f32]| {
        ctx.par_chunks(o, (m * k + n * k) * 4, 16, false, |start, chunk| {
            match &weights {
                Weights::KByN(wt, d) => simd::gemm_rows(isa, chunk, start, xf, wt, *d, bf),
                Weights::Panels(wp) => simd::gemm_panels(isa, chunk, start, xf, wp, simd::Panels { k, n }, bf),
                Weights::NByK(wf) => {
                    dots_in_place(isa, chunk, start, xf, wf, n, k);
                    if let Some(b) = bf {
                        for (i, d) in chunk.iter_mut().enumerate() {
                            *d += b[(start + i) % n];
                        }
                    }
                }
            }
            if let Some((lo, hi)) = act {
                simd::clamp_inplace(isa, chunk, lo, hi);
            }
        })
    };
    match out {
        ViewMut::F32(o) => {
            run(o);
            Ok(())
        }
        o @ (ViewMut::F16(_) | ViewMut::Bf16(_)) => {
            let t = sized_for_overwrite(sc, m * n); // `run` writes every output
            run(t);
            from_f32(ctx, t, o)
        }
        o => Err(format!("fully connected into {}", o.type_name())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::kernels::conv::tests::{pools, values};
    use crate::runtime::simd::available_isas;

    #[test]
    fn small_and_packed_weights_give_the_in_order_sums_and_large_ones_stay_close() {
        let pools = pools();
        // (m, k, n): tiny, ragged widths around the blocks, and one past SMALL_WEIGHTS.
        for (m, k, n) in [
            (1, 1, 1),
            (700, 1, 1),
            (3, 0, 5),
            (7, 3, 3),
            (5, 37, 11),
            (66, 8, 8),
            (3, 5, 17),
            (9, 4, 33),
            (3, 130, 130),
            // Past SMALL_WEIGHTS: weight blocks of 27 rows (27 + 27 + 16), odd rows, k % 16 != 0.
            (5, 300, 70),
            // Odd rows and columns, k % 16 != 0 (panels: four rows by two and one, a partial
            // last panel).
            (11, 272, 63),
            // One row (single-row panel tiles: four panels, then one, the last partial), and
            // eight rows of two panels and a partial third.
            (1, 200, 100),
            (8, 410, 40),
        ] {
            let x = values(m * k, (m * 31 + k) as u64);
            let w = values(n * k, (n * 17 + k) as u64);
            let b = values(n, 9);
            let wt: Vec<f32> = (0..k * n).map(|i| w[(i % n) * k + i / n]).collect();
            for (transposed, packed) in [(false, false), (true, false), (false, true), (true, true)] {
                let wv = if transposed { &wt } else { &w };
                let dims = if transposed { [k, n] } else { [n, k] };
                let pw = if packed { pack_weights(View::F32(wv), &dims, transposed) } else { None };
                assert_eq!(pw.is_some(), packed && n * k > SMALL_WEIGHTS, "{m}x{k}x{n}: packed only when large");
                for isa in available_isas() {
                    for pool in &pools {
                        let mut out = vec![f32::NAN; m * n];
                        let ctx = Ctx { isa, pool };
                        let (xv, bv, ov) = (View::F32(&x), Some(View::F32(&b)), ViewMut::F32(&mut out));
                        fully_connected(
                            &ctx,
                            xv,
                            m,
                            k,
                            View::F32(wv),
                            pw.as_deref(),
                            n,
                            transposed,
                            bv,
                            ov,
                            None,
                            &mut Scratch::default(),
                        )
                        .unwrap();
                        for r in 0..m {
                            for c in 0..n {
                                let got = out[r * n + c];
                                let what = format!(
                                    "{m}x{k}x{n} t{transposed} p{packed} {} t{} [{r}, {c}]",
                                    isa.name(),
                                    pool.threads()
                                );
                                if n * k <= SMALL_WEIGHTS || pw.is_some() {
                                    // Small weights: each product rounded, then each sum;
                                    // packed panels: one fused multiply-add per term.
                                    let mut s = b[c];
                                    for j in 0..k {
                                        let (xj, wj) = (x[r * k + j], w[c * k + j]);
                                        s = if pw.is_some() { xj.mul_add(wj, s) } else { s + xj * wj };
                                    }
                                    assert_eq!(got.to_bits(), s.to_bits(), "{what}");
                                } else {
                                    // Each output is one `dot` (tiles and blocks change only the
                                    // order in which outputs are computed).
                                    let dot = simd::dot(isa, &x[r * k..(r + 1) * k], &w[c * k..(c + 1) * k]);
                                    assert_eq!(got.to_bits(), (dot + b[c]).to_bits(), "{what}");
                                    let terms = (0..k).map(|j| x[r * k + j] as f64 * w[c * k + j] as f64);
                                    let (s, mag) =
                                        terms.fold((b[c] as f64, b[c].abs() as f64), |(s, a), t| (s + t, a + t.abs()));
                                    assert!(
                                        (got as f64 - s).abs() <= mag * (k + 1) as f64 * f32::EPSILON as f64,
                                        "{what}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn bf16_weights_output_and_clamp() {
        let (m, k, n) = (4, 6, 5);
        let x = values(m * k, 1);
        let w16: Vec<bf16> = values(n * k, 2).into_iter().map(bf16::from_f32).collect();
        let pool = &pools()[0];
        let mut want = vec![bf16::ZERO; m * n];
        for r in 0..m {
            for c in 0..n {
                let mut s = 0f32;
                for j in 0..k {
                    s += x[r * k + j] * w16[c * k + j].to_f32();
                }
                want[r * n + c] = bf16::from_f32(s.clamp(-0.25, 1.0));
            }
        }
        for isa in available_isas() {
            let mut out = vec![bf16::ZERO; m * n];
            let (ctx, xv, ov) = (Ctx { isa, pool }, View::F32(&x), ViewMut::Bf16(&mut out));
            let act = Some((-0.25, 1.0));
            fully_connected(&ctx, xv, m, k, View::Bf16(&w16), None, n, false, None, ov, act, &mut Scratch::default())
                .unwrap();
            assert_eq!(out, want, "{}", isa.name());
        }
    }
}
