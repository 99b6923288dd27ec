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

use super::conv::{self, ConvGeom};
use super::convert::convert;
use super::elementwise::binary as binary_float;
use super::{numel, sized_for_overwrite, Ctx, Quant, Scratch, View, ViewMut};
use crate::runtime::simd::{self, BinOp, Start};

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
        // Each buffer is written whole (dequantized, then the float op) before it is read.
        let fa = sized_for_overwrite(&mut fa, a.0.len());
        let fb = sized_for_overwrite(&mut fb, b.0.len());
        let fo = sized_for_overwrite(&mut fo, out.len());
        convert(ctx, View::I8(a.0), ViewMut::F32(fa), Some(a.1))?;
        convert(ctx, View::I8(b.0), ViewMut::F32(fb), Some(b.1))?;
        binary_float(ctx, op, View::F32(fa), ash, View::F32(fb), bsh, ViewMut::F32(fo), osh, act, scratch)?;
        convert(ctx, View::F32(fo), ViewMut::I8(out), Some(qo))
    })();
    scratch.a = fa;
    scratch.b = fb;
    scratch.c = fo;
    result
}

/// qs8 copy or clamp (XNNPACK's Copy and Clamp nodes on int8 values):
/// `out = quantize(act(dequant(x)))`. Where input and output share their quantization this is
/// XNNPACK's int8 clamp with the range's bounds quantized (a value inside the range comes back
/// as itself: `(q - zp) * s` rounded back through `1 / s` is `q - zp` exactly).
pub fn clamp(
    ctx: &Ctx,
    x: (&[i8], Quant),
    out: (&mut [i8], Quant),
    act: Option<(f32, f32)>,
    scratch: &mut Scratch,
) -> Result<(), String> {
    let (out, qo) = out;
    if out.len() != x.0.len() {
        return Err(format!("qs8 clamp of {} values into {}", x.0.len(), out.len()));
    }
    if act.is_none() && x.1 == qo {
        out.copy_from_slice(x.0);
        return Ok(());
    }
    let f = sized_for_overwrite(&mut scratch.a, out.len()); // the dequantize writes every value
    convert(ctx, View::I8(x.0), ViewMut::F32(f), Some(x.1))?;
    if let Some((lo, hi)) = act {
        super::elementwise::clamp_f32(ctx, f, lo, hi);
    }
    convert(ctx, View::F32(f), ViewMut::I8(out), Some(qo))
}

use simd::Requant;

/// Requantization of an int32 accumulator: `clamp(round_half_even(acc * mult) + zp)` with the
/// fused range (real units) applied before rounding. The range is divided by the output scale
/// once per operator, not per output.
impl Requant {
    fn new(mult: f32, qo: Quant, range: (f32, f32)) -> Result<Requant, String> {
        let (lo, hi) = (range.0 / qo.scale, range.1 / qo.scale);
        // `f32::clamp` needs ordered bounds (a NaN or negative scale would break them).
        if lo.partial_cmp(&hi).is_none_or(|o| o.is_gt()) {
            return Err(format!("qs8 output range [{}, {}] at scale {}", range.0, range.1, qo.scale));
        }
        Ok(Requant { mult, lo, hi, zp: qo.zero_point as f32 })
    }

    #[cfg(test)]
    fn apply(&self, acc: i32) -> i8 {
        let v = (acc as f32 * self.mult).clamp(self.lo, self.hi);
        let v = v.round_ties_even() + self.zp;
        v.clamp(-128.0, 127.0) as i8
    }

    /// `out[i]` from `acc[i]`, as [`Requant::apply`] (the unit tests check the kernels against it).
    fn apply_all(&self, isa: simd::Isa, acc: &[i32], out: &mut [i8]) {
        simd::requantize(isa, acc, *self, out);
    }
}

