//! A run's requests, counted as they finish: everything `results.csv`, `results.md` and
//! `report.html` need, in memory that does not grow with the number of requests.
//!
//! The lab keeps every request of a run ([`crate::load::Outcome`], a `String` each), but the
//! simulator plays ten million requests over ten thousand backends; both feed their requests
//! one at a time to a [`Tally`] and the report reads only the tally. What it holds:
//!
//! * the run's HDR histogram (the one [`Summary`] has always used: µs, 1 µs to an hour, 3
//!   significant digits) and its counts, so that [`Tally::summary`] is exactly
//!   [`Summary::of`] (which is now written with a tally);
//! * per time bucket (one second, or `ceil(length / 600 s)` whole seconds for a longer run, so
//!   that a chart never has more than ~600 points): the requests offered, the latency sum and
//!   count (an exact mean) and a small histogram for the p99 (2 significant digits, clamped at
//!   the timeout), and the answers by the bucket they ended in;
//! * per backend: the answers it gave, and per bucket only up to [`SHARE_CHART_LIMIT`]
//!   backends (above it the report draws a sorted share chart, which needs only the totals);
//! * per ramp step, when the load is a step ramp: the answers and the mean latency.
//!
//! Its size is O(buckets × histogram + backends); [`Tally::record`] allocates nothing.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::load::closed::Users;
use crate::load::{Outcome, Summary, Verdict};
use crate::scenario::Load;
use crate::schedule::Pattern;

/// Up to this many backends the report draws each backend's share per time bucket (one line
/// each); the tally keeps per-bucket counts per backend only then.
pub const SHARE_CHART_LIMIT: usize = 16;

/// The run's histogram: microseconds, up to an hour, 3 significant digits (as [`Summary`]).
const HIGHEST_US: u64 = 3_600_000_000;
/// At most this many time buckets for a run (their width grows in whole seconds).
const MAX_BUCKETS: u64 = 600;
/// Answers may end after the traffic's length (a timeout's worth at most, usually): the
/// answers-by-end-time series runs this many buckets further.
const TRAILING_BUCKETS: usize = 5;
/// About this many points in a latency CDF.
const CDF_POINTS: u64 = 400;

/// One finished request, as a tally takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// When it was to leave, from the start of the load.
    pub intended: Duration,
    /// When it left.
    pub started: Duration,
    /// Answered (any status): from the intended time (open loop) to the end of the answer.
    pub latency: Option<Duration>,
    /// `None`: no answer (an error or a timeout).
    pub status: Option<u16>,
    /// The backend that answered: an index into [`crate::run::Results::backends`].
    pub backend: Option<usize>,
    pub timed_out: bool,
}

impl Request {
    /// The lab's outcome `o`, answered by backend `backend` (the index of its `X-Backend`).
    pub fn of(o: &Outcome, backend: Option<usize>) -> Request {
        Request {
            intended: o.intended,
            started: o.started,
            latency: o.latency,
            status: o.status,
            backend,
            timed_out: o.timed_out,
        }
    }

    /// What it came to (as [`Outcome::verdict`]).
    pub fn verdict(&self) -> Verdict {
        match self.status {
            Some(s) if s < 500 => Verdict::Ok,
            Some(_) => Verdict::HttpError,
            None if self.timed_out => Verdict::Timeout,
            None => Verdict::Error,
        }
    }
}

/// One step of a ramp: what was answered among the requests offered in it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Step {
    /// Requests answered (any status).
    pub answered: u64,
    /// The latencies' sum and count (timeouts at the timeout; errors have none).
    pub latency_sum: Duration,
    pub latencies: u64,
}

impl Step {
    /// The mean latency in ms, if any request had one.
    pub fn mean_ms(&self) -> Option<f64> {
        (self.latencies > 0)
            .then(|| self.latency_sum.as_secs_f64() * 1000.0 / self.latencies as f64)
    }
}

/// A run's requests, aggregated (see the module's documentation).
#[derive(Debug, Clone)]
pub struct Tally {
    length: Duration,
    timeout: Duration,
    ramp_hold: Option<Duration>,
    /// The bucket width in whole seconds.
    width: u64,

    sent: u64,
    ok: u64,
    failed: u64,
    timeouts: u64,
    answered: u64,
    behind: Duration,
    peak: u64,
    /// Every latency (timeouts at the timeout), µs.
    latencies: Histogram<u64>,
    /// Answers per backend.
    served: Vec<u64>,

