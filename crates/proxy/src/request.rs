//! A request on its way to the backends, whatever protocol the client spoke: where it goes
//! (the upstream, this worker's connections to its backends) and what it carries (the head the
//! request parser wrote for the backend, the body, what the client takes back), in one
//! [`Forward`] built in one place ([`Forward::new`]) for HTTP/1.1 and HTTP/2 clients; the head
//! finished for each attempt ([`Forward::finish_head`]); and what one try on one backend came
//! to ([`Tried`]), whatever protocol the backend speaks; and how long its body may take to
//! come ([`BodyPace`]), the same for HTTP/1.1 and HTTP/2 clients.
//!
//! It sits below the attempt loop (`forward`) and the protocols that loop speaks to backends
//! (`exchange` for HTTP/1.1, `upstream_h2` for HTTP/2), which all take it and none of which
//! the others need for it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use balance::{AttemptFailure, Replay};

use crate::connections::ConnectError;
use crate::http1::{self, ClientSide, FinalResponse, RequestHead};
use crate::io::Pace;
use crate::listener::WorkerListener;
use crate::metrics::WorkerStats;
use crate::settings::{ListenerSettings, UpstreamSettings};
use crate::sticky::StickyRequest;
use crate::upstream::{Upstream, WorkerPools};

/// Where a request goes and what it carries.
#[derive(Debug)]
pub(crate) struct Forward<'a> {
    pub(crate) upstream: &'a Arc<Upstream>,
    /// The upstream's settings as the request was read (one load of them per request).
    pub(crate) settings: &'a UpstreamSettings,
    /// This worker's connections to the upstream's backends.
    pub(crate) connections: &'a WorkerPools,
    /// This worker's counts.
    pub(crate) stats: &'a WorkerStats,
    /// What the upstream's algorithm hashes, if it hashes anything ([`crate::affinity`]).
    pub(crate) affinity: Option<&'a [u8]>,
    /// Bytes of the head written by the request parser (no framing, no blank line).
    pub(crate) head_len: usize,
    /// Whether the head has a `Host` line; if not, each attempt names its backend.
    pub(crate) has_host: bool,
    pub(crate) body: &'a [u8],
    /// Whether the request had a body (its `Content-Length` is sent even when 0).
    pub(crate) has_body: bool,
    pub(crate) client: ClientSide,
    pub(crate) replay: Replay,
    /// Whether a client that closes its side is taken as gone (see
    /// [`crate::exchange::Request::watch_client`]); an HTTP/2 stream has no socket to watch.
    pub(crate) watch_client: bool,
    pub(crate) send_timeout: Duration,
    /// See [`crate::settings::ListenerSettings::send_min_rate`].
    pub(crate) send_min_rate: u64,
    /// For an upgrade request: what the client sent after it, the new protocol's first bytes.
    pub(crate) early: &'a [u8],
    /// How long an upgraded connection may carry nothing either way.
    pub(crate) idle_timeout: Duration,
    /// The client takes trailers (an HTTP/2 client's `te: trailers`): said to an HTTP/2
    /// backend, whose response trailers are then relayed.
    pub(crate) trailers: bool,
    /// What the answer gets of the header rules and the request id: the request's expanded
    /// fields, the listener's response rules, the route's (`None`: no rules, no id).
    pub(crate) edit: Option<(
        &'a http1::ResponseEdit,
        &'a crate::header_rules::HeaderRules,
        Option<&'a crate::header_rules::HeaderRules>,
    )>,
    /// The HTTP/2 client connection the request came on, by number
    /// ([`crate::upstream_h2::next_client_connection`]): the streams it holds on an HTTP/2
    /// backend are counted against `h2_max_streams_per_client`. `None` for an HTTP/1.x
    /// client, which holds one at most.
    pub(crate) client_connection: Option<u64>,
    /// The upstream's sticky sessions, and the backend the request's cookie named.
    pub(crate) sticky: Option<StickyRequest<'a>>,
}

