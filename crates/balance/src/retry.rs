//! What happens after a failed attempt: retry or not, where, and whom to blame.
//!
//! One pure rule, used by the proxy for every attempt that did not produce a response and by
//! the simulator for its emulated attempts, so both apply the same policy. The data plane
//! classifies what it saw once, into an [`AttemptFailure`]; [`decide`] maps that to a
//! [`Decision`]: resend on a fresh connection to the same backend, try the next backend, or give
//! up — and whether the failure counts against the backend (the [`Outcome`] its ticket
//! completes with, which feeds `max_fails`).
//!
//! The rules, in order (the table in `docs/architecture.md` is the same):
//!
//! 1. **The proxy's own shortage** (out of descriptors, local ports or buffers): not the
//!    backend's fault, so no blame. The next backend is tried, since a shortage of local ports
//!    is per destination and a descriptor may have been freed meanwhile.
//! 2. **Connect refused, unreachable or timed out, or the TLS handshake with the backend
//!    failed** (its certificate not verified, or no TLS at all): the request never left; the
//!    backend is blamed and the next one tried (nginx `proxy_next_upstream error timeout`,
//!    whose `error` covers a failed upstream SSL handshake; HAProxy's default
//!    `retry-on conn-failure`). When it was the last attempt, a failed handshake is answered
//!    502, as nginx does, a refused connection 503.
//! 3. **A reused connection closed or reset before any byte of the answer**: the ordinary
//!    keep-alive race (the backend closed an idle connection as the request went out). Nobody is
//!    blamed. If none of the request went out, or it may be repeated, it is resent once on a
//!    fresh connection to the same backend (as browsers and Go's transport do). A
//!    non-idempotent request of which any byte went out is not resent: whether the backend
//!    acted on it cannot be known — a backend may act on a head before its body arrives
//!    (RFC 9110 §9.2.2, RFC 9112 §9.3.1); the client gets 502 and decides.
//! 4. **Any other close or reset before the answer's head was complete** (a fresh connection,
//!    or after part of an answer): the backend is blamed; the next backend is tried if the
//!    request may be repeated or none of it went out.
//! 5. **No answer within `read_timeout`**: the backend is blamed, and the next backend is
//!    tried if the request may be repeated (nginx's default `proxy_next_upstream error
//!    timeout`; its `timeout` covers a read before the head as well as a connect).
//! 6. **An invalid answer**: the backend did answer, wrongly; it is blamed, and the request goes
//!    to the next backend only if `next_upstream` lists `invalid_header` (nginx's default
//!    leaves it out).
//!
//! Which conditions move a request on is the upstream's `next_upstream` ([`NextUpstream`],
//! nginx's `proxy_next_upstream`): `error` (rules 1 to 4), `timeout` (a connect or a read that
//! timed out), `invalid_header` (rule 6), and answers with a listed status (`http_500`,
//! `http_502`, `http_503`, `http_504`, `http_429`: see [`NextUpstream::moves_on`]); a condition
//! not listed ends the request there, as `off` ends every one. Blame does not depend on it: a
//! fault counts against the backend whether or not it is listed (as nginx, which marks the
//! peer failed before it asks whether to go on); an answer's status counts only when it moves
//! the request on (nginx calls `ngx_http_upstream_next` for a listed status only while tries
//! remain; the last answer is relayed, and its backend is not marked failed).

use crate::balancer::Outcome;

/// What went wrong in an attempt, before a complete response head arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The proxy could not open a connection for a reason of its own: out of file descriptors
    /// (`EMFILE`, `ENFILE`), of local ports (`EADDRNOTAVAIL`), of buffers or memory.
    LocalResources,
    /// The backend refused the connection or could not be reached.
    ConnectFailed,
    /// No connection within `connect_timeout`.
    ConnectTimeout,
    /// The connection was closed or reset before the response head was complete.
    Closed,
    /// No complete response head within `read_timeout`.
    ReadTimeout,
    /// The backend's answer is not valid HTTP, or breaks its framing rules.
    InvalidResponse,
    /// The TLS handshake with the backend failed (`tls = true`): its certificate was not
    /// verified, or it did not speak TLS. Nothing was sent.
    TlsHandshake,
}

impl Fault {
    /// Every fault, in declaration order.
    pub const ALL: [Fault; 7] = [
        Fault::LocalResources,
        Fault::ConnectFailed,
        Fault::ConnectTimeout,
        Fault::Closed,
        Fault::ReadTimeout,
        Fault::InvalidResponse,
        Fault::TlsHandshake,
    ];
}

