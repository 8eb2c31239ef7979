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
//! 5. **No answer within `read_timeout`**: the backend is blamed, once, and the request is not
//!    retried. A request that is slow on one backend is most often slow because of what it
//!    asks, and would be slow on the next: retrying it (nginx's default) multiplies its cost
//!    and, with `max_fails = 1`, takes every healthy backend out for one slow request. HAProxy
//!    does not retry timeouts by default either.
//! 6. **An invalid answer**: the backend did answer, wrongly; it is blamed and the request is not
//!    retried (nginx's default `proxy_next_upstream` leaves `invalid_header` out too).

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

/// The retry-and-blame rule (see the module documentation for the reasons).
pub fn decide(f: &AttemptFailure) -> Decision {
    let decision = |action, blame| Decision { action, blame };
    // An unsafe request is sent again only if none of it went out: a backend may act on a
    // head before its body has arrived (nginx counts a request as sent once sending starts,
    // and Go's transport retries unsafe requests only when nothing was written).
    let repeatable = f.replay == Replay::Safe || f.request == RequestSent::Nothing;
    let on_repeatable = |action| if repeatable { action } else { Action::GiveUp };
    match f.fault {
        Fault::LocalResources => decision(Action::NextBackend, Blame::Nobody),
        Fault::ConnectFailed | Fault::ConnectTimeout | Fault::TlsHandshake => {
            decision(Action::NextBackend, Blame::Backend)
        }
        Fault::Closed
            if f.connection == Connection::Reused && f.response == ResponseReceived::Nothing =>
        {
            decision(on_repeatable(Action::ResendFresh), Blame::Nobody)
        }
        Fault::Closed => decision(on_repeatable(Action::NextBackend), Blame::Backend),
        Fault::ReadTimeout | Fault::InvalidResponse => decision(Action::GiveUp, Blame::Backend),
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
                d(GiveUp, Backend),
            ),
            (
                failure(Fault::ReadTimeout, reused, partly),
                d(GiveUp, Backend),
            ),
            // 6. invalid answers
            (
                started(failure(Fault::InvalidResponse, fresh, whole)),
                d(GiveUp, Backend),
            ),
        ];
        for (f, want) in rows {
            assert_eq!(decide(&f), want, "{f:?}");
        }
    }

    #[test]
    fn a_fresh_connection_is_never_resent_so_resending_happens_at_most_once() {
        for f in every_failure().filter(|f| f.connection == Connection::Fresh) {
            assert_ne!(decide(&f).action, ResendFresh, "{f:?}");
        }
    }

    #[test]
    fn an_unsafe_request_that_began_to_go_out_never_goes_out_twice() {
        for f in every_failure()
            .filter(|f| f.replay == Replay::Unsafe && f.request != RequestSent::Nothing)
        {
            assert_eq!(decide(&f).action, GiveUp, "{f:?}");
        }
    }

    #[test]
    fn only_the_keep_alive_race_and_our_own_shortage_go_unblamed() {
        for f in every_failure() {
            let race = f.fault == Fault::Closed
                && f.connection == Connection::Reused
                && f.response == ResponseReceived::Nothing;
            let unblamed = decide(&f).blame == Nobody;
            assert_eq!(unblamed, race || f.fault == Fault::LocalResources, "{f:?}");
            assert_eq!(decide(&f).outcome() == Outcome::Failure, !unblamed);
        }
    }
}
