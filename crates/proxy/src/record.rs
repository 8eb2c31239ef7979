//! The record of every request and session fulcrum finishes — HTTP/1.1, HTTP/2 and TCP alike
//! — and the one place it is counted ([`crate::metrics`]) and written to the access log
//! ([`crate::access_log`]): [`Record::finish`].
//!
//! How it ended is a [`Fate`], an enum: the rules that depend on it are its methods (which
//! backend the answer is counted for), and its [`Fate::name`] is what the access log's `fate`
//! field says.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::access_log;
use crate::admission::Reason;
use crate::listener::WorkerListener;
use crate::upstream::Unpicked;

/// How a request or a TCP session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// A backend's whole answer reached the client; for a TCP session, both sides ended.
    Answered,
    /// The backend agreed to upgrade the connection (101), and the tunnel has ended.
    Upgraded,
    /// The backend's answer began but the backend failed before its end.
    CutShortByBackend,
    /// The backend's answer began but the client stopped taking it.
    CutShortByClient,
    /// The client left before its answer began (logged as 499).
    ClientGone,
    /// No backend answered: our own 502, 503 or 504.
    NoAnswer,
    /// Our own refusal before any backend answered (4xx), or an HTTP/2 stream refused for
    /// want of room for its body.
    Refused,
    /// No backend could be picked: none usable, none with room (the queue full, or waited out),
    /// or the client left while it waited.
    Unpicked(Unpicked),
    /// A TCP session in which nothing moved for `idle_timeout`.
    IdleTimeout,
    /// A TCP session the backend's side failed (a reset, mostly).
    BackendReset,
    /// A TCP session the client's side failed.
    ClientReset,
    /// A TCP session still open when the proxy stopped.
    Shutdown,
    /// Answered by a route itself (a redirect, a fixed answer; nginx's `return`), or 404
    /// because no route took the request.
    Returned,
    /// Not let through ([`crate::admission`]): `limit_req` or `limit_conn` (logged as
    /// `limited`), or `access` (logged as `denied`).
    NotAdmitted(Reason),
}

impl Fate {
    /// As the access log writes it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Fate::Answered => "answered",
            Fate::Upgraded => "upgraded",
            Fate::CutShortByBackend => "cut_short_by_backend",
            Fate::CutShortByClient => "cut_short_by_client",
            Fate::ClientGone => "client_gone",
            Fate::NoAnswer => "no_answer",
            Fate::Refused => "refused",
            Fate::Unpicked(why) => why.name(),
            Fate::IdleTimeout => "idle_timeout",
            Fate::BackendReset => "backend_reset",
            Fate::ClientReset => "client_reset",
            Fate::Shutdown => "shutdown",
            Fate::Returned => "returned",
            Fate::NotAdmitted(Reason::Access) => "denied",
            Fate::NotAdmitted(Reason::LimitReq | Reason::LimitConn) => "limited",
        }
    }

    /// Whether what the client got (all of it or part) was the last backend's: the answer is
    /// counted as that backend's; any other is fulcrum's own (or nobody's).
    pub(crate) fn answered_by_backend(self) -> bool {
        match self {
            Fate::Answered
            | Fate::Upgraded
            | Fate::CutShortByBackend
            | Fate::CutShortByClient
            | Fate::IdleTimeout
            | Fate::BackendReset
            | Fate::ClientReset
            | Fate::Shutdown => true,
            Fate::ClientGone
            | Fate::NoAnswer
            | Fate::Refused
            | Fate::Unpicked(_)
            | Fate::Returned
            | Fate::NotAdmitted(_) => false,
        }
    }
}

/// What the client spoke, as the access log's request line ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientProtocol {
    Http10,
    Http11,
    Http2,
    /// A head refused before its version could be read: the log does not repeat what it said.
    Unread,
    /// A TCP session.
    Tcp,
}

impl ClientProtocol {
    fn text(self) -> &'static [u8] {
        match self {
            ClientProtocol::Http10 => b"HTTP/1.0",
            ClientProtocol::Http11 => b"HTTP/1.1",
            ClientProtocol::Http2 => b"HTTP/2.0",
            ClientProtocol::Unread | ClientProtocol::Tcp => b"",
        }
    }
}

/// What the access log repeats of a request, copied when it came (before its bytes leave the
/// read buffer).
#[derive(Debug)]
pub(crate) struct Said {
    pub(crate) time: SystemTime,
    pub(crate) method: Vec<u8>,
    pub(crate) target: Vec<u8>,
    pub(crate) referer: Vec<u8>,
    pub(crate) user_agent: Vec<u8>,
    /// The headers the log's format asks for (`access_log::Format::headers`), in its order;
    /// empty when it asks for none.
    pub(crate) headers: Vec<Option<Box<[u8]>>>,
}

