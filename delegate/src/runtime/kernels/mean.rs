//! Static mean over any axes of a rank 1-6 tensor, as XNNPACK's reduce-nd does it:
//! size-1 dims dropped, adjacent reduced and adjacent kept dims merged, the result padded to
//! 6-D; a *contiguous* path (the innermost dim is reduced: row sums) and a *discontiguous*
//! path (the innermost dim is kept: column sums over rows). The sum is scaled by multiplying
//! with `1/n`, as XNNPACK does (not by dividing).
//!
//! Accumulation: fp32 in f32; fp16 and bf16 are widened to an f32 workspace, averaged in f32
//! and rounded once to the output type (for bf16 these are the converts the runtime inserts,
//! as ExecuTorch does, not flatbuffer nodes); qs8 sums int8 values in int32 and requantizes
//! with `out = clamp(round_half_even((sum - n*zp_in) * m) + zp_out)` where
//! `m = in_scale * (1/n) / out_scale` in f32, XNNPACK's reference int32->int8 requantization.

use super::convert::{from_f32, to_f32};
use super::{sized_for_overwrite, strides, with_f32_tile, Ctx, Quant, Scratch, View, ViewMut};
use crate::runtime::pool::INLINE_BYTES;
use crate::runtime::simd::{self, Rows, Term};
use crate::runtime::ThreadPolicy;

#[cfg(feature = "mutants")]
use crate::mutants::{is_active, Mutant};

/// A reduction after normalization, padded to 6-D. In the contiguous layout dims 1, 3, 5 are
/// reduced and 0, 2, 4 kept; in the discontiguous one it is the other way round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reduction {
    pub shape: [usize; 6],
    pub contiguous: bool,
    /// Elements averaged per output.
    pub n: usize,
    pub outputs: usize,
}

/// XNNPACK's `xnn_normalize_reduction`: drop size-1 dims, merge runs of reduced and of kept dims.
/// No allocation (it runs per call of the fp16/bf16 and qs8 means).
///
/// # Panics
/// If `shape` has more than 6 dims that are not 1 (the runtime's `compile` refuses ranks
/// above XNNPACK's 6).
pub fn normalize(shape: &[usize], axes: &[usize]) -> Reduction {
    let (mut runs, mut k) = ([(0usize, false); 6], 0);
    for (i, &s) in shape.iter().enumerate() {
        if s == 1 {
            continue;
        }
        let r = axes.contains(&i);
        match runs[..k].last_mut() {
            Some((d, lr)) if *lr == r => *d *= s,
            _ => {
                assert!(k < 6, "mean over a shape of more than 6 dims: {shape:?}");
                runs[k] = (s, r);
                k += 1;
            }
        }
    }
    let dims = &runs[..k];
    let contiguous = dims.last().is_some_and(|d| d.1);
    let mut s6 = [1usize; 6];
    for (j, d) in dims.iter().enumerate() {
        s6[6 - k + j] = d.0;
    }
    let n = dims.iter().filter(|d| d.1).map(|d| d.0).product();
    let outputs = dims.iter().filter(|d| !d.1).map(|d| d.0).product();
    Reduction { shape: s6, contiguous, n, outputs }
}

/// The scale applied to sums: `1/n` (multiplied, as XNNPACK does).
fn scale_of(n: usize) -> f32 {
    #[cfg(feature = "mutants")]
    if is_active(Mutant::WrongDivisor) {
        return 1.0 / (n + 1) as f32;
    }
    1.0 / n as f32
}

/// Mean of fp32 `x` with physical `shape` over `axes` into `out` (one value per kept position).
pub fn mean_f32(ctx: &Ctx, x: &[f32], shape: &[usize], axes: &[usize], out: &mut [f32]) -> Result<(), String> {
    mean_f32_planned(ctx, x, &MeanPlan::new(shape, axes), Term::Value, out)
}

/// A mean's geometry for one input shape: normalized once when the shape is known (a plan
/// reuses it for every run on that shape), not at every call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeanPlan {
    pub r: Reduction,
    st: [usize; 6],
}

impl Reduction {
    /// `(rows, len)` where each output is the mean of one row of `len` elements and
    /// consecutive outputs are consecutive rows (a last-dim mean: `[rows, len]`).
    pub fn last_dim_rows(&self) -> Option<(usize, usize)> {
        (self.contiguous && self.shape[1] == 1 && self.shape[3] == 1).then_some((self.outputs, self.shape[5]))
    }
}

