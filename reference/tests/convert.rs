//! Bit-exact conversion tables: f64 -> fp16/bf16/f32 with one rounding, and qs8 quantize.
//! Expected fp16 bits were cross-checked with CPython's `struct.pack('<e', x)`, which rounds
//! a double to half directly.

use half::{bf16, f16};
use reference::dtype::{bf16_from_f64, f16_from_f64, f32_from_f64, round_f64, round_half_even};
use reference::{ElemType, QuantParams};

fn p2(e: i32) -> f64 {
    2f64.powi(e)
}

#[test]
fn f16_corner_cases() {
    let table: &[(f64, u16)] = &[
        (0.0, 0x0000),
        (-0.0, 0x8000),
        (1.0, 0x3C00),
        (-2.0, 0xC000),
        (0.1, 0x2E66),
        (1.0 / 3.0, 0x3555),
        (65504.0, 0x7BFF),  // max finite
        (65519.99, 0x7BFF), // just below the halfway point to 2^16
        (65520.0, 0x7C00),  // halfway: ties to even overflows to inf
        (1.0e6, 0x7C00),    // overflow
        (-1.0e6, 0xFC00),   // overflow, negative
        (f64::MAX, 0x7C00),
        (f64::INFINITY, 0x7C00),
        (f64::NEG_INFINITY, 0xFC00),
        (p2(-24), 0x0001),             // smallest subnormal
        (p2(-25), 0x0000),             // half of it: tie to even -> 0
        (p2(-25) * 1.0000001, 0x0001), // just above the tie
        (3.0 * p2(-25), 0x0002),       // tie between 1 and 2 ulps -> even
        (-p2(-26), 0x8000),            // underflow keeps the sign
        (p2(-14), 0x0400),             // smallest normal
        (p2(-14) - p2(-24), 0x03FF),   // largest subnormal
        (p2(-14) - p2(-25), 0x0400),   // tie between largest subnormal and smallest normal
        (1.0 + p2(-11), 0x3C00),       // tie -> even (down)
        (1.0 + 3.0 * p2(-11), 0x3C02), // tie -> even (up)
        // Just above a tie by 2^-40: a direct rounding goes up; rounding via f32 would first
        // land exactly on the tie and then go down to 0x3C00 (double rounding).
        (1.0 + p2(-11) + p2(-40), 0x3C01),
        (f64::MIN_POSITIVE, 0x0000), // f64 subnormal range
        (5e-324, 0x0000),
        (-5e-324, 0x8000),
    ];
    for &(x, bits) in table {
        assert_eq!(f16_from_f64(x).to_bits(), bits, "f16({x:e})");
        if !x.is_nan() {
            assert_eq!(round_f64(ElemType::F16, x).to_bits(), f16::from_bits(bits).to_f64().to_bits(), "round({x:e})");
        }
    }
    let nan = f16_from_f64(f64::NAN);
    assert!(nan.is_nan());
    assert_eq!(nan.to_bits() & 0x0200, 0x0200, "quiet NaN");
    assert!(f16_from_f64(-f64::NAN).is_sign_negative());
}

#[test]
fn bf16_corner_cases() {
    let max = (2.0 - p2(-7)) * p2(127);
    let table: &[(f64, u16)] = &[
        (0.0, 0x0000),
        (-0.0, 0x8000),
        (1.0, 0x3F80),
        (-1.0, 0xBF80),
        (max, 0x7F7F),                      // max finite
        ((2.0 - p2(-8)) * p2(127), 0x7F80), // halfway above max: ties to even -> inf
        ((2.0 - p2(-8) - p2(-20)) * p2(127), 0x7F7F),
        (f32::MAX as f64, 0x7F80),
        (1e39, 0x7F80),
        (-1e39, 0xFF80),
        (f64::INFINITY, 0x7F80),
        (f64::NEG_INFINITY, 0xFF80),
        (p2(-133), 0x0001), // smallest subnormal
        (p2(-134), 0x0000), // tie -> even 0
        (3.0 * p2(-134), 0x0002),
        (-p2(-135), 0x8000),
        (p2(-126), 0x0080),            // smallest normal
        (p2(-126) - p2(-133), 0x007F), // largest subnormal
        (p2(-126) - p2(-134), 0x0080), // tie -> even (up into the normals)
        (1.0 + p2(-8), 0x3F80),        // tie -> even (down)
        (1.0 + 3.0 * p2(-8), 0x3F82),  // tie -> even (up)
        // Above the tie only in the low 32 bits of the f64: `half`'s bf16::from_f64 drops
        // those bits and would give 0x3F80.
        (1.0 + p2(-8) + p2(-40), 0x3F81),
        (0.1, 0x3DCD),
    ];
    for &(x, bits) in table {
        assert_eq!(bf16_from_f64(x).to_bits(), bits, "bf16({x:e})");
    }
    let nan = bf16_from_f64(f64::NAN);
    assert!(nan.is_nan());
    assert_eq!(nan.to_bits() & 0x0040, 0x0040, "quiet NaN");
}

