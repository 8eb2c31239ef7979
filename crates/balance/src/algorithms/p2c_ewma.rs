//! `p2c_ewma`: power of two choices on peak EWMA latency, as Finagle's
//! `com.twitter.finagle.loadbalancer.PeakEwma` (`Metric.observe`/`get`) and tower's
//! `load::peak_ewma` (which Linkerd2-proxy's balancer uses) measure load.
//!
//! Each backend has a `cost`, an estimate of its round-trip time that is quick to rise and
//! slow to fall. A completion at `now` with round-trip `rtt` first computes
//! `w = exp(−Δt/τ)`, Δt the time since the cost was last touched and τ = 10 s; an `rtt` above
//! the cost replaces it (the peak), otherwise `cost = cost·w + rtt·(1 − w)`. Reading the load
//! first decays the cost the same way towards zero (an observation of 0, as Finagle's `get`
//! and tower's `load` do, which also moves the time stamp), then gives
//! `load = cost · (in_flight + 1)`; a backend with no cost yet (never completed a request) but
//! with requests in flight gets Finagle's penalty instead, so it receives one probe at a time
//! until its first answer.
//!
//! Failures (deliberate difference from Finagle and tower, which leave failures to failure
//! accrual and outlier detection): a fast 503 observed only by its round-trip would make a
//! failing backend the cheapest. So each backend also keeps a success rate `s`, moved by
//! every completion with weight α = 0.05 (the pool's smoothing) and drifting back towards 1
//! with the cost's lifetime τ whenever it is read, as the cost drifts towards 0 — a backend
//! not chosen for a while is given another chance. The load becomes
//! `(cost + p·(1/s − 1)) · (in_flight + 1)`, seed 002's price of failures (§V: `1/s − 1`
//! expected retries, each costing the penalty `p`, the upstream's `read_timeout` unless
//! `penalty` is given). What counts as a failure is [`Completion::verdict`]'s rule: an answer
//! in `failure_statuses`, a failed attempt, a client that gave up after waiting longer than
//! the cost; each is also observed at its real latency, so a timeout raises the cost (a peak).
//! A client that gave up sooner is not observed at all.
//!
//! Each pick draws two different usable backends at random, by weight as nginx's `random two`
//! does (uniformly when the weights are equal, as in Finagle and tower, which have no weights),
//! and sends the request to the one with the lower load per unit of weight (the slow-start
//! share); with one usable backend, that one. Drawing by weight matters: with uniform draws a
//! backend can win at most the pairs it is drawn into, so a heavy backend (weight 6 of 8) could
//! never reach its share. Time comes only from `PickCtx::now` and `Completion::now`.

use crate::algorithms::Random;
use crate::backend::{BackendId, Backends, Nanos};
use crate::balancer::{Balancer, Completion, PickCtx, Verdict};

/// τ, the cost's mean lifetime: after τ an old peak has decayed to 1/e (Finagle's and
/// Linkerd's default decay time, 10 s).
const TAU_NANOS: f64 = 10e9;

/// The load of a backend that has requests in flight but no round-trip time yet: Finagle's
/// `Long.MaxValue >> 16` (about 39 hours in nanoseconds), large enough that any backend with a
/// measured cost is preferred, small enough that adding the in-flight count still orders two
/// such backends.
const PENALTY: f64 = (i64::MAX >> 16) as f64;

/// How much one completion moves the success rate (the pool's smoothing, nginx's 0.05).
const SUCCESS_ALPHA: f64 = 0.05;

/// One backend's peak EWMA, and its success rate.
#[derive(Debug, Clone, Copy)]
struct PeakEwma {
    /// Round-trip estimate in nanoseconds; 0 until the first completion.
    cost: f64,
    /// Recent share of completions that were not failures, in (0, 1].
    success: f64,
    /// When `cost` and `success` were last updated or decayed.
    stamp: Nanos,
}

impl PeakEwma {
    fn fresh(now: Nanos) -> PeakEwma {
        PeakEwma {
            cost: 0.0,
            success: 1.0,
            stamp: now,
        }
    }

