//! An HTTP/2 stream's attempts over the upstream's backends, up to a response head.
//!
//! The same loop as [`crate::forward::forward`] (the pick, the worker's pooled connections,
//! [`balance::retry::decide`] after each failure, each ticket completed exactly once), but it
//! stops at the response head and hands it over with its connection and its still open
//! attempt: the body goes to an HTTP/2 stream (`relay`), not to a client socket. There is no
//! client socket to watch either: a stream the client cancels drops this future, and the
//! `Attempt` guard completes its ticket as cancelled.
//!
//! (Merge note: the HTTP/1.1 loop differs only in its end, the relay to the client socket; once
//! the client side is generic over its stream, both can share one loop with the relay as the
//! caller's part.)

use std::net::SocketAddr;
use std::sync::Arc;

use balance::{Action, AttemptFailure, Connection, Fault, Outcome, RequestSent};
use balance::{ResponseReceived, retry};

use crate::connections::{BackendConn, Connections};
use crate::exchange::{self, Head, Patience, Request};
use crate::forward::{Forward, finish_head, log_failure};
use crate::http1::FinalResponse;
use crate::upstream::{Attempt, Unpicked};

/// A backend's response head, ready to relay.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) response: FinalResponse,
    /// The connection, its buffer holding the start of the body.
    pub(crate) conn: BackendConn,
    /// Where the connection goes back when the body is over.
    pub(crate) pool: Arc<Connections>,
    /// Completed when the backend's part is over.
    pub(crate) attempt: Attempt,
    pub(crate) patience: Patience,
}

/// How the attempts ended.
#[derive(Debug)]
pub(crate) enum Attempts {
    Answered(Box<Answer>),
    /// No backend answered; the last failure, if any backend was tried.
    NoAnswer(Option<Fault>),
    /// Every backend was full and the request could not wait.
    NoRoom(Unpicked),
}

/// Tries backends for `f` until one answers with a response head, which is rewritten into
/// `out` (as an HTTP/1.1 head; the caller turns it into HTTP/2 fields). The backends tried are
/// left in `tried`.
pub(crate) async fn attempts(
    f: &Forward<'_>,
    head: &mut Vec<u8>,
    out: &mut Vec<u8>,
    tried: &mut Vec<SocketAddr>,
) -> Attempts {
    let upstream = f.upstream;
    let settings = f.settings;
    tried.clear();
    let mut last_fault = None;
    let mut patience = Patience {
        each: settings.read_timeout,
        until: None,
    };
    while tried.len() < settings.max_attempts() && !patience.spent() {
        let mut attempt = match upstream
            .pick(settings, f.affinity, tried, None, false)
            .await
        {
            Ok(attempt) => attempt,
            Err(Unpicked::NoBackend | Unpicked::ClientGone) => break,
            Err(why) => {
                f.stats.unpicked(upstream.shared_name(), why);
                return Attempts::NoRoom(why);
            }
        };
        if patience.until.is_none() {
            patience.until = settings
                .response_timeout
                .map(|total| (crate::io::after(total), total));
        }
        if !tried.is_empty() {
            f.stats.retried(upstream.shared_name(), 1);
        }
        let addr = attempt.addr;
        tried.push(addr);
        let pool = f
            .connections
            .get(addr)
            .unwrap_or_else(|| Arc::new(Connections::new(addr, 0, settings.keepalive_timeout)));
        finish_head(head, f, addr, pool.keeps_idle());
        let request = Request {
            head,
            body: f.body,
            client: f.client,
            replay: f.replay,
            watch_client: false,
        };
        let mut reuse = true;
        let (action, fault) = loop {
            let idle = if reuse {
                pool.take_idle(f.replay == balance::Replay::Unsafe, settings.tls.as_ref())
            } else {
                None
            };
            let mut conn = match idle {
                Some(conn) => conn,
                None => match pool
                    .connect(
                        settings.connect_timeout,
                        crate::forward::backend_tls(settings, addr),
                    )
                    .await
                {
                    Ok(conn) => conn,
                    Err(e) => {
                        let failure = AttemptFailure {
                            fault: e.fault(),
                            connection: Connection::Fresh,
                            request: RequestSent::Nothing,
                            response: ResponseReceived::Nothing,
                            replay: f.replay,
                        };
                        let decision = retry::decide(&failure);
                        attempt.complete(decision.outcome());
                        f.stats.failed(upstream.shared_name(), addr, failure.fault);
                        log_failure(upstream, addr, &failure, &e.to_string(), decision);
                        break (decision.action, failure.fault);
                    }
                },
            };
            match exchange::send_and_read_head(&mut conn, &request, None, patience, out).await {
                Head::Response(response) => {
                    return Attempts::Answered(Box::new(Answer {
                        response,
                        conn,
                        pool,
                        attempt,
                        patience,
                    }));
                }
                // Not watched: cannot happen; taken as the client's departure all the same.
                Head::ClientGone => {
                    attempt.complete(Outcome::Cancelled);
                    return Attempts::NoAnswer(None);
                }
                Head::Failed(failure, why)
                    if patience.spent() && failure.fault == Fault::ReadTimeout =>
                {
                    tracing::warn!(upstream = %upstream.name(), backend = %addr, error = %why, "response_timeout passed before the response head");
                    attempt.complete(Outcome::Cancelled);
                    break (Action::GiveUp, failure.fault);
                }
                Head::Failed(failure, why) => {
                    let decision = retry::decide(&failure);
                    log_failure(upstream, addr, &failure, &why, decision);
                    if decision.action == Action::ResendFresh && reuse {
                        reuse = false;
                        f.stats.retried(upstream.shared_name(), 1);
                        continue;
                    }
                    f.stats.failed(upstream.shared_name(), addr, failure.fault);
                    attempt.complete(decision.outcome());
                    break (decision.action, failure.fault);
                }
            }
        };
        last_fault = Some(fault);
        if action == Action::GiveUp {
            break;
        }
    }
    Attempts::NoAnswer(last_fault)
}
