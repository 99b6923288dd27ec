//! 2-D convolution on NHWC, XNNPACK's conventions: regular filters are `[O, kh, kw, I/groups]`,
//! depthwise filters `[1, kh, kw, C*multiplier]` (output channel `c*multiplier + m` reads input
//! channel `c`). f32 compute (fp16 through f32), threaded over output pixels.

use super::convert::{from_f32, to_f32};
use super::{sized, Ctx, Scratch, View, ViewMut};
use crate::runtime::simd;
use std::borrow::Cow;

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

impl ConvGeom {
    /// Calls `f(ky, kx, xb)` for every kernel tap of output pixel `(n, y, xo)` that lands
    /// inside an `[N, h, wd, c]` NHWC input (padding taps add nothing); `xb` is the tap's
    /// input offset. Shared by the float and qs8 kernels so both walk the same window.
    pub fn for_each_tap(
        &self,
        h: usize,
        wd: usize,
        c: usize,
        pix: (usize, usize, usize),
        mut f: impl FnMut(usize, usize, usize),
    ) {
        let (n, y, xo) = pix;
        let (top, left) = (self.padding[0], self.padding[3]);
        for ky in 0..self.kernel[0] {
            // Padded coordinates: the tap is inside when `top <= iy < top + h`.
            let iy = y * self.stride[0] + ky * self.dilation[0];
            if iy < top || iy - top >= h {
                continue;
            }
            let row = (n * h + iy - top) * wd;
            for kx in 0..self.kernel[1] {
                let ix = xo * self.stride[1] + kx * self.dilation[1];
                if ix < left || ix - left >= wd {
                    continue;
                }
                f(ky, kx, (row + ix - left) * c);
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
}

/// Regular (not depthwise) fp32 filters repacked as XNNPACK packs them: one row of
/// `group_out` output channels per (group, tap, input channel), so the inner loop is an axpy
/// across output channels. A dot product per output channel over `group_in` inputs costs a
/// call and a horizontal sum each; with the 3 input channels of a first layer that was ~50x
/// slower than the arithmetic. The plan packs constant filters once, as XNNPACK does at
/// operator creation; `conv2d` packs any other filter per call. Callers check first that
/// `w` has the geometry's `filter_len` (the loops run over the geometry).
pub fn pack_filter(g: &ConvGeom, w: &[f32]) -> Vec<f32> {
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let (gi_n, go, cin) = (g.groups, g.group_out, g.group_in);
    if w.is_empty() {
        // Some factor is zero: the others may be anything, so do not loop over them.
        return Vec::new();
    }
    let mut p = vec![0f32; w.len()];
    for gi in 0..gi_n {
        for m in 0..go {
            let k = gi * go + m;
            for ky in 0..kh {
                for kx in 0..kw {
                    for ci in 0..cin {
                        let (to, from) =
                            ((((gi * kh + ky) * kw + kx) * cin + ci) * go + m, ((k * kh + ky) * kw + kx) * cin + ci);
                        if let (Some(t), Some(&f)) = (p.get_mut(to), w.get(from)) {
                            *t = f;
                        }
                    }
                }
            }
        }
    }
    p
}

/// `w` is the filter as stored (depthwise) or packed by [`pack_filter`] (regular).
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
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let isa = ctx.isa;
    let bytes = (x.len() + w.len() + out.len()) * 4 * kh * kw;
    ctx.par_chunks(out, bytes, oc, false, |start, chunk| {
        for (p, o) in chunk.chunks_mut(oc).enumerate() {
            let pix = start / oc + p;
            let (n, y, xo) = (pix / (oh * ow), (pix / ow) % oh, pix % ow);
            match b {
                Some(b) => o.copy_from_slice(b),
                None => o.fill(0.0),
            }
            g.for_each_tap(h, wd, c, (n, y, xo), |ky, kx, xb| {
                let xr = &x[xb..xb + c];
                if g.depthwise {
                    let wr = &w[(ky * kw + kx) * oc..(ky * kw + kx + 1) * oc];
                    if g.group_out == 1 {
                        simd::mul_acc(isa, o, xr, wr);
                    } else {
                        for (ch, &xv) in xr.iter().enumerate() {
                            for m in 0..g.group_out {
                                let k = ch * g.group_out + m;
                                o[k] += xv * wr[k];
                            }
                        }
                    }
                } else {
                    let (go, cin) = (g.group_out, g.group_in);
                    for gi in 0..g.groups {
                        let og = &mut o[gi * go..(gi + 1) * go];
                        let rows = (((gi * kh + ky) * kw + kx) * cin) * go;
                        simd::axpy_rows(isa, og, &xr[gi * cin..(gi + 1) * cin], &w[rows..rows + cin * go]);
                    }
                }
            });
        }
    });
}

/// Convolution with an optional bias and fused output clamp. `packed`: the filter already
/// packed by [`pack_filter`] (regular convolutions with a constant filter).
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
    // fp32 weights and bias are read in place; anything else is widened.
    let wf = match packed {
        _ if g.depthwise => float_cow(w)?,
        Some(p) if p.len() == w.len() => Cow::Borrowed(p),
        _ => Cow::Owned(pack_filter(g, &float_cow(w)?)),
    };
    let bf = b.map(float_cow).transpose()?;
    if bf.as_ref().is_some_and(|b| b.len() != oc) {
        return Err(format!("bias length differs from {oc} output channels"));
    }
    let Scratch { a: sa, c: sc, .. } = scratch;
    let xf = to_f32(ctx, x, sa)?;
    let finish = |o: &mut [f32]| {
        if let Some((lo, hi)) = act {
            super::elementwise::clamp_f32(ctx, o, lo, hi);
        }
    };
    match out {
        ViewMut::F32(o) => {
            conv_f32(ctx, g, xf, ish, &wf, bf.as_deref(), o, osh);
            finish(o);
            Ok(())
        }
        o @ (ViewMut::F16(_) | ViewMut::Bf16(_)) => {
            let t = sized(sc, o.len());
            conv_f32(ctx, g, xf, ish, &wf, bf.as_deref(), t, osh);
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
