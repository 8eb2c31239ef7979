//! Backends found in DNS (`[upstream.discovery]`, backends written with a host name): what a
//! source's lookup changes in the membership, what a reload carries over, and what each source
//! has done so far (for the metrics). The lookups themselves run in the control plane
//! (`control::discovery`); a change of the found set goes through the same carry-over as the
//! admin API's ([`Upstream::reconfigure`] with [`Keep::Runtime`]): new backends join (with
//! their slow start), those that went finish their requests in flight, the others keep their
//! state and counts.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::Upstream;
use super::membership::{Keep, Reconfigured};
use super::state::lock;
use crate::settings::{BackendSettings, DiscoveryQuery, UpstreamSettings};

/// What a discovery source has done so far: the admin API's metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceStatus {
    pub query: DiscoveryQuery,
    /// Time since its last good answer; since it was configured while it has had none (it
    /// grows while the DNS server is down or the name does not resolve).
    pub age: Duration,
    /// Whether it has ever answered.
    pub resolved: bool,
    /// The backends its last good answer gave (those in the upstream).
    pub backends: usize,
    /// Lookups that failed (timeout, SERVFAIL, refused, NXDOMAIN, an empty answer).
    pub failures: u64,
}

impl Upstream {
    /// What each discovery source has done so far, in the order of the settings.
    pub fn discovery_status(&self) -> Vec<SourceStatus> {
        lock(&self.sources)
            .iter()
            .map(|r| SourceStatus {
                query: r.query.clone(),
                age: r.since.elapsed(),
                resolved: r.resolved,
                backends: r.backends,
                failures: r.failures,
            })
            .collect()
    }

    /// A lookup of `query` failed: counted (the found set stays as it was).
    pub fn note_lookup_failed(&self, query: &DiscoveryQuery) {
        if let Some(r) = lock(&self.sources).iter_mut().find(|r| &r.query == query) {
            r.failures += 1;
        }
    }

    /// The source that found the backend at `addr`, if DNS did (the admin API neither removes
    /// nor adds what DNS gives).
    pub fn discovered_by(&self, addr: SocketAddr) -> Option<DiscoveryQuery> {
        self.settings()
            .backends
            .iter()
            .find(|b| b.addr == addr)
            .and_then(|b| b.discovered.clone())
    }

    /// A good answer of `query`: its backends become `found` (an address another source or
    /// the configuration already has stays theirs). `None` when nothing changed; otherwise the
    /// membership change, made as the admin API makes one: what the operator set on the other
    /// backends stays, and a record's new weight applies but where the operator overrode the
    /// weight (a pinned weight stays in force).
    pub fn apply_discovered(
        &self,
        query: &DiscoveryQuery,
        found: Vec<BackendSettings>,
    ) -> Option<Reconfigured> {
        // No reload may replace the settings this change is computed from meanwhile.
        let _change = lock(&self.membership);
        let current = self.settings();
        // An answer to a lookup a reload made moot (the source removed or changed while it
        // was out) adds nothing: its backends would stay with no loop to follow them.
        if !current.discovery.iter().any(|d| &d.query == query) {
            return None;
        }
        let mine = |b: &BackendSettings| b.discovered.as_ref() == Some(query);
        // Sets by address, so that a large answer costs in proportion to its size.
        let elsewhere: std::collections::HashSet<SocketAddr> = current
            .backends
            .iter()
            .filter(|b| !mine(b))
            .map(|b| b.addr)
            .collect();
        let mut seen = std::collections::HashSet::with_capacity(found.len());
        let mut kept: Vec<BackendSettings> = Vec::with_capacity(found.len());
        for f in found {
            if !elsewhere.contains(&f.addr) && seen.insert(f.addr) {
                kept.push(f);
            }
        }
        let scaled = current.fit_to_ring(query, &mut kept);
        self.note_answer(query, kept.len());
        let before: Vec<&BackendSettings> = current.backends.iter().filter(|b| mine(b)).collect();
        let same_set = before.len() == kept.len()
            && kept.iter().all(|k| {
                before
                    .iter()
                    .any(|b| b.addr == k.addr && b.backup == k.backup)
            });
        // A record that now gives another weight (SRV) is written in the settings (what a
        // reload carries, and what the address takes when it has no override)...
        let settings_reweighted = kept.iter().any(|k| {
            before
                .iter()
                .any(|b| b.addr == k.addr && b.weight != k.weight)
        });
        // ... and applied to the backend in force, unless the operator set its weight (an
        // override, pinned by address: it stays in force, as a reload keeps it) or load
        // reports set the weights. Compared with the weight in force, so that a backend
        // whose override was cleared takes DNS's weight again at the next answer.
        let pinned = |addr: SocketAddr| current.pins.get(&addr).is_some_and(|p| p.weight.is_some());
        let in_force: std::collections::HashMap<SocketAddr, u32> =
            if super::view::reports_set_weights(&current) {
                std::collections::HashMap::new()
            } else {
                lock(&self.state)
                    .members
                    .iter()
                    .map(|m| (m.addr, m.static_weight))
                    .collect()
            };
        let reweighted: Vec<(SocketAddr, u32)> = kept
            .iter()
            .filter(|k| !pinned(k.addr))
            .filter(|k| in_force.get(&k.addr).is_some_and(|&w| w != k.weight))
            .map(|k| (k.addr, k.weight))
            .collect();
        if same_set && !settings_reweighted && reweighted.is_empty() {
            return None;
        }
        let done = if same_set && !settings_reweighted {
            Reconfigured {
                kept: kept.len(),
                unchanged: true,
                ..Reconfigured::default()
            }
        } else {
            let mut settings = self.runtime_settings();
            settings.backends.retain(|b| !mine(b));
            settings.backends.extend(kept);
            if scaled {
                tracing::warn!(upstream = %self.name(), source = %query, "DNS gives more weight than the ring of {} is built for ({} in all): the weights are scaled down in proportion", current.algorithm.name(), UpstreamSettings::MAX_RING_WEIGHT);
            }
            self.reconfigure(settings, Keep::Runtime)
        };
        for (addr, w) in reweighted {
            self.set_weight_from_dns(query, addr, w);
        }
        Some(done)
    }

