//! The load generator against real backends: the open-loop schedule holds at 3000/s (counted at
//! the backend), a stall shows where it happened, not only in the maximum; closed-loop users
//! keep exactly their number of requests in flight, ramp on time and replay a seed's costs;
//! the trace file holds every request.

use std::net::SocketAddr;
use std::time::Duration;

use lab::Backend;
use lab::backend::Capacity;
use lab::load::{Mode, Outcome, Plan, Summary, TRACE_HEADER, Users, run, write_trace};
use lab::schedule::{Cost, Pattern, Spacing, costs, trace};

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn open_plan(backend: &Backend, trace: Vec<lab::schedule::Arrival>) -> Plan {
    Plan {
        target: backend.addr(),
        path: "/".into(),
        trace,
        timeout: Duration::from_secs(4),
        mode: Mode::Open,
        progress: None,
    }
}

/// A backend that serves 4 requests at once and refuses (503) a fifth, so "never more than 4
/// in flight" can be checked at the backend.
async fn four_slots() -> Backend {
    let capacity = Capacity {
        workers: 4,
        speed: 1.0,
        max_queue: 0,
        ..Default::default()
    };
    Backend::start_with("b", loopback(), Some(capacity))
        .await
        .unwrap()
}

/// The acceptance test: 3000 requests per second, evenly spaced, for 5 s, in a debug
/// build on a small machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedule_holds_at_3000_per_second_counted_at_the_backend() {
    let backend = Backend::start("b", loopback()).await.unwrap();
    let length = Duration::from_secs(5);
    let t = trace(
        Pattern::Constant { rps: 3000.0 },
        Spacing::Even,
        length,
        Cost::Const { ms: 0.0 },
        10,
        1,
    );
    let plan = open_plan(&backend, t);
    let outcomes = run(&plan).await;
    let s = Summary::of(&outcomes, length, plan.timeout);
    let received = backend.requests();
    println!(
        "constant 3000/s for 5 s: sent {}, the backend received {received}, behind at most {:.2} ms; {s}",
        s.sent, s.behind_max_ms
    );
    assert!((14_700..=15_300).contains(&received), "{received}");
    assert_eq!(s.ok, s.sent, "{s}");
    assert!(s.behind_max_ms < 50.0, "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_second_stall_shows_in_the_p90() {
    // One slot: a request that costs 1 s holds up every request behind it.
    let capacity = Capacity {
        workers: 1,
        speed: 1.0,
        max_queue: 10_000,
        ..Capacity::default()
    };
    let backend = Backend::start_with("b", loopback(), Some(capacity))
        .await
        .unwrap();
    let length = Duration::from_secs(5);
    let mut t = trace(
        Pattern::Constant { rps: 100.0 },
        Spacing::Even,
        length,
        Cost::Const { ms: 1.0 },
        1,
        1,
    );
    t[200].cost_ms = 1000.0;
    let plan = open_plan(&backend, t);
    let s = Summary::of(&run(&plan).await, length, plan.timeout);
    println!("100/s for 5 s with one 1 s stall: {s}");
    // About 100 of 500 requests arrive during the stall and wait for it: a fifth of the run,
    // so the p90 sees it (a closed-loop client would have counted one slow request).
    assert!(s.p90_ms > 200.0, "{s}");
    assert!(s.p50_ms < 100.0, "{s}");
}

