//! The bad-input rules of RFC 9112 (HTTP/1.1 message syntax and framing) that the data plane
//! enforces on both of its sides: client → proxy (requests) and backend → proxy (responses).
//! They were first written against the hyper-based data plane and pinned its behaviour; the
//! hand-written HTTP/1.1 path (crates/proxy/src/http1/) keeps every one of them, and is
//! stricter where hyper was lenient or wrong (505 for unknown versions, 400 for
//! Transfer-Encoding with Content-Length, 501 for unknown codings, HTTP/1.1 status lines to
//! HTTP/1.0 clients, Content-Length removed from chunked responses). Last, the forwarding
//! headers a backend gets, from a client and from a trusted proxy.
//!
//! Every request here is written by hand on a raw socket, and every backend is a raw TCP listener
//! that records the bytes it received, so what crosses each side is asserted byte for byte.
//!
//! Where the behaviour is lenient or incomplete per the RFCs, the test pins it and says so in a
//! comment beginning `RULE:`.
//!
//! No test sleeps: every read has a deadline, and "nothing reached the backend" is checked after
//! the proxy has answered (it only answers once it has given up on the request), then confirmed
//! by a sentinel request that does reach it.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use balance::Algorithm;
use common::{localhost, raw_backend};
use proxy::{BackendSettings, ListenerSettings, Proxy, ProxySettings, UpstreamSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, oneshot};
use tokio::time::{Instant, timeout_at};

/// Upper bound for anything that should happen "promptly"; only reached when a test fails.
const DEADLINE: Duration = Duration::from_secs(5);

/// `max_body_bytes` of every proxy here.
const MAX_BODY: usize = 1000;

// ---------------------------------------------------------------------------------------------
// The proxy
// ---------------------------------------------------------------------------------------------

/// The only place settings are built: one listener on 127.0.0.1:0 in front of one backend.
fn settings(backend: SocketAddr) -> ProxySettings {
    let mut listener = ListenerSettings::new(localhost(), "u");
    listener.max_body_bytes = MAX_BODY as u64;
    // max_fails = 0: a backend that answers badly on purpose stays eligible for the next case.
    let backend = BackendSettings {
        max_fails: 0,
        ..BackendSettings::new(backend)
    };
    ProxySettings {
        // One worker: every rule here is about one connection.
        workers: 2,
        listeners: vec![listener],
        upstreams: vec![UpstreamSettings::new(
            "u",
            Algorithm::RoundRobin,
            vec![backend],
        )],
        access_log: None,
        shutdown_timeout: DEADLINE,
    }
}

/// A proxy running on a spawned task until this is dropped.
#[derive(Debug)]
struct Running {
    addr: SocketAddr,
    _shutdown: oneshot::Sender<()>,
}

async fn start(settings: ProxySettings) -> Running {
    let proxy = Proxy::bind(settings).await.expect("proxy binds");
    let addr = proxy.local_addrs()[0];
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(proxy.run(async move {
        let _ = rx.await;
    }));
    Running {
        addr,
        _shutdown: tx,
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1 messages, parsed just enough to check what the proxy sends
// ---------------------------------------------------------------------------------------------

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A start line and header lines, names lower-cased, values without surrounding whitespace.
#[derive(Debug, Clone)]
struct Head {
    start: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn values(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.values(name).first().copied()
    }

    fn is_chunked(&self) -> bool {
        self.values("transfer-encoding").last().is_some_and(|v| {
            v.rsplit(',')
                .next()
                .is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"))
        })
    }

    fn content_length(&self) -> Option<usize> {
        self.header("content-length").map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("the proxy sent Content-Length {v:?}"))
        })
    }
}

/// The head at the start of `buf` and its length (blank line included), once complete.
fn parse_head(buf: &[u8]) -> Option<(Head, usize)> {
    let end = find(buf, b"\r\n\r\n")?;
    let text = lossy(&buf[..end]);
    let mut lines = text.split("\r\n");
    let start = lines.next().unwrap_or_default().to_owned();
    let headers = lines
        .map(|line| {
            let (name, value) = line
                .split_once(':')
                .unwrap_or_else(|| panic!("not a header line: {line:?} in {text:?}"));
            (
                name.to_ascii_lowercase(),
                value.trim_matches([' ', '\t']).to_owned(),
            )
        })
        .collect();
    Some((Head { start, headers }, end + 4))
}

/// A chunked body at the start of `buf`: its data and its length in `buf` (trailer section
/// included), once complete. Panics on bad framing (only the proxy's output is decoded with it).
fn decode_chunked(buf: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut data = Vec::new();
    let mut pos = 0;
    loop {
        let line_end = pos + find(&buf[pos..], b"\r\n")?;
        let line = lossy(&buf[pos..line_end]);
        let size = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16)
            .unwrap_or_else(|_| panic!("bad chunk size line {line:?}"));
        pos = line_end + 2;
        if size == 0 {
            // Trailer fields, up to an empty line.
            loop {
                let end = pos + find(&buf[pos..], b"\r\n")?;
                let line = lossy(&buf[pos..end]);
                pos = end + 2;
                if line.is_empty() {
                    return Some((data, pos));
                }
                assert!(line.contains(':'), "bad trailer line {line:?}");
            }
        }
        if buf.len() < pos + size + 2 {
            return None;
        }
        data.extend_from_slice(&buf[pos..pos + size]);
        assert_eq!(
            &buf[pos + size..pos + size + 2],
            b"\r\n",
            "chunk data not followed by CRLF"
        );
        pos += size + 2;
    }
}

// ---------------------------------------------------------------------------------------------
// Backends: raw listeners recording what arrives
// ---------------------------------------------------------------------------------------------

/// One request as a backend received it.
#[derive(Debug, Clone)]
struct Received {
    head: Head,
    /// De-framed.
    body: Vec<u8>,
    /// Exactly the bytes of this request.
    raw: Vec<u8>,
}

impl Received {
    fn method(&self) -> &str {
        self.head.start.split(' ').next().unwrap_or_default()
    }

    fn target(&self) -> &str {
        self.head.start.split(' ').nth(1).unwrap_or_default()
    }
}

/// The request at the start of `buf` and its length, once complete.
fn parse_request(buf: &[u8]) -> Option<(Received, usize)> {
    let (head, head_len) = parse_head(buf)?;
    let rest = &buf[head_len..];
    let (body, body_len) = if head.is_chunked() {
        let (data, len) = decode_chunked(rest)?;
        (data, len)
    } else {
        let len = head.content_length().unwrap_or(0);
        if rest.len() < len {
            return None;
        }
        (rest[..len].to_vec(), len)
    };
    let len = head_len + body_len;
    let raw = buf[..len].to_vec();
    Some((Received { head, body, raw }, len))
}