impl MeanPlan {
    pub fn new(shape: &[usize], axes: &[usize]) -> MeanPlan {
        let r = normalize(shape, axes);
        let mut st = [1usize; 6];
        for i in (0..5).rev() {
            st[i] = st[i + 1] * r.shape[i + 1];
        }
        MeanPlan { r, st }
    }

    /// What each sum is multiplied by (`1 / n`, as `mean_f32_planned` scales).
    pub fn scale(&self) -> f32 {
        scale_of(self.r.n)
    }
}

/// [`mean_f32`] on a planned geometry; `t` is what each element adds: itself, or its square
/// (a fused `mean(x * x)`, bit-identical to the mean of the square kernel's output).
pub fn mean_f32_planned(ctx: &Ctx, x: &[f32], p: &MeanPlan, t: Term, out: &mut [f32]) -> Result<(), String> {
    let r = &p.r;
    check_sizes(r, x.len(), out.len())?;
    let scale = scale_of(r.n);
    if r.contiguous {
        contiguous_f32(ctx, x, r, &p.st, scale, t, out);
    } else {
        discontiguous_f32(ctx, x, r, &p.st, scale, t, out);
    }
    Ok(())
}

fn check_sizes(r: &Reduction, xlen: usize, olen: usize) -> Result<(), String> {
    if r.n * r.outputs != xlen || r.outputs != olen {
        return Err(format!("mean of {} elements into {} outputs does not match the shape", xlen, olen));
    }
    Ok(())
}

fn contiguous_rows(r: &Reduction, st: &[usize], idx: usize) -> Rows {
    let s = &r.shape;
    let i4 = idx % s[4];
    let i2 = (idx / s[4]) % s[2];
    let i0 = idx / (s[4] * s[2]);
    Rows { base: i0 * st[0] + i2 * st[2] + i4 * st[4], n: [s[1], s[3], 1], st: [st[1], st[3], 0], len: s[5] }
}

/// Whether a contiguous mean of `outputs` rows over `bytes` of f32 splits each output's rows
/// across threads (fewer outputs than threads, and enough work for the cost model to split).
pub(crate) fn splits_rows(ctx: &Ctx, outputs: usize, bytes: usize) -> bool {
    let t = ctx.pool.threads();
    ctx.pool.policy() == ThreadPolicy::CostModel && t > 1 && outputs < t && bytes >= INLINE_BYTES
}

fn contiguous_f32(ctx: &Ctx, x: &[f32], r: &Reduction, st: &[usize; 6], scale: f32, term: Term, out: &mut [f32]) {
    let isa = ctx.isa;
    let bytes = x.len() * 4;
    let t = ctx.pool.threads();
    if splits_rows(ctx, r.outputs, bytes) {
        // Fewer outputs than threads: split each output's rows instead and add the partials.
        for (o, slot) in out.iter_mut().enumerate() {
            let rows = contiguous_rows(r, st, o);
            let pieces = split_rows(&rows, t);
            let mut partial = vec![0f32; pieces.len()];
            ctx.par_chunks(&mut partial, bytes, 1, false, |s, c| {
                for (k, p) in c.iter_mut().enumerate() {
                    *p = simd::sum_rows_f32(isa, x, &pieces[s + k], term);
                }
            });
            // Seeded bug (`MeanSplitThreePlus`): only the first two partial sums are added, as
            // when the split had one piece per thread of a 2-thread pool.
            #[cfg(feature = "mutants")]
            let partial = match crate::mutants::is_active(crate::mutants::Mutant::MeanSplitThreePlus) {
                true => &partial[..partial.len().min(2)],
                false => &partial[..],
            };
            *slot = partial.iter().sum::<f32>() * scale;
        }
        return;
    }
    if let Some((_, len)) = r.last_dim_rows() {
        // One row per output, and consecutive outputs are consecutive rows: [outputs, len].
        ctx.par_chunks(out, bytes, 1, true, |start, chunk| {
            simd::row_sums_f32(isa, x, start * len, len, scale, chunk, term)
        });
        return;
    }
    ctx.par_chunks(out, bytes, 1, true, |start, chunk| {
        for (k, o) in chunk.iter_mut().enumerate() {
            *o = simd::sum_rows_f32(isa, x, &contiguous_rows(r, st, start + k), term) * scale;
        }
    });
}

