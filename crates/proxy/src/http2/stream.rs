//! One HTTP/2 stream: one request, proxied as the HTTP/1.1 path proxies one.
//!
//! 1. The stream's fields become the HTTP/1.1 head the same request would have had (`:method`
//!    and `:path` the request line, `:authority` the `Host`, the `cookie` fields joined with
//!    `; ` as RFC 9113 §8.2.3 says for HTTP/1.1), and that head goes through
//!    [`http1::parse_request`]: one set of rules, limits, hop-by-hop removal and forwarding
//!    headers for both protocols, and the hash key found where the HTTP/1.1 path finds it.
//!    Then `limit_req`, `limit_conn` and `allow` / `deny` ([`crate::admission`]), as for
//!    HTTP/1.1: a delayed stream waits (a reset meanwhile drops it unforwarded), and holds its
//!    place in `limit_conn` until it ends.
//! 2. The body is buffered whole, up to `max_body_bytes` (413 beyond), each DATA frame's
//!    window given back as it is taken, at the HTTP/1.1 path's pace (`client_body_timeout`
//!    between frames, `client_body_min_rate` over the body: 408).
//! 3. The attempts (`forward`), the response head turned into HTTP/2 fields (connection-
//!    specific fields dropped, RFC 9113 §8.2.2), the body relayed (`relay`).
//! 4. One access log line (protocol `HTTP/2.0`) and the same counts as an HTTP/1.1 request.
//!
//! A client that resets the stream before its answer drops the work where it is (the attempt
//! completes as cancelled, the backend connection closes) and is logged as 499; the connection
//! counts such resets (rapid reset).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use balance::Outcome;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderName, HeaderValue, Request, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::relay::{self, AheadBudget, StreamEnd};
use crate::admission::{Asking, ConnGuard, Refusal};
use crate::affinity::AffinityKey;
use crate::answers::{self, BODY_TIMEOUT, CLIENT_CLOSED, MALFORMED, NOT_FOUND, TOO_LARGE};
use crate::exchange::Relay;
use crate::forward::{self, Attempts, Trail};
use crate::http1::{self, ClientAddr, ClientSide, Limits, Reject, Routed};
use crate::io::Pace;
use crate::listener::WorkerListener;
use crate::record::{ClientProtocol, Fate, Record, Said};
use crate::request::{BodyPace, Forward};
use crate::route::Action;
use crate::upstream_h2::CONNECTION_SPECIFIC;

/// What every stream of one connection shares.
#[derive(Debug)]
pub(crate) struct StreamContext {
    peer: SocketAddr,
    listener: Arc<WorkerListener>,
    client_addr: ClientAddr,
    /// Bytes of request bodies the connection's streams may hold at once, one permit a byte.
    bodies: Arc<Semaphore>,
    /// The connection's number, by which h2 backends count its streams.
    number: u64,
    /// Bytes of responses the connection's streams hold read ahead of the client.
    ahead: AheadBudget,
}

/// What one connection's buffered request bodies may add up to, as a multiple of
/// `max_body_bytes`: a client uploading on a few streams at once is served, one that opens
/// `http2_max_concurrent_streams` uploads cannot make us hold that many bodies (128 MiB with
/// the defaults, where an HTTP/1.1 connection holds one).
const BODIES_PER_CONNECTION: u64 = 4;

impl StreamContext {
    pub(crate) fn new(peer: SocketAddr, listener: Arc<WorkerListener>) -> StreamContext {
        let settings = &listener.ctx.settings;
        let mut client_addr = ClientAddr::new(peer.ip(), &settings.trusted_proxies);
        // A TLS listener's HTTP/2 comes by ALPN, over TLS.
        if listener.ctx.tls.is_some() {
            client_addr.set_https();
        }
        let budget = settings
            .max_body_bytes
            .saturating_mul(BODIES_PER_CONNECTION)
            .min(Semaphore::MAX_PERMITS as u64);
        StreamContext {
            peer,
            listener,
            client_addr,
            bodies: Arc::new(Semaphore::new(budget as usize)),
            number: crate::upstream_h2::next_client_connection(),
            ahead: AheadBudget::default(),
        }
    }
}

/// How a stream ended, for the connection's accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Answered (by a backend or by us), whole or cut short.
    Answered,
    /// The client reset the stream before its answer began.
    CancelledByClient,
}

/// The request as it is logged and counted once it is over.
struct Finished<'a> {
    ctx: &'a StreamContext,
    started: Instant,
    said: Said,
    /// The listener's upstream the request goes to (an index into its list), once known.
    upstream: Option<usize>,
    /// The route that took it, once known.
    route: Option<usize>,
    /// Its request id, once known.
    request_id: Option<crate::header_rules::RequestId>,
    /// Its place in `limit_conn`'s count, held until the stream ends.
    in_flight: Option<ConnGuard>,
}

