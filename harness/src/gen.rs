//! Case generators.
//!
//! Every generator draws [`Knobs`], a flat record of small integers, and maps them to a
//! [`Case`] with [`Knobs::to_case`], a total function that makes every combination valid
//! (or deliberately invalid) for its pattern. Three sources share that mapping:
//! - the fuzz loop ([`Knobs::random`], seeded splitmix64, biased toward interesting cases);
//! - proptest ([`strategies`]): each knob's smallest value is its simplest meaning, so
//!   shrinking moves toward lower rank, smaller sizes, fewer dims, a simpler pattern,
//!   contiguous before channels_last, fp32 before other dtypes, valid before invalid;
//! - libFuzzer, through `arbitrary::Arbitrary` (derived for `Knobs`, implemented for `Case`).

pub mod random;
pub mod strategies;

use crate::case::{Case, InvalidKind, Pattern};
use arbitrary::Arbitrary;
use delegate::LoweringMode;
use reference::data::SplitMix64;
use reference::{ElemType, MemoryFormat};

/// Limits every generator respects.
#[derive(Clone, Debug)]
pub struct GenConfig {
    /// Largest input (elements at the bound shape).
    pub max_elems: usize,
    /// Thread count used besides 1.
    pub threads: usize,
    /// Every case also runs at a third count drawn from 3 to this (odd counts included, so
    /// splits that do not divide evenly get run); below 3, none.
    pub max_threads: usize,
    /// About one case in fifty is a large one: its input has 256 KiB up to this many bytes,
    /// above the cost model's inline threshold (`delegate::runtime::pool::INLINE_BYTES`), so
    /// its work is split across threads. 0: no large cases.
    pub large_bytes: usize,
    /// Largest multiply-accumulate count of a case's convs and linears (keeps the
    /// reference's f64 convolutions from dominating the time per case).
    pub max_macs: usize,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig { max_elems: 4096, threads: 2, max_threads: 8, large_bytes: 1 << 20, max_macs: 1 << 15 }
    }
}

/// Raw generator choices; see the module docs. Smaller is simpler for every field.
#[derive(Clone, Debug, Default, PartialEq, Eq, Arbitrary)]
pub struct Knobs {
    /// Index into [`Pattern::ALL`].
    pub pattern: u8,
    /// Rank minus one, for patterns that choose their rank.
    pub rank: u8,
    /// Dim sizes: below 200 they mean `1 + s % 9`; above, one of 16, 17, 31, 33, 64, 100, 128.
    pub sizes: [u8; 6],
    /// 0: one dim; 1: a subset; 2: `[]` (every dim); 3: every dim listed.
    pub dims_kind: u8,
    /// The one dim, or the subset's bit mask.
    pub dim_pick: u8,
    /// Bit mask of dims written negative; bit 7 reverses the list.
    pub negative: u8,
    pub keepdim: bool,
    /// 0 fp32, 1 fp16, 2 bf16, 3 qs8.
    pub dtype: u8,
    pub channels_last: bool,
    pub mean_dtype: bool,
    /// Bit mask of dynamic dims.
    pub dynamic: u8,
    pub param: u8,
    pub variant: u8,
    /// 0 valid; 1..=12 one [`InvalidKind`]; larger values valid.
    pub invalid: u8,
    pub seed: u64,
    pub specials: bool,
    /// The third thread count: `3 + t % (max_threads - 2)`.
    pub threads: u8,
    /// A large case (see [`GenConfig::large_bytes`]), of `large_size` (log scale).
    pub large: bool,
    pub large_size: u8,
    /// A random graph (`patterns::random`) drawn from `seed` instead of a template.
    pub random: bool,
}

fn size_of(s: u8) -> usize {
    if s < 200 {
        1 + s as usize % 9
    } else {
        [16, 17, 31, 33, 64, 100, 128][s as usize % 7]
    }
}

