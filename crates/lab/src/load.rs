//! The open-loop load generator: every request of a [`schedule`](crate::schedule) trace leaves
//! at its time whether or not earlier ones have returned, and its latency is measured from that
//! intended time — so a stall in the server cannot hide by holding the generator back
//! (coordinated omission). How far the generator itself fell behind its schedule is reported
//! too (`behind_max_ms`): a run where it did is not to be trusted.
//!
//! Each request names its cost in `X-Lab-Cost` and leaves from its client's own loopback
//! address (127.1.x.y, one per client of the trace), on a kept-alive connection of that client
//! when one is free, else a new one. Latencies go into an HDR histogram (`hdrhistogram`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hdrhistogram::Histogram;
use http::Request;
use http_body_util::Full;
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::client::Client;
use crate::schedule::Arrival;

/// What a run sends, and where.
#[derive(Debug, Clone)]
pub struct Plan {
    pub target: SocketAddr,
    /// The request path (and query).
    pub path: String,
    pub trace: Vec<Arrival>,
    /// How long a request may take from its intended time; then it counts as a timeout.
    pub timeout: Duration,
}

/// What became of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// When it was to leave, and when it did, from the start of the run.
    pub intended: Duration,
    pub started: Duration,
    /// From the intended time to the end of the answer; `None` for a timeout or an error.
    pub latency: Option<Duration>,
    pub status: Option<u16>,
    /// The answer's `X-Backend`.
    pub backend: Option<String>,
    pub timed_out: bool,
    pub client: u32,
}

/// The loopback address client `i` sends from: 127.1.x.y with y in 1..=250.
pub fn client_addr(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        1 + (i / 62_500) as u8,
        ((i / 250) % 250) as u8,
        1 + (i % 250) as u8,
    ))
}

/// Runs `plan` to its end: every request sent at its time, every answer awaited (at most
/// `timeout` past its time). Outcomes in trace order.
pub async fn run(plan: &Plan) -> Vec<Outcome> {
    let clients = plan
        .trace
        .iter()
        .map(|a| a.client)
        .max()
        .map_or(0, |m| m + 1);
    let pools: Arc<Vec<Mutex<Vec<Client>>>> =
        Arc::new((0..clients).map(|_| Mutex::new(Vec::new())).collect());
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for (k, arrival) in plan.trace.iter().copied().enumerate() {
        let intended = start + arrival.at;
        tokio::time::sleep_until(intended).await;
        let started = start.elapsed();
        let pools = Arc::clone(&pools);
        let (target, path, timeout) = (plan.target, plan.path.clone(), plan.timeout);
        tasks.spawn(async move {
            let pool = &pools[arrival.client as usize];
            let idle = pool.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let mut client =
                idle.unwrap_or_else(|| Client::bound(target, client_addr(arrival.client)));
            let request = Request::get(path.as_str())
                .header(http::header::HOST, "lab")
                .header("x-lab-cost", format!("{:.3}", arrival.cost_ms))
                .body(Full::new(Bytes::new()));
            let mut outcome = Outcome {
                intended: arrival.at,
                started,
                latency: None,
                status: None,
                backend: None,
                timed_out: false,
                client: arrival.client,
            };
            let Ok(request) = request else {
                return (k, outcome);
            };
            match tokio::time::timeout_at(intended + timeout, client.send(request)).await {
                Ok(Ok(reply)) => {
                    outcome.latency = Some(intended.elapsed());
                    outcome.status = Some(reply.status.as_u16());
                    outcome.backend = reply
                        .headers
                        .get("x-backend")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    pool.lock().unwrap_or_else(|p| p.into_inner()).push(client);
                }
                Ok(Err(_)) => {}
                Err(_) => outcome.timed_out = true,
            }
            (k, outcome)
        });
    }
    let mut outcomes: Vec<Option<Outcome>> = vec![None; plan.trace.len()];
    while let Some(done) = tasks.join_next().await {
        if let Ok((k, outcome)) = done {
            outcomes[k] = Some(outcome);
        }
    }
    outcomes.into_iter().flatten().collect()
}

