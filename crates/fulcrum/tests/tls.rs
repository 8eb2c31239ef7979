//! TLS termination against a running `fulcrum run`: certificates made by the test (rcgen, a
//! test CA), clients that verify them (rustls and curl), and what an operator does: several
//! sites chosen by SNI, a certificate renewed and reloaded under an open connection, a client
//! that resumes its session, clients that send garbage or stall in the handshake.
//!
//! A listener offers `h2` in ALPN only with `http2 = true`: without it, `http/1.1` is chosen
//! even when the client offers `h2` first (checked); with it, `h2` is, and `curl --http2` and
//! `curl --http1.1` are both answered.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Running, TempDir, TempFile};
use rustls::pki_types::{CertificateDer, ServerName};

// ---------------------------------------------------------------------------------------------
// Certificates

/// A test certificate authority, which signs the sites' certificates.
struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    der: CertificateDer<'static>,
    pem: String,
}

/// One site's certificate as written to disk.
struct Site {
    der: CertificateDer<'static>,
    cert: PathBuf,
    key: PathBuf,
}

impl Ca {
    fn new() -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "fulcrum test CA");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca {
            der: cert.der().clone(),
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate for `names` (DNS names or IP addresses) signed by the CA, written to
    /// `dir/{file}.pem` and `dir/{file}.key`.
    fn site(&self, dir: &Path, file: &str, names: &[&str]) -> Site {
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, names[0]);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let site = Site {
            der: cert.der().clone(),
            cert: dir.join(format!("{file}.pem")),
            key: dir.join(format!("{file}.key")),
        };
        // Written whole then renamed, as a certificate manager does: a reload never reads a
        // half-written file.
        for (path, text) in [(&site.cert, cert.pem()), (&site.key, key.serialize_pem())] {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, path).unwrap();
        }
        site
    }

    fn write_pem(&self, dir: &Path) -> PathBuf {
        let path = dir.join("ca.pem");
        std::fs::write(&path, &self.pem).unwrap();
        path
    }
}

// ---------------------------------------------------------------------------------------------
// A backend and clients