    /// Decays the cost towards `rtt` (the peak: replaced by it if above) and the success
    /// rate's deficit towards 0.
    fn observe(&mut self, rtt: f64, now: Nanos) {
        let w = (-(now.since(self.stamp).0 as f64) / TAU_NANOS).exp();
        self.cost = if rtt > self.cost {
            rtt
        } else {
            self.cost * w + rtt * (1.0 - w)
        };
        self.success = 1.0 - (1.0 - self.success) * w;
        self.stamp = self.stamp.max(now);
    }

    /// A completion: its round trip, and whether it failed.
    fn complete(&mut self, rtt: f64, failed: bool, now: Nanos) {
        self.observe(rtt, now);
        let ok = if failed { 0.0 } else { 1.0 };
        // Floored so that `1/s` stays finite: a backend failing every time weighs its penalty
        // a million times, and is still chosen when it is the only one.
        self.success = (self.success + SUCCESS_ALPHA * (ok - self.success)).max(1e-6);
    }

    fn load(&mut self, in_flight: u32, penalty: f64, now: Nanos) -> f64 {
        self.observe(0.0, now);
        if self.cost == 0.0 && in_flight != 0 {
            PENALTY + f64::from(in_flight)
        } else {
            let cost = self.cost + penalty * (1.0 / self.success - 1.0);
            cost * (f64::from(in_flight) + 1.0)
        }
    }
}

#[derive(Debug)]
pub struct P2cEwma {
    /// The two draws, by weight (slow-start share).
    draws: Random,
    peaks: Vec<PeakEwma>,
    /// `p`, what a failure costs, in nanoseconds.
    penalty: f64,
}

impl P2cEwma {
    /// `penalty`: what a failure costs (`Options::penalty`).
    pub fn new(penalty: Nanos, seed: u64) -> P2cEwma {
        P2cEwma {
            draws: Random::new(seed),
            peaks: Vec::new(),
            penalty: penalty.0 as f64,
        }
    }
}

