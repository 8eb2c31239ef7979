//! The lab backend's capacity model on real sockets: slots, speed, the FIFO queue and its
//! limit, the cost header and drawn costs, the io mode's processor sharing, the antagonist,
//! faults, and the emulated utilization at `GET /load`.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use lab::backend::{Capacity, Faults, Mode};
use lab::{Backend, Client};
use tokio::time::Instant;

fn costly(ms: u64) -> Request<Full<Bytes>> {
    Request::get("/")
        .header("host", "lab")
        .header("x-lab-cost", ms.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap()
}

fn capacity(workers: u32, speed: f64, max_queue: usize) -> Capacity {
    Capacity {
        workers,
        speed,
        max_queue,
        ..Capacity::default()
    }
}

async fn start(capacity: Capacity, faults: Faults) -> Backend {
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    Backend::start_faulty("b", loopback, Some(capacity), faults)
        .await
        .unwrap()
}

async fn backend(workers: u32, speed: f64, max_queue: usize) -> Backend {
    start(capacity(workers, speed, max_queue), Faults::default()).await
}

/// A figure of the agent JSON at `GET /load`.
async fn load(addr: SocketAddr, field: &str) -> f64 {
    let text = Client::new(addr).get("/load").await.unwrap().text();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no {field}: {text}"))
}

/// Polls `GET /load` until `field` is within `range`, for at most `within`; the values seen.
async fn load_reaches(
    addr: SocketAddr,
    field: &str,
    range: std::ops::RangeInclusive<f64>,
    within: Duration,
) -> Vec<f64> {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        let x = load(addr, field).await;
        seen.push(x);
        if range.contains(&x) {
            return seen;
        }
        assert!(
            Instant::now() < deadline,
            "{field} never reached {range:?}: {seen:?}"
        );
        // Poll interval of a loop bounded by `deadline`.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `n` requests of cost `ms` at once, each on its own connection: (status, seconds
/// taken) for each, in completion order.
async fn burst(addr: SocketAddr, n: usize, ms: u64) -> Vec<(u16, f64)> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            tokio::spawn(async move {
                let reply = Client::new(addr).send(costly(ms)).await.unwrap();
                (reply.status.as_u16(), started.elapsed().as_secs_f64())
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out.sort_by(|a, b| a.1.total_cmp(&b.1));
    out
}

#[tokio::test]
async fn slots_serve_a_queue_in_turn_and_refuse_beyond_it() {
    // 2 slots, a queue of 2: of 5 requests of 200 ms, 2 are served at once, 2 after them, and
    // the fifth is refused at once.
    let b = backend(2, 1.0, 2).await;
    let got = burst(b.addr(), 5, 200).await;
    let statuses: Vec<u16> = got.iter().map(|g| g.0).collect();
    assert_eq!(statuses, [503, 200, 200, 200, 200], "{got:?}");
    // The refusal comes before any answer; the queued two wait out the first two.
    assert!(got[0].1 < got[1].1, "refused at once: {got:?}");
    assert!(got[1].1 >= 0.19, "first two: {got:?}");
    assert!(got[3].1 >= 0.39, "queued two wait their turn: {got:?}");
}

#[tokio::test]
async fn a_faster_server_holds_a_slot_for_less() {
    let b = backend(1, 2.0, 10).await;
    let got = burst(b.addr(), 2, 200).await;
    // 100 ms each, one after the other.
    assert!(got[0].1 >= 0.09 && got[0].1 < 0.18, "{got:?}");
    assert!(got[1].1 >= 0.19 && got[1].1 < 0.35, "{got:?}");
}

#[tokio::test]
async fn load_reports_busy_slots_and_queue_fill() {
    let b = backend(2, 1.0, 4).await;
    let addr = b.addr();
    assert_eq!(
        (load(addr, "cpu").await, load(addr, "mem").await),
        (0.0, 0.0)
    );
    // 2 busy for 1 s (4 requests of 500 ms on 2 slots), 2 waiting for the first 500 ms: the
    // queue fill is instantaneous, the cpu a trailing average that climbs to full.
    let hold = tokio::spawn(burst(addr, 4, 500));
    load_reaches(addr, "mem", 0.5..=0.5, Duration::from_millis(400)).await;
    load_reaches(addr, "cpu", 0.95..=1.0, Duration::from_millis(1100)).await;
    assert!(hold.await.unwrap().iter().all(|g| g.0 == 200));
    // /load is the monitoring path: not counted.
    assert_eq!(b.requests(), 4);
}

#[tokio::test]
async fn io_mode_shares_the_bandwidth_where_cpu_mode_takes_turns() {
    // 4 requests of 200 ms at once on 1 worker of speed 1: processor sharing serves them
    // together at a quarter of the rate each, all done at 800 ms; slots serve them in turn.
    let io = start(
        Capacity {
            mode: Mode::Io,
            ..capacity(1, 1.0, 10)
        },
        Faults::default(),
    )
    .await;
    let got = burst(io.addr(), 4, 200).await;
    assert!(got.iter().all(|g| g.0 == 200), "{got:?}");
    assert!(got[0].1 >= 0.75, "none before 800 ms: {got:?}");
    assert!(got[3].1 < 1.1, "{got:?}");
    assert!(got[3].1 - got[0].1 < 0.1, "together: {got:?}");
    let cpu = backend(1, 1.0, 10).await;
    let got = burst(cpu.addr(), 4, 200).await;
    assert!(got[0].1 >= 0.19 && got[0].1 < 0.35, "in turn: {got:?}");
    assert!(got[3].1 >= 0.79, "in turn: {got:?}");
}

#[tokio::test]
async fn io_mode_gives_a_request_alone_at_most_its_speed_and_refuses_beyond_the_queue() {
    // Bandwidth for 2, one request: it still takes its cost, as one slot would.
    let b = start(
        Capacity {
            mode: Mode::Io,
            ..capacity(2, 1.0, 1)
        },
        Faults::default(),
    )
    .await;
    let got = burst(b.addr(), 1, 200).await;
    assert!(got[0].1 >= 0.19 && got[0].1 < 0.3, "{got:?}");
    // Two requests fit the bandwidth at full speed each; a third shares it (2/3 each: done at
    // 300 ms); a fourth is beyond workers + max_queue = 3 and refused at once.
    let got = burst(b.addr(), 4, 200).await;
    let statuses: Vec<u16> = got.iter().map(|g| g.0).collect();
    assert_eq!(statuses, [503, 200, 200, 200], "{got:?}");
    assert!(got[0].1 < 0.1, "{got:?}");
    assert!(got[1].1 >= 0.28 && got[3].1 < 0.45, "{got:?}");
}

#[tokio::test]
async fn io_load_reports_the_share_of_the_bandwidth_in_use() {
    let b = start(
        Capacity {
            mode: Mode::Io,
            ..capacity(4, 1.0, 10)
        },
        Faults::default(),
    )
    .await;
    let hold = tokio::spawn(burst(b.addr(), 1, 1500));
    // One request alone uses speed / (workers × speed) = 1/4 of it, and no cpu.
    load_reaches(b.addr(), "net", 0.24..=0.26, Duration::from_millis(1400)).await;
    assert_eq!(load(b.addr(), "cpu").await, 0.0);
    assert_eq!(hold.await.unwrap()[0].0, 200);
}

#[tokio::test]
async fn mixed_and_burn_modes_take_their_cost() {
    for mode in [Mode::Mixed, Mode::Burn] {
        let b = start(
            Capacity {
                mode,
                ..capacity(1, 1.0, 10)
            },
            Faults::default(),
        )
        .await;
        // Mixed: 100 ms on the slot, then 100 ms alone on the bandwidth.
        let got = burst(b.addr(), 1, 200).await;
        assert!(got[0].1 >= 0.19 && got[0].1 < 0.35, "{mode:?}: {got:?}");
    }
}

#[tokio::test]
async fn a_request_slows_down_when_the_antagonist_begins() {
    // Half the capacity from 100 ms on: a 200 ms request that starts at once does 100 ms of
    // work by then and the other 100 ms at half speed, ending at 300 ms — on a slot, on the
    // shared bandwidth (the driver wakes at the boundary) and spinning.
    for mode in [Mode::Cpu, Mode::Io, Mode::Burn] {
        let b = start(
            Capacity {
                mode,
                antagonist: Some("0.5:10s:20s:100ms".parse().unwrap()),
                epoch: Some(std::time::SystemTime::now()),
                ..capacity(1, 1.0, 10)
            },
            Faults::default(),
        )
        .await;
        let got = burst(b.addr(), 1, 200).await;
        assert!(got[0].1 >= 0.29 && got[0].1 < 0.45, "{mode:?}: {got:?}");
    }
}

#[tokio::test]
async fn load_shows_the_antagonist_alone() {
    // 30% left from 1 s to 2.5 s: idle at first, then (a window later) cpu = 1 − 0.3.
    let b = start(
        Capacity {
            antagonist: Some("0.3:1500ms:3s:1s".parse().unwrap()),
            epoch: Some(std::time::SystemTime::now()),
            ..capacity(2, 1.0, 10)
        },
        Faults::default(),
    )
    .await;
    assert!(load(b.addr(), "cpu").await < 0.05);
    load_reaches(b.addr(), "cpu", 0.68..=0.72, Duration::from_millis(2400)).await;
    // cpu mode uses no bandwidth: the antagonist is not in net.
    assert_eq!(load(b.addr(), "net").await, 0.0);
    assert_eq!(b.requests(), 0);
}

/// 500s among `n` requests in turn on one connection, and whether every answer named the
/// backend.
async fn failures(fail_rate: f64, seed: u64, n: usize) -> usize {
    let b = start(
        Capacity {
            seed,
            ..capacity(2, 1.0, 10)
        },
        Faults {
            fail_rate,
            ..Faults::default()
        },
    )
    .await;
    let mut client = Client::new(b.addr());
    let mut failed = 0;
    for _ in 0..n {
        let reply = client.get("/").await.unwrap();
        assert_eq!(reply.headers["x-backend"], "b");
        match reply.status.as_u16() {
            500 => failed += 1,
            200 => {}
            other => panic!("{other}"),
        }
    }
    assert_eq!(b.requests(), n as u64);
    failed
}

#[tokio::test]
async fn a_fail_rate_fails_about_that_share_reproducibly() {
    let half = failures(0.5, 7, 200).await;
    assert!((70..=130).contains(&half), "{half}");
    assert_eq!(
        failures(0.5, 7, 200).await,
        half,
        "the same seed, the same draws"
    );
    assert_eq!(failures(0.0, 7, 200).await, 0);
    assert_eq!(failures(1.0, 7, 20).await, 20);
}

#[tokio::test]
async fn stall_after_hangs_every_later_request_and_the_load_report() {
    let b = start(
        capacity(2, 1.0, 10),
        Faults {
            stall_after: Some(3),
            ..Faults::default()
        },
    )
    .await;
    let mut client = Client::new(b.addr());
    for _ in 0..3 {
        assert_eq!(client.get("/").await.unwrap().status, 200);
    }
    // Before the stall /load answers; after it, nothing does.
    assert!(load(b.addr(), "cpu").await < 0.5);
    let patience = Duration::from_millis(300);
    let fourth = tokio::time::timeout(patience, client.get("/")).await;
    assert!(fourth.is_err(), "the 4th was answered: {fourth:?}");
    let report = tokio::time::timeout(patience, Client::new(b.addr()).get("/load")).await;
    assert!(report.is_err(), "/load answered: {report:?}");
    // New connections are still accepted (the process is alive, only stuck).
    let fifth = tokio::time::timeout(patience, Client::new(b.addr()).get("/")).await;
    assert!(fifth.is_err(), "the 5th: {fifth:?}");
    assert_eq!(b.requests(), 5);
}

#[tokio::test]
async fn die_after_closes_the_port_and_drops_every_connection() {
    let b = start(
        capacity(2, 1.0, 10),
        Faults {
            die_after: Some(3),
            ..Faults::default()
        },
    )
    .await;
    // A kept-alive connection opened before the end, idle.
    let mut idle = Client::new(b.addr());
    assert_eq!(idle.get("/").await.unwrap().status, 200);
    for _ in 0..2 {
        assert_eq!(Client::new(b.addr()).get("/").await.unwrap().status, 200);
    }
    let refused = tokio::net::TcpStream::connect(b.addr()).await;
    assert_eq!(
        refused.map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::ConnectionRefused)
    );
    tokio::time::timeout(Duration::from_secs(1), b.died())
        .await
        .expect("died");
    let dropped = tokio::time::timeout(Duration::from_secs(1), idle.get("/")).await;
    assert!(
        matches!(dropped, Ok(Err(_))),
        "the kept-alive connection is dropped: {dropped:?}"
    );
    assert_eq!(b.requests(), 3);
}

#[tokio::test]
async fn a_cost_distribution_is_drawn_for_requests_without_the_header() {
    let b = start(
        Capacity {
            cost: "uniform:50:100".parse().unwrap(),
            ..capacity(4, 1.0, 10)
        },
        Faults::default(),
    )
    .await;
    let mut client = Client::new(b.addr());
    let mut took = Vec::new();
    for _ in 0..6 {
        let sent = Instant::now();
        assert_eq!(client.get("/").await.unwrap().status, 200);
        took.push(sent.elapsed().as_secs_f64());
    }
    assert!(
        took.iter().all(|t| (0.049..0.16).contains(t)),
        "within 50..100 ms (and a noisy machine's margin): {took:?}"
    );
    // The header still wins.
    let got = burst(b.addr(), 1, 10).await;
    assert!(got[0].1 < 0.045, "{got:?}");
}

#[tokio::test]
async fn a_fail_status_answers_its_status() {
    let b = start(
        capacity(1, 1.0, 10),
        Faults {
            fail_rate: 1.0,
            fail_status: 503,
            ..Faults::default()
        },
    )
    .await;
    let reply = Client::new(b.addr()).get("/").await.unwrap();
    assert_eq!(reply.status.as_u16(), 503);
}

/// A deadline answers 503 when it passes and the work goes on, holding its slot: a request of
/// no cost that arrives behind it waits for that slot and gets its own deadline's 503 (were the
/// work stopped at the first deadline, the slot would be free and it would get 200 at once).
#[tokio::test]
async fn a_deadline_answers_503_and_the_work_goes_on_holding_its_slot() {
    let b = start(
        capacity(1, 1.0, 10),
        Faults {
            deadline: Some(Duration::from_millis(200)),
            ..Faults::default()
        },
    )
    .await;
    let started = Instant::now();
    let long = Client::new(b.addr()).send(costly(3000)).await.unwrap();
    assert_eq!(long.status.as_u16(), 503);
    assert!(started.elapsed() < Duration::from_millis(2500));
    let short = Client::new(b.addr()).send(costly(0)).await.unwrap();
    assert_eq!(short.status.as_u16(), 503, "{}", short.text());
    assert!(short.text().contains("deadline"), "{}", short.text());
    // Once the long work is done (not before), the slot serves again.
    loop {
        let again = Client::new(b.addr()).send(costly(0)).await.unwrap();
        if again.status.as_u16() == 200 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never served");
    }
    assert!(started.elapsed() >= Duration::from_millis(2900));
}
