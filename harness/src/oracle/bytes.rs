//! The bytes oracle: serialization is a function of the lowered program only.
//!
//! - every delegate segment serializes to the same bytes twice (`nondeterministic`): the
//!   runtime's own write (when the program was prepared) against the serializer's;
//! - loading those bytes and serializing what the loader returned gives the same bytes
//!   (`reload_differs`, or `load_failed` when our own payload does not load); the runtime's
//!   load serves when the program was prepared, so no payload is loaded twice;
//! - a program whose every mean is GAP-eligible is byte-identical in every mode
//!   (`gap_modes_differ`): the change must not touch GAP programs.

use super::Verdict;
use crate::engine;
use delegate::program::Step;
use delegate::xnn::XnnGraph;
use delegate::{LoweredProgram, LoweringMode};

/// Serializes every segment twice and through a load; returns the payloads when they are
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

/// The checks on payloads already written and loaded (by the runtime): a second write of
/// each segment and a write of what the loader returned must both give the payload.
pub fn written_verdict(program: &LoweredProgram, payloads: &[Vec<u8>], loaded: &[XnnGraph]) -> Verdict {
    let n = segments(program).count();
    if payloads.len() != n || loaded.len() != n {
        return Verdict::fail(
            "segment_count",
            format!("{n} segments, {} payloads and {} loaded graphs", payloads.len(), loaded.len()),
        );
    }
    for (i, ((seg, first), back)) in segments(program).zip(payloads).zip(loaded).enumerate() {
        for (what, graph, kind) in
            [("second write", seg, "nondeterministic"), ("re-serializing", back, "reload_differs")]
        {
            match engine::write(graph) {
                Ok(again) if again == *first => {}
                Ok(again) => {
                    return Verdict::fail(kind, format!("segment {i}, {what}: {}", first_difference(first, &again)))
                }
                Err(e) => return Verdict::fail("write_failed", format!("segment {i}, {what}: {e}")),
            }
        }
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

    #[test]
    fn first_difference_names_the_offset() {
        assert!(first_difference(&[0, 1, 2], &[0, 1, 3]).contains("offset 0x2"));
        assert!(first_difference(&[0, 1], &[0, 1, 3]).contains("prefix"));
    }
}
