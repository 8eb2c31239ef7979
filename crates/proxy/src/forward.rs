//! A request's way to an answer: a backend picked by the upstream's algorithm, one exchange
//! with it, and after a failure what [`balance::retry::decide`] says — the same backend on a
//! fresh connection, the next backend (skipping those tried: chained failover, seed 004), or
//! our own error. Each attempt's ticket completes exactly once, with the outcome the policy
//! gives, so passive health and the load-aware algorithms see what really happened.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use balance::{AttemptFailure, Fault, Outcome};
use balance::{Next, Picked, Step};
use tokio::net::TcpStream;

use crate::answers;
use crate::connections::{BackendConn, Connections};
use crate::exchange::{self, ClientEnd, Head, Patience, Relay, Request};
use crate::http1::{FinalResponse, Reject};
use crate::io::ClientStream;
use crate::record::Fate;
use crate::request::{Forward, Tried};
use crate::tunnel;
use crate::upstream::{Attempt, Unpicked, Upstream};
use crate::upstream_h2::{self, H2Body};
use crate::upstream_tls::BackendProtocol;

/// The buffers one client connection lends every request it forwards.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// The request head for the backend: built once per request, finished per attempt.
    pub(crate) head: Vec<u8>,
    /// The response head for the client, or our own answer.
    pub(crate) out: Vec<u8>,
    /// De-chunked response data, for HTTP/1.0 clients.
    pub(crate) dechunked: Vec<u8>,
    /// The current request's attempts: the backends picked, in order, and what came of them.
    pub(crate) tried: balance::Attempts<SocketAddr>,
    /// What each attempt before the one relayed came to ([`attempts`]).
    pub(crate) earlier: Vec<(u16, Duration)>,
}

/// The backends a request tried, in order, and what each attempt that was not relayed came
/// to: the status it gave (a status `next_upstream` lists) or the one its failure makes ours
/// (502, 504), and its time. nginx's `$upstream_status` and `$upstream_response_time` list a
/// value per backend tried; the relayed answer's are the request's own.
#[derive(Debug, Default)]
pub(crate) struct Trail {
    pub(crate) backends: Vec<SocketAddr>,
    pub(crate) earlier: Vec<(u16, Duration)>,
}

/// Room made at once for a head [`Scratch`] builds: the request head for the backend, the
/// response head for the client. Grown from nothing by `extend_from_slice`, each took five or
/// six reallocations on a connection's first request (issue 27: about 4,000 instructions per
/// connection under valgrind, with a connection per request); a head larger than this still
/// grows, by doubling.
const HEAD_ROOM: usize = 1024;

impl Scratch {
    /// Makes room for the heads, once per connection (and again after a release).
    pub(crate) fn ready(&mut self) {
        for buf in [&mut self.head, &mut self.out] {
            if buf.capacity() == 0 {
                buf.reserve_exact(HEAD_ROOM);
            }
        }
    }

    /// Gives every buffer's memory back (an idle connection's).
    pub(crate) fn release(&mut self) {
        *self = Scratch::default();
    }
}

