//! Rounding of the fast evaluator: the exact single rounding of [`crate::dtype`] with a
//! fast path for the common case (a finite value in the target's normal range), checked
//! against the plain rounding below.

use crate::dtype::{self, ElemType, QuantParams};
use crate::tensor::{Tensor, TensorData};

/// Rounds `x` to a binary float format with `mant` stored mantissa bits and exponent bias
/// `bias`, round to nearest, ties to even; returns the bit pattern (sign in bit `mant + ebits`).
/// NaN keeps its sign and the top payload bits and is made quiet, as hardware conversions do.
#[inline]
fn round_to_bits(x: f64, mant: u32, bias: i32) -> u64 {
    let bits = x.to_bits();
    let raw_e = ((bits >> 52) & 0x7ff) as i32;
    // The common case, a finite x at or above the target's smallest normal: the f64's own
    // exponent and fraction bits, shifted right by 52 - mant with round to nearest even, are
    // the target's exponent (rebiased below) and mantissa; a carry out of the mantissa bumps
    // the exponent, as it should. The same arithmetic as the general rounding for these
    // inputs, without the special cases (the test below checks one against the other).
    if raw_e >= 1024 - bias && raw_e < 0x7ff {
        let ebits = (bias as u32 + 1).trailing_zeros() + 1;
        let exp_all = ((1u64 << ebits) - 1) << mant;
        let shift = 52 - mant;
        let abs = bits & !(1u64 << 63);
        // Round to nearest, ties to even: add just under half a unit of the last kept bit,
        // plus one when that bit is odd, then truncate. Dropped bits above half carry, below
        // half never do, and exactly half carries only from an odd kept value.
        let kept = (abs + (1u64 << (shift - 1)) - 1 + ((abs >> shift) & 1)) >> shift;
        let mag = kept - (((1023 - bias) as u64) << mant);
        let sign = (bits >> 63) << (mant + ebits);
        return sign | mag.min(exp_all); // at or past exp_all: overflow to infinity
    }
    dtype::round_to_bits(x, mant, bias)
}

/// [`dtype::f16_from_f64`].
#[inline]
fn f16_from_f64(x: f64) -> half::f16 {
    half::f16::from_bits(round_to_bits(x, 10, 15) as u16)
}

/// [`dtype::bf16_from_f64`].
#[inline]
fn bf16_from_f64(x: f64) -> half::bf16 {
    half::bf16::from_bits(round_to_bits(x, 7, 127) as u16)
}

/// [`dtype::round_f64`].
pub(super) fn round_f64(dtype: ElemType, x: f64) -> f64 {
    match dtype {
        ElemType::F32 => dtype::f32_from_f64(x) as f64,
        ElemType::F16 => f16_from_f64(x).to_f64(),
        ElemType::Bf16 => bf16_from_f64(x).to_f64(),
        ElemType::Qs8 => x,
    }
}

/// [`TensorData::from_f64`].
pub(crate) fn data_from_f64(dtype: ElemType, values: &[f64], quant: Option<QuantParams>) -> TensorData {
    match dtype {
        ElemType::F16 => TensorData::F16(values.iter().map(|&x| f16_from_f64(x)).collect()),
        ElemType::Bf16 => TensorData::Bf16(values.iter().map(|&x| bf16_from_f64(x)).collect()),
        ElemType::F32 | ElemType::Qs8 => TensorData::from_f64(dtype, values, quant),
    }
}

/// [`Tensor::from_f64`].
pub(super) fn tensor_from_f64(shape: &[usize], dtype: ElemType, quant: Option<QuantParams>, values: &[f64]) -> Tensor {
    Tensor {
        shape: shape.to_vec(),
        format: crate::dtype::MemoryFormat::Contiguous,
        quant: if dtype == ElemType::Qs8 { quant } else { None },
        data: data_from_f64(dtype, values, quant),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast path of `round_to_bits` agrees with the plain rounding ([`dtype::round_to_bits`]) bit for bit: random bit
    /// patterns, values with few significant bits (exact ties), and every exponent around the
    /// normal range, overflow threshold and subnormal boundary of fp16 and bf16.
    #[test]
    fn fast_rounding_matches_the_general_path() {
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut next = move || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        for k in 0..400_000u64 {
            let r = next();
            let x = match k % 3 {
                0 => f64::from_bits(r),
                // Exponents from 2^-160 to 2^160, full random fraction.
                1 => f64::from_bits((r & 0x800F_FFFF_FFFF_FFFF) | ((1023 - 160 + (k / 3) % 321) << 52)),
                // Few fraction bits below the kept ones: ties and near-ties.
                _ => {
                    let frac = (r & 0x000F_FFFF_FFFF_FFFF) & !((1u64 << 40) - 1) | (r >> 60) << 38;
                    f64::from_bits((r & (1 << 63)) | frac | ((1023 - 160 + (k / 3) % 321) << 52))
                }
            };
            assert_eq!(round_to_bits(x, 10, 15), dtype::round_to_bits(x, 10, 15), "f16 of {x:e} ({:#x})", x.to_bits());
            assert_eq!(round_to_bits(x, 7, 127), dtype::round_to_bits(x, 7, 127), "bf16 of {x:e} ({:#x})", x.to_bits());
        }
    }
}
