//! The last 15 minutes, second by second, for the dashboard (`GET /api/history`): what each
//! backend answered, how fast, and what it was weighted by — so that a page opened now draws
//! the minutes before it, as Grafana would from Prometheus, without one.
//!
//! One task ([`run`]) samples once a second: it sums the workers' counts as a scrape does
//! ([`proxy::metrics::Metrics::totals`], each worker's lock for a few map copies, no more),
//! reads each upstream's snapshot, and keeps the difference from the second before. Nothing
//! here is on the request path: the workers count as they always do, and this module only
//! reads.
//!
//! # What a sample holds
//!
//! Per backend and second: answers, 4xx and 5xx answers, failed attempts (by any reason),
//! the 50th and 99th percentile of that second's durations, the weight in force and the
//! requests in flight at the sampling instant, its state, whether it was usable, whether the
//! admin API overrides its weight or state, and whether its load report was stale.
//!
//! The percentiles come from the buckets of `fulcrum_request_duration_seconds`
//! ([`proxy::metrics::DURATION_BUCKETS`]: 5, 10, 25, 50, 100, 250, 500 ms, 1, 2.5, 5, 10 s),
//! interpolated linearly within the bucket as Prometheus' `histogram_quantile` does: a value
//! is only known to within its bucket (between 25 and 50 ms, say), and anything above 10 s
//! reads 10 s. A second without answers has none (`null`).
//!
//! # Memory
//!
//! [`KEEP`] samples per backend ([`SAMPLE_BYTES`] each, about 35 KiB per backend), plus the
//! seconds' times (16 bytes each, 14 KiB in all), for at most [`MAX_BACKENDS`] backends. A backend that leaves keeps its samples until they are
//! older than [`KEEP`] seconds, then its ring goes; one that joins starts with an empty one.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proxy::AdminState;
use proxy::metrics::{Answers, DURATION_BUCKETS, Durations, UpstreamCounts};

use crate::View;

/// Seconds kept: 15 minutes, the span an operator looks back over while something happens.
pub const KEEP: usize = 900;

/// Backends kept at most (35 MiB of samples): an upstream DNS fills with thousands of
/// backends would otherwise take hundreds of megabytes for a page no one can read at that
/// size. The backends seen first are kept; the others are counted (`not_kept`).
pub const MAX_BACKENDS: usize = 1000;

/// One backend's second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Answers it gave in that second.
    pub requests: u32,
    pub errors_4xx: u32,
    pub errors_5xx: u32,
    /// Attempts on it that failed (connect, timeout, a broken answer): retried elsewhere or
    /// answered by fulcrum itself.
    pub failed_attempts: u32,
    /// Percentiles of that second's durations, in milliseconds (see the module's doc for how
    /// coarse); NaN: no answer that second.
    pub p50_ms: f32,
    pub p99_ms: f32,
    /// The weight the algorithm balanced by at the sampling instant.
    pub weight: u32,
    pub in_flight: u32,
    pub state: AdminState,
    /// Whether it could be chosen (up, healthy, not failed).
    pub available: bool,
    /// Whether the admin API overrides its weight or state (the state store says so).
    pub overridden: bool,
    /// Whether its load report was stale (its source missed `stale_after` polls).
    pub report_stale: bool,
}

/// The memory one sample takes, with the number of the second it belongs to.
pub const SAMPLE_BYTES: usize = std::mem::size_of::<(u32, Sample)>();

// Fifteen minutes of a backend in 36 KiB (what the docs promise), checked at compile time.
const _: () = assert!(SAMPLE_BYTES * KEEP <= 36 * 1024);

/// One backend's samples over a window of seconds (`None`: none that second).
type Window = (SocketAddr, Vec<Option<Sample>>);

/// One backend's samples, oldest first, each with the number of its second.
type Ring = VecDeque<(u32, Sample)>;

/// What the sampler keeps between seconds and the API reads.
#[derive(Debug, Default)]
struct Rings {
    /// The seconds sampled, oldest first: their number and their wall-clock time (Unix
    /// seconds), at most [`KEEP`]. A number fits in 32 bits to keep samples small.
    seconds: VecDeque<(u32, f64)>,
    /// The next second's number.
    next: u32,
    /// Each upstream's backends' samples, by upstream name then address, in the order they
    /// first appeared.
    upstreams: Vec<(String, Vec<(SocketAddr, Ring)>)>,
    /// The counts summed at the second before, by upstream (what a second's numbers are the
    /// difference from); `None` before the first second.
    before: Option<HashMap<Arc<str>, UpstreamCounts>>,
    /// Backends of the last second left out for want of room ([`MAX_BACKENDS`]).
    not_kept: usize,
}

