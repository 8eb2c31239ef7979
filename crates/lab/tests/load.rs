//! The open-loop generator against real backends: the schedule holds (counted at the backend),
//! and a stall shows where it happened, not only in the maximum.

use std::net::SocketAddr;
use std::time::Duration;

use lab::Backend;
use lab::backend::Capacity;
use lab::load::{Plan, Summary, run};
use lab::schedule::{Cost, Pattern, Spacing, trace};

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedule_holds_counted_at_the_backend() {
    let backend = Backend::start("b", loopback()).await.unwrap();
    let length = Duration::from_secs(3);
    let plan = Plan {
        target: backend.addr(),
        path: "/".into(),
        trace: trace(
            Pattern::Constant { rps: 1000.0 },
            Spacing::Even,
            length,
            Cost::Const { ms: 0.0 },
            10,
            1,
        ),
        timeout: Duration::from_secs(4),
    };
    let outcomes = run(&plan).await;
    let s = Summary::of(&outcomes, length, plan.timeout);
    let received = backend.requests();
    println!("constant 1000/s for 3 s: the backend received {received}; {s}");
    assert!((2940..=3060).contains(&received), "{received}");
    assert_eq!(s.ok, s.sent, "{s}");
    assert!(s.behind_max_ms < 100.0, "{s}");
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
    let plan = Plan {
        target: backend.addr(),
        path: "/".into(),
        trace: t,
        timeout: Duration::from_secs(4),
    };
    let s = Summary::of(&run(&plan).await, length, plan.timeout);
    println!("100/s for 5 s with one 1 s stall: {s}");
    // About 100 of 500 requests arrive during the stall and wait for it: a fifth of the run,
    // so the p90 sees it (a closed-loop client would have counted one slow request).
    assert!(s.p90_ms > 200.0, "{s}");
    assert!(s.p50_ms < 100.0, "{s}");
}
