//! qs8 (per-tensor int8) add/sub/mul and convolution, scalar, for correctness rather than speed.
//!
//! Rounding follows XNNPACK's reference ("fp32") requantization: results are formed in f32 and
//! rounded to the nearest integer with ties to even, then offset by the output zero point and
//! saturated to [-128, 127].
//! - add/sub/mul: both operands are dequantized to f32 (`(q - zp) * scale`), the f32 op runs
//!   (with broadcasting and the fused range, which is in real units), and the result is
//!   quantized with `round_half_even(v / out_scale) + out_zp` (multiplying by `1/out_scale`).
//! - convolution: an exact int32 accumulator `bias + sum (x - x_zp) * (w - w_zp)` (the bias is
//!   int32 at scale `x_scale * w_scale`, as the lowering emits it), scaled by
//!   `x_scale * w_scale / out_scale` in f32, rounded half to even, offset and saturated. A fused
//!   output range is applied in real units before quantizing (clamping is monotone, so this is
//!   the same as clamping the quantized value to the quantized bounds, up to the bound's rounding).

use super::conv::ConvGeom;
use super::convert::convert;
use super::elementwise::binary as binary_float;
use super::{numel, Ctx, Quant, Scratch, View, ViewMut};
use crate::runtime::simd::BinOp;

/// `out = quantize(act(dequant(a) op dequant(b)))` with broadcasting (physical shapes).
#[allow(clippy::too_many_arguments)]
pub fn binary(
    ctx: &Ctx,
    op: BinOp,
    a: (&[i8], Quant),
    ash: &[usize],
    b: (&[i8], Quant),
    bsh: &[usize],
    out: (&mut [i8], Quant),
    osh: &[usize],
    act: Option<(f32, f32)>,
    scratch: &mut Scratch,
) -> Result<(), String> {
    let (out, qo) = out;
    if out.len() != numel(osh) || a.0.len() != numel(ash) || b.0.len() != numel(bsh) {
        return Err("qs8 binary operand sizes do not match their shapes".into());
    }
    // Work in buffers taken out of the scratch so the float kernel can borrow the rest.
    let mut fa = std::mem::take(&mut scratch.a);
    let mut fb = std::mem::take(&mut scratch.b);
    let mut fo = std::mem::take(&mut scratch.c);
    let result = (|| {
        fa.clear();
        fa.resize(a.0.len(), 0.0);
        fb.clear();
        fb.resize(b.0.len(), 0.0);
        fo.clear();
        fo.resize(out.len(), 0.0);
        convert(ctx, View::I8(a.0), ViewMut::F32(&mut fa), Some(a.1))?;
        convert(ctx, View::I8(b.0), ViewMut::F32(&mut fb), Some(b.1))?;
        binary_float(ctx, op, View::F32(&fa), ash, View::F32(&fb), bsh, ViewMut::F32(&mut fo), osh, act, scratch)?;
        convert(ctx, View::F32(&fo), ViewMut::I8(out), Some(qo))
    })();
    scratch.a = fa;
    scratch.b = fb;
    scratch.c = fo;
    result
}

/// Requantizes an int32 accumulator: `clamp(round_half_even(acc * mult) + zp)` with the
/// fused range `[lo, hi]` (real units) applied before rounding.
#[inline]
fn requantize(acc: i32, mult: f32, qo: Quant, range: (f32, f32)) -> i8 {
    let v = (acc as f32 * mult).clamp(range.0 / qo.scale, range.1 / qo.scale);
    let v = v.round_ties_even() + qo.zero_point as f32;
    v.clamp(-128.0, 127.0) as i8
}