/// Reads one request from a backend-side connection (`buf` keeps what follows it).
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Received> {
    let mut chunk = [0u8; 8192];
    loop {
        if let Some((request, len)) = parse_request(buf) {
            buf.drain(..len);
            return Some(request);
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// What a recording backend answers to one request.
#[derive(Debug)]
struct Reply {
    bytes: Vec<u8>,
    /// Close the connection after writing `bytes`.
    close: bool,
}

fn reply(bytes: impl Into<Vec<u8>>) -> Reply {
    Reply {
        bytes: bytes.into(),
        close: false,
    }
}

fn reply_and_close(bytes: impl Into<Vec<u8>>) -> Reply {
    Reply {
        bytes: bytes.into(),
        close: true,
    }
}

/// 200 with the request target as its body (for HEAD, the same head without the body).
fn target_answer(request: &Received) -> Reply {
    let body = request.target();
    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
    if request.method() == "HEAD" {
        reply(head)
    } else {
        reply(format!("{head}{body}"))
    }
}

#[derive(Debug, Default)]
struct Log {
    requests: Vec<Received>,
    /// Every byte received, on every connection, parsed or not.
    bytes: Vec<u8>,
}

/// A backend that records every byte and request it receives and answers with `answer`.
#[derive(Debug)]
struct Backend {
    addr: SocketAddr,
    log: Arc<Mutex<Log>>,
}

impl Backend {
    async fn start(answer: fn(&Received) -> Reply) -> Backend {
        let log = Arc::new(Mutex::new(Log::default()));
        let shared = Arc::clone(&log);
        let addr = raw_backend(move |mut stream| {
            let log = Arc::clone(&shared);
            async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    while let Some((request, len)) = parse_request(&buf) {
                        buf.drain(..len);
                        let answer = answer(&request);
                        log.lock().unwrap().requests.push(request);
                        if stream.write_all(&answer.bytes).await.is_err() || answer.close {
                            return;
                        }
                    }
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            log.lock().unwrap().bytes.extend_from_slice(&chunk[..n]);
                            buf.extend_from_slice(&chunk[..n]);
                        }
                    }
                }
            }
        })
        .await;
        Backend { addr, log }
    }

    /// A backend answering 200 with the request target as the body.
    async fn echo() -> Backend {
        Backend::start(target_answer).await
    }

    fn requests(&self) -> Vec<Received> {
        self.log.lock().unwrap().requests.clone()
    }

    fn only_request(&self) -> Received {
        let requests = self.requests();
        assert_eq!(
            requests.len(),
            1,
            "the backend got exactly one request: {requests:#?}"
        );
        requests.into_iter().next().unwrap()
    }

    fn assert_untouched(&self, case: &str) {
        let log = self.log.lock().unwrap();
        assert!(
            log.bytes.is_empty(),
            "{case}: the backend received {:?}",
            lossy(&log.bytes)
        );
    }
}

/// A well-formed request after the bad ones: it reaches the backend, as the only request it
/// ever received (so the bad ones were not merely slow to arrive, and the proxy still works).
async fn sentinel(proxy: &Running, backend: &Backend) {
    let r = exchange(
        proxy.addr,
        b"GET /sentinel HTTP/1.1\r\nHost: fulcrum.test\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200, "sentinel: {:?}", lossy(&r.raw));
    assert_eq!(r.body, b"/sentinel");
    assert_eq!(backend.only_request().target(), "/sentinel");
}

// ---------------------------------------------------------------------------------------------
// Clients: raw sockets reading responses with deadlines
// ---------------------------------------------------------------------------------------------

/// One response as a client received it.
#[derive(Debug)]
struct Response {
    head: Head,
    version: String,
    status: u16,
    /// De-framed.
    body: Vec<u8>,
    /// Whether the body came chunked.
    chunked: bool,
    /// Exactly the bytes of this response.
    raw: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.header(name)
    }
}

/// The response at the start of `buf` to a `method` request, once complete (`eof`: the
/// connection is closed, which ends a body without a length).
fn parse_response(buf: &[u8], method: &str, eof: bool) -> Option<(Response, usize)> {
    let (head, head_len) = parse_head(buf)?;
    let mut parts = head.start.splitn(3, ' ');
    let version = parts.next().unwrap_or_default().to_owned();
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line in {:?}", lossy(buf)));
    let rest = &buf[head_len..];
    let no_body =
        (100..200).contains(&status) || status == 204 || status == 304 || method == "HEAD";
    let (body, body_len, chunked) = if no_body {
        (Vec::new(), 0, false)
    } else if head.is_chunked() {
        let (data, len) = decode_chunked(rest)?;
        (data, len, true)
    } else if let Some(len) = head.content_length() {
        if rest.len() < len {
            return None;
        }
        (rest[..len].to_vec(), len, false)
    } else if eof {
        (rest.to_vec(), rest.len(), false)
    } else {
        return None;
    };
    let len = head_len + body_len;
    let raw = buf[..len].to_vec();
    let response = Response {
        head,
        version,
        status,
        body,
        chunked,
        raw,
    };
    Some((response, len))
}

#[derive(Debug)]
struct Client {
    stream: TcpStream,
    /// Received, not yet parsed.
    buf: Vec<u8>,
    /// The proxy closed the connection (EOF or reset).
    eof: bool,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Client {
        Client {
            stream: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
            eof: false,
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write to proxy");
    }

    /// For requests the proxy may reject before reading all of them: a failed write is then
    /// expected, and the answer is still there to read.
    async fn send_lenient(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes).await;
    }

    /// Reads once more; false when `deadline` passed first.
    async fn fill(&mut self, deadline: Instant) -> bool {
        let mut chunk = [0u8; 8192];
        match timeout_at(deadline, self.stream.read(&mut chunk)).await {
            Err(_) => false,
            Ok(Ok(0)) | Ok(Err(_)) => {
                self.eof = true;
                true
            }
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// The next response, to a request that is not HEAD.
    async fn response(&mut self) -> Response {
        self.response_to("GET").await
    }

    async fn response_to(&mut self, method: &str) -> Response {
        self.next_response(method)
            .await
            .unwrap_or_else(|| panic!("the proxy closed the connection without a response"))
    }

    /// The next response, or `None` if the proxy closed the connection before sending any byte
    /// of one.
    async fn next_response(&mut self, method: &str) -> Option<Response> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some((response, len)) = parse_response(&self.buf, method, self.eof) {
                self.buf.drain(..len);
                return Some(response);
            }
            if self.eof {
                assert!(
                    self.buf.is_empty(),
                    "connection closed in the middle of a response: {:?}",
                    lossy(&self.buf)
                );
                return None;
            }
            assert!(
                self.fill(deadline).await,
                "no complete response within {DEADLINE:?}; got {:?}",
                lossy(&self.buf)
            );
        }
    }

    /// Reads until `needle` has arrived (without consuming anything).
    async fn wait_for(&mut self, needle: &[u8]) {
        let deadline = Instant::now() + DEADLINE;
        while find(&self.buf, needle).is_none() {
            assert!(!self.eof, "closed before {:?} arrived", lossy(needle));
            assert!(
                self.fill(deadline).await,
                "{:?} did not arrive in time; got {:?}",
                lossy(needle),
                lossy(&self.buf)
            );
        }
    }

    /// For a response the proxy cuts short: the connection closes; what arrived stays in
    /// `buf`.
    async fn assert_closed_after_partial(&mut self, case: &str) {
        let deadline = Instant::now() + DEADLINE;
        while !self.eof {
            assert!(
                self.fill(deadline).await,
                "{case}: the proxy kept the connection open; got {:?}",
                lossy(&self.buf)
            );
        }
    }

    /// The proxy closes the connection, sending nothing more.
    async fn assert_closed(&mut self, case: &str) {
        let deadline = Instant::now() + DEADLINE;
        while !self.eof {
            assert!(
                self.fill(deadline).await,
                "{case}: the proxy kept the connection open"
            );
        }
        assert!(
            self.buf.is_empty(),
            "{case}: bytes after the response: {:?}",
            lossy(&self.buf)
        );
    }
}

/// Sends `request` on a new connection and reads one response.
async fn exchange(addr: SocketAddr, request: &[u8]) -> Response {
    let mut client = Client::connect(addr).await;
    client.send(request).await;
    client.response().await
}

/// Sends a request the proxy must refuse: one response with `status`, then the connection is
/// closed (RFC 9112 §6.3: after a framing error the server MUST close), and the backend got
/// nothing.
async fn assert_rejected(
    proxy: &Running,
    backend: &Backend,
    status: u16,
    case: &str,
    request: &[u8],
) {
    let mut client = Client::connect(proxy.addr).await;
    client.send_lenient(request).await;
    let response = client
        .next_response("GET")
        .await
        .unwrap_or_else(|| panic!("{case}: closed without a response to {:?}", lossy(request)));
    assert_eq!(
        response.status,
        status,
        "{case}: {:?} got {:?}",
        lossy(request),
        lossy(&response.raw)
    );
    client.assert_closed(case).await;
    backend.assert_untouched(case);
}

