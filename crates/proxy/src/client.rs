//! One HTTP/1.1 client connection's life in the proxy, plain or TLS ([`crate::dispatch`]
//! decided it speaks HTTP/1.1).
//!
//! For each request on the connection:
//!
//! 1. The head is read within `client_header_timeout` (408 if part of it came and the rest did
//!    not; an idle keep-alive connection is just closed), parsed, checked and rewritten for the
//!    backend in one pass ([`http1::parse_request`]).
//!    Then `limit_req`, `limit_conn` and `allow` / `deny` ([`crate::admission`], nginx's
//!    order): a refusal is answered at once, and a delay is waited with the client watched.
//! 2. The body, if any, is read in full first (nginx's default `proxy_request_buffering on`),
//!    so that a failed attempt can be retried with the same bytes: a `Content-Length` body
//!    stays in the connection's read buffer, a chunked one is decoded.
//! 3. The request is forwarded ([`crate::forward`]): backends picked and tried as the retry
//!    policy says, the answer relayed, or our own 502/503/504.
//! 4. One record ([`crate::record`]), counted and logged, for every request we answer (our own
//!    refusals included), with the backends tried, the status (499 when the client left
//!    first) and the time spent on backends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::io::AsyncWriteExt as _;
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::time::{Instant, timeout_at};

use crate::admission::{Asking, ConnGuard, Fields};
use crate::affinity::AffinityKey;
use crate::answers::{
    self, BAD_CHUNKED, BODY_TIMEOUT, CLIENT_CLOSED, HEAD_TIMEOUT, INCOMPLETE_BODY, NOT_FOUND,
    TOO_LARGE,
};
use crate::buffer::Buffer;
use crate::forward::{self, Ending, Scratch};
use crate::http1::{
    self, Chunked, ClientSide, Framing, Limits, LocalAnswer, Reject, RequestHead, Routed,
};
use crate::io::{ClientStream, after, send};
use crate::listener::WorkerListener;
use crate::record::{ClientProtocol, Fate, Record, Said};
use crate::request::{BodyPace, Forward};
use crate::route::Action;
use crate::settings::ListenerSettings;

/// Initial read buffer of a client connection (nginx's `client_header_buffer_size` is 1 KiB);
/// it grows for a larger head, up to `max_header_bytes`, and to hold a request body.
const CLIENT_BUFFER: usize = 4 * 1024;
/// How long a keep-alive connection waits for its next request before it gives its buffers
/// back (the 4 KiB read buffer and the scratch), as nginx frees an idle connection's: 10,000
/// idle clients then cost about what their sockets and tasks do (docs/security.md). A busy
/// connection keeps them, so nothing is allocated per request.
const IDLE_GRACE: Duration = Duration::from_secs(1);
/// How long a closing connection's unread input is drained, so the kernel does not answer it
/// with a reset that could destroy our last response before the client reads it.
const LINGER: Duration = Duration::from_secs(2);

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Serves HTTP/1.1 on an established connection, plain or TLS (which HTTP a connection
/// speaks is [`crate::dispatch`]'s to decide), until it closes, the proxy stops, or an error
/// ends it. `head_by`: when the first request's head must be whole (`client_header_timeout`
/// from the accept, the TLS handshake and the sniff counted in it); each later one gets
/// `client_header_timeout` from when it is waited for.
pub(crate) async fn serve<S: ClientStream>(
    stream: S,
    peer: SocketAddr,
    listener: Arc<WorkerListener>,
    stop: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
    head_by: Instant,
) {
    let mut client_addr = http1::ClientAddr::new(peer.ip(), &listener.ctx.settings.trusted_proxies);
    if listener.ctx.tls.is_some() {
        client_addr.set_https();
    }
    let mut conn = ClientConn {
        stream,
        peer,
        listener,
        stop,
        client_addr,
        inbuf: Buffer::new(CLIENT_BUFFER),
        scratch: Scratch::default(),
        body: Vec::new(),
        key: AffinityKey::default(),
        pipelining: false,
        first_head_by: Some(head_by),
        said_spare: Said::default(),
    };
    match conn.run().await {
        Next::Linger => conn.linger().await,
        Next::Answered => conn.close_answered().await,
        Next::KeepOpen | Next::Close => {}
    }
    drop(permit);
}

/// A request head's fields, as a limit's key reads them.
struct HeadFields<'a>(&'a [u8]);

