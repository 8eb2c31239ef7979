//! One client connection's life in the proxy.
//!
//! For each request on the connection:
//!
//! 1. The head is read within `client_header_timeout` (408 if part of it came and the rest did
//!    not; an idle keep-alive connection is just closed), parsed, checked and rewritten for the
//!    backend in one pass ([`http1::parse_request`]).
//! 2. The body, if any, is read in full first (nginx's default `proxy_request_buffering on`),
//!    so that a failed attempt can be retried on the next backend with the same bytes: a
//!    `Content-Length` body stays in the connection's read buffer, a chunked one is decoded.
//! 3. Attempts: pick a backend, send head and body in one write on a kept-alive connection or
//!    a new one, read the response head within `read_timeout`. On a failure that allows it
//!    (connect error, timeout, reset before the response head; after sending, only for
//!    idempotent methods) the next backend is tried, skipping those already tried (chained
//!    failover, seed 004).
//! 4. The answer: the response head rewritten for the client, written with the first body
//!    bytes in one write, then the body relayed as it arrives (at most `read_timeout` between
//!    two reads). If the backend fails mid-body the client connection is closed, so a
//!    truncated answer never looks complete. Or our own 502 (invalid answer or reset), 503 (no
//!    backend available or none reachable) or 504 (timeout).

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use balance::{Affinity, BackendId, Outcome};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::time::{Instant, timeout_at};

use crate::buffer::Buffer;
use crate::connections::{BackendConn, ConnectError, Connections};
use crate::http1::{
    self, Chunked, ClientSide, FinalResponse, Framing, Limits, Reject, RequestHead, ResponseHead,
};
use crate::settings::{HashKey, ListenerSettings};
use crate::upstream::{Attempt, AttemptError, Upstream};

/// What every request on one listener shares.
#[derive(Debug)]
pub(crate) struct ListenerContext {
    pub(crate) settings: ListenerSettings,
    pub(crate) upstream: Arc<Upstream>,
    pub(crate) access_log: bool,
}

/// A listener as one worker serves it: the shared context and the worker's own connections to
/// the upstream's backends.
#[derive(Debug)]
pub(crate) struct WorkerListener {
    pub(crate) ctx: Arc<ListenerContext>,
    pub(crate) connections: Vec<Connections>,
}

/// Initial read buffer of a client connection; it grows to hold a request body.
const CLIENT_BUFFER: usize = 16 * 1024;
/// How long a closing connection's unread input is drained, so the kernel does not answer it
/// with a reset that could destroy our last response before the client reads it.
const LINGER: Duration = Duration::from_secs(2);

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
const HEAD_TIMEOUT: Reject = http1::reject(
    408,
    "408 Request Timeout: the request head did not arrive in time\n",
);
const BODY_TIMEOUT: Reject = http1::reject(
    408,
    "408 Request Timeout: the request body did not arrive in time\n",
);
const TOO_LARGE: Reject = http1::reject(
    413,
    "413 Content Too Large: the request body exceeds max_body_bytes\n",
);
const INCOMPLETE_BODY: Reject = http1::reject(400, "400 Bad Request: incomplete request body\n");
const BAD_CHUNKED: Reject = http1::reject(400, "400 Bad Request: invalid chunked request body\n");

/// Our answer when no backend answered, by the last failure (as nginx does).
fn failure_reject(last: Option<&AttemptError>) -> Reject {
    match last {
        None | Some(AttemptError::Connect(_)) => Reject {
            status: 503,
            text: "503 Service Unavailable: no backend available\n",
        },
        Some(AttemptError::ConnectTimeout) | Some(AttemptError::ReadTimeout) => Reject {
            status: 504,
            text: "504 Gateway Timeout: the backend did not answer in time\n",
        },
        Some(AttemptError::Reset(_)) | Some(AttemptError::Invalid(_)) => Reject {
            status: 502,
            text: "502 Bad Gateway: the backend's answer was invalid or cut short\n",
        },
    }
}

