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
//! count. When no backend at all is usable, the primaries' counts are cleared so the next
//! request tries them again instead of failing for a whole `fail_timeout` ("quick recovery").
//! A request that finds nothing left only because it has already tried every usable backend
//! does not trigger it (nginx's does): that would put failed backends back inside their
//! `fail_timeout`.
//!
//! Slow start (Envoy's, `slow_start` in the configuration) ramps a backend that recovers or is
//! marked up again from a tenth of its weight to all of it over the configured time: its
//! [`ramp`](BackendState::ramp) is `max(0.1, max(t, 1 s) / slow_start)` (Envoy's formula with
//! aggression 1 and `min_weight_percent` 10), re-evaluated on picks while any backend ramps.
//! Backends present from the start do not ramp: all of them would, to no effect.

use crate::algorithm::{Algorithm, Implementation, Options};
use crate::backend::{
    BackendId, BackendSpec, BackendState, Backends, LATENCY_ALPHA, Nanos, RAMP_FULL,
};
use crate::balancer::{Balancer, Completion, Outcome, PickCtx, Probe, Verdict};

/// Slow start never sends less than this share of a backend's weight (Envoy's default
/// `min_weight_percent`, 10%), in 1/1024ths.
const RAMP_MIN: u32 = RAMP_FULL / 10;

/// A ramp is applied (and the algorithm's tables rebuilt) once it has moved by this much, in
/// 1/1024ths: 64 steps over the slow start at most.
const RAMP_STEP: u32 = RAMP_FULL / 64;

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

    /// The same ticket for the pool that replaced the one it came from, where its backend is
    /// `backend` (see [`Pool::carry_over`]): it completes there as if picked there.
    pub fn moved_to(self, backend: BackendId) -> Ticket {
        Ticket { backend, ..self }
    }
}

#[derive(Debug)]
struct Tier {
    /// Where this tier's backends start in the pool's list.
    offset: usize,
    len: usize,
    balancer: Box<dyn Balancer>,
    /// Requests in flight on this tier's backends.
    in_flight: u64,
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
    /// Slow start's length for backends without their own (ignored if the algorithm does
    /// not support slow start).
    slow_start: Option<Nanos>,
    /// Backends in slow start.
    ramping: Vec<BackendId>,
    /// The latency estimate of a backend without one yet, for [`Completion::verdict`]: the
    /// penalty a failure costs (`Options::penalty`, the timeout).
    penalty: Nanos,
}

impl Pool {
    /// A pool over `primary` and `backup` backends. `seed` feeds algorithms that draw random
    /// numbers; each tier gets its own stream derived from it. `options.slow_start` is ignored
    /// unless the algorithm [supports it](Algorithm::supports_slow_start).
    pub fn new(
        algorithm: Algorithm,
        options: &Options,
        primary: &[BackendSpec],
        backup: &[BackendSpec],
        seed: u64,
    ) -> Pool {
        Pool::new_as(
            algorithm,
            options,
            primary,
            backup,
            seed,
            Implementation::Auto,
        )
    }

