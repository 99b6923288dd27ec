//! Seeded input data, chosen to expose reduction and layout bugs.
//!
//! Our own splitmix64 generator and integer-only arithmetic until the final rounding make the
//! same seed give the same bytes on every machine and toolchain. The distribution is picked
//! per tensor from the seed (or forced with [`DataOptions::distribution`]):
//! mixed magnitudes and signs, exact small integers, rows (last logical dim) that are all
//! equal, a few large outliers in small values, uniform [-1, 1], and strictly positive values
//! (for rsqrt/div). Without `specials` every value is finite in the tensor's dtype and squares
//! of fp16 values stay finite too; with `specials`, about one value in 16 is replaced by +-0,
//! the smallest and largest subnormal, +-inf, NaN or the largest finite value.
//!
//! Values are rounded and laid out through [`crate::fast`]'s conversions (the same bits as
//! [`TensorData::from_f64`] and [`Tensor::to_format`], tested there): inputs are made on the
//! fuzz loop's hot path.

use crate::dtype::{ElemType, QuantParams};
use crate::graph::{Graph, TensorSpec};
use crate::tensor::{Tensor, TensorData};
use serde::{Deserialize, Serialize};

/// The shape of the values drawn for one tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Distribution {
    /// Sign random, magnitude log-uniform over about 2^-8 .. 2^4: cancellation and ordering.
    Mixed,
    /// Integers in [-8, 8]: every sum and mean of them is easy to check exactly.
    SmallIntegers,
    /// Every row along the last logical dim holds one value: a mean over it is that value.
    ConstantRows,
    /// Uniform [-1, 1] with about 1% large outliers of either sign.
    Outliers,
    /// Uniform [-1, 1].
    Uniform,
    /// Uniform [0.25, 4]: no NaN from rsqrt, no division by zero.
    Positive,
}

impl Distribution {
    pub const ALL: [Distribution; 6] = [
        Distribution::Mixed,
        Distribution::SmallIntegers,
        Distribution::ConstantRows,
        Distribution::Outliers,
        Distribution::Uniform,
        Distribution::Positive,
    ];
}

/// What [`generate`] draws.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DataOptions {
    /// Mix in +-0, subnormals, +-inf, NaN and the largest finite value (qs8: -128, 127 and
    /// the zero point).
    pub specials: bool,
    /// Force a distribution instead of picking one from the seed.
    pub distribution: Option<Distribution>,
}

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast, and fully specified, so streams are
/// identical everywhere.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0); the tiny modulo bias is irrelevant here.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in [0, 1) with 53 random bits (exact: integer times a power of two).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
}

