//! Convolution of the fast evaluator: a tap (ci, ky, kx) adds its terms to the
//! accumulators of every output position of every batch in one pass, four taps per pass.

use super::reduce::add_products_n;
use super::round::tensor_from_f64;
use super::walk::values_f64;
use crate::dtype::ElemType;
use crate::eval::sum::Acc;
use crate::graph::Conv2dParams;
use crate::tensor::Tensor;

/// [`crate::eval::ops::conv2d`]: each output sums its terms in the same order (ci, ky, kx,
/// then the bias; taps in the padding absent), every output position of every batch at once,
/// tap by tap.
#[inline(never)]
pub(super) fn conv2d(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    p: &Conv2dParams,
    out_shape: &[usize],
    dtype: ElemType,
) -> Tensor {
    let (xv, wv) = (values_f64(x), values_f64(w));
    let bv = b.map(values_f64);
    let (c, h, wd) = (x.shape[1], x.shape[2], x.shape[3]);
    let (cg, kh, kw) = (w.shape[1], w.shape[2], w.shape[3]);
    let (n, o, oh, ow) = (out_shape[0], out_shape[1], out_shape[2], out_shape[3]);
    let og = o / p.groups;
    let (st, dil, pad) = (p.stride, p.dilation, p.padding);
    // For kernel index `k` along axis `ax` (input length `len`): the output positions whose
    // tap lands inside the input, `first..end`. The input index `pos * stride + k * dilation
    // - padding` grows with the position, so they are one range; padding positions are
    // absent (they contribute an exact zero; multiplying them would turn an inf weight into
    // NaN).
    let inside = |ax: usize, k: usize, len: usize, outs: usize| -> (usize, usize) {
        let at = |pos: usize| (pos * st[ax] + k * dil[ax]).checked_sub(pad[ax]).filter(|&v| v < len);
        let first = (0..outs).find(|&pos| at(pos).is_some()).unwrap_or(outs);
        let end = (first..outs).find(|&pos| at(pos).is_none()).unwrap_or(outs);
        (first, end)
    };
    let ys: Vec<_> = (0..kh).map(|i| inside(0, i, h, oh)).collect();
    let xs: Vec<_> = (0..kw).map(|j| inside(1, j, wd, ow)).collect();
    let (plane, oplane) = (h * wd, oh * ow);
    // Every output position of every batch, `ni * oplane + k`, is one accumulator, so a tap
    // (ci, i, j) adds its terms to all of them in one run: `src[off + pos]`, its input value
    // at position `pos` (see below), times its weight. Kernel position (i, j) reaches the
    // input from output rows y0..y1 and columns x0..x1 only; `keep[i * kw + j]` is its mask
    // over the positions (all ones inside, zero outside), or None when it covers them all. A
    // position outside adds -0.0 instead (see `add_products_n`).
    let positions = n * oplane;
    let keep: Vec<Option<Vec<u64>>> = (0..kh * kw)
        .map(|t| {
            let ((y0, y1), (x0, x1)) = (ys[t / kw], xs[t % kw]);
            (y1 - y0 < oh || x1 - x0 < ow).then(|| {
                // One plane's mask (rows outside zero, inside rows zero outside x0..x1), then
                // a copy of it per further batch.
                let mut mask = vec![0u64; positions];
                for row in mask[y0 * ow..y1 * ow].chunks_exact_mut(ow) {
                    row[x0..x1].fill(u64::MAX);
                }
                for b in 1..n {
                    mask.copy_within(..oplane, b * oplane);
                }
                mask
            })
        })
        .collect();
    // Stride 1 and an output the size of the input (1x1 and "same" convolutions): the input
    // itself, with each channel's batches side by side (`(ch * n + ni) * plane`), is `src`,
    // as output position `pos` of a tap reads input position `pos` plus a fixed shift (`base`
    // zeros before it and enough after serve the masked positions that fall off either
    // end). Otherwise each tap's terms for all positions are gathered into a run of their own
    // (masked positions hold 0.0).
    let same = st == [1, 1] && (oh, ow) == (h, wd);
    let (src, base, chstride, toff): (Vec<f64>, usize, usize, Vec<isize>) = if same {
        let toff: Vec<isize> = (0..kh * kw)
            .map(|t| {
                let (i, j) = ((t / kw) as isize, (t % kw) as isize);
                (i * dil[0] as isize - pad[0] as isize) * wd as isize + j * dil[1] as isize - pad[1] as isize
            })
            .collect();
        let (lo, hi) = toff.iter().fold((0isize, 0isize), |(lo, hi), &s| (lo.min(s), hi.max(s)));
        let lead = lo.unsigned_abs();
        let mut src = vec![0.0; lead + xv.len() + hi.max(0) as usize];
        for (k, xc) in xv.chunks_exact(plane).enumerate() {
            let (ni, ch) = (k / c, k % c);
            src[lead + (ch * n + ni) * plane..][..plane].copy_from_slice(xc);
        }
        (src, lead, n * plane, toff)
    } else {
        let mut src = vec![0.0; c * kh * kw * positions];
        for (k, xc) in xv.chunks_exact(plane).enumerate() {
            let (ni, ch) = (k / c, k % c);
            for (i, &(y0, y1)) in ys.iter().enumerate() {
                for (j, &(x0, x1)) in xs.iter().enumerate() {
                    if y0 == y1 || x0 == x1 {
                        continue;
                    }
                    let run = &mut src[((ch * kh + i) * kw + j) * positions + ni * oplane..][..oplane];
                    let ix0 = x0 * st[1] + j * dil[1] - pad[1];
                    for y in y0..y1 {
                        let iy = y * st[0] + i * dil[0] - pad[0];
                        let from = xc[iy * wd + ix0..].iter().step_by(st[1]);
                        run[y * ow + x0..y * ow + x1].iter_mut().zip(from).for_each(|(d, &v)| *d = v);
                    }
                }
            }
        }
        (src, 0, kh * kw * positions, (0..kh * kw).map(|t| (t * positions) as isize).collect())
    };
    let mut out = vec![0.0; n * o * oplane];
    // One accumulator (sum, correction) per position. Each one is summed in the order ci,
    // kernel row, kernel column, then the bias: the loops below visit (ci, i, j) in that
    // order and, for each, add the tap to every position.
    let (mut sums, mut comps) = (vec![0.0; positions], vec![0.0; positions]);
    // Taps go `TAPS` at a time (consecutive in that order) through one pass over the
    // accumulators; a tap without a mask then takes the all-ones one.
    let ones = vec![u64::MAX; if keep.iter().any(Option::is_some) { positions } else { 0 }];
    let mut group: Vec<Tap> = Vec::with_capacity(TAPS);
    for oi in 0..o {
        let g = oi / og;
        sums.fill(Acc::ZERO.s);
        comps.fill(Acc::ZERO.c);
        for ci in 0..cg {
            let wc = &wv[(oi * cg + ci) * kh * kw..][..kh * kw];
            let chbase = base + (g * cg + ci) * chstride;
            for (t, &we) in wc.iter().enumerate() {
                if ys[t / kw].0 == ys[t / kw].1 || xs[t % kw].0 == xs[t % kw].1 {
                    continue;
                }
                let from = &src[(chbase as isize + toff[t]) as usize..][..positions];
                group.push((from, we, keep[t].as_deref()));
                if group.len() == TAPS {
                    add_tap_group(&mut sums, &mut comps, &group, &ones);
                    group.clear();
                }
            }
        }
        add_tap_group(&mut sums, &mut comps, &group, &ones);
        group.clear();
        for (ni, (s, cm)) in sums.chunks_exact(oplane).zip(comps.chunks_exact(oplane)).enumerate() {
            let dst = &mut out[(ni * o + oi) * oplane..][..oplane];
            for (d, (&s, &c)) in dst.iter_mut().zip(s.iter().zip(cm)) {
                let mut acc = Acc { s, c };
                if let Some(bv) = &bv {
                    acc.add(bv[oi]);
                }
                *d = acc.value();
            }
        }
    }
    tensor_from_f64(out_shape, dtype, None, &out)
}

