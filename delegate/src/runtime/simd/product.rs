//! Multiversioned product kernels: dot products, the window sums of convolutions (f32 and
//! qs8 with requantization) and the row blocks of matrix products.

use super::isa::{multiversion, Isa};
use crate::runtime::kernels::conv::ConvGeom;

/// The end of a [`dot`]: the remainder's products in order, then the 16 lanes in order.
#[inline(always)]
fn dot_finish(acc: &[f32; 16], a: &[f32], b: &[f32]) -> f32 {
    let mut s = 0f32;
    for (x, y) in a.iter().zip(b) {
        s += x * y;
    }
    for v in acc {
        s += v;
    }
    s
}

/// Dot product with 16 independent accumulators.
#[inline(always)]
fn dot_body(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 16];
    let mut ia = a.chunks_exact(16);
    let mut ib = b.chunks_exact(16);
    for (ca, cb) in (&mut ia).zip(&mut ib) {
        for j in 0..16 {
            acc[j] += ca[j] * cb[j];
        }
    }
    dot_finish(&acc, ia.remainder(), ib.remainder())
}

multiversion! {
    /// Dot product with 16 independent accumulators.
    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        dot_body(a, b)
    }
}

/// `acc[j] += x[j] * w[j]` over one chunk of 16.
#[inline(always)]
fn lanes(acc: &mut [f32; 16], x: &[f32], w: &[f32]) {
    let (x, w) = (&x[..16], &w[..16]);
    for j in 0..16 {
        acc[j] += x[j] * w[j];
    }
}

/// `[dot(a, b0), dot(a, b1)]`: each chunk of `a` loaded once for both.
#[inline(always)]
fn dot_1x2(a: &[f32], b0: &[f32], b1: &[f32], k: usize) -> [f32; 2] {
    let (a, b0, b1) = (&a[..k], &b0[..k], &b1[..k]);
    let (mut s0, mut s1) = ([0f32; 16], [0f32; 16]);
    let full = k / 16 * 16;
    for ((ca, c0), c1) in a[..full].chunks_exact(16).zip(b0[..full].chunks_exact(16)).zip(b1[..full].chunks_exact(16)) {
        lanes(&mut s0, ca, c0);
        lanes(&mut s1, ca, c1);
    }
    [dot_finish(&s0, &a[full..], &b0[full..]), dot_finish(&s1, &a[full..], &b1[full..])]
}

/// The four [`dot`]s of rows `a0, a1` with `b0, b1`: each chunk loaded once for two products.
#[inline(always)]
fn dot_2x2(a0: &[f32], a1: &[f32], b0: &[f32], b1: &[f32], k: usize) -> [[f32; 2]; 2] {
    let (a0, a1, b0, b1) = (&a0[..k], &a1[..k], &b0[..k], &b1[..k]);
    let (mut s00, mut s01, mut s10, mut s11) = ([0f32; 16], [0f32; 16], [0f32; 16], [0f32; 16]);
    let full = k / 16 * 16;
    let rows = a0[..full].chunks_exact(16).zip(a1[..full].chunks_exact(16));
    let cols = b0[..full].chunks_exact(16).zip(b1[..full].chunks_exact(16));
    for ((x0, x1), (w0, w1)) in rows.zip(cols) {
        lanes(&mut s00, x0, w0);
        lanes(&mut s01, x0, w1);
        lanes(&mut s10, x1, w0);
        lanes(&mut s11, x1, w1);
    }
    let f = |s: &[f32; 16], x: &[f32], w: &[f32]| dot_finish(s, &x[full..], &w[full..]);
    [[f(&s00, a0, b0), f(&s01, a0, b1)], [f(&s10, a1, b0), f(&s11, a1, b1)]]
}

