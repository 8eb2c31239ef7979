//! Black-box tests of the proxy: real backends on loopback (the lab's emulated backends, or raw
//! TCP listeners that misbehave on purpose), an in-process proxy on 127.0.0.1:0, and clients
//! that are either the lab's keep-alive client or raw sockets writing bytes by hand.
//!
//! No test sleeps to "let things settle": each waits for a condition with a deadline. The only
//! fixed waits are the ones under test (a slow backend, a client that stalls, a request that
//! must *not* complete within some time).

mod common;
mod harness;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use balance::{Algorithm, NextUpstream, RetryBudgetSettings};
use common::{localhost, raw_backend};
use harness::*;
use http::StatusCode;
use lab::Client;
use proxy::{BackendSettings, ListenerSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::time::{Instant, timeout};

// ---------------------------------------------------------------------------------------------
// 1, 2: algorithms end to end
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn round_robin_spreads_evenly() {
    let (a, b, c) = (backend("a").await, backend("b").await, backend("c").await);
    let up = upstream(
        Algorithm::RoundRobin,
        backends(&[a.addr(), b.addr(), c.addr()]),
    );
    let proxy = start(settings(up)).await;
    let mut client = Client::new(proxy.addr);
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for _ in 0..300 {
        let reply = client.get("/").await.unwrap();
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.headers["x-backend"], reply.text().as_str());
        *counts.entry(reply.text()).or_default() += 1;
    }
    let counts: Vec<_> = counts.into_iter().collect();
    assert_eq!(
        counts,
        [("a".into(), 100), ("b".into(), 100), ("c".into(), 100)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_round_robin_is_smooth_across_workers() {
    let (a, b, c) = (backend("a").await, backend("b").await, backend("c").await);
    let up = upstream(
        Algorithm::WeightedRoundRobin,
        vec![
            BackendSettings::new(a.addr()).weight(5),
            BackendSettings::new(b.addr()).weight(1),
            BackendSettings::new(c.addr()).weight(1),
        ],
    );
    let proxy = start(settings(up)).await;
    let mut seen = String::new();
    for _ in 0..14 {
        // A new connection each time, so requests land on either worker.
        seen.push_str(&get(proxy.addr, "/").await.text());
    }
    assert_eq!(seen, "aabacaaaabacaa");
}

// ---------------------------------------------------------------------------------------------
// 3, 4: backends failing
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_backend_mid_traffic_fails_no_request() {
    const CLIENTS: usize = 4;
    const PER_CLIENT: usize = 60;
    let (a, b, c) = (backend("a").await, backend("b").await, backend("c").await);
    let up = upstream(
        Algorithm::RoundRobin,
        backends(&[a.addr(), b.addr(), c.addr()]),
    );
    let proxy = start(settings(up)).await;

    let killed = Arc::new(AtomicBool::new(false));
    let (progress, mut done) = watch::channel(0usize);
    let progress = Arc::new(progress);
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (killed, progress, addr) = (Arc::clone(&killed), Arc::clone(&progress), proxy.addr);
        clients.push(tokio::spawn(async move {
            let mut client = Client::new(addr);
            let mut replies = Vec::new();
            for _ in 0..PER_CLIENT {
                let after_kill = killed.load(Ordering::SeqCst);
                // A short delay keeps requests in flight on `b` when it dies.
                let reply = timeout(DEADLINE, client.get("/?delay_ms=10"))
                    .await
                    .expect("response in time")
                    .expect("response");
                replies.push((after_kill, reply.status, reply.text()));
                progress.send_modify(|n| *n += 1);
            }
            replies
        }));
    }
    timeout(DEADLINE, done.wait_for(|n| *n >= CLIENTS * PER_CLIENT / 4))
        .await
        .expect("traffic flows")
        .unwrap();
    let b_addr = b.addr();
    eventually("a request in flight on b", DEADLINE, || {
        let n = proxy.backend(b_addr).in_flight;
        async move { n > 0 }
    })
    .await;
    b.kill().await;
    killed.store(true, Ordering::SeqCst);

    let mut replies = Vec::new();
    for client in clients {
        replies.extend(client.await.unwrap());
    }
    assert_eq!(replies.len(), CLIENTS * PER_CLIENT);
    let failed: Vec<_> = replies
        .iter()
        .filter(|(_, s, _)| *s != StatusCode::OK)
        .collect();
    assert!(failed.is_empty(), "failed requests: {failed:?}");
    assert!(
        replies.iter().any(|(after, _, n)| !after && n == "b"),
        "b served before it was killed"
    );
    let after: Vec<_> = replies.iter().filter(|(after, _, _)| *after).collect();
    assert!(
        after.len() >= 10,
        "too few requests after the kill: {}",
        after.len()
    );
    assert!(
        after.iter().all(|(_, _, n)| n == "a" || n == "c"),
        "a dead backend answered"
    );
    let snap = proxy.backend(b_addr);
    assert!(!snap.available, "b is marked failed: {snap:?}");
}

#[tokio::test]
async fn all_backends_down_gives_503_quickly_and_the_proxy_keeps_serving() {
    let (x, y) = (refusing_addr(), refusing_addr());
    let up = upstream(Algorithm::RoundRobin, backends(&[x, y]));
    assert_eq!(up.connect_timeout, Duration::from_secs(5));
    let proxy = start(settings(up)).await;
    let mut client = Client::new(proxy.addr);

    let started = Instant::now();
    let reply = client.get("/").await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(elapsed < Duration::from_secs(1), "took {elapsed:?}");
    // Both were tried (one attempt each) and both count a failure.
    for addr in [x, y] {
        let snap = proxy.backend(addr);
        assert_eq!((snap.failures, snap.available), (1, false), "{snap:?}");
    }

    let reply = client.get("/").await.unwrap();
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    // A new connection is still accepted and answered.
    let started = Instant::now();
    let reply = get(proxy.addr, "/").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() < Duration::from_secs(1));
}

// ---------------------------------------------------------------------------------------------
// 5, 6, 7: timeouts and broken answers
// ---------------------------------------------------------------------------------------------

/// A listening socket whose connects hang: backlog 0, never accepted, and its accept queue
/// already full, so Linux drops further SYNs. Returns the fillers, to keep them open.
async fn blackhole() -> (socket2::Socket, SocketAddr, Vec<TcpStream>) {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket.bind(&localhost().into()).unwrap();
    socket.listen(0).unwrap();
    let addr = socket.local_addr().unwrap().as_socket().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        match timeout(Duration::from_millis(200), TcpStream::connect(addr)).await {
            Ok(Ok(s)) => fillers.push(s),
            Ok(Err(e)) => panic!("connect to the blackhole failed: {e}"),
            // The queue is full: this is what the proxy will see too.
            Err(_) => return (socket, addr, fillers),
        }
    }
    panic!("the accept queue never filled; SYN dropping does not work here");
}

