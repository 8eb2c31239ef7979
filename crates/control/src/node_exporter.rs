//! A Prometheus node_exporter as a load source: its `/metrics` text (parsed with the
//! `prometheus-parse` crate) turned into the agent's utilizations.
//!
//! * cpu: `node_cpu_seconds_total` summed over CPUs; busy is every mode but `idle` and
//!   `iowait`; the utilization is Δbusy / Δall between two scrapes.
//! * mem: `1 − node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes`.
//! * disk: `node_disk_io_time_seconds_total` per device, Δ over the wall time between two
//!   scrapes, the busiest device.
//! * net: `node_network_{receive,transmit}_bytes_total` over every device but `lo`, bytes/s
//!   over the link: `node_network_speed_bytes` summed over those devices where it is
//!   exported, else 1 Gbit/s (virtual interfaces export none).
//! * container_mem: 0 (node_exporter reports no cgroups).
//!
//! Counters need two scrapes: the first poll of a source gives no report, and a counter that
//! went backwards (the exporter restarted) restarts the deltas.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use balance::weights::LoadReport;
use prometheus_parse::{Scrape, Value};
use tokio::time::Instant;

use crate::source::{self, PollError};

/// The largest `/metrics` body read: a node_exporter's is typically 50–150 KiB.
pub const MAX_BODY: usize = 1 << 20;

/// The link speed assumed where none is exported: 1 Gbit/s.
const DEFAULT_LINK_BYTES_PER_S: f64 = 125_000_000.0;

/// The figures of one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scraped {
    cpu_busy: f64,
    cpu_all: f64,
    mem: Option<f64>,
    disk_busy: HashMap<String, f64>,
    net_bytes: f64,
    link_bytes_per_s: f64,
}

fn number(v: &Value) -> Option<f64> {
    match *v {
        Value::Counter(x) | Value::Gauge(x) | Value::Untyped(x) if x.is_finite() => Some(x),
        _ => None,
    }
}

/// Reads the figures out of a `/metrics` text.
pub fn scrape(text: &str) -> Result<Scraped, PollError> {
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let parsed =
        Scrape::parse(lines).map_err(|e| PollError(format!("not Prometheus text: {e}")))?;
    let mut s = Scraped::default();
    let (mut available, mut total) = (None, None);
    for sample in &parsed.samples {
        let Some(v) = number(&sample.value) else {
            continue;
        };
        match sample.metric.as_str() {
            "node_cpu_seconds_total" => {
                s.cpu_all += v;
                if !matches!(sample.labels.get("mode"), Some("idle" | "iowait")) {
                    s.cpu_busy += v;
                }
            }
            "node_memory_MemAvailable_bytes" => available = Some(v),
            "node_memory_MemTotal_bytes" => total = Some(v),
            "node_disk_io_time_seconds_total" => {
                let device = sample.labels.get("device").unwrap_or("").to_owned();
                *s.disk_busy.entry(device).or_insert(0.0) += v;
            }
            "node_network_receive_bytes_total" | "node_network_transmit_bytes_total"
                if sample.labels.get("device") != Some("lo") =>
            {
                s.net_bytes += v;
            }
            "node_network_speed_bytes" if sample.labels.get("device") != Some("lo") => {
                s.link_bytes_per_s += v;
            }
            _ => {}
        }
    }
    if s.cpu_all == 0.0 {
        return Err(PollError(
            "no node_cpu_seconds_total in /metrics: is this a node_exporter?".into(),
        ));
    }
    s.mem = match (available, total) {
        (Some(a), Some(t)) if t > 0.0 => Some(1.0 - a / t),
        _ => None,
    };
    Ok(s)
}

/// The utilizations between two scrapes `elapsed` apart; `None` when a counter went
/// backwards or no time passed.
pub fn report(before: &Scraped, after: &Scraped, elapsed: Duration) -> Option<LoadReport> {
    let secs = elapsed.as_secs_f64();
    let cpu_all = after.cpu_all - before.cpu_all;
    let cpu_busy = after.cpu_busy - before.cpu_busy;
    let net = after.net_bytes - before.net_bytes;
    if secs <= 0.0 || cpu_all <= 0.0 || cpu_busy < 0.0 || net < 0.0 {
        return None;
    }
    let mut disk: f64 = 0.0;
    for (device, &busy) in &after.disk_busy {
        let prior = before.disk_busy.get(device).copied().unwrap_or(busy);
        disk = disk.max((busy - prior).max(0.0) / secs);
    }
    let link = if after.link_bytes_per_s > 0.0 {
        after.link_bytes_per_s
    } else {
        DEFAULT_LINK_BYTES_PER_S
    };
    LoadReport::checked(
        cpu_busy / cpu_all,
        after.mem.unwrap_or(0.0),
        disk,
        net / secs / link,
        0.0,
    )
    .ok()
}

