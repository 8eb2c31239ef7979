//! `fulcrum agent` as a backend runs it: the real binary, real sockets on loopback, real
//! `promtool` and `memcached` (Debian's `prometheus` and `memcached` packages, which
//! scripts/test and .ci/run install).

mod common;

use common::TempDir;
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// Polling period of the loops below, each bounded by a deadline.
const POLL: Duration = Duration::from_millis(50);

/// A running `fulcrum agent`, killed when dropped.
struct Agent {
    child: Child,
    /// Every stderr line so far (a reader thread appends).
    log: Arc<Mutex<Vec<String>>>,
    http: SocketAddr,
    haproxy: Option<SocketAddr>,
}

impl Agent {
    /// Starts `fulcrum agent --listen 127.0.0.1:0 ARGS` and waits until it says where it listens.
    fn start(args: &[&str]) -> Agent {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
            .args(["agent", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, lines) = mpsc::channel();
        let shared = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                shared.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        let wants_haproxy = args.contains(&"--haproxy-agent");
        let deadline = Instant::now() + Duration::from_secs(20);
        let (mut http, mut haproxy) = (None, None);
        while http.is_none() || (wants_haproxy && haproxy.is_none()) {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("fulcrum agent did not report its addresses in time"));
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(name))
                    .map(|a| a.parse::<SocketAddr>().unwrap())
            };
            http = http.or(field("listen="));
            haproxy = haproxy.or(field("haproxy_agent="));
        }
        Agent {
            child,
            log,
            http: http.unwrap(),
            haproxy,
        }
    }

    fn log_lines(&self, containing: &str) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|l| l.contains(containing))
            .cloned()
            .collect()
    }

    /// `GET path` (the agent answers once its first sample is there; 503 would mean none).
    fn get(&self, path: &str) -> (u16, String) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut stream = TcpStream::connect(self.http).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let (status, body) = exchange(&mut stream, path, true);
            if status != 503 {
                return (status, body);
            }
            assert!(
                Instant::now() < deadline,
                "GET {path}: still 503 after 20 s"
            );
            std::thread::sleep(POLL);
        }
    }

    /// `GET /load`, parsed, with every field checked.
    fn load(&self) -> Report {
        let (status, body) = self.get("/load");
        assert_eq!(status, 200, "{body}");
        Report::parse(&body)
    }

    /// SIGTERM, and the exit status within a deadline.
    fn terminate(mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "fulcrum agent did not stop after SIGTERM"
            );
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request on `stream` and its answer, read by `Content-Length` so that the
/// connection can be used again.
fn exchange(stream: &mut TcpStream, path: &str, close: bool) -> (u16, String) {
    let connection = if close { "close" } else { "keep-alive" };
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: {connection}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            stream.read(&mut byte).unwrap(),
            1,
            "connection closed mid-head"
        );
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let status = head[9..12].parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no content-length in {head}"));
    let mut body = vec![0; length];
    stream.read_exact(&mut body).unwrap();
    (status, String::from_utf8(body).unwrap())
}

#[derive(Debug, Clone, Copy)]
struct Report {
    cpu: f64,
    container_mem: f64,
    ts_ms: u64,
}

impl Report {
    /// Parses the agent protocol's JSON and checks that all six fields are there and in range.
    fn parse(body: &str) -> Report {
        let json: serde_json::Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
        let object = json.as_object().unwrap();
        assert_eq!(object.len(), 6, "{body}");
        for field in ["cpu", "mem", "disk", "net", "container_mem"] {
            let u = object[field]
                .as_f64()
                .unwrap_or_else(|| panic!("{field} is a number: {body}"));
            assert!((0.0..=1.0).contains(&u), "{field} in [0, 1]: {body}");
        }
        let ts_ms = object["ts_ms"].as_u64().unwrap();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        assert!(
            ts_ms <= now_ms && now_ms - ts_ms < 60_000,
            "ts_ms {ts_ms} is the recent past (now {now_ms})"
        );
        Report {
            cpu: object["cpu"].as_f64().unwrap(),
            container_mem: object["container_mem"].as_f64().unwrap(),
            ts_ms,
        }
    }
}

/// A scratch directory, removed when dropped.

