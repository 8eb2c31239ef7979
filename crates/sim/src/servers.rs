//! The simulated backends: the lab backend's capacity model in virtual time.
//!
//! * `cpu` (and `burn`): `workers` slots behind a FIFO queue; a request holds a slot until
//!   the lab's own [`finish_after`] says its cost is done at `speed × f(t)`.
//! * `io`: processor sharing: the requests in service divide `workers × speed × f(t)`
//!   equally, each getting at most `speed`.
//! * `mixed`: half the cost on the slots, then half on the bandwidth.
//! * Beyond `max_queue` waiting (for a slot, or beyond `workers` on the bandwidth): 503.
//! * The utilization a backend reports is the lab meter's: the busy share of the slots
//!   (weighted by the capacity left, `∫ f`) and of the bandwidth, plus the antagonist's own
//!   share `1 − f` on the resource the mode uses, over a trailing window.
//!
//! A [`Server`] only keeps its state; the cluster owns the clock and schedules the events a
//! server asks for.

use std::collections::VecDeque;
use std::time::Duration;

use lab::backend::{Antagonist, Faults, Mode, finish_after};

use crate::events::Time;

/// A request's place at a server: the request's slab index and its attempt's number.
pub type Job = (u32, u32);

/// Where a server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    Serving,
    /// `stall_after` passed: nothing is answered again; connections stay open.
    Stalled,
    /// Its `die_after`-th request arrived: the listener is closed; it dies once that request
    /// is answered.
    Dying,
    Dead,
}

/// What the server does with a job that arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// In service on a slot until this time.
    Slot(Time),
    /// Waiting for a slot.
    Queued,
    /// In service on the bandwidth (the caller reschedules the server's wake-up).
    Shared,
    /// The queue is full: 503 at once.
    Refused,
}

/// One backend.
///
/// Laid out by use (`repr(C)`, starting a cache line): what every request reads and writes —
/// the slot meter, the slots, the queue's counts, the request count and the flags — in the
/// first 64 bytes; the queues' headers in the second; the bandwidth's clock, the fault knobs
/// and the antagonist after. A request at a `cpu` server without faults reads the first two
/// lines only; rustc's own order spread those fields over the whole 240 bytes. (With 1,000
/// servers the simulator's working set outgrows the L2 cache, so each line read is a miss.)
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub struct Server {
    meter: Meter,
    speed: f64,
    pub received: u64,
    waiting: usize,
    max_queue: usize,
    busy: u32,
    slots: u32,
    pub mode: Mode,
    pub life: Life,
    /// In an outage (`[sim] outages`).
    pub out: bool,
    /// No antagonist: the capacity is whole at all times.
    steady: bool,
    /// No fault knob: no failure rate, no deadline, no stall, no death.
    pub plain: bool,
    /// Waiting for a slot, with each job's work; cancelled jobs stay until they reach the
    /// front (`waiting` counts the live ones).
    queue: VecDeque<(Job, u64)>,
    /// Jobs on the bandwidth and their work left (ns at speed 1).
    shared: Vec<(Job, f64)>,
    shared_since: Time,
    /// The number of the server's latest wake-up (older ones are stale).
    pub wake: u64,
    /// ∫ bandwidth in use / bandwidth dt, in seconds (the lab meter's).
    net: f64,
    pub fail_rate: f64,
    pub fail_status: u16,
    /// Its request deadline, ns: a request not done this long after it arrived is answered
    /// 503 and its work goes on (`Faults::deadline`).
    pub deadline: Option<Time>,
    pub stall_after: Option<u64>,
    pub die_after: Option<u64>,
    /// How many outages are under way.
    pub outages: u32,
    antagonist: Option<Antagonist>,
    /// Probes' work waiting for a slot ([`Server::admit_probe`]): served before the queue,
    /// never refused, not requests (not counted as waiting, nor in the queue's fill).
    probe_queue: VecDeque<(Job, u64)>,
}

/// The cumulative busy integral of a server's slots (the lab meter's, in virtual time).
#[derive(Debug, Clone, Default)]
struct Meter {
    at: Time,
    /// ∫ busy slots / slots × f dt, in seconds.
    cpu: f64,
}

