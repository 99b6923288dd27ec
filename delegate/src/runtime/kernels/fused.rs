//! Fused elementwise chains (see `runtime::fuse`): several elementwise nodes over one
//! output shape run as one pass, each operand read once and the output written once, with
//! the per-element arithmetic of the unfused kernels (so the same bits).

use super::{with_f32_tile, Ctx, View, ViewMut};
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
    let origin = [0; CHAIN_ARGS];
    ctx.par_chunks(out, bytes, 1024, false, |start, chunk| {
        simd::chain_rows(isa, steps, args, &origin, lay, start, chunk, isa)
    });
}

/// Elements an fp16/bf16 chain computes in f32 before narrowing them into the output (16 KiB:
/// the f32 values never leave L1).
const NARROW_TILE: usize = 4096;

/// [`run_chain`] into an fp16/bf16 output, a tile at a time: the operands of the output's
/// size (`dense[k]`, fp16/bf16) widened tile by tile, the chain's f32 values (its steps end
/// with the last node's rounding, [`ChainStep::Round`]) narrowed into the output by the same
/// conversions the unfused nodes use. Every other operand is in `args`, in f32 (broadcast
/// operands widened whole: they are small); `args[k]` is unused where `dense[k]` is set.
/// With AVX2 or AVX-512 the chain runs in registers instead (`simd::chain_narrow`, one pass,
/// the same bits); the tiles are the scalar level's (and the `Bf16Truncates` mutant's).
pub fn run_chain_narrow(
    ctx: &Ctx,
    steps: &[ChainStep],
    lay: &ChainLayout,
    args: &[&[f32]],
    dense: &[Option<View>],
    out: ViewMut,
) -> Result<(), String> {
    let isa = ctx.isa;
    let n = out.len();
    // An fp16 output's narrowing is the conversion the last node's `Round(F16)` makes, and
    // rounding an fp16 value again changes nothing (NaN payloads included): that pass goes.
    let steps = match (steps.split_last(), &out) {
        (Some((ChainStep::Round(simd::Narrow::F16), rest)), ViewMut::F16(_)) => rest,
        _ => steps,
    };
    if dense.len() != args.len() || dense.iter().flatten().any(|d| d.len() != n || matches!(d, View::F32(_))) {
        return Err("fused chain: a dense operand is not an fp16/bf16 value of the output's size".into());
    }
    let n_dense = dense.iter().flatten().count();
    let small: usize = args.iter().zip(dense).filter(|(_, d)| d.is_none()).map(|(a, _)| a.len()).sum();
    let bytes = 2 * n * (1 + n_dense) + 4 * small;
    #[cfg(feature = "mutants")]
    let registers = !crate::mutants::is_active(crate::mutants::Mutant::Bf16Truncates);
    #[cfg(not(feature = "mutants"))]
    let registers = true;
    if registers && simd::narrow_chain_available(isa) {
        // Every step in registers, the dense operands widened as they are loaded: one pass.
        let mut opds = [simd::NarrowOpd::F32(&[]); CHAIN_ARGS];
        for ((o, &a), d) in opds.iter_mut().zip(args).zip(dense) {
            *o = match d {
                None => simd::NarrowOpd::F32(a),
                Some(View::F16(h)) => simd::NarrowOpd::F16(h),
                Some(View::Bf16(b)) => simd::NarrowOpd::Bf16(simd::bf16_bits(b)),
                Some(_) => unreachable!("checked above"),
            };
        }
        let opds = &opds[..args.len()];
        match out {
            ViewMut::F16(o) => ctx.par_chunks(o, bytes, 1024, false, |start, c| {
                simd::chain_narrow(isa, steps, opds, lay, start, simd::NarrowDst::F16(c))
            }),
            ViewMut::Bf16(o) => ctx.par_chunks(o, bytes, 1024, false, |start, c| {
                simd::chain_narrow(isa, steps, opds, lay, start, simd::NarrowDst::Bf16(simd::bf16_bits_mut(c)))
            }),
            o => return Err(format!("fused chain into {}", o.type_name())),
        }
        return Ok(());
    }
    // One chunk of the output: per tile, widen the dense operands' elements of the tile into
    // `wide` (one tile per operand), run the chain, narrow.
    let chunk_tiles = |start: usize, len: usize, tl: usize, buf: &mut [f32], store: &mut dyn FnMut(usize, &[f32])| {
        let (tile, wide) = buf.split_at_mut(tl);
        let mut from = 0;
        while from < len {
            let m = NARROW_TILE.min(len - from);
            let at = start + from;
            let mut origin = [0; CHAIN_ARGS];
            let mut views: [&[f32]; CHAIN_ARGS] = [&[]; CHAIN_ARGS];
            let mut parts = wide.chunks_mut(tl);
            for (k, d) in dense.iter().enumerate() {
                let Some(d) = d else { continue };
                let w = &mut parts.next().expect("one tile per dense operand")[..m];
                match d {
                    View::F16(h) => simd::f16_to_f32(isa, &h[at..at + m], w),
                    View::Bf16(b) => simd::bf16_to_f32(isa, simd::bf16_bits(&b[at..at + m]), w),
                    _ => unreachable!("checked above"),
                }
                origin[k] = at;
            }
            let mut parts = wide.chunks(tl);
            for (k, v) in views.iter_mut().enumerate().take(args.len()) {
                *v = if dense[k].is_some() { &parts.next().expect("one tile per dense operand")[..m] } else { args[k] };
            }
            let t = &mut tile[..m];
            simd::chain_rows(isa, steps, &views[..args.len()], &origin, lay, at, t, isa);
            store(from, t);
            from += m;
        }
    };
    let chunk = |start: usize, len: usize, store: &mut dyn FnMut(usize, &[f32])| {
        let tl = NARROW_TILE.min(len);
        with_f32_tile((n_dense + 1) * tl, |buf| chunk_tiles(start, len, tl, buf, store))
    };
    match out {
        ViewMut::F16(o) => ctx.par_chunks(o, bytes, 1024, false, |start, c| {
            chunk(start, c.len(), &mut |from, t| simd::f32_to_f16(isa, t, &mut c[from..from + t.len()]))
        }),
        ViewMut::Bf16(o) => ctx.par_chunks(o, bytes, 1024, false, |start, c| {
            chunk(start, c.len(), &mut |from, t| super::convert::f32_to_bf16(isa, t, &mut c[from..from + t.len()]))
        }),
        o => return Err(format!("fused chain into {}", o.type_name())),
    }
    Ok(())
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
