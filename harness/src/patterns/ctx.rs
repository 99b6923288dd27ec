//! The builder state shared by every pattern, and the ops it wraps for the graph under
//! test and its twins (weights, q/dq, means, convs, linears, RMSNorm).

use super::twins::{abs_f32, to_f32};
use super::Q_W;
use crate::case::Case;
use crate::engine;
use reference::graph::{Conv2dParams, TensorSpec, T};
use reference::{ElemType, GraphBuilder, QuantParams, Tensor};

/// Builder state shared by every pattern.
pub(super) struct Ctx<'a> {
    pub(super) g: GraphBuilder,
    pub(super) case: &'a Case,
    /// Building the magnitude twin.
    pub(super) abs: bool,
    /// Building the wide twin.
    pub(super) wide: bool,
    /// Float type every op computes in (fp32 for qs8 and both twins).
    pub(super) dt: ElemType,
    /// Wrap ops in quantize/dequantize.
    pub(super) q: bool,
    /// Magnitude twin: the smallest normal value `λ` of the types the graph under test
    /// rounds to (see [`Ctx::rounded`]).
    pub(super) floor: Option<f32>,
    pub(super) next_weight: std::cell::Cell<u64>,
}

/// The smallest positive normal value of a float type (below it a rounding errs by up to
/// half the smallest subnormal, absolutely).
pub(super) fn smallest_normal(dt: ElemType) -> f32 {
    match dt {
        ElemType::F16 => 6.103_515_6e-5, // 2^-14
        _ => f32::MIN_POSITIVE,          // 2^-126, fp32 and bf16 alike
    }
}

