//! Loading a lowered program: every slot and step checked, every segment serialized, loaded
//! back through the loader and planned.

use super::super::plan::SegmentPlan;
use super::super::pool::Pool;
use super::super::{force_scalar, resolve_simd_with, RunOptions, RuntimeError, SimdLevel};
use super::handoff::{handoff_order, storage_type};
use super::{ExecStep, Home, Loaded, Program};
use crate::program::{LoweredProgram, SlotId, Step};
use crate::serialize::{self, LoadLimits};
use std::sync::{Arc, Mutex};

impl Program {
    /// As [`Program::new`], on a pool shared with other programs (as ExecuTorch shares one
    /// threadpool among its delegates): thread count and policy are the pool's. Operators of
    /// programs sharing a pool take turns on it.
    pub fn with_pool(lowered: &LoweredProgram, simd: SimdLevel, pool: Arc<Pool>) -> Result<Program, RuntimeError> {
        let opts = RunOptions { threads: pool.threads(), policy: pool.policy(), simd, ..RunOptions::default() };
        let force_scalar = force_scalar();
        let isa = resolve_simd_with(opts.simd, force_scalar)?;
        let nslots = lowered.slots.len();
        let check_slot = |s: SlotId, what: &str| {
            if s < nslots {
                Ok(s)
            } else {
                Err(RuntimeError::InvalidProgram(format!("{what} refers to slot {s} of {nslots}")))
            }
        };
        for &s in lowered.inputs.iter().chain(&lowered.outputs) {
            check_slot(s, "program input/output")?;
        }
        let mut homes = vec![Home::None; nslots];
        for (k, &s) in lowered.inputs.iter().enumerate() {
            homes[s] = Home::Input(k);
        }
        for (c, (s, t)) in lowered.constants.iter().enumerate() {
            check_slot(*s, "constant")?;
            lowered.slots[*s]
                .check_tensor(t)
                .map_err(|e| RuntimeError::InvalidProgram(format!("constant slot {s}: {e}")))?;
            homes[*s] = Home::Const(c);
        }
        let mut n_written = 0;
        let mut write = |s: SlotId, i: usize, reads: &[SlotId]| {
            if homes[s] != Home::None || reads.contains(&s) {
                return Err(RuntimeError::InvalidProgram(format!(
                    "step {i} writes slot {s}, which is an input, a constant, read by the step or written before"
                )));
            }
            homes[s] = Home::Written(n_written);
            n_written += 1;
            Ok(())
        };
        let mut steps = Vec::with_capacity(lowered.steps.len());
        let mut payloads = Vec::new();
        let mut loaded_graphs = Vec::new();
        for (i, step) in lowered.steps.iter().enumerate() {
            match step {
                Step::Delegate(seg) => {
                    for &s in seg.inputs.iter().chain(&seg.outputs) {
                        check_slot(s, "segment")?;
                    }
                    for &s in &seg.outputs {
                        write(s, i, &seg.inputs)?;
                    }
                    let segment = payloads.len();
                    let bytes = serialize::write(&seg.graph);
                    let loaded = serialize::load(&bytes, &LoadLimits::default())
                        .map_err(|e| RuntimeError::Load { segment, message: e.to_string() })?;
                    let plan = SegmentPlan::compile(segment, &loaded, seg.inputs.len(), seg.outputs.len())?;
                    // Hand-offs must agree on element types and ranks.
                    let pairs =
                        seg.inputs.iter().zip(&plan.input_values).chain(seg.outputs.iter().zip(&plan.output_values));
                    for (&slot, &vi) in pairs {
                        let (spec, v) = (&lowered.slots[slot], &plan.values[vi]);
                        let rank_ok =
                            spec.rank() == v.dims.len() || (spec.max_numel() == v.max_numel && !spec.is_dynamic());
                        if storage_type(spec.dtype) != v.dt || !rank_ok {
                            return Err(RuntimeError::InvalidProgram(format!(
                                "step {i}: slot {slot} ({} {:?}) does not match segment value {vi} ({:?} {:?})",
                                spec.dtype,
                                spec.max_shape(),
                                v.dt,
                                v.dims
                            )));
                        }
                    }
                    payloads.push(bytes);
                    loaded_graphs.push(loaded);
                    steps.push(ExecStep::Delegate { plan, inputs: seg.inputs.clone(), outputs: seg.outputs.clone() });
                }
                Step::Portable(p) => {
                    for &s in p.inputs.iter().chain([&p.output]) {
                        check_slot(s, "portable op")?;
                    }
                    write(p.output, i, &p.inputs)?;
                    steps.push(ExecStep::Portable(p.clone()));
                }
            }
        }
        let orders = lowered.slots.iter().map(|spec| handoff_order(spec, spec.rank())).collect();
        let l = Loaded {
            slots: lowered.slots.clone(),
            constants: lowered.constants.clone(),
            inputs: lowered.inputs.clone(),
            outputs: lowered.outputs.clone(),
            steps,
            payloads,
            loaded: loaded_graphs,
            homes,
            n_written,
            orders,
            spare: Mutex::new(Vec::new()),
            force_scalar,
        };
        Ok(Program::assemble(Arc::new(l), isa, opts, pool))
    }
}
