//! Arbitrary bytes into the payload loader: never a panic; whatever loads re-serializes to
//! bytes that load to the same graph.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| harness::fuzz::target_load_bytes(data));
