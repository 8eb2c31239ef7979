//! Load feedback for one upstream: poll every backend's load source each `poll_interval`, feed
//! the reports to the upstream's weight model, apply its weights to the pool.
//!
//! * **Bounded work.** All sources are polled at once, each within `poll_timeout` (which the
//!   configuration keeps below `poll_interval`), so there is at most one poll in flight per
//!   source and a round never overlaps the next.
//! * **Staleness.** A backend whose source misses a poll keeps its last report for
//!   `stale_after` polls in a row (a lost poll or two change nothing). After that its report
//!   is stale, and the backend is taken to be as loaded as the average of the backends with
//!   fresh reports: it neither gets the flood an idle report would draw (the models read a
//!   missing report as idle) nor is starved as if it were full. When no backend has a fresh
//!   report, the configured weights come back. The transition to stale and back is logged
//!   once each, not on every poll.
//! * **Applying.** The model's weights for every backend are applied in one
//!   [`proxy::Upstream::set_weights`]: one lock, one rebuild of the algorithm's tables, no
//!   connection touched. Every change is logged with the old and new weights and the reports
//!   behind them.

use std::sync::Arc;

use balance::Nanos;
use balance::weights::LoadReport;
use proxy::{LoadSource, Upstream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::model::Model;
use crate::node_exporter::NodeExporter;
use crate::source::{self, PollError};
use balance::weights::utilization::Observed;

/// A backend's load source, with whatever it keeps between polls.
#[derive(Debug, Clone)]
enum Poller {
    Agent(std::net::SocketAddr),
    NodeExporter(NodeExporter),
    /// The memcached, and the backend's name (its key).
    Memcached(std::net::SocketAddr, String),
    /// Nothing to poll here.
    None,
}

impl Poller {
    fn new(source: LoadSource, backend: &str) -> Poller {
        match source {
            LoadSource::Agent(addr) => Poller::Agent(addr),
            LoadSource::NodeExporter(addr) => Poller::NodeExporter(NodeExporter::new(addr)),
            LoadSource::Memcached(addr) => Poller::Memcached(addr, backend.to_owned()),
            // Not a report source: the agent-check loop reads it (config keeps it away from
            // load models).
            LoadSource::AgentCheck(_) => Poller::None,
        }
    }

    /// One poll: `Ok(None)` when the source has no report yet. `max_age`: how old a pushed
    /// report may be.
    async fn poll(
        &mut self,
        timeout: std::time::Duration,
        max_age: std::time::Duration,
    ) -> Result<Option<LoadReport>, PollError> {
        match self {
            Poller::Agent(addr) => source::poll_agent(*addr, timeout).await.map(Some),
            Poller::NodeExporter(n) => n.poll(timeout).await,
            Poller::None => Ok(None),
            Poller::Memcached(server, backend) => {
                crate::memcached::poll(*server, backend, timeout, max_age)
                    .await
                    .map(Some)
            }
        }
    }
}

/// What the loop knows of one backend's reports.
#[derive(Debug, Clone, Default)]
struct Tracked {
    last: Option<LoadReport>,
    /// Polls in a row without a fresh report.
    missed: u32,
    /// Whether the report was last logged as stale.
    stale: bool,
}

/// An upstream's feedback loop state.
#[derive(Debug)]
pub struct Feedback {
    upstream: Arc<Upstream>,
    /// Each primary backend's source and name, pool order.
    specs: Vec<Option<(LoadSource, String)>>,
    /// Each primary backend's name, pool order, for the log.
    names: Vec<String>,
    /// Each primary backend's poller, pool order (`None` while its poll is out).
    sources: Vec<Option<Poller>>,
    configured: Vec<u32>,
    model: Model,
    tracked: Vec<Tracked>,
    epoch: Instant,
    /// Requests and failures completed on each backend at the last round, and when: the
    /// balancer's own rates for A58's model.
    counted: Option<(Instant, Vec<(u64, u64)>)>,
}

impl Feedback {
    /// Whether `upstream` has anything to poll: a weight model and at least one source.
    pub fn wanted(upstream: &Upstream) -> bool {
        let primaries = primaries(upstream);
        let configured: Vec<u32> = primaries.iter().map(|b| b.weight).collect();
        let settings = upstream.settings();
        Model::for_algorithm(settings.algorithm, &configured, &settings.options).is_some()
            && primaries.iter().any(|b| b.load_source.is_some())
    }

    fn new(upstream: Arc<Upstream>) -> Option<Feedback> {
        let backends = primaries(&upstream);
        let configured: Vec<u32> = backends.iter().map(|b| b.weight).collect();
        let specs: Vec<Option<(LoadSource, String)>> = backends
            .iter()
            .map(|b| b.load_source.map(|s| (s, b.name.clone())))
            .collect();
        let sources = specs
            .iter()
            .map(|s| s.as_ref().map(|(s, name)| Poller::new(*s, name)))
            .collect();
        let settings = upstream.settings();
        let model = Model::for_algorithm(settings.algorithm, &configured, &settings.options)?;
        let tracked = vec![Tracked::default(); configured.len()];
        let names = backends.iter().map(|b| b.name.clone()).collect();
        Some(Feedback {
            upstream,
            names,
            specs,
            sources,
            configured,
            model,
            tracked,
            epoch: Instant::now(),
            counted: None,
        })
    }

    /// Records one round of polls (`None` for a backend without a source) and returns the
    /// reports the model gets (see the module docs), or `None` when no backend has a fresh
    /// report (the configured weights apply).
    fn record(
        &mut self,
        polled: Vec<Option<Result<LoadReport, PollError>>>,
    ) -> Option<Vec<Option<LoadReport>>> {
        let stale_after = self.upstream.settings().stale_after;
        let name = self.upstream.name().to_owned();
        let backends = &self.names;
        for (i, (t, result)) in self.tracked.iter_mut().zip(polled).enumerate() {
            match result {
                Some(Ok(report)) => {
                    t.last = Some(report);
                    t.missed = 0;
                    if t.stale {
                        t.stale = false;
                        tracing::info!(upstream = %name, backend = %backends[i], "load reports are fresh again");
                    }
                }
                Some(Err(e)) => {
                    t.missed = t.missed.saturating_add(1);
                    if t.missed >= stale_after && !t.stale {
                        t.stale = true;
                        tracing::warn!(
                            upstream = %name,
                            backend = %backends[i],
                            error = %e,
                            polls = t.missed,
                            "load reports are stale: the backend is weighted as the average of the fresh ones until its source answers"
                        );
                    } else {
                        tracing::debug!(upstream = %name, backend = %backends[i], error = %e, "load poll failed");
                    }
                }
                None => {}
            }
        }
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
    fn observe(&mut self) -> Vec<Observed> {
        let now = Instant::now();
        let counts: Vec<(u64, u64)> = self
            .upstream
            .snapshot()
            .iter()
            .map(|b| (b.requests, b.failures))
            .collect();
        let rates: Vec<(f64, f64)> = match &self.counted {
            Some((then, before)) => {
                let secs = now.duration_since(*then).as_secs_f64().max(1e-3);
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
        self.counted = Some((now, counts));
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

    /// Computes and applies the weights after a round; returns them if they changed.
    fn apply(&mut self, reports: Option<Vec<Option<LoadReport>>>) -> Option<Vec<u32>> {
        let now = Nanos::from(self.epoch.elapsed());
        let observed = self.observe();
        let weights = match &reports {
            Some(reports) => self.model.weights(reports, &observed, now),
            None => self.configured.clone(),
        };
        // The primaries' weights (backups follow them in pool order and keep theirs).
        let mut old = self.upstream.weights();
        old.truncate(weights.len());
        if old == weights {
            return None;
        }
        self.upstream.set_weights(&weights);
        let shown: Vec<String> = match &reports {
            Some(reports) => reports
                .iter()
                .map(|r| match r {
                    Some(r) => format!(
                        "cpu={:.2} mem={:.2} disk={:.2} net={:.2} container_mem={:.2}",
                        r.cpu, r.mem, r.disk, r.net, r.container_mem
                    ),
                    None => "-".to_owned(),
                })
                .collect(),
            None => vec!["no fresh report: the configured weights".to_owned()],
        };
        tracing::info!(
            upstream = %self.upstream.name(),
            old = ?old,
            new = ?weights,
            reports = ?shown,
            "weights applied"
        );
        Some(weights)
    }
}

/// The primary backends, pool order: load feedback weighs only them. Backups keep their
/// configured weights: they serve only when no primary can, and an idle backup's report would
/// otherwise pull the average a stale primary gets, and the models' spreads, towards idle.
fn primaries(upstream: &Upstream) -> Vec<&proxy::BackendSettings> {
    upstream
        .backends_in_pool_order()
        .into_iter()
        .filter(|b| !b.backup)
        .collect()
}

/// The mean of `reports`, field by field; `None` for no reports.
fn average(reports: &[LoadReport]) -> Option<LoadReport> {
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

/// Runs `upstream`'s feedback loop until `stop` turns true.
pub async fn run(upstream: Arc<Upstream>, stop: watch::Receiver<bool>) {
    let Some(mut feedback) = Feedback::new(upstream) else {
        return;
    };
    let settings = feedback.upstream.settings();
    let (interval, timeout) = (settings.poll_interval, settings.poll_timeout);
    // A pushed report older than the staleness window is no report.
    let max_age = interval * settings.stale_after.max(1);
    let mut rounds = crate::Rounds::new(interval, stop);
    while rounds.next().await {
        let mut polls = JoinSet::new();
        for (i, source) in feedback.sources.iter_mut().enumerate() {
            if let Some(mut poller) = source.take() {
                polls.spawn(async move {
                    let result = poller.poll(timeout, max_age).await;
                    (i, (poller, result))
                });
            }
        }
        let Some(results) = rounds.gather(polls, feedback.sources.len()).await else {
            return;
        };
        let mut polled: Vec<Option<Result<LoadReport, PollError>>> =
            Vec::with_capacity(results.len());
        for ((source, spec), result) in feedback
            .sources
            .iter_mut()
            .zip(&feedback.specs)
            .zip(results)
        {
            match (result, spec) {
                (Some((poller, result)), _) => {
                    *source = Some(poller);
                    // Ok(None): a node_exporter's first scrape, before it has a delta.
                    polled.push(result.transpose());
                }
                // The poll's task failed: a miss, and a new poller for the next round.
                (None, Some((spec, name))) => {
                    *source = Some(Poller::new(*spec, name));
                    polled.push(Some(Err(PollError("the poll failed".into()))));
                }
                (None, None) => polled.push(None),
            }
        }
        let reports = feedback.record(polled);
        feedback.apply(reports);
    }
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

    #[test]
    fn only_primaries_are_weighed() {
        use proxy::{BackendSettings, UpstreamSettings};
        let agent = LoadSource::Agent(([127, 0, 0, 1], 9101).into());
        let upstream = |primary_source: bool| {
            let mut primary = BackendSettings::new(([127, 0, 0, 1], 1).into());
            let mut backup = BackendSettings::new(([127, 0, 0, 1], 2).into());
            backup.backup = true;
            backup.load_source = Some(agent);
            if primary_source {
                primary.load_source = Some(agent);
            }
            // The backup first in the configuration: pool order puts primaries first anyway.
            Upstream::new(UpstreamSettings::new(
                "u",
                balance::Algorithm::Dwlc,
                vec![backup, primary],
            ))
        };
        assert!(
            !Feedback::wanted(&upstream(false)),
            "a backup's source alone"
        );
        let with = upstream(true);
        assert!(Feedback::wanted(&with));
        let names: Vec<_> = primaries(&with).iter().map(|b| b.addr.port()).collect();
        assert_eq!(names, [1]);
    }

    #[test]
    fn the_average_of_fresh_reports() {
        assert_eq!(average(&[]), None);
        let a = average(&[report(0.6), report(0.9)]).unwrap();
        assert!((a.cpu - 0.75).abs() < 1e-9 && (a.container_mem - 0.75).abs() < 1e-9);
    }
}
