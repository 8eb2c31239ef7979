//! The closed-loop users, as siege (`-c`), ab (`-c`) and JMeter (a thread group) run them, the
//! tools of the papers we reproduce: each virtual user sends a request, waits for its answer,
//! and sends the next at once (no think time), on its own kept-alive connection.
//!
//! The users may ramp ([`Users::Steps`]), as seed 000's JMeter runs (200 → 3000 threads) and
//! seed 001's siege runs (200 → 2000 users) did: user `k` is active while `k < users(t)`; an
//! inactive user waits for the next step, and a user that becomes inactive (a falling ramp)
//! stops after its current request.
//!
//! Latency counts from the actual send, as those tools count it. That is what makes the closed
//! loop kind to a stalling server: a user stuck on a slow request sends nothing else, so the
//! requests it would have sent meanwhile are never measured (coordinated omission). The open
//! loop is the default for that reason; the closed loop is here to reproduce the papers.
//!
//! The k-th request sent takes the k-th cost of the plan's trace, so a seed gives the same
//! costs in the same order whatever the timing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::progress::Counters;
use super::wire::Connection;
use super::{Outcome, Plan, Spread, client_addr, exchange, request_prefix, target_of};
use crate::schedule::MAX_ARRIVALS;

/// How many virtual users are active, over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Users {
    /// `USERS`: this many from start to end.
    Fixed(u32),
    /// `steps:START-END:STEP:HOLD`: `start` users, `step` more (or fewer, when `end < start`)
    /// every `hold`, up to (down to) `end`.
    Steps {
        start: u32,
        end: u32,
        step: u32,
        hold: Duration,
    },
}

/// The most users a run may have: each holds a connection, so a file descriptor here and one
/// at the server.
pub const MAX_USERS: u32 = 100_000;

impl Users {
    /// Users active at `t` from the start of the run.
    pub fn at(&self, t: Duration) -> u32 {
        match *self {
            Users::Fixed(n) => n,
            Users::Steps {
                start,
                end,
                step,
                hold,
            } => {
                let steps = (t.as_nanos() / hold.as_nanos().max(1)).min(u128::from(u32::MAX));
                let change = (steps as u64).saturating_mul(u64::from(step));
                if end >= start {
                    (u64::from(start) + change).min(u64::from(end)) as u32
                } else {
                    u64::from(start).saturating_sub(change).max(u64::from(end)) as u32
                }
            }
        }
    }

    /// The most users ever active.
    pub fn max(&self) -> u32 {
        match *self {
            Users::Fixed(n) => n,
            Users::Steps { start, end, .. } => start.max(end),
        }
    }

    /// When the count may next change after `t`, if ever.
    fn next_change(&self, t: Duration) -> Option<Duration> {
        match *self {
            Users::Fixed(_) => None,
            Users::Steps { hold, .. } => {
                let hold_ns = hold.as_nanos().max(1);
                let next = (t.as_nanos() / hold_ns + 1).saturating_mul(hold_ns);
                u64::try_from(next).ok().map(Duration::from_nanos)
            }
        }
    }
}

impl std::str::FromStr for Users {
    type Err = String;

    fn from_str(s: &str) -> Result<Users, String> {
        let count = |v: &str, what: &str| -> Result<u32, String> {
            v.parse::<u32>()
                .ok()
                .filter(|&n| n <= MAX_USERS)
                .ok_or_else(|| {
                    format!("{what} must be a whole number from 0 to {MAX_USERS}, not {v:?}")
                })
        };
        let form = "a number of users such as 200, or a ramp steps:START-END:STEP:HOLD such as steps:200-2000:200:30s";
        if let Some(ramp) = s.strip_prefix("steps:") {
            let parts: Vec<&str> = ramp.split(':').collect();
            let [range, step, hold] = parts.as_slice() else {
                return Err(format!("{s:?}: write {form}"));
            };
            let (a, b) = range
                .split_once('-')
                .ok_or_else(|| format!("{s:?}: {range:?} is not a range such as 200-2000"))?;
            let in_s = |e: String| format!("{s:?}: {e}");
            let (start, end) = (
                count(a, "START").map_err(in_s)?,
                count(b, "END").map_err(in_s)?,
            );
            let step = count(step, "STEP").map_err(in_s)?;
            if step == 0 {
                return Err(format!("{s:?}: STEP must be at least 1 user"));
            }
            if start.max(end) == 0 {
                return Err(format!("{s:?}: a ramp from 0 to 0 users sends nothing"));
            }
            let hold = match humantime::parse_duration(hold) {
                Ok(d) if !d.is_zero() => d,
                _ => {
                    return Err(format!(
                        "{s:?}: HOLD must be a duration such as 30s, not {hold:?}"
                    ));
                }
            };
            return Ok(Users::Steps {
                start,
                end,
                step,
                hold,
            });
        }
        match s.parse::<u32>() {
            Ok(0) => Err(format!("{s:?}: at least 1 user")),
            Ok(n) if n <= MAX_USERS => Ok(Users::Fixed(n)),
            Ok(_) => Err(format!("{s:?}: at most {MAX_USERS} users")),
            Err(_) => Err(format!("{s:?}: write {form}")),
        }
    }
}