/// One reading of a server's integrals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    pub at: Time,
    cpu: f64,
    net: f64,
    /// The queue's fill at that moment (`mem` in the lab's `/load`).
    fill: f64,
}

fn dur(t: Time) -> Duration {
    Duration::from_nanos(t)
}

impl Server {
    pub fn new(
        mode: Mode,
        slots: u32,
        speed: f64,
        max_queue: usize,
        antagonist: Option<Antagonist>,
        faults: &Faults,
    ) -> Server {
        Server {
            meter: Meter::default(),
            speed: if speed.is_finite() && speed > 0.0 {
                speed
            } else {
                1e-6
            },
            received: 0,
            waiting: 0,
            max_queue,
            busy: 0,
            slots: slots.max(1),
            mode,
            life: Life::Serving,
            out: false,
            steady: antagonist.is_none(),
            plain: faults.fail_rate <= 0.0
                && faults.deadline.is_none()
                && faults.stall_after.is_none()
                && faults.die_after.is_none(),
            queue: VecDeque::new(),
            shared: Vec::new(),
            shared_since: 0,
            wake: 0,
            net: 0.0,
            fail_rate: faults.fail_rate,
            fail_status: faults.fail_status,
            deadline: faults
                .deadline
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            stall_after: faults.stall_after,
            die_after: faults.die_after,
            outages: 0,
            antagonist,
            probe_queue: VecDeque::new(),
        }
    }

    /// Whether it accepts connections.
    pub fn listening(&self) -> bool {
        !self.out && matches!(self.life, Life::Serving | Life::Stalled)
    }

    /// Whether it answers anything (its `/load` included).
    pub fn answers(&self) -> bool {
        !self.out && matches!(self.life, Life::Serving | Life::Dying)
    }

    /// The end of `work` started on a slot at `now`.
    fn slot_end(&self, now: Time, work: u64) -> Time {
        if self.steady {
            // What finish_after gives without an antagonist, without its conversions.
            return now.saturating_add((work as f64 / self.speed).ceil() as u64);
        }
        let t = finish_after(dur(now), dur(work), self.speed, self.antagonist);
        now.saturating_add(u64::try_from(t.as_nanos()).unwrap_or(u64::MAX))
    }

    fn factor(&self, now: Time) -> f64 {
        self.antagonist.map_or(1.0, |a| a.factor_at(dur(now)))
    }

    /// ∫ f over [a, b], in seconds.
    fn capacity_left(&self, a: Time, b: Time) -> f64 {
        if self.steady {
            return b.saturating_sub(a) as f64 / 1e9;
        }
        match self.antagonist {
            Some(x) => x.integral(dur(a), dur(b)),
            None => b.saturating_sub(a) as f64 / 1e9,
        }
    }

    /// Advances the meter to `now` with the levels held since its last change.
    fn meter_to(&mut self, now: Time) {
        let from = self.meter.at;
        if now <= from {
            return;
        }
        let slots = f64::from(self.busy) / f64::from(self.slots);
        if self.busy > 0 {
            self.meter.cpu += slots * self.capacity_left(from, now);
        }
        // (Only `io` and `mixed` put jobs on the bandwidth: a `cpu` server need not read the
        // bandwidth's vector, on another cache line.)
        if self.mode.uses_bandwidth() && !self.shared.is_empty() {
            // Until the next wake-up the factor is constant (the server wakes at its changes).
            // The bandwidth in use: n jobs at min(W·speed·f/n, speed) over W·speed.
            let n = self.shared.len() as f64;
            let share = (n / f64::from(self.slots)).min(self.factor(from));
            self.net += share * (now - from) as f64 / 1e9;
        }
        self.meter.at = now;
    }