#[tokio::test]
async fn connect_timeout_gives_504() {
    let (_listener, addr, _fillers) = blackhole().await;
    let mut up = upstream(Algorithm::RoundRobin, backends(&[addr]));
    up.connect_timeout = Duration::from_millis(300);
    // A 504 within a few seconds can then only be the connect timeout.
    assert_eq!(up.read_timeout, Duration::from_secs(60));
    let proxy = start(settings(up)).await;
    let started = Instant::now();
    let reply = get(proxy.addr, "/").await;
    let elapsed = started.elapsed();
    assert_eq!(
        reply.status,
        StatusCode::GATEWAY_TIMEOUT,
        "{}",
        reply.text()
    );
    assert!(elapsed >= Duration::from_millis(290), "took {elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    assert_eq!(proxy.backend(addr).failures, 1);
}

#[tokio::test]
async fn garbage_from_backend_gives_502() {
    let addr = raw_backend(|mut s| async move {
        if read_request(&mut s).await.is_some() {
            let _ = s.write_all(b"garbage\r\n\r\n").await;
        }
    })
    .await;
    let proxy = start(settings(upstream(Algorithm::RoundRobin, backends(&[addr])))).await;
    let reply = get(proxy.addr, "/").await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY, "{}", reply.text());
    assert_eq!(proxy.backend(addr).failures, 1);
}

#[tokio::test]
async fn truncated_backend_body_is_not_passed_off_as_complete() {
    // The backend's answer, cut short by closing the connection: 10 bytes of a 100-byte body,
    // and a chunked body without its last chunk.
    for answer in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789"[..],
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n"[..],
    ] {
        let chunked = find(answer, b"chunked").is_some();
        let addr = raw_backend(move |mut s| async move {
            if read_request(&mut s).await.is_some() {
                let _ = s.write_all(answer).await;
            }
        })
        .await;
        // max_fails = 0: the backend stays eligible after the first failure.
        let broken = BackendSettings {
            max_fails: 0,
            ..BackendSettings::new(addr)
        };
        let proxy = start(settings(upstream(Algorithm::RoundRobin, vec![broken]))).await;

        // Raw: the head and the 10 bytes arrive, then the proxy closes the connection (a
        // keep-alive request: only an aborted response closes it).
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: fulcrum.test\r\n\r\n")
            .await
            .unwrap();
        let r = read_until_closed(&mut stream, DEADLINE).await;
        let case = format!("chunked = {chunked}: {:?}", String::from_utf8_lossy(&r.raw));
        assert!(r.closed, "the proxy kept the connection open; {case}");
        assert_eq!(r.status, 200, "{case}");
        if chunked {
            // Passed on chunked (the backend's framing is hop-by-hop), without the last chunk.
            assert_eq!(r.header("transfer-encoding"), Some("chunked"), "{case}");
            assert!(r.body.ends_with(b"\r\n0123456789\r\n"), "{case}");
            assert!(
                find(&r.body, b"0\r\n\r\n").is_none(),
                "last chunk sent; {case}"
            );
        } else {
            assert_eq!(r.header("content-length"), Some("100"), "{case}");
            assert_eq!(r.body, b"0123456789", "{case}");
        }

        // An HTTP client sees an error, not a short body.
        let mut client = Client::new(proxy.addr);
        let result = timeout(DEADLINE, client.get("/")).await.expect("in time");
        assert!(result.is_err(), "read as complete: {result:?}; {case}");
        assert_eq!(proxy.backend(addr).failures, 2, "{case}");
    }
}

