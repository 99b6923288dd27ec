//! Lower a case in every mode and check the bytes oracle: deterministic serialization and
//! load/re-serialize identity (GAP programs identical across modes).
#![no_main]
use libfuzzer_sys::{fuzz_target, Corpus};

fuzz_target!(|data: &[u8]| -> Corpus {
    if harness::fuzz::target_roundtrip(data) {
        Corpus::Keep
    } else {
        Corpus::Reject
    }
});
