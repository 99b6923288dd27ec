//! Running a program's steps over its slots: delegate segments on this runtime's plans (or
//! another engine's executor) and portable ops, each output settled into its slot.

use super::super::exec::{gather_inputs, SegInput};
use super::super::kernels::{portable, Ctx};
use super::super::plan::{BoundInput, Owned, ValuePlan};
use super::super::RuntimeError;
use super::handoff::{dim_order, owned_of, tensor_data, view_of, IDENTITY};
use super::{ExecStep, Home, Program, RunState, SegmentExecutor};
use crate::program::SlotId;
use reference::{Tensor, TensorData};

impl Program {
    /// Runs every step on `inputs` (checked), writing every written slot's tensor in `state`;
    /// delegate segments on `exec` where one is given, else on this runtime's plans.
    pub(in crate::runtime) fn execute(
        &self,
        state: &mut RunState,
        inputs: &[Tensor],
        mut exec: Option<&mut dyn SegmentExecutor>,
    ) -> Result<(), RuntimeError> {
        self.fit(state);
        state.run += 1;
        let ctx = Ctx { isa: self.isa, pool: &self.pool };
        let RunState { segments, scratch, written, written_in, run, seg_dims, seg_outs } = state;
        let run = *run;
        let mut seg_i = 0;
        for (i, st) in self.l.steps.iter().enumerate() {
            let missing =
                |s: SlotId| RuntimeError::InvalidProgram(format!("step {i} reads slot {s} before it is written"));
            match st {
                ExecStep::Delegate { plan, inputs: ins, outputs: outs } => {
                    // Output buffers first: the last run's tensors (the step never reads them).
                    let bufs = &mut seg_outs[seg_i];
                    bufs.clear();
                    for &s in outs {
                        let Home::Written(w) = self.l.homes[s] else { unreachable!("`with_pool` checked") };
                        let data =
                            written[w].as_mut().map(|t| std::mem::replace(&mut t.data, TensorData::F32(Vec::new())));
                        bufs.push(data.map_or(Owned::F32(Vec::new()), owned_of));
                    }
                    let dims = &mut seg_dims[seg_i];
                    dims.resize_with(ins.len(), Vec::new);
                    for (k, (&s, &vi)) in ins.iter().zip(&plan.input_values).enumerate() {
                        let t = self.slot(s, inputs, written, written_in, run).ok_or_else(|| missing(s))?;
                        self.handoff_dims(s, t, &plan.values[vi], &mut dims[k]);
                    }
                    if let Some(e) = exec.as_deref_mut() {
                        // Another engine runs the segment: bound inputs as this runtime's plan
                        // would get them, its outputs settled into the slots as ours are.
                        let mut bound = Vec::with_capacity(ins.len());
                        for (k, &s) in ins.iter().enumerate() {
                            let t = self.slot(s, inputs, written, written_in, run).ok_or_else(|| missing(s))?;
                            bound.push(BoundInput { view: view_of(t), dims: dims[k].clone() });
                        }
                        let produced = e.run_segment(seg_i, &bound, bufs)?;
                        drop(bound);
                        if produced.len() != outs.len() {
                            return Err(RuntimeError::InvalidProgram(format!(
                                "step {i}: the segment executor returned {} outputs for {}",
                                produced.len(),
                                outs.len()
                            )));
                        }
                        for (o, &s) in produced.into_iter().zip(outs) {
                            let Home::Written(w) = self.l.homes[s] else { unreachable!("`with_pool` checked") };
                            self.settle(&ctx, i, s, o.data, &o.dims, &mut written[w])?;
                            written_in[w] = run;
                        }
                        seg_i += 1;
                        continue;
                    }
                    let (mut few, mut many) = ([SegInput::EMPTY; 4], Vec::new());
                    let items = ins.iter().zip(dims.iter()).map(|(&s, d)| {
                        let t = self.slot(s, inputs, written, written_in, run).ok_or_else(|| missing(s))?;
                        Ok(SegInput { view: view_of(t), dims: d })
                    });
                    let seg_inputs = gather_inputs(&mut few, &mut many, items)?;
                    plan.run_into(&ctx, &mut segments[seg_i], scratch, seg_inputs, bufs, i, self.opts.fuse)?;
                    for (k, &s) in outs.iter().enumerate() {
                        let Home::Written(w) = self.l.homes[s] else { unreachable!("`with_pool` checked") };
                        let data = std::mem::replace(&mut bufs[k], Owned::F32(Vec::new()));
                        self.settle(&ctx, i, s, data, plan.output_dims(&segments[seg_i], k), &mut written[w])?;
                        written_in[w] = run;
                    }
                    seg_i += 1;
                }
                ExecStep::Portable(p) => {
                    let ins: Vec<&Tensor> = p
                        .inputs
                        .iter()
                        .map(|&s| self.slot(s, inputs, written, written_in, run).ok_or_else(|| missing(s)))
                        .collect::<Result<_, _>>()?;
                    let t = portable::run(&p.op, &ins, &self.l.slots[p.output])
                        .map_err(|what| RuntimeError::Shape { step: i, what })?;
                    let Home::Written(w) = self.l.homes[p.output] else { unreachable!("`with_pool` checked") };
                    written[w] = Some(t);
                    written_in[w] = run;
                }
            }
        }
        Ok(())
    }

