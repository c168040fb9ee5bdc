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

/// The p-value as the tables print it: three decimals (`p=0.368`), or `p<0.001` below that
/// (twenty rounds all on one side give about 2e-6, which three decimals would print as a
/// misleading `p=0.000`).
pub fn p_text(p: f64) -> String {
    if p < 0.001 {
        "p<0.001".to_string()
    } else {
        format!("p={p:.3}")
    }
}

/// `, p=0.368` (see [`p_text`]) after a figure, or nothing without a p.
pub fn p_suffix(p: Option<f64>) -> String {
    p.map_or(String::new(), |q| format!(", {}", p_text(q)))
}

/// A row as the lines under a table name it: `name (0.971, p=0.475)`, its paired B/A median
/// with its p.
pub fn ratio_text(name: &str, paired: f64, p: Option<f64>) -> String {
    format!("{name} ({paired:.3}{})", p_suffix(p))
}

/// Below this p, a row's per-round B/A is taken as on one side of 1 round after round (the
/// arms differ), not as the machine's spread around equal arms.
pub const P_DIFFERS: f64 = 0.05;

/// A tokens/s row whose paired B/A median is below 1.00, for [`below_one_lines`].
pub struct BelowOne {
    /// The row as its table names it.
    pub name: String,
    /// The paired B/A median (a ratio).
    pub paired: f64,
    /// Its [`signed_rank_p`]; `None` when there was none.
    pub p: Option<f64>,
}

/// The two lines under a table that sort its tokens/s rows below 1.00: below round after round
/// (p < [`P_DIFFERS`]: B slower than A in most rounds, not only in the median) and within the
/// run's spread (the rounds on both sides of 1). The signed-rank p tests exactly that goal
/// (B/A centred on 1), so the split is the test's, not a threshold of our own on the ratio.
/// Empty when `rows` is.
pub fn below_one_lines(rows: &[BelowOne]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let list = |slower: bool| {
        let v: Vec<String> = rows
            .iter()
            .filter(|r| r.p.is_some_and(|q| q < P_DIFFERS) == slower)
            .map(|r| ratio_text(&r.name, r.paired, r.p))
            .collect();
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join("; ")
        }
    };
    format!(
        "- below 1.00 round after round (p < {P_DIFFERS:.2}): {}\n\
         - below 1.00 within this run's spread (p ≥ {P_DIFFERS:.2}, rounds on both sides of 1): {}\n",
        list(true),
        list(false)
    )
}

/// Two-sided p-value of the Wilcoxon signed-rank test that per-round ratios `b/a` (as from
/// [`paired_ratios`]) are centred on 1: the chance, were the arms the same, of signed ranks
/// of `ln(ratio)` at least this far from balanced. Ratios of exactly 1 are left out (Wilcoxon's
/// own rule); tied magnitudes share their average rank. Exact (every sign assignment counted,
/// by a sum over doubled ranks) up to 60 ratios, the normal approximation beyond. `None` for
/// no ratio other than 1 or one that is not positive and finite.
pub fn signed_rank_p(ratios: &[f64]) -> Option<f64> {
    signed_rank_p_exact_up_to(ratios, 60)
}

/// [`signed_rank_p`], exact up to `exact_up_to` ratios other than 1.
fn signed_rank_p_exact_up_to(ratios: &[f64], exact_up_to: usize) -> Option<f64> {
    if ratios.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
        return None;
    }
    let mut d: Vec<f64> = ratios
        .iter()
        .map(|r| r.ln())
        .filter(|x| *x != 0.0)
        .collect();
    if d.is_empty() {
        return None;
    }
    d.sort_by(|x, y| x.abs().total_cmp(&y.abs()));
    let n = d.len();
    // Doubled ranks: an average of tied ranks is a whole or half number.
    let mut rank2 = vec![0usize; n];
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && d[j + 1].abs() == d[i].abs() {
            j += 1;
        }
        for r in &mut rank2[i..=j] {
            *r = i + j + 2;
        }
        i = j + 1;
    }
    let w_plus: usize = (0..n).filter(|&k| d[k] > 0.0).map(|k| rank2[k]).sum();
    let total: usize = rank2.iter().sum();
    if n > exact_up_to {
        let mean = total as f64 / 2.0;
        let var: f64 = rank2.iter().map(|&r| (r * r) as f64).sum::<f64>() / 4.0;
        let z = (w_plus as f64 - mean).abs() / var.sqrt();
        return Some((2.0 * normal_upper_tail(z)).min(1.0));
    }
    // ways[s]: sign assignments whose positive doubled ranks sum to s.
    let mut ways = vec![0f64; total + 1];
    ways[0] = 1.0;
    for &r in &rank2 {
        for s in (r..=total).rev() {
            ways[s] += ways[s - r];
        }
    }
    let all: f64 = ways.iter().sum();
    let low: f64 = ways[..=w_plus].iter().sum::<f64>() / all;
    let high: f64 = ways[w_plus..].iter().sum::<f64>() / all;
    Some((2.0 * low.min(high)).min(1.0))
}

