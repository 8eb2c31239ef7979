//! Issue 30: a backend's static memory and network capacities. The lab backend on a real
//! socket and the simulator's server, given the same requests at the same times, report the
//! same `mem` and `net` in `GET /load` (the formulas are one code,
//! `lab::backend::footprint::Footprint`; what each feeds them — the requests held, the
//! answers — is counted apart, and is what this checks).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use lab::backend::footprint::Footprint;
use lab::backend::{Capacity, Faults, Mode};
use lab::{Backend, Client};
use sim::servers::{Reading, Server};
use tokio::time::Instant;

/// 4 GB with 1 GB at rest and 100 MB a request held; a 100 Mbit/s link and 1 MB an answer.
const FOOTPRINT: Footprint = Footprint {
    mem: Some(4e9),
    mem_base: 1e9,
    mem_per_request: 1e8,
    net: Some(1e8),
    net_per_request: 1e6,
};

const SECOND: u64 = 1_000_000_000;

/// `(mem, net)` of the lab backend's `GET /load`.
async fn lab_load(addr: SocketAddr) -> (f64, f64) {
    let text = Client::new(addr).get("/load").await.unwrap().text();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let field = |f: &str| json[f].as_f64().unwrap_or_else(|| panic!("{f}: {text}"));
    (field("mem"), field("net"))
}

/// The lab: 4 requests of 2 s at once on 2 slots; `/load` read at 1.3 s and 2.6 s.
async fn in_the_lab() -> [(f64, f64); 2] {
    let capacity = Capacity {
        workers: 2,
        max_queue: 10,
        footprint: FOOTPRINT,
        ..Capacity::default()
    };
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let backend = Backend::start_faulty("b", loopback, Some(capacity), Faults::default())
        .await
        .unwrap();
    let addr = backend.addr();
    let start = Instant::now();
    let requests: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn(async move {
                let request = Request::get("/")
                    .header("host", "lab")
                    .header("x-lab-cost", "2000")
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                Client::new(addr).send(request).await.unwrap().status
            })
        })
        .collect();
    // Read at set times of the schedule (the figures are averages over a trailing second).
    tokio::time::sleep_until(start + Duration::from_millis(1300)).await;
    let first = lab_load(addr).await;
    tokio::time::sleep_until(start + Duration::from_millis(2600)).await;
    let second = lab_load(addr).await;
    for r in requests {
        r.abort();
    }
    [first, second]
}

/// The simulator's server, the same schedule in virtual time, read over the same windows.
fn in_the_simulator() -> [(f64, f64); 2] {
    let mut s =
        Server::new(Mode::Cpu, 2, 1.0, 10, None, &Faults::default()).with_footprint(FOOTPRINT);
    for j in 0..4 {
        s.admit(0, (j, 0), 2 * SECOND, true);
    }
    let over = |s: &mut Server, from: Reading, to: u64| {
        let now = s.read(to);
        let (_, mem, net) = s.utilization(&from, &now);
        (mem, net)
    };
    let a = s.read(3 * SECOND / 10);
    let first = over(&mut s, a, 13 * SECOND / 10);
    let b = s.read(16 * SECOND / 10);
    // The first two are answered at 2 s; the queued two take their slots.
    for _ in 0..2 {
        assert!(s.free_slot(2 * SECOND, |_| true).is_some());
        s.answered();
    }
    let second = over(&mut s, b, 26 * SECOND / 10);
    [first, second]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lab_and_simulator_report_the_same_memory_and_network_use() {
    let lab = in_the_lab().await;
    let sim = in_the_simulator();
    println!("lab {lab:?}, simulator {sim:?}");
    // 4 held: (1 GB + 400 MB) / 4 GB; nothing answered yet.
    assert!((sim[0].0 - 0.35).abs() < 1e-9, "{sim:?}");
    assert_eq!(sim[0].1, 0.0);
    // 4 held to 2 s, then 2: 2.8 on average over [1.6, 2.6]; 2 answers of 1 MB in that
    // second over 100 Mbit/s: 0.16.
    assert!((sim[1].0 - 0.32).abs() < 1e-9, "{sim:?}");
    assert!((sim[1].1 - 0.16).abs() < 1e-9, "{sim:?}");
    // The lab's window is 1 to 1.1 s (sampled every 100 ms) and its timers are late by a
    // little: the memory within 0.01, the link within 15% (2 answers over 1.1 s at worst).
    for (i, (l, s)) in lab.iter().zip(&sim).enumerate() {
        assert!(
            (l.0 - s.0).abs() < 0.01,
            "reading {i}: lab {l:?}, simulator {s:?}"
        );
        assert!(
            (l.1 - s.1).abs() <= 0.15 * s.1 + 1e-9,
            "reading {i}: lab {l:?}, simulator {s:?}"
        );
    }
}
