//! The entropy-weighted dynamic weighted round robin of seed 001 (Qin et al., "Research on
//! Nginx Dynamic Load Balancing Algorithm", §III).
//!
//! From the four utilizations of every server (CPU, memory, disk I/O, network):
//!
//! 1. **Remaining performance** `r_ij = 1 − u_ij` of index `i` on server `j` (§III.C's
//!    `C_j, M_j, D_j, N_j`). The agent reports utilizations, not absolute figures, so the
//!    remaining performance is the free share; the operator's idea of how big each server is
//!    lives in the configured weights, which the model returns to.
//! 2. **Min-max normalisation** across servers, per index (eq. 1): `Y_ij = (r_ij − min_i) /
//!    (max_i − min_i)`.
//! 3. **Entropy weight method** (eqs. 2–4): `p_ij = Y_ij / Σ_j Y_ij`;
//!    `e_i = −(1/ln n)·Σ_j p_ij·ln p_ij` over the `n` servers; `d_i = 1 − e_i`;
//!    index weight `w_i = d_i / Σ d` (the paper's `(1 − E_i)/(m − ΣE)` for `m` indices).
//! 4. **Base weight** (eq. 5): `W_S,j = 1000·Σ_i w_i·r_ij / T_i` with `T_i = Σ_j r_ij`: the
//!    server's index-weighted share of the cluster's remaining performance, in per mille (an
//!    idle cluster's base weights sum to 1000).
//! 5. **Load** (eq. 6): `U_j = Σ_i w_i·r_ij`, the weighted remaining performance. A server is
//!    highly loaded when `U_j ≤ H` and lightly loaded when `U_j ≥ L`.
//! 6. **Adjustment** (eqs. 7–8): when some server is highly loaded and some lightly loaded, the
//!    cluster is out of balance and every weight becomes `W_j = F_j·W_S,j` with
//!    `F_j = U_j / Σ U`. When no server is highly loaded, the weights move back towards the
//!    initial (configured) weights, "gradually" as the paper says: each update halves the gap
//!    (in proportion), and the configured weights are restored exactly once every gap is below
//!    one unit. When every loaded server is highly loaded and none is lightly loaded, there is
//!    nowhere to move load to, and the weights stay.
//!
//! What the paper leaves open and we chose:
//!
//! * `H` and `L`: the paper gives no values. We take them from seed 000's Table 3 (utilization
//!   above 0.8 is overload, below 0.6 is free): `H` = 0.2 remaining, `L` = 0.4 remaining.
//! * Degenerate inputs of the entropy method: an index whose values are equal on every server
//!   (within 1e-9) carries no information, `d = 0` (min-max would divide by zero); `0·ln 0`
//!   counts as 0 (the server with the least remaining performance always has `p = 0`); one
//!   server alone carries no information either (`1/ln 1` is undefined); and when no index
//!   carries information, the indices weigh equally (1/4 each). An index with no remaining
//!   performance anywhere (`T_i = 0`) gives every server an equal share in eq. 5.
//! * A server without a report counts as idle (see the [module conventions](super)); weights
//!   are at least 1 (nginx, where the paper writes them, refuses 0).

use super::{LoadReport, report_or_idle, to_weight};

/// CPU, memory, disk, network.
pub const INDICES: usize = 4;

/// Eq. 5's scale: base weights of an idle cluster sum to this.
pub const SCALE: f64 = 1000.0;

/// `H`: a server with at most this much weighted remaining performance is highly loaded.
pub const HIGH_LOAD: f64 = 0.2;

/// `L`: a server with at least this much weighted remaining performance is lightly loaded.
pub const LOW_LOAD: f64 = 0.4;

/// The share of the gap to the initial weights closed by each update without a highly loaded
/// server (ours: the paper says only "gradually").
pub const RETURN_RATE: f64 = 0.5;

/// Differences between servers below this count as none (noise of `1 − u`).
const EQUAL: f64 = 1e-9;

/// The remaining performance `1 − u` of CPU, memory, disk and network (sanitized first).
pub fn remaining(report: &LoadReport) -> [f64; INDICES] {
    let r = report.sanitized();
    [1.0 - r.cpu, 1.0 - r.mem, 1.0 - r.disk, 1.0 - r.net]
}

