//! The load generator's schedule: when each request is to leave, what it costs, and which
//! client sends it — computed ahead, from a seed, so every algorithm of an experiment replays
//! the very same trace (and a test can pin it).
//!
//! * **Patterns** (`--pattern`): `constant:RPS`, `sine:MIN-MAX:PERIOD` (seed 002's 40–100 rps
//!   sine wave), `steps:START-END:STEP:HOLD` (a ramp, as seed 000's JMeter and seed 001's
//!   siege runs), `burst:N:GAP:REPEAT` (seed 004's bursts: N requests, `GAP` apart, every
//!   `REPEAT`).
//! * **Spacing**: Poisson or even (`1/rate` at the current rate). Poisson arrivals of a rate
//!   that changes (a sine, a ramp) are a non-homogeneous Poisson process, drawn exactly by
//!   thinning (Lewis & Shedler, "Simulation of nonhomogeneous Poisson processes by thinning",
//!   Naval Research Logistics Quarterly 26(3), 1979): candidates at the pattern's highest rate,
//!   each kept with probability rate(t) / highest. (A gap drawn at the previous arrival's rate
//!   is not: at the foot of a steep rise it overshoots the rise, and the requests it skips are
//!   never sent.)
//! * **Costs** (`--cost`): `const:MS`, `uniform:A:B`, `exp:MEAN`, `lognormal:MU:SIGMA` (ms = e^N(μ, σ),
//!   seed 002's log-normal(3.7, 1)), drawn with `rand_distr`.
//!
//! Pure: no clock, no I/O; the generator that sends the requests lives elsewhere.

use std::time::Duration;

use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal};
use rand_pcg::Pcg64Mcg;

/// How the offered rate changes over time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pattern {
    Constant {
        rps: f64,
    },
    Sine {
        min: f64,
        max: f64,
        period: Duration,
    },
    Steps {
        start: f64,
        end: f64,
        step: f64,
        hold: Duration,
    },
    Burst {
        n: u32,
        gap: Duration,
        repeat: Duration,
    },
}

/// A request's cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cost {
    Const {
        ms: f64,
    },
    Uniform {
        low: f64,
        high: f64,
    },
    LogNormal {
        mu: f64,
        sigma: f64,
    },
    /// Exponential with this mean (the service of an M/M/1 queue).
    Exp {
        mean: f64,
    },
}

/// How arrivals are spaced at a given rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spacing {
    Poisson,
    Even,
}

/// One request of the trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrival {
    /// When it is to leave, from the start of the run.
    pub at: Duration,
    /// Its cost in milliseconds (`X-Lab-Cost`).
    pub cost_ms: f64,
    /// Which of the run's clients sends it.
    pub client: u32,
}

/// The most requests a schedule holds (a bound on memory: 10 million is 240 MB).
pub const MAX_ARRIVALS: usize = 10_000_000;

/// Costs drawn ahead for a closed loop, which takes them in order (and from the start again
/// past the last): 2^20 of them, 24 MiB.
pub const CLOSED_LOOP_COSTS: usize = 1 << 20;

fn positive(v: &str, what: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("{what} must be a positive number, not {v:?}")),
    }
}

fn duration(v: &str, what: &str) -> Result<Duration, String> {
    match humantime::parse_duration(v) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(format!("{what} must be a duration such as 10s, not {v:?}")),
    }
}

impl std::str::FromStr for Pattern {
    type Err = String;

