//! Fused fp32 elementwise chains (see `runtime::fuse`): several elementwise nodes over one
//! output shape run as one pass, each operand read once and the output written once, with
//! the per-element arithmetic of the unfused kernels (so the same bits).

use super::Ctx;
use crate::runtime::simd::{self, ChainLayout, ChainStep, CHAIN_ARGS, CHAIN_RANK};

/// The joint iteration space of a chain producing `out` from operands of `args` shapes
/// (right-aligned, each broadcasting to `out`): size-1 output dims dropped, adjacent dims
/// merged where every operand allows it. `None` if an operand does not broadcast to `out`
/// or the ranks or operand count exceed the kernel's.
pub fn chain_layout(out: &[usize], args: &[&[usize]]) -> Option<ChainLayout> {
    let r = out.len();
    if r > CHAIN_RANK || args.len() > CHAIN_ARGS || args.iter().any(|a| a.len() > r) {
        return None;
    }
    // Per operand: row-major strides over `out`'s dims, 0 where it broadcasts.
    let mut full = [[0usize; CHAIN_RANK]; CHAIN_ARGS];
    for (st, a) in full.iter_mut().zip(args) {
        let mut acc = 1usize;
        for i in (0..r).rev() {
            let d = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
            if d != out[i] && d != 1 {
                return None;
            }
            st[i] = if d == 1 { 0 } else { acc };
            acc = acc.checked_mul(d)?;
        }
    }
    let mut l = ChainLayout { rank: 0, dims: [0; CHAIN_RANK], st: [[0; CHAIN_RANK]; CHAIN_ARGS] };
    for i in 0..r {
        if out[i] == 1 {
            continue;
        }
        if let Some(k) = l.rank.checked_sub(1) {
            let n = args.len();
            let mergeable = l.st.iter().zip(&full).take(n).all(|(st, f)| st[k] == f[i] * out[i]);
            if mergeable {
                l.dims[k] *= out[i];
                for (st, f) in l.st.iter_mut().zip(&full).take(n) {
                    st[k] = f[i];
                }
                continue;
            }
        }
        l.dims[l.rank] = out[i];
        for (st, f) in l.st.iter_mut().zip(&full).take(args.len()) {
            st[l.rank] = f[i];
        }
        l.rank += 1;
    }
    if l.rank == 0 {
        (l.rank, l.dims[0]) = (1, 1);
    }
    Some(l)
}

/// Runs a chain into `out` (threaded like one elementwise operator over its output, with the
/// chain's whole memory traffic as the cost). `args[k]` holds exactly the elements of the
/// `k`-th operand's shape used to build `lay`.
pub fn run_chain(ctx: &Ctx, steps: &[ChainStep], lay: &ChainLayout, args: &[&[f32]], out: &mut [f32]) {
    let isa = ctx.isa;
    let bytes = 4 * (out.len() + args.iter().map(|a| a.len()).sum::<usize>());
    ctx.par_chunks(out, bytes, 1024, false, |start, chunk| simd::chain_rows(isa, steps, args, lay, start, chunk));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_merge_only_where_every_operand_allows() {
        // RMSNorm's `x * r * w`: x [1, 8, 64], r [1, 8, 1], w [64].
        let l = chain_layout(&[1, 8, 64], &[&[1, 8, 64], &[1, 8, 1], &[64]]).unwrap();
        assert_eq!((l.rank, &l.dims[..2]), (2, &[8, 64][..]));
        assert_eq!((&l.st[0][..2], &l.st[1][..2], &l.st[2][..2]), (&[64, 1][..], &[1, 0][..], &[0, 1][..]));
        // Same-shape operands merge into one row.
        let l = chain_layout(&[2, 3, 4], &[&[2, 3, 4], &[2, 3, 4]]).unwrap();
        assert_eq!((l.rank, l.dims[0], l.st[0][0], l.st[1][0]), (1, 24, 1, 1));
        // 0-d operands and outputs.
        let l = chain_layout(&[1], &[&[], &[1]]).unwrap();
        assert_eq!((l.rank, l.dims[0]), (1, 1));
        let l = chain_layout(&[], &[&[]]).unwrap();
        assert_eq!((l.rank, l.dims[0]), (1, 1));
        assert!(chain_layout(&[2, 3], &[&[3, 3]]).is_none());
        assert!(chain_layout(&[3], &[&[2, 3]]).is_none());
    }
}
