//! The loader on hostile bytes: thousands of mutated payloads (bit flips, byte and word
//! overwrites, truncations, splices, insertions, random bytes) derived from the real
//! ExecuTorch fixtures and from written graphs. Every input must give `Ok` or a typed
//! error, never a panic; every accepted graph must survive a write/load round trip.

mod serialize_common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use delegate::serialize::{diff_graphs, load, write, write_flatbuffer, LoadLimits};
use delegate::xnn::XnnGraph;

/// splitmix64: small, seedable, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const INTERESTING: [u32; 9] = [0, 1, 2, 4, 6, 7, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF];

fn mutate(rng: &mut Rng, base: &[u8], other: &[u8]) -> Vec<u8> {
    let mut b = base.to_vec();
    match rng.below(8) {
        0 => {
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(b.len());
                if let Some(x) = b.get_mut(i) {
                    *x ^= 1 << rng.below(8);
                }
            }
        }
        1 => {
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(b.len());
                if let Some(x) = b.get_mut(i) {
                    *x = [0u8, 0xFF, 0x7F, 0x80, 1, 6, 7][rng.below(7)];
                }
            }
        }
        2 => {
            // An aligned 32-bit word: offsets, lengths, ids, counts and union types.
            let words = b.len() / 4;
            if words > 0 {
                let w = rng.below(words) * 4;
                let v = if rng.below(3) == 0 { rng.next() as u32 } else { INTERESTING[rng.below(INTERESTING.len())] };
                b[w..w + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        3 => b.truncate(rng.below(b.len() + 1)),
        4 => {
            let cut = rng.below(b.len() + 1);
            let from = rng.below(other.len() + 1);
            b.truncate(cut);
            b.extend_from_slice(&other[from..]);
        }
        5 => {
            let at = rng.below(b.len() + 1);
            let n = 1 + rng.below(16);
            let ins: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            b.splice(at..at, ins);
        }
        6 => {
            let at = rng.below(b.len());
            let n = (1 + rng.below(16)).min(b.len() - at);
            b.drain(at..at + n);
        }
        _ => {
            // Random bytes, sometimes framed so they get past the first checks.
            let n = rng.below(512);
            b = (0..n).map(|_| rng.next() as u8).collect();
            if n >= 40 && rng.below(2) == 0 {
                b[..32].copy_from_slice(
                    &base[..32.min(base.len())]
                        .iter()
                        .copied()
                        .chain(std::iter::repeat(0))
                        .take(32)
                        .collect::<Vec<_>>(),
                );
                b[36..40].copy_from_slice(b"XN01");
            }
        }
    }
    b
}

/// Equal graphs, or graphs that differ only by NaNs (a NaN padding value is a legal field,
/// and `NaN != NaN`): then their bytes, every field written bit for bit, are equal.
fn same(a: &XnnGraph, b: &XnnGraph) -> bool {
    a == b || write(a) == write(b)
}

fn bases() -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/executorch-1.5.1");
    let mut v: Vec<Vec<u8>> =
        ["a.d0.xnn", "b.d0.xnn", "c.d0.xnn", "c.d1.xnn", "h.d0.xnn", "i_b.d0.xnn", "e.d0.xnn", "e.d1.xnn"]
            .iter()
            .map(|f| std::fs::read(dir.join(f)).unwrap())
            .collect();
    for (_, g) in serialize_common::examples() {
        v.push(write(&g));
        v.push(write_flatbuffer(&g));
    }
    v
}

#[test]
fn mutated_payloads_never_panic() {
    let bases = bases();
    let limits = [
        LoadLimits::default(),
        LoadLimits::lenient(),
        LoadLimits { max_bytes: 4096, max_depth: 8, ..LoadLimits::lenient() },
    ];
    let mut rng = Rng(0x5EED_2026);
    let (mut ok, mut err, mut round_trips) = (0usize, 0usize, 0usize);
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    let start = std::time::Instant::now();
    const PER_BASE: usize = 800;
    for (bi, base) in bases.iter().enumerate() {
        for _ in 0..PER_BASE {
            let other = &bases[rng.below(bases.len())];
            let m = mutate(&mut rng, base, other);
            let lim = &limits[rng.below(limits.len())];
            let r = catch_unwind(AssertUnwindSafe(|| load(&m, lim)));
            let r = r.unwrap_or_else(|_| panic!("loader panicked on a mutation of base {bi}: {m:02x?}"));
            match r {
                Ok(g) => {
                    ok += 1;
                    // Every accepted graph round-trips: every field of every member is modelled.
                    let again = catch_unwind(AssertUnwindSafe(|| load(&write(&g), lim))).expect("no panic on rewrite");
                    match again {
                        Ok(again) => assert!(same(&again, &g), "base {bi}: {}", diff_graphs(&g, &again)),
                        Err(e) => panic!("base {bi}: an accepted graph re-serialized to bytes the loader refuses: {e}"),
                    }
                    round_trips += 1;
                }
                Err(e) => {
                    err += 1;
                    let s = format!("{e:?}");
                    let kind = s.split(|c: char| !c.is_alphanumeric()).next().unwrap_or("").to_string();
                    *kinds.entry(kind).or_insert(0) += 1;
                    assert!(!e.to_string().is_empty());
                }
            }
        }
    }
    let total = ok + err;
    println!(
        "{total} mutated payloads in {:?}: {ok} accepted ({round_trips} round-tripped), {err} refused: {kinds:?}",
        start.elapsed()
    );
    assert_eq!(total, bases.len() * PER_BASE);
    assert!(total >= 10_000, "thousands of inputs");
    assert!(err > total / 2, "most mutations must be refused");
    assert!(kinds.len() >= 8, "mutations reach many checks: {kinds:?}");
}

#[test]
fn mutated_pte_files_never_panic() {
    use delegate::serialize::pte;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/executorch-1.5.1");
    let bases: Vec<Vec<u8>> = ["a.pte", "b.pte", "c.pte", "h.pte", "i_b.pte", "e.pte", "f.pte"]
        .iter()
        .map(|f| std::fs::read(dir.join(f)).unwrap())
        .collect();
    let mut rng = Rng(0x0000_E712);
    let (mut parsed, mut refused, mut payloads) = (0usize, 0usize, 0usize);
    for (bi, base) in bases.iter().enumerate() {
        for _ in 0..600 {
            let other = &bases[rng.below(bases.len())];
            let m = mutate(&mut rng, base, other);
            let r = catch_unwind(AssertUnwindSafe(|| {
                pte::parse(&m).map(|f| {
                    let bytes: Vec<Vec<u8>> = f.xnnpack().map(|d| d.bytes.to_vec()).collect();
                    bytes.iter().filter(|b| load(b, &LoadLimits::lenient()).is_ok()).count()
                })
            }));
            match r.unwrap_or_else(|_| panic!("pte reader panicked on a mutation of base {bi}: {m:02x?}")) {
                Ok(n) => {
                    parsed += 1;
                    payloads += n;
                }
                Err(e) => {
                    refused += 1;
                    assert!(!e.to_string().is_empty());
                }
            }
        }
    }
    println!(
        "{} mutated .pte files: {parsed} parsed ({payloads} payloads decoded), {refused} refused",
        parsed + refused
    );
    assert!(refused > 0 && parsed > 0);
}