    /// [`Pool::new`] with the given implementation of the algorithm (tests and benchmarks
    /// compare the index with the linear scan).
    #[doc(hidden)]
    pub fn new_as(
        algorithm: Algorithm,
        options: &Options,
        primary: &[BackendSpec],
        backup: &[BackendSpec],
        seed: u64,
        implementation: Implementation,
    ) -> Pool {
        let states: Vec<BackendState> = primary
            .iter()
            .chain(backup)
            .cloned()
            .map(BackendState::new)
            .collect();
        let mut tiers = vec![Tier {
            offset: 0,
            len: primary.len(),
            balancer: algorithm.build_as(options, seed, implementation),
            in_flight: 0,
        }];
        if !backup.is_empty() {
            tiers.push(Tier {
                offset: primary.len(),
                len: backup.len(),
                balancer: algorithm.build_as(options, seed ^ 0x9e37_79b9_7f4a_7c15, implementation),
                in_flight: 0,
            });
        }
        let mut pool = Pool {
            algorithm,
            states,
            tiers,
            slow_start: options.slow_start,
            ramping: Vec::new(),
            penalty: options.penalty,
        };
        pool.rebuild(Nanos::ZERO);
        pool
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Takes over the live state of the backends that stay from `old`, the pool this one
    /// replaces (a reload, a backend added or removed, another algorithm): `same[i]` is the
    /// old pool's id of this pool's backend `i`, if it was there. What carries over: requests
    /// in flight (their tickets are completed here, [`Ticket::moved_to`]), passive health,
    /// active checks' verdict, the latency and success averages, the counts, a slow start in
    /// progress — and the weight in force (a weight model's), unless the configured weight
    /// changed. A backend that is new starts fresh; one marked up again by its new spec
    /// starts its slow start.
    pub fn carry_over(&mut self, old: &Pool, same: &[Option<BackendId>], now: Nanos) {
        let mut marked_up = Vec::new();
        for (i, from) in same.iter().enumerate().take(self.states.len()) {
            let Some(from) = from.and_then(|id| old.states.get(id.index())) else {
                continue;
            };
            let state = &mut self.states[i];
            if from.spec.weight == state.spec.weight {
                state.weight = from.weight;
            }
            state.in_flight = from.in_flight;
            state.fails = from.fails;
            state.accessed = from.accessed;
            state.checked = from.checked;
            state.latency = from.latency;
            state.success_rate = from.success_rate;
            state.requests = from.requests;
            state.failures = from.failures;
            state.check_failed = from.check_failed;
            state.ramp = from.ramp;
            state.ramp_since = from.ramp_since;
            let id = BackendId(i as u32);
            if state.ramp_since.is_some() && self.slow_start_of(id).is_some() {
                self.ramping.push(id);
            } else {
                let state = &mut self.states[i];
                state.ramp = RAMP_FULL;
                state.ramp_since = None;
            }
            if from.spec.down && !self.states[i].spec.down {
                marked_up.push(id);
            }
        }
        for tier in &mut self.tiers {
            tier.in_flight = self.states[tier.offset..tier.offset + tier.len]
                .iter()
                .map(|s| u64::from(s.in_flight))
                .sum();
        }
        // After the in-flight sums: starting a slow start rebuilds the algorithms' tables.
        for id in marked_up {
            self.begin_slow_start(id, now);
        }
        self.rebuild(now);
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
            let states = &self.states[tier.offset..tier.offset + tier.len];
            let view = Backends::with_in_flight(states, now, tier.in_flight);
            tier.balancer.rebuild(&view);
        }
    }

    /// Sets the weight algorithms balance by (a weight model or slow start changes it; 0 takes
    /// the backend out of rotation without marking it down).
    pub fn set_weight(&mut self, id: BackendId, weight: u32, now: Nanos) {
        self.states[id.index()].weight = weight;
        self.rebuild(now);
    }

    /// Sets the weights of the first `weights.len()` backends (pool order: primaries, then
    /// backups) with one rebuild, as a weight model does for a whole pool at once. Extra
    /// weights are ignored; backends beyond them keep theirs.
    pub fn set_weights(&mut self, weights: &[u32], now: Nanos) {
        for (state, &weight) in self.states.iter_mut().zip(weights) {
            state.weight = weight;
        }
        self.rebuild(now);
    }

    /// Marks a backend down or up by hand (nginx `down`). A backend marked up again enters
    /// slow start, if the pool has it.
    pub fn set_down(&mut self, id: BackendId, down: bool, now: Nanos) {
        let was_down = std::mem::replace(&mut self.states[id.index()].spec.down, down);
        self.changed(id);
        if was_down && !down {
            self.begin_slow_start(id, now);
        }
    }

    /// Records what active health checks concluded (HAProxy's rule: checks and passive health
    /// each can take a backend out; one the checks bring back enters slow start, if it has
    /// one). Returns whether the state changed.
    pub fn set_check_result(&mut self, id: BackendId, healthy: bool, now: Nanos) -> bool {
        let state = &mut self.states[id.index()];
        if state.check_failed != healthy {
            return false;
        }
        state.check_failed = !healthy;
        if healthy {
            // Back: a fresh start for passive health too, as after a successful probe.
            state.fails = 0;
            self.begin_slow_start(id, now);
        }
        self.rebuild(now);
        true
    }

    /// Tells `id`'s algorithm that its live state changed (see [`Balancer::on_change`]).
    fn changed(&mut self, id: BackendId) {
        let backup = id.index() >= self.tiers[0].len;
        let tier = &mut self.tiers[usize::from(backup)];
        if let Some(local) = tier.local(id) {
            tier.balancer.on_change(local);
        }
    }

    /// How long `id`'s slow start lasts: its own `slow_start`, else the pool's; `None` if it
    /// has none or the algorithm does not support it.
    fn slow_start_of(&self, id: BackendId) -> Option<Nanos> {
        let own = self.states[id.index()].spec.slow_start;
        own.or(self.slow_start)
            .filter(|_| self.algorithm.supports_slow_start())
    }