/// Sends a request the proxy must pass on, on a new connection: a 200 from the backend, whose
/// body is the target.
async fn assert_accepted(proxy: &Running, case: &str, request: &[u8]) -> Response {
    let response = exchange(proxy.addr, request).await;
    assert_eq!(
        response.status,
        200,
        "{case}: {:?} got {:?}",
        lossy(request),
        lossy(&response.raw)
    );
    response
}

// ---------------------------------------------------------------------------------------------
// 1, 2: the request line (RFC 9112 §3, §2.3)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn malformed_request_line_is_400() {
    let backend = Backend::echo().await;
    let proxy = start(settings(backend.addr)).await;
    let cases: &[(&str, &[u8])] = &[
        (
            "two spaces after the method",
            b"GET  / HTTP/1.1\r\nHost: t\r\n\r\n",
        ),
        (
            "two spaces before the version",
            b"GET /  HTTP/1.1\r\nHost: t\r\n\r\n",
        ),
        ("no version", b"GET /\r\nHost: t\r\n\r\n"),
        ("no target", b"GET HTTP/1.1\r\nHost: t\r\n\r\n"),
        ("empty method", b" / HTTP/1.1\r\nHost: t\r\n\r\n"),
        ("space in the method", b"GE T / HTTP/1.1\r\nHost: t\r\n\r\n"),
        (
            "non-token char in the method",
            b"G(T / HTTP/1.1\r\nHost: t\r\n\r\n",
        ),
        (
            "space in the target",
            b"GET /a b HTTP/1.1\r\nHost: t\r\n\r\n",
        ),
        (
            "control char in the target",
            b"GET /a\x01b HTTP/1.1\r\nHost: t\r\n\r\n",
        ),
        (
            "DEL in the target",
            b"GET /a\x7fb HTTP/1.1\r\nHost: t\r\n\r\n",
        ),
        (
            "tab in the target",
            b"GET /a\tb HTTP/1.1\r\nHost: t\r\n\r\n",
        ),
        (
            "bare CR ending the request line",
            b"GET / HTTP/1.1\rHost: t\r\n\r\n",
        ),
        ("trailing space", b"GET / HTTP/1.1 \r\nHost: t\r\n\r\n"),
    ];
    for (case, request) in cases {
        assert_rejected(&proxy, &backend, 400, case, request).await;
    }

    // Leniencies RFC 9112 allows, accepted today: an empty line before the request line
    // (§2.2: SHOULD ignore at least one), and bare LF as the line terminator (§2.2: MAY).
    let r = assert_accepted(
        &proxy,
        "empty line first",
        b"\r\nGET /crlf-first HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .await;
    assert_eq!(r.body, b"/crlf-first");
    let r = assert_accepted(
        &proxy,
        "bare LF",
        b"GET /bare-lf HTTP/1.1\nHost: t\nX-A: 1\n\n",
    )
    .await;
    assert_eq!(r.body, b"/bare-lf");
    // Raw UTF-8 in the target: accepted, and passed on as is.
    // RULE: RFC 9112 §3.2 / RFC 3986: a request-target is ASCII; an invalid request line SHOULD
    // get a 400 (RFC 9112 §3). (nginx passes such bytes on too, so this is the lenient
    // majority behaviour; a new parser must at least never pass on CTLs or spaces, above.)
    let r = assert_accepted(
        &proxy,
        "non-ASCII byte in the target",
        b"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .await;
    assert_eq!(r.body, "/café".as_bytes());
    let requests = backend.requests();
    assert_eq!(requests.len(), 3);
    // Passed on with CRLF only.
    assert!(
        requests[1].raw.starts_with(b"GET /bare-lf HTTP/1.1\r\n"),
        "{:?}",
        lossy(&requests[1].raw)
    );
    assert_eq!(requests[1].head.values("x-a"), ["1"]);
    assert!(
        requests[2]
            .raw
            .starts_with(b"GET /caf\xc3\xa9 HTTP/1.1\r\n"),
        "{:?}",
        lossy(&requests[2].raw)
    );
}

#[tokio::test]
async fn unsupported_versions() {
    let backend = Backend::echo().await;
    let proxy = start(settings(backend.addr)).await;
    // RFC 9110 §15.6.6 / RFC 9112 §2.3: a well-formed version the proxy does not speak gets
    // 505 (HTTP Version Not Supported), as nginx answers. (RFC 9110 §6.2 would let HTTP/1.2
    // be served as 1.1; refusing it is the safe side of that SHOULD.)
    let unsupported: &[(&str, &[u8])] = &[
        ("HTTP/2.0", b"GET / HTTP/2.0\r\nHost: t\r\n\r\n"),
        ("HTTP/3.0", b"GET / HTTP/3.0\r\nHost: t\r\n\r\n"),
        ("HTTP/1.2", b"GET / HTTP/1.2\r\nHost: t\r\n\r\n"),
        ("HTTP/0.9 named", b"GET / HTTP/0.9\r\nHost: t\r\n\r\n"),
        // The HTTP/2 connection preface (prior knowledge) starts with such a request line.
        ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
    ];
    for (case, request) in unsupported {
        assert_rejected(&proxy, &backend, 505, case, request).await;
    }
    // Not a version at all: a malformed request line, 400.
    let malformed: &[(&str, &[u8])] = &[
        // HTTP/0.9 style: a request line without a version (and no headers).
        ("HTTP/0.9 style", b"GET /\r\n\r\n"),
        ("lower-case name", b"GET / http/1.1\r\nHost: t\r\n\r\n"),
        ("two-digit minor", b"GET / HTTP/1.10\r\nHost: t\r\n\r\n"),
        ("no minor", b"GET / HTTP/1\r\nHost: t\r\n\r\n"),
    ];
    for (case, request) in malformed {
        assert_rejected(&proxy, &backend, 400, case, request).await;
    }

    sentinel(&proxy, &backend).await;
}

// ---------------------------------------------------------------------------------------------
// 3, 4, 5: header lines (RFC 9112 §5, RFC 9110 §5.5)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn whitespace_between_header_name_and_colon_is_400() {
    // RFC 9112 §5.1: MUST reject with 400.
    let backend = Backend::echo().await;
    let proxy = start(settings(backend.addr)).await;
    let cases: &[(&str, &[u8])] = &[
        ("space before colon", b"GET / HTTP/1.1\r\nHost : t\r\n\r\n"),
        (
            "tab before colon",
            b"GET / HTTP/1.1\r\nHost: t\r\nX-A\t: 1\r\n\r\n",
        ),
        (
            "space before colon, other header",
            b"GET / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding : chunked\r\n\r\n",
        ),
        (
            "space before colon on Content-Length",
            b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length : 5\r\n\r\nhello",
        ),
    ];
    for (case, request) in cases {
        assert_rejected(&proxy, &backend, 400, case, request).await;
    }
    sentinel(&proxy, &backend).await;
}

#[tokio::test]
async fn obs_fold_is_400() {
    // RFC 9112 §5.2: a server MUST reject obs-fold with 400 or replace it by spaces; and §2.2:
    // whitespace between the start line and the first field MUST be rejected or the line
    // ignored. All of them are rejected.
    let backend = Backend::echo().await;
    let proxy = start(settings(backend.addr)).await;
    let cases: &[(&str, &[u8])] = &[
        (
            "space fold",
            b"GET / HTTP/1.1\r\nHost: t\r\nX-A: 1\r\n 2\r\n\r\n",
        ),
        (
            "tab fold",
            b"GET / HTTP/1.1\r\nHost: t\r\nX-A: 1\r\n\t2\r\n\r\n",
        ),
        (
            "fold of Content-Length",
            b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length:\r\n 5\r\n\r\nhello",
        ),
        (
            "whitespace before the first field",
            b"GET / HTTP/1.1\r\n Host: t\r\n\r\n",
        ),
    ];
    for (case, request) in cases {
        assert_rejected(&proxy, &backend, 400, case, request).await;
    }
    sentinel(&proxy, &backend).await;
}

