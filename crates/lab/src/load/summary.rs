//! A run in numbers: counts, the achieved rate, latency percentiles over an HDR histogram
//! (`hdrhistogram`, the maintained Rust port of Gil Tene's HdrHistogram), and how far the
//! generator fell behind its schedule.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::{Outcome, Verdict};

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
    /// How far the generator fell behind its own schedule, at worst (0 in closed loop, which
    /// has no schedule).
    pub behind_max_ms: f64,
}

impl Summary {
    /// The numbers of `outcomes` over a run of `length`. Latencies of answered requests (from
    /// their intended times in open loop, their sends in closed loop); a timeout counts at the timeout in the percentiles, so that
    /// requests that never came back still weigh.
    pub fn of(outcomes: &[Outcome], length: Duration, timeout: Duration) -> Summary {
        // Microseconds, up to an hour, 3 significant digits.
        let mut h =
            Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds");
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

/// Three lines: counts, latencies, and how far the generator fell behind. The alternate form
/// (`{:#}`), for a closed-loop run, which has no schedule to fall behind, leaves out the third.
impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "sent {}: {} ok, {} failed, {} timed out; {:.1} answers/s",
            self.sent, self.ok, self.failed, self.timeouts, self.achieved_rps
        )?;
        write!(
            f,
            "latency (ms): mean {:.2}  p50 {:.2}  p90 {:.2}  p95 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
            self.mean_ms,
            self.p50_ms,
            self.p90_ms,
            self.p95_ms,
            self.p99_ms,
            self.p999_ms,
            self.max_ms
        )?;
        if f.alternate() {
            return Ok(());
        }
        write!(
            f,
            "\nthe generator fell behind its schedule by {:.2} ms at most",
            self.behind_max_ms
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_weighs_in_the_percentiles() {
        let answered = |ms: u64| Outcome {
            intended: Duration::ZERO,
            started: Duration::ZERO,
            latency: Some(Duration::from_millis(ms)),
            ended: Some(Duration::from_millis(ms)),
            status: Some(200),
            cost_ms: 0.0,
            backend: None,
            timed_out: false,
            client: 0,
        };
        let mut outcomes: Vec<Outcome> = (0..9).map(|_| answered(10)).collect();
        outcomes.push(Outcome {
            latency: None,
            ended: None,
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
