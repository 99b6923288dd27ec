//! Checks of command-line values the jobs share: a value out of range is a usage error
//! that names the flag and what it takes (exit status 2), never a panic.

use anyhow::{bail, Result};
use std::time::Duration;

/// The longest time a flag may ask for (about 31 years): beyond any job, and far from
/// where `Duration` and `Instant` arithmetic overflows.
pub const MAX_SECONDS: f64 = 1e9;

/// `v` seconds, for flag `flag`: a finite, positive number of at most [`MAX_SECONDS`].
pub fn seconds(flag: &str, v: f64) -> Result<Duration> {
    checked(flag, v, "")
}

/// Like [`seconds`], with 0 meaning "none" (`None`).
pub fn seconds_or_off(flag: &str, v: f64) -> Result<Option<Duration>> {
    if v == 0.0 {
        return Ok(None);
    }
    checked(flag, v, " (0 turns it off)").map(Some)
}

fn checked(flag: &str, v: f64, note: &str) -> Result<Duration> {
    // As typed: 1e30, not thirty zeros.
    let shown = if v.abs() >= 1e16 { format!("{v:e}") } else { format!("{v}") };
    if !v.is_finite() {
        bail!("{flag} {shown}: needs a finite number of seconds, at most {MAX_SECONDS:e}{note}");
    }
    if v <= 0.0 {
        bail!("{flag} {shown}: needs a positive number of seconds{note}");
    }
    if v > MAX_SECONDS {
        bail!("{flag} {shown}: at most {MAX_SECONDS:e} seconds{note}");
    }
    Ok(Duration::from_secs_f64(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_numbers_of_seconds_are_usage_errors_naming_the_flag() {
        assert_eq!(seconds("--duration", 1.5).unwrap(), Duration::from_millis(1500));
        for bad in [f64::INFINITY, f64::NAN, -1.0, 0.0, 1e30, f64::NEG_INFINITY] {
            let e = seconds("--duration", bad).unwrap_err().to_string();
            assert!(e.starts_with("--duration"), "{e}");
        }
        assert!(seconds("--duration", -1.0).unwrap_err().to_string().contains("positive"));
        assert_eq!(seconds_or_off("--case-timeout", 0.0).unwrap(), None);
        assert_eq!(seconds_or_off("--case-timeout", 2.0).unwrap(), Some(Duration::from_secs(2)));
        assert!(seconds_or_off("--case-timeout", 1e30).is_err());
    }
}