impl Default for Said {
    fn default() -> Said {
        Said {
            time: SystemTime::UNIX_EPOCH,
            method: Vec::new(),
            target: Vec::new(),
            referer: Vec::new(),
            user_agent: Vec::new(),
            headers: Vec::new(),
        }
    }
}

impl Said {
    pub(crate) fn line(&self) -> Line<'_> {
        Line {
            time: self.time,
            method: &self.method,
            target: &self.target,
            referer: &self.referer,
            user_agent: &self.user_agent,
            headers: &self.headers,
        }
    }
}

/// The values of the headers named in `wanted` (lower case) among a request's `headers`
/// (name, value), in `wanted`'s order: several of one name joined with `, ` (`; ` for
/// `Cookie`), as nginx's `$http_NAME` since 1.23.
pub(crate) fn wanted_headers<'h>(
    wanted: &[Box<str>],
    headers: impl Iterator<Item = (&'h [u8], &'h [u8])>,
) -> Vec<Option<Box<[u8]>>> {
    if wanted.is_empty() {
        return Vec::new();
    }
    let mut found: Vec<Option<Vec<u8>>> = vec![None; wanted.len()];
    for (name, value) in headers {
        for (i, w) in wanted.iter().enumerate() {
            if !name.eq_ignore_ascii_case(w.as_bytes()) {
                continue;
            }
            match &mut found[i] {
                Some(v) => {
                    v.extend_from_slice(if &**w == "cookie" { b"; " } else { b", " });
                    v.extend_from_slice(value);
                }
                None => found[i] = Some(value.to_vec()),
            }
        }
    }
    found
        .into_iter()
        .map(|v| v.map(Vec::into_boxed_slice))
        .collect()
}

/// The request as the access log writes it: when it came, its method and target, and two of
/// its headers (empty: `-`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Line<'a> {
    pub(crate) time: SystemTime,
    pub(crate) method: &'a [u8],
    pub(crate) target: &'a [u8],
    pub(crate) referer: &'a [u8],
    pub(crate) user_agent: &'a [u8],
    /// The headers the log's format asks for.
    pub(crate) headers: &'a [Option<Box<[u8]>>],
}

/// A finished request or session.
#[derive(Debug)]
pub(crate) struct Record<'a> {
    pub(crate) fate: Fate,
    pub(crate) protocol: ClientProtocol,
    /// The client's address (the one a PROXY protocol header named, on a listener that takes
    /// one).
    pub(crate) client: IpAddr,
    /// What the log says of the request; `None` when it was not taken (the log is off).
    pub(crate) line: Option<Line<'a>>,
    /// When the request's head (or the session) began.
    pub(crate) started: Instant,
    /// The status the client got (the backend's, ours, 499 for a client that left; for a TCP
    /// session nginx stream's: 200, 502, 503).
    pub(crate) status: u16,
    /// Bytes of the response body sent (nginx's `$body_bytes_sent`); of a session, all bytes.
    pub(crate) body_bytes: u64,
    /// Bytes sent to the client, head and body (nginx's `$bytes_sent`), where known.
    pub(crate) bytes_sent: Option<u64>,
    /// Every backend tried, in order.
    pub(crate) backends: &'a [SocketAddr],
    /// What each attempt that was not relayed came to: its status and time
    /// ([`crate::forward::Trail::earlier`]).
    pub(crate) earlier: &'a [(u16, Duration)],
    /// Time spent on backends (`None`: none was tried); of a tunnel, until the backend agreed
    /// to it, and of a TCP session, to connect.
    pub(crate) upstream_time: Option<Duration>,
    /// The listener's upstream it went to (an index into its context's list); `None` for a
    /// request a route answered itself, or none took.
    pub(crate) upstream: Option<usize>,
    /// The route that took it (an index into the listener's routes), if the listener has
    /// routes and one did.
    pub(crate) route: Option<usize>,
    /// Its request id, on a listener with `request_id = true`.
    pub(crate) request_id: Option<&'a [u8]>,
}

