//! The pure half of an upstream's load feedback loop: what one round of polls does to the
//! weights. The control plane polls the sources and applies the weights; the simulator feeds
//! simulated reports; both go through [`Feed::round`], so the staleness rule and the weight
//! models are written once.
//!
//! * **Staleness.** A backend whose source misses a poll keeps its last report for
//!   `stale_after` polls in a row (a lost poll or two change nothing). After that its report
//!   is stale, and the backend is taken to be as loaded as the [`average`] of the backends
//!   with fresh reports: it neither gets the flood an idle report would draw (the models read
//!   a missing report as idle) nor is starved as if it were full. When no backend has a fresh
//!   report, the configured weights come back. A [`Round`] names the backends whose reports
//!   turned stale or fresh again in it, so the caller can log each transition once.
//! * **Rates.** gRFC A58's model also reads what the balancer saw of each backend: requests
//!   and failures per second since the last round (from the pool's cumulative counts and the
//!   time between rounds, at least 1 ms; 0 on the first round), and the CPU utilization of a
//!   report that came this round.
//!
//! Nothing here reads a clock: the time of a round comes in as [`Nanos`].

use std::time::Duration;

use super::LoadReport;
use super::model::Model;
use super::utilization::Observed;
use crate::{Algorithm, Nanos, Options};

/// One backend's poll in a round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Poll {
    /// Nothing this round: the backend has no source, or its source has no report yet (a
    /// node_exporter's first scrape). Changes nothing.
    NoSource,
    /// A fresh report.
    Report(LoadReport),
    /// The poll failed: one more miss towards `stale_after`.
    Missed,
}

/// What the loop knows of one backend's reports.
#[derive(Debug, Clone, Copy, Default)]
struct Tracked {
    last: Option<LoadReport>,
    /// Polls in a row without a fresh report.
    missed: u32,
    /// Whether the report was last reported stale.
    stale: bool,
}

/// The pure half of an upstream's feedback loop: staleness, rates, the model.
#[derive(Debug, Clone)]
pub struct Feed {
    configured: Vec<u32>,
    model: Model,
    stale_after: u32,
    tracked: Vec<Tracked>,
    /// Requests and failures completed on each backend at the last round, and when.
    counted: Option<(Nanos, Vec<(u64, u64)>)>,
}

/// The outcome of one [`Feed::round`].
#[derive(Debug, Clone, PartialEq)]
pub struct Round {
    /// The weights to apply to the primaries (pool order), every round (the caller compares
    /// with the current ones).
    pub weights: Vec<u32>,
    /// The reports the model got (None: no fresh report anywhere, the configured weights
    /// apply).
    pub reports: Option<Vec<Option<LoadReport>>>,
    /// Backends (indexes) whose reports turned stale this round, and those fresh again (for
    /// logging once per transition).
    pub became_stale: Vec<usize>,
    pub became_fresh: Vec<usize>,
}

impl Feed {
    /// The feed of an upstream balanced by `algorithm` over primaries with the `configured`
    /// weights (pool order) and `options`; a backend's last report is kept for `stale_after`
    /// missed polls. `None` when `algorithm` takes no load reports.
    pub fn new(
        algorithm: Algorithm,
        configured: &[u32],
        options: &Options,
        stale_after: u32,
    ) -> Option<Feed> {
        let model = Model::for_algorithm(algorithm, configured, options)?;
        Some(Feed {
            configured: configured.to_vec(),
            model,
            stale_after,
            tracked: vec![Tracked::default(); configured.len()],
            counted: None,
        })
    }

    /// One round at `now`: each primary's poll (pool order) and the requests and failures the
    /// pool has completed on each so far (cumulative, as `BackendState.requests`/`.failures`).
    pub fn round(&mut self, polled: &[Poll], counts: &[(u64, u64)], now: Nanos) -> Round {
        let (became_stale, became_fresh) = self.record(polled);
        let reports = self.reports();
        let observed = self.observe(counts, now);
        let weights = match &reports {
            Some(reports) => self.model.weights(reports, &observed, now),
            None => self.configured.clone(),
        };
        Round {
            weights,
            reports,
            became_stale,
            became_fresh,
        }
    }

