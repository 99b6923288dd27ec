//! Transpose of any permutation up to 6-D, normalized as XNNPACK does (size-1 dims dropped,
//! dims adjacent in both orders merged; one dim left = a copy), with blocked tiles when the
//! input's innermost dim becomes the output's second-innermost (NCHW<->NHWC and the like).
//! Threaded over output rows.

use super::{numel, Ctx, View, ViewMut};
use crate::mutants::{is_active, Mutant};

/// Most dims a transpose handles (XNNPACK's `XNN_MAX_TENSOR_DIMS`).
const MAX_RANK: usize = 6;

/// Up to [`MAX_RANK`] dims inline: the per-call shapes and strides allocate nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    len: usize,
    d: [usize; MAX_RANK],
}

impl Dims {
    fn new() -> Dims {
        Dims { len: 0, d: [0; MAX_RANK] }
    }

    fn push(&mut self, v: usize) {
        self.d[self.len] = v;
        self.len += 1;
    }
}

impl std::ops::Deref for Dims {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        &self.d[..self.len]
    }
}

impl FromIterator<usize> for Dims {
    /// At most [`MAX_RANK`] items (callers check the rank first).
    fn from_iter<I: IntoIterator<Item = usize>>(it: I) -> Dims {
        let mut d = Dims::new();
        for v in it {
            d.push(v);
        }
        d
    }
}

/// `xnn_normalize_transpose_permutation`: returns the reduced (input shape, perm) where
/// `out.shape[k] = in.shape[perm[k]]`. `perm` must be a permutation of at most [`MAX_RANK`] dims.
pub fn normalize(shape: &[usize], perm: &[usize]) -> (Dims, Dims) {
    // Drop size-1 dims and renumber the remaining input dims.
    let mut renum = [usize::MAX; MAX_RANK];
    let mut s = Dims::new();
    for (d, &n) in shape.iter().enumerate() {
        if n != 1 {
            renum[d] = s.len;
            s.push(n);
        }
    }
    let p: Dims = perm.iter().map(|&d| renum[d]).filter(|&d| d != usize::MAX).collect();
    // Group output positions whose input dims are consecutive: (first input dim, count).
    let mut groups = [(0usize, 0usize); MAX_RANK];
    let mut ng = 0usize;
    for &d in p.iter() {
        match ng.checked_sub(1).map(|g| &mut groups[g]) {
            Some((f, c)) if *f + *c == d => *c += 1,
            _ => {
                groups[ng] = (d, 1);
                ng += 1;
            }
        }
    }
    // Groups in input order (their first dims are distinct).
    let mut by_input: Dims = (0..ng).collect();
    by_input.d[..ng].sort_unstable_by_key(|&g| groups[g].0);
    let new_shape: Dims =
        by_input.iter().map(|&g| (groups[g].0..groups[g].0 + groups[g].1).map(|d| s[d]).product()).collect();
    let mut new_perm = Dims { len: ng, d: [0; MAX_RANK] };
    for (i, &g) in by_input.iter().enumerate() {
        new_perm.d[g] = i;
    }
    (new_shape, new_perm)
}

/// Row-major strides of a shape.
fn strides_of(shape: &[usize]) -> Dims {
    let mut st = Dims { len: shape.len(), d: [1; MAX_RANK] };
    for i in (0..shape.len().saturating_sub(1)).rev() {
        st.d[i] = st.d[i + 1] * shape[i + 1];
    }
    st
}

/// Row groups walked together across the columns (see `transpose_with`).
const BAND_GROUPS: usize = 8;

/// Largest tile side: a 64 x 64 tile of 4-byte elements is 16 KiB, half of L1.
const TILE_MAX: usize = 64;

