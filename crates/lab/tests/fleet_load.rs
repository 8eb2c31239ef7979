//! The load generator over a fleet of addresses (`run_fleet`): open-loop arrivals go to the
//! instances in turn (or by client), closed-loop users each to theirs, and no address at all fails every
//! request rather than panicking. Three backends stand for three balancer instances: each
//! answer's `X-Backend` says which address served it.

use std::net::SocketAddr;
use std::time::Duration;

use lab::Backend;
use lab::load::{Mode, Plan, Spread, Users, run_fleet};
use lab::schedule::{Cost, Pattern, Spacing, costs, trace};

async fn three() -> (Vec<Backend>, Vec<SocketAddr>) {
    let mut backends = Vec::new();
    for name in ["i1", "i2", "i3"] {
        let at: SocketAddr = "127.0.0.1:0".parse().unwrap();
        backends.push(Backend::start(name, at).await.unwrap());
    }
    let addrs = backends.iter().map(Backend::addr).collect();
    (backends, addrs)
}

/// Every answer is a 200 from instance `client mod 3` (backend `i1`..`i3`): how many each got.
fn by_client_instance(outcomes: &[lab::load::Outcome]) -> [usize; 3] {
    let mut per = [0; 3];
    for o in outcomes {
        assert_eq!(o.status, Some(200), "{o:?}");
        let k = o.client as usize % 3;
        let want = format!("i{}", k + 1);
        assert_eq!(o.backend.as_deref(), Some(want.as_str()), "{o:?}");
        per[k] += 1;
    }
    per
}

fn plan(target: SocketAddr, trace: Vec<lab::schedule::Arrival>, mode: Mode) -> Plan {
    Plan {
        target,
        path: "/".into(),
        trace,
        timeout: Duration::from_secs(4),
        mode,
        progress: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_arrivals_go_to_the_instances_in_turn() {
    let (_backends, addrs) = three().await;
    let t = trace(
        Pattern::Constant { rps: 300.0 },
        Spacing::Poisson,
        Duration::from_secs(1),
        Cost::Const { ms: 1.0 },
        7,
        3,
    );
    assert!(t.len() > 200, "{}", t.len());
    let outcomes = run_fleet(
        &plan(addrs[0], t.clone(), Mode::Open),
        &addrs,
        Spread::RoundRobin,
    )
    .await;
    assert_eq!(outcomes.len(), t.len());
    for (k, o) in outcomes.iter().enumerate() {
        assert_eq!(o.status, Some(200), "{o:?}");
        let want = format!("i{}", k % 3 + 1);
        assert_eq!(
            o.backend.as_deref(),
            Some(want.as_str()),
            "arrival {k}: {o:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spread_by_client_each_client_keeps_to_its_instance() {
    let (_backends, addrs) = three().await;
    let t = trace(
        Pattern::Constant { rps: 300.0 },
        Spacing::Poisson,
        Duration::from_secs(1),
        Cost::Const { ms: 1.0 },
        7,
        3,
    );
    let outcomes = run_fleet(
        &plan(addrs[0], t.clone(), Mode::Open),
        &addrs,
        Spread::Client,
    )
    .await;
    assert_eq!(outcomes.len(), t.len());
    let per = by_client_instance(&outcomes);
    // 7 clients drawn at random: instance 1 has three of them, the others two each.
    assert!(per.iter().all(|&n| n > 30), "{per:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_users_each_keep_to_their_instance() {
    let (_backends, addrs) = three().await;
    let users = Users::Fixed(6);
    let mode = Mode::Closed {
        users,
        duration: Duration::from_millis(500),
        clients: 6,
    };
    let p = plan(addrs[0], costs(Cost::Const { ms: 5.0 }, 1000, 1), mode);
    let outcomes = run_fleet(&p, &addrs, Spread::RoundRobin).await;
    // User u sends from client u (6 clients for 6 users) to instance u mod 3.
    let per = by_client_instance(&outcomes);
    assert!(per.iter().all(|&n| n > 20), "{per:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_address_fails_every_request() {
    let (_backends, addrs) = three().await;
    let t = trace(
        Pattern::Constant { rps: 100.0 },
        Spacing::Even,
        Duration::from_millis(100),
        Cost::Const { ms: 1.0 },
        2,
        1,
    );
    let outcomes = run_fleet(&plan(addrs[0], t.clone(), Mode::Open), &[], Spread::Client).await;
    assert_eq!(outcomes.len(), t.len());
    assert!(outcomes.iter().all(|o| o.status.is_none() && !o.timed_out));
}
