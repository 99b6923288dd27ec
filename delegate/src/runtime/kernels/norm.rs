//! The fused group `fuse::Group::Norm` (RMSNorm's `x * rsqrt(mean(x * x) + eps) * w`) over
//! rows: per block of rows, the rows' sums of squares, the mean's tail on them, then the
//! chain over the same rows while they are still in L1/L2, so `x` comes from memory once
//! instead of once per group. Each step is the kernel the groups run one after the other
//! (`simd::row_sums_f32` per row, `simd::chain_rows` on a range of the output), on the same
//! elements in the same order, so the same bits.

use super::mean::{mean_f32_planned, MeanPlan};
use super::{elementwise, fused, Ctx};
use crate::runtime::pool::Parts;
use crate::runtime::simd::{self, ChainLayout, ChainStep, Term, CHAIN_ARGS};

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
        // The chain reads this block's norms from `r`, which holds rows `row..` of them.
        let (mut args, mut origin) = ([&[][..]; CHAIN_ARGS], [0; CHAIN_ARGS]);
        args[..k].copy_from_slice(n.apply.args);
        (args[n.norm_arg], origin[n.norm_arg]) = (&*r, row);
        simd::chain_rows(isa, n.apply.steps, &args[..k], &origin, n.apply.lay, row * len, o, isa);
    }
}
