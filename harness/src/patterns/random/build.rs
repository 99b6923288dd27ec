//! A random graph expanded to the graph language: specs inferred forward (what the
//! generator and the shrinker keep valid), the graph under test, its magnitude twin, and
//! the chain costs the outputs oracle's tolerance needs.
//!
//! # The magnitude twin of each op
//!
//! The twin computes, for every value `v`, an fp32 `M_v >= |v|` such that the error of `v`
//! on either side is at most `C u M_v` (`C = L + 2k + 4` and, below fp32, `2 k u_c M_v`:
//! `oracle::outputs`), where `(L, k)` are the value's chain costs ([`costs`]). Inputs give
//! `|x|` with cost `(0, 0)`; weights enter as `|w|` (an int8 weight as its dequantized
//! magnitude). Then, for an op on `a` (and `b`):
//! - add, sub: `M_a + M_b`, cost `(max L, max k + 1)` (errors add, each within its bound);
//! - mul: `M_a M_b`, cost `(L_a + L_b + 4, k_a + k_b + 1)`: the relative errors add, so the
//!   coefficient must reach `C_a + C_b + 1`; square likewise, `(2 L + 4, 2 k + 1)`;
//! - a constant operand: `M op |c|` (sub as add), cost `(L, k + 1)`; a division only by a
//!   constant in `[0.5, 2]`, whose own error is none;
//! - mean, pool, conv, linear: the op on the magnitudes, cost `(L + n, k + 1)` with `n` the
//!   terms summed (mean count, conv fan-in `C / g k^2`, linear `K`; a bias add one more op);
//! - `rsqrt(clamp(x, min = c))`: the clamp is 1-Lipschitz and leaves a value `>= c`, where
//!   `|d x^-1/2 / dx| <= c^-3/2 / 2`; so an error `E` of `x` moves the output by at most
//!   `c^-3/2 E / 2`, the output is at most `c^-1/2`, and
//!   `M = c^-1/2 + c^-3/2 M_x / 2` carries both (cost `(L, k + 2)`);
//! - `clamp(min, max)`: 1-Lipschitz, `M = max(M_x, min, -max)` (a bound can be the value);
//! - `dequantize(quantize(x, s))`: an error `E` of `x` moves the integer by at most `E / s + 1`
//!   steps (rounding on either side of a boundary), so the value by `E + s`: `M = M_x + s 2^22`
//!   makes the bound grow by at least `4 u s 2^22 = s` (every coefficient is at least 4);
//! - copies, reshapes and permutes move values exactly; a dtype copy rounds once (`k + 1`).
//!
//! Each op that rounds and may underflow (products, means, convs, linears, conversions) is
//! floored at the smallest normal value `λ` of the narrowest type in the graph, as the
//! templates' twins are (`oracle::outputs`, underflow); sums need none.

use super::{RandomGraph, RandomOp};
use crate::case::InvalidCase;
use crate::engine;
use crate::patterns::Q_W;
use reference::data::SplitMix64;
use reference::graph::{infer, BinaryOp, Conv2dParams, Graph, Node, Op, TensorSpec};
use reference::{ElemType, MemoryFormat, Tensor};

/// Which graph [`graph`] builds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    UnderTest,
    /// The magnitude twin, floored at `λ`.
    Magnitude {
        floor: f32,
    },
}

/// A constant an op needs.
enum Const {
    /// Seeded weight number `k` of `spec`: as the graph has it, or (twin) its magnitude.
    Weight(TensorSpec, u64),
    /// A seeded divisor in `[0.5, 2]`, rounded to `spec`'s dtype.
    Divisor(TensorSpec, u64),
    /// A 0-D fp32 scalar (twin coefficients).
    Scalar(f64),
}

/// Where an expansion goes: specs only (generation, validation) or a graph.
trait Emit {
    type V: Clone;
    fn op(&mut self, op: Op, args: &[Self::V]) -> Result<Self::V, String>;
    fn constant(&mut self, c: Const) -> Result<Self::V, String>;
    fn spec(&self, v: &Self::V) -> TensorSpec;
}

/// Specs only: `infer` on each op.
struct Specs;

impl Emit for Specs {
    type V = TensorSpec;
    fn op(&mut self, op: Op, args: &[TensorSpec]) -> Result<TensorSpec, String> {
        let refs: Vec<&TensorSpec> = args.iter().collect();
        infer(&op, &refs).map_err(|e| format!("{}: {e}", op.name()))
    }
    fn constant(&mut self, c: Const) -> Result<TensorSpec, String> {
        Ok(match c {
            Const::Weight(s, _) | Const::Divisor(s, _) => s,
            Const::Scalar(_) => TensorSpec::f32(&[]),
        })
    }
    fn spec(&self, v: &TensorSpec) -> TensorSpec {
        v.clone()
    }
}

