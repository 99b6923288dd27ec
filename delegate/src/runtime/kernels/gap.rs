//! Global average pooling on NHWC: a mean over H and W of `[N, H, W, C]`, keeping dims.
//! As at XNNPACK's pin, this *is* a static mean (axes 1 and 2); with C innermost and kept it
//! always takes the discontiguous (column-sum) path.

use super::mean::mean;
use super::{Ctx, Quant, Scratch, View, ViewMut};

/// `out[n, 0, 0, c] = mean over (h, w) of x[n, h, w, c]`; `shape` is the NHWC input shape.
pub fn gap_nhwc(
    ctx: &Ctx,
    x: View,
    shape: &[usize],
    out: ViewMut,
    q: Option<(Quant, Quant)>,
    scratch: &mut Scratch,
) -> Result<(), String> {
    if shape.len() != 4 {
        return Err(format!("global average pooling needs a 4-D NHWC input, got rank {}", shape.len()));
    }
    mean(ctx, x, shape, &[1, 2], out, q, scratch)
}