    /// Job arrives with `work` (ns at speed 1) on the slots (`cpu`, `burn`, and the first half
    /// of `mixed`) or on the bandwidth (`io`, the second half of `mixed`).
    pub fn admit(&mut self, now: Time, job: Job, work: u64, on_slots: bool) -> Admit {
        self.meter_to(now);
        if on_slots {
            if self.busy < self.slots {
                self.busy += 1;
                return Admit::Slot(self.slot_end(now, work));
            }
            if self.waiting >= self.max_queue {
                return Admit::Refused;
            }
            self.waiting += 1;
            self.queue.push_back((job, work));
            Admit::Queued
        } else {
            let limit = (self.slots as usize).saturating_add(self.max_queue);
            if self.shared.len() >= limit {
                return Admit::Refused;
            }
            self.advance_shared(now);
            self.shared.push((job, work as f64));
            Admit::Shared
        }
    }

    /// A probe's `work` arrives (ns at speed 1): it takes capacity as a request does — a free
    /// slot, else the next one to free ahead of the queue, or a share of the bandwidth — but
    /// no place in the queue: a server answers a probe from memory and its few microseconds
    /// of CPU are interleaved with the requests', never refused for a full queue.
    pub fn admit_probe(&mut self, now: Time, job: Job, work: u64) -> Admit {
        self.meter_to(now);
        if self.mode.uses_slots() {
            if self.busy < self.slots {
                self.busy += 1;
                return Admit::Slot(self.slot_end(now, work));
            }
            self.probe_queue.push_back((job, work));
            Admit::Queued
        } else {
            self.advance_shared(now);
            self.shared.push((job, work as f64));
            Admit::Shared
        }
    }

    /// A slot's job ended (or was cancelled) at `now`: the next probe's work, else the next
    /// live waiting job starts on it, `Some((job, end))`. `live` says whether a queued job is
    /// still wanted.
    pub fn free_slot(&mut self, now: Time, live: impl Fn(Job) -> bool) -> Option<(Job, Time)> {
        self.meter_to(now);
        if let Some((job, work)) = self.probe_queue.pop_front() {
            return Some((job, self.slot_end(now, work)));
        }
        while let Some((job, work)) = self.queue.pop_front() {
            if live(job) {
                self.waiting -= 1;
                return Some((job, self.slot_end(now, work)));
            }
        }
        self.busy = self.busy.saturating_sub(1);
        None
    }

    /// A queued job was cancelled: it no longer counts as waiting (it is skipped later).
    pub fn forget_queued(&mut self) {
        self.waiting = self.waiting.saturating_sub(1);
    }