impl Finished<'_> {
    /// Counts the request and, with the access log on, logs it ([`Record::finish`]).
    fn finish(
        &self,
        status: u16,
        body_bytes: u64,
        tried: &Trail,
        upstream_time: Option<Duration>,
        fate: Fate,
    ) {
        Record {
            fate,
            protocol: ClientProtocol::Http2,
            client: self.ctx.peer.ip(),
            line: Some(self.said.line()),
            started: self.started,
            status,
            body_bytes,
            // The HPACK-coded head's size is not known here.
            bytes_sent: None,
            backends: &tried.backends,
            earlier: &tried.earlier,
            upstream_time,
            upstream: self.upstream,
            route: self.route,
            request_id: self.request_id.as_ref().map(|id| id.as_bytes()),
        }
        .finish(&self.ctx.listener);
    }
}

/// What the access log says the client asked: the method and the target, and the headers the
/// log's format asks for (`$host` is the `:authority`; a stream's `Referer` and `User-Agent`
/// are not in `combined`).
fn said_of(request: &Request<RecvStream>, wanted: &[Box<str>]) -> Said {
    let mut headers = crate::record::wanted_headers(
        wanted,
        request
            .headers()
            .iter()
            .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes())),
    );
    if let (Some(i), Some(authority)) = (
        wanted.iter().position(|w| &**w == "host"),
        request.uri().authority(),
    ) {
        headers[i] = Some(authority.as_str().as_bytes().into());
    }
    Said {
        time: SystemTime::now(),
        method: request.method().as_str().as_bytes().to_vec(),
        target: request
            .uri()
            .path_and_query()
            .map_or(&b"/"[..], |p| p.as_str().as_bytes())
            .to_vec(),
        referer: Vec::new(),
        user_agent: Vec::new(),
        headers,
    }
}

/// Serves one stream to its end.
pub(crate) async fn serve(
    ctx: Arc<StreamContext>,
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
) -> Ended {
    let mut done = Finished {
        ctx: &ctx,
        started: Instant::now(),
        said: said_of(&request, ctx.listener.ctx.log_headers()),
        upstream: ctx.listener.ctx.default_upstream().map(|_| 0),
        route: None,
        request_id: None,
        in_flight: None,
    };
    // A client that waits for `100 Continue` before its body (RFC 9110 §10.1.1) is told to go
    // on, unless its announced length is refused anyway; the HTTP/1.1 path does the same.
    if wants_continue(&request, ctx.listener.ctx.settings.max_body_bytes) {
        let mut go_on = Response::new(());
        *go_on.status_mut() = http::StatusCode::CONTINUE;
        let _ = respond.send_informational(go_on);
    }
    // The work runs until its answer is ready to go; a reset before that drops it.
    let ready = {
        let work = proxy(&ctx, request, &mut done);
        tokio::pin!(work);
        tokio::select! {
            biased;
            reset = std::future::poll_fn(|cx| respond.poll_reset(cx)) => {
                let _ = reset;
                None
            }
            ready = &mut work => Some(ready),
        }
    };
    let Some(ready) = ready else {
        done.finish(CLIENT_CLOSED, 0, &Trail::default(), None, Fate::ClientGone);
        return Ended::CancelledByClient;
    };
    match ready {
        Ready::Own {
            reject,
            is_head,
            tried,
            upstream_time,
            fate,
        } => {
            let status = own_answer(&mut respond, reject, is_head);
            let bytes = if is_head || status.is_err() {
                0
            } else {
                reject.text.len() as u64
            };
            done.finish(reject.status, bytes, &tried, upstream_time, fate);
            Ended::Answered
        }
        Ready::ClientGone => {
            done.finish(CLIENT_CLOSED, 0, &Trail::default(), None, Fate::ClientGone);
            Ended::CancelledByClient
        }
        Ready::NoRoom => {
            respond.send_reset(Reason::REFUSED_STREAM);
            done.finish(503, 0, &Trail::default(), None, Fate::Refused);
            Ended::Answered
        }
        Ready::Returned {
            routed,
            location,
            edit,
        } => {
            let answer = (&routed, &location[..], edit.as_ref());
            let (status, bytes) = returned(&ctx, &mut respond, answer, is_head_of(&done));
            done.finish(status, bytes, &Trail::default(), None, Fate::Returned);
            Ended::Answered
        }
        Ready::Backend(from) => relay_answer(&ctx, &mut respond, &done, from).await,
    }
}

