//! Arbitrary bytes into the payload loader: never a panic; whatever loads is writer-canonical
//! (counts match their lists, load/write/load is the identity). Body:
//! `harness::fuzz_targets::load_bytes`.
#![no_main]
use libfuzzer_sys::{fuzz_target, Corpus};

fuzz_target!(|data: &[u8]| -> Corpus {
    match harness::fuzz_targets::load_bytes(data) {
        Ok(true) => Corpus::Keep,
        Ok(false) => Corpus::Reject,
        Err(finding) => panic!("{finding}"),
    }
});
