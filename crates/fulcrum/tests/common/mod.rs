//! What the binary's test files share.

#![allow(dead_code)]

pub mod chromium;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `{pid}-{n}-{name}`: a scratch path's own part, `n` counting every one this process makes.
/// The tests of one binary run in parallel in one process, so the pid alone does not keep them
/// apart: two tests may pick one name (both failover tests once shared `ha-failover`, and the
/// first to finish removed the other's directory), and one test may make two files through
/// one helper (dropping the first would remove the second).
fn unique(name: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static MADE: AtomicU64 = AtomicU64::new(0);
    let n = MADE.fetch_add(1, Ordering::Relaxed);
    format!("{}-{n}-{name}", std::process::id())
}

/// A fresh directory under the system's temporary one, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `fulcrum-{suite}-{pid}-{n}-{name}` (see [`unique`]), empty.
    pub fn new(suite: &str, name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("fulcrum-{suite}-{}", unique(name)));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback port held by a bound socket that does not listen. Taking a free port by binding
/// port 0 and closing the socket leaves a window in which any process on the machine may get
/// the port (a bind to port 0, or a connect's source port: the idle-clients test alone makes
/// tens of thousands); a port with a bound socket is passed over by both, and connections to
/// it are refused while nothing listens on it.
pub struct HeldPort {
    _socket: socket2::Socket,
    pub addr: SocketAddr,
}

impl HeldPort {
    /// A port for a server this test starts, to bind and listen on while the port is held:
    /// held with SO_REUSEADDR, which lets one more socket that sets it bind the port as long as
    /// only one listens, and every server the tests start sets it when it listens (std and
    /// tokio, Go, memcached, redis). Drop it once the server listens.
    pub fn for_server() -> HeldPort {
        HeldPort::bind(true)
    }

    /// A port that refuses every connection for as long as it is held: no one else can bind
    /// it, SO_REUSEADDR or not.
    pub fn refusing() -> HeldPort {
        HeldPort::bind(false)
    }

