//! Shrinking a random graph while keeping it valid: remove a node (its readers read its
//! first argument instead), drop an output, shrink an input's dims or make it fp32 and
//! contiguous, simplify an op's parameters. Every candidate goes through [`repair`], which
//! re-infers the graph forward and drops what no longer infers, so a candidate is always a
//! graph the builder accepts (or none).

use super::build::node_spec;
use super::{RandomGraph, RandomNode, RandomOp};
use reference::{ElemType, MemoryFormat};

/// Re-infers `rg` forward: a node whose arguments no longer infer is dropped and its
/// readers read its first argument instead (an input or an earlier kept node); outputs
/// follow the same replacement, nodes no output needs are dropped, unused inputs too.
/// `None` when no node output is left.
pub fn repair(rg: &RandomGraph) -> Option<RandomGraph> {
    let n_in = rg.inputs.len();
    // What each old value stands for now (a value of `kept`), and the kept graph's specs.
    let mut stands: Vec<Option<usize>> = (0..n_in).map(Some).collect();
    let mut kept = RandomGraph { inputs: rg.inputs.clone(), nodes: vec![], outputs: vec![] };
    let mut specs = super::build::specs(&RandomGraph { nodes: vec![], outputs: vec![0], ..kept.clone() }).ok()?;
    for node in &rg.nodes {
        let args: Option<Vec<usize>> = node.args.iter().map(|&a| stands.get(a).copied().flatten()).collect();
        let Some(args) = args else {
            stands.push(None);
            continue;
        };
        kept.nodes.push(RandomNode { op: node.op.clone(), args: args.clone() });
        let i = kept.nodes.len() - 1;
        match node_spec(&kept, i, &specs) {
            Ok(s) => {
                specs.push(s);
                stands.push(Some(n_in + i));
            }
            Err(_) => {
                kept.nodes.pop();
                stands.push(args.first().copied());
            }
        }
    }
    let mut outputs: Vec<usize> = rg.outputs.iter().filter_map(|&o| stands.get(o).copied().flatten()).collect();
    outputs.retain(|&o| o >= n_in);
    outputs.dedup();
    if outputs.is_empty() {
        return None;
    }
    kept.outputs = outputs;
    Some(prune(&kept))
}

/// Drops nodes no output needs and inputs no node reads, renumbering the values.
fn prune(rg: &RandomGraph) -> RandomGraph {
    let n_in = rg.inputs.len();
    let mut live = vec![false; rg.values()];
    for &o in &rg.outputs {
        live[o] = true;
    }
    for i in (0..rg.nodes.len()).rev() {
        if live[n_in + i] {
            for &a in &rg.nodes[i].args {
                live[a] = true;
            }
        }
    }
    let mut new_id = vec![usize::MAX; rg.values()];
    let mut out = RandomGraph { inputs: vec![], nodes: vec![], outputs: vec![] };
    for j in 0..n_in {
        if live[j] {
            new_id[j] = out.inputs.len();
            out.inputs.push(rg.inputs[j].clone());
        }
    }
    let n_kept_in = out.inputs.len();
    for (i, n) in rg.nodes.iter().enumerate() {
        if live[n_in + i] {
            new_id[n_in + i] = n_kept_in + out.nodes.len();
            out.nodes.push(RandomNode { op: n.op.clone(), args: n.args.iter().map(|&a| new_id[a]).collect() });
        }
    }
    out.outputs = rg.outputs.iter().map(|&o| new_id[o]).collect();
    out
}