    /// Removes a job from the bandwidth (cancelled); whether it was there.
    pub fn remove_shared(&mut self, now: Time, job: Job) -> bool {
        self.meter_to(now);
        self.advance_shared(now);
        match self.shared.iter().position(|(j, _)| *j == job) {
            Some(i) => {
                self.shared.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// The rate each job on the bandwidth gets at `now` (ns of work per ns): an equal share
    /// of what the antagonist leaves of the bandwidth, at most `speed` (the lab's driver).
    fn shared_rate(&self, now: Time) -> f64 {
        let n = self.shared.len().max(1) as f64;
        (self.speed * f64::from(self.slots) * self.factor(now) / n).min(self.speed)
    }

    /// Moves every job on the bandwidth forward to `now`.
    fn advance_shared(&mut self, now: Time) {
        if now > self.shared_since && !self.shared.is_empty() {
            let done = self.shared_rate(self.shared_since) * (now - self.shared_since) as f64;
            for (_, left) in &mut self.shared {
                *left -= done;
            }
        }
        self.shared_since = now;
    }

    /// At a wake-up: the jobs on the bandwidth that are done (into `done`), and when to wake
    /// next (`None`: nothing on the bandwidth).
    pub fn wake_shared(&mut self, now: Time, done: &mut Vec<Job>) -> Option<Time> {
        self.meter_to(now);
        self.advance_shared(now);
        // Half a nanosecond of work left is done (times are whole nanoseconds).
        let mut i = 0;
        while i < self.shared.len() {
            if self.shared[i].1 <= 0.5 {
                done.push(self.shared.swap_remove(i).0);
            } else {
                i += 1;
            }
        }
        self.next_wake(now)
    }

    /// When the next job on the bandwidth ends, or the antagonist's factor changes.
    pub fn next_wake(&self, now: Time) -> Option<Time> {
        let least = self
            .shared
            .iter()
            .map(|(_, left)| *left)
            .fold(f64::INFINITY, f64::min);
        if !least.is_finite() {
            return None;
        }
        let rate = self.shared_rate(now).max(1e-12);
        let end = now.saturating_add((least / rate).ceil().min(u64::MAX as f64 / 2.0) as u64);
        let change = self.antagonist.map_or(u64::MAX, |a| {
            u64::try_from(a.next_change_after(dur(now)).as_nanos()).unwrap_or(u64::MAX)
        });
        Some(end.min(change).max(now + 1))
    }

    /// Every job in service or waiting, dropped (the server died or went out): the slots and
    /// the bandwidth empty.
    pub fn drop_all(&mut self, now: Time, into: &mut Vec<Job>) {
        self.meter_to(now);
        into.extend(self.queue.drain(..).map(|(j, _)| j));
        into.extend(self.probe_queue.drain(..).map(|(j, _)| j));
        into.extend(self.shared.drain(..).map(|(j, _)| j));
        self.waiting = 0;
        self.busy = 0;
        self.wake += 1;
    }

    /// Jobs at the server: on a slot, waiting for one, or on the bandwidth (probes' work
    /// included).
    pub fn jobs(&self) -> u32 {
        let jobs = self.busy as usize + self.waiting + self.probe_queue.len() + self.shared.len();
        u32::try_from(jobs).unwrap_or(u32::MAX)
    }

    /// The integrals now.
    pub fn read(&mut self, now: Time) -> Reading {
        self.meter_to(now);
        let waiting = self.waiting + self.shared.len().saturating_sub(self.slots as usize);
        Reading {
            at: now,
            cpu: self.meter.cpu,
            net: self.net,
            fill: (waiting as f64 / self.max_queue.max(1) as f64).clamp(0.0, 1.0),
        }
    }

    /// (cpu, mem, net) over `[then, now]`, as the lab backend's `/load` reports them.
    pub fn utilization(&self, then: &Reading, now: &Reading) -> (f64, f64, f64) {
        let window = now.at.saturating_sub(then.at) as f64 / 1e9;
        if window <= 0.0 {
            return (0.0, now.fill, 0.0);
        }
        let taken = 1.0 - self.capacity_left(then.at, now.at) / window;
        let fraction = |x: f64| {
            if x.is_finite() {
                x.clamp(0.0, 1.0)
            } else {
                0.0
            }
        };
        let cpu = (now.cpu - then.cpu) / window + if self.mode.uses_slots() { taken } else { 0.0 };
        let net = (now.net - then.net) / window
            + if self.mode.uses_bandwidth() {
                taken
            } else {
                0.0
            };
        (fraction(cpu), now.fill, fraction(net))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn cpu(slots: u32, speed: f64) -> Server {
        Server::new(Mode::Cpu, slots, speed, 10, None, &Faults::default())
    }

    #[test]
    fn what_every_request_reads_is_on_the_first_line_the_queues_on_the_second() {
        use std::mem::{align_of, offset_of};
        assert_eq!(align_of::<Server>(), 64);
        for end in [
            offset_of!(Server, meter) + std::mem::size_of::<Meter>(),
            offset_of!(Server, received) + 8,
            offset_of!(Server, max_queue) + 8,
            offset_of!(Server, slots) + 4,
            offset_of!(Server, plain) + 1,
        ] {
            assert!(end <= 64, "{end}");
        }
        assert_eq!(offset_of!(Server, queue), 64);
        assert!(offset_of!(Server, shared) + std::mem::size_of::<Vec<(Job, f64)>>() <= 128);
    }

    #[test]
    fn slots_serve_in_turn_and_refuse_beyond_the_queue() {
        let mut s = Server::new(Mode::Cpu, 1, 0.5, 1, None, &Faults::default());
        assert_eq!(s.admit(0, (1, 1), 10 * MS, true), Admit::Slot(20 * MS));
        assert_eq!(s.admit(0, (2, 2), 10 * MS, true), Admit::Queued);
        assert_eq!(s.admit(0, (3, 3), 10 * MS, true), Admit::Refused);
        assert_eq!(s.free_slot(20 * MS, |_| true), Some(((2, 2), 40 * MS)));
        assert_eq!(s.free_slot(40 * MS, |_| true), None);
        // Busy 40 ms out of 40: a utilization of 1 over the window, then 0.
        let (a, b) = (
            Reading {
                at: 0,
                cpu: 0.0,
                net: 0.0,
                fill: 0.0,
            },
            s.read(40 * MS),
        );
        assert!((s.utilization(&a, &b).0 - 1.0).abs() < 1e-9);
        let c = s.read(80 * MS);
        assert!((s.utilization(&a, &c).0 - 0.5).abs() < 1e-9);
    }

    #[test]
    fn cancelled_queued_jobs_are_skipped() {
        let mut s = cpu(1, 1.0);
        assert_eq!(s.admit(0, (1, 1), MS, true), Admit::Slot(MS));
        assert_eq!(s.admit(0, (2, 2), MS, true), Admit::Queued);
        assert_eq!(s.admit(0, (3, 3), MS, true), Admit::Queued);
        s.forget_queued();
        assert_eq!(s.free_slot(MS, |j| j != (2, 2)), Some(((3, 3), 2 * MS)));
    }

    #[test]
    fn a_probes_work_takes_the_next_slot_but_no_place_in_the_queue() {
        // One slot, a queue of one: a request on the slot, one waiting; a probe's work is not
        // refused (the queue is full), starts when the slot frees, before the waiting request,
        // and is not counted as waiting.
        let mut s = Server::new(Mode::Cpu, 1, 1.0, 1, None, &Faults::default());
        assert_eq!(s.admit(0, (1, 1), 10 * MS, true), Admit::Slot(10 * MS));
        assert_eq!(s.admit(0, (2, 2), 10 * MS, true), Admit::Queued);
        assert_eq!(s.admit_probe(0, (9, 9), MS / 50), Admit::Queued);
        assert_eq!(s.jobs(), 3);
        assert_eq!(s.read(0).fill, 1.0, "the queue holds one request");
        assert_eq!(
            s.free_slot(10 * MS, |_| true),
            Some(((9, 9), 10 * MS + MS / 50))
        );
        assert_eq!(
            s.free_slot(10 * MS + MS / 50, |_| true),
            Some(((2, 2), 20 * MS + MS / 50))
        );
        // On an idle server it takes a slot at once.
        let mut idle = cpu(1, 0.5);
        assert_eq!(idle.admit_probe(0, (9, 9), MS), Admit::Slot(2 * MS));
    }

    #[test]
    fn processor_sharing_divides_the_bandwidth() {
        // Two slots' worth of bandwidth, three jobs of 30 ms: each gets 2/3, so all end at 45 ms.
        let mut s = Server::new(Mode::Io, 2, 1.0, 10, None, &Faults::default());
        for j in 0..3 {
            assert_eq!(s.admit(0, (j, j), 30 * MS, false), Admit::Shared);
        }
        let wake = s.next_wake(0).unwrap();
        assert_eq!(wake, 45 * MS);
        let mut done = Vec::new();
        assert_eq!(s.wake_shared(wake, &mut done), None);
        assert_eq!(done.len(), 3);
        // One job alone gets only its own speed: 30 ms.
        assert_eq!(s.admit(wake, (9, 9), 30 * MS, false), Admit::Shared);
        assert_eq!(s.next_wake(wake), Some(wake + 30 * MS));
    }

    #[test]
    fn an_antagonist_slows_service_and_shows_in_the_report() {
        let a: Antagonist = "0.5:1s:2s".parse().unwrap();
        let mut s = Server::new(Mode::Cpu, 1, 1.0, 10, Some(a), &Faults::default());
        let start = s.read(0);
        // 100 ms of work at half speed: 200 ms.
        assert_eq!(s.admit(0, (1, 1), 100 * MS, true), Admit::Slot(200 * MS));
        s.free_slot(200 * MS, |_| true);
        let end = s.read(1000 * MS);
        // Over the first second: the antagonist holds half; the job 0.5 × 0.2 s of the rest.
        let (cpu, _, net) = s.utilization(&start, &end);
        assert!((cpu - 0.6).abs() < 1e-9, "{cpu}");
        assert_eq!(net, 0.0);
    }
}