/// Cuts a row set into up to `t` disjoint row sets along its largest dimension.
fn split_rows(rows: &Rows, t: usize) -> Vec<Rows> {
    let (n0, n1, len) = (rows.n[0], rows.n[1], rows.len);
    let mut v = Vec::with_capacity(t);
    if n0 >= n1 && n0 >= t {
        let per = n0.div_ceil(t);
        for a in (0..n0).step_by(per) {
            v.push(Rows { base: rows.base + a * rows.st[0], n: [per.min(n0 - a), n1, 1], ..*rows });
        }
    } else if n1 >= t && n1 >= n0 {
        let per = n1.div_ceil(t);
        for b in (0..n1).step_by(per) {
            v.push(Rows { base: rows.base + b * rows.st[1], n: [n0, per.min(n1 - b), 1], ..*rows });
        }
    } else {
        // Column blocks of every row; multiples of 64 keep the SIMD bodies full.
        let per = len.div_ceil(t).div_ceil(64) * 64;
        for c in (0..len).step_by(per.max(1)) {
            v.push(Rows { base: rows.base + c, len: per.min(len - c), ..*rows });
        }
    }
    v
}

/// Outputs `start..start + len` of a discontiguous reduction (rows of `shape[5]` columns), as
/// runs of at most `max_run` columns inside one row: `f(offset from start, rows to sum)`.
/// A thread's chunk may start and end mid-row.
fn column_runs(r: &Reduction, st: &[usize], start: usize, len: usize, max_run: usize, mut f: impl FnMut(usize, &Rows)) {
    let s = r.shape;
    let w = s[5];
    let end = start + len;
    let mut pos = start;
    while pos < end {
        let (row, c0) = (pos / w, pos % w);
        let run = (w - c0).min(end - pos).min(max_run);
        let (i1, i3) = (row / s[3], row % s[3]);
        let rows =
            Rows { base: i1 * st[1] + i3 * st[3] + c0, n: [s[0], s[2], s[4]], st: [st[0], st[2], st[4]], len: run };
        f(pos - start, &rows);
        pos += run;
    }
}

fn discontiguous_f32(ctx: &Ctx, x: &[f32], r: &Reduction, st: &[usize; 6], scale: f32, t: Term, out: &mut [f32]) {
    let isa = ctx.isa;
    ctx.par_chunks(out, x.len() * 4, 64, true, |start, chunk| {
        column_runs(r, st, start, chunk.len(), usize::MAX, |o, rows| {
            simd::col_sums_f32(isa, x, rows, scale, &mut chunk[o..o + rows.len], t);
        });
    });
}

/// Mean in any supported type. `q` = (input, output) quantization for int8.
pub fn mean(
    ctx: &Ctx,
    x: View,
    shape: &[usize],
    axes: &[usize],
    out: ViewMut,
    q: Option<(Quant, Quant)>,
    scratch: &mut Scratch,
) -> Result<(), String> {
    match (x, out) {
        (View::F32(x), ViewMut::F32(o)) => mean_f32(ctx, x, shape, axes, o),
        (View::I8(x), ViewMut::I8(o)) => {
            let (qi, qo) = q.ok_or("qs8 mean without quantization parameters")?;
            mean_qs8(ctx, x, shape, axes, o, qi, qo)
        }
        (x @ (View::F16(_) | View::Bf16(_)), o @ (ViewMut::F16(_) | ViewMut::Bf16(_))) => {
            #[cfg(feature = "mutants")]
            let o = match (x, o) {
                (View::F16(xh), ViewMut::F16(oh)) if is_active(Mutant::Fp16AccumulateInFp16) => {
                    return mean_f16_in_f16(xh, shape, axes, oh);
                }
                (_, o) => o,
            };
            let Scratch { a, b, .. } = scratch;
            let n_out = o.len();
            if let Some(()) = rows_f16_tiled(ctx, x, shape, axes, b, n_out, None)? {
                return from_f32(ctx, &b[..n_out], o);
            }
            let xf = to_f32(ctx, x, a)?;
            let of = sized_for_overwrite(b, n_out); // mean_f32 writes every output
            mean_f32(ctx, xf, shape, axes, of)?;
            from_f32(ctx, of, o)
        }
        (x, o) => Err(format!("no mean from {} to {}", x.type_name(), o.type_name())),
    }
}

