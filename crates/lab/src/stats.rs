//! Statistics over repetitions: the median, a 95% percentile-bootstrap interval of it, paired
//! win counts, and a paired-bootstrap interval of a ratio of medians.
//!
//! A scenario's repetitions are paired: repetition `r` is the same seeded trace for every
//! contender (`crate::run`, `sim::play`), so two contenders are compared repetition by
//! repetition, and a resample of repetitions takes the same ones for both.
//!
//! **The percentile bootstrap** (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993,
//! ch. 13): draw the sample's size from the sample with replacement, take the statistic, do
//! that [`RESAMPLES`] times, and take the 2.5th and 97.5th percentiles of the statistics. The
//! draws come from a fixed seed ([`SEED`]), so the same numbers give the same interval and a
//! report is the same byte for byte. With one repetition there is no interval (`None`): a
//! single run says nothing about its own spread.
//!
//! Pure: no clock, no I/O.

use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64Mcg;

/// Bootstrap resamples per interval. 10,000 puts the 2.5th percentile 250 draws in from the
/// end, enough for its Monte Carlo error to be small against the interval (Efron & Tibshirani
/// advise at least 1,000 for percentile intervals).
pub const RESAMPLES: usize = 10_000;

/// The bootstrap's seed: fixed, so reports are reproducible.
pub const SEED: u64 = 0x5eed_b007;

/// The interval's confidence.
pub const LEVEL: f64 = 0.95;

/// A confidence interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub lo: f64,
    pub hi: f64,
}

impl Interval {
    pub fn contains(&self, x: f64) -> bool {
        self.lo <= x && x <= self.hi
    }

    pub fn width(&self) -> f64 {
        self.hi - self.lo
    }
}

/// `n` with its thousands grouped, for people: 10,000.
pub fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The median (the mean of the middle two for an even count); 0 for no values.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The `q` quantile of sorted values, by the nearest rank at `q × (n − 1)`.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let last = sorted.len().saturating_sub(1);
    let k = ((q * last as f64).round() as usize).min(last);
    sorted.get(k).copied().unwrap_or(0.0)
}

/// The percentile interval of `stats`, the bootstrap's statistics.
fn percentile(mut stats: Vec<f64>) -> Interval {
    stats.sort_by(f64::total_cmp);
    let tail = (1.0 - LEVEL) / 2.0;
    Interval {
        lo: quantile(&stats, tail),
        hi: quantile(&stats, 1.0 - tail),
    }
}

/// Resamples of `n` indices with replacement, from [`SEED`]: the same for every call with
/// the same `n`, so paired samples are resampled alike.
fn resamples(n: usize) -> impl Iterator<Item = Vec<usize>> {
    let mut rng = Pcg64Mcg::seed_from_u64(SEED);
    (0..RESAMPLES).map(move |_| (0..n).map(|_| rng.random_range(0..n)).collect())
}

/// The 95% percentile-bootstrap interval of the median of `sample`; `None` below two values.
pub fn median_interval(sample: &[f64]) -> Option<Interval> {
    if sample.len() < 2 {
        return None;
    }
    let mut picked = Vec::with_capacity(sample.len());
    let stats = resamples(sample.len())
        .map(|draw| {
            picked.clear();
            picked.extend(draw.iter().map(|&i| sample[i]));
            median(&picked)
        })
        .collect();
    Some(percentile(stats))
}

/// The 95% paired-bootstrap interval of `median(a) / median(b)`, where `a[r]` and `b[r]` come
/// from the same repetition: each resample takes the same repetitions for both. `None` below
/// two pairs, or when the lengths differ.
pub fn ratio_interval(a: &[f64], b: &[f64]) -> Option<Interval> {
    if a.len() < 2 || a.len() != b.len() {
        return None;
    }
    let (mut pa, mut pb) = (Vec::with_capacity(a.len()), Vec::with_capacity(b.len()));
    let stats = resamples(a.len())
        .map(|draw| {
            pa.clear();
            pb.clear();
            pa.extend(draw.iter().map(|&i| a[i]));
            pb.extend(draw.iter().map(|&i| b[i]));
            ratio(median(&pa), median(&pb))
        })
        .collect();
    Some(percentile(stats))
}

/// `a / b`, and 1 when both are 0 (two contenders without a single slow request are even).
pub fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        if a == 0.0 { 1.0 } else { f64::INFINITY }
    } else {
        a / b
    }
}

