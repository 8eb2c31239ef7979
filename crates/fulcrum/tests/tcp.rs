//! TCP (L4) mode against a running `fulcrum run`: real Redis servers (Debian's
//! `redis-server`) behind a `protocol = "tcp"` listener, driven by `redis-benchmark` and by
//! clients of the test's own; `least_conn` spreading sessions; a backend killed in the middle
//! of a run, new connections failing over and the failed ones counted; half-close, the idle
//! timeout and the PROXY protocol both ways, against small backends of the test's own.

mod common;

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Running, TempFile, in_flight, installed, wait_until};

/// A `redis-server` the test started, killed (by its PID) when dropped.
struct Redis {
    child: Child,
    addr: SocketAddr,
}

impl Redis {
    fn start() -> Redis {
        // Held until redis listens on it (redis binds with SO_REUSEADDR).
        let held = common::HeldPort::for_server();
        let port = held.port();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(["--maxclients", "1000"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let redis = Redis {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        wait_until(Duration::from_secs(10), "redis-server answers PING", || {
            ping(redis.addr).map_err(|e| e.to_string())
        });
        drop(held);
        redis
    }

    /// `INFO stats`' `total_connections_received`: sessions this server has accepted.
    fn connections_received(&self) -> u64 {
        let mut s = TcpStream::connect(self.addr).unwrap();
        info_field(&mut s, "stats", "total_connections_received")
            .parse()
            .unwrap()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `PING` on a new connection to `addr`, `+PONG` expected.
fn ping(addr: SocketAddr) -> std::io::Result<()> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"PING\r\n")?;
    let mut answer = [0u8; 7];
    s.read_exact(&mut answer)?;
    if &answer != b"+PONG\r\n" {
        return Err(std::io::Error::other(format!(
            "answered {:?}",
            String::from_utf8_lossy(&answer)
        )));
    }
    Ok(())
}

/// One field of `INFO section`, asked on `s` (which stays open).
fn info_field(s: &mut TcpStream, section: &str, field: &str) -> String {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(format!("INFO {section}\r\n").as_bytes())
        .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    // A bulk string: `$LEN`, the text, CRLF.
    let len: usize = line.trim().trim_start_matches('$').parse().unwrap();
    let mut text = vec![0u8; len + 2];
    r.read_exact(&mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("INFO {section} has {field}: {text}"))
        .trim()
        .to_owned()
}

fn tcp_config(upstream_lines: &str, listener_lines: &str, backends: &[SocketAddr]) -> String {
    let mut text = format!(
        "workers = 2\nshutdown_timeout = \"1s\"\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"db\"\nprotocol = \"tcp\"\n{listener_lines}\n\n[[upstream]]\nname = \"db\"\n{upstream_lines}\n"
    );
    for b in backends {
        text.push_str(&format!("  [[upstream.backend]]\n  addr = \"{b}\"\n"));
    }
    text
}

#[test]
fn redis_behind_a_tcp_listener_least_conn_and_failover() {
    if !installed("redis-server", "--version") || !installed("redis-benchmark", "--version") {
        return;
    }
    let mut redis: Vec<Redis> = (0..3).map(|_| Redis::start()).collect();
    let addrs: Vec<SocketAddr> = redis.iter().map(|r| r.addr).collect();
    let config = TempFile::new(
        "tcp-redis.toml",
        &(tcp_config(
            "algorithm = \"least_conn\"\nconnect_timeout = \"1s\"\nmax_fails = 1\nfail_timeout = \"30s\"",
            "",
            &addrs,
        ) + "\n[admin]\nlisten = \"127.0.0.1:0\"\n"),
    );
    let fulcrum = Running::start(&config, 1);
    let front = fulcrum.addr_of("db");

    // 1. least_conn with sessions held open: 30 sessions, 10 on each server (`INFO server`'s
    //    `tcp_port` says which one each reached); then the 10 on one server close, and the
    //    next 10 all go to it (round robin would spread them over all three).
    let mut held: Vec<(u16, TcpStream)> = Vec::new();
    let open = |held: &mut Vec<(u16, TcpStream)>, n: usize| {
        for _ in 0..n {
            let mut s = TcpStream::connect(front).unwrap();
            let port: u16 = info_field(&mut s, "server", "tcp_port").parse().unwrap();
            held.push((port, s));
        }
    };
    let by_port = |held: &[(u16, TcpStream)]| {
        let mut m = std::collections::BTreeMap::<u16, usize>::new();
        for (port, _) in held {
            *m.entry(*port).or_default() += 1;
        }
        m
    };
    open(&mut held, 30);
    let spread = by_port(&held);
    println!("30 sessions held open, by backend port: {spread:?}");
    assert_eq!(spread.len(), 3, "{spread:?}");
    assert!(spread.values().all(|&n| n == 10), "{spread:?}");
    // A session is in flight for its whole life.
    let admin = fulcrum
        .admin
        .expect("the admin listener's address is logged");
    assert_eq!(in_flight(admin, "db"), [10, 10, 10]);
    let emptied = redis[2].addr.port();
    held.retain(|(port, _)| *port != emptied);
    // Each session ends its ticket when both sides have closed: wait until fulcrum's own
    // in-flight counts (the admin API's) show it, before the next picks.
    let admin = fulcrum
        .admin
        .expect("the admin listener's address is logged");
    wait_until(Duration::from_secs(5), "the closed sessions end", || {
        let now = in_flight(admin, "db");
        (now == [10, 10, 0])
            .then_some(())
            .ok_or_else(|| format!("{now:?}"))
    });
    open(&mut held, 10);
    let spread = by_port(&held);
    println!("after the 10 on port {emptied} closed and 10 more opened: {spread:?}");
    assert!(spread.values().all(|&n| n == 10), "{spread:?}");
    drop(held);

    // 2. redis-benchmark through fulcrum: every request answered, and its 50 connections
    //    spread over the three servers by least_conn.
    let before: Vec<u64> = redis.iter().map(Redis::connections_received).collect();
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &front.port().to_string()])
        .args(["-c", "50", "-n", "20000", "-t", "set,get", "-q", "--csv"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("redis-benchmark through fulcrum:\n{text}");
    assert!(
        out.status.success(),
        "redis-benchmark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("\"SET\"") && text.contains("\"GET\""),
        "{text}"
    );
    let spread: Vec<u64> = redis
        .iter()
        .zip(&before)
        .map(|(r, b)| r.connections_received() - b - 1)
        .collect();
    println!("redis-benchmark's connections by backend: {spread:?}");
    // Two tests of 50 connections each, plus the benchmark's own probe connections.
    let total: u64 = spread.iter().sum();
    assert!(total >= 100, "{spread:?}");
    for n in &spread {
        assert!(
            *n * 5 >= total,
            "least_conn gave a backend under a fifth of the connections: {spread:?}"
        );
    }

    // 3. A backend killed in the middle of a run of short sessions (connect, PING, close)
    //    from 8 clients: new connections fail over; the ones that fail are counted.
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(Mutex::new(Vec::<String>::new()));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (stop, ok, failed) = (Arc::clone(&stop), Arc::clone(&ok), Arc::clone(&failed));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match ping(front) {
                        Ok(()) => ok.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            failed.lock().unwrap().push(e.to_string());
                            0
                        }
                    };
                }
            })
        })
        .collect();
    let count_at = |ok: &AtomicU64| ok.load(Ordering::Relaxed);
    wait_until(Duration::from_secs(10), "sessions before the kill", || {
        (count_at(&ok) >= 500)
            .then_some(())
            .ok_or_else(|| format!("{} so far", count_at(&ok)))
    });
    // The counts are taken once the killed server is gone: a session counted after that
    // point cannot have been served by it.
    redis[1].kill();
    let killed = Instant::now();
    let before_kill = count_at(&ok);
    let survivors_before: u64 = [&redis[0], &redis[2]]
        .iter()
        .map(|r| r.connections_received())
        .sum();
    wait_until(Duration::from_secs(20), "sessions after the kill", || {
        (count_at(&ok) >= before_kill + 2000)
            .then_some(())
            .ok_or_else(|| format!("{} since the kill", count_at(&ok) - before_kill))
    });
    let after = count_at(&ok) - before_kill;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let failed = failed.lock().unwrap().clone();
    println!(
        "backend killed mid-run: {before_kill} sessions before, {after} in the {:.1} s after, {} failed: {failed:?}",
        killed.elapsed().as_secs_f64(),
        failed.len()
    );
    // Only sessions on the killed server when it died can fail (8 clients: at most 8 at
    // once); every later connection was sent elsewhere.
    assert!(failed.len() <= 8, "{} failed: {failed:?}", failed.len());
    // The survivors took every session after the kill: each is one connection they
    // received. The 8 clients' sessions in flight when the counts were taken may have
    // connected just before them, so up to 8 of the sessions counted after need not be.
    let survivors_after: u64 = [&redis[0], &redis[2]]
        .iter()
        .map(|r| r.connections_received())
        .sum();
    println!(
        "the survivors received {} connections since the kill",
        survivors_after - survivors_before
    );
    assert!(
        survivors_after - survivors_before + 8 >= after,
        "{survivors_before} → {survivors_after}, {after} sessions"
    );
    let log = drain(&fulcrum, Duration::from_millis(500));
    assert!(
        log.iter().any(|l| l.contains("TCP connect failed")
            && l.contains(&addrs[1].to_string())
            && l.contains("trying the next backend")),
        "the failed connect and the failover are logged: {log:?}"
    );
    assert!(
        log.iter().any(
            |l| l.contains("backend temporarily disabled") && l.contains(&addrs[1].to_string())
        ),
        "passive health took the dead backend out: {log:?}"
    );
}