    /// Per bucket of intended time: requests, latency sum (ns) and count, and a small
    /// histogram (µs, clamped at the timeout) for the p99.
    offered: Vec<u64>,
    bucket_sum_ns: Vec<u64>,
    bucket_count: Vec<u64>,
    bucket_latencies: Vec<Histogram<u32>>,
    /// Answers per bucket of the time they ended ([`TRAILING_BUCKETS`] more buckets).
    ended: Vec<u64>,
    /// Successful answers (2xx) per bucket of the time they ended (as `ended`).
    ended_ok: Vec<u64>,
    /// `served_by_bucket[bucket * backends + backend]`, up to [`SHARE_CHART_LIMIT`] backends.
    served_by_bucket: Option<Vec<u64>>,
    /// Per ramp step.
    steps: Vec<Step>,
}

impl Tally {
    /// A tally of `backends` backends for traffic of `length`; `timeout`: latencies of
    /// timeouts count at it; `ramp_hold`: `Some(hold)` for a step ramp ([`Pattern::Steps`] or
    /// [`Users::Steps`], see [`ramp_hold`]), so that per-step figures can be drawn.
    pub fn new(
        backends: usize,
        length: Duration,
        timeout: Duration,
        ramp_hold: Option<Duration>,
    ) -> Tally {
        let width = bucket_width(length).as_secs();
        let seconds = length.as_secs_f64().ceil() as u64;
        let buckets = seconds.div_ceil(width).max(1) as usize;
        let timeout_us = (timeout.as_micros() as u64).max(2);
        let bucket_histogram = Histogram::<u32>::new_with_bounds(1, timeout_us, 2)
            .expect("valid per-bucket histogram bounds");
        let steps = match ramp_hold {
            Some(hold) if !hold.is_zero() => {
                ((length.as_secs_f64() / hold.as_secs_f64()).ceil() as usize).max(1)
            }
            _ => 0,
        };
        Tally {
            length,
            timeout,
            ramp_hold: ramp_hold.filter(|h| !h.is_zero()),
            width,
            sent: 0,
            ok: 0,
            failed: 0,
            timeouts: 0,
            answered: 0,
            behind: Duration::ZERO,
            peak: 0,
            latencies: Histogram::new_with_bounds(1, HIGHEST_US, 3)
                .expect("valid histogram bounds"),
            served: vec![0; backends],
            offered: vec![0; buckets],
            bucket_sum_ns: vec![0; buckets],
            bucket_count: vec![0; buckets],
            bucket_latencies: vec![bucket_histogram; buckets],
            ended: vec![0; buckets + TRAILING_BUCKETS],
            ended_ok: vec![0; buckets + TRAILING_BUCKETS],
            served_by_bucket: (backends <= SHARE_CHART_LIMIT).then(|| vec![0; buckets * backends]),
            steps: vec![Step::default(); steps],
        }
    }

    /// Counts one finished request.
    pub fn record(&mut self, r: &Request) {
        self.sent += 1;
        self.behind = self.behind.max(r.started.saturating_sub(r.intended));
        // The same rules as `Summary` has always had.
        let verdict = r.verdict();
        let latency = match verdict {
            Verdict::Ok => {
                self.ok += 1;
                r.latency
            }
            Verdict::HttpError => {
                self.failed += 1;
                r.latency
            }
            Verdict::Timeout => {
                self.timeouts += 1;
                Some(self.timeout)
            }
            Verdict::Error => {
                self.failed += 1;
                None
            }
        };
        let bucket = ((r.intended.as_secs() / self.width) as usize).min(self.offered.len() - 1);
        self.offered[bucket] += 1;
        if let Some(l) = latency {
            let us = l.as_micros() as u64;
            self.latencies.saturating_record(us.clamp(1, HIGHEST_US));
            self.bucket_sum_ns[bucket] =
                self.bucket_sum_ns[bucket].saturating_add(l.as_nanos() as u64);
            self.bucket_count[bucket] += 1;
            let h = &mut self.bucket_latencies[bucket];
            h.saturating_record(us.clamp(1, h.high()));
        }
        let step = self.ramp_hold.map(|hold| {
            ((r.intended.as_secs_f64() / hold.as_secs_f64()) as usize).min(self.steps.len() - 1)
        });
        if let (Some(k), Some(l)) = (step, latency) {
            self.steps[k].latency_sum += l;
            self.steps[k].latencies += 1;
        }
        if r.status.is_none() {
            return;
        }
        self.answered += 1;
        if let Some(k) = step {
            self.steps[k].answered += 1;
        }
        if let Some(l) = r.latency {
            let end = ((r.intended + l).as_secs() / self.width) as usize;
            let last = self.ended.len() - 1;
            self.ended[end.min(last)] += 1;
            if verdict == Verdict::Ok {
                self.ended_ok[end.min(last)] += 1;
            }
        }
        if let Some(b) = r.backend
            && b < self.served.len()
        {
            self.served[b] += 1;
            let n = self.served.len();
            if let Some(per) = &mut self.served_by_bucket {
                per[bucket * n + b] += 1;
            }
        }
    }

