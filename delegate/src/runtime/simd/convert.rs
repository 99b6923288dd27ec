//! Element type conversions: f32 <-> bf16 (bit-level), f32 <-> qs8, f32 <-> f16 (through
//! `half`, F16C when the CPU has it).

use super::isa::{multiversion, Isa};
use half::f16;

multiversion! {
    /// f32 -> bf16, round to nearest even; NaN becomes a quiet NaN (as `half` does).
    pub fn f32_to_bf16(x: &[f32], out: &mut [u16]) {
        let x = &x[..out.len()];
        for i in 0..out.len() {
            let b = x[i].to_bits();
            let nan = (b & 0x7fff_ffff) > 0x7f80_0000;
            let r = ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16;
            out[i] = if nan { ((b >> 16) as u16) | 0x0040 } else { r };
        }
    }
}

multiversion! {
    /// bf16 -> f32 (exact); a signalling NaN is quieted (as `half` does).
    pub fn bf16_to_f32(x: &[u16], out: &mut [f32]) {
        let x = &x[..out.len()];
        for i in 0..out.len() {
            let b = x[i];
            let q = if (b & 0x7fff) > 0x7f80 { b | 0x0040 } else { b };
            out[i] = f32::from_bits((q as u32) << 16);
        }
    }
}

multiversion! {
    /// f32 -> qs8: `clamp(round_half_even(x * inv_scale) + zp, -128, 127)`; NaN maps to `zp`.
    pub fn quantize(x: &[f32], inv_scale: f32, zp: i32, out: &mut [i8]) {
        let x = &x[..out.len()];
        let zpf = zp as f32;
        for i in 0..out.len() {
            // Rounding in f32 then adding the zero point keeps ties-to-even on the scaled value;
            // the clamp in f32 makes infinities saturate.
            let r = (x[i] * inv_scale).round_ties_even() + zpf;
            let r = r.clamp(-128.0, 127.0);
            out[i] = if r.is_nan() { zp as i8 } else { r as i8 };
        }
    }
}

multiversion! {
    /// qs8 -> f32: `(q - zp) * scale`.
    pub fn dequantize(x: &[i8], scale: f32, zp: i32, out: &mut [f32]) {
        let x = &x[..out.len()];
        for i in 0..out.len() {
            out[i] = (x[i] as i32 - zp) as f32 * scale;
        }
    }
}

/// f32 -> f16 (round to nearest even). Non-scalar paths use `half`'s slice conversion, which
/// uses F16C when the CPU has it; the scalar path converts element by element in software.
pub fn f32_to_f16(isa: Isa, x: &[f32], out: &mut [f16]) {
    use half::slice::HalfFloatSliceExt;
    let x = &x[..out.len()];
    if isa.is_scalar() {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = f16::from_f32(v);
        }
    } else {
        out.convert_from_f32_slice(x);
    }
}

/// f16 -> f32 (exact).
pub fn f16_to_f32(isa: Isa, x: &[f16], out: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    let x = &x[..out.len()];
    if isa.is_scalar() {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = v.to_f32();
        }
    } else {
        x.convert_to_f32_slice(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::simd::available_isas;
    use half::bf16;

    #[test]
    fn bf16_bit_conversions_match_half() {
        let vals = [0.0f32, -0.0, 1.0, 1.003_906_2, 1.011_718_8, -3.3e38, 1e-40, f32::INFINITY, f32::NAN, 3.3e-39];
        for isa in available_isas() {
            let mut out = vec![0u16; vals.len()];
            f32_to_bf16(isa, &vals, &mut out);
            for (v, o) in vals.iter().zip(&out) {
                assert_eq!(*o, bf16::from_f32(*v).to_bits(), "{v}");
            }
        }
    }
}