/// The entropy weight method (eqs. 1–4) over `values[server][index]`: one weight per index,
/// summing to 1. See the module documentation for the degenerate cases. `values` are expected
/// as [`remaining`] gives them, in [0, 1]; other values do not panic but mean nothing.
pub fn entropy_weights(values: &[[f64; INDICES]]) -> [f64; INDICES] {
    let n = values.len();
    let mut d = [0.0; INDICES];
    if n >= 2 {
        let k = 1.0 / (n as f64).ln();
        for (i, d_i) in d.iter_mut().enumerate() {
            let column = values.iter().map(|row| row[i]);
            let min = column.clone().fold(f64::INFINITY, f64::min);
            let max = column.clone().fold(f64::NEG_INFINITY, f64::max);
            let range = max - min;
            if range <= EQUAL {
                continue;
            }
            let y: Vec<f64> = column.map(|x| (x - min) / range).collect();
            let total: f64 = y.iter().sum();
            let e = -k
                * y.iter()
                    .map(|&y| y / total)
                    .filter(|&p| p > 0.0)
                    .map(|p| p * p.ln())
                    .sum::<f64>();
            *d_i = (1.0 - e).clamp(0.0, 1.0);
        }
    }
    let total: f64 = d.iter().sum();
    if total > 0.0 {
        d.map(|d| d / total)
    } else {
        [1.0 / INDICES as f64; INDICES]
    }
}

/// `U_j = Σ_i w_i·r_ij` (eq. 6) for every server.
pub fn performance(values: &[[f64; INDICES]], index: &[f64; INDICES]) -> Vec<f64> {
    values
        .iter()
        .map(|row| row.iter().zip(index).map(|(r, w)| r * w).sum())
        .collect()
}

/// `W_S,j = 1000·Σ_i w_i·r_ij / T_i` (eq. 5) for every server.
pub fn base_weights(values: &[[f64; INDICES]], index: &[f64; INDICES]) -> Vec<f64> {
    let n = values.len() as f64;
    let mut totals = [0.0; INDICES];
    for row in values {
        for (t, r) in totals.iter_mut().zip(row) {
            *t += r;
        }
    }
    values
        .iter()
        .map(|row| {
            let share: f64 = (0..INDICES)
                .map(|i| {
                    let part = if totals[i] > 0.0 {
                        row[i] / totals[i]
                    } else {
                        1.0 / n
                    };
                    index[i] * part
                })
                .sum();
            SCALE * share
        })
        .collect()
}

/// What an update did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adjustment {
    /// A highly and a lightly loaded server: weights recomputed as `F_j·W_S,j`.
    Rebalanced,
    /// No highly loaded server: weights moved towards the initial ones (or are there).
    Returning,
    /// Highly loaded servers but no lightly loaded one: weights kept.
    Saturated,
}

/// The weights of one pool under seed 001's model.
#[derive(Debug, Clone)]
pub struct DynamicWrrModel {
    initial: Vec<u32>,
    weights: Vec<u32>,
    high: f64,
    low: f64,
}

impl DynamicWrrModel {
    /// A model starting at, and returning to, the configured `initial` weights, with the
    /// default thresholds [`HIGH_LOAD`] and [`LOW_LOAD`].
    pub fn new(initial: &[u32]) -> DynamicWrrModel {
        DynamicWrrModel::with_thresholds(initial, HIGH_LOAD, LOW_LOAD)
    }

    /// The same with thresholds `H` = `high` and `L` = `low` on the weighted remaining
    /// performance (in [0, 1]).
    pub fn with_thresholds(initial: &[u32], high: f64, low: f64) -> DynamicWrrModel {
        DynamicWrrModel {
            initial: initial.to_vec(),
            weights: initial.to_vec(),
            high,
            low,
        }
    }

    /// The current weights, one per server.
    pub fn weights(&self) -> &[u32] {
        &self.weights
    }

