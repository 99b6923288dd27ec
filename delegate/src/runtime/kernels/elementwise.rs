//! Elementwise kernels: add/sub/mul/div with numpy broadcasting, square, rsqrt, clamp.
//! fp16/bf16 compute in f32 and round once; an optional output clamp (XNNPACK's fused
//! `output_min/max`) is applied before rounding.

use super::convert::{from_f32, to_f32};
use super::{numel, sized_for_overwrite, Ctx, Scratch, View, ViewMut};
use crate::runtime::simd::{self, BinOp};

/// The broadcast output dims of two right-aligned shapes, in order: `None` at a dim where
/// they are incompatible. An iterator, so callers fill their own buffer or compare in place.
pub fn broadcast_dims<'a>(a: &'a [usize], b: &'a [usize]) -> impl Iterator<Item = Option<usize>> + 'a {
    let r = a.len().max(b.len());
    (0..r).map(move |i| {
        let da = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
        let db = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
        match (da, db) {
            _ if da == db => Some(da),
            (1, d) | (d, 1) => Some(d),
            _ => None,
        }
    })
}

/// Whether right-aligned shapes `a` and `b` broadcast to exactly `out`.
fn broadcasts_to(a: &[usize], b: &[usize], out: &[usize]) -> bool {
    a.len().max(b.len()) == out.len() && broadcast_dims(a, b).zip(out).all(|(d, &o)| d == Some(o))
}

/// Highest rank of a binary op (XNNPACK's `XNN_MAX_TENSOR_DIMS`; `compile` refuses more).
const MAX_DIMS: usize = 6;

/// A broadcast layout: merged output dims and each operand's stride per dim, inline (at most
/// [`MAX_DIMS`]; no allocation per op).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    len: usize,
    dims: [usize; MAX_DIMS],
    sa: [usize; MAX_DIMS],
    sb: [usize; MAX_DIMS],
}

impl Layout {
    fn parts(&self) -> [&[usize]; 3] {
        [&self.dims[..self.len], &self.sa[..self.len], &self.sb[..self.len]]
    }
}

/// Output dims with each operand's stride (0 where it broadcasts), adjacent dims merged.
/// Ranks are at most [`MAX_DIMS`] (`binary` checks).
fn broadcast_layout(a: &[usize], b: &[usize], out: &[usize]) -> Layout {
    let r = out.len();
    let stride_of = |s: &[usize]| -> [usize; MAX_DIMS] {
        let mut st = [0; MAX_DIMS];
        let mut acc = 1;
        for i in (0..r).rev() {
            let d = if i + s.len() >= r { s[i + s.len() - r] } else { 1 };
            st[i] = if d == 1 { 0 } else { acc };
            acc *= d;
        }
        st
    };
    let (sa, sb) = (stride_of(a), stride_of(b));
    let mut l = Layout { len: 0, dims: [0; MAX_DIMS], sa: [0; MAX_DIMS], sb: [0; MAX_DIMS] };
    for i in 0..r {
        if out[i] == 1 {
            continue;
        }
        if let Some(k) = l.len.checked_sub(1) {
            if l.sa[k] == sa[i] * out[i] && l.sb[k] == sb[i] * out[i] {
                l.dims[k] *= out[i];
                l.sa[k] = sa[i];
                l.sb[k] = sb[i];
                continue;
            }
        }
        (l.dims[l.len], l.sa[l.len], l.sb[l.len]) = (out[i], sa[i], sb[i]);
        l.len += 1;
    }
    if l.len == 0 {
        (l.len, l.dims[0]) = (1, 1);
    }
    l
}

#[allow(clippy::too_many_arguments)]
fn binary_f32(
    ctx: &Ctx,
    op: BinOp,
    a: &[f32],
    ash: &[usize],
    b: &[f32],
    bsh: &[usize],
    out: &mut [f32],
    osh: &[usize],
) {
    let layout = broadcast_layout(ash, bsh, osh);
    let isa = ctx.isa;
    let bytes = 3 * out.len() * 4;
    // Chunks may start and end inside a row: same-shape operands merge into one long row,
    // which must still split across threads.
    ctx.par_chunks(out, bytes, 1024, false, |start, chunk| {
        simd::bin_rows(isa, op, a, b, layout.parts(), start, chunk);
    });
}

/// Clamps f32 values in place (threaded), keeping NaN.
pub fn clamp_f32(ctx: &Ctx, x: &mut [f32], lo: f32, hi: f32) {
    let isa = ctx.isa;
    let bytes = x.len() * 8;
    ctx.par_chunks(x, bytes, 1024, false, |_, c| simd::clamp_inplace(isa, c, lo, hi));
}

