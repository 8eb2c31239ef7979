//! One HTTP/2 client connection: the `h2` server configured with our limits, its streams
//! served as tasks of this worker, and the connection closed when its client abuses it, idles,
//! or the proxy stops.
//!
//! The limits (defaults in [`crate::Http2Settings`], reasons in `docs/http2.md`):
//!
//! * `SETTINGS_MAX_CONCURRENT_STREAMS` = `max_concurrent_streams` (128, nginx's); the `h2`
//!   crate refuses a stream over it with `REFUSED_STREAM`.
//! * `SETTINGS_MAX_HEADER_LIST_SIZE` = the listener's `max_header_bytes`; a larger header list
//!   is answered 431 by `h2` (and the HTTP/1.1 head it becomes is held to the same limits by
//!   `parse_request`). `h2` ≥ 0.4.4 also stops a header block spread over more CONTINUATION
//!   frames than that size needs (the CONTINUATION flood of April 2024, CVE-2024-27316 and
//!   kin): a connection error, not unbounded work.
//! * Flow control: 256 KiB per stream, 1 MiB per connection (hyper's connection default):
//!   what one client can make us buffer before we read it.
//! * Rapid reset (CVE-2023-44487): streams the client cancels before their answer are counted
//!   here, per second; past `max_resets_per_second` the connection ends with GOAWAY
//!   `ENHANCE_YOUR_CALM` and every stream's work is dropped (tickets cancelled, backend
//!   connections closed). Streams cancelled before we even took them are bounded by `h2`
//!   itself (`max_pending_accept_reset_streams`, 20), and streams we reset because the client
//!   broke the protocol by `max_local_error_reset_streams` (1024, hyper's), both with the same
//!   GOAWAY.
//! * Request bodies: what one connection's streams may hold at once is bounded (`stream`:
//!   4 × `max_body_bytes`), a stream that does not fit is refused with `REFUSED_STREAM`.
//! * The first request: the handshake and the first stream's head must have come by
//!   `client_header_timeout` from the accept (the clock an HTTP/1.1 client's first head runs
//!   on, which the TLS handshake or the preface sniff has already spent from): else GOAWAY
//!   `NO_ERROR` and close. One clock, not one per step: the slowloris of HTTP/2.
//! * Idle: no stream open for `idle_timeout` → GOAWAY, then close. A PING every
//!   [`PING_INTERVAL`] while streams are open finds a client that vanished without a FIN; one
//!   that does not answer within [`PING_TIMEOUT`] is closed.
//! * Shutdown, or a reload that changed the listener: GOAWAY (no new streams), the streams in
//!   flight finish, then the connection closes; the server's `shutdown_timeout` bounds it.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use h2::Reason;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};

use super::linger::{LINGER, Linger};
use super::stream::{self, Ended, StreamContext};
use crate::listener::WorkerListener;
use crate::settings::Http2Settings;

/// Flow-control window a stream starts with (`SETTINGS_INITIAL_WINDOW_SIZE`).
const STREAM_WINDOW: u32 = 256 * 1024;
/// Flow-control window of the whole connection.
const CONNECTION_WINDOW: u32 = 1024 * 1024;
/// How often an otherwise quiet connection with streams open is pinged.
pub(crate) const PING_INTERVAL: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered.
pub(crate) const PING_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a connection told to go away (GOAWAY with an error) may take to flush it and
/// linger.
const GOAWAY_FLUSH: Duration = Duration::from_secs(LINGER.as_secs() + 1);

/// Counts a client's cancelled streams over the last second (a fixed window that restarts at
/// the first reset after it ran out).
#[derive(Debug)]
pub(crate) struct ResetRate {
    limit: u32,
    window_start: Option<Instant>,
    count: u32,
}

impl ResetRate {
    pub(crate) fn new(limit: u32) -> ResetRate {
        ResetRate {
            limit,
            window_start: None,
            count: 0,
        }
    }

    /// Notes one reset at `now`; `true` when it is one too many.
    pub(crate) fn note(&mut self, now: Instant) -> bool {
        match self.window_start {
            Some(start) if now.duration_since(start) < Duration::from_secs(1) => self.count += 1,
            _ => {
                self.window_start = Some(now);
                self.count = 1;
            }
        }
        self.count > self.limit
    }
}

