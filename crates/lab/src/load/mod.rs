//! The load generator, in two modes.
//!
//! * **Open loop** ([`Mode::Open`], the default): every request of a
//!   [`schedule`](crate::schedule) trace leaves at its time whether or not earlier ones have
//!   returned, and its latency is measured from that intended time — so a stall in the server
//!   cannot hide by holding the generator back. Schroeder, Wierman and Harchol-Balter ("Open
//!   versus closed: a cautionary tale", NSDI 2006) show how differently the two kinds of
//!   generator judge the same server; Gil Tene named the closed loop's blind spot *coordinated
//!   omission*. How far the generator itself fell behind its schedule is reported too
//!   (`behind_max_ms`): a run where it did is not to be trusted.
//! * **Closed loop** ([`Mode::Closed`]), as siege, ab and JMeter run, the tools of the papers
//!   we reproduce: a number of virtual users (fixed, or a ramp: [`Users`]), each sending its
//!   next request as soon as its previous one is answered, no think time. Latency counts from
//!   the actual send, as those tools count it — which hides stalls: while the server stalls,
//!   the users wait instead of sending, so one slow request is counted where an open-loop
//!   client would have counted every request held up behind it.
//!
//! Each request is a `GET` that names its cost in `X-Lab-Cost` and leaves from a client's own
//! loopback address ([`client_addr`], 127.1.x.y) on a kept-alive connection of that client.
//! Every request becomes an [`Outcome`]; [`Summary`] puts a run in numbers (an HDR histogram,
//! `hdrhistogram`) and [`write_trace`] writes every request as CSV. A run can draw a progress
//! bar (`indicatif`).
//!
//! # Layout
//!
//! * `open`: the open-loop sender.
//! * [`closed`]: the closed-loop users, and [`Users`], how many are active when.
//! * [`progress`]: the counters a progress bar shows.
//! * [`summary`]: a run in numbers ([`Summary`]).
//! * [`trace_file`]: every request as a CSV line ([`write_trace`]).
//! * `wire`: the generator's own lean HTTP/1.1 connection (why not hyper: see there).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::schedule::Arrival;
use wire::{Connection, Failure};

pub mod closed;
mod open;
pub mod progress;
pub mod summary;
pub mod trace_file;
mod wire;

pub use closed::Users;
pub use summary::Summary;
pub use trace_file::{TRACE_HEADER, write_trace};

/// What a run sends, where, and how.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Where requests go ([`run_fleet`] spreads them over several addresses instead).
    pub target: SocketAddr,
    /// The request path (and query).
    pub path: String,
    /// In open loop, every request: its time, cost and client. In closed loop only the costs
    /// count: the k-th request sent takes the k-th cost (from the start again if the run sends
    /// more requests than the trace holds; 0 ms if it is empty), so the same seed gives the
    /// same costs.
    pub trace: Vec<Arrival>,
    /// In open loop, how long a request may take from its intended time; in closed loop, from
    /// its send. Then it counts as a timeout.
    pub timeout: Duration,
    pub mode: Mode,
    /// A bar to draw the run's progress on (`run` sets its length, style and message), or
    /// none.
    pub progress: Option<indicatif::ProgressBar>,
}

/// How requests are paced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// Every request of the trace at its time, whatever became of the earlier ones; latency
    /// from the intended time.
    Open,
    /// `users` virtual users, each sending as soon as its previous request is answered, for
    /// `duration`; latency from the actual send. User `i` sends from `client_addr(i %
    /// clients)`, on its own kept-alive connection.
    Closed {
        users: Users,
        duration: Duration,
        clients: u32,
    },
}

impl Plan {
    /// How long requests are sent: the last arrival's time in open loop, the duration in
    /// closed loop.
    pub fn length(&self) -> Duration {
        match self.mode {
            Mode::Open => self.trace.last().map_or(Duration::ZERO, |a| a.at),
            Mode::Closed { duration, .. } => duration,
        }
    }
}

/// What became of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// When it was to leave, and when it did, from the start of the run (the same in closed
    /// loop, where a request leaves when its user is ready).
    pub intended: Duration,
    pub started: Duration,
    /// From the intended time to the end of the answer; `None` for a timeout or an error.
    pub latency: Option<Duration>,
    /// When the answer ended, from the start of the run; `None` for a timeout or an error.
    pub ended: Option<Duration>,
    pub status: Option<u16>,
    /// The answer's `X-Backend`.
    pub backend: Option<String>,
    /// The cost it named (`X-Lab-Cost`), in milliseconds.
    pub cost_ms: f64,
    pub timed_out: bool,
    /// The client that sent it: its address is [`client_addr`]`(client)`.
    pub client: u32,
}