/// How often one contender beat another over paired repetitions (lower is better).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wins {
    /// Repetitions where the first was lower.
    pub won: usize,
    /// Repetitions where the second was lower.
    pub lost: usize,
    /// Repetitions where they were equal.
    pub tied: usize,
}

impl Wins {
    /// The repetitions compared.
    pub fn of(&self) -> usize {
        self.won + self.lost + self.tied
    }
}

/// Pairs `a[r]` with `b[r]` (the same repetition; the shorter sets the count) and counts who
/// was lower.
pub fn wins(a: &[f64], b: &[f64]) -> Wins {
    let mut w = Wins::default();
    for (x, y) in a.iter().zip(b) {
        match x.total_cmp(y) {
            std::cmp::Ordering::Less => w.won += 1,
            std::cmp::Ordering::Greater => w.lost += 1,
            std::cmp::Ordering::Equal => w.tied += 1,
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` values spread evenly over a skewed, known distribution (the exponential's
    /// quantiles at (k + ½)/n), shuffled so their order carries nothing.
    fn sample(n: usize) -> Vec<f64> {
        let mut v: Vec<f64> = (0..n)
            .map(|k| -(1.0 - (k as f64 + 0.5) / n as f64).ln())
            .collect();
        let mut rng = Pcg64Mcg::seed_from_u64(3);
        for i in (1..n).rev() {
            v.swap(i, rng.random_range(0..=i));
        }
        v
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(grouped(10_000), "10,000");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_234_567), "1,234,567");
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn the_interval_holds_the_median_shrinks_with_n_and_is_reproducible() {
        let ln2 = std::f64::consts::LN_2; // the exponential's median
        let mut widths = Vec::new();
        for n in [10, 40, 160, 640] {
            let s = sample(n);
            let i = median_interval(&s).unwrap();
            assert!(i.contains(median(&s)), "n {n}: {i:?}");
            assert!(i.contains(ln2), "n {n}: {i:?}");
            assert!(i.width() > 0.0, "n {n}: {i:?}");
            assert_eq!(median_interval(&s), Some(i), "the same draws");
            widths.push(i.width());
        }
        // The median's standard error falls as 1/√n: four times the sample, about half the
        // width.
        for w in widths.windows(2) {
            assert!(w[1] < w[0] * 0.75, "{widths:?}");
        }
        // About ±1.96 standard errors: 1/(2 f(m) √n) with f(m) = ½ for the exponential.
        let se = 1.0 / 640f64.sqrt();
        assert!(
            (widths[3] / (2.0 * 1.96 * se) - 1.0).abs() < 0.3,
            "{widths:?}"
        );
    }

    #[test]
    fn one_value_has_no_interval() {
        assert_eq!(median_interval(&[5.0]), None);
        assert_eq!(median_interval(&[]), None);
        assert_eq!(ratio_interval(&[5.0], &[4.0]), None);
        assert_eq!(ratio_interval(&[5.0, 1.0], &[4.0]), None);
    }

    #[test]
    fn a_paired_ratio_sees_through_the_repetitions_spread() {
        // Repetitions differ a lot (×1 to ×40), but in each one `a` is 10% above `b`: paired,
        // the ratio is 1.1 exactly; unpaired it would spread widely.
        let b: Vec<f64> = (1..=40).map(f64::from).collect();
        let a: Vec<f64> = b.iter().map(|x| x * 1.1).collect();
        let i = ratio_interval(&a, &b).unwrap();
        assert!(
            (i.lo - 1.1).abs() < 1e-9 && (i.hi - 1.1).abs() < 1e-9,
            "{i:?}"
        );
        assert_eq!(ratio(0.0, 0.0), 1.0);
        assert_eq!(ratio(2.0, 4.0), 0.5);
    }

    #[test]
    fn wins_count_paired_repetitions() {
        let a = [1.0, 5.0, 3.0, 2.0, 7.0];
        let b = [2.0, 4.0, 3.0, 9.0, 8.0];
        assert_eq!(
            wins(&a, &b),
            Wins {
                won: 3,
                lost: 1,
                tied: 1
            }
        );
        assert_eq!(wins(&b, &a).won, 1);
        assert_eq!(wins(&a, &b).of(), 5);
        assert_eq!(wins(&a, &b[..2]).of(), 2);
    }
}