    /// Starts slow start for a backend that joins or comes back (a health check calls this when
    /// a backend passes again). Does nothing if the backend has no slow start.
    pub fn begin_slow_start(&mut self, id: BackendId, now: Nanos) {
        if self.slow_start_of(id).is_none() {
            return;
        }
        let state = &mut self.states[id.index()];
        state.ramp_since = Some(now);
        if !self.ramping.contains(&id) {
            self.ramping.push(id);
        }
        self.update_ramps(now, true);
    }

    /// Moves every ramping backend along its slow start; rebuilds the algorithms' tables when
    /// a ramp moved by a step or more (or `force`).
    fn update_ramps(&mut self, now: Nanos, force: bool) {
        let mut changed = force;
        let states = &mut self.states;
        let pool_length = self.slow_start;
        self.ramping.retain(|&id| {
            let state = &mut states[id.index()];
            let since = state.ramp_since.expect("a ramping backend has a start");
            let length = state
                .spec
                .slow_start
                .or(pool_length)
                .expect("only backends with a slow start ramp");
            let ramp = slow_start_ramp(now.since(since), length);
            if ramp == RAMP_FULL || ramp.abs_diff(state.ramp) >= RAMP_STEP {
                state.ramp = ramp;
                changed = true;
            }
            let done = ramp == RAMP_FULL;
            if done {
                state.ramp_since = None;
            }
            !done
        });
        if changed {
            self.rebuild(now);
        }
    }

    /// Chooses a backend for a request: from the primaries, else from the backups. `exclude`
    /// lists backends already tried for this request (pool-wide ids).
    pub fn pick(
        &mut self,
        affinity: Option<&[u8]>,
        exclude: &[BackendId],
        now: Nanos,
    ) -> Option<Ticket> {
        if !self.ramping.is_empty() {
            self.update_ramps(now, false);
        }
        let mut local_exclude = Vec::new();
        for t in 0..self.tiers.len() {
            let tier = &mut self.tiers[t];
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
            let states = &self.states[tier.offset..tier.offset + tier.len];
            let view = Backends::with_in_flight(states, now, tier.in_flight);
            if let Some(local) = tier.balancer.pick(&ctx, &view) {
                debug_assert!(
                    states[local.index()].is_eligible(now),
                    "{local} picked while ineligible"
                );
                let id = BackendId((tier.offset + local.index()) as u32);
                return Some(self.take(t, id, now));
            }
        }
        // Quick recovery is for when nothing at all is usable, not for a request that has
        // used up the usable ones: reviving failed backends for it would send the next
        // requests to them inside their `fail_timeout`. (nginx clears the counts whenever its
        // tried-set leaves nothing; we do not, see docs/architecture.md.)
        // Nor is it for a pick held back only by `max_conns`: full backends are healthy.
        if (exclude.is_empty() || !self.states.iter().any(|s| s.is_eligible(now)))
            && !self.is_saturated(exclude, now)
        {
            let primaries = self.tiers[0].len;
            for state in &mut self.states[..primaries] {
                state.fails = 0;
            }
            for i in 0..primaries {
                self.tiers[0].balancer.on_change(BackendId(i as u32));
            }
        }
        None
    }

    /// Hands out a ticket for `preferred` (a sticky session's backend, [`crate::sticky`]) if it
    /// may take a request now — healthy, in rotation, below its `max_conns` and not in
    /// `exclude` — whatever its tier; `None` otherwise, and nothing changes. The algorithm is
    /// not asked, only told of the backend's new load.
    pub fn pick_preferred(
        &mut self,
        preferred: BackendId,
        exclude: &[BackendId],
        now: Nanos,
    ) -> Option<Ticket> {
        if !self.ramping.is_empty() {
            self.update_ramps(now, false);
        }
        let state = self.states.get(preferred.index())?;
        if exclude.contains(&preferred) || !state.is_eligible(now) || !state.has_room() {
            return None;
        }
        let tier = usize::from(preferred.index() >= self.tiers[0].len);
        Some(self.take(tier, preferred, now))
    }

    /// Gives backend `id` of tier number `tier` one more request in flight, and its ticket.
    fn take(&mut self, tier: usize, id: BackendId, now: Nanos) -> Ticket {
        let state = &mut self.states[id.index()];
        state.in_flight += 1;
        // A pick after `fail_timeout` is the probe that may bring a failed backend back.
        if now.since(state.checked) > state.spec.fail_timeout {
            state.checked = now;
        }
        let tier = &mut self.tiers[tier];
        tier.in_flight += 1;
        if let Some(local) = tier.local(id) {
            tier.balancer.on_change(local);
        }
        Ticket {
            backend: id,
            picked: now,
        }
    }

