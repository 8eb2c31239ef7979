//! One simulated run: a scenario's backends, `balancers` instances of one contender in front
//! of them, and its traffic, in virtual time.
//!
//! A request goes to its client's balancer (`client % balancers`, as ECMP keeps a flow on one
//! instance). That balancer's own [`Pool`] picks a backend; the request crosses the network
//! (`network_delay` each way) and is served by the backend's capacity model
//! ([`crate::servers`]). What follows is the proxy's own rule:
//!
//! * any answer (200, the backend's 500s, its 503 when the queue is full) completes the ticket
//!   as a success, as the proxy does for every response it relays;
//! * a refused connection (a dead backend, or one in an outage), or a connection the backend
//!   drops, is classified as the proxy classifies it ([`AttemptFailure`]) and handed to
//!   [`retry::decide`]: resend on a fresh connection, try the next backend (excluding those
//!   tried, at most `retries + 1` attempts), or answer 502/503 — and whom to blame, which feeds
//!   `max_fails` through the pool;
//! * the client gives up at `timeout` after the request's intended time, as the lab's load
//!   generator does; the proxy then sees its client gone, completes the ticket as cancelled and
//!   closes the backend connection, which frees the backend's slot (the lab's read timeout
//!   equals the traffic's timeout and starts later, so the client always goes first).
//!
//! Load reports: every `poll_interval` each balancer polls every primary; a backend that
//! answers reports its trailing second as measured `report_delay` ago (one that does not, a
//! miss). The reports go through [`Feed`] — the control plane's own staleness rule and weight
//! model — and the weights into the pool, as the proxy's feedback loop does.
//!
//! Probes (`prequal`): after each pick, the balancer's pool hands out the backends its
//! algorithm wants probed ([`Pool::take_probes`]). Each probe is lost with `[sim] probe_loss`,
//! else crosses `network_delay`, is answered at once by a backend that answers at all (not
//! stalled, dead or out) with its requests in flight (in service and queued) and its
//! [`RifLatency`] estimate at that count, and crosses back. Its `[sim] probe_cost` of work is
//! done by the backend on a slot (the next to free, ahead of the queue) or the bandwidth, so
//! probes take capacity, but no place in the queue; it is not a request and not counted in
//! the RIF. A lost
//! probe never answers. The backend's estimate learns from its completed (200) requests: the
//! RIF each found on arrival and its time there.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use balance::queue::{self, Admission, Handed};
use balance::weights::LoadReport;
use balance::weights::feed::{Feed, Poll};
use balance::{
    Algorithm, AttemptFailure, Attempts, BackendId, Connection, Fault, Nanos, Next, Outcome, Pool,
    Probe, Replay, RequestSent, ResponseReceived, RetryBudget, RifLatency, Ticket,
};
use lab::load::closed::Users;
use lab::run::LoadSample;
use lab::scenario::{Load, Scenario, Traffic};
use lab::schedule::{Arrival, Arrivals};
use lab::tally::{Request, Tally};
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::events::{Events, Time};
use crate::servers::{Admit, Job, Life, Reading, Server};
use crate::{Contender, Knobs};

/// How often the backends' integrals are read: the lab samples `/load` at this rate, and
/// load reports cover the trailing [`WINDOW`].
const STEP: Time = 250_000_000;
/// The trailing window of a load report (the lab backend's).
const WINDOW: Time = 1_000_000_000;
/// How long a dying backend lets its last answer leave (the lab backend's).
const LAST_WORDS: Time = 50_000_000;

fn ns(d: Duration) -> Time {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[derive(Debug, Clone, Copy)]
enum Event {
    /// The next open-loop arrival is due (not queued: arrivals are their own stream).
    Arrival,
    /// Closed loop: the number of users may change.
    Users,
    /// Closed loop: user `0` sends.
    Send(u32),
    /// Request `0`'s attempt `1` reaches its backend.
    Deliver(u32, u32),
    /// A slot's job on backend `0` is done.
    SlotDone(u32, Job),
    /// Backend `0`'s bandwidth wakes up (wake-up number `1`).
    Wake(u32, u64),
    /// The answer to request `0`'s attempt `1` reaches the balancer.
    Reply(u32, u32),
    /// Request `0`'s attempt `1` learns its connection failed.
    Failed(u32, u32, Fault, Connection),
    /// The oldest pending request's deadline.
    Deadline,
    /// Balancer `0` polls the load sources.
    Poll(u32),
    /// Every backend's integrals are read.
    Step,
    /// Backend `0` dies (its last answer left).
    Die(u32),
    /// Backend `0`'s outage begins (`true`) or ends.
    Outage(u32, bool),
    /// Backend `0`'s deadline for a job (`Faults::deadline`): if it is still there, it is
    /// answered 503 and its work goes on.
    Overdue(u32, Job),
    /// Request `0`, waiting in its balancer's `max_conns` queue since its attempt `1`, has
    /// waited `queue_timeout`.
    QueueTimeout(u32, u32),
    /// Balancer `0`'s probe of its pool's backend `1` reaches the backend.
    Probe(u32, u32),
    /// The oldest probe answer on the wire reaches its balancer (they all take
    /// `network_delay`, so they arrive in the order they left).
    ProbeAnswer,
}

/// The request index of a probe's work at a backend ([`Job`]`(PROBE, serial)`): no request
/// has it, and the work is kept with the orphans, whose end only frees what they hold.
const PROBE: u32 = u32::MAX;

/// Where a request's current attempt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Between backends (or on the wire).
    Away,
    /// Waiting for a slot at its backend.
    Queued,
    /// On a slot.
    Slot,
    /// On the bandwidth.
    Shared,
    /// At a stalled backend: nothing will come.
    Stuck,
    /// In its balancer's `max_conns` queue, for a backend with room.
    Waiting,
}

/// What the checks of events read of a request: kept apart from [`Req`] in a dense array
/// (16 bytes a request, where a request takes two cache lines), so that a stale event, the
/// deadline queue's look at its front and a slot's look at the next waiting job read a quarter
/// of a line instead of pulling a request into the cache.
#[derive(Debug, Clone, Copy)]
struct Check {
    /// Which request this is (slab places are reused).
    serial: u64,
    /// The current attempt's number (unique in the run).
    attempt: u32,
    stage: Stage,
    live: bool,
}

