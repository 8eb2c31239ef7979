//! gRPC's client-side weighted round robin (gRFC A58, "weighted_round_robin LB policy"; also
//! Envoy's `client_side_weighted_round_robin`): the industry's answer beside the papers'.
//!
//! Each backend's weight is `qps / (utilization + eps/qps · error_utilization_penalty)`: the
//! requests per second it served for this balancer, over the CPU utilization it reports, with
//! its errors per second as a penalty. A backend that serves much at little CPU is fast and
//! gets more. The rules that keep it stable, with A58's defaults:
//!
//! * **blackout period** (10 s): a backend's weight is used only once it has reported
//!   continuously for this long (after it joins, or after its weight expired), so a backend
//!   whose first reports are noise does not swing the pool;
//! * **weight expiration period** (3 min): a weight not updated for this long is no longer
//!   used, and the blackout applies again when reports resume;
//! * a report with zero qps or zero utilization is ignored (there is nothing to divide);
//! * a backend without a usable weight gets the mean of the usable ones; with none usable,
//!   A58 weighs all alike, and here the configured weights stay;
//! * weights are recomputed every weight update period (1 s in A58; here the upstream's
//!   `poll_interval`, when reports arrive).
//!
//! In gRPC the backend reports qps and eps itself (ORCA); a proxy counts them better itself:
//! the control plane passes the requests and failures this balancer completed on each backend
//! over the last period.

use crate::backend::Nanos;

use super::MIN_WEIGHT;

/// The settings of the model, A58's names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UtilizationSettings {
    pub blackout_period: Nanos,
    pub weight_expiration_period: Nanos,
    pub error_utilization_penalty: f64,
}

impl Default for UtilizationSettings {
    /// A58's defaults: 10 s, 3 min, and Envoy's default penalty of 1.0.
    fn default() -> UtilizationSettings {
        UtilizationSettings::from(&crate::Options::default())
    }
}

impl From<&crate::Options> for UtilizationSettings {
    fn from(o: &crate::Options) -> UtilizationSettings {
        UtilizationSettings {
            blackout_period: o.blackout_period,
            weight_expiration_period: o.weight_expiration_period,
            error_utilization_penalty: o.error_utilization_penalty,
        }
    }
}

/// The scale of the integer weights: the heaviest backend weighs this much.
pub const SCALE: f64 = 1000.0;

#[derive(Debug, Clone, Copy, Default)]
struct Endpoint {
    /// Since when reports have come without a gap of `weight_expiration_period`.
    non_empty_since: Option<Nanos>,
    last_update: Option<Nanos>,
    weight: f64,
}

/// The weights of one pool under A58's rule.
#[derive(Debug, Clone)]
pub struct UtilizationModel {
    settings: UtilizationSettings,
    endpoints: Vec<Endpoint>,
}

/// What the balancer saw of one backend over the last period, and its report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observed {
    /// Requests it completed per second (successes and failures).
    pub qps: f64,
    /// Failed requests per second.
    pub eps: f64,
    /// Its reported CPU utilization in [0, 1], `None` without a fresh report.
    pub utilization: Option<f64>,
}

/// A58's weight for one report; 0 when it must be ignored.
pub fn weight(qps: f64, eps: f64, utilization: f64, penalty: f64) -> f64 {
    if !(qps > 0.0 && utilization > 0.0 && qps.is_finite() && utilization.is_finite()) {
        return 0.0;
    }
    let penalty = if eps.is_finite() && eps > 0.0 && penalty.is_finite() && penalty > 0.0 {
        eps / qps * penalty
    } else {
        0.0
    };
    qps / (utilization + penalty)
}

impl UtilizationModel {
    pub fn new(backends: usize, settings: UtilizationSettings) -> UtilizationModel {
        UtilizationModel {
            settings,
            endpoints: vec![Endpoint::default(); backends],
        }
    }

    /// Takes one round of observations (one per backend, pool order) at `now`.
    pub fn record(&mut self, observed: &[Observed], now: Nanos) {
        for (e, o) in self.endpoints.iter_mut().zip(observed) {
            let Some(utilization) = o.utilization else {
                continue;
            };
            let w = weight(
                o.qps,
                o.eps,
                utilization,
                self.settings.error_utilization_penalty,
            );
            if w <= 0.0 {
                continue;
            }
            if e.non_empty_since.is_none() {
                e.non_empty_since = Some(now);
            }
            e.last_update = Some(now);
            e.weight = w;
        }
    }

