//! Every oracle on a case decoded from the input (a JSON case line, or arbitrary bytes
//! through `Arbitrary`), on the `harness fuzz` sampled configurations; a failure panics with
//! the case line and every verdict. Body: `harness::fuzz_targets::differential`.
#![no_main]
use libfuzzer_sys::{fuzz_target, Corpus};

fuzz_target!(|data: &[u8]| -> Corpus {
    match harness::fuzz_targets::differential(data) {
        Ok(true) => Corpus::Keep,
        Ok(false) => Corpus::Reject,
        Err(finding) => panic!("{finding}"),
    }
});