impl Fields for HeadFields<'_> {
    fn values_of(&self, name: &str, each: &mut dyn FnMut(&[u8])) {
        for (n, value) in head_fields(self.0) {
            if n.eq_ignore_ascii_case(name.as_bytes()) {
                each(value);
            }
        }
    }
}

/// What the record of a request repeats of its coming, whatever becomes of it.
struct Came<'a> {
    said: Option<&'a Said>,
    started: Instant,
    protocol: ClientProtocol,
}

/// What the connection does after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Read the next request.
    KeepOpen,
    /// We answered before the request was read whole, and close: drain what the client may
    /// still be sending first.
    Linger,
    /// We answered a request read whole, and close: linger only if the client sent more.
    Answered,
    /// Close now.
    Close,
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

/// Why no request head came.
#[derive(Debug)]
enum NoHead {
    /// Just close: the client closed, went idle too long, or the proxy is stopping.
    Close,
    /// Refuse what came, and close.
    Refuse(Reject),
}

struct ClientConn<S> {
    stream: S,
    peer: SocketAddr,
    listener: Arc<WorkerListener>,
    stop: watch::Receiver<bool>,
    /// The client's address as the forwarding headers write it.
    client_addr: http1::ClientAddr,
    inbuf: Buffer,
    /// Buffers lent to forwarding.
    scratch: Scratch,
    /// A de-chunked request body.
    body: Vec<u8>,
    /// The request's affinity key, for algorithms that hash one.
    key: AffinityKey,
    /// The client has sent a request before the previous one was answered.
    pipelining: bool,
    /// When the first request's head must be whole; taken by the first read of a head.
    first_head_by: Option<Instant>,
    /// The last request's record for the access log, its buffers kept for the next.
    said_spare: Said,
}

/// Whether `buf` may hold a whole request head (or enough to refuse it): a blank line
/// (`\n\n` or `\n\r\n`) in what came after the first `scanned` bytes, or `limit` bytes.
fn head_may_be_complete(buf: &[u8], scanned: usize, limit: usize) -> bool {
    if buf.len() >= limit {
        return true;
    }
    let new = &buf[scanned.saturating_sub(2).min(buf.len())..];
    // Usually the head is the last thing read: no scan. Otherwise one pass from newline to
    // newline (two passes of `windows` comparisons cost about 1,200 instructions per request
    // on h2load's short head, issue 27).
    if new.ends_with(b"\n\n") || new.ends_with(b"\n\r\n") {
        return true;
    }
    let mut rest = new;
    while let Some(at) = rest.iter().position(|&b| b == b'\n') {
        let after = &rest[at + 1..];
        if after.starts_with(b"\n") || after.starts_with(b"\r\n") {
            return true;
        }
        rest = after;
    }
    false
}

/// What the access log repeats of a request, taken before its bytes leave the read buffer:
/// with the headers the log's format asks for (`wanted`). Written into `said`, the previous
/// request's, whose buffers are kept (no allocation per request on a keep-alive connection).
fn said_of(raw: &[u8], req: &RequestHead, wanted: &[Box<str>], mut said: Said) -> Said {
    let refill = |to: &mut Vec<u8>, range: &std::ops::Range<usize>| {
        to.clear();
        to.extend_from_slice(raw.get(range.clone()).unwrap_or_default());
    };
    said.time = SystemTime::now();
    refill(&mut said.method, &req.method);
    refill(&mut said.target, &req.target);
    refill(&mut said.referer, &req.referer);
    refill(&mut said.user_agent, &req.user_agent);
    said.headers =
        crate::record::wanted_headers(wanted, head_fields(&raw[..req.head_len.min(raw.len())]));
    said
}

/// The fields of a parsed head (its lines after the first, up to the blank line), as name
/// and value, the value without the spaces around it.
fn head_fields(head: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    head.split(|&b| b == b'\n').skip(1).filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        Some((name, value.trim_ascii()))
    })
}

/// What the access log repeats of a head refused before it could be parsed: the first two
/// words of its first line, as far as they go (its protocol, [`ClientProtocol::Unread`], may
/// say anything and is not repeated).
fn said_of_refused(raw: &[u8]) -> Said {
    let line = raw
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(&[]);
    let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let mut word = |limit: usize| match words.next() {
        Some(w) => w[..w.len().min(limit)].to_vec(),
        None => Vec::new(),
    };
    Said {
        time: SystemTime::now(),
        method: word(32),
        target: word(256),
        referer: Vec::new(),
        user_agent: Vec::new(),
        headers: Vec::new(),
    }
}

