//! 2-D convolution on NHWC, XNNPACK's conventions: regular filters are `[O, kh, kw, I/groups]`,
//! depthwise filters `[1, kh, kw, C*multiplier]` (output channel `c*multiplier + m` reads input
//! channel `c`). f32 compute (fp16 through f32), threaded over output pixels.
//!
//! Each output pixel starts from the bias and adds its taps in kernel order (`ky`, `kx`, input
//! channel), whatever path computes it, so every path gives the same bits.

use super::convert::{from_f32, to_f32};
use super::{sized_for_overwrite, Ctx, Scratch, View, ViewMut};
use crate::runtime::simd::{self, Start};
use half::{bf16, f16};
use std::borrow::Cow;
use std::ops::Range;

/// Geometry of one convolution (XNNPACK's `_XNNNodeConv` fields that matter here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvGeom {
    /// top, right, bottom, left
    pub padding: [usize; 4],
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
    pub group_in: usize,
    pub group_out: usize,
    pub depthwise: bool,
}

/// The taps `k < n` whose padded coordinate `o + k * d` lies inside `before..before + len`
/// (the input; padding taps add nothing).
fn taps_inside(o: usize, before: usize, len: usize, d: usize, n: usize) -> Range<usize> {
    let lo = if o >= before { 0 } else { (before - o).div_ceil(d) };
    let hi = if o >= before + len { 0 } else { (before + len - o).div_ceil(d).min(n) };
    lo.min(hi)..hi
}

impl ConvGeom {
    /// Calls `f(tap, xb, len)` for every run of kernel taps of output pixel `(n, y, xo)` that
    /// land inside an `[N, h, wd, c]` NHWC input (padding taps add nothing): `len` taps of one
    /// kernel row from tap `tap = ky * kw + kx` on, whose inputs start at offset `xb` and
    /// follow each other every `c` elements. Without horizontal dilation the taps of a kernel
    /// row inside the input are one run (the kernels then make one call per kernel row, not one
    /// per tap); with it each tap is a run. The window is computed once per pixel, not tested
    /// per tap. Shared by the float and qs8 kernels so both walk the same window.
    #[inline]
    pub fn for_each_run(
        &self,
        h: usize,
        wd: usize,
        c: usize,
        pix: (usize, usize, usize),
        mut f: impl FnMut(usize, usize, usize),
    ) {
        let (n, y, xo) = pix;
        let (top, left) = (self.padding[0], self.padding[3]);
        let (oy, ox) = (y * self.stride[0], xo * self.stride[1]);
        let kys = taps_inside(oy, top, h, self.dilation[0], self.kernel[0]);
        let kxs = taps_inside(ox, left, wd, self.dilation[1], self.kernel[1]);
        if kxs.is_empty() {
            return;
        }
        let ix0 = ox + kxs.start * self.dilation[1] - left;
        for ky in kys {
            let iy = oy + ky * self.dilation[0] - top;
            let xb = ((n * h + iy) * wd + ix0) * c;
            let tap = ky * self.kernel[1] + kxs.start;
            if self.dilation[1] == 1 {
                f(tap, xb, kxs.len());
            } else {
                for t in 0..kxs.len() {
                    f(tap + t, xb + t * self.dilation[1] * c, 1);
                }
            }
        }
    }