multiversion! {
    /// `out[i * ldo + j] = dot(x[i * k..][..k], w[j * k..][..k])` for `i < rows`, `j < cols`,
    /// `dims = (rows, cols, k)`: each bit for bit [`dot`]'s sum, two rows by two columns at a
    /// time (a linear's outputs with its `[N, K]` weights read in place: half the loads of one
    /// dot at a time).
    pub fn dot_tile(out: &mut [f32], ldo: usize, x: &[f32], w: &[f32], dims: (usize, usize, usize)) {
        let (rows, cols, k) = dims;
        let xr = |i: usize| &x[i * k..(i + 1) * k];
        let wr = |j: usize| &w[j * k..(j + 1) * k];
        let mut i = 0;
        while i < rows {
            let mut j = 0;
            if i + 1 < rows {
                while j + 1 < cols {
                    let v = dot_2x2(xr(i), xr(i + 1), wr(j), wr(j + 1), k);
                    out[i * ldo + j..i * ldo + j + 2].copy_from_slice(&v[0]);
                    out[(i + 1) * ldo + j..(i + 1) * ldo + j + 2].copy_from_slice(&v[1]);
                    j += 2;
                }
                if j < cols {
                    // Products commute: dot(w, x) has dot(x, w)'s bits.
                    [out[i * ldo + j], out[(i + 1) * ldo + j]] = dot_1x2(wr(j), xr(i), xr(i + 1), k);
                }
                i += 2;
            } else {
                while j + 1 < cols {
                    let v = dot_1x2(xr(i), wr(j), wr(j + 1), k);
                    out[i * ldo + j..i * ldo + j + 2].copy_from_slice(&v);
                    j += 2;
                }
                if j < cols {
                    // A second product of the same row, not `dot_body`: inlining that here
                    // halved the speed of the whole tile loop (mlp4_prefill 34 -> 71 ms).
                    out[i * ldo + j] = dot_1x2(xr(i), wr(j), wr(j), k)[0];
                }
                i += 1;
            }
        }
    }
}

multiversion! {
    /// `acc[i] += x[i] * w[i]` (depthwise convolution's inner loop).
    pub fn mul_acc(acc: &mut [f32], x: &[f32], w: &[f32]) {
        let n = acc.len();
        let (x, w) = (&x[..n], &w[..n]);
        for i in 0..n {
            acc[i] += x[i] * w[i];
        }
    }
}

/// Where an accumulator starts from in the product kernels below: a convolution pixel's
/// first window starts from the bias, later ones from the accumulator.
#[derive(Clone, Copy, Debug)]
pub enum Start<'a, T> {
    /// The accumulator's current values.
    Acc,
    /// Zero.
    Zero,
    /// These values (a bias), indexed like the accumulator.
    From(&'a [T]),
}

/// Accumulator arithmetic: f32 multiply then add (two roundings, never fused, so that every
/// path and instruction set gives the same bits), or wrapping i32 (exact in any order).
pub trait Lane: Copy + Default {
    fn mul_add(self, s: Self, w: Self) -> Self;
}

impl Lane for f32 {
    #[inline(always)]
    fn mul_add(self, s: f32, w: f32) -> f32 {
        self + s * w
    }
}

impl Lane for i32 {
    #[inline(always)]
    fn mul_add(self, s: i32, w: i32) -> i32 {
        self.wrapping_add(s.wrapping_mul(w))
    }
}

/// Where a product's rows lie (a convolution window, or rows of a matrix product): output
/// pixel `p < pixels` sums, for each run `r < runs`, the `len` inputs
/// `x[p * pixel_step + r * x_step..][..len]` times the `len` filter rows from
/// `w[r * w_step..]`, each `ld` long; the pixel's outputs are columns `col..` of those rows.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub pixels: usize,
    pub pixel_step: usize,
    /// Runs of rows per pixel (a convolution's kernel rows inside the input).
    pub runs: usize,
    pub x_step: usize,
    pub w_step: usize,
    /// Rows per run (a kernel row's taps inside the input times input channels).
    pub len: usize,
    /// Filter row length: at least `col` plus the outputs per pixel; columns past them are
    /// padding, computed and dropped.
    pub ld: usize,
    pub col: usize,
}

