//! HTTP/2 to backends (`backend_protocol = "h2"`): h2c with prior knowledge over plain TCP, or
//! h2 chosen by ALPN over TLS (`tls = true`; a backend that does not choose it fails the
//! handshake, see [`crate::upstream_tls`]).
//!
//! * **Shared connections, multiplexed, as few as the load needs.** A stream goes on the oldest
//!   connection of the worker to the backend that has one free (below the backend's
//!   `SETTINGS_MAX_CONCURRENT_STREAMS`); when every one is at that limit another is opened, up
//!   to `h2_max_connections` (4), as Envoy's HTTP/2 pool and HAProxy's list of connections
//!   with streams available do ([`crate::connections::H2Slot`]). The first request opens one
//!   (as any connection: `connect_timeout`, TLS), requests arriving meanwhile wait for it. A
//!   connection that fails, or that lets a request wait `read_timeout`, is forgotten at once,
//!   so the next request opens a new one (one per GOAWAY, however many requests it cut
//!   short); one is also forgotten once no request has taken it for `keepalive_timeout`, and
//!   closes with GOAWAY when its streams are over. A PING every 30 s, unanswered within
//!   20 s, closes a connection whose peer vanished. `keepalive = 0` gives every request a
//!   connection of its own, as for HTTP/1.1.
//! * **No client takes them all.** The streams each HTTP/2 client connection holds on a
//!   backend are counted; past `h2_max_streams_per_client` (half the backend's limit unless
//!   set) its next request waits for one of its own to end. Every wait for room — the
//!   client's share, or every connection allowed full — is within `connect_timeout`, and
//!   given up it is our own limit: nothing was sent, the next backend is tried, no one is
//!   blamed, and `503` if none is left.
//! * **Cancelled streams do not cost the shared connection.** A stream we reset (its client
//!   gone) is remembered long enough that the backend's frames already under way for it are
//!   dropped quietly, and the `h2` crate's lifetime count of resets it had to send is off for
//!   backend connections ([`RESETS_REMEMBERED`]), so many clients leaving at once never end
//!   the connection the others share with `ENHANCE_YOUR_CALM`.
//! * **The request** is the head the HTTP/1.1 path would send (forwarding headers, `Host`,
//!   the hop-by-hop fields gone, [`crate::request::Forward::finish_head`]) as HTTP/2 fields:
//!   `Host` becomes `:authority`, connection-specific fields are dropped (RFC 9113 §8.2.2),
//!   `te: trailers` is said for a client that said it (gRPC), the buffered body follows as
//!   DATA frames under the stream's flow control.
//! * **The response head** is written as the HTTP/1.1 head it stands for and goes through
//!   [`http1::parse_response`]: the client gets the same rewriting (hop-by-hop fields, framing
//!   for HTTP/1.0, `HEAD`) whatever protocol the backend spoke. A body without
//!   `content-length` reaches an HTTP/1.1 client chunked, an HTTP/1.0 client delimited by the
//!   close; trailers reach an HTTP/2 client that takes them (`http2::relay`), no one else.
//! * **Failures are classified for [`balance::retry::decide`]** as the HTTP/1.1 path's are
//!   ([`classify`]). A stream the backend refused (`REFUSED_STREAM`) or left beyond a graceful
//!   GOAWAY's last stream was not processed (RFC 9113 §8.7, §6.8): nothing was sent, so even a
//!   non-idempotent request is sent again. A lost connection is the HTTP/1.1 path's connection
//!   closed under a request; a stream reset on a healthy connection is the backend failing the
//!   request; a backend that breaks the protocol sent an invalid response.
//! * **Flow control gives backpressure:** the window a DATA frame used is given back only once
//!   its bytes went to the client, so a slow client slows the backend's stream, not our memory;
//!   the connection's window is opened wide, so that it never binds before the streams' do.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use balance::{AttemptFailure, Connection, Fault, RequestSent, ResponseReceived};
use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderName, HeaderValue, Request, Response};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};
use tokio_util::either::Either;

use crate::connections::{
    ConnectError, Connections, H2_LIMIT_UNKNOWN, H2Lease, H2Room, OpenCount, SharedH2,
};
use crate::exchange::{ClientEnd, Patience, Relay};
use crate::http1::{self, FinalResponse, Framing, ResponseHead};
use crate::io::{ClientStream, after};
use crate::request::{Forward, Tried};
use crate::upstream_tls::{BackendStream, BackendTls};

/// The stream window we open to a backend: what one response may have in flight unread by its
/// client (h2's default is 64 KiB, which caps a stream at one window per round trip).
const STREAM_WINDOW: u32 = 256 * 1024;
/// The connection's window: the largest HTTP/2 allows (RFC 9113 §6.9.1), so that it never binds
/// before the streams' do. A window is given back only once its bytes went on to the client,
/// so with a smaller one a few clients that stop reading would stall every response on the
/// shared connection; memory stays bounded by the stream windows times the backend's
/// concurrent streams. (Go's transport and Envoy open theirs wide too.)
const CONNECTION_WINDOW: u32 = (1 << 31) - 1;