    /// Output `[N, OH, OW, O]` for an input `[N, H, W, C]`, or why the geometry is invalid.
    pub fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
        if input.len() != 4 {
            return Err(format!("convolution input must be 4-D NHWC, got {input:?}"));
        }
        if self.groups == 0
            || self.group_in == 0
            || self.group_out == 0
            || self.stride.contains(&0)
            || self.dilation.contains(&0)
            || self.kernel.contains(&0)
        {
            return Err(format!("invalid convolution geometry {self:?}"));
        }
        if Some(input[3]) != self.groups.checked_mul(self.group_in) {
            return Err(format!(
                "input has {} channels, the node expects {} x {}",
                input[3], self.groups, self.group_in
            ));
        }
        let mut out = vec![input[0]];
        for k in 0..2 {
            let (before, after) =
                if k == 0 { (self.padding[0], self.padding[2]) } else { (self.padding[3], self.padding[1]) };
            let padded = input[1 + k].saturating_add(before).saturating_add(after);
            let span = self.dilation[k].saturating_mul(self.kernel[k] - 1).saturating_add(1);
            if padded < span {
                return Err(format!("kernel {span} larger than padded input {padded}"));
            }
            out.push((padded - span) / self.stride[k] + 1);
        }
        out.push(self.groups.checked_mul(self.group_out).ok_or("output channel count overflows")?);
        Ok(out)
    }

    /// Elements of the filter (`None` on overflow: such a node cannot be valid).
    pub fn filter_len(&self) -> Option<usize> {
        let khw = self.kernel[0].checked_mul(self.kernel[1])?;
        let per_group = if self.depthwise { 1 } else { self.group_in };
        khw.checked_mul(self.groups)?.checked_mul(self.group_out)?.checked_mul(per_group)
    }

    /// Whether the kernels read the filter packed by [`pack_filter`]: regular convolutions, and
    /// depthwise ones of a single group (one input channel: the same product as a regular
    /// convolution). Other depthwise filters are read as stored.
    pub fn packs(&self) -> bool {
        !self.depthwise || self.groups == 1
    }

    /// Row length of the packed filter: a group's output channels rounded up to a multiple of
    /// 4, so that the kernels' axpy runs whole 4-wide blocks (the padding columns are zero).
    pub fn packed_ld(&self) -> usize {
        self.group_out.div_ceil(4) * 4
    }

    /// Elements of the packed filter (`None` on overflow).
    pub fn packed_len(&self) -> Option<usize> {
        let rows = self.kernel[0].checked_mul(self.kernel[1])?.checked_mul(self.group_in)?;
        rows.checked_mul(self.groups)?.checked_mul(self.group_out.checked_next_multiple_of(4)?)
    }

    /// Whether every window is one product ([`ConvGeom::windows`]): one group (regular,
    /// or depthwise of one input channel) and no horizontal dilation, so that a kernel row's
    /// taps inside the input are adjacent inputs and consecutive rows of the packed filter.
    pub(super) fn windows_are_products(&self) -> bool {
        self.groups == 1 && self.dilation[1] == 1
    }

    /// The windows of output pixels `first..first + count` (flat `[N, OH, OW]` indices) of a
    /// geometry whose windows are products, row by row: `(p, xb, wb, win)` for each group of
    /// consecutive pixels of one output row that share a window shape, `p` its first pixel
    /// counted from `first`, `xb` and `wb` the input and packed-filter offsets where its
    /// first pixel's window starts. A row's interior (every tap inside the input) is one
    /// group; the pixels near its ends, clipped by the padding, are one each. The window is
    /// clipped once per group, not tested per tap. An iterator rather than a callback so that
    /// `simd::conv_windows_*` compile the walk and the window kernels as one function for
    /// their instruction set (a closure would be compiled apart, for the baseline).
    pub(crate) fn windows(&self, ish: &[usize], osh: &[usize], ld: usize, first: usize, count: usize) -> Windows {
        let (left, kw, sx, wd) = (self.padding[3], self.kernel[1], self.stride[1], ish[2]);
        Windows {
            h: ish[1],
            wd,
            c: ish[3],
            oh: osh[1],
            ow: osh[2],
            top: self.padding[0],
            left,
            kh: self.kernel[0],
            kw,
            sy: self.stride[0],
            sx,
            dy: self.dilation[0],
            // Output columns whose taps are all inside the input.
            full: left.div_ceil(sx)..if left + wd >= kw { (left + wd - kw) / sx + 1 } else { 0 },
            ld,
            first,
            count,
            p: 0,
            n: 0,
            y: 0,
            x0: 0,
            x1: 0,
            xo: 0,
            kys: 0..0,
        }
    }
}

/// The iterator of [`ConvGeom::windows`]: the geometry's constants, then the output row
/// segment in progress (`x0..x1` of row `y` of image `n`, its first pixel `p` from `first`)
/// and the next window's first column `xo`.
pub(crate) struct Windows {
    h: usize,
    wd: usize,
    c: usize,
    oh: usize,
    ow: usize,
    top: usize,
    left: usize,
    kh: usize,
    kw: usize,
    sy: usize,
    sx: usize,
    dy: usize,
    full: Range<usize>,
    ld: usize,
    first: usize,
    count: usize,
    p: usize,
    n: usize,
    y: usize,
    x0: usize,
    x1: usize,
    xo: usize,
    kys: Range<usize>,
}