/// A request in flight (slab places are reused).
///
/// Laid out by use (`repr(C)`, two cache lines of their own): the first line holds what its
/// answer reads — its backend, balancer, status, ticket, times and user; the second what only
/// its start and its failures read (the attempt machine, the cost, the client), written while
/// the place is warm from the request that left it. An answer, thousands of requests after the
/// start, then misses on one line instead of two.
#[derive(Debug)]
#[repr(C, align(64))]
struct Req {
    /// The current attempt's backend (plan index).
    backend: u32,
    balancer: u32,
    /// The answer's status, once the backend has answered.
    status: u16,
    measured: bool,
    /// `mixed`: the first half is done.
    second_half: bool,
    /// The attempt was sent on a connection kept alive from an earlier request.
    reused: bool,
    intended: Time,
    ticket: Option<Ticket>,
    /// Closed loop: the user that sent it.
    user: Option<u32>,
    /// Its attempts: the proxy's own machine ([`balance::Attempts`]).
    tried: Attempts<BackendId>,
    /// Its move to the next backend was paid for from the retry budget, and no backend has
    /// been picked for it yet (one that then cannot be is given back, as the proxy gives it).
    charged: bool,
    /// Its cost, ns at speed 1.
    work: u64,
    client: u32,
}

/// One balancer instance.
struct Balancer {
    pool: Pool,
    feed: Option<Feed>,
    /// Whether it holds a kept-alive connection to each backend (plan order).
    warm: Vec<bool>,
    /// Requests waiting for a backend below its `max_conns`, oldest first.
    waiting: VecDeque<Waiter>,
    /// Its retry budget (`retry_budget`; `None`: no cap): each balancer has its own, as each
    /// proxy instance would.
    budget: Option<RetryBudget>,
}

/// A request in a balancer's `max_conns` queue.
#[derive(Debug)]
struct Waiter {
    req: u32,
    /// Its attempt number when it joined (a stale entry is not served).
    attempt: u32,
    affinity: [u8; 4],
    /// The backends it tried (pool ids).
    tried: Vec<BackendId>,
}

impl queue::Waiter for Waiter {
    fn left(&self) -> bool {
        // A request that stops waiting (its client's deadline, `queue_timeout`) is taken out
        // of the queue at once.
        false
    }

    fn affinity(&self) -> Option<&[u8]> {
        Some(&self.affinity)
    }
}

/// What a run produced.
#[derive(Debug)]
pub struct Measured {
    pub tally: Tally,
    /// Attempts each backend received (scenario order), retries included.
    pub attempts: Vec<u64>,
    /// Requests started (the warm-up's included).
    pub sent: u64,
    pub samples: Vec<LoadSample>,
    /// Events processed (for speed figures).
    pub events: u64,
    /// Probes sent (lost ones included).
    pub probes: u64,
}

/// One run of `contender` on `scenario`'s backends with `traffic`, from `seed`. `progress`
/// hears the number of requests sent so far, now and then.
pub fn run(
    scenario: &Scenario,
    traffic: &Traffic,
    contender: &Contender,
    knobs: &Knobs,
    seed: u64,
    progress: &mut dyn FnMut(u64),
) -> Measured {
    Sim::new(scenario, traffic, contender, knobs, seed).run(progress)
}

struct Sim<'a> {
    traffic: &'a Traffic,
    contender: &'a Contender,
    events: Events<Event>,
    now: Time,
    servers: Vec<Server>,
    /// The plan index (scenario order) of each pool index.
    plan_of: Vec<usize>,
    balancers: Vec<Balancer>,
    reqs: Vec<Req>,
    /// Each request's [`Check`] (the same index as `reqs`).
    checks: Vec<Check>,
    free: Vec<u32>,
    serial: u64,
    attempts: u32,
    /// Requests in arrival order, with their deadlines, until answered or expired.
    pending: VecDeque<(Time, u32, u64)>,
    deadline_set: bool,
    in_flight: u64,
    peak: u64,
    rng: Pcg64Mcg,
    affinity: Vec<[u8; 4]>,
    max_attempts: usize,
    /// The upstream's `queue` and `queue_timeout`.
    queue: usize,
    queue_timeout: Time,
    delay: Time,
    report_delay: Time,
    timeout: Time,
    // Traffic.
    arrivals: Option<Arrivals>,
    closed: Option<(Users, Vec<Arrival>)>,
    next_cost: usize,
    users_active: u32,
    sent: u64,
    total: Option<u64>,
    warmup: u64,
    length: Time,
    // Measuring.
    tally: Tally,
    samples: Vec<LoadSample>,
    readings: Vec<VecDeque<Reading>>,
    steps: u64,
    step_every: Time,
    steps_per_sample: u64,
    /// The next open-loop arrival, with its time in ns (converted once).
    next: Option<(Time, Arrival)>,
    user_busy: Vec<bool>,
    /// Each server's last request before it dies (`die_after`).
    last: Vec<Option<Job>>,
    /// Jobs answered at their backend's deadline whose work goes on, with their backend.
    orphans: HashMap<Job, u32>,
    scratch: Vec<Job>,
    processed: u64,
    probes: Probes,
}

/// The probing side of a run (`prequal`); idle for the other algorithms.
struct Probes {
    /// Whether the contender probes.
    on: bool,
    loss: f64,
    /// A probe's work, ns at speed 1.
    cost: u64,
    /// Draws for losses, apart from the run's other draws.
    rng: Pcg64Mcg,
    /// Each backend's estimate (plan order).
    latency: Vec<RifLatency>,
    /// Each backend's probe work in progress or waiting (plan order): not requests in flight.
    jobs: Vec<u32>,
    /// Request `i`'s attempt at its backend: (attempt, RIF on arrival, arrival time).
    arrived: HashMap<u32, (u32, u32, Time)>,
    /// Answers on the wire: balancer, backend (pool id), answer, oldest first.
    answers: VecDeque<(u32, BackendId, Probe)>,
    /// Probes sent; the last probe work's number.
    sent: u64,
    serial: u32,
    /// The backends a pick wants probed.
    wanted: Vec<BackendId>,
}