    /// Counts an answer that ended at `at` (from the start of the load) to a request that is
    /// not measured (the simulator's warm-up) in the answers-by-end series only, so that the
    /// throughput after the warm-up counts every answer the backends gave, not only those to
    /// measured requests (which would read low while the warm-up's requests drain).
    pub fn record_unmeasured_answer(&mut self, at: Duration, ok: bool) {
        let end = ((at.as_secs() / self.width) as usize).min(self.ended.len() - 1);
        self.ended[end] += 1;
        if ok {
            self.ended_ok[end] += 1;
        }
    }

    /// The most requests in flight at once (the producer knows it: the lab computes it from
    /// its outcomes with [`crate::run::peak_concurrency`], the simulator tracks it).
    pub fn set_peak_concurrency(&mut self, n: u64) {
        self.peak = n;
    }

    pub fn peak_concurrency(&self) -> u64 {
        self.peak
    }

    /// The run in numbers: exactly what [`Summary::of`] gives for the same requests.
    pub fn summary(&self) -> Summary {
        let h = &self.latencies;
        let ms = |us: u64| us as f64 / 1000.0;
        let at = |q: f64| {
            if h.is_empty() {
                0.0
            } else {
                ms(h.value_at_quantile(q))
            }
        };
        Summary {
            sent: self.sent,
            ok: self.ok,
            failed: self.failed,
            timeouts: self.timeouts,
            achieved_rps: (self.ok + self.failed) as f64 / self.length.as_secs_f64().max(1e-9),
            mean_ms: if h.is_empty() { 0.0 } else { h.mean() / 1000.0 },
            p50_ms: at(0.5),
            p90_ms: at(0.9),
            p95_ms: at(0.95),
            p99_ms: at(0.99),
            p999_ms: at(0.999),
            max_ms: if h.is_empty() { 0.0 } else { ms(h.max()) },
            behind_max_ms: self.behind.as_secs_f64() * 1000.0,
        }
    }

    /// Requests answered (any status).
    pub fn answered(&self) -> u64 {
        self.answered
    }

    /// Requests each backend answered (index = backend).
    pub fn served(&self) -> &[u64] {
        &self.served
    }

    /// The traffic's length.
    pub fn length(&self) -> Duration {
        self.length
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The width of a time bucket: 1 s up to 600 s of traffic, else whole seconds enough for
    /// at most 600 buckets.
    pub fn bucket_width(&self) -> Duration {
        Duration::from_secs(self.width)
    }

    /// Requests offered per bucket of intended time (the last bucket takes any later ones).
    pub fn offered(&self) -> &[u64] {
        &self.offered
    }

    /// The mean latency in ms of the requests intended in `bucket` (timeouts at the timeout),
    /// if any had one.
    pub fn mean_ms(&self, bucket: usize) -> Option<f64> {
        let n = *self.bucket_count.get(bucket)?;
        (n > 0).then(|| self.bucket_sum_ns[bucket] as f64 / 1e6 / n as f64)
    }

    /// The latency at quantile `q` in ms of the requests intended in `bucket`, within 1% (2
    /// significant digits; latencies above the timeout count at it), if any had one.
    pub fn quantile_ms(&self, bucket: usize, q: f64) -> Option<f64> {
        let h = self.bucket_latencies.get(bucket)?;
        (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1000.0)
    }

    /// Answers per bucket of the time they ended, to a few buckets past the length.
    pub fn answered_by_end(&self) -> &[u64] {
        &self.ended
    }

    /// Successful answers (2xx) per bucket of the time they ended, as [`Tally::answered_by_end`].
    pub fn succeeded_by_end(&self) -> &[u64] {
        &self.ended_ok
    }

    /// The answers `backend` gave to requests intended in `bucket`; `None` above
    /// [`SHARE_CHART_LIMIT`] backends (not kept) or out of range.
    pub fn served_in(&self, bucket: usize, backend: usize) -> Option<u64> {
        let n = self.served.len();
        if backend >= n {
            return None;
        }
        self.served_by_bucket
            .as_ref()?
            .get(bucket * n + backend)
            .copied()
    }

    /// The ramp's hold, if the tally was made for a step ramp.
    pub fn ramp_hold(&self) -> Option<Duration> {
        self.ramp_hold
    }

    /// Per ramp step (empty without a ramp).
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The latency CDF (ms, fraction of the requests with a latency), about 400 points from
    /// the run's histogram, ending at (max, 1).
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        let h = &self.latencies;
        let n = h.len();
        if n == 0 {
            return Vec::new();
        }
        let every = (n / CDF_POINTS).max(1);
        let mut points = Vec::with_capacity(CDF_POINTS as usize + 2);
        let (mut seen, mut next) = (0u64, 1u64);
        for v in h.iter_recorded() {
            seen += v.count_since_last_iteration();
            if seen >= next {
                points.push((
                    v.value_iterated_to() as f64 / 1000.0,
                    seen as f64 / n as f64,
                ));
                next = seen + every;
            }
        }
        points.push((h.max() as f64 / 1000.0, 1.0));
        points
    }
}