/// How often a connection is checked with PING, and how long the answer may take: a connection
/// whose peer vanished without a FIN or reset (a NAT entry expired, a machine gone) would
/// otherwise hold every request of the worker until TCP gave up, minutes later. The numbers
/// are the client side's (`docs/http2.md`).
const PING_EVERY: Duration = Duration::from_secs(30);
const PING_PATIENCE: Duration = Duration::from_secs(20);

/// How long a body whose `content-length` has come waits for the stream's end (see
/// [`H2Body::finish`]).
const END_STREAM_GRACE: Duration = Duration::from_secs(1);

/// How long a new connection's opener waits for the backend's first SETTINGS (its limit of
/// concurrent streams) before its request goes out: until they come, the connection takes
/// no other request, and they come with the backend's side of the handshake, within a round
/// trip.
const SETTINGS_PATIENCE: Duration = Duration::from_millis(200);

/// How often a request waiting for a stream looks again without being told (see
/// [`stream`]).
const ROOM_RECHECK: Duration = Duration::from_millis(100);

/// Streams we reset (a client gone, a stream given up) that a connection remembers, for the
/// `h2` crate's `reset_stream_duration` (1 s), so that the frames the backend sent before it
/// saw the reset are recognised and dropped. The crate's default, 50, is less than one client
/// connection's streams: when a client with 128 streams open went away, the frames still
/// coming on the streams past the 50th were taken as a protocol error of the backend's, each
/// one answered with a reset of our own and counted against
/// `max_local_error_reset_streams` (1024 a connection, for its whole life), whose end is a
/// GOAWAY `ENHANCE_YOUR_CALM` that fails every stream on the shared connection. 1024 covers
/// several clients going at once; each remembered stream costs a few hundred bytes for a
/// second.
const RESETS_REMEMBERED: usize = 1024;

/// The largest response field section taken from a backend (RFC 9113 §6.5.2's
/// SETTINGS_MAX_HEADER_LIST_SIZE: names, values and 32 bytes a field).
const MAX_RESPONSE_FIELDS: u32 = 64 * 1024;

/// A stream to send a request on, which connection it is on, and whether that connection
/// carried requests before.
struct Stream {
    send: SendRequest<Bytes>,
    id: u64,
    connection: Connection,
    /// The stream's place on a shared connection (`None`: a connection of its own).
    lease: Option<H2Lease>,
}

impl Stream {
    fn shared(shared: SharedH2, lease: H2Lease) -> Stream {
        Stream {
            send: shared.send,
            id: shared.id,
            connection: Connection::Reused,
            lease: Some(lease),
        }
    }
}

/// What bounds the streams one request may take: the upstream's settings, and the client
/// connection it came on.
#[derive(Debug, Clone, Copy)]
struct StreamLimits {
    connect_timeout: Duration,
    /// `h2_max_connections`.
    max_connections: usize,
    /// `h2_max_streams_per_client` (`None`: half the backend's limit).
    per_client: Option<usize>,
    /// The HTTP/2 client connection's number (`None`: an HTTP/1.x client).
    client: Option<u64>,
}

/// A stream to the backend of `pool`, within `connect_timeout`: on the oldest shared
/// connection with one free ([`crate::connections::H2Slot`]); when every one is at the
/// backend's limit, on a new one, up to `h2_max_connections`; past that, or past the client
/// connection's share, once a stream ends. A connection that failed was forgotten by the
/// attempt that saw it fail, so a retry finds the one opened since, or opens it: however
/// many requests a GOAWAY cut short, one new connection. With `keepalive = 0`, a connection
/// of the request's own.
async fn stream(
    pool: &Arc<Connections>,
    limits: StreamLimits,
    tls: Option<(&Arc<BackendTls>, &str)>,
) -> Result<Stream, ConnectError> {
    let deadline = Instant::now() + limits.connect_timeout;
    if !pool.keeps_idle() {
        return open(pool, deadline, tls, None).await;
    }
    let made_with = tls.map(|(tls, _)| tls);
    loop {
        // Made before looking, so that a stream given back in between wakes it.
        let room = pool.h2.room();
        let why = match pool
            .h2
            .take(pool, made_with, limits.client, limits.per_client)
        {
            H2Room::Stream(shared, lease) => return Ok(Stream::shared(shared, lease)),
            H2Room::Full { open } if open < limits.max_connections => {
                match open_another(pool, deadline, tls, limits).await? {
                    Some(stream) => return Ok(stream),
                    None => continue,
                }
            }
            H2Room::Full { open } => format!(
                "no HTTP/2 stream free to the backend within connect_timeout ({:?}): its {open} connections (h2_max_connections) are all at its concurrent-stream limit",
                limits.connect_timeout
            ),
            H2Room::ClientAtCap { cap } => format!(
                "no HTTP/2 stream free to the backend within connect_timeout ({:?}): this client connection holds its {cap} (h2_max_streams_per_client, by default half the backend's concurrent-stream limit)",
                limits.connect_timeout
            ),
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(ConnectError::NoStream(why));
        }
        // Told when a stream is given back or a connection comes; looked again now and then
        // for room that comes untold (a backend's SETTINGS that came late, or raised its
        // limit).
        let _ = timeout_at(deadline.min(now + ROOM_RECHECK), room).await;
    }
}

