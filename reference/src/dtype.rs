//! Element types, quantization parameters and memory formats.

use serde::{Deserialize, Serialize};

/// Element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElemType {
    F32,
    F16,
    Bf16,
    /// int8 with a per-tensor scale and zero point (carried by the tensor spec).
    Qs8,
}

impl ElemType {
    pub const ALL: [ElemType; 4] = [ElemType::F32, ElemType::F16, ElemType::Bf16, ElemType::Qs8];

    pub fn name(self) -> &'static str {
        match self {
            ElemType::F32 => "fp32",
            ElemType::F16 => "fp16",
            ElemType::Bf16 => "bf16",
            ElemType::Qs8 => "qs8",
        }
    }

    pub fn size_bytes(self) -> usize {
        match self {
            ElemType::F32 => 4,
            ElemType::F16 | ElemType::Bf16 => 2,
            ElemType::Qs8 => 1,
        }
    }

    pub fn is_float(self) -> bool {
        !matches!(self, ElemType::Qs8)
    }
}

impl std::fmt::Display for ElemType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Per-tensor affine quantization: `real = (q - zero_point) * scale`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuantParams {
    pub scale: f32,
    pub zero_point: i32,
}

impl QuantParams {
    pub fn new(scale: f32, zero_point: i32) -> Self {
        QuantParams { scale, zero_point }
    }
}

/// Where the values of a tensor live. Never changes what the values are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryFormat {
    #[default]
    Contiguous,
    /// NHWC storage of a 4-D NCHW tensor.
    ChannelsLast,
    /// NDHWC storage of a 5-D NCDHW tensor.
    ChannelsLast3d,
}

impl MemoryFormat {
    /// The rank this format applies to (`None` for contiguous: any rank).
    pub fn required_rank(self) -> Option<usize> {
        match self {
            MemoryFormat::Contiguous => None,
            MemoryFormat::ChannelsLast => Some(4),
            MemoryFormat::ChannelsLast3d => Some(5),
        }
    }

