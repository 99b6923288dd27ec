//! Running a compiled segment ([`SegmentPlan`]) as XNNPACK runs a runtime: shapes are
//! propagated and each group's geometry prepared only when the input dims change (XNNPACK's
//! reshape), every other run goes straight to the kernels (its invoke). Outputs are written
//! into buffers the caller owns, so a caller that keeps them (a bound program) allocates
//! nothing per run.

use super::fuse::Group;
use super::kernels::elementwise::Unary;
use super::kernels::mean::MeanPlan;
use super::kernels::norm::{Chain, Norm};
use super::kernels::{self, fused, numel, Ctx, Quant, Scratch, View, ViewMut};
use super::plan::{
    block_view, block_view_mut, checked_numel, infer_shape, Dt, Kernel, Loc, NodePlan, Owned, SegmentPlan,
};
use super::pool::{Pool, FRESH_INLINE_BYTES};
use super::simd::{ChainLayout, Line, Term};
use super::RuntimeError;

/// Mutable per-run state of a segment, reused across runs: intermediate blocks, the value
/// shapes of the last reshape and each group's prepared geometry for them.
#[derive(Debug, Default)]
pub struct SegmentState {
    blocks: Vec<Vec<Line>>,
    shapes: Vec<Vec<usize>>,
    /// The plan whose value dims `shapes` was last reset to (0: none).
    plan: u64,
    /// The input dims `shapes` and `prepared` hold for (each input's rank, then its dims);
    /// `None` until a reshape has succeeded.
    shaped_for: Option<Vec<usize>>,
    /// Per group of the plan: what the last reshape prepared for it.
    prepared: Vec<Prepared>,
    /// Per value: whether the group that last wrote it split across threads (so its
    /// contents are spread over the cores' caches, not in the calling core's).
    split_written: Vec<bool>,
}

impl SegmentState {
    /// Bytes of its intermediate blocks.
    pub fn block_capacity_bytes(&self) -> usize {
        self.blocks.iter().map(|b| b.capacity() * std::mem::size_of::<Line>()).sum()
    }
}

/// A group's geometry for the current shapes (one per group, read at every run: inline,
/// not boxed).
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)]
enum Prepared {
    /// Run node by node (a plain node, or a fused group whose shapes break its condition).
    Nodes,
    /// A single fp32 mean node.
    Mean(MeanPlan),
    /// A fused square and mean, with its tail's layout when it has one.
    SquareMean(MeanPlan, Option<ChainLayout>),
    /// A fused square and mean of fp16/bf16 values, with its tail's layout when it has one.
    SquareMeanNarrow(Option<ChainLayout>),
    /// A fused chain.
    Chain(ChainLayout),
    /// A fused square and mean, its tail's layout, its chain's layout, and its rows
    /// (`(rows, len)`) where it can run block by block of rows: a last-dim mean with one row
    /// per output and the chain's output of `x`'s shape.
    /// Last: the chain's `w` operand where it is RMSNorm's `x * norm * w`
    /// (`norm::scale_rows_operand`).
    Norm(MeanPlan, Option<ChainLayout>, ChainLayout, Option<(usize, usize)>, Option<usize>),
}

/// Most inputs a node reads (a convolution or fully connected node with a bias); `compile`
/// refuses more (`check_types`).
const MAX_NODE_INPUTS: usize = 3;

/// A bound segment input: typed data plus physical dims.
pub struct BoundInput<'a> {
    pub view: View<'a>,
    pub dims: Vec<usize>,
}

/// A segment input borrowed for one run: typed data plus physical dims.
#[derive(Clone, Copy)]
pub struct SegInput<'a> {
    pub view: View<'a>,
    pub dims: &'a [usize],
}

impl SegInput<'_> {
    /// No data: the filler of an input array before it is gathered.
    pub const EMPTY: SegInput<'static> = SegInput { view: View::F32(&[]), dims: &[] };
}

/// Segment inputs for one run, gathered into `few` (on the caller's stack) when there are at
/// most four, else into `many`: no allocation per run for the usual few. Stops at the first
/// error.
#[inline]
pub fn gather_inputs<'a, 'b, E>(
    few: &'b mut [SegInput<'a>; 4],
    many: &'b mut Vec<SegInput<'a>>,
    mut items: impl ExactSizeIterator<Item = Result<SegInput<'a>, E>>,
) -> Result<&'b [SegInput<'a>], E> {
    let n = items.len();
    if n > few.len() {
        *many = items.collect::<Result<_, E>>()?;
        return Ok(many);
    }
    for f in &mut few[..n] {
        if let Some(b) = items.next() {
            *f = b?;
        }
    }
    Ok(&few[..n])
}

/// A produced segment output: typed data and physical dims.
pub struct SegmentOutput {
    pub data: Owned,
    pub dims: Vec<usize>,
}

/// A node's destination, out of its home while the node's inputs are borrowed alongside.
enum Dest {
    Block(usize, Vec<Line>),
    Out(usize, Owned),
}

