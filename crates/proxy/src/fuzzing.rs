//! Entry points for the fuzz targets (`fuzz/`, `scripts/fuzz`), on arbitrary bytes, with the
//! invariants their callers rely on checked. Built only with the `fuzzing` feature.
//!
//! * [`request_head`], [`chunked`], [`response_head`]: the data plane's parsers, as the proxy
//!   calls them.
//! * [`whole_request`]: the bytes from a client through a running proxy to a backend, both in
//!   this process on loopback, and what must hold of the answer, of what the backend gets, and
//!   of the proxy afterwards.

use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use balance::Algorithm;

use crate::access_log::{AccessLogSettings, Destination, Format};
use crate::http1::{self, ClientAddr, ClientSide, Limits};
use crate::server::{Proxy, ProxyHandle};
use crate::settings::{
    BackendSettings, HashKey, ListenerSettings, ProxySettings, UpstreamSettings,
};

/// A request head from a client: parsed and rewritten for the backend, then finished as an
/// attempt finishes it. The first byte picks what a hash algorithm would look for.
pub fn request_head(input: &[u8]) {
    let Some((&choice, buf)) = input.split_first() else {
        return;
    };
    let keys = [
        None,
        Some(HashKey::Header("X-User".into())),
        Some(HashKey::Cookie("id".into())),
        Some(HashKey::Uri),
    ];
    let key = &keys[usize::from(choice) % keys.len()];
    let trusted: Vec<ipnet::IpNet> = if choice & 0x10 != 0 {
        vec!["127.0.0.0/8".parse().expect("a valid network")]
    } else {
        Vec::new()
    };
    let client = ClientAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), &trusted);
    let upgrade = ["websocket".to_owned()];
    let limits = Limits {
        max_headers: 100,
        max_header_bytes: 16 * 1024,
        key: key.as_ref(),
        upgrade: &upgrade,
    };
    let mut out = Vec::new();
    if let Ok(Some(head)) = http1::parse_request(buf, limits, &client, &mut out) {
        assert!(head.head_len <= buf.len());
        for range in [
            &head.method,
            &head.target,
            &head.key,
            &head.referer,
            &head.user_agent,
        ] {
            assert!(range.start <= range.end && range.end <= head.head_len);
        }
        http1::finish_request_head(&mut out, Some(buf.len() - head.head_len));
        assert!(out.ends_with(b"\r\n\r\n"));
    }
}

/// A chunked body, fed in two pieces split where the first byte says (as bytes arrive).
pub fn chunked(input: &[u8]) {
    let Some((&split, body)) = input.split_first() else {
        return;
    };
    let split = usize::from(split).min(body.len());
    let mut decoder = http1::Chunked::default();
    let mut data = 0usize;
    let mut consumed = 0usize;
    for piece in [&body[..split], &body[split..]] {
        match decoder.advance(piece, |d| data += d.len()) {
            Ok(n) => {
                assert!(n <= piece.len());
                consumed += n;
                if decoder.is_done() {
                    break;
                }
            }
            Err(_) => return,
        }
    }
    // The data decoded is never more than the bytes it came in.
    assert!(data <= consumed);
}

/// A response head from a backend, for a client of the kind the first byte says.
pub fn response_head(input: &[u8]) {
    let Some((&kind, buf)) = input.split_first() else {
        return;
    };
    let client = ClientSide {
        http11: kind & 1 != 0,
        keep_alive: kind & 2 != 0,
        is_head: kind & 4 != 0,
        upgrade: kind & 8 != 0,
    };
    let mut out = Vec::new();
    match http1::parse_response(buf, client, &mut out) {
        Ok(Some(http1::ResponseHead::Final(head))) => {
            assert!(head.head_len <= buf.len());
            assert!(out.ends_with(b"\r\n\r\n"));
        }
        Ok(Some(http1::ResponseHead::Interim(n))) => assert!(n <= buf.len()),
        Ok(None) | Err(_) => {}
    }
}

