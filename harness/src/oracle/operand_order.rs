//! The operand-order oracle: a binary op's lowering does not depend on which operand
//! carries NHWC.
//!
//! The **commuted twin** of a graph swaps the operands of every `add` and `mul` whose swap
//! keeps its spec (two distinct values; PyTorch takes a binary op's memory format from its
//! first full-rank operand, so a swap between operands of different formats changes what
//! the op returns, and is left out). In every mode the case lowers:
//! - `structure/operand_order`: the twin lowers exactly when the graph does, to the same
//!   delegates, the same ops outside, the same node counts, transposes and converts;
//! - `outputs/operand_order`: run at 1 thread on the SIMD path, the twin's outputs are the
//!   graph's, bit for bit (any NaN equal to any NaN). IEEE 754 `a + b` and `a * b` are
//!   commutative: each is the exact result rounded once, and the exact result does not
//!   depend on the order (a fused chain computes the same f32 operations per element, and
//!   fp16/bf16 ops compute in f32 and round once). Only a NaN's payload may follow the
//!   operand order (x86 returns the first NaN operand's), hence the NaN rule.
//!
//! The values check prepares and runs two more programs per mode, so the fuzz loop runs it on
//! one case in [`super::CheckOptions::operand_values_every`] (by the case's seed, so replay
//! repeats it); replay and the default options run it on every case. The default job's CPU
//! time for 20,000 cases (seed 20261130, `--jobs 1`, two runs, loaded 2-core EPYC): 15.7 and
//! 13.3 s without this oracle, 16.3 and 14.3 s with values on one case in 4, 17.9 and 17.0 s
//! with values on every case.

use super::{same_program, RefRun, Verdict};
use crate::case::Case;
use crate::engine::{self, EngineError, Simd};
use delegate::program::Summary;
use delegate::{LoweredProgram, LoweringMode};
use reference::graph::{infer, BinaryOp, Graph, Op};
use reference::Tensor;

/// The commuted twin of `graph` (see the module docs), or None where no op changes.
pub fn commuted(graph: &Graph) -> Option<Graph> {
    let mut twin = graph.clone();
    let mut changed = false;
    for n in &mut twin.nodes {
        if !matches!(n.op, Op::Binary(BinaryOp::Add | BinaryOp::Mul)) || n.inputs.len() != 2 {
            continue;
        }
        let (a, b) = (n.inputs[0], n.inputs[1]);
        if a == b {
            continue;
        }
        let swapped = infer(&n.op, &[&graph.nodes[b].spec, &graph.nodes[a].spec]);
        if swapped.as_ref().is_ok_and(|s| *s == n.spec) {
            n.inputs.swap(0, 1);
            changed = true;
        }
    }
    changed.then_some(twin)
}

/// What the structure check compares: the summary without its mode and outside reasons.
fn shape_of(s: &Summary) -> impl PartialEq + std::fmt::Debug + '_ {
    let outside: Vec<(usize, &str)> = s.outside.iter().map(|o| (o.node, o.op.as_str())).collect();
    (s.delegates, outside, &s.node_counts, s.transposes, s.converts)
}

/// One verdict of this oracle: structure (`false`) or outputs (`true`), the mode, the verdict.
pub type OrderVerdict = (bool, LoweringMode, Verdict);

/// A mode, its lowering, and the outputs oracle's 1-thread SIMD outputs of that program
/// (see [`super::outputs::Exec::single`]).
pub type Lowered<'p> = (LoweringMode, &'p Result<LoweredProgram, EngineError>, Option<&'p [Vec<Tensor>]>);

/// Checks the commuted twin of `graph` in every mode of `programs` (the case's own
/// lowerings); values too when `values`. Empty when the graph has nothing to commute.
pub fn check(case: &Case, graph: &Graph, programs: &[Lowered], runs: &[RefRun], values: bool) -> Vec<OrderVerdict> {
    let Some(twin) = commuted(graph) else { return vec![] };
    let modes: Vec<LoweringMode> = programs.iter().map(|(m, ..)| *m).collect();
    let twins = engine::lower_each(&twin, &modes);
    let mut out = vec![];
    // (original, twin) pairs already run, by index: modes that lowered the same programs.
    let mut ran: Vec<usize> = vec![];
    for (k, ((mode, orig, single), tw)) in programs.iter().zip(&twins).enumerate() {
        let (o, t) = match (orig, tw) {
            (Ok(o), Ok(t)) => (o, t),
            (Err(_), Err(_)) => continue,
            (o, t) => {
                let say = |r: &Result<LoweredProgram, EngineError>| match r {
                    Ok(_) => "lowers".to_string(),
                    Err(e) => format!("fails ({e})"),
                };
                let detail = format!("{mode}: the graph {}, its commuted twin {}", say(o), say(t));
                out.push((false, *mode, Verdict::fail("operand_order", detail)));
                continue;
            }
        };
        let (a, b) = (shape_of(&o.summary), shape_of(&t.summary));
        let v = if a == b {
            Verdict::Pass
        } else {
            Verdict::fail("operand_order", format!("{mode}: the graph lowers to {a:?}, its commuted twin to {b:?}"))
        };
        out.push((false, *mode, v));
        if !values || case.invalid.is_some() || runs.iter().any(|r| r.outputs.is_err()) {
            continue;
        }
        let seen = ran.iter().any(|&j| {
            let ok = |r: &Result<LoweredProgram, EngineError>, p: &LoweredProgram| {
                r.as_ref().is_ok_and(|q| same_program(q, p))
            };
            ok(programs[j].1, o) && ok(&twins[j], t)
        });
        if seen {
            continue;
        }
        ran.push(k);
        out.push((true, *mode, compare_runs(o, t, runs, *single)));
    }
    out
}

