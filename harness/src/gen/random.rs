//! Draws of random graphs: forward, one node at a time, each candidate kept only when its
//! shapes infer (`patterns::random::build::node_spec`) and it stays within the size budget.
//!
//! Every draw reads numbers from a [`Source`]: the fuzz loop's splitmix64 stream, or a
//! proptest tape ([`graphs`]) that reads 0 once it runs out. Choice 0 is always the simplest
//! (one input, fp32, rank 1, a mean, sizes of 1, no dtype argument), so proptest shrinks a
//! failing graph by shortening its tape and lowering its numbers; the fuzz job's minimizer
//! works on the stored graph instead (`patterns::random::shrink`).

use crate::patterns::random::build::{format_fits, node_spec, size_cost, specs};
use crate::patterns::random::shrink::repair;
use crate::patterns::random::{RandomGraph, RandomInput, RandomNode, RandomOp};
use proptest::prelude::*;
use reference::data::SplitMix64;
use reference::graph::{BinaryOp, TensorSpec};
use reference::{ElemType, MemoryFormat};

/// A stream of choices.
pub trait Source {
    /// A number in `0..n` (`n >= 1`).
    fn below(&mut self, n: u64) -> u64;
}

impl Source for SplitMix64 {
    fn below(&mut self, n: u64) -> u64 {
        SplitMix64::below(self, n)
    }
}

/// A finite tape of choices, 0 after its end (proptest's shrinkable form).
pub struct Tape<'a> {
    values: &'a [u32],
    at: usize,
}

impl Source for Tape<'_> {
    fn below(&mut self, n: u64) -> u64 {
        let v = self.values.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        v as u64 % n.max(1)
    }
}

/// Limits of a random graph.
#[derive(Clone, Copy, Debug)]
pub struct RandomConfig {
    /// Most nodes (generator ops; each expands to one to three graph ops).
    pub max_nodes: usize,
    /// Most elements of any value.
    pub max_elems: usize,
    /// Most multiply-accumulates of all convs and linears together.
    pub max_macs: usize,
}

impl Default for RandomConfig {
    fn default() -> Self {
        RandomConfig { max_nodes: 24, max_elems: 1024, max_macs: 1 << 15 }
    }
}

/// Index by weight: `w[k]` chances in `sum(w)`; 0 picks the first.
fn weighted(src: &mut impl Source, w: &[u64]) -> usize {
    let mut r = src.below(w.iter().sum());
    for (k, &x) in w.iter().enumerate() {
        if r < x {
            return k;
        }
        r -= x;
    }
    0
}

const FLOATS: [ElemType; 3] = [ElemType::F32, ElemType::F16, ElemType::Bf16];

