//! The interface every balancing algorithm implements, and what it is told about a request.

use std::fmt;

use crate::backend::{BackendId, Backends, Nanos};

/// What an algorithm knows about the request it is choosing for.
#[derive(Debug, Clone, Copy)]
pub struct PickCtx<'a> {
    /// The raw key the proxy extracted for hash algorithms: the client address octets (4 bytes
    /// for IPv4, 16 for IPv6), or a header, cookie or URI. Each hash algorithm hashes it its own
    /// way, so algorithms never parse HTTP.
    pub affinity: Option<&'a [u8]>,
    /// Backends already tried for this request: a retry must not choose them again.
    pub exclude: &'a [BackendId],
    pub now: Nanos,
}

impl<'a> PickCtx<'a> {
    pub fn new(now: Nanos) -> PickCtx<'a> {
        PickCtx {
            affinity: None,
            exclude: &[],
            now,
        }
    }

    /// Eligible by health and not yet tried for this request.
    #[inline]
    pub fn usable(&self, id: BackendId, backends: &Backends<'_>) -> bool {
        backends.is_eligible(id) && !self.exclude.contains(&id)
    }
}

/// How an attempt on a backend ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The backend answered (whatever the status).
    Success,
    /// Connect error, timeout, reset or an unparsable answer: counts towards `max_fails`.
    Failure,
    /// No verdict on the backend: the attempt ended for a reason that is not the backend's
    /// (see [`crate::retry`]: our own shortage of descriptors, the request's own deadline), or
    /// the client went away while the answer's body was being relayed.
    Cancelled,
    /// The client went away while the backend had not answered yet. No verdict for passive
    /// health (as [`Outcome::Cancelled`]), but the load-aware algorithms learn from a client
    /// that waited longer than they expected the backend to take: see
    /// [`Completion::verdict`].
    Abandoned,
    /// The backend answered, with a status the upstream counts as a failure
    /// ([`FailureStatuses`](crate::FailureStatuses), `failure_statuses`), and the answer was
    /// relayed: a failure for what the load-aware algorithms learn (success rate, error rate),
    /// but, as a relayed 5xx in nginx, not for `max_fails` — passive health takes it as it
    /// takes [`Outcome::Success`]. (A status that moved the request on, `next_upstream`,
    /// completes as [`Outcome::Failure`].)
    FailedAnswer,
}

/// What the load-aware algorithms (`latency`, `p2c_ewma`, `least_time`, `utilization_wrr`'s
/// error rate) learn from a completion: see [`Completion::verdict`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// An answer that counts, at its latency.
    Success,
    /// A failure, observed at its latency: the backend took at least this long to be of no
    /// use.
    Failure,
    /// Nothing to learn.
    Nothing,
}

/// What an algorithm is told when a request it routed completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub outcome: Outcome,
    /// From pick to completion.
    pub latency: Nanos,
    pub now: Nanos,
}

/// What a backend said about itself when probed (`GET /probe`, DESIGN.md §2 "Prequal"): its
/// requests in flight and its latency estimate at that load (Prequal, NSDI 2024, §3; the
/// server side is [`RifLatency`](crate::algorithms::RifLatency)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// Requests in flight on the backend when it answered (in service and queued).
    pub rif: u32,
    /// The backend's estimate of a request's latency at that `rif`.
    pub latency: Nanos,
}

impl Completion {
    /// What a load-aware algorithm learns from this completion, given its current `estimate`
    /// of the backend's latency (before it has one, the penalty a failure costs, the timeout).
    ///
    /// An answer the upstream counts as a failure ([`Outcome::FailedAnswer`]) and a failure
    /// of the attempt (a connect error, a reset, no answer within `read_timeout`) are failures
    /// at their real latency. A client that gave up is no verdict on the backend only while it
    /// gave up before the backend was due: one that waited `estimate` or longer has seen
    /// the backend take at least that long, which is what a timeout says. Seed 002 (§V)
    /// prices a failure, timeouts included, at the penalty `p` (its 4 s timeout), and its
    /// clients gave up at that timeout; were those abandoned requests no verdict, the
    /// backend that made its clients wait longest would be the one whose success rate never
    /// fell, and the penalty would never act. A client that leaves quickly says nothing of
    /// the backend and stays no verdict.
    pub fn verdict(&self, estimate: Nanos) -> Verdict {
        match self.outcome {
            Outcome::Success => Verdict::Success,
            Outcome::Failure | Outcome::FailedAnswer => Verdict::Failure,
            Outcome::Abandoned if self.latency >= estimate => Verdict::Failure,
            Outcome::Abandoned | Outcome::Cancelled => Verdict::Nothing,
        }
    }
}

/// A balancing algorithm. It chooses; [`Pool`](crate::Pool) keeps the books.
///
/// Implementations own whatever derived state they need (cursors, smooth-WRR weights, rings,
/// seeded generators) and rebuild it in [`rebuild`](Balancer::rebuild), off the hot path.
pub trait Balancer: Send + fmt::Debug {
    /// Membership or weights changed; also called once before the first pick.
    fn rebuild(&mut self, backends: &Backends<'_>);

    /// Choose a backend that is eligible and not excluded, or `None` if there is none.
    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId>;

    /// A request this algorithm routed to `id` completed.
    fn on_complete(&mut self, _id: BackendId, _c: &Completion) {}

    /// The pool changed `id`'s live state (in flight, passive health, marked down or up)
    /// outside a [`rebuild`](Balancer::rebuild). An algorithm that keeps an index over the
    /// backends looks at `id` again before its next pick; the others need not listen.
    fn on_change(&mut self, _id: BackendId) {}

    /// Backends this algorithm wants probed (off the request path), appended to `out`. Only
    /// probing algorithms (`prequal`) want any; the caller sends the probes and hands each
    /// answer to [`on_probe`](Balancer::on_probe). A probe that is lost or times out is simply
    /// never answered.
    fn wanted_probes(&mut self, _out: &mut Vec<BackendId>) {}

    /// A probe of `id` answered at `now`.
    fn on_probe(&mut self, _id: BackendId, _probe: &Probe, _now: Nanos) {}
}
