//! The [`Summary`] of a lowered program: what gates and structure oracles read.

use crate::program::{LoweredProgram, OutsideOp, Step, Summary};
use crate::xnn::node_type_name;
use std::fmt;

/// Counts delegates, outside ops, XNNPACK nodes by schema type name, transposes, converts.
pub fn summarize(p: &LoweredProgram) -> Summary {
    let mut s = Summary { mode: Some(p.mode), ..Default::default() };
    // Counted by union type id first (a program has a handful of node types), so the
    // map gets one key per type present rather than a string lookup per node.
    let mut by_type: Vec<(u8, usize)> = Vec::new();
    for step in &p.steps {
        match step {
            Step::Delegate(d) => {
                s.delegates += 1;
                for n in &d.graph.nodes {
                    let id = n.kind.type_id();
                    match by_type.iter_mut().find(|(t, _)| *t == id) {
                        Some((_, c)) => *c += 1,
                        None => by_type.push((id, 1)),
                    }
                }
            }
            Step::Portable(op) => {
                s.outside.push(OutsideOp { node: op.node, op: op.op.name().to_string(), reason: op.reason.clone() })
            }
        }
    }
    for (id, count) in by_type {
        // The type's schema name (`XNodeKind::type_name`); "" for an id beyond the schema.
        let name = node_type_name(id).unwrap_or("");
        *s.node_counts.entry(name.to_string()).or_insert(0) += count;
    }
    s.transposes = s.node_counts.get("XNNStaticTranspose").copied().unwrap_or(0);
    s.converts = s.node_counts.get("XNNConvert").copied().unwrap_or(0);
    s
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = self.mode.map_or("?".to_string(), |m| m.to_string());
        writeln!(
            f,
            "mode {mode}: {} delegate(s), {} op(s) outside, {} transpose(s), {} convert(s)",
            self.delegates,
            self.outside.len(),
            self.transposes,
            self.converts
        )?;
        for (name, n) in &self.node_counts {
            writeln!(f, "  {name:<28} {n}")?;
        }
        for o in &self.outside {
            writeln!(f, "  outside: node {} {} ({})", o.node, o.op, o.reason)?;
        }
        Ok(())
    }
}