/// Runs both programs on every run's inputs at 1 thread on the SIMD path and compares their
/// outputs bit for bit. `single`: the original's outputs there, already computed by the
/// outputs oracle (the runtime is deterministic, so running it again gives the same bits).
fn compare_runs(
    orig: &LoweredProgram,
    twin: &LoweredProgram,
    runs: &[RefRun],
    single: Option<&[Vec<Tensor>]>,
) -> Verdict {
    enum Original<'s> {
        Given(&'s [Vec<Tensor>]),
        Run(Box<engine::Prepared>),
    }
    let prepare = |p| engine::prepare(p, 1, Simd::Best);
    let mut original = match single {
        Some(s) => Original::Given(s),
        None => match prepare(orig) {
            Ok(p) => Original::Run(Box::new(p)),
            // Preparation failures are the outputs and errors oracles' to judge.
            Err(e) => return Verdict::Skip(format!("prepare: {e}")),
        },
    };
    let mut pt = match prepare(twin) {
        Ok(p) => p,
        Err(e) => return Verdict::Skip(format!("prepare: {e}")),
    };
    for (r, run) in runs.iter().enumerate() {
        let ran;
        let a: &[Tensor] = match &mut original {
            Original::Given(s) => &s[r],
            Original::Run(p) => match p.run(&run.inputs) {
                Ok(v) => {
                    ran = v;
                    &ran
                }
                Err(e) => return Verdict::Skip(format!("run {r}: {e}")),
            },
        };
        let b = match pt.run(&run.inputs) {
            Ok(b) => b,
            Err(e) => return Verdict::Skip(format!("run {r}: {e}")),
        };
        if let Some(d) = first_difference(a, &b) {
            return Verdict::fail(
                "operand_order",
                format!("{} run {r} (shapes {:?}): the commuted twin differs: {d}", orig.mode, run.shapes[0]),
            );
        }
    }
    Verdict::Pass
}

/// Where two output lists first differ (shape, dtype, or an element's bits; NaN equals NaN).
pub fn first_difference(a: &[Tensor], b: &[Tensor]) -> Option<String> {
    if a.len() != b.len() {
        return Some(format!("{} outputs against {}", a.len(), b.len()));
    }
    for (o, (x, y)) in a.iter().zip(b).enumerate() {
        if x.shape != y.shape || x.dtype() != y.dtype() || x.format != y.format {
            return Some(format!("output {o}: {:?} {} against {:?} {}", x.shape, x.dtype(), y.shape, y.dtype()));
        }
        let (vx, vy) = (x.values_f64(), y.values_f64());
        let same = |p: f64, q: f64| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan());
        if let Some(i) = vx.iter().zip(&vy).position(|(&p, &q)| !same(p, q)) {
            return Some(format!("output {o} element {i}: {} against {}", vx[i], vy[i]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::Pattern;
    use crate::patterns;

    #[test]
    fn the_twin_swaps_distinct_operands_of_add_and_mul_only() {
        // `x + x` has nothing to swap.
        let c = Case::new(Pattern::AddMean, &[2, 3], &[-1], true);
        assert!(commuted(&patterns::build(&c).unwrap().graph).is_none());
        // RMSNorm: `ms + eps`, `x * r`, `(x r) * w`, all swapped.
        let c = Case::new(Pattern::RmsNorm, &[2, 8], &[-1], true);
        let g = patterns::build(&c).unwrap().graph;
        let t = commuted(&g).expect("rms_norm has products to swap");
        let mut swapped = 0;
        for (a, b) in g.nodes.iter().zip(&t.nodes) {
            if a.inputs != b.inputs {
                assert!(matches!(a.op, Op::Binary(BinaryOp::Add | BinaryOp::Mul)));
                assert_eq!((a.inputs[0], a.inputs[1]), (b.inputs[1], b.inputs[0]));
                swapped += 1;
            }
        }
        assert_eq!(swapped, 3);
        assert!(t.validate().is_ok());
        // The swapped variant's twin is the plain case's graph.
        let mut s = c.clone();
        s.variant = patterns::knobs::SWAP;
        let gs = patterns::build(&s).unwrap().graph;
        assert_eq!(commuted(&gs).unwrap().nodes, g.nodes);
    }

    #[test]
    fn differences_are_bitwise_but_nan_is_any_nan() {
        let t = |v: Vec<f32>| vec![Tensor::f32(&[v.len()], v)];
        assert_eq!(first_difference(&t(vec![1.0, f32::NAN]), &t(vec![1.0, -f32::NAN])), None);
        assert!(first_difference(&t(vec![0.0]), &t(vec![-0.0])).is_some());
        assert!(first_difference(&t(vec![1.0]), &t(vec![1.0, 2.0])).is_some());
    }
}