/// The blocks of `len <= B` outputs from `j` on of `P` consecutive pixels (outputs `n` apart in
/// `acc`), kept in registers across every row of every run: `acc[q n + j + t] = start[j + t] +
/// sum over rows of x_q * w[col + j + t]`, rows in order, for each pixel `q < P`. Each filter
/// row is loaded once for the `P` pixels (a convolution's few output channels make one pixel's
/// block a single register, and the per-run and per-block bookkeeping is then shared by `P`
/// pixels instead of paid by each). The filter columns past `len` must exist
/// (`col + j + B <= ld`): padding, computed and dropped. Partial loads and stores are element
/// loops over the fixed `B`, not copies of a run-time length (which would be calls to `memcpy`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn window_block<T: Lane, X: Copy, const B: usize, const P: usize>(
    acc: &mut [T],
    n: usize,
    start: Start<T>,
    x: &[X],
    xv: impl Fn(X) -> T,
    w: &[T],
    win: &Window,
    j: usize,
    len: usize,
) {
    let mut r = [[T::default(); B]; P];
    for (q, rq) in r.iter_mut().enumerate() {
        let from = match start {
            Start::Acc => Some(&acc[q * n + j..q * n + j + len]),
            Start::Zero => None,
            Start::From(b) => Some(&b[j..j + len]),
        };
        if let Some(from) = from {
            for t in 0..B {
                if t < len {
                    rq[t] = from[t];
                }
            }
        }
    }
    let c = win.col + j;
    assert!(c + B <= win.ld, "product block outside the filter rows");
    for run in 0..win.runs {
        let ws = &w[run * win.w_step..][..win.len * win.ld];
        let xs: [&[X]; P] = std::array::from_fn(|q| &x[q * win.pixel_step + run * win.x_step..][..win.len]);
        for (i, row) in (0..win.len).zip(ws.chunks_exact(win.ld)) {
            let wr = &row[c..c + B];
            for q in 0..P {
                let s = xv(xs[q][i]);
                for t in 0..B {
                    r[q][t] = r[q][t].mul_add(s, wr[t]);
                }
            }
        }
    }
    for (q, rq) in r.iter().enumerate() {
        let a = &mut acc[q * n + j..q * n + j + len];
        for t in 0..B {
            if t < len {
                a[t] = rq[t];
            }
        }
    }
}

/// The outputs of `P` consecutive pixels (`n` each, from `acc[0]` on, the first pixel's inputs
/// from `x[0]` on): blocks of 16, 8 and 4 outputs, a ragged end as one more 4-wide block when
/// the filter rows have room for it (packed filters are padded to a multiple of 4 columns),
/// else one output at a time.
#[inline(always)]
fn window_pixels<T: Lane, X: Copy, const P: usize>(
    acc: &mut [T],
    n: usize,
    start: Start<T>,
    x: &[X],
    xv: impl Fn(X) -> T + Copy,
    w: &[T],
    win: &Window,
) {
    let mut j = 0;
    while j + 16 <= n {
        window_block::<T, X, 16, P>(acc, n, start, x, xv, w, win, j, 16);
        j += 16;
    }
    if j + 8 <= n {
        window_block::<T, X, 8, P>(acc, n, start, x, xv, w, win, j, 8);
        j += 8;
    }
    if j + 4 <= n {
        window_block::<T, X, 4, P>(acc, n, start, x, xv, w, win, j, 4);
        j += 4;
    }
    if j < n && win.col + j + 4 <= win.ld {
        window_block::<T, X, 4, P>(acc, n, start, x, xv, w, win, j, n - j);
        j = n;
    }
    while j < n {
        window_block::<T, X, 1, P>(acc, n, start, x, xv, w, win, j, 1);
        j += 1;
    }
}

