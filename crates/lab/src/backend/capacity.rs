//! What a lab backend emulates: its [`Capacity`] (how it serves) and its [`Faults`] (how it
//! fails).

use std::time::{Duration, SystemTime};

use super::antagonist::Antagonist;
use super::footprint::Footprint;
use crate::schedule::Cost;

/// How a request uses the backend's capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// A request holds one of `workers` slots for `cost / speed` (FIFO queue): cores.
    #[default]
    Cpu,
    /// Requests in service share a bandwidth of `workers × speed` equally (processor sharing),
    /// each getting at most `speed`: a disk or a network link.
    Io,
    /// Half the cost on the slots, then the other half on the shared bandwidth.
    Mixed,
    /// As `Cpu`, but the slot's time is spent spinning on a real thread: real CPU contention.
    Burn,
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "cpu" => Ok(Mode::Cpu),
            "io" => Ok(Mode::Io),
            "mixed" => Ok(Mode::Mixed),
            "burn" => Ok(Mode::Burn),
            _ => Err(format!("{s:?}: the mode is cpu, io, mixed or burn")),
        }
    }
}

impl Mode {
    /// Whether requests use the slots (and the antagonist shows in `cpu`).
    pub fn uses_slots(self) -> bool {
        self != Mode::Io
    }

    /// Whether requests use the shared bandwidth (and the antagonist shows in `net`).
    pub fn uses_bandwidth(self) -> bool {
        matches!(self, Mode::Io | Mode::Mixed)
    }
}

/// The emulated capacity of a backend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capacity {
    /// Service slots (like cores), or in io mode the number of requests that can each have
    /// full speed of the shared bandwidth.
    pub workers: u32,
    /// Relative speed: a request of cost `c` takes `c / speed` alone.
    pub speed: f64,
    /// Requests that may wait beyond `workers`; beyond that, 503.
    pub max_queue: usize,
    /// How requests use the capacity.
    pub mode: Mode,
    /// The cost of a request that names none, drawn per request.
    pub cost: Cost,
    /// Background load that takes capacity away on a rhythm.
    pub antagonist: Option<Antagonist>,
    /// The antagonist's clock zero (every backend of a run gets the same); `None`: the start.
    pub epoch: Option<SystemTime>,
    /// Seed of the backend's draws: costs from `cost`, failures of [`Faults::fail_rate`].
    pub seed: u64,
    /// Static memory and network capacities and a request's footprint on them (what `mem`
    /// and `net` report); none by default.
    pub footprint: Footprint,
}

impl Default for Capacity {
    /// 4 cpu slots of speed 1, a queue of 1000, cost 0, no antagonist, seed 1, no footprint.
    fn default() -> Capacity {
        Capacity {
            workers: 4,
            speed: 1.0,
            max_queue: 1000,
            mode: Mode::Cpu,
            cost: Cost::Const { ms: 0.0 },
            antagonist: None,
            epoch: None,
            seed: 1,
            footprint: Footprint::default(),
        }
    }
}

impl Capacity {
    /// `speed`, made usable: a positive finite number.
    pub(crate) fn speed(&self) -> f64 {
        if self.speed.is_finite() && self.speed > 0.0 {
            self.speed.max(1e-6)
        } else {
            1e-6
        }
    }
}

/// How a backend fails. Requests count as in [`super::Backend::requests`]: every one received,
/// except `GET /load` on a backend with a capacity (the monitoring path, never faulted).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    /// Each request is answered [`Faults::fail_status`] at once with this probability (0..=1).
    pub fail_rate: f64,
    /// The status of a drawn failure (500 unless set: 503 is an unavailable application).
    pub fail_status: u16,
    /// A request not answered this long after it arrived is answered 503 then, and its work
    /// goes on to its end, holding its place in the queue or its slot: the request timeout of
    /// an application server that cannot stop a handler (Go's `http.TimeoutHandler`, a
    /// thread-per-request server behind its own front proxy). The work of a request whose
    /// client leaves goes on too. `None`: no deadline.
    pub deadline: Option<Duration>,
    /// After this many requests the backend stops answering: later requests, those in
    /// progress and `GET /load` hang, their connections open.
    pub stall_after: Option<u64>,
    /// After this many requests the backend dies: the listener closes when the last one
    /// arrives, and every connection is dropped once it is answered.
    pub die_after: Option<u64>,
}

impl Default for Faults {
    /// No fault: no failures (500 when a rate is set), no deadline, no stall, no death.
    fn default() -> Faults {
        Faults {
            fail_rate: 0.0,
            fail_status: 500,
            deadline: None,
            stall_after: None,
            die_after: None,
        }
    }
}

/// The longest cost a request may have: an hour.
pub(crate) const MAX_COST_MS: f64 = 3_600_000.0;

/// A cost in milliseconds as a duration, within `[0, MAX_COST_MS]`.
pub(crate) fn cost_duration(ms: f64) -> Duration {
    if ms.is_nan() {
        return Duration::ZERO;
    }
    Duration::from_secs_f64(ms.clamp(0.0, MAX_COST_MS) / 1000.0)
}
