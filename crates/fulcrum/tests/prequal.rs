//! `algorithm = "prequal"` end to end (DESIGN §2 "Prequal"): the lab backend's and the
//! agent's `GET /probe`, and a real `fulcrum run` whose control plane probes lab backends on
//! loopback and picks by their answers.

mod common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ChildGuard, HeldPort, Running, TempFile};
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

/// A `fulcrum run` balancing `backends` with prequal; `extra[i]` is added to backend `i`'s
/// block.
fn prequal_config(name: &str, backends: &[SocketAddr], extra: &[&str]) -> TempFile {
    let mut blocks = String::new();
    for (i, a) in backends.iter().enumerate() {
        blocks.push_str(&format!(
            "  [[upstream.backend]]\n  addr = \"{a}\"\n  max_fails = 0\n{}\n",
            extra.get(i).copied().unwrap_or("")
        ));
    }
    TempFile::new(
        name,
        &format!(
            "workers = 2\naccess_log = false\n\n\
             [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
             [[upstream]]\nname = \"web\"\nalgorithm = \"prequal\"\nprobe_timeout = \"500ms\"\n{blocks}\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n"
        ),
    )
}

/// `n` requests through `proxy`, `parallel` at a time, each costing its backend `ms`; the
/// backends' names, in order of answer.
async fn through(proxy: SocketAddr, n: usize, parallel: usize, ms: u64) -> Vec<String> {
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..parallel {
        let count = n / parallel + usize::from(c < n % parallel);
        tasks.spawn(async move {
            let mut client = Client::new(proxy);
            let mut names = Vec::new();
            for _ in 0..count {
                let r = client.get(&format!("/?delay_ms={ms}")).await.unwrap();
                assert_eq!(r.status, 200, "{}", r.text());
                names.push(r.text());
            }
            names
        });
    }
    let mut names = Vec::new();
    while let Some(done) = tasks.join_next().await {
        names.extend(done.unwrap());
    }
    names
}