/// A random graph within `cfg` (always valid; at least one node).
pub fn draw(src: &mut impl Source, cfg: &RandomConfig) -> RandomGraph {
    let dtype = FLOATS[weighted(src, &[6, 2, 2])];
    let rank = 1 + weighted(src, &[1, 2, 2, 4, 1]);
    let mut shape: Vec<usize> = (0..rank).map(|_| 1 + src.below(7) as usize).collect();
    while shape.iter().product::<usize>() > cfg.max_elems {
        let i = (0..rank).max_by_key(|&i| shape[i]).unwrap_or(0);
        shape[i] = shape[i].div_ceil(2);
    }
    let format = match (rank, src.below(4)) {
        (4, 1) => MemoryFormat::ChannelsLast,
        (5, 1) => MemoryFormat::ChannelsLast3d,
        _ => MemoryFormat::Contiguous,
    };
    let mut inputs = vec![RandomInput { shape: shape.clone(), dtype, format }];
    for _ in 0..weighted(src, &[6, 3, 1]) {
        // Another input that broadcasts against the first: some dims 1, maybe fewer dims.
        let drop = if src.below(3) == 1 { src.below(rank as u64) as usize } else { 0 };
        let s: Vec<usize> = shape[drop..].iter().map(|&d| if src.below(3) == 1 { 1 } else { d }).collect();
        let format =
            if s.len() == 4 && src.below(3) == 1 { MemoryFormat::ChannelsLast } else { MemoryFormat::Contiguous };
        inputs.push(RandomInput { shape: s, dtype, format });
    }
    let mut rg = RandomGraph { inputs, nodes: vec![], outputs: vec![] };
    let mut all = specs(&RandomGraph { outputs: vec![0], ..rg.clone() }).unwrap_or_default();
    let extra = if src.below(3) == 0 { src.below(cfg.max_nodes as u64) as usize } else { 0 };
    let target = (1 + src.below(6) as usize + extra).min(cfg.max_nodes.max(1));
    let mut tries = 0;
    while rg.nodes.len() < target && tries < 8 * target {
        tries += 1;
        let n = all.len();
        let v =
            if src.below(4) == 0 { src.below(n as u64) as usize } else { n - 1 - src.below(n.min(4) as u64) as usize };
        let Some(node) = draw_node(src, &all, v) else { continue };
        rg.nodes.push(node);
        let i = rg.nodes.len() - 1;
        let ok = node_spec(&rg, i, &all).ok().filter(|s| s.max_numel() <= cfg.max_elems);
        let fits = ok.is_some() && {
            let mut with = all.clone();
            with.extend(ok.clone());
            size_cost(&rg, &with).1 <= cfg.max_macs
        };
        match ok {
            Some(s) if fits => all.push(s),
            _ => {
                rg.nodes.pop();
            }
        }
    }
    if rg.nodes.is_empty() {
        // A mean of the first input always infers.
        rg.nodes.push(RandomNode { op: RandomOp::Mean { dims: vec![], keepdim: false, dtype: None }, args: vec![0] });
    }
    // Every node no other reads is an output.
    let n_in = rg.inputs.len();
    let mut read = vec![false; rg.values()];
    for n in &rg.nodes {
        for &a in &n.args {
            read[a] = true;
        }
    }
    rg.outputs = (n_in..rg.values()).filter(|&v| !read[v]).collect();
    repair(&rg).expect("a drawn graph has a node output")
}

