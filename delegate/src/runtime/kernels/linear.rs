//! Fully connected (linear): `out[m, n] = sum_k x[m, k] * w[n, k] + b[n]` with XNNPACK's
//! `[N, K]` filter (`[K, N]` under `XNN_FLAG_TRANSPOSE_WEIGHTS`), f32 compute, threaded over
//! outputs.

use super::conv::{float_cow, float_vec};
use super::convert::{from_f32, to_f32};
use super::{sized, Ctx, Scratch, View, ViewMut};
use crate::runtime::simd;
use std::borrow::Cow;

pub const FLAG_TRANSPOSE_WEIGHTS: u32 = 1;

#[allow(clippy::too_many_arguments)]
pub fn fully_connected(
    ctx: &Ctx,
    x: View,
    m: usize,
    k: usize,
    w: View,
    n: usize,
    transpose_weights: bool,
    b: Option<View>,
    out: ViewMut,
    act: Option<(f32, f32)>,
    scratch: &mut Scratch,
) -> Result<(), String> {
    if x.len() != m * k || w.len() != n * k || out.len() != m * n {
        return Err(format!(
            "fully connected sizes: x {} (m {m} k {k}), w {} (n {n}), out {}",
            x.len(),
            w.len(),
            out.len()
        ));
    }
    // fp32 [N, K] weights are read in place: copying them per call doubled the memory traffic
    // of a large (memory-bound) linear. Other dtypes and [K, N] are widened or reordered.
    let wf: Cow<[f32]> = match (w, transpose_weights) {
        (w, false) => float_cow(w)?,
        (w, true) => {
            // [K, N] -> [N, K] so every output is one contiguous dot product.
            let wk = float_vec(w)?;
            Cow::Owned((0..n * k).map(|i| wk[(i % k) * n + i / k]).collect())
        }
    };
    let bf = b.map(float_cow).transpose()?;
    if bf.as_ref().is_some_and(|b| b.len() != n) {
        return Err(format!("bias length differs from {n} outputs"));
    }
    let Scratch { a: sa, c: sc, .. } = scratch;
    let xf = to_f32(ctx, x, sa)?;
    let isa = ctx.isa;
    let run = |o: &mut [f32]| {
        ctx.par_chunks(o, (m * k + n * k) * 4, 16, false, |start, chunk| {
            for (i, d) in chunk.iter_mut().enumerate() {
                let (r, c) = ((start + i) / n, (start + i) % n);
                let v = simd::dot(isa, &xf[r * k..(r + 1) * k], &wf[c * k..(c + 1) * k]);
                *d = v + bf.as_ref().map_or(0.0, |b| b[c]);
            }
            if let Some((lo, hi)) = act {
                simd::clamp_inplace(isa, chunk, lo, hi);
            }
        })
    };
    match out {
        ViewMut::F32(o) => {
            run(o);
            Ok(())
        }
        o @ (ViewMut::F16(_) | ViewMut::Bf16(_)) => {
            let t = sized(sc, m * n);
            run(t);
            from_f32(ctx, t, o)
        }
        o => Err(format!("fully connected into {}", o.type_name())),
    }
}