#[test]
fn f32_corner_cases() {
    assert_eq!(f32_from_f64(1.0 + p2(-24)).to_bits(), 1.0f32.to_bits()); // tie -> even
    assert_eq!(f32_from_f64(1.0 + 3.0 * p2(-24)).to_bits(), (1.0f32 + 2.0 * f32::EPSILON).to_bits());
    assert_eq!(f32_from_f64(p2(-149)).to_bits(), 1);
    assert_eq!(f32_from_f64(p2(-150)).to_bits(), 0);
    assert_eq!(f32_from_f64(-p2(-151)).to_bits(), 0x8000_0000);
    assert_eq!(f32_from_f64(f32::MAX as f64 * (1.0 + p2(-25))).to_bits(), f32::MAX.to_bits());
    assert_eq!(f32_from_f64(1e39), f32::INFINITY);
}

/// Every fp16 and bf16 value survives f64 -> type exactly (both directions, all 2^16 bits).
#[test]
fn half_roundtrips_exhaustively() {
    for bits in 0..=u16::MAX {
        let h = f16::from_bits(bits);
        let b = bf16::from_bits(bits);
        if h.is_nan() {
            assert!(f16_from_f64(h.to_f64()).is_nan());
        } else {
            assert_eq!(f16_from_f64(h.to_f64()).to_bits(), bits);
        }
        if b.is_nan() {
            assert!(bf16_from_f64(b.to_f64()).is_nan());
        } else {
            assert_eq!(bf16_from_f64(b.to_f64()).to_bits(), bits);
        }
    }
}

/// For f32 inputs one rounding from f64 must equal `half`'s f32 -> f16/bf16 (a single correct
/// rounding); checked on a stride through all 2^32 f32 bit patterns.
#[test]
fn agrees_with_half_on_f32_inputs() {
    let mut bits: u64 = 0;
    while bits <= u32::MAX as u64 {
        let x = f32::from_bits(bits as u32);
        if !x.is_nan() {
            assert_eq!(f16_from_f64(x as f64).to_bits(), f16::from_f32(x).to_bits(), "f16 of {x:e}");
            assert_eq!(bf16_from_f64(x as f64).to_bits(), bf16::from_f32(x).to_bits(), "bf16 of {x:e}");
        }
        bits += 4093;
    }
    // Halfway and near-halfway f32 inputs around every f16 / bf16 value near 1 and subnormals.
    for base in [1.0f32, 1.5, 3.0e-5, 6.0e-8, 1.0e-39, 1.0e4] {
        let b = base.to_bits();
        for d in 0..(1u32 << 14) {
            let x = f32::from_bits(b + d);
            assert_eq!(f16_from_f64(x as f64).to_bits(), f16::from_f32(x).to_bits(), "f16 of {x:e}");
            assert_eq!(bf16_from_f64(x as f64).to_bits(), bf16::from_f32(x).to_bits(), "bf16 of {x:e}");
        }
    }
}

#[test]
fn quantize_follows_pytorch() {
    let q = QuantParams::new(0.5, 0);
    assert_eq!(q.quantize(0.25), 0); // 0.5 -> ties to even 0
    assert_eq!(q.quantize(0.75), 2); // 1.5 -> 2
    assert_eq!(q.quantize(1.25), 2); // 2.5 -> 2
    assert_eq!(q.quantize(-0.25), 0);
    assert_eq!(q.quantize(-0.75), -2);
    assert_eq!(q.quantize(100.0), 127);
    assert_eq!(q.quantize(-100.0), -128);
    assert_eq!(q.quantize(f64::INFINITY), 127);
    assert_eq!(q.quantize(f64::NEG_INFINITY), -128);
    assert_eq!(q.quantize(f64::NAN), -128);
    let q = QuantParams::new(0.5, 10);
    assert_eq!(q.quantize(1.0), 12);
    assert_eq!(q.quantize(60.0), 127); // 120 + 10 clamps
    assert_eq!(q.quantize(-69.0), -128); // -138 + 10 clamps
                                         // x * (1/scale) rounded to f32: 0.35f32 * 10.0f32 = 3.5 exactly -> 4, while the f64
                                         // quotient 0.35f32 / 0.1f32 = 3.4999999 would give 3.
    let q = QuantParams::new(0.1, 0);
    assert_eq!(q.quantize(0.35f32 as f64), 4);
    assert_eq!(q.quantize(0.45f32 as f64), 4);
    let q = QuantParams::new(0.25, -3);
    assert_eq!(q.dequantize(-3), 0.0);
    assert_eq!(q.dequantize(127), 32.5);
    assert_eq!(q.dequantize(-128), -31.25);
}

/// `round_half_even` gives `f64::round_ties_even`'s bits: ties both ways, signed zeros, the
/// 2^52 boundary, subnormals, infinities, NaN, and a sweep of random bit patterns (every
/// exponent) and of quarter-integers (every tie near the int8 range the quantizer rounds in).
#[test]
fn round_half_even_is_round_ties_even() {
    let mut xs = vec![
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.5,
        -1.5,
        2.5,
        -2.5,
        0.49999999999999994,
        -0.49999999999999994,
        p2(52) - 0.5,
        p2(52) - 1.5,
        -(p2(52) - 0.5),
        p2(52),
        p2(52) + 1.0,
        p2(53) + 2.0,
        p2(-1074),
        -p2(-1074),
        f64::MIN_POSITIVE,
        f64::MAX,
        f64::MIN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    xs.extend((-1200..=1200).map(|k| k as f64 * 0.25));
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..200_000 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        xs.push(f64::from_bits(s));
    }
    for x in xs {
        let (got, want) = (round_half_even(x), x.round_ties_even());
        assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{x:e}: {got:e} vs {want:e}");
    }
}
