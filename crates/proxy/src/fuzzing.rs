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
    let client = loopback_client(choice);
    let upgrade = ["websocket".to_owned()];
    let limits = Limits {
        max_headers: 100,
        max_header_bytes: 16 * 1024,
        key: key.as_ref(),
        sticky: None,
        upgrade: &upgrade,
        routes: None,
        edits: None,
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

/// A client on loopback, whose forwarding headers are believed when bit 0x10 of `choice` is
/// set (loopback is then a trusted proxy).
fn loopback_client(choice: u8) -> ClientAddr {
    let trusted: Vec<ipnet::IpNet> = if choice & 0x10 != 0 {
        vec!["127.0.0.0/8".parse().expect("a valid network")]
    } else {
        Vec::new()
    };
    ClientAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), &trusted)
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
    match http1::parse_response(buf, client, &mut out, (None, None)) {
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

// ---------------------------------------------------------------------------------------------
// An HTTP/2 request's fields, as the backend gets them (issue 26)
// ---------------------------------------------------------------------------------------------

/// The largest header block sent in one HEADERS frame (HTTP/2's initial maximum frame size).
const H2_MAX_FRAME: usize = 16 * 1024;

/// An HTTP/2 request made of arbitrary fields — pseudo-headers and others, any bytes in names
/// and values — through what the proxy runs on it: the `h2` server (HPACK decoding, its checks
/// of pseudo-headers, names and values) and the translation into the HTTP/1.1 head the backend
/// gets (`http2::backend_head`, the HTTP/1.1 parser and rewriter behind it). When a head comes
/// out, it must be one well-formed HTTP/1.1 request head and nothing more (no CR or LF let in
/// to start another line), in origin form, not `CONNECT` or `TRACE` in any case, with one
/// `Host`, which is `:authority` when there is one, and no hop-by-hop field.
///
/// The first byte picks the hash key and trusted proxies as in [`request_head`]; the rest is
/// the fields, each `name length, name, value length, value` (a length past the end takes what
/// is left), sent as HPACK literals in one HEADERS frame that ends the stream.
pub fn h2_request_head(input: &[u8]) {
    let Some((&choice, rest)) = input.split_first() else {
        return;
    };
    let fields = h2_fields(rest);
    let Some(parts) = h2_request_parts(&fields) else {
        return;
    };
    let keys = [
        None,
        Some(HashKey::Header("x-user".into())),
        Some(HashKey::Uri),
    ];
    let key = &keys[usize::from(choice) % keys.len()];
    let client = loopback_client(choice);
    let limits = Limits {
        max_headers: 100,
        max_header_bytes: 16 * 1024,
        key: key.as_ref(),
        sticky: None,
        upgrade: &[],
        routes: None,
        edits: None,
    };
    let (mut raw, mut head) = (Vec::new(), Vec::new());
    if crate::http2::backend_head(&parts, limits, &client, &mut raw, &mut head).is_err() {
        return;
    }
    http1::finish_request_head(&mut head, Some(0));
    if let Err(why) = check_h2_head(&parts, &head) {
        panic!(
            "h2_request_head: {why}\n  fields: {fields:?}\n  backend head: b\"{}\"",
            head.escape_ascii()
        );
    }
}

/// The fields an input stands for: `name length, name, value length, value`, repeated.
fn h2_fields(mut rest: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let take = |rest: &mut &[u8]| -> Vec<u8> {
        let Some((&n, after)) = rest.split_first() else {
            return Vec::new();
        };
        let (taken, left) = after.split_at(usize::from(n).min(after.len()));
        *rest = left;
        taken.to_vec()
    };
    let mut fields = Vec::new();
    while !rest.is_empty() {
        let name = take(&mut rest);
        let value = take(&mut rest);
        fields.push((name, value));
    }
    fields
}

/// HPACK's integer with an `prefix`-bit prefix (RFC 7541 §5.1), the first byte's high bits
/// `first`.
fn hpack_int(out: &mut Vec<u8>, first: u8, prefix: u32, mut n: usize) {
    let max = (1usize << prefix) - 1;
    if n < max {
        out.push(first | n as u8);
        return;
    }
    out.push(first | max as u8);
    n -= max;
    while n >= 128 {
        out.push((n % 128) as u8 | 0x80);
        n /= 128;
    }
    out.push(n as u8);
}

/// The request the `h2` server makes of `fields` (literals without indexing, RFC 7541 §6.2.2,
/// in one HEADERS frame with END_STREAM), or `None` when it refuses them.
fn h2_request_parts(fields: &[(Vec<u8>, Vec<u8>)]) -> Option<http::request::Parts> {
    let mut block = Vec::new();
    for (name, value) in fields {
        block.push(0);
        hpack_int(&mut block, 0, 7, name.len());
        block.extend_from_slice(name);
        hpack_int(&mut block, 0, 7, value.len());
        block.extend_from_slice(value);
    }
    if block.len() > H2_MAX_FRAME {
        return None;
    }
    let mut bytes = crate::http2::preface::PREFACE.to_vec();
    // An empty SETTINGS frame, then HEADERS (END_STREAM | END_HEADERS) on stream 1.
    bytes.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    let len = block.len() as u32;
    bytes.extend_from_slice(&len.to_be_bytes()[1..]);
    bytes.extend_from_slice(&[1, 0x5, 0, 0, 0, 1]);
    bytes.extend_from_slice(&block);
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
    }
    // Then a PING: its ACK says the server has read everything before it.
    bytes.extend_from_slice(&[0, 0, 8, 6, 0, 0, 0, 0, 0]);
    bytes.extend_from_slice(b"fuzzping");
    RUNTIME.with(|rt| {
        rt.block_on(async {
            use tokio::io::AsyncWriteExt as _;
            let (client, server) = tokio::io::duplex(64 * 1024);
            let (mut from_server, mut to_server) = tokio::io::split(client);
            to_server.write_all(&bytes).await.ok()?;
            let mut builder = h2::server::Builder::new();
            builder.max_header_list_size(16 * 1024);
            let mut conn = builder.handshake::<_, bytes::Bytes>(server).await.ok()?;
            // The stream if the server takes it; nothing once the PING is answered without it
            // (the server refused the fields, resetting the stream or the connection).
            let accepted = tokio::select! {
                biased;
                accepted = conn.accept() => accepted,
                () = ping_answered(&mut from_server) => None,
            };
            let (request, _respond) = accepted?.ok()?;
            Some(request.into_parts().0)
        })
    })
}