/// Opens another shared connection to `pool`'s backend and takes a stream on it, one opening
/// at a time: a request that waited for another's looks again first, and `None` says to
/// look again from the start (the client's share is taken, or every connection allowed is
/// open).
async fn open_another(
    pool: &Arc<Connections>,
    deadline: Instant,
    tls: Option<(&Arc<BackendTls>, &str)>,
    limits: StreamLimits,
) -> Result<Option<Stream>, ConnectError> {
    // Waiting for another request's connect is waiting for a connection: within this
    // request's connect_timeout.
    let _opening = timeout_at(deadline, pool.h2.opening.lock())
        .await
        .map_err(|_| ConnectError::Timeout)?;
    let made_with = tls.map(|(tls, _)| tls);
    match pool
        .h2
        .take(pool, made_with, limits.client, limits.per_client)
    {
        // Opened by the request that held the lock before us, or a stream given back.
        H2Room::Stream(shared, lease) => Ok(Some(Stream::shared(shared, lease))),
        H2Room::Full { open: n } if n < limits.max_connections => {
            open(pool, deadline, tls, limits.client).await.map(Some)
        }
        H2Room::Full { .. } | H2Room::ClientAtCap { .. } => Ok(None),
    }
}

/// Opens a connection to `pool`'s backend by `deadline` and takes its first stream, for
/// `client`. Kept for later requests when connections are kept (`keepalive` > 0), else the
/// request's own, closed after it.
async fn open(
    pool: &Arc<Connections>,
    deadline: Instant,
    tls: Option<(&Arc<BackendTls>, &str)>,
    client: Option<u64>,
) -> Result<Stream, ConnectError> {
    let left = deadline.saturating_duration_since(Instant::now());
    let (io, open) = pool.connect_stream(left, tls).await?;
    let handshake = h2::client::Builder::new()
        .enable_push(false)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(MAX_RESPONSE_FIELDS)
        .initial_max_send_streams(H2_LIMIT_UNKNOWN)
        .max_concurrent_reset_streams(RESETS_REMEMBERED)
        // The crate ends a connection after 1024 resets it had to send for the peer's
        // protocol errors, a server's guard against clients that make it reset streams
        // (CVE-2023-44487's kin). Here the peer is a configured backend, and what that count
        // takes in is our own cancellations racing the backend's frames (a DATA frame for a
        // stream past the remembered ones): counted over the connection's life, a proxy
        // whose clients cancel would one day lose the connection every client shares, with
        // every stream on it. A backend that does break the protocol still loses its
        // connection at once for any connection-level error.
        .max_local_error_reset_streams(None)
        .handshake::<BackendStream, Bytes>(io);
    let (send, connection) = match timeout_at(deadline, handshake).await {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => return Err(ConnectError::H2(e)),
        Err(_) => return Err(ConnectError::Timeout),
    };
    let shared = SharedH2::new(send.clone(), tls.map(|(tls, _)| Arc::clone(tls)));
    let id = shared.id;
    let lease = pool
        .keeps_idle()
        .then(|| pool.h2.keep(pool, shared.clone(), client));
    let driven = Driven {
        kept: lease.as_ref().map(|_| Arc::clone(pool)),
        addr: pool.addr(),
        _open: open,
        idle_timeout: pool.idle_timeout(),
    };
    tokio::spawn(drive(connection, driven, shared));
    if lease.is_some() {
        settings_said(&send, deadline).await;
        pool.h2.room_came();
    }
    Ok(Stream {
        send,
        id,
        connection: Connection::Fresh,
        lease,
    })
}