/// The history of every backend, shared by the sampler and the API.
#[derive(Debug, Default)]
pub struct History {
    rings: Mutex<Rings>,
}

/// One backend at the sampling instant, as the sampler read it.
struct Seen {
    addr: SocketAddr,
    sample: Sample,
}

impl History {
    fn lock(&self) -> MutexGuard<'_, Rings> {
        // Plain numbers: a panic elsewhere cannot leave them inconsistent.
        self.rings.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes one second's sample of every backend `view` shows, at wall-clock `now`.
    pub fn sample(&self, view: &View, now: SystemTime) {
        let totals = view.proxy.metrics().totals();
        let upstreams = view.proxy.upstreams();
        let mut before = self.lock().before.take();
        let mut seen: Vec<(String, Vec<Seen>)> = Vec::with_capacity(upstreams.len());
        for u in &upstreams {
            let now = totals.get(u.name());
            let then = before.as_mut().and_then(|b| b.remove(u.name()));
            let backends = u
                .snapshot()
                .iter()
                .map(|b| {
                    let overridden = view.overrides.as_ref().is_some_and(|o| {
                        let kept = o.backend(u.name(), b.addr);
                        kept.get("weight").is_some() || kept.get("state").is_some()
                    });
                    let mut sample = second_of(now, then.as_ref(), b.addr);
                    sample.weight = b.weight;
                    sample.in_flight = b.in_flight;
                    sample.state = b.state;
                    sample.available = b.available;
                    sample.overridden = overridden;
                    sample.report_stale = b.polls.stale;
                    Seen {
                        addr: b.addr,
                        sample,
                    }
                })
                .collect();
            seen.push((u.name().to_owned(), backends));
        }
        let first = before.is_none();
        let time = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs_f64();
        let mut rings = self.lock();
        rings.before = Some(totals);
        if first {
            // Nothing to take the difference from yet: the next second is the first.
            return;
        }
        rings.push(time, seen);
    }

    /// `GET /api/history`: the last `seconds` (at most [`KEEP`]) of `upstream`'s backends, or
    /// of every upstream's, as compact JSON; `None` if no upstream of that name has any.
    ///
    /// The samples of the window are copied under the lock (plain numbers, at most
    /// [`MAX_BACKENDS`] × [`KEEP`] of them, about 36 MB at the very most) and written out
    /// after it, straight from them: no tree of JSON values, and the sampler is never held up
    /// by a large answer being written.
    pub fn json(&self, upstream: Option<&str>, seconds: usize) -> Option<Vec<u8>> {
        let (window, upstreams, not_kept) = {
            let rings = self.lock();
            let skip = rings.seconds.len().saturating_sub(seconds);
            let window: Vec<(u32, f64)> = rings.seconds.iter().skip(skip).copied().collect();
            let upstreams: Vec<(String, Vec<Window>)> = rings
                .upstreams
                .iter()
                .filter(|(name, _)| upstream.is_none_or(|u| u == name))
                .map(|(name, backends)| {
                    let backends = backends
                        .iter()
                        .map(|(addr, ring)| (*addr, aligned(ring, &window)))
                        .collect();
                    (name.clone(), backends)
                })
                .collect();
            (window, upstreams, rings.not_kept)
        };
        if upstream.is_some() && upstreams.is_empty() {
            return None;
        }
        let answer = Answer {
            interval_seconds: 1,
            kept_seconds: KEEP,
            not_kept,
            time: window.iter().map(|&(_, t)| t).collect(),
            upstreams: upstreams
                .iter()
                .map(|(name, backends)| UpstreamAnswer {
                    name,
                    backends: backends
                        .iter()
                        .map(|(addr, samples)| BackendAnswer::of(*addr, samples))
                        .collect(),
                })
                .collect(),
        };
        // Numbers, strings and booleans only: writing them cannot fail.
        serde_json::to_vec(&answer).ok()
    }

    /// The answer with no second in it (an upstream not sampled yet).
    pub fn empty_json() -> Vec<u8> {
        let answer = Answer {
            interval_seconds: 1,
            kept_seconds: KEEP,
            not_kept: 0,
            time: Vec::new(),
            upstreams: Vec::new(),
        };
        serde_json::to_vec(&answer).unwrap_or_default()
    }
}

