//! Sums of the fast evaluator (mean, linear, and the passes conv shares): many outputs'
//! accumulators advanced together, each through the same terms in the same order as the
//! plain interpreter's, so every sum is the same [`Acc`] sum, bit for bit.

use super::round::{round_f64, tensor_from_f64};
use super::walk::{for_each_offset, strided_indices, values_f64};
use crate::dtype::ElemType;
use crate::eval::sum::{two_sum, Acc};
use crate::tensor::{row_major_strides, Tensor};

/// The [`Acc`] sum of `terms`, in order.
fn sum(terms: impl IntoIterator<Item = f64>) -> f64 {
    let mut acc = Acc::ZERO;
    terms.into_iter().for_each(|x| acc.add(x));
    acc.value()
}

/// [`crate::eval::ops::mean`], `axes` sorted and normalized: each output sums its terms in
/// the same order (row-major over the reduced dims), through one of three walks.
#[inline(never)]
pub(super) fn mean(
    x: &Tensor,
    axes: &[usize],
    cast: Option<ElemType>,
    out_shape: &[usize],
    out_dtype: ElemType,
) -> Tensor {
    let mut v = values_f64(x);
    if let Some(dt) = cast {
        v.iter_mut().for_each(|e| *e = round_f64(dt, *e));
    }
    let strides = row_major_strides(&x.shape);
    let (mut kept, mut kept_st, mut red, mut red_st) = (vec![], vec![], vec![], vec![]);
    for (d, (&s, &st)) in x.shape.iter().zip(&strides).enumerate() {
        if axes.contains(&d) {
            red.push(s);
            red_st.push(st);
        } else {
            kept.push(s);
            kept_st.push(st);
        }
    }
    let count = red.iter().product::<usize>() as f64;
    let offsets = strided_indices(&red, &red_st);
    let mut out = Vec::with_capacity(kept.iter().product());
    if offsets.iter().enumerate().all(|(k, &o)| k == o) {
        // The reduced dims are the trailing ones: each mean reads one contiguous run.
        let len = offsets.len();
        for_each_offset(&kept, &kept_st, |base| out.push(sum(v[base..base + len].iter().copied()) / count));
    } else if let Some(&last) = axes.last().filter(|&&d| d + 1 < x.rank()) {
        // The kept dims after the last reduced one hold `inner` contiguous values, one per
        // output: those outputs sum their terms (in the same order, `offsets`) all at once
        // (`x * 1.0` is `x` exactly).
        let inner: usize = x.shape[last + 1..].iter().product();
        let outer = kept.len() - (x.rank() - 1 - last);
        let (mut sums, mut comps) = (vec![0.0; inner], vec![0.0; inner]);
        for_each_offset(&kept[..outer], &kept_st[..outer], |base| {
            sums.fill(Acc::ZERO.s);
            comps.fill(Acc::ZERO.c);
            // Four terms per pass over the accumulators, then the rest one at a time.
            let quads = offsets.chunks_exact(4);
            let rest = quads.remainder();
            for o4 in quads {
                let x4 = std::array::from_fn(|t| &v[base + o4[t]..][..inner]);
                add_products_n(&mut sums, &mut comps, x4, [1.0; 4], None);
            }
            for &o in rest {
                add_products(&mut sums, &mut comps, &v[base + o..][..inner], 1.0);
            }
            out.extend(sums.iter().zip(&comps).map(|(&s, &c)| Acc { s, c }.value() / count));
        });
    } else {
        for_each_offset(&kept, &kept_st, |base| out.push(sum(offsets.iter().map(|&o| v[base + o])) / count));
    }
    tensor_from_f64(out_shape, out_dtype, None, &out)
}