impl Knobs {
    /// Knobs for the fuzz loop: every field drawn with the bias a campaign wants (mostly
    /// valid, fp32 and qs8 common, some SIMD-tail sizes, some dynamic and special cases).
    pub fn random(rng: &mut SplitMix64) -> Knobs {
        let mut b = |n: u64| rng.below(n);
        let pct = |v: u64, p: u64| v < p;
        let pattern = b(Pattern::ALL.len() as u64) as u8;
        let rank = b(6) as u8;
        let mut sizes = [0u8; 6];
        for s in &mut sizes {
            *s = if pct(b(100), 15) { 200 + b(56) as u8 } else { b(200) as u8 };
        }
        let dims_kind = [0u8, 1, 1, 1, 2, 3][b(6) as usize];
        let dim_pick = b(256) as u8;
        let negative = b(256) as u8;
        let keepdim = b(2) == 0;
        let dtype = [0u8, 0, 0, 1, 1, 2, 3, 3][b(8) as usize];
        let channels_last = pct(b(100), 25);
        let mean_dtype = pct(b(100), 5);
        let dynamic = if pct(b(100), 15) { 1 + b(63) as u8 } else { 0 };
        let param = b(256) as u8;
        let variant = b(256) as u8;
        let invalid = if pct(b(100), 5) { 1 + b(InvalidKind::ALL.len() as u64) as u8 } else { 0 };
        let seed = rng.next_u64();
        let specials = rng.below(100) < 8;
        // Drawn last, so every earlier knob of case `k` is what it was before they existed.
        let extra = rng.next_u64();
        Knobs {
            pattern,
            rank,
            sizes,
            dims_kind,
            dim_pick,
            negative,
            keepdim,
            dtype,
            channels_last,
            mean_dtype,
            dynamic,
            param,
            variant,
            invalid,
            seed,
            specials,
            threads: extra as u8,
            large: (extra >> 8) % 50 < 1,
            large_size: (extra >> 16) as u8,
            // From the same last draw: every template case keeps its knobs; about one in 12.
            random: (extra >> 24) % 12 < 1,
        }
    }

    /// The case these knobs mean (total: every value maps to a buildable case).
    pub fn to_case(&self, cfg: &GenConfig) -> Case {
        if self.random {
            let rcfg = random::RandomConfig {
                max_elems: cfg.max_elems.min(1024),
                max_macs: cfg.max_macs,
                ..Default::default()
            };
            let rg = random::draw(&mut SplitMix64::new(self.seed ^ 0x4A4D_0000_0000_0000), &rcfg);
            return random::case_of(rg, self.seed, self.thread_counts(cfg));
        }
        let invalid = match self.invalid as usize {
            i if (1..=InvalidKind::ALL.len()).contains(&i) => Some(InvalidKind::ALL[i - 1]),
            _ => None,
        };
        let (pattern, dtype, rank) = self.pattern_dtype_rank(invalid);
        let (mut shape, mut param) = self.shape_and_param(pattern, rank);
        match self.large_elems(cfg, pattern, dtype, invalid) {
            Some(target) => grow_to(&mut shape, target),
            None => {
                param = fit_elements(cfg, pattern, &mut shape, param);
                param = self.fit_macs(cfg, pattern, &mut shape, param);
            }
        }
        let dims = self.dims(rank);
        let format = match (self.channels_last, rank) {
            (true, 4) => MemoryFormat::ChannelsLast,
            (true, 5) if matches!(pattern, Pattern::Mean | Pattern::AddMean) => MemoryFormat::ChannelsLast3d,
            _ => MemoryFormat::Contiguous,
        };
        let mean_dtype = (self.mean_dtype && matches!(pattern, Pattern::Mean | Pattern::AddMean) && dtype.is_float())
            .then_some(if dtype == ElemType::F32 { ElemType::F16 } else { ElemType::F32 });

        let (dynamic, run_shapes) = self.dynamic_dims(pattern, rank, invalid, &shape);
        let threads = self.thread_counts(cfg);
        let mut case = Case::new(pattern, &shape, &dims, self.keepdim);
        case.dtype = dtype;
        case.format = format;
        case.mean_dtype = mean_dtype;
        case.dynamic = dynamic;
        case.run_shapes = run_shapes;
        case.modes = LoweringMode::ALL.to_vec();
        case.threads = threads;
        case.seed = self.seed;
        case.specials = self.specials && dtype != ElemType::Qs8;
        case.param = param;
        // Bits 0-2: the pattern knobs; bit 3 swaps commutative operands, bit 4 a permute.
        case.variant = self.variant & 0x1f;
        case.invalid = invalid;
        case.qparams = real_qparams(&case);
        case
    }