/// Waits until the backend's first SETTINGS have been read on `send`'s connection (which its
/// task drives), by `deadline` and for [`SETTINGS_PATIENCE`] at most. The `h2` crate says no
/// more than the limit they carry, so this looks again every millisecond: a round trip on
/// the networks backends are on.
async fn settings_said(send: &SendRequest<Bytes>, deadline: Instant) {
    let until = deadline.min(Instant::now() + SETTINGS_PATIENCE);
    while send.current_max_send_streams() == H2_LIMIT_UNKNOWN && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// What the task driving a connection keeps.
struct Driven {
    /// The pool whose current connection it is (`None`: a connection of one request's own).
    kept: Option<Arc<Connections>>,
    addr: std::net::SocketAddr,
    _open: OpenCount,
    idle_timeout: Duration,
}

impl Driven {
    fn forget(&self, id: u64) {
        if let Some(pool) = &self.kept {
            pool.h2.forget(id);
        }
    }
}

/// Runs one connection to its end. A kept connection is forgotten once no request has taken
/// it for `idle_timeout`: its open streams finish on it, then it closes with GOAWAY (the `h2`
/// crate ends a client connection that has neither streams nor handles). Every `PING_EVERY`
/// it is checked with a PING; one not answered within `PING_PATIENCE` closes it.
async fn drive(
    mut connection: h2::client::Connection<BackendStream, Bytes>,
    driven: Driven,
    shared: SharedH2,
) {
    let SharedH2 { id, used, born, .. } = shared;
    // Only the slot may keep the connection open; our copy of the handle would too.
    drop(shared.send);
    let mut pinger = connection.ping_pong();
    tokio::pin!(connection);
    let idle_timeout = driven.idle_timeout;
    let mut in_slot = driven.kept.is_some();
    let mut wake = born + idle_timeout;
    let mut ping_at = born + PING_EVERY;
    let ended = loop {
        tokio::select! {
            ended = &mut connection => break ended,
            // Also what polls a forgotten connection again, so that it sees it has nothing
            // left to do.
            () = tokio::time::sleep_until(wake) => {
                let now = Instant::now();
                let idle_since = born + Duration::from_millis(used.load(Ordering::Relaxed));
                wake = if in_slot && idle_since + idle_timeout > now {
                    idle_since + idle_timeout
                } else {
                    if in_slot {
                        driven.forget(id);
                    }
                    in_slot = false;
                    now + idle_timeout
                };
            }
            () = tokio::time::sleep_until(ping_at), if pinger.is_some() => {
                let Some(pinger) = pinger.as_mut() else { continue };
                // The connection must be driven for the answer to be read.
                let answered = tokio::select! {
                    pong = pinger.ping(h2::Ping::opaque()) => pong.is_ok(),
                    () = tokio::time::sleep(PING_PATIENCE) => false,
                    ended = &mut connection => break ended,
                };
                if !answered {
                    tracing::warn!(backend = %driven.addr, "HTTP/2 connection to the backend did not answer a PING within {PING_PATIENCE:?}; closing it");
                    driven.forget(id);
                    return;
                }
                ping_at = Instant::now() + PING_EVERY;
            }
        }
    };
    driven.forget(id);
    match ended {
        Ok(()) => {}
        // The backend's own graceful close, or a connection that just went away.
        Err(e) if e.reason() == Some(Reason::NO_ERROR) || e.is_io() => {
            tracing::debug!(backend = %driven.addr, error = %e, "HTTP/2 connection to the backend ended");
        }
        Err(e) => {
            tracing::warn!(backend = %driven.addr, error = %e, "HTTP/2 connection to the backend failed");
        }
    }
}

/// One attempt of `f` on the backend of `pool`: a stream on its connection, the request
/// (`head`, the HTTP/1.1 head for it, and the body), and the response head within `patience`,
/// rewritten for the client into `out`; given up as soon as `client` leaves. A connection
/// that fails is forgotten at once, so that the next attempt opens a new one.
pub(crate) async fn attempt(
    f: &Forward<'_>,
    pool: &Arc<Connections>,
    head: &[u8],
    client: Option<&TcpStream>,
    patience: Patience,
    out: &mut Vec<u8>,
) -> Tried<H2Body> {
    let settings = f.settings;
    let tls = settings.backend_tls(pool.addr());
    let mut request = match to_fields(head, tls.is_some()) {
        Ok(request) => request,
        Err(why) => return Tried::Refused(why),
    };
    if f.trailers {
        // Removed with the hop-by-hop fields; the one `te` HTTP/2 carries, and gRPC's servers
        // require it.
        request
            .headers_mut()
            .insert(http::header::TE, HeaderValue::from_static("trailers"));
    }
    let limits = StreamLimits {
        connect_timeout: settings.connect_timeout,
        max_connections: settings.h2_max_connections,
        per_client: settings.h2_max_streams_per_client,
        client: f.client_connection,
    };
    let stream = match stream(pool, limits, tls).await {
        Ok(stream) => stream,
        Err(e) => return Tried::ConnectFailed(e),
    };
    let lease = stream.lease;
    let on = OnStream {
        pool,
        id: stream.id,
        connection: stream.connection,
        replay: f.replay,
    };
    let (response, body) = match send(f, &on, stream.send, request).await {
        Ok(sent) => sent,
        Err(failed) => return failed,
    };
    let gone = crate::io::watch(client, f.watch_client);
    let head = tokio::select! {
        biased;
        head = timeout_at(patience.next_read(), response) => head,
        () = gone => return Tried::ClientGone,
    };
    let response = match head {
        Ok(Ok(response)) => response,
        Ok(Err(e)) if e.is_library() => return on.failure(&e, ResponseReceived::Partly),
        Ok(Err(e)) => return on.failure(&e, ResponseReceived::Nothing),
        Err(_) => {
            // A connection whose peer vanished answers nothing more: the next request opens
            // another rather than wait on it too (a slow answer costs a new connection).
            pool.h2.forget(on.id);
            return on.failed(
                RequestSent::Whole,
                ResponseReceived::Nothing,
                Fault::ReadTimeout,
                patience.expired("a response"),
            );
        }
    };
    final_head(f, &on, (response, body, lease), out)
}

/// Numbers HTTP/2 client connections, whose backend streams are counted per backend against
/// `h2_max_streams_per_client`.
static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

/// A number for a new HTTP/2 client connection ([`Forward::client_connection`]).
pub(crate) fn next_client_connection() -> u64 {
    NEXT_CLIENT.fetch_add(1, Ordering::Relaxed)
}

/// The stream an attempt is on, for classifying how it failed.
struct OnStream<'a> {
    pool: &'a Arc<Connections>,
    /// Its connection's number, to forget the connection by if the failure is the
    /// connection's.
    id: u64,
    connection: Connection,
    replay: balance::Replay,
}