/// Simpler graphs than `rg`, simplest change first, each valid (see [`repair`]).
pub fn candidates(rg: &RandomGraph) -> Vec<RandomGraph> {
    let mut raw: Vec<RandomGraph> = vec![];
    if rg.outputs.len() > 1 {
        for k in 0..rg.outputs.len() {
            let mut c = rg.clone();
            c.outputs.remove(k);
            raw.push(c);
        }
    }
    // Removing a node early in the graph removes the most (its readers may go with it).
    for i in 0..rg.nodes.len() {
        let mut c = rg.clone();
        let n_in = c.inputs.len();
        let first = c.nodes[i].args.first().copied();
        c.nodes.remove(i);
        let old = n_in + i;
        let remap = |v: usize| -> Option<usize> {
            match v.cmp(&old) {
                std::cmp::Ordering::Less => Some(v),
                std::cmp::Ordering::Equal => first,
                std::cmp::Ordering::Greater => Some(v - 1),
            }
        };
        let mut ok = true;
        for n in &mut c.nodes {
            for a in &mut n.args {
                match remap(*a) {
                    Some(v) => *a = v,
                    None => ok = false,
                }
            }
        }
        c.outputs = c.outputs.iter().filter_map(|&o| remap(o)).collect();
        if ok {
            raw.push(c);
        }
    }
    for j in 0..rg.inputs.len() {
        let input = &rg.inputs[j];
        if input.dtype != ElemType::F32 {
            let mut c = rg.clone();
            c.inputs[j].dtype = ElemType::F32;
            raw.push(c);
        }
        if input.format != MemoryFormat::Contiguous {
            let mut c = rg.clone();
            c.inputs[j].format = MemoryFormat::Contiguous;
            raw.push(c);
        }
        for d in 0..input.shape.len() {
            let s = input.shape[d];
            for new in [1, s / 2, s.saturating_sub(1)] {
                if new >= 1 && new < s {
                    let mut c = rg.clone();
                    c.inputs[j].shape[d] = new;
                    raw.push(c);
                }
            }
        }
    }
    for i in 0..rg.nodes.len() {
        for op in simpler_ops(&rg.nodes[i].op) {
            let mut c = rg.clone();
            c.nodes[i].op = op;
            raw.push(c);
        }
    }
    let mut out: Vec<RandomGraph> = vec![];
    for c in raw.iter().filter_map(repair) {
        if c != *rg && !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// The op with one parameter made plainer.
fn simpler_ops(op: &RandomOp) -> Vec<RandomOp> {
    let mut out = vec![];
    match op {
        RandomOp::Mean { dims, keepdim, dtype } => {
            if dtype.is_some() {
                out.push(RandomOp::Mean { dims: dims.clone(), keepdim: *keepdim, dtype: None });
            }
            if *keepdim {
                out.push(RandomOp::Mean { dims: dims.clone(), keepdim: false, dtype: *dtype });
            }
            if dims.len() > 1 {
                out.push(RandomOp::Mean { dims: dims[1..].to_vec(), keepdim: *keepdim, dtype: *dtype });
            }
        }
        RandomOp::Conv { out: o, kernel, stride, padding, dilation, groups, bias, qs8 } => {
            let base = RandomOp::Conv {
                out: *o,
                kernel: *kernel,
                stride: *stride,
                padding: *padding,
                dilation: *dilation,
                groups: *groups,
                bias: *bias,
                qs8: *qs8,
            };
            let with = |f: &dyn Fn(&mut RandomOp)| {
                let mut c = base.clone();
                f(&mut c);
                c
            };
            if let RandomOp::Conv { .. } = base {
                if *kernel > 1 {
                    out.push(with(&|c| set_conv(c, |k, _, p, _, _, _| (*k, *p) = (1, 0))));
                }
                if *stride > 1 || *dilation > 1 || *padding > 0 {
                    out.push(with(&|c| set_conv(c, |_, s, p, d, _, _| (*s, *p, *d) = (1, 0, 1))));
                }
                if *bias || *qs8 {
                    out.push(with(&|c| set_conv(c, |_, _, _, _, b, q| (*b, *q) = (false, false))));
                }
            }
        }
        RandomOp::Constant { binary, shape, first } if !shape.is_empty() || *first => {
            out.push(RandomOp::Constant { binary: *binary, shape: vec![], first: false });
        }
        RandomOp::Linear { out: o, bias: true } => out.push(RandomOp::Linear { out: *o, bias: false }),
        RandomOp::ToCopy { dtype: Some(_), format: Some(f) } => {
            out.push(RandomOp::ToCopy { dtype: None, format: Some(*f) });
        }
        _ => {}
    }
    out
}

/// Edits a conv's kernel, stride, padding, dilation, bias and int8 weights in place.
fn set_conv(op: &mut RandomOp, f: impl Fn(&mut usize, &mut usize, &mut usize, &mut usize, &mut bool, &mut bool)) {
    if let RandomOp::Conv { kernel, stride, padding, dilation, bias, qs8, .. } = op {
        f(kernel, stride, padding, dilation, bias, qs8);
    }
}