    /// How many polls in a row `backend` has missed (0 for an unknown backend).
    pub fn missed(&self, backend: usize) -> u32 {
        self.tracked.get(backend).map_or(0, |t| t.missed)
    }

    /// Records one round of polls; returns the backends that turned stale and fresh again.
    fn record(&mut self, polled: &[Poll]) -> (Vec<usize>, Vec<usize>) {
        let (mut stale, mut fresh) = (Vec::new(), Vec::new());
        for (i, (t, poll)) in self.tracked.iter_mut().zip(polled).enumerate() {
            match poll {
                Poll::Report(report) => {
                    t.last = Some(*report);
                    t.missed = 0;
                    if t.stale {
                        t.stale = false;
                        fresh.push(i);
                    }
                }
                Poll::Missed => {
                    t.missed = t.missed.saturating_add(1);
                    if t.missed >= self.stale_after && !t.stale {
                        t.stale = true;
                        stale.push(i);
                    }
                }
                Poll::NoSource => {}
            }
        }
        (stale, fresh)
    }

    /// The reports the model gets (see the module docs), or `None` when no backend has a
    /// fresh report (the configured weights apply).
    fn reports(&self) -> Option<Vec<Option<LoadReport>>> {
        let stale_after = self.stale_after;
        let fresh: Vec<LoadReport> = self
            .tracked
            .iter()
            .filter(|t| t.missed < stale_after)
            .filter_map(|t| t.last)
            .collect();
        let average = average(&fresh)?;
        Some(
            self.tracked
                .iter()
                .map(|t| match t.last {
                    Some(report) if t.missed < stale_after => Some(report),
                    _ => Some(average),
                })
                .collect(),
        )
    }

    /// What the balancer saw of each backend since the last round: requests and failures per
    /// second, and the CPU utilization of a report that came this round.
    fn observe(&mut self, counts: &[(u64, u64)], now: Nanos) -> Vec<Observed> {
        let rates: Vec<(f64, f64)> = match &self.counted {
            Some((then, before)) => {
                let secs = Duration::from(now.since(*then)).as_secs_f64().max(1e-3);
                counts
                    .iter()
                    .zip(before)
                    .map(|(&(r, f), &(r0, f0))| {
                        (
                            r.saturating_sub(r0) as f64 / secs,
                            f.saturating_sub(f0) as f64 / secs,
                        )
                    })
                    .collect()
            }
            None => vec![(0.0, 0.0); counts.len()],
        };
        self.counted = Some((now, counts.to_vec()));
        rates
            .into_iter()
            .zip(&self.tracked)
            .map(|((qps, eps), t)| Observed {
                qps,
                eps,
                utilization: t.last.filter(|_| t.missed == 0).map(|r| r.cpu),
            })
            .collect()
    }
}