/// Serves one client connection until it closes, the proxy stops, or an error ends it.
pub(crate) async fn serve(
    stream: TcpStream,
    client: SocketAddr,
    listener: Arc<WorkerListener>,
    stop: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
) {
    let mut conn = ClientConn {
        client_addr: http1::ClientAddr::new(client.ip(), &listener.ctx.settings.trusted_proxies),
        stream,
        client,
        listener,
        stop,
        inbuf: Buffer::new(CLIENT_BUFFER),
        head: Vec::with_capacity(1024),
        out: Vec::with_capacity(1024),
        body: Vec::new(),
        scratch: Vec::new(),
        key: Vec::new(),
    };
    if conn.run().await == End::Linger {
        conn.linger().await;
    }
    drop(permit);
}

/// How a connection ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Just close.
    Close,
    /// We answered and close: drain what the client may still be sending first.
    Linger,
}

/// The body of the request being forwarded.
#[derive(Debug, Clone, Copy)]
enum Body {
    None,
    /// The first `n` bytes of the client's read buffer.
    InBuffer(usize),
    /// De-chunked into `ClientConn::body`.
    Decoded,
}

/// How an attempt ended.
enum Exchange {
    /// The whole response reached the client.
    Done { status: u16, keep_alive: bool },
    /// A response was started but could not be finished: close the client connection (with a
    /// reset if the backend failed, so the client cannot take a close-delimited body as
    /// complete).
    Aborted { status: u16, backend_failed: bool },
    /// Nothing was sent to the client: another backend may be tried.
    Failed(AttemptError),
}

/// A failure to get a response head, before anything went to the client.
enum HeadError {
    /// A kept-alive connection the backend had closed: try a fresh one.
    Stale,
    Attempt(AttemptError),
}

struct ClientConn {
    stream: TcpStream,
    client: SocketAddr,
    listener: Arc<WorkerListener>,
    stop: watch::Receiver<bool>,
    /// The client's address as the forwarding headers write it.
    client_addr: http1::ClientAddr,
    inbuf: Buffer,
    /// The request head for the backend.
    head: Vec<u8>,
    /// The response head for the client, or our own answer.
    out: Vec<u8>,
    /// A de-chunked request body.
    body: Vec<u8>,
    /// De-chunked response data, for HTTP/1.0 clients.
    scratch: Vec<u8>,
    /// The request's hash key, for algorithms that hash `hash_key`.
    key: Vec<u8>,
}

/// Whether `buf` may hold a whole request head (or enough to refuse it): a blank line
/// (`\n\n` or `\n\r\n`) in what came after the first `scanned` bytes, or `limit` bytes.
fn head_may_be_complete(buf: &[u8], scanned: usize, limit: usize) -> bool {
    if buf.len() >= limit {
        return true;
    }
    let new = &buf[scanned.saturating_sub(2).min(buf.len())..];
    new.windows(2).any(|w| w == b"\n\n") || new.windows(3).any(|w| w == b"\n\r\n")
}

/// The instant `d` from now; a duration too large for the clock (a configured "10000y") means
/// never, instead of an overflow.
fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}

/// Writes `a` then `b` to the client within `timeout` (nginx `send_timeout`: a client that
/// stops reading does not hold its backend connection forever).
async fn send(stream: &mut TcpStream, a: &[u8], b: &[u8], timeout: Duration) -> io::Result<()> {
    match tokio::time::timeout(timeout, write_two(stream, a, b)).await {
        Ok(written) => written,
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}

/// Writes `a` then `b` with as few system calls as the socket allows (one, usually).
async fn write_two(stream: &mut TcpStream, a: &[u8], b: &[u8]) -> io::Result<()> {
    if b.is_empty() {
        return stream.write_all(a).await;
    }
    let mut slices = [IoSlice::new(a), IoSlice::new(b)];
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = stream.write_vectored(rest).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut rest, n);
    }
    Ok(())
}

impl ClientConn {
    fn settings(&self) -> &ListenerSettings {
        &self.listener.ctx.settings
    }

    async fn run(&mut self) -> End {
        loop {
            let req = match self.read_head().await {
                Ok(Some(req)) => req,
                Ok(None) => return End::Close,
                Err(reject) => return self.answer_and_close(reject).await,
            };
            match self.serve_request(req).await {
                Some(true) => {}
                Some(false) => return End::Linger,
                None => return End::Close,
            }
        }
    }