impl Ctx<'_> {
    /// A seeded weight of `shape` in the case's dtype, as the graph under test has it; in a
    /// twin, converted exactly to fp32 (magnitude: its absolute values).
    pub(super) fn weight(&self, shape: &[usize]) -> T {
        let k = self.next_weight.get();
        self.next_weight.set(k + 1);
        let seed = self.case.seed ^ 0x5EED_0000_0000_0000 ^ k.wrapping_mul(0x9E37_79B9);
        if self.q {
            // qs8 weights: an int8 constant on Q_W, dequantized inside the graph.
            let t = engine::generate(&TensorSpec::qs8(shape, Q_W), seed, false);
            let c = self.g.constant(t);
            return self.g.dequantize(c, Q_W.scale, Q_W.zero_point);
        }
        let t = engine::generate(&TensorSpec::new(self.case.dtype, shape), seed, false);
        self.g.constant(match (self.abs, self.wide) {
            (true, _) => abs_f32(&t),
            (_, true) => to_f32(&t),
            _ => t,
        })
    }

    /// A 0-D constant in the compute dtype, of the value the graph under test has (rounded
    /// to the case's dtype first, so a twin's `eps` is the graph's own).
    pub(super) fn scalar(&self, v: f64) -> T {
        let v = match self.case.dtype {
            ElemType::Qs8 => v,
            dt => Tensor::from_f64(&[], dt, None, &[v]).values_f64()[0],
        };
        self.g.constant(Tensor::from_f64(&[], self.dt, None, &[v]))
    }

    /// The result of an op that rounds and may underflow (a product, a mean's scaling, a
    /// conv or linear): in the magnitude twin, at least `λ` (see `oracle::outputs`,
    /// underflow); elsewhere `x` itself. Sums need none: a sum that lands below `λ` is exact.
    pub(super) fn rounded(&self, x: T) -> T {
        match self.floor {
            Some(l) => self.g.clamp(x, Some(l), None),
            None => x,
        }
    }

    pub(super) fn qdq(&self, x: T, q: QuantParams) -> T {
        if self.q {
            let qx = self.g.quantize(x, q.scale, q.zero_point);
            self.g.dequantize(qx, q.scale, q.zero_point)
        } else {
            x
        }
    }

    pub(super) fn sub(&self, a: T, b: T) -> T {
        if self.abs {
            self.g.add(a, b)
        } else {
            self.g.sub(a, b)
        }
    }

    pub(super) fn mean(&self, x: T, dims: &[i64], keepdim: bool, with_dtype: bool) -> T {
        match self.case.mean_dtype {
            Some(d) if with_dtype && self.wide => {
                // `dtype=` casts the input before the mean (PyTorch, and the reference): the
                // wide twin casts it too, then widens the cast values exactly.
                let cast = self.g.to_dtype(self.g.to_dtype(x, d), ElemType::F32);
                self.g.mean(cast, dims, keepdim)
            }
            Some(d) if with_dtype && !self.abs => self.g.mean_dtype(x, dims, keepdim, d),
            _ => self.rounded(self.g.mean(x, dims, keepdim)),
        }
    }

    pub(super) fn conv(&self, x: T, cin: usize, cout: usize, k: usize) -> T {
        let w = self.weight(&[cout, cin, k, k]);
        let b = if self.q { None } else { Some(self.weight(&[cout])) };
        let p = Conv2dParams { padding: [k / 2, k / 2], ..Default::default() };
        self.rounded(self.g.conv2d(x, w, b, p))
    }

    pub(super) fn linear(&self, x: T, w: T, b: Option<T>) -> T {
        self.rounded(self.g.linear(x, w, b))
    }

    /// `x * rsqrt(mean(x^2, -1, keepdim) + eps) * w` over a last dim of `d`.
    /// `actual` (magnitude graphs only) is the true-valued twin of `x`, used for the
    /// normalizer when `x` carries error (see the module docs).
    pub(super) fn rms_norm(&self, x: T, d: usize, actual: Option<T>) -> T {
        let eps = self.scalar(1e-5);
        let w = self.weight(&[d]);
        // The normalizer's own ops get no floor: `rsqrt` falls as its input grows.
        // Variant bit 3: every product and sum with its operands the other way round.
        let swap = super::knobs::swapped(self.case);
        let (add, mul) = (
            |a: T, b: T| if swap { self.g.add(b, a) } else { self.g.add(a, b) },
            |a: T, b: T| if swap { self.g.mul(b, a) } else { self.g.mul(a, b) },
        );
        let normalizer = |v: T| {
            let ms = self.g.mean(self.g.square(v), &[-1], true);
            self.g.rsqrt(add(ms, eps))
        };
        let Some(l) = self.floor.filter(|_| self.abs) else {
            return mul(mul(x, normalizer(x)), w);
        };
        let one = self.scalar(1.0);
        let (r, factor) = match actual {
            Some(a) => {
                let r = normalizer(a);
                let r_m = normalizer(x);
                (r, Some(self.g.add(one, self.g.div(r, r_m))))
            }
            None => (normalizer(x), None),
        };
        // Underflow in the normalizer's input moves `r` by a relative `λ r^2` at most
        // (see `oracle::outputs`, underflow).
        let lambda = self.g.constant(Tensor::from_f64(&[], ElemType::F32, None, &[l as f64]));
        let under = self.g.add(one, self.g.mul(lambda, self.g.square(r)));
        let xr = self.rounded(self.g.mul(x, r));
        let xr = match factor {
            Some(f) => self.g.mul(xr, f),
            None => xr,
        };
        self.rounded(self.g.mul(self.g.mul(xr, under), w))
    }
}

/// The signed fp32 version of weight number `k` of a magnitude graph, as a constant in it.
pub(super) fn signed_weight_like(cx: &Ctx, shape: &[usize], k: u64) -> T {
    let seed = cx.case.seed ^ 0x5EED_0000_0000_0000 ^ k.wrapping_mul(0x9E37_79B9);
    let t = engine::generate(&TensorSpec::new(cx.case.dtype, shape), seed, false);
    let v = t.values_f64();
    cx.g.constant(Tensor::from_f64(shape, ElemType::F32, None, &v))
}