/// qs8 convolution (regular or depthwise, NHWC, XNNPACK's filter layouts, see `conv`).
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    ctx: &Ctx,
    g: &ConvGeom,
    x: (&[i8], Quant),
    ish: &[usize],
    w: (&[i8], Quant),
    bias: Option<&[i32]>,
    out: (&mut [i8], Quant),
    osh: &[usize],
    act: Option<(f32, f32)>,
) -> Result<(), String> {
    let (out, qo) = out;
    let ((x, qx), (w, qw)) = (x, w);
    let want = g.output_shape(ish)?;
    if want != osh {
        return Err(format!("convolution output {osh:?}, geometry gives {want:?}"));
    }
    if Some(w.len()) != g.filter_len() {
        return Err(format!("filter of {} elements, geometry needs {:?}", w.len(), g.filter_len()));
    }
    if x.len() != numel(ish) || out.len() != numel(osh) {
        return Err("convolution buffers do not match their shapes".into());
    }
    let oc = osh[3];
    if bias.is_some_and(|b| b.len() != oc) {
        return Err(format!("bias length differs from {oc} output channels"));
    }
    let mult = qx.scale * qw.scale / qo.scale;
    if !mult.is_finite() {
        return Err(format!("qs8 convolution scale {} x {} / {} is not finite", qx.scale, qw.scale, qo.scale));
    }
    let range = act.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    let (h, wd, c) = (ish[1], ish[2], ish[3]);
    let (oh, ow) = (osh[1], osh[2]);
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let (zx, zw) = (qx.zero_point, qw.zero_point);
    let bytes = (x.len() + w.len() + out.len()) * kh * kw;
    ctx.par_chunks(out, bytes, oc, false, |start, chunk| {
        let mut acc = vec![0i32; oc];
        for (p, o) in chunk.chunks_mut(oc).enumerate() {
            let pix = start / oc + p;
            let (n, y, xo) = (pix / (oh * ow), (pix / ow) % oh, pix % ow);
            match bias {
                Some(b) => acc.copy_from_slice(b),
                None => acc.fill(0),
            }
            g.for_each_tap(h, wd, c, (n, y, xo), |ky, kx, xb| {
                let xr = &x[xb..xb + c];
                if g.depthwise {
                    let wr = &w[(ky * kw + kx) * oc..(ky * kw + kx + 1) * oc];
                    for (ch, &xv) in xr.iter().enumerate() {
                        for m in 0..g.group_out {
                            let k = ch * g.group_out + m;
                            acc[k] = acc[k].wrapping_add((xv as i32 - zx) * (wr[k] as i32 - zw));
                        }
                    }
                } else {
                    for gi in 0..g.groups {
                        let xs = &xr[gi * g.group_in..(gi + 1) * g.group_in];
                        for m in 0..g.group_out {
                            let k = gi * g.group_out + m;
                            let wb = ((k * kh + ky) * kw + kx) * g.group_in;
                            let ws = &w[wb..wb + g.group_in];
                            let dot: i32 = xs.iter().zip(ws).map(|(&a, &b)| (a as i32 - zx) * (b as i32 - zw)).sum();
                            acc[k] = acc[k].wrapping_add(dot);
                        }
                    }
                }
            });
            for (d, &a) in o.iter_mut().zip(&acc) {
                *d = requantize(a, mult, qo, range);
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requantize_rounds_half_to_even_and_saturates() {
        let q = Quant { scale: 1.0, zero_point: 0 };
        let inf = (f32::NEG_INFINITY, f32::INFINITY);
        assert_eq!(requantize(5, 0.5, q, inf), 2); // 2.5 -> 2
        assert_eq!(requantize(7, 0.5, q, inf), 4); // 3.5 -> 4
        assert_eq!(requantize(-5, 0.5, q, inf), -2);
        assert_eq!(requantize(1000, 1.0, q, inf), 127);
        assert_eq!(requantize(-1000, 1.0, q, inf), -128);
        assert_eq!(requantize(10, 1.0, Quant { scale: 1.0, zero_point: 3 }, inf), 13);
        assert_eq!(requantize(10, 1.0, q, (0.0, 6.0)), 6);
    }
}