#[tokio::test]
async fn invalid_header_name_or_value_is_400() {
    let backend = Backend::echo().await;
    let proxy = start(settings(backend.addr)).await;
    let cases: &[(&str, &[u8])] = &[
        // Names are tokens (RFC 9110 §5.1).
        (
            "( in a name",
            b"GET / HTTP/1.1\r\nHost: t\r\nX(A: 1\r\n\r\n",
        ),
        (
            "@ in a name",
            b"GET / HTTP/1.1\r\nHost: t\r\nX@A: 1\r\n\r\n",
        ),
        (
            "control char in a name",
            b"GET / HTTP/1.1\r\nHost: t\r\nX\x01A: 1\r\n\r\n",
        ),
        (
            "non-ASCII name",
            b"GET / HTTP/1.1\r\nHost: t\r\nX\xc3\xa9: 1\r\n\r\n",
        ),
        ("empty name", b"GET / HTTP/1.1\r\nHost: t\r\n: 1\r\n\r\n"),
        ("no colon", b"GET / HTTP/1.1\r\nHost: t\r\nX-A 1\r\n\r\n"),
        // Values are field-vchar, SP and HTAB (RFC 9110 §5.5).
        (
            "\\x01 in a value",
            b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\x01b\r\n\r\n",
        ),
        (
            "NUL in a value",
            b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\x00b\r\n\r\n",
        ),
        (
            "DEL in a value",
            b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\x7fb\r\n\r\n",
        ),
        // RFC 9112 §2.2: a bare CR MUST be treated as invalid (or replaced by SP).
        (
            "bare CR in a value",
            b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\rb\r\n\r\n",
        ),
        (
            "bare CR ending a line",
            b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\r\r\n\r\n",
        ),
    ];
    for (case, request) in cases {
        assert_rejected(&proxy, &backend, 400, case, request).await;
    }

    // obs-text (bytes 0x80-0xFF) is allowed in values, and passed on as is.
    let r = assert_accepted(
        &proxy,
        "obs-text value",
        b"GET /obs-text HTTP/1.1\r\nHost: t\r\nX-Latin: caf\xe9\r\n\r\n",
    )
    .await;
    assert_eq!(r.body, b"/obs-text");
    let received = backend.only_request();
    assert_eq!(received.head.values("x-latin").len(), 1);
    assert!(
        find(&received.raw, b": caf\xe9\r\n").is_some(),
        "{:?}",
        lossy(&received.raw)
    );
}

// ---------------------------------------------------------------------------------------------
// 6, 7: message framing (RFC 9112 §6)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn invalid_content_length_is_400() {
    let backend = Backend::echo().await;
    let proxy = start(settings(backend.addr)).await;
    let post = |cl: &str| format!("POST / HTTP/1.1\r\nHost: t\r\n{cl}\r\n\r\nhello").into_bytes();
    let cases = [
        ("letters", post("Content-Length: abc")),
        ("negative", post("Content-Length: -1")),
        ("plus sign", post("Content-Length: +5")),
        ("two numbers", post("Content-Length: 1 2")),
        ("empty", post("Content-Length: ")),
        ("hex", post("Content-Length: 0x5")),
        ("decimal point", post("Content-Length: 5.0")),
        (
            "overflows u64",
            post("Content-Length: 99999999999999999999999"),
        ),
        (
            "two headers, different values",
            post("Content-Length: 5\r\nContent-Length: 6"),
        ),
        (
            "two headers, different values (smaller first)",
            post("Content-Length: 0\r\nContent-Length: 5"),
        ),
        // RFC 9112 §6.3 lets a recipient either reject a list of identical values or use one.
        ("a list of identical values", post("Content-Length: 5, 5")),
        ("a list of different values", post("Content-Length: 5, 6")),
    ];
    for (case, request) in &cases {
        assert_rejected(&proxy, &backend, 400, case, request).await;
    }

    // A body cut short by the client closing its side: 400, nothing passed on.
    let mut client = Client::connect(proxy.addr).await;
    client
        .send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nhello")
        .await;
    client.stream.shutdown().await.unwrap();
    let r = client.response().await;
    assert_eq!(r.status, 400, "truncated body: {:?}", lossy(&r.raw));
    client.assert_closed("truncated body").await;
    backend.assert_untouched("truncated body");

    // Two Content-Length headers with the same value are taken as one (as hyper did).
    // RULE: RFC 9112 §6.3 permits this (or a 400); nginx answers 400 ("duplicate header
    // line"). The backend always gets a single Content-Length of our own, as below.
    let r = assert_accepted(
        &proxy,
        "two identical Content-Length",
        b"POST /same HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
    )
    .await;
    assert_eq!(r.body, b"/same");
    let received = backend.only_request();
    assert_eq!(received.head.values("content-length"), ["5"]);
    assert_eq!(received.body, b"hello");
}