/// What a request came to, in one word (the trace file's `outcome` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Answered with a status below 500.
    Ok,
    /// Answered 5xx.
    HttpError,
    /// Not answered within the timeout.
    Timeout,
    /// Failed without an answer (connection refused, reset, malformed answer).
    Error,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::HttpError => "http_error",
            Verdict::Timeout => "timeout",
            Verdict::Error => "error",
        }
    }
}

impl Outcome {
    pub fn verdict(&self) -> Verdict {
        match self.status {
            Some(s) if s < 500 => Verdict::Ok,
            Some(_) => Verdict::HttpError,
            None if self.timed_out => Verdict::Timeout,
            None => Verdict::Error,
        }
    }
}

/// The loopback address client `i` sends from: 127.1.x.y, clients 0 to 249 in distinct /24
/// networks (x = i mod 250, y = 1 + i / 250), so that `ip_hash`, which hashes an IPv4 address's
/// first three octets as nginx does, sees as many clients as there are (up to 250 /24s).
pub fn client_addr(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        1 + (i / 62_500) as u8,
        (i % 250) as u8,
        1 + ((i / 250) % 250) as u8,
    ))
}

/// Runs `plan` to its end, in its mode, and returns every request's outcome: in trace order
/// in open loop, in the order they were sent in closed loop. Every answer is awaited (at most
/// the timeout).
pub async fn run(plan: &Plan) -> Vec<Outcome> {
    run_fleet(plan, &[plan.target], Spread::RoundRobin).await
}

/// How a fleet's instances share the requests ([`run_fleet`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Spread {
    /// Arrival `k` (closed loop: user `k`) to instance `k mod n`: exact shares whatever the
    /// number of clients, as a balancer or client library in front going round-robin.
    #[default]
    RoundRobin,
    /// Client `c` to instance `c mod n`, as ECMP keeps a flow on one instance (the
    /// simulator's rule).
    Client,
}

impl std::str::FromStr for Spread {
    type Err = String;

    fn from_str(s: &str) -> Result<Spread, String> {
        match s {
            "round_robin" => Ok(Spread::RoundRobin),
            "client" => Ok(Spread::Client),
            _ => Err(format!("{s:?}: write \"round_robin\" or \"client\"")),
        }
    }
}

/// [`run`], with the requests spread over `targets` (a fleet of balancer instances) by
/// `spread` rather than sent to `plan.target`. A closed-loop user keeps its connection to its
/// instance. With no target, every request fails.
pub async fn run_fleet(plan: &Plan, targets: &[SocketAddr], spread: Spread) -> Vec<Outcome> {
    let progress = plan
        .progress
        .clone()
        .map(|bar| progress::Progress::start(bar, plan.length()));
    let outcomes = match plan.mode {
        Mode::Open => {
            let counters = progress.as_ref().map(|p| p.counters());
            open::run(plan, targets, spread, counters).await
        }
        Mode::Closed {
            users,
            duration,
            clients,
        } => {
            closed::run(
                plan,
                (targets, spread),
                users,
                duration,
                clients,
                progress.as_ref().map(|p| p.counters()),
            )
            .await
        }
    };
    if let Some(progress) = progress {
        progress.finish();
    }
    outcomes
}

/// What one exchange came to, for the outcome.
enum Exchange {
    Answered {
        status: u16,
        backend: Option<String>,
        /// When the answer ended.
        at: Instant,
    },
    TimedOut,
    Failed,
}

impl Outcome {
    /// Records what `exchanged` came to: latency counted from `from` (the intended time in
    /// open loop, the send in closed loop), the end from the run's `start`.
    fn settle(&mut self, exchanged: Exchange, from: Instant, start: Instant) {
        match exchanged {
            Exchange::Answered {
                status,
                backend,
                at,
            } => {
                self.latency = Some(at - from);
                self.ended = Some(at - start);
                self.status = Some(status);
                self.backend = backend;
            }
            Exchange::TimedOut => self.timed_out = true,
            Exchange::Failed => {}
        }
    }
}

/// The head every request of a run shares, up to its cost: `GET PATH HTTP/1.1`, `Host: lab`,
/// `X-Lab-Cost: `; `None` if `path` is not a request target (origin form, `/…`: then every
/// request fails).
fn request_prefix(path: &str) -> Option<Arc<[u8]>> {
    if !path.starts_with('/') {
        return None;
    }
    let target = path.parse::<http::uri::PathAndQuery>().ok()?;
    let text = format!("GET {target} HTTP/1.1\r\nhost: lab\r\nx-lab-cost: ");
    Some(Arc::from(text.into_bytes()))
}

