//! The oracles on every input file of a directory, uninstrumented, with the `differential`
//! target's sampled configurations or the full matrix: the baseline the cargo-fuzz rates in
//! reports/fuzz-targets.md are compared with (run it under callgrind, toggling on
//! `harness::oracle::check`).
//!
//! `cargo run --release -p harness --example fuzz_input_cost -- sampled|full fuzz/corpus/differential`
use harness::oracle::{self, CheckOptions};
fn main() {
    let full = std::env::args().nth(1).as_deref() == Some("full");
    let dir = std::env::args().nth(2).expect("usage: fuzz_input_cost sampled|full DIR");
    let mut files: Vec<_> = std::fs::read_dir(dir).expect("readable dir").map(|e| e.expect("entry").path()).collect();
    files.sort();
    let mut n = 0;
    for f in files {
        let data = std::fs::read(&f).expect("readable file");
        let Some(case) = harness::fuzz_targets::case_from_fuzz_input(&data) else { continue };
        let opts = if full { CheckOptions::default() } else { CheckOptions::sampled(n) };
        let r = oracle::check(&case, &opts);
        n += 1;
        std::hint::black_box(r);
    }
    eprintln!("{n} cases");
}
