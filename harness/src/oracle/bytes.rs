//! The bytes oracle: serialization is a function of the lowered program only.
//!
//! - loading a segment's bytes and serializing what the loader returned gives the same bytes
//!   (`reload_differs`, or `load_failed` when our own payload does not load): the round trip
//!   is the identity, and the writer gave equal graphs equal bytes; when it fails, a second
//!   write of the segment tells a writer that is not a function of its graph
//!   (`nondeterministic`) from a lossy round trip. The runtime's write and load serve when
//!   the program was prepared, so no payload is written or loaded twice on the passing path;
//! - a program whose every mean is GAP-eligible is byte-identical in every mode
//!   (`gap_modes_differ`): the change must not touch GAP programs.

use super::Verdict;
use crate::engine;
use delegate::program::Step;
use delegate::xnn::XnnGraph;
use delegate::{LoweredProgram, LoweringMode};

/// Serializes every segment and checks it through a load; returns the payloads when they are
/// well defined.
pub fn segment_verdict(program: &LoweredProgram) -> (Verdict, Option<Vec<Vec<u8>>>) {
    let mut payloads = vec![];
    let mut loaded = vec![];
    for (i, seg) in segments(program).enumerate() {
        let first = match engine::write(seg) {
            Ok(b) => b,
            Err(e) if e.unavailable => return (Verdict::Skip(e.message), None),
            Err(e) => return (Verdict::fail("write_failed", format!("segment {i}: {e}")), None),
        };
        match engine::load(&first) {
            Ok(g) => loaded.push(g),
            Err(e) if e.unavailable => return (Verdict::Skip(e.message), None),
            Err(e) => return (Verdict::fail("load_failed", format!("segment {i}: our own payload: {e}")), None),
        };
        payloads.push(first);
    }
    let v = written_verdict(program, &payloads, &loaded);
    let ok = v == Verdict::Pass;
    (v, ok.then_some(payloads))
}

/// The checks on payloads already written and loaded (by the runtime). Writing what the
/// loader returned must give the payload back: when it does, the round trip is the identity
/// and the writer gave two equal graphs the same bytes, so one write checks both. Only when
/// it does not is the segment written a second time, to tell a writer that is not a
/// function of its graph (`nondeterministic`) from a lossy round trip (`reload_differs`).
pub fn written_verdict(program: &LoweredProgram, payloads: &[Vec<u8>], loaded: &[XnnGraph]) -> Verdict {
    let n = segments(program).count();
    if payloads.len() != n || loaded.len() != n {
        return Verdict::fail(
            "segment_count",
            format!("{n} segments, {} payloads and {} loaded graphs", payloads.len(), loaded.len()),
        );
    }
    for (i, ((seg, first), back)) in segments(program).zip(payloads).zip(loaded).enumerate() {
        let reloaded = match engine::write(back) {
            Ok(b) if b == *first => continue,
            Ok(b) => b,
            Err(e) => return Verdict::fail("write_failed", format!("segment {i}, re-serializing: {e}")),
        };
        return match engine::write(seg) {
            Ok(again) if again != *first => Verdict::fail(
                "nondeterministic",
                format!("segment {i}, second write: {}", first_difference(first, &again)),
            ),
            Ok(_) => Verdict::fail(
                "reload_differs",
                format!("segment {i}, re-serializing: {}", first_difference(first, &reloaded)),
            ),
            Err(e) => Verdict::fail("write_failed", format!("segment {i}, second write: {e}")),
        };
    }
    Verdict::Pass
}

fn segments(program: &LoweredProgram) -> impl Iterator<Item = &XnnGraph> {
    program.steps.iter().filter_map(|s| match s {
        Step::Delegate(seg) => Some(&seg.graph),
        _ => None,
    })
}