/// Serves one HTTP/2 connection over `io` (h2c, or TLS that negotiated `h2`) until it closes.
/// `io` must not have had its preface read. `head_by`: when the preface and the first
/// stream's head must have come (`client_header_timeout` from the accept, as an HTTP/1.1
/// client's first request head); a connection with no stream by then is closed.
pub(crate) async fn serve<S>(
    io: S,
    peer: SocketAddr,
    listener: Arc<WorkerListener>,
    mut stop: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
    head_by: Instant,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = listener.ctx.settings.http2.unwrap_or_default();
    let Some(mut conn) = handshake(io, peer, &listener, &limits, head_by).await else {
        return;
    };
    let ctx = Arc::new(StreamContext::new(peer, Arc::clone(&listener)));
    let mut streams: JoinSet<Ended> = JoinSet::new();
    let mut watch = Watch::new(peer, &limits, head_by);
    let mut ping = conn.ping_pong();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            // Finished streams first: a flood's resets are counted before more of it is taken.
            Some(done) = streams.join_next(), if !streams.is_empty() => {
                if matches!(done, Ok(Ended::CancelledByClient)) && watch.too_many_resets() {
                    conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                    streams.abort_all();
                }
                if streams.is_empty() {
                    watch.idle_since = Some(Instant::now());
                }
            }
            accepted = conn.accept() => match accepted {
                Some(Ok((request, respond))) => {
                    if watch.calmed.is_none() {
                        watch.idle_since = None;
                        watch.taken += 1;
                        // Boxed: the stream's future is several KiB, and spawning moves it
                        // (tokio copies a task's future into its cell, three copies a stream
                        // under callgrind); a box is one allocation and a pointer to move.
                        streams.spawn(Box::pin(stream::serve(
                            Arc::clone(&ctx),
                            request,
                            respond,
                        )));
                    }
                }
                Some(Err(e)) => {
                    watch.failed(&e);
                    break;
                }
                None => break,
            },
            pong = std::future::poll_fn(|cx| match ping.as_mut() {
                Some(p) => p.poll_pong(cx),
                None => std::task::Poll::Pending,
            }), if watch.awaiting_pong.is_some() => {
                if pong.is_err() {
                    break;
                }
                watch.awaiting_pong = None;
            }
            () = watch.first_head_by.as_mut(), if watch.awaits_first_request() => {
                conn.abrupt_shutdown(Reason::NO_ERROR);
                watch.no_first_request();
            }
            _ = stop.changed(), if !watch.going_away => {
                conn.graceful_shutdown();
                watch.going_away = true;
            }
            _ = tick.tick() => {
                let stopping = *stop.borrow() || listener.is_retired();
                match watch.every_second(Instant::now(), stopping, !streams.is_empty()) {
                    Tick::Close => break,
                    Tick::GoAway => conn.graceful_shutdown(),
                    Tick::Ping => {
                        if let Some(p) = ping.as_mut()
                            && p.send_ping(h2::Ping::opaque()).is_ok()
                        {
                            watch.awaiting_pong = Some(Instant::now());
                        }
                    }
                    Tick::Nothing => {}
                }
            }
        }
    }
    // Whatever is left cannot be answered any more: their tickets are cancelled as they drop.
    streams.abort_all();
    while streams.join_next().await.is_some() {}
    drop(permit);
}

/// The `h2` server handshake over `io`, with our limits, by `head_by`.
async fn handshake<S>(
    io: S,
    peer: SocketAddr,
    listener: &WorkerListener,
    limits: &Http2Settings,
    head_by: Instant,
) -> Option<h2::server::Connection<Linger<S>, Bytes>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let settings = &listener.ctx.settings;
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(limits.max_concurrent_streams)
        .max_header_list_size(u32::try_from(settings.max_header_bytes).unwrap_or(u32::MAX))
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_pending_accept_reset_streams(20)
        .max_local_error_reset_streams(Some(1024));
    let handshake = builder.handshake::<_, Bytes>(Linger::new(io));
    match tokio::time::timeout_at(head_by, handshake).await {
        Ok(Ok(conn)) => Some(conn),
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "HTTP/2 handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(%peer, "HTTP/2 handshake timed out");
            None
        }
    }
}

/// What a connection's loop keeps track of besides its streams: resets, idleness, the PING
/// in flight, and whether it is going away.
struct Watch {
    peer: SocketAddr,
    resets: ResetRate,
    idle_timeout: Duration,
    /// Streams taken (served as tasks) on this connection: the work a flood made us do.
    taken: u64,
    /// GOAWAY sent: no new streams.
    going_away: bool,
    /// When the connection was cut off (GOAWAY with an error: too many resets; or no first
    /// request in time).
    calmed: Option<Instant>,
    /// Since when no stream has been open.
    idle_since: Option<Instant>,
    next_ping: Instant,
    /// When the PING in flight was sent.
    awaiting_pong: Option<Instant>,
    /// Ends when the first stream's head must have come.
    first_head_by: Pin<Box<Sleep>>,
}

