//! Load feedback for one upstream: poll every backend's load source each `poll_interval`, feed
//! the reports to the upstream's weight model, apply its weights to the pool.
//!
//! * **Bounded work.** All sources are polled at once, each within `poll_timeout` (which the
//!   configuration keeps below `poll_interval`), so there is at most one poll in flight per
//!   source and a round never overlaps the next.
//! * **Staleness, rates, the model.** The policy is pure code in [`balance::weights::feed`],
//!   shared with the simulator: this loop turns each round's poll results into
//!   [`Poll`]s and hands them to [`Feed::round`] with the pool's request and failure counts
//!   and the time. A backend whose source misses a poll keeps its last report for
//!   `stale_after` polls in a row; after that it is weighted as the average of the backends
//!   with fresh reports; with no fresh report anywhere the configured weights come back. The
//!   transition to stale and back is logged once each, not on every poll.
//! * **Applying.** The model's weights for every backend are applied in one
//!   [`proxy::Upstream::set_weights`]: one lock, one rebuild of the algorithm's tables, no
//!   connection touched. Every change is logged with the old and new weights and the reports
//!   behind them.

use std::sync::Arc;

use balance::weights::LoadReport;
use balance::weights::feed::{Feed, Poll};
use balance::{BackendId, Nanos};
use proxy::{LoadSource, Upstream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::node_exporter::NodeExporter;
use crate::source::{self, PollError};

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

/// An upstream's feedback loop state.
#[derive(Debug)]
pub struct Feedback {
    upstream: Arc<Upstream>,
    /// The upstream's generation this loop was started for: its results apply to that one.
    generation: u64,
    /// Each primary backend's source and name, pool order.
    specs: Vec<Option<(LoadSource, String)>>,
    /// Each primary backend's name, pool order, for the log.
    names: Vec<String>,
    /// Each primary backend's poller, pool order (`None` while its poll is out).
    sources: Vec<Option<Poller>>,
    /// Staleness, rates and the weight model.
    feed: Feed,
    epoch: Instant,
}

impl Feedback {
    /// Whether `upstream` has anything to poll: a weight model and at least one source.
    pub fn wanted(upstream: &Upstream) -> bool {
        upstream.has_weight_model()
    }

    fn new(upstream: Arc<Upstream>) -> Option<Feedback> {
        let (generation, backends) = primaries(&upstream);
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
        let feed = Feed::new(
            settings.algorithm,
            &configured,
            &settings.options,
            settings.stale_after,
        )?;
        let names = backends.iter().map(|b| b.name.clone()).collect();
        Some(Feedback {
            upstream,
            generation,
            names,
            specs,
            sources,
            feed,
            epoch: Instant::now(),
        })
    }

    /// One round: `polled` holds each primary's result (`None`: no source, or no report yet),
    /// pool order. Logs the staleness transitions, applies the weights if they changed and
    /// returns them.
    fn round(&mut self, polled: Vec<Option<Result<LoadReport, PollError>>>) -> Option<Vec<u32>> {
        let now = Nanos::from(self.epoch.elapsed());
        let mut errors: Vec<Option<PollError>> = Vec::with_capacity(polled.len());
        let polls: Vec<Poll> = polled
            .into_iter()
            .map(|result| match result {
                Some(Ok(report)) => {
                    errors.push(None);
                    Poll::Report(report)
                }
                Some(Err(e)) => {
                    errors.push(Some(e));
                    Poll::Missed
                }
                None => {
                    errors.push(None);
                    Poll::NoSource
                }
            })
            .collect();
        for (i, poll) in polls.iter().enumerate() {
            if let Poll::Report(report) = poll {
                self.upstream
                    .note_report(self.generation, BackendId(i as u32), *report);
            }
        }
        // The backends changed since this loop started: its round is for a pool that is gone
        // (the control plane starts a loop for the new one).
        let counts = self.upstream.counts(self.generation)?;
        let round = self.feed.round(&polls, &counts, now);
        let name = self.upstream.name();
        for (i, (backend, error)) in self.names.iter().zip(&errors).enumerate() {
            // For the admin API and the metrics: the failed polls, and the staleness.
            let stale = if round.became_stale.contains(&i) {
                Some(true)
            } else if round.became_fresh.contains(&i) {
                Some(false)
            } else {
                None
            };
            self.upstream
                .note_poll(self.generation, BackendId(i as u32), error.is_some(), stale);
            if round.became_fresh.contains(&i) {
                tracing::info!(upstream = %name, backend = %backend, "load reports are fresh again");
            }
            let Some(e) = error else { continue };
            if round.became_stale.contains(&i) {
                tracing::warn!(
                    upstream = %name,
                    backend = %backend,
                    error = %e,
                    polls = self.feed.missed(i),
                    "load reports are stale: the backend is weighted as the average of the fresh ones until its source answers"
                );
            } else {
                tracing::debug!(upstream = %name, backend = %backend, error = %e, "load poll failed");
            }
        }
        self.apply(round.weights, round.reports)
    }

    /// Applies `weights` (computed from `reports`) if they differ from the upstream's; returns
    /// them if they changed.
    fn apply(
        &self,
        weights: Vec<u32>,
        reports: Option<Vec<Option<LoadReport>>>,
    ) -> Option<Vec<u32>> {
        // The primaries' weights (backups follow them in pool order and keep theirs).
        let mut old = self.upstream.weights();
        old.truncate(weights.len());
        if old == weights {
            return None;
        }
        self.upstream.set_weights(self.generation, &weights);
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
fn primaries(upstream: &Upstream) -> (u64, Vec<proxy::BackendSettings>) {
    let (generation, order) = upstream.backends_in_pool_order();
    (
        generation,
        order.into_iter().filter(|b| !b.backup).collect(),
    )
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
        feedback.round(polled);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let names: Vec<_> = primaries(&with).1.iter().map(|b| b.addr.port()).collect();
        assert_eq!(names, [1]);
    }

    /// A HAProxy agent-check is not a load report source: it sets weights itself, and this
    /// loop has nothing to poll on it. The configuration keeps agent_check away from load
    /// models, but the admin API can switch an upstream with agent checks to one; a feedback
    /// loop started then would only put the configured weights back over the agent's every
    /// round.
    #[test]
    fn an_agent_check_feeds_no_weight_model() {
        use proxy::{BackendSettings, UpstreamSettings};
        let mut checked = BackendSettings::new(([127, 0, 0, 1], 1).into());
        checked.load_source = Some(LoadSource::AgentCheck(([127, 0, 0, 1], 9102).into()));
        let upstream = Upstream::new(UpstreamSettings::new(
            "u",
            balance::Algorithm::Dwlc,
            vec![checked],
        ));
        assert!(!Feedback::wanted(&upstream));
        assert!(!upstream.has_weight_model());
        assert!(upstream.weights_from_reports(), "the agent's, still");
    }
}
