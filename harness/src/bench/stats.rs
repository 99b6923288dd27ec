//! Order statistics and the paired confidence interval of a latency ratio.

/// The `q` quantile (0..=1) of sorted data by linear interpolation; NaN when empty.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    let frac = pos - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

/// Median, p10 and p90 of samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
}

pub fn spread(samples: &[f64]) -> Spread {
    let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    Spread { median: quantile_sorted(&s, 0.5), p10: quantile_sorted(&s, 0.1), p90: quantile_sorted(&s, 0.9) }
}

/// A ratio with its confidence interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatioCi {
    pub ratio: f64,
    pub low: f64,
    pub high: f64,
}

impl RatioCi {
    /// The interval contains 1: no difference can be claimed.
    pub fn within_noise(&self) -> bool {
        self.low <= 1.0 && 1.0 <= self.high
    }

    /// To 4 decimals, as the CSVs hold it: "within noise" is then judged on the interval a
    /// reader (and `bench check`) sees, where a low end of 1.00004 reads 1.
    pub fn rounded(self) -> RatioCi {
        let r = super::round4;
        RatioCi { ratio: r(self.ratio), low: r(self.low), high: r(self.high) }
    }
}

/// Paired ratio of `b` over `a`: `a[i]` and `b[i]` were timed in the same round of the
/// alternation, so each round gives one ratio and slow drifts of the machine cancel.
/// The estimate is the median of the per-round ratios; the 95% interval is the
/// distribution-free one for a median (order statistics of the binomial(n, 1/2) sign test),
/// which needs no resampling and no assumption on the shape of the noise.
pub fn paired_ratio(a: &[f64], b: &[f64]) -> Option<RatioCi> {
    let mut r: Vec<f64> =
        a.iter().zip(b).filter(|(x, y)| **x > 0.0 && **y > 0.0).map(|(x, y)| y / x).filter(|v| v.is_finite()).collect();
    if r.is_empty() {
        return None;
    }
    r.sort_by(f64::total_cmp);
    let n = r.len();
    let ratio = quantile_sorted(&r, 0.5);
    // Normal approximation to the binomial: ranks n/2 -+ 1.96 sqrt(n)/2 (conservative for small n).
    let half = 1.96 * (n as f64).sqrt() / 2.0;
    let lo_rank = ((n as f64) / 2.0 - half).floor().max(0.0) as usize;
    let hi_rank = (((n as f64) / 2.0 + half).ceil() as usize).min(n - 1);
    Some(RatioCi { ratio, low: r[lo_rank].min(ratio), high: r[hi_rank].max(ratio) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounded_intervals_judge_noise_as_written() {
        let r = RatioCi { ratio: 1.00081, low: 1.00004, high: 1.00163 };
        assert!(!r.within_noise());
        let w = r.rounded();
        assert_eq!((w.ratio, w.low, w.high), (1.0008, 1.0, 1.0016));
        assert!(w.within_noise());
    }

    #[test]
    fn quantiles_interpolate() {
        let s = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile_sorted(&s, 0.5), 3.0);
        assert_eq!(quantile_sorted(&s, 0.0), 1.0);
        assert!((quantile_sorted(&s, 0.1) - 1.4).abs() < 1e-12);
        assert!(quantile_sorted(&[], 0.5).is_nan());
        let sp = spread(&[5.0, 1.0, 3.0, f64::NAN]);
        assert_eq!(sp.median, 3.0);
    }

    #[test]
    fn paired_ratio_finds_a_real_difference_and_calls_noise_noise() {
        // b is 2x a with multiplicative jitter shared by the pair.
        let a: Vec<f64> = (0..400).map(|i| 100.0 * (1.0 + 0.3 * ((i * 37 % 11) as f64 / 11.0))).collect();
        let b: Vec<f64> = a.iter().enumerate().map(|(i, x)| 2.0 * x * (1.0 + 0.01 * ((i % 3) as f64 - 1.0))).collect();
        let r = paired_ratio(&a, &b).unwrap();
        assert!((r.ratio - 2.0).abs() < 0.03, "{r:?}");
        assert!(!r.within_noise());
        assert!(r.low <= r.ratio && r.ratio <= r.high);
        // Same distribution: ratios scatter around 1.
        let c: Vec<f64> = (0..400).map(|i| 100.0 + ((i * 7919) % 13) as f64).collect();
        let d: Vec<f64> = (0..400).map(|i| 100.0 + ((i * 104729) % 13) as f64).collect();
        let r = paired_ratio(&c, &d).unwrap();
        assert!(r.within_noise(), "{r:?}");
        assert!(paired_ratio(&[], &[]).is_none());
    }
}