    /// The next request head; `Ok(None)` when the connection should just close (the client
    /// closed it, went idle too long, or the proxy is stopping).
    async fn read_head(&mut self) -> Result<Option<RequestHead>, Reject> {
        let upstream = Arc::clone(&self.listener.ctx.upstream);
        let limits = Limits {
            max_headers: self.settings().max_headers,
            max_header_bytes: self.settings().max_header_bytes,
            key: upstream.hashed_request_part(),
        };
        let deadline = after(self.settings().client_header_timeout);
        // Bytes already looked at for the blank line that ends a head: a client sending its
        // head a byte at a time costs one scan of it, not one parse per byte.
        let mut scanned = 0;
        loop {
            let filled = self.inbuf.filled();
            let complete = head_may_be_complete(filled, scanned, limits.max_header_bytes);
            scanned = filled.len();
            if complete {
                self.head.clear();
                let client = &self.client_addr;
                if let Some(req) =
                    http1::parse_request(self.inbuf.filled(), limits, client, &mut self.head)?
                {
                    return Ok(Some(req));
                }
            } else if *self.stop.borrow() {
                return Ok(None);
            }
            let idle = self.inbuf.is_empty();
            let read = tokio::select! {
                biased;
                read = timeout_at(deadline, self.inbuf.read_from(&mut self.stream)) => read,
                _ = self.stop.changed(), if idle => return Ok(None),
            };
            match read {
                Ok(Ok(0)) | Ok(Err(_)) => return Ok(None),
                Ok(Ok(_)) => {}
                // Part of a request came, the rest did not: answer. An idle connection is
                // just closed (a client reusing it right then would take a 408 as its answer).
                Err(_) if !self.inbuf.is_empty() => return Err(HEAD_TIMEOUT),
                Err(_) => return Ok(None),
            }
        }
    }

    /// Proxies one request. `Some(true)`: the connection stays open; `Some(false)`: close it
    /// after what was answered; `None`: close it now.
    async fn serve_request(&mut self, req: RequestHead) -> Option<bool> {
        let started = Instant::now();
        let access_log = self.listener.ctx.access_log;
        let logged = access_log.then(|| {
            let raw = self.inbuf.filled();
            (
                String::from_utf8_lossy(&raw[req.method.clone()]).into_owned(),
                String::from_utf8_lossy(&raw[req.target.clone()]).into_owned(),
            )
        });
        if self.listener.ctx.upstream.settings().algorithm.affinity() == Some(Affinity::Key) {
            self.key.clear();
            match self.listener.ctx.upstream.settings().hash_key {
                HashKey::ClientIp => self.key.extend_from_slice(self.client_addr.ip().as_bytes()),
                _ => self
                    .key
                    .extend_from_slice(&self.inbuf.filled()[req.key.clone()]),
            }
        }
        self.inbuf.consume(req.head_len);

        let body = match self.read_body(&req).await {
            Ok(body) => body,
            Err(Some(reject)) => {
                self.log(logged, reject.status, None, started);
                return (self.answer_and_close(reject).await == End::Linger).then_some(false);
            }
            Err(None) => return None,
        };
        let body_len = match body {
            Body::None => None,
            Body::InBuffer(n) => Some(n),
            Body::Decoded => Some(self.body.len()),
        };
        if req.has_host {
            http1::finish_request_head(&mut self.head, body_len);
        }

        let upstream = Arc::clone(&self.listener.ctx.upstream);
        let mut octets = [0u8; 16];
        let key = std::mem::take(&mut self.key);
        let affinity = match upstream.settings().algorithm.affinity() {
            None => None,
            Some(Affinity::AddressOctets) => Some(address_octets(self.client.ip(), &mut octets)),
            Some(Affinity::Key) => Some(&key[..]),
        };
        let idempotent = req.idempotent || upstream.settings().retry_non_idempotent;
        let mut tried: Vec<BackendId> = Vec::new();
        let mut last_error: Option<AttemptError> = None;
        let mut result = None;
        while tried.len() < upstream.max_attempts() {
            let Some(attempt) = upstream.pick(affinity, &tried) else {
                break;
            };
            let backend = attempt.backend;
            match self
                .exchange(attempt, &req, body, body_len, idempotent)
                .await
            {
                Exchange::Done { status, keep_alive } => {
                    result = Some((status, Some(backend), Some(keep_alive)));
                    break;
                }
                Exchange::Aborted {
                    status,
                    backend_failed,
                } => {
                    if backend_failed {
                        // A reset rather than a clean end of stream: a body delimited by the
                        // close must not look complete.
                        let _ =
                            socket2::SockRef::from(&self.stream).set_linger(Some(Duration::ZERO));
                    }
                    result = Some((status, Some(backend), None));
                    break;
                }
                Exchange::Failed(e) => {
                    tracing::warn!(
                        upstream = %upstream.name(),
                        backend = %upstream.backend_addr(backend),
                        error = %e,
                        "attempt failed"
                    );
                    let next = e.retriable() && (idempotent || !e.request_sent());
                    last_error = Some(e);
                    if !next {
                        break;
                    }
                    tried.push(backend);
                }
            }
        }
        self.key = key;
        if let Body::InBuffer(n) = body {
            self.inbuf.consume(n);
        }
        // A large body grew the buffers; an idle keep-alive connection gives the memory back.
        self.inbuf.shrink_to(CLIENT_BUFFER);
        for scratch in [&mut self.body, &mut self.scratch] {
            if scratch.capacity() > CLIENT_BUFFER {
                *scratch = Vec::new();
            }
        }
        let (status, backend, keep_alive) = match result {
            Some(done) => done,
            None => {
                let reject = failure_reject(last_error.as_ref());
                let keep_alive = req.keep_alive && !*self.stop.borrow();
                http1::local_response(&mut self.out, reject, keep_alive, req.http11);
                let st = self.settings().send_timeout;
                let sent = send(&mut self.stream, &self.out, &[], st).await.is_ok();
                (reject.status, None, sent.then_some(keep_alive))
            }
        };
        let backend = backend.map(|b| upstream.backend_addr(b));
        self.log(logged, status, backend, started);
        keep_alive
    }