    fn bind(reuse: bool) -> HeldPort {
        let socket =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket.set_reuse_address(reuse).unwrap();
        let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
        socket.bind(&loopback.into()).unwrap();
        let addr = socket.local_addr().unwrap().as_socket().unwrap();
        HeldPort {
            _socket: socket,
            addr,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

pub fn fulcrum() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fulcrum"))
}

/// A scratch file that is removed when dropped.
pub struct TempFile(pub PathBuf);

impl TempFile {
    /// `fulcrum-test-{pid}-{n}-{name}` (see [`unique`]), holding `text`.
    pub fn new(name: &str, text: &str) -> TempFile {
        let path = std::env::temp_dir().join(format!("fulcrum-test-{}", unique(name)));
        std::fs::write(&path, text).unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A running `fulcrum run`, killed when dropped.
pub struct Running {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
    /// (upstream, address) of each listener, as logged.
    pub listening: Vec<(String, SocketAddr)>,
    /// The lines it logged while starting (up to its last listening line).
    pub started: Vec<String>,
    /// The admin listener's address, as logged.
    pub admin: Option<SocketAddr>,
}

impl Running {
    /// Starts `fulcrum run` and waits until it has logged `n` listening addresses.
    pub fn start(config: &TempFile, n: usize) -> Running {
        Running::start_with(config, n, &[])
    }

    /// As [`Running::start`], with more arguments to `fulcrum run`.
    pub fn start_with(config: &TempFile, n: usize, args: &[&str]) -> Running {
        let mut child = fulcrum()
            .args(["run", "--config"])
            .arg(&config.0)
            .args(args)
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = lines_of(child.stderr.take().unwrap());
        let mut running = Running {
            child,
            lines,
            listening: Vec::new(),
            started: Vec::new(),
            admin: None,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while running.listening.len() < n {
            let line = running.next_line(deadline);
            if line.contains(" admin listener") {
                running.admin = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("listen="))
                    .and_then(|a| a.parse().ok());
            }
            running.started.push(line.clone());
            if line.contains(" listening") {
                let field = |name: &str| {
                    line.split_whitespace()
                        .find_map(|w| w.strip_prefix(name))
                        .unwrap_or_else(|| panic!("the listening line has {name}: {line}"))
                        .to_owned()
                };
                let addr = field("listen=").parse().unwrap();
                running.listening.push((field("upstream="), addr));
            }
        }
        running
    }

    /// The address of the listener sending to `upstream`.
    pub fn addr_of(&self, upstream: &str) -> SocketAddr {
        self.listening
            .iter()
            .find(|(u, _)| u == upstream)
            .unwrap_or_else(|| panic!("no listener for {upstream}: {:?}", self.listening))
            .1
    }

    pub fn next_line(&self, deadline: Instant) -> String {
        let left = deadline.saturating_duration_since(Instant::now());
        self.lines
            .recv_timeout(left)
            .expect("fulcrum wrote the expected line in time")
    }

    /// Sends SIGHUP (reload the configuration) to the process.
    pub fn hangup(&self) {
        let status = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "fulcrum did not stop after SIGTERM"
            );
            // Poll interval of a loop bounded by `deadline`.
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lines a child writes on `stream` (its stderr), read on a thread of their own as they
/// come.
pub fn lines_of(stream: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

pub fn backend_block(addrs: &[(SocketAddr, u32)]) -> String {
    addrs
        .iter()
        .map(|(a, w)| format!("  [[upstream.backend]]\n  addr = \"{a}\"\n  weight = {w}\n"))
        .collect()
}

/// Whether `program` can be run; tests that need it print why they skip when it cannot.
pub fn installed(program: &str, arg: &str) -> bool {
    let found = Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        println!(
            "SKIPPED: {program} is not installed (Debian: apt-get install -y {}); scripts/test and .ci/run install it",
            if program == "promtool" {
                "prometheus"
            } else {
                program
            }
        );
    }
    found
}

/// Asserts that `promtool check metrics` (Debian's prometheus) accepts `text`; says so and
/// passes when promtool is not installed (`.ci/run` and scripts/test install it).
pub fn assert_promtool_accepts(text: &str) {
    use std::io::Write as _;
    if !installed("promtool", "--version") {
        return;
    }
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An open-loop load on `target`: `rps` requests a second, evenly spaced, for `seconds`, from
/// `clients` addresses, each costing the backend 5 ms.
pub fn steady_load(target: SocketAddr, rps: f64, seconds: u64, clients: u32) -> lab::load::Plan {
    use lab::schedule::{Cost, Pattern, Spacing};
    lab::load::Plan {
        target,
        path: "/".to_owned(),
        trace: lab::schedule::trace(
            Pattern::Constant { rps },
            Spacing::Even,
            Duration::from_secs(seconds),
            Cost::Const { ms: 5.0 },
            clients,
            1,
        ),
        timeout: Duration::from_secs(10),
        mode: lab::load::Mode::Open,
        progress: None,
    }
}

/// Asserts that every one of the `sent` requests of a load run was answered 200.
pub fn assert_all_answered(outcomes: &[lab::load::Outcome], sent: usize) {
    assert_eq!(outcomes.len(), sent);
    let failed: Vec<_> = outcomes.iter().filter(|o| o.status != Some(200)).collect();
    assert!(
        failed.is_empty(),
        "{} of {sent} failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
}

/// Lab backends on loopback, one per name (each answers with its name).
pub async fn backends(names: &[&str]) -> Vec<lab::Backend> {
    let mut started = Vec::new();
    for name in names {
        let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
        started.push(lab::Backend::start(name, loopback).await.unwrap());
    }
    started
}

/// Polls `done` until it is `Ok`, failing with its last reason after `within`.
pub fn wait_until(within: Duration, what: &str, mut done: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + within;
    loop {
        match done() {
            Ok(()) => return,
            Err(why) => assert!(Instant::now() < deadline, "{what}: {why}"),
        }
        // Poll interval of a loop bounded by `deadline`.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The requests in flight on each backend of `upstream`, in configuration order, as the
/// admin listener at `admin` shows them.
pub fn in_flight(admin: SocketAddr, upstream: &str) -> Vec<u64> {
    backends_of(admin, upstream)
        .iter()
        .map(|b| b["in_flight"].as_u64().unwrap())
        .collect()
}

/// `GET path` on the admin listener at `admin`, addressed to it (the listener serves no other
/// `Host`).
pub async fn admin_get(admin: SocketAddr, path: &str) -> lab::Reply {
    let req = http::Request::get(path)
        .header(http::header::HOST, admin.to_string())
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    lab::Client::new(admin).send(req).await.unwrap()
}

/// The backends of `upstream` as the admin listener at `admin` shows them
/// (`GET /api/upstreams`), in configuration order.
pub fn backends_of(admin: SocketAddr, upstream: &str) -> Vec<serde_json::Value> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /api/upstreams HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let body = reply.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let v: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {reply}"));
    v["upstreams"]
        .as_array()
        .and_then(|all| all.iter().find(|u| u["name"] == upstream))
        .and_then(|u| u["backends"].as_array())
        .unwrap_or_else(|| panic!("no upstream {upstream}: {v}"))
        .clone()
}

/// `method path` on the admin listener at `admin` with exactly `headers` (no Host unless
/// given) and `body`, on a connection of its own: the status and the body.
pub fn admin_call(
    admin: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    let mut s = std::net::TcpStream::connect(admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).unwrap();
    let reply = String::from_utf8_lossy(&reply);
    let (head, body) = reply
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("the admin API answers: {reply:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {head}"));
    (status, body.to_owned())
}

/// A child process, killed and waited for when dropped.
pub struct ChildGuard(pub Child);

impl std::ops::Deref for ChildGuard {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Debian's nginx in the foreground with `conf` written to `dir`'s `nginx.conf`, `dir` its
/// prefix and `dir`'s `error.log` its error log from the start; its output discarded.
pub fn spawn_nginx(dir: &TempDir, conf: &str) -> ChildGuard {
    let conf_path = dir.0.join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let child = Command::new("nginx")
        .arg("-p")
        .arg(&dir.0)
        .arg("-c")
        .arg(&conf_path)
        .arg("-e")
        .arg(dir.0.join("error.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx runs (Debian: apt-get install -y nginx)");
    ChildGuard(child)
}

/// The resident memory of process `pid`, in KiB (`VmRSS` of /proc/PID/status).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// An HTTP/2 frame (RFC 9113 §4.1): `payload` as a frame of type `kind` with `flags` on
/// `stream`.
pub fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap();
    let mut frame = Vec::with_capacity(9 + payload.len());
    frame.extend_from_slice(&len.to_be_bytes()[1..]);
    frame.push(kind);
    frame.push(flags);
    frame.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// A test certificate authority and a certificate for `localhost` it signed, as written by
/// [`localhost_certificate`].
pub struct LocalhostCert {
    /// The CA's certificate, DER.
    pub ca_der: Vec<u8>,
    /// The CA's certificate, PEM (`ca.pem`).
    pub ca: PathBuf,
    /// The certificate for `localhost`, PEM (`localhost.pem`).
    pub cert: PathBuf,
    /// Its key, PEM (`localhost.key`).
    pub key: PathBuf,
}

/// A fresh CA and a certificate for `localhost` it signed, their files written under `dir`.
pub fn localhost_certificate(dir: &std::path::Path) -> LocalhostCert {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "fulcrum test CA");
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let site_params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let site_key = rcgen::KeyPair::generate().unwrap();
    let site_cert = site_params.signed_by(&site_key, &issuer).unwrap();
    let files = LocalhostCert {
        ca_der: ca_cert.der().to_vec(),
        ca: dir.join("ca.pem"),
        cert: dir.join("localhost.pem"),
        key: dir.join("localhost.key"),
    };
    std::fs::write(&files.ca, ca_cert.pem()).unwrap();
    std::fs::write(&files.cert, site_cert.pem()).unwrap();
    std::fs::write(&files.key, site_key.serialize_pem()).unwrap();
    files
}

/// A connection to `to` from the loopback address `from` (a test's clients may each have
/// their own: all of 127.0.0.0/8 is this machine's).
pub fn connect_from(from: impl Into<std::net::IpAddr>, to: SocketAddr) -> std::net::TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&SocketAddr::new(from.into(), 0).into())
        .unwrap();
    socket.connect(&to.into()).unwrap();
    socket.into()
}

/// `GET /` (`Connection: close`) written on a connection from `from` to `to`, with a 10 s read
/// timeout; the answer is left to be read.
pub fn get_from(from: impl Into<std::net::IpAddr>, to: SocketAddr) -> std::net::TcpStream {
    use std::io::Write;
    let mut stream = connect_from(from, to);
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    stream
}

/// The status of a `GET /` from `from` to `to` (0 if no status line came).
pub fn status_from(from: impl Into<std::net::IpAddr>, to: SocketAddr) -> u16 {
    use std::io::Read;
    let mut answer = Vec::new();
    let _ = get_from(from, to).read_to_end(&mut answer);
    std::str::from_utf8(answer.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

// --- etcd (issue 31: the fleet's shared state) ---

/// Debian's etcd (`etcd-server`) on loopback ports of its own, its data in a directory of its
/// own, killed when dropped. Its ports stay held (see [`HeldPort`]) for the guard's life, so
/// that it can be killed and started again on the same address and data.
pub struct Etcd {
    child: Option<ChildGuard>,
    pub dir: TempDir,
    client: HeldPort,
    peer: HeldPort,
}

impl Etcd {
    /// Starts etcd and waits (20 s at most) until it answers `/health`.
    pub fn start() -> Etcd {
        let mut etcd = Etcd {
            child: None,
            dir: TempDir::new("etcd", "data"),
            client: HeldPort::for_server(),
            peer: HeldPort::for_server(),
        };
        etcd.restart();
        etcd
    }

    /// The client URL, as `[cluster] etcd` takes it.
    pub fn url(&self) -> String {
        format!("http://{}", self.client.addr)
    }

    /// The process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Kills etcd (SIGKILL: no goodbye to its clients) and waits for it to be gone.
    pub fn kill(&mut self) {
        drop(self.child.take());
    }

    /// Starts etcd again on the same ports and data (after [`Etcd::kill`]), and waits until
    /// it answers.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "etcd is running already");
        let (client, peer) = (self.url(), format!("http://{}", self.peer.addr));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.0.join("etcd.log"))
            .unwrap();
        let child = Command::new("etcd")
            .arg("--data-dir")
            .arg(self.dir.0.join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("default={peer}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd runs (Debian: apt-get install -y etcd-server)");
        self.child = Some(ChildGuard(child));
        let health = self.client.addr;
        wait_until(Duration::from_secs(20), "etcd answers /health", || {
            let answer = http_get(health, "/health")?;
            if answer.contains("\"health\":\"true\"") {
                Ok(())
            } else {
                Err(answer)
            }
        });
    }

    /// `etcdctl ARGS` against this etcd: its standard output (panics when it fails).
    pub fn ctl(&self, args: &[&str]) -> String {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.url()])
            .args(args)
            .output()
            .expect("etcdctl runs (Debian: etcd-client)");
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// `GET path` on `addr` with `Connection: close`: the whole answer, or why none came.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<String, String> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}