/// The value of `family{...backend="addr"...}` in a Prometheus text.
fn series(metrics: &str, family: &str, addr: SocketAddr) -> Option<f64> {
    let label = format!("backend=\"{addr}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with(family) && l.contains(&label))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Lab backends that share a bandwidth among the requests in service (processor sharing, one
/// request's worth), one per name: a request's time grows with the requests beside it.
async fn shared_backends(names: &[&str]) -> Vec<Backend> {
    let capacity = lab::backend::Capacity {
        workers: 1,
        mode: lab::backend::Mode::Io,
        ..lab::backend::Capacity::default()
    };
    let mut started = Vec::new();
    for name in names {
        let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let b = Backend::start_with(name, loopback, Some(capacity)).await;
        started.push(b.unwrap());
    }
    started
}

/// Three lab backends, one of them (`busy`) loaded by 20 requests that do not pass through
/// fulcrum: fulcrum's own in-flight counts cannot see them, its requests there take 20 times
/// as long, and its probes say so. A fourth (`blind`) is probed at a port that refuses: it has
/// no probe in the pool and is picked only by the fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prequal_sends_requests_away_from_the_backend_its_probes_show_busy() {
    let names = ["fast1", "fast2", "busy", "blind"];
    let backends = shared_backends(&names).await;
    let addrs: Vec<SocketAddr> = backends.iter().map(Backend::addr).collect();
    let refusing = HeldPort::refusing();
    let blind_probe = format!("  probe = \"127.0.0.1:{}\"", refusing.port());
    let config = prequal_config("prequal.toml", &addrs, &["", "", "", &blind_probe]);
    let fulcrum = Running::start(&config, 1);
    let proxy = fulcrum.addr_of("web");
    let admin = fulcrum.admin.expect("the admin listener");
    let _busy = hold(addrs[2], 20, 60_000);
    eventually(Duration::from_secs(10), "busy holds 20", async || {
        let n = backends[2].in_flight();
        (n == 20).then_some(()).ok_or(format!("{n}"))
    })
    .await;
    let answered = through(proxy, 600, 6, 5).await;
    let count = |name: &str| answered.iter().filter(|n| *n == name).count();
    let shares: Vec<usize> = names.iter().map(|n| count(n)).collect();
    eprintln!("answers per backend {names:?}: {shares:?}");
    // Its probes show it busy: it gets under an eighth of a fast one's share. Without the
    // probes (the fallback alone, on fulcrum's in-flight counts) it got 36 of 600 against
    // 203 and 181; with them, 20 against 282 and 271.
    let fast = (shares[0] + shares[1]) / 2;
    assert!(
        shares[2] * 8 < fast,
        "the busy backend got {} of 600, the fast ones {fast} each: {shares:?}",
        shares[2]
    );
    assert!(
        shares[3] < 600 / 10,
        "the backend without probes is picked only by the fallback: {shares:?}"
    );
    assert!(shares[0] + shares[1] > 450, "{shares:?}");
    for (b, name) in backends.iter().zip(names).take(3) {
        let (probes, _) = b.probe_cost();
        assert!(probes > 0, "{name} was probed");
    }
    let metrics = common::admin_get(admin, "/metrics").await.text();
    let sent = |i: usize| series(&metrics, "fulcrum_backend_probes_total", addrs[i]);
    let failed = |i: usize| series(&metrics, "fulcrum_backend_probe_failures_total", addrs[i]);
    assert!(sent(3).unwrap_or(0.0) > 0.0, "{metrics}");
    assert_eq!(failed(3), sent(3), "every probe of blind failed");
    assert!(sent(0).unwrap_or(0.0) > 0.0, "{metrics}");
    assert!(failed(0).unwrap_or(0.0) < sent(0).unwrap_or(0.0) / 10.0);
    if common::installed("promtool", "--version") {
        common::assert_promtool_accepts(&metrics);
    }
    let logged = fulcrum
        .lines
        .try_iter()
        .filter(|l| l.contains("probe failed"))
        .count();
    assert_eq!(logged, 1, "a failing backend is logged once");
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

/// The admin API switches an upstream to prequal and back: the control plane starts a prober
/// for the new algorithm (the backends get probed as requests come) and stops probing when the
/// algorithm no longer asks for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_to_prequal_and_back_starts_and_stops_the_probes() {
    let backends = common::backends(&["a", "b"]).await;
    let addrs: Vec<SocketAddr> = backends.iter().map(Backend::addr).collect();
    let prequal = prequal_config("switch-prequal.toml", &addrs, &[]);
    let text = std::fs::read_to_string(&prequal.0).unwrap();
    let least_conn = text
        .replace("algorithm = \"prequal\"", "algorithm = \"least_conn\"")
        .replace("probe_timeout = \"500ms\"\n", "");
    let config = TempFile::new("switch.toml", &least_conn);
    let fulcrum = Running::start(&config, 1);
    let (proxy, admin) = (fulcrum.addr_of("web"), fulcrum.admin.unwrap());
    let probes = || -> u64 { backends.iter().map(|b| b.probe_cost().0).sum() };
    through(proxy, 50, 2, 1).await;
    assert_eq!(probes(), 0, "least_conn does not probe");
    let switch = |algorithm: &str| {
        let host = admin.to_string();
        let headers = [
            ("Host", host.as_str()),
            ("Content-Type", "application/json"),
        ];
        let body = format!(r#"{{"algorithm": "{algorithm}"}}"#);
        let (status, answer) =
            common::admin_call(admin, "PATCH", "/api/upstreams/web", &headers, &body);
        assert_eq!(status, 200, "{answer}");
    };
    switch("prequal");
    through(proxy, 100, 2, 1).await;
    eventually(
        Duration::from_secs(10),
        "probes after the switch",
        async || {
            let n = probes();
            (n >= 100).then_some(()).ok_or(format!("{n} probes"))
        },
    )
    .await;
    switch("least_conn");
    let before = probes();
    through(proxy, 100, 2, 1).await;
    // Probes already out at the switch may still land: at most 4 per backend.
    let after = probes();
    assert!(
        after <= before + 8,
        "no probes asked for once the algorithm does not: {before} then {after}"
    );
}