    fn from_str(s: &str) -> Result<Pattern, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let form =
            "constant:RPS, sine:MIN-MAX:PERIOD, steps:START-END:STEP:HOLD or burst:N:GAP:REPEAT";
        let range = |r: &str| -> Result<(f64, f64), String> {
            let (a, b) = r
                .split_once('-')
                .ok_or_else(|| format!("{r:?} is not a range such as 40-100"))?;
            Ok((positive(a, "a rate")?, positive(b, "a rate")?))
        };
        match parts.as_slice() {
            // `const` as well, as a cost is written (`--cost const:MS`).
            ["constant" | "const", rps] => Ok(Pattern::Constant {
                rps: positive(rps, "the rate")?,
            }),
            ["sine", r, period] => {
                let (min, max) = range(r)?;
                if min > max {
                    return Err(format!("sine: {min} is above {max}"));
                }
                Ok(Pattern::Sine {
                    min,
                    max,
                    period: duration(period, "the period")?,
                })
            }
            ["steps", r, step, hold] => {
                let (start, end) = range(r)?;
                Ok(Pattern::Steps {
                    start,
                    end,
                    step: positive(step, "the step")?,
                    hold: duration(hold, "the hold")?,
                })
            }
            ["burst", n, gap, repeat] => Ok(Pattern::Burst {
                n: n.parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("burst: {n:?} is not a count of requests"))?,
                gap: humantime::parse_duration(gap)
                    .map_err(|_| format!("burst: {gap:?} is not a duration such as 100ms"))?,
                repeat: duration(repeat, "the repeat")?,
            }),
            _ => Err(format!("unknown pattern {s:?}: use {form}")),
        }
    }
}

impl std::str::FromStr for Cost {
    type Err = String;

    fn from_str(s: &str) -> Result<Cost, String> {
        let number = |v: &str| -> Result<f64, String> {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| format!("{v:?} is not a number"))
        };
        match s.split(':').collect::<Vec<_>>().as_slice() {
            ["const", ms] => {
                let ms = number(ms)?;
                if ms < 0.0 {
                    return Err("a cost is not negative".into());
                }
                Ok(Cost::Const { ms })
            }
            ["uniform", a, b] => {
                let (low, high) = (number(a)?, number(b)?);
                if !(0.0 <= low && low <= high) {
                    return Err(format!("uniform:{a}:{b}: want 0 <= A <= B"));
                }
                Ok(Cost::Uniform { low, high })
            }
            ["lognormal", mu, sigma] => {
                let (mu, sigma) = (number(mu)?, number(sigma)?);
                if !(sigma >= 0.0 && mu < 20.0) {
                    return Err(format!(
                        "lognormal:{mu}:{sigma}: want SIGMA >= 0 and MU < 20"
                    ));
                }
                Ok(Cost::LogNormal { mu, sigma })
            }
            ["exp", mean] => {
                let mean = number(mean)?;
                if mean <= 0.0 {
                    return Err(format!("exp:{mean}: the mean is above 0"));
                }
                Ok(Cost::Exp { mean })
            }
            _ => Err(format!(
                "unknown cost {s:?}: use const:MS, uniform:A:B, lognormal:MU:SIGMA or exp:MEAN"
            )),
        }
    }
}

impl Pattern {
    /// The offered rate at `t` (requests per second); for bursts, `None` (they are placed,
    /// not drawn).
    pub fn rate_at(&self, t: Duration) -> Option<f64> {
        let secs = t.as_secs_f64();
        match *self {
            Pattern::Constant { rps } => Some(rps),
            Pattern::Sine { min, max, period } => {
                let phase = secs / period.as_secs_f64() * std::f64::consts::TAU;
                Some(min + (max - min) * (1.0 - phase.cos()) / 2.0)
            }
            Pattern::Steps {
                start,
                end,
                step,
                hold,
            } => {
                let steps = (secs / hold.as_secs_f64()).floor();
                let rate = if end >= start {
                    (start + steps * step).min(end)
                } else {
                    (start - steps * step).max(end)
                };
                Some(rate)
            }
            Pattern::Burst { .. } => None,
        }
    }

    /// The highest rate the pattern reaches (for bursts, `None`).
    pub fn max_rate(&self) -> Option<f64> {
        match *self {
            Pattern::Constant { rps } => Some(rps),
            Pattern::Sine { max, .. } => Some(max),
            Pattern::Steps { start, end, .. } => Some(start.max(end)),
            Pattern::Burst { .. } => None,
        }
    }
}

impl Cost {
    /// A cost in milliseconds drawn from `rng`.
    pub fn draw(&self, rng: &mut Pcg64Mcg) -> f64 {
        match *self {
            Cost::Const { ms } => ms,
            Cost::Uniform { low, high } if high > low => rng.random_range(low..high),
            Cost::Uniform { low, .. } => low,
            Cost::LogNormal { mu, sigma } => LogNormal::new(mu, sigma)
                .map(|d| d.sample(rng))
                .unwrap_or(0.0),
            Cost::Exp { mean } => Exp::new(1.0 / mean).map(|d| d.sample(rng)).unwrap_or(mean),
        }
    }

