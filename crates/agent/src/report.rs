//! One sample and the two ways it is served: the JSON of the agent protocol (DESIGN §2,
//! `GET /load`, written by [`crate::protocol`]) and the Prometheus exposition
//! (`GET /metrics`).
//!
//! Both texts are rendered once per sample, by the sampling loop, and shared as bytes with
//! every reader: a scrape never sees half of one sample and half of the next, and serving is
//! a copy of a reference-counted buffer.

use balance::weights::LoadReport;
use bytes::Bytes;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// One measurement of the host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// The utilizations, each in [0, 1].
    pub report: LoadReport,
    /// When the sample was taken, in milliseconds since the Unix epoch.
    pub ts_ms: u64,
}

impl Sample {
    /// The agent protocol's document:
    /// `{"cpu":0.42,"mem":0.63,"disk":0.1,"net":0.05,"container_mem":0.5,"ts_ms":...}`.
    pub fn to_json(&self) -> Bytes {
        Bytes::from(crate::protocol::load_json(&self.report, self.ts_ms))
    }
}

/// The gauges of `/metrics`, one per utilization and one for the sample's time.
#[derive(Debug)]
pub struct Exposition {
    registry: Registry,
    cpu: Gauge<f64, AtomicU64>,
    mem: Gauge<f64, AtomicU64>,
    disk: Gauge<f64, AtomicU64>,
    net: Gauge<f64, AtomicU64>,
    container_mem: Gauge<f64, AtomicU64>,
    timestamp: Gauge<f64, AtomicU64>,
}

/// The media type of what [`Exposition::render`] writes.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl Default for Exposition {
    fn default() -> Exposition {
        let mut registry = Registry::with_prefix("fulcrum_agent");
        let mut gauge = |name: &str, help: &str| {
            let g = Gauge::<f64, AtomicU64>::default();
            registry.register(name, help, g.clone());
            g
        };
        let cpu = gauge(
            "cpu_utilization",
            "Share of CPU time busy (not idle, not iowait) over the last interval, from /proc/stat",
        );
        let mem = gauge(
            "memory_utilization",
            "1 - MemAvailable/MemTotal, from /proc/meminfo",
        );
        let disk = gauge(
            "disk_utilization",
            "Busiest whole disk's share of the last interval with I/O in flight, from /proc/diskstats",
        );
        let net = gauge(
            "network_utilization",
            "Received plus sent bits per second over the link speed, from /proc/net/dev",
        );
        let container_mem = gauge(
            "container_memory_utilization",
            "Sum of memory.current over sum of memory.max of the limited cgroup v2 groups",
        );
        let timestamp = gauge(
            "sample_timestamp_seconds",
            "When the utilizations were sampled, in seconds since the Unix epoch",
        );
        Exposition {
            registry,
            cpu,
            mem,
            disk,
            net,
            container_mem,
            timestamp,
        }
    }
}

impl Exposition {
    /// The exposition text of `sample`.
    pub fn render(&self, sample: &Sample) -> Bytes {
        let r = sample.report.sanitized();
        self.cpu.set(r.cpu);
        self.mem.set(r.mem);
        self.disk.set(r.disk);
        self.net.set(r.net);
        self.container_mem.set(r.container_mem);
        self.timestamp.set(sample.ts_ms as f64 / 1000.0);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing into a String cannot fail");
        Bytes::from(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Sample {
        Sample {
            report: LoadReport {
                cpu: 0.42,
                mem: 0.63,
                disk: 0.1,
                net: 0.05,
                container_mem: 0.123456789,
            },
            ts_ms: 1_700_000_000_123,
        }
    }

    #[test]
    fn json_is_the_protocol_document() {
        let json = sample().to_json();
        assert_eq!(
            std::str::from_utf8(&json).unwrap(),
            r#"{"cpu":0.42,"mem":0.63,"disk":0.1,"net":0.05,"container_mem":0.1235,"ts_ms":1700000000123}"#
        );
    }

    #[test]
    fn metrics_name_every_utilization() {
        let text = Exposition::default().render(&sample());
        let text = std::str::from_utf8(&text).unwrap();
        for line in [
            "fulcrum_agent_cpu_utilization 0.42",
            "fulcrum_agent_memory_utilization 0.63",
            "fulcrum_agent_disk_utilization 0.1",
            "fulcrum_agent_network_utilization 0.05",
            "fulcrum_agent_container_memory_utilization 0.123456789",
            "fulcrum_agent_sample_timestamp_seconds 1700000000.123",
            "# TYPE fulcrum_agent_cpu_utilization gauge",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in\n{text}");
        }
    }
}
