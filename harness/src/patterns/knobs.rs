//! What a case's knobs mean for each pattern: the checks a case must pass, derived sizes
//! (conv channels, kernel, heads, MLP width), the dims of its mean, and the costs and
//! exactness rules its oracles use.

use super::{invalid_field, NotApplicable};
use crate::case::{Case, InvalidKind, Pattern};
use reference::ElemType;

pub(super) fn check_case(case: &Case) -> Result<(), NotApplicable> {
    case.check()?;
    let rank = case.shape.len();
    if case.pattern.needs_rank4() && rank != 4 {
        return invalid_field(
            "shape",
            format!("pattern {} needs a 4-D input, not {:?}", case.pattern.name(), case.shape),
        );
    }
    if let Some(r) = case.format.required_rank() {
        if r != rank {
            return invalid_field(
                "format",
                format!("{} needs rank {r}, the input has rank {rank}", case.format.name()),
            );
        }
    }
    match case.pattern {
        Pattern::QkNorm => {
            let heads = heads(case);
            // `%`, not `is_multiple_of`: the workspace supports Rust 1.80.
            #[allow(clippy::manual_is_multiple_of)]
            let splits = case.shape.get(2).is_some_and(|&e| e % heads == 0);
            if rank != 3 || !splits {
                return invalid_field("param", "qk_norm needs [B, S, H*Dh] with param = H dividing the last dim");
            }
        }
        Pattern::PreNormMlp | Pattern::RmsNorm if case.dynamic.contains(&(rank - 1)) => {
            return invalid_field("dynamic", "the normalized (last) dim can not be dynamic");
        }
        _ => {}
    }
    if let Some(q) = &case.qparams {
        // One inexact quantize (the last): the tie rule of `oracle::outputs` is derived for
        // that chain only.
        let one_rounding = match case.pattern {
            Pattern::Mean => case.variant & 1 == 0,
            Pattern::AdaptivePool => !pool_conv(case),
            _ => false,
        };
        if case.dtype != ElemType::Qs8 || !one_rounding {
            return invalid_field(
                "qparams",
                "only qs8 `mean` (variant bit 0 clear) and `adaptive_pool` without conv (variant bit 1) take them",
            );
        }
        for (name, p) in [("input", q.input), ("output", q.output)] {
            let Some(p) = p else { continue };
            if !(p.scale.is_finite() && p.scale >= f32::MIN_POSITIVE && (-128..=127).contains(&p.zero_point)) {
                return invalid_field(
                    &format!("qparams.{name}"),
                    format!(
                        "scale {} and zero point {}: a positive normal scale and -128..=127",
                        p.scale, p.zero_point
                    ),
                );
            }
        }
    }
    if case.dtype == ElemType::Qs8 && case.mean_dtype.is_some() {
        return invalid_field("mean_dtype", "qs8 cases take no dtype argument");
    }
    if case.pattern == Pattern::AdaptivePool && case.mean_dtype.is_some() {
        return invalid_field("mean_dtype", "adaptive_avg_pool2d takes no dtype argument");
    }
    if matches!(case.pattern, Pattern::QkNorm | Pattern::PreNormMlp) && !case.dynamic.is_empty() {
        return invalid_field("dynamic", "reshape and linear patterns take static shapes");
    }
    if case.pattern.needs_rank4() && case.dynamic.contains(&1) {
        return invalid_field("dynamic", "conv channels can not be dynamic");
    }
    let (weights, macs) = graph_cost(case);
    if weights > MAX_WEIGHTS || macs > MAX_MACS {
        return invalid_field(
            "shape",
            format!(
                "pattern {} on {:?} (param {}) needs {weights} weights and {macs} multiply-accumulates; \
                 at most {MAX_WEIGHTS} and {MAX_MACS}",
                case.pattern.name(),
                case.shape,
                case.param
            ),
        );
    }
    Ok(())
}

/// Conv output channels (param, default 4).
pub(super) fn conv_out(case: &Case) -> usize {
    if case.param == 0 {
        4
    } else {
        case.param.min(64)
    }
}

/// Conv kernel: 3x3 (padding 1) when variant bit 0 is set, else 1x1.
pub(super) fn kernel(case: &Case) -> usize {
    if case.variant & 1 == 1 {
        3
    } else {
        1
    }
}