// ---------------------------------------------------------------------------------------------
// A whole request: bytes from a client through a running proxy to a backend, on loopback
// ---------------------------------------------------------------------------------------------

/// Arbitrary bytes from a client, through a real proxy (one worker, started once per process,
/// on loopback) to a real backend, with what must hold whatever the client sent:
///
/// * the proxy answers with HTTP/1.1 responses — a valid status line with a status from 100 to
///   599, framing that delimits each body, nothing after a `Connection: close` — or closes,
///   within [`DEADLINE`]; a backend's answer reaches the client whole;
/// * what reaches the backend is one well-formed HTTP/1.1 request after another: origin
///   form, one `Host`, framed by one `Content-Length` within `max_body_bytes`, no hop-by-hop
///   header but the proxy's own `Connection: close`;
/// * afterwards a plain `GET /` on a new connection still gets the backend's 200, the proxy
///   holds no client connection, and it keeps no more backend connections than `keepalive`.
///
/// The first byte says how the rest is sent. Bit 0 set: the client half-closes once the proxy
/// has been quiet for [`QUIET`], so its requests are answered; clear: at once, so it is gone
/// while they are served (a client that only half-closes is taken as gone, as nginx does).
/// Bits 1–7: the bytes go in two writes, split at that many 128ths of their length, with a
/// pause between (0: one write), so the proxy sees a request arrive in parts.
///
/// A broken rule panics, with the input and the proxy's answer in the message.
pub fn whole_request(input: &[u8]) {
    let Some((&how, bytes)) = input.split_first() else {
        return;
    };
    let loopback = Loopback::get();
    let close = if how & 1 == 0 {
        HalfClose::AtOnce
    } else {
        HalfClose::WhenQuiet
    };
    let split = usize::from(how >> 1) * bytes.len() / 128;
    let reply = loopback.send(bytes, split, close);
    let answer = &reply.bytes[..];
    if let Err(why) = reply.check() {
        broken(input, &why, answer);
    }

    // The proxy is still whole.
    let probe = loopback.send(PROBE, 0, HalfClose::Never);
    match probe.check() {
        Ok(answers) if answers == [Answered::Backend(200, "plain")] => {}
        Ok(answers) => broken(
            input,
            &format!("after it, GET / was answered {answers:?}"),
            &probe.bytes,
        ),
        Err(why) => broken(input, &format!("after it, GET /: {why}"), &probe.bytes),
    }
    let held = || -> usize {
        loopback
            .handle
            .client_connections()
            .iter()
            .map(|&(_, n)| n)
            .sum()
    };
    if !eventually(|| held() == 0) {
        broken(
            input,
            &format!(
                "{} client connections still held after {DEADLINE:?}",
                held()
            ),
            answer,
        );
    }
    let limit = KEEPALIVE * BACKENDS;
    let open = || loopback.backend.open.load(Ordering::Relaxed);
    if !eventually(|| open() <= limit) {
        broken(
            input,
            &format!(
                "{} backend connections open with no client (keepalive {limit})",
                open()
            ),
            answer,
        );
    }
    if let Some(fault) = loopback
        .backend
        .fault
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    {
        broken(input, &format!("the backend got {fault}"), answer);
    }
}

/// Panics with what broke, the input and the proxy's answer.
fn broken(input: &[u8], why: &str, answer: &[u8]) -> ! {
    panic!(
        "whole_request: {why}\n  input:  b\"{}\"\n  answer: b\"{}\"",
        input.escape_ascii(),
        answer.escape_ascii()
    )
}