/// Reads the server's frames until the ACK of a PING (or the end).
async fn ping_answered(from_server: &mut (impl tokio::io::AsyncRead + Unpin)) {
    use tokio::io::AsyncReadExt as _;
    let mut head = [0u8; 9];
    while from_server.read_exact(&mut head).await.is_ok() {
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let mut payload = vec![0u8; len];
        if from_server.read_exact(&mut payload).await.is_err() || (head[3] == 6 && head[4] & 1 == 1)
        {
            return;
        }
    }
}

/// What must hold of the head a backend gets for the request `parts`.
fn check_h2_head(parts: &http::request::Parts, head: &[u8]) -> Result<(), String> {
    let mut slots = [httparse::EMPTY_HEADER; 128];
    let mut parsed = httparse::Request::new(&mut slots);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(n)) if n == head.len() => {}
        other => return Err(format!("not one whole HTTP/1.1 head: {other:?}")),
    }
    let method = parsed.method.unwrap_or_default();
    if method.eq_ignore_ascii_case("CONNECT") || method.eq_ignore_ascii_case("TRACE") {
        return Err(format!("{method} reached the backend"));
    }
    let target = parsed.path.unwrap_or_default();
    if !(target.starts_with('/') || (target == "*" && method == "OPTIONS")) {
        return Err(format!("a target not in origin form: {target:?}"));
    }
    if parsed.version != Some(1) {
        return Err("not HTTP/1.1".into());
    }
    let hosts: Vec<&[u8]> = parsed
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"))
        .map(|h| h.value)
        .collect();
    // A field value's leading and trailing spaces and tabs are not part of it (RFC 9110 §5.5).
    let expected = match parts.uri.authority() {
        Some(a) => Some(a.as_str().as_bytes()),
        None => parts
            .headers
            .get(http::header::HOST)
            .map(|v| v.as_bytes().trim_ascii()),
    };
    match (&hosts[..], expected) {
        ([host], Some(e)) if host.eq_ignore_ascii_case(e) => {}
        ([], None) => {}
        _ => {
            return Err(format!(
                "Host {hosts:?} where the request said {expected:?}"
            ));
        }
    }
    let hop_by_hop = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
        "te",
    ];
    for h in parsed.headers.iter() {
        if hop_by_hop.iter().any(|n| h.name.eq_ignore_ascii_case(n)) {
            return Err(format!("hop-by-hop {} passed on", h.name));
        }
        if h.value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(format!("{} has CR, LF or NUL in its value", h.name));
        }
    }
    Ok(())
}

#[cfg(test)]
mod h2_tests {
    use super::*;

    fn input(fields: &[(&str, &str)]) -> Vec<u8> {
        let mut out = vec![0];
        for (n, v) in fields {
            out.push(n.len() as u8);
            out.extend_from_slice(n.as_bytes());
            out.push(v.len() as u8);
            out.extend_from_slice(v.as_bytes());
        }
        out
    }

    /// The harness makes real requests of its input: an ordinary one comes through the `h2`
    /// server, a CONNECT too (and is then refused by the translation), a malformed one not.
    #[test]
    fn fields_make_requests() {
        let get = [
            (":method", "GET"),
            (":scheme", "http"),
            (":authority", "a.test"),
            (":path", "/x"),
        ];
        let parts = h2_request_parts(&h2_fields(&input(&get)[1..])).expect("a request");
        assert_eq!(parts.uri.path(), "/x");
        let connect = [(":method", "CONNECT"), (":authority", "evil:443")];
        let parts = h2_request_parts(&h2_fields(&input(&connect)[1..])).expect("a request");
        assert_eq!(parts.method, http::Method::CONNECT);
        let bad = [(":method", "GET"), (":path", "/")];
        assert!(h2_request_parts(&h2_fields(&input(&bad)[1..])).is_none());
        h2_request_head(&input(&get));
        h2_request_head(&input(&connect));
        let mut with_host = get.to_vec();
        with_host.push(("host", "other.test"));
        h2_request_head(&input(&with_host));
    }
}