/// 2^e for normal-range e, built from its bits: exact by construction on every platform
/// (`powi` promises no particular precision).
fn pow2(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// Largest outlier magnitude per dtype: fp16 squares must stay below 65504.
fn outlier_cap(dtype: ElemType) -> f64 {
    match dtype {
        ElemType::F16 => 200.0,
        _ => 1.0e4,
    }
}

#[inline]
fn draw(rng: &mut SplitMix64, dist: Distribution, dtype: ElemType) -> f64 {
    match dist {
        Distribution::Mixed => {
            // Powers of two with a random 8-bit mantissa: log-uniform magnitude.
            let e = rng.below(13) as i32 - 8;
            let m = 1.0 + rng.below(256) as f64 / 256.0;
            let s = if rng.below(2) == 0 { 1.0 } else { -1.0 };
            s * m * pow2(e)
        }
        Distribution::SmallIntegers => rng.below(17) as f64 - 8.0,
        Distribution::Uniform | Distribution::ConstantRows => rng.range(-1.0, 1.0),
        Distribution::Outliers => {
            if rng.below(100) == 0 {
                let s = if rng.below(2) == 0 { 1.0 } else { -1.0 };
                s * rng.range(0.5, 1.0) * outlier_cap(dtype)
            } else {
                rng.range(-1.0, 1.0)
            }
        }
        Distribution::Positive => rng.range(0.25, 4.0),
    }
}

/// The special values of a float dtype, in a fixed order.
fn float_specials(dtype: ElemType) -> [f64; 8] {
    let (min_sub, max_sub, max) = match dtype {
        ElemType::F16 => (pow2(-24), pow2(-14) - pow2(-24), 65504.0),
        ElemType::Bf16 => (pow2(-133), pow2(-126) - pow2(-133), f64::from(half::bf16::MAX)),
        _ => (pow2(-149), pow2(-126) - pow2(-149), f32::MAX as f64),
    };
    [0.0, -0.0, min_sub, -max_sub, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, max]
}

/// Real values -> qs8 for the non-special distributions: the drawn value is read in units of
/// the quantization step around the zero point, so every distribution means something.
fn qs8_value(rng: &mut SplitMix64, dist: Distribution, zp: i32) -> i8 {
    let v = match dist {
        Distribution::SmallIntegers => zp as f64 + rng.below(17) as f64 - 8.0,
        Distribution::Mixed | Distribution::Uniform => rng.below(256) as f64 - 128.0,
        Distribution::Outliers => {
            if rng.below(100) == 0 {
                if rng.below(2) == 0 {
                    -128.0
                } else {
                    127.0
                }
            } else {
                zp as f64 + rng.below(33) as f64 - 16.0
            }
        }
        Distribution::ConstantRows => rng.below(256) as f64 - 128.0,
        Distribution::Positive => zp as f64 + 1.0 + rng.below(40) as f64,
    };
    v.clamp(-128.0, 127.0) as i8
}

/// A tensor for `spec` from `seed`, laid out in `spec.format`. Dynamic dims take their upper
/// bound: pass `spec.concretize(shape)` for other sizes. qs8 gets `spec.quant` (zero point 0
/// if absent, which only an invalid spec has).
pub fn generate(spec: &TensorSpec, seed: u64, opts: &DataOptions) -> Tensor {
    let shape = spec.max_shape();
    let numel: usize = shape.iter().product();
    let mut rng = SplitMix64::new(seed);
    let dist = opts.distribution.unwrap_or(Distribution::ALL[rng.below(Distribution::ALL.len() as u64) as usize]);
    // A "row" is the last logical dim; a 0-D tensor is one row of one element.
    let row = shape.last().copied().unwrap_or(1).max(1);

    let data = if spec.dtype == ElemType::Qs8 {
        let zp = spec.quant.map_or(0, |q: QuantParams| q.zero_point);
        let mut v = Vec::with_capacity(numel);
        let mut row_value = 0i8;
        for i in 0..numel {
            if dist != Distribution::ConstantRows || i % row == 0 {
                row_value = qs8_value(&mut rng, dist, zp);
            }
            v.push(row_value);
        }
        if opts.specials {
            let specials = [-128i8, 127, zp.clamp(-128, 127) as i8];
            sprinkle(&mut rng, &mut v, &specials);
        }
        TensorData::Qs8(v)
    } else {
        let dtype = spec.dtype;
        // One loop per distribution (a constant `dist` in each), so the choice is not matched
        // per element; the values drawn, and their order, are those of `draw`.
        let mut v = match dist {
            Distribution::Mixed => draw_all(&mut rng, numel, |r| draw(r, Distribution::Mixed, dtype)),
            Distribution::SmallIntegers => draw_all(&mut rng, numel, |r| draw(r, Distribution::SmallIntegers, dtype)),
            Distribution::Outliers => draw_all(&mut rng, numel, |r| draw(r, Distribution::Outliers, dtype)),
            Distribution::Uniform => draw_all(&mut rng, numel, |r| draw(r, Distribution::Uniform, dtype)),
            Distribution::Positive => draw_all(&mut rng, numel, |r| draw(r, Distribution::Positive, dtype)),
            Distribution::ConstantRows => {
                // One draw per row, repeated along it.
                let mut v = Vec::with_capacity(numel);
                while v.len() < numel {
                    let x = draw(&mut rng, Distribution::ConstantRows, dtype);
                    v.extend(std::iter::repeat_n(x, row.min(numel - v.len())));
                }
                v
            }
        };
        if opts.specials {
            sprinkle(&mut rng, &mut v, &float_specials(spec.dtype));
        }
        crate::fast::data_from_f64(spec.dtype, &v, None)
    };
    let t = Tensor {
        shape,
        format: crate::dtype::MemoryFormat::Contiguous,
        quant: if spec.dtype == ElemType::Qs8 { spec.quant } else { None },
        data,
    };
    if spec.format.required_rank() == Some(t.rank()) {
        crate::fast::to_format(&t, spec.format)
    } else {
        t
    }
}

/// `n` values, each `f(rng)`, in order.
fn draw_all(rng: &mut SplitMix64, n: usize, mut f: impl FnMut(&mut SplitMix64) -> f64) -> Vec<f64> {
    (0..n).map(|_| f(rng)).collect()
}

/// Replaces about one value in 16 (at least one) with the specials, cycling through them from
/// a seeded start so that 8 x (number of specials) elements see every one.
fn sprinkle<V: Copy>(rng: &mut SplitMix64, v: &mut [V], specials: &[V]) {
    if v.is_empty() {
        return;
    }
    let count = (v.len() / 16).max(1);
    let start = rng.below(specials.len() as u64) as usize;
    // Distinct positions from a seeded stride walk when the tensor is small enough to matter.
    let n = v.len() as u64;
    let first = rng.below(n);
    let mut step = 1 + rng.below(n);
    while gcd(step, n) != 1 {
        step += 1;
    }
    for k in 0..count {
        let pos = ((first + k as u64 * step) % n) as usize;
        v[pos] = specials[(start + k) % specials.len()];
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// One tensor per graph input. Input `i` takes `shapes[i]` when given (else its upper-bound
/// shape) and a seed derived from `seed` and `i`, so inputs differ but stay reproducible.
pub fn generate_inputs(graph: &Graph, shapes: &[Vec<usize>], seed: u64, opts: &DataOptions) -> Vec<Tensor> {
    graph
        .inputs
        .iter()
        .enumerate()
        .filter_map(|(i, &id)| {
            let spec = &graph.nodes.get(id)?.spec;
            let spec = match shapes.get(i) {
                Some(s) => spec.concretize(s),
                None => spec.clone(),
            };
            let input_seed = SplitMix64::new(seed ^ (i as u64).wrapping_mul(0xD1B5_4A32_D192_ED03)).next_u64();
            Some(generate(&spec, input_seed, opts))
        })
        .collect()
}
