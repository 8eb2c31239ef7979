//! fulcrum's control plane: what runs periodically beside the data plane (load feedback and
//! active health checks).
//!
//! Nothing here blocks a worker: every loop runs on the main runtime, not on the workers', and
//! touches an upstream's pool only to apply a result (one lock, one rebuild). Every loop races
//! its timer against shutdown.
//!
//! # Layout
//!
//! * [`feedback`]: polls each backend's load source every `poll_interval`, hands each round to
//!   the pure [`balance::weights::feed::Feed`] (staleness, request rates and the upstream's
//!   weight model: seed 001's `dynamic_wrr`, seed 003's `dwlc`, seed 000's
//!   `capacity_weighted`, gRFC A58's `utilization_wrr`; the simulator runs the same code) and
//!   applies its weights with [`proxy::Upstream::set_weights`].
//! * [`agent_check`]: HAProxy's agent-check protocol as a source: a percentage of the
//!   configured weight, drain, down and up, as HAProxy applies them.
//! * [`health`]: active health checks (`[upstream.health_check]`): HTTP or TCP, `rise` and
//!   `fall`, combined with passive health in the pool.
//! * [`memcached`]: reports agents pushed to memcached (seed 001's hub).
//! * [`node_exporter`]: a Prometheus node_exporter as a load source.
//! * [`source`]: reading one load source (`fulcrum agent`'s `GET /load`), and the one-request
//!   HTTP client the checks share.

pub mod agent_check;
pub mod feedback;
pub mod health;
pub mod memcached;
pub mod node_exporter;
pub mod source;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{Interval, MissedTickBehavior};

/// The rounds of a periodic loop: one every `period` (a slow round delays the next instead of
/// bunching them), each raced against shutdown.
#[derive(Debug)]
pub(crate) struct Rounds {
    ticks: Interval,
    stop: watch::Receiver<bool>,
}

impl Rounds {
    pub(crate) fn new(period: Duration, stop: watch::Receiver<bool>) -> Rounds {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Rounds { ticks, stop }
    }

    /// Waits for the next round; `false` once the control plane stops.
    pub(crate) async fn next(&mut self) -> bool {
        tokio::select! {
            _ = self.ticks.tick() => true,
            _ = self.stop.changed() => false,
        }
    }

    /// Waits for every task of a round (each bounded by its own timeout) and returns their
    /// results by index, `None` for an index no task reported; `None` if the control plane
    /// stops meanwhile.
    pub(crate) async fn gather<T: 'static>(
        &mut self,
        mut tasks: JoinSet<(usize, T)>,
        n: usize,
    ) -> Option<Vec<Option<T>>> {
        let mut results: Vec<Option<T>> = (0..n).map(|_| None).collect();
        let round = async {
            while let Some(done) = tasks.join_next().await {
                if let Ok((i, result)) = done
                    && let Some(slot) = results.get_mut(i)
                {
                    *slot = Some(result);
                }
            }
        };
        tokio::select! {
            () = round => Some(results),
            _ = self.stop.changed() => None,
        }
    }
}

/// Starts the control loops of every upstream on the current runtime; they end when `stop`
/// turns true.
pub fn spawn(upstreams: &[Arc<proxy::Upstream>], stop: &watch::Receiver<bool>) {
    for upstream in upstreams {
        tokio::spawn(supervise(Arc::clone(upstream), stop.clone()));
    }
}

/// Runs `upstream`'s loops, and starts them again whenever its backends or algorithm change
/// (a reload, the admin API): each loop works on the backends of the generation it started
/// with. Ends when `stop` turns true or the upstream is retired.
pub async fn supervise(upstream: Arc<proxy::Upstream>, mut stop: watch::Receiver<bool>) {
    let mut changes = upstream.changes();
    loop {
        let (stop_loops, loops_stop) = watch::channel(false);
        start_loops(&upstream, &loops_stop);
        let retired = tokio::select! {
            _ = stop.changed() => true,
            changed = changes.changed() => changed.is_err() || changes.borrow_and_update().1,
        };
        let _ = stop_loops.send(true);
        if retired || *stop.borrow() {
            return;
        }
    }
}

fn start_loops(upstream: &Arc<proxy::Upstream>, stop: &watch::Receiver<bool>) {
    if feedback::Feedback::wanted(upstream) {
        tokio::spawn(feedback::run(Arc::clone(upstream), stop.clone()));
    }
    if upstream
        .settings()
        .backends
        .iter()
        .any(|b| matches!(b.load_source, Some(proxy::LoadSource::AgentCheck(_))))
    {
        tokio::spawn(agent_check::run(Arc::clone(upstream), stop.clone()));
    }
    if upstream.settings().health_check.is_some() {
        tokio::spawn(health::run(Arc::clone(upstream), stop.clone()));
    }
}