impl<S: ClientStream> ClientConn<S> {
    fn settings(&self) -> &ListenerSettings {
        &self.listener.ctx.settings
    }

    async fn run(&mut self) -> Next {
        loop {
            let req = match self.read_head().await {
                Ok(req) => req,
                Err(NoHead::Close) => return Next::Close,
                Err(NoHead::Refuse(reject)) => {
                    let said = self.said(|raw, _, _| said_of_refused(raw));
                    let answer = (reject.status, reject.text.len() as u64);
                    let protocol = ClientProtocol::Unread;
                    self.unforwarded(
                        Fate::Refused,
                        answer,
                        protocol,
                        said.as_ref(),
                        Instant::now(),
                    );
                    return self.answer_and_close(reject).await;
                }
            };
            match self.serve_request(req).await {
                Next::KeepOpen => {}
                end => return end,
            }
        }
    }

    /// What the access log repeats of the request in the read buffer, if the log is on.
    /// Counts and logs a request that ended before any backend: refused with our own answer
    /// (`Fate::Refused`), or its client gone in the middle of its body.
    fn unforwarded(
        &self,
        fate: Fate,
        (status, body_bytes): (u16, u64),
        protocol: ClientProtocol,
        said: Option<&Said>,
        started: Instant,
    ) {
        Record {
            fate,
            protocol,
            client: self.peer.ip(),
            line: said.map(Said::line),
            started,
            status,
            body_bytes,
            bytes_sent: None,
            backends: &[],
            earlier: &[],
            upstream_time: None,
            upstream: self.listener.ctx.default_upstream().map(|_| 0),
            route: None,
            request_id: None,
        }
        .finish(&self.listener);
    }

    /// What the access log repeats of the request in the read buffer, if the log is on,
    /// made by `make` from the bytes, the headers the log asks for and the previous request's
    /// record (given back by [`ClientConn::said_done`]).
    fn said(&mut self, make: impl FnOnce(&[u8], &[Box<str>], Said) -> Said) -> Option<Said> {
        let ctx = &self.listener.ctx;
        let spare = std::mem::take(&mut self.said_spare);
        ctx.access_log
            .is_some()
            .then(|| make(self.inbuf.filled(), ctx.log_headers(), spare))
    }

    /// Keeps a logged request's record for the next one's.
    fn said_done(&mut self, said: Option<Said>) {
        if let Some(said) = said {
            self.said_spare = said;
        }
    }

    /// The next request head.
    async fn read_head(&mut self) -> Result<RequestHead, NoHead> {
        let deadline = self
            .first_head_by
            .take()
            .unwrap_or_else(|| after(self.settings().client_header_timeout));
        // Bytes already looked at for the blank line that ends a head: a client sending its
        // head a byte at a time costs one scan of it, not one parse per byte.
        let mut scanned = 0;
        let mut read_any = false;
        loop {
            let filled = self.inbuf.filled();
            let max_header_bytes = self.settings().max_header_bytes;
            let complete = head_may_be_complete(filled, scanned, max_header_bytes);
            scanned = filled.len();
            if complete {
                match self.parse_head() {
                    Ok(Some(req)) => {
                        // The whole head was here before this request began to be read: it
                        // came while the previous one was being answered.
                        self.pipelining |= !read_any;
                        return Ok(req);
                    }
                    Ok(None) => {}
                    Err(reject) => return Err(NoHead::Refuse(reject)),
                }
            } else if *self.stop.borrow() {
                return Err(NoHead::Close);
            }
            let idle = self.inbuf.is_empty();
            if idle && !read_any && !self.idle_wait(deadline).await {
                return Err(NoHead::Close);
            }
            let read = tokio::select! {
                biased;
                read = timeout_at(deadline, self.inbuf.read_from(&mut self.stream)) => read,
                _ = self.stop.changed(), if idle => return Err(NoHead::Close),
            };
            match read {
                Ok(Ok(0)) | Ok(Err(_)) => return Err(NoHead::Close),
                Ok(Ok(_)) => read_any = true,
                // Part of a request came, the rest did not: answer. An idle connection is
                // just closed (a client reusing it right then would take a 408 as its answer).
                Err(_) if !self.inbuf.is_empty() => return Err(NoHead::Refuse(HEAD_TIMEOUT)),
                Err(_) => return Err(NoHead::Close),
            }
        }
    }

