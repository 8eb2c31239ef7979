//! The sampler: reads the kernel's files every interval, keeps the previous counters, and
//! turns two readings into a [`Sample`] with [`crate::measure`]'s pure functions.
//!
//! It is the one owner of the previous readings and of each source's health. A source that
//! cannot be read or parsed gives its field 0 and is logged once when it starts failing and
//! once when it recovers, never on every interval.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use balance::weights::LoadReport;

use crate::measure::{self, Counter, cgroup, cpu, disk, memory, network};
use crate::report::Sample;

/// Where the sampler reads; [`Paths::default`] is the running kernel's.
#[derive(Debug, Clone)]
pub struct Paths {
    /// `/proc/stat`
    pub stat: PathBuf,
    /// `/proc/meminfo`
    pub meminfo: PathBuf,
    /// `/proc/diskstats`
    pub diskstats: PathBuf,
    /// `/proc/net/dev`
    pub net_dev: PathBuf,
    /// `/sys/class/net`, where each interface's `speed` is.
    pub sys_class_net: PathBuf,
    /// The cgroup v2 root (`--cgroup-root`).
    pub cgroup_root: PathBuf,
}

impl Default for Paths {
    fn default() -> Paths {
        Paths {
            stat: "/proc/stat".into(),
            meminfo: "/proc/meminfo".into(),
            diskstats: "/proc/diskstats".into(),
            net_dev: "/proc/net/dev".into(),
            sys_class_net: "/sys/class/net".into(),
            cgroup_root: "/sys/fs/cgroup".into(),
        }
    }
}

/// Whether a source failed last time, so that failures are logged on the transition only.
#[derive(Debug, Default)]
struct Health {
    failing: bool,
}

/// A change of a source's health, the only time it is logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transition {
    Failed,
    Recovered,
}

impl Health {
    /// Records one attempt; a transition when it differs from the last.
    fn observe(&mut self, ok: bool) -> Option<Transition> {
        let was_failing = std::mem::replace(&mut self.failing, !ok);
        match (was_failing, ok) {
            (false, false) => Some(Transition::Failed),
            (true, true) => Some(Transition::Recovered),
            _ => None,
        }
    }

    fn check<T>(&mut self, source: &str, result: Result<T, String>) -> Option<T> {
        match (self.observe(result.is_ok()), &result) {
            (Some(Transition::Failed), Err(error)) => tracing::warn!(
                source,
                %error,
                "cannot read a load source; reporting 0 for it until it recovers"
            ),
            (Some(Transition::Recovered), _) => {
                tracing::info!(source, "load source readable again");
            }
            _ => {}
        }
        result.ok()
    }
}

/// The counters of one reading; `None` where the source failed.
#[derive(Debug)]
struct Reading {
    at: Instant,
    cpu: Option<cpu::CpuTimes>,
    disks: Option<Vec<Counter>>,
    net: Option<Vec<Counter>>,
}

/// Samples the host's load; see the module doc.
#[derive(Debug)]
pub struct Sampler {
    paths: Paths,
    /// `--net-speed` in bit/s; `None` reads each interface's speed from sysfs.
    net_speed: Option<u64>,
    /// The previous reading, which the next sample's deltas start from.
    previous: Reading,
    cpu: Health,
    mem: Health,
    disk: Health,
    net: Health,
    link_speed: Health,
    container_mem: Health,
}

