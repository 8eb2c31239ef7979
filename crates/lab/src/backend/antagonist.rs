//! Time-varying capacity: an antagonist, background load that takes a share of the backend's
//! capacity away on a fixed rhythm, as a noisy neighbour, a backup job or a garbage collector
//! does on a real machine.
//!
//! `FRACTION:FOR:EVERY[:OFFSET]`: during `[OFFSET + k·EVERY, OFFSET + k·EVERY + FOR)`, for every
//! integer k, the backend keeps only `FRACTION` of its capacity (the factor `f(t)`); at other
//! times all of it (`f(t) = 1`). A request in service progresses at `speed × f(t)`, so its end
//! is where the integral of that rate reaches its cost: [`finish_after`] computes it exactly
//! over the piecewise-constant factor, and [`Antagonist::integral`] gives `∫ f` for the
//! utilization report.
//!
//! Pure: times are offsets from the antagonist's clock zero (the `--epoch-ms` every backend of a
//! run shares, else the backend's start); [`Clock`] maps the runtime's clock onto it.

use std::time::{Duration, SystemTime};

/// The longest period an antagonist may have (a day), so the period arithmetic stays small.
pub const MAX_EVERY: Duration = Duration::from_secs(86_400);

/// Background load that leaves `fraction` of the capacity for `on` out of every `every`,
/// starting at `offset`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Antagonist {
    /// The share of the capacity left during a drop, in (0, 1].
    pub fraction: f64,
    /// How long each drop lasts (`FOR`), shorter than `every`.
    pub on: Duration,
    /// The period (`EVERY`).
    pub every: Duration,
    /// Where the first drop starts on the antagonist's clock (`OFFSET`).
    pub offset: Duration,
}

impl std::str::FromStr for Antagonist {
    type Err = String;

    fn from_str(s: &str) -> Result<Antagonist, String> {
        let form = "write FRACTION:FOR:EVERY[:OFFSET], e.g. 0.3:20s:60s (30% of the capacity for \
                    20 s of every 60 s)";
        let parts: Vec<&str> = s.split(':').collect();
        let (fraction, on, every, offset) = match parts.as_slice() {
            [f, on, every] => (*f, *on, *every, None),
            [f, on, every, offset] => (*f, *on, *every, Some(*offset)),
            _ => return Err(format!("{s:?}: {form}")),
        };
        let fraction = match fraction.parse::<f64>() {
            Ok(x) if x > 0.0 && x <= 1.0 => x,
            _ => {
                return Err(format!(
                    "{s:?}: FRACTION {fraction:?} is the share of capacity left, a number above 0 \
                     and at most 1, like 0.3"
                ));
            }
        };
        let duration = |v: &str, what: &str| {
            humantime::parse_duration(v)
                .map_err(|_| format!("{s:?}: {what} {v:?} is not a duration such as 20s or 500ms"))
        };
        let on = duration(on, "FOR")?;
        let every = duration(every, "EVERY")?;
        let offset = offset.map_or(Ok(Duration::ZERO), |o| duration(o, "OFFSET"))?;
        if on.is_zero() || on >= every {
            return Err(format!(
                "{s:?}: FOR must be above 0 and shorter than EVERY (a drop of {} every {})",
                humantime::format_duration(on),
                humantime::format_duration(every)
            ));
        }
        if every > MAX_EVERY {
            return Err(format!("{s:?}: EVERY is at most 24h"));
        }
        Ok(Antagonist {
            fraction,
            on,
            every,
            offset,
        })
    }
}

fn nanos(d: Duration) -> i128 {
    i128::try_from(d.as_nanos()).unwrap_or(i128::MAX)
}

/// `ns` nanoseconds, rounded up; 0 for NaN or negatives.
pub(crate) fn duration_of(ns: f64) -> Duration {
    if ns.is_nan() || ns <= 0.0 {
        Duration::ZERO
    } else {
        // `as` saturates: beyond some 580 years, 580 years.
        Duration::from_nanos(ns.ceil() as u64)
    }
}

impl Antagonist {
    /// Where `t` (ns) falls in its period: (index of the period, offset into it).
    fn phase(&self, t: i128) -> (i128, i128) {
        let every = nanos(self.every).max(1);
        let shifted = t.saturating_sub(nanos(self.offset));
        (shifted.div_euclid(every), shifted.rem_euclid(every))
    }

    /// The factor at `t` (ns) and the next time (ns, > t) it changes.
    fn segment(&self, t: i128) -> (f64, i128) {
        let (_, p) = self.phase(t);
        let on = nanos(self.on);
        if p < on {
            (self.fraction, t + (on - p))
        } else {
            (1.0, t + (nanos(self.every) - p))
        }
    }

