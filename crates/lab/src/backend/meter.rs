//! The backend's utilization, as an agent on a real machine would report it: averaged over a
//! trailing window, whoever reads it and however often.
//!
//! One owner keeps a cumulative busy integral for each resource, advanced at every change of
//! its level (a slot taken or freed; the io driver's new rate). A sampler records the integrals
//! every [`SAMPLE_EVERY`] in a small ring; a report is the difference between now and the
//! sample about [`WINDOW`] ago, over the time between them. Reading mutates nothing.
//!
//! With an antagonist of factor `f`, background load holds `1 − f` of the resource, and the
//! backend's own work fills `f × busy` of it, so the reported figure is the average of
//! `(1 − f(t)) + f(t) × busy(t)`: the `f × busy` part is integrated as it happens, the `1 − f`
//! part exactly over the window at read time ([`Antagonist::integral`]).
//!
//! For the [`super::footprint`] it also integrates the requests held (in flight at the
//! backend) and counts the answers, so `mem` and `net` are averages over the same window.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use super::antagonist::{Antagonist, Clock};

/// The window the reported utilization is averaged over.
pub const WINDOW: Duration = Duration::from_secs(1);

/// How often the integrals are sampled: the window's resolution.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// The integrals at a time: seconds of full use so far (the backend's own work only).
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Duration,
    cpu: f64,
    net: f64,
    /// ∫ requests held dt, request-seconds.
    held: f64,
    /// Requests answered 200 so far.
    answers: u64,
}

/// What the meter reports over its trailing window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Use {
    /// The slots' busy share, the antagonist's included (if it shows there).
    pub(crate) cpu: f64,
    /// The shared bandwidth's busy share, the antagonist's included (if it shows there).
    pub(crate) net: f64,
    /// Requests in flight at the backend, on average.
    pub(crate) held: f64,
    /// Answers (200) a second.
    pub(crate) answers: f64,
}

/// The levels now and the integrals up to `last`.
#[derive(Debug)]
struct Level {
    /// Slots busy.
    slots: u32,
    /// Share of the whole bandwidth (`workers × speed`) in use, the antagonist's factor
    /// included (it is the driver's rate).
    bandwidth: f64,
    /// Requests in flight at the backend (waiting, on a slot or on the bandwidth).
    held: u32,
    /// The integrals up to `integrals.at`.
    integrals: Sample,
}

/// The utilization meter of one backend.
#[derive(Debug)]
pub(crate) struct Meter {
    clock: Clock,
    antagonist: Option<Antagonist>,
    workers: f64,
    /// Whether the antagonist's share shows in `cpu` (the mode uses the slots) and in `net`
    /// (the mode uses the bandwidth).
    antagonist_on_cpu: bool,
    antagonist_on_net: bool,
    level: Mutex<Level>,
    ring: Mutex<VecDeque<Sample>>,
}

/// Samples kept: one window and a spare.
const RING: usize = (WINDOW.as_millis() / SAMPLE_EVERY.as_millis()) as usize + 2;

impl Meter {
    pub(crate) fn new(
        clock: Clock,
        antagonist: Option<Antagonist>,
        workers: u32,
        on_cpu: bool,
        on_net: bool,
    ) -> Meter {
        let start = Sample {
            at: clock.now(),
            cpu: 0.0,
            net: 0.0,
            held: 0.0,
            answers: 0,
        };
        Meter {
            clock,
            antagonist,
            workers: f64::from(workers.max(1)),
            antagonist_on_cpu: on_cpu,
            antagonist_on_net: on_net,
            level: Mutex::new(Level {
                slots: 0,
                bandwidth: 0.0,
                held: 0,
                integrals: start,
            }),
            ring: Mutex::new(VecDeque::from([start])),
        }
    }

    /// `∫ f` over `[a, b]`, in seconds.
    fn capacity_left(&self, a: Duration, b: Duration) -> f64 {
        match self.antagonist {
            Some(x) => x.integral(a, b),
            None => b.saturating_sub(a).as_secs_f64(),
        }
    }

    /// The integrals at `now`, with the current levels held since the last change.
    fn integrals(&self, level: &Level, now: Duration) -> Sample {
        let from = level.integrals;
        let now = now.max(from.at);
        Sample {
            at: now,
            cpu: from.cpu
                + f64::from(level.slots) / self.workers * self.capacity_left(from.at, now),
            net: from.net + level.bandwidth * (now - from.at).as_secs_f64(),
            held: from.held + f64::from(level.held) * (now - from.at).as_secs_f64(),
            answers: from.answers,
        }
    }