impl Record<'_> {
    /// Counts the request in `listener`'s worker counts and, with the access log on, writes
    /// its line: the one place either happens.
    pub(crate) fn finish(&self, listener: &WorkerListener) {
        let upstream = self.upstream.and_then(|i| listener.ctx.upstreams.get(i));
        let took = self.started.elapsed();
        let by = if self.fate.answered_by_backend() {
            self.backends.last().copied()
        } else {
            None
        };
        let routes = listener.ctx.routes.as_ref();
        let route = self.route.and_then(|i| routes?.get(i));
        let route_id = route.map(|r| r.counts_id);
        if let Fate::NotAdmitted(why) = self.fate {
            listener
                .stats
                .limited(route_id.unwrap_or(listener.ctx.counts_id), why);
        }
        match upstream {
            Some(upstream) => listener.stats.answered(
                upstream.shared_name(),
                by,
                self.status,
                self.measured(took),
                route_id,
            ),
            None => {
                if let Some(id) = route_id {
                    listener.stats.routed(id, self.status);
                }
            }
        }
        let (Some(line), Some(log)) = (&self.line, &listener.ctx.access_log) else {
            return;
        };
        // What the last backend tried gave: its answer, or the failure our own 502/504 says.
        let gave_status = self.fate.answered_by_backend() || self.fate == Fate::NoAnswer;
        log.log(&access_log::Entry {
            client: self.client,
            time: line.time,
            method: line.method,
            target: line.target,
            protocol: self.protocol.text(),
            status: self.status,
            body_bytes: self.body_bytes,
            bytes_sent: self.bytes_sent,
            referer: line.referer,
            user_agent: line.user_agent,
            headers: line.headers,
            request_time: took,
            upstream_time: self.upstream_time,
            upstream_status: (gave_status && !self.backends.is_empty()).then_some(self.status),
            backends: self.backends,
            earlier: self.earlier,
            upstream: upstream.map_or("-", |u| u.name()),
            route: route.map(|r| &*r.name),
            request_id: self.request_id,
            fate: self.fate.name(),
        });
    }

    /// The time the duration histogram gets: the request's (`took`), except for a connection
    /// that outlived its request — an upgraded one, a TCP session — whose life says nothing of
    /// its backend and would swamp the requests beside it: the time the backend took to agree
    /// or to connect.
    fn measured(&self, took: Duration) -> Duration {
        if self.fate == Fate::Upgraded || self.protocol == ClientProtocol::Tcp {
            self.upstream_time.unwrap_or(took)
        } else {
            took
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_says_the_names_it_always_said() {
        let all = [
            (Fate::Answered, "answered"),
            (Fate::Upgraded, "upgraded"),
            (Fate::CutShortByBackend, "cut_short_by_backend"),
            (Fate::CutShortByClient, "cut_short_by_client"),
            (Fate::ClientGone, "client_gone"),
            (Fate::NoAnswer, "no_answer"),
            (Fate::Refused, "refused"),
            (Fate::Unpicked(Unpicked::NoBackend), "no_backend"),
            (Fate::Unpicked(Unpicked::QueueFull), "queue_full"),
            (Fate::Unpicked(Unpicked::QueueTimeout), "queue_timeout"),
            (Fate::Unpicked(Unpicked::ClientGone), "client_gone"),
            (Fate::IdleTimeout, "idle_timeout"),
            (Fate::BackendReset, "backend_reset"),
            (Fate::ClientReset, "client_reset"),
            (Fate::Shutdown, "shutdown"),
            (Fate::Returned, "returned"),
            (Fate::NotAdmitted(Reason::LimitReq), "limited"),
            (Fate::NotAdmitted(Reason::LimitConn), "limited"),
            (Fate::NotAdmitted(Reason::Access), "denied"),
        ];
        for (fate, name) in all {
            assert_eq!(fate.name(), name);
        }
    }

    #[test]
    fn a_tunnel_or_a_session_is_measured_to_its_backend_s_agreement() {
        let record = |fate, protocol, upstream_time| Record {
            fate,
            protocol,
            client: IpAddr::from([127, 0, 0, 1]),
            line: None,
            started: Instant::now(),
            status: 200,
            body_bytes: 0,
            bytes_sent: None,
            backends: &[],
            earlier: &[],
            upstream_time,
            upstream: Some(0),
            route: None,
            request_id: None,
        };
        let took = Duration::from_secs(3600);
        let agreed = Some(Duration::from_millis(2));
        let http = ClientProtocol::Http11;
        assert_eq!(record(Fate::Answered, http, agreed).measured(took), took);
        let upgraded = record(Fate::Upgraded, http, agreed);
        assert_eq!(upgraded.measured(took), Duration::from_millis(2));
        let session = record(Fate::Answered, ClientProtocol::Tcp, agreed);
        assert_eq!(session.measured(took), Duration::from_millis(2));
        // A session that never connected: its own time.
        let unconnected = record(
            Fate::Unpicked(Unpicked::NoBackend),
            ClientProtocol::Tcp,
            None,
        );
        assert_eq!(unconnected.measured(took), took);
    }
}