    /// Parses the head in the read buffer (`None`: not complete yet) with the listener in
    /// force: after a reload, a request on a connection opened before it is routed by the new
    /// configuration.
    fn parse_head(&mut self) -> Result<Option<RequestHead>, Reject> {
        if self.listener.is_retired() {
            self.listener = self.listener.latest();
        }
        let ctx = &self.listener.ctx;
        let default_settings = ctx.default_upstream().map(|u| u.settings());
        let limits = Limits {
            max_headers: ctx.settings.max_headers,
            max_header_bytes: ctx.settings.max_header_bytes,
            key: default_settings
                .as_deref()
                .and_then(crate::upstream::hashed_request_part),
            sticky: default_settings
                .as_deref()
                .and_then(crate::upstream::sticky_cookie),
            upgrade: &ctx.settings.upgrade,
            routes: ctx.routes.as_ref().map(|r| (r, ctx.has_default)),
            edits: ctx.edits(),
        };
        self.scratch.ready();
        let head = &mut self.scratch.head;
        head.clear();
        http1::parse_request(self.inbuf.filled(), limits, &self.client_addr, head)
    }

    /// Proxies one request.
    async fn serve_request(&mut self, req: RequestHead) -> Next {
        let started = Instant::now();
        let said = self.said(|raw, wanted, spare| said_of(raw, &req, wanted, spare));
        let protocol = if req.http11 {
            ClientProtocol::Http11
        } else {
            ClientProtocol::Http10
        };
        // The listener's context outlives the borrows of the connection below.
        let listener = Arc::clone(&self.listener);
        let came = Came {
            said: said.as_ref(),
            started,
            protocol,
        };
        // Held until the request ends: its place in `limit_conn`'s count.
        let _in_flight = match self.admit(&req, &listener, &came).await {
            Ok(place) => place,
            Err(next) => {
                self.said_done(said);
                return next;
            }
        };
        let upstream = listener.ctx.upstream_for(&req.routed);
        let upstream_settings = upstream.map(|i| listener.ctx.upstreams[i].settings());
        if let Some(settings) = &upstream_settings {
            let hashed = &self.inbuf.filled()[req.key.clone()];
            self.key.take(settings, self.peer.ip(), Some(hashed));
        }
        self.inbuf.consume(req.head_len);

        let body = match self.read_body(&req).await {
            Ok(body) => body,
            Err(NoHead::Refuse(reject)) => {
                let answer = (reject.status, reject.text.len() as u64);
                self.unforwarded(Fate::Refused, answer, protocol, said.as_ref(), started);
                return self.answer_and_close(reject).await;
            }
            Err(NoHead::Close) => {
                // The client left in the middle of its body.
                let gone = (CLIENT_CLOSED, 0);
                self.unforwarded(Fate::ClientGone, gone, protocol, said.as_ref(), started);
                return Next::Close;
            }
        };

        let client = self.client_side(&req, body);
        let (Some(upstream), Some(upstream_settings)) = (upstream, upstream_settings) else {
            // A route answers it itself (or none took it): the body read is dropped.
            self.request_done(body);
            let (status, next, body_bytes) = self.returned(&req, client).await;
            Record {
                fate: Fate::Returned,
                protocol,
                client: self.peer.ip(),
                line: said.as_ref().map(Said::line),
                started,
                status,
                body_bytes,
                bytes_sent: None,
                backends: &[],
                earlier: &[],
                upstream_time: None,
                upstream: None,
                route: req.routed.route(),
                request_id: req.request_id(),
            }
            .finish(&listener);
            self.said_done(said);
            return next;
        };
        let body_data = match body {
            Body::None => None,
            Body::InBuffer(n) => Some(&self.inbuf.filled()[..n]),
            Body::Decoded => Some(&self.body[..]),
        };
        let head_len = self.scratch.head.len();
        let forward = Forward {
            watch_client: !self.pipelining,
            // What the client sent after an upgrade request is the new protocol's, for the
            // tunnel (a WebSocket client waits for the 101, but need not).
            early: match body {
                Body::None if req.upgrade => self.inbuf.filled(),
                Body::InBuffer(n) if req.upgrade => &self.inbuf.filled()[n..],
                _ => &[],
            },
            // `trailers` stays false: chunked trailers to HTTP/1.1 clients are not relayed.
            ..Forward::new(
                &listener,
                (upstream, &upstream_settings),
                &req,
                head_len,
                self.key.get(),
                body_data,
                client,
            )
        };
        let forwarding = Instant::now();
        let ending = forward::forward(&forward, &mut self.stream, &mut self.scratch).await;
        let upstream_time = match ending {
            // Until the backend agreed; the tunnel's life is the request's time.
            Ending::Tunnelled { agreed, .. } => Some(agreed),
            _ => (!self.scratch.tried.tried().is_empty()).then(|| forwarding.elapsed()),
        };

        self.request_done(body);
        let tried = std::mem::take(&mut self.scratch.tried);
        let (status, next, body_bytes) = self.conclude(ending, client).await;
        // The head written to the client (a backend's, or our own answer whole) is left in
        // `scratch.out`.
        let out = self.scratch.out.len() as u64;
        let bytes_sent = match ending {
            Ending::Answered { .. } | Ending::CutShort { .. } => Some(out + body_bytes),
            Ending::NoAnswer(_) | Ending::NoRoom(_) | Ending::Refused(_) => Some(out),
            Ending::Tunnelled { .. } | Ending::ClientGone => None,
        };
        Record {
            fate: ending.fate(),
            protocol,
            client: self.peer.ip(),
            line: said.as_ref().map(Said::line),
            started,
            status,
            body_bytes,
            bytes_sent,
            backends: tried.tried(),
            earlier: &self.scratch.earlier,
            upstream_time,
            upstream: Some(upstream),
            route: req.routed.route(),
            request_id: req.request_id(),
        }
        .finish(&listener);
        self.said_done(said);
        self.scratch.tried = tried;
        next
    }