    /// The share of the capacity left at `t`.
    pub fn factor_at(&self, t: Duration) -> f64 {
        self.segment(nanos(t)).0
    }

    /// The next time after `t` the factor changes.
    pub fn next_change_after(&self, t: Duration) -> Duration {
        let next = self.segment(nanos(t)).1;
        u64::try_from(next).map_or(Duration::MAX, Duration::from_nanos)
    }

    /// `∫ f` from the antagonist's clock zero to `t` (ns; negative before it).
    fn cumulative(&self, t: i128) -> f64 {
        let (k, p) = self.phase(t);
        let on = nanos(self.on);
        let per_period = self.fraction * on as f64 + (nanos(self.every) - on) as f64;
        k as f64 * per_period + self.fraction * p.min(on) as f64 + (p - on).max(0) as f64
    }

    /// `∫ f(t) dt` over `[a, b]`, in seconds: the capacity left over that stretch.
    pub fn integral(&self, a: Duration, b: Duration) -> f64 {
        if b <= a {
            return 0.0;
        }
        ((self.cumulative(nanos(b)) - self.cumulative(nanos(a))) / 1e9).max(0.0)
    }

    /// The antagonist time of the backend's start, when its clock zero is `epoch` and the
    /// backend starts at `now`. Before the epoch, the rhythm runs backwards from it, so the
    /// time is shifted by whole periods to stay positive.
    fn time_at_start(&self, epoch: SystemTime, now: SystemTime) -> Duration {
        match now.duration_since(epoch) {
            Ok(since) => since,
            Err(e) => {
                let ahead = nanos(e.duration());
                let every = nanos(self.every).max(1);
                let periods = ahead.div_euclid(every) + 1;
                duration_of((periods * every - ahead) as f64)
            }
        }
    }
}

/// When a request of `work` (its cost) that starts service at `start` ends, on a server of
/// relative `speed` whose capacity follows `antagonist`: the time from `start` until
/// `∫ speed × f(t) dt` over it reaches `work`.
pub fn finish_after(
    start: Duration,
    work: Duration,
    speed: f64,
    antagonist: Option<Antagonist>,
) -> Duration {
    let speed = if speed.is_finite() && speed > 0.0 {
        speed
    } else {
        1e-9
    };
    let Some(a) = antagonist else {
        return duration_of(work.as_nanos() as f64 / speed);
    };
    let begin = nanos(start);
    let mut t = begin;
    let mut left = work.as_nanos() as f64;
    let on = nanos(a.on);
    let every = nanos(a.every).max(1);
    // Work done in one whole period, to skip whole periods of a long request at once.
    let per_period = speed * (a.fraction * on as f64 + (every - on) as f64);
    loop {
        let (f, end) = a.segment(t);
        let rate = speed * f;
        let span = (end - t) as f64;
        if rate * span >= left {
            return duration_of((t - begin) as f64 + left / rate);
        }
        left -= rate * span;
        t = end;
        if a.phase(t).1 == 0 && per_period > 0.0 {
            let whole = (left / per_period).floor();
            if whole >= 1.0 {
                // Saturating: an absurd request stays absurd rather than wrapping.
                t = t.saturating_add((whole as i128).saturating_mul(every));
                left -= whole * per_period;
            }
        }
    }
}

/// The runtime's clock mapped onto the antagonist's: `now()` is the time since the clock zero
/// (or, before an epoch in the future, a time with the same phase).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: tokio::time::Instant,
    /// The antagonist time at `start`.
    at_start: Duration,
}

impl Clock {
    /// A clock whose zero is `epoch`, if any, else now.
    pub fn new(epoch: Option<SystemTime>, antagonist: Option<Antagonist>) -> Clock {
        let at_start = match (epoch, antagonist) {
            (Some(epoch), Some(a)) => a.time_at_start(epoch, SystemTime::now()),
            (Some(epoch), None) => SystemTime::now()
                .duration_since(epoch)
                .unwrap_or(Duration::ZERO),
            (None, _) => Duration::ZERO,
        };
        Clock {
            start: tokio::time::Instant::now(),
            at_start,
        }
    }

    /// The antagonist time now.
    pub fn now(&self) -> Duration {
        self.at(tokio::time::Instant::now())
    }

    /// The antagonist time at `instant`.
    pub fn at(&self, instant: tokio::time::Instant) -> Duration {
        self.at_start + instant.saturating_duration_since(self.start)
    }

