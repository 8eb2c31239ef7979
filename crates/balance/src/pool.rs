//! [`Pool`]: one upstream's backends, their live statistics, and its algorithm.
//!
//! The pool is the only place that writes per-backend statistics. Every [`pick`](Pool::pick)
//! returns a [`Ticket`] that must be handed back to [`complete`](Pool::complete) exactly once:
//! the ticket is not `Clone`, and `complete` consumes it, so in-flight counts cannot drift. (In
//! the proxy a guard completes a forgotten ticket as [`Outcome::Cancelled`] when dropped.)
//!
//! Backends come in two tiers, as in nginx: primaries, and `backup` backends that are used only
//! when no primary can be. Each tier has its own algorithm instance over its own view, so a
//! backup never shifts a hash mapping among primaries. A [`BackendId`] handed out by the pool
//! indexes the pool as a whole: primaries first, then backups.
//!
//! Passive health follows nginx (`ngx_http_upstream_free_round_robin_peer`): a failure bumps
//! `fails` and restarts the `fail_timeout` window; `max_fails` failures take a backend out until
//! the window has passed; the first pick after that is a probe, and its success clears the
//! count. When no backend at all can be chosen, the primaries' counts are cleared so the next
//! request tries them again instead of failing for a whole `fail_timeout` ("quick recovery").

use crate::backend::{BackendId, BackendSpec, BackendState, Backends, LATENCY_ALPHA, Nanos};
use crate::balancer::{Algorithm, Balancer, Completion, Outcome, PickCtx};

/// The right to one request's worth of a backend, returned to [`Pool::complete`].
#[derive(Debug)]
#[must_use = "a ticket must be completed, or the backend's in-flight count never comes down"]
pub struct Ticket {
    backend: BackendId,
    picked: Nanos,
}

impl Ticket {
    /// The backend chosen, as an index into the whole pool.
    pub fn backend(&self) -> BackendId {
        self.backend
    }

    /// When the pick was made.
    pub fn picked(&self) -> Nanos {
        self.picked
    }
}

#[derive(Debug)]
struct Tier {
    /// Where this tier's backends start in the pool's list.
    offset: usize,
    len: usize,
    balancer: Box<dyn Balancer>,
}

impl Tier {
    fn local(&self, id: BackendId) -> Option<BackendId> {
        let i = id.index().checked_sub(self.offset)?;
        (i < self.len).then_some(BackendId(i as u32))
    }
}

/// One upstream: backends, their statistics, and the algorithm that chooses among them.
#[derive(Debug)]
pub struct Pool {
    algorithm: Algorithm,
    /// Primaries, then backups.
    states: Vec<BackendState>,
    /// The primary tier, then the backup tier if there are backups.
    tiers: Vec<Tier>,
}