/// `adaptive_pool`: a conv before the pool (variant bit 1 clear).
pub(super) fn pool_conv(case: &Case) -> bool {
    case.variant & 2 == 0
}

/// Variant bit 3: the commutative ops of `rms_norm`, `qk_norm`, `pre_norm_mlp` and
/// `conv_sub_mean` take their operands the other way round (see `graph`).
pub const SWAP: u8 = 1 << 3;
/// Variant bit 4, `mean`: a permute before the mean (see [`mean_perm`]).
pub const PERMUTE: u8 = 1 << 4;

pub(super) fn swapped(case: &Case) -> bool {
    case.variant & SWAP != 0
}

/// `mean` with variant bit 4, rank 2 or more: the permutation applied before the mean, from
/// `param`. An even `param` keeps the innermost dim and permutes the others by the Lehmer
/// code `param / 2` (a transpose whose rows stay contiguous); an odd one moves the
/// innermost dim (`param / 2` picks the permutation, and where that one keeps the innermost
/// dim it is swapped with dim `param / 2 % (r - 1)`). `param = 0` is the identity.
pub fn mean_perm(case: &Case) -> Option<Vec<usize>> {
    let r = case.shape.len();
    // `mean_on_qs8` rewires the mean onto the int8 value under its dequantize: no permute
    // between them.
    let reads_dq = case.invalid == Some(InvalidKind::MeanOnQs8);
    if case.pattern != Pattern::Mean || case.variant & PERMUTE == 0 || r < 2 || reads_dq {
        return None;
    }
    let idx = case.param / 2;
    if case.param.is_multiple_of(2) {
        let mut p = nth_permutation(r - 1, idx);
        p.push(r - 1);
        return Some(p);
    }
    let mut p = nth_permutation(r, idx);
    if p[r - 1] == r - 1 {
        p.swap(idx % (r - 1), r - 1);
    }
    Some(p)
}

/// Permutation number `k % n!` of `0..n` in lexicographic order (Lehmer code).
fn nth_permutation(n: usize, k: usize) -> Vec<usize> {
    let fact = |m: usize| (1..=m).product::<usize>();
    let mut items: Vec<usize> = (0..n).collect();
    let mut k = k % fact(n);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let f = fact(n - 1 - i);
        out.push(items.remove(k / f));
        k %= f;
    }
    out
}

/// The dims the graph's mean takes: [`mean_dims`], renumbered through [`mean_perm`] so the
/// mean of the permuted tensor reduces the same input dims (the same count, so chain costs
/// and qs8 exactness read the case's own dims). A dim written negative stays negative.
pub(super) fn graph_mean_dims(case: &Case) -> (Vec<i64>, bool) {
    let (dims, keepdim) = mean_dims(case);
    let Some(p) = mean_perm(case) else { return (dims, keepdim) };
    let r = p.len() as i64;
    let renum = |d: i64| {
        if d < -r || d >= r {
            return d;
        }
        let pos = p.iter().position(|&x| x as i64 == d.rem_euclid(r)).unwrap_or(0) as i64;
        if d < 0 {
            pos - r
        } else {
            pos
        }
    };
    (dims.into_iter().map(renum).collect(), keepdim)
}

pub(super) fn heads(case: &Case) -> usize {
    case.param.clamp(1, 16)
}

/// The dims the case's main mean reduces (pattern-fixed ones included).
pub fn mean_dims(case: &Case) -> (Vec<i64>, bool) {
    match case.pattern {
        Pattern::Gap => {
            let d = [[2i64, 3], [-1, -2], [3, 2], [-2, -1]][(case.variant as usize >> 1) % 4];
            (d.to_vec(), true)
        }
        Pattern::RmsNorm | Pattern::QkNorm | Pattern::PreNormMlp => (vec![-1], true),
        Pattern::ConvMeanConv | Pattern::ConvSubMean => (vec![1], true),
        // What `to_edge` makes of the pool.
        Pattern::AdaptivePool => (vec![-1, -2], true),
        _ => (case.dims.clone(), case.keepdim),
    }
}