    /// Slot `s`'s tensor in the run in progress, if it has one.
    fn slot<'a>(
        &'a self,
        s: SlotId,
        inputs: &'a [Tensor],
        written: &'a [Option<Tensor>],
        written_in: &[u64],
        run: u64,
    ) -> Option<&'a Tensor> {
        match self.l.homes[s] {
            Home::Input(k) => inputs.get(k),
            Home::Const(c) => Some(&self.l.constants[c].1),
            Home::Written(w) if written_in[w] == run => written[w].as_ref(),
            Home::Written(_) | Home::None => None,
        }
    }

    /// The dims slot `s` (read as `t`) is handed to a segment with, into `d`: the tensor's dims
    /// in the slot's hand-off order, or the segment value's own where ExecuTorch serializes a
    /// 0-D value as [1] (`with_pool` accepted only rank changes between static values of
    /// equal size).
    pub(super) fn handoff_dims(&self, s: SlotId, t: &Tensor, v: &ValuePlan, d: &mut Vec<usize>) {
        d.clear();
        if t.rank() != v.dims.len() && t.numel() == v.max_numel && !self.l.slots[s].is_dynamic() {
            d.extend_from_slice(&v.dims);
        } else {
            let ord = &self.l.orders[s];
            let ord = if ord.len() == t.rank() { ord.as_slice() } else { &IDENTITY[..t.rank().min(8)] };
            d.extend(ord.iter().map(|&o| t.shape[o]));
        }
    }

    /// Where segment output dims `dims` put slot `s`'s data: its logical shape written into
    /// `shape`, and the format's dim order when the data is logical row-major and must be laid
    /// out in the slot's format (`None`: the bytes are the slot's as they are). ExecuTorch
    /// hands XNNPACK dims in the tensor's dim order, so the dims are normally physical; the
    /// layout pass may also produce an NCHW value for a slot tagged channels_last (harmless in
    /// ExecuTorch when H = W = 1, where both orders share bytes).
    pub(super) fn settled_shape(
        &self,
        s: SlotId,
        dims: &[usize],
        shape: &mut Vec<usize>,
    ) -> Result<Option<Vec<usize>>, String> {
        let spec = &self.l.slots[s];
        let ord = &self.l.orders[s];
        let ord = if ord.len() == dims.len() { ord.as_slice() } else { &IDENTITY[..dims.len().min(8)] };
        shape.clear();
        shape.resize(dims.len(), 0);
        for (pos, &d) in ord.iter().enumerate() {
            shape[d] = dims[pos];
        }
        if dims.len() == spec.rank() && spec.check_shape(shape).is_ok() {
            // Physical dims: the data is already in the slot's layout.
            return Ok(None);
        }
        let lay_out = if dims.len() == spec.rank() && spec.check_shape(dims).is_ok() {
            // Logical row-major data: lay it out in the slot's format.
            shape.copy_from_slice(dims);
            let fmt_ord = dim_order(spec.format, dims.len());
            let identity = fmt_ord.iter().enumerate().all(|(i, &d)| i == d);
            (!identity).then_some(fmt_ord)
        } else if !spec.is_dynamic() && dims.iter().product::<usize>() == spec.max_numel() {
            // XNNPACK declares a 0-D value as [1]; the slot keeps the graph's rank.
            *shape = spec.max_shape();
            None
        } else {
            return Err(format!("slot {s}: segment produced dims {dims:?} for shape {:?}", spec.max_shape()));
        };
        spec.check_shape(shape).map_err(|e| format!("slot {s}: {e}"))?;
        Ok(lay_out)
    }

    /// Makes segment output `data` (dims as the segment produced them) the tensor of slot `s`
    /// in `dest` (logical shape, slot format; see [`Program::settled_shape`]), reusing
    /// `dest`'s shape buffer.
    fn settle(
        &self,
        ctx: &Ctx,
        step: usize,
        s: SlotId,
        mut data: Owned,
        dims: &[usize],
        dest: &mut Option<Tensor>,
    ) -> Result<(), RuntimeError> {
        let spec = &self.l.slots[s];
        let err = |what: String| RuntimeError::Shape { step, what };
        let mut shape = dest.take().map(|t| t.shape).unwrap_or_default();
        if let Some(fmt_ord) = self.settled_shape(s, dims, &mut shape).map_err(err)? {
            let mut moved = Owned::zeros(super::super::plan::dt_of_owned(&data), dims.iter().product());
            super::super::kernels::transpose::transpose(ctx, data.view(), dims, &fmt_ord, moved.view_mut())
                .map_err(|e| err(format!("slot {s}: {e}")))?;
            data = moved;
        }
        let data = tensor_data(data, spec.dtype)
            .ok_or_else(|| err(format!("slot {s}: segment output type differs from {}", spec.dtype)))?;
        *dest = Some(Tensor { shape, format: spec.format, quant: spec.quant, data });
        Ok(())
    }
}