    /// 1, the config's count, and a third from 3 to `max_threads`.
    fn thread_counts(&self, cfg: &GenConfig) -> Vec<usize> {
        let mut threads = vec![1, cfg.threads.max(2)];
        if cfg.max_threads >= 3 {
            let third = 3 + self.threads as usize % (cfg.max_threads - 2);
            if !threads.contains(&third) {
                threads.push(third);
            }
        }
        threads
    }

    /// A large case's element budget: patterns without a conv or linear (whose MAC budget
    /// keeps the reference fast), valid graphs; 256 KiB to `large_bytes` of input, log-uniform.
    fn large_elems(
        &self,
        cfg: &GenConfig,
        pattern: Pattern,
        dtype: ElemType,
        invalid: Option<InvalidKind>,
    ) -> Option<usize> {
        let min = delegate::runtime::pool::INLINE_BYTES;
        let fits = matches!(pattern, Pattern::Mean | Pattern::AddMean | Pattern::Gap | Pattern::RmsNorm);
        if !self.large || !fits || invalid.is_some() || cfg.large_bytes <= min {
            return None;
        }
        let span = (cfg.large_bytes as f64 / min as f64).log2();
        let bytes = min as f64 * (span * self.large_size as f64 / 255.0).exp2();
        Some(((bytes as usize).clamp(min, cfg.large_bytes) / dtype.size_bytes()).min(crate::case::MAX_ELEMS / 2))
    }

    /// The pattern, dtype and rank: an invalid kind picks the pattern and dtype it needs,
    /// qs8 only where the pattern has a qs8 form, and the rank the pattern takes.
    fn pattern_dtype_rank(&self, invalid: Option<InvalidKind>) -> (Pattern, ElemType, usize) {
        let mut pattern = Pattern::ALL[self.pattern as usize % Pattern::ALL.len()];
        let mut dtype = [ElemType::F32, ElemType::F16, ElemType::Bf16, ElemType::Qs8][self.dtype as usize % 4];
        let mut rank = 1 + self.rank as usize % 6;
        match invalid {
            Some(InvalidKind::RankTooHigh) => {
                pattern = Pattern::Mean;
                rank = 6;
            }
            Some(InvalidKind::MeanOnQs8 | InvalidKind::BadQuantScale | InvalidKind::BadZeroPoint) => {
                if !matches!(pattern, Pattern::Mean | Pattern::AddMean | Pattern::Gap | Pattern::ConvMean) {
                    pattern = Pattern::Mean;
                }
                dtype = ElemType::Qs8;
            }
            Some(InvalidKind::ConvChannelMismatch)
                if !matches!(
                    pattern,
                    Pattern::ConvMean | Pattern::ConvMeanConv | Pattern::ConvSubMean | Pattern::SharedInput
                ) =>
            {
                pattern = Pattern::ConvMean;
            }
            // (Not RMSNorm: its first binary op adds the 0-D eps, which no longer dim can
            // make unbroadcastable.)
            Some(InvalidKind::NotBroadcastable)
                if !matches!(pattern, Pattern::AddMean | Pattern::Gap | Pattern::ConvSubMean) =>
            {
                pattern = Pattern::AddMean;
            }
            // These corrupt a mean.dim, which the pool pattern does not have.
            Some(InvalidKind::DimOutOfRange | InvalidKind::RepeatedDim | InvalidKind::MeanDtypeQs8)
                if pattern == Pattern::AdaptivePool =>
            {
                pattern = Pattern::Mean;
            }
            Some(InvalidKind::PoolOutputSize) => pattern = Pattern::AdaptivePool,
            Some(InvalidKind::DynamicAboveBound)
                if !matches!(pattern, Pattern::Mean | Pattern::AddMean | Pattern::RmsNorm) =>
            {
                pattern = Pattern::Mean;
            }
            _ => {}
        }
        let qs8_ok = matches!(
            pattern,
            Pattern::Mean
                | Pattern::AddMean
                | Pattern::Gap
                | Pattern::ConvMean
                | Pattern::SharedInput
                | Pattern::AdaptivePool
        );
        if dtype == ElemType::Qs8 && !qs8_ok {
            dtype = ElemType::F32;
        }
        rank = match pattern {
            p if p.needs_rank4() => 4,
            Pattern::QkNorm | Pattern::PreNormMlp => 3,
            Pattern::RmsNorm => rank.clamp(1, 4),
            _ => rank,
        };
        (pattern, dtype, rank)
    }

