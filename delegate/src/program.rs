//! The lowered program: an ordered list of delegate segments and portable ops with
//! explicit tensor hand-offs through program-level slots.

use crate::xnn::XnnGraph;
use crate::LoweringMode;
use reference::graph::{NodeId, Op, TensorSpec};
use reference::Tensor;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Index into [`LoweredProgram::slots`].
pub type SlotId = usize;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoweredProgram {
    pub mode: LoweringMode,
    /// Every tensor that lives outside a delegate: graph inputs, constants used by portable
    /// ops, segment outputs. The spec's `format` is the physical layout of the hand-off
    /// (a slot written by a delegate from an NHWC value is `ChannelsLast`).
    pub slots: Vec<TensorSpec>,
    /// Constant slots: the data of every constant a portable op reads or a delegate takes
    /// as an external input (ExecuTorch feeds those from the program's constant segment;
    /// only a conv's or linear's weight and bias are lifted into the delegate's payload).
    /// A runner fills these slots before the first step, like the graph inputs.
    pub constants: Vec<(SlotId, Tensor)>,
    /// Graph inputs, in call order.
    pub inputs: Vec<SlotId>,
    /// Graph outputs, in order.
    pub outputs: Vec<SlotId>,
    pub steps: Vec<Step>,
    pub summary: Summary,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Step {
    Delegate(DelegateSegment),
    Portable(PortableOp),
}

/// One XNNPACK delegate call. `inputs[k]` binds external id `k`; `outputs[k]` binds
/// external id `inputs.len() + k` (ExecuTorch: inputs first, then outputs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DelegateSegment {
    pub graph: XnnGraph,
    pub inputs: Vec<SlotId>,
    pub outputs: Vec<SlotId>,
}

/// An op left outside every delegate, run by the portable (scalar) kernels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PortableOp {
    /// The graph node it came from.
    pub node: NodeId,
    pub op: Op,
    pub inputs: Vec<SlotId>,
    pub output: SlotId,
    /// Why the partitioner left it outside.
    pub reason: String,
}

/// What gates and structure oracles read about a lowered program.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Summary {
    pub mode: Option<LoweringMode>,
    /// Number of delegate segments.
    pub delegates: usize,
    /// Ops left outside, in program order.
    pub outside: Vec<OutsideOp>,
    /// XNNPACK node counts by schema type name, summed over delegates (zero counts omitted).
    pub node_counts: BTreeMap<String, usize>,
    pub transposes: usize,
    pub converts: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutsideOp {
    pub node: NodeId,
    pub op: String,
    pub reason: String,
}

/// A node type name the schema does not have (a misspelling must not count as zero).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown XNNPACK node type name {0:?} (not a member of XNodeUnion)")]
pub struct UnknownNodeType(pub String);

impl Summary {
    /// Count of nodes of `type_name`, which must be a schema union member.
    pub fn count(&self, type_name: &str) -> Result<usize, UnknownNodeType> {
        if crate::xnn::node_type_id(type_name).is_none() {
            #[cfg(feature = "mutants")]
            if crate::mutants::is_active(crate::mutants::Mutant::UnknownNameCountsZero) {
                // The reviewed `Counter` behaviour: a misspelled name reads 0.
                return Ok(0);
            }
            return Err(UnknownNodeType(type_name.to_string()));
        }
        Ok(self.node_counts.get(type_name).copied().unwrap_or(0))
    }
}
