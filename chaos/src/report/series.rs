//! What the timeline's charts plot: ops per half second by how they
//! ended, latency percentiles, and round numbers for their scales.

use super::is_refusal;
use crate::history::{Op, Outcome};

/// Ops and latency are counted per bucket of this many µs (by invoke time).
pub(super) const BUCKET_US: u64 = 500_000;

/// Ops of one bucket by how they ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counts {
    pub ok: u32,
    pub refused: u32,
    pub failed: u32,
    pub unknown: u32,
}

impl Counts {
    pub fn total(&self) -> u32 {
        self.ok + self.refused + self.failed + self.unknown
    }
}

/// Per bucket of `BUCKET_US`, by invoke time up to `end_us`: the ops'
/// [`Counts`], and the latencies (µs) of those that completed.
pub(super) fn buckets(ops: &[Op], end_us: u64) -> (Vec<Counts>, Vec<Vec<u64>>) {
    let n = (end_us / BUCKET_US + 1) as usize;
    let mut counts = vec![Counts::default(); n];
    let mut latencies: Vec<Vec<u64>> = vec![Vec::new(); n];
    for o in ops {
        let b = (o.invoked / BUCKET_US) as usize;
        if b >= n {
            continue;
        }
        match &o.outcome {
            Outcome::Ok(_) => counts[b].ok += 1,
            Outcome::Fail { code, .. } if is_refusal(code) => counts[b].refused += 1,
            Outcome::Fail { .. } => counts[b].failed += 1,
            Outcome::Unknown(_) => counts[b].unknown += 1,
        }
        if let Some(c) = o.completed {
            latencies[b].push(c - o.invoked);
        }
    }
    (counts, latencies)
}

/// The `p` quantile of the latencies `v` (µs, sorted in place), in ms;
/// `None` when there are none.
pub(super) fn percentile_ms(v: &mut [u64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[((v.len() - 1) as f64 * p) as usize] as f64 / 1e3)
}

/// The smallest 1, 2 or 5 × 10ⁿ at or above `v` (and at least 1), so a
/// scale's top and middle are round numbers.
pub(super) fn nice_ceiling(v: f64) -> f64 {
    if v <= 1.0 {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * mag)
}

/// A scale value: whole numbers as such, others with one decimal.
pub(super) fn fmt_value(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_end_on_round_numbers() {
        assert_eq!(nice_ceiling(0.3), 1.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(130.0), 200.0);
        assert_eq!(nice_ceiling(3_900.0), 5_000.0);
        assert_eq!(nice_ceiling(500.0), 500.0);
        assert_eq!(fmt_value(2.5), "2.5");
        assert_eq!(fmt_value(250.0), "250");
    }
}
