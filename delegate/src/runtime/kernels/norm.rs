//! The fused group `fuse::Group::Norm` (RMSNorm's `x * rsqrt(mean(x * x) + eps) * w`) over
//! rows: per block of rows, the rows' sums of squares, the mean's tail on them, then the
//! chain over the same rows while they are still in L1/L2, so `x` comes from memory once
//! instead of once per group. Each step is the kernel the groups run one after the other
//! (`simd::row_sums_f32` per row, `simd::chain_rows` on a range of the output), on the same
//! elements in the same order, so the same bits.

use super::mean::{mean_f32_planned, MeanPlan};
use super::{elementwise, fused, Ctx};
use crate::runtime::pool::Parts;
use crate::runtime::simd::{self, BinOp, ChainLayout, ChainStep, Src, Term, CHAIN_ARGS};

/// Input elements per block of rows: 128 KiB of f32, read by the sums and again by the chain
/// from L2 (with the block's output, a quarter of Zen 3's L2). Each block pays the fixed cost
/// of a tail and a chain call (about 1,000 instructions): at 4,096 elements RMSNorm
/// 1x128x2048 took 51 us against the two groups' 44 (program_cost, 1 thread, warm, AMD
/// EPYC Zen 4), at 16,384 49 against 46, at 32,768 46 against 45.
const BLOCK: usize = 32768;

/// A chain over some layout: steps, layout, operands.
#[derive(Clone, Copy)]
pub struct Chain<'a> {
    pub steps: &'a [ChainStep],
    pub lay: &'a ChainLayout,
    pub args: &'a [&'a [f32]],
}

/// A `Norm` group's operands on fp32 rows `x = [rows, len]` (a last-dim mean).
pub struct Norm<'a> {
    pub x: &'a [f32],
    pub len: usize,
    /// What each row's sum is multiplied by (the mean's `1 / len`).
    pub scale: f32,
    /// The mean node's output range.
    pub act: Option<(f32, f32)>,
    /// The mean's tail, over the `rows` means in place (its first step reads them).
    pub tail: Option<Chain<'a>>,
    /// The chain over the output (`x`'s shape); its operand `norm_arg` is the tail's output,
    /// whose slice in `apply.args` is not read (the rows computed here are).
    pub apply: Chain<'a>,
    pub norm_arg: usize,
    /// `apply` is `x * norm * w` over rows, `w` (this operand of `apply`) one row for all
    /// ([`scale_rows_operand`]): it runs as `simd::scale_rows`.
    pub scale_rows: Option<usize>,
}

/// Where a Norm's chain (`steps` over operand values `args`, laid out as `lay`) is
/// RMSNorm's `(x * norm) * w`, with `x` the mean's input (dense), `norm` one value per row
/// and `w` one row broadcast over every row: `w`'s operand index. The operands of each
/// product may come in either order. `None` for any other chain, which runs as a chain.
pub fn scale_rows_operand(
    steps: &[ChainStep],
    args: &[usize],
    lay: &ChainLayout,
    x: usize,
    norm: usize,
) -> Option<usize> {
    let [ChainStep::Bin { op: BinOp::Mul, a, b }, ChainStep::Bin { op: BinOp::Mul, a: a2, b: b2 }] = steps else {
        return None;
    };
    let arg = |s: &Src| match *s {
        Src::Arg(k) => args.get(k).map(|&v| (k, v)),
        Src::Acc => None,
    };
    let ((ka, va), (kb, vb)) = (arg(a)?, arg(b)?);
    let (xk, nk) = match (va, vb) {
        _ if (va, vb) == (x, norm) => (ka, kb),
        _ if (va, vb) == (norm, x) => (kb, ka),
        _ => return None,
    };
    let (w, vw) = match (a2, b2) {
        (Src::Acc, s) | (s, Src::Acc) => arg(s)?,
        _ => return None,
    };
    if vw == x || vw == norm {
        return None;
    }
    // Strides (outer, inner) of each operand over the output's rows: x dense, norm one per
    // row, w one row (a single row has no outer dim).
    let r = lay.rank;
    let len = *lay.dims.get(r.checked_sub(1)?)?;
    let st = |k: usize| (if r == 2 { lay.st[k][0] } else { 0 }, lay.st[k][r - 1]);
    let ok = (1..=2).contains(&r)
        && st(xk) == (if r == 2 { len } else { 0 }, 1)
        && st(nk) == (if r == 2 { 1 } else { 0 }, 0)
        && st(w) == (0, 1);
    ok.then_some(w)
}

/// The square-mean part over whole arrays (`fuse::Group::SquareMean`, and a `Norm` whose rows
/// cannot go block by block): the mean of squares of `x` into `out`, the mean node's output
/// range, then its tail in place.
pub fn square_mean(
    ctx: &Ctx,
    x: &[f32],
    mp: &MeanPlan,
    act: Option<(f32, f32)>,
    tail: Option<Chain>,
    out: &mut [f32],
) -> Result<(), String> {
    mean_f32_planned(ctx, x, mp, Term::Square, out)?;
    if let Some((lo, hi)) = act {
        elementwise::clamp_f32(ctx, out, lo, hi);
    }
    if let Some(t) = tail {
        fused::run_chain(ctx, t.steps, t.lay, t.args, out);
    }
    Ok(())
}