    /// The mean cost in milliseconds.
    pub fn mean(&self) -> f64 {
        match *self {
            Cost::Const { ms } => ms,
            Cost::Uniform { low, high } => (low + high.max(low)) / 2.0,
            Cost::LogNormal { mu, sigma } => (mu + sigma * sigma / 2.0).exp(),
            Cost::Exp { mean } => mean,
        }
    }
}

/// The trace of a run: every request's time, cost and client, from `seed`. Bounded by
/// [`MAX_ARRIVALS`].
pub fn trace(
    pattern: Pattern,
    spacing: Spacing,
    length: Duration,
    cost: Cost,
    clients: u32,
    seed: u64,
) -> Vec<Arrival> {
    Arrivals::new(pattern, spacing, length, cost, clients, seed)
        .take(MAX_ARRIVALS)
        .collect()
}

/// A trace drawn one arrival at a time, without a bound on its size: what [`trace`] collects,
/// and what the simulator reads for runs of any length.
#[derive(Debug, Clone)]
pub struct Arrivals {
    pattern: Pattern,
    spacing: Spacing,
    end: f64,
    cost: Cost,
    clients: u32,
    rng: Pcg64Mcg,
    /// Seconds: the last arrival's time (rate patterns).
    t: f64,
    /// Even spacing's first arrival, at 0, is still due.
    first: bool,
    /// Bursts: the current burst's start and the next request's place in it.
    burst: (Duration, u32),
    done: bool,
}

impl Arrivals {
    pub fn new(
        pattern: Pattern,
        spacing: Spacing,
        length: Duration,
        cost: Cost,
        clients: u32,
        seed: u64,
    ) -> Arrivals {
        let end = length.as_secs_f64();
        Arrivals {
            pattern,
            spacing,
            end,
            cost,
            clients: clients.max(1),
            rng: Pcg64Mcg::seed_from_u64(seed),
            t: 0.0,
            // Even spacing starts at 0, so RATE for D seconds is exactly RATE × D requests;
            // Poisson arrivals start one random gap in.
            first: spacing == Spacing::Even && end > 0.0,
            burst: (Duration::ZERO, 0),
            done: false,
        }
    }

    fn arrival(&mut self, at: Duration) -> Arrival {
        let cost_ms = self.cost.draw(&mut self.rng);
        let client = self.rng.random_range(0..self.clients);
        Arrival {
            at,
            cost_ms,
            client,
        }
    }

    /// The next burst request's time, if the run has one left.
    fn next_in_burst(&mut self, n: u32, gap: Duration, repeat: Duration) -> Option<Duration> {
        let length = Duration::from_secs_f64(self.end);
        loop {
            let (start, i) = self.burst;
            if start >= length {
                return None;
            }
            let at = start + gap * i;
            if i < n && at < length {
                self.burst.1 += 1;
                return Some(at);
            }
            self.burst = (start + repeat, 0);
        }
    }
}

impl Iterator for Arrivals {
    type Item = Arrival;

    fn next(&mut self) -> Option<Arrival> {
        if self.done {
            return None;
        }
        if let Pattern::Burst { n, gap, repeat } = self.pattern {
            let at = self.next_in_burst(n, gap, repeat);
            self.done = at.is_none();
            return at.map(|at| self.arrival(at));
        }
        if std::mem::take(&mut self.first) {
            return Some(self.arrival(Duration::ZERO));
        }
        self.t = match (self.spacing, self.pattern) {
            (Spacing::Even, pattern) => self.t + 1.0 / self.rate_at(pattern, self.t),
            (Spacing::Poisson, Pattern::Constant { rps }) => self.t + self.gap(rps.max(MIN_RATE)),
            (Spacing::Poisson, pattern) => self.thinned(pattern),
        };
        if self.t >= self.end {
            self.done = true;
            return None;
        }
        Some(self.arrival(Duration::from_secs_f64(self.t)))
    }
}

/// The lowest rate a gap is drawn at (requests per second): a floor against dividing by 0.
const MIN_RATE: f64 = 1e-3;