/// How forwarding ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The whole response reached the client.
    Answered {
        status: u16,
        keep_alive: bool,
        /// Bytes of the body sent (nginx's `$body_bytes_sent`).
        body_bytes: u64,
    },
    /// A response was started but could not be finished: close the client connection (with a
    /// reset if the backend failed, so a close-delimited body cannot look complete).
    CutShort {
        status: u16,
        backend_failed: bool,
        body_bytes: u64,
    },
    /// The backend agreed to upgrade the connection (101) after `agreed`, and it was relayed
    /// as a tunnel until it ended: `to_client` bytes after the 101's head.
    Tunnelled { to_client: u64, agreed: Duration },
    /// The client closed its connection before the response began (logged as 499, nginx's
    /// code for it).
    ClientGone,
    /// No backend answered: answer with our own error, its status and text chosen by the
    /// attempts ([`balance::Attempts::own_answer`]: by the last failure, or by the status of an
    /// answer that moved the request on).
    NoAnswer((u16, &'static str)),
    /// Every backend was at its `max_conns` and the request could not wait for room: the queue
    /// was full (or off), or it waited `queue_timeout` (503, whatever earlier attempts met).
    NoRoom(Unpicked),
    /// The request could not be forwarded at all: answered with this.
    Refused(Reject),
}

impl Ending {
    /// How the request ended, for its record.
    pub(crate) fn fate(&self) -> Fate {
        match *self {
            Ending::Answered { .. } => Fate::Answered,
            Ending::Tunnelled { .. } => Fate::Upgraded,
            Ending::CutShort {
                backend_failed: true,
                ..
            } => Fate::CutShortByBackend,
            Ending::CutShort { .. } => Fate::CutShortByClient,
            Ending::ClientGone => Fate::ClientGone,
            Ending::NoAnswer(_) => Fate::NoAnswer,
            Ending::NoRoom(why) => Fate::Unpicked(why),
            Ending::Refused(_) => Fate::Refused,
        }
    }
}

/// Forwards one request; the backends tried are left in `scratch.tried`.
pub(crate) async fn forward<S: ClientStream>(
    f: &Forward<'_>,
    client: &mut S,
    scratch: &mut Scratch,
) -> Ending {
    let upstream = f.upstream;
    let attempted = attempts(
        f,
        &mut scratch.head,
        &mut scratch.out,
        (&mut scratch.tried, &mut scratch.earlier),
        Some(client.tcp()),
    )
    .await;
    let Answer {
        response,
        body,
        mut attempt,
        patience,
        agreed,
    } = match attempted {
        Attempts::Answered(answer) => *answer,
        Attempts::NoAnswer(fault) => return Ending::NoAnswer(fault),
        Attempts::NoRoom(why) => return Ending::NoRoom(why),
        Attempts::ClientGone => return Ending::ClientGone,
        Attempts::Refused(reject) => return Ending::Refused(reject),
    };
    let addr = attempt.addr;
    if response.status == 101 {
        return upgrade(f, client, scratch, body, attempt, agreed).await;
    }
    let mut end = ClientEnd {
        stream: client,
        pace: crate::io::Pace::new(f.send_timeout, f.send_min_rate),
        dechunked: &mut scratch.dechunked,
        watch: f.watch_client,
        sent: 0,
    };
    let relayed = relay(
        body,
        &response,
        &scratch.out,
        &mut end,
        &mut attempt,
        patience,
    )
    .await;
    // The body's bytes that reached the client (nginx's `$body_bytes_sent`).
    let body_bytes = end.sent.saturating_sub(scratch.out.len() as u64);
    ending(
        upstream,
        addr,
        relayed,
        &mut attempt,
        response.status,
        response.client_keep_alive,
        body_bytes,
    )
}

/// Relays the response whose head (rewritten for the client) is `head` and whose body comes
/// from `body`; a backend connection that finished its body cleanly goes back to its pool.
async fn relay<S: ClientStream>(
    body: Body,
    response: &FinalResponse,
    head: &[u8],
    end: &mut ClientEnd<'_, S>,
    attempt: &mut Attempt,
    patience: Patience,
) -> Result<(), Relay> {
    match body {
        Body::Http1 { mut conn, pool } => {
            let relayed = exchange::relay(&mut conn, response, head, end, attempt, patience).await;
            if relayed.is_ok() && response.backend_keep_alive && conn.buf.is_empty() {
                pool.put_idle(conn);
            }
            relayed
        }
        // Boxed, as the attempt is.
        Body::H2(mut body) => {
            let relayed = Box::pin(upstream_h2::relay(
                &mut body, response, head, end, attempt, patience,
            ))
            .await;
            if relayed.is_ok() {
                body.finish();
            }
            relayed
        }
    }
}

/// The backend agreed to switch protocols (101, its head in `scratch.out`): the connection is
/// tunnelled if the switch is to a protocol the client offered, else the answer is the
/// backend's invalid one.
async fn upgrade<S: ClientStream>(
    f: &Forward<'_>,
    client: &mut S,
    scratch: &mut Scratch,
    body: Body,
    mut attempt: Attempt,
    agreed: Duration,
) -> Ending {
    let (upstream, addr) = (f.upstream, attempt.addr);
    let Body::Http1 { conn, .. } = body else {
        // An HTTP/2 response cannot be a 101; `upstream_h2` never passes one on.
        attempt.complete(Outcome::Failure);
        return Ending::NoAnswer(balance::retry::own_answer(Some(Fault::InvalidResponse)));
    };
    if !switches_to_an_offer(&scratch.head, &scratch.out) {
        // RFC 9110 §15.2.2: a server switches only to a protocol the client offered. Anything
        // else would make the client speak one protocol to a backend that speaks another: an
        // invalid answer, the backend's.
        tracing::warn!(upstream = %upstream.name(), backend = %addr, "101 to a protocol the client did not offer");
        f.stats
            .failed(upstream.shared_name(), addr, Fault::InvalidResponse);
        attempt.complete(Outcome::Failure);
        return Ending::NoAnswer(balance::retry::own_answer(Some(Fault::InvalidResponse)));
    }
    tunnel(f, client, conn, &scratch.out, attempt, agreed).await
}

/// How a relay of a response with `status` ended, its attempt completed by it.
pub(crate) fn ending(
    upstream: &Upstream,
    addr: SocketAddr,
    relayed: Result<(), Relay>,
    attempt: &mut Attempt,
    status: u16,
    keep_alive: bool,
    body_bytes: u64,
) -> Ending {
    attempt.complete(Relay::end(&relayed).outcome());
    match relayed {
        Ok(()) => Ending::Answered {
            status,
            keep_alive,
            body_bytes,
        },
        Err(Relay::Backend { why, .. }) => {
            tracing::warn!(
                upstream = %upstream.name(),
                backend = %addr,
                error = %why,
                "the response ended in the middle of its body; closing the client connection"
            );
            Ending::CutShort {
                status,
                backend_failed: true,
                body_bytes,
            }
        }
        Err(Relay::Client) => Ending::CutShort {
            status,
            backend_failed: false,
            body_bytes,
        },
    }
}

/// A backend's response head, ready to relay.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) response: FinalResponse,
    /// Where the body comes from.
    pub(crate) body: Body,
    /// Completed when the backend's part is over.
    pub(crate) attempt: Attempt,
    pub(crate) patience: Patience,
    /// From the attempt's start to its response head: a tunnel's latency.
    pub(crate) agreed: Duration,
}

