//! The weight models: pure functions (and small state) from backend load reports to the integer
//! weights [`Pool::set_weights`](crate::Pool::set_weights) takes.
//!
//! Three papers give three models, each with the algorithm that balances by its weights:
//!
//! * [`dynamic_wrr`] (seed 001, Qin et al., "Research on Nginx Dynamic Load Balancing
//!   Algorithm", §III): the entropy weight method turns the four utilizations of every server
//!   into index weights; a cluster with an overloaded and a lightly loaded node is re-weighted
//!   by remaining performance (each server's configured weight times its free share), and one
//!   without an overloaded node drifts back to the base weights of eq. 5. Balanced by smooth
//!   weighted round robin.
//! * [`dwlc`] (seed 003, Li, Li, Li, "An Integrated Load-balancing Scheduling Algorithm for
//!   Nginx-Based Web Application Clusters", §4.2): `W = 100 − L` with `L` a fixed blend of the
//!   utilizations in percent, changed only by steps of at least 5, every 3 s. Balanced by
//!   weighted least connection.
//! * [`capacity_weighted`] (seed 000, Ma & Chi, "Evaluation Test and Improvement of Load
//!   Balancing Algorithms of Nginx", §IV): a static capacity `C` per server times its free
//!   share `1 − L`, over the cluster's total capacity; with the utilization spread `σ` and the
//!   jitter `d` that the paper judges a weighting by. Balanced by smooth weighted round robin.
//!
//! gRFC A58's client-side weighted round robin is the fourth, in [`utilization`].
//!
//! Around them:
//!
//! * [`model`]: [`Model`](model::Model), the model an algorithm balances by behind one
//!   interface (reports and observed rates in, weights out).
//! * [`feed`]: [`Feed`](feed::Feed), the feedback policy around the model: a missed poll keeps
//!   the last report for `stale_after` polls, then the backend counts as the [`average`](feed::average)
//!   of the fresh reports, with none fresh the configured weights apply; the request and
//!   failure rates A58 reads. One [`Feed::round`](feed::Feed::round) per poll round.
//!
//! Nothing here reads a clock or does I/O: the control plane collects [`LoadReport`]s (from the
//! agent, node_exporter or memcached) and hands each round to a [`Feed`](feed::Feed) with the
//! time, then applies the weights; the simulator feeds the same `Feed` simulated reports.
//!
//! # Conventions shared by the models
//!
//! * **Bad input never panics.** [`LoadReport::checked`] rejects a report with a non-finite
//!   field and clamps finite values into [0, 1]; that is what a feedback source should call.
//!   The models themselves accept any `LoadReport` and [sanitize](LoadReport::sanitized) it
//!   again: NaN counts as fully used (1.0, so a broken reporter cannot attract traffic), and
//!   other values are clamped into [0, 1].
//! * **`None` means "idle", nothing else.** A backend whose entry is `None` (or that has no
//!   entry, the slice being shorter than the pool) is taken as reporting all utilizations 0,
//!   the seeds' starting point (seed 003 §4.2 sets `L(0) = 0` and gives a joining node the full
//!   weight 100). The models cannot tell "never reported", "reporter dead" and "report too
//!   old" apart, and do not try: a dead or stale reporter passed as `None` would draw the most
//!   traffic. Deciding what a stale or missing report stands for (a last good report for a
//!   grace period, then a neutral one) is the feeding side's job, the control plane's, which
//!   knows the ages; it should pass `None` only for a backend it means to be treated as idle.
//!   The models take `&[Option<LoadReport>]`, one entry per backend in pool order.
//! * **Weights are at least [`MIN_WEIGHT`] = 1.** All three papers write their weights into
//!   nginx's configuration, and nginx refuses `weight=0`; so none of the seeds can have meant
//!   a loaded server to get nothing. Taking a server out is health checking's job, not a load
//!   model's.
//! * **One scale per model.** Each model returns weights for every backend on its own scale
//!   (seed 001: the paper's base weights `W_S` sum to 1000; seed 003: 100 for an idle node;
//!   seed 000: 1000 for an idle cluster, ours), so the caller applies all of them at once with `Pool::set_weights` rather than
//!   mixing model weights with configured ones.

pub mod capacity_weighted;
pub mod dwlc;
pub mod dynamic_wrr;
pub mod feed;
pub mod model;
pub mod utilization;

pub use model::ModelKind;

use std::fmt;

/// The smallest weight a model gives a usable backend (nginx refuses `weight=0`).
pub const MIN_WEIGHT: u32 = 1;

