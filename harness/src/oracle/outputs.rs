//! The outputs oracle: delegate vs reference, for every lowering mode, thread count and SIMD
//! path, within a tolerance derived per output element.
//!
//! # Tolerances (derived, not tuned)
//!
//! The reference computes every op exactly (f64, compensated sums) and rounds once to the
//! op's output type. The delegate (as XNNPACK does) accumulates sums in f32 in an order that
//! depends on SIMD width and thread split, scales a mean by a rounded `1/n`, and rounds every
//! op's result to its tensor type. Let `u = 2^-24` (f32 unit roundoff) and let `M_i` be the
//! magnitude of output `i`: the same graph evaluated by the reference on `|x|` and `|w|`
//! with subtraction turned into addition (see `patterns`), i.e. a bound on the sum of the
//! absolute values that contribute to the output.
//!
//! - **fp32.** Summing `n` terms in any order in f32 errs by at most `(n-1) u sum|x_k|`
//!   (Higham, *Accuracy and Stability of Numerical Algorithms*, eq. 4.4, valid for every
//!   summation order, so for every SIMD width and thread split). A mean then multiplies by
//!   `fl(1/n)` (relative error `u`) and rounds the product (`u`); every further op rounds once
//!   more. Along a chain whose accumulations have total length `L` (mean length plus conv and
//!   linear fan-ins) and which has `k` ops, the error is at most `(L + 2k + 4) u M_i`.
//!   The reference rounds its exact result once, so the two can also differ by the output's
//!   rounding: add one ulp of the reference value. Hence
//!   `tol_i = (L + 2k + 4) u M_i + ulp(ref_i)`.
//! - **fp16 / bf16.** The delegate computes in f32 and rounds each op's result to fp16/bf16,
//!   as the reference does; an intermediate rounding can land one ulp apart
//!   (`2 u_c |v| <= 2 u_c M`, with `u_c = 2^-11` for fp16 and `2^-8` for bf16), and each of
//!   the `k` ops can contribute one:
//!   `tol_i = (L + 2k + 4) u M_i + 2 k u_c M_i + ulp_c(ref_i)`. A bare fp16 mean therefore
//!   gets one output ulp plus the f32 accumulation bound.
//! - **Subnormals.** In the subnormal range a rounding errs by up to half the smallest
//!   subnormal rather than by a relative `u_c`: every bound above also gets `k` smallest
//!   subnormals of the compute type (negligible for normal values).
//! - **qs8.** Inputs sit on the input grid and every scale is a power of two, so every
//!   quantize before the last one sees an exactly representable value and any correct
//!   implementation gives the same integer. The last quantize follows a mean (or a conv).
//!   The delegate sums `q - zp` exactly (int32, or f32 on grid values while the sum of
//!   magnitudes stays below 2^24 grid units: mean count `n <= 2^16`, conv fan-in `<= 2^9`)
//!   and scales by `in_scale / (n out_scale)` (a conv output by `x_scale w_scale / out_scale`,
//!   `n = 1`). When `n` is a power of two, so is the multiplier, and the scaled sum is exact, as
//!   is the reference's f32 mean; both then round the same exact value half to even (the
//!   reference's quantize is PyTorch's), so the integers are equal: `tol_i = 0`. Otherwise
//!   `1/n` is inexact and the last quantize may land one step away: `tol_i = step_i` (one
//!   quantization step of the output). Either way compared on the dequantized values, which
//!   are exact multiples of the step. `patterns::qs8_exact` decides, per run shape.
//! - **NaN and infinities.** A NaN reference value needs a NaN; an infinite one needs the
//!   same infinity; a finite one needs a finite value, unless a partial sum may overflow:
//!   `(L + 2) P` at least the compute type's largest finite value, where `P` is the largest
//!   finite magnitude of any value in the graph (summing near-`f32::MAX` values in f32
//!   overflows where the exact sum does not; every f32 implementation, XNNPACK's included,
//!   does that, and the infinity then propagates as either sign or NaN). Likewise a NaN the
//!   reference gets from opposite infinities may then come out as either infinity, unless a
//!   NaN value reaches the output (the magnitude twin is NaN there: only NaN will do).
//!   Signed zeros compare equal.
//!
//! How tight this is: a mean over `n` elements whose divisor is off by one moves the result
//! by `|mean|/n`; a dropped element moves it by `|x_k|/n`. For non-negative data
//! (`M = |mean|`) both exceed `(n + 6) u M` as long as `n (n + 6) < 2^24`, i.e. for every
//! reduction below about 4,000 elements; the fuzzer's cases stay well below. For mixed-sign
//! data the bound grows with `M / |mean|`, which is why the data generator also draws
//! positive, constant-row and small-integer tensors. `tests/oracles.rs` plants both bugs.