/// Where a response body comes from.
#[derive(Debug)]
pub(crate) enum Body {
    /// An HTTP/1.1 connection, its buffer holding the start of the body, and the pool it goes
    /// back to when the body is over.
    Http1 {
        conn: BackendConn,
        pool: Arc<Connections>,
    },
    /// A stream of an HTTP/2 connection.
    H2(H2Body),
}

/// How the attempts ended.
#[derive(Debug)]
pub(crate) enum Attempts {
    Answered(Box<Answer>),
    /// No backend answered: our own answer's status and text
    /// ([`balance::Attempts::own_answer`]).
    NoAnswer((u16, &'static str)),
    /// Every backend was full and the request could not wait.
    NoRoom(Unpicked),
    /// The client left while it waited (only a watched client: see [`attempts`]).
    ClientGone,
    /// The request cannot be forwarded in the backends' protocol: answered with this.
    Refused(Reject),
}

/// Tries backends for `f` until one answers with a response head, which is rewritten into
/// `out` as an HTTP/1.1 head for the client; `head` holds the request head of the last
/// attempt. Which backend next, whether to resend, whom to blame and when to give up is
/// [`balance::Attempts`]'s to say (the simulator asks it too); `tried` is that machine, left
/// with the backends tried, and beside it what each attempt not relayed came to (a status and
/// a time, [`Trail::earlier`]). `client` is the socket watched for a departure while
/// `f.watch_client` (an HTTP/2 stream has none: a stream the client cancels drops this future,
/// and the `Attempt` guard completes its ticket as cancelled). What the caller does with the
/// answer — relay it to a socket, to an HTTP/2 stream, or tunnel — is its own part.
pub(crate) async fn attempts(
    f: &Forward<'_>,
    head: &mut Vec<u8>,
    out: &mut Vec<u8>,
    (tried, earlier): (
        &mut balance::Attempts<SocketAddr>,
        &mut Vec<(u16, Duration)>,
    ),
    client: Option<&TcpStream>,
) -> Attempts {
    let upstream = f.upstream;
    tried.reset(f.settings.max_attempts(), f.settings.next_upstream);
    earlier.clear();
    let mut patience = Patience {
        each: f.settings.read_timeout,
        until: None,
    };
    // Whether the last decision to move on was paid for from the retry budget: a retry that
    // then finds no backend gives it back.
    let mut charged = false;
    while tried.may_pick() {
        let picked = pick_next(f, tried, client, &mut patience).await;
        if picked.is_err() && std::mem::take(&mut charged) {
            f.upstream.refund_retry();
        }
        charged = false;
        let mut attempt = match picked {
            Ok(attempt) => attempt,
            Err(Some(ended)) => return ended,
            Err(None) => break,
        };
        let addr = attempt.addr;
        // The worker's connections learn of a new backend before any pick can choose it; only
        // a worker that was starting just then can miss one: it talks to it unpooled.
        let pool = f
            .connections
            .get(addr)
            .unwrap_or_else(|| Arc::new(Connections::new(addr, 0, f.settings.keepalive_timeout)));
        f.finish_head(head, addr, pool.keeps_idle());
        let request = Request {
            head,
            body: f.body,
            client: f.client,
            replay: f.replay,
            watch_client: f.watch_client,
            edit: f.answer_edit(addr),
        };
        let began = tokio::time::Instant::now();
        loop {
            let outcome =
                try_once(f, &pool, tried.may_reuse(), &request, client, patience, out).await;
            let (failure, why) = match outcome {
                Tried::Head(response, body) => {
                    let status = response.status;
                    let paid = || {
                        charged = may_retry(f);
                        charged
                    };
                    if !tried.answered(status, f.replay, patience.spent(), paid) {
                        attempt.answered(status, f.settings.options.failure_statuses);
                        return Attempts::Answered(Box::new(Answer {
                            response,
                            body,
                            attempt,
                            patience,
                            agreed: began.elapsed(),
                        }));
                    }
                    // A status `next_upstream` lists: the answer is dropped (its connection
                    // with it: its body is not read) and the next backend asked.
                    tracing::info!(
                        upstream = %upstream.name(), backend = %addr, status,
                        "backend answered {status}; trying the next backend (next_upstream)"
                    );
                    drop(body);
                    out.clear();
                    attempt.complete(Outcome::Failure);
                    earlier.push((status, began.elapsed()));
                    break;
                }
                Tried::ClientGone => {
                    // Gone before the backend answered: no verdict for passive health, but
                    // a client that waited longer than the backend was expected to take
                    // teaches the load-aware algorithms (`Completion::verdict`).
                    attempt.complete(Outcome::Abandoned);
                    return Attempts::ClientGone;
                }
                Tried::Refused(why) => {
                    tracing::debug!(upstream = %upstream.name(), error = %why, "request not forwarded");
                    attempt.complete(Outcome::Cancelled);
                    return Attempts::Refused(answers::UNCARRIED);
                }
                Tried::ConnectFailed(e) => {
                    (AttemptFailure::connect(e.fault(), f.replay), e.to_string())
                }
                Tried::Failed(failure, why) => (failure, why),
            };
            if !resend(
                f,
                tried,
                &mut attempt,
                &failure,
                &why,
                patience,
                &mut charged,
            ) {
                earlier.push((trail_status(failure.fault), began.elapsed()));
                break;
            }
        }
    }
    Attempts::NoAnswer(tried.own_answer())
}

/// The status the access log gives an attempt that failed: 504 after a timeout, else 502, as
/// nginx's `$upstream_status` does (`ngx_http_upstream_next` sets `u->state->status`: 504 for
/// `NGX_HTTP_UPSTREAM_FT_TIMEOUT`, 502 otherwise) — whatever our own answer would be.
fn trail_status(fault: balance::Fault) -> u16 {
    match fault {
        balance::Fault::ConnectTimeout | balance::Fault::ReadTimeout => 504,
        _ => 502,
    }
}

/// Picks a backend for the next attempt, other than those `tried` (noted there); the request's
/// `response_timeout` starts with its first pick. `Err`: how the attempts end instead, or
/// `None` when no backend is left to pick.
async fn pick_next(
    f: &Forward<'_>,
    tried: &mut balance::Attempts<SocketAddr>,
    client: Option<&TcpStream>,
    patience: &mut Patience,
) -> Result<Attempt, Option<Attempts>> {
    let upstream = f.upstream;
    let settings = f.settings;
    let attempt = match upstream
        .pick(
            settings,
            f.affinity,
            f.sticky.and_then(|s| s.asked),
            tried.tried(),
            client,
            f.watch_client,
        )
        .await
    {
        Ok(attempt) => attempt,
        Err(Unpicked::ClientGone) => return Err(Some(Attempts::ClientGone)),
        Err(Unpicked::NoBackend) => return Err(None),
        Err(why) => {
            f.stats.unpicked(upstream.shared_name(), why);
            return Err(Some(Attempts::NoRoom(why)));
        }
    };
    if patience.until.is_none() {
        patience.until = settings
            .response_timeout
            .map(|total| (crate::io::after(total), total));
    }
    if tried.picked(attempt.addr) == Picked::Retry {
        f.stats.retried(upstream.shared_name(), 1);
    }
    Ok(attempt)
}

/// One try of the request on `pool`'s backend, in the backends' protocol (on an idle
/// connection when `reuse` allows it).
async fn try_once(
    f: &Forward<'_>,
    pool: &Arc<Connections>,
    reuse: bool,
    request: &Request<'_>,
    client: Option<&TcpStream>,
    patience: Patience,
    out: &mut Vec<u8>,
) -> Tried<Body> {
    match f.settings.backend_protocol {
        // Boxed, as the HTTP/2 attempt is: an allocation per attempt, against the connect's
        // and the exchange's states in every client connection's task, idle ones included
        // (measured in a debug build: 3336 bytes a task boxed, 4272 inline).
        BackendProtocol::Http1 => {
            Box::pin(try_http1(f, pool, reuse, request, client, patience, out)).await
        }
        // Boxed: its states (a connect, the HTTP/2 handshake) would otherwise be part of every
        // client connection's task, idle ones included.
        BackendProtocol::H2 => Box::pin(upstream_h2::attempt(
            f,
            pool,
            request.head,
            client,
            patience,
            out,
        ))
        .await
        .map_body(Body::H2),
    }
}

/// The current attempt failed as `failure` says (`why`, in words): what the attempt machine
/// decides is logged and counted, and the attempt's ticket completed unless the request is
/// resent on a fresh connection to the same backend. Returns whether to resend.
fn resend(
    f: &Forward<'_>,
    tried: &mut balance::Attempts<SocketAddr>,
    attempt: &mut Attempt,
    failure: &AttemptFailure,
    why: &str,
    patience: Patience,
    charged: &mut bool,
) -> bool {
    let upstream = f.upstream;
    let step = tried.failed_within(failure, patience.spent(), || {
        *charged = may_retry(f);
        *charged
    });
    log_failure(upstream, attempt.addr, failure, why, step);
    match step.next {
        Next::ResendFresh => {
            // The keep-alive race, not the backend's failure: a retry only.
            f.stats.retried(upstream.shared_name(), 1);
            true
        }
        Next::NextBackend { outcome } | Next::GiveUp { outcome } => {
            if !step.time_up {
                f.stats
                    .failed(upstream.shared_name(), attempt.addr, failure.fault);
            }
            attempt.complete(outcome);
            false
        }
    }
}

/// Whether the upstream's retry budget allows one more retry (counted when it does not).
fn may_retry(f: &Forward<'_>) -> bool {
    let allowed = f.upstream.may_retry();
    if !allowed {
        f.stats.budget_exhausted(f.upstream.shared_name());
    }
    allowed
}

/// One try on a pooled HTTP/1.1 connection (an idle one when `reuse`, else a new one).
async fn try_http1(
    f: &Forward<'_>,
    pool: &Arc<Connections>,
    reuse: bool,
    request: &Request<'_>,
    client: Option<&TcpStream>,
    patience: Patience,
    out: &mut Vec<u8>,
) -> Tried<Body> {
    let settings = f.settings;
    let idle = if reuse {
        pool.take_idle(f.replay == balance::Replay::Unsafe, settings.tls.as_ref())
    } else {
        None
    };
    let mut conn = match idle {
        Some(conn) => conn,
        None => match pool
            .connect(settings.connect_timeout, settings.backend_tls(pool.addr()))
            .await
        {
            Ok(conn) => conn,
            Err(e) => return Tried::ConnectFailed(e),
        },
    };
    match exchange::send_and_read_head(&mut conn, request, client, patience, out).await {
        Head::Response(response) => Tried::Head(
            response,
            Body::Http1 {
                conn,
                pool: Arc::clone(pool),
            },
        ),
        // Dropping the connection closes it: the backend stops working for nobody.
        Head::ClientGone => Tried::ClientGone,
        Head::Failed(failure, why) => Tried::Failed(failure, why),
    }
}

/// Relays an upgraded connection (the backend's 101, head in `head`) until both sides have
/// ended, either fails, or nothing moves for `idle_timeout`; the attempt's ticket is held all
/// the while (the backend is busy with this client: least_conn counts it), then completes
/// with the time the backend took to agree (`agreed`) as its latency.
async fn tunnel<S: ClientStream>(
    f: &Forward<'_>,
    client: &mut S,
    mut conn: BackendConn,
    head: &[u8],
    mut attempt: Attempt,
    agreed: Duration,
) -> Ending {
    // The 101 and what the backend sent after it; what the client sent after its request.
    let opened = async {
        crate::io::send(client, head, conn.buf.filled(), f.send_timeout).await?;
        if f.early.is_empty() {
            return Ok(());
        }
        crate::io::send(&mut conn.stream, f.early, &[], f.send_timeout).await
    };
    if opened.await.is_err() {
        attempt.complete(Outcome::Cancelled);
        return Ending::CutShort {
            status: 101,
            backend_failed: false,
            body_bytes: 0,
        };
    }
    let from_backend = conn.buf.len() as u64;
    conn.buf.release();
    let moved = tunnel::Moved::default();
    tunnel::relay(client, &mut conn.stream, f.idle_timeout, &moved).await;
    attempt.complete_measured(Outcome::Success, agreed);
    Ending::Tunnelled {
        to_client: from_backend + moved.to_client.into_inner(),
        agreed,
    }
}

/// Whether every protocol the 101 head `switched` names in `Upgrade` is one the request head
/// `asked` offered (by name, without case or version).
fn switches_to_an_offer(asked: &[u8], switched: &[u8]) -> bool {
    fn names(head: &[u8]) -> impl Iterator<Item = &[u8]> {
        head.split(|&b| b == b'\n')
            .filter_map(|line| {
                let (name, value) = line.split_at(line.iter().position(|&b| b == b':')?);
                name.eq_ignore_ascii_case(b"upgrade").then(|| &value[1..])
            })
            .flat_map(|v| v.split(|&b| b == b','))
            .map(|offer| offer.trim_ascii())
            .filter(|offer| !offer.is_empty())
            .map(|offer| offer.split(|&b| b == b'/').next().unwrap_or_default())
    }
    let mut chosen = names(switched).peekable();
    chosen.peek().is_some() && chosen.all(|c| names(asked).any(|o| o.eq_ignore_ascii_case(c)))
}

pub(crate) fn log_failure(
    upstream: &Upstream,
    backend: SocketAddr,
    failure: &AttemptFailure,
    why: &str,
    step: Step,
) {
    let next = match step.next {
        Next::ResendFresh => "resending on a fresh connection",
        Next::NextBackend { .. } => "trying the next backend",
        Next::GiveUp { .. } => "giving up",
    };
    if step.next == Next::ResendFresh {
        // The ordinary keep-alive race: worth a trace, not an alarm.
        tracing::debug!(upstream = %upstream.name(), %backend, error = %why, next, "kept-alive connection closed");
    } else if step.time_up {
        tracing::warn!(upstream = %upstream.name(), %backend, error = %why, "response_timeout passed before the response head");
    } else {
        tracing::warn!(
            upstream = %upstream.name(),
            %backend,
            error = %why,
            // In words, unquoted (scripts/soak reads them).
            connection = %match failure.connection {
                balance::Connection::Fresh => "new",
                balance::Connection::Reused => "reused",
            },
            request_sent = %match failure.request {
                balance::RequestSent::Nothing => "none",
                balance::RequestSent::Partly => "part",
                balance::RequestSent::Whole => "all",
            },
            blamed = step.decision.blame == balance::Blame::Backend,
            next,
            "attempt failed"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_101_must_switch_to_a_protocol_the_client_offered() {
        let asked = b"GET /chat HTTP/1.1\r\nHost: a\r\nUpgrade: WebSocket/13\r\nConnection: upgrade\r\n\r\n";
        let switched = |p: &str| {
            format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: {p}\r\nConnection: upgrade\r\n\r\n"
            )
        };
        assert!(switches_to_an_offer(
            asked,
            switched("websocket").as_bytes()
        ));
        assert!(switches_to_an_offer(
            asked,
            switched("WebSocket/13").as_bytes()
        ));
        assert!(!switches_to_an_offer(asked, switched("h2c").as_bytes()));
        assert!(!switches_to_an_offer(
            asked,
            switched("websocket, h2c").as_bytes()
        ));
        assert!(!switches_to_an_offer(
            asked,
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n"
        ));
    }
}