fn read(path: &std::path::Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn parsed<T>(
    path: &std::path::Path,
    parse: impl FnOnce(&str) -> Result<T, measure::ParseError>,
) -> Result<T, String> {
    parse(&read(path)?).map_err(|e| format!("{}: {e}", path.display()))
}

impl Sampler {
    /// Takes the first reading, the baseline of the first sample.
    pub fn new(paths: Paths, net_speed: Option<u64>) -> Sampler {
        let mut sampler = Sampler {
            paths,
            net_speed,
            previous: Reading {
                at: Instant::now(),
                cpu: None,
                disks: None,
                net: None,
            },
            cpu: Health::default(),
            mem: Health::default(),
            disk: Health::default(),
            net: Health::default(),
            link_speed: Health::default(),
            container_mem: Health::default(),
        };
        sampler.previous = sampler.reading();
        sampler
    }

    fn reading(&mut self) -> Reading {
        let at = Instant::now();
        let cpu = self.cpu.check("cpu", parsed(&self.paths.stat, cpu::parse));
        let disks = self
            .disk
            .check("disk", parsed(&self.paths.diskstats, disk::parse));
        let net = self.net.check(
            "net",
            parsed(&self.paths.net_dev, network::parse).map(|mut interfaces| {
                interfaces.retain(|i| i.name != network::LOOPBACK);
                interfaces
            }),
        );
        Reading {
            at,
            cpu,
            disks,
            net,
        }
    }

    /// Reads the counters again and measures every utilization since the previous call (or
    /// since [`Sampler::new`]).
    pub fn sample(&mut self) -> Sample {
        let now = self.reading();
        let elapsed = now.at.saturating_duration_since(self.previous.at);
        let before = std::mem::replace(&mut self.previous, now);
        let now = &self.previous;
        let cpu = match (before.cpu, now.cpu) {
            (Some(a), Some(b)) => cpu::utilization(a, b),
            _ => 0.0,
        };
        let disk = match (&before.disks, &now.disks) {
            (Some(a), Some(b)) => disk::utilization(a, b, elapsed),
            _ => 0.0,
        };
        let net = match (before.net, now.net.clone()) {
            (Some(a), Some(b)) => self.net_utilization(&a, &b, elapsed),
            _ => 0.0,
        };
        let mem = self
            .mem
            .check("mem", parsed(&self.paths.meminfo, memory::utilization))
            .unwrap_or(0.0);
        let root = &self.paths.cgroup_root;
        let container_mem = self
            .container_mem
            .check(
                "container_mem",
                cgroup::scan(root).map_err(|e| format!("{}: {e}", root.display())),
            )
            .map_or(0.0, |groups| cgroup::utilization(&groups));
        let report = LoadReport {
            cpu,
            mem,
            disk,
            net,
            container_mem,
        }
        .sanitized();
        Sample {
            report,
            ts_ms: unix_ms(SystemTime::now()),
        }
    }

    /// Without `--net-speed`, only interfaces whose speed the driver knows are counted, so
    /// that bytes and bandwidth cover the same links (bridges and tunnels, which repeat other
    /// interfaces' traffic, mostly have none).
    fn net_utilization(&mut self, before: &[Counter], after: &[Counter], elapsed: Duration) -> f64 {
        if let Some(speed) = self.net_speed {
            return network::utilization(before, after, elapsed, speed);
        }
        let mut counted = Vec::new();
        let mut speed_bits = 0u64;
        for interface in after {
            let path = self.paths.sys_class_net.join(&interface.name).join("speed");
            let mbits = std::fs::read_to_string(path)
                .ok()
                .and_then(|t| network::parse_link_speed(&t));
            if let Some(mbits) = mbits {
                speed_bits = speed_bits.saturating_add(mbits.saturating_mul(1_000_000));
                counted.push(interface.clone());
            }
        }
        let known = if counted.is_empty() && !after.is_empty() {
            Err(format!(
                "no interface under {} has a known speed; give --net-speed",
                self.paths.sys_class_net.display()
            ))
        } else {
            Ok(())
        };
        self.link_speed.check("net link speed", known);
        network::utilization(before, &counted, elapsed, speed_bits)
    }
}

/// Milliseconds since the Unix epoch (0 for a clock before it).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_source_is_reported_once_per_transition() {
        let mut health = Health::default();
        let seen: Vec<_> = [true, false, false, false, true, true, false]
            .into_iter()
            .map(|ok| health.observe(ok))
            .collect();
        use Transition::*;
        assert_eq!(
            seen,
            [
                None,
                Some(Failed),
                None,
                None,
                Some(Recovered),
                None,
                Some(Failed)
            ]
        );
    }

    #[test]
    fn missing_files_give_zero_not_a_panic() {
        let nowhere = std::path::PathBuf::from("/nonexistent/fulcrum-agent");
        let paths = Paths {
            stat: nowhere.join("stat"),
            meminfo: nowhere.join("meminfo"),
            diskstats: nowhere.join("diskstats"),
            net_dev: nowhere.join("net_dev"),
            sys_class_net: nowhere.join("net"),
            cgroup_root: nowhere.join("cgroup"),
        };
        let mut sampler = Sampler::new(paths, None);
        let sample = sampler.sample();
        assert_eq!(sample.report, LoadReport::default());
        assert!(sample.ts_ms > 0);
        assert!(sampler.cpu.failing && sampler.mem.failing && sampler.container_mem.failing);
    }
}