/// A plain HTTP/1.1 backend that answers every request with the head it received, keeping
/// connections alive.
fn echo_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // The threads end with the test process; every socket they hold is on loopback.
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut s = stream;
                let mut buf = Vec::new();
                loop {
                    let Some(end) = head_end(&mut s, &mut buf) else {
                        return;
                    };
                    let head: Vec<u8> = buf.drain(..end).collect();
                    // `GET /big/N`: N bytes; anything else: the head received.
                    let big = String::from_utf8_lossy(&head)
                        .strip_prefix("GET /big/")
                        .and_then(|rest| rest.split(' ').next()?.parse::<usize>().ok());
                    let body = match big {
                        Some(n) => vec![b'x'; n],
                        None => head,
                    };
                    let answer =
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                    if s.write_all(answer.as_bytes()).is_err() || s.write_all(&body).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// Reads into `buf` until it holds a blank line; the length of the head with it.
fn head_end(s: &mut impl Read, buf: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(i + 4);
        }
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// One GET on `s`: the response head and body (Content-Length framed).
fn get(s: &mut (impl Read + Write), host: &str, path: &str) -> (String, String) {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
    s.write_all(request.as_bytes()).unwrap();
    s.flush().unwrap();
    read_answer(s)
}

/// A response's head and body (Content-Length framed).
fn read_answer(s: &mut impl Read) -> (String, String) {
    let mut buf = Vec::new();
    let end = head_end(s, &mut buf).expect("a response head");
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .expect("a Content-Length");
    while buf.len() < end + length {
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "the body was cut: {head}");
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = String::from_utf8_lossy(&buf[end..end + length]).into_owned();
    (head, body)
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A client configuration trusting `ca`, offering `versions` and, in ALPN, `h2` then
/// `http/1.1` (as browsers do).
fn client_config(
    ca: &Ca,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der.clone()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(versions)
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A TLS connection to `addr` asking for `name` (an IP address sends no SNI), its handshake
/// done.
fn connect(config: &Arc<rustls::ClientConfig>, addr: SocketAddr, name: &str) -> Tls {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let name = ServerName::try_from(name.to_owned()).unwrap();
    let conn = rustls::ClientConnection::new(Arc::clone(config), name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        tls.conn
            .complete_io(&mut tls.sock)
            .expect("the handshake completes");
    }
    tls
}

/// The end-entity certificate the server sent.
fn served(tls: &Tls) -> CertificateDer<'static> {
    tls.conn.peer_certificates().expect("a certificate")[0].clone()
}

fn config_text(backend: SocketAddr, tls: &[&Site], extra: &str) -> String {
    let mut text = format!(
        "workers = 2\naccess_log = false\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n{extra}\n"
    );
    for site in tls {
        text.push_str(&format!(
            "  [[listener.tls]]\n  cert = \"{}\"\n  key = \"{}\"\n",
            site.cert.display(),
            site.key.display()
        ));
    }
    text.push_str(&format!(
        "\n[[upstream]]\nname = \"web\"\nalgorithm = \"round_robin\"\n  [[upstream.backend]]\n  addr = \"{backend}\"\n"
    ));
    text
}

/// Waits for the log line that ends a reload; returns it, after the lines before it.
fn reload_logged(fulcrum: &Running) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut lines = String::new();
    loop {
        let line = fulcrum.next_line(deadline);
        lines.push_str(&line);
        lines.push('\n');
        if line.contains("configuration reloaded") || line.contains("reload refused") {
            return lines;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The cases

#[test]
fn sni_chooses_the_certificate_and_requests_go_through_over_https() {
    let dir = TempDir::new("tls", "sni");
    let ca = Ca::new();
    let a = ca.site(&dir.0, "a", &["a.test", "127.0.0.1"]);
    let b = ca.site(&dir.0, "b", &["*.b.test"]);
    let backend = echo_backend();
    let file = TempFile::new("tls-sni.toml", &config_text(backend, &[&a, &b], ""));
    let fulcrum = Running::start(&file, 1);
    let addr = fulcrum.addr_of("web");
    let config = client_config(&ca, &[&rustls::version::TLS13, &rustls::version::TLS12]);

    for (sni, expected, which) in [
        ("a.test", &a, "a"),
        ("www.b.test", &b, "b (wildcard)"),
        ("api.b.test", &b, "b (wildcard)"),
        // No SNI (an IP address is never sent as SNI): the first entry, the default.
        ("127.0.0.1", &a, "a (default)"),
    ] {
        let mut tls = connect(&config, addr, sni);
        assert!(
            served(&tls) == expected.der,
            "{sni}: expected {which}'s certificate"
        );
        assert_eq!(
            tls.conn.alpn_protocol(),
            Some(&b"http/1.1"[..]),
            "{sni}: http/1.1 chosen although the client offered h2 first"
        );
        let (head, body) = get(&mut tls, sni, "/hello");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(body.starts_with("GET /hello HTTP/1.1\r\n"), "{body}");
        assert!(body.contains("X-Forwarded-Proto: https\r\n"), "{body}");
        assert!(body.contains(";proto=https"), "{body}");
    }
    // A name no certificate has: the default certificate, which the client then refuses.
    let tcp = TcpStream::connect(addr).unwrap();
    let conn = rustls::ClientConnection::new(
        Arc::clone(&config),
        ServerName::try_from("other.test").unwrap(),
    )
    .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let refused = loop {
        match tls.conn.complete_io(&mut tls.sock) {
            Ok(_) if tls.conn.is_handshaking() => continue,
            Ok(_) => break None,
            Err(e) => break Some(e),
        }
    };
    let refused = refused.expect("the default certificate does not name other.test");
    assert!(
        refused
            .to_string()
            .contains("not valid for name \"other.test\""),
        "{refused}"
    );

    // TLS 1.2 only: served as well.
    let tls12 = client_config(&ca, &[&rustls::version::TLS12]);
    let mut tls = connect(&tls12, addr, "a.test");
    assert_eq!(
        tls.conn.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
    let (head, _) = get(&mut tls, "a.test", "/v12");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    // curl, verifying against the test CA, over HTTP/1.1.
    if common::installed("curl", "--version") {
        let ca_file = ca.write_pem(&dir.0);
        let port = addr.port();
        let out = Command::new("curl")
            .args(["--silent", "--show-error", "--http1.1", "--max-time", "10"])
            .arg("--cacert")
            .arg(&ca_file)
            .args(["--resolve", &format!("www.b.test:{port}:127.0.0.1")])
            .arg(format!("https://www.b.test:{port}/from-curl"))
            .output()
            .unwrap();
        let body = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "curl: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(body.starts_with("GET /from-curl HTTP/1.1\r\n"), "{body}");
        assert!(body.contains("X-Forwarded-Proto: https"), "{body}");
    } else {
        eprintln!("curl is not installed: the curl case is skipped (scripts/test installs it)");
    }
}

#[test]
fn sessions_resume_with_tls13_tickets_and_tls12() {
    let dir = TempDir::new("tls", "resume");
    let ca = Ca::new();
    let a = ca.site(&dir.0, "a", &["a.test"]);
    let backend = echo_backend();
    let file = TempFile::new("tls-resume.toml", &config_text(backend, &[&a], ""));
    let fulcrum = Running::start(&file, 1);
    let addr = fulcrum.addr_of("web");

    for (label, versions) in [
        ("TLS 1.3", &[&rustls::version::TLS13][..]),
        ("TLS 1.2", &[&rustls::version::TLS12][..]),
    ] {
        // One client configuration keeps the sessions it was given, as a browser does.
        let config = client_config(&ca, versions);
        let mut kinds = Vec::new();
        for i in 0..3 {
            let mut tls = connect(&config, addr, "a.test");
            kinds.push(tls.conn.handshake_kind());
            // A request: a TLS 1.3 ticket comes after the handshake, read with the answer.
            let (head, _) = get(&mut tls, "a.test", &format!("/resume/{i}"));
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        }
        use rustls::HandshakeKind::{Full, Resumed};
        assert_eq!(
            kinds,
            [Some(Full), Some(Resumed), Some(Resumed)],
            "{label}: the second and third handshakes resume"
        );
    }
}

#[test]
fn a_renewed_certificate_is_served_after_a_reload_and_open_connections_go_on() {
    let dir = TempDir::new("tls", "reload");
    let ca = Ca::new();
    let old = ca.site(&dir.0, "site", &["a.test"]);
    let backend = echo_backend();
    let file = TempFile::new("tls-reload.toml", &config_text(backend, &[&old], ""));
    let fulcrum = Running::start(&file, 1);
    let addr = fulcrum.addr_of("web");
    let config = client_config(&ca, &[&rustls::version::TLS13]);

    let mut open = connect(&config, addr, "a.test");
    assert!(served(&open) == old.der);
    let (head, _) = get(&mut open, "a.test", "/before");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    // Renewed on disk under the same names, then SIGHUP.
    let new = ca.site(&dir.0, "site", &["a.test"]);
    assert!(new.der != old.der);
    fulcrum.hangup();
    let line = reload_logged(&fulcrum);
    assert!(line.contains("configuration reloaded"), "{line}");

    // A fresh client (no session to resume) sees the new certificate.
    let fresh = client_config(&ca, &[&rustls::version::TLS13]);
    let mut tls = connect(&fresh, addr, "a.test");
    assert!(
        served(&tls) == new.der,
        "the renewed certificate after the reload"
    );
    let (head, _) = get(&mut tls, "a.test", "/after");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    // The connection opened before the reload goes on, and is not told to close.
    for i in 0..2 {
        let (head, _) = get(&mut open, "a.test", &format!("/still-open/{i}"));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            !head.to_ascii_lowercase().contains("connection: close"),
            "an open connection is not retired by new certificates: {head}"
        );
    }

    // A session from before the reload still resumes (the ticket keys are kept).
    let tls = connect(&config, addr, "a.test");
    assert_eq!(
        tls.conn.handshake_kind(),
        Some(rustls::HandshakeKind::Resumed)
    );

    // A broken certificate: the reload is refused, saying where, and the renewed one stays.
    std::fs::write(&new.cert, "not a certificate\n").unwrap();
    fulcrum.hangup();
    let said = reload_logged(&fulcrum);
    assert!(said.contains("reload refused"), "{said}");
    assert!(
        said.contains("listener[0].tls[0].cert: ") && said.contains("holds no PEM certificate"),
        "{said}"
    );
    let tls = connect(&fresh_config(&ca), addr, "a.test");
    assert!(served(&tls) == new.der, "the running certificate stays");
}

/// A large answer to a client that reads slowly (a small receive buffer): every byte arrives,
/// none is left in the TLS layer's buffer when the socket was full at the last write.
#[test]
fn a_large_answer_reaches_a_slow_reader_whole() {
    let dir = TempDir::new("tls", "large");
    let ca = Ca::new();
    let a = ca.site(&dir.0, "a", &["a.test"]);
    let backend = echo_backend();
    let file = TempFile::new("tls-large.toml", &config_text(backend, &[&a], ""));
    let fulcrum = Running::start(&file, 1);
    let addr = fulcrum.addr_of("web");
    let config = client_config(&ca, &[&rustls::version::TLS13]);

    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&addr.into()).unwrap();
    let tcp: TcpStream = socket.into();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let conn =
        rustls::ClientConnection::new(config, ServerName::try_from("a.test").unwrap()).unwrap();
    let tls = rustls::StreamOwned::new(conn, tcp);
    let mut slow = Slow(tls);
    for size in [8_000_000, 300_001] {
        let (head, body) = get(&mut slow, "a.test", &format!("/big/{size}"));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(body.len(), size);
    }
}

/// A client that reads slowly: a pause before every read, so fulcrum's writes keep finding
/// its socket full (the pause is the behaviour under test, not a wait for a condition).
struct Slow(Tls);

impl Read for Slow {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        std::thread::sleep(Duration::from_millis(1));
        self.0.read(buf)
    }
}

impl Write for Slow {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

fn fresh_config(ca: &Ca) -> Arc<rustls::ClientConfig> {
    client_config(ca, &[&rustls::version::TLS13])
}

#[test]
fn garbage_and_stalled_handshakes_are_closed_and_counted() {
    let dir = TempDir::new("tls", "garbage");
    let ca = Ca::new();
    let a = ca.site(&dir.0, "a", &["a.test"]);
    let backend = echo_backend();
    let text = config_text(backend, &[&a], "client_header_timeout = \"1s\"")
        + "\n[admin]\nlisten = \"127.0.0.1:0\"\n";
    let file = TempFile::new("tls-garbage.toml", &text);
    let fulcrum = Running::start(&file, 1);
    let addr = fulcrum.addr_of("web");
    // The start-up line says the listener speaks TLS.
    assert!(
        fulcrum
            .started
            .iter()
            .any(|l| l.contains(" listening") && l.contains("protocol=https ")),
        "{:?}",
        fulcrum.started
    );

    // Plain HTTP to a TLS listener: not a ClientHello. Answered 400 at once, saying why (as
    // nginx answers it), then closed — not at the timeout.
    let mut plain = TcpStream::connect(addr).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let end = plain.read_to_end(&mut got);
    assert!(end.is_ok() || got.is_empty(), "{end:?}");
    // Answered, so not closed by the handshake timeout (which closes without a word); no
    // bound on the time, which a loaded machine could break.
    let answer = String::from_utf8_lossy(&got);
    assert!(
        answer.starts_with("HTTP/1.1 400 Bad Request\r\n")
            && answer.contains("a plain HTTP request was sent to an HTTPS port"),
        "{answer:?}"
    );

    // A client that starts a ClientHello and stalls, then one that sends nothing: each is
    // closed by the handshake timeout (client_header_timeout, 1 s), not held.
    let mut noise = TcpStream::connect(addr).unwrap();
    let noise_from = Instant::now();
    // The first bytes of a handshake record's header, and no more.
    noise.write_all(&[0x16, 0x03, 0x01]).unwrap();
    let silent = TcpStream::connect(addr).unwrap();
    let silent_from = Instant::now();
    for (mut stalled, started) in [(noise, noise_from), (silent, silent_from)] {
        stalled
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut rest = Vec::new();
        let end = stalled.read_to_end(&mut rest);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(800) && took < Duration::from_secs(4),
            "closed by the handshake timeout, took {took:?}: {end:?} {rest:?}"
        );
    }

    // The proxy is unharmed, and counted the three failures.
    let config = client_config(&ca, &[&rustls::version::TLS13]);
    let mut tls = connect(&config, addr, "a.test");
    let (head, _) = get(&mut tls, "a.test", "/after-garbage");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let admin = fulcrum.admin.expect("the admin listener");
    let mut scrape = TcpStream::connect(admin).unwrap();
    scrape
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let (_, metrics) = get(&mut scrape, "localhost", "/metrics");
    assert!(
        metrics.contains("fulcrum_tls_handshake_failures_total 3"),
        "{metrics}"
    );
}

/// What a client that is not speaking TLS gets on a TLS port, against Debian's nginx on an
/// `ssl` listener with the same certificate: for each probe the status (0: closed without an
/// answer) and whether the connection was closed after it. nginx (`ngx_http_ssl_handshake`)
/// peeks at the first byte: 0x16 (a TLS record) or one with the high bit set (an SSLv2 hello)
/// starts a handshake; anything else is read as plain HTTP and answered 400 (its code 497),
/// the connection then closed.
#[test]
fn plain_http_on_a_tls_port_is_answered_as_nginx_answers_it() {
    if !common::installed("nginx", "-v") {
        return;
    }
    let dir = TempDir::new("tls", "plain-nginx");
    let ca = Ca::new();
    let site = ca.site(&dir.0, "localhost", &["localhost"]);
    let port = common::HeldPort::for_server();
    let d = dir.path();
    let conf = format!(
        "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nevents {{ worker_connections 64; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};\n  \
         uwsgi_temp_path {d}; scgi_temp_path {d};\n  \
         server {{ listen 127.0.0.1:{} ssl; ssl_certificate {}; ssl_certificate_key {};\n    \
         location / {{ return 200 \"ok\\n\"; }} }}\n}}\n",
        port.port(),
        site.cert.display(),
        site.key.display()
    );
    let _nginx = common::spawn_nginx(&dir, &conf);
    let nginx = port.addr;
    common::wait_until(Duration::from_secs(10), "nginx answers", || {
        TcpStream::connect(nginx)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    let file = TempFile::new(
        "tls-plain-nginx.toml",
        &config_text(echo_backend(), &[&site], ""),
    );
    let fulcrum = Running::start(&file, 1);
    let ours = fulcrum.addr_of("web");

    let probes: [(&str, &[u8]); 5] = [
        ("GET", b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"),
        ("HEAD, HTTP/1.0", b"HEAD / HTTP/1.0\r\n\r\n"),
        (
            "a lower-case method",
            b"get / HTTP/1.1\r\nHost: localhost\r\n\r\n",
        ),
        ("control bytes", b"\x01\x02\x03\x04 / HTTP/1.1\r\n\r\n"),
        (
            "an SSLv2-style first byte",
            b"\x80\x2e\x01\x00\x02\x00\x15\x00\x00\x00\x10",
        ),
    ];
    // (status or 0, closed by the server)
    let answer = |to: SocketAddr, bytes: &[u8]| -> (u16, bool) {
        let mut s = TcpStream::connect(to).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(bytes).unwrap();
        let mut got = Vec::new();
        let closed = s.read_to_end(&mut got).is_ok() || got.is_empty();
        let text = String::from_utf8_lossy(&got);
        let status = text
            .strip_prefix("HTTP/1.1 ")
            .and_then(|r| r.get(..3))
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (status, closed)
    };
    for (what, bytes) in probes {
        let theirs = answer(nginx, bytes);
        let mine = answer(ours, bytes);
        assert_eq!(
            mine, theirs,
            "{what}: fulcrum (status, closed) against nginx's"
        );
    }
    // Our body says why, in our words.
    let mut s = TcpStream::connect(ours).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"get / HTTP/1.1\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(
        String::from_utf8_lossy(&got).contains("a plain HTTP request was sent to an HTTPS port"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
}

#[test]
fn check_names_the_line_of_a_missing_a_non_pem_and_a_mismatched_file() {
    let dir = TempDir::new("tls", "check");
    let ca = Ca::new();
    let a = ca.site(&dir.0, "a", &["a.test"]);
    let b = ca.site(&dir.0, "b", &["b.test"]);
    let garbage = dir.0.join("garbage.pem");
    std::fs::write(&garbage, "hello\n").unwrap();
    let backend: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let cases = [
        (
            Site {
                der: a.der.clone(),
                cert: dir.0.join("missing.pem"),
                key: a.key.clone(),
            },
            "listener[0].tls[0].cert: cannot read",
        ),
        (
            Site {
                der: a.der.clone(),
                cert: garbage.clone(),
                key: a.key.clone(),
            },
            "listener[0].tls[0].cert: ",
        ),
        (
            Site {
                der: a.der.clone(),
                cert: a.cert.clone(),
                key: b.key.clone(),
            },
            "listener[0].tls[0].key: the private key in",
        ),
    ];
    for (i, (site, expected)) in cases.iter().enumerate() {
        let file = TempFile::new(
            &format!("tls-check-{i}.toml"),
            &config_text(backend, &[site], ""),
        );
        let out = common::fulcrum()
            .args(["check", "--config"])
            .arg(&file.0)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        // The `cert` line is the 9th of the file, the `key` line the 10th.
        let line = if expected.contains(".key:") { 10 } else { 9 };
        assert!(
            stderr.contains(&format!("tls-check-{i}.toml:{line}:")) && stderr.contains(expected),
            "{stderr}"
        );
    }
    let file = TempFile::new("tls-check-ok.toml", &config_text(backend, &[&a, &b], ""));
    let out = common::fulcrum()
        .args(["check", "--config"])
        .arg(&file.0)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------------
// TLS to backends

/// A TLS backend (rustls, blocking) serving `site`'s certificate, answering every request
/// with the head it received, keeping connections alive; counts the TLS sessions it accepted.
fn tls_backend(site: &Site) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject as _;
    let chain = vec![site.der.clone()];
    let key = PrivateKeyDer::from_pem_file(&site.key).unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let sessions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&sessions);
    // The threads end with the test process; every socket they hold is on loopback.
    std::thread::spawn(move || {
        for tcp in listener.incoming().map_while(Result::ok) {
            let config = Arc::clone(&config);
            let counted = Arc::clone(&counted);
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut s = rustls::StreamOwned::new(conn, tcp);
                while s.conn.is_handshaking() {
                    if s.conn.complete_io(&mut s.sock).is_err() {
                        return;
                    }
                }
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = Vec::new();
                while let Some(end) = head_end(&mut s, &mut buf) {
                    let head: Vec<u8> = buf.drain(..end).collect();
                    let answer =
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", head.len());
                    if s.write_all(answer.as_bytes()).is_err() || s.write_all(&head).is_err() {
                        return;
                    }
                    let _ = s.flush();
                }
            });
        }
    });
    (addr, sessions)
}

#[test]
fn backends_over_tls_are_verified_and_their_connections_kept_alive() {
    let dir = TempDir::new("tls", "backend");
    let ca = Ca::new();
    let good = tls_backend(&ca.site(&dir.0, "backend", &["backend.test"]));
    // Signed by a CA fulcrum does not trust.
    let stranger = Ca::new();
    let bad = tls_backend(&stranger.site(&dir.0, "stranger", &["backend.test"]));
    // Trusted, but for another name.
    let misnamed = tls_backend(&ca.site(&dir.0, "other", &["other.test"]));
    let ca_file = ca.write_pem(&dir.0);
    let upstream = |name: &str, backend: SocketAddr| {
        format!(
            "[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"{name}\"\n\n\
             [[upstream]]\nname = \"{name}\"\nretries = 0\ntls = true\ntls_ca = \"{}\"\n\
             tls_server_name = \"backend.test\"\n  [[upstream.backend]]\n  addr = \"{backend}\"\n\n",
            ca_file.display()
        )
    };
    let mixed = upstream("mixed", bad.0).replace("retries = 0\n", "")
        + &format!("  [[upstream.backend]]\n  addr = \"{}\"\n\n", good.0);
    let text = format!(
        "workers = 1\naccess_log = false\n\n{}{}{}{mixed}",
        upstream("good", good.0),
        upstream("bad", bad.0),
        upstream("misnamed", misnamed.0)
    );
    let file = TempFile::new("tls-backend.toml", &text);
    let fulcrum = Running::start(&file, 4);

    // Three requests over one client connection: one TLS session to the backend, reused.
    let mut client = TcpStream::connect(fulcrum.addr_of("good")).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    for i in 0..3 {
        let (head, body) = get(&mut client, "app.test", &format!("/over-tls/{i}"));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            body.starts_with(&format!("GET /over-tls/{i} HTTP/1.1\r\n")),
            "{body}"
        );
    }
    assert_eq!(
        good.1.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the kept-alive TLS connection was reused"
    );

    // Untrusted, and misnamed: 502, and the log says why.
    for (listener, reason) in [
        // (The stranger CA has the same name as ours: its signature is what fails.)
        ("bad", "invalid peer certificate: BadSignature"),
        (
            "misnamed",
            "certificate not valid for name \"backend.test\"",
        ),
    ] {
        let mut client = TcpStream::connect(fulcrum.addr_of(listener)).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let (head, _) = get(&mut client, "app.test", "/refused");
        assert!(head.starts_with("HTTP/1.1 502"), "{listener}: {head}");
        let deadline = Instant::now() + Duration::from_secs(5);
        let line = loop {
            let line = fulcrum.next_line(deadline);
            if line.contains("attempt failed") && line.contains(&format!("upstream={listener}")) {
                break line;
            }
        };
        assert!(
            line.contains("TLS handshake with the backend failed") && line.contains(reason),
            "{line}"
        );
    }
    assert_eq!(bad.1.load(std::sync::atomic::Ordering::SeqCst), 0);

    // Beside a good backend, the untrusted one costs no request: its failed handshake is
    // retried on the next backend (nothing was sent), as a refused connection is.
    let mut client = TcpStream::connect(fulcrum.addr_of("mixed")).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    for i in 0..4 {
        let (head, _) = get(&mut client, "app.test", &format!("/mixed/{i}"));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
}

#[test]
fn health_checks_of_a_tls_upstream_verify_the_backends() {
    let dir = TempDir::new("tls", "health");
    let ca = Ca::new();
    let good = tls_backend(&ca.site(&dir.0, "backend", &["backend.test"]));
    let misnamed = tls_backend(&ca.site(&dir.0, "other", &["other.test"]));
    let ca_file = ca.write_pem(&dir.0);
    let text = format!(
        "workers = 1\naccess_log = false\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"checked\"\n\n\
         [[upstream]]\nname = \"checked\"\ntls = true\ntls_ca = \"{}\"\n\
         tls_server_name = \"backend.test\"\n\
         [upstream.health_check]\ntype = \"http\"\npath = \"/health\"\ninterval = \"200ms\"\n\
         timeout = \"200ms\"\nrise = 1\nfall = 1\n\
           [[upstream.backend]]\n  addr = \"{}\"\n\
           [[upstream.backend]]\n  addr = \"{}\"\n",
        ca_file.display(),
        good.0,
        misnamed.0
    );
    let file = TempFile::new("tls-health.toml", &text);
    let fulcrum = Running::start(&file, 1);

    // The misnamed backend fails its check for its certificate; the good one never fails.
    let deadline = Instant::now() + Duration::from_secs(10);
    let line = loop {
        let line = fulcrum.next_line(deadline);
        assert!(
            !(line.contains("failed its health checks") && line.contains(&good.0.to_string())),
            "{line}"
        );
        if line.contains("failed its health checks") {
            break line;
        }
    };
    assert!(
        line.contains(&misnamed.0.to_string())
            && line.contains("certificate not valid for name \"backend.test\""),
        "{line}"
    );
    // Requests go to the good backend alone.
    let mut client = TcpStream::connect(fulcrum.addr_of("checked")).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    for i in 0..4 {
        let (head, _) = get(&mut client, "app.test", &format!("/checked/{i}"));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    assert!(good.1.load(std::sync::atomic::Ordering::SeqCst) >= 2);
}

/// A listener with `http2 = true` and TLS: `h2` by ALPN for a client that offers it (and its
/// ClientHello is not taken for a failed h2c preface), HTTP/1.1 for one that offers only
/// `http/1.1`; `curl --http2` and `curl --http1.1` both answered by the backend, with the
/// forwarding headers saying `https`.
#[test]
fn a_tls_listener_with_http2_speaks_h2_by_alpn_and_http11_to_the_rest() {
    let dir = TempDir::new("tls", "h2");
    let ca = Ca::new();
    let a = ca.site(&dir.0, "a", &["a.test"]);
    let backend = echo_backend();
    let file = TempFile::new("tls-h2.toml", &config_text(backend, &[&a], "http2 = true"));
    let fulcrum = Running::start(&file, 1);
    let addr = fulcrum.addr_of("web");
    // `client_config` offers h2 first.
    let config = client_config(&ca, &[&rustls::version::TLS13]);
    let tls = connect(&config, addr, "a.test");
    assert_eq!(tls.conn.alpn_protocol(), Some(&b"h2"[..]));
    drop(tls);
    let mut only11 = (*config).clone();
    only11.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut tls = connect(&Arc::new(only11), addr, "a.test");
    assert_eq!(tls.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (head, body) = get(&mut tls, "a.test", "/h2-listener");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains("X-Forwarded-Proto: https"), "{body}");

    if !common::installed("curl", "--version") {
        return;
    }
    let ca_file = ca.write_pem(&dir.0);
    let port = addr.port();
    for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let out = Command::new("curl")
            .args(["--silent", "--show-error", flag, "--max-time", "10"])
            .args(["--write-out", "\nversion=%{http_version}"])
            .arg("--cacert")
            .arg(&ca_file)
            .args(["--resolve", &format!("a.test:{port}:127.0.0.1")])
            .arg(format!("https://a.test:{port}/from-curl"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "curl {flag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.ends_with(&format!("version={version}")),
            "curl {flag}: {text}"
        );
        // The backend saw the request as HTTP/1.1, said to come over https.
        assert!(text.starts_with("GET /from-curl HTTP/1.1\r\n"), "{text}");
        assert!(text.contains("X-Forwarded-Proto: https"), "{text}");
    }
}

/// WebSocket over a TLS listener (`wss://`): the upgrade's tunnel runs over the client's TLS
/// stream (a tungstenite client on tokio-rustls, a tungstenite echo backend in plain TCP).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrades_run_over_a_tls_listener() {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;

    let dir = TempDir::new("tls", "wss");
    let ca = Ca::new();
    let a = ca.site(&dir.0, "a", &["a.test"]);
    let backend = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = backend.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = backend.accept().await {
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if msg.is_text() && ws.send(msg).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let file = TempFile::new(
        "tls-wss.toml",
        &config_text(backend_addr, &[&a], "upgrade = [\"websocket\"]"),
    );
    let fulcrum = Running::start(&file, 1);
    let addr = fulcrum.addr_of("web");

    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(client_config(&ca, &[&rustls::version::TLS13]))
        .connect(ServerName::try_from("a.test").unwrap(), tcp)
        .await
        .unwrap();
    let (mut ws, response) = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::client_async("wss://a.test/chat", tls),
    )
    .await
    .expect("the upgrade in time")
    .expect("the upgrade");
    assert_eq!(response.status(), 101);
    for i in 0..3 {
        let text = format!("over tls {i}");
        ws.send(Message::text(text.clone())).await.unwrap();
        let echoed = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("the echo in time")
            .expect("a message")
            .unwrap();
        assert_eq!(echoed, Message::text(text));
    }
    ws.close(None).await.unwrap();
}