/// `GET /api/history`'s answer (docs/openapi.json's `History`).
#[derive(serde::Serialize)]
struct Answer<'a> {
    interval_seconds: u32,
    kept_seconds: usize,
    not_kept: usize,
    /// Each second's wall-clock time (Unix seconds).
    time: Vec<f64>,
    upstreams: Vec<UpstreamAnswer<'a>>,
}

#[derive(serde::Serialize)]
struct UpstreamAnswer<'a> {
    name: &'a str,
    backends: Vec<BackendAnswer<'a>>,
}

/// One backend's samples over the window, one value per second (`null` where it has none:
/// before it joined, after it left, or a percentile of a second without answers).
#[derive(serde::Serialize)]
struct BackendAnswer<'a> {
    addr: String,
    requests: Column<'a, u32>,
    errors_4xx: Column<'a, u32>,
    errors_5xx: Column<'a, u32>,
    failed_attempts: Column<'a, u32>,
    p50_ms: Column<'a, f64>,
    p99_ms: Column<'a, f64>,
    weight: Column<'a, u32>,
    in_flight: Column<'a, u32>,
    state: Column<'a, &'static str>,
    available: Column<'a, bool>,
    overridden: Column<'a, bool>,
    report_stale: Column<'a, bool>,
}

impl<'a> BackendAnswer<'a> {
    fn of(addr: SocketAddr, samples: &'a [Option<Sample>]) -> BackendAnswer<'a> {
        BackendAnswer {
            addr: addr.to_string(),
            requests: Column::of(samples, |s| Some(s.requests)),
            errors_4xx: Column::of(samples, |s| Some(s.errors_4xx)),
            errors_5xx: Column::of(samples, |s| Some(s.errors_5xx)),
            failed_attempts: Column::of(samples, |s| Some(s.failed_attempts)),
            p50_ms: Column::of(samples, |s| ms(s.p50_ms)),
            p99_ms: Column::of(samples, |s| ms(s.p99_ms)),
            weight: Column::of(samples, |s| Some(s.weight)),
            in_flight: Column::of(samples, |s| Some(s.in_flight)),
            state: Column::of(samples, |s| Some(s.state.name())),
            available: Column::of(samples, |s| Some(s.available)),
            overridden: Column::of(samples, |s| Some(s.overridden)),
            report_stale: Column::of(samples, |s| Some(s.report_stale)),
        }
    }
}

/// A percentile in milliseconds, rounded to the microsecond (the buckets are far coarser);
/// `None` for a second without answers.
fn ms(v: f32) -> Option<f64> {
    v.is_finite().then(|| (f64::from(v) * 1e3).round() / 1e3)
}

/// One field of a backend's samples, written as a JSON array as it is read.
struct Column<'a, T> {
    samples: &'a [Option<Sample>],
    value: fn(&Sample) -> Option<T>,
}

impl<'a, T> Column<'a, T> {
    fn of(samples: &'a [Option<Sample>], value: fn(&Sample) -> Option<T>) -> Column<'a, T> {
        Column { samples, value }
    }
}

impl<T: serde::Serialize> serde::Serialize for Column<'_, T> {
    fn serialize<S: serde::Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        out.collect_seq(self.samples.iter().map(|s| s.as_ref().and_then(self.value)))
    }
}

impl Rings {
    /// Adds one second: each backend seen gets its sample (a new one its ring); the samples
    /// older than [`KEEP`] seconds go, and so do the rings left empty.
    fn push(&mut self, time: f64, seen: Vec<(String, Vec<Seen>)>) {
        let second = self.next;
        // One a second: 136 years before it wraps.
        self.next = self.next.wrapping_add(1);
        self.seconds.push_back((second, time));
        while self.seconds.len() > KEEP {
            self.seconds.pop_front();
        }
        let oldest = self.seconds.front().map_or(second, |&(n, _)| n);
        let mut kept: usize = self.upstreams.iter().map(|(_, rings)| rings.len()).sum();
        self.not_kept = 0;
        for (name, backends) in seen {
            let at = match self.upstreams.iter().position(|(n, _)| *n == name) {
                Some(at) => at,
                None => {
                    self.upstreams.push((name, Vec::new()));
                    self.upstreams.len() - 1
                }
            };
            let Some((_, rings)) = self.upstreams.get_mut(at) else {
                continue;
            };
            for Seen { addr, sample } in backends {
                match rings.iter_mut().find(|(a, _)| *a == addr) {
                    Some((_, ring)) => ring.push_back((second, sample)),
                    None if kept >= MAX_BACKENDS => self.not_kept += 1,
                    None => {
                        kept += 1;
                        let mut ring = VecDeque::with_capacity(KEEP + 1);
                        ring.push_back((second, sample));
                        rings.push((addr, ring));
                    }
                }
            }
        }
        for (_, rings) in &mut self.upstreams {
            for (_, ring) in rings.iter_mut() {
                while ring.front().is_some_and(|&(n, _)| n < oldest) {
                    ring.pop_front();
                }
            }
            rings.retain(|(_, ring)| !ring.is_empty());
        }
        self.upstreams.retain(|(_, rings)| !rings.is_empty());
    }
}