    /// The drawn shape and the pattern's parameter (heads, MLP width, conv channels).
    fn shape_and_param(&self, pattern: Pattern, rank: usize) -> (Vec<usize>, usize) {
        let mut shape: Vec<usize> = self.sizes[..rank].iter().map(|&s| size_of(s)).collect();
        let mut param = 0usize;
        match pattern {
            Pattern::QkNorm => {
                let heads = 1 + self.param as usize % 4;
                let dh = shape[2].min(32);
                shape[2] = heads * dh;
                param = heads;
            }
            Pattern::PreNormMlp => param = 1 + self.param as usize % 16,
            // The permutation before the mean (`patterns::knobs::mean_perm`).
            Pattern::Mean if self.variant & 0x10 != 0 => param = self.param as usize,
            p if p.needs_rank4() => {
                shape[1] = shape[1].min(16);
                param = 1 + self.param as usize % 8;
            }
            _ => {}
        }
        (shape, param)
    }

    /// The multiply-accumulate budget of convs and linears: shrinks the widest factor.
    fn fit_macs(&self, cfg: &GenConfig, pattern: Pattern, shape: &mut [usize], mut param: usize) -> usize {
        let k = if self.variant & 1 == 1 { 9 } else { 1 };
        loop {
            let macs = match pattern {
                p if p.needs_rank4() => shape[0] * shape[2] * shape[3] * k * (param * shape[1] + 4),
                Pattern::QkNorm => 2 * shape[0] * shape[1] * shape[2] * shape[2],
                Pattern::PreNormMlp => 2 * shape[0] * shape[1] * shape[2] * param,
                _ => 0,
            };
            if macs <= cfg.max_macs.max(1) {
                break;
            }
            let shrink = |v: &mut usize| {
                let old = *v;
                *v = (*v).div_ceil(2);
                *v < old
            };
            let changed = match pattern {
                p if p.needs_rank4() => {
                    let i = [0, 2, 3].into_iter().max_by_key(|&i| shape[i]).unwrap_or(0);
                    if shape[i] > 1 {
                        shrink(&mut shape[i])
                    } else if param > 1 {
                        shrink(&mut param)
                    } else {
                        shrink(&mut shape[1])
                    }
                }
                Pattern::QkNorm => {
                    let heads = param.max(1);
                    let mut dh = shape[2] / heads;
                    if shape[0] * shape[1] > dh && (shape[0] > 1 || shape[1] > 1) {
                        let i = if shape[0] >= shape[1] { 0 } else { 1 };
                        shrink(&mut shape[i])
                    } else if dh > 1 {
                        let c = shrink(&mut dh);
                        shape[2] = heads * dh;
                        c
                    } else {
                        false
                    }
                }
                Pattern::PreNormMlp => {
                    if param >= shape[2] && param > 1 {
                        shrink(&mut param)
                    } else {
                        let i = (0..3).max_by_key(|&i| shape[i]).unwrap_or(0);
                        shrink(&mut shape[i])
                    }
                }
                _ => false,
            };
            if !changed {
                break;
            }
        }
        param
    }

    /// The dims list of the mean.
    fn dims(&self, rank: usize) -> Vec<i64> {
        let r = rank as i64;
        let mut dims: Vec<i64> = match self.dims_kind % 4 {
            0 => vec![(self.dim_pick as i64) % r],
            1 => {
                let d: Vec<i64> = (0..r).filter(|&d| self.dim_pick >> d & 1 == 1).collect();
                if d.is_empty() {
                    vec![r - 1]
                } else {
                    d
                }
            }
            2 => vec![],
            _ => (0..r).collect(),
        };
        for d in dims.iter_mut() {
            if self.negative >> *d & 1 == 1 {
                *d -= r;
            }
        }
        if self.negative & 0x80 != 0 {
            dims.reverse();
        }
        dims
    }