impl Balancer for P2cEwma {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        self.draws.rebuild(backends);
        if self.peaks.len() != backends.len() {
            self.peaks = vec![PeakEwma::fresh(backends.now()); backends.len()];
        }
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        let a = self.draws.draw(ctx, backends, None)?;
        let Some(b) = self.draws.draw(ctx, backends, Some(a)) else {
            return Some(a);
        };
        let p = self.penalty;
        let load_a = self.peaks[a.index()].load(backends.in_flight(a), p, ctx.now);
        let load_b = self.peaks[b.index()].load(backends.in_flight(b), p, ctx.now);
        // load_b / share_b < load_a / share_a, cross-multiplied; a tie keeps the first drawn.
        let share = |id: BackendId| backends.share(id) as f64;
        Some(if load_b * share(a) < load_a * share(b) {
            b
        } else {
            a
        })
    }

    fn on_complete(&mut self, id: BackendId, c: &Completion) {
        let Some(peak) = self.peaks.get_mut(id.index()) else {
            return;
        };
        // Before its first answer a backend's estimate is what a failure costs, the timeout.
        let estimate = if peak.cost > 0.0 {
            peak.cost
        } else {
            self.penalty
        };
        let failed = match c.verdict(Nanos(estimate as u64)) {
            Verdict::Success => false,
            Verdict::Failure => true,
            Verdict::Nothing => return,
        };
        peak.complete(c.latency.0 as f64, failed, c.now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testing::Harness;
    use crate::balancer::Outcome;

    const MS: u64 = 1_000_000;
    const SEC: u64 = 1_000_000_000;

    fn done(h: &mut Harness<P2cEwma>, i: u32, rtt_ms: u64, at: Nanos) {
        let c = Completion {
            outcome: Outcome::Success,
            latency: Nanos(rtt_ms * MS),
            now: at,
        };
        h.balancer.on_complete(BackendId(i), &c);
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn cost_after_a_sequence_of_rtts() {
        // τ = 10 s, cost 0 at 0.
        //   1 s, 100 ms: above the cost -> 100 ms (the peak).
        //   6 s, 20 ms: w = e^-0.5 = 0.60653066; 100·w + 20·(1 − w) = 68.5224528 ms.
        //   6 s, 300 ms: a peak again -> 300 ms.
        //   read at 16 s with 2 in flight: 300·e^-1 = 110.3638324 ms, load ×3 = 331.0914971 ms.
        // (e^x from a calculator; no code of ours involved.)
        let mut p = PeakEwma::fresh(Nanos::ZERO);
        p.observe((100 * MS) as f64, Nanos(SEC));
        assert_eq!(p.cost, 100e6);
        p.observe((20 * MS) as f64, Nanos(6 * SEC));
        assert!(close(p.cost, 68_522_452.777), "{}", p.cost);
        p.observe((300 * MS) as f64, Nanos(6 * SEC));
        assert_eq!(p.cost, 300e6);
        let load = p.load(2, 4e9, Nanos(16 * SEC));
        assert!(close(load, 331_091_497.054), "{load}");
        assert!(close(p.cost, 110_363_832.351), "reading decays the cost");
    }

    #[test]
    fn unknown_backend_with_pending_work_is_penalised() {
        // No cost and nothing in flight: load 0, the most attractive (it gets a probe). No cost
        // but 1 in flight: Finagle's penalty + 1 = 140737488355328, above any measured load.
        let mut p = PeakEwma::fresh(Nanos::ZERO);
        assert_eq!(p.load(0, 4e9, Nanos(SEC)), 0.0);
        assert_eq!(p.load(1, 4e9, Nanos(SEC)), 140_737_488_355_328.0);
        // In the balancer: a has no cost and one request in flight; b has answered in 5 s and
        // holds 3: b's load 5 s · 4 = 2e10 ns is far below the penalty, so b wins every time.
        let mut h = Harness::new(&[1, 1], P2cEwma::new(Nanos(4 * SEC), 3));
        done(&mut h, 1, 5000, Nanos::ZERO);
        h.now = Nanos(1);
        h.states[0].in_flight = 1;
        h.states[1].in_flight = 3;
        for _ in 0..20 {
            assert_eq!(h.pick_excluding(&[]), Some(BackendId(1)));
        }
    }

    #[test]
    fn the_lower_cost_wins_and_weights_scale_it() {
        // Two backends: both are always drawn. a answered in 30 ms, b in 10 ms: b wins.
        let mut h = Harness::new(&[1, 1], P2cEwma::new(Nanos(4 * SEC), 1));
        done(&mut h, 0, 30, Nanos::ZERO);
        done(&mut h, 1, 10, Nanos::ZERO);
        for _ in 0..20 {
            assert_eq!(h.pick_excluding(&[]), Some(BackendId(1)));
        }
        // With a at weight 4: 30/4 = 7.5 per unit of weight against 10: a wins.
        let mut h = Harness::new(&[4, 1], P2cEwma::new(Nanos(4 * SEC), 1));
        done(&mut h, 0, 30, Nanos::ZERO);
        done(&mut h, 1, 10, Nanos::ZERO);
        for _ in 0..20 {
            assert_eq!(h.pick_excluding(&[]), Some(BackendId(0)));
        }
    }

    #[test]
    fn pending_requests_multiply_the_cost() {
        // a 10 ms with 3 in flight (40), b 30 ms idle (30): b wins; with a at 1 in flight
        // (20), a wins. Picks happen within microseconds of the completions, so decay is nil.
        let mut h = Harness::new(&[1, 1], P2cEwma::new(Nanos(4 * SEC), 2));
        done(&mut h, 0, 10, Nanos::ZERO);
        done(&mut h, 1, 30, Nanos::ZERO);
        h.states[0].in_flight = 3;
        assert_eq!(h.pick_excluding(&[]), Some(BackendId(1)));
        h.states[0].in_flight = 1;
        assert_eq!(h.pick_excluding(&[]), Some(BackendId(0)));
    }

    #[test]
    fn a_slow_backend_receives_less() {
        // Four backends, one answering in 50 ms and three in 10 ms (fed back after each pick):
        // the slow one loses every comparison it is drawn into.
        let mut h = Harness::new(&[1, 1, 1, 1], P2cEwma::new(Nanos(4 * SEC), 4));
        let mut counts = [0u32; 4];
        for k in 0..4000u64 {
            h.now = Nanos(k * MS);
            let id = h.pick().unwrap();
            counts[id.index()] += 1;
            h.states[id.index()].in_flight -= 1;
            let rtt = if id == BackendId(3) { 50 } else { 10 };
            let at = h.now;
            done(&mut h, id.0, rtt, at);
        }
        // After its first answer d is drawn in half of all pairs and loses all of them.
        assert!(counts[3] < 10, "{counts:?}");
    }

    fn end(h: &mut Harness<P2cEwma>, i: u32, outcome: Outcome, rtt_ms: u64) {
        let c = Completion {
            outcome,
            latency: Nanos(rtt_ms * MS),
            now: h.now,
        };
        h.balancer.on_complete(BackendId(i), &c);
    }

    /// Feeds back every pick: backend 1 as `b` says, the others a success at 20 ms; returns
    /// how many of `n` picks went to backend 1.
    fn share_of_b(h: &mut Harness<P2cEwma>, n: u64, b: (Outcome, u64)) -> u32 {
        let mut to_b = 0;
        for k in 0..n {
            h.now = Nanos(k * MS);
            let id = h.pick().unwrap();
            h.states[id.index()].in_flight -= 1;
            let (outcome, ms) = if id == BackendId(1) {
                to_b += 1;
                b
            } else {
                (Outcome::Success, 20)
            };
            end(h, id.0, outcome, ms);
        }
        to_b
    }

    #[test]
    fn a_backend_answering_failures_fast_is_not_preferred() {
        // b answers 503 in 1 ms, the others 200 in 20 ms. Counted by round trip alone, b would
        // win every pair it is drawn into (half of the 3000 picks and more). Each failure
        // costs the penalty (4 s) times 1/s − 1: after its first few answers b loses.
        let mut h = Harness::new(&[1, 1, 1], P2cEwma::new(Nanos(4 * SEC), 5));
        let b = share_of_b(&mut h, 3000, (Outcome::FailedAnswer, 1));
        assert!(b < 30, "{b}");
        // The same answers as successes: b takes most.
        let mut h = Harness::new(&[1, 1, 1], P2cEwma::new(Nanos(4 * SEC), 5));
        let b = share_of_b(&mut h, 3000, (Outcome::Success, 1));
        assert!(b > 1500, "{b}");
    }

    #[test]
    fn a_backend_whose_requests_are_abandoned_at_the_timeout_loses_weight() {
        // b's clients give up after 4 s, longer than any cost: failures at 4 s.
        let mut h = Harness::new(&[1, 1, 1], P2cEwma::new(Nanos(4 * SEC), 6));
        let b = share_of_b(&mut h, 3000, (Outcome::Abandoned, 4000));
        assert!(b < 30, "{b}");
        // A client that leaves after 1 ms says nothing: b keeps its first answer's cost.
        let mut h = Harness::new(&[1, 1, 1], P2cEwma::new(Nanos(4 * SEC), 6));
        done(&mut h, 1, 10, Nanos::ZERO);
        let b = share_of_b(&mut h, 3000, (Outcome::Abandoned, 1));
        assert!(b > 1000, "{b}");
    }

    #[test]
    fn draws_only_usable_backends() {
        let mut h = Harness::new(&[1, 1, 1, 1], P2cEwma::new(Nanos(4 * SEC), 8));
        h.mark_down(0);
        h.mark_down(2);
        for _ in 0..50 {
            let id = h.pick_excluding(&[BackendId(1)]).unwrap();
            assert_eq!(id, BackendId(3));
        }
        h.mark_down(3);
        assert_eq!(h.pick_excluding(&[BackendId(1)]), None);
        assert_eq!(h.pick_excluding(&[]), Some(BackendId(1)));
    }
}
