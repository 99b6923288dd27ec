//! Lower a case in every mode and check the bytes oracle: deterministic serialization and
//! load/re-serialize identity (GAP programs identical across modes). Body:
//! `harness::fuzz_targets::roundtrip`.
#![no_main]
use libfuzzer_sys::{fuzz_target, Corpus};

fuzz_target!(|data: &[u8]| -> Corpus {
    match harness::fuzz_targets::roundtrip(data) {
        Ok(true) => Corpus::Keep,
        Ok(false) => Corpus::Reject,
        Err(finding) => panic!("{finding}"),
    }
});