    fn log(
        &self,
        logged: Option<(String, String)>,
        status: u16,
        backend: Option<SocketAddr>,
        started: Instant,
    ) {
        let Some((method, path)) = logged else {
            return;
        };
        tracing::info!(
            target: "fulcrum::access",
            client = %self.client.ip(),
            method = %method,
            path = %path,
            upstream = %self.listener.ctx.upstream.name(),
            backend = %backend.map_or_else(|| "-".to_owned(), |b| b.to_string()),
            status,
            duration_us = started.elapsed().as_micros() as u64,
        );
    }

    /// Reads the request body. `Err(Some(_))`: answer that and close; `Err(None)`: the client
    /// went away.
    async fn read_body(&mut self, req: &RequestHead) -> Result<Body, Option<Reject>> {
        let max = self.settings().max_body_bytes;
        let mut continued = !req.expect_continue || !req.http11;
        match req.body {
            Framing::None | Framing::Close => Ok(Body::None),
            Framing::Length(n) => {
                if n > max {
                    return Err(Some(TOO_LARGE));
                }
                // The buffer grows as the body arrives, not on the client's word.
                let n = n as usize;
                while self.inbuf.len() < n {
                    self.more_body(&mut continued).await?;
                }
                Ok(Body::InBuffer(n))
            }
            Framing::Chunked => {
                self.body.clear();
                let mut chunked = Chunked::default();
                loop {
                    if !self.inbuf.is_empty() {
                        let body = &mut self.body;
                        let used = chunked
                            .advance(self.inbuf.filled(), |data| body.extend_from_slice(data))
                            .map_err(|_| Some(BAD_CHUNKED))?;
                        self.inbuf.consume(used);
                        if self.body.len() as u64 > max {
                            return Err(Some(TOO_LARGE));
                        }
                        if chunked.is_done() {
                            return Ok(Body::Decoded);
                        }
                    }
                    self.more_body(&mut continued).await?;
                }
            }
        }
    }

    /// Reads more of a request body within `client_body_timeout`, first telling a client that
    /// waits for it to go on (`100 Continue`, once).
    async fn more_body(&mut self, continued: &mut bool) -> Result<(), Option<Reject>> {
        if !*continued {
            *continued = true;
            let st = self.settings().send_timeout;
            send(&mut self.stream, CONTINUE, &[], st)
                .await
                .map_err(|_| None)?;
        }
        let timeout = self.settings().client_body_timeout;
        match tokio::time::timeout(timeout, self.inbuf.read_from(&mut self.stream)).await {
            Ok(Ok(0)) => Err(Some(INCOMPLETE_BODY)),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(None),
            Err(_) => Err(Some(BODY_TIMEOUT)),
        }
    }