/// `out = act(a op b)` with broadcasting; shapes are the physical dims of each value.
#[allow(clippy::too_many_arguments)]
pub fn binary(
    ctx: &Ctx,
    op: BinOp,
    a: View,
    ash: &[usize],
    b: View,
    bsh: &[usize],
    out: ViewMut,
    osh: &[usize],
    act: Option<(f32, f32)>,
    scratch: &mut Scratch,
) -> Result<(), String> {
    if osh.len() > MAX_DIMS || ash.len() > osh.len() || bsh.len() > osh.len() {
        return Err(format!("cannot broadcast {ash:?} and {bsh:?} to {osh:?} (rank at most {MAX_DIMS})"));
    }
    if !broadcasts_to(ash, bsh, osh) {
        return Err(format!("cannot broadcast {ash:?} and {bsh:?} to {osh:?}"));
    }
    let n = numel(osh);
    if a.len() != numel(ash) || b.len() != numel(bsh) || out.len() != n {
        return Err("binary operand sizes do not match their shapes".into());
    }
    let Scratch { a: sa, b: sb, c: sc, .. } = scratch;
    match out {
        ViewMut::F32(o) => {
            let (af, bf) = (to_f32(ctx, a, sa)?, to_f32(ctx, b, sb)?);
            binary_f32(ctx, op, af, ash, bf, bsh, o, osh);
            if let Some((lo, hi)) = act {
                clamp_f32(ctx, o, lo, hi);
            }
            Ok(())
        }
        o @ (ViewMut::F16(_) | ViewMut::Bf16(_)) => {
            let (af, bf) = (to_f32(ctx, a, sa)?, to_f32(ctx, b, sb)?);
            let t = sized_for_overwrite(sc, n); // every element is written below
            binary_f32(ctx, op, af, ash, bf, bsh, t, osh);
            if let Some((lo, hi)) = act {
                clamp_f32(ctx, t, lo, hi);
            }
            from_f32(ctx, t, o)
        }
        o => Err(format!("binary op on {}", o.type_name())),
    }
}

/// Unary elementwise ops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unary {
    Square,
    Rsqrt,
    Clamp(f32, f32),
    Copy,
}

/// `out = act(f(x))` elementwise.
pub fn unary(
    ctx: &Ctx,
    f: Unary,
    x: View,
    out: ViewMut,
    act: Option<(f32, f32)>,
    scratch: &mut Scratch,
) -> Result<(), String> {
    if x.len() != out.len() {
        return Err(format!("unary op of {} elements into {}", x.len(), out.len()));
    }
    let n = x.len();
    let isa = ctx.isa;
    let Scratch { a: sa, c: sc, .. } = scratch;
    let xf = to_f32(ctx, x, sa)?;
    let run = |o: &mut [f32]| {
        ctx.par_chunks(o, n * 8, 1024, false, |s, c| {
            let xs = &xf[s..s + c.len()];
            match f {
                Unary::Square => simd::square(isa, xs, c),
                Unary::Rsqrt => simd::rsqrt(isa, xs, c),
                Unary::Clamp(lo, hi) => {
                    c.copy_from_slice(xs);
                    simd::clamp_inplace(isa, c, lo, hi)
                }
                Unary::Copy => c.copy_from_slice(xs),
            }
            if let Some((lo, hi)) = act {
                simd::clamp_inplace(isa, c, lo, hi);
            }
        })
    };
    match out {
        ViewMut::F32(o) => {
            run(o);
            Ok(())
        }
        o @ (ViewMut::F16(_) | ViewMut::Bf16(_)) => {
            let t = sized_for_overwrite(sc, n); // every element is written below
            run(t);
            from_f32(ctx, t, o)
        }
        o => Err(format!("unary op on {}", o.type_name())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_layout_merges() {
        let shape = |a: &[usize], b: &[usize]| broadcast_dims(a, b).collect::<Option<Vec<_>>>();
        assert_eq!(shape(&[2, 3, 4], &[4]), Some(vec![2, 3, 4]));
        assert_eq!(shape(&[2, 3], &[4]), None);
        let layout = |a: &[usize], b: &[usize], o: &[usize]| {
            let [d, sa, sb] = broadcast_layout(a, b, o).parts().map(|p| p.to_vec());
            (d, sa, sb)
        };
        assert_eq!(layout(&[2, 3, 4], &[2, 3, 4], &[2, 3, 4]), (vec![24], vec![1], vec![1]));
        assert_eq!(layout(&[2, 3, 4], &[4], &[2, 3, 4]), (vec![6, 4], vec![4, 1], vec![0, 1]));
        assert_eq!(layout(&[2, 3, 4], &[2, 3, 1], &[2, 3, 4]), (vec![6, 4], vec![4, 1], vec![1, 0]));
        assert_eq!(layout(&[1, 1], &[1], &[1, 1]), (vec![1], vec![0], vec![0]));
        assert!(broadcasts_to(&[2, 1, 4], &[3, 1], &[2, 3, 4]));
        assert!(!broadcasts_to(&[2, 1, 4], &[3, 1], &[2, 3, 5]));
        assert!(!broadcasts_to(&[2, 3], &[3], &[3]));
    }
}
