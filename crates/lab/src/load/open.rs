//! The open-loop sender: every arrival of the trace leaves at its time, on a task of its own,
//! whatever became of the earlier ones.
//!
//! One loop walks the trace and spawns a task per request at its time; the task takes an idle
//! kept-alive connection of its client (or opens one), sends, and puts the connection back
//! when the answer has come. Arrivals already due when the loop gets to them (it woke late,
//! or several fall within the timer's 1 ms tick) leave at once, without a trip through the
//! timer.

use std::sync::{Arc, Mutex};

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::progress::Counters;
use super::{Exchange, Outcome, Plan, client_addr, exchange};
use crate::client::Client;

/// Idle kept-alive connections, per client.
type Pools = Arc<Vec<Mutex<Vec<Client>>>>;

pub(super) async fn run(plan: &Plan, counters: Option<Arc<Counters>>) -> Vec<Outcome> {
    let clients = plan
        .trace
        .iter()
        .map(|a| a.client)
        .max()
        .map_or(0, |m| m + 1);
    let pools: Pools = Arc::new((0..clients).map(|_| Mutex::new(Vec::new())).collect());
    let path: Arc<str> = Arc::from(plan.path.as_str());
    let (target, timeout) = (plan.target, plan.timeout);
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    let mut finished = Vec::with_capacity(plan.trace.len());
    for (k, arrival) in plan.trace.iter().copied().enumerate() {
        let intended = start + arrival.at;
        if Instant::now() < intended {
            tokio::time::sleep_until(intended).await;
        }
        let started = start.elapsed();
        if let Some(c) = &counters {
            c.sent();
        }
        let (pools, path, counters) = (Arc::clone(&pools), Arc::clone(&path), counters.clone());
        tasks.spawn(async move {
            let pool = &pools[arrival.client as usize];
            let idle = pool.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let mut client =
                idle.unwrap_or_else(|| Client::bound(target, client_addr(arrival.client)));
            let mut outcome = Outcome {
                intended: arrival.at,
                started,
                latency: None,
                ended: None,
                status: None,
                backend: None,
                cost_ms: arrival.cost_ms,
                timed_out: false,
                client: arrival.client,
            };
            match exchange(&mut client, &path, arrival.cost_ms, intended + timeout).await {
                Exchange::Answered {
                    status,
                    backend,
                    at,
                } => {
                    outcome.latency = Some(at - intended);
                    outcome.ended = Some(at - start);
                    outcome.status = Some(status);
                    outcome.backend = backend;
                    pool.lock().unwrap_or_else(|p| p.into_inner()).push(client);
                }
                Exchange::TimedOut => outcome.timed_out = true,
                Exchange::Failed => {}
            }
            if let Some(c) = &counters {
                c.done(outcome.verdict());
            }
            (k, outcome)
        });
        // Reap finished tasks as we go, so their outcomes do not pile up in the set.
        while let Some(done) = tasks.try_join_next() {
            if let Ok((k, outcome)) = done {
                finished.push((k, outcome));
            }
        }
    }
    while let Some(done) = tasks.join_next().await {
        if let Ok((k, outcome)) = done {
            finished.push((k, outcome));
        }
    }
    finished.sort_unstable_by_key(|(k, _)| *k);
    finished.into_iter().map(|(_, o)| o).collect()
}