/// Lines fulcrum logged until it has been quiet for `quiet`.
fn drain(fulcrum: &Running, quiet: Duration) -> Vec<String> {
    let mut lines = Vec::new();
    while let Ok(line) = fulcrum.lines.recv_timeout(quiet) {
        lines.push(line);
    }
    lines
}

/// A backend that reads a connection to its end, then answers with what it got and closes:
/// only a client's half-close passed on lets it answer.
fn start_reader_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // The threads end with the test process; every socket they hold is on loopback.
    std::thread::spawn(move || {
        for mut s in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut got = Vec::new();
                if s.read_to_end(&mut got).is_ok() {
                    let _ = s.write_all(format!("got {} bytes: ", got.len()).as_bytes());
                    let _ = s.write_all(&got);
                }
            });
        }
    });
    addr
}

#[test]
fn half_close_idle_timeout_and_the_proxy_protocol() {
    let reader = start_reader_backend();
    let config = TempFile::new(
        "tcp-edges.toml",
        &format!(
            "{}\n[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"front\"\nprotocol = \"tcp\"\nproxy_protocol = \"v1\"\naccept_proxy_protocol = true\ntrusted_proxies = [\"127.0.0.1\"]\n\n[[upstream]]\nname = \"front\"\n  [[upstream.backend]]\n  addr = \"{reader}\"\n",
            tcp_config("", "idle_timeout = \"1s\"", &[reader]),
        ),
    );
    let fulcrum = Running::start(&config, 2);
    let plain = fulcrum.addr_of("db");
    let fronted = fulcrum.addr_of("front");

    // Half-close: the client's end reaches the backend, whose answer still comes back.
    let mut s = TcpStream::connect(plain).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"hello").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert_eq!(answer, "got 5 bytes: hello");

    // Idle: a session with no byte either way is closed after idle_timeout (1 s).
    let mut s = TcpStream::connect(plain).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"x").unwrap();
    let began = Instant::now();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf);
    let idle_for = began.elapsed();
    println!("idle session closed after {idle_for:?}: {n:?}");
    assert!(
        matches!(n, Ok(0)) || matches!(&n, Err(e) if e.kind() == ErrorKind::ConnectionReset),
        "{n:?}"
    );
    assert!(
        idle_for >= Duration::from_millis(900) && idle_for < Duration::from_secs(5),
        "{idle_for:?}"
    );

    // PROXY protocol in and out: a load balancer in front (127.0.0.1, trusted) names the
    // client 203.0.113.9; fulcrum balances it and names it to the backend in turn.
    let mut s = TcpStream::connect(fronted).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"PROXY TCP4 203.0.113.9 192.0.2.1 41000 6379\r\nping")
        .unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let want = format!(
        "PROXY TCP4 203.0.113.9 127.0.0.1 41000 {}\r\nping",
        fronted.port()
    );
    assert_eq!(answer, format!("got {} bytes: {want}", want.len()));

    // A peer not in trusted_proxies (127.0.0.2) is closed without reaching the backend (which
    // would answer anything it got), and so is a trusted one that sends no PROXY header.
    let untrusted =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    untrusted
        .bind(&SocketAddr::from(([127, 0, 0, 2], 0)).into())
        .unwrap();
    untrusted.connect(&fronted.into()).unwrap();
    let cases: [(TcpStream, &[u8]); 2] = [
        (
            untrusted.into(),
            b"PROXY TCP4 203.0.113.9 192.0.2.1 41000 6379\r\nping",
        ),
        (
            TcpStream::connect(fronted).unwrap(),
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        ),
    ];
    for (mut s, sent) in cases {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // The write may meet the close already.
        let _ = s.write_all(sent);
        let _ = s.shutdown(Shutdown::Write);
        let mut rest = Vec::new();
        let read = s.read_to_end(&mut rest);
        assert!(
            rest.is_empty(),
            "{:?} reached the backend: {:?}",
            String::from_utf8_lossy(sent),
            String::from_utf8_lossy(&rest)
        );
        assert!(
            read.is_ok()
                || read
                    .as_ref()
                    .is_err_and(|e| e.kind() == ErrorKind::ConnectionReset),
            "closed, not timed out: {read:?}"
        );
    }
}

