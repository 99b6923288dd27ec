//! Building a [`PGraph`] from one partition, and `FuseActivationPass`.

use super::ir::{eager_nhwc, Ins, Kind, PGraph};
use crate::lower::partition::{fuseable_activation, takes_fused_activation, Partition, Plan};
use crate::lower::LowerError;
use crate::program::SlotId;
use reference::graph::{Graph, Op};
use std::borrow::Cow;

impl<'g> PGraph<'g> {
    /// The subgraph of one partition: the constants it owns, placeholders (its inputs, the
    /// constants it does not own among them) in first-use order, then the member ops in
    /// graph order.
    pub fn build(g: &'g Graph, plan: &Plan, p: &Partition, slots: &[SlotId]) -> Result<PGraph<'g>, LowerError> {
        let mut pg = PGraph {
            nodes: Vec::new(),
            order: Vec::new(),
            outputs: Vec::new(),
            out_nhwc: Vec::new(),
            num_inputs: 0,
            mode: plan.mode,
            spare: Vec::new(),
        };
        // Graph node -> subgraph node, indexed by graph node id.
        let mut map: Vec<Option<usize>> = vec![None; g.nodes.len()];
        pg.nodes.reserve(p.nodes.len() + p.inputs.len() + 4);
        pg.order.reserve(p.nodes.len() + p.inputs.len() + 4);
        for &m in &p.nodes {
            for &i in &g.nodes[m].inputs {
                // (A constant is never a member: partitions hold ops only.) A constant the
                // partition does not own is one of its inputs, a placeholder below.
                let lifted = matches!(g.nodes[i].op, Op::Constant { .. }) && !p.inputs.contains(&i);
                if lifted && map[i].is_none() {
                    let k = pg.push(Kind::Param { node: i }, Ins::default(), Cow::Borrowed(&g.nodes[i].spec), 0);
                    pg.order.push(k);
                    map[i] = Some(k);
                }
            }
        }
        for (ext, (&i, &slot)) in p.inputs.iter().zip(slots).enumerate() {
            let k =
                pg.push(Kind::Placeholder { ext, slot, node: i }, Ins::default(), Cow::Borrowed(&g.nodes[i].spec), 0);
            pg.order.push(k);
            map[i] = Some(k);
        }
        pg.num_inputs = p.inputs.len();
        for &m in &p.nodes {
            let mut ins = Ins::default();
            for &i in &g.nodes[m].inputs {
                ins.push(
                    map[i].ok_or_else(|| LowerError::Internal { reason: format!("partition input {i} not mapped") })?,
                );
            }
            let k = pg.push(Kind::Op { node: m }, ins, Cow::Borrowed(&g.nodes[m].spec), plan.debug_handle[m]);
            pg.nodes[k].implicit = plan.implicit[m];
            pg.order.push(k);
            map[m] = Some(k);
        }
        pg.outputs.reserve(p.outputs.len());
        for &o in &p.outputs {
            pg.outputs.push(map[o].ok_or_else(|| LowerError::Internal { reason: format!("output {o} not mapped") })?);
        }
        pg.out_nhwc = p.outputs.iter().map(|&o| eager_nhwc(&g.nodes[o].spec)).collect();
        pg.fuse_activations(g);
        Ok(pg)
    }

    /// `FuseActivationPass` (runs before the layout pass): a relu/hardtanh whose input is
    /// a conv, linear, add, sub or mul read by nothing else becomes that op's output range.
    fn fuse_activations(&mut self, g: &Graph) {
        let order = self.order_snapshot();
        for &a in &order {
            let Some(range) = self.op(a, g).and_then(fuseable_activation) else { continue };
            let Some(&pre) = self.nodes[a].inputs.first() else { continue };
            let fuses = self.op(pre, g).is_some_and(takes_fused_activation)
                && self.nodes[pre].fused.is_none()
                && self.num_users(pre) == 1;
            if fuses {
                self.nodes[pre].fused = Some(range);
                self.replace_all_uses(a, pre);
                self.nodes[a].alive = false;
                self.order.retain(|&x| x != a);
            }
        }
        self.spare = order;
    }
}