/// `P` consecutive pixels of a [`Window`] whose filter rows are exactly `L` columns from column
/// 0 (`ld == L`, `col == 0`, `n <= L` outputs per pixel): one block of `L` accumulators per
/// pixel, rows of a compile-time width. A convolution's few output channels (packed to 4 or 8
/// columns) on a small image make windows of a pixel or two and a handful of rows, where the
/// general path's block and bounds bookkeeping cost several times the arithmetic.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn window_narrow<T: Lane, X: Copy, const L: usize, const P: usize, const FULL: bool>(
    acc: &mut [T],
    n: usize,
    start: Start<T>,
    x: &[X],
    xv: impl Fn(X) -> T,
    w: &[T],
    win: &Window,
) {
    let mut r = [[T::default(); L]; P];
    for (q, rq) in r.iter_mut().enumerate() {
        let from = match start {
            Start::Acc => Some(&acc[q * n..q * n + n]),
            Start::Zero => None,
            Start::From(b) => Some(&b[..n]),
        };
        if let Some(from) = from {
            if FULL {
                // n == L: a copy of known length (one vector load, no test per element).
                rq.copy_from_slice(&from[..L]);
            } else {
                // n < L: the first n (the zip stops at `from`'s end; no test per element).
                for (d, &v) in rq.iter_mut().zip(from) {
                    *d = v;
                }
            }
        }
    }
    for run in 0..win.runs {
        let ws = &w[run * win.w_step..][..win.len * L];
        let xs: [&[X]; P] = std::array::from_fn(|q| &x[q * win.pixel_step + run * win.x_step..][..win.len]);
        for (i, wr) in ws.chunks_exact(L).enumerate() {
            for q in 0..P {
                let s = xv(xs[q][i]);
                for t in 0..L {
                    r[q][t] = r[q][t].mul_add(s, wr[t]);
                }
            }
        }
    }
    for (q, rq) in r.iter().enumerate() {
        let a = &mut acc[q * n..q * n + n];
        if FULL {
            a[..L].copy_from_slice(rq);
        } else {
            for (d, &v) in a.iter_mut().zip(rq) {
                *d = v;
            }
        }
    }
}

/// Every pixel of a [`Window`] of `L`-column filter rows (see [`window_narrow`]), four at a
/// time while four are left.
#[inline(always)]
fn window_narrow_all<T: Lane, X: Copy, const L: usize, const FULL: bool>(
    out: &mut [T],
    n: usize,
    start: Start<T>,
    x: &[X],
    xv: impl Fn(X) -> T + Copy,
    w: &[T],
    win: &Window,
) {
    let mut p = 0;
    while p + 4 <= win.pixels {
        window_narrow::<T, X, L, 4, FULL>(&mut out[p * n..], n, start, &x[p * win.pixel_step..], xv, w, win);
        p += 4;
    }
    while p < win.pixels {
        window_narrow::<T, X, L, 1, FULL>(&mut out[p * n..], n, start, &x[p * win.pixel_step..], xv, w, win);
        p += 1;
    }
}

/// Every pixel of a [`Window`], four at a time while four are left (see [`window_block`]),
/// then one at a time. Each output's sum runs in the same order either way.
#[inline(always)]
fn window_body<T: Lane, X: Copy>(
    out: &mut [T],
    start: Start<T>,
    x: &[X],
    xv: impl Fn(X) -> T + Copy,
    w: &[T],
    win: Window,
) {
    if win.pixels == 0 || out.is_empty() {
        return;
    }
    assert!(out.len().is_multiple_of(win.pixels), "outputs are not whole pixels");
    let n = out.len() / win.pixels;
    if win.col == 0 && n <= win.ld {
        match win.ld {
            // Every output column a filter column (the common 4 or 8 output channels), or
            // padding columns past the outputs.
            4 if n == 4 => return window_narrow_all::<T, X, 4, true>(out, n, start, x, xv, w, &win),
            8 if n == 8 => return window_narrow_all::<T, X, 8, true>(out, n, start, x, xv, w, &win),
            4 => return window_narrow_all::<T, X, 4, false>(out, n, start, x, xv, w, &win),
            8 => return window_narrow_all::<T, X, 8, false>(out, n, start, x, xv, w, &win),
            _ => {}
        }
    }
    if n.is_multiple_of(STATIONARY_B) && win.pixels >= 4 && win.runs == 1 && win.pixel_step > 0 {
        match win.len {
            1 => return window_stationary::<T, X, 1>(out, n, start, x, xv, w, &win),
            2 => return window_stationary::<T, X, 2>(out, n, start, x, xv, w, &win),
            3 => return window_stationary::<T, X, 3>(out, n, start, x, xv, w, &win),
            4 => return window_stationary::<T, X, 4>(out, n, start, x, xv, w, &win),
            _ => {}
        }
    }
    let mut p = 0;
    while p + 4 <= win.pixels {
        window_pixels::<T, X, 4>(&mut out[p * n..], n, start, &x[p * win.pixel_step..], xv, w, &win);
        p += 4;
    }
    while p < win.pixels {
        window_pixels::<T, X, 1>(&mut out[p * n..], n, start, &x[p * win.pixel_step..], xv, w, &win);
        p += 1;
    }
}