impl Iterator for Windows {
    type Item = (usize, usize, usize, simd::Window);

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        if self.xo >= self.x1 {
            // The next row segment.
            self.p += self.x1 - self.x0;
            if self.p >= self.count {
                return None;
            }
            let q = self.first + self.p;
            (self.n, self.y, self.x0) = (q / (self.oh * self.ow), (q / self.ow) % self.oh, q % self.ow);
            self.x1 = self.ow.min(self.x0 + self.count - self.p);
            self.kys = taps_inside(self.y * self.sy, self.top, self.h, self.dy, self.kh);
            self.xo = self.x0;
        }
        let (xo, c, ld) = (self.xo, self.c, self.ld);
        let end = if self.full.contains(&xo) { self.x1.min(self.full.end) } else { xo + 1 };
        let kxs = taps_inside(xo * self.sx, self.left, self.wd, 1, self.kw);
        let kys = self.kys.clone();
        let mut win = simd::Window {
            pixels: end - xo,
            pixel_step: self.sx * c,
            runs: kys.len(),
            x_step: self.dy * self.wd * c,
            w_step: self.kw * c * ld,
            len: kxs.len() * c,
            ld,
            col: 0,
        };
        let (mut xb, mut wb) = (0, 0);
        if kys.is_empty() || kxs.is_empty() {
            win.runs = 0; // every tap in the padding: the outputs are the bias
        } else {
            let (iy, ix) = (self.y * self.sy + kys.start * self.dy - self.top, xo * self.sx + kxs.start - self.left);
            xb = ((self.n * self.h + iy) * self.wd + ix) * c;
            wb = (kys.start * self.kw + kxs.start) * c * ld;
        }
        self.xo = end;
        Some((self.p + xo - self.x0, xb, wb, win))
    }
}

/// Output pixels `(n, y, x)` in order from a flat pixel index on (no division per pixel).
pub(super) struct Pixels {
    at: (usize, usize, usize),
    oh: usize,
    ow: usize,
}

impl Pixels {
    pub(super) fn new(first: usize, oh: usize, ow: usize) -> Pixels {
        let plane = (oh * ow).max(1);
        Pixels { at: (first / plane, (first % plane) / ow.max(1), first % ow.max(1)), oh, ow }
    }
}

impl Iterator for Pixels {
    type Item = (usize, usize, usize);
    fn next(&mut self) -> Option<Self::Item> {
        let here = self.at;
        let (n, y, x) = &mut self.at;
        *x += 1;
        if *x == self.ow {
            *x = 0;
            *y += 1;
            if *y == self.oh {
                *y = 0;
                *n += 1;
            }
        }
        Some(here)
    }
}

/// Packs a filter as XNNPACK packs it: one row of a group's output channels per (group, tap,
/// input channel), rows padded with zeros to [`ConvGeom::packed_ld`] columns, so the inner
/// loop is an axpy across output channels. A dot product per output channel over `group_in`
/// inputs costs a call and a horizontal sum each; with the 3 input channels of a first layer
/// that was ~50x slower than the arithmetic. Filters the kernels read as stored (see
/// [`ConvGeom::packs`]) are converted in place. `w` must have the geometry's `filter_len`
/// (`out` is left empty otherwise).
pub(super) fn pack_into<T: Copy, U: Copy + Default>(g: &ConvGeom, w: &[T], f: impl Fn(T) -> U, out: &mut Vec<U>) {
    out.clear();
    if Some(w.len()) != g.filter_len() {
        return;
    }
    if !g.packs() {
        out.extend(w.iter().map(|&v| f(v)));
        return;
    }
    let Some(len) = g.packed_len() else { return };
    out.resize(len, U::default());
    let (taps, cin, go, ld) = (g.kernel[0] * g.kernel[1], g.group_in, g.group_out, g.packed_ld());
    if g.depthwise {
        // One group and one input channel: the stored `[1, kh, kw, O]` rows, padded.
        for tap in 0..taps {
            for m in 0..go {
                out[tap * ld + m] = f(w[tap * go + m]);
            }
        }
        return;
    }
    for gi in 0..g.groups {
        for m in 0..go {
            let k = gi * go + m;
            for tap in 0..taps {
                for ci in 0..cin {
                    out[((gi * taps + tap) * cin + ci) * ld + m] = f(w[(k * taps + tap) * cin + ci]);
                }
            }
        }
    }
}