    /// Dynamic dims where the pattern allows them, and the run shapes they give.
    fn dynamic_dims(
        &self,
        pattern: Pattern,
        rank: usize,
        invalid: Option<InvalidKind>,
        shape: &[usize],
    ) -> (Vec<usize>, Vec<Vec<usize>>) {
        let allowed = |d: usize| match pattern {
            Pattern::QkNorm | Pattern::PreNormMlp => false,
            Pattern::RmsNorm => d + 1 != rank,
            p if p.needs_rank4() => d != 1,
            _ => true,
        };
        let mut dynamic: Vec<usize> = (0..rank).filter(|&d| self.dynamic >> d & 1 == 1 && allowed(d)).collect();
        if invalid == Some(InvalidKind::DynamicAboveBound) && dynamic.is_empty() {
            dynamic.push(0);
        }
        let mut run_shapes = vec![];
        if !dynamic.is_empty() {
            // The bound, every dynamic dim at 1, and one size in between (review finding B12:
            // the edges must be hit on purpose, not by chance).
            let mut ones = shape.to_vec();
            let mut mid = shape.to_vec();
            let mut rng = SplitMix64::new(self.seed ^ 0xD7A1);
            for &d in &dynamic {
                ones[d] = 1;
                mid[d] = 1 + rng.below(shape[d] as u64) as usize;
            }
            run_shapes = vec![shape.to_vec(), ones, mid];
            run_shapes.dedup();
        }
        if invalid == Some(InvalidKind::DynamicAboveBound) {
            run_shapes = vec![shape.to_vec()];
        }
        (dynamic, run_shapes)
    }
}

/// Half the qs8 cases whose chain has one inexact quantize (see `Case::qparams`) take a
/// real quantizer's parameters, as PyTorch's `MinMaxObserver` makes them from a range
/// `[lo, hi]` around 0: `scale = (hi - lo) / 255` (`0.0078431377` for `[-1, 1]`, one
/// draw in eight), `zero_point = -128 - round(lo / scale)`, for the input and the output.
fn real_qparams(case: &Case) -> Option<crate::case::CaseQuant> {
    let one_rounding = match case.pattern {
        Pattern::Mean => case.variant & 1 == 0,
        Pattern::AdaptivePool => case.variant & 2 != 0,
        _ => false,
    };
    if case.dtype != ElemType::Qs8 || !one_rounding || case.invalid.is_some() {
        return None;
    }
    let mut rng = SplitMix64::new(case.seed ^ 0x51_5CA1_E000);
    if rng.below(2) == 0 {
        return None;
    }
    let mut observe = |range: f64| {
        let (lo, hi) = match rng.below(8) {
            0 => (-1.0, 1.0),
            _ => (-range * rng.below(1001) as f64 / 1000.0, range * (1 + rng.below(1000)) as f64 / 1000.0),
        };
        let scale = ((hi - lo) / 255.0) as f32;
        let zero_point = (-128 - (lo / scale as f64).round() as i32).clamp(-128, 127);
        reference::QuantParams { scale, zero_point }
    };
    let input = observe(8.0);
    let output = observe(4.0);
    Some(crate::case::CaseQuant { input: Some(input), output: Some(output) })
}

/// Grows a shape to at least `target` elements (and under twice that), doubling its
/// smallest dim above 1 (the last dim when all are 1): size-1 dims stay, as broadcasting and
/// layout rules care about them.
fn grow_to(shape: &mut [usize], target: usize) {
    while shape.iter().product::<usize>() < target {
        let i = (0..shape.len()).filter(|&i| shape[i] > 1).min_by_key(|&i| shape[i]).unwrap_or(shape.len() - 1);
        shape[i] *= 2;
    }
}

