//! Time of `oracle::check` per case of a campaign, split by size (large cases: input over
//! the pool's inline threshold) and pattern, with the fuzz loop's sampled options.
//!
//! `cargo run --release -p harness --example case_cost -- SEED CASES [--no-xnnpack] [--small]
//! [--only=large:gap]` (`--small`: no large cases; `--only`: one kind, each case printed).
use harness::gen::{nth_case, GenConfig};
use harness::oracle::{self, CheckOptions};
use std::collections::BTreeMap;
use std::time::Instant;
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
fn main() {
    let mut a = std::env::args().skip(1);
    let seed: u64 = a.next().and_then(|s| s.parse().ok()).expect("usage: case_cost SEED CASES [--no-xnnpack]");
    let n: u64 = a.next().and_then(|s| s.parse().ok()).expect("usage: case_cost SEED CASES [--no-xnnpack]");
    let rest: Vec<String> = a.collect();
    let xnn = !rest.iter().any(|s| s == "--no-xnnpack");
    let only = rest.iter().find_map(|s| s.strip_prefix("--only=").map(|s| s.replace(':', " ")));
    let cfg = if rest.iter().any(|s| s == "--small") {
        GenConfig { large_bytes: 0, ..GenConfig::default() }
    } else {
        GenConfig::default()
    };
    let mut by: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    let t0 = Instant::now();
    for i in 0..n {
        let case = nth_case(seed, i, &cfg);
        let key = format!("{} {}", if oracle::large_case(&case) { "large" } else { "small" }, case.pattern.name());
        if only.as_ref().is_some_and(|o| *o != key) {
            continue;
        }
        if only.is_some() {
            println!("{i}: {}", case.to_json());
        }
        let mut o = CheckOptions::sampled(i).sized_for(&case);
        if !xnn {
            o.xnnpack = None;
        }
        let t = Instant::now();
        std::hint::black_box(oracle::check(&case, &o));
        let dt = t.elapsed().as_secs_f64();
        let e = by.entry(key).or_default();
        e.0 += 1;
        e.1 += dt;
    }
    let total = t0.elapsed().as_secs_f64();
    println!("{n} cases in {total:.2} s: {:.0} us per case", total / n as f64 * 1e6);
    for (k, (c, s)) in by {
        println!("{k:30} {c:6} cases {:9.1} us each {:5.1}% of the time", s / c as f64 * 1e6, s / total * 100.0);
    }
}
