//! Node type names, wherever they come from (golden file, limits, command line), must be
//! members of the schema's `XNodeUnion` (B6: a misspelled name must not count as zero).

use anyhow::bail;
use delegate::xnn::{node_type_id, NODE_TYPE_NAMES};

/// Checks that a node type name is a schema union member (B6).
pub fn check_node_name(name: &str) -> anyhow::Result<()> {
    if node_type_id(name).is_none() {
        let close: Vec<&str> = NODE_TYPE_NAMES
            .iter()
            .copied()
            .filter(|n| n.to_lowercase().contains(&name.to_lowercase().replace("xnn", "")) || similar(n, name))
            .collect();
        let hint = if close.is_empty() { String::new() } else { format!(" (did you mean {}?)", close.join(", ")) };
        bail!("unknown XNNPACK node type name {name:?}: not a member of XNodeUnion{hint}");
    }
    Ok(())
}

/// Edit distance at most 2 (cheap enough for 48 names).
fn similar(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.len().abs_diff(b.len()) > 2 {
        return false;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()] <= 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspelled_names_are_rejected_with_a_hint() {
        assert!(check_node_name("XNNStaticTranspose").is_ok());
        let e = check_node_name("XNNStaticTranpose").unwrap_err().to_string();
        assert!(e.contains("XNNStaticTranpose") && e.contains("did you mean XNNStaticTranspose"), "{e}");
        assert!(check_node_name("").is_err());
    }
}
