//! A program with its inputs and outputs bound once, for hot loops: [`Program::bind`] checks
//! the inputs and runs the program once (which sizes every buffer), then each
//! [`Bound::invoke`] reruns it writing the same output tensors in place: no allocation, no
//! shape propagation while the input shapes stay the same, no per-run checks beyond each
//! input's type and length. This is XNNPACK's setup/invoke split (`xnn_setup_runtime` binds
//! external buffers, `xnn_invoke_runtime` only runs), and what its timings measure.

use super::program::{Direct, Program, RunState, SegmentExecutor};
use super::RuntimeError;
use reference::{Tensor, TensorData};

/// A program bound to owned inputs and outputs; see the module docs.
pub struct Bound<'p> {
    program: &'p Program,
    inputs: Vec<Tensor>,
    outputs: Vec<Tensor>,
    state: RunState,
    /// The one-segment fast path, when the program has that shape (`program::direct`);
    /// resolved after a run of this runtime's plans on the bound input shapes.
    direct: Option<Direct>,
    /// An input was replaced since `direct` was resolved: resolve it after the next run.
    resolve: bool,
}

impl std::fmt::Debug for Bound<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound").field("program", self.program).field("inputs", &self.inputs.len()).finish()
    }
}

/// A tensor holding nothing (no allocation): the placeholder of an output lent to a run.
fn placeholder() -> Tensor {
    Tensor::new(Vec::new(), TensorData::F32(Vec::new()))
}

impl Program {
    /// Binds `inputs` (checked as [`Program::run`] checks them) and runs the program once, so
    /// that [`Bound::outputs`] holds its outputs and every buffer has its size.
    pub fn bind(&self, inputs: Vec<Tensor>) -> Result<Bound<'_>, RuntimeError> {
        self.bind_inner(inputs, None)
    }

    /// As [`Program::bind`], with every delegate segment run by `exec` (as
    /// [`Program::run_with`]); rerun with [`Bound::invoke_with`].
    pub fn bind_with(&self, inputs: Vec<Tensor>, exec: &mut dyn SegmentExecutor) -> Result<Bound<'_>, RuntimeError> {
        self.bind_inner(inputs, Some(exec))
    }

    fn bind_inner(
        &self,
        inputs: Vec<Tensor>,
        exec: Option<&mut dyn SegmentExecutor>,
    ) -> Result<Bound<'_>, RuntimeError> {
        self.check_inputs(&inputs)?;
        let mut state = self.take_state();
        let own = exec.is_none();
        let outputs = match self.execute(&mut state, &inputs, exec) {
            Ok(()) => self.outputs_of(&mut state, &inputs),
            Err(e) => Err(e),
        };
        match outputs {
            Ok(outputs) => {
                let direct = if own { self.direct(&state, &inputs, &outputs) } else { None };
                Ok(Bound { program: self, inputs, outputs, state, direct, resolve: !own })
            }
            Err(e) => {
                self.give_back(state);
                Err(e)
            }
        }
    }
}

impl Bound<'_> {
    /// Reruns the program on the bound inputs, writing the bound outputs in place. After an
    /// error the outputs' contents are unspecified (the next successful run rewrites them).
    pub fn invoke(&mut self) -> Result<(), RuntimeError> {
        self.invoke_inner(None)
    }

    /// As [`Bound::invoke`], with every delegate segment run by `exec`.
    pub fn invoke_with(&mut self, exec: &mut dyn SegmentExecutor) -> Result<(), RuntimeError> {
        self.invoke_inner(Some(exec))
    }

    fn invoke_inner(&mut self, exec: Option<&mut dyn SegmentExecutor>) -> Result<(), RuntimeError> {
        for (k, t) in self.inputs.iter().enumerate() {
            self.program.recheck_input(k, t)?;
        }
        if let (None, Some(d)) = (&exec, &mut self.direct) {
            return self.program.invoke_direct(d, &mut self.state, &self.inputs, &mut self.outputs);
        }
        let own = exec.is_none();
        // Lend each output's buffers to the slot that writes it.
        for (k, out) in self.outputs.iter_mut().enumerate() {
            if let Some(w) = self.program.written_output(k) {
                *Program::written_slot(&mut self.state, w) = Some(std::mem::replace(out, placeholder()));
            }
        }
        let r = self.program.execute(&mut self.state, &self.inputs, exec);
        for k in 0..self.outputs.len() {
            match self.program.written_output(k) {
                Some(w) => {
                    if let Some(t) = Program::written_slot(&mut self.state, w).take() {
                        self.outputs[k] = t;
                    }
                }
                // An output that is an input, a constant or a repeat of an earlier output
                // (rare): a copy, as `run` returns it.
                None if r.is_ok() => {
                    let s = self.program.outputs_of_slot(&self.inputs, &self.outputs, k);
                    if let Some(t) = s {
                        self.outputs[k] = t;
                    }
                }
                None => {}
            }
        }
        if own && r.is_ok() && self.resolve {
            self.direct = self.program.direct(&self.state, &self.inputs, &self.outputs);
            self.resolve = false;
        }
        r
    }

    /// The bound inputs, in graph-input order.
    pub fn inputs(&self) -> &[Tensor] {
        &self.inputs
    }

    /// Input `k`'s data, to be overwritten in place before the next [`Bound::invoke`] (which
    /// refuses data of another type or length with the same typed errors as `run`).
    pub fn input_data_mut(&mut self, k: usize) -> Option<&mut TensorData> {
        self.inputs.get_mut(k).map(|t| &mut t.data)
    }

    /// Replaces input `k` (checked as `run` checks it; a new shape within a dynamic input's
    /// bounds makes the next run propagate shapes again).
    pub fn set_input(&mut self, k: usize, t: Tensor) -> Result<(), RuntimeError> {
        let n = self.inputs.len();
        let slot = self.inputs.get_mut(k).ok_or(RuntimeError::InputCount { expected: n, found: k + 1 })?;
        self.program.check_input(k, &t)?;
        *slot = t;
        // Its dims may differ: the next run goes through the step loop, which resolves again.
        self.direct = None;
        self.resolve = true;
        Ok(())
    }

    /// Whether [`Bound::invoke`] runs the program's one delegate segment straight on the bound
    /// tensors (a program from graph inputs to graph outputs in one segment, its outputs in
    /// their slots' layout), rather than through the step loop with its per-run hand-offs.
    /// The outputs are the same bits either way.
    pub fn runs_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// The outputs of the last successful run, in graph-output order.
    pub fn outputs(&self) -> &[Tensor] {
        &self.outputs
    }
}

impl Drop for Bound<'_> {
    /// The run-time buffers go to the program's next configuration (as a dropped program's).
    fn drop(&mut self) {
        self.program.give_back(std::mem::take(&mut self.state));
    }
}