/// `mean(square(x))` of fp16/bf16 `x` into `out` of the same type, as the unfused square and
/// mean nodes compute it: each square rounded to the type (`simd::round_to`), then summed as
/// [`mean`] sums. The fused group of `runtime::fuse`: on a last-dim mean the squares are never
/// written.
pub fn mean_of_squares_narrow(
    ctx: &Ctx,
    x: View,
    shape: &[usize],
    axes: &[usize],
    out: ViewMut,
    scratch: &mut Scratch,
) -> Result<(), String> {
    let n_out = out.len();
    let to = narrow_pair(x, &out)?;
    let m = mean_of_squares_f32(ctx, x, shape, axes, to, n_out, &mut scratch.a, &mut scratch.b)?;
    from_f32(ctx, m, out)
}

/// The type fp16/bf16 `x` and `out` share.
pub fn narrow_pair(x: View, out: &ViewMut) -> Result<simd::Narrow, String> {
    match (x, out) {
        (View::F16(_), ViewMut::F16(_)) => Ok(simd::Narrow::F16),
        (View::Bf16(_), ViewMut::Bf16(_)) => Ok(simd::Narrow::Bf16),
        _ => Err(format!("fused square and mean from {} to {}", x.type_name(), out.type_name())),
    }
}

/// [`mean_of_squares_narrow`]'s `n_out` means before their narrowing to `to`: f32 sums times
/// the scale, in `b` (`a` holds the widened squares where the layout needs them).
#[allow(clippy::too_many_arguments)]
pub fn mean_of_squares_f32<'b>(
    ctx: &Ctx,
    x: View,
    shape: &[usize],
    axes: &[usize],
    to: simd::Narrow,
    n_out: usize,
    a: &mut Vec<f32>,
    b: &'b mut Vec<f32>,
) -> Result<&'b mut [f32], String> {
    if let Some(()) = rows_f16_tiled(ctx, x, shape, axes, b, n_out, Some(to))? {
        return Ok(&mut b[..n_out]);
    }
    let xf = sized_for_overwrite(a, x.len()); // the convert writes every element
    super::convert::convert(ctx, x, ViewMut::F32(xf), None)?;
    let isa = ctx.isa;
    ctx.par_chunks(xf, x.len() * 8, 1024, false, |_, c| square_rounded(isa, to, c));
    let of = sized_for_overwrite(b, n_out); // mean_f32 writes every output
    mean_f32(ctx, xf, shape, axes, of)?;
    Ok(&mut b[..n_out])
}

/// `round_to(v * v)` in place: an fp16/bf16 square node's output, widened.
fn square_rounded(isa: simd::Isa, to: simd::Narrow, x: &mut [f32]) {
    for v in x.iter_mut() {
        *v *= *v;
    }
    simd::round_to(isa, to, x);
}

/// Elements widened per tile in [`rows_f16_tiled`] (16 KiB of f32: stays in L1/L2).
const TILE: usize = 4096;

/// The mean of fp16/bf16 rows `[outputs, len]` (a last-dim mean) into `out` (f32, sized
/// here): widened as loaded where the ISA has a kernel (squares too), else a tile of
/// rows at a time into the thread's work tile rather than the whole input into scratch; the
/// same `row_sums_f32` on the same f32 values either way, so the same bits, without writing
/// and rereading an f32 copy of the input (with `squares`, of the rounded squares of the
/// input, see [`mean_of_squares_narrow`]). `None` where the layout is another one,
/// a row is longer than a tile, or `contiguous_f32` would split rows ([`splits_rows`]).
fn rows_f16_tiled(
    ctx: &Ctx,
    x: View,
    shape: &[usize],
    axes: &[usize],
    out: &mut Vec<f32>,
    n_out: usize,
    squares: Option<simd::Narrow>,
) -> Result<Option<()>, String> {
    let r = normalize(shape, axes);
    check_sizes(&r, x.len(), n_out)?;
    let split = splits_rows(ctx, n_out, x.len() * 4);
    let Some((_, len)) = r.last_dim_rows().filter(|&(_, len)| len > 0 && len <= TILE && !split) else {
        return Ok(None);
    };
    let (isa, scale, per) = (ctx.isa, scale_of(r.n), TILE / len);
    let half = match x {
        View::F16(h) => simd::Half::F16(h),
        View::Bf16(b) => simd::Half::Bf16(simd::bf16_bits(b)),
        _ => return Ok(None),
    };
    // Widens `buf.len()` elements from `from`.
    let widen = |from: usize, buf: &mut [f32]| match half {
        simd::Half::F16(h) => simd::f16_to_f32(isa, &h[from..from + buf.len()], buf),
        simd::Half::Bf16(b) => simd::bf16_to_f32(isa, &b[from..from + buf.len()], buf),
    };
    let o = sized_for_overwrite(out, n_out); // every output is written below
    ctx.par_chunks(o, x.len() * 4, 1, true, |start, chunk| {
        // Widened as loaded where the ISA has a kernel for it (same sums, same bits).
        if simd::row_sums_half(isa, half, start * len, len, scale, chunk, squares.is_some()) {
            return;
        }
        with_f32_tile(chunk.len().min(per) * len, |buf| {
            for (c, outs) in chunk.chunks_mut(per).enumerate() {
                let n = outs.len() * len;
                widen((start + c * per) * len, &mut buf[..n]);
                if let Some(to) = squares {
                    square_rounded(isa, to, &mut buf[..n]);
                }
                simd::row_sums_f32(isa, &buf[..n], 0, len, scale, outs, Term::Value);
            }
        })
    });
    Ok(Some(()))
}