use super::{RefRun, Verdict};
use crate::case::Case;
use crate::engine::{self, Simd};
use crate::patterns::{self, Built};
use delegate::LoweredProgram;
use reference::dtype::bf16_to_f64;
use reference::{ElemType, MemoryFormat, Tensor, TensorData};
use std::borrow::Cow;

/// What running one lowered program gave: the outputs verdict, the errors verdict for
/// run-time errors, and any payload that differed between thread counts or SIMD paths.
pub struct Exec {
    pub outputs: Verdict,
    pub errors: Verdict,
}

/// Unit roundoff of a compute dtype (0 for fp32, whose roundings the f32 term covers).
fn unit_roundoff(dt: ElemType) -> f64 {
    match dt {
        ElemType::F16 => 2f64.powi(-11),
        ElemType::Bf16 => 2f64.powi(-8),
        _ => 0.0,
    }
}

/// One ulp of `x` in `dt` (the spacing of representable values at `|x|`).
pub fn ulp(dt: ElemType, x: f64) -> f64 {
    let (mant, min_exp) = match dt {
        ElemType::F16 => (10, -14),
        ElemType::Bf16 => (7, -126),
        _ => (23, -126),
    };
    // The binary exponent straight from the f64 bits (subnormal f64s are far below every
    // min_exp here, so they clamp like zero).
    let e =
        if x == 0.0 || !x.is_finite() { min_exp } else { (((x.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(min_exp) };
    pow2(e - mant)
}

/// `2^e` for the exponents `ulp` produces (-200 < e < 1024), exactly.
fn pow2(e: i32) -> f64 {
    if e >= -1022 {
        f64::from_bits(((e + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (52 + e + 1022))
    }
}

/// The tolerance parameters of one output.
#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    /// Total accumulation length along the chain (`L`).
    pub acc_len: usize,
    /// Ops along the chain (`k`).
    pub ops: usize,
    /// The dtype ops compute in (fp32 for qs8 patterns).
    pub compute: ElemType,
    /// qs8: the quantization step of this output.
    pub step: Option<f32>,
    /// qs8: the result is exact (zero steps allowed, not one); see the module docs.
    pub exact: bool,
}

impl Tolerance {
    /// Whether f32 accumulation may legitimately overflow for an output of magnitude `m`:
    /// a partial sum can reach `L * M`, beyond the largest finite value of the compute type.
    pub fn may_overflow(&self, m: f64) -> bool {
        let max = match self.compute {
            ElemType::F16 => 65504.0,
            ElemType::Bf16 => half::bf16::MAX.to_f64(),
            _ => f32::MAX as f64,
        };
        self.step.is_none() && (self.acc_len.max(1) as f64 + 2.0) * m >= max
    }

    /// `|r| / floor_divisor()` is a magnitude no larger than the twin's, from the reference
    /// value `r` alone. The exact value is at most `M` in size, and the reference's `k`
    /// roundings to the compute type move it by at most `((1 + u_c)^k - 1) M`, so
    /// `|r| <= (1 + u_c)^k M_exact`; the twin's own f32 roundings put its `M` at least
    /// `(1 - 2^-24)^k M_exact`. Dividing by `(1 + u_c)^(2k + 2)` covers both (`u_c = 2^-24`
    /// for fp32).
    fn floor_divisor(&self) -> f64 {
        let u = match self.compute {
            ElemType::F16 | ElemType::Bf16 => unit_roundoff(self.compute),
            _ => 2f64.powi(-24),
        };
        (1.0 + u).powi(2 * self.ops as i32 + 2)
    }

    /// The float bound's two magnitude coefficients, `(L + 2k + 4) u` and `2 k u_c`.
    fn coefficients(&self) -> (f64, f64) {
        let u = 2f64.powi(-24);
        let l = self.acc_len as f64;
        let k = self.ops as f64;
        ((l + 2.0 * k + 4.0) * u, 2.0 * k * unit_roundoff(self.compute))
    }

    /// The tolerance for reference value `r` with magnitude `m`, output dtype `out`.
    pub fn bound(&self, out: ElemType, r: f64, m: f64) -> f64 {
        if let Some(s) = self.step {
            // Dequantized values are exact multiples of the step: allow one step (none when
            // exact), plus a hair for the f32 dequantize multiply.
            let steps = if self.exact { 0.0 } else { 1.0 };
            return steps * s as f64 * (1.0 + 1e-6) + r.abs() * 2f64.powi(-23);
        }
        let (c1, c2) = self.coefficients();
        c1 * m + c2 * m + ulp(out, r) + self.subnormal_floor()
    }

    /// A rounding into the subnormal range errs by up to half the smallest subnormal, not by
    /// `u_c |v|`: one smallest subnormal of the compute type for each of the `k` ops (found
    /// by the fuzz loop: an fp32 RMSNorm of a subnormal input 5 smallest subnormals away, seed 7
    /// case 97777; XNNPACK's fp16 one 2 fp16 subnormals away, case 46395).
    fn subnormal_floor(&self) -> f64 {
        self.ops as f64 * ulp(self.compute, 0.0)
    }
}

/// Compares one delegate output with the reference. `None` when equal within tolerance;
/// otherwise the full difference, every mismatching element (up to 64 listed).
/// `magnitude` (the twin's evaluation, as costly as the reference's) is asked for only when
/// some element is beyond its bound at the magnitude floor `|ref| / (1 + u_c)^(2k + 2)`, a
/// magnitude no larger than the twin's: an element within it passes whatever the magnitude.
pub fn compare(
    reference: &Tensor,
    got: &Tensor,
    magnitude: &mut dyn FnMut() -> Option<Vec<f64>>,
    peak: &mut dyn FnMut() -> f64,
    tol: &Tolerance,
) -> Option<String> {
    compare_known(reference, None, got, &mut || magnitude().map(Cow::Owned), peak, tol)
}

/// [`compare`] with the reference's values already converted, when `known` is given (they
/// are `reference.values_f64()`: a run's reference is compared in every configuration), and
/// the magnitudes borrowed from the run that keeps them.
pub(crate) fn compare_known<'m>(
    reference: &Tensor,
    known: Option<&[f64]>,
    got: &Tensor,
    magnitude: &mut dyn FnMut() -> Option<Cow<'m, [f64]>>,
    peak: &mut dyn FnMut() -> f64,
    tol: &Tolerance,
) -> Option<String> {
    if got.shape != reference.shape {
        return Some(format!("shape: delegate {:?}, reference {:?}", got.shape, reference.shape));
    }
    if got.dtype() != reference.dtype() {
        return Some(format!("dtype: delegate {}, reference {}", got.dtype(), reference.dtype()));
    }
    if got.format != reference.format {
        return Some(format!("memory format: delegate {:?}, reference {:?}", got.format, reference.format));
    }
    if got.data.len() != reference.data.len() {
        return Some(format!("data length: delegate {}, reference {}", got.data.len(), reference.data.len()));
    }
    if got.data == reference.data {
        // Bit-identical (NaN aside, which compares unequal and takes the long way).
        return None;
    }
    let converted;
    let r = match known {
        Some(r) => r,
        None => {
            converted = reference.values_f64();
            &converted
        }
    };
    let out_dt = reference.dtype();
    // `tol.bound(out_dt, r, |r| / divisor)` with its constants computed once.
    let ((c1, c2), divisor) = (tol.coefficients(), tol.floor_divisor());
    // The common case first, in one pass: every element finite and within its bound at the
    // magnitude floor (a NaN or infinity on either side makes the difference NaN or infinite,
    // which fails the test). An element that passes it passes every test below, so the rest
    // starts at the first one that does not.
    let sub = tol.subnormal_floor();
    let within_floor = |r: f64, g: f64| {
        let (d, m) = ((g - r).abs(), r.abs() / divisor);
        d <= c1 * m + c2 * m || d <= c1 * m + c2 * m + ulp(out_dt, r) + sub
    };
    let first_beyond = |g: &mut dyn Iterator<Item = f64>| r.iter().zip(g).position(|(&r, g)| !within_floor(r, g));
    let mut converted_got = None;
    let start = match (&got.data, got.format) {
        _ if tol.step.is_some() => Some(0),
        // Read in place: the data order is the logical order that `r` is in.
        (TensorData::F32(v), MemoryFormat::Contiguous) => first_beyond(&mut v.iter().map(|&g| g as f64)),
        (TensorData::F16(v), MemoryFormat::Contiguous) => first_beyond(&mut v.iter().map(|g| g.to_f64())),
        (TensorData::Bf16(v), MemoryFormat::Contiguous) => first_beyond(&mut v.iter().map(|&g| bf16_to_f64(g))),
        _ => first_beyond(&mut converted_got.insert(got.values_f64()).iter().copied()),
    };
    let start = start?;
    let g = converted_got.unwrap_or_else(|| got.values_f64());
    let n = r.len();
    // Before the magnitudes are known, |reference| stands in (overflow needs more).
    let any_nonfinite = (start..n).any(|i| {
        let (g, r) = (g[i], r[i]);
        // (The opposite infinity too: excused by the same overflow rule, so it needs the peak.)
        (!g.is_finite() && r.is_finite())
            || (g.is_nan() && r.is_infinite())
            || (g.is_infinite() && r.is_nan())
            || (g.is_infinite() && r.is_infinite() && g != r)
    });
    let m_cache: Option<Option<Cow<[f64]>>> =
        if any_nonfinite && tol.step.is_none() { Some(magnitude()) } else { None };
    let peak_m = if any_nonfinite { peak() } else { 0.0 };
    // Overflow needs huge *finite* magnitudes somewhere (an infinite input propagates the
    // same way in both and excuses nothing).
    let finite_or_zero = |v: f64| if v.is_finite() { v.abs() } else { 0.0 };
    let m_hint = |i: usize| -> f64 {
        match &m_cache {
            Some(Some(m)) => finite_or_zero(m[i]).max(peak_m),
            _ => finite_or_zero(r[i]).max(peak_m),
        }
    };
    // Where a value is not finite on either side.
    let nonfinite_close = |i: usize| -> bool {
        if r[i].is_nan() {
            // A NaN made of opposite infinities that f32 overflow produced may come out as one
            // infinity when the partial sums overflow in another order (the mirror of the
            // case below). The twin's magnitude is NaN where a NaN value reaches the output:
            // then only NaN will do.
            let overflowed = g[i].is_infinite()
                && tol.may_overflow(m_hint(i))
                && matches!(&m_cache, Some(Some(m)) if !m[i].is_nan());
            g[i].is_nan() || overflowed
        } else if r[i].is_infinite() {
            // Once some partial sum may overflow, an infinite result may come out as the
            // other infinity or NaN (inf - inf) downstream.
            g[i] == r[i] || (!g[i].is_finite() && tol.may_overflow(m_hint(i)))
        } else {
            // f32 partial sums may overflow where the exact result does not: allowed only
            // when the sum of magnitudes can reach the largest finite value.
            tol.may_overflow(m_hint(i))
        }
    };
    // Some(pass) when decided without the magnitude: within the bound at a magnitude no
    // larger than the true one (the bound includes one ulp and only grows with the
    // magnitude), or not finite.
    let floor_applies = tol.step.is_none();
    let decided = |i: usize| -> Option<bool> {
        if r[i].is_finite() && g[i].is_finite() {
            (floor_applies && within_floor(r[i], g[i])).then_some(true)
        } else {
            Some(nonfinite_close(i))
        }
    };
    let first_undecided = (start..n).find(|&i| decided(i) != Some(true))?;
    let m = match &m_cache {
        Some(m) => m.clone(),
        None if tol.step.is_some() => None,
        None => magnitude(),
    };
    let mut lines = vec![];
    let mut bad = 0usize;
    for i in first_undecided..n {
        // `decided(i)`, then the bound at the twin's magnitude, with the finite case inline.
        let (ri, gi) = (r[i], g[i]);
        let ok = if ri.is_finite() && gi.is_finite() {
            (floor_applies && within_floor(ri, gi)) || {
                let b = tol.bound(out_dt, ri, m.as_ref().map_or(ri.abs(), |m| m[i]));
                // A non-finite magnitude (overflowed, or NaN from specials elsewhere) gives
                // no bound; finite-vs-finite is then all we can say.
                !b.is_finite() || (gi - ri).abs() <= b
            }
        } else {
            nonfinite_close(i)
        };
        if !ok {
            bad += 1;
            if lines.len() < 64 {
                let mi = m.as_ref().map_or(r[i].abs(), |m| m[i]);
                lines.push(format!(
                    "  [{}] delegate {:e} reference {:e} diff {:e} tol {:e} (magnitude {:e})",
                    index_string(&reference.shape, i),
                    g[i],
                    r[i],
                    (g[i] - r[i]).abs(),
                    tol.bound(out_dt, r[i], mi),
                    mi
                ));
            }
        }
    }
    if bad == 0 {
        return None;
    }
    let mut s = format!("{bad} of {} elements differ beyond tolerance:\n", r.len());
    s.push_str(&lines.join("\n"));
    if bad > lines.len() {
        s.push_str(&format!("\n  ... {} more", bad - lines.len()));
    }
    Some(s)
}

/// [`compare`] with a magnitude tensor at hand (or none: `|reference|` is used).
pub fn compare_with(reference: &Tensor, got: &Tensor, magnitude: Option<&Tensor>, tol: &Tolerance) -> Option<String> {
    compare(reference, got, &mut || magnitude.map(|t| t.values_f64()), &mut || 0.0, tol)
}

/// `i` as a multi-index of `shape` (row-major), e.g. `0,2,1`.
fn index_string(shape: &[usize], mut i: usize) -> String {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        let s = shape[d].max(1);
        idx[d] = i % s;
        i /= s;
    }
    idx.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(",")
}

/// The tolerance of output `o` of a built case, on a run whose main input has `shape`
/// (qs8 exactness depends on the run's mean counts).
pub fn tolerance(case: &Case, built: &Built, o: usize, shape: &[usize]) -> Tolerance {
    let compute = if case.dtype == ElemType::Qs8 { ElemType::F32 } else { case.dtype };
    let step = built.out_step.get(o).copied().flatten();
    let exact = step.is_some() && patterns::qs8_exact(case, shape, o);
    Tolerance { acc_len: built.acc_len, ops: built.ops, compute, step, exact }
}

/// Runs a lowered program in each configuration (threads, SIMD path) on every run of the
/// case, comparing with the reference. `given` (loaded and planned once) serves every
/// configuration; without it the first configuration prepares the program.
pub fn execute(
    case: &Case,
    built: &Built,
    runs: &[RefRun],
    program: &LoweredProgram,
    given: Option<&engine::Prepared>,
    configs: &[(usize, Simd)],
) -> Exec {
    let mut outputs = Verdict::Pass;
    let mut errors = Verdict::Pass;
    let mut failing_configs: Vec<String> = vec![];
    let mut first_detail: Option<String> = None;
    let mut first: Option<engine::Prepared> = None;
    for &(threads, simd) in configs {
        let config = format!("{} threads={threads} {}", program.mode.name(), simd.name());
        let prepared = match given.or(first.as_ref()) {
            Some(p) => p.reconfigure(threads, simd),
            None => engine::prepare(program, threads, simd),
        };
        let mut prepared = match prepared {
            Ok(p) => p,
            Err(e) if e.unavailable => return skipped(&e.message),
            Err(e) => {
                if !errors.is_fail() {
                    errors = Verdict::fail("prepare_failed", format!("{config}: {e}"));
                }
                continue;
            }
        };
        for (r, run) in runs.iter().enumerate() {
            let got = prepared.run(&run.inputs);
            let run_name = if runs.len() > 1 { format!(" run {r} shapes {:?}", run.shapes[0]) } else { String::new() };
            match (&run.outputs, got) {
                (_, Err(e)) if e.unavailable => return skipped(&e.message),
                (Ok(want), Ok(got)) => {
                    if got.len() != want.len() {
                        failing_configs.push(format!("{config}{run_name}"));
                        first_detail.get_or_insert_with(|| {
                            format!("{} outputs from the delegate, {} from the reference", got.len(), want.len())
                        });
                        continue;
                    }
                    for (o, (w, g)) in want.iter().zip(&got).enumerate() {
                        let mut mag = || run.magnitude_values(o).map(Cow::Borrowed);
                        let mut peak = || run.peak_magnitude();
                        if let Some(d) = compare_known(
                            w,
                            run.values(o),
                            g,
                            &mut mag,
                            &mut peak,
                            &tolerance(case, built, o, run.shapes.first().map_or(&[], |s| s)),
                        ) {
                            failing_configs.push(format!("{config}{run_name} output {o}"));
                            first_detail.get_or_insert_with(|| format!("[{config}{run_name} output {o}] {d}"));
                            break;
                        }
                    }
                }
                (Ok(_), Err(e)) => {
                    if !errors.is_fail() {
                        errors = Verdict::fail(
                            "delegate_run_rejects",
                            format!("{config}{run_name}: the reference runs it, the delegate says {e}"),
                        );
                    }
                }
                (Err(want), Ok(_)) => {
                    if !errors.is_fail() {
                        errors = Verdict::fail(
                            "delegate_run_accepts",
                            format!("{config}{run_name}: the reference rejects it ({want}), the delegate runs it"),
                        );
                    }
                }
                (Err(want), Err(e)) => {
                    if want.class != e.class && !errors.is_fail() {
                        errors = Verdict::fail(
                            "class_mismatch",
                            format!("{config}{run_name}: reference {want}; delegate {e}"),
                        );
                    }
                }
            }
        }
        if given.is_none() && first.is_none() {
            first = Some(prepared);
        }
    }
    if let Some(d) = first_detail {
        outputs = Verdict::fail("mismatch", format!("fails at: {}\n{d}", failing_configs.join("; ")));
    }
    Exec { outputs, errors }
}

fn skipped(msg: &str) -> Exec {
    Exec { outputs: Verdict::Skip(msg.to_string()), errors: Verdict::Skip(msg.to_string()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulp_matches_the_formats() {
        assert_eq!(ulp(ElemType::F32, 1.0), 2f64.powi(-23));
        assert_eq!(ulp(ElemType::F32, 1.5), 2f64.powi(-23));
        assert_eq!(ulp(ElemType::F32, 0.0), 2f64.powi(-149));
        assert_eq!(ulp(ElemType::F16, 1.0), 2f64.powi(-10));
        assert_eq!(ulp(ElemType::F16, 1e-7), 2f64.powi(-24));
        assert_eq!(ulp(ElemType::Bf16, 3.0), 2f64.powi(-6));
    }

    #[test]
    fn nan_needs_nan_and_infinity_needs_the_same_infinity() {
        let tol = Tolerance { acc_len: 4, ops: 1, compute: ElemType::F32, step: None, exact: false };
        let r = Tensor::f32(&[3], vec![f32::NAN, f32::INFINITY, 1.0]);
        assert!(compare_with(&r, &r.clone(), None, &tol).is_none());
        let g = Tensor::f32(&[3], vec![1.0, f32::INFINITY, 1.0]);
        assert!(compare_with(&r, &g, None, &tol).unwrap().contains("1 of 3"));
        let g = Tensor::f32(&[3], vec![f32::NAN, f32::NEG_INFINITY, 1.0]);
        assert!(compare_with(&r, &g, None, &tol).is_some());
        let g = Tensor::f32(&[3], vec![f32::NAN, f32::INFINITY, f32::NAN]);
        assert!(compare_with(&r, &g, None, &tol).is_some());
    }

    #[test]
    fn overflow_is_excused_only_near_the_largest_finite_value() {
        let tol = Tolerance { acc_len: 4, ops: 1, compute: ElemType::F32, step: None, exact: false };
        let r = Tensor::f32(&[2], vec![3.0e38, 1.0]);
        let g = Tensor::f32(&[2], vec![f32::INFINITY, 1.0]);
        // The output's own magnitude (3e38) times (L + 2) passes f32::MAX: excused.
        assert!(compare_with(&r, &g, Some(&r), &tol).is_none());
        let r = Tensor::f32(&[2], vec![3.0, 1.0]);
        let g = Tensor::f32(&[2], vec![f32::INFINITY, 1.0]);
        assert!(compare_with(&r, &g, Some(&r), &tol).is_some());
        // A huge intermediate anywhere in the graph (the peak) excuses it too.
        assert!(compare(&r, &g, &mut || None, &mut || 1.0e38, &tol).is_none());
    }

    #[test]
    fn the_opposite_infinity_is_excused_only_where_a_partial_sum_may_overflow() {
        // (fuzz seed 5, case 286, on real XNNPACK: an fp32 conv over -inf and f32::MAX inputs
        // gives +inf where the reference's exact sum gives -inf.)
        let tol = Tolerance { acc_len: 7, ops: 1, compute: ElemType::F32, step: None, exact: false };
        let r = Tensor::f32(&[2], vec![f32::NEG_INFINITY, 1.0]);
        let g = Tensor::f32(&[2], vec![f32::INFINITY, 1.0]);
        let twin = || Some(vec![f64::INFINITY, 1.0]);
        assert!(compare(&r, &g, &mut twin.clone(), &mut || 3.0e38, &tol).is_none());
        assert!(compare(&r, &g, &mut twin.clone(), &mut || 1.0, &tol).is_some());
    }

    #[test]
    fn a_nan_from_overflowed_infinities_may_come_out_infinite_but_a_propagated_nan_may_not() {
        // (fuzz seed 4244, case 60704: a conv's exact sums overflow f32 to +inf and -inf in
        // the reference, its f32 partial sums to +inf twice in the delegate; the mean after it
        // is NaN in one and +inf in the other.)
        let tol = Tolerance { acc_len: 4, ops: 2, compute: ElemType::F32, step: None, exact: false };
        let r = Tensor::f32(&[2], vec![f32::NAN, 1.0]);
        let g = Tensor::f32(&[2], vec![f32::INFINITY, 1.0]);
        let twin = |m0: f64| move || Some(vec![m0, 1.0]);
        assert!(compare(&r, &g, &mut twin(f64::INFINITY), &mut || 1.0e38, &tol).is_none());
        // No partial sum can overflow: the NaN came from infinite inputs, any order gives NaN.
        assert!(compare(&r, &g, &mut twin(f64::INFINITY), &mut || 1.0, &tol).is_some());
        // A NaN reaches the output (the twin is NaN there): only NaN will do.
        assert!(compare(&r, &g, &mut twin(f64::NAN), &mut || 1.0e38, &tol).is_some());
        let nan = Tensor::f32(&[2], vec![f32::NAN, 1.0]);
        assert!(compare(&r, &nan, &mut twin(f64::NAN), &mut || 1.0e38, &tol).is_none());
    }

    #[test]
    fn the_twin_is_evaluated_only_beyond_the_bound_at_the_reference_magnitude() {
        // acc_len 64: the bound at |ref| = 1 is (64 + 6) u + ulp(1) = 72 u.
        let tol = Tolerance { acc_len: 64, ops: 1, compute: ElemType::F32, step: None, exact: false };
        let r = Tensor::f32(&[2], vec![1.0, -2.0]);
        let asked = std::cell::Cell::new(0);
        let mag = |m: f64| {
            let asked = &asked;
            move || {
                asked.set(asked.get() + 1);
                Some(vec![m, m])
            }
        };
        // 40 ulps (80 u) away at 1.0 is beyond the bound at |ref| = 1 (72 u); 20 ulps away at
        // -2.0 is within it. The twin is asked for, and a magnitude of 4 excuses it.
        let near = Tensor::f32(&[2], vec![1.0 + 40.0 * f32::EPSILON, -2.0 + 20.0 * 2.0 * f32::EPSILON]);
        assert!(compare(&r, &near, &mut mag(4.0), &mut || 0.0, &tol).is_none());
        assert_eq!(asked.get(), 1);
        // A magnitude equal to |ref| does not.
        assert!(compare(&r, &near, &mut mag(1.0), &mut || 0.0, &tol).is_some());
        assert_eq!(asked.get(), 2);
        // 30 ulps (60 u) away passes at |ref| without the twin.
        let close = Tensor::f32(&[2], vec![1.0 + 30.0 * f32::EPSILON, -2.0]);
        assert!(compare(&r, &close, &mut mag(1.0), &mut || 0.0, &tol).is_none());
        assert_eq!(asked.get(), 2);
    }

    #[test]
    fn fp16_allows_one_output_ulp_but_not_two() {
        let tol = Tolerance { acc_len: 8, ops: 1, compute: ElemType::F16, step: None, exact: false };
        let r = Tensor::from_f64(&[1], ElemType::F16, None, &[1.0]);
        let one_up = Tensor::from_f64(&[1], ElemType::F16, None, &[1.0 + 2f64.powi(-10)]);
        let far = Tensor::from_f64(&[1], ElemType::F16, None, &[1.0 + 4.0 * 2f64.powi(-10)]);
        assert!(compare_with(&r, &one_up, None, &tol).is_none());
        assert!(compare_with(&r, &far, None, &tol).is_some());
    }

    #[test]
    fn qs8_allows_one_step_not_two() {
        let tol = Tolerance { acc_len: 8, ops: 3, compute: ElemType::F32, step: Some(0.0625), exact: false };
        let r = Tensor::f32(&[2], vec![0.5, -1.0]);
        assert!(compare_with(&r, &Tensor::f32(&[2], vec![0.5625, -1.0625]), None, &tol).is_none());
        assert!(compare_with(&r, &Tensor::f32(&[2], vec![0.625, -1.0]), None, &tol).is_some());
    }

    #[test]
    fn shape_and_format_differences_are_reported() {
        let tol = Tolerance { acc_len: 1, ops: 1, compute: ElemType::F32, step: None, exact: false };
        let r = Tensor::f32(&[1, 2, 1, 1], vec![1.0, 2.0]);
        let g = Tensor::f32(&[1, 2], vec![1.0, 2.0]);
        assert!(compare_with(&r, &g, None, &tol).unwrap().starts_with("shape"));
        let g = r.to_format(reference::MemoryFormat::ChannelsLast);
        assert!(compare_with(&r, &g, None, &tol).unwrap().starts_with("memory format"));
    }
}