#[tokio::test]
async fn transfer_encoding_rules() {
    let backend = Backend::echo().await;
    let proxy = start(settings(backend.addr)).await;
    const BODY: &str = "5\r\nhello\r\n0\r\n\r\n";
    let post = |version: &str, headers: &str| {
        format!("POST / {version}\r\nHost: t\r\n{headers}\r\n\r\n{BODY}").into_bytes()
    };
    let rejected = [
        // RFC 9112 §6.3: chunked not the final coding of a request → MUST answer 400 and
        // close. (nginx answers 501 to any coding but a lone "chunked".)
        ("gzip", post("HTTP/1.1", "Transfer-Encoding: gzip")),
        ("identity", post("HTTP/1.1", "Transfer-Encoding: identity")),
        (
            "chunked, gzip",
            post("HTTP/1.1", "Transfer-Encoding: chunked, gzip"),
        ),
        (
            "chunked then gzip, two lines",
            post(
                "HTTP/1.1",
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip",
            ),
        ),
        (
            "chunked with a suffix",
            post("HTTP/1.1", "Transfer-Encoding: chunkedx"),
        ),
        (
            "empty",
            post("HTTP/1.1", "Transfer-Encoding: \r\nContent-Length: 5"),
        ),
        // RFC 9112 §6.1: Transfer-Encoding in an HTTP/1.0 message means faulty framing (nginx:
        // 400 too).
        (
            "HTTP/1.0 chunked",
            post("HTTP/1.0", "Transfer-Encoding: chunked"),
        ),
        (
            "HTTP/1.0 chunked with Content-Length",
            post(
                "HTTP/1.0",
                "Transfer-Encoding: chunked\r\nContent-Length: 5",
            ),
        ),
    ];
    for (case, request) in &rejected {
        assert_rejected(&proxy, &backend, 400, case, request).await;
    }

    // Transfer-Encoding and Content-Length together, in either order: 400, as nginx (since
    // 1.21.1) answers. RFC 9112 §6.1 allows either this or going by Transfer-Encoding and
    // closing; this is the classic request-smuggling shape, so it is refused.
    for (case, headers) in [
        (
            "TE then CL",
            "Transfer-Encoding: chunked\r\nContent-Length: 3",
        ),
        (
            "CL then TE",
            "Content-Length: 3\r\nTransfer-Encoding: chunked",
        ),
    ] {
        let request =
            format!("POST /te-cl HTTP/1.1\r\nHost: t\r\n{headers}\r\n\r\n{BODY}").into_bytes();
        assert_rejected(&proxy, &backend, 400, case, &request).await;
    }

    // A coding before chunked, which the proxy does not decode: 501 (RFC 9112 §6.1), never
    // passed on as if the body were plain.
    let request = format!(
        "POST /gzip-chunked HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n{BODY}"
    );
    assert_rejected(&proxy, &backend, 501, "gzip, chunked", request.as_bytes()).await;

    // chunked applied twice: RFC 9112 §6.1 says a sender MUST NOT, so the framing is invalid.
    let inner = "5\r\nhello\r\n0\r\n\r\n";
    let outer = format!("{:x}\r\n{inner}\r\n0\r\n\r\n", inner.len());
    let request = format!(
        "POST /chunked-twice HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, chunked\r\n\r\n{outer}"
    );
    assert_rejected(
        &proxy,
        &backend,
        400,
        "chunked, chunked",
        request.as_bytes(),
    )
    .await;

    // Coding names are case-insensitive.
    let r = assert_accepted(
        &proxy,
        "Chunked",
        b"POST /upper HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    assert_eq!(r.body, b"/upper");
    assert_eq!(backend.only_request().body, b"hello");
}

// ---------------------------------------------------------------------------------------------
// 8, 9: request bodies
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn chunked_request_bodies() {
    let backend = Backend::echo().await;
    let proxy = start(settings(backend.addr)).await;

    // Valid, with chunk extensions (whitespace is allowed before the `;`, RFC 9112 §7.1.1 BWS,
    // and before the CRLF) and a trailer field.
    let r = assert_accepted(
        &proxy,
        "valid chunked",
        b"POST /chunked HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
          5;name=value\r\nhello\r\n\
          6 \t; n = \"v\"\r\n world\r\n\
          A \r\n0123456789\r\n\
          0\r\nX-Trailer: t\r\n\r\n",
    )
    .await;
    assert_eq!(r.body, b"/chunked");
    let received = backend.only_request();
    // Buffered by the proxy (proxy_request_buffering) and sent with its length.
    assert_eq!(received.body, b"hello world0123456789");
    assert_eq!(received.head.values("content-length"), ["21"]);
    assert_eq!(
        received.head.values("transfer-encoding"),
        Vec::<&str>::new()
    );
    // Trailer fields are dropped with the chunked coding (RFC 9112 §7.1.2 allows it).
    assert_eq!(received.head.values("x-trailer"), Vec::<&str>::new());
    assert!(find(&received.raw, b"X-Trailer").is_none());

    let invalid: &[(&str, &[u8])] = &[
        ("chunk size not hex", b"zz\r\nhello\r\n0\r\n\r\n"),
        ("chunk size missing", b"\r\nhello\r\n0\r\n\r\n"),
        ("negative chunk size", b"-5\r\nhello\r\n0\r\n\r\n"),
        (
            "chunk size overflows u64",
            b"ffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
        ),
        ("no CRLF after the data", b"5\r\nhelloXX\r\n0\r\n\r\n"),
        ("data longer than the size", b"3\r\nhello\r\n0\r\n\r\n"),
        ("LF only after the data", b"5\r\nhello\n0\r\n\r\n"),
        ("CR only after the size", b"5\rhello\r\n0\r\n\r\n"),
        ("bad trailer line", b"5\r\nhello\r\n0\r\nX(T: 1\r\n\r\n"),
        // After the size only BWS, then `;` or CRLF (RFC 9112 §7.1.1).
        ("junk after the chunk size", b"5 junk\r\nhello\r\n0\r\n\r\n"),
        ("two sizes", b"5 5\r\nhello\r\n0\r\n\r\n"),
        (
            "junk after the last chunk's size",
            b"5\r\nhello\r\n0 x\r\n\r\n",
        ),
    ];
    for (case, body) in invalid {
        let mut request =
            b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        request.extend_from_slice(body);
        let mut client = Client::connect(proxy.addr).await;
        client.send_lenient(&request).await;
        let r = client.response().await;
        assert_eq!(r.status, 400, "{case}: {:?}", lossy(&r.raw));
        client.assert_closed(case).await;
    }
    // Only the valid one reached the backend.
    assert_eq!(backend.only_request().target(), "/chunked");
}

/// A request body of `len` bytes that, if a proxy took it for the start of the next request,
/// would be a request for /smuggled.
fn smuggling_body(len: usize) -> Vec<u8> {
    let mut body = b"GET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n".to_vec();
    body.resize(len, b'x');
    body
}

/// After a refused request on `client`, the connection is either closed or ready for the next
/// request, and the refused body was not taken for a request.
async fn assert_no_desync(client: &mut Client, backend: &Backend, case: &str) {
    client
        .send_lenient(b"GET /after HTTP/1.1\r\nHost: t\r\n\r\n")
        .await;
    if let Some(r) = client.next_response("GET").await {
        assert_eq!(r.status, 200, "{case}: {:?}", lossy(&r.raw));
        assert_eq!(r.body, b"/after", "{case}");
    }
    for received in backend.requests() {
        assert_eq!(received.target(), "/after", "{case}: {received:?}");
    }
}

#[tokio::test]
async fn body_over_max_body_bytes_is_413() {
    let backend = Backend::echo().await;
    let proxy = start(settings(backend.addr)).await;

    // Declared too large: refused from the head alone, before any body is sent.
    let mut client = Client::connect(proxy.addr).await;
    client
        .send(
            format!(
                "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
                MAX_BODY + 1
            )
            .as_bytes(),
        )
        .await;
    let r = client.response().await;
    assert_eq!(r.status, 413, "{:?}", lossy(&r.raw));
    backend.assert_untouched("Content-Length over the limit");

    // Declared too large and sent anyway: the body is never read as a request.
    let mut client = Client::connect(proxy.addr).await;
    let mut request = format!(
        "POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        MAX_BODY + 1
    )
    .into_bytes();
    request.extend_from_slice(&smuggling_body(MAX_BODY + 1));
    client.send_lenient(&request).await;
    let r = client.response().await;
    assert_eq!(r.status, 413, "{:?}", lossy(&r.raw));
    assert_no_desync(&mut client, &backend, "Content-Length over the limit").await;

    // Chunked, over the limit only in total (two chunks of 600).
    let mut client = Client::connect(proxy.addr).await;
    let mut request =
        b"POST /big HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..2 {
        request.extend_from_slice(b"258\r\n");
        request.extend_from_slice(&smuggling_body(600));
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    client.send_lenient(&request).await;
    let r = client.response().await;
    assert_eq!(r.status, 413, "{:?}", lossy(&r.raw));
    assert_no_desync(&mut client, &backend, "chunked over the limit").await;

    // At the limit, both ways: passed on whole.
    let body = "x".repeat(MAX_BODY);
    let r = assert_accepted(
        &proxy,
        "Content-Length at the limit",
        format!("POST /at-limit HTTP/1.1\r\nHost: t\r\nContent-Length: {MAX_BODY}\r\n\r\n{body}")
            .as_bytes(),
    )
    .await;
    assert_eq!(r.body, b"/at-limit");
    let r = assert_accepted(
        &proxy,
        "chunked at the limit",
        format!(
            "POST /at-limit HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
             {MAX_BODY:x}\r\n{body}\r\n0\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(r.body, b"/at-limit");
    let at_limit: Vec<_> = backend
        .requests()
        .into_iter()
        .filter(|r| r.target() == "/at-limit")
        .collect();
    assert_eq!(at_limit.len(), 2);
    for received in at_limit {
        assert_eq!(received.body, body.as_bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// 10, 11, 12, 13: connection behaviour
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn expect_100_continue() {
    let backend = Backend::echo().await;
    let proxy = start(settings(backend.addr)).await;

    // The head only: the proxy must invite the body before the client sends it.
    let mut client = Client::connect(proxy.addr).await;
    client
        .send(b"POST /expect HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        .await;
    let interim = client.response().await;
    assert_eq!(interim.status, 100, "{:?}", lossy(&interim.raw));
    assert!(
        interim.raw.starts_with(b"HTTP/1.1 100 Continue\r\n"),
        "{:?}",
        lossy(&interim.raw)
    );
    client.send(b"hello").await;
    let r = client.response().await;
    assert_eq!(r.status, 200, "{:?}", lossy(&r.raw));
    assert_eq!(r.body, b"/expect");
    let received = backend.only_request();
    assert_eq!(received.body, b"hello");
    // The expectation was met hop by hop; the backend is not asked again.
    assert_eq!(received.head.values("expect"), Vec::<&str>::new());

    // The connection carries on.
    client.send(b"GET /next HTTP/1.1\r\nHost: t\r\n\r\n").await;
    assert_eq!(client.response().await.body, b"/next");

    // A body that will be refused: the final 413 comes without a 100 first.
    let mut client = Client::connect(proxy.addr).await;
    client
        .send(
            format!(
                "POST /big HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
                MAX_BODY + 1
            )
            .as_bytes(),
        )
        .await;
    let r = client.response().await;
    assert_eq!(r.status, 413, "{:?}", lossy(&r.raw));

    // RFC 9110 §10.1.1: a 100-continue expectation in an HTTP/1.0 request MUST be ignored
    // (and no 1xx may be sent to an HTTP/1.0 client, §15.2).
    let mut client = Client::connect(proxy.addr).await;
    client
        .send(b"POST /expect10 HTTP/1.0\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello")
        .await;
    let r = client.response().await;
    assert_eq!(r.status, 200, "{:?}", lossy(&r.raw));
    assert_eq!(r.body, b"/expect10");
    let requests = backend.requests();
    assert_eq!(requests.len(), 3, "{requests:#?}");
    assert_eq!(requests[2].body, b"hello");
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let backend = Backend::echo().await;
    let proxy = start(settings(backend.addr)).await;
    let mut client = Client::connect(proxy.addr).await;
    // One write: a GET, a POST with a body, a GET.
    client
        .send(
            b"GET /1 HTTP/1.1\r\nHost: t\r\n\r\n\
              POST /2 HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello\
              GET /3 HTTP/1.1\r\nHost: t\r\n\r\n",
        )
        .await;
    for target in ["/1", "/2", "/3"] {
        let r = client.response().await;
        assert_eq!(r.status, 200, "{target}: {:?}", lossy(&r.raw));
        assert_eq!(r.body, target.as_bytes());
    }
    let requests = backend.requests();
    let targets: Vec<_> = requests.iter().map(|r| r.target()).collect();
    assert_eq!(targets, ["/1", "/2", "/3"]);
    assert_eq!(requests[1].body, b"hello");
    assert!(requests[2].body.is_empty());
}

#[tokio::test]
async fn http10_keep_alive_and_connection_close() {
    let backend = Backend::echo().await;
    let proxy = start(settings(backend.addr)).await;

    // HTTP/1.0 asking for keep-alive: told it is kept, and it is.
    let mut client = Client::connect(proxy.addr).await;
    for target in ["/a", "/b"] {
        client
            .send(format!("GET {target} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").as_bytes())
            .await;
        let r = client.response().await;
        assert_eq!(r.status, 200, "{target}: {:?}", lossy(&r.raw));
        assert_eq!(r.body, target.as_bytes());
        assert_eq!(r.header("connection"), Some("keep-alive"), "{target}");
        // RFC 9110 §6.2: a server answers with the highest version it conforms to, as
        // nginx does.
        assert_eq!(r.version, "HTTP/1.1", "{target}");
    }

    // Plain HTTP/1.0: closed after the response.
    let mut client = Client::connect(proxy.addr).await;
    client.send(b"GET /c HTTP/1.0\r\n\r\n").await;
    let r = client.response().await;
    assert_eq!(r.status, 200, "{:?}", lossy(&r.raw));
    assert_eq!(r.body, b"/c");
    client.assert_closed("HTTP/1.0 without keep-alive").await;

    // HTTP/1.1 with Connection: close: said, and done.
    let mut client = Client::connect(proxy.addr).await;
    client
        .send(b"GET /d HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await;
    let r = client.response().await;
    assert_eq!(r.status, 200, "{:?}", lossy(&r.raw));
    assert_eq!(r.body, b"/d");
    assert_eq!(r.header("connection"), Some("close"));
    client
        .assert_closed("HTTP/1.1 with Connection: close")
        .await;

    // Connection: close among other tokens counts too.
    let mut client = Client::connect(proxy.addr).await;
    client
        .send(b"GET /e HTTP/1.1\r\nHost: t\r\nConnection: X-Foo, Close\r\n\r\n")
        .await;
    let r = client.response().await;
    assert_eq!(r.body, b"/e");
    assert_eq!(r.header("connection"), Some("close"));
    client.assert_closed("Connection: X-Foo, Close").await;

    let targets: Vec<_> = backend
        .requests()
        .iter()
        .map(|r| r.target().to_owned())
        .collect();
    assert_eq!(targets, ["/a", "/b", "/c", "/d", "/e"]);
}

#[tokio::test]
async fn head_response_has_no_body() {
    let backend = Backend::echo().await;
    let proxy = start(settings(backend.addr)).await;
    let mut client = Client::connect(proxy.addr).await;
    // The backend answers Content-Length: 5 ("/head".len()) and no body.
    client.send(b"HEAD /head HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let r = client.response_to("HEAD").await;
    assert_eq!(r.status, 200, "{:?}", lossy(&r.raw));
    assert_eq!(r.header("content-length"), Some("5"));
    // No body: the next bytes on the connection are the next response.
    client.send(b"GET /next HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let r = client.response().await;
    assert_eq!(r.status, 200, "{:?}", lossy(&r.raw));
    assert_eq!(r.body, b"/next");
    let requests = backend.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].method(), "HEAD");
}

// ---------------------------------------------------------------------------------------------
// 14: backend responses (backend → proxy)
// ---------------------------------------------------------------------------------------------

/// Answers by target, for the response tests.
fn scripted(request: &Received) -> Reply {
    match request.target() {
        "/te-and-cl-long" => reply(
            "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n\
             5\r\nhello\r\n0\r\n\r\n",
        ),
        "/te-and-cl-short" => reply(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n\
             5\r\nhello\r\n0\r\n\r\n",
        ),
        "/cl-letters" => reply("HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nhello"),
        "/cl-negative" => reply("HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\nhello"),
        "/cl-plus" => reply("HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello"),
        "/cl-two" => {
            reply("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!")
        }
        "/cl-list" => reply("HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello!"),
        // Responses without a body: their Content-Length is passed on, so it is checked too.
        "/head-cl-two" => {
            reply("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n")
        }
        "/204-cl-letters" => reply("HTTP/1.1 204 No Content\r\nContent-Length: abc\r\n\r\n"),
        "/304-cl-two" => {
            reply("HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n")
        }
        "/chunked" => reply(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
             5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n",
        ),
        "/bad-chunk" => reply_and_close(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        ),
        "/chunk-size-junk" => reply_and_close(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5 junk\r\nhello\r\n0\r\n\r\n",
        ),
        "/close-delimited" => reply_and_close("HTTP/1.1 200 OK\r\n\r\nhello world"),
        "/continue" => {
            reply("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        }
        "/early-hints" => reply(
            "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n\
             HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        ),
        "/204" => reply("HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n"),
        "/304" => reply("HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n"),
        _ => target_answer(request),
    }
}

fn get(target: &str) -> Vec<u8> {
    format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").into_bytes()
}

#[tokio::test]
async fn backend_response_with_transfer_encoding_and_content_length() {
    let backend = Backend::start(scripted).await;
    let proxy = start(settings(backend.addr)).await;

    // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, and an intermediary
    // forwarding such a message MUST first remove Content-Length. Whether the stray length is
    // larger or smaller than the chunked body, the client gets the chunked body, complete,
    // without that Content-Length, on a connection still usable.
    let mut client = Client::connect(proxy.addr).await;
    for target in ["/te-and-cl-long", "/te-and-cl-short"] {
        client.send(&get(target)).await;
        let r = client.response().await;
        assert_eq!(r.status, 200, "{target}: {:?}", lossy(&r.raw));
        assert_eq!(r.header("content-length"), None, "{target}");
        assert_eq!(r.header("transfer-encoding"), Some("chunked"), "{target}");
        assert_eq!(r.body, b"hello", "{target}");
    }
    client.send(&get("/next")).await;
    let r = client.response().await;
    assert_eq!(r.body, b"/next", "{:?}", lossy(&r.raw));
}

#[tokio::test]
async fn backend_response_with_invalid_framing_is_502() {
    let backend = Backend::start(scripted).await;
    let proxy = start(settings(backend.addr)).await;
    for target in [
        "/cl-letters",
        "/cl-negative",
        "/cl-plus",
        "/cl-two",
        "/cl-list",
    ] {
        let r = exchange(proxy.addr, &get(target)).await;
        assert_eq!(r.status, 502, "{target}: {:?}", lossy(&r.raw));
        // The backend's bytes do not reach the client.
        assert!(find(&r.raw, b"hello").is_none(), "{target}");
    }
    assert_eq!(backend.requests().len(), 5);

    // The same Content-Length rules hold when the response has no body (HEAD, 204, 304):
    // its Content-Length would still reach the client.
    for (method, target) in [
        ("HEAD", "/head-cl-two"),
        ("GET", "/204-cl-letters"),
        ("GET", "/304-cl-two"),
    ] {
        let request = format!("{method} {target} HTTP/1.1\r\nHost: t\r\n\r\n");
        let mut client = Client::connect(proxy.addr).await;
        client.send(request.as_bytes()).await;
        // Our 502 to HEAD has no body either.
        let r = client.response_to(method).await;
        assert_eq!(r.status, 502, "{method} {target}: {:?}", lossy(&r.raw));
    }
    assert_eq!(backend.requests().len(), 8);

    // Bad chunk framing after a valid head (a size that is not hex; junk after the size, which
    // RFC 9112 §7.1.1 does not allow): the client connection is closed, and the response is
    // never presented as complete (the head may have gone out; the body never ends).
    for target in ["/bad-chunk", "/chunk-size-junk"] {
        let mut client = Client::connect(proxy.addr).await;
        client.send(&get(target)).await;
        client.assert_closed_after_partial(target).await;
        if let Some((head, head_len)) = parse_head(&client.buf) {
            assert_eq!(head.start, "HTTP/1.1 200 OK", "{target}");
            let body = &client.buf[head_len..];
            let complete = if head.is_chunked() {
                find(body, b"0\r\n\r\n").is_some()
            } else {
                head.content_length().is_some_and(|n| body.len() >= n)
            };
            assert!(
                !complete,
                "{target}: presented as complete: {:?}",
                lossy(&client.buf)
            );
        } else {
            assert!(
                find(&client.buf, b"hello").is_none(),
                "{target}: {:?}",
                lossy(&client.buf)
            );
        }
    }
}

#[tokio::test]
async fn backend_chunked_response_streams_through() {
    // The second chunk is sent only once the client has the first one: the response is
    // streamed, not buffered.
    let release = Arc::new(Notify::new());
    let backend_release = Arc::clone(&release);
    let addr = raw_backend(move |mut stream| {
        let release = Arc::clone(&backend_release);
        async move {
            let mut buf = Vec::new();
            if read_request(&mut stream, &mut buf).await.is_none() {
                return;
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
                .await;
            release.notified().await;
            let _ = stream.write_all(b"6\r\nsecond\r\n0\r\n\r\n").await;
        }
    })
    .await;
    let proxy = start(settings(addr)).await;
    let mut client = Client::connect(proxy.addr).await;
    client.send(&get("/stream")).await;
    client.wait_for(b"first").await;
    release.notify_one();
    let r = client.response().await;
    assert_eq!(r.status, 200, "{:?}", lossy(&r.raw));
    assert!(r.chunked, "{:?}", lossy(&r.raw));
    assert_eq!(r.body, b"firstsecond");

    // A complete chunked response with an extension and a trailer: the data intact.
    let backend = Backend::start(scripted).await;
    let proxy = start(settings(backend.addr)).await;
    let mut client = Client::connect(proxy.addr).await;
    client.send(&get("/chunked")).await;
    let r = client.response().await;
    assert_eq!(r.status, 200, "{:?}", lossy(&r.raw));
    assert_eq!(r.body, b"hello world");
    // The connection is still usable.
    client.send(&get("/next")).await;
    assert_eq!(client.response().await.body, b"/next");
}

#[tokio::test]
async fn backend_response_delimited_by_close() {
    let backend = Backend::start(scripted).await;
    let proxy = start(settings(backend.addr)).await;

    // To an HTTP/1.1 client: the whole body. Today it is re-framed (chunked) and the
    // connection stays usable; passing it on delimited by closing the client connection would
    // be correct too.
    let mut client = Client::connect(proxy.addr).await;
    client.send(&get("/close-delimited")).await;
    let r = client.response().await;
    assert_eq!(r.status, 200, "{:?}", lossy(&r.raw));
    assert_eq!(r.body, b"hello world");
    if r.chunked || r.header("content-length").is_some() {
        client.send(&get("/next")).await;
        assert_eq!(client.response().await.body, b"/next");
    } else {
        // Read to the close (`response` only completes such a body at EOF).
        assert!(client.eof);
    }

    // To an HTTP/1.0 client, which cannot take chunked (RFC 9112 §6.1): no Transfer-Encoding,
    // delimited by the proxy closing.
    for target in ["/close-delimited", "/chunked"] {
        let mut client = Client::connect(proxy.addr).await;
        client
            .send(format!("GET {target} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").as_bytes())
            .await;
        client.assert_closed_after_partial(target).await;
        let r = client.response().await;
        assert_eq!(r.status, 200, "{target}: {:?}", lossy(&r.raw));
        assert_eq!(r.header("transfer-encoding"), None, "{target}");
        assert_eq!(r.header("content-length"), None, "{target}");
        assert_eq!(r.body, b"hello world", "{target}");
    }
}

#[tokio::test]
async fn backend_interim_responses_then_final() {
    let backend = Backend::start(scripted).await;
    let proxy = start(settings(backend.addr)).await;
    // RULE: RFC 9110 §15.2: a proxy MUST forward 1xx responses it did not ask for (to HTTP/1.1
    // clients), e.g. 103 Early Hints; the proxy drops every 1xx from a backend (as hyper did),
    // so the client's first response is the final one. (nginx also dropped them before 1.29.)
    for target in ["/continue", "/early-hints"] {
        let mut client = Client::connect(proxy.addr).await;
        client.send(&get(target)).await;
        let r = client.response().await;
        assert_eq!(r.status, 200, "{target}: {:?}", lossy(&r.raw));
        assert_eq!(r.body, b"ok", "{target}");
        // The connection (and the backend's) carries on.
        client.send(&get("/next")).await;
        assert_eq!(client.response().await.body, b"/next", "{target}");
    }
}

#[tokio::test]
async fn backend_204_and_304_have_no_body() {
    let backend = Backend::start(scripted).await;
    let proxy = start(settings(backend.addr)).await;
    let mut client = Client::connect(proxy.addr).await;
    client.send(&get("/204")).await;
    let r = client.response().await;
    assert_eq!(r.status, 204, "{:?}", lossy(&r.raw));
    assert_eq!(r.header("x-a"), Some("1"));
    // RFC 9110 §8.6: no Content-Length on a 204.
    assert_eq!(r.header("content-length"), None, "{:?}", lossy(&r.raw));
    assert_eq!(r.header("transfer-encoding"), None, "{:?}", lossy(&r.raw));

    client.send(&get("/304")).await;
    let r = client.response().await;
    assert_eq!(r.status, 304, "{:?}", lossy(&r.raw));
    assert_eq!(r.header("etag"), Some("\"v1\""));
    assert_eq!(r.header("transfer-encoding"), None, "{:?}", lossy(&r.raw));

    // No body on either: the next bytes are the next response.
    client.send(&get("/next")).await;
    let r = client.response().await;
    assert_eq!(r.body, b"/next", "{:?}", lossy(&r.raw));
    assert_eq!(backend.requests().len(), 3);
}

// ---------------------------------------------------------------------------------------------
// 15: absolute-form request targets (RFC 9112 §3.2.2)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn absolute_form_target_becomes_origin_form() {
    let backend = Backend::echo().await;
    let proxy = start(settings(backend.addr)).await;
    for (target, origin_form, host) in [
        ("http://example.com/x?y=1", "/x?y=1", "example.com"),
        ("http://example.com:8080/x", "/x", "example.com:8080"),
        ("http://example.com", "/", "example.com"),
        // An empty path is "/" (RFC 9110 §4.2.3), also before a query.
        ("http://example.com?a=1", "/?a=1", "example.com"),
        ("http://example.com:8080?a=1", "/?a=1", "example.com:8080"),
    ] {
        let r = exchange(
            proxy.addr,
            format!("GET {target} HTTP/1.1\r\nHost: other\r\n\r\n").as_bytes(),
        )
        .await;
        assert_eq!(r.status, 200, "{target}: {:?}", lossy(&r.raw));
        assert_eq!(r.body, origin_form.as_bytes(), "{target}");
        let received = backend.requests().pop().unwrap();
        // The authority of the target wins over Host (§3.2.2), and the backend gets the
        // origin form.
        assert_eq!(
            received.head.start,
            format!("GET {origin_form} HTTP/1.1"),
            "{target}"
        );
        assert_eq!(received.head.values("host"), [host], "{target}");
    }
}

// ---------------------------------------------------------------------------------------------
// 16: forwarding headers, from untrusted and trusted peers (docs/configuration.md, "Forwarding
// headers")
// ---------------------------------------------------------------------------------------------

/// A request for `target` with `headers` (whole lines, CRLF included) sent on a new connection
/// from 127.0.0.1; what the backend received.
async fn forwarded(proxy: &Running, backend: &Backend, target: &str, headers: &str) -> Received {
    let request = format!("GET {target} HTTP/1.1\r\nHost: fulcrum.test\r\n{headers}\r\n");
    let r = exchange(proxy.addr, request.as_bytes()).await;
    assert_eq!(r.status, 200, "{target}: {:?}", lossy(&r.raw));
    backend
        .requests()
        .into_iter()
        .find(|r| r.target() == target)
        .unwrap_or_else(|| panic!("{target} did not reach the backend"))
}

/// What a client that is not a trusted proxy says about itself is never passed on: every
/// forwarding header is ours, from the connection's address.
#[tokio::test]
async fn forwarding_headers_from_an_untrusted_peer_are_replaced() {
    let backend = Backend::echo().await;
    let proxy = start(settings(backend.addr)).await;
    let spoofed = "X-Forwarded-For: 6.6.6.6\r\nForwarded: for=6.6.6.6;host=evil.test\r\n\
                   X-Real-IP: 6.6.6.6\r\nx-forwarded-host: evil.test\r\n\
                   X-Forwarded-Proto: https\r\nX-Forwarded-For: 6.6.6.7\r\n";
    for (target, headers) in [("/spoofed", spoofed), ("/plain", "")] {
        let received = forwarded(&proxy, &backend, target, headers).await;
        let head = &received.head;
        assert_eq!(head.values("x-forwarded-for"), ["127.0.0.1"], "{target}");
        assert_eq!(
            head.values("forwarded"),
            ["for=127.0.0.1;proto=http;host=\"fulcrum.test\""],
            "{target}"
        );
        assert_eq!(head.values("x-real-ip"), ["127.0.0.1"], "{target}");
        assert_eq!(head.values("x-forwarded-proto"), ["http"], "{target}");
        assert_eq!(
            head.values("x-forwarded-host"),
            Vec::<&str>::new(),
            "{target}"
        );
        assert!(find(&received.raw, b"6.6.6").is_none(), "{target}");
        assert!(find(&received.raw, b"evil").is_none(), "{target}");
    }
}

/// From a trusted proxy (the test client is 127.0.0.1): its X-Forwarded-For and Forwarded are
/// appended to, X-Forwarded-Host and X-Forwarded-Proto pass, and X-Real-IP is the client as
/// nginx's realip module (`real_ip_recursive on`) finds it in X-Forwarded-For.
#[tokio::test]
async fn forwarding_headers_from_a_trusted_peer_are_appended_to() {
    let backend = Backend::echo().await;
    let mut settings = settings(backend.addr);
    settings.listeners[0].trusted_proxies = vec![
        "127.0.0.0/8".parse().unwrap(),
        "10.0.0.0/8".parse().unwrap(),
    ];
    let proxy = start(settings).await;

    let received = forwarded(
        &proxy,
        &backend,
        "/chain",
        "X-Forwarded-For: 203.0.113.7\r\nForwarded: for=203.0.113.7\r\n\
         X-Real-IP: 6.6.6.6\r\nX-Forwarded-Host: app.test\r\n\
         X-Forwarded-Proto: https\r\nx-forwarded-for: 10.1.2.3\r\n",
    )
    .await;
    let head = &received.head;
    assert_eq!(
        head.values("x-forwarded-for"),
        ["203.0.113.7, 10.1.2.3, 127.0.0.1"]
    );
    assert_eq!(
        head.values("forwarded"),
        ["for=203.0.113.7, for=127.0.0.1;proto=http;host=\"fulcrum.test\""]
    );
    // 127.0.0.1 and 10.1.2.3 are trusted; 203.0.113.7 is the first address that is not.
    assert_eq!(head.values("x-real-ip"), ["203.0.113.7"]);
    assert_eq!(head.values("x-forwarded-host"), ["app.test"]);
    assert_eq!(head.values("x-forwarded-proto"), ["https"]);
    assert!(find(&received.raw, b"6.6.6.6").is_none());

    // Nothing sent: ours alone, as from anyone.
    let received = forwarded(&proxy, &backend, "/direct", "").await;
    let head = &received.head;
    assert_eq!(head.values("x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(head.values("x-real-ip"), ["127.0.0.1"]);
    assert_eq!(head.values("x-forwarded-proto"), ["http"]);

    // nginx's answers (1.22.1, same trusted ranges): every address trusted: the leftmost;
    // an element that is not an address ends the walk at the last address that was one.
    for (target, xff, real_ip) in [
        ("/all-trusted", "10.0.0.2, 10.0.0.1", "10.0.0.2"),
        ("/junk", "203.0.113.7, unknown, 10.0.0.1", "10.0.0.1"),
        ("/junk-first", "unknown", "127.0.0.1"),
        ("/ports", "[2001:db8::7]:443, 10.0.0.1:8080", "2001:db8::7"),
    ] {
        let received = forwarded(
            &proxy,
            &backend,
            target,
            &format!("X-Forwarded-For: {xff}\r\n"),
        )
        .await;
        assert_eq!(received.head.values("x-real-ip"), [real_ip], "{target}");
    }
}