/// P(Z > z) of a standard normal Z (Abramowitz and Stegun 26.2.17, error below 7.5e-8).
fn normal_upper_tail(z: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.231_641_9 * z);
    let poly = t
        * (0.319_381_530
            + t * (-0.356_563_782
                + t * (1.781_477_937 + t * (-1.821_255_978 + t * 1.330_274_429))));
    (-z * z / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt() * poly
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_rank_p_exact_values() {
        // 10 ratios, all below 1: one assignment in 1024 is as extreme on each side.
        let all_below = [0.9, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99];
        assert!((signed_rank_p(&all_below).unwrap() - 2.0 / 1024.0).abs() < 1e-12);
        // the two smallest magnitudes above 1, ranks 1 and 2: W+ = 3; the subsets of 1..=10
        // summing to at most 3 are {}, {1}, {2}, {3}, {1,2}: 5 of 1024 on each side
        let r = [1.001, 1.002, 0.97, 0.96, 0.95, 0.94, 0.93, 0.92, 0.91, 0.9];
        assert!((signed_rank_p(&r).unwrap() - 10.0 / 1024.0).abs() < 1e-12);
        // balanced: p is 1
        assert!((signed_rank_p(&[1.1, 1.0 / 1.1]).unwrap() - 1.0).abs() < 1e-12);
        // the H200's pp512 at -ngl 8 of 2026-12-05 (paired B/A per round): W+ = 5 of 55,
        // 10 of 1024 assignments at most that, p = 20/1024
        let pp = [
            0.798, 1.043, 0.877, 0.949, 0.856, 0.881, 1.023, 0.999, 0.793, 0.861,
        ];
        assert!((signed_rank_p(&pp).unwrap() - 20.0 / 1024.0).abs() < 1e-12);
    }

    #[test]
    fn p_text_three_decimals_or_below_a_thousandth() {
        assert_eq!(p_text(0.3681), "p=0.368");
        assert_eq!(p_text(0.05), "p=0.050");
        assert_eq!(p_text(0.001), "p=0.001");
        // twenty rounds all on one side
        assert_eq!(p_text(2.0 / 1_048_576.0), "p<0.001");
    }

    #[test]
    fn signed_rank_p_ties_ones_and_bad_input() {
        // ratios of exactly 1 are left out: the same as without them
        let with_ones = [1.0, 0.9, 0.8, 1.0, 1.1];
        assert_eq!(signed_rank_p(&with_ones), signed_rank_p(&[0.9, 0.8, 1.1]));
        // tied magnitudes (1.25 and 0.8 have |ln| equal): ranks 1.5 and 1.5, W+ = 1.5 of 3;
        // the four assignments give W+ 0, 1.5, 1.5, 3: p = 2 * 3/4 capped at 1
        assert_eq!(signed_rank_p(&[1.25, 0.8]), Some(1.0));
        assert_eq!(signed_rank_p(&[]), None);
        assert_eq!(signed_rank_p(&[1.0, 1.0]), None);
        assert_eq!(signed_rank_p(&[0.9, -1.0]), None);
        assert_eq!(signed_rank_p(&[0.9, f64::NAN]), None);
    }

    #[test]
    fn signed_rank_p_normal_approximation_is_close_to_the_exact_count() {
        // 60 rounds, two in three below 1 (the smaller magnitudes above): exact against the
        // approximation on the same ratios
        let r: Vec<f64> = (1..=60)
            .map(|k| {
                let m = 1.0 + k as f64 / 1000.0;
                if k % 3 == 0 {
                    m
                } else {
                    1.0 / m
                }
            })
            .collect();
        let exact = signed_rank_p_exact_up_to(&r, 60).unwrap();
        let approx = signed_rank_p_exact_up_to(&r, 0).unwrap();
        assert!(exact > 0.001 && exact < 0.1, "{exact}");
        assert!(
            (approx / exact - 1.0).abs() < 0.1,
            "exact {exact}, approximation {approx}"
        );
        // and what the public function gives is the exact one
        assert_eq!(signed_rank_p(&r), Some(exact));
    }

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
