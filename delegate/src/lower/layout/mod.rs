//! ExecuTorch's `ChannelsLastTaggedReshapePass` and `RemoveRedundantCopyPass`, run on one
//! delegate's subgraph ([`PGraph`]).
//!
//! Tags ([`Tag`]): `Nhwc`, explicitly `Nchw`, or `Untagged` (NCHW). Ops needing NHWC (conv,
//! GAP) get their first input converted and tag their output NHWC; ops needing NCHW
//! (linear, reshape, a non-GAP mean) get every input converted; a memory-format `_to_copy`
//! is tagged from its target format; every other op follows the converge rule. Layout
//! changes are `_to_copy` nodes (later `XNNStaticTranspose`), reused through partners,
//! wrapped in implicit q/dq around quantized values.
//!
//! [`ir`] is the subgraph, [`build`] makes it from a partition (with `FuseActivationPass`);
//! the steps of [`run`] are [`tag`], [`converge`], [`repair`] and [`redundant_copies`], with
//! the copies themselves in [`convert`]; [`fewest`] is NhwcAware's choice between its
//! layout and StaticMean's.

pub mod build;
pub mod converge;
pub mod convert;
pub mod fewest;
pub mod ir;
pub mod redundant_copies;
pub mod repair;
pub mod tag;

pub(crate) use ir::eager_nhwc;
pub use ir::{Ins, Kind, PGraph, PNode, Tag, Target};
pub(crate) use tag::reads_mode;

use super::{LowerError, LowerOptions};
use reference::graph::Graph;

/// Runs the layout pass, the binary re-converge and the redundant-copy removal.
pub fn run(pg: &mut PGraph, g: &Graph, _opts: &LowerOptions) -> Result<(), LowerError> {
    tag::tag_nodes(pg, g)?;
    converge::reconverge_binary(pg, g)?;
    repair::repair_rewired_inputs(pg, g)?;
    redundant_copies::remove_redundant_copies(pg, g);
    repair::repair_rewired_inputs(pg, g)?;
    repair::repair_outputs(pg, g)
}
