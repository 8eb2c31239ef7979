//! `fulcrum demo`: the whole thing on one machine in a few seconds.
//!
//! Three emulated backends (weights 3, 2, 1) start on loopback; for each algorithm a proxy
//! starts in front of them and the demo sends requests through it, one at a time, each from its
//! own client address in 127.0.0.0/8 (so `ip_hash` has many clients to spread). It then prints
//! how each algorithm spread the requests, and the order of the first picks.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use balance::Algorithm;
use lab::{Backend, Client};
use proxy::{BackendSettings, ListenerSettings, Proxy, ProxySettings, UpstreamSettings};

const WEIGHTS: [u32; 3] = [3, 2, 1];
const NAMES: [&str; 3] = ["a", "b", "c"];
const SHOWN_PICKS: usize = 18;

/// The client address of request `i`: a different /24 for each, so that `ip_hash`, which
/// hashes the first three octets, sees distinct clients.
fn client_addr(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        1 + (i / 250 % 250) as u8,
        (i % 250) as u8,
        1,
    ))
}

struct Row {
    algorithm: Algorithm,
    counts: [usize; 3],
    picks: String,
    failed: usize,
    elapsed: Duration,
}

pub async fn run(requests: usize) -> anyhow::Result<ExitCode> {
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut backends = Vec::new();
    for name in NAMES {
        backends.push(
            Backend::start(name, loopback)
                .await
                .context("starting a demo backend")?,
        );
    }
    println!(
        "fulcrum demo: 3 backends on loopback, {requests} requests per algorithm, one client address per request\n"
    );
    for (b, w) in backends.iter().zip(WEIGHTS) {
        println!("  backend {}  {}  weight {w}", b.name(), b.addr());
    }
    println!();

    let mut rows = Vec::new();
    for &algorithm in Algorithm::ALL {
        rows.push(run_one(algorithm, &backends, requests).await?);
    }

    println!(
        "{:<22} {:>8} {:>8} {:>8} {:>7} {:>9}   first picks",
        "algorithm", "a (w=3)", "b (w=2)", "c (w=1)", "failed", "time"
    );
    for r in &rows {
        println!(
            "{:<22} {:>8} {:>8} {:>8} {:>7} {:>7}ms   {}",
            r.algorithm.name(),
            r.counts[0],
            r.counts[1],
            r.counts[2],
            r.failed,
            r.elapsed.as_millis(),
            r.picks
        );
    }
    println!();
    println!(
        "round_robin ignores weights; weighted_round_robin is nginx's smooth WRR (3:2:1, interleaved);"
    );
    println!(
        "random draws by weight; chained_round_robin sends batches of 3:2:1 in turn (seed 002);"
    );
    println!("least_conn sees equal load here and breaks ties by smooth WRR, fair by plain turns;");
    println!("random_two draws two by weight and takes the less loaded (ties to the second draw);");
    print!(
        "least_time takes the lowest rt·(1+in flight) per weight: one request at a time, the
  heaviest backend wins every pick; p2c_ewma and latency follow measured latency, so small
  differences between these backends show; ip_hash maps each client /24 as nginx does,
  new_hash with seed 000's hash; hash (nginx's crc32), maglev and bounded_load hash the client
  address as text; dynamic_wrr, dwlc, capacity_weighted and utilization_wrr use the configured
  weights here, where no backend reports its load (see docs/feedback.md for agents).
"
    );
    let failed: usize = rows.iter().map(|r| r.failed).sum();
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn run_one(
    algorithm: Algorithm,
    backends: &[Backend],
    requests: usize,
) -> anyhow::Result<Row> {
    let upstream = UpstreamSettings::new(
        "demo",
        algorithm,
        backends
            .iter()
            .zip(WEIGHTS)
            .map(|(b, w)| BackendSettings::new(b.addr()).weight(w))
            .collect(),
    );
    let settings = ProxySettings {
        workers: 2,
        listeners: vec![ListenerSettings::new(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            "demo",
        )],
        upstreams: vec![upstream],
        access_log: false,
        shutdown_timeout: Duration::from_secs(5),
    };
    let proxy = Proxy::bind(settings)
        .await
        .context("starting the demo proxy")?;
    let addr = proxy.local_addrs()[0];
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(proxy.run(async {
        let _ = stopped.await;
    }));

    let started = Instant::now();
    let mut counts = [0; 3];
    let mut picks = String::new();
    let mut failed = 0;
    for i in 0..requests {
        let mut client = Client::bound(addr, client_addr(i));
        match client.get("/").await {
            Ok(reply) if reply.status.is_success() => {
                let name = reply.text();
                if let Some(k) = NAMES.iter().position(|n| *n == name) {
                    counts[k] += 1;
                    if picks.len() < SHOWN_PICKS {
                        picks.push_str(&name);
                    }
                } else {
                    failed += 1;
                }
            }
            _ => failed += 1,
        }
    }
    let elapsed = started.elapsed();
    let _ = stop.send(());
    server.await.context("the demo proxy stopped abnormally")?;
    Ok(Row {
        algorithm,
        counts,
        picks,
        failed,
        elapsed,
    })
}