/// Outputs per block of [`window_stationary`].
const STATIONARY_B: usize = 16;

/// A window of one run of exactly `K` rows (a 1x1 convolution of a few input channels, as an
/// RGB stem's): per block of 16 outputs, the block's `K` filter rows stay in registers while
/// every pixel runs through them, so a pixel's block costs `K` products and a store instead
/// of [`window_block`]'s per-block setup, which is most of the work at `K <= 4` (conv 3->96
/// 1x1 on 56x56: about 5 instructions per output there, callgrind, AVX2). Each output is
/// `start + x[0] w[0] + x[1] w[1] + ...` in the same row order as `window_block`, so the same
/// bits.
#[inline(always)]
fn window_stationary<T: Lane, X: Copy, const K: usize>(
    out: &mut [T],
    n: usize,
    start: Start<T>,
    x: &[X],
    xv: impl Fn(X) -> T,
    w: &[T],
    win: &Window,
) {
    const B: usize = STATIONARY_B;
    // Every pixel's window inside `x` (the zip below would otherwise stop short silently).
    assert!(win.pixels > 0 && (win.pixels - 1) * win.pixel_step + K <= x.len(), "product window outside its input");
    for j in (0..n).step_by(B) {
        let c = win.col + j;
        assert!(c + B <= win.ld, "product block outside the filter rows");
        let wr: [[T; B]; K] = std::array::from_fn(|k| std::array::from_fn(|t| w[k * win.ld + c + t]));
        let bias: [T; B] = match start {
            Start::From(b) => std::array::from_fn(|t| b[j + t]),
            Start::Zero | Start::Acc => [T::default(); B],
        };
        for (o, xq) in out.chunks_exact_mut(n).zip(x.chunks(win.pixel_step)) {
            let o: &mut [T; B] = (&mut o[j..j + B]).try_into().expect("a block of B outputs");
            let xq: &[X; K] = xq[..K].try_into().expect("a window of K rows");
            let mut r = if let Start::Acc = start { *o } else { bias };
            for k in 0..K {
                let s = xv(xq[k]);
                for t in 0..B {
                    r[t] = r[t].mul_add(s, wr[k][t]);
                }
            }
            *o = r;
        }
    }
}

multiversion! {
    /// The f32 sums of a [`Window`] into `out` (`win.pixels` pixels of equal width), each
    /// output `start + x[0] w[0] + x[1] w[1] + ...` in row order: an axpy per row, the
    /// outputs kept in registers across the rows, so a convolution's row of output pixels
    /// that share a window shape is one call.
    pub fn window_f32(out: &mut [f32], start: Start<f32>, x: &[f32], w: &[f32], win: Window) {
        window_body(out, start, x, |v| v, w, win);
    }
}

multiversion! {
    /// Output pixels `first..` of a convolution whose windows are products
    /// ([`ConvGeom::windows`]) into `out` (whole pixels), `shapes` the NHWC input and
    /// output shapes, `w` the packed filter with rows of `ld`: every window of the chunk in one
    /// dispatch (a small image's windows are a pixel or two each, and a call per window cost
    /// more than its arithmetic).
    #[allow(clippy::too_many_arguments)]
    pub fn conv_windows_f32(
        g: &ConvGeom,
        shapes: [&[usize]; 2],
        ld: usize,
        first: usize,
        out: &mut [f32],
        start: Start<f32>,
        x: &[f32],
        w: &[f32],
    ) {
        let oc = shapes[1][3];
        if oc == 0 {
            return;
        }
        for (p, xb, wb, win) in g.windows(shapes[0], shapes[1], ld, first, out.len() / oc) {
            let o = &mut out[p * oc..(p + win.pixels) * oc];
            window_body(o, start, &x[xb..], |v| v, &w[wb..], win);
        }
    }
}

multiversion! {
    /// [`window_f32`] for qs8: `start + sum (x - zx) * w` in wrapping i32, `w` the packed
    /// filter minus its zero point.
    pub fn window_qs8(out: &mut [i32], start: Start<i32>, x: &[i8], zx: i32, w: &[i32], win: Window) {
        window_body(out, start, x, |v| (v as i32).wrapping_sub(zx), w, win);
    }
}

