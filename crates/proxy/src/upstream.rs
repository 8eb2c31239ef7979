//! One upstream: its [`balance::Pool`], shared by every worker thread, and how one attempt
//! reaches a backend (each worker keeps its own connections, see [`crate::connections`]).
//!
//! The pool sits behind a mutex that is held only for a pick or a completion (a few hundred
//! nanoseconds, never across an await), so the algorithm sees one global sequence: weighted round
//! robin gives `a a b a c a a` however many threads serve.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use balance::{BackendId, Nanos, Outcome, Pool, Ticket};
use tokio::time::Instant;

use crate::connections::Connections;
use crate::settings::{HashKey, UpstreamSettings};

/// Why an attempt on a backend failed.
#[derive(Debug)]
pub(crate) enum AttemptError {
    /// The connection could not be made: the request never left.
    Connect(std::io::Error),
    ConnectTimeout,
    /// The connection failed after the request was (or may have been) sent, before a response
    /// head arrived.
    Reset(std::io::Error),
    /// No response head within `read_timeout`.
    ReadTimeout,
    /// The backend answered something that is not HTTP/1.x, or breaks its framing rules.
    Invalid(&'static str),
}

impl AttemptError {
    /// Whether the request may have reached the backend (and so may only be retried if that is
    /// safe).
    pub(crate) fn request_sent(&self) -> bool {
        !matches!(
            self,
            AttemptError::Connect(_) | AttemptError::ConnectTimeout
        )
    }

    /// Whether the next backend may be tried: not after an invalid answer (nginx does not by
    /// default either: the backend did respond).
    pub(crate) fn retriable(&self) -> bool {
        !matches!(self, AttemptError::Invalid(_))
    }
}

impl std::fmt::Display for AttemptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttemptError::Connect(e) => write!(f, "connect failed: {e}"),
            AttemptError::ConnectTimeout => f.write_str("connect timed out"),
            AttemptError::Reset(e) => write!(f, "connection failed before the response: {e}"),
            AttemptError::ReadTimeout => f.write_str("no response within read_timeout"),
            AttemptError::Invalid(e) => write!(f, "invalid response: {e}"),
        }
    }
}

/// A backend's state, for the demo, logs and (later) the admin API.
#[derive(Debug, Clone)]
pub struct BackendSnapshot {
    pub addr: SocketAddr,
    pub backup: bool,
    pub weight: u32,
    pub in_flight: u32,
    pub requests: u64,
    pub failures: u64,
    pub available: bool,
}

#[derive(Debug)]
pub struct Upstream {
    settings: UpstreamSettings,
    pool: Mutex<Pool>,
    /// Backend addresses by pool id: primaries, then backups (the pool's order, not the
    /// configuration's).
    addrs: Vec<SocketAddr>,
    /// Time zero of the `Nanos` handed to the pool.
    epoch: Instant,
}

impl Upstream {
    pub fn new(settings: UpstreamSettings) -> Upstream {
        let (backup, primary): (Vec<_>, Vec<_>) = settings.backends.iter().partition(|b| b.backup);
        let specs = |list: &[&crate::BackendSettings]| list.iter().map(|b| b.spec()).collect();
        let primary_specs: Vec<_> = specs(&primary);
        let backup_specs: Vec<_> = specs(&backup);
        let pool = Pool::new(
            settings.algorithm,
            &settings.options,
            &primary_specs,
            &backup_specs,
            settings.seed,
        );
        let addrs = primary.iter().chain(&backup).map(|b| b.addr).collect();
        Upstream {
            pool: Mutex::new(pool),
            addrs,
            epoch: Instant::now(),
            settings,
        }
    }

    pub fn name(&self) -> &str {
        &self.settings.name
    }

    /// The part of a request head the algorithm hashes (a header, a cookie, the URI), if any:
    /// what the request parser must locate.
    pub(crate) fn hashed_request_part(&self) -> Option<&HashKey> {
        let hashed = self.settings.algorithm.affinity() == Some(balance::Affinity::Key);
        (hashed && self.settings.hash_key != HashKey::ClientIp).then_some(&self.settings.hash_key)
    }

    pub(crate) fn settings(&self) -> &UpstreamSettings {
        &self.settings
    }

    /// A worker's own keep-alive connections to each backend, by pool id.
    pub(crate) fn worker_connections(&self) -> Vec<Connections> {
        self.addrs
            .iter()
            .map(|&addr| {
                Connections::new(
                    addr,
                    self.settings.keepalive,
                    self.settings.keepalive_timeout,
                )
            })
            .collect()
    }

    fn now(&self) -> Nanos {
        Nanos::from(self.epoch.elapsed())
    }

    fn pool(&self) -> MutexGuard<'_, Pool> {
        // A panic while holding the lock cannot leave the pool half-updated in a way that
        // matters more than stopping the proxy would, so carry on with the data.
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Attempts allowed for one request: the first and the retries.
    pub(crate) fn max_attempts(&self) -> usize {
        match self.settings.retries {
            Some(r) => r as usize + 1,
            None => self.addrs.len(),
        }
    }

    pub(crate) fn backend_addr(&self, id: BackendId) -> SocketAddr {
        self.addrs[id.index()]
    }

    pub(crate) fn pick(
        self: &Arc<Self>,
        affinity: Option<&[u8]>,
        tried: &[BackendId],
    ) -> Option<Attempt> {
        let now = self.now();
        let ticket = self.pool().pick(affinity, tried, now)?;
        Some(Attempt {
            backend: ticket.backend(),
            upstream: Arc::clone(self),
            ticket: Some(ticket),
        })
    }

    fn complete(&self, ticket: Ticket, outcome: Outcome) {
        let id = ticket.backend();
        let now = self.now();
        let mut pool = self.pool();
        pool.complete(ticket, outcome, now);
        let state = pool.state(id);
        if outcome == Outcome::Failure && state.fails() == state.spec().max_fails {
            tracing::warn!(
                upstream = %self.settings.name,
                backend = %self.backend_addr(id),
                fails = state.fails(),
                fail_timeout = ?Duration::from(state.spec().fail_timeout),
                "backend temporarily disabled"
            );
        }
    }

    /// The state of every backend, in pool order.
    pub fn snapshot(&self) -> Vec<BackendSnapshot> {
        let pool = self.pool();
        let now = self.now();
        pool.states()
            .iter()
            .enumerate()
            .map(|(i, s)| BackendSnapshot {
                addr: self.addrs[i],
                backup: i >= pool.primaries(),
                weight: s.weight(),
                in_flight: s.in_flight(),
                requests: s.requests(),
                failures: s.failures(),
                available: s.is_eligible(now),
            })
            .collect()
    }
}

/// One attempt of a request on one backend. Completes its ticket exactly once: explicitly, or
/// as cancelled when dropped (the client went away).
#[derive(Debug)]
pub(crate) struct Attempt {
    pub(crate) backend: BackendId,
    upstream: Arc<Upstream>,
    ticket: Option<Ticket>,
}

impl Attempt {
    pub(crate) fn complete(&mut self, outcome: Outcome) {
        if let Some(ticket) = self.ticket.take() {
            self.upstream.complete(ticket, outcome);
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        self.complete(Outcome::Cancelled);
    }
}