/// Whether the attempt used a connection kept alive from an earlier request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connection {
    Fresh,
    Reused,
}

/// How much of the request reached the backend's socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestSent {
    /// Not a byte (the connection failed first).
    Nothing,
    /// Part of it: the backend cannot have acted on an incomplete request.
    Partly,
    /// All of it.
    Whole,
}

/// How much of the answer arrived before the failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseReceived {
    Nothing,
    /// Some bytes, but not a complete head.
    Partly,
}

/// Whether the request may be sent twice: an idempotent method (RFC 9110 §9.2.2), or any
/// method when the upstream sets `retry_non_idempotent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    Safe,
    Unsafe,
}

/// A failed attempt, classified once by whoever saw it fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptFailure {
    pub fault: Fault,
    pub connection: Connection,
    pub request: RequestSent,
    pub response: ResponseReceived,
    pub replay: Replay,
}

impl AttemptFailure {
    /// A connection that could not be had (`fault`): nothing sent, nothing received, a fresh
    /// connection, whatever the protocol.
    pub fn connect(fault: Fault, replay: Replay) -> AttemptFailure {
        AttemptFailure {
            fault,
            connection: Connection::Fresh,
            request: RequestSent::Nothing,
            response: ResponseReceived::Nothing,
            replay,
        }
    }
}

/// What to do next with the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Send it again to the same backend on a new connection; the attempt (and its ticket)
    /// goes on. Only ever decided for a reused connection, so it happens at most once per
    /// attempt.
    ResendFresh,
    /// Complete this attempt and try the next backend, if the request has tries left.
    NextBackend,
    /// Complete this attempt and answer the client with our own error.
    GiveUp,
}

/// Whether the failure is held against the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    /// Counts towards its `max_fails` (its ticket completes as [`Outcome::Failure`]).
    Backend,
    /// No verdict on the backend (its ticket completes as [`Outcome::Cancelled`]).
    Nobody,
}

/// The policy's answer for one failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub action: Action,
    pub blame: Blame,
}

impl Decision {
    /// The outcome the attempt's ticket completes with.
    pub fn outcome(&self) -> Outcome {
        match self.blame {
            Blame::Backend => Outcome::Failure,
            Blame::Nobody => Outcome::Cancelled,
        }
    }
}

/// The answer the proxy gives itself when no backend answered, by the last attempt's fault
/// (`None`: no backend could be picked), as nginx chooses it: 503 when nothing could be
/// reached, 504 after a timeout, 502 when a backend closed or answered wrongly. The status and
/// the body's text.
pub fn own_answer(last: Option<Fault>) -> (u16, &'static str) {
    match last {
        None | Some(Fault::ConnectFailed) => {
            (503, "503 Service Unavailable: no backend available\n")
        }
        Some(Fault::LocalResources) => (
            503,
            "503 Service Unavailable: the proxy is out of connections; try again\n",
        ),
        Some(Fault::ConnectTimeout | Fault::ReadTimeout) => (
            504,
            "504 Gateway Timeout: the backend did not answer in time\n",
        ),
        Some(Fault::TlsHandshake) => (
            502,
            "502 Bad Gateway: the TLS handshake with the backend failed\n",
        ),
        Some(Fault::Closed | Fault::InvalidResponse) => (
            502,
            "502 Bad Gateway: the backend's answer was invalid or cut short\n",
        ),
    }
}

/// When a request moves on to the next backend: nginx's `proxy_next_upstream`, a set of its
/// conditions. The default is nginx's, `error` and `timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NextUpstream(u16);

impl NextUpstream {
    /// No condition: every request ends with its first backend's answer or failure.
    pub const OFF: NextUpstream = NextUpstream(0);
    /// A connection could not be had, or closed or was reset before the answer's head.
    pub const ERROR: NextUpstream = NextUpstream(1);
    /// A connect, or a read before the answer's head, timed out.
    pub const TIMEOUT: NextUpstream = NextUpstream(1 << 1);
    /// The answer's head was not valid HTTP.
    pub const INVALID_HEADER: NextUpstream = NextUpstream(1 << 2);
    pub const HTTP_500: NextUpstream = NextUpstream(1 << 3);
    pub const HTTP_502: NextUpstream = NextUpstream(1 << 4);
    pub const HTTP_503: NextUpstream = NextUpstream(1 << 5);
    pub const HTTP_504: NextUpstream = NextUpstream(1 << 6);
    pub const HTTP_429: NextUpstream = NextUpstream(1 << 7);
    /// Requests that are not idempotent move on too, after they were sent (without it, a
    /// request whose bytes began to go out is sent once only).
    pub const NON_IDEMPOTENT: NextUpstream = NextUpstream(1 << 8);
    /// nginx's default.
    pub const DEFAULT: NextUpstream = NextUpstream(Self::ERROR.0 | Self::TIMEOUT.0);

