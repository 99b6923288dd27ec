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
//!   A mean's length is the count of the tensor it reads: after a conv, the conv's output,
//!   whose channels are the conv's `out` channels, not the input's (`patterns::chain_cost`;
//!   taking it on the input was the term missing behind two false alarms: `conv_mean` over
//!   dims `[1, 3]` of `[1,1,1,22]` with 8 output channels averages 176 terms, not 22, fuzz
//!   seed 1796117805173093017 case 56964, 4.05e-6 off against 3.61e-6; over every dim of
//!   `[4,1,6,6]`, 1,152, not 144, seed 20261202 case 3671745, 0.6875 against 0.645; with the
//!   count fixed the bounds are 2.1e-5 and 4.6).
//!   The reference rounds its exact result once, so the two can also differ by the output's
//!   rounding: add one ulp of the reference value. Hence
//!   `tol_i = (L + 2k + 4) u M_i + ulp(ref_i)`.
//! - **fp16 / bf16.** The delegate computes in f32 and rounds each op's result to fp16/bf16,
//!   as the reference does; an intermediate rounding can land one ulp apart
//!   (`2 u_c |v| <= 2 u_c M`, with `u_c = 2^-11` for fp16 and `2^-8` for bf16), and each of
//!   the `k` ops can contribute one:
//!   `tol_i = (L + 2k + 4) u M_i + 2 k u_c M_i + ulp_c(ref_i)`. A bare fp16 mean therefore
//!   gets one output ulp plus the f32 accumulation bound.
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
//! - **qs8 under a real quantizer's scales** (`Case::qparams`: `mean`, or a pool without
//!   conv; scales such as `0.0078431377`, any zero point). The input sits on its grid,
//!   `x_i = fl32(s_in k_i)` with `k_i + zp_in` in int8, so the first quantize gives `k_i + zp_in`
//!   in any correct implementation (`x_i / s_in` is within `2^-16` of `k_i`) and the last
//!   quantize is the only inexact step. Let `e = s_in S / (n s_out)` be the exact value in
//!   output steps (`S = sum k_i`) and `B = s_in sum |k_i| / (n s_out)` its magnitude. The
//!   reference rounds each dequantized term (`u B` in all), the mean (`u |e|`), `1/s_out` and
//!   the product (`2 u |e|`): its value before rounding, `t_r`, is within `4 u B` of `e`. A
//!   correct f32 requantization (an exact int32 `S`, a multiplier `s_in / (n s_out)` formed in
//!   a few f32 operations, one product: ours and XNNPACK's round 5 times) is within `10 u B`
//!   for up to 10 roundings; one that dequantizes and averages in f32 (the portable mean
//!   outside the delegate in `Main` mode, torch) adds the f32 summation's `(n - 1) u B`
//!   (Higham, as for fp32; without it a `Main` mean of 1,048,270 int8 values failed, fuzz
//!   seed 777 case 100998). The wide twin (the mean before the last quantize, by the
//!   reference) divided by `s_out` gives `t` within `2 u B` of `e`. So when no rounding
//!   boundary (a half-integer) lies within `(L + 16) u B` of `t` (`L = n`), both sides round values on the
//!   same side of every boundary to the same integer: `tol_i = 0`; otherwise they may land
//!   as many steps apart as there are boundaries in that interval (one near a tie):
//!   `tol_i = that many steps` (`compare::tie_steps`, `TIE_MARGIN = 16`; `B` from the
//!   magnitude twin, the mean of `|x|`). Saturation is monotone and shared, so it changes
//!   neither case. On short means a step is thus allowed only within about `10^-3` steps of a
//!   tie: a quantizer that truncates, or rounds half away where `t` is a clear half, fails
//!   (`tests/oracles.rs`). `tests/torch_int8.rs` holds the reference to torch's own outputs
//!   by the same rule.
//! - **NaN and infinities.** A NaN reference value needs a NaN; an infinite one needs the
//!   same infinity; a finite one needs a finite value, unless a partial sum may overflow:
//!   `(L + 2) P` at least the compute type's largest finite value, where `P` is the largest
//!   finite magnitude of any value in the graph (summing near-`f32::MAX` values in f32
//!   overflows where the exact sum does not; every f32 implementation, XNNPACK's included,
//!   does that, and the infinity then propagates as either sign or NaN). Likewise a NaN the
//!   reference gets from opposite infinities may then come out as either infinity, unless a
//!   NaN input value reaches the output: then only NaN will do. Where a NaN input reaches is
//!   what the NaN-reach twin says (the magnitude twin's graph on the inputs with every NaN
//!   kept and every other value zeroed: no infinity, no overflow, and its clamps to `λ` keep
//!   every rsqrt finite, so NaN exactly where a NaN input flows). The magnitude twin itself
//!   cannot tell: it is NaN also where its own f32 overflow meets a zero weight (full-matrix
//!   seed 20261207, conv_mean_conv fp32 [4,8,9,8] with max-finite inputs: one conv window's
//!   sum overflows to -inf in the reference and, in XNNPACK's FMA order, to +inf; the second
//!   conv then gives NaN and +inf).
//!   An infinite reference value whose magnitude `M` is finite is an overflow of the
//!   reference's one rounding, not an infinity of the data: the exact value `e` is finite
//!   with `T <= |e| <= M`, where `T = F + ulp(F)/2` (`F` the largest finite value: 65504 and
//!   `T` = 65520 for fp16) is where rounding to nearest overflows. The delegate's own error
//!   can leave its value just below `T`, so it may round to `F` instead: a finite `g` passes
//!   when some such `e` is within the bound of it, `T - g sign(r) <= (L + 2k + 4) u M +
//!   2 k u_c M + ulp(F)` (and `M >= T`, up to the twin's own rounding), the finite rule with
//!   `e` at its nearest admissible point. Without it real XNNPACK's 65504 against the
//!   reference's +inf failed (fuzz seed 8, `shared_input` fp16 [32, 1, 2, 7] with specials).
//!   A zero or a value of the other sign passes only where the bound itself exceeds `T`: a
//!   sum that cancels to about zero in f32 times a huge factor, whose exact product still
//!   overflows (fuzz seed 20261206, case 79161: fp16 `mul(mean(conv), conv)`, -0 in both
//!   engines against +inf).
//!   Signed zeros compare equal.
//! - **Underflow.** The model above, `fl(v) = v (1 + d)` with `|d| <= u`, holds only at or
//!   above the smallest normal value `λ` (`2^-126` for fp32 and bf16, `2^-14` for fp16).
//!   Below it a rounding errs by up to half the smallest subnormal, `u λ`, absolutely:
//!   `fl(v) = v (1 + d) + e`, `|e| <= u λ` (Higham §2.1, gradual underflow), i.e. by at most
//!   `u max(|v|, λ)`. A sum that lands below `λ` is exact (both terms are multiples of the
//!   smallest subnormal, and so is their sum), so only products, a mean's scaling, conv and
//!   linear terms and conversions carry `e`; and like a relative error, `e` is scaled by
//!   every later op (RMSNorm's `x * r` lands below `λ`, and `w` then multiplies its error).
//!   So every bound above holds with each such op's magnitude raised to `λ`, and that is
//!   what the magnitude twin computes: it clamps the value of each op that rounds and may
//!   underflow to at least `λ` of the narrowest type the graph rounds to
//!   (`patterns::Ctx::rounded`), and its later ops scale it as they scale `M`. The one
//!   exception is the input of an `rsqrt` (RMSNorm's mean of squares), where a larger
//!   magnitude would lower the bound: there the squares' and the mean's `e` move
//!   `ms + eps` by at most `2 u λ` on each side, so `r = (ms + eps)^-1/2` moves by a
//!   relative `u λ r^2` on each side, `2 u λ r^2` between them; the twin multiplies its
//!   output by `1 + λ r^2`, which adds `c λ r^2 M` to the bound, and every coefficient `c` of
//!   a chain with a normalizer is at least `2 u` (fp32: `(L + 2k + 4) u`) or `2 u_c` (fp16 /
//!   bf16: `2 k u_c`, `k >= 5`). For fp32 and bf16 that term is below `2^-100 M` and rounds
//!   away in the twin, like the `u^2` terms the first-order analysis drops throughout.
//!   Without the floor, subnormal RMSNorm and QK-norm outputs of correct programs failed
//!   (fuzz seed 20261202 found 10 in 10 minutes; `rms_norm [9,9,4]` seed
//!   4298143141532721928 with specials: `x * r` subnormal and a subnormal step apart on the
//!   two sides, times `|w|` about 4: 5.6e-45 off against 4.9e-45).
//! - **Rounding mode (fp16 / bf16 outputs of one rounding).** Where the output's op is the
//!   only one that rounds to fp16/bf16 and its inputs are the same on both sides
//!   (`Built::rounds_once`: a mean, or a mean of `x + x`, which is exact), the delegate
//!   computes a value `v` in f32 with `|v - e| <= E` of the exact value `e`, `E` the fp32
//!   bound's delegate share, and rounds it once to nearest: `|g - v| <= ulp(g) / 2` (at a
//!   power of two `ulp(g)` is the larger spacing, so this holds from either side). So
//!   `|g - e| <= ulp(g) / 2 + E`. The exact value is not at hand, but two things pin it:
//!   the reference `r` is its rounding to nearest, so `|e - r| <= ulp(r) / 2`, and the wide
//!   twin (`Built::wide`: the graph in fp32, run by the reference) gives `w`, `e` rounded to
//!   fp32 once per op, `|w - e| <= k u M`. Projecting `w` onto `[r - ulp(r)/2, r + ulp(r)/2]`,
//!   which holds `e`, moves it no farther from `e`; with `w'` that projection,
//!   `|g - w'| <= ulp(g) / 2 + E + k u M <= ulp(g) / 2 + (L + 2k + 4) u M` (the fp32
//!   accounting charges `L + k + 2` to the delegate and `k` to the reference's roundings,
//!   which `w` shares). This is checked beside the general bound. Where the f32 bound is
//!   well below an ulp, it leaves a correct implementation its half ulp and little more, so
//!   a conversion that truncates (off by up to a whole ulp) fails on about half the elements
//!   in the normal range, where the general fp16/bf16 bound (one ulp plus `2 k u_c M`) let
//!   every rounding mode pass. `tests/oracles.rs` plants a truncating conversion.
//!
//! # The plain comparison and the pre-filter
//!
//! [`compare_plain`] judges every element by the rules above, one at a time, asking for
//! the twins' values as it needs them; `replay` runs it alone and prints what it found.
//! The fuzz loop's [`compare`] first runs a pre-filter on each element, which decides from
//! the two values alone whether the plain rule passes it whatever the twins say: NaN for
//! NaN, the same infinity, or finite and within the bound at the magnitude floor
//! `|r| / (1 + u_c)^(2k + 2)`, which no true magnitude is below (the plain rule never goes
//! below it either), and under the rounding-mode rule
//! `|g - r| + ulp(r)/2 <= ulp(g)/2 + (L + 2k + 4) u |r| / (1 + u_c)^(2k + 2)`, so that every
//! point of the reference's rounding interval is close enough. Each test only gets easier
//! as the magnitude grows, so a settled element passes the plain rule; the others go to the
//! plain rule itself (the twins are evaluated then, and only then), and if one fails, the
//! plain comparison reports the whole output. Either way the verdict is the plain
//! comparison's, which the proptest `prefilter_gives_the_plain_comparisons_verdicts` checks
//! element by element and per output, on random tensors, tolerances, magnitudes and wide
//! values. Most outputs are settled whole, and neither twin is evaluated for them.
//!
//! How tight this is: a mean over `n` elements whose divisor is off by one moves the result
//! by `|mean|/n`; a dropped element moves it by `|x_k|/n`. For non-negative data
//! (`M = |mean|`) both exceed `(n + 6) u M` as long as `n (n + 6) < 2^24`, i.e. for every
//! reduction below about 4,000 elements; the fuzzer's cases stay well below. For mixed-sign
//! data the bound grows with `M / |mean|`, which is why the data generator also draws
//! positive, constant-row and small-integer tensors. `tests/oracles.rs` plants both bugs.