/// qs8 convolution (regular or depthwise, NHWC, XNNPACK's filter layouts, see `conv`). The
/// filter minus its zero point is packed per call as the f32 kernel's (see
/// [`conv::pack_into`]), so a run of taps is one int32 axpy across output channels.
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
    if g.packs() && g.packed_len().is_none() {
        return Err("packed filter size overflows".into());
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
    let rq = Requant::new(mult, qo, act.unwrap_or((f32::NEG_INFINITY, f32::INFINITY)))?;
    let (h, wd, c) = (ish[1], ish[2], ish[3]);
    let (oh, ow) = (osh[1], osh[2]);
    let (taps, cin, go, ld) = (g.kernel[0] * g.kernel[1], g.group_in, g.group_out, g.packed_ld());
    let (zx, zw) = (qx.zero_point, qw.zero_point);
    let mut wp = Vec::new();
    conv::pack_into(g, w, |v| (v as i32).wrapping_sub(zw), &mut wp);
    let wp = &wp[..];
    let isa = ctx.isa;
    let bytes = (x.len() + w.len() + out.len()) * taps;
    let from = match bias {
        Some(b) => Start::From(b),
        None => Start::Zero,
    };
    if g.windows_are_products() {
        // As in the f32 kernel; the int32 sums of a group of pixels, then their requantization.
        ctx.par_chunks(out, bytes, oc, false, |start, chunk| {
            let mut acc = vec![0i32; ow.min(chunk.len() / oc) * oc];
            simd::conv_windows_qs8(isa, g, [ish, osh], ld, start / oc, chunk, &mut acc, from, x, zx, wp, rq);
        });
        return Ok(());
    }
    ctx.par_chunks(out, bytes, oc, false, |start, chunk| {
        let mut acc = vec![0i32; oc];
        for (o, pix) in chunk.chunks_mut(oc).zip(conv::Pixels::new(start / oc, oh, ow)) {
            let mut from = from;
            if g.groups != 1 {
                conv::init(&mut acc, from);
                from = Start::Acc;
            }
            g.for_each_run(h, wd, c, pix, |tap, xb, len| {
                for t in 0..len {
                    let (tap, xr) = (tap + t, &x[xb + t * c..xb + (t + 1) * c]);
                    if g.groups == 1 {
                        let w = &wp[tap * c * ld..];
                        simd::window_qs8(isa, &mut acc, from, xr, zx, w, conv::single_run(c, ld));
                        from = Start::Acc;
                    } else if g.depthwise {
                        let wr = &wp[tap * oc..(tap + 1) * oc];
                        for (ch, &xv) in xr.iter().enumerate() {
                            let xv = (xv as i32).wrapping_sub(zx);
                            for m in 0..go {
                                let k = ch * go + m;
                                acc[k] = acc[k].wrapping_add(xv.wrapping_mul(wr[k]));
                            }
                        }
                    } else {
                        for gi in 0..g.groups {
                            let ag = &mut acc[gi * go..(gi + 1) * go];
                            let (w, xs) = (&wp[(gi * taps + tap) * cin * ld..], &xr[gi * cin..(gi + 1) * cin]);
                            simd::window_qs8(isa, ag, Start::Acc, xs, zx, w, conv::single_run(cin, ld));
                        }
                    }
                }
            });
            conv::init(&mut acc, from);
            rq.apply_all(isa, &acc, o);
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requantize(acc: i32, mult: f32, qo: Quant, range: (f32, f32)) -> i8 {
        Requant::new(mult, qo, range).unwrap().apply(acc)
    }

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
        // The range is in real units: [0, 6] at output scale 0.5 is [0, 12] quanta.
        assert_eq!(requantize(100, 1.0, Quant { scale: 0.5, zero_point: -4 }, (0.0, 6.0)), 8);
        assert!(Requant::new(1.0, Quant { scale: f32::NAN, zero_point: 0 }, inf).is_err());
    }

    #[test]
    fn clamp_is_the_requantized_float_clamp() {
        use crate::runtime::kernels::conv::tests::pools;
        let x: [i8; 6] = [-128, -5, 0, 3, 100, 127];
        let q = Quant { scale: 0.5, zero_point: 2 }; // reals -65, -3.5, -1, 0.5, 49, 62.5
        let other = Quant { scale: 0.25, zero_point: -10 };
        for isa in crate::runtime::simd::available_isas() {
            for pool in &pools() {
                let ctx = Ctx { isa, pool };
                let run = |qo: Quant, act: Option<(f32, f32)>| {
                    let mut out = [0i8; 6];
                    clamp(&ctx, (&x, q), (&mut out, qo), act, &mut Scratch::default()).unwrap();
                    out
                };
                // Same quantization: the range's bounds quantized (-1.2 -> -2.4 quanta -> -2, + 2).
                assert_eq!(run(q, Some((-1.2, 30.0))), [0, 0, 0, 3, 62, 62], "{}", isa.name());
                assert_eq!(run(q, None), x, "{}", isa.name());
                // Another quantization: requantized (x / 0.25 - 10), saturating.
                assert_eq!(run(other, None), [-128, -24, -14, -8, 127, 127], "{}", isa.name());
                assert_eq!(run(other, Some((f32::NEG_INFINITY, 6.0))), [-128, -24, -14, -8, 14, 14]);
            }
        }
        let (mut short, pool) = ([0i8; 5], &pools()[0]);
        let ctx = Ctx { isa: crate::runtime::simd::Isa::SCALAR, pool };
        assert!(clamp(&ctx, (&x, q), (&mut short, q), None, &mut Scratch::default()).is_err());
    }
}

#[cfg(test)]
mod conv_tests {
    use super::*;
    use crate::runtime::kernels::conv::tests::{geometries, naive_terms, pools};
    use crate::runtime::simd::available_isas;

    /// Deterministic int8 values (xorshift).
    fn bytes(n: usize, seed: u64) -> Vec<i8> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 56) as u8 as i8
            })
            .collect()
    }

    /// Integer reference: the exact accumulator per output, then the same requantization.
    #[allow(clippy::too_many_arguments)]
    fn naive(
        g: &ConvGeom,
        x: &[i8],
        ish: &[usize],
        w: &[i8],
        b: Option<&[i32]>,
        osh: &[usize],
        z: (i32, i32),
    ) -> Vec<i32> {
        let mut out = vec![0i32; osh.iter().product()];
        for (i, o) in out.iter_mut().enumerate() {
            let mut s = b.map_or(0, |b| b[i % osh[3]]);
            naive_terms(g, ish, osh, i, |xi, wi| s += (x[xi] as i32 - z.0) * (w[wi] as i32 - z.1));
            *o = s;
        }
        out
    }

    #[test]
    fn conv_is_exactly_the_integer_accumulator_requantized() {
        let pools = pools();
        let (qx, qw, qo) = (
            Quant { scale: 0.02, zero_point: -3 },
            Quant { scale: 0.01, zero_point: 2 },
            Quant { scale: 0.05, zero_point: 5 },
        );
        for (t, (g, ish)) in geometries().into_iter().enumerate() {
            let osh = g.output_shape(&ish).unwrap();
            let x = bytes(ish.iter().product(), 3 + t as u64);
            let w = bytes(g.filter_len().unwrap(), 5 + t as u64);
            let b: Vec<i32> = bytes(osh[3], 7 + t as u64).iter().map(|&v| v as i32 * 37).collect();
            for (bias, act) in [(Some(&b[..]), None), (None, Some((-0.5f32, 1.5f32)))] {
                let acc = naive(&g, &x, &ish, &w, bias, &osh, (qx.zero_point, qw.zero_point));
                let range = act.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
                let rq = Requant::new(qx.scale * qw.scale / qo.scale, qo, range).unwrap();
                let want: Vec<i8> = acc.iter().map(|&a| rq.apply(a)).collect();
                // The cases must reach the saturation and the rounding, not only zeros.
                assert!(want.iter().any(|&v| v != want[0]), "{g:?}");
                for isa in available_isas() {
                    for pool in &pools {
                        let mut out = vec![0i8; want.len()];
                        let ctx = Ctx { isa, pool };
                        conv2d(&ctx, &g, (&x, qx), &ish, (&w, qw), bias, (&mut out, qo), &osh, act).unwrap();
                        assert_eq!(out, want, "{g:?} {ish:?} {} t{}", isa.name(), pool.threads());
                    }
                }
            }
        }
    }
}