#[test]
fn load_answers_the_protocol_json_on_a_kept_alive_connection() {
    // A cgroup v2 tree with two limited groups at 100/400 and 300/400 bytes: container_mem 0.5.
    let cgroups = TempDir::new("agent", "cgroup");
    for (group, current) in [("a.slice", "100\n"), ("b.slice", "300\n")] {
        let dir = cgroups.0.join(group);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("memory.max"), "400\n").unwrap();
        std::fs::write(dir.join("memory.current"), current).unwrap();
    }
    let agent = Agent::start(&["--interval", "200ms", "--cgroup-root", cgroups.path()]);
    // Asked at once, before its first sample would be due: it answers the sample, not 503
    // (the first sample is taken before it answers anything).
    let mut at_once = TcpStream::connect(agent.http).unwrap();
    at_once
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (status, body) = exchange(&mut at_once, "/load", true);
    assert_eq!(status, 200, "{body}");
    let first = agent.load();
    assert_eq!(first.container_mem, 0.5);

    // One connection, several requests: keep-alive works, and the samples move on.
    let mut stream = TcpStream::connect(agent.http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = HashSet::new();
    while seen.len() < 3 {
        assert!(Instant::now() < deadline, "three samples within 20 s");
        let (status, body) = exchange(&mut stream, "/load", false);
        assert_eq!(status, 200, "{body}");
        seen.insert(Report::parse(&body).ts_ms);
        std::thread::sleep(POLL);
    }
    let (status, _) = exchange(&mut stream, "/nowhere", false);
    assert_eq!(status, 404);
    let (status, body) = exchange(&mut stream, "/metrics", false);
    assert_eq!(status, 200);
    assert!(body.contains("fulcrum_agent_cpu_utilization "), "{body}");

    assert!(agent.terminate().success(), "a clean exit after SIGTERM");
}

#[test]
fn cpu_rises_while_a_core_burns() {
    let agent = Agent::start(&["--interval", "500ms"]);
    let before = agent.load();
    let stop = Arc::new(AtomicBool::new(false));
    let burner = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            x
        })
    };
    // One core of two is 0.5; wait for at least 0.4 on a sample taken after the burn began.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut highest = 0.0f64;
    let result = loop {
        let report = agent.load();
        if report.ts_ms > before.ts_ms + 500 {
            highest = highest.max(report.cpu);
        }
        if highest >= 0.4 {
            break Ok(());
        }
        if Instant::now() >= deadline {
            break Err(());
        }
        std::thread::sleep(POLL);
    };
    stop.store(true, Ordering::Relaxed);
    burner.join().unwrap();
    println!(
        "agent cpu: {:.3} before the burn, {highest:.3} while burning one core",
        before.cpu
    );
    assert!(
        result.is_ok(),
        "cpu reached only {highest} within 15 s of burning a core"
    );
}

#[test]
fn metrics_pass_promtool() {
    if !common::installed("promtool", "--version") {
        return;
    }
    let agent = Agent::start(&["--interval", "200ms"]);
    let (status, body) = agent.get("/metrics");
    assert_eq!(status, 200);
    for gauge in [
        "cpu_utilization",
        "memory_utilization",
        "disk_utilization",
        "network_utilization",
        "container_memory_utilization",
        "sample_timestamp_seconds",
    ] {
        let name = format!("fulcrum_agent_{gauge}");
        assert!(
            body.contains(&format!("# TYPE {name} gauge\n")),
            "{name} in\n{body}"
        );
    }
    common::assert_promtool_accepts(&body);
}

/// A `memcached` started on a loopback port, killed when dropped.
struct Memcached(Child);

impl Memcached {
    fn start(port: u16) -> Memcached {
        let child = Command::new("memcached")
            .args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0"])
            .args(["-u", "nobody"]) // memcached refuses to run as root without -u
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "memcached listening within 10 s");
            std::thread::sleep(POLL);
        }
        Memcached(child)
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// memcached's `get`, spoken by hand: the value stored under `key`, if any.
fn memcached_get(port: u16, key: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(stream, "get {key}\r\n").unwrap();
    let mut reply = Vec::new();
    let mut chunk = [0u8; 1024];
    while !reply.ends_with(b"END\r\n") {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        reply.extend_from_slice(&chunk[..n]);
    }
    let reply = String::from_utf8(reply).unwrap();
    // VALUE <key> <flags> <bytes>\r\n<data>\r\nEND\r\n
    let (header, rest) = reply.strip_prefix("VALUE ")?.split_once("\r\n")?;
    let bytes: usize = header.split_whitespace().nth(2)?.parse().ok()?;
    Some(rest[..bytes].to_owned())
}

#[test]
fn push_writes_reports_to_memcached_and_survives_its_absence() {
    if !common::installed("memcached", "-V") {
        return;
    }
    // A free loopback port, with nothing on it yet.
    // Refusing until memcached listens on it, and nobody else's meanwhile.
    let held = common::HeldPort::for_server();
    let port = held.port();
    let push = format!("memcached://127.0.0.1:{port}");
    let agent = Agent::start(&[
        "--interval",
        "100ms",
        "--push",
        &push,
        "--name",
        "127.0.0.1:9001",
    ]);
    // memcached is not there: the agent keeps serving, and says so once, not every interval.
    let first = agent.load();
    let deadline = Instant::now() + Duration::from_secs(20);
    while agent.load().ts_ms < first.ts_ms + 500 {
        assert!(Instant::now() < deadline, "samples keep coming");
        std::thread::sleep(POLL);
    }
    while agent.log_lines("cannot push").is_empty() {
        assert!(Instant::now() < deadline, "the failure logged");
        std::thread::sleep(POLL);
    }
    let warnings = agent.log_lines("cannot push");
    assert_eq!(
        warnings.len(),
        1,
        "one warning for 5+ failed pushes: {warnings:#?}"
    );

    let memcached = Memcached::start(port);
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(20);
    let stored = loop {
        if let Some(value) = memcached_get(port, "fulcrum/load/127.0.0.1:9001") {
            break value;
        }
        assert!(
            Instant::now() < deadline,
            "the report in memcached within 20 s"
        );
        std::thread::sleep(POLL);
    };
    Report::parse(&stored);
    // The agent logs the recovery after memcached has answered, so possibly after the read.
    let deadline = Instant::now() + Duration::from_secs(10);
    while agent.log_lines("to memcached again").is_empty() {
        assert!(Instant::now() < deadline, "the recovery logged within 10 s");
        std::thread::sleep(POLL);
    }
    assert_eq!(agent.log_lines("to memcached again").len(), 1);
    assert_eq!(agent.log_lines("cannot push").len(), 1);
    drop(memcached);
}