    /// Whether a [`pick`](Pool::pick) that found nothing was held back only by `max_conns`:
    /// some backend not in `exclude` is healthy and in rotation but full. Such a request may
    /// wait for room (the proxy's `queue`); otherwise there is nothing to wait for.
    pub fn is_saturated(&self, exclude: &[BackendId], now: Nanos) -> bool {
        self.states.iter().enumerate().any(|(i, s)| {
            !s.has_room() && s.is_eligible(now) && !exclude.contains(&BackendId(i as u32))
        })
    }

    /// Returns a ticket: updates in-flight, latency and passive health, then tells the
    /// algorithm.
    pub fn complete(&mut self, ticket: Ticket, outcome: Outcome, now: Nanos) {
        let latency = now.since(ticket.picked);
        self.complete_measured(ticket, outcome, latency, now);
    }

    /// [`Pool::complete`] with the latency the caller measured, for a ticket held longer than
    /// the exchange it times: a TCP session holds its ticket (and its place in the in-flight
    /// count) for its whole life, but its latency is the time to connect, as nginx stream's
    /// `least_time connect` takes it.
    pub fn complete_measured(
        &mut self,
        ticket: Ticket,
        outcome: Outcome,
        latency: Nanos,
        now: Nanos,
    ) {
        let state = &mut self.states[ticket.backend.index()];
        debug_assert!(state.in_flight > 0);
        let was_in_flight = state.in_flight > 0;
        state.in_flight = state.in_flight.saturating_sub(1);
        let tier_index = usize::from(ticket.backend.index() >= self.tiers[0].len);
        self.tiers[tier_index].in_flight -= u64::from(was_in_flight);
        let state = &mut self.states[ticket.backend.index()];
        let completion = Completion {
            outcome,
            latency,
            now,
        };
        let estimate = state.latency.map_or(self.penalty, |l| Nanos(l as u64));
        learn(state, completion.verdict(estimate), latency);
        let mut recovered = false;
        match outcome {
            // A relayed answer, whatever its status: passive health as nginx keeps it.
            Outcome::Success | Outcome::FailedAnswer => {
                if state.accessed < state.checked {
                    // The probe after `fail_timeout` succeeded: the backend is back.
                    recovered = state.spec.max_fails != 0 && state.fails >= state.spec.max_fails;
                    state.fails = 0;
                }
            }
            Outcome::Failure => {
                state.fails += 1;
                state.accessed = now;
                state.checked = now;
            }
            Outcome::Cancelled | Outcome::Abandoned => {}
        }
        if recovered {
            self.begin_slow_start(ticket.backend, now);
        }
        let tier = &mut self.tiers[tier_index];
        let local = tier.local(ticket.backend).expect("ticket from this pool");
        tier.balancer.on_change(local);
        tier.balancer.on_complete(local, &completion);
    }
}

impl Pool {
    /// Drains the backends the algorithm wants probed since the last call, as pool-wide ids,
    /// appended to `out` (primaries' wishes first, then backups'). Only probing algorithms
    /// (`prequal`) want any; the caller probes them off the request path and hands the answers
    /// to [`probed`](Pool::probed).
    pub fn take_probes(&mut self, out: &mut Vec<BackendId>) {
        let mut local = Vec::new();
        for tier in &mut self.tiers {
            local.clear();
            tier.balancer.wanted_probes(&mut local);
            let offset = tier.offset;
            let len = tier.len;
            out.extend(
                local
                    .iter()
                    .filter(|id| id.index() < len)
                    .map(|id| BackendId((offset + id.index()) as u32)),
            );
        }
    }

    /// Hands a probe's answer to the algorithm (ignored for a backend no longer there: a probe
    /// sent before a reload may answer after it).
    pub fn probed(&mut self, id: BackendId, probe: Probe, now: Nanos) {
        for tier in &mut self.tiers {
            if let Some(local) = tier.local(id) {
                tier.balancer.on_probe(local, &probe, now);
                return;
            }
        }
    }
}

/// Updates what the algorithms that read the pool's statistics learn from (`least_time`'s
/// response time and success rate, `utilization_wrr`'s requests and failures): a success's
/// latency enters the response-time average; a failure lowers the success rate, and its
/// latency enters the average only when above it — the backend took at least that long to be
/// of no use (a timeout), while a fast refusal says nothing of how long an answer takes.
fn learn(state: &mut BackendState, verdict: Verdict, latency: Nanos) {
    let v = latency.0 as f64;
    match verdict {
        Verdict::Success => {
            state.requests += 1;
            state.latency = Some(match state.latency {
                Some(avg) => LATENCY_ALPHA * v + (1.0 - LATENCY_ALPHA) * avg,
                None => v,
            });
            state.success_rate = (1.0 - LATENCY_ALPHA) * state.success_rate + LATENCY_ALPHA;
        }
        Verdict::Failure => {
            state.requests += 1;
            state.failures += 1;
            state.success_rate *= 1.0 - LATENCY_ALPHA;
            state.latency = match state.latency {
                Some(avg) if v > avg => Some(LATENCY_ALPHA * v + (1.0 - LATENCY_ALPHA) * avg),
                other => other,
            };
        }
        Verdict::Nothing => {}
    }
}