/// A graph: nodes pushed in order, each inferred.
struct Nodes {
    nodes: Vec<Node>,
    seed: u64,
    abs: bool,
}

impl Emit for Nodes {
    type V = usize;
    fn op(&mut self, op: Op, args: &[usize]) -> Result<usize, String> {
        let specs: Vec<&TensorSpec> = args.iter().map(|&a| &self.nodes[a].spec).collect();
        let spec = infer(&op, &specs).map_err(|e| format!("{}: {e}", op.name()))?;
        self.nodes.push(Node { op, inputs: args.to_vec(), spec });
        Ok(self.nodes.len() - 1)
    }
    fn constant(&mut self, c: Const) -> Result<usize, String> {
        let seed_of = |k: u64| self.seed ^ 0x5EED_0000_0000_0000 ^ k.wrapping_mul(0x9E37_79B9);
        let t = match c {
            Const::Weight(spec, k) => {
                let t = engine::generate(&spec, seed_of(k), false);
                if self.abs {
                    let v: Vec<f64> = t.values_f64().into_iter().map(f64::abs).collect();
                    Tensor::from_f64(&t.shape, ElemType::F32, None, &v)
                } else {
                    t
                }
            }
            Const::Divisor(spec, k) => {
                let mut rng = SplitMix64::new(seed_of(k));
                let v: Vec<f64> = (0..spec.max_numel()).map(|_| rng.range(0.5, 2.0)).collect();
                let dt = if self.abs { ElemType::F32 } else { spec.dtype };
                // Rounded to the graph's dtype first (`spec`'s, also in the twin), so the twin
                // divides by the graph's own values.
                let t = Tensor::from_f64(&spec.max_shape(), spec.dtype, None, &v);
                Tensor::from_f64(&t.shape, dt, None, &t.values_f64())
            }
            Const::Scalar(v) => Tensor::f32(&[], vec![v as f32]),
        };
        self.op(Op::Constant { tensor: t }, &[])
    }
    fn spec(&self, v: &usize) -> TensorSpec {
        self.nodes[*v].spec.clone()
    }
}

/// Weight numbers of node `i`: weight, bias, constant operand.
fn weight_id(node: usize, slot: u64) -> u64 {
    (node as u64) << 2 | slot
}