#[tokio::test]
async fn read_timeout_gives_504() {
    let a = backend("a").await;
    let mut up = upstream(Algorithm::RoundRobin, backends(&[a.addr()]));
    up.read_timeout = Duration::from_millis(300);
    let proxy = start(settings(up)).await;
    let started = Instant::now();
    let reply = get(proxy.addr, "/?delay_ms=2000").await;
    let elapsed = started.elapsed();
    assert_eq!(
        reply.status,
        StatusCode::GATEWAY_TIMEOUT,
        "{}",
        reply.text()
    );
    assert!(elapsed >= Duration::from_millis(290), "took {elapsed:?}");
    assert!(elapsed < Duration::from_millis(1500), "took {elapsed:?}");
    // The backend itself is fine when asked for less.
    let mut up = upstream(Algorithm::RoundRobin, backends(&[a.addr()]));
    up.read_timeout = Duration::from_millis(300);
    let proxy = start(settings(up)).await;
    assert_eq!(
        get(proxy.addr, "/?delay_ms=10").await.status,
        StatusCode::OK
    );
}

// ---------------------------------------------------------------------------------------------
// 8: retries
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn retries_idempotent_requests_only_unless_told() {
    let good = backend("good").await;
    for (request_kind, retry_non_idempotent, expected) in [
        ("POST", false, StatusCode::BAD_GATEWAY),
        ("GET", false, StatusCode::OK),
        ("POST", true, StatusCode::OK),
    ] {
        // A fresh upstream each time: round robin's first pick is the first backend, the bad one.
        let (bad, seen) = dropping_backend().await;
        let mut up = upstream(Algorithm::RoundRobin, backends(&[bad, good.addr()]));
        if retry_non_idempotent {
            up.next_upstream = up.next_upstream.with(NextUpstream::NON_IDEMPOTENT);
        }
        let proxy = start(settings(up)).await;
        let mut client = Client::new(proxy.addr);
        let reply = match request_kind {
            "POST" => client.send(post("hello")).await,
            _ => client.get("/").await,
        }
        .unwrap();
        let case = format!("{request_kind}, retry_non_idempotent = {retry_non_idempotent}");
        assert_eq!(reply.status, expected, "{case}: {}", reply.text());
        assert_eq!(
            seen.load(Ordering::SeqCst),
            1,
            "{case}: bad backend got it first"
        );
        assert_eq!(proxy.backend(bad).failures, 1, "{case}");
        let good_requests = proxy.backend(good.addr()).requests;
        if expected == StatusCode::OK {
            assert_eq!(reply.text(), "good", "{case}");
            assert_eq!(good_requests, 1, "{case}");
        } else {
            assert_eq!(good_requests, 0, "{case}: not retried");
        }
    }
}

/// A backend that answers every request `status`, its body `busy`, counting the requests.
async fn status_backend(status: u16) -> (SocketAddr, Arc<AtomicUsize>) {
    fixed_backend(status, "busy").await
}

