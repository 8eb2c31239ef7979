//! The harness of the proxy's black-box tests: an in-process proxy on 127.0.0.1:0, the lab's
//! backends, raw backends and clients that speak HTTP by hand, and waiting for a condition.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use balance::Algorithm;
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use lab::{Backend, Client};
use proxy::{
    BackendSettings, BackendSnapshot, ListenerSettings, Proxy, ProxySettings, Upstream,
    UpstreamSettings,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

use crate::common::{localhost, raw_backend};

/// Upper bound for anything that should happen "promptly"; only reached when a test fails.
pub const DEADLINE: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// One listener on 127.0.0.1:0 sending to `upstream`, every listener default.
pub fn settings(upstream: UpstreamSettings) -> ProxySettings {
    ProxySettings {
        workers: 2,
        listeners: vec![ListenerSettings::new(localhost(), upstream.name.clone())],
        upstreams: vec![upstream],
        access_log: None,
        shutdown_timeout: DEADLINE,
    }
}

pub fn upstream(algorithm: Algorithm, backends: Vec<BackendSettings>) -> UpstreamSettings {
    UpstreamSettings::new("u", algorithm, backends)
}

pub fn backends(addrs: &[SocketAddr]) -> Vec<BackendSettings> {
    addrs.iter().map(|&a| BackendSettings::new(a)).collect()
}

/// A proxy running on a spawned task.
pub struct Running {
    pub addr: SocketAddr,
    pub upstream: Arc<Upstream>,
    pub metrics: Arc<proxy::metrics::Metrics>,
    /// Dropping or sending shuts the proxy down.
    pub shutdown: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<()>,
}

impl Running {
    pub fn backend(&self, addr: SocketAddr) -> BackendSnapshot {
        self.upstream
            .snapshot()
            .into_iter()
            .find(|b| b.addr == addr)
            .expect("backend is in the upstream")
    }
}

pub async fn start(settings: ProxySettings) -> Running {
    let proxy = Proxy::bind(settings).await.expect("proxy binds");
    let addr = proxy.local_addrs()[0];
    let upstream = Arc::clone(&proxy.upstreams()[0]);
    let metrics = proxy.metrics();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(proxy.run(async move {
        let _ = rx.await;
    }));
    Running {
        addr,
        upstream,
        metrics,
        shutdown: Some(tx),
        task,
    }
}

pub async fn backend(name: &str) -> Backend {
    Backend::start(name, localhost())
        .await
        .expect("backend starts")
}

/// An address nothing listens on: connecting to it is refused at once.
pub fn refusing_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind(localhost()).unwrap();
    listener.local_addr().unwrap()
}

/// Polls `cond` until it holds; panics after `within`.
pub async fn eventually<F, Fut>(what: &str, within: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = Instant::now() + within;
    loop {
        if cond().await {
            return;
        }
        assert!(Instant::now() < end, "timed out waiting for: {what}");
        // Poll interval of a loop bounded by `within`.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub async fn get(addr: SocketAddr, path: &str) -> lab::Reply {
    let mut client = Client::new(addr);
    timeout(DEADLINE, client.get(path))
        .await
        .expect("response in time")
        .expect("response")
}

pub fn post(body: impl Into<Bytes>) -> Request<Full<Bytes>> {
    Request::post("/")
        .header(http::header::HOST, "fulcrum.test")
        .body(Full::new(body.into()))
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP on both sides
// ---------------------------------------------------------------------------------------------

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

pub fn content_length(head: &str) -> Option<usize> {
    head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })
}

/// Reads one request (head, and a Content-Length body) from a backend-side connection.
pub async fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let len = content_length(&String::from_utf8_lossy(&buf[..head_end])).unwrap_or(0);
    while buf.len() < head_end + len {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(buf)
}

/// What a raw client read.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    /// Lower-cased names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Everything received, head included.
    pub raw: Vec<u8>,
    /// Whether the proxy closed the connection (EOF or reset) before the deadline.
    pub closed: bool,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

pub fn parse_headers(head: &str) -> Vec<(String, String)> {
    head.split("\r\n")
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect()
}

/// Reads from `stream` until the peer closes it or `within` passes, then parses one response.
pub async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> RawResponse {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = Instant::now() + within;
    let closed = loop {
        match tokio::time::timeout_at(end, stream.read(&mut chunk)).await {
            Err(_) => break false,
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => raw.extend_from_slice(&chunk[..n]),
        }
    };
    let head_end = find(&raw, b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line in {head:?}"));
    RawResponse {
        status,
        headers: parse_headers(&head),
        body: raw[head_end + 4..].to_vec(),
        raw,
        closed,
    }
}

/// Writes `request` on a new connection and reads until the proxy closes it.
pub async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> RawResponse {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // The proxy may answer and close before reading all of a request it rejects; a failed
    // write is then expected, and the answer is still there to read.
    let _ = stream.write_all(request).await;
    let response = read_until_closed(&mut stream, DEADLINE).await;
    assert!(
        response.closed,
        "the connection was not closed: {response:?}"
    );
    response
}

/// A backend that reads each request in full, then drops the connection without answering.
pub async fn dropping_backend() -> (SocketAddr, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    let addr = raw_backend(move |mut s| {
        let counter = Arc::clone(&counter);
        async move {
            if read_request(&mut s).await.is_some() {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        }
    })
    .await;
    (addr, seen)
}