fn closed_plan(backend: &Backend, users: Users, duration: Duration, cost: Cost, seed: u64) -> Plan {
    Plan {
        target: backend.addr(),
        path: "/".into(),
        trace: costs(cost, 10_000, seed),
        timeout: Duration::from_secs(4),
        mode: Mode::Closed {
            users,
            duration,
            clients: users.max(),
        },
        progress: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_users_keep_four_requests_in_flight_and_no_more() {
    let backend = four_slots().await;
    let plan = closed_plan(
        &backend,
        Users::Fixed(4),
        Duration::from_secs(1),
        Cost::Const { ms: 50.0 },
        1,
    );
    let outcomes = run(&plan).await;
    let s = Summary::of(&outcomes, Duration::from_secs(1), plan.timeout);
    println!("4 users, 50 ms each, for 1 s: {s}");
    // Each user sends at most 20 (one every 50 ms and a bit); a fifth request in flight would
    // have been refused with 503.
    assert!((64..=80).contains(&s.sent), "{s}");
    assert_eq!(s.ok, s.sent, "{s}");
    assert_eq!(backend.requests(), s.sent);
    assert_eq!(s.behind_max_ms, 0.0, "{s}");
    for o in &outcomes {
        let latency = o.latency.unwrap();
        assert!(latency >= Duration::from_millis(50), "{o:?}");
        assert_eq!(o.ended, Some(o.started + latency), "{o:?}");
        assert!(o.started < Duration::from_secs(1), "{o:?}");
    }
    assert!(s.p50_ms < 70.0, "{s}");
    // Every user sent from its own address.
    let mut per_client = [0; 4];
    for o in &outcomes {
        per_client[o.client as usize] += 1;
    }
    assert!(per_client.iter().all(|&n| n >= 15), "{per_client:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ramp_of_users_adds_a_user_every_hold() {
    let backend = four_slots().await;
    let users: Users = "steps:1-4:1:250ms".parse().unwrap();
    let plan = closed_plan(
        &backend,
        users,
        Duration::from_secs(1),
        Cost::Const { ms: 20.0 },
        1,
    );
    let outcomes = run(&plan).await;
    assert!(outcomes.iter().all(|o| o.status == Some(200)));
    // User k (client k) starts at k × 250 ms, and is busy from then on.
    for k in 0..4u32 {
        let first = outcomes
            .iter()
            .filter(|o| o.client == k)
            .map(|o| o.started)
            .min()
            .unwrap();
        let from = Duration::from_millis(250) * k;
        assert!(
            first >= from && first < from + Duration::from_millis(100),
            "user {k} started at {first:?}"
        );
    }
    // 1 + 2 + 3 + 4 user-quarters of a second at 20 ms and a bit a request: at most 125.
    assert!((80..=125).contains(&outcomes.len()), "{}", outcomes.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_seed_gives_the_same_closed_loop_costs() {
    let backend = Backend::start("b", loopback()).await.unwrap();
    let cost: Cost = "uniform:1:5".parse().unwrap();
    let sent_costs =
        |outcomes: Vec<Outcome>| -> Vec<f64> { outcomes.iter().map(|o| o.cost_ms).collect() };
    let mut runs = Vec::new();
    for seed in [7, 7, 8] {
        let plan = closed_plan(
            &backend,
            Users::Fixed(3),
            Duration::from_millis(300),
            cost,
            seed,
        );
        let outcomes = run(&plan).await;
        assert!(outcomes.iter().all(|o| o.status == Some(200)));
        // The backend held each request for its cost, so the cost went out with it.
        assert!(
            outcomes
                .iter()
                .all(|o| o.latency.unwrap().as_secs_f64() * 1000.0 >= o.cost_ms)
        );
        runs.push(sent_costs(outcomes));
    }
    let n = runs.iter().map(Vec::len).min().unwrap();
    assert!(n > 50, "{n}");
    let seven: Vec<f64> = costs(cost, n, 7).iter().map(|a| a.cost_ms).collect();
    assert_eq!(runs[0][..n], seven[..]);
    assert_eq!(runs[1][..n], seven[..]);
    assert_ne!(runs[2][..n], seven[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_file_has_a_line_per_request_timeouts_included() {
    let backend = Backend::start("b", loopback()).await.unwrap();
    let mut t = trace(
        Pattern::Constant { rps: 100.0 },
        Spacing::Even,
        Duration::from_millis(500),
        Cost::Const { ms: 1.0 },
        3,
        1,
    );
    t[10].cost_ms = 5000.0;
    let plan = Plan {
        timeout: Duration::from_millis(300),
        progress: Some(indicatif::ProgressBar::hidden()),
        ..open_plan(&backend, t)
    };
    let outcomes = run(&plan).await;
    // The bar was driven to the end of the run, with the final counts.
    let bar = plan.progress.as_ref().unwrap();
    assert_eq!(bar.position(), bar.length().unwrap());
    assert!(
        bar.message().contains(&format!("sent {}", outcomes.len())),
        "{}",
        bar.message()
    );
    assert!(bar.message().contains("errors 1"), "{}", bar.message());

    let path = std::env::temp_dir().join(format!("lab-trace-{}.csv", std::process::id()));
    write_trace(std::fs::File::create(&path).unwrap(), &outcomes).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], TRACE_HEADER);
    assert_eq!(
        lines[0],
        "intended_ms,start_ms,end_ms,status,backend,cost_ms,client,outcome"
    );
    assert_eq!(lines.len() - 1, outcomes.len());
    assert_eq!(outcomes.len(), 50);
    let rows: Vec<Vec<&str>> = lines[1..].iter().map(|l| l.split(',').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == 8));
    let timeouts: Vec<_> = rows.iter().filter(|r| r[7] == "timeout").collect();
    assert_eq!(timeouts.len(), 1, "{text}");
    let timeout = timeouts[0];
    assert_eq!(timeout[0], "100.000");
    assert_eq!((timeout[2], timeout[3], timeout[4]), ("", "", ""));
    assert_eq!(timeout[5], "5000.000");
    for r in rows.iter().filter(|r| r[7] == "ok") {
        assert_eq!((r[3], r[4], r[5]), ("200", "b", "1.000"), "{r:?}");
        let (start, end): (f64, f64) = (r[1].parse().unwrap(), r[2].parse().unwrap());
        assert!(end >= start + 1.0, "{r:?}");
        assert!(r[6].starts_with("127.1.") && r[6].ends_with(".1"), "{r:?}");
    }
}