    /// Gives the backend at `addr` the weight its record gives now, logged as DNS's change
    /// (not the operator's).
    fn set_weight_from_dns(&self, query: &DiscoveryQuery, addr: SocketAddr, weight: u32) {
        let weight = weight.clamp(1, super::MAX_WEIGHT);
        let was = self.change_member(addr, |pool, id, member, now| {
            pool.set_weight(id, weight, now);
            std::mem::replace(&mut member.static_weight, weight)
        });
        if let Ok(was) = was
            && was != weight
        {
            tracing::info!(upstream = %self.name(), source = %query, backend = %addr, from = was, to = weight, "DNS discovery changed a backend's weight");
        }
    }

    /// Records a good answer of `query` that gave `backends` backends.
    fn note_answer(&self, query: &DiscoveryQuery, backends: usize) {
        if let Some(r) = lock(&self.sources).iter_mut().find(|r| &r.query == query) {
            r.since = Instant::now();
            r.resolved = true;
            r.backends = backends;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{DiscoverySettings, RecordKind, UpstreamSettings};
    use balance::Algorithm;

    fn source(name: &str) -> DiscoverySettings {
        DiscoverySettings {
            query: DiscoveryQuery {
                kind: RecordKind::A,
                name: name.to_owned(),
                port: Some(80),
            },
            resolvers: Vec::new(),
            ipv6: true,
            min_interval: Duration::from_secs(1),
            max_interval: Duration::from_secs(60),
            template: BackendSettings::new(SocketAddr::from(([0, 0, 0, 0], 0))),
        }
    }

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, i], 80))
    }

    fn found(s: &DiscoverySettings, ids: &[u8]) -> Vec<BackendSettings> {
        ids.iter().map(|&i| s.backend(addr(i))).collect()
    }

    impl Upstream {
        /// A backend picked for a request (its ticket completed at once), if there is one.
        fn pick_for_test(&self) -> Option<SocketAddr> {
            let now = self.now();
            let mut st = lock(&self.state);
            match balance::queue::admit(&mut st.pool, None, &[], now, 0, 0) {
                balance::queue::Admission::Picked(t) => {
                    let addr = st.members[t.backend().index()].addr;
                    st.pool.complete(t, balance::Outcome::Success, now);
                    Some(addr)
                }
                _ => None,
            }
        }
    }

    fn addrs(u: &Upstream) -> Vec<SocketAddr> {
        u.snapshot().iter().map(|b| b.addr).collect()
    }

    /// A backend written with a host name keeps that name for the ring at every address it
    /// resolves to (nginx's peers of `server NAME resolve`); `[upstream.discovery]`'s are named
    /// by their address.
    #[test]
    fn a_host_name_backend_keeps_its_written_name() {
        let mut named = source("app.internal");
        named.template.name = "app.internal:8080".to_owned();
        assert_eq!(named.backend(addr(1)).name, "app.internal:8080");
        assert_eq!(source("app.internal").backend(addr(1)).name, "10.0.0.1:80");
    }

    #[test]
    fn an_upstream_without_backends_has_none_to_pick_and_gains_them_from_dns() {
        let src = source("app.test");
        let mut s = UpstreamSettings::new("d", Algorithm::WeightedRoundRobin, Vec::new());
        s.discovery = vec![src.clone()];
        let u = Upstream::new(s);
        assert!(u.snapshot().is_empty());
        assert!(u.pick_for_test().is_none(), "nothing to pick");
        assert!(!u.discovery_status()[0].resolved);

        let done = u
            .apply_discovered(&src.query, found(&src, &[1, 2]))
            .unwrap();
        assert_eq!(done.added, vec![addr(1), addr(2)]);
        assert_eq!(addrs(&u), vec![addr(1), addr(2)]);
        assert!(u.pick_for_test().is_some());
        let st = &u.discovery_status()[0];
        assert!(st.resolved && st.backends == 2 && st.failures == 0);
        assert_eq!(u.discovered_by(addr(1)), Some(src.query.clone()));

        // The same answer again changes nothing; another set does.
        assert!(
            u.apply_discovered(&src.query, found(&src, &[2, 1]))
                .is_none()
        );
        let done = u
            .apply_discovered(&src.query, found(&src, &[2, 3]))
            .unwrap();
        assert_eq!((done.added, done.removed), (vec![addr(3)], vec![addr(1)]));

        // A reload removes the source while a lookup of it is out: the answer that comes
        // back afterwards adds nothing.
        let mut reloaded = UpstreamSettings::new("d", Algorithm::WeightedRoundRobin, Vec::new());
        reloaded.discovery = vec![source("other.test")];
        u.reconfigure(reloaded, Keep::Settings);
        assert!(addrs(&u).is_empty(), "the removed source's backends left");
        assert!(u.apply_discovered(&src.query, found(&src, &[4])).is_none());
        assert!(
            addrs(&u).is_empty(),
            "a late answer of a removed source adds nothing"
        );
    }

    /// Every algorithm, with sticky sessions and health checks: an upstream DNS has given
    /// nothing yet picks nothing (503), shows nothing, and takes backends when they come.
    #[test]
    fn every_algorithm_starts_empty_and_takes_backends_later() {
        let src = source("app.test");
        for &algorithm in Algorithm::ALL {
            let mut s = UpstreamSettings::new("d", algorithm, Vec::new());
            s.discovery = vec![src.clone()];
            s.sticky = Some(crate::StickySettings {
                cookie: "srv".into(),
                max_age: None,
                path: "/".into(),
                domain: None,
                secure: false,
                http_only: false,
                same_site: None,
                key: None,
            });
            s.health_check = Some(crate::HealthCheckSettings {
                kind: crate::CheckKind::Tcp,
                interval: Duration::from_secs(1),
                timeout: Duration::from_secs(1),
                rise: 1,
                fall: 1,
            });
            let u = Upstream::new(s);
            assert!(u.pick_for_test().is_none(), "{algorithm}");
            assert!(
                u.snapshot().is_empty() && u.weights().is_empty(),
                "{algorithm}"
            );
            let mut wishes = Vec::new();
            u.take_probes(u.generation(), &mut wishes);
            assert!(wishes.is_empty(), "{algorithm}");
            u.apply_discovered(&src.query, found(&src, &[1, 2, 3]));
            assert!(u.pick_for_test().is_some(), "{algorithm}");
            u.apply_discovered(&src.query, Vec::new());
            assert_eq!(
                u.snapshot().len(),
                0,
                "{algorithm}: an empty answer empties it here"
            );
            assert!(u.pick_for_test().is_none(), "{algorithm}");
        }
    }

    /// A backend DNS adds joins as a new one does through the API: with the slow start its
    /// source gives it (Envoy's rule for new hosts), while the one already there stays at full
    /// weight.
    #[test]
    fn a_backend_dns_adds_ramps_up_with_its_slow_start() {
        let mut src = source("app.test");
        let mut s = UpstreamSettings::new("d", Algorithm::WeightedRoundRobin, Vec::new());
        s.discovery = vec![src.clone()];
        let u = Upstream::new(s);
        u.apply_discovered(&src.query, found(&src, &[1]));
        src.template.slow_start = Some(Duration::from_secs(60));
        u.apply_discovered(&src.query, found(&src, &[1, 2]));
        let ramp = |a| u.snapshot().iter().find(|b| b.addr == a).map(|b| b.ramp);
        assert_eq!(ramp(addr(1)), Some(1.0), "the backend already there");
        let new = ramp(addr(2)).unwrap();
        assert!(new < 0.5, "the new backend ramps up: {new}");
    }

    #[test]
    fn a_new_weight_from_dns_applies_and_the_operators_drain_stays() {
        let src = source("app.test");
        let mut s = UpstreamSettings::new("d", Algorithm::WeightedRoundRobin, Vec::new());
        s.discovery = vec![src.clone()];
        let u = Upstream::new(s);
        u.apply_discovered(&src.query, found(&src, &[1, 2]));
        u.set_state(addr(2), crate::AdminState::Drain).unwrap();
        let mut heavier = found(&src, &[1, 2]);
        heavier[0].weight = 5;
        assert!(u.apply_discovered(&src.query, heavier).is_some());
        let snap = u.snapshot();
        assert_eq!((snap[0].addr, snap[0].static_weight), (addr(1), 5));
        assert_eq!(
            snap[1].state,
            crate::AdminState::Drain,
            "a DNS refresh keeps it"
        );
    }

    /// A weight the operator set on a discovered backend (an override, pinned by address)
    /// stays in force when its record's weight changes, through a reload too, and no
    /// answer flips it; the other backend takes DNS's new weight; once the override is
    /// cleared, the next answer gives DNS's weight.
    #[test]
    fn a_weight_the_operator_set_stays_when_dns_changes_it() {
        let src = source("app.test");
        let mut s = UpstreamSettings::new("d", Algorithm::WeightedRoundRobin, Vec::new());
        s.discovery = vec![src.clone()];
        let u = Upstream::new(s);
        let weighted = |w: u32| {
            let mut f = found(&src, &[1, 2]);
            for b in &mut f {
                b.weight = w;
            }
            f
        };
        u.apply_discovered(&src.query, weighted(5));
        u.set_static_weight(addr(1), 10).unwrap();
        u.set_pins(std::collections::HashMap::from([(
            addr(1),
            crate::settings::Pin {
                state: None,
                weight: Some(10),
            },
        )]));
        let statics =
            |u: &Upstream| -> Vec<u32> { u.snapshot().iter().map(|b| b.static_weight).collect() };
        assert!(u.apply_discovered(&src.query, weighted(7)).is_some());
        assert_eq!(
            statics(&u),
            vec![10, 7],
            "the override stays; the other follows DNS"
        );
        assert!(
            u.apply_discovered(&src.query, weighted(7)).is_none(),
            "the same answer changes nothing"
        );
        u.reconfigure((*u.settings()).clone(), Keep::Settings);
        assert_eq!(statics(&u), vec![10, 7], "a reload keeps the override");
        assert!(
            u.apply_discovered(&src.query, weighted(7)).is_none(),
            "no flip after the reload"
        );
        assert_eq!(statics(&u), vec![10, 7]);
        u.set_pins(std::collections::HashMap::new());
        assert!(u.apply_discovered(&src.query, weighted(7)).is_some());
        assert_eq!(
            statics(&u),
            vec![7, 7],
            "the override cleared: DNS's weight"
        );
    }

    #[test]
    fn srv_weights_are_scaled_to_what_a_ring_is_built_for() {
        let src = source("app.test");
        let mut s = UpstreamSettings::new("d", Algorithm::BoundedLoad, Vec::new());
        s.discovery = vec![src.clone()];
        let u = Upstream::new(s);
        let mut heavy = found(&src, &[1, 2, 3]);
        for (b, w) in heavy.iter_mut().zip([65535, 65535, 1]) {
            b.weight = w;
        }
        u.apply_discovered(&src.query, heavy);
        let weights: Vec<u32> = u.snapshot().iter().map(|b| b.static_weight).collect();
        assert_eq!(weights, vec![4999, 4999, 1], "in proportion, at least 1");
    }

    #[test]
    fn static_backends_stay_and_keep_their_address_and_a_reload_carries_what_dns_found() {
        let src = source("app.test");
        let mut s = UpstreamSettings::new(
            "d",
            Algorithm::RoundRobin,
            vec![BackendSettings::new(addr(1))],
        );
        s.discovery = vec![src.clone()];
        let u = Upstream::new(s.clone());
        u.apply_discovered(&src.query, found(&src, &[1, 2]));
        assert_eq!(addrs(&u), vec![addr(1), addr(2)]);
        assert_eq!(
            u.discovered_by(addr(1)),
            None,
            "the static backend stays static"
        );
        assert_eq!(u.discovery_status()[0].backends, 1);

        // A reload of the same file keeps what DNS found; one without the source drops it.
        let done = u.reconfigure(s.clone(), Keep::Settings);
        assert!(done.removed.is_empty(), "{done:?}");
        assert_eq!(addrs(&u), vec![addr(1), addr(2)]);
        let mut without = s;
        without.discovery.clear();
        let done = u.reconfigure(without, Keep::Settings);
        assert_eq!(done.removed, vec![addr(2)]);
        assert!(u.discovery_status().is_empty());
    }
}