/// An HTTP backend that answers each request with the `X-Forwarded-For` it got.
fn start_forwarded_for_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // The threads end with the test process; every socket they hold is on loopback.
    std::thread::spawn(move || {
        for s in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut xff = String::new();
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some((name, value)) = line.split_once(':')
                        && name.eq_ignore_ascii_case("x-forwarded-for")
                    {
                        xff = value.trim().to_owned();
                    }
                }
                let mut s = s;
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{xff}",
                    xff.len()
                );
            });
        }
    });
    addr
}

#[test]
fn an_http_listener_takes_its_client_from_the_proxy_protocol() {
    let backend = start_forwarded_for_backend();
    let config = TempFile::new(
        "http-accept-proxy.toml",
        &format!(
            "[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\naccept_proxy_protocol = true\ntrusted_proxies = [\"127.0.0.1\"]\n\n[[upstream]]\nname = \"web\"\n  [[upstream.backend]]\n  addr = \"{backend}\"\n"
        ),
    );
    let fulcrum = Running::start(&config, 1);
    let front = fulcrum.addr_of("web");
    let v2 = {
        // A v2 header for 2001:db8::7 port 5000, built by hand: the signature, PROXY over
        // TCP/IPv6, 36 address bytes.
        let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x21\x00\x24".to_vec();
        h.extend_from_slice(
            &"2001:db8::7"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        h.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
        h.extend_from_slice(&5000u16.to_be_bytes());
        h.extend_from_slice(&front.port().to_be_bytes());
        h
    };
    for (header, want) in [
        (
            b"PROXY TCP4 198.51.100.7 127.0.0.1 5000 80\r\n".to_vec(),
            "198.51.100.7",
        ),
        (v2, "2001:db8::7"),
    ] {
        let mut s = TcpStream::connect(front).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&header).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with(&format!("\r\n\r\n{want}")), "{answer}");
    }
}