    fn change(&self, apply: impl FnOnce(&mut Level)) {
        let mut level = self.level.lock().unwrap_or_else(|e| e.into_inner());
        level.integrals = self.integrals(&level, self.clock.now());
        apply(&mut level);
    }

    /// A slot was taken (`+1`) or freed (`-1`).
    fn slots(&self, taken: bool) {
        self.change(|l| {
            l.slots = if taken {
                l.slots.saturating_add(1)
            } else {
                l.slots.saturating_sub(1)
            };
        });
    }

    /// A request came in (`true`) or left (`false`) the backend's work.
    fn held(&self, came: bool) {
        self.change(|l| {
            l.held = if came {
                l.held.saturating_add(1)
            } else {
                l.held.saturating_sub(1)
            };
        });
    }

    /// A request was answered 200 (its bytes crossed the link).
    pub(crate) fn answered(&self) {
        self.change(|l| l.integrals.answers += 1);
    }

    /// The io driver's new total rate, as a share of the whole bandwidth.
    pub(crate) fn set_bandwidth(&self, share: f64) {
        self.change(|l| l.bandwidth = share.clamp(0.0, 1.0));
    }

    /// Records the integrals now (the sampler's tick).
    pub(crate) fn sample(&self) {
        let now = {
            let level = self.level.lock().unwrap_or_else(|e| e.into_inner());
            self.integrals(&level, self.clock.now())
        };
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        ring.push_back(now);
        while ring.len() > RING {
            ring.pop_front();
        }
    }

    /// The use averaged over the trailing window (shorter just after the start).
    pub(crate) fn utilization(&self) -> Use {
        let (now, slots, bandwidth, held) = {
            let level = self.level.lock().unwrap_or_else(|e| e.into_inner());
            (
                self.integrals(&level, self.clock.now()),
                level.slots,
                level.bandwidth,
                level.held,
            )
        };
        let base = {
            let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
            ring.iter()
                .rev()
                .find(|s| s.at + WINDOW <= now.at)
                .or(ring.front())
                .copied()
                .unwrap_or(now)
        };
        let window = now.at.saturating_sub(base.at).as_secs_f64();
        let (cpu, net, taken, held, answers) = if window < 1e-3 {
            // Just started: the levels now.
            let f = self.antagonist.map_or(1.0, |a| a.factor_at(now.at));
            let cpu = f * f64::from(slots) / self.workers;
            (cpu, bandwidth, 1.0 - f, f64::from(held), 0.0)
        } else {
            (
                (now.cpu - base.cpu) / window,
                (now.net - base.net) / window,
                1.0 - self.capacity_left(base.at, now.at) / window,
                (now.held - base.held) / window,
                now.answers.saturating_sub(base.answers) as f64 / window,
            )
        };
        let fraction = |x: f64| {
            if x.is_finite() {
                x.clamp(0.0, 1.0)
            } else {
                0.0
            }
        };
        let cpu = cpu + if self.antagonist_on_cpu { taken } else { 0.0 };
        let net = net + if self.antagonist_on_net { taken } else { 0.0 };
        Use {
            cpu: fraction(cpu),
            net: fraction(net),
            held: held.max(0.0),
            answers: answers.max(0.0),
        }
    }
}

/// A slot in use, counted in the meter until dropped (cancelled requests included).
#[derive(Debug)]
pub(crate) struct SlotInUse(std::sync::Arc<Meter>);

impl SlotInUse {
    pub(crate) fn new(meter: std::sync::Arc<Meter>) -> SlotInUse {
        meter.slots(true);
        SlotInUse(meter)
    }
}

impl Drop for SlotInUse {
    fn drop(&mut self) {
        self.0.slots(false);
    }
}

/// A request in flight at the backend (waiting, on a slot or on the bandwidth), counted in
/// the meter until dropped (cancelled requests included).
#[derive(Debug)]
pub(crate) struct Held<'a>(&'a Meter);

impl Held<'_> {
    pub(crate) fn new(meter: &Meter) -> Held<'_> {
        meter.held(true);
        Held(meter)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.held(false);
    }
}