impl OnStream<'_> {
    fn failed(
        &self,
        request: RequestSent,
        response: ResponseReceived,
        fault: Fault,
        why: String,
    ) -> Tried<H2Body> {
        let failure = AttemptFailure {
            fault,
            connection: self.connection,
            request,
            response,
            replay: self.replay,
        };
        Tried::Failed(failure, why)
    }

    /// What an error says, and the connection forgotten if it is the connection's.
    fn failure(&self, e: &h2::Error, response: ResponseReceived) -> Tried<H2Body> {
        let (fault, request, scope, why) = classify(e);
        let connection = match scope {
            Scope::Connection => {
                self.pool.h2.forget(self.id);
                self.connection
            }
            Scope::Refused => self.connection,
            // A healthy connection, one stream failed: the backend's doing, not the race of a
            // connection closing under a request.
            Scope::Stream => Connection::Fresh,
        };
        OnStream {
            connection,
            ..*self
        }
        .failed(request, response, fault, why)
    }

    /// The connection could not take the stream at all: it is forgotten.
    fn not_sent(&self, e: h2::Error) -> Tried<H2Body> {
        self.pool.h2.forget(self.id);
        self.failed(
            RequestSent::Nothing,
            ResponseReceived::Nothing,
            Fault::Closed,
            format!("HTTP/2 connection cannot take a stream: {e}"),
        )
    }
}

/// Sends `request` and the body of `f` on a new stream of `send`'s connection: the response
/// to come and the stream's sending half, or how it failed.
async fn send(
    f: &Forward<'_>,
    on: &OnStream<'_>,
    send: SendRequest<Bytes>,
    request: Request<()>,
) -> Result<(ResponseFuture, SendStream<Bytes>), Tried<H2Body>> {
    let connect_timeout = f.settings.connect_timeout;
    let mut send = send.ready().await.map_err(|e| on.not_sent(e))?;
    let (response, mut body) = send
        .send_request(request, f.body.is_empty())
        .map_err(|e| on.not_sent(e))?;
    // While the backend's concurrent streams are all taken, the stream waits in the `h2`
    // crate's queue, not yet sent; the handle is ready again once it went out. That wait is
    // for room, as a connect is: within connect_timeout. Given up, the stream is still sent
    // once room comes, and reset at once: "partly sent" for the retry policy, so that only a
    // safe request is sent again, and, the connection being a shared one, with no blame.
    match timeout_at(after(connect_timeout), send.ready()).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(on.not_sent(e)),
        Err(_) => {
            return Err(on.failed(
                RequestSent::Partly,
                ResponseReceived::Nothing,
                Fault::Closed,
                format!(
                    "no stream free on the HTTP/2 connection (the backend's concurrent-stream limit) within connect_timeout ({connect_timeout:?})"
                ),
            ));
        }
    }
    if !f.body.is_empty() {
        // Queued whole: the `h2` crate sends it as the stream's window allows.
        if let Err(e) = body.send_data(Bytes::copy_from_slice(f.body), true) {
            return Err(on.failure(&e, ResponseReceived::Nothing));
        }
    }
    Ok((response, body))
}

/// The backend's response head, written as HTTP/1.1 and rewritten for the client into `out`
/// by the shared rules: the head and its body, or an invalid answer.
fn final_head(
    f: &Forward<'_>,
    on: &OnStream<'_>,
    (response, body, lease): (Response<RecvStream>, SendStream<Bytes>, Option<H2Lease>),
    out: &mut Vec<u8>,
) -> Tried<H2Body> {
    let (parts, recv) = response.into_parts();
    let mut raw = Vec::with_capacity(256);
    write_response_head(&parts, recv.is_end_stream(), f.client.is_head, &mut raw);
    match http1::parse_response(&raw, f.client, out, f.answer_edit(on.pool.addr())) {
        Ok(Some(ResponseHead::Final(response))) if response.status != 101 => Tried::Head(
            response,
            H2Body {
                recv,
                _request: body,
                lease,
            },
        ),
        Ok(_) => on.failed(
            RequestSent::Whole,
            ResponseReceived::Partly,
            Fault::InvalidResponse,
            "invalid response: an interim status as the HTTP/2 response".to_owned(),
        ),
        Err(why) => on.failed(
            RequestSent::Whole,
            ResponseReceived::Partly,
            Fault::InvalidResponse,
            format!("invalid response: {why}"),
        ),
    }
}