    /// nginx's preaccess and access phases for `req` ([`crate::admission`]): `limit_req`
    /// (refused, or the wait it asks, the client watched meanwhile: one that leaves is not
    /// forwarded), then `limit_conn` and `allow` / `deny`. `Ok`: the request goes on, holding
    /// its place in flight; `Err`: it was answered (or its client left) and recorded, and
    /// what the connection does next.
    async fn admit(
        &mut self,
        req: &RequestHead,
        listener: &WorkerListener,
        came: &Came<'_>,
    ) -> Result<Option<ConnGuard>, Next> {
        let checks = listener.ctx.checks(&req.routed);
        if checks.is_empty() {
            return Ok(None);
        }
        let outcome = {
            let raw = self.inbuf.filled();
            let fields = HeadFields(&raw[..req.head_len.min(raw.len())]);
            let asking = Asking {
                client: self.client_addr.addr(),
                route: listener.ctx.counts_id(&req.routed),
                fields: &fields,
            };
            match checks.rate(&asking) {
                Ok(delay) if !delay.is_zero() => {
                    let client = Some(self.stream.tcp());
                    tokio::select! {
                        biased;
                        () = crate::io::watch(client, !self.pipelining) => Err(None),
                        () = tokio::time::sleep(delay) => checks.admit(&asking).map_err(Some),
                    }
                }
                Ok(_) => checks.admit(&asking).map_err(Some),
                Err(refusal) => Err(Some(refusal)),
            }
        };
        let refusal = match outcome {
            Ok(place) => return Ok(place),
            Err(Some(refusal)) => refusal,
            Err(None) => {
                self.held_record(listener, req, came, Fate::ClientGone, (CLIENT_CLOSED, 0));
                return Err(Next::Close);
            }
        };
        let reject = http1::reject(refusal.status, refusal.text);
        // Without a body the connection goes on, as nginx's; with one, unread, it closes.
        let (status, next, body_bytes) = if matches!(req.body, Framing::None | Framing::Close) {
            self.inbuf.consume(req.head_len);
            let client = self.client_side(req, Body::None);
            self.own_answer(reject, client).await
        } else {
            let next = self.answer_and_close(reject).await;
            (reject.status, next, reject.text.len() as u64)
        };
        let fate = Fate::NotAdmitted(refusal.reason);
        self.held_record(listener, req, came, fate, (status, body_bytes));
        Err(next)
    }

