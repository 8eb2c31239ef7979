//! The entropy-weighted dynamic weighted round robin of seed 001 (Qin et al., "Research on
//! Nginx Dynamic Load Balancing Algorithm", §III).
//!
//! From the four utilizations `u_ij` of every server `j` (CPU, memory, disk I/O, network; the
//! paper's indicators `X_i`) and each server's size `s_j` (its configured weight):
//!
//! 1. **Min-max normalisation** of the raw indicators across servers, per index (eq. 1):
//!    `Y_ij = (u_ij − min_i) / (max_i − min_i)`.
//! 2. **Entropy weight method** (eqs. 2–4): `p_ij = Y_ij / Σ_j Y_ij`;
//!    `e_i = −(1/ln n)·Σ_j p_ij·ln p_ij` over the `n` servers; `d_i = 1 − e_i`;
//!    index weight `w_i = d_i / Σ d` (the paper's `(1 − E_i)/(m − ΣE)` for `m` indices).
//! 3. **Remaining performance** `r_ij = s_j·(1 − u_ij)` (§III.C's `C_j, M_j, D_j, N_j`): the
//!    absolute spare capacity, the server's size times its free share. The agent reports
//!    utilizations, not cores or bytes, so the size comes from the configuration: a 4-core
//!    server configured with weight 2 next to 2-core ones with weight 1 has twice their spare
//!    capacity at the same utilization, as the paper's 2-core/1 GB, 2-core/2 GB, 4-core/4 GB
//!    servers do.
//! 4. **Base weight** (eq. 5), the paper's initial weight: `W_S,j = 1000·Σ_i w_i·r_ij / T_i`
//!    with `T_i = Σ_j r_ij`: the server's index-weighted share of the cluster's remaining
//!    performance, in per mille (base weights always sum to 1000; an idle cluster's are the
//!    sizes' shares).
//! 5. **Load** (eq. 6): `U_j = Σ_i w_i·r_ij`, the weighted remaining performance.
//! 6. **Adjustment** (eqs. 7–8): when some server is highly loaded and some lightly loaded, the
//!    cluster is out of balance and every weight becomes `W_j = F_j·W_S,j` with
//!    `F_j = U_j / Σ U`. When no server is highly loaded, the weights move back towards the
//!    base weights `W_S`, "gradually" as the paper says: each update halves the gap, and the
//!    base weights are taken exactly once every gap is below one unit. When servers are highly
//!    loaded and none is lightly loaded, there is nowhere to move load to, and the weights
//!    stay.
//!
//! What the paper leaves open and we chose:
//!
//! * `H` and `L` are ours: the paper names the thresholds but gives no values. The defaults
//!   come from seed 000's Table 3 (utilization above 0.8 is overload, below 0.6 is free):
//!   `H` = 0.2 and `L` = 0.4, configurable (`high_load`, `low_load`). They apply to the free
//!   share `Σ_i w_i·(1 − u_ij)` in [0, 1], not to `U_j` itself, whose unit is whatever the
//!   configured weights are counted in: a server at 90 % is highly loaded whether it is
//!   configured with weight 1 or 100.
//! * The initial weight `W_S` is recomputed from every round's reports (eq. 5 is written over
//!   the current remaining performance); before the first report, it is that of an idle
//!   cluster, the sizes in per mille. So the model's weights stay on one scale, about 1000,
//!   and never jump back to the configured 1, 1, 2.
//! * Degenerate inputs of the entropy method: an index whose values are equal on every server
//!   (within 1e-9) carries no information, `d = 0` (min-max would divide by zero); `0·ln 0`
//!   counts as 0 (the least used server always has `p = 0`); one server alone carries no
//!   information either (`1/ln 1` is undefined); and when no index carries information, the
//!   indices weigh equally (1/4 each). An index with no remaining performance anywhere
//!   (`T_i = 0`) gives every server an equal share in eq. 5. Sizes that are all 0 count as
//!   equal.
//! * A server without a report counts as idle (see the [module conventions](super)); weights
//!   are at least 1 (nginx, where the paper writes them, refuses 0).

use super::{LoadReport, report_or_idle, to_weight};

/// CPU, memory, disk, network.
pub const INDICES: usize = 4;

/// Eq. 5's scale: base weights sum to this.
pub const SCALE: f64 = 1000.0;

/// `H` by default: a server with at most this free share (weighted remaining performance per
/// unit of size) is highly loaded. Ours, from seed 000's Table 3 (above 0.8 used is overload).
pub const HIGH_LOAD: f64 = 0.2;

