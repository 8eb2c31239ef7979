//! One upstream: its [`balance::Pool`], shared by every worker thread, and the connections to
//! each of its backends.
//!
//! The pool sits behind a mutex that is held only for a pick or a completion (a few hundred
//! nanoseconds, never across an await), so the algorithm sees one global sequence: weighted round
//! robin gives `a a b a c a a` however many threads serve.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use balance::{BackendId, Nanos, Outcome, Pool, Ticket};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::connections::{ConnectError, Connections, Sender};
use crate::settings::UpstreamSettings;

/// Why an attempt on a backend failed.
#[derive(Debug)]
pub(crate) enum AttemptError {
    /// The connection could not be made: the request never left.
    Connect(std::io::Error),
    ConnectTimeout,
    /// The connection failed after the request was (or may have been) sent, before a response
    /// head arrived.
    Reset(hyper::Error),
    /// No response head within `read_timeout`.
    ReadTimeout,
    /// The backend answered something that is not HTTP.
    Invalid(hyper::Error),
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
    /// By pool id: primaries, then backups (the pool's order, not the configuration's).
    backends: Vec<Connections>,
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
            &primary_specs,
            &backup_specs,
            settings.seed,
        );
        let backends = primary
            .iter()
            .chain(&backup)
            .map(|b| Connections::new(b.addr, settings.keepalive, settings.keepalive_timeout))
            .collect();
        Upstream {
            pool: Mutex::new(pool),
            backends,
            epoch: Instant::now(),
            settings,
        }
    }

    pub fn name(&self) -> &str {
        &self.settings.name
    }

    pub(crate) fn settings(&self) -> &UpstreamSettings {
        &self.settings
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
            None => self.backends.len(),
        }
    }

    pub(crate) fn backend_addr(&self, id: BackendId) -> SocketAddr {
        self.backends[id.index()].addr()
    }

    pub(crate) fn pick(
        self: &Arc<Self>,
        affinity: Option<&[u8]>,
        tried: &[BackendId],
    ) -> Option<Attempt> {
        let ticket = self.pool().pick(affinity, tried, self.now())?;
        Some(Attempt {
            backend: ticket.backend(),
            upstream: Arc::clone(self),
            ticket: Some(ticket),
        })
    }

    fn complete(&self, ticket: Ticket, outcome: Outcome) {
        let id = ticket.backend();
        let mut pool = self.pool();
        let now = self.now();
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

    /// Sends `request` to backend `id` on a kept-alive connection or a new one, and waits for
    /// the response head. On success the connection travels with the response, to be reused
    /// once the body has been read.
    pub(crate) async fn send(
        &self,
        id: BackendId,
        mut request: Request<Full<Bytes>>,
    ) -> Result<(Response<Incoming>, Sender), AttemptError> {
        let conns = &self.backends[id.index()];
        loop {
            let (mut sender, reused) = match conns.take_idle() {
                Some(sender) => (sender, true),
                None => {
                    let sender = conns.connect(self.settings.connect_timeout).await.map_err(
                        |e| match e {
                            ConnectError::Io(e) => AttemptError::Connect(e),
                            ConnectError::Timeout => AttemptError::ConnectTimeout,
                        },
                    )?;
                    (sender, false)
                }
            };
            if reused && sender.ready().await.is_err() {
                continue;
            }
            let sent =
                tokio::time::timeout(self.settings.read_timeout, sender.try_send_request(request))
                    .await;
            match sent {
                Err(_) => return Err(AttemptError::ReadTimeout),
                Ok(Ok(response)) => return Ok((response, sender)),
                Ok(Err(mut e)) => match e.take_message() {
                    // A kept-alive connection closed before the request left: try another.
                    Some(unsent) if reused => request = unsent,
                    _ => {
                        let e = e.into_error();
                        return Err(if e.is_parse() {
                            AttemptError::Invalid(e)
                        } else {
                            AttemptError::Reset(e)
                        });
                    }
                },
            }
        }
    }

    /// Returns a connection whose response was read to the end.
    pub(crate) fn reuse(&self, id: BackendId, sender: Sender) {
        self.backends[id.index()].put_idle(sender);
    }

    /// The state of every backend, in pool order.
    pub fn snapshot(&self) -> Vec<BackendSnapshot> {
        let pool = self.pool();
        let now = self.now();
        pool.states()
            .iter()
            .enumerate()
            .map(|(i, s)| BackendSnapshot {
                addr: self.backends[i].addr(),
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
    pub(crate) fn upstream(&self) -> &Arc<Upstream> {
        &self.upstream
    }

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