/// Longest wait for anything the proxy should do promptly (an answer, a close, a count falling
/// back); well above the proxy's own timeouts below.
pub const DEADLINE: Duration = Duration::from_secs(2);
/// How long a client that waits for its answers lets the proxy be silent before it
/// half-closes. A backend on loopback answers in far less; a slower answer is cut short by the
/// half-close, which is still a valid outcome.
pub const QUIET: Duration = Duration::from_millis(10);
/// Between the two writes of a split input.
const PAUSE: Duration = Duration::from_millis(1);
/// Idle connections the proxy keeps per backend.
const KEEPALIVE: usize = 2;
/// Backend addresses (one server listening on each), so that retries have somewhere to go.
const BACKENDS: usize = 2;
/// The proxy's `max_body_bytes`: small, so that the fuzzer reaches the 413.
const MAX_BODY: usize = 1024;
/// The proof of life after each input.
const PROBE: &[u8] = b"GET / HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n";

/// The proxy and its backend, started once per process and never stopped.
#[derive(Debug)]
struct Loopback {
    proxy: SocketAddr,
    handle: ProxyHandle,
    backend: Arc<BackendRecord>,
    /// Drives the backend and the proxy's `run` (its worker is a thread of its own).
    _runtime: tokio::runtime::Runtime,
}

/// What a client got on one connection, and how the connection ended.
#[derive(Debug)]
struct Reply {
    bytes: Vec<u8>,
    ending: Ending,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Closed,
    Reset,
    /// Neither within [`DEADLINE`].
    Hung,
}

impl Reply {
    /// The responses, if the reply is what a proxy may send (see `check_answer`).
    fn check(&self) -> Result<Vec<Answered>, String> {
        match self.ending {
            Ending::Closed => check_answer(&self.bytes, false),
            Ending::Reset => check_answer(&self.bytes, true)
                .map_err(|why| format!("{why} (the connection then reset)")),
            Ending::Hung => Err(format!(
                "the proxy neither answered in full nor closed in {DEADLINE:?}"
            )),
        }
    }
}

/// When the client closes its sending side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HalfClose {
    AtOnce,
    /// Once nothing came for [`QUIET`].
    WhenQuiet,
    /// Not at all: the proxy closes first (after a `Connection: close`).
    Never,
}

impl Loopback {
    fn get() -> &'static Loopback {
        static LOOPBACK: OnceLock<Loopback> = OnceLock::new();
        LOOPBACK.get_or_init(Loopback::start)
    }

    fn start() -> Loopback {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the backend");
        let backend = Arc::new(BackendRecord::default());
        let addrs: Vec<SocketAddr> = (0..BACKENDS)
            .map(|_| runtime.block_on(start_backend(Arc::clone(&backend))))
            .collect();
        let proxy = runtime
            .block_on(Proxy::bind(loopback_settings(&addrs)))
            .expect("the proxy binds 127.0.0.1:0");
        let addr = proxy.local_addrs()[0];
        let handle = proxy.handle();
        runtime.spawn(proxy.run(std::future::pending()));
        Loopback {
            proxy: addr,
            handle,
            backend,
            _runtime: runtime,
        }
    }

    /// Sends `bytes` on a new connection (in two writes if `split` is inside them), half-closes
    /// as `close` says, and reads until the proxy closes or [`DEADLINE`] passes.
    fn send(&self, bytes: &[u8], split: usize, close: HalfClose) -> Reply {
        let deadline = Instant::now() + DEADLINE;
        let mut stream = TcpStream::connect(self.proxy).expect("the proxy accepts");
        stream.set_nodelay(true).expect("TCP_NODELAY");
        stream
            .set_write_timeout(Some(DEADLINE))
            .expect("a write timeout");
        for (i, part) in [&bytes[..split], &bytes[split..]].into_iter().enumerate() {
            if i == 1 && split > 0 {
                std::thread::sleep(PAUSE);
            }
            // A proxy that refused the start may have closed: its answer is read below.
            if !part.is_empty() && stream.write_all(part).is_err() {
                break;
            }
        }
        let mut half_closed = close == HalfClose::AtOnce;
        if half_closed {
            let _ = stream.shutdown(Shutdown::Write);
        }
        let mut answer = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Reply {
                    bytes: answer,
                    ending: Ending::Hung,
                };
            }
            let wait = if close == HalfClose::WhenQuiet && !half_closed {
                QUIET.min(left)
            } else {
                left
            };
            stream.set_read_timeout(Some(wait)).expect("a read timeout");
            match stream.read(&mut chunk) {
                Ok(0) => {
                    return Reply {
                        bytes: answer,
                        ending: Ending::Closed,
                    };
                }
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if close == HalfClose::WhenQuiet && !half_closed {
                        half_closed = true;
                        let _ = stream.shutdown(Shutdown::Write);
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    return Reply {
                        bytes: answer,
                        ending: Ending::Reset,
                    };
                }
            }
        }
    }
}