/// The fp32 filter packed for the kernels (see [`pack_into`]). The plan packs constant
/// filters once, as XNNPACK does at operator creation; `conv2d` packs any other filter per
/// call. Empty when `w` does not have the geometry's `filter_len`.
pub fn pack_filter(g: &ConvGeom, w: &[f32]) -> Vec<f32> {
    let mut p = Vec::new();
    pack_into(g, w, |v| v, &mut p);
    p
}

/// A float filter view packed into `out` (fp16 and bf16 widened on the way).
fn pack_view_into(g: &ConvGeom, w: View, out: &mut Vec<f32>) -> Result<(), String> {
    match w {
        View::F32(w) => pack_into(g, w, |v| v, out),
        View::F16(w) => pack_into(g, w, f16::to_f32, out),
        View::Bf16(w) => pack_into(g, w, bf16::to_f32, out),
        other => return Err(format!("{} weights are not supported", other.type_name())),
    }
    Ok(())
}

/// `w` is the filter packed by [`pack_filter`] when `g.packs()`, else as stored (depthwise).
#[allow(clippy::too_many_arguments)]
fn conv_f32(
    ctx: &Ctx,
    g: &ConvGeom,
    x: &[f32],
    ish: &[usize],
    w: &[f32],
    b: Option<&[f32]>,
    out: &mut [f32],
    osh: &[usize],
) {
    let (h, wd, c) = (ish[1], ish[2], ish[3]);
    let (oh, ow, oc) = (osh[1], osh[2], osh[3]);
    let (taps, cin, go, ld) = (g.kernel[0] * g.kernel[1], g.group_in, g.group_out, g.packed_ld());
    let isa = ctx.isa;
    let bytes = (x.len() + w.len() + out.len()) * 4 * taps;
    let from = match b {
        Some(b) => Start::From(b),
        None => Start::Zero,
    };
    if g.windows_are_products() {
        ctx.par_chunks(out, bytes, oc, false, |start, chunk| {
            simd::conv_windows_f32(isa, g, [ish, osh], ld, start / oc, chunk, from, x, w);
        });
        return;
    }
    // Several groups, a depthwise filter of several channels, or horizontal dilation: each
    // pixel's taps one at a time (or, without dilation, a depthwise kernel row at a time).
    ctx.par_chunks(out, bytes, oc, false, |start, chunk| {
        for (o, pix) in chunk.chunks_mut(oc).zip(Pixels::new(start / oc, oh, ow)) {
            let mut from = from;
            if g.groups != 1 {
                init(o, from);
                from = Start::Acc;
            }
            g.for_each_run(h, wd, c, pix, |tap, xb, len| {
                for t in 0..len {
                    let (tap, xr) = (tap + t, &x[xb + t * c..xb + (t + 1) * c]);
                    if g.groups == 1 {
                        // One group, dilated: a tap's input channels against its filter rows.
                        simd::window_f32(isa, o, from, xr, &w[tap * c * ld..], single_run(c, ld));
                        from = Start::Acc;
                    } else if g.depthwise {
                        let wr = &w[tap * oc..(tap + 1) * oc];
                        if go == 1 {
                            simd::mul_acc(isa, o, xr, wr);
                        } else {
                            for (ch, &xv) in xr.iter().enumerate() {
                                for m in 0..go {
                                    let k = ch * go + m;
                                    o[k] += xv * wr[k];
                                }
                            }
                        }
                    } else {
                        for gi in 0..g.groups {
                            let og = &mut o[gi * go..(gi + 1) * go];
                            let rows = (gi * taps + tap) * cin * ld;
                            let xs = &xr[gi * cin..(gi + 1) * cin];
                            simd::window_f32(isa, og, Start::Acc, xs, &w[rows..], single_run(cin, ld));
                        }
                    }
                }
            });
            // Every tap in the padding: the output is the bias.
            init(o, from);
        }
    });
}