    /// The instant of antagonist time `t` (capped some thirty years ahead).
    pub fn instant(&self, t: Duration) -> tokio::time::Instant {
        const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);
        self.start + t.saturating_sub(self.at_start).min(FAR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn patterns_parse_or_say_what_is_wrong() {
        assert_eq!(
            "0.3:20s:60s".parse::<Antagonist>(),
            Ok(Antagonist {
                fraction: 0.3,
                on: Duration::from_secs(20),
                every: Duration::from_secs(60),
                offset: Duration::ZERO,
            })
        );
        assert_eq!(
            "1:100ms:1s:250ms".parse::<Antagonist>().map(|a| a.offset),
            Ok(ms(250))
        );
        for (bad, says) in [
            ("0:1s:2s", "FRACTION"),
            ("1.5:1s:2s", "FRACTION"),
            ("x:1s:2s", "FRACTION"),
            ("0.5:2s:2s", "shorter than EVERY"),
            ("0.5:0s:2s", "above 0"),
            ("0.5:1s", "FRACTION:FOR:EVERY"),
            ("0.5:1q:2s", "FOR \"1q\""),
            ("0.5:1s:2s:x", "OFFSET"),
            ("0.5:1s:2days", "24h"),
        ] {
            let e = bad.parse::<Antagonist>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_factor_drops_on_its_rhythm() {
        let a: Antagonist = "0.5:100ms:1s:200ms".parse().unwrap();
        assert_eq!(a.factor_at(ms(0)), 1.0);
        assert_eq!(a.factor_at(ms(200)), 0.5);
        assert_eq!(a.factor_at(ms(299)), 0.5);
        assert_eq!(a.factor_at(ms(300)), 1.0);
        assert_eq!(a.factor_at(ms(1250)), 0.5);
        assert_eq!(a.next_change_after(ms(0)), ms(200));
        assert_eq!(a.next_change_after(ms(250)), ms(300));
        assert_eq!(a.next_change_after(ms(300)), ms(1200));
        // ∫f over one whole period: 0.9 s at 1, 0.1 s at 0.5.
        assert!((a.integral(ms(0), ms(1000)) - 0.95).abs() < 1e-9);
        assert!((a.integral(ms(250), ms(350)) - 0.075).abs() < 1e-9);
    }

    #[test]
    fn a_request_slows_down_when_the_drop_begins() {
        // The brief's case: 200 ms of work, the factor 0.5 from t = 100 ms: 100 ms at full
        // speed, then the other 100 ms of work at half speed, 200 ms: 300 ms in all.
        let a: Antagonist = "0.5:10s:20s:100ms".parse().unwrap();
        assert_eq!(finish_after(ms(0), ms(200), 1.0, Some(a)), ms(300));
        // Starting inside the drop: all at half speed; twice as fast a server: half of that.
        assert_eq!(finish_after(ms(100), ms(200), 1.0, Some(a)), ms(400));
        assert_eq!(finish_after(ms(100), ms(200), 2.0, Some(a)), ms(200));
        // Through the end of a drop: 50 ms left of it does 25 ms of work, 175 ms at full.
        let b: Antagonist = "0.5:100ms:1s".parse().unwrap();
        assert_eq!(finish_after(ms(50), ms(200), 1.0, Some(b)), ms(225));
        // Without an antagonist, cost over speed.
        assert_eq!(finish_after(ms(7), ms(200), 0.5, None), ms(400));
    }

    #[test]
    fn long_requests_skip_whole_periods_exactly() {
        // 0.25 for 1 s of every 2 s: 1.25 s of work per period. 100 periods and 0.5 s more:
        // 125.5 s of work ends 0.25 s into the 101st period's drop... (0.5 s of work at 0.25
        // takes 2 s: the 1 s drop does 0.25, then 0.25 s at full speed) → 201.25 s.
        let a: Antagonist = "0.25:1s:2s".parse().unwrap();
        let work = Duration::from_millis(125_500);
        assert_eq!(
            finish_after(Duration::ZERO, work, 1.0, Some(a)),
            Duration::from_millis(201_250)
        );
        // An absurdly small fraction does not hang or panic.
        let tiny: Antagonist = "1e-300:1s:2s".parse().unwrap();
        let _ = finish_after(Duration::ZERO, work, 1e-6, Some(tiny));
    }

    #[test]
    fn an_epoch_ahead_keeps_the_phase() {
        let a: Antagonist = "0.5:1s:10s".parse().unwrap();
        let epoch = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        // 3 s before the epoch is 7 s into a period.
        let now = epoch - Duration::from_secs(3);
        assert_eq!(a.time_at_start(epoch, now), Duration::from_secs(7));
        assert_eq!(
            a.time_at_start(epoch, epoch + Duration::from_secs(4)),
            Duration::from_secs(4)
        );
    }
}