/// One backend's numbers of the second between `then` and `now` (its upstream's counts at
/// either end; none: nothing counted yet). The snapshot's fields are left at their defaults.
fn second_of(
    now: Option<&UpstreamCounts>,
    then: Option<&UpstreamCounts>,
    addr: SocketAddr,
) -> Sample {
    let none = Answers::default();
    let key = Some(addr);
    let answers_now = now.and_then(|c| c.responses.get(&key)).unwrap_or(&none);
    let answers_then = then.and_then(|c| c.responses.get(&key)).unwrap_or(&none);
    let classes: Vec<u64> = answers_now
        .classes
        .iter()
        .zip(&answers_then.classes)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    let failed = |c: Option<&UpstreamCounts>| {
        c.and_then(|c| c.failures.get(&addr))
            .map_or(0, |f| f.iter().sum::<u64>())
    };
    let mut durations = Durations::default();
    for ((d, a), b) in durations
        .buckets
        .iter_mut()
        .zip(&answers_now.durations.buckets)
        .zip(&answers_then.durations.buckets)
    {
        *d = a.saturating_sub(*b);
    }
    let narrow = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    Sample {
        requests: narrow(classes.iter().sum()),
        errors_4xx: narrow(classes.get(3).copied().unwrap_or(0)),
        errors_5xx: narrow(classes.get(4).copied().unwrap_or(0)),
        failed_attempts: narrow(failed(now).saturating_sub(failed(then))),
        p50_ms: quantile_ms(&durations.buckets, 0.5),
        p99_ms: quantile_ms(&durations.buckets, 0.99),
        weight: 0,
        in_flight: 0,
        state: AdminState::Up,
        available: false,
        overridden: false,
        report_stale: false,
    }
}

/// The `q` quantile of durations counted in [`DURATION_BUCKETS`] (per bucket, the last
/// above them all), in milliseconds: linear within its bucket (from 0 in the first), the
/// highest bound above it; NaN when nothing was counted.
pub fn quantile_ms(buckets: &[u64], q: f64) -> f32 {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return f32::NAN;
    }
    let rank = q * total as f64;
    let mut below = 0u64;
    for (i, &n) in buckets.iter().enumerate() {
        if n > 0 && (below + n) as f64 >= rank {
            let Some(&upper) = DURATION_BUCKETS.get(i) else {
                break;
            };
            let lower = match i {
                0 => 0.0,
                _ => DURATION_BUCKETS.get(i - 1).copied().unwrap_or(0.0),
            };
            let within = ((rank - below as f64) / n as f64).clamp(0.0, 1.0);
            return ((lower + (upper - lower) * within) * 1e3) as f32;
        }
        below += n;
    }
    // Above the highest bound: it is all that is known.
    (DURATION_BUCKETS[DURATION_BUCKETS.len() - 1] * 1e3) as f32
}

/// One backend's samples over `window`, one per second (`None` where it has none: before it
/// joined, after it left).
fn aligned(ring: &Ring, window: &[(u32, f64)]) -> Vec<Option<Sample>> {
    let mut at = ring.iter().peekable();
    window
        .iter()
        .map(|&(second, _)| {
            while at.peek().is_some_and(|&&(n, _)| n < second) {
                at.next();
            }
            match at.peek() {
                Some(&&(n, s)) if n == second => Some(s),
                _ => None,
            }
        })
        .collect()
}

