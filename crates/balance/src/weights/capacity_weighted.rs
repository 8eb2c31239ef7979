//! The static-capacity × free-share model of seed 000 (Ma & Chi, "Evaluation Test and
//! Improvement of Load Balancing Algorithms of Nginx", IEEE Access 2022, §IV).
//!
//! * Static capacity (eq. 1): `C(S) = K1·Pcpu + K2·Pmem + K3·Pdisk + K4·Pnet`, with the
//!   paper's coefficients for a typical web cluster `K = 0.15, 0.4, 0.3, 0.15` (§IV.A.1). The
//!   `P`s are the operator's static figures (CPU frequency or cores, memory, disk I/O,
//!   bandwidth), each in its own unit. Blended as they are, the units would decide `C`: a CPU
//!   in MHz (≈ 2000) next to memory in GB (≈ 1) leaves `K` no say. So each figure is first
//!   normalised across the servers, to the server's share of the cluster's total
//!   (`P'_ij = P_ij / Σ_j P_ij`), and the blend is of shares: `C` is then the server's share of
//!   the cluster's capacity, `ΣC = ΣK = 1`, and `K_i` is exactly index `i`'s say. The paper
//!   does not say how its `P`s are scaled; this is the reading under which its `K`s mean what
//!   §IV.A.1 says they mean ("the importance of each parameter"). A figure no server has
//!   (total 0) gives every server an equal share.
//! * Load (eq. 3): `L(S) = λ1·Ucpu + λ2·Umem + λ3·Udisk + λ4·Unet`, `Σλ = 1`. Eq. 2 derives
//!   the `λ`s from how much each utilization moved per connection between two samples
//!   (`k_i = ΔSta_i / ΔCONN`, `λ_i = k_i / Σk`); the model sees reports, not connection counts,
//!   so ours stay fixed: equal, 0.25 each, as the paper gives no values (its Table 3 gives
//!   only the utilization ranges it calls free, normal and overloaded). A caller may set
//!   others.
//! * Weight (eq. 5): `Weight(S) = C(S)·(1 − L(S)) / ΣC`, a share in [0, 1]. We scale it by
//!   [`SCALE`] = 1000 and round: the weights sum to 1000 on an idle cluster, per mille of the
//!   cluster's capacity, fine enough for smooth WRR and small enough for its per-pick recovery
//!   after a failure.
//! * How the paper judges a weighting: the jitter (eq. 4) `d = |L(t1) − L(t0)| / Δt`, and the
//!   spread of resource usage (eqs. 6–8) `U = L/C`, `σ = sqrt(Σ(U − Ū)² / n)`.

use super::{LoadReport, report_or_idle, to_weight};
use crate::backend::Nanos;

/// The paper's `K1..K4` for a typical web cluster (CPU, memory, disk, network; §IV.A.1).
pub const K: [f64; 4] = [0.15, 0.4, 0.3, 0.15];

/// Our `λ1..λ4` (CPU, memory, disk, network): equal, as the paper gives none.
pub const LAMBDA: [f64; 4] = [0.25; 4];

/// The weights of an idle cluster sum to this.
pub const SCALE: f64 = 1000.0;

/// A server's static performance figures, `Pcpu, Pmem, Pdisk, Pnet` of eq. 1, each in any
/// unit (MHz or cores, GB or MB, ...) as long as every server gives that figure in the same
/// one; [`CapacityModel::capacities`] normalises them across servers.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Capacity {
    pub cpu: f64,
    pub mem: f64,
    pub disk: f64,
    pub net: f64,
}

/// The model's coefficients: `K` for capacity, `λ` for load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapacityModel {
    pub k: [f64; 4],
    pub lambda: [f64; 4],
}

impl Default for CapacityModel {
    fn default() -> CapacityModel {
        CapacityModel {
            k: K,
            lambda: LAMBDA,
        }
    }
}

