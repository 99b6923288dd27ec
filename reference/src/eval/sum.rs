//! The one accumulator every sum of the reference uses (mean, conv, linear).

/// Compensated f64 sum: Knuth's branch-free TwoSum keeps the exact rounding error of every
/// addition in `c`, so [`Acc::value`] is the exact sum of the terms to about one f64 ulp.
///
/// Starts from -0.0, the IEEE additive identity, so a sum of negative zeros stays -0.0. Once a
/// non-finite value is met, the plain IEEE sum (inf, or NaN for NaN and inf - inf) is the
/// answer: that is `s` itself, which is exactly the plain running sum (each step is
/// `s = s + x`, rounded). Which NaN comes out when two NaNs meet (sign, payload) is not fixed:
/// the compiler picks the operand order of each addition; every oracle treats a NaN as a NaN.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Acc {
    pub(crate) s: f64,
    pub(crate) c: f64,
}

impl Acc {
    pub(crate) const ZERO: Acc = Acc { s: -0.0, c: 0.0 };

    #[inline]
    pub(crate) fn add(&mut self, x: f64) {
        two_sum(&mut self.s, &mut self.c, x);
    }

    /// The sum: `s + c` rounded once (non-finite: the plain sum `s`; no correction: `s` as
    /// is, since -0.0 + 0.0 would lose the sign).
    pub(crate) fn value(self) -> f64 {
        if !self.s.is_finite() || self.c == 0.0 {
            self.s
        } else {
            self.s + self.c
        }
    }
}

/// One step of [`Acc::add`] on a sum `s` and its correction `c` held anywhere: `s + x`
/// rounded becomes the new `s` and its exact rounding error is added to `c`.
#[inline(always)]
pub(crate) fn two_sum(s: &mut f64, c: &mut f64, x: f64) {
    let t = *s + x;
    let bp = t - *s;
    *c += (*s - (t - bp)) + (x - bp);
    *s = t;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(terms: &[f64]) -> f64 {
        let mut acc = Acc::ZERO;
        terms.iter().for_each(|&x| acc.add(x));
        acc.value()
    }

    #[test]
    fn compensated_sum_is_exact_where_the_plain_sum_is_not() {
        // 1 + 2^-60 - 1: the plain f64 sum loses 2^-60 entirely.
        assert_eq!(sum(&[1.0, f64::powi(2.0, -60), -1.0]), f64::powi(2.0, -60));
        assert_eq!(sum(&[1e16, 1.0, -1e16]), 1.0);
        assert_eq!(sum(&[0.1; 10]), 1.0);
    }

    #[test]
    fn zeros_and_specials_follow_ieee() {
        assert_eq!(sum(&[]).to_bits(), (-0.0f64).to_bits());
        assert_eq!(sum(&[-0.0, -0.0]).to_bits(), (-0.0f64).to_bits());
        assert_eq!(sum(&[-0.0, 0.0]).to_bits(), 0.0f64.to_bits());
        assert_eq!(sum(&[1.0, f64::INFINITY, 5.0]), f64::INFINITY);
        assert!(sum(&[f64::INFINITY, f64::NEG_INFINITY]).is_nan());
        assert!(sum(&[1.0, f64::NAN]).is_nan());
        // A finite overflow of the running sum is the plain sum's infinity.
        assert_eq!(sum(&[f64::MAX, f64::MAX, -f64::MAX]), f64::INFINITY);
    }
}