/// Expands node `i` onto `args` (see the module docs for the twin's rules).
/// `wdt` is the dtype of the first argument in the graph under test (constants are drawn in
/// it, so the twin's are the graph's own).
fn expand<E: Emit>(
    e: &mut E,
    i: usize,
    op: &RandomOp,
    args: &[E::V],
    wdt: ElemType,
    twin: Option<f32>,
) -> Result<E::V, String> {
    let want = match op {
        RandomOp::Binary { .. } => 2,
        _ => 1,
    };
    if args.len() != want {
        return Err(format!("{} takes {want} value(s), got {}", op.name(), args.len()));
    }
    let x = args[0].clone();
    let xs = e.spec(&x);
    let floor = |e: &mut E, v: E::V| match twin {
        Some(l) => e.op(Op::Clamp { min: Some(l), max: None }, &[v]),
        None => Ok(v),
    };
    let abs = twin.is_some();
    match op {
        RandomOp::Mean { dims, keepdim, dtype } => {
            let dtype = if abs { None } else { *dtype };
            let m = e.op(Op::Mean { dims: dims.clone(), keepdim: *keepdim, dtype }, &[x])?;
            floor(e, m)
        }
        RandomOp::Pool => {
            let m = e.op(Op::AdaptiveAvgPool2d { output_size: [1, 1] }, &[x])?;
            floor(e, m)
        }
        RandomOp::Conv { out, kernel, stride, padding, dilation, groups, bias, qs8 } => {
            let c = xs.shape.get(1).map(|d| d.size).ok_or("conv of a value below rank 2")?;
            if *groups == 0 || c % groups != 0 || *out == 0 || *kernel == 0 {
                return Err(format!("conv: {c} channels, {groups} groups, {out} out, kernel {kernel}"));
            }
            let wshape = [*out, c / groups, *kernel, *kernel];
            let w = if *qs8 {
                if wdt != ElemType::F32 {
                    return Err("conv: int8 weights need an fp32 input".into());
                }
                let spec = TensorSpec::qs8(&wshape, Q_W);
                match abs {
                    true => e.constant(Const::Weight(spec, weight_id(i, 0)))?,
                    false => {
                        let w = e.constant(Const::Weight(spec, weight_id(i, 0)))?;
                        e.op(Op::Dequantize(Q_W), &[w])?
                    }
                }
            } else {
                e.constant(Const::Weight(TensorSpec::new(wdt, &wshape), weight_id(i, 0)))?
            };
            let mut ins = vec![x, w];
            if *bias {
                ins.push(e.constant(Const::Weight(TensorSpec::new(wdt, &[*out]), weight_id(i, 1)))?);
            }
            let p = Conv2dParams {
                stride: [*stride; 2],
                padding: [*padding; 2],
                dilation: [*dilation; 2],
                groups: *groups,
            };
            let y = e.op(Op::Conv2d(p), &ins)?;
            floor(e, y)
        }
        RandomOp::Binary { binary } => {
            let b = args[1].clone();
            match (binary, abs) {
                (BinaryOp::Div, _) => Err("random graphs divide by constants only".into()),
                (BinaryOp::Add | BinaryOp::Sub, true) => e.op(Op::Binary(BinaryOp::Add), &[x, b]),
                (BinaryOp::Mul, true) => {
                    let y = e.op(Op::Binary(BinaryOp::Mul), &[x, b])?;
                    floor(e, y)
                }
                (op, false) => e.op(Op::Binary(*op), &[x, b]),
            }
        }
        RandomOp::Constant { binary, shape, first } => {
            if *binary == BinaryOp::Div && *first {
                return Err("random graphs divide by constants only, never a constant by a value".into());
            }
            let spec = TensorSpec::new(wdt, shape);
            let c = match binary {
                BinaryOp::Div => e.constant(Const::Divisor(spec, weight_id(i, 2)))?,
                _ => e.constant(Const::Weight(spec, weight_id(i, 2)))?,
            };
            let op = match (binary, abs) {
                (BinaryOp::Sub, true) => BinaryOp::Add,
                (op, _) => *op,
            };
            let ins = if *first { [c, x] } else { [x, c] };
            let y = e.op(Op::Binary(op), &ins)?;
            match op {
                BinaryOp::Mul | BinaryOp::Div => floor(e, y),
                _ => Ok(y),
            }
        }
        RandomOp::Square => {
            let y = e.op(Op::Square, &[x])?;
            floor(e, y)
        }
        RandomOp::Rsqrt { floor: c } => {
            if !(c.is_finite() && (1.0 / 256.0..=256.0).contains(c)) {
                return Err(format!("rsqrt floor {c}: between 2^-8 and 2^8"));
            }
            if abs {
                let (c, m) = (*c as f64, x);
                let k1 = e.constant(Const::Scalar(c.powf(-1.5) / 2.0))?;
                let k0 = e.constant(Const::Scalar(c.powf(-0.5)))?;
                let y = e.op(Op::Binary(BinaryOp::Mul), &[m, k1])?;
                e.op(Op::Binary(BinaryOp::Add), &[y, k0])
            } else {
                let y = e.op(Op::Clamp { min: Some(*c), max: None }, &[x])?;
                e.op(Op::Rsqrt, &[y])
            }
        }
        RandomOp::Clamp { min, max } => {
            if !abs {
                return e.op(Op::Clamp { min: *min, max: *max }, &[x]);
            }
            let m = min.unwrap_or(0.0).max(0.0).max(-max.unwrap_or(0.0));
            match m > 0.0 {
                true => e.op(Op::Clamp { min: Some(m), max: None }, &[x]),
                false => Ok(x),
            }
        }
        RandomOp::Linear { out, bias } => {
            let k = xs.shape.last().map(|d| d.size).ok_or("linear of a 0-D value")?;
            let w = e.constant(Const::Weight(TensorSpec::new(wdt, &[*out, k]), weight_id(i, 0)))?;
            let mut ins = vec![x, w];
            if *bias {
                ins.push(e.constant(Const::Weight(TensorSpec::new(wdt, &[*out]), weight_id(i, 1)))?);
            }
            let y = e.op(Op::Linear, &ins)?;
            floor(e, y)
        }
        RandomOp::Qdq { scale, zero_point } => {
            let q = reference::QuantParams { scale: *scale, zero_point: *zero_point };
            if abs {
                let s = e.constant(Const::Scalar(*scale as f64 * (1u64 << 22) as f64))?;
                return e.op(Op::Binary(BinaryOp::Add), &[x, s]);
            }
            if !(scale.is_finite() && *scale >= f32::MIN_POSITIVE) {
                return Err(format!("qdq scale {scale}: a positive normal value"));
            }
            let y = e.op(Op::Quantize(q), &[x])?;
            e.op(Op::Dequantize(q), &[y])
        }
        RandomOp::ToCopy { dtype, format } => {
            if !abs {
                return e.op(Op::ToCopy { dtype: *dtype, format: *format }, &[x]);
            }
            let y = match format {
                Some(f) => e.op(Op::ToCopy { dtype: None, format: Some(*f) }, &[x])?,
                None => x,
            };
            match dtype {
                Some(_) => floor(e, y),
                None => Ok(y),
            }
        }
        RandomOp::Reshape { shape } => e.op(Op::Reshape { shape: shape.clone() }, &[x]),
        RandomOp::Permute { perm } => e.op(Op::Permute { perm: perm.clone() }, &[x]),
    }
}