/// The proxy in front of `backends`: one worker; timeouts short enough that no input holds it
/// long, yet far above a loopback round trip; limits small enough for the fuzzer to cross; a
/// hash of a cookie picks the backend, so the key is looked for in every request; the access
/// log on (JSON, to /dev/null), so every request's log line is written.
fn loopback_settings(backends: &[SocketAddr]) -> ProxySettings {
    let mut listener = ListenerSettings::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), "fuzz");
    listener.client_header_timeout = Duration::from_millis(300);
    listener.client_body_timeout = Duration::from_millis(300);
    listener.send_timeout = Duration::from_millis(500);
    listener.max_header_bytes = 2048;
    listener.max_headers = 24;
    listener.max_body_bytes = MAX_BODY as u64;
    let backends = backends
        .iter()
        .map(|&addr| BackendSettings {
            // No failure takes a backend out: the proof of life after each input must
            // reach one.
            max_fails: 0,
            ..BackendSettings::new(addr)
        })
        .collect();
    let mut upstream = UpstreamSettings::new("fuzz", Algorithm::Hash, backends);
    upstream.hash_key = HashKey::Cookie("id".into());
    upstream.connect_timeout = Duration::from_millis(500);
    upstream.read_timeout = Duration::from_millis(500);
    upstream.keepalive = KEEPALIVE;
    ProxySettings {
        workers: 1,
        listeners: vec![listener],
        upstreams: vec![upstream],
        access_log: Some(AccessLogSettings {
            destination: Destination::File("/dev/null".into()),
            format: Format::Json,
        }),
        shutdown_timeout: DEADLINE,
    }
}

/// Whether `done` holds within [`DEADLINE`].
fn eventually(done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

// The backend ----------------------------------------------------------------------------------

/// What the backend saw: its open connections, and the first request no proxy may send.
#[derive(Debug, Default)]
struct BackendRecord {
    open: AtomicUsize,
    fault: Mutex<Option<String>>,
}

/// One open backend connection, counted while it lives.
struct Open(Arc<BackendRecord>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A backend on 127.0.0.1:0 that answers every request it can read, keeping connections
/// alive; its address.
async fn start_backend(record: Arc<BackendRecord>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("the backend binds 127.0.0.1:0");
    let addr = listener.local_addr().expect("the backend's address");
    tokio::spawn(async move {
        loop {
            if let Ok((stream, _)) = listener.accept().await {
                record.open.fetch_add(1, Ordering::Relaxed);
                let open = Open(Arc::clone(&record));
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve_backend(stream, open));
            }
        }
    });
    addr
}

async fn serve_backend(mut stream: tokio::net::TcpStream, open: Open) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let request = loop {
            match read_forwarded(&buf) {
                Ok(Some(request)) => break request,
                Ok(None) => {}
                Err(why) => {
                    let fault = format!("{why}: b\"{}\"", buf.escape_ascii());
                    let mut first = open.0.fault.lock().unwrap_or_else(|p| p.into_inner());
                    first.get_or_insert(fault);
                    return;
                }
            }
            // A request cut short by the proxy's close is no fault: it gave up on it.
            match stream.read(&mut chunk).await {
                Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => return,
            }
        };
        while buf.len() < request.len {
            match stream.read(&mut chunk).await {
                Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => return,
            }
        }
        buf.drain(..request.len);
        if stream
            .write_all(request.answer.bytes(request.is_head))
            .await
            .is_err()
        {
            return;
        }
        if request.close || request.answer == BackendAnswer::Close {
            return;
        }
    }
}