/// Whether the stream's request is a HEAD (its answer has no body).
fn is_head_of(done: &Finished<'_>) -> bool {
    done.said.method == b"HEAD"
}

/// Sends the answer a route gives itself (a redirect, a fixed answer; 404 when no route took
/// the request): its status and the body's bytes sent.
fn returned(
    ctx: &StreamContext,
    respond: &mut SendResponse<Bytes>,
    (routed, location, edit): (&Routed, &[u8], Option<&http1::ResponseEdit>),
    is_head: bool,
) -> (u16, u64) {
    let route = match routed {
        Routed::Answer {
            route: Some(i),
            status,
            ..
        } => ctx
            .listener
            .ctx
            .routes
            .as_ref()
            .and_then(|r| r.get(*i))
            .map(|r| (*status, &r.action)),
        _ => None,
    };
    let (status, content_type, body, location) = match route {
        Some((
            status,
            Action::Respond {
                body, content_type, ..
            },
        )) => (status, content_type.as_bytes(), body.as_bytes(), None),
        Some((status, _)) => {
            let at = match routed {
                Routed::Answer { location: at, .. } => at.clone(),
                _ => 0..0,
            };
            (status, &b""[..], &b""[..], location.get(at))
        }
        None => {
            let sent = own_answer(respond, NOT_FOUND, is_head).is_ok() && !is_head;
            return (
                NOT_FOUND.status,
                if sent { NOT_FOUND.text.len() as u64 } else { 0 },
            );
        }
    };
    let mut response = Response::new(());
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::NOT_FOUND);
    let fields = response.headers_mut();
    if let Some(v) = (!content_type.is_empty())
        .then(|| HeaderValue::from_bytes(content_type).ok())
        .flatten()
    {
        fields.insert(http::header::CONTENT_TYPE, v);
    }
    if let Some(v) = location.and_then(|l| HeaderValue::from_bytes(l).ok()) {
        fields.insert(http::header::LOCATION, v);
    }
    if let Some(edit) = edit {
        let listener = &ctx.listener.ctx;
        let route = routed
            .route()
            .and_then(|i| listener.routes.as_ref()?.get(i))
            .map(|r| &r.response_headers);
        let mut lines = Vec::new();
        http1::AnswerEdit {
            edit,
            listener: &listener.settings.response_headers,
            route,
            upstream: None,
        }
        .put(&mut lines);
        append_lines(fields, &lines);
    }
    let bodiless = is_head || body.is_empty() || matches!(status, 204 | 304);
    if !matches!(status, 204 | 304) {
        fields.insert(http::header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    let Ok(mut send) = respond.send_response(response, bodiless) else {
        return (status, 0);
    };
    if bodiless {
        return (status, 0);
    }
    match send.send_data(Bytes::copy_from_slice(body), true) {
        Ok(()) => (status, body.len() as u64),
        Err(_) => (status, 0),
    }
}

/// Sends a backend's answer to the client: its head, then its body (and trailers) as they
/// come; the stream reset if either side fails before the end.
async fn relay_answer(
    ctx: &StreamContext,
    respond: &mut SendResponse<Bytes>,
    done: &Finished<'_>,
    from: FromBackend,
) -> Ended {
    let FromBackend {
        answer,
        head,
        tried,
        forwarding,
        send_timeout,
        trailers,
    } = from;
    let forward::Answer {
        response,
        body,
        mut attempt,
        patience,
        ..
    } = *answer;
    // A head with no body ends the stream itself; so does one that ended an HTTP/2 backend's
    // stream, as a gRPC "trailers-only" answer (`grpc-status` in the head) does, which its
    // client reads as the end only with END_STREAM on it.
    let head_ended = matches!(&body, forward::Body::H2(b) if b.ended());
    let ending = head_ended || response.framing == http1::Framing::None;
    let mut send = match respond.send_response(head, ending) {
        Ok(send) => send,
        Err(_) => {
            attempt.complete(Outcome::Cancelled);
            let upstream_time = Some(forwarding.elapsed());
            done.finish(CLIENT_CLOSED, 0, &tried, upstream_time, Fate::ClientGone);
            return Ended::Answered;
        }
    };
    let mut end = StreamEnd {
        send: &mut send,
        pace: Pace::new(send_timeout, ctx.listener.ctx.settings.send_min_rate),
        ahead: &ctx.ahead,
        sent: 0,
    };
    let relayed = match body {
        // The connection goes back to its pool as soon as the backend's part is over.
        forward::Body::Http1 { conn, pool } => {
            relay::relay(conn, &pool, &response, &mut end, &mut attempt, patience).await
        }
        forward::Body::H2(_) if head_ended => {
            attempt.complete(Outcome::Success);
            Ok(())
        }
        forward::Body::H2(mut body) => {
            let relayed = relay::relay_h2(
                &mut body,
                &response,
                &mut end,
                &mut attempt,
                patience,
                trailers,
            )
            .await;
            if relayed.is_ok() {
                body.finish();
            }
            relayed
        }
    };
    let body_bytes = end.sent;
    let upstream_time = Some(forwarding.elapsed());
    attempt.complete(Relay::end(&relayed).outcome());
    let fate = cut_short(relayed, &mut send, &attempt);
    done.finish(response.status, body_bytes, &tried, upstream_time, fate);
    Ended::Answered
}

/// How a relay that came to `relayed` ends the stream: whole, or reset (`INTERNAL_ERROR` when
/// the backend failed, so a cut body never looks complete; `CANCEL` when the client went).
fn cut_short(
    relayed: Result<(), Relay>,
    send: &mut SendStream<Bytes>,
    attempt: &crate::upstream::Attempt,
) -> Fate {
    let backend = attempt.addr;
    match relayed {
        Ok(()) => Fate::Answered,
        Err(Relay::Backend { why, .. }) => {
            tracing::warn!(
                upstream = %attempt.upstream_name(),
                %backend,
                error = %why,
                "the response ended in the middle of its body; resetting the HTTP/2 stream"
            );
            send.send_reset(Reason::INTERNAL_ERROR);
            Fate::CutShortByBackend
        }
        Err(Relay::Client) => {
            send.send_reset(Reason::CANCEL);
            Fate::CutShortByClient
        }
    }
}

/// What a stream's work came to before anything was sent to the client.
enum Ready {
    /// Our own answer.
    Own {
        reject: Reject,
        is_head: bool,
        tried: Trail,
        upstream_time: Option<Duration>,
        fate: Fate,
    },
    /// The client ended the stream (its body did not come whole).
    ClientGone,
    /// No room for its body on this connection: refused with `REFUSED_STREAM`, which a client
    /// may retry (RFC 9113 §8.7).
    NoRoom,
    /// A backend's head, as HTTP/2, with what its body needs.
    Backend(FromBackend),
    /// Answered by a route itself, or 404 (`routed` says which; a redirect's `Location` is
    /// `location`).
    Returned {
        routed: Routed,
        location: Vec<u8>,
        edit: Option<http1::ResponseEdit>,
    },
}

/// A backend's answer, its head made HTTP/2, ready to go to the client.
struct FromBackend {
    answer: Box<forward::Answer>,
    head: Response<()>,
    tried: Trail,
    forwarding: Instant,
    send_timeout: Duration,
    /// Whether the backend's trailers are passed on.
    trailers: bool,
}

impl Ready {
    fn refused(reject: Reject, is_head: bool) -> Ready {
        Ready::Own {
            reject,
            is_head,
            tried: Trail::default(),
            upstream_time: None,
            fate: Fate::Refused,
        }
    }
}

/// The request read, checked and forwarded up to the response head.
async fn proxy(
    ctx: &StreamContext,
    request: Request<RecvStream>,
    done: &mut Finished<'_>,
) -> Ready {
    let listener = &ctx.listener;
    let settings = &listener.ctx.settings;
    let default_settings = listener.ctx.default_upstream().map(|u| u.settings());
    let is_head = request.method() == http::Method::HEAD;

    let (parts, mut body) = request.into_parts();
    let mut raw = Vec::new();
    let limits = Limits {
        max_headers: settings.max_headers,
        max_header_bytes: settings.max_header_bytes,
        key: default_settings
            .as_deref()
            .and_then(crate::upstream::hashed_request_part),
        sticky: default_settings
            .as_deref()
            .and_then(crate::upstream::sticky_cookie),
        // HTTP/2 has no connection upgrades (RFC 9113 §8.6).
        upgrade: &[],
        routes: (listener.ctx.routes.as_ref()).map(|r| (r, listener.ctx.has_default)),
        edits: listener.ctx.edits(),
    };
    let mut head = Vec::new();
    let req = match backend_head(&parts, limits, &ctx.client_addr, &mut raw, &mut head) {
        Ok(req) => req,
        Err(reject) => return Ready::refused(reject, is_head),
    };
    done.upstream = listener.ctx.upstream_for(&req.routed);
    done.route = req.routed.route();
    done.request_id = req.response_edit.as_ref().and_then(|e| e.id);
    match admit(ctx, &req.routed, &parts.headers).await {
        Ok(place) => done.in_flight = place,
        Err(refusal) => {
            return Ready::Own {
                reject: http1::reject(refusal.status, refusal.text),
                is_head,
                tried: Trail::default(),
                upstream_time: None,
                fate: Fate::NotAdmitted(refusal.reason),
            };
        }
    }
    let Some(upstream) = done.upstream else {
        // Answered here: the body, if any, is not read (the stream is reset after the answer).
        return Ready::Returned {
            routed: req.routed,
            location: head,
            edit: req.response_edit,
        };
    };
    let upstream_settings = listener.ctx.upstreams[upstream].settings();
    done.said.referer = raw[req.referer.clone()].to_vec();
    done.said.user_agent = raw[req.user_agent.clone()].to_vec();

    let mut key = AffinityKey::default();
    key.take(
        &upstream_settings,
        ctx.peer.ip(),
        Some(&raw[req.key.clone()]),
    );

    let has_body = !body.is_end_stream();
    // The room stays taken while the body is held: until the answer begins.
    let body_read = if has_body {
        match read_body(&mut body, &parts.headers, settings, &ctx.bodies) {
            Err(reject) => return Ready::refused(reject, is_head),
            Ok(reading) => match reading.await {
                Ok(buffered) => buffered,
                Err(BodyError::Refused(reject)) => return Ready::refused(reject, is_head),
                Err(BodyError::Gone) => return Ready::ClientGone,
                Err(BodyError::NoRoom) => return Ready::NoRoom,
            },
        }
    } else {
        Buffered {
            data: Vec::new(),
            _room: None,
        }
    };
    let data = &body_read.data;
    drop(body);

    let f = Forward {
        // HTTP/2 allows `te` only as `trailers` (RFC 9113 §8.2.2), which gRPC requires.
        trailers: parts.headers.contains_key(http::header::TE),
        client_connection: Some(ctx.number),
        ..Forward::new(
            listener,
            (upstream, &upstream_settings),
            &req,
            head.len(),
            key.get(),
            has_body.then_some(&data[..]),
            // As to an HTTP/1.0 client: a chunked body comes de-chunked and no connection
            // header is written; transfer codings other than chunked, which HTTP/2 cannot
            // carry, are refused (502) as they are for HTTP/1.0.
            ClientSide {
                http11: false,
                keep_alive: false,
                is_head: req.is_head,
                upgrade: false,
            },
        )
    };
    let forwarding = Instant::now();
    let mut out = Vec::new();
    let mut machine = balance::Attempts::default();
    let mut earlier = Vec::new();
    let attempts =
        forward::attempts(&f, &mut head, &mut out, (&mut machine, &mut earlier), None).await;
    let tried = Trail {
        backends: machine.into_tried(),
        earlier,
    };
    let relaying = (settings.send_timeout, f.trailers);
    ready(attempts, &out, tried, forwarding, is_head, relaying)
}

/// nginx's preaccess and access phases for a stream ([`crate::admission`]): `limit_req`
/// (refused, or the wait it asks: a stream the client resets meanwhile drops this future and
/// is not forwarded), then `limit_conn` and `allow` / `deny`. `Ok`: the stream's place in
/// flight, held until it ends.
async fn admit(
    ctx: &StreamContext,
    routed: &Routed,
    fields: &http::HeaderMap,
) -> Result<Option<ConnGuard>, Refusal> {
    let listener = &ctx.listener.ctx;
    let checks = listener.checks(routed);
    if checks.is_empty() {
        return Ok(None);
    }
    let asking = Asking {
        client: ctx.client_addr.addr(),
        route: listener.counts_id(routed),
        fields,
    };
    let delay = checks.rate(&asking)?;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    checks.admit(&asking)
}

/// What a stream's attempts came to, as the stream will answer it: the backend's answer if its
/// head (`out`, HTTP/1.1) can be written as HTTP/2, else our own. `relaying`: the stream's
/// `send_timeout`, and whether the backend's trailers are passed on.
fn ready(
    attempts: Attempts,
    out: &[u8],
    tried: Trail,
    forwarding: Instant,
    is_head: bool,
    (send_timeout, trailers): (Duration, bool),
) -> Ready {
    let upstream_time = (!tried.backends.is_empty()).then(|| forwarding.elapsed());
    let own = |reject, tried, fate| Ready::Own {
        reject,
        is_head,
        tried,
        upstream_time,
        fate,
    };
    match attempts {
        Attempts::Answered(answer) => match response_head(out) {
            Some(head) => Ready::Backend(FromBackend {
                answer,
                head,
                tried,
                forwarding,
                send_timeout,
                trailers,
            }),
            None => {
                // Fields HTTP/2 cannot carry: the backend's answer is not passed on.
                let mut answer = answer;
                answer.attempt.complete(Outcome::Failure);
                let invalid = answers::no_answer(Some(balance::Fault::InvalidResponse));
                own(invalid, tried, Fate::NoAnswer)
            }
        },
        // Not watched (no client socket): `ClientGone` cannot come; taken as no answer.
        Attempts::ClientGone => own(answers::no_answer(None), tried, Fate::NoAnswer),
        Attempts::NoAnswer(answer) => own(answers::own(answer), tried, Fate::NoAnswer),
        Attempts::NoRoom(why) => own(answers::no_room(why), tried, Fate::Unpicked(why)),
        Attempts::Refused(reject) => own(reject, tried, Fate::Refused),
    }
}

/// Whether `request` asks for `100 Continue` and may get it: a body is to come, and its
/// announced length (if any) is within `max_body_bytes`.
fn wants_continue(request: &Request<RecvStream>, max_body_bytes: u64) -> bool {
    let headers = request.headers();
    let expects = headers.get_all(http::header::EXPECT).iter().any(|v| {
        v.as_bytes()
            .trim_ascii()
            .eq_ignore_ascii_case(b"100-continue")
    });
    let announced = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    expects && !request.body().is_end_stream() && announced.is_none_or(|n| n <= max_body_bytes)
}

/// A `Host` field that names another host than `:authority`: malformed (RFC 9113 §8.3.1),
/// refused as nginx refuses any `Host` beside `:authority`.
const HOST_CONFLICT: Reject = http1::reject(
    400,
    "400 Bad Request: the Host header differs from :authority\n",
);

/// The HTTP/1.1 head a stream's fields stand for (`raw`, [`write_head`]), checked and
/// rewritten for the backend into `head` by the HTTP/1.1 request parser: what the backend
/// gets of an HTTP/2 request, and the one place it is made (the fuzz target
/// `h2_request_head` runs it too). A `CONNECT` becomes `CONNECT host:port`, which the parser
/// refuses (405) as it does on HTTP/1.1. A request other than `CONNECT` without `:path` is
/// malformed (RFC 9113 §8.3.1), though the `h2` crate lets it through: 400, as nginx answers.
pub(crate) fn backend_head(
    parts: &http::request::Parts,
    limits: Limits<'_>,
    client: &ClientAddr,
    raw: &mut Vec<u8>,
    head: &mut Vec<u8>,
) -> Result<http1::RequestHead, Reject> {
    // (Without `:authority` the `h2` crate makes an empty URI, whose `path_and_query` shows
    // `/`; its `path` is empty.)
    let no_path = parts.uri.path_and_query().is_none() || parts.uri.path().is_empty();
    if no_path && parts.method != http::Method::CONNECT {
        return Err(MALFORMED);
    }
    if let Some(authority) = parts.uri.authority() {
        let differs = |v: &HeaderValue| {
            !v.as_bytes()
                .eq_ignore_ascii_case(authority.as_str().as_bytes())
        };
        if parts
            .headers
            .get_all(http::header::HOST)
            .iter()
            .any(differs)
        {
            return Err(HOST_CONFLICT);
        }
    }
    write_head(parts, raw);
    match http1::parse_request(raw, limits, client, head) {
        Ok(Some(req)) => Ok(req),
        Ok(None) => Err(MALFORMED),
        Err(reject) => Err(reject),
    }
}

/// Writes the HTTP/1.1 head a request with these fields would have had: the target is
/// `:path`, or for `CONNECT` (which has none, RFC 9113 §8.5) `:authority`, the authority form
/// it has in HTTP/1.1 (RFC 9112 §3.2.3).
fn write_head(parts: &http::request::Parts, raw: &mut Vec<u8>) {
    raw.extend_from_slice(parts.method.as_str().as_bytes());
    raw.push(b' ');
    let target = match parts.uri.path_and_query() {
        Some(p) if !p.as_str().is_empty() => p.as_str(),
        _ if parts.method == http::Method::CONNECT => {
            parts.uri.authority().map_or("/", |a| a.as_str())
        }
        _ => "/",
    };
    raw.extend_from_slice(target.as_bytes());
    raw.extend_from_slice(b" HTTP/1.1\r\n");
    let authority = parts.uri.authority();
    if let Some(authority) = authority {
        put(raw, b"host", authority.as_str().as_bytes());
    }
    let mut cookies: Option<Vec<u8>> = None;
    for (name, value) in &parts.headers {
        // `:authority` wins over `Host` (RFC 9113 §8.3.1); the body's length is ours to write.
        if (authority.is_some() && name == http::header::HOST)
            || name == http::header::CONTENT_LENGTH
        {
            continue;
        }
        if name == http::header::COOKIE {
            let all = cookies.get_or_insert_with(Vec::new);
            if !all.is_empty() {
                all.extend_from_slice(b"; ");
            }
            all.extend_from_slice(value.as_bytes());
            continue;
        }
        put(raw, name.as_str().as_bytes(), value.as_bytes());
    }
    if let Some(cookies) = cookies {
        put(raw, b"cookie", &cookies);
    }
    raw.extend_from_slice(b"\r\n");
}

fn put(raw: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    raw.extend_from_slice(name);
    raw.extend_from_slice(b": ");
    raw.extend_from_slice(value);
    raw.extend_from_slice(b"\r\n");
}

/// A request body read whole, with the connection's room it takes (given back on drop).
struct Buffered {
    data: Vec<u8>,
    _room: Option<OwnedSemaphorePermit>,
}

/// Why a body was not read.
enum BodyError {
    Refused(Reject),
    Gone,
    /// The connection's other streams hold all the room for bodies.
    NoRoom,
}

/// Checks the announced length against `max_body_bytes` at once, then returns the reading.
fn read_body<'a>(
    body: &'a mut RecvStream,
    headers: &http::HeaderMap,
    settings: &crate::settings::ListenerSettings,
    room: &Arc<Semaphore>,
) -> Result<impl Future<Output = Result<Buffered, BodyError>> + 'a, Reject> {
    let max = settings.max_body_bytes;
    let announced = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if announced.is_some_and(|n| n > max) {
        return Err(TOO_LARGE);
    }
    // The HTTP/1.1 path's pace: `client_body_timeout` between frames, and the whole body at
    // `client_body_min_rate` at least.
    let mut pace = BodyPace::new(settings);
    let room = Arc::clone(room);
    Ok(async move {
        // Grown as the data comes, not on the client's word.
        let mut data = Vec::new();
        let mut held: Option<OwnedSemaphorePermit> = None;
        loop {
            let next = match tokio::time::timeout_at(pace.deadline(), body.data()).await {
                Err(_) => return Err(BodyError::Refused(BODY_TIMEOUT)),
                Ok(None) => return Ok(Buffered { data, _room: held }),
                Ok(Some(Err(_))) => return Err(BodyError::Gone),
                Ok(Some(Ok(chunk))) => chunk,
            };
            pace.received(next.len());
            let _ = body.flow_control().release_capacity(next.len());
            if data.len() as u64 + next.len() as u64 > max {
                return Err(BodyError::Refused(TOO_LARGE));
            }
            // Refused rather than waited for: streams waiting for each other's room could
            // wait until their body timeout; a refused stream is one a client may retry.
            let n = u32::try_from(next.len()).map_err(|_| BodyError::NoRoom)?;
            let permit = Arc::clone(&room)
                .try_acquire_many_owned(n)
                .map_err(|_| BodyError::NoRoom)?;
            match held.as_mut() {
                Some(held) => held.merge(permit),
                None => held = Some(permit),
            }
            if data.capacity() - data.len() < next.len() {
                // An eighth more than what came, not twice: a body held for long (sent in a
                // burst, then dribbled) holds about its size, not up to double.
                data.reserve_exact(next.len().max(data.len() / 8));
            }
            data.extend_from_slice(&next);
        }
    })
}