fn input_spec(rg: &RandomGraph, j: usize, twin: bool) -> TensorSpec {
    let i = &rg.inputs[j];
    TensorSpec::new(if twin { ElemType::F32 } else { i.dtype }, &i.shape).with_format(i.format)
}

fn arg_ids(rg: &RandomGraph, i: usize) -> Result<&[usize], String> {
    let own = rg.inputs.len() + i;
    let args = &rg.nodes[i].args;
    match args.iter().find(|&&a| a >= own) {
        Some(a) => Err(format!("node {i} reads value {a}, not an earlier one")),
        None => Ok(args),
    }
}

/// The spec of node `i`'s result, given the specs of every earlier value (the generator
/// tries each candidate with this).
pub fn node_spec(rg: &RandomGraph, i: usize, earlier: &[TensorSpec]) -> Result<TensorSpec, String> {
    let args: Vec<TensorSpec> = arg_ids(rg, i)?.iter().map(|&a| earlier[a].clone()).collect();
    let wdt = args.first().map_or(ElemType::F32, |s| s.dtype);
    expand(&mut Specs, i, &rg.nodes[i].op, &args, wdt, None)
}

/// The spec of every value, inputs first, inferred forward; the first op that does not
/// infer is the case's mistake.
pub fn specs(rg: &RandomGraph) -> Result<Vec<TensorSpec>, InvalidCase> {
    let bad = |m: String| InvalidCase::new("graph", m);
    if rg.inputs.is_empty() {
        return Err(bad("a random graph needs an input".into()));
    }
    let mut out = Vec::with_capacity(rg.values());
    for j in 0..rg.inputs.len() {
        let s = input_spec(rg, j, false);
        reference::graph::check_spec(&s).map_err(|e| bad(format!("input {j}: {e}")))?;
        if !s.dtype.is_float() {
            return Err(bad(format!("input {j}: a float dtype (qs8 values come from qdq nodes)")));
        }
        out.push(s);
    }
    for i in 0..rg.nodes.len() {
        let s = node_spec(rg, i, &out).map_err(|e| bad(format!("node {i} ({}): {e}", rg.nodes[i].op.name())))?;
        out.push(s);
    }
    if rg.outputs.is_empty() {
        return Err(bad("a random graph needs an output".into()));
    }
    if let Some(&o) = rg.outputs.iter().find(|&&o| o >= out.len()) {
        return Err(bad(format!("output {o} is not a value")));
    }
    Ok(out)
}

/// The graph under test or its magnitude twin, for a graph whose `specs` (the under-test
/// specs, [`specs`]) infer.
pub fn graph(rg: &RandomGraph, specs: &[TensorSpec], seed: u64, kind: Kind) -> Result<Graph, InvalidCase> {
    let twin = match kind {
        Kind::UnderTest => None,
        Kind::Magnitude { floor } => Some(floor),
    };
    let mut e = Nodes { nodes: vec![], seed, abs: twin.is_some() };
    let mut value = Vec::with_capacity(rg.values());
    for j in 0..rg.inputs.len() {
        let spec = input_spec(rg, j, twin.is_some());
        e.nodes.push(Node { op: Op::Input { name: format!("x{j}") }, inputs: vec![], spec });
        value.push(j);
    }
    let inputs: Vec<usize> = (0..rg.inputs.len()).collect();
    for i in 0..rg.nodes.len() {
        let ids = arg_ids(rg, i).map_err(|m| InvalidCase::new("graph", m))?;
        let wdt = ids.first().and_then(|&a| specs.get(a)).map_or(ElemType::F32, |s| s.dtype);
        let args: Vec<usize> = ids.iter().map(|&a| value[a]).collect();
        let v = expand(&mut e, i, &rg.nodes[i].op, &args, wdt, twin)
            .map_err(|m| InvalidCase::new("graph", format!("node {i}: {m}")))?;
        value.push(v);
    }
    let outputs = rg.outputs.iter().map(|&o| value[o]).collect();
    Ok(Graph { nodes: e.nodes, inputs, outputs })
}

