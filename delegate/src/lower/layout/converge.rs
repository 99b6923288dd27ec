//! The converge rule for layout-agnostic ops, and ExecuTorch's re-check of binary ops
//! whose operands ended up in different layouts.

use super::convert::{input_to_nchw, input_to_nhwc};
use super::ir::{PGraph, Tag, Target};
use crate::lower::LowerError;
use crate::mutants::{is_active, Mutant};
use reference::graph::{Graph, Op};

pub(super) fn converge(pg: &mut PGraph, g: &Graph, i: usize, recheck: bool) -> Result<(), LowerError> {
    let ins = pg.input_nodes(i);
    let all_nhwc = ins.iter().all(|&x| pg.is_nhwc(x, g));
    let any_nhwc = match is_active(Mutant::ConvergeSecondOperand) {
        // The rule read off the first operand, as if the NHWC one always came first.
        true => ins.first().is_some_and(|&x| pg.is_nhwc(x, g)),
        false => ins.iter().any(|&x| pg.is_nhwc(x, g)),
    };
    if all_nhwc {
        pg.nodes[i].tag = Tag::Nhwc;
    } else if any_nhwc {
        if ins.iter().all(|&x| pg.can_be_nhwc(x, g)) {
            for &x in &ins {
                input_to_nhwc(pg, g, x, Target::Node(i))?;
            }
            pg.nodes[i].tag = Tag::Nhwc;
        } else {
            for &x in &ins {
                input_to_nchw(pg, g, x, Target::Node(i))?;
            }
            if recheck {
                pg.nodes[i].tag = Tag::Nchw;
            }
        }
    }
    Ok(())
}

/// Re-converges binary ops whose operands ended up in different layouts.
pub(super) fn reconverge_binary(pg: &mut PGraph, g: &Graph) -> Result<(), LowerError> {
    let order = pg.order_snapshot();
    for &i in &order {
        if !pg.nodes[i].alive || !matches!(pg.op(i, g), Some(Op::Binary(_))) {
            continue;
        }
        let ins = pg.input_nodes(i);
        if ins.len() == 2 && pg.is_nhwc(ins[0], g) != pg.is_nhwc(ins[1], g) {
            converge(pg, g, i, true)?;
        }
    }
    pg.spare = order;
    Ok(())
}
