//! How the proxy reacts to failures (issue 10): one test per defect the review found, each
//! with a small backend that misbehaves on purpose, raw requests, and the numbers the issue
//! asks for printed (`cargo test -- --nocapture` shows them).

mod common;
mod harness;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use balance::Algorithm;
use common::raw_backend;
use harness::*;
use proxy::BackendSettings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

/// The path of a raw request.
fn path_of(request: &[u8]) -> String {
    let line = String::from_utf8_lossy(request);
    line.split(' ').nth(1).unwrap_or("").to_owned()
}

/// A keep-alive backend: `/die` is read and counted, then the connection is dropped without
/// an answer (a crashing worker); `/slow` is answered after 100 ms; anything else at once.
async fn dying_backend() -> (SocketAddr, Arc<AtomicUsize>) {
    let died = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&died);
    let addr = raw_backend(move |mut s| {
        let counter = Arc::clone(&counter);
        async move {
            while let Some(request) = read_request(&mut s).await {
                match path_of(&request).as_str() {
                    "/die" => {
                        counter.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    "/slow" => tokio::time::sleep(Duration::from_millis(100)).await,
                    _ => {}
                }
                if s.write_all(OK).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
    (addr, died)
}

/// `n` requests for `path` at once, each on its own client connection.
async fn burst(addr: SocketAddr, path: &str, n: usize) {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let path = path.to_owned();
        tasks.push(tokio::spawn(async move { get(addr, &path).await.status }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), http::StatusCode::OK);
    }
}

/// A proxy with one worker (so every connection to the backend is in one pool) over `addr`.
async fn one_worker_proxy(addr: SocketAddr) -> Running {
    start(one_worker(upstream(
        Algorithm::RoundRobin,
        backends(&[addr]),
    )))
    .await
}

fn one_worker(up: proxy::UpstreamSettings) -> proxy::ProxySettings {
    let mut s = settings(up);
    s.workers = 1;
    s
}

#[tokio::test]
async fn defect_1_a_failing_request_is_not_replayed_on_every_idle_connection() {
    let (addr, died) = dying_backend().await;
    let proxy = one_worker_proxy(addr).await;
    // Eight idle connections to the backend in the worker's pool.
    burst(proxy.addr, "/slow", 8).await;
    eventually("eight idle connections", DEADLINE, || async {
        proxy.backend(addr).connections_idle == 8
    })
    .await;

    let r = raw_exchange(
        proxy.addr,
        b"GET /die HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    let seen = died.load(Ordering::SeqCst);
    println!(
        "defect 1: the backend saw the failing request {seen} times; answer {}",
        r.status
    );
    assert_eq!(r.status, 502);
    // Once on a kept-alive connection (the keep-alive race is possible there), once on a
    // fresh one, and no more.
    assert_eq!(seen, 2, "sent on {seen} connections");
}

/// A backend that answers the first request on a connection and closes the connection when
/// the next one arrives, without answering it: the keep-alive race, made certain.
async fn closing_after_one() -> (SocketAddr, Arc<AtomicUsize>) {
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&requests);
    let addr = raw_backend(move |mut s| {
        let counter = Arc::clone(&counter);
        async move {
            if read_request(&mut s).await.is_none() {
                return;
            }
            counter.fetch_add(1, Ordering::SeqCst);
            if s.write_all(OK).await.is_err() {
                return;
            }
            // The next request (if one comes) finds the connection closing.
            let mut byte = [0u8; 1];
            let _ = s.read(&mut byte).await;
        }
    })
    .await;
    (addr, requests)
}

#[tokio::test]
async fn defect_2_the_keep_alive_race_does_not_eject_a_healthy_backend() {
    let (addr, answered) = closing_after_one().await;
    let proxy = one_worker_proxy(addr).await;
    let mut client = lab::Client::new(proxy.addr);
    assert_eq!(client.get("/").await.unwrap().status, 200);

    // A GET on the connection the backend is closing is resent on a fresh one.
    let reply = client.get("/").await.unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(answered.load(Ordering::SeqCst), 2);
    assert_eq!(proxy.backend(addr).failures, 0);

    // A POST cannot be resent once it went out whole: whether the backend acted on it cannot
    // be known. The client gets 502, and the backend is not blamed for the race.
    let reply = client.send(post("hello")).await.unwrap();
    let b = proxy.backend(addr);
    println!(
        "defect 2: POST on a closing kept-alive connection: {}; backend failures {}, available {}",
        reply.status.as_u16(),
        b.failures,
        b.available
    );
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert_eq!(b.failures, 0);
    assert!(b.available, "the backend stays up");
    // And the next request is served.
    assert_eq!(get(proxy.addr, "/").await.status, 200);
}

/// A backend that answers 413 as soon as it has a request head and never reads the body,
/// holding the connection open: what a server with an upload limit does.
async fn early_answer_backend() -> (SocketAddr, Arc<AtomicUsize>) {
    let heads = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&heads);
    let addr = raw_backend(move |mut s| {
        let counter = Arc::clone(&counter);
        async move {
            let mut buf = vec![0u8; 4096];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            counter.fetch_add(1, Ordering::SeqCst);
            let _ = s
                .write_all(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 4\r\n\r\nbig!")
                .await;
            // Stop reading, keep the connection.
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    })
    .await;
    (addr, heads)
}

/// PUTs 32 MiB and reads the answer until the proxy closes the connection (or `within`);
/// returns it and how long it took.
async fn upload_32_mib(proxy: SocketAddr, within: Duration) -> (RawResponse, Duration) {
    let body = vec![b'x'; 32 << 20];
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    let started = Instant::now();
    let head = format!(
        "PUT /upload HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body).await.unwrap();
    let r = read_until_closed(&mut stream, within).await;
    (r, started.elapsed())
}

#[tokio::test]
async fn defect_4_an_early_answer_during_an_upload_reaches_the_client() {
    let (early, heads) = early_answer_backend().await;
    let (other, other_seen) = dying_backend().await;
    let mut up = upstream(Algorithm::RoundRobin, backends(&[early, other]));
    // Long enough that the old behaviour (a 504 after read_timeout) cannot pass for an early
    // answer on a loaded machine.
    up.read_timeout = Duration::from_secs(10);
    let mut s = settings(up);
    s.listeners[0].max_body_bytes = 64 << 20;
    let proxy = start(s).await;

    let (r, took) = upload_32_mib(proxy.addr, DEADLINE).await;
    println!(
        "defect 4: 32 MiB PUT to a backend answering 413 at once: {} in {took:?}",
        r.status
    );
    assert_eq!(r.status, 413, "{:?}", String::from_utf8_lossy(&r.raw));
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(heads.load(Ordering::SeqCst), 1);
    assert_eq!(
        proxy.backend(early).failures,
        0,
        "an answer is not a failure"
    );
    assert_eq!(proxy.backend(other).requests, 0, "not retried elsewhere");
    assert_eq!(other_seen.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn defect_5_a_request_that_tried_every_backend_does_not_revive_the_failed_ones() {
    let (a, a_seen) = dropping_backend().await;
    let (b, b_seen) = dropping_backend().await;
    let mut up = upstream(Algorithm::RoundRobin, backends(&[a, b]));
    up.backends[1].max_fails = 3;
    up.retries = Some(3);
    let proxy = start(one_worker(up)).await;
    // a fails (and is out for fail_timeout), b fails (still in), nothing is left to try.
    let r = raw_exchange(
        proxy.addr,
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 502);
    assert_eq!(
        (a_seen.load(Ordering::SeqCst), b_seen.load(Ordering::SeqCst)),
        (1, 1)
    );
    assert!(
        !proxy.backend(a).available,
        "a stays out inside its fail_timeout"
    );
    // The next request goes to b only.
    let r = raw_exchange(
        proxy.addr,
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 502);
    assert_eq!(
        (a_seen.load(Ordering::SeqCst), b_seen.load(Ordering::SeqCst)),
        (1, 2)
    );
}

/// A backend that takes requests and never answers, noting when the proxy closes the
/// connection.
async fn stalling_backend() -> (SocketAddr, Arc<AtomicUsize>, Arc<AtomicBool>) {
    let got = Arc::new(AtomicUsize::new(0));
    let closed = Arc::new(AtomicBool::new(false));
    let (got2, closed2) = (Arc::clone(&got), Arc::clone(&closed));
    let addr = raw_backend(move |mut s| {
        let (got, closed) = (Arc::clone(&got2), Arc::clone(&closed2));
        async move {
            if read_request(&mut s).await.is_none() {
                return;
            }
            got.fetch_add(1, Ordering::SeqCst);
            let mut byte = [0u8; 1];
            // Returns when the proxy closes the connection (or after 10 s).
            let _ = tokio::time::timeout(Duration::from_secs(10), s.read(&mut byte)).await;
            closed.store(true, Ordering::SeqCst);
        }
    })
    .await;
    (addr, got, closed)
}

#[tokio::test]
async fn defect_6_a_client_that_leaves_is_noticed_while_the_backend_works() {
    let (addr, got, closed) = stalling_backend().await;
    let proxy = start(upstream_settings_one(addr)).await;
    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    client
        .write_all(b"GET /work HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    eventually("the backend has the request", DEADLINE, || async {
        got.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(proxy.backend(addr).in_flight, 1);
    drop(client);
    let left = Instant::now();
    eventually("in flight is back to 0", DEADLINE, || async {
        proxy.backend(addr).in_flight == 0
    })
    .await;
    let in_flight_after = left.elapsed();
    eventually("the backend connection is closed", DEADLINE, || async {
        closed.load(Ordering::SeqCst)
    })
    .await;
    let closed_after = left.elapsed();
    println!(
        "defect 6: after the client left: in flight 0 after {in_flight_after:?}, backend connection closed after {closed_after:?}"
    );
    assert!(
        in_flight_after < Duration::from_millis(100),
        "{in_flight_after:?}"
    );
    assert!(
        closed_after < Duration::from_millis(100),
        "{closed_after:?}"
    );
    let b = proxy.backend(addr);
    assert_eq!(
        (b.failures, b.requests),
        (0, 0),
        "a cancelled request is no verdict"
    );
}

fn upstream_settings_one(addr: SocketAddr) -> proxy::ProxySettings {
    settings(upstream(Algorithm::LeastConn, backends(&[addr])))
}

/// Sockets in `/proc/net/tcp` connected to `port` on the proxy's side (the side whose remote
/// port is `port`), by state: (established, close-wait).
fn sockets_to(port: u16) -> (usize, usize) {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let mut counts = (0, 0);
    for line in table.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(remote), Some(state)) = (fields.get(2), fields.get(3)) else {
            continue;
        };
        let remote_port = remote
            .rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok());
        if remote_port != Some(port) {
            continue;
        }
        match *state {
            "01" => counts.0 += 1,
            "08" => counts.1 += 1,
            _ => {}
        }
    }
    counts
}

/// A keep-alive backend that answers `/slow` after 100 ms, and closes a connection that stays
/// idle for `idle_close` (if set).
async fn keepalive_backend(idle_close: Option<Duration>) -> SocketAddr {
    raw_backend(move |mut s| async move {
        loop {
            let request = match idle_close {
                Some(idle) => match tokio::time::timeout(idle, read_request(&mut s)).await {
                    Ok(r) => r,
                    Err(_) => return,
                },
                None => read_request(&mut s).await,
            };
            let Some(request) = request else { return };
            if path_of(&request) == "/slow" {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if s.write_all(OK).await.is_err() {
                return;
            }
        }
    })
    .await
}

#[tokio::test]
async fn defect_7_idle_connections_closed_by_the_backend_do_not_linger_in_close_wait() {
    let addr = keepalive_backend(Some(Duration::from_millis(200))).await;
    let proxy = start(upstream_settings_one(addr)).await;
    burst(proxy.addr, "/slow", 18).await;
    eventually("18 idle connections", DEADLINE, || async {
        proxy.backend(addr).connections_idle == 18
    })
    .await;
    // The backend closes them all after 200 ms idle; the proxy must close its side too.
    let closed = Instant::now();
    eventually("no proxy socket in CLOSE-WAIT", DEADLINE, || async {
        sockets_to(addr.port()) == (0, 0)
    })
    .await;
    println!(
        "defect 7: 18 idle connections closed by the backend: none left in CLOSE-WAIT after {:?}",
        closed.elapsed()
    );
    assert_eq!(proxy.backend(addr).connections_open, 0);
}

#[tokio::test]
async fn defect_7_idle_connections_expire_after_keepalive_timeout() {
    let addr = keepalive_backend(None).await;
    let mut up = upstream(Algorithm::RoundRobin, backends(&[addr]));
    up.keepalive_timeout = Duration::from_millis(300);
    let proxy = start(settings(up)).await;
    burst(proxy.addr, "/slow", 10).await;
    let idle_since = Instant::now();
    let open = sockets_to(addr.port()).0;
    assert!(open > 0);
    eventually("every idle connection expired", DEADLINE, || async {
        proxy.backend(addr).connections_open == 0 && sockets_to(addr.port()) == (0, 0)
    })
    .await;
    let expired = idle_since.elapsed();
    println!(
        "defect 7: keepalive_timeout 300 ms: {open} idle connections closed after {expired:?}"
    );
    assert!(expired >= Duration::from_millis(290), "{expired:?}");
    // keepalive_timeout plus the reaper's period (300 ms here), with room for a loaded machine.
    assert!(expired < Duration::from_millis(2500), "{expired:?}");
}

/// Defect 9, and issue 29's default: `next_upstream` is nginx's (`error timeout`), so a request
/// slow on every backend is tried on each in turn and each is blamed, as nginx does; without
/// `timeout` in the list, one slow request blames one backend only and the others stay.
#[tokio::test]
async fn defect_9_one_slow_request_takes_out_one_backend_unless_timeouts_move_on() {
    for (next, blamed) in [
        (balance::NextUpstream::ERROR, 1),
        (balance::NextUpstream::DEFAULT, 3),
    ] {
        let (a, b, c) = (backend("a").await, backend("b").await, backend("c").await);
        let mut up = upstream(
            Algorithm::RoundRobin,
            backends(&[a.addr(), b.addr(), c.addr()]),
        );
        up.read_timeout = Duration::from_millis(300);
        up.next_upstream = next;
        let proxy = start(settings(up)).await;
        let r = raw_exchange(
            proxy.addr,
            b"GET /?delay_ms=2000 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(r.status, 504);
        let snapshot = proxy.upstream.snapshot();
        let failed: u64 = snapshot.iter().map(|b| b.failures).sum();
        let available = snapshot.iter().filter(|b| b.available).count();
        println!("defect 9, {next:?}: one slow GET: {failed} blamed, {available} of 3 available");
        assert_eq!(failed, blamed, "{next:?}: {snapshot:?}");
        assert_eq!(available, 3 - blamed as usize, "{next:?}");
        if blamed == 1 {
            for _ in 0..4 {
                assert_eq!(get(proxy.addr, "/").await.status, 200);
            }
        }
    }
}

#[tokio::test]
async fn a_busy_connection_is_counted_open_and_not_idle() {
    let (addr, got, _closed) = stalling_backend().await;
    let proxy = start(settings(upstream(
        Algorithm::RoundRobin,
        vec![BackendSettings::new(addr)],
    )))
    .await;
    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    eventually("the backend has the request", DEADLINE, || async {
        got.load(Ordering::SeqCst) == 1
    })
    .await;
    let snap = proxy.backend(addr);
    assert_eq!((snap.connections_open, snap.connections_idle), (1, 0));
}

#[tokio::test]
async fn our_own_answer_to_head_has_no_body() {
    // No backend: our 503, to a HEAD then a GET on one kept-alive connection.
    let proxy = start(settings(upstream(
        Algorithm::RoundRobin,
        backends(&[refusing_addr()]),
    )))
    .await;
    let r = raw_exchange(
        proxy.addr,
        b"HEAD / HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    let raw = String::from_utf8_lossy(&r.raw);
    assert_eq!(raw.matches("HTTP/1.1 503 ").count(), 2, "{raw}");
    assert_eq!(
        raw.matches("no backend available").count(),
        1,
        "only the GET has a body: {raw}"
    );
}

#[tokio::test]
async fn without_keepalive_the_backend_is_told_to_close() {
    let (addr, heads) = recording_backend().await;
    let mut up = upstream(Algorithm::RoundRobin, backends(&[addr]));
    up.keepalive = 0;
    let proxy = start(settings(up)).await;
    assert_eq!(get(proxy.addr, "/").await.status, 200);
    let head = heads.lock().unwrap().pop().unwrap().to_ascii_lowercase();
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
}

/// A keep-alive backend that keeps every request head it receives.
async fn recording_backend() -> (SocketAddr, Arc<std::sync::Mutex<Vec<String>>>) {
    let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = Arc::clone(&heads);
    let addr = raw_backend(move |mut s| {
        let kept = Arc::clone(&kept);
        async move {
            while let Some(request) = read_request(&mut s).await {
                kept.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&request).into_owned());
                if s.write_all(OK).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
    (addr, heads)
}

/// A backend that reads request bodies slowly: 256 KiB every 20 ms (about 12 MB/s).
async fn slow_reader() -> SocketAddr {
    raw_backend(|mut s| async move {
        let mut buf = vec![0u8; 256 * 1024];
        let mut got = Vec::new();
        let head_end = loop {
            if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        };
        let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
        let length: usize = head
            .split("content-length: ")
            .nth(1)
            .and_then(|v| v.split("\r\n").next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut read = got.len() - head_end;
        while read < length {
            tokio::time::sleep(Duration::from_millis(20)).await;
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read += n,
            }
        }
        let _ = s.write_all(OK).await;
    })
    .await
}

#[tokio::test]
async fn a_slow_but_moving_upload_is_not_a_timeout() {
    let addr = slow_reader().await;
    let mut up = upstream(Algorithm::RoundRobin, backends(&[addr]));
    // Far less than the upload takes (32 MiB at about 12 MB/s), more than the backend takes
    // to read what the kernel's buffers hold once the proxy has written the last byte.
    up.read_timeout = Duration::from_secs(1);
    let mut s = settings(up);
    s.listeners[0].max_body_bytes = 64 << 20;
    let proxy = start(s).await;
    let (r, took) = upload_32_mib(proxy.addr, Duration::from_secs(20)).await;
    assert_eq!(
        r.status,
        200,
        "after {took:?}: {:?}",
        String::from_utf8_lossy(&r.raw)
    );
    assert!(
        took > Duration::from_millis(400),
        "the upload took {took:?}"
    );
    assert_eq!(proxy.backend(addr).failures, 0);
}

const EXACT_BODY: usize = 16 * 1024 - 42;

/// A keep-alive backend whose every response (head and body) is exactly 16 KiB, the size of
/// the proxy's read buffer; counts the connections it accepts.
async fn exact_fill_backend() -> (SocketAddr, Arc<AtomicUsize>) {
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    let addr = raw_backend(move |mut s| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move {
            // "HTTP/1.1 200 OK\r\nContent-Length: NNNNN\r\n\r\n" is 42 bytes.
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", EXACT_BODY);
            let mut response = head.into_bytes();
            response.resize(16 * 1024, b'x');
            while read_request(&mut s).await.is_some() {
                if s.write_all(&response).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
    (addr, accepted)
}

#[tokio::test]
async fn a_response_that_fills_the_read_buffer_exactly_keeps_its_connection() {
    let (addr, accepted) = exact_fill_backend().await;
    let proxy = one_worker_proxy(addr).await;
    let mut client = lab::Client::new(proxy.addr);
    for _ in 0..5 {
        let reply = client.get("/").await.unwrap();
        assert_eq!(reply.status, 200);
        assert_eq!(reply.body.len(), EXACT_BODY);
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection, reused");
}

#[tokio::test]
async fn a_client_that_pipelines_then_half_closes_gets_every_answer() {
    // A client that sent a request while another was in progress and then closed its side
    // has said all it will say: it wants the answers.
    let addr = keepalive_backend(None).await;
    let proxy = start(settings(upstream(Algorithm::RoundRobin, backends(&[addr])))).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\nGET /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    stream.shutdown().await.unwrap();
    let r = read_until_closed(&mut stream, DEADLINE).await;
    let raw = String::from_utf8_lossy(&r.raw);
    assert_eq!(raw.matches("HTTP/1.1 200 OK").count(), 2, "{raw}");
}
