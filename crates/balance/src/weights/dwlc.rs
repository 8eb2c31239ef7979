//! DWLC's weight model (seed 003, Li, Li, Li, "An Integrated Load-balancing Scheduling
//! Algorithm for Nginx-Based Web Application Clusters", §4.2).
//!
//! Every `t` = 3 s each node's load is a fixed blend of its utilizations, in percent:
//! `L = 0.35·cpu + 0.35·mem + 0.2·net + 0.1·container_mem` (eq. 5), and its weight is
//! `W(t) = 100 − L` (eq. 6). A node joins with weight 100. To keep small fluctuations from
//! rewriting the weights, the new weight replaces the old one only when it differs by at least
//! `A` = 5 (eqs. 7–8). The paper found 5 and 3 s best among 1–6 and 1–5 s (§5, Figs. 2–4).
//!
//! `W(t)` is rounded to the nearest integer before the comparison with `A`: the paper writes
//! the weight into nginx's configuration, which holds integers, and compares with the weight
//! read back from there. A node at 100% everywhere would get `W = 0`, which nginx does not
//! accept; it gets [`MIN_WEIGHT`](super::MIN_WEIGHT) = 1.

use super::{LoadReport, report_or_idle, to_weight};
use crate::backend::Nanos;

/// `a1..a4` of eq. 5: CPU, memory, network and container memory (seed 003 §4.2).
pub const COEFFICIENTS: [f64; 4] = [0.35, 0.35, 0.2, 0.1];

/// The weight a node starts with (seed 003 §4.2: "an initial weight 100").
pub const INITIAL_WEIGHT: u32 = 100;

/// The threshold `A`: a weight changes only by at least this much (seed 003 §5).
pub const THRESHOLD: u32 = 5;

/// The interval `t` between two weight calculations (seed 003 §5: 3 s was fastest).
pub const INTERVAL: Nanos = Nanos(3_000_000_000);

/// `L` of eq. 5 in percent, from a report (sanitized first).
pub fn load_percent(report: &LoadReport) -> f64 {
    let r = report.sanitized();
    let [a1, a2, a3, a4] = COEFFICIENTS;
    100.0 * (a1 * r.cpu + a2 * r.mem + a3 * r.net + a4 * r.container_mem)
}

/// `W(t) = 100 − L` of eq. 6, rounded, at least 1.
pub fn target_weight(report: &LoadReport) -> u32 {
    to_weight(100.0 - load_percent(report))
}

/// Eq. 8: the new weight if it moved by at least [`THRESHOLD`], else the old one.
pub fn apply_threshold(old: u32, new: u32) -> u32 {
    if old.abs_diff(new) >= THRESHOLD {
        new
    } else {
        old
    }
}

/// The weights of one pool's nodes, updated at most every [`INTERVAL`].
#[derive(Debug, Clone)]
pub struct DwlcModel {
    weights: Vec<u32>,
    /// When the last calculation ran; `None` before the first.
    last: Option<Nanos>,
}

impl DwlcModel {
    /// `n` nodes at the initial weight 100.
    pub fn new(n: usize) -> DwlcModel {
        DwlcModel {
            weights: vec![INITIAL_WEIGHT; n],
            last: None,
        }
    }

    /// The current weights, one per node.
    pub fn weights(&self) -> &[u32] {
        &self.weights
    }

    /// One calculation over `reports` (one per node; a node without one counts as idle, so it
    /// heads back to 100). Runs only if [`INTERVAL`] has passed since the last one (the first
    /// always runs); returns whether any weight changed. Extra reports beyond the number of
    /// nodes are ignored; nodes beyond the reports count as idle.
    pub fn update(&mut self, reports: &[Option<LoadReport>], now: Nanos) -> bool {
        if self.last.is_some_and(|last| now.since(last) < INTERVAL) {
            return false;
        }
        self.last = Some(now);
        let mut changed = false;
        for (i, w) in self.weights.iter_mut().enumerate() {
            let report = report_or_idle(reports.get(i).unwrap_or(&None));
            let next = apply_threshold(*w, target_weight(&report));
            changed |= next != *w;
            *w = next;
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(cpu: f64, mem: f64, net: f64, container_mem: f64) -> LoadReport {
        LoadReport {
            cpu,
            mem,
            disk: 0.9, // not part of seed 003's load: must not matter
            net,
            container_mem,
        }
    }

    fn secs(s: u64) -> Nanos {
        Nanos(s * 1_000_000_000)
    }

    #[test]
    fn load_and_weight_by_the_papers_formula() {
        // L = 0.35·50 + 0.35·40 + 0.2·10 + 0.1·80 = 17.5 + 14 + 2 + 8 = 41.5 %, W = 58.5 → 59.
        let r = report(0.5, 0.4, 0.1, 0.8);
        assert!((load_percent(&r) - 41.5).abs() < 1e-9);
        assert_eq!(target_weight(&r), 59);
        // Idle: W = 100. Fully used: W = 0, floored to 1.
        assert_eq!(target_weight(&report(0.0, 0.0, 0.0, 0.0)), 100);
        assert_eq!(target_weight(&report(1.0, 1.0, 1.0, 1.0)), 1);
    }

    #[test]
    fn threshold_keeps_changes_below_five() {
        assert_eq!(apply_threshold(100, 96), 100); // |λ| = 4 < 5
        assert_eq!(apply_threshold(100, 95), 95); // |λ| = 5 ≥ 5
        assert_eq!(apply_threshold(60, 64), 60);
        assert_eq!(apply_threshold(60, 65), 65);
    }

    #[test]
    fn updates_follow_interval_and_hysteresis() {
        let mut m = DwlcModel::new(2);
        assert_eq!(m.weights(), [100, 100]);
        // a: L = 0.35·10 + 0.35·10 = 7 % → W = 93, |93 − 100| = 7 ≥ 5: changes.
        // b: L = 0.35·8 = 2.8 % → W = 97.2 → 97, |97 − 100| = 3 < 5: stays 100.
        let r1 = [
            Some(report(0.1, 0.1, 0.0, 0.0)),
            Some(report(0.08, 0.0, 0.0, 0.0)),
        ];
        assert!(m.update(&r1, secs(10)));
        assert_eq!(m.weights(), [93, 100]);
        // Within 3 s of the last calculation nothing is recalculated, whatever the reports.
        let busy = [Some(report(1.0, 1.0, 1.0, 1.0)); 2];
        assert!(!m.update(&busy, secs(12)));
        assert_eq!(m.weights(), [93, 100]);
        // At 3 s: a = 0.35·20 + 0.35·4 = 8.4 % → 91.6 → 92 (|92 − 93| = 1 < 5, stays 93);
        // b has no report: idle, W = 100, unchanged.
        let r2 = [Some(report(0.2, 0.04, 0.0, 0.0)), None];
        assert!(!m.update(&r2, secs(13)));
        assert_eq!(m.weights(), [93, 100]);
        // Both fully busy: W = 0 → 1 for both.
        assert!(m.update(&busy, secs(16)));
        assert_eq!(m.weights(), [1, 1]);
    }

    #[test]
    fn bad_and_short_inputs_do_not_panic() {
        let mut m = DwlcModel::new(3);
        // NaN cpu is read as fully used: L = 35 % → W = 65.
        let nan = LoadReport {
            cpu: f64::NAN,
            ..LoadReport::default()
        };
        assert!(m.update(&[Some(nan)], secs(0)));
        assert_eq!(m.weights(), [65, 100, 100]);
        let mut empty = DwlcModel::new(0);
        assert!(!empty.update(&[Some(nan), None], secs(0)));
        assert!(empty.weights().is_empty());
    }
}
