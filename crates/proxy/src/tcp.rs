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
//! Each direction is copied on its own, so a client that shuts its sending side down (a
//! half-close) has its end passed on to the backend while the answer still flows back; the
//! session ends when both directions have ended, either fails, or nothing moved either way
//! for `idle_timeout`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use balance::{Action, Affinity, AttemptFailure, Connection, Outcome, Replay};
use balance::{RequestSent, ResponseReceived, retry};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::access_log;
use crate::client::{WorkerListener, address_octets};
use crate::connections::{BackendConn, Connections};
use crate::upstream::{Attempt, Unpicked};

/// Bytes read at once in each direction (nginx stream's `proxy_buffer_size`, 16 KiB).
const BUFFER: usize = 16 * 1024;

/// How a session ended, for the access log and the counts (nginx stream's `$status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Relayed until both sides finished, one failed, or it went idle.
    Relayed { idle: bool },
    /// No backend could be picked or reached (502, nginx's).
    NoBackend,
    /// Every backend was at `max_conns` and the queue had no room or time (503).
    NoRoom(Unpicked),
    /// The client left while its connection waited in the queue.
    ClientGone,
}

/// Serves one client connection in TCP mode until the session ends.
pub(crate) async fn serve(
    mut client: TcpStream,
    peer: SocketAddr,
    listener: Arc<WorkerListener>,
    permit: OwnedSemaphorePermit,
) {
    let started = Instant::now();
    let time = SystemTime::now();
    let mut tried = Vec::new();
    let (end, connect_time, bytes) = match connect(&mut client, peer, &listener, &mut tried).await {
        Ok((mut backend, mut attempt, connect_time)) => {
            let idle_timeout = listener.ctx.settings.idle_timeout;
            let relayed = relay(&mut client, &mut backend.stream, idle_timeout).await;
            attempt.complete_measured(Outcome::Success, connect_time);
            (
                End::Relayed { idle: relayed.idle },
                Some(connect_time),
                relayed.bytes,
            )
        }
        Err(end) => (end, None, [0, 0]),
    };
    drop(permit);
    log(
        &listener,
        peer,
        time,
        started,
        end,
        &tried,
        connect_time,
        bytes,
    );
}

