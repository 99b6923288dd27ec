//! Every oracle on a case decoded from the input (a JSON case line, or arbitrary bytes
//! through `Arbitrary`); a failure panics with the case line and every verdict.
#![no_main]
use libfuzzer_sys::{fuzz_target, Corpus};

fuzz_target!(|data: &[u8]| -> Corpus {
    if harness::fuzz::target_differential(data) {
        Corpus::Keep
    } else {
        Corpus::Reject
    }
});