pub mod compare;

pub use compare::{compare, compare_plain, compare_with, settled, tie_steps, ulp, Evidence, Given, Tolerance};

use super::{RefRun, Verdict};
use crate::case::Case;
use crate::engine::{self, Simd};
use crate::patterns::{self, Built};
use delegate::LoweredProgram;
use reference::ElemType;

/// What running one lowered program gave: the outputs verdict, the errors verdict for
/// run-time errors, and any payload that differed between thread counts or SIMD paths.
pub struct Exec {
    pub outputs: Verdict,
    pub errors: Verdict,
    /// Every run's outputs at 1 thread on the SIMD path, when that configuration ran them all
    /// (the operand-order oracle compares its twin with these instead of running them again).
    pub single: Option<Vec<Vec<reference::Tensor>>>,
}

/// The evidence of reference run `run` for its output `o`, computed on first use and
/// shared by every configuration the run is compared in.
struct RunEvidence<'r, 'a> {
    run: &'r RefRun<'a>,
    o: usize,
}

impl Evidence for RunEvidence<'_, '_> {
    fn magnitude(&self) -> Option<&[f64]> {
        self.run.magnitude_values(self.o)
    }
    fn peak(&self) -> f64 {
        self.run.peak_magnitude()
    }
    fn wide(&self) -> Option<&[f64]> {
        self.run.wide_values(self.o)
    }
    fn nan_reach(&self) -> Option<&[f64]> {
        self.run.nan_reach_values(self.o)
    }
}

