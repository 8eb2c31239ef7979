//! Answers in `failure_statuses` are failures for what the load-aware algorithms learn, through
//! a running `fulcrum run` on real sockets (issue 30): of two backends, one answers 503 at once
//! and the other 200 after 20 ms. Counted as successes, the 503s made the failing backend the
//! fastest, and `latency` and `p2c_ewma` sent it nearly every request; counted as failures,
//! both stop favouring it after its first answers. The 503s are relayed (not in
//! `next_upstream`), and passive health does not take the backend out (`max_fails` does not
//! count a relayed answer), so only the algorithms' learning can keep requests away from it.

mod common;

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::time::Duration;

use common::{Running, TempFile};

/// Requests sent one after the other to each upstream.
const REQUESTS: usize = 150;

/// The status of `GET /?delay_ms=20` to `to`, on a connection of its own.
fn status(to: SocketAddr) -> u16 {
    let mut s = std::net::TcpStream::connect(to).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /?delay_ms=20 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    std::str::from_utf8(answer.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn latency_and_p2c_ewma_stop_favouring_a_backend_that_answers_503_fast() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let good = rt.block_on(lab::Backend::start("good", loopback)).unwrap();
    let failing = lab::backend::Faults {
        fail_rate: 1.0,
        fail_status: 503,
        ..lab::backend::Faults::default()
    };
    let bad = rt
        .block_on(lab::Backend::start_faulty("bad", loopback, None, failing))
        .unwrap();
    let mut text = String::from("workers = 2\naccess_log = false\n");
    for algorithm in ["latency", "p2c_ewma"] {
        text.push_str(&format!(
            "\n[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"{algorithm}\"\n\n\
             [[upstream]]\nname = \"{algorithm}\"\nalgorithm = \"{algorithm}\"\n{}",
            common::backend_block(&[(good.addr(), 1), (bad.addr(), 1)])
        ));
    }
    let config = TempFile::new("failure-statuses.toml", &text);
    let running = Running::start(&config, 2);
    for algorithm in ["latency", "p2c_ewma"] {
        let to = running.addr_of(algorithm);
        let statuses: Vec<u16> = (0..REQUESTS).map(|_| status(to)).collect();
        let failed = statuses.iter().filter(|&&s| s == 503).count();
        let answered = statuses.iter().filter(|&&s| s == 200).count();
        assert_eq!(failed + answered, REQUESTS, "{algorithm}: {statuses:?}");
        // A few reach the failing backend before it is known, and `latency` probes it again
        // once its fail_timeout (10 s) has passed; counted as successes, it took over 100.
        assert!(
            failed <= 10,
            "{algorithm} sent {failed} of {REQUESTS} requests to the backend answering 503"
        );
    }
    drop(running);
}