    /// Every condition's name (as nginx spells it) and flag; `off` is none of them.
    pub const NAMES: [(&'static str, NextUpstream); 9] = [
        ("error", Self::ERROR),
        ("timeout", Self::TIMEOUT),
        ("invalid_header", Self::INVALID_HEADER),
        ("http_500", Self::HTTP_500),
        ("http_502", Self::HTTP_502),
        ("http_503", Self::HTTP_503),
        ("http_504", Self::HTTP_504),
        ("http_429", Self::HTTP_429),
        ("non_idempotent", Self::NON_IDEMPOTENT),
    ];

    /// The condition named `name` (`off`: [`NextUpstream::OFF`]); `None` for another name.
    pub fn named(name: &str) -> Option<NextUpstream> {
        if name == "off" {
            return Some(Self::OFF);
        }
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, flag)| flag)
    }

    /// Both sets' conditions.
    pub const fn with(self, other: NextUpstream) -> NextUpstream {
        NextUpstream(self.0 | other.0)
    }

    /// Whether every condition of `other` is in this set.
    pub const fn contains(self, other: NextUpstream) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether an answer with `status` moves the request on (a listed `http_NNN`).
    pub fn moves_on(self, status: u16) -> bool {
        let flag = match status {
            500 => Self::HTTP_500,
            502 => Self::HTTP_502,
            503 => Self::HTTP_503,
            504 => Self::HTTP_504,
            429 => Self::HTTP_429,
            _ => return false,
        };
        self.contains(flag)
    }
}

impl Default for NextUpstream {
    fn default() -> NextUpstream {
        NextUpstream::DEFAULT
    }
}

/// Our own answer when an answer's status moved the request on and then no backend could
/// be picked: 502, as nginx's. nginx moves on from a status only while tries are left
/// (`ngx_http_upstream_test_next`: `u->peer.tries > 1`), so the next pick runs; when it finds
/// no live peer, `ngx_http_upstream_connect` logs "no live upstreams" and calls
/// `ngx_http_upstream_next` with `NGX_HTTP_UPSTREAM_FT_NOLIVE`, which no `proxy_next_upstream`
/// lists and whose status is 502.
pub fn own_answer_after_moving_on() -> (u16, &'static str) {
    (
        502,
        "502 Bad Gateway: no backend was left to take the request after an error answer\n",
    )
}