/// Makes `o` hold exactly `n` elements of `dt`: kept when it already does, otherwise resized
/// (a fresh buffer is zeroed by the pool's threads, where each part is written next).
fn fit_owned(ctx: &Ctx, o: &mut Owned, dt: Dt, n: usize) {
    let fits = super::plan::dt_of_owned(o) == dt;
    let len = o.view().len();
    if fits && len == n {
        return;
    }
    if !fits || len == 0 {
        *o = Owned::zeros_par(ctx.pool, dt, n);
        return;
    }
    match o {
        Owned::F32(v) => v.resize(n, 0.0),
        Owned::F16(v) => v.resize(n, half::f16::ZERO),
        Owned::Bf16(v) => v.resize(n, half::bf16::ZERO),
        Owned::I8(v) => v.resize(n, 0),
        Owned::I32(v) => v.resize(n, 0),
    }
}

/// Puts a destination taken by `SegmentPlan::take_dest` back in its home.
fn put_dest(d: Dest, blocks: &mut [Vec<Line>], outs: &mut [Owned]) {
    match d {
        Dest::Block(b, blk) => blocks[b] = blk,
        Dest::Out(k, o) => outs[k] = o,
    }
}

impl SegmentPlan {
    pub fn new_state(&self) -> SegmentState {
        let mut state = SegmentState::default();
        self.fit_state(&mut state);
        state
    }

    /// Makes `state` (this plan's, or one left by another plan) hold a block of at least each
    /// planned size and a shape per value. Blocks keep their capacity and stale contents: every
    /// node writes its whole output before any node reads it (`compile` checks that values are
    /// defined before they are read), so only growth is zero-filled.
    ///
    /// Shapes are reset to the values' bounds only for a state coming from another plan: in a
    /// run every value's shape is written before it is read (inputs are bound first, node
    /// outputs inferred in node order), except constants', which never change.
    pub fn fit_state(&self, state: &mut SegmentState) {
        // Fitted to this plan by an earlier run, which reshaped it: nothing to grow (blocks
        // only grow here, and another plan's fit would have changed `plan`).
        if state.plan == self.id && state.shaped_for.is_some() {
            return;
        }
        state.blocks.resize_with(self.block_lines.len(), Vec::new);
        for (b, &n) in state.blocks.iter_mut().zip(&self.block_lines) {
            if b.len() < n {
                b.resize(n, Line::default());
            }
        }
        state.split_written.resize(self.values.len(), false);
        if state.plan != self.id || state.shapes.len() != self.values.len() {
            state.shapes.resize_with(self.values.len(), Vec::new);
            for (s, v) in state.shapes.iter_mut().zip(&self.values) {
                s.clone_from(&v.dims);
            }
            state.plan = self.id;
            state.shaped_for = None;
        }
    }