impl<'a> Forward<'a> {
    /// A request of `listener` whose head `req` the parser wrote for the backend (its first
    /// `head_len` bytes), with `body` (`None`: the request has none) and what its `client`
    /// takes back, to the listener's upstream number `upstream` (its index in the context's
    /// list), whose `settings` were in force when it was read. What only one protocol has is
    /// left to it: the HTTP/1.1 path sets `watch_client` and `early`, the HTTP/2 path
    /// `trailers`.
    pub(crate) fn new(
        listener: &'a WorkerListener,
        (upstream, settings): (usize, &'a UpstreamSettings),
        req: &'a RequestHead,
        head_len: usize,
        affinity: Option<&'a [u8]>,
        body: Option<&'a [u8]>,
        client: ClientSide,
    ) -> Forward<'a> {
        Forward {
            upstream: &listener.ctx.upstreams[upstream],
            settings,
            connections: &listener.connections[upstream],
            stats: &listener.stats,
            affinity,
            head_len,
            has_host: req.has_host,
            body: body.unwrap_or_default(),
            has_body: body.is_some(),
            client,
            replay: if req.idempotent
                || settings
                    .next_upstream
                    .contains(balance::NextUpstream::NON_IDEMPOTENT)
            {
                Replay::Safe
            } else {
                Replay::Unsafe
            },
            watch_client: false,
            send_timeout: listener.ctx.settings.send_timeout,
            send_min_rate: listener.ctx.settings.send_min_rate,
            early: &[],
            idle_timeout: listener.ctx.settings.idle_timeout,
            trailers: false,
            edit: req.response_edit.as_ref().map(|e| {
                let ctx = &listener.ctx;
                let route = e
                    .route
                    .and_then(|i| ctx.routes.as_ref()?.get(i))
                    .map(|r| &r.response_headers);
                (e, &ctx.settings.response_headers, route)
            }),
            client_connection: None,
            sticky: settings.sticky.as_ref().map(|settings| StickyRequest {
                settings,
                asked: req.sticky,
            }),
        }
    }

    /// What writing `upstream`'s answer needs of the request's edits and sticky session.
    pub(crate) fn answer_edit(&self, upstream: SocketAddr) -> http1::AnswerEdits<'a> {
        let rules = self.edit.map(|(edit, listener, route)| http1::AnswerEdit {
            edit,
            listener,
            route,
            upstream: Some(upstream),
        });
        (rules, self.sticky.map(|s| s.answer(upstream)))
    }

    /// Ends the request head for one attempt: a `Host` naming the backend when the client
    /// sent none (an HTTP/1.0 client may leave it out; the backend gets HTTP/1.1, which needs
    /// one), `Connection: close` when connections to it are not kept (so the backend closes
    /// first and the TIME-WAIT state stays on its side, as nginx does without `keepalive`),
    /// the body's `Content-Length`, the blank line. The one place a backend's head is
    /// finished: an HTTP/2 backend gets this head as fields.
    pub(crate) fn finish_head(&self, head: &mut Vec<u8>, backend: SocketAddr, keep_alive: bool) {
        head.truncate(self.head_len);
        if !self.has_host {
            use std::io::Write as _;
            let _ = write!(head, "Host: {backend}\r\n");
        }
        // An upgrade request already says `Connection: upgrade`, and its connection is never
        // reused anyway.
        if !keep_alive && !self.client.upgrade {
            head.extend_from_slice(b"Connection: close\r\n");
        }
        http1::finish_request_head(head, self.has_body.then_some(self.body.len()));
    }
}

/// What one try on one backend came to, whatever the protocol; `B` is where the response's
/// body comes from (an HTTP/1.1 connection, an HTTP/2 stream).
pub(crate) enum Tried<B> {
    /// A final response head, rewritten for the client into the output buffer, and its body.
    Head(FinalResponse, B),
    /// No connection could be had.
    ConnectFailed(ConnectError),
    /// No usable response head: what happened, and in words for the log.
    Failed(AttemptFailure, String),
    ClientGone,
    /// The request cannot be written in the backends' protocol (why, for the log).
    Refused(String),
}

impl<B> Tried<B> {
    /// The same outcome, the body (if any) turned into `C`.
    pub(crate) fn map_body<C>(self, f: impl FnOnce(B) -> C) -> Tried<C> {
        match self {
            Tried::Head(response, body) => Tried::Head(response, f(body)),
            Tried::ConnectFailed(e) => Tried::ConnectFailed(e),
            Tried::Failed(failure, why) => Tried::Failed(failure, why),
            Tried::ClientGone => Tried::ClientGone,
            Tried::Refused(why) => Tried::Refused(why),
        }
    }
}

/// How long a request body may take, for HTTP/1.1 and HTTP/2 clients alike:
/// `client_body_timeout` between two reads (nginx's), and, with `client_body_min_rate`, a
/// deadline for the whole body that starts at `client_body_timeout` and moves one second later
/// for every `min_rate` bytes received (Apache's `mod_reqtimeout` `body=…,MinRate=…`): a body
/// trickled a few bytes at a time is cut at about `client_body_timeout`, a real upload at least
/// that fast runs to its end.
#[derive(Debug)]
pub(crate) struct BodyPace(Pace);

impl BodyPace {
    /// The pace of a body whose first byte is waited for from now.
    pub(crate) fn new(settings: &ListenerSettings) -> BodyPace {
        BodyPace(Pace::new(
            settings.client_body_timeout,
            settings.client_body_min_rate,
        ))
    }

    /// Notes `n` more bytes of the body.
    pub(crate) fn received(&mut self, n: usize) {
        self.0.count(n as u64);
    }

    /// When the next read must have brought something (else: 408).
    pub(crate) fn deadline(&self) -> tokio::time::Instant {
        self.0.deadline()
    }
}