/// A request as the backend got it.
#[derive(Debug)]
struct Forwarded {
    /// Head and body.
    len: usize,
    is_head: bool,
    /// The proxy asked to close after it.
    close: bool,
    answer: BackendAnswer,
}

/// The backend's answers, chosen by a word in the request's path; each says what it is in
/// `X-Backend` (with `-head` for HEAD's, which have no body), so the client side knows the
/// body to expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BackendAnswer {
    /// 200 with `Content-Length`.
    Plain,
    /// 200, chunked.
    Chunked,
    /// 200 delimited by closing the connection.
    Close,
    /// 204.
    Empty,
    /// 100 Continue, then as `Plain`.
    Continue,
}

impl BackendAnswer {
    fn for_path(path: &str) -> BackendAnswer {
        if path.contains("chunked") {
            BackendAnswer::Chunked
        } else if path.contains("close") {
            BackendAnswer::Close
        } else if path.contains("empty") {
            BackendAnswer::Empty
        } else if path.contains("continue") {
            BackendAnswer::Continue
        } else {
            BackendAnswer::Plain
        }
    }

    /// The whole answer, for a HEAD request or another: one write, so that no part of it
    /// waits for an acknowledgement (Nagle's algorithm) and the proxy sees it at once.
    fn bytes(self, is_head: bool) -> &'static [u8] {
        match (self, is_head) {
            (BackendAnswer::Plain, false) => {
                b"HTTP/1.1 200 OK\r\nX-Backend: plain\r\nContent-Length: 6\r\n\r\nplain\n"
            }
            (BackendAnswer::Plain, true) => {
                b"HTTP/1.1 200 OK\r\nX-Backend: plain-head\r\nContent-Length: 6\r\n\r\n"
            }
            (BackendAnswer::Chunked, false) => {
                b"HTTP/1.1 200 OK\r\nX-Backend: chunked\r\nTransfer-Encoding: chunked\r\n\r\n\
                  6\r\nchunk\n\r\n0\r\n\r\n"
            }
            (BackendAnswer::Chunked, true) => {
                b"HTTP/1.1 200 OK\r\nX-Backend: chunked-head\r\nTransfer-Encoding: chunked\r\n\r\n"
            }
            (BackendAnswer::Close, false) => {
                b"HTTP/1.1 200 OK\r\nX-Backend: close\r\nConnection: close\r\n\r\nclosing\n"
            }
            (BackendAnswer::Close, true) => {
                b"HTTP/1.1 200 OK\r\nX-Backend: close-head\r\nConnection: close\r\n\r\n"
            }
            (BackendAnswer::Empty, false) => b"HTTP/1.1 204 No Content\r\nX-Backend: empty\r\n\r\n",
            (BackendAnswer::Empty, true) => {
                b"HTTP/1.1 204 No Content\r\nX-Backend: empty-head\r\n\r\n"
            }
            (BackendAnswer::Continue, false) => {
                b"HTTP/1.1 100 Continue\r\n\r\n\
                  HTTP/1.1 200 OK\r\nX-Backend: plain\r\nContent-Length: 6\r\n\r\nplain\n"
            }
            (BackendAnswer::Continue, true) => {
                b"HTTP/1.1 100 Continue\r\n\r\n\
                  HTTP/1.1 200 OK\r\nX-Backend: plain-head\r\nContent-Length: 6\r\n\r\n"
            }
        }
    }
}

/// The data of a body `X-Backend: kind` announces (none for `-head` answers).
fn backend_body(kind: &str) -> Option<&'static [u8]> {
    match kind {
        "plain" => Some(b"plain\n"),
        "chunked" => Some(b"chunk\n"),
        "close" => Some(b"closing\n"),
        "empty" => Some(b""),
        k if k.ends_with("-head") => Some(b""),
        _ => None,
    }
}