/// What an HTTP/2 error was the end of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// The connection: lost, closing, or broken by the backend.
    Connection,
    /// One stream, refused before it was processed: the connection may carry the next.
    Refused,
    /// One stream, reset by the backend: the connection is fine.
    Stream,
}

/// What an HTTP/2 error before the response head says for the retry policy: the fault, how
/// much of the request counts as sent, what failed, and in words.
fn classify(e: &h2::Error) -> (Fault, RequestSent, Scope, String) {
    let reason = e.reason();
    if e.is_remote() && e.is_reset() {
        if reason == Some(Reason::REFUSED_STREAM) {
            // RFC 9113 §8.7: the stream was not processed.
            return (
                Fault::Closed,
                RequestSent::Nothing,
                Scope::Refused,
                "the backend refused the stream (REFUSED_STREAM)".to_owned(),
            );
        }
        return (
            Fault::Closed,
            RequestSent::Whole,
            Scope::Stream,
            format!("the backend reset the stream before its response: {e}"),
        );
    }
    if e.is_remote() && e.is_go_away() && reason == Some(Reason::NO_ERROR) {
        // The `h2` crate ends a stream with the GOAWAY's own error only when its number is
        // beyond the GOAWAY's last stream, at once (RFC 9113 §6.8: not processed); a stream
        // within it that the connection's end cut short gets an I/O error instead.
        return (
            Fault::Closed,
            RequestSent::Nothing,
            Scope::Connection,
            "the backend is closing the connection (GOAWAY) and did not take the stream".to_owned(),
        );
    }
    if e.is_library() {
        // The `h2` crate found the backend breaking the protocol.
        return (
            Fault::InvalidResponse,
            RequestSent::Whole,
            Scope::Connection,
            format!("invalid HTTP/2 from the backend: {e}"),
        );
    }
    (
        Fault::Closed,
        RequestSent::Whole,
        Scope::Connection,
        format!("HTTP/2 connection failed before the response head: {e}"),
    )
}

/// Fields that describe an HTTP/1.1 connection, which HTTP/2 must not carry (RFC 9113 §8.2.2).
pub(crate) const CONNECTION_SPECIFIC: [&str; 6] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
];

/// The HTTP/1.1 request head `head` as HTTP/2 fields: `Host` as `:authority`, the
/// connection-specific fields dropped (`TE` among them: the HTTP/1.1 parser has removed it as
/// hop-by-hop already, and trailers are not relayed).
fn to_fields(head: &[u8], tls: bool) -> Result<http::Request<()>, String> {
    let lines = head.windows(2).filter(|w| w == b"\r\n").count();
    let mut slots = vec![httparse::EMPTY_HEADER; lines];
    let mut parsed = httparse::Request::new(&mut slots);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err("the request head cannot be read back".to_owned()),
    }
    let (Some(method), Some(target)) = (parsed.method, parsed.path) else {
        return Err("the request head has no request line".to_owned());
    };
    let mut request = http::Request::new(());
    *request.method_mut() =
        http::Method::from_bytes(method.as_bytes()).map_err(|e| format!("method: {e}"))?;
    let mut authority = None;
    let fields = request.headers_mut();
    fields.reserve(parsed.headers.len());
    for h in parsed.headers.iter() {
        if h.name.eq_ignore_ascii_case("host") {
            authority = Some(h.value);
            continue;
        }
        if CONNECTION_SPECIFIC
            .iter()
            .any(|c| c.eq_ignore_ascii_case(h.name))
        {
            continue;
        }
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| format!("field name {:?}", h.name))?;
        let value = HeaderValue::from_bytes(h.value).map_err(|_| format!("value of {name}"))?;
        fields.append(name, value);
    }
    // The origin form, and the asterisk form of `OPTIONS *`, take the scheme and authority
    // from the connection and `Host`.
    let uri = if target.starts_with('/') || target == "*" {
        let authority = authority.ok_or("no Host to write as :authority")?;
        let authority = http::uri::Authority::try_from(authority)
            .map_err(|e| format!("Host as :authority: {e}"))?;
        http::Uri::builder()
            .scheme(if tls { "https" } else { "http" })
            .authority(authority)
            .path_and_query(target)
            .build()
            .map_err(|e| format!("target: {e}"))?
    } else {
        // The absolute form names its own scheme and authority.
        http::Uri::try_from(target).map_err(|e| format!("target: {e}"))?
    };
    *request.uri_mut() = uri;
    Ok(request)
}

/// Writes the HTTP/1.1 head an HTTP/2 response head stands for: its status and fields, and
/// its framing when it has no `content-length` and may have a body (not for `HEAD`, 204 or
/// 304): `content-length: 0` when the head ended the stream, chunked otherwise.
fn write_response_head(
    parts: &http::response::Parts,
    ended: bool,
    is_head: bool,
    raw: &mut Vec<u8>,
) {
    use std::io::Write as _;
    let status = parts.status;
    let _ = write!(
        raw,
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Unknown")
    );
    for (name, value) in &parts.headers {
        raw.extend_from_slice(name.as_str().as_bytes());
        raw.extend_from_slice(b": ");
        raw.extend_from_slice(value.as_bytes());
        raw.extend_from_slice(b"\r\n");
    }
    let bodiless = is_head || matches!(status.as_u16(), 204 | 304);
    if !bodiless && !parts.headers.contains_key(http::header::CONTENT_LENGTH) {
        raw.extend_from_slice(if ended {
            b"content-length: 0\r\n"
        } else {
            b"transfer-encoding: chunked\r\n"
        });
    }
    raw.extend_from_slice(b"\r\n");
}

