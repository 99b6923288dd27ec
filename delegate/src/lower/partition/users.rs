//! Who reads each node.

use reference::graph::{Graph, NodeId};

pub(crate) struct Users {
    /// `list[start[x]..start[x + 1]]` are the distinct nodes reading `x`, ascending (one
    /// flat list rather than a vector per node: this runs for every lowering).
    pub(super) start: Vec<usize>,
    pub(super) list: Vec<NodeId>,
    pub(super) is_output: Vec<bool>,
}

impl Users {
    pub(super) fn of(&self, x: NodeId) -> &[NodeId] {
        &self.list[self.start[x]..self.start[x + 1]]
    }
}

/// The distinct values `ins` reads, in order: each (reader, value) pair counts once, even
/// when the reader takes the value twice.
pub(super) fn distinct(ins: &[NodeId]) -> impl Iterator<Item = NodeId> + '_ {
    ins.iter().enumerate().filter(move |&(k, i)| !ins[..k].contains(i)).map(|(_, &i)| i)
}

/// Who reads each node: mode-independent, so [`crate::lower::lower_modes`] builds it once.
pub(crate) fn users(g: &Graph) -> Users {
    let n = g.nodes.len();
    let mut start = vec![0usize; n + 1];
    for node in &g.nodes {
        for i in distinct(&node.inputs) {
            start[i + 1] += 1;
        }
    }
    for x in 0..n {
        start[x + 1] += start[x];
    }
    let mut fill = start.clone();
    let mut list = vec![0; start[n]];
    for (id, node) in g.nodes.iter().enumerate() {
        for i in distinct(&node.inputs) {
            list[fill[i]] = id;
            fill[i] += 1;
        }
    }
    let mut is_output = vec![false; n];
    for &o in &g.outputs {
        is_output[o] = true;
    }
    Users { start, list, is_output }
}