/// A whole request: `prefix`, then the cost in milliseconds with three decimals (a
/// microsecond, the backend's resolution; 0 if it is not a number), and the end of the head.
fn request(prefix: &[u8], cost_ms: f64) -> Vec<u8> {
    use std::io::Write as _;
    let mut out = Vec::with_capacity(prefix.len() + 32);
    out.extend_from_slice(prefix);
    let cost = if cost_ms.is_finite() { cost_ms } else { 0.0 };
    // Writing to a Vec does not fail.
    let _ = write!(out, "{cost:.3}\r\n\r\n");
    out
}

/// The target of request (or user) `k`: the instances in turn; `None` without any.
fn target_of(targets: &[SocketAddr], k: usize) -> Option<SocketAddr> {
    targets.get(k.checked_rem(targets.len())?).copied()
}

/// Sends one request, with `cost_ms`, on `idle` or else on a new connection from `local`, and
/// reads its answer, unless `deadline` comes first. Returns the connection too if it can carry
/// another request. A kept connection found closed by the server before it answered is
/// replaced by a new one once (the server never saw the request).
async fn exchange(
    idle: Option<Connection>,
    target: Option<SocketAddr>,
    local: IpAddr,
    prefix: Option<&[u8]>,
    cost_ms: f64,
    deadline: Instant,
) -> (Exchange, Option<Connection>) {
    let (Some(prefix), Some(target)) = (prefix, target) else {
        return (Exchange::Failed, None);
    };
    let request = request(prefix, cost_ms);
    let attempt = async {
        let mut connection = match idle {
            Some(c) => c,
            None => Connection::open(target, Some(local))
                .await
                .map_err(Failure::Io)?,
        };
        let result = match connection.exchange(&request).await {
            Err(Failure::Stale) => {
                connection = Connection::open(target, Some(local))
                    .await
                    .map_err(Failure::Io)?;
                connection.exchange(&request).await
            }
            other => other,
        };
        result.map(|(answer, keep)| (answer, keep.then_some(connection)))
    };
    match tokio::time::timeout_at(deadline, attempt).await {
        Ok(Ok((answer, connection))) => (
            Exchange::Answered {
                status: answer.status,
                backend: answer.backend,
                at: Instant::now(),
            },
            connection,
        ),
        Ok(Err(failure)) => {
            tracing::debug!(?failure, "a request failed");
            (Exchange::Failed, None)
        }
        Err(_) => (Exchange::TimedOut, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_addresses_are_distinct_loopback_addresses() {
        let addrs: std::collections::HashSet<IpAddr> = (0..100_000).map(client_addr).collect();
        assert_eq!(addrs.len(), 100_000);
        assert!(addrs.iter().all(|a| a.is_loopback()));
    }

    #[test]
    fn a_request_names_its_path_and_its_cost_with_three_decimals() {
        let prefix = request_prefix("/a?b=1").unwrap();
        let text = |cost| String::from_utf8(request(&prefix, cost)).unwrap();
        assert_eq!(
            text(50.0),
            "GET /a?b=1 HTTP/1.1\r\nhost: lab\r\nx-lab-cost: 50.000\r\n\r\n"
        );
        assert!(text(0.0004).ends_with(" 0.000\r\n\r\n"));
        assert!(text(f64::NAN).ends_with(" 0.000\r\n\r\n"));
        for bad in ["/a b", "/a\r\nx: y", "http://"] {
            assert!(request_prefix(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn a_verdict_for_every_kind_of_outcome() {
        let o = Outcome {
            intended: Duration::ZERO,
            started: Duration::ZERO,
            latency: None,
            ended: None,
            status: None,
            backend: None,
            cost_ms: 0.0,
            timed_out: false,
            client: 0,
        };
        assert_eq!(o.verdict(), Verdict::Error);
        let timed_out = Outcome {
            timed_out: true,
            ..o.clone()
        };
        assert_eq!(timed_out.verdict(), Verdict::Timeout);
        for (status, verdict) in [
            (200, Verdict::Ok),
            (404, Verdict::Ok),
            (503, Verdict::HttpError),
        ] {
            let answered = Outcome {
                status: Some(status),
                ..o.clone()
            };
            assert_eq!(answered.verdict(), verdict, "{status}");
        }
    }
}
