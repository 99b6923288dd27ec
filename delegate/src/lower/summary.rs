//! The [`Summary`] of a lowered program: what gates and structure oracles read.

use crate::program::{LoweredProgram, OutsideOp, Step, Summary};
use std::fmt;

/// Counts delegates, outside ops, XNNPACK nodes by schema type name, transposes, converts.
pub fn summarize(p: &LoweredProgram) -> Summary {
    let mut s = Summary { mode: Some(p.mode), ..Default::default() };
    for step in &p.steps {
        match step {
            Step::Delegate(d) => {
                s.delegates += 1;
                for n in &d.graph.nodes {
                    let name = n.kind.type_name();
                    // The key is allocated once per node type, not once per node.
                    match s.node_counts.get_mut(name) {
                        Some(c) => *c += 1,
                        None => {
                            s.node_counts.insert(name.to_string(), 1);
                        }
                    }
                }
            }
            Step::Portable(op) => {
                s.outside.push(OutsideOp { node: op.node, op: op.op.name().to_string(), reason: op.reason.clone() })
            }
        }
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