/// Picks and connects to a backend for the session, trying the next after a failed connect
/// as the retry policy says. Sends the PROXY protocol header if the listener asks for one.
async fn connect(
    client: &mut TcpStream,
    peer: SocketAddr,
    listener: &WorkerListener,
    tried: &mut Vec<SocketAddr>,
) -> Result<(BackendConn, Attempt, Duration), End> {
    let upstream = &listener.ctx.upstream;
    let settings = upstream.settings();
    let mut octets = [0u8; 16];
    let key;
    let affinity = match settings.algorithm.affinity() {
        None => None,
        Some(Affinity::AddressOctets) => Some(address_octets(peer.ip(), &mut octets)),
        // `check` allows only `hash_key = "client_ip"` on an upstream a TCP listener uses.
        Some(Affinity::Key) => {
            key = peer.ip().to_canonical().to_string();
            Some(key.as_bytes())
        }
    };
    let proxy_header = listener.ctx.settings.send_proxy_protocol.map(|version| {
        let local = client.local_addr().unwrap_or(listener.ctx.settings.listen);
        crate::proxy_protocol::header(version, peer, local)
    });
    while tried.len() < settings.max_attempts() {
        let mut attempt = match upstream
            .pick(&settings, affinity, tried, Some(client), true)
            .await
        {
            Ok(attempt) => attempt,
            Err(Unpicked::NoBackend) => break,
            Err(Unpicked::ClientGone) => return Err(End::ClientGone),
            Err(why) => {
                listener.stats.unpicked(upstream.shared_name(), why);
                return Err(End::NoRoom(why));
            }
        };
        if !tried.is_empty() {
            listener.stats.retried(upstream.shared_name(), 1);
        }
        let addr = attempt.addr;
        tried.push(addr);
        // Opened through the worker's connections to the backend, so the admin API counts it;
        // never kept idle afterwards.
        let pool = listener
            .connections
            .get(addr)
            .unwrap_or_else(|| Arc::new(Connections::new(addr, 0, settings.keepalive_timeout)));
        let began = Instant::now();
        let failure = match pool.connect(settings.connect_timeout).await {
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
        let (fault, why) = failure;
        let failed = AttemptFailure {
            fault,
            connection: Connection::Fresh,
            request: RequestSent::Nothing,
            response: ResponseReceived::Nothing,
            replay: Replay::Safe,
        };
        let decision = retry::decide(&failed);
        attempt.complete(decision.outcome());
        listener.stats.failed(upstream.shared_name(), addr, fault);
        let next = match decision.action {
            Action::GiveUp => "giving up",
            Action::NextBackend | Action::ResendFresh => "trying the next backend",
        };
        tracing::warn!(upstream = %upstream.name(), backend = %addr, client = %peer, error = %why, next, "TCP connect failed");
        if decision.action == Action::GiveUp {
            break;
        }
    }
    Err(End::NoBackend)
}

/// What a relay did.
#[derive(Debug)]
struct Relayed {
    /// Bytes sent to the client, and received from it (nginx stream's `$bytes_sent`,
    /// `$bytes_received`).
    bytes: [u64; 2],
    /// Ended by `idle_timeout`.
    idle: bool,
}

/// The time of the last byte moved either way, in milliseconds since the relay began.
#[derive(Debug)]
struct Activity {
    began: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        let ms = self.began.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_until(&self, timeout: Duration) -> Instant {
        self.began + Duration::from_millis(self.last_ms.load(Ordering::Relaxed)) + timeout
    }
}

/// Relays both directions until both have ended, one fails, or nothing moved for `idle`.
async fn relay(client: &mut TcpStream, backend: &mut TcpStream, idle: Duration) -> Relayed {
    let activity = Activity {
        began: Instant::now(),
        last_ms: AtomicU64::new(0),
    };
    let (mut client_in, mut client_out) = client.split();
    let (mut backend_in, mut backend_out) = backend.split();
    let sent = AtomicU64::new(0);
    let received = AtomicU64::new(0);
    let both = async {
        // Either failing ends the session: the other direction has nowhere to go.
        let _ = tokio::try_join!(
            pipe(&mut client_in, &mut backend_out, &activity, &received),
            pipe(&mut backend_in, &mut client_out, &activity, &sent),
        );
    };
    let idled = async {
        loop {
            let until = activity.idle_until(idle);
            if Instant::now() >= until {
                return;
            }
            tokio::time::sleep_until(until).await;
        }
    };
    let idle = tokio::select! {
        () = both => false,
        () = idled => true,
    };
    Relayed {
        bytes: [sent.into_inner(), received.into_inner()],
        idle,
    }
}

/// Copies `from` to `to` until `from` ends, then ends `to`'s sending side (the half-close
/// passed on).
async fn pipe(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    activity: &Activity,
    count: &AtomicU64,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        activity.touch();
        to.write_all(&buf[..n]).await?;
        count.fetch_add(n as u64, Ordering::Relaxed);
        activity.touch();
    }
}

/// Counts the session and writes its access log line: `"TCP"` for the request line, the
/// status nginx stream would give (200, 502, 503; 499 for a client gone while queued), bytes
/// sent to the client, the session's time, the backends tried and the time to connect.
#[allow(clippy::too_many_arguments)]
fn log(
    listener: &WorkerListener,
    peer: SocketAddr,
    time: SystemTime,
    started: Instant,
    end: End,
    tried: &[SocketAddr],
    connect_time: Option<Duration>,
    bytes: [u64; 2],
) {
    let (status, fate) = match end {
        End::Relayed { idle: false } => (200, "answered"),
        End::Relayed { idle: true } => (200, "idle_timeout"),
        End::NoBackend => (502, "no_backend"),
        End::NoRoom(Unpicked::QueueTimeout) => (503, "queue_timeout"),
        End::NoRoom(_) => (503, "queue_full"),
        End::ClientGone => (crate::forward::CLIENT_CLOSED, "client_gone"),
    };
    let upstream = &listener.ctx.upstream;
    let took = started.elapsed();
    let by = match end {
        End::Relayed { .. } => tried.last().copied(),
        _ => None,
    };
    listener
        .stats
        .answered(upstream.shared_name(), by, status, took);
    let Some(log) = &listener.ctx.access_log else {
        return;
    };
    log.log(&access_log::Entry {
        client: peer.ip(),
        time,
        method: b"TCP",
        target: b"-",
        protocol: b"",
        status,
        body_bytes: bytes[0],
        referer: b"",
        user_agent: b"",
        request_time: took,
        upstream_time: connect_time,
        backends: tried,
        upstream: upstream.name(),
        fate,
    });
}