pub(super) fn is_gap_only(case: &Case) -> bool {
    let gap_patterns =
        [Pattern::Mean, Pattern::AddMean, Pattern::Gap, Pattern::ConvMean, Pattern::SharedInput, Pattern::AdaptivePool];
    if case.invalid.is_some() || case.dtype == ElemType::Bf16 || case.shape.len() != 4 {
        return false;
    }
    if !gap_patterns.contains(&case.pattern) || case.mean_dtype.is_some() {
        return false;
    }
    let (dims, keepdim) = graph_mean_dims(case);
    let mut norm: Vec<i64> = dims.iter().map(|d| d.rem_euclid(4)).collect();
    norm.sort_unstable();
    keepdim && norm == [2, 3]
}

/// (accumulation length, rounding ops) along the longest chain, at the bound shape.
pub(super) fn chain_cost(case: &Case) -> (usize, usize) {
    let rank = case.shape.len();
    let reduced = |dims: &[i64]| -> usize {
        if dims.is_empty() {
            return case.numel().max(1);
        }
        let mut seen = vec![false; rank.max(1)];
        for &d in dims {
            let r = rank.max(1) as i64;
            if d >= -r && d < r {
                seen[d.rem_euclid(r) as usize] = true;
            }
        }
        seen.iter().enumerate().filter(|(_, &s)| s).map(|(i, _)| case.shape.get(i).copied().unwrap_or(1)).product()
    };
    let (dims, _) = mean_dims(case);
    let n = reduced(&dims).max(1);
    let last = case.shape.last().copied().unwrap_or(1);
    let k = kernel(case);
    let c = case.shape.get(1).copied().unwrap_or(1);
    match case.pattern {
        Pattern::Mean => (n, 1),
        Pattern::AddMean | Pattern::Gap => (n, 2),
        Pattern::RmsNorm => (last, 5),
        Pattern::QkNorm => {
            let dh = last / heads(case);
            (2 * last + dh, 8)
        }
        Pattern::PreNormMlp => (last + 2 * last.max(1) + mlp_hidden(case), 9),
        Pattern::ConvMean => {
            // The mean reads the conv's output, which has `conv_out` channels (H and W kept):
            // its count is taken there, not on the input (a mean over dim 1 or over every dim
            // of a conv with more output than input channels averages more terms).
            let mut y = case.shape.clone();
            y[1] = conv_out(case);
            (c * k * k + reduced_count(&dims, &y).max(1), 2)
        }
        Pattern::ConvMeanConv => (c * k * k + conv_out(case) + k * k, 3),
        Pattern::ConvSubMean => (c * k * k + conv_out(case), 3),
        Pattern::SharedInput => ((c * k * k).max(n), 1),
        Pattern::AdaptivePool if pool_conv(case) => (c * k * k + n, 2),
        Pattern::AdaptivePool => (n, 1),
        // Derived per value by `random::build::costs`.
        Pattern::Random => (0, 0),
    }
}

/// Elements a mean over `dims` (empty: all) averages on a tensor of `shape`.
pub(super) fn reduced_count(dims: &[i64], shape: &[usize]) -> usize {
    let rank = shape.len().max(1) as i64;
    let mut seen = vec![dims.is_empty(); shape.len()];
    for &d in dims {
        if d >= -rank && d < rank {
            seen[d.rem_euclid(rank) as usize] = true;
        }
    }
    shape.iter().zip(&seen).filter(|(_, &s)| s).map(|(&n, _)| n).product()
}

/// Largest mean count for which every partial sum of grid values is exact in f32: each
/// term is at most 255 grid units (`|q - zp|` of an int8), so `2^16` terms stay below 2^24.
pub(super) const EXACT_MEAN_MAX: usize = 1 << 16;

/// Largest qs8 conv fan-in with exact f32 partial sums: a product of an input and a weight
/// is at most `131 * 128 < 2^15` units of `2^-10` (`Q_IN` times `Q_W`), `2^9` of them < 2^24.
pub(super) const EXACT_CONV_FAN_IN: usize = 1 << 9;