/// What the users share: the plan's target and costs, and the count of requests sent.
#[derive(Debug)]
struct Shared {
    targets: Vec<std::net::SocketAddr>,
    spread: Spread,
    /// The request head up to the cost (`None`: the path is not a request target).
    prefix: Option<Arc<[u8]>>,
    costs: Vec<f64>,
    timeout: Duration,
    users: Users,
    duration: Duration,
    /// Requests sent so far: the next one's index, and so its cost.
    next: AtomicUsize,
    start: Instant,
    counters: Option<Arc<Counters>>,
}

pub(super) async fn run(
    plan: &Plan,
    (targets, spread): (&[std::net::SocketAddr], Spread),
    users: Users,
    duration: Duration,
    clients: u32,
    counters: Option<Arc<Counters>>,
) -> Vec<Outcome> {
    let shared = Arc::new(Shared {
        targets: targets.to_vec(),
        spread,
        prefix: request_prefix(&plan.path),
        costs: plan.trace.iter().map(|a| a.cost_ms).collect(),
        timeout: plan.timeout,
        users,
        duration,
        next: AtomicUsize::new(0),
        start: Instant::now(),
        counters,
    });
    let clients = clients.max(1);
    let mut tasks = JoinSet::new();
    for i in 0..users.max() {
        let shared = Arc::clone(&shared);
        tasks.spawn(user(shared, i, i % clients));
    }
    let mut sent: Vec<(usize, Outcome)> = Vec::new();
    while let Some(done) = tasks.join_next().await {
        if let Ok(mine) = done {
            sent.extend(mine);
        }
    }
    sent.sort_unstable_by_key(|(k, _)| *k);
    sent.into_iter().map(|(_, o)| o).collect()
}

/// User `i`: sends from client `client` (to instance `i mod n` of a fleet, or `client mod n`
/// spread by client) while it is active and the run lasts; its requests,
/// each with its index among all the run's.
async fn user(shared: Arc<Shared>, i: u32, client: u32) -> Vec<(usize, Outcome)> {
    let start = shared.start;
    let mut connection: Option<Connection> = None;
    let mut mine = Vec::new();
    loop {
        let now = start.elapsed();
        if now >= shared.duration {
            break;
        }
        if i >= shared.users.at(now) {
            // Not active (yet, or any more): wait for the next step.
            match shared.users.next_change(now) {
                Some(t) if t < shared.duration => {
                    tokio::time::sleep_until(start + t).await;
                    continue;
                }
                _ => break,
            }
        }
        let k = shared.next.fetch_add(1, Ordering::Relaxed);
        if k >= MAX_ARRIVALS {
            break;
        }
        let cost_ms = match shared.costs.len() {
            0 => 0.0,
            n => shared.costs[k % n],
        };
        let sent_at = Instant::now();
        let started = sent_at - start;
        if let Some(c) = &shared.counters {
            c.sent();
        }
        let mut outcome = Outcome {
            intended: started,
            started,
            latency: None,
            ended: None,
            status: None,
            backend: None,
            cost_ms,
            timed_out: false,
            client,
        };
        let deadline = sent_at + shared.timeout;
        let (exchanged, kept) = exchange(
            connection.take(),
            target_of(
                &shared.targets,
                match shared.spread {
                    Spread::RoundRobin => i,
                    Spread::Client => client,
                } as usize,
            ),
            client_addr(client),
            shared.prefix.as_deref(),
            cost_ms,
            deadline,
        )
        .await;
        // Kept for the next request unless the server closed it, or it failed or timed out.
        connection = kept;
        outcome.settle(exchanged, sent_at, start);
        if let Some(c) = &shared.counters {
            c.done(outcome.verdict());
        }
        mine.push((k, outcome));
    }
    mine
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_parse_or_say_what_is_wrong() {
        assert_eq!("200".parse::<Users>(), Ok(Users::Fixed(200)));
        assert_eq!(
            "steps:200-3000:200:30s".parse::<Users>(),
            Ok(Users::Steps {
                start: 200,
                end: 3000,
                step: 200,
                hold: Duration::from_secs(30)
            })
        );
        for bad in [
            "",
            "0",
            "-1",
            "1.5",
            "100001",
            "steps:200-3000:200",
            "steps:200:200:1s",
            "steps:0-0:1:1s",
            "steps:1-10:0:1s",
            "steps:1-10:1:0s",
            "steps:1-10:1:soon",
            "steps:1-200000:1:1s",
        ] {
            let e = bad.parse::<Users>().unwrap_err();
            assert!(e.contains(bad) || bad.is_empty(), "{bad}: {e}");
        }
    }

    #[test]
    fn a_ramp_adds_a_step_every_hold_up_to_its_end() {
        let up: Users = "steps:200-1000:300:10s".parse().unwrap();
        let at = |u: &Users, s: f64| u.at(Duration::from_secs_f64(s));
        assert_eq!(
            [0.0, 9.9, 10.0, 20.0, 30.0, 1e6].map(|s| at(&up, s)),
            [200, 200, 500, 800, 1000, 1000]
        );
        assert_eq!(up.max(), 1000);
        let down: Users = "steps:1000-200:300:10s".parse().unwrap();
        assert_eq!(
            [0.0, 10.0, 20.0, 30.0, 1e6].map(|s| at(&down, s)),
            [1000, 700, 400, 200, 200]
        );
        assert_eq!(
            up.next_change(Duration::from_secs(15)),
            Some(Duration::from_secs(20))
        );
        assert_eq!(Users::Fixed(3).next_change(Duration::ZERO), None);
    }
}