/// The backend's response head (as rewritten for an HTTP/1.1 client) as an HTTP/2 response;
/// `None` if a field cannot be carried.
fn response_head(out: &[u8]) -> Option<Response<()>> {
    let mut headers = [httparse::EMPTY_HEADER; 130];
    let mut parsed = httparse::Response::new(&mut headers);
    match parsed.parse(out) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return None,
    }
    let mut response = Response::new(());
    *response.status_mut() = http::StatusCode::from_u16(parsed.code?).ok()?;
    let fields = response.headers_mut();
    for h in parsed.headers.iter() {
        if CONNECTION_SPECIFIC
            .iter()
            .any(|c| c.eq_ignore_ascii_case(h.name))
        {
            continue;
        }
        let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
        let value = HeaderValue::from_bytes(h.value).ok()?;
        fields.append(name, value);
    }
    Some(response)
}

/// Appends `Name: value\r\n` lines (the header rules' fields) to `fields`; a line that is not a
/// valid field is left out.
fn append_lines(fields: &mut http::HeaderMap, lines: &[u8]) {
    for line in lines.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&name.to_ascii_lowercase()),
            HeaderValue::from_bytes(value),
        ) {
            fields.append(name, value);
        }
    }
}

/// Sends our own answer; `Err` if the stream is gone.
fn own_answer(
    respond: &mut SendResponse<Bytes>,
    reject: Reject,
    is_head: bool,
) -> Result<(), h2::Error> {
    let mut response = Response::new(());
    *response.status_mut() =
        http::StatusCode::from_u16(reject.status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    let fields = response.headers_mut();
    fields.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    fields.insert(
        http::header::CONTENT_LENGTH,
        HeaderValue::from(reject.text.len()),
    );
    let mut send = respond.send_response(response, is_head)?;
    if !is_head {
        // Small enough for the initial window; h2 buffers it until the window allows.
        send.send_data(Bytes::from_static(reject.text.as_bytes()), true)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_become_the_http1_head() {
        let request = Request::builder()
            .method("POST")
            .uri("http://example.com:8080/a?b=1")
            .header("cookie", "a=1")
            .header("x-one", "1")
            .header("cookie", "b=2")
            .header("host", "other")
            .header("content-length", "3")
            .body(())
            .unwrap();
        let (parts, ()) = request.into_parts();
        let mut raw = Vec::new();
        write_head(&parts, &mut raw);
        assert_eq!(
            String::from_utf8(raw).unwrap(),
            "POST /a?b=1 HTTP/1.1\r\nhost: example.com:8080\r\nx-one: 1\r\ncookie: a=1; b=2\r\n\r\n"
        );
    }

    /// What `backend_head` makes of a request: the status it is refused with, or the head.
    fn backend(request: Request<()>) -> Result<String, u16> {
        let (parts, ()) = request.into_parts();
        let limits = Limits {
            max_headers: 100,
            max_header_bytes: 16 * 1024,
            key: None,
            sticky: None,
            upgrade: &[],
            routes: None,
            edits: None,
        };
        let client = ClientAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), &[]);
        let (mut raw, mut head) = (Vec::new(), Vec::new());
        match backend_head(&parts, limits, &client, &mut raw, &mut head) {
            Ok(_) => Ok(String::from_utf8(head).unwrap()),
            Err(reject) => Err(reject.status),
        }
    }

    /// Issue 26: an HTTP/2 CONNECT was written `CONNECT / HTTP/1.1` and passed on; a `Host`
    /// unlike `:authority` was dropped without a word.
    #[test]
    fn connect_and_a_conflicting_host_are_refused() {
        let connect = Request::builder()
            .method("CONNECT")
            .uri("evil:443")
            .body(())
            .unwrap();
        assert_eq!(backend(connect), Err(405));
        let other_case = Request::builder()
            .method("connect")
            .uri("http://a.test/")
            .body(())
            .unwrap();
        assert_eq!(backend(other_case), Err(400));
        let get = |host: &str| {
            Request::builder()
                .uri("http://a.test:8080/x")
                .header("host", host)
                .body(())
                .unwrap()
        };
        assert_eq!(backend(get("evil.test")), Err(400));
        assert_eq!(
            backend(get("a.test")),
            Err(400),
            "another port is another host"
        );
        let head = backend(get("A.test:8080")).expect("the same host, another case");
        assert!(
            head.starts_with("GET /x HTTP/1.1\r\nHost: a.test:8080\r\n"),
            "{head}"
        );
        let host_only = Request::builder()
            .uri("/y")
            .header("host", "b.test")
            .body(())
            .unwrap();
        let head = backend(host_only).expect("no :authority: Host says it");
        assert!(head.contains("Host: b.test\r\n"), "{head}");
    }

    /// Found by the fuzz target h2_request_head: a GET without `:path` (which the `h2` crate
    /// accepts) was written `GET / HTTP/1.1`; it is malformed.
    #[test]
    fn a_request_without_a_path_is_refused() {
        let no_path = http::Uri::from_parts(http::uri::Parts::default()).unwrap();
        assert_eq!(
            no_path.path(),
            "",
            "the h2 crate's request without :path or :authority"
        );
        let request = Request::builder()
            .uri(no_path)
            .header("host", "a.test")
            .body(())
            .unwrap();
        assert_eq!(backend(request), Err(400));
    }

    #[test]
    fn connection_fields_are_not_carried() {
        let head = b"HTTP/1.1 200 OK\r\nServer: b1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\nContent-Length: 3\r\n\r\n";
        let r = response_head(head).unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers().len(), 2);
        assert_eq!(r.headers()["server"], "b1");
        assert_eq!(r.headers()["content-length"], "3");
    }
}
