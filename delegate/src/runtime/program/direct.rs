//! The bound fast path: a program that is one delegate segment from graph inputs (and
//! constants) to graph outputs, the usual shape of a delegated program, runs that segment
//! straight on the bound tensors. Its hand-off is resolved once at bind time (each input's
//! dims, each output's bound tensor), so an invoke does what XNNPACK's `xnn_invoke_runtime`
//! does: the kernels, over buffers that were set up before. Same plan, same kernels, same
//! bits as the step loop (`Program::execute`), without its per-run slot bookkeeping.

use super::super::exec::{gather_inputs, SegInput};
use super::super::kernels::Ctx;
use super::super::plan::Owned;
use super::super::RuntimeError;
use super::handoff::{owned_of, tensor_data, view_of};
use super::{ExecStep, Home, Program, RunState};
use reference::{Tensor, TensorData};
use std::convert::Infallible;

/// Where a segment input's tensor is.
#[derive(Clone, Copy, Debug)]
enum From {
    Input(usize),
    Const(usize),
}

/// A bound program's one segment with its hand-off resolved (see the module docs).
#[derive(Debug)]
pub(in crate::runtime) struct Direct {
    /// Per segment input: where its tensor is (a program input or a constant), and the dims
    /// it is handed with.
    ins: Vec<(From, Vec<usize>)>,
    /// Per segment output: the bound output it is, and the dims it had at bind time.
    outs: Vec<(usize, Vec<usize>)>,
    /// The segment's output buffers while it runs (the bound outputs' own).
    bufs: Vec<Owned>,
}

impl Program {
    /// The direct path for a program bound to `inputs` whose last run (in `state`) produced
    /// `outputs`; `None` where the program needs the step loop: several steps, a portable op,
    /// an output that is no segment output (an input, a constant, a repeat), or a segment
    /// output that must be laid out again to become its tensor.
    pub(in crate::runtime) fn direct(&self, state: &RunState, inputs: &[Tensor], outputs: &[Tensor]) -> Option<Direct> {
        let [ExecStep::Delegate { plan, inputs: ins, outputs: outs }] = self.l.steps.as_slice() else { return None };
        let seg_state = state.segments.first()?;
        let mut seg_ins = Vec::with_capacity(ins.len());
        for (&s, &vi) in ins.iter().zip(&plan.input_values) {
            let (from, t) = match self.l.homes[s] {
                Home::Input(k) => (From::Input(k), inputs.get(k)?),
                Home::Const(c) => (From::Const(c), &self.l.constants[c].1),
                Home::Written(_) | Home::None => return None,
            };
            let mut d = Vec::new();
            self.handoff_dims(s, t, &plan.values[vi], &mut d);
            seg_ins.push((from, d));
        }
        if (0..outputs.len()).any(|k| self.written_output(k).is_none()) {
            return None;
        }
        let mut out_of = Vec::with_capacity(outs.len());
        let mut shape = Vec::new();
        for (j, &s) in outs.iter().enumerate() {
            let Home::Written(w) = self.l.homes[s] else { return None };
            let k = (0..outputs.len()).find(|&k| self.written_output(k) == Some(w))?;
            let seg_dims = plan.output_dims(seg_state, j);
            let lay_out = self.settled_shape(s, seg_dims, &mut shape).ok()?;
            let t = &outputs[k];
            let spec = &self.l.slots[s];
            let same = shape == t.shape && spec.format == t.format && spec.quant == t.quant && spec.dtype == t.dtype();
            if lay_out.is_some() || !same || out_of.iter().any(|&(o, _)| o == k) {
                return None;
            }
            out_of.push((k, seg_dims.to_vec()));
        }
        Some(Direct { ins: seg_ins, outs: out_of, bufs: Vec::with_capacity(outs.len()) })
    }

    /// A segment input of the direct path.
    fn direct_input<'a>(&'a self, from: From, dims: &'a [usize], inputs: &'a [Tensor]) -> SegInput<'a> {
        let t = match from {
            From::Input(k) => &inputs[k],
            From::Const(c) => &self.l.constants[c].1,
        };
        SegInput { view: view_of(t), dims }
    }

    /// Runs the program's segment on the bound `inputs` into the bound `outputs` in place.
    /// After an error the outputs' contents are unspecified (as `Bound::invoke` says).
    pub(in crate::runtime) fn invoke_direct(
        &self,
        d: &mut Direct,
        state: &mut RunState,
        inputs: &[Tensor],
        outputs: &mut [Tensor],
    ) -> Result<(), RuntimeError> {
        let [ExecStep::Delegate { plan, outputs: outs, .. }] = self.l.steps.as_slice() else {
            return Err(RuntimeError::InvalidProgram("a direct run of a program of several steps".into()));
        };
        let ctx = Ctx { isa: self.isa, pool: &self.pool };
        let (mut few, mut many) = ([SegInput::EMPTY; 4], Vec::new());
        let items = d.ins.iter().map(|(from, dims)| Ok::<_, Infallible>(self.direct_input(*from, dims, inputs)));
        let Ok(seg_inputs) = gather_inputs(&mut few, &mut many, items);
        d.bufs.clear();
        for &(k, _) in &d.outs {
            d.bufs.push(owned_of(std::mem::replace(&mut outputs[k].data, TensorData::F32(Vec::new()))));
        }
        let (segments, scratch) = (&mut state.segments, &mut state.scratch);
        let r = plan.run_into(&ctx, &mut segments[0], scratch, seg_inputs, &mut d.bufs, 0, self.opts.fuse);
        for (j, ((k, dims), buf)) in d.outs.iter().zip(d.bufs.drain(..)).enumerate() {
            let s = outs[j];
            outputs[*k].data = tensor_data(buf, self.l.slots[s].dtype).ok_or_else(|| {
                RuntimeError::InvalidProgram(format!("direct run: slot {s} got a buffer of another type"))
            })?;
            // The input dims are the bound ones, so the output dims are those of the bind.
            if r.is_ok() && plan.output_dims(&segments[0], j) != dims.as_slice() {
                return Err(RuntimeError::InvalidProgram(format!("direct run: slot {s} changed its dims")));
            }
        }
        r
    }
}