/// The bucket width for traffic of `length`: 1 s up to 600 s, else `ceil(length / 600 s)`
/// whole seconds.
pub fn bucket_width(length: Duration) -> Duration {
    let secs = length.as_secs_f64() / MAX_BUCKETS as f64;
    Duration::from_secs((secs.ceil() as u64).max(1))
}

/// The hold of a step ramp ([`Pattern::Steps`] or [`Users::Steps`]), for [`Tally::new`].
pub fn ramp_hold(load: &Load) -> Option<Duration> {
    match *load {
        Load::Open(Pattern::Steps { hold, .. }) | Load::Closed(Users::Steps { hold, .. }) => {
            Some(hold)
        }
        _ => None,
    }
}

impl Summary {
    /// The numbers of `outcomes` over a run of `length`. Latencies of answered requests (from
    /// their intended times in open loop, their sends in closed loop); a timeout counts at the
    /// timeout in the percentiles, so that requests that never came back still weigh.
    pub fn of(outcomes: &[Outcome], length: Duration, timeout: Duration) -> Summary {
        let mut tally = Tally::new(0, length, timeout, None);
        for o in outcomes {
            tally.record(&Request::of(o, None));
        }
        tally.summary()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn outcome(at: u64, latency: Option<u64>, status: Option<u16>, timed_out: bool) -> Outcome {
        Outcome {
            intended: ms(at),
            started: ms(at),
            latency: latency.map(ms),
            ended: latency.map(|l| ms(at + l)),
            status,
            backend: None,
            cost_ms: 0.0,
            timed_out,
            client: 0,
        }
    }

    /// `Summary::of` as it was before tallies, kept to check the tally against.
    fn summary_before_tallies(
        outcomes: &[Outcome],
        length: Duration,
        timeout: Duration,
    ) -> Summary {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
        let (mut ok, mut failed, mut timeouts) = (0, 0, 0);
        let mut behind = Duration::ZERO;
        for o in outcomes {
            behind = behind.max(o.started.saturating_sub(o.intended));
            let latency = match o.verdict() {
                Verdict::Ok => {
                    ok += 1;
                    o.latency
                }
                Verdict::HttpError => {
                    failed += 1;
                    o.latency
                }
                Verdict::Timeout => {
                    timeouts += 1;
                    Some(timeout)
                }
                Verdict::Error => {
                    failed += 1;
                    None
                }
            };
            if let Some(l) = latency {
                h.saturating_record((l.as_micros() as u64).clamp(1, 3_600_000_000));
            }
        }
        let at = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        Summary {
            sent: outcomes.len() as u64,
            ok,
            failed,
            timeouts,
            achieved_rps: (ok + failed) as f64 / length.as_secs_f64(),
            mean_ms: h.mean() / 1000.0,
            p50_ms: at(0.5),
            p90_ms: at(0.9),
            p95_ms: at(0.95),
            p99_ms: at(0.99),
            p999_ms: at(0.999),
            max_ms: h.max() as f64 / 1000.0,
            behind_max_ms: behind.as_secs_f64() * 1000.0,
        }
    }

    /// The exact percentile, as the report computed it per second before tallies.
    fn percentile(mut v: Vec<f64>, q: f64) -> f64 {
        v.sort_by(f64::total_cmp);
        let k = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
        v[k]
    }

    #[test]
    fn the_summary_is_the_one_outcomes_always_had() {
        let mut outcomes: Vec<Outcome> = (0..200)
            .map(|i| outcome(i * 10, Some(3 + i % 37), Some(200), false))
            .collect();
        outcomes.push(outcome(50, None, None, true));
        outcomes.push(outcome(60, Some(12), Some(503), false));
        outcomes.push(outcome(70, None, None, false));
        // Sent 25 ms behind its schedule.
        outcomes.push(Outcome {
            started: ms(105),
            ..outcome(80, Some(40), Some(404), false)
        });
        let (length, timeout) = (Duration::from_secs(2), Duration::from_secs(4));
        let before = summary_before_tallies(&outcomes, length, timeout);
        assert_eq!(Summary::of(&outcomes, length, timeout), before);
        let mut tally = Tally::new(2, length, timeout, None);
        for o in &outcomes {
            tally.record(&Request::of(o, Some(0)));
        }
        let s = tally.summary();
        assert_eq!(s, before);
        assert_eq!((s.sent, s.ok, s.failed, s.timeouts), (204, 201, 2, 1));
        assert!(
            s.max_ms >= 3999.0 && (s.behind_max_ms - 25.0).abs() < 1e-9,
            "{s:?}"
        );
        // Answered: every 200, the 404 and the 503; not the timeout nor the error.
        assert_eq!(tally.answered(), 202);
        assert_eq!(tally.served(), &[202, 0]);
    }

    #[test]
    fn buckets_are_seconds_up_to_ten_minutes() {
        assert_eq!(bucket_width(Duration::from_secs(6)), Duration::from_secs(1));
        assert_eq!(
            bucket_width(Duration::from_secs(600)),
            Duration::from_secs(1)
        );
        assert_eq!(
            bucket_width(Duration::from_secs(601)),
            Duration::from_secs(2)
        );
        assert_eq!(
            bucket_width(Duration::from_secs(3600)),
            Duration::from_secs(6)
        );
        let t = Tally::new(1, Duration::from_secs(600), Duration::from_secs(4), None);
        assert_eq!(t.offered().len(), 600);
        assert_eq!(t.answered_by_end().len(), 605);
        let t = Tally::new(1, Duration::from_secs(3600), Duration::from_secs(4), None);
        assert_eq!(t.offered().len(), 600);
        // A fraction of a second gets a bucket of its own.
        let t = Tally::new(1, ms(2500), Duration::from_secs(4), None);
        assert_eq!(t.offered().len(), 3);
    }

    #[test]
    fn requests_go_to_the_bucket_of_their_intended_time_and_answers_of_their_end() {
        let mut t = Tally::new(2, Duration::from_secs(3600), Duration::from_secs(4), None);
        let at = |secs: u64, latency: u64, backend: usize| Request {
            intended: Duration::from_secs(secs),
            started: Duration::from_secs(secs),
            latency: Some(ms(latency)),
            status: Some(200),
            backend: Some(backend),
            timed_out: false,
        };
        t.record(&at(0, 10, 0));
        t.record(&at(5, 2000, 1));
        t.record(&at(6, 10, 1));
        // Past the length: the last bucket, and an answer past the length.
        t.record(&at(4000, 10, 0));
        assert_eq!(&t.offered()[..2], &[2, 1]);
        assert_eq!(t.offered()[599], 1);
        assert_eq!(&t.answered_by_end()[..3], &[1, 2, 0]);
        assert_eq!(t.answered_by_end()[604], 1);
        assert_eq!(t.served(), &[2, 2]);
        assert_eq!(t.served_in(0, 0), Some(1));
        assert_eq!(t.served_in(0, 1), Some(1));
        assert_eq!(t.served_in(1, 1), Some(1));
        assert_eq!(t.served_in(599, 0), Some(1));
        assert_eq!(t.served_in(0, 2), None);
        assert_eq!(t.mean_ms(0), Some(1005.0));
        assert_eq!(t.mean_ms(2), None);
    }

    #[test]
    fn many_backends_keep_totals_only() {
        let mut t = Tally::new(
            SHARE_CHART_LIMIT + 1,
            Duration::from_secs(10),
            Duration::from_secs(4),
            None,
        );
        for i in 0..100u64 {
            t.record(&Request {
                intended: ms(i * 50),
                started: ms(i * 50),
                latency: Some(ms(5)),
                status: Some(200),
                backend: Some(i as usize % (SHARE_CHART_LIMIT + 1)),
                timed_out: false,
            });
        }
        assert_eq!(t.served().iter().sum::<u64>(), 100);
        assert_eq!(t.served()[0], 6);
        assert_eq!(t.served()[SHARE_CHART_LIMIT], 5);
        assert_eq!(t.served_in(0, 0), None);
    }

    #[test]
    fn a_buckets_p99_is_within_a_percent_and_its_mean_exact() {
        let timeout = Duration::from_secs(4);
        let mut t = Tally::new(1, Duration::from_secs(2), timeout, None);
        let mut exact = [Vec::new(), Vec::new()];
        // A deterministic spread of latencies from 0.5 ms to ~3 s, and a few timeouts.
        let mut x: u64 = 12345;
        for i in 0..20_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let timed_out = i % 500 == 0;
            let latency = Duration::from_micros(500 + (x >> 33) % 3_000_000);
            let intended = ms(i / 10);
            t.record(&Request {
                intended,
                started: intended,
                latency: (!timed_out).then_some(latency),
                status: (!timed_out).then_some(200),
                backend: Some(0),
                timed_out,
            });
            let l = if timed_out { timeout } else { latency };
            exact[(i / 10_000) as usize].push(l.as_secs_f64() * 1000.0);
        }
        for (k, v) in exact.iter().enumerate() {
            let want = percentile(v.clone(), 0.99);
            let got = t.quantile_ms(k, 0.99).unwrap();
            assert!(
                (got - want).abs() / want < 0.01,
                "bucket {k}: {got} vs {want}"
            );
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            assert!((t.mean_ms(k).unwrap() - mean).abs() < 1e-6, "bucket {k}");
        }
        let cdf = t.cdf();
        assert!(cdf.len() <= 2 * CDF_POINTS as usize + 2, "{}", cdf.len());
        assert!(cdf.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert_eq!(cdf.last().unwrap().1, 1.0);
        assert!((cdf.last().unwrap().0 - 4000.0).abs() < 4.0, "{cdf:?}");
    }

    #[test]
    fn ramp_steps_count_answers_and_latency() {
        let mut t = Tally::new(
            1,
            Duration::from_secs(4),
            Duration::from_secs(1),
            Some(ms(1500)),
        );
        assert_eq!(t.steps().len(), 3);
        let r = |at: u64, latency: Option<u64>, timed_out: bool| Request {
            intended: ms(at),
            started: ms(at),
            latency: latency.map(ms),
            status: latency.map(|_| 200),
            backend: Some(0),
            timed_out,
        };
        t.record(&r(0, Some(10), false));
        t.record(&r(1000, Some(30), false));
        t.record(&r(1600, None, true));
        t.record(&r(3900, None, false));
        assert_eq!(t.steps()[0].answered, 2);
        assert_eq!(t.steps()[0].mean_ms(), Some(20.0));
        assert_eq!(t.steps()[1].answered, 0);
        assert_eq!(t.steps()[1].mean_ms(), Some(1000.0));
        assert_eq!(t.steps()[2].answered, 0);
        assert_eq!(t.steps()[2].mean_ms(), None);
        assert!(Tally::new(1, ms(1), ms(1), None).steps().is_empty());
    }

    #[test]
    fn its_size_does_not_grow_with_the_requests() {
        let mut t = Tally::new(8, Duration::from_secs(60), Duration::from_secs(4), None);
        let size = |t: &Tally| {
            (
                t.latencies.distinct_values(),
                t.bucket_latencies
                    .iter()
                    .map(Histogram::distinct_values)
                    .sum::<usize>(),
                t.offered.len(),
                t.ended.len(),
                t.served_by_bucket.as_ref().map(Vec::len),
            )
        };
        let before = size(&t);
        for i in 0..100_000u64 {
            t.record(&Request {
                intended: Duration::from_micros(i * 600),
                started: Duration::from_micros(i * 600),
                // Up to 20 s: above the timeout and the per-bucket histograms' bound.
                latency: Some(Duration::from_micros(1 + i * 200)),
                status: Some(200),
                backend: Some(i as usize % 8),
                timed_out: false,
            });
        }
        assert_eq!(size(&t), before);
        assert_eq!(t.summary().sent, 100_000);
        assert_eq!(t.answered(), 100_000);
    }
}
