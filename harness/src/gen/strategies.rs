//! proptest strategies over [`Knobs`], with shrinking toward simple cases.
//!
//! Every knob's range starts at its simplest value, and proptest shrinks integers toward
//! the low end and booleans toward `false`, so a failing case shrinks to a lower rank,
//! smaller sizes, a single dim, an earlier (simpler) pattern, contiguous memory, fp32, and a
//! valid graph before an invalid one.

use super::{GenConfig, Knobs};
use crate::case::Case;
use proptest::prelude::*;

/// Knobs, mostly valid graphs (one in ten invalid).
pub fn knobs() -> impl Strategy<Value = Knobs> {
    let shape = (0u8..10, 0u8..6, proptest::array::uniform6(any::<u8>()), 0u8..4, any::<u8>(), any::<u8>());
    let kind = (any::<bool>(), 0u8..4, any::<bool>(), any::<bool>(), prop_oneof![4 => Just(0u8), 1 => any::<u8>()]);
    let rest = (any::<u8>(), any::<u8>(), prop_oneof![9 => Just(0u8), 1 => 1u8..12], any::<u64>(), any::<bool>());
    // Large cases only where the config allows them (`GenConfig::large_bytes`), one in fifty.
    let run = (
        any::<u8>(),
        prop_oneof![49 => Just(false), 1 => Just(true)],
        any::<u8>(),
        prop_oneof![11 => Just(false), 1 => Just(true)],
    );
    (shape, kind, rest, run).prop_map(
        |(
            (pattern, rank, sizes, dims_kind, dim_pick, negative),
            (keepdim, dtype, channels_last, mean_dtype, dynamic),
            (param, variant, invalid, seed, specials),
            (threads, large, large_size, random),
        )| Knobs {
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
            threads,
            large,
            large_size,
            random,
        },
    )
}

/// Cases within the default generator limits.
pub fn cases() -> impl Strategy<Value = Case> {
    cases_with(GenConfig::default())
}

/// Cases within `cfg`: templates from [`knobs`], and one in twelve a random graph drawn
/// from a shrinkable tape (`gen::random::graphs`), so it shrinks node by node.
pub fn cases_with(cfg: GenConfig) -> impl Strategy<Value = Case> {
    let rcfg = super::random::RandomConfig {
        max_elems: cfg.max_elems.min(1024),
        max_macs: cfg.max_macs,
        ..Default::default()
    };
    let templates = knobs().prop_map(move |k| k.to_case(&cfg));
    let random = (super::random::graphs(rcfg), any::<u64>())
        .prop_map(|(g, seed)| super::random::case_of(g, seed, vec![1, 2, 3]));
    prop_oneof![11 => templates, 1 => random]
}
