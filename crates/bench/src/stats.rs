//! Order statistics over small samples (one value per process run).

use serde::Serialize;

/// Median and spread of a sample. Quantiles interpolate linearly between order statistics
/// (the "type 7" definition used by R and numpy), so `p25`/`p75` bound the middle half.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Summary {
    /// Number of values summarized.
    pub n: usize,
    /// The 50th percentile, in the sample's unit (ns, tokens/s or a ratio: the field that
    /// holds the summary says which).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
    /// The 25th percentile.
    pub p25: f64,
    /// The 75th percentile.
    pub p75: f64,
}

impl Summary {
    /// Summarizes `values` (any order, NaN-free). `None` for an empty sample.
    pub fn of(values: &[f64]) -> Option<Summary> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        Some(Summary {
            n: v.len(),
            median: quantile(&v, 0.5),
            min: v[0],
            max: v[v.len() - 1],
            p25: quantile(&v, 0.25),
            p75: quantile(&v, 0.75),
        })
    }

    /// Half the interquartile range relative to the median: a robust noise figure (0.05 = 5%).
    pub fn rel_iqr(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.p75 - self.p25) / 2.0 / self.median
        }
    }
}

/// Quantile `q` in [0, 1] of an ascending, non-empty slice.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let frac = pos - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

/// Per-round ratios `b[i] / a[i]` of two paired samples (rounds where both ran).
pub fn paired_ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter()
        .zip(b)
        .filter(|(x, _)| **x != 0.0)
        .map(|(x, y)| y / x)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_odd_sample() {
        let s = Summary::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!(s.n, 5);
        assert_eq!(s.median, 3.0);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 5.0);
        assert_eq!(s.p25, 2.0);
        assert_eq!(s.p75, 4.0);
        assert!((s.rel_iqr() - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn summary_of_even_sample_interpolates() {
        let s = Summary::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert_eq!(s.p25, 1.75);
        assert_eq!(s.p75, 3.25);
    }

    #[test]
    fn empty_sample_has_no_summary() {
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn paired_ratios_skip_zero_baselines() {
        assert_eq!(
            paired_ratios(&[2.0, 0.0, 4.0], &[1.0, 5.0, 6.0]),
            vec![0.5, 1.5]
        );
    }
}
