//! Differential test: fulcrum's `ip_hash` must send every client to exactly the backend a real
//! nginx sends it to, given the same upstream block (same order, same weights, same `down`
//! flags).
//!
//! Each case starts emulated backends, a real nginx (Debian's package, run as a child process in
//! a throw-away prefix directory) and fulcrum's proxy in-process, both in front of the same
//! backends. Then, for several hundred client addresses spread over many /24 prefixes (ip_hash
//! only hashes the first three octets of an IPv4 address), it sends one GET through each from
//! the same local address and compares which backend answered.
//!
//! nginx is required: without it the test fails (it does not skip), since a silently skipped
//! differential test proves nothing.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use balance::Algorithm;
use lab::{Backend, Client};
use proxy::{BackendSettings, ListenerSettings, Proxy, ProxySettings, UpstreamSettings};

/// How long nginx gets to start accepting connections.
const NGINX_START_DEADLINE: Duration = Duration::from_secs(10);
/// Client addresses querying both proxies at once.
const CONCURRENCY: usize = 16;
/// Deadline for one request through either proxy.
const REQUEST_DEADLINE: Duration = Duration::from_secs(5);

/// One `server` line of the upstream block.
#[derive(Debug, Clone, Copy)]
struct Peer {
    weight: u32,
    down: bool,
}

const fn peer(weight: u32) -> Peer {
    Peer {
        weight,
        down: false,
    }
}

const fn down(weight: u32) -> Peer {
    Peer { weight, down: true }
}

/// The nginx binary: Debian's, or the first `nginx` on `PATH`.
fn nginx_binary() -> PathBuf {
    let debian = PathBuf::from("/usr/sbin/nginx");
    if debian.is_file() {
        return debian;
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join("nginx");
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "nginx not found: install Debian's nginx package (apt-get install nginx); this \
         differential test compares fulcrum's ip_hash with a real nginx and cannot run without it"
    );
}

/// An address for nginx to listen on that nothing else in the test run can take.
///
/// Every other server in the tests binds 127.0.0.1; a port picked here and released could be
/// handed to one of them before nginx binds it, and the start-up probe would then talk to the
/// wrong server. A loopback address of nginx's own (127.200.x.y, unique per process and label)
/// cannot collide with 127.0.0.1:port on Linux, so the port only has to be free on it.
fn free_addr(label: &str) -> SocketAddr {
    let pid = std::process::id();
    let ip = Ipv4Addr::new(
        127,
        200,
        (pid % 250) as u8,
        1 + label
            .bytes()
            .fold(0u8, |h, b| h.wrapping_mul(31).wrapping_add(b))
            % 250,
    );
    let listener = TcpListener::bind((ip, 0)).expect("bind a port on nginx's loopback address");
    listener.local_addr().expect("local address")
}

