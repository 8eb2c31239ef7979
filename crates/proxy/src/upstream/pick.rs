//! The pool in force and its generation: a pick hands out an [`Attempt`], whose ticket
//! completes in the pool where its backend still is, however the upstream changed meanwhile.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use balance::queue::{self, Admission, Waiter as _};
use balance::{Outcome, StickyId, Ticket};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::Upstream;
use super::state::{Unpicked, Waiter, excluded, lock};
use crate::settings::UpstreamSettings;

impl Upstream {
    /// A backend for a request, other than those it `tried`. When every backend left is at
    /// its `max_conns`, the request waits in the upstream's queue (if `settings.queue` has
    /// room) up to `settings.queue_timeout`, or until `client` leaves (when `watch_client`):
    /// a backend that frees up is handed, under the pool lock, to the oldest waiting request
    /// that may use it (HAProxy's pending-connection queue), so no newcomer takes it first and
    /// no wake-up is lost. `sticky`: the backend the request's sticky cookie names, taken
    /// first while it can take the request ([`balance::sticky`]'s rule), before the algorithm
    /// and the queue are asked.
    pub(crate) async fn pick(
        self: &Arc<Self>,
        settings: &UpstreamSettings,
        affinity: Option<&[u8]>,
        sticky: Option<StickyId>,
        tried: &[SocketAddr],
        client: Option<&TcpStream>,
        watch_client: bool,
    ) -> Result<Attempt, Unpicked> {
        let handed = {
            let now = self.now();
            let mut st = lock(&self.state);
            if tried.is_empty() {
                // A request's first pick: it earns its share of the retry budget.
                if let Some((_, budget)) = &mut st.budget {
                    budget.deposit(now);
                }
            }
            let exclude = excluded(&st.members, tried);
            let preferred = sticky.and_then(|id| st.sticky.as_ref()?.backend(id));
            if let Some(ticket) = preferred.and_then(|p| st.pool.pick_preferred(p, &exclude, now)) {
                let addr = st.members[ticket.backend().index()].addr;
                return Ok(self.attempt(st.generation, addr, ticket));
            }
            st.waiting.retain(|w| !w.left());
            let waiting = st.waiting.len();
            match queue::admit(
                &mut st.pool,
                affinity,
                &exclude,
                now,
                waiting,
                settings.queue,
            ) {
                Admission::Picked(ticket) => {
                    let addr = st.members[ticket.backend().index()].addr;
                    return Ok(self.attempt(st.generation, addr, ticket));
                }
                Admission::NoBackend => return Err(Unpicked::NoBackend),
                Admission::QueueFull => {
                    self.queued.store(waiting, Ordering::Release);
                    return Err(Unpicked::QueueFull);
                }
                Admission::Wait => {}
            }
            let (to, handed) = oneshot::channel();
            st.waiting.push_back(Waiter {
                affinity: affinity.map(<[u8]>::to_vec),
                tried: tried.to_vec(),
                to,
            });
            self.queued.store(st.waiting.len(), Ordering::Release);
            handed
        };
        // The wait's state lives on the heap: it would otherwise make every connection's
        // task larger for a path most requests never take.
        Box::pin(self.wait_in_queue(handed, settings.queue_timeout, client, watch_client)).await
    }

    pub(super) fn attempt(
        self: &Arc<Self>,
        generation: u64,
        addr: SocketAddr,
        ticket: Ticket,
    ) -> Attempt {
        self.picked();
        Attempt {
            addr,
            generation,
            upstream: Arc::clone(self),
            ticket: Some(ticket),
            relayed: Outcome::Success,
        }
    }

    pub(super) fn complete(
        &self,
        generation: u64,
        addr: SocketAddr,
        ticket: Ticket,
        outcome: Outcome,
    ) {
        self.complete_measured(generation, addr, ticket, outcome, None);
    }

    /// Completes `ticket`; `latency`: what to record instead of the time since the pick.
    pub(super) fn complete_measured(
        &self,
        generation: u64,
        addr: SocketAddr,
        ticket: Ticket,
        outcome: Outcome,
        latency: Option<Duration>,
    ) {
        let now = self.now();
        let disabled = {
            let mut st = lock(&self.state);
            // A ticket of an older pool completes in this one where its backend still is (its
            // request was carried over); if its backend left since, with the pool it came from.
            let ticket = if generation == st.generation {
                Some(ticket)
            } else {
                st.position(addr)
                    .filter(|id| st.members[id.index()].since <= generation)
                    .map(|id| ticket.moved_to(id))
            };
            ticket.and_then(|ticket| {
                let id = ticket.backend();
                match latency {
                    Some(latency) => {
                        st.pool
                            .complete_measured(ticket, outcome, latency.into(), now)
                    }
                    None => st.pool.complete(ticket, outcome, now),
                }
                let state = st.pool.state(id);
                (outcome == Outcome::Failure && state.fails() == state.spec().max_fails)
                    .then(|| (state.fails(), state.spec().fail_timeout))
            })
        };
        self.serve_waiting();
        // Logged once the lock is released: a slow log sink must not hold up every worker.
        if let Some((fails, fail_timeout)) = disabled {
            tracing::warn!(
                upstream = %self.name(),
                backend = %addr,
                fails,
                fail_timeout = ?Duration::from(fail_timeout),
                "backend temporarily disabled"
            );
        }
    }
}

/// One attempt of a request on one backend. Completes its ticket exactly once: explicitly, or
/// as cancelled when dropped (the client went away).
#[derive(Debug)]
pub(crate) struct Attempt {
    pub(crate) addr: SocketAddr,
    generation: u64,
    upstream: Arc<Upstream>,
    ticket: Option<Ticket>,
    /// What [`Outcome::Success`] completes as: the backend's answer as the upstream's
    /// `failure_statuses` classes it ([`Attempt::answered`]), `Success` until one came.
    relayed: Outcome,
}

impl Attempt {
    /// The backend answered with `status`, and the answer is to be relayed: from now on the
    /// attempt's [`Outcome::Success`] (the relay done) completes as `failure_statuses` says
    /// ([`balance::FailureStatuses::outcome`]: `FailedAnswer` for a 503, by default), so that
    /// the load-aware algorithms learn of a failing backend without passive health counting
    /// it. Every relay path keeps completing with `Success`; only here is the status known.
    pub(crate) fn answered(&mut self, status: u16, failures: balance::FailureStatuses) {
        self.relayed = failures.outcome(status);
    }

    /// The name of the upstream the backend was picked from.
    pub(crate) fn upstream_name(&self) -> &str {
        self.upstream.name()
    }

    pub(crate) fn complete(&mut self, outcome: Outcome) {
        let outcome = self.relayed_as(outcome);
        if let Some(ticket) = self.ticket.take() {
            self.upstream
                .complete(self.generation, self.addr, ticket, outcome);
        }
    }

    /// Completes with `latency` as the backend's time, not the time since the pick (see
    /// [`balance::Pool::complete_measured`]).
    pub(crate) fn complete_measured(&mut self, outcome: Outcome, latency: Duration) {
        let outcome = self.relayed_as(outcome);
        if let Some(ticket) = self.ticket.take() {
            self.upstream.complete_measured(
                self.generation,
                self.addr,
                ticket,
                outcome,
                Some(latency),
            );
        }
    }
}

impl Attempt {
    fn relayed_as(&self, outcome: Outcome) -> Outcome {
        if outcome == Outcome::Success {
            self.relayed
        } else {
            outcome
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        self.complete(Outcome::Cancelled);
    }
}