    /// Physical order of the logical dims: `physical[i] = logical dim perm[i]`.
    pub fn dim_order(self, rank: usize) -> Vec<usize> {
        match self {
            MemoryFormat::Contiguous => (0..rank).collect(),
            MemoryFormat::ChannelsLast => vec![0, 2, 3, 1],
            MemoryFormat::ChannelsLast3d => vec![0, 2, 3, 4, 1],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MemoryFormat::Contiguous => "contiguous",
            MemoryFormat::ChannelsLast => "channels_last",
            MemoryFormat::ChannelsLast3d => "channels_last_3d",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Exact conversions. Every op of the interpreter computes in f64 and rounds once to its output
// type through these functions. `half`'s own `f16::from_f64` goes through f32 on x86 with F16C
// (double rounding) and its `bf16::from_f64` truncates the low 32 bits of the f64 before
// rounding (loses the sticky bit), so neither is a single correct rounding; we do it ourselves.
// ---------------------------------------------------------------------------------------------

/// Rounds `x` to a binary float format with `mant` stored mantissa bits and exponent bias
/// `bias`, round to nearest, ties to even (IEEE 754 roundTiesToEven); returns the bit pattern
/// (sign in bit `mant + ebits`). NaN keeps its sign and the top payload bits and is made
/// quiet, as hardware conversions do; infinities stay infinite, too-large values overflow to
/// infinity, and results below the normal range round to the target's subnormals.
pub(crate) fn round_to_bits(x: f64, mant: u32, bias: i32) -> u64 {
    let bits = x.to_bits();
    let ebits = (bias as u32 + 1).trailing_zeros() + 1; // bias = 2^(ebits-1) - 1
    let sign = (bits >> 63) << (mant + ebits);
    let exp_all = ((1u64 << ebits) - 1) << mant;
    if x.is_nan() {
        let payload = (bits & ((1u64 << 52) - 1)) >> (52 - mant);
        return sign | exp_all | (1u64 << (mant - 1)) | payload;
    }
    if x.is_infinite() {
        return sign | exp_all;
    }
    if x == 0.0 {
        return sign;
    }
    // x = m * 2^(e - 52) with m the 53-bit significand (f64 subnormals are far below the
    // smallest f16/bf16 subnormal, so they take the same path and round to zero).
    let raw_e = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    let (m, e) = if raw_e == 0 { (frac, -1022) } else { (frac | (1u64 << 52), raw_e - 1023) };
    let emin = 1 - bias;
    // Exponent of the target's quantum at this magnitude (fixed below the normal range).
    let q = e.max(emin) - mant as i32;
    let shift = q - (e - 52); // bits of m that do not fit; >= 52 - mant > 0
    let kept = if shift >= 55 {
        0 // below half the smallest subnormal: rounds to zero
    } else {
        let shift = shift as u32;
        let kept = m >> shift;
        let rem = m & ((1u64 << shift) - 1);
        let half = 1u64 << (shift - 1);
        if rem > half || (rem == half && kept & 1 == 1) {
            kept + 1
        } else {
            kept
        }
    };
    // Normal: kept in [2^mant, 2^(mant+1)]; a carry out of the mantissa bumps the exponent
    // field, which is exactly what adding to the biased exponent does. Subnormal: the
    // exponent field is 0 and kept is the mantissa (2^mant becomes the smallest normal).
    let biased = (e.max(emin) + bias - 1) as u64;
    let mag = (biased << mant) + kept;
    if mag >= exp_all {
        sign | exp_all // overflow to infinity
    } else {
        sign | mag
    }
}

/// f64 -> fp16, one rounding (nearest, ties to even), subnormals and specials exact.
pub fn f16_from_f64(x: f64) -> half::f16 {
    half::f16::from_bits(round_to_bits(x, 10, 15) as u16)
}

/// f64 -> bf16, one rounding (nearest, ties to even), subnormals and specials exact.
pub fn bf16_from_f64(x: f64) -> half::bf16 {
    half::bf16::from_bits(round_to_bits(x, 7, 127) as u16)
}

/// bf16 -> f64, exact: a bf16 is the upper half of an f32 (NaN keeps its sign and payload).
#[inline]
pub fn bf16_to_f64(x: half::bf16) -> f64 {
    f32::from_bits(u32::from(x.to_bits()) << 16) as f64
}

/// f64 -> f32, one rounding: Rust's `as` is IEEE round to nearest, ties to even.
pub fn f32_from_f64(x: f64) -> f32 {
    x as f32
}

/// `x` rounded to an integer, ties to even (C's `nearbyint`): the value of
/// `f64::round_ties_even`, which on x86-64's baseline is a call to a software `rint` (perf put
/// `quantize` at 15% of the fuzz loop's large cases). Below 2^52, `|x| + 2^52` lies in [2^52, 2^53), where f64's
/// spacing is 1, so the addition rounds `|x|` once to the nearest integer, ties to even (2^52
/// is even), and the subtraction is exact; the sign goes back on (`-0.4` gives `-0.0`).
/// From 2^52 up every f64 is an integer; NaN and infinities pass through.
pub fn round_half_even(x: f64) -> f64 {
    const TWO_52: f64 = 4_503_599_627_370_496.0;
    let a = x.abs();
    if a < TWO_52 {
        ((a + TWO_52) - TWO_52).copysign(x)
    } else {
        x
    }
}

/// The value `x` takes once stored in `dtype` (floats: rounded once; qs8: unchanged, since
/// qs8 needs quantization parameters, see [`QuantParams::quantize`]).
pub fn round_f64(dtype: ElemType, x: f64) -> f64 {
    match dtype {
        ElemType::F32 => f32_from_f64(x) as f64,
        ElemType::F16 => f16_from_f64(x).to_f64(),
        ElemType::Bf16 => bf16_from_f64(x).to_f64(),
        ElemType::Qs8 => x,
    }
}

impl QuantParams {
    /// `quantize_per_tensor` exactly as PyTorch's and ExecuTorch's `quantize_val` compute it:
    /// `inv_scale = 1.0f / scale` in f32, `x * inv_scale` rounded to f32, `nearbyint` (ties to
    /// even), plus the zero point, clamped to [-128, 127]. (Dividing in f64 instead would
    /// disagree with every real implementation at ties such as 0.273939967 / 0.00214854861.)
    /// NaN maps to -128 as on PyTorch/x86 and XNNPACK; +-inf saturate.
    pub fn quantize(self, x: f64) -> i8 {
        let inv = 1.0f32 / self.scale;
        // f32 * f32 is exact in f64, so this is one f32 rounding of the product.
        let v = (x as f32) as f64 * inv as f64;
        let v = f32_from_f64(v) as f64;
        if v.is_nan() {
            return -128;
        }
        let q = round_half_even(v) + self.zero_point as f64;
        q.clamp(-128.0, 127.0) as i8
    }

    /// `dequantize_per_tensor`: `(q - zero_point) * scale`, exact in f64 (round once to the
    /// output type afterwards).
    pub fn dequantize(self, q: i8) -> f64 {
        (q as f64 - self.zero_point as f64) * self.scale as f64
    }
}