/// A response body arriving on an HTTP/2 stream. Dropped before its end, it resets the stream
/// (`CANCEL`): the backend stops sending.
#[derive(Debug)]
pub(crate) struct H2Body {
    recv: RecvStream,
    /// The request's side of the stream (its body may still be going out).
    _request: h2::SendStream<Bytes>,
    /// The stream's place on a shared connection, given back with the stream.
    lease: Option<H2Lease>,
}

impl H2Body {
    /// The next piece of the body within `patience` (`None` at its end); `gone` resolving (the
    /// client left, or reset its own stream) ends the relay.
    pub(crate) async fn next(
        &mut self,
        gone: impl Future<Output = ()>,
        patience: Patience,
    ) -> Result<Option<Bytes>, Relay> {
        let data = async {
            self.recv
                .data()
                .await
                .transpose()
                .map_err(|e| format!("the HTTP/2 stream failed: {e}"))
        };
        crate::exchange::within(data, gone, patience).await
    }

    /// Whether the stream has ended (with the response head, when asked before any read).
    pub(crate) fn ended(&self) -> bool {
        self.recv.is_end_stream()
    }

    /// The trailers that ended the stream, if any (after [`H2Body::next`] gave `None`).
    pub(crate) async fn trailers(
        &mut self,
        gone: impl Future<Output = ()>,
        patience: Patience,
    ) -> Result<Option<http::HeaderMap>, Relay> {
        let trailers = async {
            self.recv
                .trailers()
                .await
                .map_err(|e| format!("the HTTP/2 stream's trailers failed: {e}"))
        };
        crate::exchange::within(trailers, gone, patience).await
    }

    /// Ends the body once its `content-length` has come. A backend may send END_STREAM in a
    /// frame of its own after the last bytes (nginx does); dropping the stream before it came
    /// would reset it (`CANCEL`) after every such response, and some backends count resets
    /// (the rapid-reset defences). So a stream not ended yet is waited for, for a moment, off
    /// the request's path.
    pub(crate) fn finish(self) {
        if self.recv.is_end_stream() {
            return;
        }
        let H2Body {
            mut recv, lease, ..
        } = self;
        tokio::spawn(async move {
            let _ = tokio::time::timeout(END_STREAM_GRACE, recv.data()).await;
            // Until then the stream still counts against the backend's limit.
            drop(lease);
        });
    }

    /// Gives the window `n` bytes took back to the backend, once they have gone on.
    pub(crate) fn release(&mut self, n: usize) {
        let _ = self.recv.flow_control().release_capacity(n);
    }
}

/// How much of a body may still come: its `content-length`, checked against what arrives.
pub(crate) struct Expected(Option<u64>);

