//! The outputs oracle's comparison of one output: the tolerance of each element (derived in
//! the parent module's docs), the plain comparison that `replay` runs and prints, and the
//! pre-filter the fuzz loop runs first, which settles a tensor without either twin when the
//! plain comparison would pass it whatever the twins say.
//!
//! Over 700 lines on purpose: the rule, the plain comparison and the pre-filter that must agree
//! with it are read side by side.
//!
//! The functions take any engine's output tensor: they know nothing of the delegate.

use half::slice::HalfFloatSliceExt;
use reference::dtype::bf16_to_f64;
use reference::{ElemType, MemoryFormat, Tensor, TensorData};

/// Unit roundoff of a compute dtype (0 for fp32, whose roundings the f32 term covers).
fn unit_roundoff(dt: ElemType) -> f64 {
    match dt {
        ElemType::F16 => 2f64.powi(-11),
        ElemType::Bf16 => 2f64.powi(-8),
        _ => 0.0,
    }
}

/// One ulp of `x` in `dt` (the spacing of representable values at `|x|`; at a power of two,
/// the larger spacing above it).
pub fn ulp(dt: ElemType, x: f64) -> f64 {
    let (mant, min_exp) = ulp_format(dt);
    // The binary exponent straight from the f64 bits (subnormal f64s are far below every
    // min_exp here, so they clamp like zero).
    let e =
        if x == 0.0 || !x.is_finite() { min_exp } else { (((x.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(min_exp) };
    pow2(e - mant)
}

/// Stored mantissa bits and smallest normal exponent of `dt` (qs8's tolerances are in f32).
fn ulp_format(dt: ElemType) -> (i32, i32) {
    match dt {
        ElemType::F16 => (10, -14),
        ElemType::Bf16 => (7, -126),
        _ => (23, -126),
    }
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
    /// The float type of smallest range any op computes in (fp16 before bf16 before fp32):
    /// where partial sums overflow first. It differs from `compute` only in random graphs
    /// that mix fp16 and bf16 nodes, whose `compute` is bf16 (the coarser rounding).
    pub range: ElemType,
    /// qs8: the quantization step of this output.
    pub step: Option<f32>,
    /// qs8: the result is exact (zero steps allowed, not one); see the module docs.
    pub exact: bool,
    /// The output's last op is its only rounding below fp32: the rounding-mode rule applies
    /// to fp16/bf16 outputs (see the parent module's docs).
    pub rounds_once: bool,
    /// qs8 under a real quantizer's parameters: one step only where the value before the
    /// last quantize (the wide twin) is near a rounding boundary, none elsewhere (the tie
    /// rule of the parent module's docs).
    pub ties: bool,
}

/// The tie rule's margin in units of `u` times the magnitude in steps, besides the f32
/// summation's `L u B`: the reference's value before rounding is within `4 u B` of the exact
/// one, the wide twin's quotient within `2 u B`, and a correct f32 requantization within
/// `10 u B` (ours and XNNPACK's: 5).
pub const TIE_MARGIN: f64 = 16.0;

impl Tolerance {
    /// Whether f32 accumulation may legitimately overflow for an output of magnitude `m`:
    /// a partial sum can reach `L * M`, beyond the largest finite value of the compute type.
    pub fn may_overflow(&self, m: f64) -> bool {
        let max = match self.range {
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
    /// for fp32). (The twin's underflow floors only raise its `M`.)
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
            // exact, or under the tie rule away from a boundary), plus a hair for the f32
            // dequantize multiply.
            let steps = if self.exact || self.ties { 0.0 } else { 1.0 };
            return steps_bound(s, steps, r);
        }
        let (c1, c2) = self.coefficients();
        c1 * m + c2 * m + ulp(out, r)
    }

    /// Whether the rounding-mode rule applies to an output of dtype `out`.
    fn rounding_rule(&self, out: ElemType) -> bool {
        self.rounds_once && self.step.is_none() && matches!(out, ElemType::F16 | ElemType::Bf16)
    }
}

/// `steps` quantization steps of `s` at a dequantized value `r`.
fn steps_bound(s: f32, steps: f64, r: f64) -> f64 {
    steps * s as f64 * (1.0 + 1e-6) + r.abs() * 2f64.powi(-23)
}

/// The tie rule: the steps a qs8 output element may be off, from `w`, the value before the
/// last quantize of step `s` (the wide twin), and `m`, its magnitude (the magnitude twin):
/// the rounding boundaries (half-integers of `w / s`) within `(acc_len + TIE_MARGIN) u m / s`
/// of `w / s` (one near a tie, none elsewhere); one when either is missing.
pub fn tie_steps(s: f32, acc_len: usize, w: Option<f64>, m: Option<f64>) -> f64 {
    let (Some(w), Some(m)) = (w, m) else { return 1.0 };
    if !(w.is_finite() && m.is_finite()) {
        return 1.0;
    }
    let t = w / s as f64;
    let margin = (acc_len as f64 + TIE_MARGIN) * 2f64.powi(-24) * m.max(w.abs()) / s as f64;
    // Both sides round a value within `margin` of `t`: as many steps apart as there are
    // boundaries in `[t - margin, t + margin]` (one near a tie; more only for sums so long
    // that the f32 summation bound exceeds a step).
    ((t + margin + 0.5).floor() - (t - margin + 0.5).floor()).max(0.0)
}

/// What the comparison of one output may ask for besides the two tensors. Each is computed
/// on first use (a twin costs a reference evaluation) and must be the same on every call.
pub trait Evidence {
    /// The magnitude twin's values of this output (`M_i`, logical order); `None` for qs8
    /// and invalid graphs or when the twin failed (`|ref_i|` then stands in).
    fn magnitude(&self) -> Option<&[f64]>;
    /// The largest finite magnitude of any value in the twin, every node (0 without one).
    fn peak(&self) -> f64;
    /// The wide twin's values of this output (`None` where the rounding-mode rule does not
    /// apply or the twin failed: the rule is then not checked).
    fn wide(&self) -> Option<&[f64]>;
    /// The NaN-reach twin's values of this output: NaN exactly where a NaN input value
    /// reaches the element (see the parent module's docs, NaN and infinities). `None`: the
    /// magnitude twin's NaN stands in, which is also NaN where an overflowed infinity of the
    /// twin meets a zero.
    fn nan_reach(&self) -> Option<&[f64]>;
}

/// Evidence given up front (tests, engines that bring their own).
#[derive(Clone, Debug, Default)]
pub struct Given {
    pub magnitude: Option<Vec<f64>>,
    pub peak: f64,
    pub wide: Option<Vec<f64>>,
    pub nan_reach: Option<Vec<f64>>,
}

impl Evidence for Given {
    fn magnitude(&self) -> Option<&[f64]> {
        self.magnitude.as_deref()
    }
    fn peak(&self) -> f64 {
        self.peak
    }
    fn wide(&self) -> Option<&[f64]> {
        self.wide.as_deref()
    }
    fn nan_reach(&self) -> Option<&[f64]> {
        self.nan_reach.as_deref()
    }
}

/// Why one element fails.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Miss {
    /// Beyond the bound at magnitude `m`.
    Beyond { bound: f64, m: f64 },
    /// Within the bound, but not a rounding to nearest of a value within the f32 bound of
    /// the exact one: `limit` (half an ulp plus that bound) from `wide`, projected onto the
    /// reference's rounding interval.
    Rounding { wide: f64, projected: f64, limit: f64 },
    /// Not finite on one side (or not the same infinity), and no overflow excuses it.
    NotFinite,
}

/// Shape, dtype, format and length, which no tolerance excuses.
fn layout_difference(reference: &Tensor, got: &Tensor) -> Option<String> {
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
    None
}

/// The plain comparison: every element judged by the one rule of the parent module's docs.
/// `None` when all pass; otherwise how many fail and the first 64 of them, each with its
/// bound and magnitude. This is what `replay` runs and prints.
pub fn compare_plain(reference: &Tensor, got: &Tensor, ev: &dyn Evidence, tol: &Tolerance) -> Option<String> {
    if let Some(d) = layout_difference(reference, got) {
        return Some(d);
    }
    let (r, g) = (reference.values_f64(), got.values_f64());
    let rule = Rule::new(tol, reference.dtype(), ev);
    let mut lines = vec![];
    let mut bad = 0usize;
    for i in 0..r.len() {
        let Some(miss) = rule.judge(i, r[i], g[i]) else { continue };
        bad += 1;
        if lines.len() < 64 {
            let at = format!(
                "  [{}] delegate {:e} reference {:e} diff {:e}",
                index_string(&reference.shape, i),
                g[i],
                r[i],
                (g[i] - r[i]).abs()
            );
            lines.push(match miss {
                Miss::Beyond { bound, m } => format!("{at} tol {bound:e} (magnitude {m:e})"),
                Miss::Rounding { wide, projected, limit } => format!(
                    "{at} within tol, but {:e} from the f32 value {wide:e} (in the reference's rounding \
                     interval: {projected:e}), more than half an ulp plus the f32 bound, {limit:e}: \
                     not rounded to nearest",
                    (g[i] - projected).abs()
                ),
                Miss::NotFinite => format!("{at} (not finite, no overflow possible)"),
            });
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

/// The rule for the elements of one output, with its constants.
struct Rule<'e> {
    tol: &'e Tolerance,
    out: ElemType,
    ev: &'e dyn Evidence,
    /// The magnitude twin's values (float outputs only).
    mag: Option<&'e [f64]>,
    c1: f64,
    c2: f64,
    divisor: f64,
    rounding: bool,
}

impl<'e> Rule<'e> {
    fn new(tol: &'e Tolerance, out: ElemType, ev: &'e dyn Evidence) -> Rule<'e> {
        let (c1, c2) = tol.coefficients();
        let mag = if tol.step.is_none() || tol.ties { ev.magnitude() } else { None };
        Rule { tol, out, ev, mag, c1, c2, divisor: tol.floor_divisor(), rounding: tol.rounding_rule(out) }
    }

    /// Element `i`: reference `r`, delegate `g`.
    fn judge(&self, i: usize, r: f64, g: f64) -> Option<Miss> {
        let (tol, out) = (self.tol, self.out);
        if r.is_infinite() && g.is_finite() && self.overflowed_rounding(i, r, g) {
            return None;
        }
        if !(r.is_finite() && g.is_finite()) {
            return (!nonfinite_close(i, r, g, self.ev, tol)).then_some(Miss::NotFinite);
        }
        let d = (g - r).abs();
        if let Some(s) = tol.step {
            let bound = match tol.ties && !tol.exact && d > tol.bound(out, r, r.abs()) {
                true => {
                    let wide = self.ev.wide().and_then(|w| w.get(i).copied());
                    steps_bound(s, tie_steps(s, tol.acc_len, wide, self.mag.and_then(|m| m.get(i).copied())), r)
                }
                false => tol.bound(out, r, r.abs()),
            };
            return (d > bound).then_some(Miss::Beyond { bound, m: r.abs() });
        }
        // The twin's magnitude, never below the floor |r| / divisor (no larger than the true
        // magnitude, see `floor_divisor`). A non-finite magnitude (overflowed, or NaN from
        // specials elsewhere) gives no bound: finite-vs-finite is then all we can say.
        let m = self.mag.and_then(|m| m.get(i).copied()).unwrap_or(r.abs());
        if !m.is_finite() {
            return None;
        }
        let m = m.max(r.abs() / self.divisor);
        // `tol.bound(out, r, m)`.
        let bound = self.c1 * m + self.c2 * m + ulp(out, r);
        if d > bound {
            return Some(Miss::Beyond { bound, m });
        }
        if d == 0.0 || !self.rounding {
            return None;
        }
        let wide = self.ev.wide().and_then(|w| w.get(i).copied()).filter(|w| w.is_finite())?;
        // The exact value lies within half an ulp of `r` (r is its rounding to nearest) and
        // close to `wide`: projecting `wide` onto that interval moves it no farther from it.
        let half = ulp(out, r) / 2.0;
        let projected = wide.clamp(r - half, r + half);
        let limit = ulp(out, g) / 2.0 + self.c1 * m;
        ((g - projected).abs() > limit).then_some(Miss::Rounding { wide, projected, limit })
    }
}

impl Rule<'_> {
    /// An infinite reference `r` that is the rounding of a finite exact value (the twin's
    /// magnitude is finite): the exact value `e` has `r`'s sign and is at least `T` in size,
    /// the largest finite value `F` plus half its ulp (where rounding to nearest overflows),
    /// and at most `M`. A finite `g` is within the bound of some such `e` when its distance to
    /// the nearest one, `T - g sign(r)`, is at most `((L + 2k + 4) u + 2 k u_c) M + ulp(F)`
    /// (the parent module's docs, NaN and infinities): near `T` for a `g` of `r`'s sign, and
    /// a zero or a `g` of the other sign only where the bound itself exceeds `T` (a sum that
    /// cancels to about zero, times a huge factor).
    fn overflowed_rounding(&self, i: usize, r: f64, g: f64) -> bool {
        if self.tol.step.is_some() {
            return false;
        }
        let Some(m) = self.mag.and_then(|m| m.get(i).copied()).filter(|m| m.is_finite()) else { return false };
        let f = largest_finite(self.out);
        let t = f + ulp(self.out, f) / 2.0;
        m * self.divisor >= t && t - g * r.signum() <= (self.c1 + self.c2) * m + ulp(self.out, f)
    }
}

/// The largest finite value of a float type.
fn largest_finite(dt: ElemType) -> f64 {
    match dt {
        ElemType::F16 => 65504.0,
        ElemType::Bf16 => half::bf16::MAX.to_f64(),
        _ => f32::MAX as f64,
    }
}

/// Whether an element that is not finite on some side is as close as it can be (see the
/// parent module's docs, NaN and infinities).
fn nonfinite_close(i: usize, r: f64, g: f64, ev: &dyn Evidence, tol: &Tolerance) -> bool {
    // Overflow needs huge *finite* magnitudes somewhere (an infinite input propagates the
    // same way in both and excuses nothing).
    let finite_or_zero = |v: f64| if v.is_finite() { v.abs() } else { 0.0 };
    let twin = || ev.magnitude().and_then(|m| m.get(i).copied());
    let may_overflow = || tol.may_overflow(finite_or_zero(twin().unwrap_or(r)).max(ev.peak()));
    if r.is_nan() {
        // A NaN made of opposite infinities that f32 overflow produced may come out as one
        // infinity when the partial sums overflow in another order (the mirror of the case
        // below). Where a NaN input value reaches the output, only NaN will do.
        let nan_reaches = match ev.nan_reach() {
            Some(reach) => reach.get(i).is_none_or(|v| v.is_nan()),
            None => twin().is_none_or(f64::is_nan),
        };
        g.is_nan() || (g.is_infinite() && twin().is_some() && !nan_reaches && may_overflow())
    } else if r.is_infinite() {
        // Once some partial sum may overflow, an infinite result may come out as the other
        // infinity or NaN (inf - inf) downstream.
        g == r || (!g.is_finite() && may_overflow())
    } else {
        // f32 partial sums may overflow where the exact result does not: allowed only when
        // the sum of magnitudes can reach the largest finite value.
        may_overflow()
    }
}

/// The pre-filter of one output's elements, with its constants: [`Prefilter::settles`]
/// an element when [`compare_plain`] passes it whatever the evidence says, decided from
/// the two values alone. It must be NaN on both sides, the same infinity, or finite on
/// both sides and within its bound at the floor magnitude `|r| / divisor`, below which the
/// plain comparison never goes; under the rounding-mode rule also
/// `|g - r| + ulp(r)/2 <= ulp(g)/2 + (L + 2k + 4) u |r| / divisor`, so that every point of
/// the reference's rounding interval, the projected wide value included, is close enough.
/// Each test is monotone in the magnitude and the plain comparison's magnitude is at least
/// the floor, so a settled element passes there (the `prefilter_*` tests check the two on
/// random tensors and evidence).
struct Prefilter<'t> {
    tol: &'t Tolerance,
    out: ElemType,
    c1: f64,
    c2: f64,
    divisor: f64,
    rounding: bool,
}

impl<'t> Prefilter<'t> {
    fn new(tol: &'t Tolerance, out: ElemType) -> Prefilter<'t> {
        let (c1, c2) = tol.coefficients();
        Prefilter { tol, out, c1, c2, divisor: tol.floor_divisor(), rounding: tol.rounding_rule(out) }
    }

    /// Whether [`Prefilter::settles`] holds for every pair of `r` and `g`, for finite values
    /// without a quantization step: the same expressions, without a branch per element, so
    /// that the loop vectorizes. `false` (then ask `settles` for each) where a value is not
    /// finite or the output has a step.
    fn settles_finite(&self, r: &[f64], g: &[f64]) -> bool {
        if self.tol.step.is_some() {
            return false;
        }
        let (mant, min_exp) = ulp_format(self.out);
        // `ulp` of a finite value: 2^(max(e, min_exp) - mant) from its biased exponent.
        let lo = (min_exp + 1023) as u64;
        let ulp = |e: u64| f64::from_bits((e.max(lo) - mant as u64) << 52);
        let biased = |x: f64| (x.to_bits() >> 52) & 0x7ff;
        let (c1, c2, divisor) = (self.c1, self.c2, self.divisor);
        let mut ok = true;
        if self.rounding {
            for (&r, &g) in r.iter().zip(g) {
                let (er, eg) = (biased(r), biased(g));
                let (d, m, ur) = ((g - r).abs(), r.abs() / divisor, ulp(er));
                let within = d <= c1 * m + c2 * m + ur;
                let rounds = (d == 0.0) | (d + ur / 2.0 <= ulp(eg) / 2.0 + c1 * m);
                ok &= (er != 0x7ff) & (eg != 0x7ff) & within & rounds;
            }
        } else {
            for (&r, &g) in r.iter().zip(g) {
                let (er, eg) = (biased(r), biased(g));
                let (d, m) = ((g - r).abs(), r.abs() / divisor);
                ok &= (er != 0x7ff) & (eg != 0x7ff) & (d <= c1 * m + c2 * m + ulp(er));
            }
        }
        ok
    }

    // Inlined into the per-element loops (a call per element costs a tenth of the pass).
    #[inline(always)]
    fn settles(&self, r: f64, g: f64) -> bool {
        let out = self.out;
        if !(r.is_finite() && g.is_finite()) {
            // NaN for NaN and the same infinity pass whatever the evidence says.
            return (r.is_nan() && g.is_nan()) || (r.is_infinite() && g == r);
        }
        let d = (g - r).abs();
        if self.tol.step.is_some() {
            return d <= self.tol.bound(out, r, r.abs());
        }
        let m = r.abs() / self.divisor;
        // `tol.bound(out, r, m)`, the same expression as the plain comparison's.
        if d > self.c1 * m + self.c2 * m + ulp(out, r) {
            return false;
        }
        !self.rounding || d == 0.0 || d + ulp(out, r) / 2.0 <= ulp(out, g) / 2.0 + self.c1 * m
    }
}

/// `f(i, r[i], g_i)` for the elements of `got` in logical order, while it returns true;
/// whether it did for all. Elements go in blocks of [`BLOCK`], `got`'s converted to f64 a
/// block at a time (read in place where the data order is the logical order); a block for
/// which `skip(r, g)` holds is passed without calling `f` on it, so `skip` must imply that
/// `f` would return true on each of its elements.
fn all_elements(
    r: &[f64],
    got: &Tensor,
    skip: impl Fn(&[f64], &[f64]) -> bool,
    mut f: impl FnMut(usize, f64, f64) -> bool,
) -> bool {
    let mut buf = [0f64; BLOCK];
    let mut blocks = |n: usize, convert: &mut dyn FnMut(usize, &mut [f64])| {
        let n = n.min(r.len());
        for start in (0..n).step_by(BLOCK) {
            let (r, g) = (&r[start..(start + BLOCK).min(n)], &mut buf[..(n - start).min(BLOCK)]);
            convert(start, g);
            if skip(r, g) {
                continue;
            }
            if !r.iter().zip(g.iter()).enumerate().all(|(i, (&r, &g))| f(start + i, r, g)) {
                return false;
            }
        }
        true
    };
    match (&got.data, got.format) {
        (TensorData::F32(v), MemoryFormat::Contiguous) => blocks(v.len(), &mut |s, g| {
            g.iter_mut().zip(&v[s..]).for_each(|(g, &x)| *g = x as f64);
        }),
        // half's slice conversion checks the CPU's features once per block, not per value.
        (TensorData::F16(v), MemoryFormat::Contiguous) => {
            blocks(v.len(), &mut |s, g| v[s..s + g.len()].convert_to_f64_slice(g))
        }
        (TensorData::Bf16(v), MemoryFormat::Contiguous) => blocks(v.len(), &mut |s, g| {
            g.iter_mut().zip(&v[s..]).for_each(|(g, &x)| *g = bf16_to_f64(x));
        }),
        _ => {
            let v = got.values_f64();
            blocks(v.len(), &mut |s, g| g.copy_from_slice(&v[s..s + g.len()]))
        }
    }
}

/// Elements per block of [`all_elements`]: 2 KiB of f64 each side, in L1.
const BLOCK: usize = 256;

/// Whether the pre-filter settles every element of this output (`known`: the reference's
/// values, when at hand), so that the plain comparison passes it whatever the evidence.
pub fn settled(reference: &Tensor, known: Option<&[f64]>, got: &Tensor, tol: &Tolerance) -> bool {
    if layout_difference(reference, got).is_some() {
        return false;
    }
    if got.data == reference.data {
        // Bit-identical (NaN aside, which compares unequal): d = 0 everywhere.
        return true;
    }
    let converted;
    let r = match known {
        Some(r) => r,
        None => {
            converted = reference.values_f64();
            &converted
        }
    };
    let pre = Prefilter::new(tol, reference.dtype());
    all_elements(r, got, |r, g| pre.settles_finite(r, g), |_, r, g| pre.settles(r, g))
}

/// The comparison the fuzz loop runs: each element the pre-filter does not settle goes to
/// the plain comparison's rule (the twins are evaluated only then); if one fails there,
/// the plain comparison reports the output. Gives the plain comparison's verdict.
pub fn compare(
    reference: &Tensor,
    known: Option<&[f64]>,
    got: &Tensor,
    ev: &dyn Evidence,
    tol: &Tolerance,
) -> Option<String> {
    if layout_difference(reference, got).is_some() {
        return compare_plain(reference, got, ev, tol);
    }
    if got.data == reference.data {
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
    let out = reference.dtype();
    let pre = Prefilter::new(tol, out);
    let mut rule = None;
    let pass = all_elements(
        r,
        got,
        |r, g| pre.settles_finite(r, g),
        |i, r, g| pre.settles(r, g) || rule.get_or_insert_with(|| Rule::new(tol, out, ev)).judge(i, r, g).is_none(),
    );
    if pass {
        None
    } else {
        compare_plain(reference, got, ev, tol)
    }
}

/// [`compare_plain`] with a magnitude tensor at hand (or none: `|reference|` is used), no
/// peak and no wide twin.
pub fn compare_with(reference: &Tensor, got: &Tensor, magnitude: Option<&Tensor>, tol: &Tolerance) -> Option<String> {
    let ev = Given { magnitude: magnitude.map(|t| t.values_f64()), ..Given::default() };
    compare_plain(reference, got, &ev, tol)
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tol(acc_len: usize, ops: usize, compute: ElemType) -> Tolerance {
        Tolerance { acc_len, ops, compute, range: compute, step: None, exact: false, rounds_once: false, ties: false }
    }

    fn twin(m: Vec<f64>, peak: f64) -> Given {
        Given { magnitude: Some(m), peak, wide: None, nan_reach: None }
    }

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
        let tol = tol(4, 1, ElemType::F32);
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
        let tol = tol(4, 1, ElemType::F32);
        let r = Tensor::f32(&[2], vec![3.0e38, 1.0]);
        let g = Tensor::f32(&[2], vec![f32::INFINITY, 1.0]);
        // The output's own magnitude (3e38) times (L + 2) passes f32::MAX: excused.
        assert!(compare_with(&r, &g, Some(&r), &tol).is_none());
        let r = Tensor::f32(&[2], vec![3.0, 1.0]);
        let g = Tensor::f32(&[2], vec![f32::INFINITY, 1.0]);
        assert!(compare_with(&r, &g, Some(&r), &tol).is_some());
        // A huge intermediate anywhere in the graph (the peak) excuses it too.
        assert!(compare(&r, None, &g, &Given { peak: 1.0e38, ..Given::default() }, &tol).is_none());
    }

    #[test]
    fn an_overflowed_rounding_excuses_a_zero_only_where_the_bound_passes_the_overflow_point() {
        // (fuzz seed 20261206, case 79161: fp16 mul(mean(conv), conv) where one conv sum of
        // squares of ~6.5e3 cancels to about zero: the reference's exact product rounds to
        // +inf, both f32 engines get -0; `outputs-fp16-cancelled-overflow.json`.)
        let tol = tol(4, 2, ElemType::F32);
        let (c1, c2) = tol.coefficients();
        let r = Tensor::from_f64(&[2], ElemType::F16, None, &[f64::INFINITY, 1.0]);
        let g = Tensor::from_f64(&[2], ElemType::F16, None, &[-0.0, 1.0]);
        // Twin magnitudes whose bound reaches past T = 65520 by a margin: excused.
        let big = 2.0 * 65536.0 / (c1 + c2);
        let mag = Tensor::f32(&[2], vec![big as f32, 1.0]);
        assert!(compare_with(&r, &g, Some(&mag), &tol).is_none());
        let g = Tensor::from_f64(&[2], ElemType::F16, None, &[-1000.0, 1.0]);
        assert!(compare_with(&r, &g, Some(&mag), &tol).is_none());
        // A bound short of T: the exact value is at least T, a zero is not within it.
        let small = 0.5 * 65520.0 / (c1 + c2);
        let mag = Tensor::f32(&[2], vec![small as f32, 1.0]);
        let g = Tensor::from_f64(&[2], ElemType::F16, None, &[0.0, 1.0]);
        assert!(compare_with(&r, &g, Some(&mag), &tol).is_some());
        // ... while a value of r's sign near F still passes there.
        let g = Tensor::from_f64(&[2], ElemType::F16, None, &[65504.0, 1.0]);
        assert!(compare_with(&r, &g, Some(&mag), &tol).is_none());
    }

    #[test]
    fn a_nan_from_overflowed_infinities_may_come_out_infinite_but_a_propagated_nan_may_not() {
        // (fuzz seed 4244, case 60704: a conv's exact sums overflow f32 to +inf and -inf in
        // the reference, its f32 partial sums to +inf twice in the delegate; the mean after it
        // is NaN in one and +inf in the other.)
        let tol = tol(4, 2, ElemType::F32);
        let r = Tensor::f32(&[2], vec![f32::NAN, 1.0]);
        let g = Tensor::f32(&[2], vec![f32::INFINITY, 1.0]);
        assert!(compare(&r, None, &g, &twin(vec![f64::INFINITY, 1.0], 1.0e38), &tol).is_none());
        // No partial sum can overflow: the NaN came from infinite inputs, any order gives NaN.
        assert!(compare(&r, None, &g, &twin(vec![f64::INFINITY, 1.0], 1.0), &tol).is_some());
        // A NaN reaches the output (the twin is NaN there): only NaN will do.
        assert!(compare(&r, None, &g, &twin(vec![f64::NAN, 1.0], 1.0e38), &tol).is_some());
        let nan = Tensor::f32(&[2], vec![f32::NAN, 1.0]);
        assert!(compare(&r, None, &nan, &twin(vec![f64::NAN, 1.0], 1.0e38), &tol).is_none());
    }

    #[test]
    fn a_twin_nan_from_its_own_overflow_is_not_a_nan_input() {
        // (full-matrix seed 20261207, case 1958557, `corpora/regressions/xnnpack-fp32-inf-for-nan.json`:
        // conv_mean_conv fp32 with max-finite inputs; the first conv's f32 twin overflows to
        // +inf and a zero weight of the second conv makes it NaN, though no NaN input reaches
        // the element; the reference's NaN comes out +inf on real XNNPACK.)
        let tol = tol(64, 3, ElemType::F32);
        let r = Tensor::f32(&[2], vec![f32::NAN, 1.0]);
        let g = Tensor::f32(&[2], vec![f32::INFINITY, 1.0]);
        let ev = |reach: Option<Vec<f64>>, peak| Given { nan_reach: reach, ..twin(vec![f64::NAN, 1.0], peak) };
        // The reach twin says no NaN input reaches it, and a partial sum may overflow.
        assert!(compare(&r, None, &g, &ev(Some(vec![0.0, 0.0]), 1.0e38), &tol).is_none());
        // A NaN input reaches it: only NaN will do.
        assert!(compare(&r, None, &g, &ev(Some(vec![f64::NAN, 0.0]), 1.0e38), &tol).is_some());
        // No partial sum can overflow: the NaN is the data's, whatever reaches.
        assert!(compare(&r, None, &g, &ev(Some(vec![0.0, 0.0]), 1.0), &tol).is_some());
        // Without the reach twin the magnitude twin's NaN stands in (conservative).
        assert!(compare(&r, None, &g, &ev(None, 1.0e38), &tol).is_some());
        // And a finite value for the NaN never passes.
        let finite = Tensor::f32(&[2], vec![1.0, 1.0]);
        assert!(compare(&r, None, &finite, &ev(Some(vec![0.0, 0.0]), 1.0e38), &tol).is_some());
    }

    #[test]
    fn an_infinity_from_the_references_rounding_may_come_out_as_the_largest_finite_value() {
        // (fuzz seed 8, `shared_input` fp16 [32, 1, 2, 7]: the reference's exact conv sum
        // rounds past 65520 to +inf, real XNNPACK's f32 sum lands just below and gives 65504.)
        let narrow = tol(9, 1, ElemType::F16);
        let f16s = |v: &[f64]| Tensor::from_f64(&[v.len()], ElemType::F16, None, v);
        let r = f16s(&[f64::INFINITY, 1.0]);
        let max = f16s(&[65504.0, 1.0]);
        // A finite magnitude: the exact value is finite, at least 65520 and at most M.
        assert!(compare(&r, None, &max, &twin(vec![70000.0, 1.0], 70000.0), &narrow).is_none());
        // The other sign, a value the bound cannot reach, or an infinite (or no) magnitude:
        // the infinity is the data's, only the same infinity will do.
        assert!(compare(&r, None, &f16s(&[-65504.0, 1.0]), &twin(vec![70000.0, 1.0], 70000.0), &narrow).is_some());
        assert!(compare(&r, None, &f16s(&[60000.0, 1.0]), &twin(vec![70000.0, 1.0], 70000.0), &narrow).is_some());
        assert!(compare(&r, None, &max, &twin(vec![f64::INFINITY, 1.0], 70000.0), &narrow).is_some());
        assert!(compare_with(&r, &max, None, &narrow).is_some());
        // A magnitude below 65520 cannot have rounded to infinity.
        assert!(compare(&r, None, &max, &twin(vec![60000.0, 1.0], 60000.0), &narrow).is_some());
        // Where the bound is wide (a huge magnitude), a value further below passes too.
        let wide = tol(1000, 1, ElemType::F16);
        assert!(compare(&r, None, &f16s(&[60000.0, 1.0]), &twin(vec![1.0e7, 1.0], 1.0e7), &wide).is_none());
    }

    #[test]
    fn an_infinity_may_change_sign_only_where_a_partial_sum_may_overflow() {
        let tol = tol(4, 2, ElemType::F32);
        let r = Tensor::f32(&[1], vec![f32::INFINITY]);
        let g = Tensor::f32(&[1], vec![f32::NEG_INFINITY]);
        assert!(compare(&r, None, &g, &twin(vec![f64::INFINITY], 1.0e38), &tol).is_none());
        assert!(compare(&r, None, &g, &twin(vec![f64::INFINITY], 1.0), &tol).is_some());
    }

    #[test]
    fn partial_sums_overflow_first_in_the_type_of_smallest_range() {
        // A bf16-rounded graph with an fp16 node: its sums can overflow at 65504, far below
        // bf16's 3.4e38 (finding 22).
        let bf16 = tol(16, 2, ElemType::Bf16);
        assert!(!bf16.may_overflow(5000.0));
        assert!(Tolerance { range: ElemType::F16, ..bf16 }.may_overflow(5000.0));
        assert!(!Tolerance { range: ElemType::F16, ..bf16 }.may_overflow(3000.0));
    }

    /// Evidence that counts how often the magnitude twin is asked for.
    struct Counting<'a>(Given, &'a std::cell::Cell<u32>);
    impl Evidence for Counting<'_> {
        fn magnitude(&self) -> Option<&[f64]> {
            self.1.set(self.1.get() + 1);
            self.0.magnitude()
        }
        fn peak(&self) -> f64 {
            self.0.peak()
        }
        fn wide(&self) -> Option<&[f64]> {
            self.0.wide()
        }
        fn nan_reach(&self) -> Option<&[f64]> {
            self.0.nan_reach()
        }
    }

    #[test]
    fn the_twin_is_asked_for_only_beyond_the_bound_at_the_reference_magnitude() {
        // acc_len 64: the bound at |ref| = 1 is (64 + 6) u + ulp(1) = 72 u.
        let tol = tol(64, 1, ElemType::F32);
        let r = Tensor::f32(&[2], vec![1.0, -2.0]);
        let asked = std::cell::Cell::new(0);
        let mag = |m: f64| Counting(twin(vec![m, m], 0.0), &asked);
        // 40 ulps (80 u) away at 1.0 is beyond the bound at |ref| = 1 (72 u); 20 ulps away at
        // -2.0 is within it. The twin is asked for, and a magnitude of 4 excuses it.
        let near = Tensor::f32(&[2], vec![1.0 + 40.0 * f32::EPSILON, -2.0 + 20.0 * 2.0 * f32::EPSILON]);
        assert!(compare(&r, None, &near, &mag(4.0), &tol).is_none());
        assert!(asked.get() > 0);
        // A magnitude equal to |ref| does not.
        assert!(compare(&r, None, &near, &mag(1.0), &tol).is_some());
        // 30 ulps (60 u) away passes at |ref| without the twin.
        asked.set(0);
        let close = Tensor::f32(&[2], vec![1.0 + 30.0 * f32::EPSILON, -2.0]);
        assert!(compare(&r, None, &close, &mag(1.0), &tol).is_none());
        assert_eq!(asked.get(), 0);
    }

    #[test]
    fn fp16_allows_one_output_ulp_but_not_two() {
        let tol = tol(8, 1, ElemType::F16);
        let r = Tensor::from_f64(&[1], ElemType::F16, None, &[1.0]);
        let one_up = Tensor::from_f64(&[1], ElemType::F16, None, &[1.0 + 2f64.powi(-10)]);
        let far = Tensor::from_f64(&[1], ElemType::F16, None, &[1.0 + 4.0 * 2f64.powi(-10)]);
        assert!(compare_with(&r, &one_up, None, &tol).is_none());
        assert!(compare_with(&r, &far, None, &tol).is_some());
    }

    #[test]
    fn a_rounding_must_be_to_nearest_where_the_f32_bound_is_below_an_ulp() {
        // A bare fp16 mean of 8 values: the f32 bound is (8 + 6) u M, far below half an ulp.
        let tol = Tolerance { rounds_once: true, ..tol(8, 1, ElemType::F16) };
        let ulp1 = 2f64.powi(-10);
        // The exact value is 1 + 0.7 ulp: the reference rounds it up, a truncation down.
        let exact = 1.0 + 0.7 * ulp1;
        let r = Tensor::from_f64(&[1], ElemType::F16, None, &[exact]);
        assert_eq!(r.values_f64()[0], 1.0 + ulp1);
        let truncated = Tensor::from_f64(&[1], ElemType::F16, None, &[1.0]);
        let ev = |w: f64| Given { magnitude: Some(vec![exact]), peak: 0.0, wide: Some(vec![w]), nan_reach: None };
        // Within the general fp16 bound (one ulp plus 2 k u_c M)...
        assert!(compare_plain(&r, &truncated, &Given::default(), &tol).is_none());
        // ...but 0.7 ulp from the exact value, more than half an ulp plus the f32 bound.
        let why = compare_plain(&r, &truncated, &ev(exact), &tol).expect("a truncation passed");
        assert!(why.contains("not rounded to nearest"), "{why}");
        assert!(compare(&r, None, &truncated, &ev(exact), &tol).is_some());
        // An exact value next to the midpoint (1 + 0.5 ulp, within the f32 bound) may round
        // either way.
        let mid = 1.0 + 0.5 * ulp1 + 1e-9;
        assert!(compare_plain(&r, &truncated, &ev(mid), &tol).is_none());
        // Without the rule (a chain of several roundings) the truncation is within tolerance.
        let chain = Tolerance { rounds_once: false, ..tol };
        assert!(compare_plain(&r, &truncated, &ev(exact), &chain).is_none());
    }

    #[test]
    fn shape_and_format_differences_are_reported() {
        let tol = tol(1, 1, ElemType::F32);
        let r = Tensor::f32(&[1, 2, 1, 1], vec![1.0, 2.0]);
        let g = Tensor::f32(&[1, 2], vec![1.0, 2.0]);
        assert!(compare_with(&r, &g, None, &tol).unwrap().starts_with("shape"));
        let g = r.to_format(reference::MemoryFormat::ChannelsLast);
        assert!(compare_with(&r, &g, None, &tol).unwrap().starts_with("memory format"));
    }

    /// A value near `base` in units of `dt`'s ulp there, or a special.
    fn value_near(dt: ElemType) -> impl Strategy<Value = f64> {
        let specials = prop_oneof![
            Just(0.0),
            Just(-0.0),
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(3.0e38),
            Just(1.0e-40),
            Just(6.0e-5)
        ];
        prop_oneof![
            9 => (-8i32..8, 1u32..256, any::<bool>()).prop_map(move |(e, m, s)| {
                let v = m as f64 / 128.0 * 2f64.powi(e);
                if s { -v } else { v }
            }),
            1 => specials,
        ]
        .prop_map(move |v| Tensor::from_f64(&[], dt, None, &[v]).values_f64()[0])
    }

    /// Over several blocks, the element a block after the first fails is found, and a
    /// tensor off by an ulp in a late block passes, in every dtype.
    #[test]
    fn blocks_find_a_failure_past_the_first_block() {
        let tol = tol(4, 1, ElemType::F32);
        for dt in [ElemType::F32, ElemType::F16, ElemType::Bf16] {
            let n = 3 * BLOCK + 17;
            let rv: Vec<f64> = (0..n).map(|i| reference::dtype::round_f64(dt, 1.0 + i as f64 / 7.0)).collect();
            let r = Tensor::from_f64(&[n], dt, None, &rv);
            let ev = Given::default();
            let mut gv = rv.clone();
            gv[2 * BLOCK + 5] += ulp(dt, gv[2 * BLOCK + 5]);
            let g = Tensor::from_f64(&[n], dt, None, &gv);
            assert_eq!(compare(&r, Some(&rv), &g, &ev, &tol), None, "{dt:?}");
            gv[2 * BLOCK + 9] += 1.0;
            let g = Tensor::from_f64(&[n], dt, None, &gv);
            let plain = compare_plain(&r, &g, &ev, &tol);
            assert!(plain.as_deref().is_some_and(|d| d.contains(&format!("{}", 2 * BLOCK + 9))), "{dt:?}: {plain:?}");
            assert_eq!(compare(&r, Some(&rv), &g, &ev, &tol), plain, "{dt:?}");
            assert!(!settled(&r, Some(&rv), &g, &tol), "{dt:?}");
        }
    }

    /// A reference tensor, a delegate tensor a few ulps (or a special) away from it,
    /// evidence near the truth or not, and a tolerance.
    fn scenario() -> impl Strategy<Value = (Tensor, Tensor, Given, Tolerance)> {
        let dtypes = prop_oneof![Just(ElemType::F32), Just(ElemType::F16), Just(ElemType::Bf16)];
        (dtypes, 1usize..9, any::<bool>(), 1usize..5000, 1usize..10, any::<bool>()).prop_flat_map(
            |(dt, n, qs8, acc_len, ops, rounds_once)| {
                let elems = proptest::collection::vec(
                    (
                        value_near(dt),
                        prop_oneof![6 => -4i32..=4, 1 => Just(1000)],
                        prop_oneof![
                            Just(0.5),
                            Just(0.999),
                            Just(1.0),
                            Just(1.001),
                            Just(3.0),
                            Just(1e6),
                            Just(f64::NAN)
                        ],
                        prop_oneof![-1.5f64..1.5, Just(f64::NAN)],
                    ),
                    n,
                );
                (elems, any::<bool>(), any::<bool>(), 0.0f64..1.0e39).prop_map(
                    move |(elems, has_twin, has_wide, peak)| {
                        let step = (qs8 && dt == ElemType::F32).then_some(0.0625f32);
                        let mut r = vec![];
                        let mut g = vec![];
                        let mut m = vec![];
                        let mut w = vec![];
                        for (v, ulps, mscale, wshift) in elems {
                            let gv = if ulps == 1000 { f64::NAN } else { v + ulps as f64 * ulp(dt, v) };
                            r.push(v);
                            g.push(gv);
                            m.push(v.abs() * mscale);
                            w.push(v + wshift * ulp(dt, v));
                        }
                        let rt = Tensor::from_f64(&[n], dt, None, &r);
                        let gt = Tensor::from_f64(&[n], dt, None, &g);
                        let ev = Given {
                            magnitude: has_twin.then_some(m),
                            peak,
                            wide: has_wide.then_some(w),
                            nan_reach: None,
                        };
                        let compute = if step.is_some() { ElemType::F32 } else { dt };
                        let tol = Tolerance {
                            acc_len,
                            ops,
                            compute,
                            range: compute,
                            step,
                            exact: false,
                            rounds_once,
                            ties: false,
                        };
                        (rt, gt, ev, tol)
                    },
                )
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha, ..ProptestConfig::default() })]

        /// The block pre-filter is the element pre-filter on finite values without a step,
        /// and declines every other block.
        #[test]
        fn block_prefilter_is_the_element_prefilter((r, g, _ev, tol) in scenario()) {
            let (rv, gv) = (r.values_f64(), g.values_f64());
            let pre = Prefilter::new(&tol, r.dtype());
            let finite = rv.iter().chain(&gv).all(|v| v.is_finite());
            let each = rv.iter().zip(&gv).all(|(&r, &g)| pre.settles(r, g));
            prop_assert_eq!(pre.settles_finite(&rv, &gv), finite && each && tol.step.is_none());
        }

        /// The pre-filter never passes what the plain comparison fails, so the fuzz loop's
        /// comparison gives the plain comparison's verdicts.
        #[test]
        fn prefilter_gives_the_plain_comparisons_verdicts((r, g, ev, tol) in scenario()) {
            // Element by element: what the pre-filter settles, the plain rule passes.
            let (rv, gv, out) = (r.values_f64(), g.values_f64(), r.dtype());
            let (pre, rule) = (Prefilter::new(&tol, out), Rule::new(&tol, out, &ev));
            for i in 0..rv.len() {
                if pre.settles(rv[i], gv[i]) {
                    prop_assert_eq!(rule.judge(i, rv[i], gv[i]), None, "element {} settled", i);
                }
            }
            let plain = compare_plain(&r, &g, &ev, &tol);
            if settled(&r, None, &g, &tol) {
                prop_assert!(plain.is_none(), "settled, but the plain comparison says {plain:?}");
            }
            prop_assert_eq!(compare(&r, Some(&r.values_f64()), &g, &ev, &tol), plain);
        }
    }
}