    /// Counts and logs a request that ended before it was forwarded, its route known.
    fn held_record(
        &self,
        listener: &WorkerListener,
        req: &RequestHead,
        came: &Came<'_>,
        fate: Fate,
        (status, body_bytes): (u16, u64),
    ) {
        Record {
            fate,
            protocol: came.protocol,
            client: self.peer.ip(),
            line: came.said.map(Said::line),
            started: came.started,
            status,
            body_bytes,
            bytes_sent: None,
            backends: &[],
            earlier: &[],
            upstream_time: None,
            upstream: listener.ctx.upstream_for(&req.routed),
            route: req.routed.route(),
            request_id: req.request_id(),
        }
        .finish(listener);
    }

    /// What the answer must suit: the client's version, whether the connection is kept (not
    /// when the worker or the listener is stopping), a HEAD, an upgrade. Notes whether the
    /// client pipelines: one that sent its next request before this one was answered has, when
    /// it closes its side, said all it will say and still wants the answers, so it is not taken
    /// as gone.
    fn client_side(&mut self, req: &RequestHead, body: Body) -> ClientSide {
        self.pipelining |= match body {
            Body::InBuffer(n) => self.inbuf.len() > n,
            Body::None | Body::Decoded => !self.inbuf.is_empty(),
        };
        let stopping = *self.stop.borrow() || self.listener.is_retired();
        ClientSide {
            http11: req.http11,
            keep_alive: req.keep_alive && !stopping,
            is_head: req.is_head,
            upgrade: req.upgrade,
        }
    }

    /// The request's body is consumed from the read buffer, and buffers a large body grew
    /// shrink back at once (past 32 KiB; smaller ones are kept for the next request, and
    /// given back when the connection idles).
    fn request_done(&mut self, body: Body) {
        if let Body::InBuffer(n) = body {
            self.inbuf.consume(n);
        }
        self.inbuf.shrink_to(4 * CLIENT_BUFFER);
        for buf in [&mut self.body, &mut self.scratch.dechunked] {
            if buf.capacity() > 8 * CLIENT_BUFFER {
                *buf = Vec::new();
            }
        }
    }

    /// What forwarding's `ending` leaves to do on the connection (our own answer written, a
    /// cut-short answer's reset armed): the status logged, what comes next, the body's bytes.
    async fn conclude(&mut self, ending: Ending, client: ClientSide) -> (u16, Next, u64) {
        match ending {
            Ending::Answered {
                status,
                keep_alive,
                body_bytes,
            } => {
                let next = if keep_alive {
                    Next::KeepOpen
                } else {
                    Next::Answered
                };
                (status, next, body_bytes)
            }
            // Both sides of the tunnel have ended, or it failed or idled: nothing more can
            // come on the connection.
            Ending::Tunnelled { to_client, .. } => (101, Next::Close, to_client),
            Ending::CutShort {
                status, body_bytes, ..
            } => {
                // A reset rather than a clean end of stream, whoever cut it short: a body
                // delimited by the close must not look complete (a client that only
                // half-closed would still read it).
                let _ = socket2::SockRef::from(self.stream.tcp()).set_linger(Some(Duration::ZERO));
                (status, Next::Close, body_bytes)
            }
            Ending::ClientGone => (CLIENT_CLOSED, Next::Close, 0),
            Ending::NoAnswer(own) => self.own_answer(answers::own(own), client).await,
            Ending::NoRoom(why) => self.own_answer(answers::no_room(why), client).await,
            Ending::Refused(reject) => self.own_answer(reject, client).await,
        }
    }