    /// One round of the model over `reports` (one per server; missing ones count as idle,
    /// extra ones are ignored).
    pub fn update(&mut self, reports: &[Option<LoadReport>]) -> Adjustment {
        let values: Vec<[f64; INDICES]> = (0..self.weights.len())
            .map(|j| remaining(&report_or_idle(reports.get(j).unwrap_or(&None))))
            .collect();
        let index = entropy_weights(&values);
        let u = performance(&values, &index);
        let high = u.iter().any(|&u| u <= self.high);
        let low = u.iter().any(|&u| u >= self.low);
        match (high, low) {
            (true, true) => {
                let base = base_weights(&values, &index);
                let total: f64 = u.iter().sum();
                self.weights = u
                    .iter()
                    .zip(&base)
                    .map(|(&u, &ws)| to_weight(u / total * ws))
                    .collect();
                Adjustment::Rebalanced
            }
            (false, _) => {
                self.return_to_initial();
                Adjustment::Returning
            }
            (true, false) => Adjustment::Saturated,
        }
    }

    /// Closes [`RETURN_RATE`] of the gap between the current weights and the initial ones,
    /// scaled to the current total; snaps to the initial weights once every gap is below 1.
    fn return_to_initial(&mut self) {
        if self.weights == self.initial {
            return;
        }
        let current: f64 = self.weights.iter().map(|&w| f64::from(w)).sum();
        let initial: f64 = self.initial.iter().map(|&w| f64::from(w)).sum();
        if initial <= 0.0 {
            self.weights.clone_from(&self.initial);
            return;
        }
        let mut close = true;
        let next: Vec<u32> = self
            .weights
            .iter()
            .zip(&self.initial)
            .map(|(&w, &w0)| {
                let target = f64::from(w0) * current / initial;
                let next = f64::from(w) + (target - f64::from(w)) * RETURN_RATE;
                close &= (next - target).abs() < 1.0;
                to_weight(next)
            })
            .collect();
        if close {
            self.weights.clone_from(&self.initial);
        } else {
            self.weights = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(cpu: f64, mem: f64, disk: f64, net: f64) -> Option<LoadReport> {
        Some(LoadReport {
            cpu,
            mem,
            disk,
            net,
            container_mem: 0.3, // not part of seed 001's indices: must not matter
        })
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    /// Three servers; c is busy. Utilizations (cpu, mem, disk, net):
    /// a = (0.2, 0.5, 0.1, 0.3), b = (0.5, 0.5, 0.1, 0.6), c = (0.95, 0.5, 0.9, 0.9).
    fn busy_c() -> [Option<LoadReport>; 3] {
        [
            report(0.2, 0.5, 0.1, 0.3),
            report(0.5, 0.5, 0.1, 0.6),
            report(0.95, 0.5, 0.9, 0.9),
        ]
    }

    #[test]
    fn entropy_weights_by_hand() {
        // Remaining performance r = 1 − u, per index over a, b, c:
        //   cpu  0.8, 0.5, 0.05 → Y = (r − 0.05)/0.75 = 1, 0.6, 0  → p = 0.625, 0.375, 0
        //        e = −(0.625·ln 0.625 + 0.375·ln 0.375)/ln 3 = 0.661563/1.098612 = 0.602181
        //        d = 0.397819
        //   mem  0.5, 0.5, 0.5   → equal: no information, d = 0
        //   disk 0.9, 0.9, 0.1   → Y = 1, 1, 0 → p = 0.5, 0.5, 0 → e = ln 2/ln 3 = 0.630930
        //        d = 0.369070
        //   net  0.7, 0.4, 0.1   → Y = 1, 0.5, 0 → p = 2/3, 1/3, 0
        //        e = −(2/3·ln 2/3 + 1/3·ln 1/3)/ln 3 = 0.636514/1.098612 = 0.579380
        //        d = 0.420620
        // Σd = 1.187509; w = d/Σd = 0.335003, 0, 0.310794, 0.354203.
        let values: Vec<_> = busy_c().iter().map(|r| remaining(&r.unwrap())).collect();
        let w = entropy_weights(&values);
        for (got, want) in w.iter().zip([0.335003, 0.0, 0.310794, 0.354203]) {
            assert!((got - want).abs() < 1e-6, "{w:?}");
        }
        // U = Σ w·r: a = 0.335003·0.8 + 0.310794·0.9 + 0.354203·0.7 = 0.795659;
        // b = 0.335003·0.5 + 0.310794·0.9 + 0.354203·0.4 = 0.588897;
        // c = 0.335003·0.05 + 0.310794·0.1 + 0.354203·0.1 = 0.083250.
        let u = performance(&values, &w);
        assert!(close(u[0], 0.795659) && close(u[1], 0.588897) && close(u[2], 0.083250));
        // T = 1.35 (cpu), 1.5 (mem), 1.9 (disk), 1.2 (net);
        // W_S,a = 1000·(0.335003·0.8/1.35 + 0.310794·0.9/1.9 + 0.354203·0.7/1.2) = 552.357;
        // W_S,b = 1000·(0.335003·0.5/1.35 + 0.310794·0.9/1.9 + 0.354203·0.4/1.2) = 389.361;
        // W_S,c = 1000·(0.335003·0.05/1.35 + 0.310794·0.1/1.9 + 0.354203·0.1/1.2) = 58.282.
        let ws = base_weights(&values, &w);
        assert!((ws[0] - 552.357).abs() < 1e-3, "{ws:?}");
        assert!((ws[1] - 389.361).abs() < 1e-3, "{ws:?}");
        assert!((ws[2] - 58.282).abs() < 1e-3, "{ws:?}");
        assert!((ws.iter().sum::<f64>() - 1000.0).abs() < 1e-9);
    }

    #[test]
    fn a_busy_server_next_to_an_idle_one_is_rebalanced() {
        // Continuing the example: c is highly loaded (U = 0.083 ≤ 0.2) and a lightly loaded
        // (U = 0.796 ≥ 0.4). ΣU = 1.467806; F = 0.542074, 0.401209, 0.056717;
        // W = F·W_S = 0.542074·552.357 = 299.42 → 299; 0.401209·389.361 = 156.22 → 156;
        // 0.056717·58.282 = 3.31 → 3. (Checked with a separate Python script.)
        let mut m = DynamicWrrModel::new(&[1, 1, 2]);
        assert_eq!(m.update(&busy_c()), Adjustment::Rebalanced);
        assert_eq!(m.weights(), [299, 156, 3]);
    }

    #[test]
    fn without_a_busy_server_weights_return_to_the_configured_ones() {
        let mut m = DynamicWrrModel::new(&[1, 1, 2]);
        m.update(&busy_c());
        assert_eq!(m.weights(), [299, 156, 3]);
        // Everyone idle now: no server at U ≤ 0.2. Total 458, so the targets are the
        // configured 1:1:2 scaled to it: 114.5, 114.5, 229. Each update halves the gap:
        // 299 → 299 + (114.5 − 299)/2 = 206.75 → 207; 156 → 135.25 → 135; 3 → 116.
        let idle = [None, None, None];
        assert_eq!(m.update(&idle), Adjustment::Returning);
        assert_eq!(m.weights(), [207, 135, 116]);
        // Total 458 again: 207 → 160.75 → 161; 135 → 124.75 → 125; 116 → 172.5 → 173 (rounded
        // half away from zero).
        m.update(&idle);
        assert_eq!(m.weights(), [161, 125, 173]);
        // The gaps keep halving until all are below one unit; then 1, 1, 2 exactly.
        let mut rounds = 2;
        while m.weights() != [1, 1, 2] {
            assert_eq!(m.update(&idle), Adjustment::Returning);
            rounds += 1;
            assert!(rounds < 20, "{:?}", m.weights());
        }
        // The same rounds simulated separately in Python: 138, 120, 201; 126, 117, 215;
        // 120, 116, 222; 117, 115, 226; 116, 115, 228; then every gap is below one unit and
        // round 8 restores 1, 1, 2.
        assert_eq!(rounds, 8);
        assert_eq!(m.update(&idle), Adjustment::Returning);
        assert_eq!(m.weights(), [1, 1, 2]);
    }

    #[test]
    fn all_servers_busy_keeps_the_weights() {
        // U ≤ 0.2 everywhere and nobody at U ≥ 0.4: nowhere to move load.
        let mut m = DynamicWrrModel::new(&[3, 1]);
        let busy = [report(0.9, 0.9, 0.9, 0.85), report(0.95, 0.9, 0.8, 0.9)];
        assert_eq!(m.update(&busy), Adjustment::Saturated);
        assert_eq!(m.weights(), [3, 1]);
    }

    #[test]
    fn thresholds_decide_between_rebalancing_and_returning() {
        // Two servers, only cpu differs: w = (1, 0, 0, 0) (with two servers any index that
        // differs has p = (1, 0), e = 0, d = 1). U = remaining cpu = 0.7 and 0.25.
        let reports = [report(0.3, 0.5, 0.5, 0.5), report(0.75, 0.5, 0.5, 0.5)];
        // With H = 0.2, 0.25 is not highly loaded: the weights stay configured.
        let mut m = DynamicWrrModel::new(&[5, 5]);
        assert_eq!(m.update(&reports), Adjustment::Returning);
        assert_eq!(m.weights(), [5, 5]);
        // With H = 0.25 it is (U ≤ H): T = 0.95; W_S = 1000·0.7/0.95 = 736.84 and
        // 1000·0.25/0.95 = 263.16; F = 0.7/0.95, 0.25/0.95;
        // W = 0.736842·736.84 = 542.94 → 543 and 0.263158·263.16 = 69.25 → 69.
        let mut m = DynamicWrrModel::with_thresholds(&[5, 5], 0.25, 0.4);
        assert_eq!(m.update(&reports), Adjustment::Rebalanced);
        assert_eq!(m.weights(), [543, 69]);
        // With L = 0.75 the other server is not lightly loaded (0.7 < 0.75): saturated.
        let mut m = DynamicWrrModel::with_thresholds(&[5, 5], 0.25, 0.75);
        assert_eq!(m.update(&reports), Adjustment::Saturated);
        assert_eq!(m.weights(), [5, 5]);
    }

    #[test]
    fn degenerate_inputs() {
        // All equal: no index carries information, equal index weights.
        let same = [[0.4, 0.3, 0.2, 0.1]; 3];
        assert_eq!(entropy_weights(&same), [0.25; 4]);
        // One server: no information either (1/ln 1 is undefined).
        assert_eq!(entropy_weights(&[[0.9, 0.1, 0.5, 0.5]]), [0.25; 4]);
        assert_eq!(entropy_weights(&[]), [0.25; 4]);
        // One busy server alone is highly loaded but nobody is lightly loaded: saturated,
        // its weight stays.
        let mut one = DynamicWrrModel::new(&[7]);
        assert_eq!(
            one.update(&[report(1.0, 1.0, 1.0, 1.0)]),
            Adjustment::Saturated
        );
        assert_eq!(one.weights(), [7]);
        // Nothing remaining anywhere in one index (T = 0): equal shares in eq. 5, no division
        // by zero. cpu 1.0 on both, the rest differs only on disk.
        let values = [[0.0, 0.5, 0.9, 0.5], [0.0, 0.5, 0.1, 0.5]];
        let ws = base_weights(&values, &[0.5, 0.0, 0.5, 0.0]);
        // a = 1000·(0.5·½ + 0.5·0.9/1.0) = 700; b = 1000·(0.5·½ + 0.5·0.1) = 300.
        assert!(close(ws[0], 700.0) && close(ws[1], 300.0), "{ws:?}");
        // NaN and out-of-range utilizations do not panic: NaN is fully used, the rest clamped.
        let mut m = DynamicWrrModel::new(&[1, 1]);
        let bad = [
            report(f64::NAN, f64::NAN, f64::NAN, f64::NAN),
            report(-4.0, 7.0, f64::INFINITY, 0.0),
        ];
        // Remaining: a = (0, 0, 0, 0), b = (1, 0, 0, 1): cpu and net differ, w = (½, 0, 0, ½);
        // U = 0 and 1: rebalanced. W_S = 0 and 1000; F = 0 and 1: W = 0 → 1 and 1000.
        assert_eq!(m.update(&bad), Adjustment::Rebalanced);
        assert_eq!(m.weights(), [1, 1000]);
        // Fewer reports than servers: the others are idle; an empty model does nothing.
        let mut m = DynamicWrrModel::new(&[2, 2, 2]);
        assert_eq!(m.update(&[]), Adjustment::Returning);
        assert_eq!(m.weights(), [2, 2, 2]);
        let mut empty = DynamicWrrModel::new(&[]);
        assert_eq!(empty.update(&busy_c()), Adjustment::Returning);
        assert!(empty.weights().is_empty());
    }
}