impl Pool {
    /// A pool over `primary` and `backup` backends. `seed` feeds algorithms that draw random
    /// numbers; each tier gets its own stream derived from it.
    pub fn new(
        algorithm: Algorithm,
        primary: &[BackendSpec],
        backup: &[BackendSpec],
        seed: u64,
    ) -> Pool {
        let states: Vec<BackendState> = primary
            .iter()
            .chain(backup)
            .copied()
            .map(BackendState::new)
            .collect();
        let mut tiers = vec![Tier {
            offset: 0,
            len: primary.len(),
            balancer: algorithm.build(seed),
        }];
        if !backup.is_empty() {
            tiers.push(Tier {
                offset: primary.len(),
                len: backup.len(),
                balancer: algorithm.build(seed ^ 0x9e37_79b9_7f4a_7c15),
            });
        }
        let mut pool = Pool {
            algorithm,
            states,
            tiers,
        };
        pool.rebuild(Nanos::ZERO);
        pool
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Number of backends, primaries and backups.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// Number of primary backends; ids at and above this are backups.
    pub fn primaries(&self) -> usize {
        self.tiers[0].len
    }

    pub fn state(&self, id: BackendId) -> &BackendState {
        &self.states[id.index()]
    }

    pub fn states(&self) -> &[BackendState] {
        &self.states
    }

    fn rebuild(&mut self, now: Nanos) {
        for tier in &mut self.tiers {
            let view = Backends::new(&self.states[tier.offset..tier.offset + tier.len], now);
            tier.balancer.rebuild(&view);
        }
    }

    /// Sets the weight algorithms balance by (a weight model or slow start changes it; 0 takes
    /// the backend out of rotation without marking it down).
    pub fn set_weight(&mut self, id: BackendId, weight: u32, now: Nanos) {
        self.states[id.index()].weight = weight;
        self.rebuild(now);
    }

    /// Marks a backend down or up by hand (nginx `down`).
    pub fn set_down(&mut self, id: BackendId, down: bool) {
        self.states[id.index()].spec.down = down;
    }

    /// Chooses a backend for a request: from the primaries, else from the backups. `exclude`
    /// lists backends already tried for this request (pool-wide ids).
    pub fn pick(
        &mut self,
        affinity: Option<&[u8]>,
        exclude: &[BackendId],
        now: Nanos,
    ) -> Option<Ticket> {
        let mut local_exclude = Vec::new();
        for tier in &mut self.tiers {
            let exclude = if exclude.is_empty() {
                &[][..]
            } else {
                local_exclude.clear();
                local_exclude.extend(exclude.iter().filter_map(|&id| tier.local(id)));
                &local_exclude[..]
            };
            let ctx = PickCtx {
                affinity,
                exclude,
                now,
            };
            let states = &mut self.states[tier.offset..tier.offset + tier.len];
            if let Some(local) = tier.balancer.pick(&ctx, &Backends::new(states, now)) {
                let state = &mut states[local.index()];
                debug_assert!(state.is_eligible(now), "{local} picked while ineligible");
                state.in_flight += 1;
                if now.since(state.checked) > state.spec.fail_timeout {
                    state.checked = now;
                }
                return Some(Ticket {
                    backend: BackendId((tier.offset + local.index()) as u32),
                    picked: now,
                });
            }
        }
        let primaries = self.tiers[0].len;
        for state in &mut self.states[..primaries] {
            state.fails = 0;
        }
        None
    }

    /// Returns a ticket: updates in-flight, latency and passive health, then tells the
    /// algorithm.
    pub fn complete(&mut self, ticket: Ticket, outcome: Outcome, now: Nanos) {
        let latency = now.since(ticket.picked);
        let state = &mut self.states[ticket.backend.index()];
        debug_assert!(state.in_flight > 0);
        state.in_flight = state.in_flight.saturating_sub(1);
        match outcome {
            Outcome::Success => {
                state.requests += 1;
                let v = latency.0 as f64;
                state.latency = Some(match state.latency {
                    Some(avg) => LATENCY_ALPHA * v + (1.0 - LATENCY_ALPHA) * avg,
                    None => v,
                });
                state.success_rate = (1.0 - LATENCY_ALPHA) * state.success_rate + LATENCY_ALPHA;
                if state.accessed < state.checked {
                    state.fails = 0;
                }
            }
            Outcome::Failure => {
                state.requests += 1;
                state.failures += 1;
                state.success_rate *= 1.0 - LATENCY_ALPHA;
                state.fails += 1;
                state.accessed = now;
                state.checked = now;
            }
            Outcome::Cancelled => {}
        }
        let tier = if ticket.backend.index() < self.tiers[0].len {
            &mut self.tiers[0]
        } else {
            &mut self.tiers[1]
        };
        let local = tier.local(ticket.backend).expect("ticket from this pool");
        let completion = Completion {
            outcome,
            latency,
            now,
        };
        tier.balancer.on_complete(local, &completion);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn secs(s: u64) -> Nanos {
        Nanos::from(Duration::from_secs(s))
    }

    fn pool(alg: Algorithm, primary: &[u32], backup: &[u32]) -> Pool {
        let spec = |w: &u32| BackendSpec::new(*w);
        let p: Vec<_> = primary.iter().map(spec).collect();
        let b: Vec<_> = backup.iter().map(spec).collect();
        Pool::new(alg, &p, &b, 42)
    }

    #[test]
    fn in_flight_follows_tickets() {
        let mut p = pool(Algorithm::RoundRobin, &[1, 1], &[]);
        let t1 = p.pick(None, &[], secs(1)).unwrap();
        let t2 = p.pick(None, &[], secs(1)).unwrap();
        assert_eq!(p.state(BackendId(0)).in_flight(), 1);
        assert_eq!(p.state(BackendId(1)).in_flight(), 1);
        p.complete(t1, Outcome::Success, secs(2));
        p.complete(t2, Outcome::Cancelled, secs(2));
        assert_eq!(p.state(BackendId(0)).in_flight(), 0);
        assert_eq!(p.state(BackendId(1)).in_flight(), 0);
        assert_eq!(p.state(BackendId(0)).latency(), Some(secs(1)));
        assert_eq!(
            p.state(BackendId(1)).requests(),
            0,
            "cancelled is not counted"
        );
    }

    #[test]
    fn max_fails_takes_out_for_fail_timeout_then_probes() {
        let mut p = pool(Algorithm::RoundRobin, &[1, 1], &[]);
        let t = p.pick(None, &[], secs(1)).unwrap();
        assert_eq!(t.backend(), BackendId(0));
        p.complete(t, Outcome::Failure, secs(1));
        // Within fail_timeout (10 s) only backend 1 is chosen.
        for s in [1, 5, 11] {
            let t = p.pick(None, &[], secs(s)).unwrap();
            assert_eq!(t.backend(), BackendId(1), "at {s}s");
            p.complete(t, Outcome::Success, secs(s));
        }
        // After the window, backend 0 gets one probe; while it is out, others are not sent there.
        let probe = p.pick(None, &[], secs(12)).unwrap();
        assert_eq!(probe.backend(), BackendId(0));
        let other = p.pick(None, &[], secs(12)).unwrap();
        assert_eq!(other.backend(), BackendId(1));
        let other2 = p.pick(None, &[], secs(12)).unwrap();
        assert_eq!(
            other2.backend(),
            BackendId(1),
            "no second probe while the first is out"
        );
        p.complete(other, Outcome::Success, secs(12));
        p.complete(other2, Outcome::Success, secs(12));
        // The probe succeeds: the backend is back.
        p.complete(probe, Outcome::Success, secs(13));
        assert_eq!(p.state(BackendId(0)).fails(), 0);
        let t = p.pick(None, &[], secs(13)).unwrap();
        assert_eq!(t.backend(), BackendId(0));
        p.complete(t, Outcome::Success, secs(13));
    }

    #[test]
    fn failed_probe_keeps_backend_out() {
        let mut p = pool(Algorithm::RoundRobin, &[1, 1], &[]);
        let t = p.pick(None, &[], secs(1)).unwrap();
        p.complete(t, Outcome::Failure, secs(1));
        let probe = p.pick(None, &[BackendId(1)], secs(12)).unwrap();
        assert_eq!(probe.backend(), BackendId(0));
        p.complete(probe, Outcome::Failure, secs(12));
        for s in [12, 20] {
            let t = p.pick(None, &[], secs(s)).unwrap();
            assert_eq!(t.backend(), BackendId(1));
            p.complete(t, Outcome::Success, secs(s));
        }
    }

    #[test]
    fn max_fails_zero_disables_passive_health() {
        let spec = BackendSpec {
            max_fails: 0,
            ..BackendSpec::new(1)
        };
        let mut p = Pool::new(Algorithm::RoundRobin, &[spec, spec], &[], 1);
        for _ in 0..4 {
            let t = p.pick(None, &[], secs(1)).unwrap();
            p.complete(t, Outcome::Failure, secs(1));
        }
        assert!(p.state(BackendId(0)).is_eligible(secs(1)));
    }

    #[test]
    fn backups_only_when_no_primary_can_serve() {
        let mut p = pool(Algorithm::WeightedRoundRobin, &[1, 1], &[1]);
        for _ in 0..10 {
            let t = p.pick(None, &[], secs(1)).unwrap();
            assert!(t.backend().index() < 2);
            p.complete(t, Outcome::Success, secs(1));
        }
        // Retrying past both primaries reaches the backup.
        let t = p
            .pick(None, &[BackendId(0), BackendId(1)], secs(1))
            .unwrap();
        assert_eq!(t.backend(), BackendId(2));
        p.complete(t, Outcome::Success, secs(1));
        p.set_down(BackendId(0), true);
        p.set_down(BackendId(1), true);
        let t = p.pick(None, &[], secs(1)).unwrap();
        assert_eq!(t.backend(), BackendId(2));
        p.complete(t, Outcome::Success, secs(1));
    }

    #[test]
    fn all_failed_clears_counts_for_quick_recovery() {
        let mut p = pool(Algorithm::RoundRobin, &[1, 1], &[]);
        for _ in 0..2 {
            let t = p.pick(None, &[], secs(1)).unwrap();
            p.complete(t, Outcome::Failure, secs(1));
        }
        assert!(p.pick(None, &[], secs(2)).is_none());
        // The next request gets to try again.
        let t = p.pick(None, &[], secs(2)).unwrap();
        p.complete(t, Outcome::Success, secs(2));
    }

    #[test]
    fn exclusion_is_per_request() {
        let mut p = pool(Algorithm::RoundRobin, &[1, 1, 1], &[]);
        let all = [BackendId(0), BackendId(1), BackendId(2)];
        assert!(p.pick(None, &all, secs(1)).is_none());
        let t = p.pick(None, &all[..2], secs(1)).unwrap();
        assert_eq!(t.backend(), BackendId(2));
        p.complete(t, Outcome::Success, secs(1));
    }
}