/// One pixel's single run of `len` rows of `ld` columns (a tap's input channels).
pub(super) fn single_run(len: usize, ld: usize) -> simd::Window {
    simd::Window { pixels: 1, pixel_step: 0, runs: 1, x_step: 0, w_step: 0, len, ld, col: 0 }
}

/// Sets a pixel's outputs to where its sum starts, unless they already hold it.
pub(super) fn init<T: Copy + Default>(o: &mut [T], from: Start<T>) {
    match from {
        Start::Acc => {}
        Start::Zero => o.fill(T::default()),
        Start::From(b) => o.copy_from_slice(b),
    }
}

/// Convolution with an optional bias and fused output clamp. `packed`: the filter already
/// packed by [`pack_filter`] (constant filters; ignored unless it has the packed length).
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    ctx: &Ctx,
    g: &ConvGeom,
    x: View,
    ish: &[usize],
    w: View,
    packed: Option<&[f32]>,
    b: Option<View>,
    out: ViewMut,
    osh: &[usize],
    act: Option<(f32, f32)>,
    scratch: &mut Scratch,
) -> Result<(), String> {
    let want = g.output_shape(ish)?;
    if want != osh {
        return Err(format!("convolution output {osh:?}, geometry gives {want:?}"));
    }
    if Some(w.len()) != g.filter_len() {
        return Err(format!("filter of {} elements, geometry needs {:?}", w.len(), g.filter_len()));
    }
    if x.len() != ish.iter().product::<usize>() || out.len() != osh.iter().product::<usize>() {
        return Err("convolution buffers do not match their shapes".into());
    }
    let oc = osh[3];
    let bf = b.map(float_cow).transpose()?;
    if bf.as_ref().is_some_and(|b| b.len() != oc) {
        return Err(format!("bias length differs from {oc} output channels"));
    }
    let Scratch { a: sa, b: sb, c: sc, .. } = scratch;
    // fp32 weights and bias are read in place; anything else is widened.
    let stored;
    let wf: &[f32] = if !g.packs() {
        stored = float_cow(w)?;
        &stored
    } else {
        let len = g.packed_len().ok_or("packed filter size overflows")?;
        match packed {
            Some(p) if p.len() == len => p,
            _ => {
                pack_view_into(g, w, sb)?;
                &sb[..]
            }
        }
    };
    let xf = to_f32(ctx, x, sa)?;
    let finish = |o: &mut [f32]| {
        if let Some((lo, hi)) = act {
            super::elementwise::clamp_f32(ctx, o, lo, hi);
        }
    };
    match out {
        ViewMut::F32(o) => {
            conv_f32(ctx, g, xf, ish, wf, bf.as_deref(), o, osh);
            finish(o);
            Ok(())
        }
        o @ (ViewMut::F16(_) | ViewMut::Bf16(_)) => {
            let t = sized_for_overwrite(sc, o.len()); // conv_f32 writes every output
            conv_f32(ctx, g, xf, ish, wf, bf.as_deref(), t, osh);
            finish(t);
            from_f32(ctx, t, o)
        }
        o => Err(format!("convolution into {}", o.type_name())),
    }
}