/// The tolerance of output `o` of a built case, on a run whose main input has `shape`
/// (qs8 exactness depends on the run's mean counts).
pub fn tolerance(case: &Case, built: &Built, o: usize, shape: &[usize]) -> Tolerance {
    let compute = if case.dtype == ElemType::Qs8 { ElemType::F32 } else { case.dtype };
    let step = built.out_step.get(o).copied().flatten();
    let exact = step.is_some() && patterns::qs8_exact(case, shape, o);
    let ties = step.is_some() && built.ties;
    Tolerance {
        acc_len: built.acc_len,
        ops: built.ops,
        compute,
        range: built.range,
        step,
        exact,
        rounds_once: built.rounds_once,
        ties,
    }
}

/// Runs a lowered program in each configuration (threads, SIMD path) on every run of the
/// case, comparing with the reference (the plain comparison alone when `plain`, else after
/// the pre-filter: the same verdicts). `given` (loaded and planned once) serves every
/// configuration; without it the first configuration prepares the program.
pub fn execute(
    case: &Case,
    built: &Built,
    runs: &[RefRun],
    program: &LoweredProgram,
    given: Option<&engine::Prepared>,
    configs: &[(usize, Simd)],
    plain: bool,
) -> Exec {
    let mut outputs = Verdict::Pass;
    let mut errors = Verdict::Pass;
    let mut failing_configs: Vec<String> = vec![];
    let mut first_detail: Option<String> = None;
    let mut first: Option<engine::Prepared> = None;
    // Per run and output, the last output that passed: a configuration giving the same bits
    // gets the same verdict (the tolerance depends on the case, not the configuration), so
    // it is not compared again.
    let mut passed: Vec<Vec<Option<reference::Tensor>>> = vec![vec![]; runs.len()];
    let mut single: Option<Vec<Vec<reference::Tensor>>> = None;
    for &(threads, simd) in configs {
        let keep = (threads, simd) == (1, Simd::Best) && single.is_none();
        let mut kept = vec![];
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
            if keep {
                if let Ok(g) = &got {
                    kept.push(g.clone());
                }
            }
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
                    passed[r].resize(got.len(), None);
                    for (o, (w, g)) in want.iter().zip(got).enumerate() {
                        if passed[r][o].as_ref().is_some_and(|p| super::real::same_bits(p, &g)) {
                            continue;
                        }
                        let ev = RunEvidence { run, o };
                        let tol = tolerance(case, built, o, run.shapes.first().map_or(&[], |s| s));
                        let verdict = match plain {
                            true => compare_plain(w, &g, &ev, &tol),
                            false => compare(w, run.values(o), &g, &ev, &tol),
                        };
                        match verdict {
                            Some(d) => {
                                failing_configs.push(format!("{config}{run_name} output {o}"));
                                first_detail.get_or_insert_with(|| format!("[{config}{run_name} output {o}] {d}"));
                                break;
                            }
                            None => passed[r][o] = Some(g),
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
        if keep && kept.len() == runs.len() {
            single = Some(kept);
        }
        if given.is_none() && first.is_none() {
            first = Some(prepared);
        }
    }
    if let Some(d) = first_detail {
        outputs = Verdict::fail("mismatch", format!("fails at: {}\n{d}", failing_configs.join("; ")));
    }
    Exec { outputs, errors, single }
}

fn skipped(msg: &str) -> Exec {
    Exec { outputs: Verdict::Skip(msg.to_string()), errors: Verdict::Skip(msg.to_string()), single: None }
}