/// Every mode gave the same payloads.
pub fn gap_identity(mode_payloads: &[(LoweringMode, Vec<Vec<u8>>)]) -> Verdict {
    let Some((m0, p0)) = mode_payloads.first() else {
        return Verdict::Skip("no mode produced payloads".into());
    };
    if mode_payloads.len() < 2 {
        return Verdict::Skip("fewer than two modes to compare".into());
    }
    for (m, p) in &mode_payloads[1..] {
        if p != p0 {
            let detail = if p.len() != p0.len() {
                format!("{m0}: {} payloads, {m}: {}", p0.len(), p.len())
            } else {
                let i = p.iter().zip(p0).position(|(a, b)| a != b).unwrap_or(0);
                format!("{m0} vs {m}, payload {i}: {}", first_difference(&p0[i], &p[i]))
            };
            return Verdict::fail("gap_modes_differ", detail);
        }
    }
    Verdict::Pass
}

/// Where two byte strings first differ, for a readable report.
pub fn first_difference(a: &[u8], b: &[u8]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!(
            "{} vs {} bytes, first difference at offset {i:#x} ({:#04x} vs {:#04x})",
            a.len(),
            b.len(),
            a[i],
            b[i]
        ),
        None => format!("{} vs {} bytes, one a prefix of the other", a.len(), b.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gap_identity_compares_every_mode() {
        let same = vec![(LoweringMode::Main, vec![vec![1u8, 2]]), (LoweringMode::StaticMean, vec![vec![1u8, 2]])];
        assert_eq!(gap_identity(&same), Verdict::Pass);
        let mut diff = same.clone();
        diff.push((LoweringMode::NhwcAware, vec![vec![1u8, 3]]));
        let v = gap_identity(&diff);
        assert!(
            matches!(&v, Verdict::Fail { kind, detail } if kind == "gap_modes_differ" && detail.contains("0x1")),
            "{v:?}"
        );
    }

    /// A mean lowered by StaticMean: one delegate segment, written and loaded as the runtime does.
    fn written_segment() -> (LoweredProgram, Vec<Vec<u8>>, Vec<XnnGraph>) {
        let case = crate::case::Case::new(crate::case::Pattern::Mean, &[2, 3, 4], &[1], false);
        let built = crate::patterns::build(&case).unwrap();
        let program = engine::lower(&built.graph, LoweringMode::StaticMean).unwrap();
        let payloads: Vec<Vec<u8>> = segments(&program).map(|g| engine::write(g).unwrap()).collect();
        let loaded = payloads.iter().map(|b| engine::load(b).unwrap()).collect();
        (program, payloads, loaded)
    }

    #[test]
    fn one_write_of_the_loaded_graph_passes_and_a_difference_is_labelled() {
        let (program, payloads, loaded) = written_segment();
        assert_eq!(payloads.len(), 1);
        assert_eq!(written_verdict(&program, &payloads, &loaded), Verdict::Pass);

        // The loader lost something: the segment itself still writes the payload.
        let mut lossy = loaded.clone();
        lossy[0].num_externs += 1;
        let v = written_verdict(&program, &payloads, &lossy);
        assert!(matches!(&v, Verdict::Fail { kind, .. } if kind == "reload_differs"), "{v:?}");

        // The runtime's own write differs from a fresh write of the same graph.
        let mut other = payloads.clone();
        let last = other[0].len() - 1;
        other[0][last] ^= 1;
        let v = written_verdict(&program, &other, &loaded);
        assert!(
            matches!(&v, Verdict::Fail { kind, detail } if kind == "nondeterministic" && detail.contains("second write")),
            "{v:?}"
        );

        let v = written_verdict(&program, &payloads, &[]);
        assert!(matches!(&v, Verdict::Fail { kind, .. } if kind == "segment_count"), "{v:?}");
    }

    #[test]
    fn first_difference_names_the_offset() {
        assert!(first_difference(&[0, 1, 2], &[0, 1, 3]).contains("offset 0x2"));
        assert!(first_difference(&[0, 1], &[0, 1, 3]).contains("prefix"));
    }
}