/// A backend that answers every request `status` with `body`, counting the requests.
async fn fixed_backend(status: u16, body: &'static str) -> (SocketAddr, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    let addr = raw_backend(move |mut s| {
        let counter = Arc::clone(&counter);
        async move {
            while read_request(&mut s).await.is_some() {
                counter.fetch_add(1, Ordering::SeqCst);
                let head = format!(
                    "HTTP/1.1 {status} Whatever\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
    (addr, seen)
}

/// Issue 29: a status `next_upstream` lists moves the request to the next backend and counts
/// as the backend's failure; an unlisted one is relayed; the last attempt's answer is relayed
/// whatever its status (nginx's rules).
#[tokio::test]
async fn a_listed_status_moves_the_request_on_and_the_last_answer_is_relayed() {
    let good = backend("good").await;
    for (next, expected, text) in [
        (
            NextUpstream::DEFAULT,
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
        ),
        (
            NextUpstream::DEFAULT.with(NextUpstream::HTTP_500),
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
        ),
        (
            NextUpstream::DEFAULT.with(NextUpstream::HTTP_503),
            StatusCode::OK,
            "good",
        ),
    ] {
        let (busy, seen) = status_backend(503).await;
        // Round robin's first pick is the first backend, the busy one.
        let mut up = upstream(Algorithm::RoundRobin, backends(&[busy, good.addr()]));
        up.next_upstream = next;
        let proxy = start(settings(up)).await;
        let reply = get(proxy.addr, "/").await;
        assert_eq!(reply.status, expected, "{next:?}");
        assert_eq!(reply.text(), text, "{next:?}");
        assert_eq!(seen.load(Ordering::SeqCst), 1, "{next:?}");
        let moved = expected == StatusCode::OK;
        // Passive health counts the 503 only when it moved the request on (nginx); what the
        // load-aware algorithms learn (`failures`) counts it either way (`failure_statuses`).
        let b = proxy.backend(busy);
        assert_eq!(b.fails, u32::from(moved), "{next:?}");
        assert_eq!(b.failures, 1, "{next:?}");
    }
    // Two busy backends: the second's 503 is the last attempt's answer, relayed as it is.
    let (a, seen_a) = status_backend(503).await;
    let (b, seen_b) = status_backend(503).await;
    let mut up = upstream(Algorithm::RoundRobin, backends(&[a, b]));
    up.next_upstream = NextUpstream::DEFAULT.with(NextUpstream::HTTP_503);
    let proxy = start(settings(up)).await;
    let reply = get(proxy.addr, "/").await;
    assert_eq!(
        (reply.status, reply.text()),
        (StatusCode::SERVICE_UNAVAILABLE, "busy".into())
    );
    assert_eq!(
        seen_a.load(Ordering::SeqCst) + seen_b.load(Ordering::SeqCst),
        2
    );
    // nginx's rule: the relayed last answer is not held against its backend's passive
    // health; both 503s teach the load-aware algorithms.
    assert_eq!(proxy.backend(a).fails + proxy.backend(b).fails, 1);
    assert_eq!(proxy.backend(a).failures + proxy.backend(b).failures, 2);
}

/// Four requests through round robin over a backend answering 503 (kept in rotation) and
/// `spare` (marked down if `spare_down`), moving on after a 503 within a budget with no
/// reserve where each request earns half a retry for a minute: their statuses, and how many
/// retries the budget refused.
async fn through_a_half_retry_budget(spare_down: bool) -> (Vec<u16>, u64) {
    let (busy, _) = status_backend(503).await;
    let spare = backend("good").await;
    let mut up = upstream(Algorithm::RoundRobin, backends(&[busy, spare.addr()]));
    up.backends[0].max_fails = 0;
    up.backends[1].down = spare_down;
    up.next_upstream = NextUpstream::DEFAULT.with(NextUpstream::HTTP_503);
    up.retry_budget = Some(RetryBudgetSettings {
        ratio: 0.5,
        min_per_second: 0,
        window: balance::Nanos(60_000_000_000),
    });
    let proxy = start(settings(up)).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(get(proxy.addr, "/").await.status.as_u16());
    }
    let exhausted = proxy
        .metrics
        .totals()
        .values()
        .map(|c| c.budget_exhausted)
        .sum();
    (statuses, exhausted)
}

/// Issue 29: with the retry budget spent, a retry is not made and the client gets the failed
/// attempt's answer; the refusal is counted.
#[tokio::test]
async fn a_spent_retry_budget_relays_the_failed_attempt_s_answer() {
    let (statuses, exhausted) = through_a_half_retry_budget(false).await;
    // Round robin alternates: requests 1 and 3 meet the busy backend first. The first has
    // earned half a retry: not enough, its 503 is relayed; by the third, three requests have
    // earned one and a half: it is retried.
    assert_eq!(statuses, [503, 200, 200, 200]);
    assert_eq!(exhausted, 1);
}

/// A listed status moves a request on; with the other backend down no backend can be picked:
/// our 502, as nginx's "no live upstreams" — and the retry that was paid for but not made is
/// given back to the budget (else every such request would spend one).
#[tokio::test]
async fn a_retry_that_finds_no_backend_answers_502_and_costs_the_budget_nothing() {
    let (statuses, exhausted) = through_a_half_retry_budget(true).await;
    // The first has earned half a retry: its 503 is relayed. Each later one has one at least,
    // moves on, finds no backend (502), and gets it back. Without the refund the third would
    // find half a retry and relay its 503.
    assert_eq!(statuses, [503, 502, 502, 502]);
    assert_eq!(exhausted, 1);
}

// ---------------------------------------------------------------------------------------------
// 9, 10, 11: what the proxy accepts and what it passes on
// ---------------------------------------------------------------------------------------------

/// A backend that answers with the request head it received as its body, adding `extra_head`
/// (complete header lines) to its response head.
async fn echo_backend(extra_head: &'static str) -> SocketAddr {
    raw_backend(move |mut s| async move {
        if let Some(request) = read_request(&mut s).await {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{extra_head}\r\n",
                request.len()
            );
            let _ = s.write_all(head.as_bytes()).await;
            let _ = s.write_all(&request).await;
        }
    })
    .await
}

#[tokio::test]
async fn header_hygiene_both_ways() {
    // With hop-by-hop headers of its own, which must not reach the client.
    let echo = echo_backend(
        "Connection: keep-alive, X-Resp-Secret\r\nX-Resp-Secret: 1\r\n\
         Keep-Alive: timeout=5\r\nX-Resp-Keep: 1\r\n",
    )
    .await;
    let proxy = start(settings(upstream(Algorithm::RoundRobin, backends(&[echo])))).await;

    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 7)), 0))
        .unwrap();
    let mut stream = socket.connect(proxy.addr).await.unwrap();
    stream
        .write_all(
            b"GET /path?q=1 HTTP/1.1\r\n\
              Host: example.com:8080\r\n\
              Connection: close, X-Secret\r\n\
              X-Secret: s\r\n\
              Keep-Alive: timeout=5\r\n\
              Proxy-Connection: keep-alive\r\n\
              Proxy-Authorization: Basic Zm9vOmJhcg==\r\n\
              TE: trailers\r\n\
              X-Forwarded-For: 203.0.113.7\r\n\
              X-Forwarded-Proto: https\r\n\
              Forwarded: for=198.51.100.1\r\n\
              X-Keep: yes\r\n\r\n",
        )
        .await
        .unwrap();
    let response = read_until_closed(&mut stream, DEADLINE).await;
    assert_eq!(response.status, 200);

    // What the client gets back.
    for gone in ["x-resp-secret", "keep-alive"] {
        assert_eq!(response.header(gone), None, "{gone} reached the client");
    }
    assert_eq!(response.header("x-resp-keep"), Some("1"));

    // What the backend got.
    let echoed = String::from_utf8(response.body.clone()).unwrap();
    assert!(echoed.starts_with("GET /path?q=1 HTTP/1.1\r\n"), "{echoed}");
    let received = parse_headers(echoed.trim_end());
    let values = |name: &str| -> Vec<&str> {
        received
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    for gone in [
        "connection",
        "x-secret",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "te",
    ] {
        assert_eq!(
            values(gone),
            Vec::<&str>::new(),
            "{gone} reached the backend"
        );
    }
    assert_eq!(values("host"), ["example.com:8080"]);
    // 127.0.0.7 is not a trusted proxy (none is configured): its forwarding headers are
    // replaced by ours (tests/http1_rules.rs has the trusted case).
    assert_eq!(values("x-forwarded-for"), ["127.0.0.7"]);
    assert_eq!(values("x-forwarded-proto"), ["http"]);
    assert_eq!(
        values("forwarded"),
        ["for=127.0.0.7;proto=http;host=\"example.com:8080\""]
    );
    assert_eq!(values("x-real-ip"), ["127.0.0.7"]);
    assert_eq!(values("x-keep"), ["yes"]);
}