impl Arrivals {
    /// `pattern`'s rate at `t` seconds, at least [`MIN_RATE`].
    fn rate_at(&self, pattern: Pattern, t: f64) -> f64 {
        pattern
            .rate_at(Duration::from_secs_f64(t))
            .unwrap_or(0.0)
            .max(MIN_RATE)
    }

    /// An exponential gap at `rate`, in seconds.
    fn gap(&mut self, rate: f64) -> f64 {
        Exp::new(rate)
            .map(|d| d.sample(&mut self.rng))
            .unwrap_or(1.0 / rate)
    }

    /// The next arrival's time after `self.t` by thinning (Lewis & Shedler 1979): candidates
    /// a Poisson process at the highest rate apart, each kept with probability rate(t) /
    /// highest; past the end, the end (no arrival).
    fn thinned(&mut self, pattern: Pattern) -> f64 {
        let max = pattern.max_rate().unwrap_or(MIN_RATE).max(MIN_RATE);
        let mut t = self.t;
        loop {
            t += self.gap(max);
            if t >= self.end {
                return t;
            }
            if self.rng.random::<f64>() * max < self.rate_at(pattern, t) {
                return t;
            }
        }
    }
}

/// `n` requests' costs from `seed` (at most [`MAX_ARRIVALS`]), for a closed-loop run, whose
/// users rather than a schedule say when requests leave: every arrival at 0, from client 0.
pub fn costs(cost: Cost, n: usize, seed: u64) -> Vec<Arrival> {
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    (0..n.min(MAX_ARRIVALS))
        .map(|_| Arrival {
            at: Duration::ZERO,
            cost_ms: cost.draw(&mut rng),
            client: 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_and_costs_parse_or_say_what_is_wrong() {
        assert_eq!(
            "constant:3000".parse::<Pattern>(),
            Ok(Pattern::Constant { rps: 3000.0 })
        );
        // As a cost is written (`const:MS`).
        assert_eq!(
            "const:10".parse::<Pattern>(),
            Ok(Pattern::Constant { rps: 10.0 })
        );
        assert_eq!(
            "sine:40-100:60s".parse::<Pattern>(),
            Ok(Pattern::Sine {
                min: 40.0,
                max: 100.0,
                period: Duration::from_secs(60)
            })
        );
        assert!("steps:200-3000:200:5s".parse::<Pattern>().is_ok());
        assert!("burst:10:100ms:1s".parse::<Pattern>().is_ok());
        for bad in [
            "",
            "constant:0",
            "constant:x",
            "sine:100-40:1s",
            "sine:40-100:0s",
            "square:1",
        ] {
            assert!(bad.parse::<Pattern>().is_err(), "{bad}");
        }
        assert_eq!(
            "lognormal:3.7:1".parse::<Cost>(),
            Ok(Cost::LogNormal {
                mu: 3.7,
                sigma: 1.0
            })
        );
        for bad in ["const:-1", "uniform:5:1", "lognormal:1:-1", "gamma:1:1"] {
            assert!(bad.parse::<Cost>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_trace_and_another_seed_another() {
        let make = |seed| {
            trace(
                "sine:40-100:10s".parse().unwrap(),
                Spacing::Poisson,
                Duration::from_secs(20),
                "lognormal:3.7:1".parse().unwrap(),
                50,
                seed,
            )
        };
        let (a, b, c) = (make(7), make(7), make(8));
        assert_eq!(a, b);
        assert_ne!(a, c);
        let lognormal = "lognormal:3.7:1".parse().unwrap();
        assert_eq!(costs(lognormal, 100, 7), costs(lognormal, 100, 7));
        assert_ne!(costs(lognormal, 100, 7), costs(lognormal, 100, 8));
        // About the mean rate (70/s) for 20 s.
        assert!((1100..1700).contains(&a.len()), "{}", a.len());
        assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
        assert!(a.iter().all(|r| r.client < 50 && r.cost_ms >= 0.0));
    }

    #[test]
    fn even_spacing_delivers_the_rate_exactly() {
        let t = trace(
            Pattern::Constant { rps: 3000.0 },
            Spacing::Even,
            Duration::from_secs(5),
            Cost::Const { ms: 1.0 },
            1,
            1,
        );
        // Floating-point gaps may drop the last one.
        assert!((14_999..=15_000).contains(&t.len()), "{}", t.len());
        assert_eq!(t[0].at, Duration::ZERO);
    }

    #[test]
    fn a_sine_wave_swings_between_its_bounds() {
        let p: Pattern = "sine:40-100:60s".parse().unwrap();
        assert_eq!(p.rate_at(Duration::ZERO), Some(40.0));
        assert_eq!(p.rate_at(Duration::from_secs(30)), Some(100.0));
        let s: Pattern = "steps:200-1000:200:5s".parse().unwrap();
        assert_eq!(s.rate_at(Duration::from_secs(12)), Some(600.0));
        assert_eq!(s.rate_at(Duration::from_secs(100)), Some(1000.0));
    }

    /// Arrivals of `pattern` in [from, to) seconds, and the integral of its rate there (a sum
    /// over millisecond steps), over `seeds` traces of `length`.
    fn counted(pattern: &str, length: u64, seeds: u64, windows: &[(f64, f64)]) -> Vec<(f64, f64)> {
        let p: Pattern = pattern.parse().unwrap();
        let mut counts = vec![0.0; windows.len()];
        for seed in 0..seeds {
            let t = trace(
                p,
                Spacing::Poisson,
                Duration::from_secs(length),
                Cost::Const { ms: 0.0 },
                1,
                seed,
            );
            for a in t {
                let at = a.at.as_secs_f64();
                for (k, (from, to)) in windows.iter().enumerate() {
                    counts[k] += f64::from(u8::from(*from <= at && at < *to));
                }
            }
        }
        windows
            .iter()
            .zip(counts)
            .map(|((from, to), n)| {
                let steps = ((to - from) * 1000.0).round() as u64;
                let integral: f64 = (0..steps)
                    .map(|i| {
                        let at = from + (i as f64 + 0.5) / 1000.0;
                        p.rate_at(Duration::from_secs_f64(at)).unwrap() / 1000.0
                    })
                    .sum();
                (n, integral * seeds as f64)
            })
            .collect()
    }

    #[test]
    fn poisson_arrivals_follow_the_rate_in_every_phase_of_a_sine() {
        // A deep sine (1 to 500 per second, period 4 s) over 100 periods: the arrivals in each
        // quarter of the phase, summed over the periods, against the integral of the rate.
        let quarters: Vec<(f64, f64)> = (0..100)
            .flat_map(|p| {
                (0..4).map(move |q| (4.0 * p as f64 + q as f64, 4.0 * p as f64 + q as f64 + 1.0))
            })
            .collect();
        let per_window = counted("sine:1-500:4s", 400, 1, &quarters);
        for q in 0..4 {
            let (n, expected): (f64, f64) = per_window
                .iter()
                .skip(q)
                .step_by(4)
                .fold((0.0, 0.0), |(a, b), (n, e)| (a + n, b + e));
            // A Poisson count: within 4 standard deviations.
            assert!(
                (n - expected).abs() < 4.0 * expected.sqrt(),
                "quarter {q}: {n} arrivals, {expected:.0} expected"
            );
        }
    }

    #[test]
    fn poisson_arrivals_follow_a_steep_ramp() {
        // 1 per second for a second, then 1000: a gap drawn at the first rate would overshoot
        // into the second step (by a second on average) and skip most of it.
        let windows = [(0.0, 1.0), (1.0, 2.0)];
        let per_window = counted("steps:1-1000:999:1s", 2, 20, &windows);
        for ((n, expected), w) in per_window.iter().zip(windows) {
            assert!(
                (n - expected).abs() < 4.0 * expected.sqrt().max(1.0),
                "{w:?}: {n} arrivals, {expected:.0} expected"
            );
        }
    }

    #[test]
    fn bursts_are_placed() {
        let t = trace(
            "burst:10:100ms:1s".parse().unwrap(),
            Spacing::Even,
            Duration::from_secs(3),
            Cost::Const { ms: 0.0 },
            1,
            1,
        );
        assert_eq!(t.len(), 30);
        assert_eq!(t[1].at, Duration::from_millis(100));
        assert_eq!(t[10].at, Duration::from_secs(1));
    }
}
