//! ExecuTorch's debug handles (`DebugHandleGeneratorPass`, run by `to_edge`): every node of
//! the exported graph but placeholders gets the number of its *greatest ancestor* (the
//! oldest node of the export flow it descends from), numbered from 1 in the order the
//! graph first meets each ancestor.
//!
//! For a float graph every op is its own ancestor, so the handle is the op's position
//! among the graph's ops. A PT2E-quantized graph also holds the quantizer's q/dq nodes,
//! which descend from the value they observe: a quantize (and the dequantize after it)
//! shares the number of the op whose output it quantizes, or takes a new one when it
//! quantizes a graph input or a constant. In the exported graph the lifted parameters come
//! first and the dequantize of a (folded) quantized weight sits right after them, before
//! every other op: those dequantizes are numbered first.
//!
//! Checked against ExecuTorch 1.5.1's `i_b` (qs8 conv then GAP): weight dequantize 1, input
//! quantize 2 (its dequantize 2), conv 3 (its q/dq 3), mean 4 (its q/dq 4); float programs
//! `a`, `b`, `c`, `e` number their ops 1, 2, ... in graph order.

use reference::graph::{Graph, Op};

/// The debug handle of every node (0 for inputs and constants, which have none).
pub fn assign(g: &Graph) -> Vec<u32> {
    let n = g.nodes.len();
    let is_const = |i: usize| matches!(g.nodes[i].op, Op::Constant { .. });
    // The ancestor of each node: itself, or for a q/dq the ancestor of what it reads (an
    // input or a constant is the ancestor of the q/dq reading it).
    let mut ancestor: Vec<usize> = (0..n).collect();
    for (id, node) in g.nodes.iter().enumerate() {
        if matches!(node.op, Op::Quantize(_) | Op::Dequantize(_)) {
            if let Some(&x) = node.inputs.first() {
                ancestor[id] = ancestor[x];
            }
        }
    }
    let weight_dq = |i: usize| {
        matches!(g.nodes[i].op, Op::Dequantize(_)) && g.nodes[i].inputs.first().is_some_and(|&c| is_const(c))
    };
    let is_op = |i: usize| !matches!(g.nodes[i].op, Op::Input { .. } | Op::Constant { .. });
    let exported_order = (0..n).filter(|&i| weight_dq(i)).chain((0..n).filter(|&i| is_op(i) && !weight_dq(i)));
    let mut number = vec![0u32; n];
    let mut next = 0u32;
    let mut handle = vec![0u32; n];
    for id in exported_order {
        let a = ancestor[id];
        if number[a] == 0 {
            next += 1;
            number[a] = next;
        }
        handle[id] = number[a];
    }
    handle
}

#[cfg(test)]
mod tests {
    use super::*;
    use reference::graph::{Conv2dParams, GraphBuilder};
    use reference::{QuantParams, Tensor, TensorSpec};

    #[test]
    fn float_ops_count_in_graph_order_and_constants_take_none() {
        let g = GraphBuilder::new();
        let x = g.input("x", TensorSpec::f32(&[1, 16, 8]));
        let ms = g.mean(g.mul(x, x), &[-1], true);
        let r = g.rsqrt(g.add(ms, g.scalar(1e-6)));
        let w = g.constant(Tensor::f32(&[8], vec![1.0; 8]));
        let y = g.mul(g.mul(x, r), w);
        let gr = g.finish(&[y]).unwrap();
        let h = assign(&gr);
        let ops: Vec<u32> = gr.nodes.iter().zip(&h).filter(|(n, _)| is_op_node(&n.op)).map(|(_, &h)| h).collect();
        assert_eq!(ops, vec![1, 2, 3, 4, 5, 6]);
        for (node, &h) in gr.nodes.iter().zip(&h) {
            if !is_op_node(&node.op) {
                assert_eq!(h, 0);
            }
        }
    }

    fn is_op_node(op: &Op) -> bool {
        !matches!(op, Op::Input { .. } | Op::Constant { .. })
    }

    #[test]
    fn qs8_q_dq_share_their_producers_number_and_weight_dequantizes_come_first() {
        let q = QuantParams::new(0.5, 0);
        let g = GraphBuilder::new();
        let x = g.input("x", TensorSpec::f32(&[1, 2, 4, 4]));
        let xd = g.dequantize(g.quantize(x, q.scale, 0), q.scale, 0);
        let w = g.constant(Tensor::qs8(&[2, 2, 1, 1], vec![1; 4], q));
        let wd = g.dequantize(w, q.scale, 0);
        let y = g.conv2d(xd, wd, None, Conv2dParams::default());
        let yd = g.dequantize(g.quantize(y, q.scale, 0), q.scale, 0);
        let m = g.mean(yd, &[2, 3], true);
        let md = g.dequantize(g.quantize(m, q.scale, 0), q.scale, 0);
        let gr = g.finish(&[md]).unwrap();
        let h = assign(&gr);
        // x, q, dq, w, dq_w, conv, q, dq, mean, q, dq
        assert_eq!(h, vec![0, 2, 2, 0, 1, 3, 3, 3, 4, 4, 4]);
    }
}