/// Requantization of a qs8 convolution: the output scale multiplier, the fused range in output
/// quanta (`lo <= hi`) and the output zero point.
#[derive(Clone, Copy, Debug)]
pub struct Requant {
    pub mult: f32,
    pub lo: f32,
    pub hi: f32,
    pub zp: f32,
}

/// int32 accumulators to qs8: `clamp(round_half_even(clamp(acc * mult, lo, hi)) + zp)` to
/// [-128, 127] (rounding here is one instruction, not a call to `rintf`).
#[inline(always)]
fn requantize_body(acc: &[i32], rq: Requant, out: &mut [i8]) {
    let acc = &acc[..out.len()];
    for i in 0..out.len() {
        let v = (acc[i] as f32 * rq.mult).clamp(rq.lo, rq.hi);
        out[i] = (v.round_ties_even() + rq.zp).clamp(-128.0, 127.0) as i8;
    }
}

multiversion! {
    /// int32 accumulators to qs8 (see [`Requant`]).
    pub fn requantize(acc: &[i32], rq: Requant, out: &mut [i8]) {
        requantize_body(acc, rq, out);
    }
}

multiversion! {
    /// [`conv_windows_f32`] for qs8: each window's int32 sums `start + sum (x - zx) * w` (`w`
    /// the packed filter minus its zero point) into `acc` (scratch of at least a window's
    /// outputs), then requantized into `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn conv_windows_qs8(
        g: &ConvGeom,
        shapes: [&[usize]; 2],
        ld: usize,
        first: usize,
        out: &mut [i8],
        acc: &mut [i32],
        start: Start<i32>,
        x: &[i8],
        zx: i32,
        w: &[i32],
        rq: Requant,
    ) {
        let oc = shapes[1][3];
        if oc == 0 {
            return;
        }
        for (p, xb, wb, win) in g.windows(shapes[0], shapes[1], ld, first, out.len() / oc) {
            let a = &mut acc[..win.pixels * oc];
            window_body(a, start, &x[xb..], |v| (v as i32).wrapping_sub(zx), &w[wb..], win);
            requantize_body(a, rq, &mut out[p * oc..(p + win.pixels) * oc]);
        }
    }
}

/// Sizes of a matrix product `[m, k] x [k, n]` whose right operand has rows of `ld >= n`.
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    pub k: usize,
    pub n: usize,
    pub ld: usize,
}

multiversion! {
    /// Elements `first..first + out.len()` of the row-major `[m, n]` product `bias + x w`
    /// (`x` `[m, k]`, `w` `[k, ld]`, `bias` per column), each element's sum in row order as in
    /// [`window_f32`]. Rows may be partial (threads split anywhere); one dispatch for all of
    /// them, as the rows of a small linear are often only a few elements long.
    pub fn gemm_rows(out: &mut [f32], first: usize, x: &[f32], w: &[f32], d: Gemm, bias: Option<&[f32]>) {
        let Gemm { k, n, ld } = d;
        if out.is_empty() || n == 0 {
            return;
        }
        let start = |c0: usize| match bias {
            Some(b) => Start::From(&b[c0..]),
            None => Start::Zero,
        };
        let row = |pixels: usize, col: usize| Window { pixels, pixel_step: k, runs: 1, x_step: 0, w_step: 0, len: k, ld, col };
        // A partial first row, whole rows, then a partial last row.
        let (r0, c0) = (first / n, first % n);
        let head = if c0 == 0 { 0 } else { (n - c0).min(out.len()) };
        let (head_out, rest) = out.split_at_mut(head);
        window_body(head_out, start(c0), &x[r0 * k..], |v| v, w, row(1, c0));
        let r1 = if head > 0 { r0 + 1 } else { r0 };
        let full = rest.len() / n;
        let (rows, tail) = rest.split_at_mut(full * n);
        window_body(rows, start(0), &x[r1 * k..], |v| v, w, row(full, 0));
        window_body(tail, start(0), &x[(r1 + full) * k..], |v| v, w, row(1, 0));
    }
}