/// One backend's load as the agent reports it (`GET /load`, DESIGN §2): utilizations in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LoadReport {
    /// Share of CPU time not idle.
    pub cpu: f64,
    /// Share of memory in use.
    pub mem: f64,
    /// Share of time the disks were busy.
    pub disk: f64,
    /// Bytes sent and received over the interval as a share of the link's bandwidth.
    pub net: f64,
    /// Memory used by the backend's containers as a share of their limits (seed 003's `D_i`).
    pub container_mem: f64,
}

/// A report with a field that is not a number (NaN or infinite).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidReport {
    /// The field's name as in the agent protocol (`"cpu"`, `"mem"`, ...).
    pub field: &'static str,
}

impl fmt::Display for InvalidReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "load report field \"{}\" is not a finite number; utilizations are numbers in [0, 1]",
            self.field
        )
    }
}

impl std::error::Error for InvalidReport {}

impl LoadReport {
    /// A report from raw values: rejects a non-finite field, clamps finite ones into [0, 1]
    /// (counters sampled a moment apart can read a little above 1 or below 0).
    pub fn checked(
        cpu: f64,
        mem: f64,
        disk: f64,
        net: f64,
        container_mem: f64,
    ) -> Result<LoadReport, InvalidReport> {
        let fields = [
            ("cpu", cpu),
            ("mem", mem),
            ("disk", disk),
            ("net", net),
            ("container_mem", container_mem),
        ];
        if let Some(&(field, _)) = fields.iter().find(|(_, v)| !v.is_finite()) {
            return Err(InvalidReport { field });
        }
        Ok(LoadReport {
            cpu,
            mem,
            disk,
            net,
            container_mem,
        }
        .sanitized())
    }

    /// Every field clamped into [0, 1], NaN read as 1 (fully used).
    pub fn sanitized(self) -> LoadReport {
        LoadReport {
            cpu: unit(self.cpu),
            mem: unit(self.mem),
            disk: unit(self.disk),
            net: unit(self.net),
            container_mem: unit(self.container_mem),
        }
    }
}

/// A utilization clamped into [0, 1]; NaN is read as fully used.
fn unit(v: f64) -> f64 {
    if v.is_nan() { 1.0 } else { v.clamp(0.0, 1.0) }
}

/// The report to use for a backend: its own, sanitized, or an idle one (all 0) for `None`
/// (see the module's conventions for what `None` means and who decides it).
fn report_or_idle(report: &Option<LoadReport>) -> LoadReport {
    report.map(LoadReport::sanitized).unwrap_or_default()
}

/// A non-negative real weight rounded to the nearest integer, at least [`MIN_WEIGHT`].
fn to_weight(w: f64) -> u32 {
    if w.is_nan() {
        return MIN_WEIGHT;
    }
    (w.round().clamp(0.0, f64::from(u32::MAX)) as u32).max(MIN_WEIGHT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_rejects_non_finite_and_clamps_the_rest() {
        assert_eq!(
            LoadReport::checked(0.5, f64::NAN, 0.0, 0.0, 0.0),
            Err(InvalidReport { field: "mem" })
        );
        assert_eq!(
            LoadReport::checked(0.5, 0.5, 0.0, f64::INFINITY, 0.0),
            Err(InvalidReport { field: "net" })
        );
        let r = LoadReport::checked(1.02, -0.01, 0.3, 0.0, 2.0).unwrap();
        assert_eq!(
            r,
            LoadReport {
                cpu: 1.0,
                mem: 0.0,
                disk: 0.3,
                net: 0.0,
                container_mem: 1.0
            }
        );
    }

    #[test]
    fn sanitized_reads_nan_as_fully_used() {
        let r = LoadReport {
            cpu: f64::NAN,
            mem: f64::NEG_INFINITY,
            disk: f64::INFINITY,
            net: 0.25,
            container_mem: -3.0,
        }
        .sanitized();
        assert_eq!(
            (r.cpu, r.mem, r.disk, r.net, r.container_mem),
            (1.0, 0.0, 1.0, 0.25, 0.0)
        );
    }

    #[test]
    fn weights_round_and_never_drop_below_one() {
        assert_eq!(to_weight(0.0), 1);
        assert_eq!(to_weight(0.49), 1);
        assert_eq!(to_weight(2.5), 3);
        assert_eq!(to_weight(99.4), 99);
        assert_eq!(to_weight(f64::NAN), 1);
        assert_eq!(to_weight(-7.0), 1);
        assert_eq!(to_weight(1e30), u32::MAX);
    }
}
