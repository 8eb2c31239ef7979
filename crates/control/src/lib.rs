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
//! * [`discovery`]: DNS discovery (A/AAAA and SRV, re-resolved at the TTL): what it finds
//!   becomes the upstream's backends of that source, through the admin API's carry-over.
//! * [`health`]: active health checks (`[upstream.health_check]`): HTTP or TCP, `rise` and
//!   `fall`, combined with passive health in the pool.
//! * [`memcached`]: reports agents pushed to memcached (seed 001's hub).
//! * [`node_exporter`]: a Prometheus node_exporter as a load source.
//! * [`probe`]: `prequal`'s prober: the probes its picks ask for, sent off the request path,
//!   their answers fed back to the pool.
//! * [`source`]: reading one load source (`fulcrum agent`'s `GET /load`), and the one-request
//!   HTTP client the checks share.

pub mod agent_check;
pub mod discovery;
pub mod feedback;
pub mod health;
pub mod memcached;
pub mod node_exporter;
pub mod probe;
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

/// Follows the set of upstreams in force (`proxy::ProxyHandle::upstream_set`): supervises
/// each upstream from the moment it is in the set — those there at the start and those a
/// reload adds — until `stop` turns true. An upstream a reload removes is retired by the
/// proxy, and its supervisor ends by itself ([`supervise`]).
pub async fn follow(
    mut upstreams: watch::Receiver<Vec<Arc<proxy::Upstream>>>,
    mut stop: watch::Receiver<bool>,
) {
    // Those supervised, by identity: a reload keeps an upstream of the same name as the same
    // `Upstream` (reconfigured), so it is not supervised twice.
    let mut supervised: Vec<std::sync::Weak<proxy::Upstream>> = Vec::new();
    loop {
        let set = upstreams.borrow_and_update().clone();
        supervised.retain(|w| w.strong_count() > 0);
        for upstream in set {
            let known = supervised
                .iter()
                .any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&upstream)));
            if !known {
                supervised.push(Arc::downgrade(&upstream));
                tokio::spawn(supervise(upstream, stop.clone()));
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            changed = upstreams.changed() => if changed.is_err() { return },
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// Runs `upstream`'s loops, and starts them again whenever its backends or algorithm change
/// (a reload, the admin API): each loop works on the backends of the generation it started
/// with. Ends when `stop` turns true or the upstream is retired.
pub async fn supervise(upstream: Arc<proxy::Upstream>, mut stop: watch::Receiver<bool>) {
    // Once for the upstream's life, not per generation: it makes generations itself.
    tokio::spawn(discovery::run(Arc::clone(&upstream), stop.clone()));
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
    if upstream.probes_backends() {
        tokio::spawn(probe::run(Arc::clone(upstream), stop.clone()));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use proxy::{CheckKind, HealthCheckSettings, UpstreamSettings};

    /// An upstream whose one backend is actively checked every 50 ms, on a port nothing
    /// listens on (a refused connect fails the check at once).
    fn checked(name: &str) -> Arc<proxy::Upstream> {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let addr = closed.local_addr().expect("its address");
        drop(closed);
        let mut s = UpstreamSettings::new(
            name,
            balance::Algorithm::RoundRobin,
            vec![proxy::BackendSettings::new(addr)],
        );
        s.health_check = Some(HealthCheckSettings {
            kind: CheckKind::Tcp,
            interval: Duration::from_millis(50),
            timeout: Duration::from_millis(500),
            rise: 1,
            fall: 1,
        });
        Arc::new(proxy::Upstream::new(s))
    }

    async fn checked_out(u: &proxy::Upstream) -> bool {
        for _ in 0..200 {
            if u.snapshot()[0].check_failed {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        false
    }

    /// An upstream DNS has given nothing yet runs its loops (health checks, the prober of
    /// `prequal`) over no backend, and checks the backends DNS then gives.
    #[tokio::test]
    async fn an_empty_upstream_is_supervised_and_checks_what_dns_gives_it() {
        let template = checked("template").settings().backends[0].clone();
        let query = proxy::DiscoveryQuery {
            kind: proxy::RecordKind::A,
            name: "app.test".into(),
            port: Some(template.addr.port()),
        };
        let mut s = (*checked("empty").settings()).clone();
        s.algorithm = balance::Algorithm::Prequal;
        s.backends.clear();
        s.discovery = vec![proxy::DiscoverySettings {
            query: query.clone(),
            // No server answers there: the discovery loop fails quietly meanwhile.
            resolvers: vec![template.addr],
            ipv6: true,
            min_interval: Duration::from_secs(1),
            max_interval: Duration::from_secs(1),
            template: template.clone(),
        }];
        let u = Arc::new(proxy::Upstream::new(s));
        let (stop, stopped) = watch::channel(false);
        let supervising = tokio::spawn(supervise(Arc::clone(&u), stopped));
        let found = proxy::BackendSettings {
            discovered: Some(query.clone()),
            ..template
        };
        assert!(u.apply_discovered(&query, vec![found]).is_some());
        assert!(checked_out(&u).await, "the backend DNS gave is checked");
        let _ = stop.send(true);
        tokio::time::timeout(Duration::from_secs(5), supervising)
            .await
            .expect("supervise ends when stopped")
            .expect("supervise did not panic");
    }

    /// Control follows the set of upstreams: one there at the start and one added later (a
    /// reload) both get their loops, with nothing else to start them.
    #[tokio::test]
    async fn follow_supervises_the_upstreams_in_the_set_and_those_added_later() {
        let first = checked("first");
        let (set, followed) = watch::channel(vec![Arc::clone(&first)]);
        let (stop, stopped) = watch::channel(false);
        let following = tokio::spawn(follow(followed, stopped));
        assert!(checked_out(&first).await, "the first upstream's check ran");
        let added = checked("added");
        set.send_replace(vec![Arc::clone(&first), Arc::clone(&added)]);
        assert!(checked_out(&added).await, "the added upstream's check ran");
        let _ = stop.send(true);
        tokio::time::timeout(Duration::from_secs(5), following)
            .await
            .expect("follow ends when stopped")
            .expect("follow did not panic");
    }
}