/// A float view as f32: fp32 borrowed in place (no per-call copy of the weights), fp16 and
/// bf16 widened into an owned vector.
pub fn float_cow(v: View<'_>) -> Result<Cow<'_, [f32]>, String> {
    match v {
        View::F32(x) => Ok(Cow::Borrowed(x)),
        other => float_vec(other).map(Cow::Owned),
    }
}

/// A float view widened to an owned f32 vector (weights, biases).
pub fn float_vec(v: View) -> Result<Vec<f32>, String> {
    Ok(match v {
        View::F32(x) => x.to_vec(),
        View::F16(x) => x.iter().map(|v| v.to_f32()).collect(),
        View::Bf16(x) => x.iter().map(|v| v.to_f32()).collect(),
        other => return Err(format!("{} weights are not supported", other.type_name())),
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::runtime::pool::Pool;
    use crate::runtime::simd::available_isas;
    use crate::runtime::ThreadPolicy;

    /// Deterministic values in [-2, 2) (xorshift).
    pub fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 22) as f32 - 2.0
            })
            .collect()
    }

    /// One thread, and two threads with XNNPACK's many small tasks (chunks start mid-row).
    pub fn pools() -> Vec<Pool> {
        vec![Pool::new(1, ThreadPolicy::CostModel).unwrap(), Pool::new(2, ThreadPolicy::PerOutputTasks).unwrap()]
    }

    fn geom(kernel: [usize; 2], padding: [usize; 4], groups: usize, group_in: usize, group_out: usize) -> ConvGeom {
        ConvGeom { padding, kernel, stride: [1, 1], dilation: [1, 1], groups, group_in, group_out, depthwise: false }
    }

    /// Geometries with their NHWC input shapes: every path of the kernels (pointwise product,
    /// one-group runs, dilated taps, groups, depthwise) and output widths around the blocks.
    pub fn geometries() -> Vec<(ConvGeom, [usize; 4])> {
        let mut v = Vec::new();
        for go in [1, 3, 4, 5, 7, 8, 13, 17, 33] {
            v.push((geom([1, 1], [0; 4], 1, 3, go), [2, 5, 3, 3]));
            v.push((geom([3, 3], [1; 4], 1, 2, go), [1, 6, 5, 2]));
        }
        // Rows wide enough for the kernels' four-pixel blocks (interiors of 9 and 10 pixels).
        for go in [1, 4, 5, 8, 17] {
            v.push((geom([3, 3], [1; 4], 1, 3, go), [1, 3, 11, 3]));
            v.push((geom([1, 1], [0; 4], 1, 2, go), [2, 2, 10, 2]));
        }
        v.push((geom([3, 3], [1; 4], 1, 8, 7), [2, 4, 5, 8]));
        v.push((geom([1, 1], [1, 0, 0, 1], 1, 3, 5), [1, 3, 4, 3]));
        v.push((geom([5, 5], [2; 4], 1, 2, 6), [1, 3, 3, 2]));
        v.push((ConvGeom { stride: [2, 2], padding: [1, 2, 0, 1], ..geom([3, 2], [0; 4], 1, 3, 5) }, [1, 7, 6, 3]));
        v.push((ConvGeom { stride: [1, 3], ..geom([1, 1], [0; 4], 1, 4, 4) }, [1, 2, 7, 4]));
        v.push((ConvGeom { dilation: [2, 2], ..geom([3, 3], [2; 4], 1, 2, 4) }, [1, 6, 7, 2]));
        v.push((ConvGeom { dilation: [1, 2], stride: [2, 1], ..geom([3, 2], [1, 2, 0, 1], 2, 2, 3) }, [2, 6, 7, 4]));
        v.push((geom([3, 3], [1; 4], 3, 2, 5), [1, 4, 4, 6]));
        for (c, mult, k) in [(1, 3, 3), (1, 4, 1), (1, 5, 3), (4, 1, 3), (4, 2, 3), (3, 2, 1)] {
            let dw = ConvGeom { depthwise: true, ..geom([k, k], [k / 2; 4], c, 1, mult) };
            v.push((dw, [2, 5, 4, c]));
        }
        v
    }

    /// Calls `f(x index, w index)` for every term of output element `i` (NHWC `osh`) in the
    /// kernels' order (`ky`, `kx`, input channel), `w` laid out as stored (not packed).
    pub fn naive_terms(g: &ConvGeom, ish: &[usize], osh: &[usize], i: usize, mut f: impl FnMut(usize, usize)) {
        let (kh, kw, go, cin) = (g.kernel[0], g.kernel[1], g.group_out, g.group_in);
        let (k, ox, oy, n) =
            (i % osh[3], (i / osh[3]) % osh[2], (i / (osh[3] * osh[2])) % osh[1], i / (osh[3] * osh[2] * osh[1]));
        for ky in 0..kh {
            for kx in 0..kw {
                let iy = (oy * g.stride[0] + ky * g.dilation[0]) as isize - g.padding[0] as isize;
                let ix = (ox * g.stride[1] + kx * g.dilation[1]) as isize - g.padding[3] as isize;
                if iy < 0 || ix < 0 || iy >= ish[1] as isize || ix >= ish[2] as isize {
                    continue;
                }
                let xb = ((n * ish[1] + iy as usize) * ish[2] + ix as usize) * ish[3];
                if g.depthwise {
                    f(xb + k / go, (ky * kw + kx) * osh[3] + k);
                } else {
                    for ci in 0..cin {
                        f(xb + (k / go) * cin + ci, ((k * kh + ky) * kw + kx) * cin + ci);
                    }
                }
            }
        }
    }

    /// The convolution in the kernels' order (bias, then `ky`, `kx`, input channel), in f32.
    pub fn naive(g: &ConvGeom, x: &[f32], ish: &[usize], w: &[f32], b: Option<&[f32]>, osh: &[usize]) -> Vec<f32> {
        let mut out = vec![0f32; osh.iter().product()];
        for (i, o) in out.iter_mut().enumerate() {
            let mut s = b.map_or(0.0, |b| b[i % osh[3]]);
            naive_terms(g, ish, osh, i, |xi, wi| s += x[xi] * w[wi]);
            *o = s;
        }
        out
    }

    #[test]
    fn every_path_gives_the_naive_orders_bits() {
        let pools = pools();
        for (t, (g, ish)) in geometries().into_iter().enumerate() {
            let osh = g.output_shape(&ish).unwrap();
            let x = values(ish.iter().product(), 3 + t as u64);
            let w = values(g.filter_len().unwrap(), 5 + t as u64);
            let b = values(osh[3], 7 + t as u64);
            let ahead = pack_filter(&g, &w);
            for bias in [Some(&b[..]), None] {
                let want = naive(&g, &x, &ish, &w, bias, &osh);
                for isa in available_isas() {
                    for pool in &pools {
                        for packed in [None, Some(&ahead[..])] {
                            let mut out = vec![f32::NAN; want.len()];
                            let ctx = Ctx { isa, pool };
                            let bv = bias.map(View::F32);
                            let (xv, wv) = (View::F32(&x), View::F32(&w));
                            let mut sc = Scratch::default();
                            conv2d(&ctx, &g, xv, &ish, wv, packed, bv, ViewMut::F32(&mut out), &osh, None, &mut sc)
                                .unwrap();
                            let same = out.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                            assert!(same, "{g:?} {ish:?} {} t{} bias {}", isa.name(), pool.threads(), bias.is_some());
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn fp16_filter_and_output_and_fused_clamp() {
        let (g, ish) = (geom([3, 3], [1; 4], 1, 2, 5), [1, 4, 3, 2]);
        let osh = g.output_shape(&ish).unwrap();
        let x = values(ish.iter().product(), 11);
        let w16: Vec<f16> = values(g.filter_len().unwrap(), 13).into_iter().map(f16::from_f32).collect();
        let w: Vec<f32> = w16.iter().map(|v| v.to_f32()).collect();
        let want: Vec<f16> =
            naive(&g, &x, &ish, &w, None, &osh).into_iter().map(|v| f16::from_f32(v.clamp(-1.0, 0.5))).collect();
        let pool = Pool::new(1, ThreadPolicy::CostModel).unwrap();
        for isa in available_isas() {
            let mut out = vec![f16::ZERO; want.len()];
            let ctx = Ctx { isa, pool: &pool };
            let mut sc = Scratch::default();
            let (xv, wv, ov) = (View::F32(&x), View::F16(&w16), ViewMut::F16(&mut out));
            conv2d(&ctx, &g, xv, &ish, wv, None, None, ov, &osh, Some((-1.0, 0.5)), &mut sc).unwrap();
            assert_eq!(out, want, "{}", isa.name());
        }
    }

    #[test]
    fn taps_inside_is_the_window_clipped_to_the_input() {
        // 3 taps, dilation 1, 1 before, input 4: output 0 skips tap 0, output 2 (at 2) keeps all.
        assert_eq!(taps_inside(0, 1, 4, 1, 3), 1..3);
        assert_eq!(taps_inside(2, 1, 4, 1, 3), 0..3);
        assert_eq!(taps_inside(3, 1, 4, 1, 3), 0..2);
        // Dilation 2, 2 before: taps at 0, 2, 4 from o = 0 -> only taps 1 and 2 are inside 2..5.
        assert_eq!(taps_inside(0, 2, 3, 2, 3), 1..3);
        // Entirely in the padding.
        assert!(taps_inside(0, 5, 2, 1, 3).is_empty());
        assert!(taps_inside(9, 0, 4, 1, 3).is_empty());
    }
}
