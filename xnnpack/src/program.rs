//! A whole lowered program with its delegate segments on real XNNPACK: the segments our
//! runtime's loader returned, compiled by [`crate::compile`], run through
//! [`delegate::runtime::Program::run_with`], so portable ops and hand-offs between segments
//! are our runtime's (as in ExecuTorch, where they are the portable kernels' and the
//! method's) and every delegate call is XNNPACK's.

use crate::compile::{compile, Refusal, Segment};
use crate::{ThreadPool, Xnnpack};
use delegate::program::Step;
use delegate::runtime::plan::{BoundInput, Owned, SegmentOutput};
use delegate::runtime::{Bound, Program, RuntimeError, SegmentExecutor};
use delegate::xnn::XnnGraph;
use delegate::LoweredProgram;

/// Every delegate segment of a program, compiled for one pool.
pub struct Segments {
    segments: Vec<Segment>,
    /// The refusal behind the last error `run_segment` returned.
    last_refusal: Option<(usize, Refusal)>,
    /// `xnn_invoke_runtime` calls that succeeded.
    invocations: u64,
}

impl Segments {
    /// Compiles `graphs` (what the loader returned for each delegate segment of `lowered`, in
    /// program order: [`Program::loaded_graphs`]) for `pool`. A refusal names its segment.
    pub fn compile(
        x: &Xnnpack,
        lowered: &LoweredProgram,
        graphs: &[XnnGraph],
        pool: &ThreadPool,
        flags: u32,
    ) -> Result<Segments, (usize, Refusal)> {
        let arity = lowered.steps.iter().filter_map(|s| match s {
            Step::Delegate(d) => Some(d.inputs.len()),
            Step::Portable(_) => None,
        });
        let mut segments = Vec::with_capacity(graphs.len());
        for (k, (g, n_inputs)) in graphs.iter().zip(arity).enumerate() {
            segments.push(compile(x, g, n_inputs, pool, flags).map_err(|r| (k, r))?);
        }
        if segments.len() != graphs.len() {
            let r = Refusal {
                stage: crate::Stage::Define,
                node: None,
                datatype: None,
                status: None,
                reason: format!("{} loaded graphs for {} delegate segments", graphs.len(), segments.len()),
            };
            return Err((segments.len(), r));
        }
        Ok(Segments { segments, last_refusal: None, invocations: 0 })
    }

    /// Runs the program (`program` must be the one whose loaded graphs these are) with every
    /// segment on XNNPACK. A refusal at reshape, setup or invoke time comes back as the
    /// refusal, with its segment.
    pub fn run(&mut self, program: &Program, inputs: &[reference::Tensor]) -> Result<Vec<reference::Tensor>, RunError> {
        self.last_refusal = None;
        program.run_with(inputs, self).map_err(|e| match self.last_refusal.take() {
            Some((segment, refusal)) => RunError::Refused { segment, refusal },
            None => RunError::Runtime(e),
        })
    }

    /// Binds `inputs` to `program` (the one whose loaded graphs these are) and runs it once with
    /// every segment on XNNPACK; [`Segments::invoke_bound`] reruns it.
    pub fn bind<'p>(&mut self, program: &'p Program, inputs: Vec<reference::Tensor>) -> Result<Bound<'p>, RunError> {
        self.last_refusal = None;
        program.bind_with(inputs, self).map_err(|e| self.error(e))
    }

    /// Reruns a program bound by [`Segments::bind`] on its inputs, into its outputs: per segment
    /// the input copies, reshape, setup and invoke, and output copies into the last run's buffers.
    pub fn invoke_bound(&mut self, bound: &mut Bound<'_>) -> Result<(), RunError> {
        self.last_refusal = None;
        bound.invoke_with(self).map_err(|e| self.error(e))
    }

    fn error(&mut self, e: RuntimeError) -> RunError {
        match self.last_refusal.take() {
            Some((segment, refusal)) => RunError::Refused { segment, refusal },
            None => RunError::Runtime(e),
        }
    }

    /// The compiled segments, in program order (the bench times one's `invoke`).
    pub fn segments_mut(&mut self) -> &mut [Segment] {
        &mut self.segments
    }

    /// How many segments there are.
    pub fn len(&self) -> usize {
        self.segments.len()
    }

    /// No segment at all.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Successful `xnn_invoke_runtime` calls so far.
    pub fn invocations(&self) -> u64 {
        self.invocations
    }
}

/// Why a program did not run on XNNPACK.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RunError {
    #[error("segment {segment}: {refusal}")]
    Refused { segment: usize, refusal: Refusal },
    /// Our runtime's part (inputs, hand-offs, portable ops) failed.
    #[error("{0}")]
    Runtime(RuntimeError),
}

impl SegmentExecutor for Segments {
    fn run_segment(
        &mut self,
        segment: usize,
        inputs: &[BoundInput],
        reuse: &mut Vec<Owned>,
    ) -> Result<Vec<SegmentOutput>, RuntimeError> {
        let Some(seg) = self.segments.get_mut(segment) else {
            return Err(RuntimeError::InvalidProgram(format!("no compiled segment {segment}")));
        };
        let bound: Vec<(delegate::runtime::kernels::View, &[usize])> =
            inputs.iter().map(|b| (b.view, b.dims.as_slice())).collect();
        match seg.run(&bound, reuse) {
            Ok(outs) => {
                self.invocations += 1;
                Ok(outs)
            }
            Err(r) => {
                let what = r.to_string();
                self.last_refusal = Some((segment, r));
                Err(RuntimeError::Unsupported { segment, what })
            }
        }
    }
}