/// A backend that writes `say` on every connection, then closes it: cleanly (FIN), or, when
/// `reset`, with a reset (`SO_LINGER` 0) once the client has answered with a byte (a reset
/// that overtook `say` would discard it unread).
fn start_closing_backend(say: &'static [u8], reset: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // The threads end with the test process; every socket they hold is on loopback.
    std::thread::spawn(move || {
        for mut s in listener.incoming().map_while(Result::ok) {
            let _ = s.write_all(say);
            if reset {
                let _ = s.read(&mut [0u8; 1]);
                let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
            }
            drop(s);
        }
    });
    addr
}

#[test]
fn a_backend_that_ends_its_side_ends_the_session_and_a_reset_is_passed_on() {
    let closing = start_closing_backend(b"bye", false);
    let resetting = start_closing_backend(b"twelve bytes", true);
    let config = TempFile::new(
        "tcp-ends.toml",
        &format!(
            "{}\n[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"reset\"\nprotocol = \"tcp\"\n\n[[upstream]]\nname = \"reset\"\n  [[upstream.backend]]\n  addr = \"{resetting}\"\n\n[admin]\nlisten = \"127.0.0.1:0\"\n",
            tcp_config("", "idle_timeout = \"60s\"", &[closing]),
        ),
    );
    let fulcrum = Running::start(&config, 2);
    let admin = fulcrum
        .admin
        .expect("the admin listener's address is logged");

    // The backend says "bye" and closes; the client stays connected and silent. The session
    // ends about a second later (not after idle_timeout's 60 s): its backend is free again.
    let mut s = TcpStream::connect(fulcrum.addr_of("db")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"bye", "the backend's end reached the client");
    let began = Instant::now();
    wait_until(Duration::from_secs(5), "the session ends", || {
        let now = in_flight(admin, "db");
        (now == [0])
            .then_some(())
            .ok_or_else(|| format!("in flight {now:?}"))
    });
    println!(
        "session ended {:?} after the backend's end, the client still connected",
        began.elapsed()
    );
    drop(s);

    // The backend sends 12 bytes and resets: the client gets them, then a reset — not a clean
    // end that would make a cut stream look whole.
    let mut s = TcpStream::connect(fulcrum.addr_of("reset")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = [0u8; 12];
    s.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"twelve bytes");
    s.write_all(b"k").unwrap();
    let end = s.read(&mut [0u8; 16]);
    assert!(
        end.as_ref()
            .is_err_and(|e| e.kind() == ErrorKind::ConnectionReset),
        "{end:?}"
    );
}

