//! The lab backend's capacity model on real sockets: slots, speed, the FIFO queue and its
//! limit, the cost header, and the emulated utilization at `GET /load`.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use lab::backend::Capacity;
use lab::{Backend, Client};
use tokio::time::Instant;

fn costly(ms: u64) -> Request<Full<Bytes>> {
    Request::get("/")
        .header("host", "lab")
        .header("x-lab-cost", ms.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap()
}

async fn backend(workers: u32, speed: f64, max_queue: usize) -> Backend {
    let capacity = Capacity {
        workers,
        speed,
        max_queue,
        default_cost: Duration::ZERO,
    };
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    Backend::start_with("b", loopback, Some(capacity))
        .await
        .unwrap()
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
    let idle = Client::new(addr).get("/load").await.unwrap().text();
    assert!(
        idle.contains("\"cpu\":0.0000") && idle.contains("\"mem\":0.0000"),
        "{idle}"
    );
    // 2 busy and 2 waiting for 500 ms.
    let hold = tokio::spawn(burst(addr, 4, 500));
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let load = Client::new(addr).get("/load").await.unwrap().text();
        if load.contains("\"cpu\":1.0000") && load.contains("\"mem\":0.5000") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never saw 2 busy, 2 of 4 queued: {load}"
        );
        // Poll interval of a loop bounded by `deadline`.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(hold.await.unwrap().iter().all(|g| g.0 == 200));
}