#[test]
fn haproxy_agent_check_answers_one_percentage_line() {
    let agent = Agent::start(&["--interval", "200ms", "--haproxy-agent", "127.0.0.1:0"]);
    let addr = agent.haproxy.unwrap();
    for _ in 0..3 {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        // HAProxy may send an agent-send string first; the agent answers all the same.
        stream.write_all(b"be_web/srv1\n").unwrap();
        let mut line = String::new();
        stream.read_to_string(&mut line).unwrap();
        let digits = line
            .strip_suffix("%\n")
            .unwrap_or_else(|| panic!("{line:?} ends in %\\n"));
        assert!(
            (1..=3).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()),
            "{line:?} matches ^\\d{{1,3}}%\\n$"
        );
        let percent: u32 = digits.parse().unwrap();
        assert!((1..=100).contains(&percent), "{line:?}");
    }
}

#[test]
fn bad_options_are_refused_before_anything_starts() {
    let refused = |args: &[&str], expect: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
            .args(["agent", "--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} refused");
        assert!(stderr.contains(expect), "{args:?}: {expect:?} in {stderr}");
    };
    refused(&["--push", "memcached://127.0.0.1:11211"], "--name");
    refused(&["--name", "127.0.0.1:9001"], "--push");
    refused(
        &["--push", "127.0.0.1:11211", "--name", "a"],
        "memcached://HOST:PORT",
    );
    refused(
        &["--push", "memcached://127.0.0.1:11211", "--name", "a b"],
        "--name",
    );
    refused(&["--net-speed", "1GB"], "Gbit");
    refused(&["--interval", "0s"], "at least 10ms");
    refused(&["--interval", "soon"], "--interval");
}

/// A `fulcrum run` whose stderr lines arrive on a channel, killed when dropped.
struct Balancer {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Balancer {
    fn start(config: &str) -> Balancer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
            .args(["run", "--config", config])
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Balancer { child, lines }
    }

    /// The first line containing `what`, within `within`.
    fn line_with(&self, what: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("fulcrum did not log {what:?} in time"));
            if line.contains(what) {
                return line;
            }
        }
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn reports_pushed_to_memcached_feed_the_balancers_weights() {
    if !common::installed("memcached", "-V") {
        return;
    }
    let held = common::HeldPort::for_server();
    let port = held.port();
    let _memcached = Memcached::start(port);
    drop(held);
    let push = format!("memcached://127.0.0.1:{port}");
    // Two backends (nothing needs to answer on them: no request is sent), each with an agent
    // pushing under its address.
    let backends = ["127.0.0.1:9001", "127.0.0.1:9002"];
    let _agents: Vec<Agent> = backends
        .iter()
        .map(|b| Agent::start(&["--interval", "200ms", "--push", &push, "--name", b]))
        .collect();
    let dir = TempDir::new("agent", "memcached-feed");
    let config = format!("{}/fulcrum.toml", dir.path());
    let mut text = String::from(
        "workers = 1\naccess_log = false\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
         [[upstream]]\nname = \"web\"\nalgorithm = \"dwlc\"\npoll_interval = \"300ms\"\n",
    );
    for b in backends {
        text += &format!(
            "  [[upstream.backend]]\n  addr = \"{b}\"\n  memcached = \"127.0.0.1:{port}\"\n"
        );
    }
    std::fs::write(&config, text).unwrap();
    let fulcrum = Balancer::start(&config);
    let applied = fulcrum.line_with("weights applied", Duration::from_secs(15));
    // Both agents measure this machine: the memory figure is /proc/meminfo's.
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let field = |name: &str| -> f64 {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    let want = 1.0 - field("MemAvailable:") / field("MemTotal:");
    let mems: Vec<f64> = applied
        .split("mem=")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(mems.len(), 2, "{applied}");
    for mem in mems {
        assert!(
            (mem - want).abs() < 0.05,
            "mem {mem}, /proc/meminfo {want}: {applied}"
        );
    }
}