/// How many taps [`add_tap_group`] adds in one pass.
const TAPS: usize = 4;

/// One conv tap: its input run, its weight and, when some positions miss the input, the mask
/// of those it hits.
type Tap<'a> = (&'a [f64], f64, Option<&'a [u64]>);

/// Adds up to [`TAPS`] taps (input run, weight, mask) to every accumulator, in their order:
/// [`add_products_n`] for their number, masked when any of them is (`ones`: an all-ones mask
/// as long as the accumulators, for those without one).
fn add_tap_group(s: &mut [f64], c: &mut [f64], group: &[Tap], ones: &[u64]) {
    /// The group's inputs, weights and (when any tap has one) masks, as arrays.
    type Split<'a, const T: usize> = ([&'a [f64]; T], [f64; T], Option<[&'a [u64]; T]>);
    fn split<'a, const T: usize>(group: &[Tap<'a>], ones: &'a [u64]) -> Split<'a, T> {
        let masked = group.iter().any(|g| g.2.is_some());
        (
            std::array::from_fn(|t| group[t].0),
            std::array::from_fn(|t| group[t].1),
            masked.then(|| std::array::from_fn(|t| group[t].2.unwrap_or(ones))),
        )
    }
    match group.len() {
        0 => {}
        1 => {
            let (x, w, keep) = split::<1>(group, ones);
            add_products_n(s, c, x, w, keep)
        }
        2 => {
            let (x, w, keep) = split::<2>(group, ones);
            add_products_n(s, c, x, w, keep)
        }
        3 => {
            let (x, w, keep) = split::<3>(group, ones);
            add_products_n(s, c, x, w, keep)
        }
        _ => {
            let (x, w, keep) = split::<TAPS>(group, ones);
            add_products_n(s, c, x, w, keep)
        }
    }
}