impl Expected {
    pub(crate) fn new(framing: Framing) -> Expected {
        Expected(match framing {
            Framing::Length(n) => Some(n),
            _ => None,
        })
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<(), Relay> {
        if let Some(left) = self.0.as_mut() {
            *left = left
                .checked_sub(n as u64)
                .ok_or_else(|| Relay::backend("more body than its content-length"))?;
        }
        Ok(())
    }

    /// Whether the whole `content-length` has come: the body is over, whether or not the
    /// stream's end has come yet (a backend may send it in a frame of its own, and the client,
    /// with all it was promised, may be gone before that).
    pub(crate) fn done(&self) -> bool {
        self.0 == Some(0)
    }

    pub(crate) fn end(&self) -> Result<(), Relay> {
        match self.0 {
            Some(left) if left > 0 => Err(Relay::backend(format!(
                "the HTTP/2 stream ended {left} bytes short of its content-length"
            ))),
            _ => Ok(()),
        }
    }
}

/// Sends the response head and relays an HTTP/2 backend's body to an HTTP/1.x client, chunked
/// when the head says so. The attempt completes as a success once the backend's stream is
/// over, before the last write.
pub(crate) async fn relay<S: ClientStream>(
    body: &mut H2Body,
    response: &FinalResponse,
    head: &[u8],
    client: &mut ClientEnd<'_, S>,
    attempt: &mut crate::upstream::Attempt,
    patience: Patience,
) -> Result<(), Relay> {
    if response.framing == Framing::None {
        attempt.complete(balance::Outcome::Success);
        return client.send(head, &[]).await;
    }
    let chunk = response.framing == Framing::Chunked && !response.dechunk;
    let mut expected = Expected::new(response.framing);
    let mut head = Some(head);
    let mut framed = Vec::new();
    loop {
        let next = if expected.done() {
            None
        } else {
            let watched = crate::io::watch(Some(client.stream.tcp()), client.watch);
            body.next(watched, patience).await?
        };
        let Some(data) = next else {
            expected.end()?;
            attempt.complete(balance::Outcome::Success);
            let last: &[u8] = if chunk { b"0\r\n\r\n" } else { b"" };
            let head = head.unwrap_or_default();
            if head.is_empty() && last.is_empty() {
                return Ok(());
            }
            return client.send(head, last).await;
        };
        if data.is_empty() {
            continue;
        }
        expected.take(data.len())?;
        if expected.done() {
            attempt.complete(balance::Outcome::Success);
        }
        if chunk {
            use std::io::Write as _;
            framed.clear();
            let _ = write!(framed, "{:x}\r\n", data.len());
            framed.extend_from_slice(&data);
            framed.extend_from_slice(b"\r\n");
            client
                .send(head.take().unwrap_or_default(), &framed)
                .await?;
        } else {
            client.send(head.take().unwrap_or_default(), &data).await?;
        }
        body.release(data.len());
    }
}

/// A health check's `GET path` over HTTP/2, on a connection of its own (closed after it, with
/// GOAWAY): the response's status. `written` is the backend's address as written: the
/// `:authority`, and over TLS the name to verify.
pub async fn check_get(
    addr: std::net::SocketAddr,
    written: &str,
    path: &str,
    tls: Option<&BackendTls>,
) -> Result<http::StatusCode, String> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let io = match tls {
        None => Either::Left(tcp),
        Some(tls) => {
            let name = tls.name_for(written).ok_or_else(|| {
                format!("TLS: no name to verify {written} by: set tls_server_name")
            })?;
            let stream = tls
                .handshake(tcp, name)
                .await
                .map_err(|e| format!("TLS: {e}"))?;
            Either::Right(Box::new(stream))
        }
    };
    let (send, connection) = h2::client::Builder::new()
        .enable_push(false)
        .handshake::<BackendStream, Bytes>(io)
        .await
        .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    let authority = if written.is_empty() {
        addr.to_string()
    } else {
        written.to_owned()
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let request = http::Request::get(format!("{scheme}://{authority}{path}"))
        .header(http::header::USER_AGENT, "fulcrum-health-check")
        .body(())
        .map_err(|e| format!("GET {path}: {e}"))?;
    tokio::pin!(connection);
    let exchange = async move {
        let mut send = send.ready().await?;
        let (response, _) = send.send_request(request, true)?;
        let response = response.await?;
        Ok::<_, h2::Error>(response.status())
    };
    let status = tokio::select! {
        status = exchange => status.map_err(|e| format!("HTTP/2: {e}"))?,
        ended = &mut connection => {
            return Err(match ended {
                Ok(()) => "the HTTP/2 connection ended before the response".to_owned(),
                Err(e) => format!("HTTP/2: {e}"),
            });
        }
    };
    // Every handle is gone: the connection says GOAWAY and closes (bounded by the caller's
    // check timeout).
    let _ = connection.await;
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_head_becomes_fields() {
        let head = b"POST /a?b=1 HTTP/1.1\r\nHost: example.com:8080\r\nConnection: close\r\nTE: trailers\r\nX-Forwarded-For: 10.0.0.1\r\nContent-Length: 3\r\n\r\n";
        let r = to_fields(head, false).unwrap();
        assert_eq!(r.method(), "POST");
        assert_eq!(r.uri().to_string(), "http://example.com:8080/a?b=1");
        let names: Vec<&str> = r.headers().keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["x-forwarded-for", "content-length"]);
        let r = to_fields(b"GET / HTTP/1.1\r\nHost: a\r\nTE: gzip\r\n\r\n", true).unwrap();
        assert_eq!(r.uri().to_string(), "https://a/");
        assert!(r.headers().is_empty());
        // `OPTIONS *` keeps its authority.
        let r = to_fields(b"OPTIONS * HTTP/1.1\r\nHost: a:81\r\n\r\n", false).unwrap();
        assert_eq!(r.uri().authority().map(|a| a.as_str()), Some("a:81"));
        assert_eq!(r.uri().path(), "*");
        assert!(to_fields(b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", false).is_err());
    }

    #[test]
    fn the_response_head_says_its_framing() {
        let response = http::Response::builder()
            .status(404)
            .header("server", "b")
            .body(())
            .unwrap();
        let (parts, ()) = response.into_parts();
        let mut raw = Vec::new();
        write_response_head(&parts, false, false, &mut raw);
        assert_eq!(
            raw,
            b"HTTP/1.1 404 Not Found\r\nserver: b\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        raw.clear();
        write_response_head(&parts, true, false, &mut raw);
        assert!(raw.ends_with(b"content-length: 0\r\n\r\n"));
        // A HEAD's answer, or a 204, says nothing of a body.
        raw.clear();
        write_response_head(&parts, false, true, &mut raw);
        assert_eq!(raw, b"HTTP/1.1 404 Not Found\r\nserver: b\r\n\r\n");
    }
}