/// Chain costs `(L, k)` of every value (see the module docs), from its specs.
pub fn costs(rg: &RandomGraph, specs: &[TensorSpec]) -> Vec<(usize, usize)> {
    let mut c: Vec<(usize, usize)> = vec![(0, 0); rg.inputs.len()];
    for n in &rg.nodes {
        let a = n.args.first().map_or((0, 0), |&a| c[a]);
        let xs = n.args.first().map(|&a| &specs[a]);
        let dims = |s: Option<&TensorSpec>| s.map_or(vec![], |s| s.max_shape());
        let cost = match &n.op {
            RandomOp::Mean { dims: d, dtype, .. } => {
                let shape = dims(xs);
                let count = reference::graph::mean_axes(d, shape.len())
                    .map_or(1, |ax| ax.iter().map(|&k| shape[k]).product::<usize>());
                (a.0 + count, a.1 + 1 + dtype.is_some() as usize)
            }
            RandomOp::Pool => {
                let shape = dims(xs);
                let hw: usize = shape.iter().rev().take(2).product();
                (a.0 + hw, a.1 + 1)
            }
            RandomOp::Conv { kernel, groups, bias, .. } => {
                let ch = dims(xs).get(1).copied().unwrap_or(1);
                (a.0 + ch / (*groups).max(1) * kernel * kernel, a.1 + 1 + *bias as usize)
            }
            RandomOp::Linear { bias, .. } => {
                let k = dims(xs).last().copied().unwrap_or(1);
                (a.0 + k, a.1 + 1 + *bias as usize)
            }
            RandomOp::Binary { binary } => {
                let b = n.args.get(1).map_or((0, 0), |&b| c[b]);
                match binary {
                    BinaryOp::Mul | BinaryOp::Div => (a.0 + b.0 + 4, a.1 + b.1 + 1),
                    _ => (a.0.max(b.0), a.1.max(b.1) + 1),
                }
            }
            RandomOp::Square => (2 * a.0 + 4, 2 * a.1 + 1),
            RandomOp::Rsqrt { .. } | RandomOp::Qdq { .. } => (a.0, a.1 + 2),
            RandomOp::Constant { .. } | RandomOp::Clamp { .. } | RandomOp::ToCopy { .. } => (a.0, a.1 + 1),
            RandomOp::Reshape { .. } | RandomOp::Permute { .. } => a,
        };
        c.push(cost);
    }
    c
}

/// The smallest normal value of the narrowest float type of the graph: the twin's floor.
pub fn floor_of(rg: &RandomGraph) -> f32 {
    match rg.dtypes().contains(&ElemType::F16) {
        true => 6.103_515_6e-5, // 2^-14
        false => f32::MIN_POSITIVE,
    }
}

/// Elements of the largest value, and multiply-accumulates of the convs and linears: what a
/// random graph costs to evaluate (bounded like the templates' `graph_cost`).
pub fn size_cost(rg: &RandomGraph, specs: &[TensorSpec]) -> (usize, usize) {
    let largest = specs.iter().map(|s| s.max_numel()).max().unwrap_or(0);
    let mut macs = 0usize;
    for (i, n) in rg.nodes.iter().enumerate() {
        let out = &specs[rg.inputs.len() + i];
        let x = n.args.first().map(|&a| &specs[a]);
        let per = match (&n.op, x) {
            (RandomOp::Conv { kernel, groups, .. }, Some(x)) => {
                x.shape.get(1).map_or(1, |d| d.size) / (*groups).max(1) * kernel * kernel
            }
            (RandomOp::Linear { .. }, Some(x)) => x.shape.last().map_or(1, |d| d.size),
            _ => 0,
        };
        macs = macs.saturating_add(per.saturating_mul(out.max_numel()));
    }
    (largest, macs)
}

/// Whether a memory format fits a rank (the generator's copies pick one that does).
pub fn format_fits(f: MemoryFormat, rank: usize) -> bool {
    f.required_rank().is_none_or(|r| r == rank)
}
