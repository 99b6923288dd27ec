//! Minimization: greedily shrink a failing case while it still fails the same way.
//!
//! Each pass tries simpler variants of the case in a fixed order (fewer modes, thread
//! counts and runs; no dynamic dims, specials, dtype argument; contiguous; fp32; a simpler
//! pattern; lower rank; smaller sizes; fewer dims; smaller pattern knobs) and keeps the
//! first that still fails with the same label, until nothing simpler fails or the budget
//! runs out. Deterministic: the same case and predicate give the same result.

use crate::case::{Case, Pattern};
use crate::patterns;
use reference::{ElemType, MemoryFormat};
use std::time::{Duration, Instant};

/// Limits on the search.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub max_tries: usize,
    pub max_time: Duration,
}

impl Default for Budget {
    fn default() -> Self {
        Budget { max_tries: 3000, max_time: Duration::from_secs(30) }
    }
}

/// The result of a minimization.
#[derive(Clone, Debug)]
pub struct Minimized {
    pub case: Case,
    pub tries: usize,
    pub steps: usize,
}

/// Shrinks `case` while `fails` keeps returning true.
pub fn minimize(case: &Case, budget: Budget, mut fails: impl FnMut(&Case) -> bool) -> Minimized {
    let start = Instant::now();
    let mut best = case.clone();
    let mut tries = 0;
    let mut steps = 0;
    'outer: loop {
        for cand in candidates(&best) {
            if tries >= budget.max_tries || start.elapsed() > budget.max_time {
                break 'outer;
            }
            if cand == best || patterns::build(&cand).is_err() {
                continue;
            }
            tries += 1;
            if fails(&cand) {
                best = cand;
                steps += 1;
                continue 'outer;
            }
        }
        break;
    }
    Minimized { case: best, tries, steps }
}

/// Simpler variants of a case, simplest change first.
pub fn candidates(c: &Case) -> Vec<Case> {
    let mut out = vec![];
    let mut push = |f: &dyn Fn(&mut Case)| {
        let mut n = c.clone();
        f(&mut n);
        out.push(n);
    };
    // Fewer configurations.
    if c.modes.len() > 1 {
        for &m in &c.modes {
            push(&|n| n.modes = vec![m]);
        }
    }
    if c.threads.len() > 1 {
        for &t in &c.threads {
            push(&|n| n.threads = vec![t]);
        }
    }
    if let Some(g) = c.graph.as_ref().filter(|_| c.pattern == Pattern::Random) {
        // A random graph shrinks by its own rules (fewer nodes, smaller inputs), each valid.
        if c.seed != 0 && c.inputs.is_none() {
            push(&|n| n.seed = 0);
        }
        for g in crate::patterns::random::shrink::candidates(g) {
            let threads = c.threads.clone();
            let mut n = crate::gen::random::case_of(g, c.seed, threads);
            n.modes = c.modes.clone();
            out.push(n);
        }
        return out;
    }
    if c.runs().len() > 1 && c.inputs.is_none() {
        for r in c.runs() {
            push(&|n| n.run_shapes = vec![r.clone()]);
        }
    }
    let inline = c.inputs.is_some();
    if !c.dynamic.is_empty() && !inline {
        push(&|n| {
            // Static at the (single) run size.
            let runs = n.runs();
            n.shape = runs[0].clone();
            n.dynamic.clear();
            n.run_shapes.clear();
        });
        for i in 0..c.dynamic.len() {
            push(&|n| {
                n.dynamic.remove(i);
            });
        }
    }
    if c.specials {
        push(&|n| n.specials = false);
    }
    if c.mean_dtype.is_some() {
        push(&|n| n.mean_dtype = None);
    }
    if c.format != MemoryFormat::Contiguous && !inline {
        push(&|n| n.format = MemoryFormat::Contiguous);
    }
    if c.dtype != ElemType::F32 && !inline {
        push(&|n| n.dtype = ElemType::F32);
        if c.dtype == ElemType::Bf16 {
            push(&|n| n.dtype = ElemType::F16);
        }
    }
    // Simpler patterns (earlier in `Pattern::ALL`).
    let pi = Pattern::ALL.iter().position(|&p| p == c.pattern).unwrap_or(0);
    for &p in &Pattern::ALL[..pi] {
        push(&|n| n.pattern = p);
    }
    if !inline {
        // Lower rank: drop one dim, renumbering the dims list.
        if c.shape.len() > 1 {
            for d in 0..c.shape.len() {
                push(&|n| drop_dim(n, d));
            }
        }
        // Smaller sizes.
        for d in 0..c.shape.len() {
            let s = c.shape[d];
            for new in [1, s / 2, s.saturating_sub(1)] {
                if new >= 1 && new < s {
                    push(&|n| {
                        n.shape[d] = new;
                        for r in &mut n.run_shapes {
                            r[d] = r[d].min(new);
                        }
                        n.run_shapes.dedup();
                    });
                }
            }
        }
    }
    // Fewer or plainer dims.
    if c.dims.len() > 1 {
        for i in 0..c.dims.len() {
            push(&|n| {
                n.dims.remove(i);
            });
        }
    }
    let r = c.shape.len() as i64;
    if c.dims.iter().any(|&d| d < 0) {
        push(&|n| n.dims.iter_mut().for_each(|d| *d = d.rem_euclid(r.max(1))));
    }
    if c.dims.is_empty() && c.shape.len() == 1 {
        push(&|n| n.dims = vec![0]);
    }
    if c.param > 0 {
        push(&|n| n.param = 0);
        if c.param > 1 {
            push(&|n| n.param = 1);
            push(&|n| n.param /= 2);
        }
    }
    if c.variant != 0 {
        push(&|n| n.variant = 0);
        for bit in 0..5 {
            if c.variant >> bit & 1 == 1 {
                push(&|n| n.variant &= !(1 << bit));
            }
        }
    }
    if c.keepdim {
        push(&|n| n.keepdim = false);
    }
    if c.seed != 0 && c.inputs.is_none() {
        push(&|n| n.seed = 0);
    }
    out
}