/// A fresh, unique directory under the system temp dir.
fn fresh_dir(label: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    let dir = std::env::temp_dir().join(format!(
        "fulcrum-nginx-ip-hash-{label}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("create nginx prefix dir");
    dir
}

fn nginx_config(dir: &Path, listen: SocketAddr, backends: &[(SocketAddr, Peer)]) -> String {
    let d = dir.display();
    let mut servers = String::new();
    for (addr, p) in backends {
        let flag = if p.down { " down" } else { "" };
        writeln!(servers, "        server {addr} weight={}{flag};", p.weight).unwrap();
    }
    format!(
        "daemon off;
master_process off;
worker_processes 1;
error_log {d}/error.log;
pid {d}/nginx.pid;

events {{
    worker_connections 1024;
}}

http {{
    access_log off;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;

    upstream u {{
        ip_hash;
{servers}    }}

    server {{
        listen {listen};
        location / {{
            proxy_pass http://u;
        }}
    }}
}}
"
    )
}

/// A running nginx. Dropping it kills the process (by its PID) and removes its directory, even
/// when the test panics.
#[derive(Debug)]
struct Nginx {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn read_log(dir: &Path) -> String {
    let mut out = String::new();
    for name in ["error.log", "stderr.log"] {
        if let Ok(text) = std::fs::read_to_string(dir.join(name)) {
            let _ = writeln!(out, "--- {name} ---\n{text}");
        }
    }
    out
}

enum Started {
    Running(Nginx),
    /// The port was taken between `free_port` and nginx's bind: try another.
    PortTaken,
}

fn try_start_nginx(bin: &Path, label: &str, backends: &[(SocketAddr, Peer)]) -> Started {
    let dir = fresh_dir(label);
    let addr = free_addr(label);
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, nginx_config(&dir, addr, backends)).expect("write nginx.conf");
    let stderr = std::fs::File::create(dir.join("stderr.log")).expect("create stderr.log");
    let spawned = Command::new(bin)
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(&conf)
        .arg("-e")
        .arg(dir.join("error.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn();
    let child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            panic!("cannot run {}: {e}", bin.display());
        }
    };
    // From here on the guard owns the process and the directory.
    let mut nginx = Nginx { child, dir, addr };
    let deadline = Instant::now() + NGINX_START_DEADLINE;
    loop {
        if let Some(status) = nginx.child.try_wait().expect("poll nginx") {
            let log = read_log(&nginx.dir);
            if log.contains("Address already in use") {
                return Started::PortTaken;
            }
            panic!("nginx exited at start-up ({status}):\n{log}");
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Started::Running(nginx);
        }
        if Instant::now() >= deadline {
            panic!(
                "nginx did not accept connections on {addr} within {NGINX_START_DEADLINE:?}:\n{}",
                read_log(&nginx.dir)
            );
        }
        // Polling interval of the deadline loop.
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn start_nginx(label: &str, backends: &[(SocketAddr, Peer)]) -> Nginx {
    let bin = nginx_binary();
    for _ in 0..5 {
        if let Started::Running(nginx) = try_start_nginx(&bin, label, backends) {
            return nginx;
        }
    }
    panic!("nginx could not bind a free loopback port in 5 attempts");
}

/// Client addresses 127.a.b.c over many distinct /24 prefixes (a and b vary; c varies too, to
/// show it does not matter, but it plays no part in the hash).
fn client_addresses() -> Vec<IpAddr> {
    let mut addrs = Vec::new();
    for a in (0..=255u8).step_by(9) {
        for b in (3..=255u8).step_by(11) {
            let c = 1 + (a ^ b) % 250;
            addrs.push(IpAddr::V4(Ipv4Addr::new(127, a, b, c)));
        }
    }
    addrs
}

/// Which backend answered a GET sent from `local`, or what went wrong.
async fn who_answers(server: SocketAddr, local: IpAddr) -> Result<String, String> {
    let mut client = Client::bound(server, local);
    let reply = tokio::time::timeout(REQUEST_DEADLINE, client.get("/"))
        .await
        .map_err(|_| format!("no answer within {REQUEST_DEADLINE:?}"))?
        .map_err(|e| format!("request failed: {e}"))?;
    if !reply.status.is_success() {
        return Err(format!("status {}: {}", reply.status, reply.text().trim()));
    }
    let body = reply.text();
    if let Some(header) = reply.headers.get("x-backend") {
        let header = header.to_str().unwrap_or("<not text>");
        if header != body {
            return Err(format!("x-backend {header:?} but body {body:?}"));
        }
    }
    Ok(body)
}

/// Runs one upstream block through nginx and fulcrum and compares every client's backend.
async fn compare(label: &str, peers: &[Peer]) {
    let started = Instant::now();
    let mut backends = Vec::new();
    for i in 0..peers.len() {
        let backend = Backend::start(&format!("b{i}"), "127.0.0.1:0".parse().unwrap())
            .await
            .expect("start backend");
        backends.push(backend);
    }
    let block: Vec<(SocketAddr, Peer)> = backends
        .iter()
        .zip(peers)
        .map(|(b, p)| (b.addr(), *p))
        .collect();

    let nginx = start_nginx(label, &block);

    let backend_settings = block
        .iter()
        .map(|(addr, p)| {
            let mut b = BackendSettings::new(*addr).weight(p.weight);
            b.down = p.down;
            b
        })
        .collect();
    let settings = ProxySettings {
        workers: 2,
        listeners: vec![ListenerSettings::new("127.0.0.1:0".parse().unwrap(), "u")],
        upstreams: vec![UpstreamSettings::new(
            "u",
            Algorithm::IpHash,
            backend_settings,
        )],
        access_log: None,
        shutdown_timeout: Duration::from_secs(1),
    };
    let fulcrum = Proxy::bind(settings).await.expect("bind fulcrum");
    let fulcrum_addr = fulcrum.local_addrs()[0];
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(fulcrum.run(async {
        let _ = stop_rx.await;
    }));

    let addrs = Arc::new(client_addresses());
    let nginx_addr = nginx.addr;
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..CONCURRENCY {
        let addrs = Arc::clone(&addrs);
        workers.spawn(async move {
            let mut out = Vec::new();
            for &local in addrs.iter().skip(w).step_by(CONCURRENCY) {
                let by_nginx = who_answers(nginx_addr, local).await;
                let by_fulcrum = who_answers(fulcrum_addr, local).await;
                out.push((local, by_nginx, by_fulcrum));
            }
            out
        });
    }
    let mut results = Vec::new();
    while let Some(part) = workers.join_next().await {
        results.extend(part.expect("worker panicked"));
    }
    results.sort_by_key(|(addr, _, _)| *addr);

    let _ = stop_tx.send(());
    running.await.expect("fulcrum run task");
    // Kill nginx now, so its log can still be read if the assertions below fail.
    let nginx_log = read_log(&nginx.dir);
    drop(nginx);

    let mut mismatches = Vec::new();
    let mut used = BTreeSet::new();
    let mut down_picked = Vec::new();
    let down_names: BTreeSet<String> = peers
        .iter()
        .enumerate()
        .filter(|(_, p)| p.down)
        .map(|(i, _)| format!("b{i}"))
        .collect();
    for (local, by_nginx, by_fulcrum) in &results {
        if by_nginx != by_fulcrum {
            mismatches.push(format!(
                "{local}: nginx {by_nginx:?}, fulcrum {by_fulcrum:?}"
            ));
        }
        if let Ok(name) = by_nginx {
            used.insert(name.clone());
            if down_names.contains(name) {
                down_picked.push(format!("{local}: nginx picked down {name}"));
            }
        }
        if let Ok(name) = by_fulcrum
            && down_names.contains(name)
        {
            down_picked.push(format!("{local}: fulcrum picked down {name}"));
        }
    }
    eprintln!(
        "[{label}] {} client addresses over {} /24 prefixes compared in {:?}: {} mismatches; \
         backends used: {used:?}",
        results.len(),
        results
            .iter()
            .map(|(a, _, _)| match a {
                IpAddr::V4(v4) => {
                    let [x, y, z, _] = v4.octets();
                    (x, y, z)
                }
                IpAddr::V6(_) => unreachable!(),
            })
            .collect::<BTreeSet<_>>()
            .len(),
        started.elapsed(),
        mismatches.len(),
    );
    assert!(
        results.len() >= 600,
        "only {} addresses compared",
        results.len()
    );
    assert!(
        mismatches.is_empty(),
        "[{label}] fulcrum's ip_hash disagrees with nginx for {} of {} client addresses \
         (address: nginx's pick, fulcrum's pick):\n{}\n{nginx_log}",
        mismatches.len(),
        results.len(),
        mismatches.join("\n")
    );
    assert!(
        down_picked.is_empty(),
        "[{label}] a backend marked down was picked:\n{}",
        down_picked.join("\n")
    );
    assert!(
        used.len() > 1,
        "[{label}] trivial mapping: every client went to {used:?}"
    );
}

/// Three equal backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ip_hash_matches_nginx_equal_weights() {
    compare("equal", &[peer(1), peer(1), peer(1)]).await;
}

/// Four weighted backends, one marked down. nginx counts a down peer's weight in the total (so
/// marking it down moves nobody else) and rehashes clients that land on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ip_hash_matches_nginx_weighted_with_down() {
    compare("weighted-down", &[peer(3), peer(1), down(2), peer(1)]).await;
}