    /// Waits, holding no buffers after [`IDLE_GRACE`], until the client sends something (or
    /// the connection fails, which the read then finds). `false`: the deadline passed or the
    /// worker is stopping, and the idle connection is to be closed.
    async fn idle_wait(&mut self, deadline: tokio::time::Instant) -> bool {
        // Decrypted input waiting above the socket is a request already here.
        if self.stream.has_buffered_input() {
            return true;
        }
        // The next request is often there already (a busy connection): no timer for it.
        let ready = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(self.stream.tcp().poll_read_ready(cx).is_ready())
        });
        if ready.await {
            return true;
        }
        let grace = after(IDLE_GRACE).min(deadline);
        let ready = tokio::select! {
            biased;
            ready = timeout_at(grace, self.stream.tcp().readable()) => ready,
            _ = self.stop.changed() => return false,
        };
        if ready.is_ok() {
            return true;
        }
        self.inbuf.release();
        self.scratch.release();
        self.body = Vec::new();
        self.key.release();
        tokio::select! {
            biased;
            ready = timeout_at(deadline, self.stream.tcp().readable()) => ready.is_ok(),
            _ = self.stop.changed() => false,
        }
    }

    /// Our own answer in place of a backend's (the request was read whole), keeping the
    /// connection if the client may: the status, what comes next, the body's bytes.
    async fn own_answer(&mut self, reject: Reject, client: ClientSide) -> (u16, Next, u64) {
        let client = self.keeping(client);
        http1::local_response(&mut self.scratch.out, reject, client);
        self.send_out(reject.status, reject.text.len(), client)
            .await
    }

    /// `client`, its connection kept only if the worker and the listener go on.
    fn keeping(&self, client: ClientSide) -> ClientSide {
        let keep_alive = client.keep_alive && !*self.stop.borrow() && !self.listener.is_retired();
        ClientSide {
            keep_alive,
            ..client
        }
    }

    /// Sends our own answer, written in `scratch.out`: its `status`, what comes next, and the
    /// bytes of its body sent (`body` long, none for HEAD).
    async fn send_out(&mut self, status: u16, body: usize, client: ClientSide) -> (u16, Next, u64) {
        let st = self.settings().send_timeout;
        let next = match send(&mut self.stream, &self.scratch.out, &[], st).await {
            Ok(()) if client.keep_alive => Next::KeepOpen,
            Ok(()) => Next::Answered,
            Err(_) => Next::Close,
        };
        let body = if client.is_head { 0 } else { body };
        (status, next, body as u64)
    }

    /// Writes the answer a route gives itself (a redirect, a fixed answer; 404 when no route
    /// took the request), its `Location` in the head buffer where the parser put it.
    async fn returned(&mut self, req: &RequestHead, client: ClientSide) -> (u16, Next, u64) {
        let routed = &req.routed;
        let listener = Arc::clone(&self.listener);
        let Routed::Answer {
            route,
            status,
            location,
        } = routed
        else {
            return self.own_answer(NOT_FOUND, client).await;
        };
        let mut answer = LocalAnswer {
            status: *status,
            content_type: b"",
            location: None,
            body: b"",
            edit: None,
        };
        let route = route.and_then(|i| listener.ctx.routes.as_ref()?.get(i));
        match route.map(|r| &r.action) {
            None => return self.own_answer(NOT_FOUND, client).await,
            Some(Action::Respond {
                body, content_type, ..
            }) => {
                answer.body = body.as_bytes();
                answer.content_type = content_type.as_bytes();
            }
            Some(_) => answer.location = self.scratch.head.get(location.clone()),
        }
        answer.edit = req.response_edit.as_ref().map(|edit| http1::AnswerEdit {
            edit,
            listener: &listener.ctx.settings.response_headers,
            route: route.map(|r| &r.response_headers),
            upstream: None,
        });
        let client = self.keeping(client);
        http1::local_answer(&mut self.scratch.out, &answer, client);
        let (status, body) = (answer.status, answer.body.len());
        self.send_out(status, body, client).await
    }

    /// Reads the request body.
    async fn read_body(&mut self, req: &RequestHead) -> Result<Body, NoHead> {
        let max = self.settings().max_body_bytes;
        let mut continued = !req.expect_continue || !req.http11;
        let mut pace = BodyPace::new(self.settings());
        match req.body {
            Framing::None | Framing::Close => Ok(Body::None),
            Framing::Length(n) => {
                if n > max {
                    return Err(NoHead::Refuse(TOO_LARGE));
                }
                // The buffer grows as the body arrives, not on the client's word.
                let n = n as usize;
                while self.inbuf.len() < n {
                    self.more_body(&mut continued, &mut pace).await?;
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
                            .map_err(|_| NoHead::Refuse(BAD_CHUNKED))?;
                        self.inbuf.consume(used);
                        // Compared without adding: a chunk size may be anything up to
                        // 2^64 - 1, and the sum must not wrap past the limit.
                        let got = self.body.len() as u64;
                        if got > max || chunked.announced() > max - got {
                            return Err(NoHead::Refuse(TOO_LARGE));
                        }
                        if chunked.is_done() {
                            return Ok(Body::Decoded);
                        }
                    }
                    self.more_body(&mut continued, &mut pace).await?;
                }
            }
        }
    }

    /// Reads more of a request body within `pace`, first telling a client that waits for it
    /// to go on (`100 Continue`, once).
    async fn more_body(&mut self, continued: &mut bool, pace: &mut BodyPace) -> Result<(), NoHead> {
        if !*continued {
            *continued = true;
            let st = self.settings().send_timeout;
            send(&mut self.stream, CONTINUE, &[], st)
                .await
                .map_err(|_| NoHead::Close)?;
            // The client's time starts when it is told to send.
            *pace = BodyPace::new(self.settings());
        }
        match timeout_at(pace.deadline(), self.inbuf.read_from(&mut self.stream)).await {
            Ok(Ok(0)) => Err(NoHead::Refuse(INCOMPLETE_BODY)),
            Ok(Ok(n)) => {
                pace.received(n);
                Ok(())
            }
            Ok(Err(_)) => Err(NoHead::Close),
            Err(_) => Err(NoHead::Refuse(BODY_TIMEOUT)),
        }
    }

    /// Our own answer, then the connection closes.
    async fn answer_and_close(&mut self, reject: Reject) -> Next {
        let closing = ClientSide {
            http11: true,
            keep_alive: false,
            is_head: false,
            upgrade: false,
        };
        http1::local_response(&mut self.scratch.out, reject, closing);
        let st = self.settings().send_timeout;
        match send(&mut self.stream, &self.scratch.out, &[], st).await {
            Ok(()) => Next::Linger,
            Err(_) => Next::Close,
        }
    }

    /// Closes a connection whose request was read whole and answered. Only a client that has
    /// sent more (pipelined bytes, or input waiting in the socket) is lingered for; otherwise
    /// the connection closes at once, after TLS's `close_notify`, as nginx's `lingering_close
    /// on` does: draining every closed connection cost a `shutdown`, a read and a wake-up
    /// each, which showed as the most-sampled system call with a new connection per request.
    async fn close_answered(&mut self) {
        let more = !self.inbuf.is_empty()
            || self.stream.has_buffered_input()
            || crate::io::marked_readable(self.stream.tcp());
        if more {
            return self.linger().await;
        }
        if S::SAYS_GOODBYE {
            let _ = timeout_at(after(LINGER), self.stream.shutdown()).await;
        }
    }

    /// Closes our side, then reads and discards what the client still sends, for a while.
    async fn linger(&mut self) {
        let deadline = after(LINGER);
        if !matches!(
            timeout_at(deadline, self.stream.shutdown()).await,
            Ok(Ok(()))
        ) {
            return;
        }
        loop {
            self.inbuf.consume(self.inbuf.len());
            match timeout_at(deadline, self.inbuf.read_from(&mut self.stream)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
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

    /// The scan answers as the two-pass `windows` search it replaced, over random buffers
    /// of the bytes that matter (`\r`, `\n`, a letter), from every scan position.
    #[test]
    fn the_blank_line_scan_answers_as_the_windows_search() {
        fn reference(buf: &[u8], scanned: usize, limit: usize) -> bool {
            if buf.len() >= limit {
                return true;
            }
            let new = &buf[scanned.saturating_sub(2).min(buf.len())..];
            new.windows(2).any(|w| w == b"\n\n") || new.windows(3).any(|w| w == b"\n\r\n")
        }
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut found = 0;
        for _ in 0..20_000 {
            let len = (next() % 24) as usize;
            let buf: Vec<u8> = (0..len).map(|_| b"\r\na"[(next() % 3) as usize]).collect();
            for scanned in 0..=len + 1 {
                let limit = 8 + (next() % 24) as usize;
                let want = reference(&buf, scanned, limit);
                found += usize::from(want);
                assert_eq!(
                    head_may_be_complete(&buf, scanned, limit),
                    want,
                    "{buf:?} {scanned}"
                );
            }
        }
        assert!(found > 1000, "the random buffers hold blank lines: {found}");
    }

    #[test]
    fn a_refused_head_is_logged_by_its_first_words() {
        let e = said_of_refused(b"GET /x HTTP/9.9\r\nHost: a\r\n\r\n");
        assert_eq!((&e.method[..], &e.target[..]), (&b"GET"[..], &b"/x"[..]));
        // Nothing readable: empty, which the log writes as "-".
        let e = said_of_refused(b"\r\n");
        assert!(e.method.is_empty() && e.target.is_empty());
    }
}
