//! The serializer's seeded bugs are visible to the byte-level checks (feature `mutants`).
//! One test function: the active mutant is process-wide.
#![cfg(feature = "mutants")]

mod serialize_common;

use delegate::mutants::{set_active, Mutant};
use delegate::serialize::{load, write, LoadLimits};
use serialize_common::*;

#[test]
fn serializer_mutants_break_byte_checks() {
    // Clean: identical bytes every time, exact round trip.
    set_active(None);
    let g = all_kinds_example();
    let clean = write(&g);
    assert_eq!(load(&clean, &LoadLimits::default()).unwrap(), g);

    // Hash-ordered values: bytes vary between writes (each map gets a fresh random seed)
    // and the value list no longer round trips in order.
    set_active(Some(Mutant::HashOrderValueIds));
    let writes: Vec<Vec<u8>> = (0..8).map(|_| write(&g)).collect();
    assert!(writes.iter().any(|w| *w != clean), "hash order never differed from graph order");
    assert!(writes.iter().any(|w| load(w, &LoadLimits::default()).ok().as_ref() != Some(&g)));

    // XNNStaticMean in the middle of the union: its id and every later id shift, so a
    // correct loader refuses or misreads the payload.
    set_active(Some(Mutant::StaticMeanMidUnion));
    for g in [static_mean_example(), all_kinds_example(), gap_example()] {
        let b = write(&g);
        assert_ne!(load(&b, &LoadLimits::default()).ok(), Some(g));
    }
    set_active(None);
    assert_eq!(write(&g), clean);
}