/// The request at the start of `buf`, once its head is complete; `Err` names the rule the
/// proxy broke in forwarding it.
fn read_forwarded(buf: &[u8]) -> Result<Option<Forwarded>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("a head httparse refuses ({e})")),
    };
    if req.version != Some(1) {
        return Err("a request that is not HTTP/1.1".into());
    }
    let (Some(method), Some(path)) = (req.method, req.path) else {
        return Err("a request line without method or target".into());
    };
    if !path.starts_with('/') && path != "*" {
        return Err(format!("a target not in origin form ({path:?})"));
    }
    let (mut hosts, mut length, mut close) = (0, None, false);
    for h in req.headers.iter() {
        match h.name.to_ascii_lowercase().as_str() {
            "host" => hosts += 1,
            "content-length" => {
                let n = std::str::from_utf8(h.value)
                    .ok()
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse::<usize>().ok());
                match (n, length) {
                    (Some(n), None) if n <= MAX_BODY => length = Some(n),
                    _ => return Err("a bad, repeated or too large Content-Length".into()),
                }
            }
            "connection" if h.value == b"close" && !close => close = true,
            name @ ("connection"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "proxy-authorization"
            | "proxy-authenticate"
            | "expect") => {
                return Err(format!("a {name} header, which is not forwarded"));
            }
            _ => {}
        }
    }
    if hosts != 1 {
        return Err(format!("{hosts} Host headers"));
    }
    Ok(Some(Forwarded {
        len: head_len + length.unwrap_or(0),
        is_head: method == "HEAD",
        close,
        answer: BackendAnswer::for_path(path),
    }))
}

// The client's side ------------------------------------------------------------------------------

/// One response the client got: its status, and `X-Backend` if the backend sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answered {
    Backend(u16, &'static str),
    Proxy(u16),
}