/// A figure that can be used: finite and not negative, else 0.
fn non_negative(v: f64) -> f64 {
    if v.is_finite() { v.max(0.0) } else { 0.0 }
}

impl CapacityModel {
    /// `C(S)` of eq. 1 for every server, from each server's figures: each figure is first
    /// normalised to the server's share of the cluster's total of that figure, so units do
    /// not matter and the result sums to `ΣK` (1 with the paper's `K`). Negative or
    /// non-finite figures count as 0; a figure that is 0 on every server gives equal shares.
    pub fn capacities(&self, figures: &[Capacity]) -> Vec<f64> {
        let column = |f: fn(&Capacity) -> f64| -> Vec<f64> {
            let values: Vec<f64> = figures.iter().map(|p| non_negative(f(p))).collect();
            let total: f64 = values.iter().sum();
            if total > 0.0 && total.is_finite() {
                values.iter().map(|v| v / total).collect()
            } else {
                vec![1.0 / figures.len() as f64; figures.len()]
            }
        };
        let shares = [
            column(|p| p.cpu),
            column(|p| p.mem),
            column(|p| p.disk),
            column(|p| p.net),
        ];
        (0..figures.len())
            .map(|j| (0..4).map(|i| self.k[i] * shares[i][j]).sum())
            .collect()
    }

    /// `L(S)` of eq. 3 from a report (sanitized first), in [0, 1] when `Σλ = 1`.
    pub fn load(&self, report: &LoadReport) -> f64 {
        let r = report.sanitized();
        let [l1, l2, l3, l4] = self.lambda;
        l1 * r.cpu + l2 * r.mem + l3 * r.disk + l4 * r.net
    }

    /// Eq. 5 scaled by [`SCALE`]: `1000 · C·(1 − L) / ΣC` per server, rounded, at least 1.
    ///
    /// `capacities` are the `C(S)` values (from [`capacities`](Self::capacities), or any other
    /// static measure of the servers, such as their configured weights); `reports` one per
    /// server, `None` for a server that has not reported (idle, `L = 0`). The result has one
    /// weight per capacity. If no server has a usable capacity (all 0, negative or not a
    /// number), they are taken as equal.
    pub fn weights(&self, capacities: &[f64], reports: &[Option<LoadReport>]) -> Vec<u32> {
        let mut caps: Vec<f64> = capacities.iter().map(|&c| non_negative(c)).collect();
        let mut total: f64 = caps.iter().sum();
        if !(total > 0.0 && total.is_finite()) {
            caps.iter_mut().for_each(|c| *c = 1.0);
            total = caps.len() as f64;
        }
        caps.iter()
            .enumerate()
            .map(|(i, &c)| {
                let load = self
                    .load(&report_or_idle(reports.get(i).unwrap_or(&None)))
                    .clamp(0.0, 1.0);
                to_weight(SCALE * c * (1.0 - load) / total)
            })
            .collect()
    }
}

impl CapacityModel {
    /// [`weights`](Self::weights) over the capacities of the servers' `figures`.
    pub fn weights_for(&self, figures: &[Capacity], reports: &[Option<LoadReport>]) -> Vec<u32> {
        self.weights(&self.capacities(figures), reports)
    }
}

/// The jitter coefficient `d = |L(t1) − L(t0)| / Δt` of eq. 4, per second; `None` when the two
/// samples are at the same time.
pub fn jitter(load0: f64, t0: Nanos, load1: f64, t1: Nanos) -> Option<f64> {
    let dt = if t1 >= t0 { t1.since(t0) } else { t0.since(t1) };
    (dt.0 > 0).then(|| ((load1 - load0) / dt.as_secs_f64()).abs())
}

/// A server's resource usage `U = L/C` of eq. 6 (as a fraction, not percent); `None` for a
/// capacity that is not positive.
pub fn resource_usage(load: f64, capacity: f64) -> Option<f64> {
    (capacity > 0.0 && capacity.is_finite()).then(|| load / capacity)
}