/// One candidate node reading value `v` (and maybe another), or none when the drawn op
/// does not apply to `v`'s spec.
fn draw_node(src: &mut impl Source, all: &[TensorSpec], v: usize) -> Option<RandomNode> {
    let s = &all[v];
    let shape = s.max_shape();
    let r = shape.len();
    // mean, pool, conv, binary, constant, square, rsqrt, clamp, linear, qdq, copy, reshape, permute
    let kind = weighted(src, &[5, 1, 4, 4, 4, 1, 1, 2, 2, 2, 2, 2, 2]);
    let one = |op| Some(RandomNode { op, args: vec![v] });
    match kind {
        0 => {
            let ri = r as i64;
            let mut dims: Vec<i64> = match (r, src.below(4)) {
                (0, _) | (_, 2) => vec![],
                (_, 0) => vec![src.below(r as u64) as i64],
                (_, 1) => {
                    let d: Vec<i64> = (0..ri).filter(|_| src.below(2) == 1).collect();
                    if d.is_empty() {
                        vec![ri - 1]
                    } else {
                        d
                    }
                }
                _ => (0..ri).collect(),
            };
            for d in &mut dims {
                if src.below(3) == 1 {
                    *d -= ri;
                }
            }
            if src.below(4) == 1 {
                dims.reverse();
            }
            let keepdim = src.below(2) == 1;
            let dtype = (src.below(10) == 9).then(|| {
                FLOATS[(1 + src.below(2) as usize + FLOATS.iter().position(|&d| d == s.dtype).unwrap_or(0)) % 3]
            });
            one(RandomOp::Mean { dims, keepdim, dtype })
        }
        1 => (r == 3 || r == 4).then(|| RandomNode { op: RandomOp::Pool, args: vec![v] }),
        2 => {
            if r != 4 {
                return None;
            }
            let c = shape[1];
            let groups = match src.below(3) {
                0 => 1,
                1 => c,
                _ => {
                    let divisors: Vec<usize> = (1..=c).filter(|g| c / g * g == c).collect();
                    divisors[src.below(divisors.len() as u64) as usize]
                }
            };
            let out = if groups == 1 { 1 + src.below(8) as usize } else { groups * (1 + src.below(2) as usize) };
            let kernel = 1 + src.below(3) as usize;
            let stride = 1 + (src.below(4) == 3) as usize;
            let dilation = 1 + (src.below(5) == 4) as usize;
            let padding = src.below(kernel as u64) as usize;
            let bias = src.below(3) != 0;
            let qs8 = s.dtype == ElemType::F32 && src.below(5) == 4;
            one(RandomOp::Conv { out, kernel, stride, padding, dilation, groups, bias, qs8 })
        }
        3 => {
            let binary = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul][src.below(3) as usize];
            let n = all.len();
            let start = src.below(n as u64) as usize;
            let other = (0..n)
                .map(|k| (start + k) % n)
                .find(|&o| all[o].dtype == s.dtype && reference::graph::broadcast(&all[o].shape, &s.shape).is_ok())?;
            let args = if src.below(2) == 1 { vec![other, v] } else { vec![v, other] };
            Some(RandomNode { op: RandomOp::Binary { binary }, args })
        }
        4 => {
            let binary = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div][src.below(4) as usize];
            let mut c: Vec<usize> = match src.below(4) {
                0 => vec![],
                1 => shape.clone(),
                2 => shape.iter().map(|&d| if src.below(2) == 1 { 1 } else { d }).collect(),
                // The value broadcasts: the constant is larger where the value has a 1.
                _ => shape
                    .iter()
                    .map(|&d| if d == 1 && src.below(2) == 1 { 2 + src.below(2) as usize } else { d })
                    .collect(),
            };
            if !c.is_empty() && src.below(3) == 1 {
                let k = src.below(c.len() as u64) as usize;
                c.drain(..k);
            }
            if c.len() < 6 && src.below(8) == 1 {
                c.insert(0, 2);
            }
            let first = binary != BinaryOp::Div && src.below(2) == 1;
            one(RandomOp::Constant { binary, shape: c, first })
        }
        5 => one(RandomOp::Square),
        6 => one(RandomOp::Rsqrt { floor: [1.0, 0.5, 0.25, 2.0][src.below(4) as usize] }),
        7 => {
            let (min, max) = match src.below(4) {
                0 => (Some(0.0), None),
                1 => (Some(-1.0), Some(1.0)),
                2 => (Some([-1.0, -0.5, 0.5][src.below(3) as usize]), None),
                _ => (None, Some([0.5, 1.0, 6.0][src.below(3) as usize])),
            };
            one(RandomOp::Clamp { min, max })
        }
        8 => (r >= 1).then(|| RandomNode {
            op: RandomOp::Linear { out: 1 + src.below(8) as usize, bias: src.below(2) == 1 },
            args: vec![v],
        }),
        9 => {
            if s.dtype != ElemType::F32 {
                return None;
            }
            let scale = match src.below(4) {
                0 => 1.0 / (1u32 << (2 + src.below(6))) as f32,
                // A [-1, 1] observer's: 0.0078431377.
                1 => (2.0f64 / 255.0) as f32,
                // A min/max observer's scale of a range up to 8 wide.
                2 => (8.0 * (1 + src.below(1000)) as f64 / 1000.0 / 255.0) as f32,
                _ => (1 + src.below(1000)) as f32 / 4000.0,
            };
            let zero_point = if src.below(3) == 0 { 0 } else { src.below(256) as i32 - 128 };
            one(RandomOp::Qdq { scale, zero_point })
        }
        10 => {
            let dtype = (src.below(2) == 1).then(|| FLOATS[src.below(3) as usize]);
            let formats = [MemoryFormat::Contiguous, MemoryFormat::ChannelsLast, MemoryFormat::ChannelsLast3d];
            let fits: Vec<MemoryFormat> = formats.into_iter().filter(|&f| format_fits(f, r)).collect();
            let format = (dtype.is_none() || src.below(2) == 1).then(|| fits[src.below(fits.len() as u64) as usize]);
            one(RandomOp::ToCopy { dtype, format })
        }
        11 => {
            let mut to: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
            match src.below(4) {
                0 => to = vec![-1],
                1 if r >= 2 => {
                    let k = src.below(r as u64 - 1) as usize;
                    let merged = to[k] * to[k + 1];
                    to.splice(k..k + 2, [merged]);
                }
                2 if r < 6 => {
                    let k = src.below(r.max(1) as u64) as usize;
                    match to.get(k).copied().and_then(|d| (2..d).find(|f| d % f == 0).map(|f| (d, f))) {
                        Some((d, f)) => {
                            to.splice(k..=k, [f, d / f]);
                        }
                        None => to.insert(k.min(to.len()), 1),
                    }
                }
                _ => {
                    if let Some(k) = to.iter().position(|&d| d == 1) {
                        to.remove(k);
                    } else if r < 6 {
                        to.push(1);
                    }
                }
            }
            if !to.is_empty() && src.below(3) == 1 {
                let k = src.below(to.len() as u64) as usize;
                to[k] = -1;
            }
            one(RandomOp::Reshape { shape: to })
        }
        _ => {
            let mut perm: Vec<i64> = (0..r as i64).collect();
            match src.below(3) {
                0 if r == 4 => perm = if src.below(2) == 0 { vec![0, 2, 3, 1] } else { vec![0, 3, 1, 2] },
                // Keeps the innermost dim.
                1 if r >= 3 => perm[..r - 1].reverse(),
                _ => {
                    for k in (1..r).rev() {
                        let j = src.below(k as u64 + 1) as usize;
                        perm.swap(k, j);
                    }
                }
            }
            for p in &mut perm {
                if src.below(4) == 1 {
                    *p -= r as i64;
                }
            }
            one(RandomOp::Permute { perm })
        }
    }
}