/// `L` by default: a server with at least this free share is lightly loaded. Ours, from seed
/// 000's Table 3 (below 0.6 used is free).
pub const LOW_LOAD: f64 = 0.4;

/// The share of the gap to the base weights closed by each update without a highly loaded
/// server (ours: the paper says only "gradually").
pub const RETURN_RATE: f64 = 0.5;

/// Differences between servers below this count as none.
const EQUAL: f64 = 1e-9;

/// The utilizations of CPU, memory, disk and network (sanitized): the paper's raw indicators.
pub fn indicators(report: &LoadReport) -> [f64; INDICES] {
    let r = report.sanitized();
    [r.cpu, r.mem, r.disk, r.net]
}

/// The remaining performance `s·(1 − u)` of a server of size `size` per index.
pub fn remaining(size: f64, used: &[f64; INDICES]) -> [f64; INDICES] {
    used.map(|u| size * (1.0 - u))
}

/// The degrees of divergence `d_i = 1 − e_i` of the entropy weight method (eqs. 1–3) over the
/// raw indicators `values[server][index]`. See the module documentation for the degenerate
/// cases. `values` are expected as [`indicators`] gives them, in [0, 1]; other values do not
/// panic but mean nothing.
pub fn divergences(values: &[[f64; INDICES]]) -> [f64; INDICES] {
    let n = values.len();
    let mut d = [0.0; INDICES];
    if n < 2 {
        return d;
    }
    let k = 1.0 / (n as f64).ln();
    for (i, d_i) in d.iter_mut().enumerate() {
        let column = values.iter().map(|row| row[i]);
        let min = column.clone().fold(f64::INFINITY, f64::min);
        let max = column.clone().fold(f64::NEG_INFINITY, f64::max);
        let range = max - min;
        if range.is_nan() || range <= EQUAL {
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
    d
}

/// The index weights `w_i = d_i / Σ d` (eq. 4), summing to 1; equal when no index carries
/// information.
pub fn entropy_weights(values: &[[f64; INDICES]]) -> [f64; INDICES] {
    let d = divergences(values);
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
    /// No highly loaded server: weights moved towards the base weights (or are there).
    Returning,
    /// Highly loaded servers but no lightly loaded one: weights kept.
    Saturated,
}

/// The weights of one pool under seed 001's model.
#[derive(Debug, Clone)]
pub struct DynamicWrrModel {
    /// Each server's size `s_j` (its configured weight), scaled to a mean of 1.
    sizes: Vec<f64>,
    weights: Vec<u32>,
    high: f64,
    low: f64,
}

impl DynamicWrrModel {
    /// A model for servers whose sizes are the configured `weights`, with the default
    /// thresholds [`HIGH_LOAD`] and [`LOW_LOAD`].
    pub fn new(weights: &[u32]) -> DynamicWrrModel {
        DynamicWrrModel::with_thresholds(weights, HIGH_LOAD, LOW_LOAD)
    }

    /// The same with thresholds `H` = `high` and `L` = `low` on the free share (in [0, 1]);
    /// the configuration gives them as `high_load` and `low_load`
    /// ([`Options::high_load`](crate::Options::high_load)).
    pub fn with_thresholds(weights: &[u32], high: f64, low: f64) -> DynamicWrrModel {
        let total: f64 = weights.iter().map(|&w| f64::from(w)).sum();
        let n = weights.len() as f64;
        let sizes: Vec<f64> = if total > 0.0 {
            weights.iter().map(|&w| f64::from(w) * n / total).collect()
        } else {
            vec![1.0; weights.len()]
        };
        let idle = vec![[0.0; INDICES]; sizes.len()];
        let start = base_weights(&DynamicWrrModel::remaining_of(&sizes, &idle), &[0.25; 4]);
        DynamicWrrModel {
            sizes,
            weights: start.into_iter().map(to_weight).collect(),
            high,
            low,
        }
    }

    /// The same with the thresholds of an upstream's options (`high_load`, `low_load`).
    pub fn with_options(weights: &[u32], options: &crate::Options) -> DynamicWrrModel {
        DynamicWrrModel::with_thresholds(weights, options.high_load, options.low_load)
    }

    /// The current weights, one per server: before the first update, the base weights of an
    /// idle cluster (the sizes in per mille).
    pub fn weights(&self) -> &[u32] {
        &self.weights
    }

    fn remaining_of(sizes: &[f64], used: &[[f64; INDICES]]) -> Vec<[f64; INDICES]> {
        sizes
            .iter()
            .zip(used)
            .map(|(&s, u)| remaining(s, u))
            .collect()
    }

    /// One round of the model over `reports` (one per server; missing ones count as idle,
    /// extra ones are ignored).
    pub fn update(&mut self, reports: &[Option<LoadReport>]) -> Adjustment {
        let used: Vec<[f64; INDICES]> = (0..self.sizes.len())
            .map(|j| indicators(&report_or_idle(reports.get(j).unwrap_or(&None))))
            .collect();
        let index = entropy_weights(&used);
        let values = DynamicWrrModel::remaining_of(&self.sizes, &used);
        let free = performance(
            &DynamicWrrModel::remaining_of(&vec![1.0; used.len()], &used),
            &index,
        );
        let high = free.iter().any(|&f| f <= self.high);
        let low = free.iter().any(|&f| f >= self.low);
        let base = base_weights(&values, &index);
        match (high, low) {
            (true, true) => {
                let u = performance(&values, &index);
                let total: f64 = u.iter().sum();
                self.weights = u
                    .iter()
                    .zip(&base)
                    .map(|(&u, &ws)| to_weight(u / total * ws))
                    .collect();
                Adjustment::Rebalanced
            }
            (false, _) => {
                self.return_to(&base);
                Adjustment::Returning
            }
            (true, false) => Adjustment::Saturated,
        }
    }

    /// Closes [`RETURN_RATE`] of the gap between the current weights and `base`; takes `base`
    /// (rounded) once every gap is below 1.
    fn return_to(&mut self, base: &[f64]) {
        let mut close = true;
        let next: Vec<u32> = self
            .weights
            .iter()
            .zip(base)
            .map(|(&w, &target)| {
                let next = f64::from(w) + (target - f64::from(w)) * RETURN_RATE;
                close &= (next - target).abs() < 1.0;
                to_weight(next)
            })
            .collect();
        self.weights = if close {
            base.iter().copied().map(to_weight).collect()
        } else {
            next
        };
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

    fn used(reports: &[Option<LoadReport>]) -> Vec<[f64; INDICES]> {
        reports.iter().map(|r| indicators(&r.unwrap())).collect()
    }

    #[test]
    fn entropy_runs_on_the_raw_indicators() {
        // The review's example. Min-max over the utilizations themselves (eq. 1), per index
        // over a, b, c:
        //   cpu  0.2, 0.5, 0.95 → Y = 0, 0.4, 1 → p = 0, 2/7, 5/7
        //        e = −(2/7·ln 2/7 + 5/7·ln 5/7)/ln 3 = 0.598270/1.098612 = 0.544568
        //        d = 0.455432
        //   mem  0.5, 0.5, 0.5   → equal: no information, d = 0
        //   disk 0.1, 0.1, 0.9   → Y = 0, 0, 1 → p = 0, 0, 1 → e = 0, d = 1
        //   net  0.3, 0.6, 0.9   → Y = 0, 0.5, 1 → p = 0, 1/3, 2/3
        //        e = −(1/3·ln 1/3 + 2/3·ln 2/3)/ln 3 = 0.636514/1.098612 = 0.579380
        //        d = 0.420620
        let d = divergences(&used(&busy_c()));
        for (got, want) in d.iter().zip([0.455432, 0.0, 1.0, 0.420620]) {
            assert!((got - want).abs() < 1e-6, "{d:?}");
        }
        // Normalising the free share 1 − u instead (the model before the review) mirrors Y
        // and gives other entropies: cpu d = 0.397819, disk d = 0.369070.
        let free: Vec<_> = used(&busy_c()).iter().map(|u| u.map(|u| 1.0 - u)).collect();
        let d_free = divergences(&free);
        assert!((d_free[0] - 0.397819).abs() < 1e-6, "{d_free:?}");
        assert!((d_free[2] - 0.369070).abs() < 1e-6, "{d_free:?}");
        // Σd = 1.876052; w = d/Σd = 0.242761, 0, 0.533034, 0.224205.
        let w = entropy_weights(&used(&busy_c()));
        for (got, want) in w.iter().zip([0.242761, 0.0, 0.533034, 0.224205]) {
            assert!((got - want).abs() < 1e-6, "{w:?}");
        }
    }

    #[test]
    fn remaining_performance_is_the_servers_size_times_its_free_share() {
        // Sizes 1, 1, 2 (the configured weights), scaled to a mean of 1: 0.75, 0.75, 1.5.
        // r = s·(1 − u): cpu a = 0.75·0.8 = 0.6, b = 0.75·0.5 = 0.375, c = 1.5·0.05 = 0.075;
        // T = 1.05 (cpu), 1.5 (mem), 1.5 (disk), 0.975 (net).
        let sizes = [0.75, 0.75, 1.5];
        let values: Vec<_> = sizes
            .iter()
            .zip(used(&busy_c()))
            .map(|(&s, u)| remaining(s, &u))
            .collect();
        assert!(close(values[2][0], 0.075) && close(values[2][2], 0.15));
        let w = entropy_weights(&used(&busy_c()));
        // W_S,a = 1000·(0.242761·0.6/1.05 + 0.533034·0.675/1.5 + 0.224205·0.525/0.975)
        //       = 499.312; W_S,b = 395.552; W_S,c = 105.137. (A separate Python script.)
        let ws = base_weights(&values, &w);
        assert!((ws[0] - 499.312).abs() < 1e-3, "{ws:?}");
        assert!((ws[1] - 395.552).abs() < 1e-3, "{ws:?}");
        assert!((ws[2] - 105.137).abs() < 1e-3, "{ws:?}");
        assert!((ws.iter().sum::<f64>() - 1000.0).abs() < 1e-9);
        // U = Σ w·r: 0.623162, 0.518095, 0.131793.
        let u = performance(&values, &w);
        assert!(close(u[0], 0.623162) && close(u[1], 0.518095) && close(u[2], 0.131793));
    }

    #[test]
    fn a_busy_server_next_to_an_idle_one_is_rebalanced() {
        // The free shares Σ w·(1 − u) are 0.830883, 0.690793, 0.087862: c is highly loaded
        // (≤ 0.2), a lightly (≥ 0.4). F = U/ΣU = 0.489503, 0.406971, 0.103525;
        // W = F·W_S = 244.41 → 244, 160.98 → 161, 10.88 → 11.
        let mut m = DynamicWrrModel::new(&[1, 1, 2]);
        assert_eq!(m.update(&busy_c()), Adjustment::Rebalanced);
        assert_eq!(m.weights(), [244, 161, 11]);
        // The same loads on three equal servers: c has half the spare capacity it had, so
        // less weight. T = 1.35, 1.5, 1.9, 1.2; W_S = 527.134, 417.136, 55.729;
        // F = 0.516224, 0.429187, 0.054588; W = 272.12 → 272, 179.03 → 179, 3.04 → 3.
        let mut m = DynamicWrrModel::new(&[1, 1, 1]);
        assert_eq!(m.update(&busy_c()), Adjustment::Rebalanced);
        assert_eq!(m.weights(), [272, 179, 3]);
    }

    #[test]
    fn servers_of_different_size_at_equal_utilization_keep_their_sizes() {
        // The paper's cluster: two dual-core servers (1 GB, 2 GB) and a quad-core with 4 GB,
        // configured 1, 1, 2. Before any report, and at any equal utilization, the weights
        // are the sizes in per mille (eq. 5 with equal shares): 250, 250, 500.
        let mut m = DynamicWrrModel::new(&[1, 1, 2]);
        assert_eq!(m.weights(), [250, 250, 500]);
        let half = [report(0.5, 0.5, 0.5, 0.5); 3];
        assert_eq!(m.update(&half), Adjustment::Returning);
        assert_eq!(m.weights(), [250, 250, 500]);
    }

    #[test]
    fn without_a_busy_server_weights_return_to_the_base_weights() {
        let mut m = DynamicWrrModel::new(&[1, 1, 2]);
        m.update(&busy_c());
        assert_eq!(m.weights(), [244, 161, 11]);
        // Everyone idle now: no server at or below H. The base weights of an idle cluster
        // are 250, 250, 500 and each update halves the gap: 244 → 247; 161 → 205.5 → 206
        // (rounded half away from zero); 11 → 255.5 → 256.
        let idle = [None, None, None];
        assert_eq!(m.update(&idle), Adjustment::Returning);
        assert_eq!(m.weights(), [247, 206, 256]);
        assert_eq!(m.update(&idle), Adjustment::Returning);
        assert_eq!(m.weights(), [249, 228, 378]);
        // The same rounds simulated separately in Python: 250, 239, 439; 250, 245, 470;
        // 250, 248, 485; 250, 249, 493; 250, 250, 497; 250, 250, 499; then every gap is
        // below one unit and round 9 takes 250, 250, 500. The scale stays near 1000
        // throughout: nothing snaps back to 1, 1, 2.
        let mut rounds = 2;
        while m.weights() != [250, 250, 500] {
            assert_eq!(m.update(&idle), Adjustment::Returning);
            rounds += 1;
            assert!(rounds < 20, "{:?}", m.weights());
        }
        assert_eq!(rounds, 9);
        assert_eq!(m.update(&idle), Adjustment::Returning);
        assert_eq!(m.weights(), [250, 250, 500]);
    }

    #[test]
    fn all_servers_busy_keeps_the_weights() {
        // Free share ≤ 0.2 everywhere and nobody at ≥ 0.4: nowhere to move load.
        let mut m = DynamicWrrModel::new(&[3, 1]);
        assert_eq!(m.weights(), [750, 250]);
        let busy = [report(0.9, 0.9, 0.9, 0.85), report(0.95, 0.9, 0.8, 0.9)];
        assert_eq!(m.update(&busy), Adjustment::Saturated);
        assert_eq!(m.weights(), [750, 250]);
    }

    #[test]
    fn thresholds_decide_between_rebalancing_and_returning() {
        // Two equal servers, only cpu differs: w = (1, 0, 0, 0) (with two servers any index
        // that differs has p = (0, 1), e = 0, d = 1). Free shares 0.7 and 0.25; T = 0.95;
        // W_S = 1000·0.7/0.95 = 736.84 and 1000·0.25/0.95 = 263.16.
        let reports = [report(0.3, 0.5, 0.5, 0.5), report(0.75, 0.5, 0.5, 0.5)];
        // With H = 0.2, 0.25 is not highly loaded: from 500, 500 halfway to W_S,
        // 618.42 → 618 and 381.58 → 382.
        let mut m = DynamicWrrModel::new(&[5, 5]);
        assert_eq!(m.update(&reports), Adjustment::Returning);
        assert_eq!(m.weights(), [618, 382]);
        // With H = 0.25 it is: F = 0.7/0.95, 0.25/0.95;
        // W = 0.736842·736.84 = 542.94 → 543 and 0.263158·263.16 = 69.25 → 69.
        let mut m = DynamicWrrModel::with_thresholds(&[5, 5], 0.25, 0.4);
        assert_eq!(m.update(&reports), Adjustment::Rebalanced);
        assert_eq!(m.weights(), [543, 69]);
        // With L = 0.75 the other server is not lightly loaded (0.7 < 0.75): saturated.
        let mut m = DynamicWrrModel::with_thresholds(&[5, 5], 0.25, 0.75);
        assert_eq!(m.update(&reports), Adjustment::Saturated);
        assert_eq!(m.weights(), [500, 500]);
        // The upstream's options carry them.
        let options = crate::Options {
            high_load: 0.25,
            ..crate::Options::default()
        };
        let mut m = DynamicWrrModel::with_options(&[5, 5], &options);
        assert_eq!(m.update(&reports), Adjustment::Rebalanced);
    }

    #[test]
    fn thresholds_apply_to_the_free_share_whatever_the_weight_scale() {
        // 1, 1 and 100, 100 are the same cluster: the same decisions and weights.
        let reports = [report(0.3, 0.5, 0.5, 0.5), report(0.75, 0.5, 0.5, 0.5)];
        let mut small = DynamicWrrModel::with_thresholds(&[1, 1], 0.25, 0.4);
        let mut large = DynamicWrrModel::with_thresholds(&[100, 100], 0.25, 0.4);
        assert_eq!(small.update(&reports), Adjustment::Rebalanced);
        assert_eq!(large.update(&reports), Adjustment::Rebalanced);
        assert_eq!(small.weights(), large.weights());
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
        // its weight (the whole scale) stays.
        let mut one = DynamicWrrModel::new(&[7]);
        assert_eq!(
            one.update(&[report(1.0, 1.0, 1.0, 1.0)]),
            Adjustment::Saturated
        );
        assert_eq!(one.weights(), [1000]);
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
        // Used: a = (1, 1, 1, 1), b = (0, 1, 1, 0): cpu and net differ, w = (½, 0, 0, ½);
        // free shares 0 and 1: rebalanced. W_S = 0 and 1000; F = 0 and 1: W = 0 → 1 and 1000.
        assert_eq!(m.update(&bad), Adjustment::Rebalanced);
        assert_eq!(m.weights(), [1, 1000]);
        // Fewer reports than servers: the others are idle; an empty model does nothing.
        let mut m = DynamicWrrModel::new(&[2, 2, 2]);
        assert_eq!(m.weights(), [333, 333, 333]);
        assert_eq!(m.update(&[]), Adjustment::Returning);
        assert_eq!(m.weights(), [333, 333, 333]);
        let mut empty = DynamicWrrModel::new(&[]);
        assert_eq!(empty.update(&busy_c()), Adjustment::Returning);
        assert!(empty.weights().is_empty());
        // Sizes all 0 count as equal.
        assert_eq!(DynamicWrrModel::new(&[0, 0]).weights(), [500, 500]);
    }
}