/// Side of a tile along dim whose rows are `stride_bytes` apart: as many rows as fit in L1
/// without more than 8 of them (L1's associativity) falling into one cache set. Rows whose
/// stride is a multiple of 4 KiB (NCHW planes, power-of-two rows) all share a set, so such a
/// dim gets 8; a 384-byte stride cycles through 32 sets, so 64 rows fit. Long rows in a tile
/// also mean long contiguous runs for the prefetcher when the other side is DRAM-bound.
fn tile_side(stride_bytes: usize) -> usize {
    const WAY_BYTES: usize = 4096; // L1 size / associativity on current x86 cores
    let period = WAY_BYTES / gcd(stride_bytes.max(1), WAY_BYTES);
    (8 * period).clamp(16, TILE_MAX)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Transposes `x` (row-major `shape`) by `perm` into `out`; `perm` must be a permutation of
/// at most 6 dims (as [`transpose`] checks).
pub fn transpose_typed<T: Copy + Default + Send + Sync>(
    ctx: &Ctx,
    x: &[T],
    shape: &[usize],
    perm: &[usize],
    out: &mut [T],
) {
    transpose_with(ctx, x, shape, perm, out, None)
}

/// A transpose tile kernel: (src, src offset, src stride, rows, cols, dst, dst offset, dst stride).
type TileFn<'a, T> = &'a (dyn Fn(&[T], usize, usize, usize, usize, &mut [T], usize, usize) + Sync);

fn transpose_with<T: Copy + Default + Send + Sync>(
    ctx: &Ctx,
    x: &[T],
    shape: &[usize],
    perm: &[usize],
    out: &mut [T],
    tile_f32: Option<TileFn<T>>,
) {
    let n = numel(shape);
    let (s, p) = normalize(shape, perm);
    let bytes = 2 * n * std::mem::size_of::<T>();
    let r = s.len();
    if r <= 1 {
        ctx.par_chunks(&mut out[..n], bytes, 1024, false, |st, c| c.copy_from_slice(&x[st..st + c.len()]));
        return;
    }
    let ist = strides_of(&s);
    let oshape: Dims = p.iter().map(|&d| s[d]).collect();
    let inner = oshape[r - 1];
    // Input stride of each output dim.
    let ost_in: Dims = p.iter().map(|&d| ist[d]).collect();
    let inner_stride = ost_in[r - 1];
    let tiled = p[r - 2] == r - 1; // consecutive output rows step the input's innermost dim
    let row_base = |row: usize| -> usize {
        let mut rem = row;
        let mut off = 0;
        for k in (0..r - 1).rev() {
            off += (rem % oshape[k]) * ost_in[k];
            rem /= oshape[k];
        }
        off
    };
    let bdim = oshape[r - 2];
    let esize = std::mem::size_of::<T>();
    // Output rows per tile (their stride is `inner`) and output columns per tile (input rows,
    // `inner_stride` apart).
    let (tile_h, tile_w) = (tile_side(inner * esize), tile_side(inner_stride * esize));
    ctx.par_chunks(&mut out[..n], bytes, inner * if tiled { tile_h } else { 1 }, false, |start, chunk| {
        let row0 = start / inner;
        let nrows = chunk.len() / inner;
        if inner_stride == 1 {
            let in_place = is_active(Mutant::PermuteKeepsInnermost);
            for k in 0..nrows {
                let b = if in_place { (row0 + k) * inner } else { row_base(row0 + k) };
                chunk[k * inner..(k + 1) * inner].copy_from_slice(&x[b..b + inner]);
            }
        } else if tiled {
            // Rows row0.. step dim r-2 of the output, whose input stride is 1: copy tile_h x tile_w
            // blocks so both the reads and the writes stay within L1.
            // The tile buffer of the generic path, sized to the largest tile of this chunk
            // (zeroing a fixed 64 x 64 one cost more than small transposes themselves).
            let (buf_h, buf_w) = (tile_h.min(bdim).min(nrows), tile_w.min(inner));
            let mut buf = if tile_f32.is_some() { Vec::new() } else { vec![T::default(); buf_h * buf_w] };
            // Bands of row groups (first row in the chunk, height, input offset), each group
            // within one output plane; columns within a band: a band's input columns (`h`
            // elements of each input row) and output rows stay in L1/L2 while the band is
            // walked across.
            let mut next = 0;
            while next < nrows {
                let mut groups = [(0usize, 0usize, 0usize); BAND_GROUPS];
                let mut ng = 0;
                while ng < BAND_GROUPS && next < nrows {
                    let row = row0 + next;
                    let h = tile_h.min(bdim - row % bdim).min(nrows - next);
                    groups[ng] = (next, h, row_base(row));
                    ng += 1;
                    next += h;
                }
                let band = &groups[..ng];
                let mut i0 = 0;
                while i0 < inner {
                    let w = tile_w.min(inner - i0);
                    for &(k, h, b) in band {
                        // Input rows i0.. (h contiguous elements each) become output columns.
                        if let Some(fast) = tile_f32 {
                            fast(x, b + i0 * inner_stride, inner_stride, w, h, chunk, k * inner + i0, inner);
                        } else {
                            // Through a tile buffer: every row segment is read or written
                            // whole, once, so power-of-two strides (NCHW planes) that map a
                            // tile's rows to one cache set cost no repeated misses.
                            for ii in 0..w {
                                let at = b + (i0 + ii) * inner_stride;
                                for (jj, &v) in x[at..at + h].iter().enumerate() {
                                    buf[jj * buf_w + ii] = v;
                                }
                            }
                            for (jj, row) in buf.chunks(buf_w).enumerate().take(h) {
                                let at = (k + jj) * inner + i0;
                                chunk[at..at + w].copy_from_slice(&row[..w]);
                            }
                        }
                    }
                    i0 += w;
                }
            }
        } else {
            for k in 0..nrows {
                let b = row_base(row0 + k);
                for (i, d) in chunk[k * inner..(k + 1) * inner].iter_mut().enumerate() {
                    *d = x[b + i * inner_stride];
                }
            }
        }
    });
}

/// Transpose of a typed view; `perm` must be a permutation of `0..shape.len()`.
pub fn transpose(ctx: &Ctx, x: View, shape: &[usize], perm: &[usize], out: ViewMut) -> Result<(), String> {
    if shape.len() > MAX_RANK {
        return Err(format!("transpose of rank {} above {MAX_RANK}", shape.len()));
    }
    let mut seen = [false; MAX_RANK];
    if perm.len() != shape.len() || !perm.iter().all(|&d| d < shape.len() && !std::mem::replace(&mut seen[d], true)) {
        return Err(format!("{perm:?} is not a permutation of rank {}", shape.len()));
    }
    let n = numel(shape);
    if x.len() < n || out.len() < n {
        return Err(format!("transpose of {n} elements with buffers of {} and {}", x.len(), out.len()));
    }
    match (x, out) {
        (View::F32(x), ViewMut::F32(o)) => {
            let isa = ctx.isa;
            let tile = move |s: &[f32], s0, ss, r, c, d: &mut [f32], d0, ds| {
                crate::runtime::simd::transpose_block_f32(isa, s, s0, ss, r, c, d, d0, ds)
            };
            transpose_with(ctx, x, shape, perm, o, Some(&tile))
        }
        (View::I32(x), ViewMut::I32(o)) => transpose_typed(ctx, x, shape, perm, o),
        (View::F16(x), ViewMut::F16(o)) => transpose_typed(ctx, x, shape, perm, o),
        (View::Bf16(x), ViewMut::Bf16(o)) => transpose_typed(ctx, x, shape, perm, o),
        (View::I8(x), ViewMut::I8(o)) => transpose_typed(ctx, x, shape, perm, o),
        (x, o) => return Err(format!("transpose from {} to {}", x.type_name(), o.type_name())),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_drops_and_merges() {
        let norm = |shape: &[usize], perm: &[usize]| {
            let (s, p) = normalize(shape, perm);
            (s.to_vec(), p.to_vec())
        };
        assert_eq!(norm(&[1, 8, 4, 5], &[0, 2, 3, 1]), (vec![8, 20], vec![1, 0]));
        assert_eq!(norm(&[2, 8, 1, 1], &[0, 2, 3, 1]), (vec![16], vec![0]));
        assert_eq!(norm(&[2, 3, 4], &[1, 0, 2]), (vec![2, 3, 4], vec![1, 0, 2]));
        assert_eq!(norm(&[2, 3, 4, 5], &[2, 3, 0, 1]), (vec![6, 20], vec![1, 0]));
        // Output groups (3 4)(2)(0 1) become input dims [6, 4, 35], read in reverse.
        assert_eq!(norm(&[2, 3, 4, 5, 7], &[3, 4, 2, 0, 1]), (vec![6, 4, 35], vec![2, 1, 0]));
        assert_eq!(norm(&[2, 3, 4, 5], &[2, 0, 3, 1]), (vec![2, 3, 4, 5], vec![2, 0, 3, 1]));
        assert_eq!(norm(&[1, 1], &[1, 0]), (vec![], vec![]));
    }
}
