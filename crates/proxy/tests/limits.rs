//! Issue 29: nginx's `limit_req` and `limit_conn` on the request path: refused requests get
//! the configured status and are counted by route and reason, a delayed request waits before
//! it is forwarded (and is not forwarded if its client leaves meanwhile), and a key's requests
//! in flight are capped. Clients come from distinct 127.x addresses, so each is its own key.

mod common;
mod harness;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use balance::Algorithm;
use common::raw_backend;
use harness::*;
use proxy::admission::{ConnLimit, LimitKey, RateLimit};
use proxy::limit_req::LimitReqSettings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::time::{Instant, timeout};

/// A backend that answers 200 `ok` once `open` is true (at once if it already is), counting
/// the requests it read.
async fn gated_backend(open: watch::Receiver<bool>) -> (SocketAddr, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    let addr = raw_backend(move |mut s| {
        let counter = Arc::clone(&counter);
        let mut open = open.clone();
        async move {
            while read_request(&mut s).await.is_some() {
                counter.fetch_add(1, Ordering::SeqCst);
                if open.wait_for(|o| *o).await.is_err() {
                    return;
                }
                let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                if s.write_all(answer).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
    (addr, seen)
}

/// A connection to `to` from the address `from`, with a request written on it.
async fn send_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(IpAddr::from(from), 0)).unwrap();
    let mut stream = socket.connect(to).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    stream
}

/// The status of the answer on `stream`.
async fn status_of(mut stream: TcpStream) -> u16 {
    let mut answer = Vec::new();
    timeout(DEADLINE, stream.read_to_end(&mut answer))
        .await
        .expect("an answer in time")
        .unwrap();
    String::from_utf8_lossy(answer.get(9..12).unwrap_or_default())
        .parse()
        .unwrap_or(0)
}

fn rate_limit(rate: &str, burst: i64, delay: Option<i64>) -> RateLimit {
    RateLimit {
        key: LimitKey::ClientIp,
        status: 429,
        bucket: LimitReqSettings {
            rate: proxy::limit_req::parse_rate(rate).unwrap(),
            burst,
            delay,
            zone_size: 1000,
        },
    }
}

/// `limit_req` with `nodelay`: burst + 1 of a burst pass, the rest get the status; another
/// client has its own bucket; the refusals are counted for the listener with reason
/// `limit_req`, and never reach the backend.
#[tokio::test]
async fn a_burst_past_limit_req_is_refused_with_its_status_and_counted() {
    let (_open, gate) = watch::channel(true);
    let (addr, seen) = gated_backend(gate).await;
    let mut s = settings(upstream(Algorithm::RoundRobin, backends(&[addr])));
    s.listeners[0].limit_req = Some(rate_limit("1r/m", 2, None));
    let proxy = start(s).await;
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(status_of(send_from([127, 0, 3, 1], proxy.addr).await).await);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
    assert_eq!(
        status_of(send_from([127, 0, 3, 2], proxy.addr).await).await,
        200
    );
    assert_eq!(
        seen.load(Ordering::SeqCst),
        4,
        "refusals never reach the backend"
    );
    let limited = proxy.metrics.limited_totals();
    // The listener as configured (port 0), its own requests under an empty route name.
    assert_eq!(
        limited.get(&("127.0.0.1:0".into(), "".into())),
        Some(&[3, 0, 0]),
        "{limited:?}"
    );
}

/// nginx's default (no `nodelay`): the burst is accepted but spaced at the rate — the fourth
/// request of a burst of 4 at 10r/s waits 300 ms before it is forwarded; and a client that
/// leaves while it waits is never forwarded.
#[tokio::test]
async fn a_delayed_request_waits_before_it_is_forwarded_and_not_at_all_if_its_client_leaves() {
    let (_open, gate) = watch::channel(true);
    let (addr, seen) = gated_backend(gate).await;
    let mut s = settings(upstream(Algorithm::RoundRobin, backends(&[addr])));
    s.listeners[0].limit_req = Some(rate_limit("10r/s", 3, Some(0)));
    let proxy = start(s).await;
    let began = Instant::now();
    let mut streams = Vec::new();
    for _ in 0..4 {
        streams.push(send_from([127, 0, 4, 1], proxy.addr).await);
    }
    let last = streams.pop().unwrap();
    for stream in streams {
        assert_eq!(status_of(stream).await, 200);
    }
    assert_eq!(status_of(last).await, 200);
    let waited = began.elapsed();
    assert!(
        waited >= Duration::from_millis(290),
        "the fourth of the burst waited {waited:?}, not 300 ms"
    );
    assert_eq!(seen.load(Ordering::SeqCst), 4);

    // Another client's burst: its second request must wait 100 ms; it leaves at once, and is
    // logged as gone (499) without being forwarded.
    assert_eq!(
        status_of(send_from([127, 0, 4, 2], proxy.addr).await).await,
        200
    );
    drop(send_from([127, 0, 4, 2], proxy.addr).await);
    eventually("the client that left is recorded", DEADLINE, || {
        let totals = proxy.metrics.totals();
        let gone = totals
            .get("u")
            .and_then(|u| u.responses.get(&None))
            .map_or(0, |answers| answers.classes[3]);
        async move { gone == 1 }
    })
    .await;
    assert_eq!(
        seen.load(Ordering::SeqCst),
        5,
        "the request whose client left during its delay was not forwarded"
    );
}

/// `limit_conn`: with one request of a client in flight, its second is refused (503, nginx's
/// default), another client's is not, and the place comes back when the first ends.
#[tokio::test]
async fn limit_conn_caps_a_key_s_requests_in_flight() {
    let (open, gate) = watch::channel(false);
    let (addr, seen) = gated_backend(gate).await;
    let mut s = settings(upstream(Algorithm::RoundRobin, backends(&[addr])));
    s.listeners[0].limit_conn = Some(ConnLimit {
        key: LimitKey::ClientIp,
        max: 1,
        status: 503,
    });
    let proxy = start(s).await;
    let first = send_from([127, 0, 5, 1], proxy.addr).await;
    let other = send_from([127, 0, 5, 2], proxy.addr).await;
    eventually("both requests reach the backend", DEADLINE, || {
        let seen = Arc::clone(&seen);
        async move { seen.load(Ordering::SeqCst) == 2 }
    })
    .await;
    assert_eq!(
        status_of(send_from([127, 0, 5, 1], proxy.addr).await).await,
        503
    );
    open.send(true).unwrap();
    assert_eq!(status_of(first).await, 200);
    assert_eq!(status_of(other).await, 200);
    assert_eq!(
        status_of(send_from([127, 0, 5, 1], proxy.addr).await).await,
        200
    );
    let limited: u64 = proxy
        .metrics
        .limited_totals()
        .values()
        .map(|reasons| reasons[1])
        .sum();
    assert_eq!(limited, 1);
}

/// The answer to one request from `from`: its status, and whether it carries an
/// `X-Request-Id` (the listener's `request_id`, which tells which configuration served it).
async fn answer_from(from: [u8; 4], to: SocketAddr) -> (u16, bool) {
    let mut stream = send_from(from, to).await;
    let mut answer = Vec::new();
    timeout(DEADLINE, stream.read_to_end(&mut answer))
        .await
        .expect("an answer in time")
        .unwrap();
    let text = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text.contains("\r\nx-request-id:"))
}

/// A reload that leaves a listener's `limit_req` as it was keeps its buckets (a client past
/// its limit stays refused); one that changes it starts an empty zone.
#[tokio::test]
async fn a_reload_keeps_an_unchanged_limit_s_state() {
    let (_open, gate) = watch::channel(true);
    let (addr, _) = gated_backend(gate).await;
    let mut s = settings(upstream(Algorithm::RoundRobin, backends(&[addr])));
    s.listeners[0].limit_req = Some(rate_limit("1r/m", 0, None));
    let proxy = proxy::Proxy::bind(s.clone()).await.unwrap();
    let at = proxy.local_addrs()[0];
    let handle = proxy.handle();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(proxy.run(async move {
        let _ = stopped.await;
    }));
    let me = [127, 0, 6, 1];
    assert_eq!(answer_from(me, at).await, (200, false));
    assert_eq!(answer_from(me, at).await, (429, false));

    // Another setting changes (the listener's context is rebuilt), the limit does not.
    s.listeners[0].request_id = true;
    handle.reload(s.clone()).await.unwrap();
    let mut fresh = 10u8;
    eventually("the reloaded listener serves", DEADLINE, || {
        fresh += 1;
        async move { answer_from([127, 0, 6, fresh], at).await == (200, true) }
    })
    .await;
    assert_eq!(answer_from(me, at).await.0, 429, "the bucket was kept");

    // The limit changes: a new zone, in which the client is new.
    s.listeners[0].request_id = false;
    s.listeners[0].limit_req = Some(rate_limit("1r/m", 1, None));
    handle.reload(s).await.unwrap();
    eventually("the reloaded listener serves", DEADLINE, || {
        fresh += 1;
        async move { answer_from([127, 0, 6, fresh], at).await == (200, false) }
    })
    .await;
    assert_eq!(answer_from(me, at).await.0, 200, "a new zone");
}

/// The access log says each request's fate — `limited` for `limit_req`'s refusal, `denied`
/// for `access`'s, which comes after the limits (nginx's access phase follows its preaccess
/// phase) — and the metrics count both by reason.
#[tokio::test]
async fn refusals_are_logged_with_their_fate_and_counted_by_reason() {
    let (_open, gate) = watch::channel(true);
    let (addr, _) = gated_backend(gate).await;
    let mut s = settings(upstream(Algorithm::RoundRobin, backends(&[addr])));
    s.listeners[0].limit_req = Some(rate_limit("1r/m", 0, None));
    s.listeners[0].access = Some(
        proxy::access::AccessList::parse(&["deny 127.0.7.9"])
            .unwrap()
            .0,
    );
    let log = std::env::temp_dir().join(format!("fulcrum-limits-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    s.access_log = Some(proxy::access_log::AccessLogSettings {
        destination: proxy::access_log::Destination::File(log.clone()),
        format: Default::default(),
    });
    let proxy = start(s).await;
    assert_eq!(
        status_of(send_from([127, 0, 7, 1], proxy.addr).await).await,
        200
    );
    assert_eq!(
        status_of(send_from([127, 0, 7, 1], proxy.addr).await).await,
        429
    );
    assert_eq!(
        status_of(send_from([127, 0, 7, 9], proxy.addr).await).await,
        403
    );
    let mut text = String::new();
    eventually("three lines logged", DEADLINE, || {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines = text.lines().count();
        async move { lines == 3 }
    })
    .await;
    let _ = std::fs::remove_file(&log);
    // By status (the workers' lines may come in either order).
    let mut fates: Vec<(&str, &str)> = text
        .lines()
        .map(|l| {
            let status = l.split("\" ").nth(1).map_or("", |r| &r[..3.min(r.len())]);
            (status, l.rsplit_once("fate=").map_or("", |(_, f)| f.trim()))
        })
        .collect();
    fates.sort();
    assert_eq!(
        fates,
        [("200", "answered"), ("403", "denied"), ("429", "limited")],
        "{text}"
    );
    let limited = proxy.metrics.limited_totals();
    assert_eq!(
        limited.get(&("127.0.0.1:0".into(), "".into())),
        Some(&[1, 0, 1]),
        "{limited:?}"
    );
}
