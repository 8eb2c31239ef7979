//! `algorithm = "prequal"` end to end (DESIGN §2 "Prequal"): the lab backend's and the
//! agent's `GET /probe`.

mod common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ChildGuard, HeldPort};
use lab::{Backend, Client};

/// What a `GET /probe` answered.
#[derive(Debug, Clone, Copy)]
struct Probe {
    rif: u64,
    latency_ms: f64,
}

async fn probe(addr: SocketAddr) -> Probe {
    let reply = Client::new(addr).get("/probe").await.unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text());
    let v: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    Probe {
        rif: v["rif"].as_u64().unwrap(),
        latency_ms: v["latency_ms"].as_f64().unwrap(),
    }
}

/// `n` requests held on `addr` for `ms` each, each on a connection of its own; dropping the
/// handles cancels them (their connections close).
fn hold(addr: SocketAddr, n: usize, ms: u64) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            tokio::spawn(async move {
                let _ = Client::new(addr).get(&format!("/?delay_ms={ms}")).await;
            })
        })
        .collect()
}

/// Polls `f` until it holds, within `within`.
async fn eventually(within: Duration, what: &str, mut f: impl AsyncFnMut() -> Result<(), String>) {
    let deadline = Instant::now() + within;
    loop {
        match f().await {
            Ok(()) => return,
            Err(why) => assert!(Instant::now() < deadline, "{what}: {why}"),
        }
        // Poll interval of a loop bounded by `deadline`.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lab_backends_probe_answers_its_requests_in_flight_and_their_latency() {
    let backend = Backend::start("a", "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = backend.addr();
    let idle = probe(addr).await;
    assert_eq!(idle.rif, 0);
    assert_eq!(idle.latency_ms, 0.0, "no completion yet: no delay known");
    let held = hold(addr, 5, 30_000);
    eventually(
        Duration::from_secs(10),
        "five requests in flight",
        async || {
            let p = probe(addr).await;
            (p.rif == 5).then_some(()).ok_or(format!("{p:?}"))
        },
    )
    .await;
    assert_eq!(backend.in_flight(), 5);
    for h in &held {
        h.abort();
    }
    eventually(
        Duration::from_secs(10),
        "the cancelled requests left",
        async || {
            let p = probe(addr).await;
            (p.rif == 0).then_some(()).ok_or(format!("{p:?}"))
        },
    )
    .await;
    // Completions of 80 ms at RIF 0: the estimate at RIF 0 is about that.
    for _ in 0..3 {
        let r = Client::new(addr).get("/?delay_ms=80").await.unwrap();
        assert_eq!(r.status, 200);
    }
    let after = probe(addr).await;
    assert!(
        (70.0..2_000.0).contains(&after.latency_ms),
        "estimate after three 80 ms requests: {after:?}"
    );
    let (answered, _) = backend.probe_cost();
    assert!(answered >= 4, "probes are counted: {answered}");
    assert_eq!(backend.requests(), 8, "probes are not requests");
}

/// `fulcrum agent --probe-target`: its `GET /probe` counts the target's established
/// connections, and times its own request to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_answers_probes_for_its_target() {
    let backend = Backend::start("t", "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let target = backend.addr();
    let port = HeldPort::for_server();
    let listen = format!("127.0.0.1:{}", port.port());
    let child = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .args(["agent", "--listen", &listen, "--probe-target"])
        .arg(target.to_string())
        .args(["--probe-path", "/?delay_ms=30"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _agent = ChildGuard(child);
    let agent: SocketAddr = listen.parse().unwrap();
    eventually(
        Duration::from_secs(20),
        "the agent's estimate",
        async || {
            let Ok(reply) = Client::new(agent).get("/probe").await else {
                return Err("not listening yet".into());
            };
            let v: serde_json::Value =
                serde_json::from_slice(&reply.body).map_err(|e| e.to_string())?;
            let ms = v["latency_ms"].as_f64().unwrap_or(0.0);
            (ms >= 25.0).then_some(()).ok_or(format!("{v}"))
        },
    )
    .await;
    drop(port);
    let held = hold(target, 4, 30_000);
    eventually(
        Duration::from_secs(10),
        "four connections counted",
        async || {
            let p = probe(agent).await;
            // Its own timed request may be in flight too.
            (4..=5)
                .contains(&p.rif)
                .then_some(())
                .ok_or(format!("{p:?}"))
        },
    )
    .await;
    for h in &held {
        h.abort();
    }
    eventually(
        Duration::from_secs(10),
        "the connections closed",
        async || {
            let p = probe(agent).await;
            (p.rif <= 1).then_some(()).ok_or(format!("{p:?}"))
        },
    )
    .await;
}