/// The retry-and-blame rule (see the module documentation for the reasons), for an upstream
/// whose `next_upstream` is `next`.
pub fn decide(f: &AttemptFailure, next: NextUpstream) -> Decision {
    let decision = |action, blame| Decision { action, blame };
    // An unsafe request is sent again only if none of it went out: a backend may act on a
    // head before its body has arrived (nginx counts a request as sent once sending starts,
    // and Go's transport retries unsafe requests only when nothing was written).
    let repeatable = f.replay == Replay::Safe || f.request == RequestSent::Nothing;
    let on = |condition: NextUpstream, action| {
        if next.contains(condition) && repeatable {
            action
        } else {
            Action::GiveUp
        }
    };
    match f.fault {
        Fault::LocalResources => {
            decision(on(NextUpstream::ERROR, Action::NextBackend), Blame::Nobody)
        }
        Fault::ConnectFailed | Fault::TlsHandshake => {
            decision(on(NextUpstream::ERROR, Action::NextBackend), Blame::Backend)
        }
        Fault::ConnectTimeout => decision(
            on(NextUpstream::TIMEOUT, Action::NextBackend),
            Blame::Backend,
        ),
        Fault::Closed
            if f.connection == Connection::Reused && f.response == ResponseReceived::Nothing =>
        {
            decision(on(NextUpstream::ERROR, Action::ResendFresh), Blame::Nobody)
        }
        Fault::Closed => decision(on(NextUpstream::ERROR, Action::NextBackend), Blame::Backend),
        Fault::ReadTimeout => decision(
            on(NextUpstream::TIMEOUT, Action::NextBackend),
            Blame::Backend,
        ),
        Fault::InvalidResponse => decision(
            on(NextUpstream::INVALID_HEADER, Action::NextBackend),
            Blame::Backend,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAULTS: [Fault; 7] = Fault::ALL;
    const CONNECTIONS: [Connection; 2] = [Connection::Fresh, Connection::Reused];
    const SENT: [RequestSent; 3] = [
        RequestSent::Nothing,
        RequestSent::Partly,
        RequestSent::Whole,
    ];
    const RECEIVED: [ResponseReceived; 2] = [ResponseReceived::Nothing, ResponseReceived::Partly];
    const REPLAY: [Replay; 2] = [Replay::Safe, Replay::Unsafe];

    /// Every failure the data plane can report: connect-stage faults happen on a fresh
    /// connection before anything is sent; an invalid answer means some of it came.
    fn every_failure() -> impl Iterator<Item = AttemptFailure> {
        every_combination().filter(|f| match f.fault {
            Fault::LocalResources
            | Fault::ConnectFailed
            | Fault::ConnectTimeout
            | Fault::TlsHandshake => {
                f.connection == Connection::Fresh
                    && f.request == RequestSent::Nothing
                    && f.response == ResponseReceived::Nothing
            }
            Fault::InvalidResponse => f.response == ResponseReceived::Partly,
            Fault::Closed | Fault::ReadTimeout => true,
        })
    }

    fn every_combination() -> impl Iterator<Item = AttemptFailure> {
        FAULTS.into_iter().flat_map(|fault| {
            CONNECTIONS.into_iter().flat_map(move |connection| {
                SENT.into_iter().flat_map(move |request| {
                    RECEIVED.into_iter().flat_map(move |response| {
                        REPLAY.into_iter().map(move |replay| AttemptFailure {
                            fault,
                            connection,
                            request,
                            response,
                            replay,
                        })
                    })
                })
            })
        })
    }

    fn failure(fault: Fault, connection: Connection, request: RequestSent) -> AttemptFailure {
        AttemptFailure {
            fault,
            connection,
            request,
            response: ResponseReceived::Nothing,
            replay: Replay::Safe,
        }
    }

    use Action::*;
    use Blame::*;

    /// The table of docs/architecture.md, row by row.
    #[test]
    fn the_documented_table() {
        let d = |action, blame| Decision { action, blame };
        let fresh = Connection::Fresh;
        let reused = Connection::Reused;
        let whole = RequestSent::Whole;
        let unsafe_ = |f: AttemptFailure| AttemptFailure {
            replay: Replay::Unsafe,
            ..f
        };
        let started = |f: AttemptFailure| AttemptFailure {
            response: ResponseReceived::Partly,
            ..f
        };
        let nothing = RequestSent::Nothing;
        let partly = RequestSent::Partly;
        let rows = [
            // 1. our own shortage: next backend, nobody blamed
            (
                failure(Fault::LocalResources, fresh, nothing),
                d(NextBackend, Nobody),
            ),
            // 2. connect failures
            (
                failure(Fault::ConnectFailed, fresh, nothing),
                d(NextBackend, Backend),
            ),
            (
                failure(Fault::ConnectTimeout, fresh, nothing),
                d(NextBackend, Backend),
            ),
            (
                unsafe_(failure(Fault::ConnectFailed, fresh, nothing)),
                d(NextBackend, Backend),
            ),
            (
                unsafe_(failure(Fault::TlsHandshake, fresh, nothing)),
                d(NextBackend, Backend),
            ),
            // 3. the keep-alive race
            (
                failure(Fault::Closed, reused, whole),
                d(ResendFresh, Nobody),
            ),
            (
                unsafe_(failure(Fault::Closed, reused, partly)),
                d(GiveUp, Nobody),
            ),
            (
                unsafe_(failure(Fault::Closed, reused, nothing)),
                d(ResendFresh, Nobody),
            ),
            (
                unsafe_(failure(Fault::Closed, reused, whole)),
                d(GiveUp, Nobody),
            ),
            // 4. other closes before a complete head
            (
                failure(Fault::Closed, fresh, whole),
                d(NextBackend, Backend),
            ),
            (
                failure(Fault::Closed, fresh, partly),
                d(NextBackend, Backend),
            ),
            (
                unsafe_(failure(Fault::Closed, fresh, nothing)),
                d(NextBackend, Backend),
            ),
            (
                unsafe_(failure(Fault::Closed, fresh, partly)),
                d(GiveUp, Backend),
            ),
            (
                unsafe_(failure(Fault::Closed, fresh, whole)),
                d(GiveUp, Backend),
            ),
            (
                started(failure(Fault::Closed, reused, whole)),
                d(NextBackend, Backend),
            ),
            (
                unsafe_(started(failure(Fault::Closed, reused, whole))),
                d(GiveUp, Backend),
            ),
            // 5. timeouts
            (
                failure(Fault::ReadTimeout, fresh, whole),
                d(NextBackend, Backend),
            ),
            (
                failure(Fault::ReadTimeout, reused, partly),
                d(NextBackend, Backend),
            ),
            (
                unsafe_(failure(Fault::ReadTimeout, fresh, whole)),
                d(GiveUp, Backend),
            ),
            // 6. invalid answers
            (
                started(failure(Fault::InvalidResponse, fresh, whole)),
                d(GiveUp, Backend),
            ),
        ];
        for (f, want) in rows {
            assert_eq!(decide(&f, NextUpstream::DEFAULT), want, "{f:?}");
        }
    }

    #[test]
    fn a_fresh_connection_is_never_resent_so_resending_happens_at_most_once() {
        for f in every_failure().filter(|f| f.connection == Connection::Fresh) {
            assert_ne!(
                decide(&f, NextUpstream::DEFAULT).action,
                ResendFresh,
                "{f:?}"
            );
        }
    }

    #[test]
    fn an_unsafe_request_that_began_to_go_out_never_goes_out_twice() {
        for f in every_failure()
            .filter(|f| f.replay == Replay::Unsafe && f.request != RequestSent::Nothing)
        {
            assert_eq!(decide(&f, NextUpstream::DEFAULT).action, GiveUp, "{f:?}");
        }
    }

    #[test]
    fn only_the_keep_alive_race_and_our_own_shortage_go_unblamed() {
        for f in every_failure() {
            let race = f.fault == Fault::Closed
                && f.connection == Connection::Reused
                && f.response == ResponseReceived::Nothing;
            let unblamed = decide(&f, NextUpstream::DEFAULT).blame == Nobody;
            assert_eq!(unblamed, race || f.fault == Fault::LocalResources, "{f:?}");
            assert_eq!(
                decide(&f, NextUpstream::DEFAULT).outcome() == Outcome::Failure,
                !unblamed
            );
        }
    }

    #[test]
    fn off_ends_every_request_at_its_first_failure_and_blame_stays() {
        for f in every_failure() {
            let off = decide(&f, NextUpstream::OFF);
            assert_eq!(off.action, GiveUp, "{f:?}");
            assert_eq!(off.blame, decide(&f, NextUpstream::DEFAULT).blame, "{f:?}");
        }
    }

    #[test]
    fn each_condition_moves_on_only_what_it_names() {
        let fresh = Connection::Fresh;
        let whole = RequestSent::Whole;
        let invalid = AttemptFailure {
            response: ResponseReceived::Partly,
            ..failure(Fault::InvalidResponse, fresh, whole)
        };
        let timeout = failure(Fault::ReadTimeout, fresh, whole);
        let refused = failure(Fault::ConnectFailed, fresh, RequestSent::Nothing);
        let only = |n| [invalid, timeout, refused].map(|f| decide(&f, n).action == NextBackend);
        assert_eq!(only(NextUpstream::INVALID_HEADER), [true, false, false]);
        assert_eq!(only(NextUpstream::TIMEOUT), [false, true, false]);
        assert_eq!(only(NextUpstream::ERROR), [false, false, true]);
        // A request not idempotent goes on after it was sent only with `non_idempotent`;
        // the caller says so by calling it safe to replay.
        let posted = AttemptFailure {
            replay: Replay::Unsafe,
            ..timeout
        };
        assert_eq!(decide(&posted, NextUpstream::DEFAULT).action, GiveUp);
    }

    #[test]
    fn conditions_by_name_and_statuses() {
        let n = |names: &[&str]| {
            names
                .iter()
                .map(|name| NextUpstream::named(name).unwrap())
                .fold(NextUpstream::OFF, NextUpstream::with)
        };
        assert_eq!(n(&["error", "timeout"]), NextUpstream::default());
        assert_eq!(NextUpstream::named("http_404"), None);
        let set = n(&["error", "http_503", "http_429"]);
        assert!(set.moves_on(503) && set.moves_on(429));
        assert!(!set.moves_on(500) && !set.moves_on(502) && !set.moves_on(200));
        assert!(!NextUpstream::DEFAULT.moves_on(503));
        assert!(n(&["http_500", "http_502", "http_504"]).moves_on(504));
    }
}
