//! The open-loop sender: every arrival of the trace leaves at its time, on a task of its own,
//! whatever became of the earlier ones.
//!
//! One loop walks the trace and spawns a task per request at its time; the task takes an idle
//! kept-alive connection of its client to its instance (of a fleet, by [`Spread`]) or opens
//! one, sends, and puts the connection back
//! when the answer has come (unless the server closes it). Arrivals already due when the loop gets to them (it woke late,
//! or several fall within the timer's 1 ms tick) leave at once, without a trip through the
//! timer.

use std::sync::{Arc, Mutex};

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::progress::Counters;
use super::wire::Connection;
use super::{Outcome, Plan, Spread, client_addr, exchange, request_prefix, target_of};

/// Idle kept-alive connections, per client and instance (`client × n + instance`).
type Pools = Arc<Vec<Mutex<Vec<Connection>>>>;

pub(super) async fn run(
    plan: &Plan,
    targets: &[std::net::SocketAddr],
    spread: Spread,
    counters: Option<Arc<Counters>>,
) -> Vec<Outcome> {
    // The loop runs as a task of the runtime rather than in the caller's (which may be a
    // `block_on` thread): a timer that fires then wakes it on the worker that fired it, one
    // thread hop instead of two, which keeps it closer to its schedule on a busy machine.
    // In a JoinSet, so that dropping `run` stops it.
    let mut dispatch = JoinSet::new();
    dispatch.spawn(send_all(
        plan.trace.clone(),
        (targets.to_vec(), spread),
        request_prefix(&plan.path),
        plan.timeout,
        counters,
    ));
    match dispatch.join_next().await {
        Some(Ok(outcomes)) => outcomes,
        // The loop does not panic; were it cancelled, there would be nothing to report.
        _ => Vec::new(),
    }
}

async fn send_all(
    trace: Vec<crate::schedule::Arrival>,
    (targets, spread): (Vec<std::net::SocketAddr>, Spread),
    prefix: Option<Arc<[u8]>>,
    timeout: std::time::Duration,
    counters: Option<Arc<Counters>>,
) -> Vec<Outcome> {
    let clients = trace.iter().map(|a| a.client).max().map_or(0, |m| m + 1);
    let instances = targets.len().max(1);
    let pools: Pools = Arc::new(
        (0..clients as usize * instances)
            .map(|_| Mutex::new(Vec::new()))
            .collect(),
    );
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    let mut finished = Vec::with_capacity(trace.len());
    for (k, arrival) in trace.iter().copied().enumerate() {
        let intended = start + arrival.at;
        if Instant::now() < intended {
            tokio::time::sleep_until(intended).await;
        }
        let started = start.elapsed();
        if let Some(c) = &counters {
            c.sent();
        }
        let (pools, prefix, counters) = (Arc::clone(&pools), prefix.clone(), counters.clone());
        let instance = match spread {
            Spread::RoundRobin => k,
            Spread::Client => arrival.client as usize,
        };
        let target = target_of(&targets, instance);
        let slot = arrival.client as usize * instances + instance % instances;
        tasks.spawn(async move {
            let pool = &pools[slot];
            let idle = pool.lock().unwrap_or_else(|p| p.into_inner()).pop();
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
            let (exchanged, kept) = exchange(
                idle,
                target,
                client_addr(arrival.client),
                prefix.as_deref(),
                arrival.cost_ms,
                intended + timeout,
            )
            .await;
            if let Some(connection) = kept {
                pool.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(connection);
            }
            outcome.settle(exchanged, intended, start);
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