/// Runs `n` into `norm` (one value per row: the tail's output) and `out` (`x`'s size),
/// threaded over blocks of whole rows.
///
/// # Panics
/// If `x`, `norm` and `out` do not have `rows * len`, `rows` and `rows * len` elements, or an
/// operand is shorter than its layout (the caller built the layouts from the shapes).
pub fn run(ctx: &Ctx, n: &Norm, norm: &mut [f32], out: &mut [f32]) {
    let (rows, len) = (norm.len(), n.len);
    assert!(
        len > 0 && n.x.len() == rows * len && out.len() == rows * len && n.norm_arg < n.apply.args.len(),
        "norm of {} elements in rows of {len} into {rows} rows and {} outputs",
        n.x.len(),
        out.len()
    );
    let extra: usize = n.apply.args.iter().map(|a| a.len()).sum();
    let bytes = 4 * (2 * n.x.len() + out.len() + extra);
    if ctx.pool.runs_inline(rows, bytes, 1, true) {
        return rows_into(ctx, n, 0, norm, out);
    }
    let split = ctx.pool.split(rows, bytes, 1, true).bounds;
    let out_bounds = split.iter().map(|&b| b * len).collect();
    let (norms, outs) = (Parts::new(norm, split), Parts::new(out, out_bounds));
    ctx.pool.run_tasks(norms.len(), &|t| {
        if let (Some(r), Some(o)) = (norms.take(t), outs.take(t)) {
            rows_into(ctx, n, norms.start(t), r, o);
        }
    });
}

/// Rows `first..first + norm.len()`: their means, tail and chain, a block at a time.
fn rows_into(ctx: &Ctx, n: &Norm, first: usize, norm: &mut [f32], out: &mut [f32]) {
    let (isa, len) = (ctx.isa, n.len);
    let (per, k) = ((BLOCK / len).max(1), n.apply.args.len());
    for (b, (r, o)) in norm.chunks_mut(per).zip(out.chunks_mut(per * len)).enumerate() {
        let row = first + b * per;
        simd::row_sums_f32(isa, n.x, row * len, len, n.scale, r, Term::Square);
        if let Some((lo, hi)) = n.act {
            simd::clamp_inplace(isa, r, lo, hi);
        }
        if let Some(t) = n.tail {
            simd::chain_rows(isa, t.steps, t.args, &[0; CHAIN_ARGS], t.lay, row, r, isa);
        }
        if let Some(w) = n.scale_rows {
            let at = row * len;
            simd::scale_rows(isa, &n.x[at..at + o.len()], r, &n.apply.args[w][..len], o);
            continue;
        }
        // The chain reads this block's norms from `r`, which holds rows `row..` of them.
        let (mut args, mut origin) = ([&[][..]; CHAIN_ARGS], [0; CHAIN_ARGS]);
        args[..k].copy_from_slice(n.apply.args);
        (args[n.norm_arg], origin[n.norm_arg]) = (&*r, row);
        simd::chain_rows(isa, n.apply.steps, &args[..k], &origin, n.apply.lay, row * len, o, isa);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::simd::CHAIN_RANK;

    /// The layout of an output `[rows, len]` over operands with these (outer, inner) strides.
    fn lay(rows: usize, len: usize, st: &[(usize, usize)]) -> ChainLayout {
        let mut l = ChainLayout { rank: 2, dims: [0; CHAIN_RANK], st: [[0; CHAIN_RANK]; CHAIN_ARGS] };
        l.dims[..2].copy_from_slice(&[rows, len]);
        for (k, &(o, i)) in st.iter().enumerate() {
            l.st[k][..2].copy_from_slice(&[o, i]);
        }
        l
    }

    #[test]
    fn scale_rows_takes_x_times_norm_times_a_row_and_nothing_else() {
        let mul = |a, b| ChainStep::Bin { op: BinOp::Mul, a, b };
        let (x, norm, w) = (10, 11, 12);
        // Operands 0, 1, 2 are values x, norm, w: dense, one per row, one row.
        let args = [x, norm, w];
        let good = lay(8, 64, &[(64, 1), (1, 0), (0, 1)]);
        let (a0, a1, a2, acc) = (Src::Arg(0), Src::Arg(1), Src::Arg(2), Src::Acc);
        for steps in [[mul(a0, a1), mul(acc, a2)], [mul(a1, a0), mul(a2, acc)]] {
            assert_eq!(scale_rows_operand(&steps, &args, &good, x, norm), Some(2));
        }
        let steps = [mul(a0, a1), mul(acc, a2)];
        // A weight of the input's shape, a norm per element, another first product, a sum.
        assert_eq!(scale_rows_operand(&steps, &args, &lay(8, 64, &[(64, 1), (1, 0), (64, 1)]), x, norm), None);
        assert_eq!(scale_rows_operand(&steps, &args, &lay(8, 64, &[(64, 1), (64, 1), (0, 1)]), x, norm), None);
        assert_eq!(scale_rows_operand(&[mul(a0, a2), mul(acc, a1)], &args, &good, x, norm), None);
        let add = [mul(a0, a1), ChainStep::Bin { op: BinOp::Add, a: acc, b: a2 }];
        assert_eq!(scale_rows_operand(&add, &args, &good, x, norm), None);
        // One row: a rank-1 layout.
        let mut one = lay(128, 0, &[(1, 0), (0, 0), (1, 0)]);
        one.rank = 1;
        assert_eq!(scale_rows_operand(&steps, &args, &one, x, norm), Some(2));
    }
}