/// The spread `σ = sqrt(Σ(U − Ū)² / n)` of eqs. 7–8 (population standard deviation); `None`
/// for no values or a value that is not finite.
pub fn spread(usages: &[f64]) -> Option<f64> {
    if usages.is_empty() || usages.iter().any(|u| !u.is_finite()) {
        return None;
    }
    let n = usages.len() as f64;
    let mean = usages.iter().sum::<f64>() / n;
    Some((usages.iter().map(|u| (u - mean).powi(2)).sum::<f64>() / n).sqrt())
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
            container_mem: 0.7, // not part of seed 000's load: must not matter
        })
    }

    /// Seed 001's three web servers as `P`s (cores, GB of memory; equal disks and links):
    /// dual core 1 GB, dual core 2 GB, quad core 4 GB.
    fn servers() -> [Capacity; 3] {
        let p = |cpu, mem| Capacity {
            cpu,
            mem,
            disk: 1.0,
            net: 1.0,
        };
        [p(2.0, 1.0), p(2.0, 2.0), p(4.0, 4.0)]
    }

    #[test]
    fn capacity_load_and_weight_by_the_papers_formulas() {
        let m = CapacityModel::default();
        // Shares of each figure: cpu 2, 2, 4 of 8 = 0.25, 0.25, 0.5; mem 1, 2, 4 of 7 = 1/7,
        // 2/7, 4/7; disk and net 1/3 each. C = 0.15·cpu + 0.4·mem + 0.3·disk + 0.15·net:
        // a = 0.0375 + 0.057143 + 0.1 + 0.05 = 0.244643; b = 0.0375 + 0.114286 + 0.15 =
        // 0.301786; c = 0.075 + 0.228571 + 0.15 = 0.453571; ΣC = 1.
        let caps = m.capacities(&servers());
        for (got, want) in caps.iter().zip([0.244643, 0.301786, 0.453571]) {
            assert!((got - want).abs() < 1e-6, "{caps:?}");
        }
        assert!((caps.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // L = 0.25·(cpu + mem + disk + net):
        // a = 0.25·(0.8 + 0.6 + 0.2 + 0.4) = 0.5; b = 0.25·1.2 = 0.3; c = 0.25·0.4 = 0.1.
        let reports = [
            report(0.8, 0.6, 0.2, 0.4),
            report(0.4, 0.4, 0.2, 0.2),
            report(0.2, 0.2, 0.0, 0.0),
        ];
        assert!((m.load(&reports[0].unwrap()) - 0.5).abs() < 1e-12);
        // 1000·C·(1 − L)/ΣC: a = 244.643·0.5 = 122.32 → 122; b = 301.786·0.7 = 211.25 → 211;
        // c = 453.571·0.9 = 408.21 → 408.
        assert_eq!(m.weights_for(&servers(), &reports), [122, 211, 408]);
        // Without c's report, c is idle: 453.57 → 454.
        assert_eq!(m.weights(&caps, &reports[..2]), [122, 211, 454]);
        // No reports at all: the weights follow the capacities, 244.64, 301.79, 453.57.
        assert_eq!(m.weights(&caps, &[]), [245, 302, 454]);
    }

    #[test]
    fn units_do_not_decide_the_capacity() {
        // The same three servers with the CPU in MHz (seed 000's Table 4 gives 1996.249 MHz
        // per core) and memory in MB: the same capacities, the same weights. Blending raw
        // figures, 0.15·3992 against 0.4·1024 would have let the CPU's unit decide C.
        let m = CapacityModel::default();
        let mhz = 1996.249;
        let in_other_units: Vec<Capacity> = servers()
            .iter()
            .map(|p| Capacity {
                cpu: p.cpu * mhz,
                mem: p.mem * 1024.0,
                disk: p.disk * 21.5,
                net: p.net * 1000.0,
            })
            .collect();
        let a = m.capacities(&servers());
        let b = m.capacities(&in_other_units);
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-12, "{a:?} vs {b:?}");
        }
        // And K decides: with only memory counted, C is memory's share, 1/7, 2/7, 4/7.
        let memory_only = CapacityModel {
            k: [0.0, 1.0, 0.0, 0.0],
            ..CapacityModel::default()
        };
        assert_eq!(
            memory_only.weights_for(&in_other_units, &[]),
            [143, 286, 571]
        );
    }

    #[test]
    fn degenerate_capacities_and_loads() {
        let m = CapacityModel::default();
        // No usable capacity: equal shares of 1000, 333.3 each.
        assert_eq!(m.weights(&[0.0, f64::NAN, -1.0], &[]), [333, 333, 333]);
        // A fully used server gets the minimum weight, not 0.
        let full = report(1.0, 1.0, 1.0, 1.0);
        assert_eq!(m.weights(&[1.0, 1.0], &[full, None]), [1, 500]);
        // NaN utilizations are read as fully used.
        let nan = report(f64::NAN, f64::NAN, f64::NAN, f64::NAN);
        assert_eq!(m.weights(&[1.0, 1.0], &[nan, None]), [1, 500]);
        // One server: all of the scale, less its load (L = 0.25·(0.5 + 0.5) = 0.25 → 750).
        assert_eq!(m.weights(&[3.0], &[report(0.5, 0.5, 0.0, 0.0)]), [750]);
        assert!(m.weights(&[], &[full]).is_empty());
        // A figure no server has (all 0, or not a number) gives equal shares of it.
        let figures = [
            Capacity {
                cpu: 2.0,
                mem: 0.0,
                disk: f64::NAN,
                net: -1.0,
            },
            Capacity {
                cpu: 6.0,
                mem: 0.0,
                disk: f64::NAN,
                net: -1.0,
            },
        ];
        // C = 0.15·(¼, ¾) + (0.4 + 0.3 + 0.15)·½ = 0.4625, 0.5375.
        let caps = m.capacities(&figures);
        assert!((caps[0] - 0.4625).abs() < 1e-12 && (caps[1] - 0.5375).abs() < 1e-12);
        assert!(m.capacities(&[]).is_empty());
    }

    #[test]
    fn jitter_is_load_change_per_second() {
        // |0.5 − 0.3| / 2 s = 0.1 per second, whichever sample is first.
        let s = |x: u64| Nanos(x * 1_000_000_000);
        assert!((jitter(0.3, s(10), 0.5, s(12)).unwrap() - 0.1).abs() < 1e-12);
        assert!((jitter(0.5, s(12), 0.3, s(10)).unwrap() - 0.1).abs() < 1e-12);
        assert_eq!(jitter(0.3, s(10), 0.9, s(10)), None);
    }

    #[test]
    fn spread_is_the_population_standard_deviation() {
        // 0.2, 0.4, 0.6: mean 0.4, squared deviations 0.04, 0, 0.04, sum 0.08, /3 = 0.02667,
        // σ = sqrt(0.02667) = 0.163299.
        let sigma = spread(&[0.2, 0.4, 0.6]).unwrap();
        assert!((sigma - 0.163_299_316_2).abs() < 1e-9, "{sigma}");
        // Capacities 1.15, 1.55, 2.65 and loads 0.5, 0.3, 0.1: U = L/C = 0.43478, 0.19355,
        // 0.03774; mean 0.22202; σ = 0.163339 (computed separately in Python).
        let u: Vec<f64> = [(0.5, 1.15), (0.3, 1.55), (0.1, 2.65)]
            .iter()
            .map(|&(l, c)| resource_usage(l, c).unwrap())
            .collect();
        assert!((spread(&u).unwrap() - 0.163_339_328_5).abs() < 1e-9);
        assert_eq!(spread(&[0.7]), Some(0.0));
        assert_eq!(spread(&[]), None);
        assert_eq!(spread(&[0.1, f64::NAN]), None);
        assert_eq!(resource_usage(0.5, 0.0), None);
    }
}
