//! A run in numbers: counts, the achieved rate, latency percentiles over an HDR histogram
//! (`hdrhistogram`, the maintained Rust port of Gil Tene's HdrHistogram), and how far the
//! generator fell behind its schedule. [`crate::tally::Tally`] computes it, from outcomes
//! ([`Summary::of`]) or from requests counted one by one.

use serde::Serialize;

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
    use crate::load::Outcome;
    use std::time::Duration;

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