#[tokio::test]
async fn host_header_checks() {
    let a = backend("a").await;
    let proxy = start(settings(upstream(
        Algorithm::RoundRobin,
        backends(&[a.addr()]),
    )))
    .await;

    let r = raw_exchange(proxy.addr, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").await;
    assert_eq!(
        r.status,
        400,
        "no Host: {:?}",
        String::from_utf8_lossy(&r.raw)
    );

    let r = raw_exchange(
        proxy.addr,
        b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(
        r.status,
        400,
        "two Hosts: {:?}",
        String::from_utf8_lossy(&r.raw)
    );

    let r = raw_exchange(proxy.addr, b"GET / HTTP/1.0\r\n\r\n").await;
    assert_eq!(
        r.status,
        200,
        "HTTP/1.0: {:?}",
        String::from_utf8_lossy(&r.raw)
    );
    assert_eq!(r.body, b"a");

    let r = raw_exchange(
        proxy.addr,
        b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    // Only the two good requests reached the backend.
    assert_eq!(proxy.backend(a.addr()).requests, 2);
}

fn request_with_headers(extra: usize) -> Vec<u8> {
    let mut req = b"GET / HTTP/1.1\r\nHost: fulcrum.test\r\nConnection: close\r\n".to_vec();
    for i in 0..extra {
        req.extend_from_slice(format!("X-H-{i}: v\r\n").as_bytes());
    }
    req.extend_from_slice(b"\r\n");
    req
}

fn request_with_head_bytes(total: usize) -> Vec<u8> {
    let start = b"GET / HTTP/1.1\r\nHost: fulcrum.test\r\nConnection: close\r\nX-Big: ";
    let filler = total - start.len() - 4;
    let mut req = start.to_vec();
    req.extend(std::iter::repeat_n(b'a', filler));
    req.extend_from_slice(b"\r\n\r\n");
    assert_eq!(req.len(), total);
    req
}

/// A backend that answers every request with 200 "ok", whatever its head. (The lab's backend
/// is a hyper server with hyper's own limit of 100 headers, which a request at the proxy's limit
/// exceeds once the proxy has added its forwarding headers.)
async fn ok_backend() -> (SocketAddr, Arc<AtomicUsize>) {
    fixed_backend(200, "ok").await
}

#[tokio::test]
async fn header_count_and_size_limits_give_431() {
    let (ok, seen) = ok_backend().await;
    let proxy = start(settings(upstream(Algorithm::RoundRobin, backends(&[ok])))).await;
    // Host and Connection, plus extras: 100 headers pass, 101 do not.
    assert_eq!(
        raw_exchange(proxy.addr, &request_with_headers(98))
            .await
            .status,
        200
    );
    assert_eq!(
        raw_exchange(proxy.addr, &request_with_headers(99))
            .await
            .status,
        431
    );
    // 16 KiB of head pass, more do not.
    let limit = ListenerSettings::DEFAULT_MAX_HEADER_BYTES;
    let ok = raw_exchange(proxy.addr, &request_with_head_bytes(limit - 100)).await;
    assert_eq!(ok.status, 200);
    let big = raw_exchange(proxy.addr, &request_with_head_bytes(limit + 1024)).await;
    assert_eq!(big.status, 431);
    assert_eq!(
        seen.load(Ordering::SeqCst),
        2,
        "only the two good requests were passed on"
    );
}

#[tokio::test]
async fn slow_request_head_gets_408() {
    let a = backend("a").await;
    let mut s = settings(upstream(Algorithm::RoundRobin, backends(&[a.addr()])));
    s.listeners[0].client_header_timeout = Duration::from_millis(300);
    let proxy = start(s).await;

    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let started = Instant::now();
    stream.write_all(b"GET /slo").await.unwrap();
    let response = read_until_closed(&mut stream, DEADLINE).await;
    let elapsed = started.elapsed();
    assert!(response.closed);
    assert_eq!(
        response.status,
        408,
        "{:?}",
        String::from_utf8_lossy(&response.raw)
    );
    assert_eq!(response.header("connection"), Some("close"));
    // Exactly one response, complete.
    let len: usize = response.header("content-length").unwrap().parse().unwrap();
    assert_eq!(response.body.len(), len);
    assert!(elapsed >= Duration::from_millis(250), "took {elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
    assert_eq!(proxy.backend(a.addr()).requests, 0);
}

#[tokio::test]
async fn body_over_max_body_bytes_gives_413() {
    let a = backend("a").await;
    let mut s = settings(upstream(Algorithm::RoundRobin, backends(&[a.addr()])));
    s.listeners[0].max_body_bytes = 1024;
    let proxy = start(s).await;

    // Declared too large: refused from the head alone, before any body is sent.
    let r = raw_exchange(
        proxy.addr,
        b"POST / HTTP/1.1\r\nHost: fulcrum.test\r\nContent-Length: 1025\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 413, "{:?}", String::from_utf8_lossy(&r.raw));

    // At the limit: passes.
    let mut client = Client::new(proxy.addr);
    let reply = client.send(post("x".repeat(1024))).await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(proxy.backend(a.addr()).requests, 1);
}

// ---------------------------------------------------------------------------------------------
// 12, 13: connections and shutdown
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_holds_further_clients_back() {
    let a = backend("a").await;
    let mut s = settings(upstream(Algorithm::RoundRobin, backends(&[a.addr()])));
    s.listeners[0].max_connections = Some(1);
    let proxy = start(s).await;

    let mut first = Client::new(proxy.addr);
    assert_eq!(first.get("/").await.unwrap().status, StatusCode::OK);

    let addr = proxy.addr;
    let mut second = tokio::spawn(async move { Client::new(addr).get("/").await });
    // The second connection waits while the first is open...
    assert!(
        timeout(Duration::from_millis(300), &mut second)
            .await
            .is_err(),
        "a second connection was served while max_connections = 1 was in use"
    );
    // ... and the first is still served meanwhile.
    assert_eq!(first.get("/").await.unwrap().status, StatusCode::OK);
    assert!(!second.is_finished());
    assert_eq!(proxy.backend(a.addr()).requests, 2);

    drop(first);
    let reply = timeout(DEADLINE, second)
        .await
        .expect("served once the first connection closed")
        .unwrap()
        .unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(proxy.backend(a.addr()).requests, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_requests_in_flight() {
    let a = backend("a").await;
    let proxy = start(settings(upstream(
        Algorithm::RoundRobin,
        backends(&[a.addr()]),
    )))
    .await;
    let Running {
        addr,
        upstream,
        mut shutdown,
        task,
        ..
    } = proxy;

    let in_flight = tokio::spawn(async move { Client::new(addr).get("/?delay_ms=500").await });
    eventually("the request reaches the backend", DEADLINE, || {
        let n = upstream.snapshot()[0].in_flight;
        async move { n == 1 }
    })
    .await;

    let shutdown_started = Instant::now();
    shutdown.take().unwrap().send(()).unwrap();
    eventually("new connections are refused", DEADLINE, || async {
        matches!(TcpStream::connect(addr).await, Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused)
    })
    .await;
    assert!(
        !in_flight.is_finished(),
        "the listener closed only after the request in flight finished"
    );

    let reply = timeout(DEADLINE, in_flight)
        .await
        .expect("in time")
        .unwrap()
        .expect("the request in flight completes");
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.text(), "a");
    timeout(DEADLINE, task).await.expect("run returns").unwrap();
    // Well before shutdown_timeout (5 s): nothing was left to wait for.
    assert!(shutdown_started.elapsed() < Duration::from_secs(2));
}

// ---------------------------------------------------------------------------------------------
// 14: backup backends
// ---------------------------------------------------------------------------------------------

fn backup(addr: SocketAddr) -> BackendSettings {
    BackendSettings {
        backup: true,
        ..BackendSettings::new(addr)
    }
}

async fn names(addr: SocketAddr, n: usize) -> String {
    let mut client = Client::new(addr);
    let mut seen = String::new();
    for _ in 0..n {
        let reply = client.get("/").await.unwrap();
        assert_eq!(reply.status, StatusCode::OK);
        seen.push_str(&reply.text());
    }
    seen
}

#[tokio::test]
async fn backup_serves_only_when_primaries_cannot() {
    let (a, b, z) = (backend("a").await, backend("b").await, backend("z").await);

    // Healthy primaries: the backup gets nothing.
    let up = upstream(
        Algorithm::RoundRobin,
        vec![
            BackendSettings::new(a.addr()),
            BackendSettings::new(b.addr()),
            backup(z.addr()),
        ],
    );
    let proxy = start(settings(up)).await;
    assert_eq!(names(proxy.addr, 10).await, "ababababab");
    assert_eq!(proxy.backend(z.addr()).requests, 0);

    // Primary marked down: straight to the backup.
    let up = upstream(
        Algorithm::RoundRobin,
        vec![
            BackendSettings {
                down: true,
                ..BackendSettings::new(a.addr())
            },
            backup(z.addr()),
        ],
    );
    let proxy = start(settings(up)).await;
    assert_eq!(names(proxy.addr, 5).await, "zzzzz");
    assert_eq!(proxy.backend(a.addr()).requests, 0);

    // Primary dead: the first request fails over to the backup, the rest go there directly.
    let dead = refusing_addr();
    let up = upstream(
        Algorithm::RoundRobin,
        vec![BackendSettings::new(dead), backup(z.addr())],
    );
    let proxy = start(settings(up)).await;
    assert_eq!(names(proxy.addr, 5).await, "zzzzz");
    assert_eq!(proxy.backend(dead).failures, 1);
    assert_eq!(proxy.backend(z.addr()).requests, 5);
}

#[tokio::test]
async fn idle_keep_alive_connection_is_closed_without_a_408() {
    let a = backend("a").await;
    let mut s = settings(upstream(Algorithm::RoundRobin, backends(&[a.addr()])));
    s.listeners[0].client_header_timeout = Duration::from_millis(300);
    let proxy = start(s).await;

    // A connection that never sends anything.
    let mut silent = TcpStream::connect(proxy.addr).await.unwrap();
    // A connection that completes one request, then stays idle.
    let mut used = TcpStream::connect(proxy.addr).await.unwrap();
    used.write_all(b"GET / HTTP/1.1\r\nHost: fulcrum.test\r\n\r\n")
        .await
        .unwrap();
    let mut first = Vec::new();
    let mut buf = [0u8; 1024];
    while find(&first, b"\r\n\r\na").is_none() {
        let n = used.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the first response");
        first.extend_from_slice(&buf[..n]);
    }

    for stream in [&mut silent, &mut used] {
        // Everything the proxy sends until it closes the connection.
        let mut after = Vec::new();
        let closed = tokio::time::timeout(DEADLINE, async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => after.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "the idle connection is closed after the timeout"
        );
        assert!(
            after.is_empty(),
            "an idle connection gets no 408: {:?}",
            String::from_utf8_lossy(&after)
        );
    }
}

#[tokio::test]
async fn http10_request_without_host_names_the_backend() {
    let echo = echo_backend("").await;
    let proxy = start(settings(upstream(Algorithm::RoundRobin, backends(&[echo])))).await;
    let r = raw_exchange(proxy.addr, b"GET / HTTP/1.0\r\n\r\n").await;
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.raw));
    let received = String::from_utf8_lossy(&r.body).to_ascii_lowercase();
    assert!(
        received.contains(&format!("host: {echo}\r\n")),
        "the backend gets Host = its address: {received}"
    );
}

#[tokio::test]
async fn a_client_that_stops_reading_is_cut_off_after_send_timeout() {
    // A backend with an endless body: it writes until the proxy stops taking it.
    let closed = Arc::new(AtomicBool::new(false));
    let saw_close = Arc::clone(&closed);
    let big = raw_backend(move |mut s| {
        let saw_close = Arc::clone(&saw_close);
        async move {
            if read_request(&mut s).await.is_none() {
                return;
            }
            let head = "HTTP/1.1 200 OK\r\nContent-Length: 1099511627776\r\n\r\n";
            if s.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let chunk = vec![b'x'; 64 * 1024];
            while s.write_all(&chunk).await.is_ok() {}
            saw_close.store(true, Ordering::SeqCst);
        }
    })
    .await;
    let mut s = settings(upstream(Algorithm::RoundRobin, backends(&[big])));
    s.listeners[0].send_timeout = Duration::from_millis(300);
    let proxy = start(s).await;

    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    client
        .write_all(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    // The client reads nothing. Once the socket buffers are full the proxy's writes stall;
    // after send_timeout it gives up: the backend connection is closed and the attempt ends.
    eventually("the backend connection closed", DEADLINE, || {
        let closed = Arc::clone(&closed);
        async move { closed.load(Ordering::SeqCst) }
    })
    .await;
    eventually("the attempt completed", DEADLINE, || async {
        proxy.backend(big).in_flight == 0
    })
    .await;
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_connections_under_overload_never_wedges_the_workers() {
    // Many more clients than max_connections, on 2 workers that hand connections to each
    // other: every request is eventually served (a permit held by a connection waiting in the
    // other worker's queue once wedged both workers for good).
    let a = backend("a").await;
    let mut s = settings(upstream(Algorithm::RoundRobin, backends(&[a.addr()])));
    s.listeners[0].max_connections = Some(2);
    let proxy = start(s).await;
    let addr = proxy.addr;
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..32 {
        clients.spawn(async move {
            for _ in 0..20 {
                assert_eq!(get(addr, "/").await.status, StatusCode::OK);
            }
        });
    }
    timeout(4 * DEADLINE, async {
        while let Some(done) = clients.join_next().await {
            done.unwrap();
        }
    })
    .await
    .expect("all 640 requests served");
    assert_eq!(proxy.backend(a.addr()).requests, 640);
}

#[tokio::test]
async fn a_close_delimited_body_cut_short_reaches_the_client_as_a_reset() {
    // No Content-Length, no chunking: the body ends when the backend closes. A backend that
    // stops mid-body (here: silent past read_timeout) must not look like one that finished.
    let (release, released) = watch::channel(false);
    let stalling = raw_backend(move |mut s| {
        let mut released = released.clone();
        async move {
            if read_request(&mut s).await.is_some() {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\n\r\npartial").await;
                let _ = released.wait_for(|r| *r).await;
            }
        }
    })
    .await;
    let mut up = upstream(Algorithm::RoundRobin, backends(&[stalling]));
    up.read_timeout = Duration::from_millis(300);
    let proxy = start(settings(up)).await;
    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let read = timeout(DEADLINE, client.read_to_end(&mut got))
        .await
        .expect("the proxy ends the connection");
    let _ = release.send(true);
    assert!(
        read.is_err(),
        "a truncated body ended like a complete one: {:?}",
        String::from_utf8_lossy(&got)
    );
}

#[tokio::test]
async fn a_backend_answering_before_reading_the_body_is_heard_and_not_blamed() {
    // The backend reads the head only, refuses with 413 and closes, leaving most of a 1 MiB
    // body unread: writing the rest fails, but its answer is what the client gets.
    let early = raw_backend(|mut s| async move {
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while find(&head, b"\r\n\r\n").is_none() {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let _ = s
            .write_all(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbig!")
            .await;
    })
    .await;
    let proxy = start(settings(upstream(
        Algorithm::RoundRobin,
        backends(&[early]),
    )))
    .await;
    for attempt in 0..5 {
        let mut client = Client::new(proxy.addr);
        let reply = timeout(DEADLINE, client.send(post(vec![b'x'; 1024 * 1024])))
            .await
            .expect("an answer in time")
            .unwrap();
        assert_eq!(
            reply.status,
            StatusCode::PAYLOAD_TOO_LARGE,
            "attempt {attempt}"
        );
        assert_eq!(reply.text(), "big!");
    }
    assert_eq!(proxy.backend(early).failures, 0);
}

/// Issue 29: nginx's `allow` / `deny` on a listener: the first rule that matches the client's
/// address decides (403 when it denies), none: allowed.
#[tokio::test]
async fn access_rules_decide_by_the_client_s_address_first_match_wins() {
    let good = backend("good").await;
    let mut s = settings(upstream(Algorithm::RoundRobin, backends(&[good.addr()])));
    let (rules, _) =
        proxy::access::AccessList::parse(&["deny 127.0.0.2", "allow 127.0.0.0/16", "deny all"])
            .unwrap();
    s.listeners[0].access = Some(rules);
    let proxy = start(s).await;
    for (from, expected) in [
        ("127.0.0.1", 200),
        ("127.0.0.2", 403),
        ("127.0.9.9", 200),
        ("127.1.0.1", 403),
    ] {
        let socket = TcpSocket::new_v4().unwrap();
        socket
            .bind(SocketAddr::new(from.parse().unwrap(), 0))
            .unwrap();
        let mut stream = socket.connect(proxy.addr).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        timeout(DEADLINE, stream.read_to_end(&mut answer))
            .await
            .unwrap()
            .unwrap();
        let status = String::from_utf8_lossy(&answer[9..12]).to_string();
        assert_eq!(status, expected.to_string(), "from {from}");
    }
}
