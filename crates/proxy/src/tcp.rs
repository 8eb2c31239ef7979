//! TCP (L4) mode: a client connection balanced once, as a whole, and relayed byte for byte
//! both ways (nginx's `stream` proxy, HAProxy's `mode tcp`).
//!
//! The pick is the upstream's algorithm with the client address as the affinity key, and its
//! ticket is held for the session's life, so `least_conn` and the other load-aware algorithms
//! count open sessions. A connect that fails or times out is classified by
//! [`balance::retry::decide`] like an HTTP attempt's — nothing was sent, so the next backend
//! is tried, up to the upstream's attempts — and counts against the backend's passive health;
//! a session that was connected is a success whatever its protocol does later (HAProxy's
//! `observe layer4`). The latency recorded is the time to connect (nginx stream's
//! `least_time connect`), not the session's length.
//!
//! The session is a [`crate::tunnel`], as an upgraded HTTP connection is: each direction is
//! copied on its own, so a client that shuts its sending side down (a half-close) has its end
//! passed on to the backend while the answer still flows back; the session ends when both
//! directions have ended, either fails, or nothing moved either way for `idle_timeout`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use balance::{Attempts, Next, Outcome, Picked, Replay};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::affinity::AffinityKey;
use crate::answers::CLIENT_CLOSED;
use crate::connections::{BackendConn, Connections};
use crate::listener::WorkerListener;
use crate::record::{ClientProtocol, Fate, Line, Record};
use crate::tunnel::{self, Moved, RelayEnd};
use crate::upstream::{Attempt, Unpicked};

/// The status a session's end is logged and counted with, nginx stream's `$status`: 200 for
/// a session relayed (however it ended), 502 when no backend could be picked or reached, 503
/// when every backend was at `max_conns` and the queue had no room or time, 499 for a client
/// that left while its connection waited in the queue.
fn status(fate: Fate) -> u16 {
    match fate {
        // nginx stream's access module: NGX_STREAM_FORBIDDEN.
        Fate::NotAdmitted(_) => 403,
        Fate::Unpicked(Unpicked::NoBackend) => 502,
        Fate::Unpicked(Unpicked::ClientGone) => CLIENT_CLOSED,
        Fate::Unpicked(Unpicked::QueueFull | Unpicked::QueueTimeout) => 503,
        _ => 200,
    }
}

/// Serves one client connection in TCP mode until the session ends.
pub(crate) async fn serve(
    mut client: TcpStream,
    peer: SocketAddr,
    listener: Arc<WorkerListener>,
    permit: OwnedSemaphorePermit,
) {
    let mut session = Session {
        listener: &listener,
        peer,
        time: SystemTime::now(),
        started: Instant::now(),
        tried: Attempts::default(),
        connect_time: None,
        moved: Moved::default(),
        end: None,
    };
    // nginx stream's `allow` / `deny` (ngx_stream_access_module): a client the list denies is
    // closed before anything is read or any backend picked.
    if let Some(access) = &listener.ctx.settings.access
        && !access.allows(peer.ip())
    {
        drop(permit);
        session.end = Some(Fate::NotAdmitted(crate::admission::Reason::Access));
        return;
    }
    let fate = match connect(&mut client, peer, &listener, &mut session.tried).await {
        Ok((mut backend, mut attempt, connect_time)) => {
            session.connect_time = Some(connect_time);
            // Ended by a stop past `shutdown_timeout`, the task is dropped here: `Session`
            // logs it as `shutdown`, and the attempt completes as cancelled.
            let idle_timeout = listener.ctx.settings.idle_timeout;
            let ended = tunnel::relay(
                &mut client,
                &mut backend.stream,
                idle_timeout,
                &session.moved,
            )
            .await;
            attempt.complete_measured(Outcome::Success, connect_time);
            match ended {
                RelayEnd::Closed => Fate::Answered,
                RelayEnd::Idle => Fate::IdleTimeout,
                RelayEnd::BackendFailed(e) => {
                    tracing::debug!(upstream = %attempt.upstream_name(), backend = %attempt.addr, client = %peer, error = %e, "TCP session: the backend side failed");
                    Fate::BackendReset
                }
                RelayEnd::ClientFailed(e) => {
                    tracing::debug!(upstream = %attempt.upstream_name(), backend = %attempt.addr, client = %peer, error = %e, "TCP session: the client side failed");
                    Fate::ClientReset
                }
            }
        }
        Err(why) => Fate::Unpicked(why),
    };
    drop(permit);
    session.end = Some(fate);
}

/// A session's record: logged and counted once, when it ends or when its task is dropped.
struct Session<'a> {
    listener: &'a WorkerListener,
    peer: SocketAddr,
    time: SystemTime,
    started: Instant,
    /// The session's attempts: the backends picked, in order.
    tried: Attempts<SocketAddr>,
    connect_time: Option<Duration>,
    moved: Moved,
    /// How the session ended: `None` until it does; still `None` when dropped: aborted at
    /// shutdown.
    end: Option<Fate>,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        self.log(self.end.unwrap_or(Fate::Shutdown));
    }
}