/// One node_exporter and its previous scrape.
#[derive(Debug, Clone)]
pub struct NodeExporter {
    addr: SocketAddr,
    previous: Option<(Instant, Scraped)>,
}

impl NodeExporter {
    pub fn new(addr: SocketAddr) -> NodeExporter {
        NodeExporter {
            addr,
            previous: None,
        }
    }

    /// Scrapes once within `timeout`: `Ok(None)` while there is no earlier scrape to take
    /// deltas from.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Option<LoadReport>, PollError> {
        let fetched = tokio::time::timeout(timeout, source::get(self.addr, "/metrics", MAX_BODY))
            .await
            .map_err(|_| PollError(format!("no answer within poll_timeout ({timeout:?})")))??;
        let (status, body) = fetched;
        if !status.is_success() {
            return Err(PollError(format!("GET /metrics answered {status}")));
        }
        let now = Instant::now();
        // Parsing up to a MiB of text takes a while: off the control plane's thread, which the
        // health checks' timeouts share.
        let scraped = tokio::task::spawn_blocking(move || {
            let text = std::str::from_utf8(&body)
                .map_err(|_| PollError("/metrics is not UTF-8 text".into()))?;
            scrape(text)
        })
        .await
        .map_err(|_| PollError("parsing /metrics failed".into()))??;
        let first = self.previous.is_none();
        let report = self
            .previous
            .as_ref()
            .and_then(|(at, before)| report(before, &scraped, now.duration_since(*at)));
        self.previous = Some((now, scraped));
        match report {
            Some(report) => Ok(Some(report)),
            // Only the first scrape may give nothing: after that, counters that did not move
            // forward are a failing source, which turns stale like any other.
            None if first => Ok(None),
            None => Err(PollError(
                "the counters went back or did not move: no utilization between two scrapes".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(idle: f64, user: f64, io: f64, rx: f64) -> String {
        format!(
            "# TYPE node_cpu_seconds_total counter\n\
             node_cpu_seconds_total{{cpu=\"0\",mode=\"idle\"}} {idle}\n\
             node_cpu_seconds_total{{cpu=\"0\",mode=\"iowait\"}} 1\n\
             node_cpu_seconds_total{{cpu=\"0\",mode=\"user\"}} {user}\n\
             node_cpu_seconds_total{{cpu=\"1\",mode=\"idle\"}} {idle}\n\
             node_cpu_seconds_total{{cpu=\"1\",mode=\"system\"}} {user}\n\
             node_memory_MemAvailable_bytes 2.5e+09\n\
             node_memory_MemTotal_bytes 1e+10\n\
             node_disk_io_time_seconds_total{{device=\"vda\"}} {io}\n\
             node_network_receive_bytes_total{{device=\"eth0\"}} {rx}\n\
             node_network_receive_bytes_total{{device=\"lo\"}} 1e+12\n\
             node_network_transmit_bytes_total{{device=\"eth0\"}} 0\n\
             node_network_speed_bytes{{device=\"eth0\"}} 1.25e+08\n"
        )
    }

    #[test]
    fn utilizations_between_two_scrapes() {
        let before = scrape(&text(100.0, 10.0, 5.0, 0.0)).unwrap();
        // 2 s later: each CPU 1 s idle, 1 s busy; the disk 0.5 s busy; 25 MB received.
        let after = scrape(&text(101.0, 11.0, 5.5, 25e6)).unwrap();
        let r = report(&before, &after, Duration::from_secs(2)).unwrap();
        assert!((r.cpu - 0.5).abs() < 1e-9, "{r:?}");
        assert!((r.mem - 0.75).abs() < 1e-9, "{r:?}");
        assert!((r.disk - 0.25).abs() < 1e-9, "{r:?}");
        assert!((r.net - 0.1).abs() < 1e-9, "12.5 MB/s of 125 MB/s: {r:?}");
        assert_eq!(r.container_mem, 0.0);
        // A restarted exporter: counters went back; no report until the next pair.
        assert_eq!(report(&after, &before, Duration::from_secs(2)), None);
    }

    #[test]
    fn not_a_node_exporter() {
        assert!(scrape("garbage that is not prometheus {{{").is_err());
        assert!(scrape("").is_err());
        assert!(scrape("some_metric 1\n").is_err());
    }
}
