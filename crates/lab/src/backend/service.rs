//! How a backend with a capacity serves a request's cost, in each [`Mode`]:
//!
//! * **Slots** (`cpu`, `burn`): `workers` slots behind a FIFO queue (tokio's semaphore is
//!   fair); a request holds one until [`finish_after`] says its cost is done at `speed × f(t)`
//!   (sleeping, or in `burn` spinning a blocking thread for that wall time).
//! * **Bandwidth** (`io`): processor sharing (Kleinrock's PS queue): the requests in service
//!   divide a rate of `workers × speed × f(t)` equally, each getting at most `speed`. One
//!   driver task owns every job's remaining work; it sleeps until the next completion, arrival
//!   or change of the antagonist's factor, then advances every job by the rate it had, answers
//!   the finished ones and sets the new rate (to the timer's millisecond).
//! * `mixed`: half the cost on the slots, then the other half on the bandwidth.
//!
//! A request beyond the queue (`max_queue` waiting for a slot, or `workers + max_queue` in
//! service on the bandwidth) is refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::time::Instant;

use super::antagonist::{Clock, duration_of, finish_after};
use super::capacity::{Capacity, Mode};
use super::meter::{Held, Meter, SlotInUse};

/// What became of a request's cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Served {
    Done,
    /// The queue was full (or the backend is going away): 503.
    Refused,
}

/// A request on the bandwidth: its remaining work (ns of cost) and where to say it is done.
#[derive(Debug)]
struct Job {
    left: f64,
    done: oneshot::Sender<()>,
}

/// Work below this (ns) is done: the timer wakes to the millisecond, so a job's end is never
/// hit exactly.
const DONE_NS: f64 = 1_000.0;

/// Thirty years: "never" for a timer.
const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);

/// One less of a counter when dropped, so a cancelled request leaves its place.
#[derive(Debug)]
struct Place<'a>(&'a AtomicUsize);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Takes a place in `count` unless it already holds `limit`.
fn take_place(count: &AtomicUsize, limit: usize) -> Option<Place<'_>> {
    if count.fetch_add(1, Ordering::SeqCst) >= limit {
        count.fetch_sub(1, Ordering::SeqCst);
        return None;
    }
    Some(Place(count))
}

/// The server of one backend with a capacity.
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) capacity: Capacity,
    clock: Clock,
    pub(crate) meter: Arc<Meter>,
    slots: Arc<Semaphore>,
    /// Requests waiting for a slot.
    waiting: AtomicUsize,
    /// Requests on the bandwidth (in service or not yet admitted to the driver).
    sharing: AtomicUsize,
    jobs: mpsc::UnboundedSender<Job>,
}

/// The io driver, to be run beside the server (it ends when the server is dropped).
pub(crate) type Driver = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

impl Server {
    pub(crate) fn new(capacity: Capacity) -> (Server, Driver) {
        let clock = Clock::new(capacity.epoch, capacity.antagonist);
        let meter = Arc::new(Meter::new(
            clock,
            capacity.antagonist,
            capacity.workers,
            capacity.mode.uses_slots(),
            capacity.mode.uses_bandwidth(),
        ));
        let (jobs, queue) = mpsc::unbounded_channel();
        let driver = Box::pin(drive(queue, capacity, clock, Arc::clone(&meter)));
        let server = Server {
            capacity,
            clock,
            meter,
            slots: Arc::new(Semaphore::new(capacity.workers.max(1) as usize)),
            waiting: AtomicUsize::new(0),
            sharing: AtomicUsize::new(0),
            jobs,
        };
        (server, driver)
    }

    /// Serves `cost` as the mode says, the request held in the meter all along.
    pub(crate) async fn serve(&self, cost: Duration) -> Served {
        let _held = Held::new(&self.meter);
        match self.capacity.mode {
            Mode::Cpu => self.on_slot(cost, false).await,
            Mode::Burn => self.on_slot(cost, true).await,
            Mode::Io => self.on_bandwidth(cost).await,
            Mode::Mixed => {
                let half = cost / 2;
                match self.on_slot(half, false).await {
                    Served::Done => self.on_bandwidth(cost - half).await,
                    refused => refused,
                }
            }
        }
    }