/// Random graphs from a shrinkable tape (see the module docs).
pub fn graphs(cfg: RandomConfig) -> impl Strategy<Value = RandomGraph> {
    proptest::collection::vec(any::<u32>(), 0..160).prop_map(move |t| draw(&mut Tape { values: &t, at: 0 }, &cfg))
}

/// The case of a random graph: its first input's shape and format, its coarsest float type
/// (the outputs oracle's compute type), inputs and weights from `seed`.
pub fn case_of(rg: RandomGraph, seed: u64, threads: Vec<usize>) -> crate::case::Case {
    let first = &rg.inputs[0];
    let mut c = crate::case::Case::new(crate::case::Pattern::Random, &first.shape, &[], false);
    c.format = first.format;
    c.dtype = rg.coarsest();
    c.seed = seed;
    c.threads = threads;
    c.graph = Some(rg);
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patterns;
    use crate::patterns::random::shrink::candidates;

    #[test]
    fn drawn_graphs_build_round_trip_and_shrink_to_valid_graphs() {
        let cfg = RandomConfig::default();
        let mut rng = SplitMix64::new(7);
        let mut ops = std::collections::BTreeSet::new();
        for k in 0..300u64 {
            let g = draw(&mut rng, &cfg);
            assert!(!g.nodes.is_empty() && g.nodes.len() <= cfg.max_nodes);
            ops.extend(g.nodes.iter().map(|n| n.op.name()));
            let c = case_of(g.clone(), k, vec![1, 2, 3]);
            let b = patterns::build(&c).unwrap_or_else(|e| panic!("{e}: {}", c.to_json()));
            assert!(b.graph.validate().is_ok(), "{}", c.to_json());
            assert!(b.magnitude(&c).is_some_and(|m| m.outputs.len() == b.graph.outputs.len()));
            assert_eq!(crate::case::Case::from_json(&c.to_json()).unwrap(), c);
            if k % 10 == 0 {
                for s in candidates(&g) {
                    patterns::build(&case_of(s, k, vec![1])).unwrap();
                }
            }
        }
        assert_eq!(ops.len(), 13, "every generator op is drawn: {ops:?}");
    }

    #[test]
    fn an_empty_tape_is_the_simplest_graph() {
        let g = draw(&mut Tape { values: &[], at: 0 }, &RandomConfig::default());
        assert_eq!(g.inputs.len(), 1);
        assert_eq!((g.inputs[0].shape.clone(), g.inputs[0].dtype), (vec![1], ElemType::F32));
        assert_eq!(g.nodes.len(), 1);
        assert!(matches!(g.nodes[0].op, RandomOp::Mean { .. }));
    }
}