/// Fits the element budget: halves the largest dim (QK-norm: never its head split), and
/// keeps a conv's output (param channels) within it too.
fn fit_elements(cfg: &GenConfig, pattern: Pattern, shape: &mut [usize], mut param: usize) -> usize {
    let budget = cfg.max_elems.max(1);
    while shape.iter().product::<usize>() > budget {
        let (i, _) = shape
            .iter()
            .enumerate()
            .filter(|(i, _)| !(pattern == Pattern::QkNorm && *i == 2))
            .max_by_key(|(_, &s)| s)
            .unwrap_or((0, &1));
        if shape[i] <= 1 {
            break;
        }
        shape[i] = shape[i].div_ceil(2);
    }
    // Conv patterns: keep the conv's output (param channels) within budget too.
    if pattern.needs_rank4() {
        while param > 1 && param * shape[0] * shape[2] * shape[3] > budget {
            param /= 2;
        }
    }
    param
}

impl<'a> Arbitrary<'a> for Case {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        // No large cases: libFuzzer runs many short inputs (the fuzz job has the large ones).
        Ok(Knobs::arbitrary(u)?.to_case(&GenConfig { large_bytes: 0, ..GenConfig::default() }))
    }
}

/// Case `index` of the campaign with seed `seed` (independent of every other case, so
/// shards and replays need nothing but these two numbers).
pub fn nth_case(seed: u64, index: u64, cfg: &GenConfig) -> Case {
    let mut rng = SplitMix64::new(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    rng.next_u64();
    Knobs::random(&mut rng).to_case(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patterns;

    #[test]
    fn random_cases_build_and_respect_the_budget() {
        let cfg = GenConfig::default();
        let mut seen = std::collections::BTreeSet::new();
        let (mut large, mut third) = (0, std::collections::BTreeSet::new());
        for i in 0..2000 {
            let c = nth_case(42, i, &cfg);
            let bytes = c.numel() * c.dtype.size_bytes();
            if c.numel() > cfg.max_elems && c.invalid.is_none() {
                // A large case: above the cost model's inline threshold, within the limits.
                assert!(bytes >= delegate::runtime::pool::INLINE_BYTES, "{}", c.to_json());
                assert!(bytes < 2 * cfg.large_bytes && c.numel() <= crate::case::MAX_ELEMS, "{}", c.to_json());
                large += 1;
            }
            assert_eq!(&c.threads[..2], &[1, 2]);
            assert_eq!(c.threads.len(), 3);
            third.insert(c.threads[2]);
            if c.pattern == Pattern::QkNorm {
                assert!(2 * c.numel() * c.shape[2] <= cfg.max_macs.max(2 * c.numel() * c.param), "{}", c.to_json());
            }
            if let Err(e) = patterns::build(&c) {
                panic!("case {i} does not build: {e}\n{}", c.to_json());
            }
            seen.insert(c.pattern);
            assert_eq!(Case::from_json(&c.to_json()).unwrap(), c);
        }
        assert!(Pattern::ALL.iter().all(|p| seen.contains(p)) && seen.contains(&Pattern::Random));
        assert_eq!(third, (3..=8).collect(), "every third thread count, odd ones included");
        // One in fifty draws large; only patterns without conv or linear take it (4 of 11).
        assert!((8..=40).contains(&large), "{large} large cases in 2000");
    }

    #[test]
    fn nth_case_is_reproducible() {
        let cfg = GenConfig::default();
        assert_eq!(nth_case(7, 123, &cfg), nth_case(7, 123, &cfg));
        assert_ne!(nth_case(7, 123, &cfg), nth_case(8, 123, &cfg));
    }

    #[test]
    fn zero_knobs_are_the_simplest_case() {
        let c = Knobs::default().to_case(&GenConfig::default());
        assert_eq!(
            (c.pattern, c.shape.clone(), c.dims.clone(), c.dtype),
            (Pattern::Mean, vec![1], vec![0], ElemType::F32)
        );
        assert_eq!(c.format, MemoryFormat::Contiguous);
        assert!(c.invalid.is_none() && c.dynamic.is_empty());
    }

    #[test]
    fn arbitrary_bytes_always_give_a_buildable_case() {
        let mut rng = SplitMix64::new(1);
        for _ in 0..500 {
            let bytes: Vec<u8> = (0..64).map(|_| rng.below(256) as u8).collect();
            let c = Case::arbitrary(&mut arbitrary::Unstructured::new(&bytes)).unwrap();
            patterns::build(&c).unwrap_or_else(|e| panic!("{e}: {}", c.to_json()));
        }
    }
}