/// The mean of `reports`, field by field; `None` for no reports.
pub fn average(reports: &[LoadReport]) -> Option<LoadReport> {
    if reports.is_empty() {
        return None;
    }
    let n = reports.len() as f64;
    let mean = |f: fn(&LoadReport) -> f64| reports.iter().map(f).sum::<f64>() / n;
    Some(LoadReport {
        cpu: mean(|r| r.cpu),
        mem: mean(|r| r.mem),
        disk: mean(|r| r.disk),
        net: mean(|r| r.net),
        container_mem: mean(|r| r.container_mem),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(u: f64) -> LoadReport {
        LoadReport {
            cpu: u,
            mem: u,
            disk: u,
            net: u,
            container_mem: u,
        }
    }

    const SECOND: u64 = 1_000_000_000;

    fn at(s: u64) -> Nanos {
        Nanos(s * SECOND)
    }

    /// A `capacity_weighted` feed (stateless model: the weights follow the reports at once)
    /// over `configured`, stale after 3 missed polls.
    fn feed(configured: &[u32]) -> Feed {
        Feed::new(
            Algorithm::CapacityWeighted,
            configured,
            &Options::default(),
            3,
        )
        .unwrap()
    }

    /// The weights the same model gives `reports` directly.
    fn model_weights(configured: &[u32], reports: &[Option<LoadReport>]) -> Vec<u32> {
        Model::for_algorithm(Algorithm::CapacityWeighted, configured, &Options::default())
            .unwrap()
            .weights(reports, &[], Nanos::ZERO)
    }

    #[test]
    fn the_average_of_fresh_reports() {
        assert_eq!(average(&[]), None);
        let a = average(&[report(0.6), report(0.9)]).unwrap();
        assert!((a.cpu - 0.75).abs() < 1e-9 && (a.container_mem - 0.75).abs() < 1e-9);
    }

    #[test]
    fn only_algorithms_with_a_model_have_a_feed() {
        let o = Options::default();
        assert!(Feed::new(Algorithm::RoundRobin, &[1, 1], &o, 3).is_none());
        for a in [
            Algorithm::Dwlc,
            Algorithm::DynamicWrr,
            Algorithm::CapacityWeighted,
            Algorithm::UtilizationWrr,
        ] {
            assert!(Feed::new(a, &[1, 1], &o, 3).is_some(), "{a:?}");
        }
    }

    #[test]
    fn a_backend_missing_fewer_than_stale_after_polls_keeps_its_last_report() {
        let mut f = feed(&[1, 1, 1]);
        let reports = [
            Poll::Report(report(0.2)),
            Poll::Report(report(0.5)),
            Poll::Report(report(0.8)),
        ];
        let first = f.round(&reports, &[], at(1));
        let polled = [
            Poll::Report(report(0.2)),
            Poll::Report(report(0.5)),
            Poll::Missed,
        ];
        for round in 2..=3 {
            let r = f.round(&polled, &[], at(round));
            assert_eq!(
                r.reports,
                Some(vec![
                    Some(report(0.2)),
                    Some(report(0.5)),
                    Some(report(0.8))
                ]),
                "round {round}"
            );
            assert_eq!(r.weights, first.weights);
            assert!(r.became_stale.is_empty() && r.became_fresh.is_empty());
        }
        assert_eq!(f.missed(2), 2);
        assert_eq!(f.missed(0), 0);
    }

    #[test]
    fn a_backend_missing_stale_after_polls_gets_the_average_of_the_fresh_ones() {
        let configured = [1, 1, 1];
        let mut f = feed(&configured);
        f.round(
            &[
                Poll::Report(report(0.2)),
                Poll::Report(report(0.6)),
                Poll::Report(report(0.9)),
            ],
            &[],
            at(1),
        );
        let polled = [
            Poll::Report(report(0.2)),
            Poll::Report(report(0.6)),
            Poll::Missed,
        ];
        f.round(&polled, &[], at(2));
        f.round(&polled, &[], at(3));
        let r = f.round(&polled, &[], at(4));
        assert_eq!(f.missed(2), 3);
        let average = report(0.4);
        let got = r.reports.clone().unwrap();
        assert_eq!(got[..2], [Some(report(0.2)), Some(report(0.6))]);
        let stale = got[2].unwrap();
        assert!((stale.cpu - average.cpu).abs() < 1e-9, "{stale:?}");
        assert!((stale.container_mem - average.container_mem).abs() < 1e-9);
        assert_eq!(r.weights, model_weights(&configured, &got));
        assert_ne!(
            r.weights,
            model_weights(&configured, &[got[0], got[1], Some(report(0.9))])
        );
        assert_eq!(r.became_stale, [2]);
    }

    #[test]
    fn no_source_changes_nothing() {
        let mut f = feed(&[1, 1]);
        f.round(
            &[Poll::Report(report(0.3)), Poll::Report(report(0.7))],
            &[],
            at(1),
        );
        for round in 2..10 {
            let r = f.round(&[Poll::NoSource, Poll::NoSource], &[], at(round));
            assert_eq!(r.reports, Some(vec![Some(report(0.3)), Some(report(0.7))]));
            assert!(r.became_stale.is_empty());
        }
        assert_eq!(f.missed(0), 0);
    }

    #[test]
    fn with_no_fresh_report_the_configured_weights_apply() {
        let configured = [3, 5];
        let mut f = feed(&configured);
        let r = f.round(&[Poll::NoSource, Poll::Missed], &[], at(1));
        assert_eq!(r.reports, None);
        assert_eq!(r.weights, configured);
        let r = f.round(
            &[Poll::Report(report(0.9)), Poll::Report(report(0.1))],
            &[],
            at(2),
        );
        assert!(r.reports.is_some());
        assert_ne!(r.weights, configured);
        for round in 3..=5 {
            let r = f.round(&[Poll::Missed, Poll::Missed], &[], at(round));
            if round < 5 {
                assert!(
                    r.reports.is_some(),
                    "round {round}: still within stale_after"
                );
            } else {
                assert_eq!(r.reports, None);
                assert_eq!(r.weights, configured);
                assert_eq!(r.became_stale, [0, 1]);
            }
        }
    }

    #[test]
    fn transitions_are_reported_once() {
        let mut f =
            Feed::new(Algorithm::CapacityWeighted, &[1, 1], &Options::default(), 2).unwrap();
        let fine = Poll::Report(report(0.5));
        f.round(&[fine, fine], &[], at(1));
        let missed = [fine, Poll::Missed];
        assert!(f.round(&missed, &[], at(2)).became_stale.is_empty());
        assert_eq!(f.round(&missed, &[], at(3)).became_stale, [1]);
        for round in 4..8 {
            let r = f.round(&missed, &[], at(round));
            assert!(r.became_stale.is_empty() && r.became_fresh.is_empty());
        }
        assert_eq!(f.missed(1), 6);
        let r = f.round(&[fine, fine], &[], at(8));
        assert_eq!(r.became_fresh, [1]);
        assert!(r.became_stale.is_empty());
        assert_eq!(f.missed(1), 0);
        assert!(f.round(&[fine, fine], &[], at(9)).became_fresh.is_empty());
        // A report before the backend turned stale is no transition.
        f.round(&missed, &[], at(10));
        assert!(f.round(&[fine, fine], &[], at(11)).became_fresh.is_empty());
    }

    #[test]
    fn rates_are_counts_over_the_time_between_rounds() {
        let mut f = feed(&[1, 1]);
        let fine = Poll::Report(report(0.5));
        f.record(&[fine, fine]);
        let first = f.observe(&[(100, 10), (50, 0)], at(1));
        assert!(first.iter().all(|o| o.qps == 0.0 && o.eps == 0.0));
        assert_eq!(first[0].utilization, Some(0.5));
        // 2 s later: 200 more requests, 20 more failures on the first; 10 more on the second.
        f.record(&[fine, Poll::Missed]);
        let o = f.observe(&[(300, 30), (60, 0)], at(3));
        assert!((o[0].qps - 100.0).abs() < 1e-9 && (o[0].eps - 10.0).abs() < 1e-9);
        assert!((o[1].qps - 5.0).abs() < 1e-9 && o[1].eps == 0.0);
        // Utilization only from a report that came this round.
        assert_eq!(o[0].utilization, Some(0.5));
        assert_eq!(o[1].utilization, None);
        // No time between rounds counts as 1 ms.
        let o = f.observe(&[(301, 30), (60, 0)], at(3));
        assert!((o[0].qps - 1000.0).abs() < 1e-6);
    }

    #[test]
    fn utilization_wrr_weighs_by_the_rates_from_the_counts() {
        // A58 without a blackout: weight = qps / utilization.
        let options = Options {
            blackout_period: Nanos::ZERO,
            ..Options::default()
        };
        let configured = [7, 7];
        let mut f = Feed::new(Algorithm::UtilizationWrr, &configured, &options, 3).unwrap();
        let polled = [Poll::Report(report(0.5)), Poll::Report(report(0.5))];
        // The first round has no rates yet: no usable weight, the configured ones.
        let r = f.round(&polled, &[(0, 0), (0, 0)], at(1));
        assert_eq!(r.weights, configured);
        // Same utilization; the first served 3x as many requests over the 2 s.
        let r = f.round(&polled, &[(600, 0), (200, 0)], at(3));
        assert_eq!(r.weights, [1000, 333]);
    }
}