/// What the once-a-second look at a connection decides.
enum Tick {
    Nothing,
    /// Send GOAWAY: stopping, retired or idle.
    GoAway,
    /// Send a PING, to find a client that vanished.
    Ping,
    /// Close now: GOAWAY flushed after a cut-off, or a PING unanswered.
    Close,
}

impl Watch {
    fn new(peer: SocketAddr, limits: &Http2Settings, head_by: Instant) -> Watch {
        let now = Instant::now();
        Watch {
            peer,
            resets: ResetRate::new(limits.max_resets_per_second),
            idle_timeout: limits.idle_timeout,
            taken: 0,
            going_away: false,
            calmed: None,
            idle_since: Some(now),
            next_ping: now + PING_INTERVAL,
            awaiting_pong: None,
            first_head_by: Box::pin(tokio::time::sleep_until(head_by)),
        }
    }

    /// Notes a stream the client cancelled before its answer; `true` when that is one too
    /// many (once): the connection is to be cut off.
    fn too_many_resets(&mut self) -> bool {
        if self.calmed.is_some() || !self.resets.note(Instant::now()) {
            return false;
        }
        tracing::warn!(
            peer = %self.peer,
            limit = self.resets.limit,
            streams = self.taken,
            "HTTP/2 client cancelled too many streams before their answer (rapid reset); closing the connection with GOAWAY ENHANCE_YOUR_CALM"
        );
        self.calmed = Some(Instant::now());
        true
    }

    /// Whether no stream has been taken yet (nor the connection cut off).
    fn awaits_first_request(&self) -> bool {
        self.taken == 0 && self.calmed.is_none()
    }

    /// Notes that the time for a first request head ran out with no stream: the slowloris of
    /// HTTP/2 (a preface, SETTINGS or HEADERS dribbled, or nothing). The connection is told
    /// GOAWAY (`NO_ERROR`) and closed once that is flushed, as after too many resets.
    fn no_first_request(&mut self) {
        tracing::debug!(peer = %self.peer, "HTTP/2 client sent no request within client_header_timeout; closing");
        self.calmed = Some(Instant::now());
    }

    /// Says why the connection failed.
    fn failed(&self, e: &h2::Error) {
        if e.reason() == Some(Reason::ENHANCE_YOUR_CALM) {
            // h2's own bounds: streams reset before we took them, or too many streams we had
            // to reset for the client's errors.
            tracing::warn!(peer = %self.peer, error = %e, streams = self.taken, "HTTP/2 connection closed with GOAWAY ENHANCE_YOUR_CALM");
        } else {
            tracing::debug!(peer = %self.peer, error = %e, "HTTP/2 connection failed");
        }
    }

    /// The once-a-second look: cut-off flushed, PING unanswered, time to go away (`stopping`:
    /// the proxy stops or the listener was retired by a reload), or to ping.
    fn every_second(&mut self, now: Instant, stopping: bool, streams_open: bool) -> Tick {
        if self
            .calmed
            .is_some_and(|t| now.duration_since(t) >= GOAWAY_FLUSH)
        {
            return Tick::Close;
        }
        if self
            .awaiting_pong
            .is_some_and(|t| now.duration_since(t) >= PING_TIMEOUT)
        {
            tracing::debug!(peer = %self.peer, "HTTP/2 client did not answer a PING; closing");
            return Tick::Close;
        }
        let idle = self
            .idle_since
            .is_some_and(|t| now.duration_since(t) >= self.idle_timeout);
        if !self.going_away && (stopping || idle) {
            if idle {
                tracing::debug!(peer = %self.peer, "idle HTTP/2 connection closed");
            }
            self.going_away = true;
            return Tick::GoAway;
        }
        if self.awaiting_pong.is_none() && streams_open && now >= self.next_ping {
            self.next_ping = now + PING_INTERVAL;
            return Tick::Ping;
        }
        Tick::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_are_counted_per_second() {
        let start = Instant::now();
        let mut rate = ResetRate::new(3);
        for i in 0..3 {
            assert!(!rate.note(start + Duration::from_millis(i * 100)));
        }
        assert!(
            rate.note(start + Duration::from_millis(900)),
            "the fourth within a second"
        );
        let mut rate = ResetRate::new(3);
        for i in 0..10 {
            assert!(
                !rate.note(start + Duration::from_millis(i * 400)),
                "a few a second, for ever"
            );
        }
    }
}