/// Picks and connects to a backend for the session, trying the next after a failed connect
/// as [`balance::Attempts`] says (nothing was sent, so the rule is the HTTP attempt's for a
/// failed connect). Sends the PROXY protocol header if the listener asks for one. `Err`: why
/// no backend was connected.
async fn connect(
    client: &mut TcpStream,
    peer: SocketAddr,
    listener: &WorkerListener,
    tried: &mut Attempts<SocketAddr>,
) -> Result<(BackendConn, Attempt, Duration), Unpicked> {
    // A TCP listener has an upstream of its own and no routes (the configuration says so).
    let (Some(upstream), Some(pools)) = (
        listener.ctx.default_upstream(),
        listener.connections.first(),
    ) else {
        return Err(Unpicked::NoBackend);
    };
    let settings = upstream.settings();
    // No request head: the client address, whatever `hash_key` says (`check` allows only
    // `client_ip` on an upstream a TCP listener uses).
    let mut key = AffinityKey::default();
    key.take(&settings, peer.ip(), None);
    let affinity = key.get();
    let proxy_header = listener.ctx.settings.send_proxy_protocol.map(|version| {
        let local = client.local_addr().unwrap_or(listener.ctx.settings.listen);
        crate::proxy_protocol::header(version, peer, local)
    });
    tried.reset(settings.max_attempts(), settings.next_upstream);
    // Whether the last move on was paid for from the retry budget (given back if it then
    // finds no backend).
    let mut charged = false;
    while tried.may_pick() {
        let picked = upstream
            .pick(&settings, affinity, None, tried.tried(), Some(client), true)
            .await;
        if picked.is_err() && std::mem::take(&mut charged) {
            upstream.refund_retry();
        }
        charged = false;
        let mut attempt = match picked {
            Ok(attempt) => attempt,
            Err(Unpicked::NoBackend) => break,
            // Every backend full (counted), or the client gone while it waited.
            Err(why) => {
                listener.stats.unpicked(upstream.shared_name(), why);
                return Err(why);
            }
        };
        let addr = attempt.addr;
        if tried.picked(addr) == Picked::Retry {
            listener.stats.retried(upstream.shared_name(), 1);
        }
        // Opened through the worker's connections to the backend, so the admin API counts it;
        // never kept idle afterwards.
        let pool = pools
            .get(addr)
            .unwrap_or_else(|| Arc::new(Connections::new(addr, 0, settings.keepalive_timeout)));
        let began = Instant::now();
        // An upstream with `tls = true` is refused for TCP listeners by the configuration;
        // were one used here, its TLS would still be honoured, never dropped to plain TCP.
        let tls = settings.backend_tls(addr);
        let (fault, why) = match pool.connect(settings.connect_timeout, tls).await {
            Ok(mut conn) => {
                let connect_time = began.elapsed();
                // The relay reads with buffers of its own.
                conn.buf.release();
                match &proxy_header {
                    None => return Ok((conn, attempt, connect_time)),
                    Some(h) => match conn.stream.write_all(h).await {
                        Ok(()) => return Ok((conn, attempt, connect_time)),
                        // Nothing of the client's was sent: as a failed connect.
                        Err(e) => (balance::Fault::ConnectFailed, e.to_string()),
                    },
                }
            }
            Err(e) => (e.fault(), e.to_string()),
        };
        // A move to the next backend is a retry the upstream's budget must allow, as an HTTP
        // request's is.
        let failure = balance::AttemptFailure::connect(fault, Replay::Safe);
        let step = tried.failed_within(&failure, false, || {
            charged = upstream.may_retry();
            if !charged {
                listener.stats.budget_exhausted(upstream.shared_name());
            }
            charged
        });
        if let Some(outcome) = step.outcome() {
            attempt.complete(outcome);
        }
        listener.stats.failed(upstream.shared_name(), addr, fault);
        let next = match step.next {
            Next::GiveUp { .. } => "giving up",
            Next::NextBackend { .. } | Next::ResendFresh => "trying the next backend",
        };
        tracing::warn!(upstream = %upstream.name(), backend = %addr, client = %peer, error = %why, next, "TCP connect failed");
    }
    Err(Unpicked::NoBackend)
}

impl Session<'_> {
    /// Counts the session and writes its access log line: `"TCP"` for the request line, the
    /// status nginx stream would give (200, 502, 503; 499 for a client gone while queued),
    /// bytes sent to the client, the session's time, the backends tried and the time to
    /// connect. The duration histogram gets the time to connect (or to fail), not the
    /// session's length: a pooled connection's hours would say nothing of the backend and
    /// swamp the requests beside it.
    fn log(&self, fate: Fate) {
        Record {
            fate,
            protocol: ClientProtocol::Tcp,
            client: self.peer.ip(),
            line: Some(Line {
                time: self.time,
                method: b"TCP",
                target: b"-",
                referer: b"",
                user_agent: b"",
                headers: &[],
            }),
            started: self.started,
            status: status(fate),
            body_bytes: self.moved.to_client.load(Ordering::Relaxed),
            // nginx stream's `$bytes_sent`: every byte to the client.
            bytes_sent: Some(self.moved.to_client.load(Ordering::Relaxed)),
            backends: self.tried.tried(),
            earlier: &[],
            upstream_time: self.connect_time,
            upstream: Some(0),
            route: None,
            request_id: None,
        }
        .finish(self.listener);
    }
}