/// Checks that `answer` is HTTP/1.1 responses one after another: each head valid with a status
/// from 100 to 599, one `Content-Length` or `Transfer-Encoding` but not both, each body
/// delimited as its head says, a backend's body as the backend sent it, nothing after a
/// response that says `Connection: close` or is delimited by the close. The last may be cut
/// short only if the connection was reset. The answer to HEAD has no body: for a backend's
/// answer `X-Backend` says so; for the proxy's own, it is taken as such when the next response
/// or the end follows the head at once (the proxy's own bodies start with a digit).
fn check_answer(answer: &[u8], reset: bool) -> Result<Vec<Answered>, String> {
    let mut rest = answer;
    let mut answers = Vec::new();
    while !rest.is_empty() {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut res = httparse::Response::new(&mut headers);
        let head_len = match res.parse(rest) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if reset => break,
            Ok(httparse::Status::Partial) => return Err("a response head cut short".into()),
            Err(e) => return Err(format!("a response head httparse refuses ({e})")),
        };
        if res.version != Some(1) {
            return Err("a status line that does not say HTTP/1.1".into());
        }
        let status = res.code.unwrap_or_default();
        if !(100..600).contains(&status) {
            return Err(format!("status {status}"));
        }
        let (mut length, mut chunked, mut close, mut backend) = (None, false, false, None);
        for h in res.headers.iter() {
            let value = std::str::from_utf8(h.value).unwrap_or_default();
            match h.name.to_ascii_lowercase().as_str() {
                "content-length" => match (value.parse::<usize>(), length) {
                    (Ok(n), None) if value.bytes().all(|b| b.is_ascii_digit()) => length = Some(n),
                    _ => return Err(format!("a bad or repeated Content-Length ({value:?})")),
                },
                "transfer-encoding" if value == "chunked" && !chunked => chunked = true,
                "transfer-encoding" => return Err(format!("Transfer-Encoding {value:?}")),
                "connection" => {
                    close |= value
                        .split(',')
                        .any(|t| t.trim().eq_ignore_ascii_case("close"))
                }
                "x-backend" => {
                    let kind = backend_kinds().find(|&k| k == value);
                    backend = Some(kind.ok_or(format!("X-Backend {value:?}"))?);
                }
                _ => {}
            }
        }
        if chunked && length.is_some() {
            return Err("both Content-Length and Transfer-Encoding".into());
        }
        rest = &rest[head_len..];
        if (100..200).contains(&status) {
            if backend.is_some() || length.is_some() || chunked {
                return Err(format!(
                    "an interim {status} with a body or the backend's mark"
                ));
            }
            continue;
        }
        answers.push(match backend {
            Some(kind) => Answered::Backend(status, kind),
            None => Answered::Proxy(status),
        });
        let no_body = status == 204
            || status == 304
            || backend.is_some_and(|k| k.ends_with("-head"))
            || (backend.is_none() && (rest.is_empty() || rest.starts_with(b"HTTP/1.1 ")));
        let delimited_by_close = !no_body && !chunked && length.is_none();
        let (data, used) = if no_body {
            (Vec::new(), 0)
        } else if chunked {
            match dechunk(rest)? {
                Some(done) => done,
                None if reset => break,
                None => return Err("a chunked body cut short".into()),
            }
        } else if let Some(n) = length {
            if rest.len() < n {
                if reset {
                    break;
                }
                return Err(format!("a body of {} bytes of {n}", rest.len()));
            }
            (rest[..n].to_vec(), n)
        } else {
            (rest.to_vec(), rest.len())
        };
        // A body delimited by the close may be cut short by a reset like any other.
        let whole =
            |sent: &[u8]| sent == data || (reset && delimited_by_close && sent.starts_with(&data));
        if let Some(kind) = backend
            && !backend_body(kind).is_some_and(whole)
        {
            return Err(format!(
                "the backend's {kind} body arrived as b\"{}\"",
                data.escape_ascii()
            ));
        }
        rest = &rest[used..];
        if (close || delimited_by_close) && !rest.is_empty() {
            return Err("bytes after the response that closes the connection".into());
        }
    }
    Ok(answers)
}

/// Every `X-Backend` the backend sends.
fn backend_kinds() -> impl Iterator<Item = &'static str> {
    [
        "plain",
        "plain-head",
        "chunked",
        "chunked-head",
        "close",
        "close-head",
        "empty",
        "empty-head",
    ]
    .into_iter()
}

/// A chunked body at the start of `buf`: its data and its length in `buf`, once complete
/// (`None` before); `Err` if it is malformed.
fn dechunk(buf: &[u8]) -> Result<Option<(Vec<u8>, usize)>, String> {
    let line = |at: usize| -> Option<(&[u8], usize)> {
        let end = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        Some((&buf[at..end], end + 2))
    };
    let mut data = Vec::new();
    let mut at = 0;
    loop {
        let Some((size_line, next)) = line(at) else {
            return Ok(None);
        };
        let digits = size_line.split(|&b| b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(digits)
            .ok()
            .filter(|d| !d.is_empty())
            .and_then(|d| usize::from_str_radix(d, 16).ok())
            .ok_or_else(|| format!("a chunk size line b\"{}\"", size_line.escape_ascii()))?;
        at = next;
        if size == 0 {
            // Trailer lines, up to an empty one.
            loop {
                let Some((trailer, next)) = line(at) else {
                    return Ok(None);
                };
                at = next;
                if trailer.is_empty() {
                    return Ok(Some((data, at)));
                }
            }
        }
        if buf.len() < at + size + 2 {
            return Ok(None);
        }
        data.extend_from_slice(&buf[at..at + size]);
        if &buf[at + size..at + size + 2] != b"\r\n" {
            return Err("chunk data not followed by CRLF".into());
        }
        at += size + 2;
    }
}