/// qs8 cases: whether a correct delegate must give exactly the reference's value for
/// output `o`, on a run whose main input has `shape` (see `oracle::outputs`, qs8): every
/// mean count along the chain is a power of two (its `1/n` and requantization multiplier are
/// exact) and every accumulation is short enough for exact f32 partial sums.
pub fn qs8_exact(case: &Case, shape: &[usize], o: usize) -> bool {
    if case.dtype != ElemType::Qs8 || shape.len() != case.shape.len() || case.qparams.is_some() {
        return false;
    }
    let mean_ok = |n: usize| n.is_power_of_two() && n <= EXACT_MEAN_MAX;
    let conv_ok = || shape.get(1).is_some_and(|&c| c * kernel(case) * kernel(case) <= EXACT_CONV_FAN_IN);
    let (dims, _) = mean_dims(case);
    match (case.pattern, o) {
        (Pattern::Mean | Pattern::AddMean | Pattern::Gap, 0) | (Pattern::SharedInput, 0) => {
            mean_ok(reduced_count(&dims, shape))
        }
        (Pattern::AdaptivePool, 0) if !pool_conv(case) => mean_ok(reduced_count(&dims, shape)),
        (Pattern::ConvMean | Pattern::AdaptivePool, 0) => {
            // The conv keeps H and W (stride 1, padding k/2) and gives `conv_out` channels.
            let mut y = shape.to_vec();
            y[1] = conv_out(case);
            conv_ok() && mean_ok(reduced_count(&dims, &y))
        }
        (Pattern::SharedInput, 1) => conv_ok(),
        _ => false,
    }
}

/// The most weight elements a case's convs and linears may have: the input is bounded by
/// `case::MAX_ELEMS`, but weights grow with its dims (a 1-D `pre_norm_mlp` of 10,428
/// features asked for 435 M, and ran the `roundtrip` fuzz target out of memory).
pub const MAX_WEIGHTS: usize = 1 << 22;
/// The most multiply-accumulates a case's convs and linears may take, so a case file can not
/// keep the reference's f64 loops busy for hours (the generator's own cases stay under its
/// `max_macs`, 2^15).
pub const MAX_MACS: usize = 1 << 30;

/// Weight elements and multiply-accumulates of a case's convs and linears, as the graph
/// builder makes them (saturating: the dims are bounded only by `case::MAX_ELEMS`).
pub(super) fn graph_cost(case: &Case) -> (usize, usize) {
    let dim = |i: usize| case.shape.get(i).copied().unwrap_or(1);
    let mul = |v: &[usize]| v.iter().fold(1usize, |a, &b| a.saturating_mul(b));
    let numel = case.numel().max(1);
    match case.pattern {
        Pattern::QkNorm => {
            // The projection, and its signed twin for the magnitude graph.
            let e = dim(2);
            (mul(&[2, e, e]), mul(&[2, numel, e]))
        }
        Pattern::PreNormMlp => {
            let (d, f) = (case.shape.last().copied().unwrap_or(1), mlp_hidden(case));
            (mul(&[2, d, f]), mul(&[2, numel, f]))
        }
        Pattern::ConvMean | Pattern::ConvMeanConv | Pattern::ConvSubMean | Pattern::SharedInput => {
            let (c, k2, o) = (dim(1), kernel(case) * kernel(case), conv_out(case));
            let pixels = mul(&[dim(0), dim(2), dim(3)]);
            // `conv_mean_conv`'s second conv: one channel in, 4 out.
            let second = if case.pattern == Pattern::ConvMeanConv { 4 * k2 } else { 0 };
            let w = mul(&[o, c, k2]).saturating_add(second);
            (w, mul(&[pixels, w]))
        }
        Pattern::AdaptivePool if pool_conv(case) => {
            let w = mul(&[conv_out(case), dim(1), kernel(case) * kernel(case)]);
            (w, mul(&[dim(0), dim(2), dim(3), w]))
        }
        // RMSNorm's weight has the last dim's size, which the input's bound already covers.
        Pattern::RmsNorm => (case.shape.last().copied().unwrap_or(1), 0),
        _ => (0, 0),
    }
}

pub(super) fn mlp_hidden(case: &Case) -> usize {
    let d = case.shape.last().copied().unwrap_or(1);
    if case.param == 0 {
        2 * d
    } else {
        case.param.min(256)
    }
}