/// Envoy's slow-start factor with aggression 1 and a 10% floor, in 1/1024ths:
/// `max(0.1, max(elapsed, 1 s) / length)`, and 1 once `length` has passed.
fn slow_start_ramp(elapsed: Nanos, length: Nanos) -> u32 {
    if elapsed >= length {
        return RAMP_FULL;
    }
    let elapsed = elapsed.0.max(1_000_000_000);
    let ramp = u128::from(elapsed) * u128::from(RAMP_FULL) / u128::from(length.0.max(1));
    (ramp.min(u128::from(RAMP_FULL)) as u32).max(RAMP_MIN)
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
        Pool::new(alg, &Options::default(), &p, &b, 42)
    }

    #[test]
    fn a_replacing_pool_takes_over_what_stays_and_completes_the_old_tickets() {
        let mut old = pool(Algorithm::LeastConn, &[1, 1, 1], &[]);
        let mut tickets: Vec<Ticket> = (0..3)
            .map(|_| old.pick(None, &[], secs(1)).unwrap())
            .collect();
        let last = tickets.pop().unwrap();
        // Backend 2 fails and is out for fail_timeout.
        old.complete(last, Outcome::Failure, secs(2));
        assert!(!old.state(BackendId(2)).is_eligible(secs(2)));
        old.set_weight(BackendId(1), 7, secs(2));
        // The new pool: backend 0 goes, 1 and 2 stay (now ids 0 and 1, 2 keeps weight 1, 1
        // was configured 1 and runs at 7), and a new one comes; another algorithm.
        let specs: Vec<_> = [1, 1, 4].iter().map(|&w| BackendSpec::new(w)).collect();
        let mut new = Pool::new(Algorithm::RoundRobin, &Options::default(), &specs, &[], 7);
        new.carry_over(
            &old,
            &[Some(BackendId(1)), Some(BackendId(2)), None],
            secs(3),
        );
        assert_eq!(new.state(BackendId(0)).in_flight(), 1);
        assert_eq!(
            new.state(BackendId(0)).weight(),
            7,
            "the weight in force stays"
        );
        assert!(
            !new.state(BackendId(1)).is_eligible(secs(3)),
            "still failed"
        );
        assert_eq!(new.state(BackendId(1)).failures(), 1);
        assert_eq!(new.state(BackendId(2)).in_flight(), 0);
        assert_eq!(new.state(BackendId(2)).weight(), 4);
        // Old tickets complete in the new pool where their backend is; one whose backend left
        // is dropped with the old pool.
        let mut tickets = tickets.into_iter();
        let gone = tickets.next().unwrap();
        assert_eq!(gone.backend(), BackendId(0));
        drop(gone);
        let stays = tickets.next().unwrap();
        assert_eq!(stays.backend(), BackendId(1));
        new.complete(stays.moved_to(BackendId(0)), Outcome::Success, secs(4));
        assert_eq!(new.state(BackendId(0)).in_flight(), 0);
        assert_eq!(new.state(BackendId(0)).requests(), 1);
        assert_eq!(new.state(BackendId(0)).latency(), Some(secs(3)));
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

    fn ms(n: u64) -> Nanos {
        Nanos(n * 1_000_000)
    }

    /// A relayed 503 is a failure for learning (success rate, the failure count that
    /// `utilization_wrr`'s error rate reads) and none for passive health, as nginx has it.
    #[test]
    fn a_failed_answer_teaches_but_does_not_count_towards_max_fails() {
        let mut p = pool(Algorithm::RoundRobin, &[1], &[]);
        for k in 0..3 {
            let t = p.pick(None, &[], ms(k)).unwrap();
            p.complete(t, Outcome::FailedAnswer, ms(k + 1));
        }
        let s = p.state(BackendId(0));
        assert_eq!((s.fails(), s.requests(), s.failures()), (0, 3, 3));
        assert!(s.is_eligible(ms(4)), "max_fails 1 is not reached");
        assert!((s.success_rate() - 0.95f64.powi(3)).abs() < 1e-12);
        assert_eq!(
            s.latency(),
            None,
            "a failure faster than nothing known says nothing"
        );
    }

    /// The penalty (the timeout, 4 s by default) stands for the estimate before the first
    /// answer; then the response-time average does.
    #[test]
    fn a_client_that_waited_past_the_estimate_is_a_failure_at_that_latency() {
        let mut p = pool(Algorithm::LeastConn, &[1], &[]);
        let t = p.pick(None, &[], ms(0)).unwrap();
        p.complete(t, Outcome::Abandoned, ms(3_000));
        assert_eq!(
            p.state(BackendId(0)).requests(),
            0,
            "3 s: before the penalty"
        );
        let t = p.pick(None, &[], ms(0)).unwrap();
        p.complete(t, Outcome::Success, ms(100));
        let t = p.pick(None, &[], ms(0)).unwrap();
        p.complete(t, Outcome::Abandoned, ms(50));
        assert_eq!(
            p.state(BackendId(0)).requests(),
            1,
            "50 ms: before the estimate"
        );
        let t = p.pick(None, &[], ms(0)).unwrap();
        p.complete(t, Outcome::Abandoned, ms(4_000));
        let s = p.state(BackendId(0));
        assert_eq!((s.fails(), s.requests(), s.failures()), (0, 2, 1));
        // The average moves towards the 4 s waited: 0.05·4000 + 0.95·100 = 295 ms.
        assert_eq!(s.latency(), Some(ms(295)));
        // An attempt that ended for a reason not the backend's (our own shortage of
        // descriptors, found 5 s in) teaches nothing, however long it took.
        let t = p.pick(None, &[], ms(0)).unwrap();
        p.complete(t, Outcome::Cancelled, ms(5_000));
        let s = p.state(BackendId(0));
        assert_eq!((s.requests(), s.failures()), (2, 1));
    }

    /// `least_time` with a backend answering 503 in 1 ms: nginx's average would make it the
    /// fastest; the price of its failures makes it the slowest.
    #[test]
    fn least_time_does_not_prefer_a_backend_failing_fast() {
        let mut p = pool(Algorithm::LeastTime, &[1, 1], &[]);
        let mut to_b = 0;
        for k in 0..400 {
            let t = p.pick(None, &[], ms(k)).unwrap();
            let (outcome, took) = if t.backend() == BackendId(1) {
                to_b += 1;
                (Outcome::FailedAnswer, 1)
            } else {
                (Outcome::Success, 30)
            };
            p.complete(t, outcome, ms(k + took));
        }
        assert!(to_b < 20, "{to_b}");
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
    fn max_conns_passes_over_a_full_backend_and_saturation_says_so() {
        let full = BackendSpec {
            max_conns: 1,
            ..BackendSpec::new(1)
        };
        let mut p = Pool::new(
            Algorithm::RoundRobin,
            &Options::default(),
            &[full.clone(), full],
            &[],
            1,
        );
        let a = p.pick(None, &[], secs(1)).unwrap();
        let b = p.pick(None, &[], secs(1)).unwrap();
        assert_ne!(a.backend(), b.backend());
        assert!(
            p.pick(None, &[], secs(1)).is_none(),
            "both are at max_conns"
        );
        assert!(p.is_saturated(&[], secs(1)));
        assert!(
            !p.is_saturated(&[a.backend(), b.backend()], secs(1)),
            "tried already"
        );
        let freed = a.backend();
        p.complete(a, Outcome::Success, secs(1));
        let c = p.pick(None, &[], secs(1)).unwrap();
        assert_eq!(c.backend(), freed);
        // Being full is not a failure: nothing was counted against either backend.
        assert_eq!(p.state(BackendId(0)).fails(), 0);
        assert_eq!(p.state(BackendId(1)).fails(), 0);
        let other = b.backend();
        p.complete(b, Outcome::Failure, secs(1));
        assert!(p.pick(None, &[], secs(1)).is_none(), "one full, one failed");
        assert!(
            p.state(other).is_failed(secs(1)),
            "a pick held back by max_conns does not revive failed backends"
        );
        assert!(p.is_saturated(&[], secs(1)), "the full one may free up");
        assert!(p.is_saturated(&[other], secs(1)));
        assert!(
            !p.is_saturated(&[c.backend()], secs(1)),
            "a failed backend is not waited for"
        );
    }

    #[test]
    fn max_fails_zero_disables_passive_health() {
        let spec = BackendSpec {
            max_fails: 0,
            ..BackendSpec::new(1)
        };
        let mut p = Pool::new(
            Algorithm::RoundRobin,
            &Options::default(),
            &[spec.clone(), spec],
            &[],
            1,
        );
        for _ in 0..4 {
            let t = p.pick(None, &[], secs(1)).unwrap();
            p.complete(t, Outcome::Failure, secs(1));
        }
        assert!(p.state(BackendId(0)).is_eligible(secs(1)));
    }

    #[test]
    fn set_weights_sets_all_at_once() {
        let mut p = pool(Algorithm::DynamicWrr, &[1, 1, 1], &[1]);
        // Primaries, then the backup; one rebuild, then nginx's 5, 1, 1 sequence.
        p.set_weights(&[5, 1, 1, 9], secs(1));
        let weights: Vec<u32> = p.states().iter().map(|s| s.weight()).collect();
        assert_eq!(weights, [5, 1, 1, 9]);
        let mut seq = String::new();
        for _ in 0..7 {
            let t = p.pick(None, &[], secs(1)).unwrap();
            seq.push((b'a' + t.backend().0 as u8) as char);
            p.complete(t, Outcome::Success, secs(1));
        }
        assert_eq!(seq, "aabacaa");
        // A shorter list leaves the rest; extra weights are ignored; 0 takes a backend out.
        p.set_weights(&[0], secs(2));
        p.set_weights(&[0, 2, 2, 9, 7, 7], secs(2));
        let weights: Vec<u32> = p.states().iter().map(|s| s.weight()).collect();
        assert_eq!(weights, [0, 2, 2, 9]);
        for _ in 0..10 {
            let t = p.pick(None, &[], secs(2)).unwrap();
            assert!(matches!(t.backend().0, 1 | 2));
            p.complete(t, Outcome::Success, secs(2));
        }
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
        p.set_down(BackendId(0), true, Nanos(1));
        p.set_down(BackendId(1), true, Nanos(1));
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
    fn a_request_that_tried_every_backend_does_not_revive_the_failed_ones() {
        // Backend 0 has failed (out for fail_timeout); backend 1 is healthy but this request
        // already tried it. Nothing is left for this request, but something is usable: no
        // quick recovery, backend 0 stays out.
        let mut p = pool(Algorithm::RoundRobin, &[1, 1], &[]);
        let t = p.pick(None, &[], secs(1)).unwrap();
        assert_eq!(t.backend(), BackendId(0));
        p.complete(t, Outcome::Failure, secs(1));
        assert!(p.pick(None, &[BackendId(1)], secs(2)).is_none());
        assert_eq!(p.state(BackendId(0)).fails(), 1);
        for s in [2, 3, 4] {
            let t = p.pick(None, &[], secs(s)).unwrap();
            assert_eq!(t.backend(), BackendId(1), "at {s}s backend 0 is still out");
            p.complete(t, Outcome::Success, secs(s));
        }
    }

    #[test]
    fn a_failed_check_takes_a_backend_out_until_it_passes() {
        let mut p = pool(Algorithm::RoundRobin, &[1, 1], &[]);
        assert!(p.set_check_result(BackendId(0), false, secs(1)));
        assert!(
            !p.set_check_result(BackendId(0), false, secs(1)),
            "no change"
        );
        for _ in 0..4 {
            let t = p.pick(None, &[], secs(2)).unwrap();
            assert_eq!(t.backend(), BackendId(1));
            p.complete(t, Outcome::Success, secs(2));
        }
        assert!(p.set_check_result(BackendId(0), true, secs(3)));
        let picked: Vec<_> = (0..2)
            .map(|_| {
                let t = p.pick(None, &[], secs(3)).unwrap();
                let b = t.backend();
                p.complete(t, Outcome::Success, secs(3));
                b
            })
            .collect();
        assert!(picked.contains(&BackendId(0)));
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

    fn slow_start_pool(alg: Algorithm) -> Pool {
        let options = Options {
            slow_start: Some(secs(10)),
            ..Options::default()
        };
        let specs = [BackendSpec::new(1), BackendSpec::new(1)];
        Pool::new(alg, &options, &specs, &[], 7)
    }

    /// Picks `n` requests at `at`, each completed at once; how many went to backend 0.
    fn share_of_first(p: &mut Pool, n: usize, at: Nanos) -> usize {
        let mut first = 0;
        for _ in 0..n {
            let t = p.pick(None, &[], at).unwrap();
            first += usize::from(t.backend() == BackendId(0));
            p.complete(t, Outcome::Success, at);
        }
        first
    }

    #[test]
    fn slow_start_ramp_follows_envoys_formula() {
        let ten = secs(10);
        // max(0.1, max(t, 1 s) / 10 s), in 1/1024ths.
        assert_eq!(slow_start_ramp(Nanos(0), ten), 102);
        assert_eq!(slow_start_ramp(secs(1), ten), 102);
        assert_eq!(slow_start_ramp(secs(2), ten), 204);
        assert_eq!(slow_start_ramp(secs(5), ten), 512);
        assert_eq!(slow_start_ramp(secs(10), ten), RAMP_FULL);
        assert_eq!(slow_start_ramp(secs(60), ten), RAMP_FULL);
    }

    #[test]
    fn a_backend_marked_up_ramps_to_its_weight() {
        for alg in [
            Algorithm::WeightedRoundRobin,
            Algorithm::Random,
            Algorithm::LeastConn,
        ] {
            let mut p = slow_start_pool(alg);
            p.set_down(BackendId(0), true, secs(0));
            p.set_down(BackendId(0), false, secs(100));
            assert_eq!(p.state(BackendId(0)).ramp(), RAMP_MIN);
            // Weights 0.1 : 1 at the start, 0.5 : 1 halfway, 1 : 1 at the end.
            let start = share_of_first(&mut p, 1100, secs(100));
            let half = share_of_first(&mut p, 1500, secs(105));
            let end = share_of_first(&mut p, 1000, secs(110));
            assert!(
                start.abs_diff(100) <= 30,
                "{alg}: {start} of 1100 at the start"
            );
            assert!(half.abs_diff(500) <= 50, "{alg}: {half} of 1500 halfway");
            assert!(end.abs_diff(500) <= 50, "{alg}: {end} of 1000 at the end");
            assert_eq!(p.state(BackendId(0)).ramp(), RAMP_FULL);
            assert!(p.ramping.is_empty());
        }
    }

    #[test]
    fn a_backend_that_recovers_ramps_and_others_do_not() {
        let mut p = slow_start_pool(Algorithm::WeightedRoundRobin);
        assert_eq!(p.state(BackendId(0)).ramp(), RAMP_FULL, "no ramp at start");
        let t = p.pick(None, &[], secs(1)).unwrap();
        assert_eq!(t.backend(), BackendId(0));
        p.complete(t, Outcome::Failure, secs(1));
        // After fail_timeout the probe succeeds: the backend is back, at a tenth.
        let probe = p.pick(None, &[BackendId(1)], secs(12)).unwrap();
        p.complete(probe, Outcome::Success, secs(12));
        assert_eq!(p.state(BackendId(0)).ramp(), RAMP_MIN);
        assert_eq!(p.state(BackendId(1)).ramp(), RAMP_FULL);
        let start = share_of_first(&mut p, 1100, secs(12));
        assert!(start.abs_diff(100) <= 30, "{start} of 1100");
    }

    #[test]
    fn a_backends_own_slow_start_wins_over_the_pools() {
        let own = BackendSpec {
            slow_start: Some(secs(2)),
            ..BackendSpec::new(1)
        };
        let mut p = Pool::new(
            Algorithm::LeastConn,
            &Options::default(),
            &[own, BackendSpec::new(1)],
            &[],
            7,
        );
        // Backend 1 has none (and the pool none): marked up, it is at full weight at once.
        p.set_down(BackendId(1), true, secs(0));
        p.set_down(BackendId(1), false, secs(1));
        assert_eq!(p.state(BackendId(1)).ramp(), RAMP_FULL);
        // Backend 0 ramps over its own 2 s: half way after 1 s, full after 2 s.
        p.set_down(BackendId(0), true, secs(0));
        p.set_down(BackendId(0), false, secs(10));
        assert_eq!(p.state(BackendId(0)).ramp(), RAMP_FULL / 2);
        let t = p.pick(None, &[], secs(11)).unwrap();
        p.complete(t, Outcome::Success, secs(11));
        assert_eq!(p.state(BackendId(0)).ramp(), RAMP_FULL / 2);
        let t = p.pick(None, &[], secs(12)).unwrap();
        p.complete(t, Outcome::Success, secs(12));
        assert_eq!(p.state(BackendId(0)).ramp(), RAMP_FULL);
    }

    #[test]
    fn slow_start_is_ignored_where_the_algorithm_has_none() {
        let options = Options {
            slow_start: Some(secs(10)),
            ..Options::default()
        };
        let specs = [BackendSpec::new(1), BackendSpec::new(1)];
        let mut p = Pool::new(Algorithm::IpHash, &options, &specs, &[], 7);
        p.set_down(BackendId(0), true, secs(0));
        p.set_down(BackendId(0), false, secs(1));
        assert_eq!(p.state(BackendId(0)).ramp(), RAMP_FULL);
    }
}