    /// The dims of segment output `k` after a run.
    pub fn output_dims<'s>(&self, state: &'s SegmentState, k: usize) -> &'s [usize] {
        &state.shapes[self.output_values[k]]
    }

    /// Runs the segment into fresh outputs (see [`SegmentPlan::run_into`]).
    pub fn run(
        &self,
        ctx: &Ctx,
        state: &mut SegmentState,
        scratch: &mut Scratch,
        inputs: &[BoundInput],
        step: usize,
    ) -> Result<Vec<SegmentOutput>, RuntimeError> {
        let ins: Vec<SegInput> = inputs.iter().map(|b| SegInput { view: b.view, dims: &b.dims }).collect();
        let mut outs: Vec<Owned> = self.output_values.iter().map(|_| Owned::F32(Vec::new())).collect();
        self.run_into(ctx, state, scratch, &ins, &mut outs, step, true)?;
        Ok(outs
            .into_iter()
            .enumerate()
            .map(|(k, data)| SegmentOutput { data, dims: self.output_dims(state, k).to_vec() })
            .collect())
    }

    /// Runs the segment, writing output `k` into `outs[k]` (resized to the output's type and
    /// size if it does not already have them). `step` labels errors; `fuse` runs the fused
    /// groups as one pass each (off: node by node, the same bits).
    #[allow(clippy::too_many_arguments)]
    pub fn run_into(
        &self,
        ctx: &Ctx,
        state: &mut SegmentState,
        scratch: &mut Scratch,
        inputs: &[SegInput],
        outs: &mut [Owned],
        step: usize,
        fuse: bool,
    ) -> Result<(), RuntimeError> {
        let shape_err = |what: String| RuntimeError::Shape { step, what };
        if inputs.len() != self.input_values.len() || outs.len() != self.output_values.len() {
            return Err(RuntimeError::InvalidProgram(format!(
                "segment {} got {} inputs and {} outputs, needs {} and {}",
                self.segment,
                inputs.len(),
                outs.len(),
                self.input_values.len(),
                self.output_values.len()
            )));
        }
        self.fit_state(state);
        for (k, inp) in inputs.iter().enumerate() {
            let v = &self.values[self.input_values[k]];
            if inp.dims.len() != v.dims.len() || inp.dims.iter().zip(&v.dims).any(|(&a, &b)| a > b || a == 0) {
                return Err(shape_err(format!("input {k} dims {:?} exceed the value's bounds {:?}", inp.dims, v.dims)));
            }
            if inp.view.len() != numel(inp.dims) {
                return Err(shape_err(format!("input {k} holds {} elements for dims {:?}", inp.view.len(), inp.dims)));
            }
        }
        let same = state.shaped_for.as_deref().is_some_and(|key| {
            let mut key = key.iter();
            inputs.iter().all(|i| key.next() == Some(&i.dims.len()) && i.dims.iter().all(|d| key.next() == Some(d)))
        });
        if !same {
            self.reshape(state, inputs, step)?;
        }
        for (k, o) in outs.iter_mut().enumerate() {
            let vi = self.output_values[k];
            fit_owned(ctx, o, self.values[vi].dt, numel(&state.shapes[vi]));
        }
        let SegmentState { blocks, shapes, prepared, split_written, .. } = state;
        for (g, prep) in self.groups.iter().zip(prepared.iter()) {
            let dispatches = ctx.pool.dispatches();
            let r = match (g, prep) {
                (Group::SquareMean { square, tail }, Prepared::SquareMean(mp, lay)) if fuse => {
                    let mean = &self.nodes[square + 1];
                    // With a tail, the mean writes into the tail's output, which the tail's
                    // steps then rewrite in place.
                    let dest = tail.as_ref().map_or(mean, |t| &self.nodes[t.last]);
                    self.with_dest(dest, shapes, blocks, outs, |blocks, outs, out| {
                        let x = self.view_of(self.nodes[*square].inputs[0], inputs, blocks, outs, shapes);
                        let (View::F32(x), ViewMut::F32(o)) = (x, out) else {
                            return Err("fused square and mean on non-fp32 values".into());
                        };
                        let mut views = [&[][..]; super::simd::CHAIN_ARGS];
                        if let Some(t) = tail {
                            self.f32_views(&t.args, inputs, blocks, outs, shapes, &mut views)?;
                        }
                        let tail = tail.as_ref().zip(lay.as_ref()).map(|(t, lay)| Chain {
                            steps: &t.steps,
                            lay,
                            args: &views[..t.args.len()],
                        });
                        kernels::norm::square_mean(ctx, x, mp, mean.act, tail, o)
                    })
                    .map_err(|e| shape_err(format!("node {} (square and mean): {e}", mean.index)))
                }
                (Group::SquareMean { square, tail }, Prepared::SquareMeanNarrow(lay)) if fuse => {
                    let mean = &self.nodes[square + 1];
                    let xi = self.nodes[*square].inputs[0];
                    let dest = tail.as_ref().map_or(mean, |t| &self.nodes[t.last]);
                    self.with_dest(dest, shapes, blocks, outs, |blocks, outs, out| {
                        let Kernel::Mean { axes, .. } = &mean.kernel else {
                            return Err("fused square and mean without a mean".into());
                        };
                        let x = self.view_of(xi, inputs, blocks, outs, shapes);
                        let (t, lay) = match (tail, lay) {
                            (None, _) => {
                                return kernels::mean::mean_of_squares_narrow(ctx, x, &shapes[xi], axes, out, scratch)
                            }
                            (Some(t), Some(lay)) => (t, lay),
                            // `prepare` runs such a group node by node: the mean alone would
                            // write the tail's output.
                            (Some(_), None) => return Err("fused square and mean with a tail but no layout".into()),
                        };
                        // The means in f32, rounded to the mean node's type (its output, widened),
                        // the tail's steps (which round after each node) over them in place, then
                        // narrowed into the tail's output: exact, as they are rounded already.
                        let to = kernels::mean::narrow_pair(x, &out)?;
                        let Scratch { a, b, wide, .. } = scratch;
                        if wide.len() < t.args.len() {
                            wide.resize_with(t.args.len(), Vec::new);
                        }
                        let mut views = [&[][..]; super::simd::CHAIN_ARGS];
                        for ((d, w), &v) in views.iter_mut().zip(wide.iter_mut()).zip(&t.args) {
                            *d = kernels::convert::to_f32(ctx, self.view_of(v, inputs, blocks, outs, shapes), w)?;
                        }
                        let n_out = out.len();
                        let m = kernels::mean::mean_of_squares_f32(ctx, x, &shapes[xi], axes, to, n_out, a, b)?;
                        super::simd::round_to(ctx.isa, to, m);
                        fused::run_chain(ctx, &t.steps, lay, &views[..t.args.len()], m);
                        kernels::convert::from_f32(ctx, m, out)
                    })
                    .map_err(|e| shape_err(format!("node {} (square and mean): {e}", mean.index)))
                }
                (Group::Norm { square, tail, apply }, Prepared::Norm(mp, tail_lay, lay, rows, scale_rows)) if fuse => {
                    let mean = &self.nodes[square + 1];
                    let (norm_node, out_node) = (&self.nodes[apply.first - 1], &self.nodes[apply.last]);
                    let xi = self.nodes[*square].inputs[0];
                    self.with_dests([norm_node, out_node], shapes, blocks, outs, |blocks, outs, r, o| {
                        let x = self.view_of(xi, inputs, blocks, outs, shapes);
                        let (View::F32(x), ViewMut::F32(r), ViewMut::F32(o)) = (x, r, o) else {
                            return Err("fused norm on non-fp32 values".into());
                        };
                        // On `x` just written inline (a qs8 RMSNorm's dequantized input) the
                        // group stays on this core, as a chain does.
                        let ctx = &self.fresh_ctx(ctx, &[xi], x.len(), split_written);
                        let mut tail_views = [&[][..]; super::simd::CHAIN_ARGS];
                        if let Some(t) = tail {
                            self.f32_views(&t.args, inputs, blocks, outs, shapes, &mut tail_views)?;
                        }
                        let tail = tail.as_ref().zip(tail_lay.as_ref()).map(|(t, lay)| Chain {
                            steps: &t.steps,
                            lay,
                            args: &tail_views[..t.args.len()],
                        });
                        // Every operand of the chain but the norm, which is being written.
                        let norm_v = norm_node.output;
                        let norm_arg =
                            apply.args.iter().position(|&a| a == norm_v).ok_or("norm chain without its norm")?;
                        let mut views = [&[][..]; super::simd::CHAIN_ARGS];
                        for (d, &a) in views.iter_mut().zip(&apply.args).filter(|(_, &a)| a != norm_v) {
                            let View::F32(v) = self.view_of(a, inputs, blocks, outs, shapes) else {
                                return Err("fused norm on a non-fp32 operand".into());
                            };
                            *d = v;
                        }
                        let k = apply.args.len();
                        // Block by block of rows where the mean's rows are not split across
                        // threads (else the groups one after the other).
                        let rows = rows.filter(|&(rows, _)| !kernels::mean::splits_rows(ctx, rows, x.len() * 4));
                        if let Some((_, len)) = rows {
                            let apply = Chain { steps: &apply.steps, lay, args: &views[..k] };
                            let (scale, act, scale_rows) = (mp.scale(), mean.act, *scale_rows);
                            let n = Norm { x, len, scale, act, tail, apply, norm_arg, scale_rows };
                            kernels::norm::run(ctx, &n, r, o);
                            return Ok(());
                        }
                        kernels::norm::square_mean(ctx, x, mp, mean.act, tail, r)?;
                        views[norm_arg] = r;
                        fused::run_chain(ctx, &apply.steps, lay, &views[..k], o);
                        Ok(())
                    })
                    .map_err(|e| shape_err(format!("node {} (norm): {e}", mean.index)))
                }
                (Group::QuantRoundTrip(i), _) if fuse => {
                    let (qn, dn) = (&self.nodes[*i], &self.nodes[i + 1]);
                    self.with_dest(dn, shapes, blocks, outs, |blocks, outs, out| {
                        let x = self.view_of(qn.inputs[0], inputs, blocks, outs, shapes);
                        let (to, back) = (self.convert_quant(qn), self.convert_quant(dn));
                        let (View::F32(x), ViewMut::F32(o), Some(to), Some(back)) = (x, out, to, back) else {
                            return Err("quantize and dequantize without f32 ends or parameters".into());
                        };
                        kernels::convert::quantize_round_trip(ctx, x, to, back, o)
                    })
                    .map_err(|e| shape_err(format!("node {} (quantize and dequantize): {e}", qn.index)))
                }
                (Group::Chain { last, steps, args, .. }, Prepared::Chain(lay)) if fuse => {
                    let n = &self.nodes[*last];
                    self.with_dest(n, shapes, blocks, outs, |blocks, outs, out| {
                        let k = args.len();
                        let out = match out {
                            ViewMut::F32(o) => {
                                let mut views = [&[][..]; super::simd::CHAIN_ARGS];
                                self.f32_views(args, inputs, blocks, outs, shapes, &mut views)?;
                                let ctx = &self.fresh_ctx(ctx, args, o.len(), split_written);
                                fused::run_chain(ctx, steps, lay, &views[..k], o);
                                return Ok(());
                            }
                            o => o,
                        };
                        let mut views: [&[f32]; super::simd::CHAIN_ARGS] = [&[]; super::simd::CHAIN_ARGS];
                        // fp16/bf16 operands: those of the output's size widened tile by tile
                        // in the chain, the others (broadcast, small) here.
                        let n_out = numel(&shapes[n.output]);
                        let wide = &mut scratch.wide;
                        if wide.len() < args.len() {
                            wide.resize_with(args.len(), Vec::new);
                        }
                        let mut dense: [Option<View>; super::simd::CHAIN_ARGS] = [None; super::simd::CHAIN_ARGS];
                        for ((w, d), &a) in wide.iter_mut().zip(dense.iter_mut()).zip(args) {
                            match self.view_of(a, inputs, blocks, outs, shapes) {
                                View::F32(_) => {}
                                v @ (View::F16(_) | View::Bf16(_)) if v.len() == n_out => *d = Some(v),
                                v => {
                                    kernels::convert::to_f32(ctx, v, w)?;
                                }
                            }
                        }
                        for (((d, &a), w), dn) in views.iter_mut().zip(args).zip(&scratch.wide).zip(&dense) {
                            *d = match self.view_of(a, inputs, blocks, outs, shapes) {
                                View::F32(v) => v,
                                _ if dn.is_some() => &[],
                                v @ (View::F16(_) | View::Bf16(_)) => &w[..v.len()],
                                _ => return Err("fused chain on a non-float operand".into()),
                            };
                        }
                        fused::run_chain_narrow(ctx, steps, lay, &views[..k], &dense[..k], out)
                    })
                    .map_err(|e| shape_err(format!("node {} (fused chain): {e}", n.index)))
                }
                _ => {
                    let (first, last) = g.span();
                    let mp = match prep {
                        Prepared::Mean(mp) => Some(mp),
                        _ => None,
                    };
                    (first..=last).try_for_each(|i| {
                        let n = &self.nodes[i];
                        self.with_dest(n, shapes, blocks, outs, |blocks, outs, out| {
                            let mut ins: [View; MAX_NODE_INPUTS] = [View::F32(&[]); MAX_NODE_INPUTS];
                            let mut in_shapes: [&[usize]; MAX_NODE_INPUTS] = [&[]; MAX_NODE_INPUTS];
                            for (k, &v) in n.inputs.iter().enumerate() {
                                ins[k] = self.view_of(v, inputs, blocks, outs, shapes);
                                in_shapes[k] = &shapes[v];
                            }
                            let k = n.inputs.len();
                            self.exec(ctx, n, &ins[..k], &in_shapes[..k], out, &shapes[n.output], mp, scratch)
                        })
                        .map_err(|e| shape_err(format!("node {} ({:?}): {e}", n.index, n.kernel)))
                    })
                }
            };
            r?;
            let (first, last) = g.span();
            let split = ctx.pool.dispatches() != dispatches;
            for n in &self.nodes[first..=last] {
                split_written[n.output] = split;
            }
        }
        Ok(())
    }

    /// Propagates shapes from the inputs' dims through every node and prepares each group's
    /// geometry (XNNPACK's reshape). Runs when the input dims differ from the last run's.
    fn reshape(&self, state: &mut SegmentState, inputs: &[SegInput], step: usize) -> Result<(), RuntimeError> {
        let shape_err = |what: String| RuntimeError::Shape { step, what };
        state.shaped_for = None;
        let SegmentState { shapes, prepared, shaped_for, .. } = state;
        for (k, inp) in inputs.iter().enumerate() {
            shapes[self.input_values[k]].clear();
            shapes[self.input_values[k]].extend_from_slice(inp.dims);
        }
        for n in &self.nodes {
            if n.inputs.len() > MAX_NODE_INPUTS || n.inputs.is_empty() {
                return Err(shape_err(format!("node {} reads {} values", n.index, n.inputs.len())));
            }
            // The output's shape buffer, out of the table while the inputs' shapes are borrowed
            // (a node never reads its own output: `compile` checks it).
            let mut oshape = std::mem::take(&mut shapes[n.output]);
            let mut in_shapes: [&[usize]; MAX_NODE_INPUTS] = [&[]; MAX_NODE_INPUTS];
            for (d, &i) in in_shapes.iter_mut().zip(&n.inputs) {
                *d = &shapes[i];
            }
            let in_shapes = &in_shapes[..n.inputs.len()];
            let w_dims = n.inputs.get(1).map(|&i| shapes[i].as_slice());
            let r = infer_shape(&n.kernel, in_shapes, w_dims, numel(in_shapes[0]), &mut oshape)
                .map_err(|e| shape_err(format!("node {} ({:?}): {e}", n.index, n.kernel)));
            let on = checked_numel(&oshape).unwrap_or(usize::MAX);
            shapes[n.output] = oshape;
            r?;
            let ov = &self.values[n.output];
            if on > ov.max_numel {
                return Err(shape_err(format!(
                    "node {}: output {:?} above the value's bounds {:?}",
                    n.index, shapes[n.output], ov.dims
                )));
            }
        }
        prepared.clear();
        for g in &self.groups {
            prepared.push(self.prepare(g, shapes));
        }
        let mut key = Vec::new();
        for inp in inputs {
            key.push(inp.dims.len());
            key.extend_from_slice(inp.dims);
        }
        *shaped_for = Some(key);
        Ok(())
    }

    /// A group's geometry for the current shapes.
    fn prepare(&self, g: &Group, shapes: &[Vec<usize>]) -> Prepared {
        let f32_mean = |n: &NodePlan| match &n.kernel {
            Kernel::Mean { axes, .. }
                if self.values[n.inputs[0]].dt == Dt::F32 && self.values[n.output].dt == Dt::F32 =>
            {
                Some(MeanPlan::new(&shapes[n.inputs[0]], axes))
            }
            _ => None,
        };
        match g {
            Group::Node(i) => f32_mean(&self.nodes[*i]).map_or(Prepared::Nodes, Prepared::Mean),
            Group::SquareMean { square, tail } => match (f32_mean(&self.nodes[square + 1]), tail) {
                (Some(mp), None) => Prepared::SquareMean(mp, None),
                (Some(mp), Some(t)) => match self.chain_layout(square + 1, t.last, &t.args, shapes) {
                    Some(lay) => Prepared::SquareMean(mp, Some(lay)),
                    None => Prepared::Nodes,
                },
                (None, None) => Prepared::SquareMeanNarrow(None),
                (None, Some(t)) => match self.chain_layout(square + 1, t.last, &t.args, shapes) {
                    Some(lay) => Prepared::SquareMeanNarrow(Some(lay)),
                    None => Prepared::Nodes,
                },
            },
            Group::Chain { first, last, args, .. } => {
                self.chain_layout(*first, *last, args, shapes).map_or(Prepared::Nodes, Prepared::Chain)
            }
            // No geometry: one elementwise pass.
            Group::QuantRoundTrip(_) => Prepared::Nodes,
            Group::Norm { square, tail, apply } => {
                let tail_lay = match tail {
                    Some(t) => match self.chain_layout(square + 1, t.last, &t.args, shapes) {
                        Some(l) => Some(l),
                        None => return Prepared::Nodes,
                    },
                    None => None,
                };
                match (
                    f32_mean(&self.nodes[square + 1]),
                    self.chain_layout(apply.first, apply.last, &apply.args, shapes),
                ) {
                    (Some(mp), Some(lay)) => {
                        let (norm, out) = (self.nodes[apply.first - 1].output, self.nodes[apply.last].output);
                        let x = self.nodes[*square].inputs[0];
                        let rows = mp
                            .r
                            .last_dim_rows()
                            .filter(|&(rows, len)| rows == numel(&shapes[norm]) && len > 0 && shapes[out] == shapes[x]);
                        let scale_rows = kernels::norm::scale_rows_operand(&apply.steps, &apply.args, &lay, x, norm)
                            .filter(|_| rows.is_some_and(|(_, len)| lay.dims[lay.rank - 1] == len));
                        Prepared::Norm(mp, tail_lay, lay, rows, scale_rows)
                    }
                    _ => Prepared::Nodes,
                }
            }
        }
    }

    /// The layout of nodes `first..=last` run as one elementwise pass over operands `args`
    /// on this run's shapes; `None` where the shapes break the condition: every intermediate
    /// must have the output's shape (a broadcast inside the chain would run an op per output
    /// element that the unfused plan runs per input element: different work).
    fn chain_layout(&self, first: usize, last: usize, args: &[usize], shapes: &[Vec<usize>]) -> Option<ChainLayout> {
        let out = &shapes[self.nodes[last].output];
        let same = (first..last).all(|i| shapes[self.nodes[i].output] == *out);
        let arg_shapes: Vec<&[usize]> = args.iter().map(|&a| shapes[a].as_slice()).collect();
        fused::chain_layout(out, &arg_shapes).filter(|_| same)
    }

    /// The contents of fp32 values `args` (a fused fp32 group's operands: `fuse` groups one
    /// type).
    fn f32_views<'a>(
        &'a self,
        args: &[usize],
        inputs: &[SegInput<'a>],
        blocks: &'a [Vec<Line>],
        outs: &'a [Owned],
        shapes: &[Vec<usize>],
        views: &mut [&'a [f32]; super::simd::CHAIN_ARGS],
    ) -> Result<(), &'static str> {
        for (d, &a) in views.iter_mut().zip(args) {
            let View::F32(v) = self.view_of(a, inputs, blocks, outs, shapes) else {
                return Err("fused fp32 group on a non-fp32 operand");
            };
            *d = v;
        }
        Ok(())
    }

    /// The context of a group of `n` f32 outputs over operands `args`: `ctx`, or one without
    /// workers where an operand of its size was written inline earlier in this run and is
    /// small enough to still be in this core's cache ([`FRESH_INLINE_BYTES`]).
    fn fresh_ctx<'p>(&self, ctx: &Ctx<'p>, args: &[usize], n: usize, split_written: &[bool]) -> Ctx<'p> {
        let fresh = n * 4 < FRESH_INLINE_BYTES
            && args.iter().any(|&a| {
                let v = &self.values[a];
                matches!(v.loc, Loc::Block(_) | Loc::Output(_)) && v.max_numel >= n && !split_written[a]
            });
        if fresh {
            Ctx { isa: ctx.isa, pool: Pool::serial() }
        } else {
            *ctx
        }
    }

    /// The quantization a convert node uses: its input's, else its output's.
    fn convert_quant(&self, n: &NodePlan) -> Option<Quant> {
        self.values[n.inputs[0]].quant.or(self.values[n.output].quant)
    }

    /// The current contents of value `vi`.
    fn view_of<'a>(
        &'a self,
        vi: usize,
        inputs: &[SegInput<'a>],
        blocks: &'a [Vec<Line>],
        outs: &'a [Owned],
        shapes: &[Vec<usize>],
    ) -> View<'a> {
        let v = &self.values[vi];
        match v.loc {
            Loc::Input(k) => inputs[k].view,
            Loc::Const(c) => self.consts[c].view(),
            Loc::Block(b) => block_view(&blocks[b], v.dt, numel(&shapes[vi])),
            Loc::Output(k) => outs[k].view(),
            Loc::Unused => View::F32(&[]),
        }
    }

    /// Runs `f` with node `n`'s destination taken out of its home (so the node's inputs can
    /// be borrowed alongside), then puts it back.
    fn with_dest(
        &self,
        n: &NodePlan,
        shapes: &[Vec<usize>],
        blocks: &mut [Vec<Line>],
        outs: &mut [Owned],
        f: impl FnOnce(&[Vec<Line>], &[Owned], ViewMut) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut dest = self.take_dest(n, blocks, outs)?;
        let r = f(blocks, outs, self.dest_view(&mut dest, n, shapes));
        put_dest(dest, blocks, outs);
        r
    }

    /// [`SegmentPlan::with_dest`] for two nodes at once (their values in different homes).
    fn with_dests(
        &self,
        [n, m]: [&NodePlan; 2],
        shapes: &[Vec<usize>],
        blocks: &mut [Vec<Line>],
        outs: &mut [Owned],
        f: impl FnOnce(&[Vec<Line>], &[Owned], ViewMut, ViewMut) -> Result<(), String>,
    ) -> Result<(), String> {
        let (a, b) = (self.values[n.output].loc, self.values[m.output].loc);
        if a == b {
            return Err(format!("nodes {} and {} write the same buffer", n.index, m.index));
        }
        let mut dn = self.take_dest(n, blocks, outs)?;
        let mut dm = match self.take_dest(m, blocks, outs) {
            Ok(d) => d,
            Err(e) => {
                put_dest(dn, blocks, outs);
                return Err(e);
            }
        };
        let r = f(blocks, outs, self.dest_view(&mut dn, n, shapes), self.dest_view(&mut dm, m, shapes));
        put_dest(dm, blocks, outs);
        put_dest(dn, blocks, outs);
        r
    }

    /// Node `n`'s destination, out of its home.
    fn take_dest(&self, n: &NodePlan, blocks: &mut [Vec<Line>], outs: &mut [Owned]) -> Result<Dest, String> {
        match self.values[n.output].loc {
            Loc::Block(b) => Ok(Dest::Block(b, std::mem::take(&mut blocks[b]))),
            Loc::Output(k) => Ok(Dest::Out(k, std::mem::replace(&mut outs[k], Owned::F32(Vec::new())))),
            _ => Err(format!("node {} writes a read-only value", n.index)),
        }
    }

    /// Node `n`'s output elements in its taken destination.
    fn dest_view<'d>(&self, d: &'d mut Dest, n: &NodePlan, shapes: &[Vec<usize>]) -> ViewMut<'d> {
        let ov = &self.values[n.output];
        // At most the value's bound (checked by `reshape`), which its block or buffer holds.
        let on = numel(&shapes[n.output]);
        match d {
            Dest::Block(_, b) => block_view_mut(b, ov.dt, on),
            Dest::Out(_, o) => o.view_mut().prefix(on),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn exec(
        &self,
        ctx: &Ctx,
        n: &NodePlan,
        ins: &[View],
        in_shapes: &[&[usize]],
        out: ViewMut,
        oshape: &[usize],
        mean_plan: Option<&MeanPlan>,
        scratch: &mut Scratch,
    ) -> Result<(), String> {
        let qpair =
            || -> Option<(Quant, Quant)> { Some((self.values[n.inputs[0]].quant?, self.values[n.output].quant?)) };
        // An int8 operand's quantization (the int8 kernels need every one).
        let q = |i: usize| self.values[i].quant.ok_or("int8 value without quantization");
        let x_n = numel(in_shapes[0]);
        let x = ins[0].prefix(x_n.min(ins[0].len()));
        if x.len() != x_n {
            return Err(format!("input holds {} elements for dims {:?}", x.len(), in_shapes[0]));
        }
        // Kernels without a fused output range get a clamp pass after them (XNNPACK appends a
        // clamp node for GAP and static reduce with a finite range).
        let post_clamp = matches!(
            n.kernel,
            Kernel::Convert
                | Kernel::Gap { .. }
                | Kernel::Mean { .. }
                | Kernel::Transpose { .. }
                | Kernel::Reshape { .. }
        );
        let (out, clamp_after) = match (n.act, post_clamp, out) {
            (Some(r), true, ViewMut::F32(o)) => (ViewMut::F32(o), Some(r)),
            (Some(_), true, _) => return Err("an output range on a non-fp32 reduction or copy".into()),
            (_, _, o) => (o, None),
        };
        let mut out = out;
        let out_re = match &mut out {
            ViewMut::F32(o) => ViewMut::F32(o),
            ViewMut::F16(o) => ViewMut::F16(o),
            ViewMut::Bf16(o) => ViewMut::Bf16(o),
            ViewMut::I8(o) => ViewMut::I8(o),
            ViewMut::I32(o) => ViewMut::I32(o),
        };
        match &n.kernel {
            Kernel::Binary(op) if matches!(out_re, ViewMut::I8(_)) => {
                let b = ins[1].prefix(numel(in_shapes[1]).min(ins[1].len()));
                let (qa, qb, qo) = (q(n.inputs[0])?, q(n.inputs[1])?, q(n.output)?);
                match (x, b, out_re) {
                    (View::I8(a), View::I8(b), ViewMut::I8(o)) => kernels::qs8::binary(
                        ctx,
                        *op,
                        (a, qa),
                        in_shapes[0],
                        (b, qb),
                        in_shapes[1],
                        (o, qo),
                        oshape,
                        n.act,
                        scratch,
                    ),
                    _ => Err("qs8 binary op on non-int8 operands".into()),
                }
            }
            Kernel::Conv(g) if matches!(out_re, ViewMut::I8(_)) => {
                let (qx, qw, qo) = (q(n.inputs[0])?, q(n.inputs[1])?, q(n.output)?);
                let bias = match ins.get(2) {
                    None => None,
                    Some(View::I32(b)) => Some(*b),
                    Some(_) => return Err("qs8 convolution bias must be int32".into()),
                };
                match (x, ins[1], out_re) {
                    (View::I8(xv), View::I8(w), ViewMut::I8(o)) => {
                        kernels::qs8::conv2d(ctx, g, (xv, qx), in_shapes[0], (w, qw), bias, (o, qo), oshape, n.act)
                    }
                    _ => Err("qs8 convolution on non-int8 operands".into()),
                }
            }
            Kernel::Binary(op) => {
                let b = ins[1].prefix(numel(in_shapes[1]).min(ins[1].len()));
                kernels::elementwise::binary(ctx, *op, x, in_shapes[0], b, in_shapes[1], out_re, oshape, n.act, scratch)
            }
            Kernel::Unary(Unary::Copy) if matches!(out_re, ViewMut::I8(_)) => match (x, out_re) {
                (View::I8(xv), ViewMut::I8(o)) => {
                    kernels::qs8::clamp(ctx, (xv, q(n.inputs[0])?), (o, q(n.output)?), n.act, scratch)
                }
                _ => Err("qs8 clamp of a non-int8 operand".into()),
            },
            Kernel::Unary(f) => kernels::elementwise::unary(ctx, *f, x, out_re, n.act, scratch),
            Kernel::Convert => kernels::convert::convert(ctx, x, out_re, self.convert_quant(n)),
            Kernel::Gap { .. } => kernels::gap::gap_nhwc(ctx, x, in_shapes[0], out_re, qpair(), scratch),
            Kernel::Mean { axes, .. } => match (mean_plan, x, out_re) {
                (Some(mp), View::F32(xf), ViewMut::F32(o)) => {
                    kernels::mean::mean_f32_planned(ctx, xf, mp, Term::Value, o)
                }
                (_, x, o) => kernels::mean::mean(ctx, x, in_shapes[0], axes, o, qpair(), scratch),
            },
            Kernel::Transpose { perm } => kernels::transpose::transpose(ctx, x, in_shapes[0], perm, out_re),
            Kernel::Reshape { .. } => kernels::copy(x, out_re),
            Kernel::Conv(g) => kernels::conv::conv2d(
                ctx,
                g,
                x,
                in_shapes[0],
                ins[1],
                n.packed.as_deref(),
                ins.get(2).copied(),
                out_re,
                oshape,
                n.act,
                scratch,
            ),
            Kernel::FullyConnected { transpose_weights } => {
                let w = in_shapes[1];
                let (nn, k) = if *transpose_weights { (w[1], w[0]) } else { (w[0], w[1]) };
                let m = x_n / k.max(1);
                let b = ins.get(2).copied();
                kernels::linear::fully_connected(
                    ctx,
                    x,
                    m,
                    k,
                    ins[1],
                    n.packed.as_deref(),
                    nn,
                    *transpose_weights,
                    b,
                    out_re,
                    n.act,
                    scratch,
                )
            }
        }?;
        if let (Some((lo, hi)), ViewMut::F32(o)) = (clamp_after, out) {
            kernels::elementwise::clamp_f32(ctx, o, lo, hi);
        }
        Ok(())
    }
}