    /// Queue fill now: requests waiting (for a slot, or beyond `workers` on the bandwidth)
    /// over `max_queue`.
    pub(crate) fn queue_fill(&self) -> f64 {
        let workers = self.capacity.workers.max(1) as usize;
        let waiting = self.waiting.load(Ordering::Relaxed)
            + self.sharing.load(Ordering::Relaxed).saturating_sub(workers);
        (waiting as f64 / self.capacity.max_queue.max(1) as f64).clamp(0.0, 1.0)
    }

    async fn on_slot(&self, cost: Duration, burn: bool) -> Served {
        let permit = match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                // Every slot busy: wait in line, unless the line is full.
                let Some(place) = take_place(&self.waiting, self.capacity.max_queue) else {
                    return Served::Refused;
                };
                let permit = Arc::clone(&self.slots).acquire_owned().await;
                drop(place);
                match permit {
                    Ok(permit) => permit,
                    Err(_) => return Served::Refused,
                }
            }
        };
        let in_use = SlotInUse::new(Arc::clone(&self.meter));
        let begun = Instant::now();
        let took = finish_after(
            self.clock.at(begun),
            cost,
            self.capacity.speed(),
            self.capacity.antagonist,
        )
        .min(FAR);
        if burn {
            let until = begun.into_std() + took;
            // The slot is held by the spinning thread, so a cancelled request still burns
            // its time, as a real worker thread would.
            let spin = tokio::task::spawn_blocking(move || {
                let _held = (permit, in_use);
                while std::time::Instant::now() < until {
                    std::hint::spin_loop();
                }
            });
            let _ = spin.await;
        } else {
            tokio::time::sleep_until(begun + took).await;
            drop((permit, in_use));
        }
        Served::Done
    }

    async fn on_bandwidth(&self, cost: Duration) -> Served {
        let limit = (self.capacity.workers.max(1) as usize).saturating_add(self.capacity.max_queue);
        let Some(_place) = take_place(&self.sharing, limit) else {
            return Served::Refused;
        };
        let (done, finished) = oneshot::channel();
        let job = Job {
            left: cost.as_nanos() as f64,
            done,
        };
        if self.jobs.send(job).is_err() {
            return Served::Refused;
        }
        match finished.await {
            Ok(()) => Served::Done,
            Err(_) => Served::Refused,
        }
    }
}

/// The processor-sharing driver (see the module doc).
async fn drive(
    mut queue: mpsc::UnboundedReceiver<Job>,
    capacity: Capacity,
    clock: Clock,
    meter: Arc<Meter>,
) {
    let speed = capacity.speed();
    // The whole bandwidth, ns of cost per ns.
    let total = f64::from(capacity.workers.max(1)) * speed;
    let mut jobs: Vec<Job> = Vec::new();
    // Each job's rate since `last`.
    let mut rate = 0.0_f64;
    let mut last = clock.now();
    let mut wake: Option<Instant> = None;
    loop {
        let arrived = match wake {
            Some(at) => tokio::select! {
                job = queue.recv() => match job {
                    Some(job) => Some(job),
                    None => return,
                },
                () = tokio::time::sleep_until(at) => None,
            },
            None => match queue.recv().await {
                Some(job) => Some(job),
                None => return,
            },
        };
        let now = clock.now();
        let elapsed = now.saturating_sub(last).as_nanos() as f64;
        for job in &mut jobs {
            job.left -= rate * elapsed;
        }
        last = now;
        jobs.extend(arrived);
        while let Ok(job) = queue.try_recv() {
            jobs.push(job);
        }
        let mut i = 0;
        while i < jobs.len() {
            if jobs[i].left <= DONE_NS {
                let _ = jobs.swap_remove(i).done.send(());
            } else if jobs[i].done.is_closed() {
                // The client went away: its work stops.
                jobs.swap_remove(i);
            } else {
                i += 1;
            }
        }
        let factor = capacity.antagonist.map_or(1.0, |a| a.factor_at(now));
        let n = jobs.len() as f64;
        rate = if jobs.is_empty() {
            0.0
        } else {
            (total * factor / n).min(speed)
        };
        meter.set_bandwidth(n * rate / total);
        wake = if jobs.is_empty() {
            None
        } else {
            let least = jobs.iter().map(|j| j.left).fold(f64::INFINITY, f64::min);
            let finish = now.saturating_add(duration_of(least / rate).min(FAR));
            let next = match capacity.antagonist {
                Some(a) => a.next_change_after(now).min(finish),
                None => finish,
            };
            Some(clock.instant(next))
        };
    }
}