    /// The weights at `now`, on a scale where the heaviest backend weighs [`SCALE`]; every
    /// weight at least [`MIN_WEIGHT`]. `None` while no backend has a usable weight (A58 then
    /// weighs all alike; the caller keeps the configured weights, which say more).
    pub fn weights(&mut self, now: Nanos) -> Option<Vec<u32>> {
        let s = self.settings;
        let usable: Vec<Option<f64>> = self
            .endpoints
            .iter_mut()
            .map(|e| {
                let last = e.last_update?;
                if now.since(last) >= s.weight_expiration_period {
                    // Stale: unused, and a blackout again when reports resume.
                    e.non_empty_since = None;
                    return None;
                }
                let since = e.non_empty_since?;
                (now.since(since) >= s.blackout_period).then_some(e.weight)
            })
            .collect();
        let set: Vec<f64> = usable.iter().flatten().copied().collect();
        if set.is_empty() {
            return None;
        }
        let mean = set.iter().sum::<f64>() / set.len() as f64;
        let max = set.iter().copied().fold(mean, f64::max);
        Some(
            usable
                .iter()
                .map(|w| {
                    let w = w.unwrap_or(mean) / max * SCALE;
                    (w.round() as u32).max(MIN_WEIGHT)
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Nanos {
        Nanos(s * 1_000_000_000)
    }

    fn seen(qps: f64, eps: f64, u: f64) -> Observed {
        Observed {
            qps,
            eps,
            utilization: Some(u),
        }
    }

    #[test]
    fn the_formula() {
        // 100 qps at 50% CPU, no errors: 200.
        assert_eq!(weight(100.0, 0.0, 0.5, 1.0), 200.0);
        // 10 errors per second add 0.1 to the utilization: 100 / 0.6.
        assert!((weight(100.0, 10.0, 0.5, 1.0) - 100.0 / 0.6).abs() < 1e-9);
        // Nothing to divide: ignored.
        for (q, u) in [(0.0, 0.5), (100.0, 0.0), (f64::NAN, 0.5), (100.0, f64::NAN)] {
            assert_eq!(weight(q, 0.0, u, 1.0), 0.0);
        }
    }

    #[test]
    fn weights_wait_out_the_blackout_then_follow_the_formula() {
        let mut m = UtilizationModel::new(3, UtilizationSettings::default());
        let round = [
            seen(100.0, 0.0, 0.5),
            seen(100.0, 0.0, 0.25),
            seen(100.0, 0.0, 1.0),
        ];
        m.record(&round, secs(0));
        assert_eq!(
            m.weights(secs(0)),
            None,
            "in the blackout: no usable weight"
        );
        m.record(&round, secs(10));
        // 200, 400, 100: the heaviest is 1000.
        assert_eq!(m.weights(secs(10)).unwrap(), [500, 1000, 250]);
    }

    #[test]
    fn a_backend_without_a_usable_weight_gets_the_mean() {
        let mut m = UtilizationModel::new(3, UtilizationSettings::default());
        let mut round = [
            seen(100.0, 0.0, 0.5),
            seen(100.0, 0.0, 0.25),
            seen(0.0, 0.0, 0.5),
        ];
        m.record(&round, secs(0));
        m.record(&round, secs(10));
        // 200 and 400; the third served nothing: the mean, 300.
        assert_eq!(m.weights(secs(10)).unwrap(), [500, 1000, 750]);
        // Its reports stop: the third still weighs the mean; when the others expire too, no
        // weight is usable.
        round[2].utilization = None;
        m.record(&round[..2], secs(100));
        assert_eq!(m.weights(secs(100)).unwrap(), [500, 1000, 750]);
        assert_eq!(m.weights(secs(100 + 180)), None);
    }

    #[test]
    fn an_expired_weight_goes_through_the_blackout_again() {
        let mut m = UtilizationModel::new(2, UtilizationSettings::default());
        let round = [seen(100.0, 0.0, 0.5), seen(100.0, 0.0, 0.25)];
        m.record(&round, secs(0));
        m.record(&round[..1], secs(10));
        assert_eq!(m.weights(secs(10)).unwrap(), [500, 1000]);
        // The second stops reporting for 3 minutes: its weight expires (the mean, the first's).
        m.record(&round[..1], secs(200));
        assert_eq!(m.weights(secs(200)).unwrap(), [1000, 1000]);
        // It reports again: not trusted for 10 s.
        m.record(&round, secs(201));
        assert_eq!(m.weights(secs(205)).unwrap(), [1000, 1000]);
        m.record(&round, secs(211));
        assert_eq!(m.weights(secs(211)).unwrap(), [500, 1000]);
    }
}