/// Removes dim `d` from the shape, run shapes, dynamic list and dims list.
fn drop_dim(n: &mut Case, d: usize) {
    let old_rank = n.shape.len() as i64;
    n.shape.remove(d);
    for r in &mut n.run_shapes {
        if d < r.len() {
            r.remove(d);
        }
    }
    n.run_shapes.dedup();
    n.dynamic = n.dynamic.iter().filter(|&&x| x != d).map(|&x| if x > d { x - 1 } else { x }).collect();
    let had = !n.dims.is_empty();
    n.dims = n
        .dims
        .iter()
        .map(|&x| x.rem_euclid(old_rank.max(1)))
        .filter(|&x| x != d as i64)
        .map(|x| if x > d as i64 { x - 1 } else { x })
        .collect();
    if had && n.dims.is_empty() {
        n.dims = vec![0];
    }
    if n.format.required_rank().is_some_and(|r| r != n.shape.len()) {
        n.format = MemoryFormat::Contiguous;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinks_to_the_smallest_case_with_the_property() {
        // "Fails" whenever the case still has a dim of size >= 5 and is channels_last-free:
        // the result must keep exactly one such dim at size 5 and drop everything else.
        let mut c = Case::new(Pattern::AddMean, &[3, 7, 9, 2], &[-1, 1], true);
        c.dtype = ElemType::F16;
        c.specials = true;
        let m = minimize(&c, Budget::default(), |c| c.shape.iter().any(|&s| s >= 5));
        assert_eq!(m.case.pattern, Pattern::Mean);
        assert_eq!(m.case.shape, vec![5]);
        assert_eq!(m.case.dtype, ElemType::F32);
        assert!(!m.case.specials);
        assert_eq!(m.case.modes.len(), 1);
        assert_eq!(m.case.threads.len(), 1);
        assert!(m.steps > 0 && m.tries >= m.steps);
    }

    #[test]
    fn never_returns_a_passing_case() {
        let c = Case::new(Pattern::Mean, &[4, 4], &[0], false);
        let m = minimize(&c, Budget::default(), |_| false);
        assert_eq!(m.case, c);
        assert_eq!(m.steps, 0);
    }

    #[test]
    fn a_random_graph_shrinks_to_the_node_that_fails() {
        // "Fails" while the graph has a permute: the result keeps one permute and little else.
        let cfg = crate::gen::random::RandomConfig::default();
        let mut rng = reference::data::SplitMix64::new(3);
        let has_permute = |c: &Case| {
            c.graph.as_ref().is_some_and(|g| {
                g.nodes.iter().any(|n| matches!(n.op, crate::patterns::random::RandomOp::Permute { .. }))
            })
        };
        let c = (0..)
            .map(|k| crate::gen::random::case_of(crate::gen::random::draw(&mut rng, &cfg), k, vec![1, 2, 3]))
            .find(|c| has_permute(c) && c.graph.as_ref().is_some_and(|g| g.nodes.len() >= 8))
            .unwrap();
        let m = minimize(&c, Budget::default(), has_permute);
        let g = m.case.graph.as_ref().unwrap();
        assert!(g.nodes.len() <= 2, "{}", m.case.to_json());
        assert!(g.inputs[0].shape.iter().all(|&d| d == 1), "{}", m.case.to_json());
        assert!(patterns::build(&m.case).is_ok());
        assert_eq!((m.case.modes.len(), m.case.threads.len(), m.case.seed), (1, 1, 0));
    }
}