/// A run in numbers (the fields of `fulcrum lab load --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub sent: u64,
    /// Answered with a status below 500.
    pub ok: u64,
    /// Answered 5xx, or failed.
    pub failed: u64,
    pub timeouts: u64,
    pub achieved_rps: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// How far the generator fell behind its own schedule, at worst.
    pub behind_max_ms: f64,
}

impl Summary {
    /// The numbers of `outcomes` over a run of `length`. Latencies of answered requests, from
    /// their intended times; a timeout counts at the timeout in the percentiles, so that
    /// requests that never came back still weigh.
    pub fn of(outcomes: &[Outcome], length: Duration, timeout: Duration) -> Summary {
        // Microseconds, up to an hour, 3 significant digits.
        let mut h =
            Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds");
        let (mut ok, mut failed, mut timeouts) = (0, 0, 0);
        let mut behind = Duration::ZERO;
        for o in outcomes {
            behind = behind.max(o.started.saturating_sub(o.intended));
            let latency = match (o.latency, o.status) {
                (Some(l), Some(s)) => {
                    if s < 500 {
                        ok += 1;
                    } else {
                        failed += 1;
                    }
                    Some(l)
                }
                _ if o.timed_out => {
                    timeouts += 1;
                    Some(timeout)
                }
                _ => {
                    failed += 1;
                    None
                }
            };
            if let Some(l) = latency {
                h.saturating_record((l.as_micros() as u64).clamp(1, 3_600_000_000));
            }
        }
        let ms = |us: u64| us as f64 / 1000.0;
        let at = |q: f64| {
            if h.is_empty() {
                0.0
            } else {
                ms(h.value_at_quantile(q))
            }
        };
        Summary {
            sent: outcomes.len() as u64,
            ok,
            failed,
            timeouts,
            achieved_rps: (ok + failed) as f64 / length.as_secs_f64().max(1e-9),
            mean_ms: if h.is_empty() { 0.0 } else { h.mean() / 1000.0 },
            p50_ms: at(0.5),
            p90_ms: at(0.9),
            p95_ms: at(0.95),
            p99_ms: at(0.99),
            p999_ms: at(0.999),
            max_ms: if h.is_empty() { 0.0 } else { ms(h.max()) },
            behind_max_ms: behind.as_secs_f64() * 1000.0,
        }
    }

    /// One JSON object.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "sent {}: {} ok, {} failed, {} timed out; {:.1} answers/s",
            self.sent, self.ok, self.failed, self.timeouts, self.achieved_rps
        )?;
        writeln!(
            f,
            "latency from the intended send time (ms): mean {:.2}  p50 {:.2}  p90 {:.2}  p95 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
            self.mean_ms,
            self.p50_ms,
            self.p90_ms,
            self.p95_ms,
            self.p99_ms,
            self.p999_ms,
            self.max_ms
        )?;
        write!(
            f,
            "the generator fell behind its schedule by {:.2} ms at most",
            self.behind_max_ms
        )
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
    fn a_timeout_weighs_in_the_percentiles() {
        let answered = |ms: u64| Outcome {
            intended: Duration::ZERO,
            started: Duration::ZERO,
            latency: Some(Duration::from_millis(ms)),
            status: Some(200),
            backend: None,
            timed_out: false,
            client: 0,
        };
        let mut outcomes: Vec<Outcome> = (0..9).map(|_| answered(10)).collect();
        outcomes.push(Outcome {
            latency: None,
            status: None,
            timed_out: true,
            ..answered(0)
        });
        let s = Summary::of(&outcomes, Duration::from_secs(1), Duration::from_secs(4));
        assert_eq!((s.sent, s.ok, s.timeouts), (10, 9, 1));
        assert!((s.p50_ms - 10.0).abs() < 0.1, "{s:?}");
        assert!(s.max_ms >= 3999.0, "{s:?}");
        let json = s.to_json();
        for field in [
            "sent",
            "ok",
            "failed",
            "timeouts",
            "achieved_rps",
            "mean_ms",
            "p50_ms",
            "p90_ms",
            "p95_ms",
            "p99_ms",
            "p999_ms",
            "max_ms",
            "behind_max_ms",
        ] {
            assert!(json.contains(&format!("\"{field}\":")), "{field}: {json}");
        }
    }
}
