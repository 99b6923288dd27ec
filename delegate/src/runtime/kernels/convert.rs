//! Converts between fp32 and fp16/bf16 (round to nearest even) and qs8 quantize/dequantize,
//! threaded in contiguous chunks. f16 uses `half`'s slice conversion (F16C at run time);
//! bf16 uses the rounding bit trick compiled per instruction set.

use super::{Ctx, Quant, View, ViewMut};
use crate::runtime::simd;

/// f32 -> bf16 of one chunk (`x.len() == out.len()`): every narrowing to bf16 a node's
/// output gets, unfused or at the end of a fused chain.
pub fn f32_to_bf16(isa: simd::Isa, x: &[f32], out: &mut [half::bf16]) {
    simd::f32_to_bf16(isa, x, simd::bf16_bits_mut(out));
    #[cfg(feature = "mutants")]
    if crate::mutants::is_active(crate::mutants::Mutant::Bf16Truncates) {
        // Seeded bug: the high half of the f32 bits, rounded toward zero (NaN stays NaN).
        for (o, v) in out.iter_mut().zip(x) {
            if !v.is_nan() {
                *o = half::bf16::from_bits((v.to_bits() >> 16) as u16);
            }
        }
    }
}

/// The smallest task of a convert in elements of `in_bytes` each: XNNPACK's unary operators
/// (its converts) cut their input into tiles of 4096 bytes on a pool of several threads
/// (`unary-elementwise-nd.c`), so one of at most 4096 bytes runs inline; as the granule of
/// `Ctx::par_chunks`, `ThreadPolicy::PerOutputTasks` splits and inlines where XNNPACK does
/// (with 256 elements a qs8 RMSNorm of 1x8x64 woke the pool for each of its converts: 9.5 us at
/// 2 threads against XNNPACK's 0.55). Under the cost model a chunk is a multiple of it.
fn xnnpack_tile(in_bytes: usize) -> usize {
    4096 / in_bytes
}

/// Converts `x` into `out` (same length). `q` is the int8 side's quantization.
pub fn convert(ctx: &Ctx, x: View, out: ViewMut, q: Option<Quant>) -> Result<(), String> {
    if x.len() != out.len() {
        return Err(format!("convert of {} elements into {}", x.len(), out.len()));
    }
    let isa = ctx.isa;
    let bytes = x.len() * 6;
    let g = xnnpack_tile(match x {
        View::F32(_) => 4,
        View::F16(_) | View::Bf16(_) => 2,
        _ => 1,
    });
    match (x, out) {
        (View::F32(x), ViewMut::F32(o)) => {
            ctx.par_chunks(o, bytes, g, false, |s, c| c.copy_from_slice(&x[s..s + c.len()]))
        }
        (View::F32(x), ViewMut::F16(o)) => {
            ctx.par_chunks(o, bytes, g, false, |s, c| simd::f32_to_f16(isa, &x[s..s + c.len()], c))
        }
        (View::F16(x), ViewMut::F32(o)) => {
            ctx.par_chunks(o, bytes, g, false, |s, c| simd::f16_to_f32(isa, &x[s..s + c.len()], c))
        }
        (View::F32(x), ViewMut::Bf16(o)) => {
            ctx.par_chunks(o, bytes, g, false, |s, c| f32_to_bf16(isa, &x[s..s + c.len()], c))
        }
        (View::Bf16(x), ViewMut::F32(o)) => {
            ctx.par_chunks(o, bytes, g, false, |s, c| simd::bf16_to_f32(isa, simd::bf16_bits(&x[s..s + c.len()]), c))
        }
        (View::F32(x), ViewMut::I8(o)) => {
            let q = q.ok_or("quantize without quantization parameters")?;
            let inv = 1.0 / q.scale;
            ctx.par_chunks(o, bytes, g, false, |s, c| simd::quantize(isa, &x[s..s + c.len()], inv, q.zero_point, c))
        }
        (View::I8(x), ViewMut::F32(o)) => {
            let q = q.ok_or("dequantize without quantization parameters")?;
            ctx.par_chunks(o, bytes, g, false, |s, c| {
                simd::dequantize(isa, &x[s..s + c.len()], q.scale, q.zero_point, c)
            })
        }
        (View::F16(x), ViewMut::F16(o)) => o.copy_from_slice(x),
        (View::Bf16(x), ViewMut::Bf16(o)) => o.copy_from_slice(x),
        (x, o) => return Err(format!("no convert from {} to {}", x.type_name(), o.type_name())),
    }
    Ok(())
}

/// f32 -> qs8 -> f32, two converts whose int8 values nothing else reads
/// (`fuse::Group::QuantRoundTrip`), in one pass: quantized with `to`, dequantized with `back`,
/// the same bits as [`convert`] twice.
pub fn quantize_round_trip(ctx: &Ctx, x: &[f32], to: Quant, back: Quant, out: &mut [f32]) -> Result<(), String> {
    if x.len() != out.len() {
        return Err(format!("quantize and dequantize of {} elements into {}", x.len(), out.len()));
    }
    let isa = ctx.isa;
    let inv = 1.0 / to.scale;
    ctx.par_chunks(out, x.len() * 8, xnnpack_tile(4), false, |s, c| {
        simd::quantize_round_trip(isa, &x[s..s + c.len()], inv, to.zero_point, back.scale, back.zero_point, c)
    });
    Ok(())
}

/// `x` widened to f32 into `buf` (fp32 inputs are borrowed as they are).
pub fn to_f32<'a>(ctx: &Ctx, x: View<'a>, buf: &'a mut Vec<f32>) -> Result<&'a [f32], String> {
    match x {
        View::F32(v) => Ok(v),
        View::F16(_) | View::Bf16(_) => {
            let n = x.len();
            // `convert` writes all `n` values.
            let b = super::sized_for_overwrite(buf, n);
            convert(ctx, x, ViewMut::F32(b), None)?;
            Ok(&buf[..n])
        }
        other => Err(format!("{} is not a float type", other.type_name())),
    }
}

/// Writes f32 values into a float output of any width.
pub fn from_f32(ctx: &Ctx, x: &[f32], out: ViewMut) -> Result<(), String> {
    match out {
        ViewMut::F32(o) => {
            o.copy_from_slice(x);
            Ok(())
        }
        o @ (ViewMut::F16(_) | ViewMut::Bf16(_)) => convert(ctx, View::F32(x), o, None),
        o => Err(format!("{} is not a float type", o.type_name())),
    }
}