/// [`crate::eval::ops::linear`]: each output sums its terms in the same order (k, then the
/// bias), every row of one output column at once.
#[inline(never)]
pub(super) fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>, out_shape: &[usize], dtype: ElemType) -> Tensor {
    let (xv, wv) = (values_f64(x), values_f64(w));
    let bv = b.map(values_f64);
    let (nout, k) = (w.shape[0], w.shape[1]);
    let rows = xv.len().checked_div(k).unwrap_or(0);
    // The input transposed, `xt[kk * rows + r] = x[r, kk]`: a column of it times one weight
    // adds term kk of output n to every row at once, so each output still sums its terms in
    // the order kk, then the bias.
    let mut xt = vec![0.0; rows * k];
    for (r, xr) in xv.chunks_exact(k.max(1)).take(rows).enumerate() {
        for (kk, &xe) in xr.iter().enumerate() {
            xt[kk * rows + r] = xe;
        }
    }
    let mut out = vec![0.0; rows * nout];
    let (mut sums, mut comps) = (vec![0.0; rows], vec![0.0; rows]);
    for n in 0..nout {
        sums.fill(Acc::ZERO.s);
        comps.fill(Acc::ZERO.c);
        // Four terms per pass over the accumulators, then the rest one at a time.
        let ws = &wv[n * k..(n + 1) * k];
        let quads = ws.chunks_exact(4);
        let rest = quads.remainder();
        for (q, w4) in quads.enumerate() {
            let x4 = std::array::from_fn(|t| &xt[(4 * q + t) * rows..][..rows]);
            add_products_n(&mut sums, &mut comps, x4, [w4[0], w4[1], w4[2], w4[3]], None);
        }
        for (t, &we) in rest.iter().enumerate() {
            let kk = k - rest.len() + t;
            add_products(&mut sums, &mut comps, &xt[kk * rows..(kk + 1) * rows], we);
        }
        for (r, (&s, &c)) in sums.iter().zip(&comps).enumerate() {
            let mut acc = Acc { s, c };
            if let Some(bv) = &bv {
                acc.add(bv[n]);
            }
            out[r * nout + n] = acc.value();
        }
    }
    tensor_from_f64(out_shape, dtype, None, &out)
}

/// `two_sum(s[k], c[k], x[k] * w)` for every k: one accumulator per position, as sums and
/// corrections in two arrays (so the loop vectorizes). Out of line: called with distinct
/// slices, the loop needs no run-time overlap checks.
#[inline(never)]
pub(super) fn add_products(s: &mut [f64], c: &mut [f64], x: &[f64], w: f64) {
    for ((s, c), &xe) in s.iter_mut().zip(c).zip(x) {
        two_sum(s, c, xe * w);
    }
}

/// For every position k, `two_sum(s[k], c[k], x[t][k] * w[t])` for t = 0, 1, .. in turn: the
/// terms of `T` taps in one pass, each accumulator loaded and stored once. With `keep`, a
/// position whose mask of tap t is zero adds -0.0 for that tap instead, which leaves its
/// accumulator as skipping the term would: `x + -0.0` is `x` for every x (-0.0, infinities
/// and NaN included), so TwoSum keeps `s` and adds an exact zero to `c`, whose sign of zero
/// never matters ([`Acc::value`] reads `c` only when it is not zero).
#[inline(never)]
pub(super) fn add_products_n<const T: usize>(
    s: &mut [f64],
    c: &mut [f64],
    x: [&[f64]; T],
    w: [f64; T],
    keep: Option<[&[u64]; T]>,
) {
    let n = s.len().min(c.len());
    let (s, c) = (&mut s[..n], &mut c[..n]);
    let x = x.map(|x| &x[..n]);
    match keep {
        None => {
            for k in 0..n {
                let (mut sk, mut ck) = (s[k], c[k]);
                for t in 0..T {
                    two_sum(&mut sk, &mut ck, x[t][k] * w[t]);
                }
                (s[k], c[k]) = (sk, ck);
            }
        }
        Some(keep) => {
            let keep = keep.map(|m| &m[..n]);
            for k in 0..n {
                let (mut sk, mut ck) = (s[k], c[k]);
                for t in 0..T {
                    // A select by bit masks (the product's bits, or those of -0.0), so the
                    // loop vectorizes.
                    let m = keep[t][k];
                    let term = f64::from_bits((x[t][k] * w[t]).to_bits() & m | (-0.0f64).to_bits() & !m);
                    two_sum(&mut sk, &mut ck, term);
                }
                (s[k], c[k]) = (sk, ck);
            }
        }
    }
}