/// `access` on a TCP listener is nginx stream's `allow` / `deny` (ngx_stream_access_module):
/// an allowed client's session is relayed; a denied one is closed with nothing read from it
/// or sent to a backend, and logged with status 403 and the fate `denied`.
#[test]
fn access_lists_on_a_tcp_listener() {
    let reader = start_reader_backend();
    let config = TempFile::new(
        "tcp-access.toml",
        &tcp_config(
            "",
            "access = [\"deny 127.0.0.3\", \"allow 127.0.0.0/8\", \"deny all\"]",
            &[reader],
        ),
    );
    let fulcrum = Running::start(&config, 1);
    let proxy = fulcrum.addr_of("db");
    let session = |from: [u8; 4]| {
        let mut s = common::connect_from(from, proxy);
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(b"abc");
        let _ = s.shutdown(Shutdown::Write);
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        String::from_utf8_lossy(&got).into_owned()
    };
    assert_eq!(session([127, 0, 0, 2]), "got 3 bytes: abc");
    assert_eq!(session([127, 0, 0, 3]), "");
    let lines = drain(&fulcrum, Duration::from_millis(500));
    let denied: Vec<&String> = lines.iter().filter(|l| l.contains("127.0.0.3")).collect();
    assert!(
        denied.len() == 1 && denied[0].contains(" 403 ") && denied[0].contains("denied"),
        "{lines:#?}"
    );
}