/// Seeded bug: fp16 sums kept in fp16 (loses precision on long rows).
#[cfg(feature = "mutants")]
fn mean_f16_in_f16(x: &[half::f16], shape: &[usize], axes: &[usize], out: &mut [half::f16]) -> Result<(), String> {
    let r = normalize(shape, axes);
    check_sizes(&r, x.len(), out.len())?;
    let st = strides(&r.shape);
    let s = r.shape;
    let scale = half::f16::from_f32(1.0 / r.n as f32);
    for (o, slot) in out.iter_mut().enumerate() {
        let mut acc = half::f16::ZERO;
        if r.contiguous {
            let rows = contiguous_rows(&r, &st, o);
            for a in 0..rows.n[0] {
                for b in 0..rows.n[1] {
                    let off = rows.base + a * rows.st[0] + b * rows.st[1];
                    for v in &x[off..off + rows.len] {
                        acc += *v;
                    }
                }
            }
        } else {
            let (row, c) = (o / s[5], o % s[5]);
            let (i1, i3) = (row / s[3], row % s[3]);
            for j0 in 0..s[0] {
                for j2 in 0..s[2] {
                    for j4 in 0..s[4] {
                        acc += x[j0 * st[0] + i1 * st[1] + j2 * st[2] + i3 * st[3] + j4 * st[4] + c];
                    }
                }
            }
        }
        *slot = acc * scale;
    }
    Ok(())
}

/// Requantizes an int32 sum of `n` int8 values.
#[inline]
pub fn requantize(acc: i32, n: usize, qi: Quant, mult: f32, qo: Quant) -> i8 {
    let centered = acc as i64 - n as i64 * qi.zero_point as i64;
    let v = centered as f32 * mult;
    #[cfg(feature = "mutants")]
    let r = if is_active(Mutant::Qs8RoundHalfAway) { v.round() } else { v.round_ties_even() };
    #[cfg(not(feature = "mutants"))]
    let r = v.round_ties_even();
    let r = r + qo.zero_point as f32;
    r.clamp(-128.0, 127.0) as i8
}