impl<'a> Sim<'a> {
    fn new(
        scenario: &Scenario,
        traffic: &'a Traffic,
        contender: &'a Contender,
        knobs: &Knobs,
        seed: u64,
    ) -> Sim<'a> {
        let plans = scenario.backend_plans();
        let servers: Vec<Server> = plans
            .iter()
            .map(|p| {
                let b = &p.spec;
                Server::new(
                    b.mode.parse().unwrap_or_default(),
                    b.workers,
                    b.speed,
                    b.max_queue,
                    b.antagonist.as_deref().and_then(|a| a.parse().ok()),
                    // Checked with the scenario.
                    &b.faults().unwrap_or_default(),
                )
                .with_footprint(b.footprint().unwrap_or_default())
            })
            .collect();
        let n = plans.len();
        let primaries = contender.policy.primaries.len();
        let balancers = (0..knobs.balancers.max(1))
            .map(|i| Balancer {
                pool: contender
                    .policy
                    .pool(seed.wrapping_add(u64::from(i).wrapping_mul(0x2545_f491_4f6c_dd1d))),
                feed: contender.policy.feed(),
                warm: vec![false; n],
                waiting: VecDeque::new(),
                budget: contender.policy.retry_budget.map(RetryBudget::new),
            })
            .collect::<Vec<_>>();
        let feeds = balancers[0].feed.is_some() && primaries > 0;
        let length = ns(traffic.duration);
        // Samples for the report: 4 a second as the lab, fewer on long runs (at most ~600).
        let sample_every = (length / 600 / STEP).max(1);
        let (arrivals, closed) = match &traffic.load {
            Load::Open(pattern) => (
                Some(Arrivals::new(
                    *pattern,
                    traffic.spacing,
                    // With a count of requests, the count ends the traffic (Poisson arrivals
                    // may take a little longer than the expected length).
                    if knobs.requests.is_some() {
                        traffic.duration * 2
                    } else {
                        traffic.duration
                    },
                    traffic.cost,
                    traffic.clients,
                    seed,
                )),
                None,
            ),
            Load::Closed(users) => (
                None,
                Some((
                    *users,
                    lab::schedule::costs(traffic.cost, lab::schedule::CLOSED_LOOP_COSTS, seed),
                )),
            ),
        };
        let clients = traffic.clients.max(1);
        let affinity = (0..clients)
            .map(|c| match lab::load::client_addr(c) {
                std::net::IpAddr::V4(a) => a.octets(),
                std::net::IpAddr::V6(_) => [0; 4],
            })
            .collect();
        let max_attempts = contender.policy.attempt_limit();
        let tally = Tally::new(
            n,
            traffic.duration,
            traffic.timeout,
            lab::tally::ramp_hold(&traffic.load),
        );
        let mut sim = Sim {
            traffic,
            contender,
            events: Events::default(),
            now: 0,
            servers,
            plan_of: contender.plan_of.clone(),
            balancers,
            reqs: Vec::new(),
            checks: Vec::new(),
            free: Vec::new(),
            serial: 0,
            attempts: 0,
            pending: VecDeque::new(),
            deadline_set: false,
            in_flight: 0,
            peak: 0,
            rng: Pcg64Mcg::seed_from_u64(seed ^ 0x51_5eed),
            affinity,
            max_attempts,
            queue: contender.policy.queue,
            queue_timeout: ns(contender.policy.queue_timeout),
            delay: ns(knobs.network_delay),
            report_delay: ns(knobs.report_delay),
            timeout: ns(traffic.timeout),
            arrivals,
            closed,
            next_cost: 0,
            users_active: 0,
            sent: 0,
            total: knobs.requests.map(|r| r + knobs.warmup),
            warmup: knobs.warmup,
            length,
            tally,
            samples: Vec::new(),
            readings: vec![VecDeque::new(); n],
            steps: 0,
            step_every: STEP,
            steps_per_sample: if feeds { sample_every } else { 1 },
            next: None,
            user_busy: Vec::new(),
            last: vec![None; n],
            orphans: HashMap::new(),
            scratch: Vec::new(),
            processed: 0,
            probes: Probes {
                on: contender.policy.algorithm == Algorithm::Prequal,
                loss: knobs.probe_loss,
                cost: ns(knobs.probe_cost),
                rng: Pcg64Mcg::seed_from_u64(seed ^ 0x9_b0be),
                latency: vec![RifLatency::new(); n],
                jobs: vec![0; n],
                arrived: HashMap::new(),
                answers: VecDeque::new(),
                sent: 0,
                serial: 0,
                wanted: Vec::new(),
            },
        };
        // Readings every STEP when load reports are used (their window), else only for the
        // report's samples.
        let step_every = if feeds { STEP } else { STEP * sample_every };
        sim.step_every = step_every;
        sim.events.push(0, Event::Step);
        if feeds {
            let interval = ns(contender.policy.poll_interval).max(1);
            let count = sim.balancers.len() as u64;
            for b in 0..count {
                // Instances started at different moments: their rounds are spread out.
                sim.events
                    .push(interval * b / count + interval, Event::Poll(b as u32));
            }
        }
        for o in &knobs.outages {
            if let Some(k) = plans.iter().position(|p| p.name == o.backend) {
                sim.events.push(ns(o.from), Event::Outage(k as u32, true));
                sim.events.push(ns(o.until), Event::Outage(k as u32, false));
            }
        }
        match sim.closed {
            Some(_) => sim.events.push(0, Event::Users),
            None => sim.schedule_arrival(0),
        }
        sim
    }
}

/// The status the proxy answers with when every backend was full and the request could not
/// wait (`queue` full, or `queue_timeout` passed).
const NO_ROOM: u16 = 503;