/// Samples `history` once a second from `view`, for as long as it is polled (the admin
/// listener drops it when it stops). A late second (a busy machine) is skipped, not caught
/// up: its numbers go into the next, whose time says how long it was (the dashboard divides
/// by that).
pub async fn run(history: Arc<History>, view: View) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        history.sample(&view, SystemTime::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample(requests: u32) -> Sample {
        Sample {
            requests,
            errors_4xx: 0,
            errors_5xx: 0,
            failed_attempts: 0,
            p50_ms: f32::NAN,
            p99_ms: f32::NAN,
            weight: 1,
            in_flight: 0,
            state: AdminState::Up,
            available: true,
            overridden: false,
            report_stale: false,
        }
    }

    #[test]
    fn backends_beyond_the_cap_are_counted_not_kept() {
        let mut rings = Rings::default();
        let seen: Vec<Seen> = (0..MAX_BACKENDS as u16 + 5)
            .map(|i| Seen {
                addr: SocketAddr::from(([127, 0, 0, 1], i)),
                sample: sample(1),
            })
            .collect();
        let again: Vec<Seen> = seen.iter().map(|s| Seen { ..*s }).collect();
        rings.push(0.0, vec![("web".to_owned(), seen)]);
        rings.push(1.0, vec![("web".to_owned(), again)]);
        assert_eq!(rings.upstreams[0].1.len(), MAX_BACKENDS);
        assert!(rings.upstreams[0].1.iter().all(|(_, ring)| ring.len() == 2));
        assert_eq!(rings.not_kept, 5);
    }

    #[test]
    fn percentiles_are_interpolated_within_their_bucket() {
        let mut b = [0u64; DURATION_BUCKETS.len() + 1];
        assert!(quantile_ms(&b, 0.5).is_nan());
        // 100 answers between 25 and 50 ms: the median halfway, p99 near the top.
        b[3] = 100;
        assert!((quantile_ms(&b, 0.5) - 37.5).abs() < 1e-3);
        assert!((quantile_ms(&b, 0.99) - 49.75).abs() < 1e-3);
        // One in a hundred above 10 s: p99 in the 5–10 s bucket, never beyond 10 s.
        b[11] = 1;
        b[3] = 99;
        assert!(quantile_ms(&b, 0.99) <= 50.0);
        b[11] = 50;
        assert_eq!(quantile_ms(&b, 0.99), 10_000.0);
        // Under 5 ms: from 0.
        let mut fast = [0u64; DURATION_BUCKETS.len() + 1];
        fast[0] = 4;
        assert!((quantile_ms(&fast, 0.5) - 2.5).abs() < 1e-3);
    }

    #[test]
    fn a_backend_that_leaves_keeps_its_past_until_it_is_older_than_the_window() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let mut rings = Rings::default();
        let seen = |addrs: &[SocketAddr]| {
            vec![(
                "web".to_owned(),
                addrs
                    .iter()
                    .map(|&addr| Seen {
                        addr,
                        sample: sample(7),
                    })
                    .collect(),
            )]
        };
        rings.push(0.0, seen(&[a]));
        rings.push(1.0, seen(&[a, b]));
        rings.push(2.0, seen(&[b]));
        let history = History {
            rings: Mutex::new(rings),
        };
        let v: serde_json::Value =
            serde_json::from_slice(&history.json(None, KEEP).unwrap()).unwrap();
        assert_eq!(v["time"], json!([0.0, 1.0, 2.0]));
        let backends = &v["upstreams"][0]["backends"];
        assert_eq!(backends[0]["requests"], json!([7, 7, null]));
        assert_eq!(backends[1]["requests"], json!([null, 7, 7]));
        assert_eq!(backends[1]["p99_ms"], json!([null, null, null]));
        // The last two seconds only.
        let v: serde_json::Value =
            serde_json::from_slice(&history.json(Some("web"), 2).unwrap()).unwrap();
        assert_eq!(
            v["upstreams"][0]["backends"][0]["requests"],
            json!([7, null])
        );
        assert!(history.json(Some("nope"), 2).is_none());
        // A's last sample falls out of the window: its ring goes.
        let mut rings = history.lock();
        for t in 3..(KEEP + 2) {
            rings.push(t as f64, seen(&[b]));
        }
        assert_eq!(rings.seconds.len(), KEEP);
        assert_eq!(rings.upstreams[0].1.len(), 1);
        assert_eq!(rings.upstreams[0].1[0].1.len(), KEEP);
    }
}
