//! Readable differences between two decoded graphs (shown when golden hashes differ), and
//! node counts by type.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::xnn::{XNode, XValue, XnnGraph};

/// Node counts by schema type name (`XNNStaticTranspose`, ...), in name order.
pub fn node_counts(graph: &XnnGraph) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for n in &graph.nodes {
        let name = match n.kind.type_name() {
            "" => format!("type_id_{}", n.kind.type_id()),
            s => s.to_string(),
        };
        *m.entry(name).or_insert(0) += 1;
    }
    m
}

/// One line per node in a stable, readable form.
pub fn describe_node(n: &XNode) -> String {
    let mut s = format!("{:?}", n.kind);
    if n.debug_handle != 0 {
        let _ = write!(s, " debug_handle={}", n.debug_handle);
    }
    if let Some((lo, hi)) = n.output_min_max {
        let _ = write!(s, " output_min_max=({lo}, {hi})");
    }
    s
}

/// One line per value in a stable, readable form.
pub fn describe_value(v: &XValue) -> String {
    let mut s = format!("id {} {} {:?}", v.id_out, v.datatype.name(), v.dims);
    if v.external_id != crate::xnn::INVALID_VALUE_ID {
        let _ = write!(s, " external_id={} flags={}", v.external_id, v.flags);
    } else if v.flags != 0 {
        let _ = write!(s, " flags={}", v.flags);
    }
    if v.constant_buffer_idx != 0 {
        let _ = write!(s, " constant={}", v.constant_buffer_idx);
    }
    if let Some(q) = &v.quant {
        let _ = write!(s, " quant={q:?}");
    }
    s
}

fn diff_list<T>(out: &mut String, what: &str, a: &[T], b: &[T], describe: impl Fn(&T) -> String) {
    let n = a.len().max(b.len());
    for i in 0..n {
        let (da, db) = (a.get(i).map(&describe), b.get(i).map(&describe));
        if da != db {
            let show = |d: Option<String>| d.unwrap_or_else(|| "(absent)".into());
            let _ = writeln!(out, "{what} {i}:\n  - {}\n  + {}", show(da), show(db));
        }
    }
}

/// A readable diff of two graphs: header fields, then node by node, value by value and
/// constant by constant. Empty when the graphs are equal.
pub fn diff_graphs(a: &XnnGraph, b: &XnnGraph) -> String {
    let mut out = String::new();
    let mut field = |name: &str, x: String, y: String| {
        if x != y {
            let _ = writeln!(out, "{name}: {x} -> {y}");
        }
    };
    field("version", format!("{:?}", a.version), format!("{:?}", b.version));
    field("num_externs", a.num_externs.to_string(), b.num_externs.to_string());
    field("input_ids", format!("{:?}", a.input_ids), format!("{:?}", b.input_ids));
    field("output_ids", format!("{:?}", a.output_ids), format!("{:?}", b.output_ids));
    field("nodes", a.nodes.len().to_string(), b.nodes.len().to_string());
    field("values", a.values.len().to_string(), b.values.len().to_string());
    field("constant_bytes", format!("{} bytes", a.constant_bytes.len()), format!("{} bytes", b.constant_bytes.len()));
    if a.constant_bytes.len() == b.constant_bytes.len() && a.constant_bytes != b.constant_bytes {
        let first = a.constant_bytes.iter().zip(&b.constant_bytes).position(|(x, y)| x != y).unwrap_or(0);
        let _ = writeln!(out, "constant_bytes differ from byte {first}");
    }
    let (ca, cb) = (node_counts(a), node_counts(b));
    if ca != cb {
        let _ = writeln!(out, "node counts: {ca:?} -> {cb:?}");
    }
    diff_list(&mut out, "node", &a.nodes, &b.nodes, describe_node);
    diff_list(&mut out, "value", &a.values, &b.values, describe_value);
    diff_list(&mut out, "constant", &a.constant_data, &b.constant_data, |c| format!("{c:?}"));
    out
}
