//! Every algorithm driven by virtual time, as the simulator will drive it: thousands of
//! arrivals and completions on a fake clock, no tokio, no real time, no sleeping.
//!
//! Three backends: two fast (1 ms), one slow (8 ms), and one of the fast ones failing for a
//! while. Each algorithm must: complete every request it started, never choose the failed
//! backend while passive health has it out, make exactly the same choices when run again with
//! the same seed, and — for the algorithms that look at load or latency — send the slow backend
//! less than a fast one.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use balance::{Affinity, Algorithm, BackendSpec, Nanos, Options, Outcome, Pool, Ticket};

const MS: u64 = 1_000_000;

/// What one replay saw.
#[derive(Debug, PartialEq)]
struct Replay {
    /// The backend of every pick, in order.
    picks: Vec<u32>,
    served: [u32; 3],
    /// Picks of the failing backend while passive health had it out.
    picked_while_out: u32,
}

fn replay(algorithm: Algorithm, seed: u64) -> Replay {
    let specs: Vec<BackendSpec> = (0..3)
        .map(|i| BackendSpec::new(1).named(&format!("10.0.0.{}:80", i + 1)))
        .collect();
    let mut pool = Pool::new(algorithm, &Options::default(), &specs, &[], seed);
    // Service times: backend 1 is slow. Backend 2 fails every request from 1 s to 2 s.
    let service = [MS, 8 * MS, MS];
    let failing = |i: usize, t: Nanos| i == 2 && (1_000 * MS..2_000 * MS).contains(&t.0);
    // Completion events, earliest first; the sequence number keeps the order total.
    let mut pending: BinaryHeap<Reverse<(u64, u64, usize)>> = BinaryHeap::new();
    let mut tickets: Vec<Option<Ticket>> = Vec::new();
    let mut out = Replay {
        picks: Vec::new(),
        served: [0; 3],
        picked_while_out: 0,
    };
    let mut first_failure: Option<Nanos> = None;
    let mut key = Vec::new();
    // 5,000 arrivals, one every 0.5 ms: enough to keep several requests in flight.
    for n in 0..5_000u64 {
        let now = Nanos(n * MS / 2);
        while let Some(Reverse((done, _, slot))) = pending.peek().copied() {
            if done > now.0 {
                break;
            }
            pending.pop();
            let t = tickets[slot].take().expect("completed once");
            let i = t.backend().index();
            let outcome = if failing(i, Nanos(done)) {
                first_failure.get_or_insert(Nanos(done));
                Outcome::Failure
            } else {
                Outcome::Success
            };
            pool.complete(t, outcome, Nanos(done));
        }
        // A client key, for the algorithms that hash one: 200 clients in turn.
        key.clear();
        let client = [192, 0, (n % 200 / 100) as u8, (n % 100) as u8];
        let affinity = match algorithm.affinity() {
            Some(Affinity::AddressOctets) => {
                key.extend_from_slice(&client);
                Some(&key[..])
            }
            Some(Affinity::Key) => {
                key.extend_from_slice(
                    format!("{}.{}.{}.{}", client[0], client[1], client[2], client[3]).as_bytes(),
                );
                Some(&key[..])
            }
            None => None,
        };
        let t = pool
            .pick(affinity, &[], now)
            .expect("two backends are always up");
        let i = t.backend().index();
        out.picks.push(i as u32);
        out.served[i] += 1;
        // Out: from its first failure for fail_timeout (10 s, longer than the replay).
        if i == 2 && first_failure.is_some_and(|f| now > f) && !failing(i, now) {
            out.picked_while_out += 1;
        }
        pending.push(Reverse((now.0 + service[i], n, tickets.len())));
        tickets.push(Some(t));
    }
    // Drain: every request completes.
    while let Some(Reverse((done, _, slot))) = pending.pop() {
        let t = tickets[slot].take().expect("completed once");
        pool.complete(t, Outcome::Success, Nanos(done));
    }
    for s in pool.states() {
        assert_eq!(s.in_flight(), 0, "{algorithm}: in flight after the drain");
    }
    out
}

/// Whether the algorithm chooses by load or latency, so a slow backend must get less.
fn load_aware(algorithm: Algorithm) -> bool {
    matches!(
        algorithm.name(),
        "least_conn" | "fair" | "random_two" | "least_time" | "p2c_ewma" | "latency" | "dwlc"
    )
}

#[test]
fn every_algorithm_runs_on_virtual_time() {
    for &algorithm in Algorithm::ALL {
        let a = replay(algorithm, 7);
        assert_eq!(
            a.picked_while_out, 0,
            "{algorithm}: the failed backend was chosen while out: {:?}",
            a.served
        );
        assert_eq!(a.picks.len(), 5_000);
        let b = replay(algorithm, 7);
        assert!(a == b, "{algorithm}: the same seed made different choices");
        if load_aware(algorithm) {
            assert!(
                a.served[1] < a.served[0],
                "{algorithm}: the slow backend got more than a fast one: {:?}",
                a.served
            );
        }
    }
}