fn mean_qs8(
    ctx: &Ctx,
    x: &[i8],
    shape: &[usize],
    axes: &[usize],
    out: &mut [i8],
    qi: Quant,
    qo: Quant,
) -> Result<(), String> {
    let r = normalize(shape, axes);
    check_sizes(&r, x.len(), out.len())?;
    let isa = ctx.isa;
    let mult = qi.scale * scale_of(r.n) / qo.scale;
    let n = r.n;
    if let Some((_, len)) = r.last_dim_rows() {
        // A last-dim mean: output `i` sums the row at `i * len`.
        ctx.par_chunks(out, x.len(), 1, true, |start, chunk| {
            let mut acc = [0i32; 256];
            for (k, c) in chunk.chunks_mut(acc.len()).enumerate() {
                let first = start + k * acc.len();
                let a = &mut acc[..c.len()];
                simd::row_sums_i8(isa, x, first * len, len, a);
                for (o, &v) in c.iter_mut().zip(a.iter()) {
                    *o = requantize(v, n, qi, mult, qo);
                }
            }
        });
    } else if r.contiguous {
        let st = strides(&r.shape);
        ctx.par_chunks(out, x.len(), 1, true, |start, chunk| {
            for (k, o) in chunk.iter_mut().enumerate() {
                let acc = simd::sum_rows_i8(isa, x, &contiguous_rows(&r, &st, start + k));
                *o = requantize(acc, n, qi, mult, qo);
            }
        });
    } else {
        let st = strides(&r.shape);
        ctx.par_chunks(out, x.len(), 64, true, |start, chunk| {
            let mut acc = [0i32; 256];
            column_runs(&r, &st, start, chunk.len(), acc.len(), |o, rows| {
                let a = &mut acc[..rows.len];
                simd::col_sums_i8(isa, x, rows, a);
                for (d, &v) in chunk[o..o + a.len()].iter_mut().zip(a.iter()) {
                    *d = requantize(v, n, qi, mult, qo);
                }
            });
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::pool::Pool;
    use crate::runtime::simd::available_isas;

    #[test]
    fn tiled_half_means_are_bit_identical_to_widening_the_whole_input() {
        for (rows, len) in [(1, 1), (3, 7), (128, 128), (5, 2048), (2, 4096), (3, 5000), (1, 300), (9, 33)] {
            let n = rows * len;
            let vals: Vec<f32> = (0..n).map(|i| ((i * 7919 % 2003) as f32 - 1001.0) * 0.0137).collect();
            let h: Vec<half::f16> = vals.iter().map(|&v| half::f16::from_f32(v)).collect();
            let b: Vec<half::bf16> = vals.iter().map(|&v| half::bf16::from_f32(v)).collect();
            for isa in available_isas() {
                for threads in [1, 2, 3] {
                    let pool = Pool::new(threads, ThreadPolicy::CostModel).unwrap();
                    let ctx = Ctx { isa, pool: &pool };
                    let mut scratch = Scratch::default();
                    let (mut oh, mut ob) = (vec![half::f16::ZERO; rows], vec![half::bf16::ZERO; rows]);
                    mean(&ctx, View::F16(&h), &[rows, len], &[1], ViewMut::F16(&mut oh), None, &mut scratch).unwrap();
                    mean(&ctx, View::Bf16(&b), &[rows, len], &[1], ViewMut::Bf16(&mut ob), None, &mut scratch).unwrap();
                    // The whole input widened, then the f32 mean, then narrowed.
                    let (wh, wb): (Vec<f32>, Vec<f32>) =
                        (h.iter().map(|v| v.to_f32()).collect(), b.iter().map(|v| v.to_f32()).collect());
                    let (mut fh, mut fb) = (vec![0f32; rows], vec![0f32; rows]);
                    mean_f32(&ctx, &wh, &[rows, len], &[1], &mut fh).unwrap();
                    mean_f32(&ctx, &wb, &[rows, len], &[1], &mut fb).unwrap();
                    for r in 0..rows {
                        let at = format!("{} t{threads} [{rows}, {len}] row {r}", isa.name());
                        assert_eq!(oh[r].to_bits(), half::f16::from_f32(fh[r]).to_bits(), "f16 {at}");
                        assert_eq!(ob[r].to_bits(), half::bf16::from_f32(fb[r]).to_bits(), "bf16 {at}");
                    }
                }
            }
        }
    }

    #[test]
    fn normalization_merges_like_xnnpack() {
        let r = normalize(&[8, 4096, 64], &[1]);
        assert_eq!((r.shape, r.contiguous, r.n, r.outputs), ([1, 1, 1, 8, 4096, 64], false, 4096, 512));
        let r = normalize(&[8, 4096, 64], &[0, 2]);
        assert_eq!((r.shape, r.contiguous, r.n), ([1, 1, 1, 8, 4096, 64], true, 512));
        let r = normalize(&[1, 7, 7, 96], &[1, 2]);
        assert_eq!((r.shape, r.contiguous, r.n, r.outputs), ([1, 1, 1, 1, 49, 96], false, 49, 96));
        let r = normalize(&[2, 3, 1, 5, 6], &[2, 3, 4]);
        assert_eq!((r.shape, r.contiguous, r.n), ([1, 1, 1, 1, 6, 30], true, 30));
        let r = normalize(&[1, 1], &[0]);
        assert_eq!((r.n, r.outputs), (1, 1));
    }
}