impl Sim<'_> {
    fn run(mut self, progress: &mut dyn FnMut(u64)) -> Measured {
        let mut reported = 0u64;
        loop {
            // Arrivals come from their own sorted stream, ahead of the queue's events at the
            // same time: one heap operation fewer per request.
            let arrival = self.next.as_ref().map(|&(at, _)| at);
            let event = match (arrival, self.events.next_time()) {
                (Some(a), next) if next.is_none_or(|t| a <= t) => {
                    self.now = a;
                    Event::Arrival
                }
                _ => match self.events.pop() {
                    Some((at, event)) => {
                        self.now = at;
                        event
                    }
                    None => break,
                },
            };
            self.processed += 1;
            self.handle(event);
            if self.sent >= reported + (1 << 16) {
                reported = self.sent;
                progress(self.sent);
            }
        }
        progress(self.sent);
        self.tally.set_peak_concurrency(self.peak);
        Measured {
            // The servers are in scenario order.
            attempts: self.servers.iter().map(|s| s.received).collect(),
            sent: self.sent,
            tally: self.tally,
            samples: self.samples,
            events: self.processed,
            probes: self.probes.sent,
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Arrival => {
                if let Some((_, a)) = self.next.take() {
                    self.schedule_arrival(self.sent + 1);
                    self.start_request(a.cost_ms, a.client, None);
                }
            }
            Event::Users => self.users(),
            Event::Send(u) => self.send_from_user(u),
            Event::Deliver(i, a) => {
                if self.valid((i, a)) {
                    self.deliver(i);
                }
            }
            Event::SlotDone(k, job) => self.slot_done(k, job),
            Event::Wake(k, w) => {
                if self.servers[k as usize].wake == w {
                    self.wake(k);
                }
            }
            Event::Reply(i, a) => {
                if self.valid((i, a)) {
                    self.on_reply(i);
                }
            }
            Event::Failed(i, a, fault, connection) => {
                if self.valid((i, a)) {
                    self.on_failure(i, fault, connection);
                }
            }
            Event::Deadline => self.deadlines(),
            Event::Poll(b) => self.poll(b),
            Event::Step => self.step(),
            Event::Die(k) => self.die(k),
            Event::Outage(k, out) => self.outage(k, out),
            Event::Overdue(k, job) => self.overdue(k, job),
            Event::QueueTimeout(i, a) => {
                if self.valid((i, a)) && self.checks[i as usize].stage == Stage::Waiting {
                    self.leave_queue(i);
                    self.refund(i);
                    self.finish(i, NO_ROOM, None);
                }
            }
            Event::Probe(b, id) => self.probe_arrives(b, BackendId(id)),
            Event::ProbeAnswer => {
                if let Some((b, id, probe)) = self.probes.answers.pop_front() {
                    self.balancers[b as usize]
                        .pool
                        .probed(id, probe, Nanos(self.now));
                }
            }
        }
    }

    fn valid(&self, (i, a): Job) -> bool {
        let c = &self.checks[i as usize];
        c.live && c.attempt == a
    }

    fn traffic_over(&self) -> bool {
        match self.closed {
            Some(_) => self.now >= self.length,
            None => self.next.is_none(),
        }
    }

    fn finished(&self) -> bool {
        self.traffic_over() && self.in_flight == 0
    }

    // ---- traffic ----

    /// Draws the next arrival, unless the count of requests is reached (`counted`: those
    /// started or about to be).
    fn schedule_arrival(&mut self, counted: u64) {
        if self.total.is_some_and(|t| counted >= t) {
            return;
        }
        self.next = self
            .arrivals
            .as_mut()
            .and_then(Iterator::next)
            .map(|a| (ns(a.at), a));
    }

    fn users(&mut self) {
        let Some((users, _)) = self.closed else {
            return;
        };
        if self.now >= self.length {
            return;
        }
        let t = Duration::from_nanos(self.now);
        let target = users.at(t);
        self.users_active = target;
        if self.user_busy.len() < target as usize {
            self.user_busy.resize(target as usize, false);
        }
        for u in 0..target {
            if !self.user_busy[u as usize] {
                self.user_busy[u as usize] = true;
                self.events.push(self.now, Event::Send(u));
            }
        }
        if let Users::Steps { hold, .. } = users {
            let hold = ns(hold).max(1);
            let next = (self.now / hold + 1) * hold;
            if next < self.length {
                self.events.push(next, Event::Users);
            }
        }
    }

    fn send_from_user(&mut self, u: u32) {
        if self.now >= self.length || u >= self.users_active {
            self.user_busy[u as usize] = false;
            return;
        }
        let Some((_, costs)) = &self.closed else {
            return;
        };
        let cost = costs[self.next_cost % costs.len()].cost_ms;
        self.next_cost += 1;
        let client = u % self.traffic.clients.max(1);
        self.start_request(cost, client, Some(u));
    }

    fn start_request(&mut self, cost_ms: f64, client: u32, user: Option<u32>) {
        let measured = self.sent >= self.warmup;
        self.sent += 1;
        self.serial += 1;
        let balancer = client % self.balancers.len() as u32;
        let work = (cost_ms.clamp(0.0, 3_600_000.0) * 1e6) as u64;
        let req = Req {
            intended: self.now,
            work,
            client,
            balancer,
            measured,
            user,
            ticket: None,
            backend: 0,
            tried: Attempts::default(),
            charged: false,
            reused: false,
            status: 0,
            second_half: false,
        };
        let check = Check {
            serial: self.serial,
            attempt: 0,
            stage: Stage::Away,
            live: true,
        };
        let i = match self.free.pop() {
            Some(i) => {
                let tried = std::mem::take(&mut self.reqs[i as usize].tried);
                self.reqs[i as usize] = Req { tried, ..req };
                self.checks[i as usize] = check;
                i
            }
            None => {
                self.reqs.push(req);
                self.checks.push(check);
                self.reqs.len() as u32 - 1
            }
        };
        let next = self.contender.policy.next_upstream;
        self.reqs[i as usize].tried.reset(self.max_attempts, next);
        // A request's first pick is coming: it earns its share of its balancer's budget.
        let balancer = self.reqs[i as usize].balancer as usize;
        if let Some(budget) = &mut self.balancers[balancer].budget {
            budget.deposit(Nanos(self.now));
        }
        let deadline = self.now + self.timeout;
        self.pending.push_back((deadline, i, self.serial));
        if !self.deadline_set {
            self.deadline_set = true;
            self.events.push(deadline, Event::Deadline);
        }
        self.in_flight += 1;
        self.peak = self.peak.max(self.in_flight);
        self.attempt(i);
    }

    // ---- attempts ----

    /// A new attempt for request `i`, if the attempt machine allows one: a pick, or a place
    /// in the `max_conns` queue, as the proxy's upstream decides ([`balance::queue`]).
    fn attempt(&mut self, i: u32) {
        let r = &mut self.reqs[i as usize];
        if !r.tried.may_pick() {
            let status = r.tried.own_answer().0;
            return self.finish(i, status, None);
        }
        let b = &mut self.balancers[r.balancer as usize];
        let affinity = self.affinity[(r.client as usize) % self.affinity.len()];
        let admitted = queue::admit(
            &mut b.pool,
            Some(&affinity),
            r.tried.tried(),
            Nanos(self.now),
            b.waiting.len(),
            self.queue,
        );
        match admitted {
            Admission::Picked(ticket) => self.picked(i, ticket),
            Admission::NoBackend => {
                let status = r.tried.own_answer().0;
                self.refund(i);
                self.finish(i, status, None)
            }
            Admission::QueueFull => {
                self.refund(i);
                self.finish(i, NO_ROOM, None)
            }
            Admission::Wait => {
                // A number of its own for the wait, so that its timeout cannot be taken for
                // another's (slab places are reused, and a first attempt has none yet).
                self.attempts = self.attempts.wrapping_add(1);
                let c = &mut self.checks[i as usize];
                c.attempt = self.attempts;
                b.waiting.push_back(Waiter {
                    req: i,
                    attempt: c.attempt,
                    affinity,
                    tried: r.tried.tried().to_vec(),
                });
                c.stage = Stage::Waiting;
                let e = Event::QueueTimeout(i, c.attempt);
                self.events.push(self.now + self.queue_timeout, e);
            }
        }
    }

    /// Request `i` got `ticket`: its attempt goes out.
    /// Request `i`'s retry, paid for, found no backend: its balancer's budget gets it back.
    fn refund(&mut self, i: u32) {
        let r = &mut self.reqs[i as usize];
        if std::mem::take(&mut r.charged)
            && let Some(budget) = &mut self.balancers[r.balancer as usize].budget
        {
            budget.refund(Nanos(self.now));
        }
    }

    fn picked(&mut self, i: u32, ticket: Ticket) {
        let r = &mut self.reqs[i as usize];
        r.charged = false;
        let b = &self.balancers[r.balancer as usize];
        let id = ticket.backend();
        let plan = self.plan_of[id.index()];
        r.tried.picked(id);
        r.ticket = Some(ticket);
        r.backend = plan as u32;
        self.attempts = self.attempts.wrapping_add(1);
        let c = &mut self.checks[i as usize];
        c.attempt = self.attempts;
        c.stage = Stage::Away;
        r.second_half = false;
        r.reused = b.warm[plan] && r.tried.may_reuse();
        let balancer = r.balancer;
        self.send(i);
        if self.probes.on {
            self.send_probes(balancer);
        }
    }

    /// Balancer `b` completes `ticket` with `outcome`, then hands whatever room there is to
    /// its waiting requests, as the proxy's upstream does after every completion.
    fn complete(&mut self, b: u32, ticket: Ticket, outcome: Outcome) {
        let pool = &mut self.balancers[b as usize].pool;
        pool.complete(ticket, outcome, Nanos(self.now));
        self.serve_queue(b);
    }

    /// Balancer `b`'s waiting requests get whatever room its pool has.
    fn serve_queue(&mut self, b: u32) {
        let balancer = &mut self.balancers[b as usize];
        if balancer.waiting.is_empty() {
            return;
        }
        let handed = queue::serve(
            &mut balancer.pool,
            &mut balancer.waiting,
            Nanos(self.now),
            |w, out| out.extend(&w.tried),
        );
        for (w, handed) in handed {
            match handed {
                Handed::Ticket(ticket) => self.picked(w.req, ticket),
                Handed::NoBackend => {
                    let status = self.reqs[w.req as usize].tried.own_answer().0;
                    self.refund(w.req);
                    self.finish(w.req, status, None);
                }
            }
        }
    }

    /// Request `i` stops waiting in its balancer's queue.
    fn leave_queue(&mut self, i: u32) {
        let c = &mut self.checks[i as usize];
        c.stage = Stage::Away;
        let (balancer, attempt) = (self.reqs[i as usize].balancer, c.attempt);
        self.balancers[balancer as usize]
            .waiting
            .retain(|w| !(w.req == i && w.attempt == attempt));
    }

    /// Request `i`'s attempt goes out to its backend.
    fn send(&mut self, i: u32) {
        let r = &self.reqs[i as usize];
        let k = r.backend as usize;
        if !self.servers[k].listening() {
            // Refused: learnt one round trip later.
            let at = self.now + 2 * self.delay;
            let a = self.checks[i as usize].attempt;
            let e = Event::Failed(i, a, Fault::ConnectFailed, Connection::Fresh);
            return self.events.push(at, e);
        }
        self.balancers[r.balancer as usize].warm[k] = true;
        if self.delay == 0 {
            self.deliver(i);
        } else {
            let a = self.checks[i as usize].attempt;
            self.events
                .push(self.now + self.delay, Event::Deliver(i, a));
        }
    }

    fn deliver(&mut self, i: u32) {
        let r = &mut self.reqs[i as usize];
        let c = &mut self.checks[i as usize];
        let job = (i, c.attempt);
        let k = r.backend as usize;
        let s = &mut self.servers[k];
        if !s.listening() {
            let e = Event::Failed(i, c.attempt, Fault::ConnectFailed, Connection::Fresh);
            return self.events.push(self.now + self.delay, e);
        }
        s.received += 1;
        // (A plain server has no fault knob: none of these can fire, and the knobs lie on
        // another cache line.)
        if !s.plain && s.stall_after.is_some_and(|n| s.received > n) {
            s.life = Life::Stalled;
        }
        if s.life == Life::Stalled {
            c.stage = Stage::Stuck;
            return;
        }
        if !s.plain {
            if s.die_after.is_some_and(|n| s.received >= n) && s.life == Life::Serving {
                s.life = Life::Dying;
                self.last[k] = Some(job);
            }
            if s.fail_rate > 0.0 && self.rng.random::<f64>() < s.fail_rate {
                r.status = s.fail_status;
                return self.reply(i);
            }
        }
        let on_slots = s.mode.uses_slots();
        let work = if s.mode == lab::backend::Mode::Mixed {
            r.work / 2
        } else {
            r.work
        };
        let rif = s.jobs();
        let admitted = s.admit(self.now, job, work, on_slots);
        if self.probes.on && admitted != Admit::Refused {
            let rif = rif.saturating_sub(self.probes.jobs[k]);
            self.probes.arrived.insert(i, (job.1, rif, self.now));
        }
        if let Some(deadline) = s.deadline
            && admitted != Admit::Refused
        {
            let at = self.now.saturating_add(deadline);
            self.events.push(at, Event::Overdue(k as u32, job));
        }
        self.admitted(i, k, admitted);
    }

    /// Backend `k`'s deadline for `job` passed: if the job is still there, the backend answers
    /// it 503 now, and its work stays where it is (queued, on a slot, on the bandwidth) to the
    /// end, an orphan.
    fn overdue(&mut self, k: u32, job: Job) {
        let (i, _) = job;
        let at_work = matches!(
            self.checks[i as usize].stage,
            Stage::Queued | Stage::Slot | Stage::Shared
        );
        if !(self.valid(job) && at_work && self.reqs[i as usize].backend == k)
            || self.servers[k as usize].life == Life::Stalled
        {
            return;
        }
        self.orphans.insert(job, k);
        self.checks[i as usize].stage = Stage::Away;
        self.reqs[i as usize].status = 503;
        self.reply(i);
    }

    fn admitted(&mut self, i: u32, k: usize, admitted: Admit) {
        let c = &mut self.checks[i as usize];
        let job = (i, c.attempt);
        match admitted {
            Admit::Slot(end) => {
                c.stage = Stage::Slot;
                self.events.push(end, Event::SlotDone(k as u32, job));
            }
            Admit::Queued => c.stage = Stage::Queued,
            Admit::Shared => {
                c.stage = Stage::Shared;
                self.rewake(k);
            }
            Admit::Refused => {
                c.stage = Stage::Away;
                self.reqs[i as usize].status = 503;
                self.reply(i);
            }
        }
    }

    /// Schedules backend `k`'s next bandwidth wake-up (the older ones go stale).
    fn rewake(&mut self, k: usize) {
        let s = &mut self.servers[k];
        s.wake += 1;
        if let Some(at) = s.next_wake(self.now) {
            self.events.push(at, Event::Wake(k as u32, s.wake));
        }
    }

    fn slot_done(&mut self, k: u32, job: Job) {
        let (i, _) = job;
        if self.orphans.remove(&job).is_some() {
            // Its answer left at the deadline (or it was a probe's work); its slot is free
            // now. (A `mixed` orphan's bandwidth half is not run.)
            self.probe_work_done(k as usize, job);
            return self.start_next_on_slot(k as usize);
        }
        if !(self.valid(job) && self.checks[i as usize].stage == Stage::Slot) {
            return;
        }
        self.start_next_on_slot(k as usize);
        self.served(i);
    }

    /// A slot of backend `k` is free: the next live job in its queue takes it.
    fn start_next_on_slot(&mut self, k: usize) {
        let (checks, orphans) = (&self.checks, &self.orphans);
        let live = |(i, a): Job| {
            // Orphans first: a probe's work has no request to look at.
            orphans.contains_key(&(i, a)) || {
                let c = &checks[i as usize];
                c.live && c.attempt == a && c.stage == Stage::Queued
            }
        };
        if let Some(((i, a), end)) = self.servers[k].free_slot(self.now, live) {
            if !self.orphans.contains_key(&(i, a)) {
                self.checks[i as usize].stage = Stage::Slot;
            }
            self.events.push(end, Event::SlotDone(k as u32, (i, a)));
        }
    }

    fn wake(&mut self, k: u32) {
        let k = k as usize;
        let mut done = std::mem::take(&mut self.scratch);
        done.clear();
        let next = self.servers[k].wake_shared(self.now, &mut done);
        let s = &mut self.servers[k];
        s.wake += 1;
        if let Some(at) = next {
            self.events.push(at, Event::Wake(k as u32, s.wake));
        }
        for &job in &done {
            if self.orphans.remove(&job).is_some() {
                self.probe_work_done(k, job);
            } else if self.valid(job) {
                self.served(job.0);
            }
        }
        self.scratch = done;
    }

    /// Request `i`'s work (or its half) is done at its backend.
    fn served(&mut self, i: u32) {
        let r = &mut self.reqs[i as usize];
        let c = &mut self.checks[i as usize];
        let k = r.backend as usize;
        let s = &mut self.servers[k];
        if s.life == Life::Stalled {
            c.stage = Stage::Stuck;
            return;
        }
        if s.mode == lab::backend::Mode::Mixed && !r.second_half {
            r.second_half = true;
            let job = (i, c.attempt);
            let admitted = s.admit(self.now, job, r.work - r.work / 2, false);
            return self.admitted(i, k, admitted);
        }
        s.answered();
        c.stage = Stage::Away;
        r.status = 200;
        if self.probes.on
            && let Some((attempt, rif, at)) = self.probes.arrived.remove(&i)
            && attempt == c.attempt
        {
            let latency = Nanos(self.now - at);
            self.probes.latency[k].record(rif, latency, Nanos(self.now));
        }
        self.reply(i);
    }

    /// The backend answers request `i` (200, 500 or 503): the answer reaches the balancer
    /// after the delay. A dying backend's last answer starts its last words.
    fn reply(&mut self, i: u32) {
        let k = self.reqs[i as usize].backend as usize;
        let a = self.checks[i as usize].attempt;
        if self.last[k] == Some((i, a)) {
            self.events
                .push(self.now + LAST_WORDS, Event::Die(k as u32));
        }
        if self.delay == 0 {
            self.on_reply(i);
        } else {
            self.events.push(self.now + self.delay, Event::Reply(i, a));
        }
    }

    fn on_reply(&mut self, i: u32) {
        let r = &mut self.reqs[i as usize];
        let (status, backend, balancer) = (r.status, r.backend as usize, r.balancer);
        // A status `next_upstream` lists moves the request on, as the proxy's attempts do.
        let now = Nanos(self.now);
        let budget = &mut self.balancers[balancer as usize].budget;
        let mut paid = false;
        let moves_on = r.tried.answered(status, Replay::Safe, false, || {
            budget.as_mut().is_none_or(|b| {
                paid = b.try_withdraw(now);
                paid
            })
        });
        r.charged = paid;
        // As the proxy's attempts: a status that moved the request on is the backend's
        // failure (max_fails); a relayed one in `failure_statuses` a failed answer.
        let outcome = if moves_on {
            Outcome::Failure
        } else {
            self.contender
                .policy
                .options
                .failure_statuses
                .outcome(status)
        };
        if let Some(ticket) = r.ticket.take() {
            self.complete(balancer, ticket, outcome);
        }
        if moves_on {
            return self.attempt(i);
        }
        self.finish(i, status, Some(backend));
    }

    /// Request `i`'s attempt failed as the proxy would see it: the attempt machine decides.
    fn on_failure(&mut self, i: u32, fault: Fault, connection: Connection) {
        let failure = AttemptFailure {
            fault,
            connection,
            request: if fault == Fault::Closed {
                RequestSent::Whole
            } else {
                RequestSent::Nothing
            },
            response: ResponseReceived::Nothing,
            replay: Replay::Safe,
        };
        let r = &mut self.reqs[i as usize];
        let now = Nanos(self.now);
        let budget = &mut self.balancers[r.balancer as usize].budget;
        let mut paid = false;
        let step = r.tried.failed_within(&failure, false, || {
            budget.as_mut().is_none_or(|b| {
                paid = b.try_withdraw(now);
                paid
            })
        });
        r.charged = paid;
        if step.next == Next::ResendFresh {
            // The same attempt (and ticket) on a fresh connection; a new number, so that what
            // was scheduled for the dropped one goes stale.
            r.reused = false;
            self.attempts = self.attempts.wrapping_add(1);
            let c = &mut self.checks[i as usize];
            c.attempt = self.attempts;
            c.stage = Stage::Away;
            r.second_half = false;
            return self.send(i);
        }
        let balancer = r.balancer;
        if let (Some(ticket), Some(outcome)) = (r.ticket.take(), step.outcome()) {
            self.complete(balancer, ticket, outcome);
        }
        match step.next {
            Next::NextBackend { .. } => self.attempt(i),
            Next::GiveUp { .. } | Next::ResendFresh => {
                let status = self.reqs[i as usize].tried.own_answer().0;
                self.finish(i, status, None);
            }
        }
    }

    /// The client has its answer.
    fn finish(&mut self, i: u32, status: u16, backend: Option<usize>) {
        let r = &self.reqs[i as usize];
        if r.measured {
            self.tally.record(&Request {
                intended: Duration::from_nanos(r.intended),
                started: Duration::from_nanos(r.intended),
                latency: Some(Duration::from_nanos(self.now - r.intended)),
                status: Some(status),
                backend,
                timed_out: false,
            });
        } else {
            self.tally
                .record_unmeasured_answer(Duration::from_nanos(self.now), status < 500);
        }
        self.release(i);
    }

    /// Request `i` is over (answered or given up): its place is freed, its user goes on.
    fn release(&mut self, i: u32) {
        let r = &mut self.reqs[i as usize];
        debug_assert!(r.ticket.is_none());
        self.checks[i as usize].live = false;
        if self.probes.on {
            self.probes.arrived.remove(&i);
        }
        let user = r.user;
        self.free.push(i);
        self.in_flight -= 1;
        // Answered requests leave the front of the deadline queue as they come.
        while let Some(&(_, j, serial)) = self.pending.front() {
            let p = &self.checks[j as usize];
            if p.live && p.serial == serial {
                break;
            }
            self.pending.pop_front();
        }
        if let Some(u) = user {
            self.events.push(self.now, Event::Send(u));
        }
    }

    /// Clients whose deadline passed give up; the next deadline is scheduled.
    fn deadlines(&mut self) {
        self.deadline_set = false;
        while let Some(&(at, i, serial)) = self.pending.front() {
            let c = &self.checks[i as usize];
            if !(c.live && c.serial == serial) {
                self.pending.pop_front();
                continue;
            }
            if at > self.now {
                self.deadline_set = true;
                self.events.push(at, Event::Deadline);
                return;
            }
            self.pending.pop_front();
            self.expire(i);
        }
    }

    /// Request `i`'s client gave up: the proxy sees it go, cancels the attempt and closes the
    /// backend connection, which frees what the request held there.
    fn expire(&mut self, i: u32) {
        let now = self.now;
        if self.checks[i as usize].stage == Stage::Waiting {
            self.leave_queue(i);
        }
        let balancer = self.reqs[i as usize].balancer;
        if let Some(ticket) = self.reqs[i as usize].ticket.take() {
            self.complete(balancer, ticket, Outcome::Abandoned);
        }
        let r = &mut self.reqs[i as usize];
        let c = &mut self.checks[i as usize];
        let k = r.backend as usize;
        let job = (i, c.attempt);
        let stage = std::mem::replace(&mut c.stage, Stage::Away);
        if r.measured {
            self.tally.record(&Request {
                intended: Duration::from_nanos(r.intended),
                started: Duration::from_nanos(r.intended),
                latency: None,
                status: None,
                backend: None,
                timed_out: true,
            });
        }
        match stage {
            Stage::Slot => self.start_next_on_slot(k),
            Stage::Queued => self.servers[k].forget_queued(self.now),
            Stage::Shared => {
                if self.servers[k].remove_shared(now, job) {
                    self.rewake(k);
                }
            }
            Stage::Away | Stage::Stuck | Stage::Waiting => {}
        }
        if self.last[k] == Some(job) {
            self.events.push(now + LAST_WORDS, Event::Die(k as u32));
        }
        self.release(i);
    }

    // ---- failures ----

    fn die(&mut self, k: u32) {
        let k = k as usize;
        if self.servers[k].life == Life::Dead {
            return;
        }
        self.servers[k].life = Life::Dead;
        self.last[k] = None;
        self.drop_connections(k);
    }

    fn outage(&mut self, k: u32, out: bool) {
        let k = k as usize;
        let s = &mut self.servers[k];
        // Outages may overlap: the backend is out while any of them lasts.
        s.outages = if out {
            s.outages + 1
        } else {
            s.outages.saturating_sub(1)
        };
        let was = std::mem::replace(&mut s.out, s.outages > 0);
        if s.out && !was {
            self.drop_connections(k);
        }
    }

    /// Backend `k` drops every connection: its requests' attempts fail as closed before any
    /// answer (on a kept-alive connection), and the balancers' idle connections to it go.
    fn drop_connections(&mut self, k: usize) {
        let mut dropped = std::mem::take(&mut self.scratch);
        dropped.clear();
        self.servers[k].drop_all(self.now, &mut dropped);
        self.probes.jobs[k] = 0;
        // Orphans' work goes with the rest; their answers are out.
        let orphans = &mut self.orphans;
        dropped.retain(|job| orphans.remove(job).is_none());
        orphans.retain(|_, &mut b| b as usize != k);
        for b in &mut self.balancers {
            b.warm[k] = false;
        }
        // Requests stuck at it or on the wire to it are not in its queues: find them too.
        for (i, (r, c)) in self.reqs.iter().zip(&self.checks).enumerate() {
            if c.live
                && r.backend as usize == k
                && r.ticket.is_some()
                && matches!(c.stage, Stage::Slot | Stage::Stuck)
            {
                dropped.push((i as u32, c.attempt));
            }
        }
        dropped.sort_unstable();
        dropped.dedup();
        for &(i, a) in &dropped {
            if self.last[k] == Some((i, a)) {
                // Its last request went with the rest: it dies now (an outage's drop).
                self.events
                    .push(self.now + LAST_WORDS, Event::Die(k as u32));
            }
            if self.valid((i, a)) {
                let r = &self.reqs[i as usize];
                self.checks[i as usize].stage = Stage::Away;
                let connection = if r.reused {
                    Connection::Reused
                } else {
                    Connection::Fresh
                };
                let e = Event::Failed(i, a, Fault::Closed, connection);
                self.events.push(self.now + self.delay, e);
            }
        }
        self.scratch = dropped;
    }

    // ---- probes ----

    /// Balancer `b` sends the probes its pool wants: each is lost, or reaches its backend
    /// after the network delay.
    fn send_probes(&mut self, b: u32) {
        let mut wanted = std::mem::take(&mut self.probes.wanted);
        wanted.clear();
        self.balancers[b as usize].pool.take_probes(&mut wanted);
        for &id in &wanted {
            self.probes.sent += 1;
            if self.probes.loss > 0.0 && self.probes.rng.random::<f64>() < self.probes.loss {
                continue;
            }
            if self.delay == 0 {
                self.probe_arrives(b, id);
            } else {
                self.events
                    .push(self.now + self.delay, Event::Probe(b, id.0));
            }
        }
        self.probes.wanted = wanted;
    }

    /// Balancer `b`'s probe reaches pool backend `id`: a backend that answers at all answers
    /// at once with its RIF and its estimate, and does the probe's work as it does a
    /// request's.
    fn probe_arrives(&mut self, b: u32, id: BackendId) {
        let Some(&k) = self.plan_of.get(id.index()) else {
            return;
        };
        let s = &mut self.servers[k];
        if !s.answers() {
            return;
        }
        let rif = s.jobs().saturating_sub(self.probes.jobs[k]);
        let latency = self.probes.latency[k].estimate(rif, Nanos(self.now));
        if self.probes.cost > 0 {
            self.probes.serial = self.probes.serial.wrapping_add(1);
            let job = (PROBE, self.probes.serial);
            match s.admit_probe(self.now, job, self.probes.cost) {
                Admit::Refused => {}
                admitted => {
                    self.orphans.insert(job, k as u32);
                    self.probes.jobs[k] += 1;
                    match admitted {
                        Admit::Slot(end) => self.events.push(end, Event::SlotDone(k as u32, job)),
                        Admit::Shared => self.rewake(k),
                        Admit::Queued | Admit::Refused => {}
                    }
                }
            }
        }
        let probe = Probe { rif, latency };
        if self.delay == 0 {
            self.balancers[b as usize]
                .pool
                .probed(id, probe, Nanos(self.now));
        } else {
            self.probes.answers.push_back((b, id, probe));
            self.events.push(self.now + self.delay, Event::ProbeAnswer);
        }
    }

    /// An orphan's work at backend `k` ended: if it was a probe's, one fewer is there.
    fn probe_work_done(&mut self, k: usize, job: Job) {
        if job.0 == PROBE {
            self.probes.jobs[k] = self.probes.jobs[k].saturating_sub(1);
        }
    }

    // ---- load reports and samples ----

    fn step(&mut self) {
        self.steps += 1;
        // Room may come without a completion (a failed backend's `fail_timeout` passing): the
        // queues are looked at again every step (the proxy's waiters look every second).
        for b in 0..self.balancers.len() as u32 {
            self.serve_queue(b);
        }
        let keep = self.report_delay + WINDOW + 2 * self.step_every;
        let sample = self.steps.is_multiple_of(self.steps_per_sample);
        for (k, s) in self.servers.iter_mut().enumerate() {
            let now = s.read(self.now);
            let ring = &mut self.readings[k];
            ring.push_back(now);
            while ring.len() > 2 && ring[1].at + keep < self.now {
                ring.pop_front();
            }
            if sample && self.now > 0 && self.now <= self.length {
                let window = if self.steps_per_sample > 1 || self.step_every == STEP {
                    WINDOW
                } else {
                    self.step_every
                };
                let then = ring
                    .iter()
                    .rev()
                    .find(|r| r.at + window <= self.now)
                    .or(ring.front())
                    .copied()
                    .unwrap_or(now);
                let (cpu, mem, net) = s.utilization(&then, &now);
                self.samples.push(LoadSample {
                    at: Duration::from_nanos(self.now),
                    backend: k,
                    cpu,
                    mem,
                    net,
                });
            }
        }
        if !self.finished() {
            self.events.push(self.now + self.step_every, Event::Step);
        }
    }

    /// Backend `k`'s report as a balancer reads it now: its trailing window as measured
    /// `report_delay` ago.
    fn report(&self, k: usize) -> LoadReport {
        let at = self.now.saturating_sub(self.report_delay);
        let ring = &self.readings[k];
        let Some(now) = ring.iter().rev().find(|r| r.at <= at).or(ring.front()) else {
            return LoadReport::default();
        };
        let then = ring
            .iter()
            .rev()
            .find(|r| r.at + WINDOW <= now.at)
            .or(ring.front())
            .unwrap_or(now);
        let (cpu, mem, net) = self.servers[k].utilization(then, now);
        LoadReport {
            cpu,
            mem,
            net,
            ..LoadReport::default()
        }
    }

    fn poll(&mut self, b: u32) {
        let primaries = self.contender.policy.primaries.len();
        let polls: Vec<Poll> = (0..primaries)
            .map(|id| {
                let k = self.plan_of[id];
                if self.servers[k].answers() {
                    Poll::Report(self.report(k))
                } else {
                    Poll::Missed
                }
            })
            .collect();
        let now = Nanos(self.now);
        let balancer = &mut self.balancers[b as usize];
        let counts: Vec<(u64, u64)> = balancer.pool.states()[..primaries]
            .iter()
            .map(|s| (s.requests(), s.failures()))
            .collect();
        if let Some(feed) = &mut balancer.feed {
            let round = feed.round(&polls, &counts, now);
            let current: Vec<u32> = balancer.pool.states()[..primaries]
                .iter()
                .map(|s| s.weight())
                .collect();
            if round.weights != current {
                balancer.pool.set_weights(&round.weights, now);
                self.serve_queue(b);
            }
        }
        if !self.finished() {
            let interval = ns(self.contender.policy.poll_interval).max(1);
            self.events.push(self.now + interval, Event::Poll(b));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use balance::{Algorithm, BackendSpec, Options};

    #[test]
    fn a_request_answer_reads_one_line_and_its_check_a_quarter() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<Req>(), 64);
        // Everything an answer reads ends before the first line does.
        assert!(offset_of!(Req, user) + size_of::<Option<u32>>() <= 64);
        assert!(offset_of!(Req, ticket) + size_of::<Option<Ticket>>() <= 64);
        assert_eq!(size_of::<Req>(), 128);
        assert_eq!(size_of::<Check>(), 16);
    }

    /// The case the proxy and the simulator once disagreed on: a resent request meets the
    /// keep-alive race again (an HTTP/2 backend's shared connection reports its connection
    /// as reused after the resend too; `tests/backend_h2.rs` pins the proxy's side). Both ask
    /// `balance::Attempts`, which sends it to the next backend without blame; the simulator
    /// used to give up with 502.
    #[test]
    fn a_second_keep_alive_race_after_a_resend_moves_to_the_next_backend() {
        let scenario = Scenario::parse(
            r#"
[[backend]]
name = "a"
[[backend]]
name = "b"
[traffic]
pattern = "constant:1"
duration = "1s"
cost = "const:1000"
[[algorithm]]
name = "round_robin"
"#,
            "drift",
        )
        .expect("a valid scenario");
        let traffic = scenario.traffic().expect("valid traffic");
        let contender = Contender {
            label: "round_robin".into(),
            policy: balance::Policy {
                algorithm: Algorithm::RoundRobin,
                options: Options::default(),
                primaries: vec![BackendSpec::new(1), BackendSpec::new(1)],
                backups: Vec::new(),
                retries: None,
                next_upstream: balance::NextUpstream::DEFAULT,
                retry_budget: None,
                queue: 0,
                queue_timeout: Duration::from_secs(60),
                poll_interval: Duration::from_secs(1),
                stale_after: 3,
            },
            plan_of: vec![0, 1],
        };
        let knobs = Knobs::of(&scenario);
        let mut sim = Sim::new(&scenario, &traffic, &contender, &knobs, 1);
        sim.start_request(1000.0, 0, None);
        let i = 0;
        assert_eq!(sim.reqs[i as usize].tried.tried().len(), 1);
        sim.on_failure(i, Fault::Closed, Connection::Reused);
        assert_eq!(
            sim.reqs[i as usize].tried.tried().len(),
            1,
            "the first race is resent to the same backend"
        );
        sim.on_failure(i, Fault::Closed, Connection::Reused);
        let r = &sim.reqs[i as usize];
        assert!(sim.checks[i as usize].live, "not given up");
        assert_eq!(r.tried.tried().len(), 2, "the next backend has it");
        let first = &sim.balancers[0].pool.states()[0];
        assert_eq!(first.failures(), 0, "and the first backend is not blamed");
    }
}