    /// Our own answer, then the connection closes.
    async fn answer_and_close(&mut self, reject: Reject) -> End {
        http1::local_response(&mut self.out, reject, false, true);
        let st = self.settings().send_timeout;
        match send(&mut self.stream, &self.out, &[], st).await {
            Ok(()) => End::Linger,
            Err(_) => End::Close,
        }
    }

    /// Closes our side, then reads and discards what the client still sends, for a while.
    async fn linger(&mut self) {
        if self.stream.shutdown().await.is_err() {
            return;
        }
        let deadline = after(LINGER);
        loop {
            self.inbuf.consume(self.inbuf.len());
            match timeout_at(deadline, self.inbuf.read_from(&mut self.stream)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
        }
    }

    /// One attempt on one backend.
    async fn exchange(
        &mut self,
        mut attempt: Attempt,
        req: &RequestHead,
        body: Body,
        body_len: Option<usize>,
        idempotent: bool,
    ) -> Exchange {
        let listener = Arc::clone(&self.listener);
        let upstream = &listener.ctx.upstream;
        let settings = upstream.settings();
        let conns = &listener.connections[attempt.backend.index()];
        let client = ClientSide {
            http11: req.http11,
            keep_alive: req.keep_alive && !*self.stop.borrow(),
            is_head: req.is_head,
        };
        // An HTTP/1.0 client may leave Host out; the backend gets HTTP/1.1, which needs one:
        // name the backend, as nginx's default `proxy_set_header Host $proxy_host`.
        let own_head;
        let head: &[u8] = if req.has_host {
            &self.head
        } else {
            let mut h = self.head.clone();
            let addr = upstream.backend_addr(attempt.backend);
            h.extend_from_slice(format!("Host: {addr}\r\n").as_bytes());
            http1::finish_request_head(&mut h, body_len);
            own_head = h;
            &own_head
        };
        let body_bytes: &[u8] = match body {
            Body::None => &[],
            Body::InBuffer(n) => &self.inbuf.filled()[..n],
            Body::Decoded => &self.body,
        };
        let (mut conn, response) = loop {
            let (mut conn, reused) = match conns.take_idle() {
                Some(conn) => (conn, true),
                None => match conns.connect(settings.connect_timeout).await {
                    Ok(conn) => (conn, false),
                    Err(e) => {
                        attempt.complete(Outcome::Failure);
                        return Exchange::Failed(match e {
                            ConnectError::Io(e) => AttemptError::Connect(e),
                            ConnectError::Timeout => AttemptError::ConnectTimeout,
                        });
                    }
                },
            };
            let sent = send_and_read_head(
                &mut conn,
                head,
                body_bytes,
                client,
                settings.read_timeout,
                idempotent,
                &mut self.out,
            )
            .await;
            match sent {
                Ok(response) => break (conn, response),
                Err(HeadError::Stale) if reused => continue,
                Err(HeadError::Stale) => {
                    attempt.complete(Outcome::Failure);
                    return Exchange::Failed(AttemptError::Reset(
                        io::ErrorKind::UnexpectedEof.into(),
                    ));
                }
                Err(HeadError::Attempt(e)) => {
                    attempt.complete(Outcome::Failure);
                    return Exchange::Failed(e);
                }
            }
        };
        conn.buf.consume(response.head_len);
        let status = response.status;
        match self
            .relay(&mut conn, &response, &mut attempt, settings.read_timeout)
            .await
        {
            Ok(()) => {
                attempt.complete(Outcome::Success);
                if response.backend_keep_alive && conn.buf.is_empty() {
                    conns.put_idle(conn);
                }
                Exchange::Done {
                    status,
                    keep_alive: response.client_keep_alive,
                }
            }
            Err(Relay::Backend(why)) => {
                tracing::warn!(
                    backend = %upstream.backend_addr(attempt.backend),
                    error = %why,
                    "backend failed in the middle of the response body; closing the client connection"
                );
                attempt.complete(Outcome::Failure);
                Exchange::Aborted {
                    status,
                    backend_failed: true,
                }
            }
            Err(Relay::Client) => {
                attempt.complete(Outcome::Cancelled);
                Exchange::Aborted {
                    status,
                    backend_failed: false,
                }
            }
        }
    }

    /// Sends the response head (in `self.out`) and relays the body to the client. The attempt
    /// completes as a success as soon as the backend's part is over, before the last write to
    /// the client: the backend is free from then on.
    async fn relay(
        &mut self,
        conn: &mut BackendConn,
        response: &FinalResponse,
        attempt: &mut Attempt,
        read_timeout: Duration,
    ) -> Result<(), Relay> {
        let st = self.settings().send_timeout;
        let client = &mut self.stream;
        match response.framing {
            Framing::None => {
                attempt.complete(Outcome::Success);
                send(client, &self.out, &[], st)
                    .await
                    .map_err(|_| Relay::Client)
            }
            Framing::Length(n) => {
                let first = conn.buf.len().min(usize::try_from(n).unwrap_or(usize::MAX));
                let mut remaining = n - first as u64;
                if remaining == 0 {
                    attempt.complete(Outcome::Success);
                }
                send(client, &self.out, &conn.buf.filled()[..first], st)
                    .await
                    .map_err(|_| Relay::Client)?;
                conn.buf.consume(first);
                while remaining > 0 {
                    read_backend(conn, read_timeout).await?;
                    let k = conn
                        .buf
                        .len()
                        .min(usize::try_from(remaining).unwrap_or(usize::MAX));
                    if k as u64 == remaining {
                        attempt.complete(Outcome::Success);
                    }
                    send(client, &conn.buf.filled()[..k], &[], st)
                        .await
                        .map_err(|_| Relay::Client)?;
                    conn.buf.consume(k);
                    remaining -= k as u64;
                }
                Ok(())
            }
            Framing::Chunked => {
                let mut chunked = Chunked::default();
                let mut head = Some(&self.out[..]);
                loop {
                    let (used, data): (usize, &[u8]) = if response.dechunk {
                        self.scratch.clear();
                        let scratch = &mut self.scratch;
                        let used = chunked
                            .advance(conn.buf.filled(), |d| scratch.extend_from_slice(d))
                            .map_err(|e| Relay::Backend(e.to_string()))?;
                        (used, &self.scratch)
                    } else {
                        let used = chunked
                            .advance(conn.buf.filled(), |_| {})
                            .map_err(|e| Relay::Backend(e.to_string()))?;
                        (used, &conn.buf.filled()[..used])
                    };
                    if chunked.is_done() {
                        attempt.complete(Outcome::Success);
                    }
                    if let Some(h) = head.take() {
                        send(client, h, data, st).await
                    } else {
                        send(client, data, &[], st).await
                    }
                    .map_err(|_| Relay::Client)?;
                    conn.buf.consume(used);
                    if chunked.is_done() {
                        return Ok(());
                    }
                    read_backend(conn, read_timeout).await?;
                }
            }
            Framing::Close => {
                send(client, &self.out, conn.buf.filled(), st)
                    .await
                    .map_err(|_| Relay::Client)?;
                loop {
                    conn.buf.consume(conn.buf.len());
                    if read_some(conn, read_timeout).await? == 0 {
                        // The end of the stream is the end of this body.
                        attempt.complete(Outcome::Success);
                        return Ok(());
                    }
                    send(client, conn.buf.filled(), &[], st)
                        .await
                        .map_err(|_| Relay::Client)?;
                }
            }
        }
    }
}

/// Why a relay stopped.
enum Relay {
    Backend(String),
    Client,
}

/// Reads more of a response body within `read_timeout`: the bytes read, 0 at the end of the
/// stream.
async fn read_some(conn: &mut BackendConn, read_timeout: Duration) -> Result<usize, Relay> {
    match timeout_at(after(read_timeout), conn.buf.read_from(&mut conn.stream)).await {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => Err(Relay::Backend(e.to_string())),
        Err(_) => Err(Relay::Backend(format!(
            "nothing for {read_timeout:?} (read_timeout)"
        ))),
    }
}

/// Reads more of a response body whose length is known; the end of the stream is an error
/// (the body was not complete).
async fn read_backend(conn: &mut BackendConn, read_timeout: Duration) -> Result<(), Relay> {
    match read_some(conn, read_timeout).await? {
        0 => Err(Relay::Backend(
            "connection closed before the end of the body".into(),
        )),
        _ => Ok(()),
    }
}

/// Writes the request and reads the final response head, rewriting it for the client into
/// `out`.
async fn send_and_read_head(
    conn: &mut BackendConn,
    head: &[u8],
    body: &[u8],
    client: ClientSide,
    read_timeout: Duration,
    idempotent: bool,
    out: &mut Vec<u8>,
) -> Result<FinalResponse, HeadError> {
    let deadline = after(read_timeout);
    // A write that fails is not the end: a backend may answer before reading the whole
    // request (a 413 or 401 for a large body) and close. Its answer, if there is one, is what
    // the client gets, and the backend is not blamed.
    let unsent = match timeout_at(deadline, write_two(&mut conn.stream, head, body)).await {
        Ok(Ok(())) => false,
        Ok(Err(_)) => true,
        Err(_) => return Err(HeadError::Attempt(AttemptError::ReadTimeout)),
    };
    let mut received = false;
    loop {
        if !conn.buf.is_empty() {
            received = true;
            match http1::parse_response(conn.buf.filled(), client, out) {
                Ok(Some(ResponseHead::Final(mut response))) => {
                    // Part of the request may still be unread: the connection cannot be reused.
                    response.backend_keep_alive &= !unsent;
                    return Ok(response);
                }
                Ok(Some(ResponseHead::Interim(n))) => {
                    conn.buf.consume(n);
                    continue;
                }
                Ok(None) if conn.buf.len() >= CLIENT_BUFFER => {
                    return Err(HeadError::Attempt(AttemptError::Invalid(
                        "response head larger than 16 KiB",
                    )));
                }
                Ok(None) => {}
                Err(why) => return Err(HeadError::Attempt(AttemptError::Invalid(why))),
            }
        }
        match timeout_at(deadline, conn.buf.read_from(&mut conn.stream)).await {
            Ok(Ok(n)) if n > 0 => {}
            // Closed before a single byte: a kept-alive connection the backend dropped as the
            // request went out. Safe to repeat on a fresh one if the request did not get
            // through, or if the method may be repeated.
            Ok(Ok(_)) | Ok(Err(_)) if !received && (unsent || idempotent) => {
                return Err(HeadError::Stale);
            }
            Ok(Ok(_)) => {
                return Err(HeadError::Attempt(AttemptError::Reset(
                    io::ErrorKind::UnexpectedEof.into(),
                )));
            }
            Ok(Err(e)) => return Err(HeadError::Attempt(AttemptError::Reset(e))),
            Err(_) => return Err(HeadError::Attempt(AttemptError::ReadTimeout)),
        }
    }
}

/// The client address as a hash key: 4 octets for IPv4 (IPv4-mapped IPv6 included), 16 for
/// IPv6. Algorithms that hash it decide how many octets count.
fn address_octets(ip: std::net::IpAddr, buf: &mut [u8; 16]) -> &[u8] {
    match ip.to_canonical() {
        std::net::IpAddr::V4(v4) => {
            buf[..4].copy_from_slice(&v4.octets());
            &buf[..4]
        }
        std::net::IpAddr::V6(v6) => {
            *buf = v6.octets();
            &buf[..]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_parsed_once_its_blank_line_or_the_limit_is_there() {
        assert!(!head_may_be_complete(b"", 0, 100));
        assert!(!head_may_be_complete(
            b"GET / HTTP/1.1\r\nHost: a\r\n",
            0,
            100
        ));
        assert!(head_may_be_complete(
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
            0,
            100
        ));
        assert!(head_may_be_complete(b"GET / HTTP/1.0\n\n", 0, 100));
        // The blank line straddles what was scanned and what is new.
        let head = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        assert!(head_may_be_complete(head, head.len() - 1, 100));
        assert!(head_may_be_complete(b"GET /aaaa", 0, 9));
    }

    #[test]
    fn octets_of_mapped_and_v6() {
        let mut buf = [0; 16];
        let v4: std::net::IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        assert_eq!(address_octets(v4, &mut buf), [10, 1, 2, 3]);
        let v6: std::net::IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(address_octets(v6, &mut buf).len(), 16);
    }
}
