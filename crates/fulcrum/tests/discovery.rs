//! DNS discovery against a real DNS server: Debian's dnsmasq, in the foreground on a loopback
//! port, answering for `fulcrum.test` from a hosts file (re-read on SIGHUP, with TTL 1 s) and
//! from `--srv-host` records. The backends are lab backends on their own 127.0.x.y addresses.
//! Each test uses addresses of its own (127.0.3N.*), so that they run in parallel.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lab::Client;

mod common;
use common::{ChildGuard, Running, TempDir, TempFile, wait_until};

/// Debian's dnsmasq (package dnsmasq-base).
const DNSMASQ: &str = "/usr/sbin/dnsmasq";

/// Whether dnsmasq is there; says why the test skips when it is not (scripts/test and .ci/run
/// install it), as the other tests that need a program do.
fn dnsmasq_installed() -> bool {
    let there = std::path::Path::new(DNSMASQ).exists();
    if !there {
        println!(
            "SKIPPED: dnsmasq is not installed (Debian: apt-get install -y dnsmasq-base); scripts/test and .ci/run install it"
        );
    }
    there
}

/// A dnsmasq answering for `fulcrum.test` on a loopback port, killed when dropped.
struct Dnsmasq {
    child: ChildGuard,
    addr: SocketAddr,
    hosts: std::path::PathBuf,
}

impl Dnsmasq {
    /// Starts dnsmasq with `hosts` as its hosts file and `extra` arguments (`--srv-host=...`);
    /// waits until it has read the file (it binds its sockets before that). A port taken
    /// between our probe and its bind makes it exit: then another port is tried.
    fn start(dir: &TempDir, hosts: &str, extra: &[String]) -> Dnsmasq {
        Dnsmasq::start_on(dir, hosts, extra, None)
    }

    /// As [`Dnsmasq::start`], on `port` if given (a server started again with other records,
    /// where fulcrum asks the first).
    fn start_on(dir: &TempDir, hosts: &str, extra: &[String], port: Option<u16>) -> Dnsmasq {
        Dnsmasq::start_at(dir, hosts, extra, [127, 0, 0, 1], port)
    }

    /// As [`Dnsmasq::start_on`], listening on `ip`.
    fn start_at(
        dir: &TempDir,
        hosts: &str,
        extra: &[String],
        ip: [u8; 4],
        port: Option<u16>,
    ) -> Dnsmasq {
        let path = dir.0.join("hosts");
        std::fs::write(&path, hosts).unwrap();
        for _ in 0..5 {
            let port = port.unwrap_or_else(|| {
                UdpSocket::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port()
            });
            let mut child = ChildGuard(
                Command::new(DNSMASQ)
                    .args([
                        "--keep-in-foreground",
                        "--no-resolv",
                        "--no-hosts",
                        "--no-poll",
                        "--conf-file=/dev/null",
                        "--pid-file=",
                        &format!("--listen-address={}", IpAddr::from(ip)),
                        "--bind-interfaces",
                        "--local=/fulcrum.test/",
                        "--local-ttl=1",
                        "--log-facility=-",
                        &format!("--port={port}"),
                        &format!("--addn-hosts={}", path.display()),
                    ])
                    .args(extra)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("dnsmasq runs (Debian: apt-get install -y dnsmasq-base)"),
            );
            let rx = common::lines_of(child.stderr.take().unwrap());
            let deadline = Instant::now() + Duration::from_secs(10);
            while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                if line.contains("read ") && line.contains("hosts") {
                    return Dnsmasq {
                        child,
                        addr: SocketAddr::from((ip, port)),
                        hosts: path,
                    };
                }
                if line.contains("failed") {
                    break;
                }
            }
        }
        panic!("dnsmasq did not start");
    }

    /// Replaces the hosts file and has dnsmasq read it again (SIGHUP).
    fn set_hosts(&self, hosts: &str) {
        std::fs::write(&self.hosts, hosts).unwrap();
        let status = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Stops the server (killed by PID): lookups fail from now on.
    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Hosts-file lines giving `name` these addresses.
fn hosts(name: &str, ips: &[IpAddr]) -> String {
    ips.iter().map(|ip| format!("{ip} {name}\n")).collect()
}

/// A configuration: one upstream `web` with `upstream_lines` (its discovery, backends...),
/// and an admin listener.
fn config(upstream_lines: &str) -> TempFile {
    TempFile::new(
        "discovery.toml",
        &format!(
            "workers = 2\naccess_log = false\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n[[upstream]]\nname = \"web\"\n{upstream_lines}\n\n[admin]\nlisten = \"127.0.0.1:0\"\n"
        ),
    )
}

/// Lab backends named `names`, on `ip_base.1`, `.2`, ... with one port for all (type A gives
/// one port): the first picks a free port, the others bind the same one on their address.
async fn backends_on(ip_base: [u8; 3], names: &[&str]) -> Vec<lab::Backend> {
    let [a, b, c] = ip_base;
    let first = lab::Backend::start(names[0], SocketAddr::from(([a, b, c, 1], 0)))
        .await
        .unwrap();
    let port = first.addr().port();
    let mut all = vec![first];
    for (i, name) in names.iter().enumerate().skip(1) {
        let addr = SocketAddr::from(([a, b, c, 1 + i as u8], port));
        all.push(lab::Backend::start(name, addr).await.unwrap());
    }
    all
}

/// The addresses the admin API lists for `web`, and their `source`.
fn listed(admin: SocketAddr) -> Vec<(String, Option<String>)> {
    common::backends_of(admin, "web")
        .iter()
        .map(|b| {
            (
                b["addr"].as_str().unwrap().to_owned(),
                b["source"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// The value of the series of `metric` for `web`'s source `name` on `/metrics`.
async fn metric(admin: SocketAddr, metric: &str, name: &str) -> f64 {
    let text = common::admin_get(admin, "/metrics").await.text();
    let (series, label) = (format!("{metric}{{"), format!("name=\"{name}\""));
    text.lines()
        .find(|l| l.starts_with(&series) && l.contains(&label) && l.contains("upstream=\"web\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {metric} for {name} in:\n{text}"))
}

/// An open-loop load of `rps` requests a second for `seconds` on `target`, from 8 clients.
fn load(target: SocketAddr, rps: f64, seconds: u64) -> lab::load::Plan {
    common::steady_load(target, rps, seconds, 8)
}

/// Three backends in DNS with TTL 1 s; under 100 requests a second a fourth is added and one
/// removed with a slow request in flight on it: the new one serves within 2 s, the removed one
/// finishes its request and gets nothing new, and no request fails. Then the DNS server stops:
/// the set stays, requests still succeed, and the age of the last good answer grows.
#[test]
fn a_records_followed_under_load_and_kept_when_the_server_stops() {
    if !dnsmasq_installed() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = TempDir::new("discovery", "a");
        let bs = backends_on([127, 0, 31], &["a", "b", "c", "d"]).await;
        let ip = |i: usize| bs[i].addr().ip();
        let port = bs[0].addr().port();
        let name = "app.fulcrum.test";
        let dns = Dnsmasq::start(&dir, &hosts(name, &[ip(0), ip(1), ip(2)]), &[]);
        let cfg = config(&format!(
            "  [upstream.discovery]\n  type = \"a\"\n  name = \"{name}\"\n  port = {port}\n  resolvers = [\"{}\"]\n",
            dns.addr
        ));
        let fulcrum = Running::start(&cfg, 1);
        let (addr, admin) = (fulcrum.addr_of("web"), fulcrum.admin.unwrap());
        let mut now: Vec<_> = listed(admin);
        now.sort();
        assert_eq!(now.len(), 3, "the three found at start: {now:?}");
        assert!(now.iter().all(|(_, s)| s.as_deref() == Some(name)), "{now:?}");

        let plan = load(addr, 100.0, 8);
        let running = tokio::spawn(async move { lab::load::run(&plan).await });
        // A slow request in flight on c when DNS drops it.
        let mut slow = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while bs[2].in_flight() == 0 {
            assert!(Instant::now() < deadline, "a slow request reached c");
            slow.push(tokio::spawn(async move {
                Client::new(addr).get("/?delay_ms=3000").await.map(|r| r.status)
            }));
            // Poll interval of a loop bounded by `deadline`.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let changed = Instant::now();
        dns.set_hosts(&hosts(name, &[ip(0), ip(1), ip(3)]));
        let d = &bs[3];
        while d.requests() == 0 {
            assert!(changed.elapsed() < Duration::from_secs(5), "d got no request");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let joined = changed.elapsed();
        println!("d serves {joined:?} after the records changed");
        assert!(joined < Duration::from_secs(2), "d served after {joined:?}");
        let c = bs[2].addr().to_string();
        wait_until(Duration::from_secs(3), "c leaves", || {
            if listed(admin).iter().any(|(a, _)| *a == c) {
                Err(format!("{:?}", listed(admin)))
            } else {
                Ok(())
            }
        });
        let c_requests = bs[2].requests();
        for s in slow {
            assert_eq!(s.await.unwrap().unwrap(), 200, "the slow requests finish");
        }
        let outcomes = running.await.unwrap();
        common::assert_all_answered(&outcomes, outcomes.len());
        assert_eq!(bs[2].requests(), c_requests, "c got nothing new once it left");
        println!("{} requests, none failed; c had {c_requests}", outcomes.len());

        // The DNS server stops: the set stays, requests succeed, the age grows.
        dns.stop();
        let first = metric(admin, "fulcrum_discovery_answer_age_seconds", name).await;
        let plan = load(addr, 100.0, 3);
        let outcomes = lab::load::run(&plan).await;
        common::assert_all_answered(&outcomes, outcomes.len());
        let second = metric(admin, "fulcrum_discovery_answer_age_seconds", name).await;
        println!("age {first:.2} s, then {second:.2} s");
        assert!(second >= first + 2.5, "the age grows: {first} then {second}");
        // Each lookup waits for its answer up to 5 s (two tries of 2 s), then one more after
        // min_interval: two failures, logged once.
        let deadline = Instant::now() + Duration::from_secs(20);
        let failures = || metric(admin, "fulcrum_discovery_lookup_failures_total", name);
        while failures().await < 2.0 {
            assert!(Instant::now() < deadline, "two lookups failed");
            // Poll interval of a loop bounded by `deadline`.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let logged = fulcrum
            .lines
            .try_iter()
            .filter(|l| l.contains("DNS discovery lookup failed"))
            .count();
        assert_eq!(logged, 1, "a failing source is logged once");
        assert_eq!(
            metric(admin, "fulcrum_discovery_backends", name).await,
            3.0,
            "the last set stays"
        );
        assert_eq!(listed(admin).len(), 3);
    });
}

/// SRV: weights 1, 2 and 5 at priority 0 give that split; the two priority-1 records serve
/// only once every priority-0 backend is out.
#[test]
fn srv_weights_split_and_priorities_are_tiers() {
    if !dnsmasq_installed() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = TempDir::new("discovery", "srv");
        let names = ["s1", "s2", "s3", "b1", "b2"];
        let mut bs: Vec<lab::Backend> = Vec::new();
        for (i, n) in names.iter().enumerate() {
            let at = SocketAddr::from(([127, 0, 32, 1 + i as u8], 0));
            bs.push(lab::Backend::start(n, at).await.unwrap());
        }
        let mut hosts_file = String::new();
        let mut srv = Vec::new();
        for (i, (n, b)) in names.iter().zip(&bs).enumerate() {
            hosts_file.push_str(&format!("{} {n}.fulcrum.test\n", b.addr().ip()));
            let (priority, weight) = [(0, 1), (0, 2), (0, 5), (1, 1), (1, 1)][i];
            srv.push(format!(
                "--srv-host=_http._tcp.api.fulcrum.test,{n}.fulcrum.test,{},{priority},{weight}",
                b.addr().port()
            ));
        }
        let dns = Dnsmasq::start(&dir, &hosts_file, &srv);
        let cfg = config(&format!(
            "  [upstream.discovery]\n  type = \"srv\"\n  name = \"_http._tcp.api.fulcrum.test\"\n  resolvers = [\"{}\"]\n",
            dns.addr
        ));
        let fulcrum = Running::start(&cfg, 1);
        let (addr, admin) = (fulcrum.addr_of("web"), fulcrum.admin.unwrap());
        let before: Vec<u64> = bs.iter().map(|b| b.requests()).collect();
        let mut client = Client::new(addr);
        for _ in 0..800 {
            assert_eq!(client.get("/").await.unwrap().status, 200);
        }
        let got: Vec<u64> = bs.iter().zip(&before).map(|(b, n)| b.requests() - n).collect();
        println!("800 requests: s1 {} s2 {} s3 {} b1 {} b2 {}", got[0], got[1], got[2], got[3], got[4]);
        for (i, share) in [1.0 / 8.0, 2.0 / 8.0, 5.0 / 8.0].iter().enumerate() {
            let expected = 800.0 * share;
            assert!(
                (got[i] as f64 - expected).abs() <= 0.05 * expected,
                "{}: {} for {expected}",
                names[i],
                got[i]
            );
        }
        assert_eq!((got[3], got[4]), (0, 0), "the backups wait");

        // Two of three primaries drained: the third takes it all; the last one drained too:
        // the backups serve.
        let drain = |i: usize| {
            let path = format!("/api/upstreams/web/backends/{}", bs[i].addr());
            let (status, body) = common::admin_call(
                admin,
                "PATCH",
                &path,
                &[("Host", "localhost"), ("Content-Type", "application/json")],
                r#"{"state":"drain"}"#,
            );
            assert_eq!(status, 200, "{body}");
        };
        drain(0);
        drain(1);
        let before: Vec<u64> = bs.iter().map(|b| b.requests()).collect();
        for _ in 0..20 {
            assert_eq!(client.get("/").await.unwrap().status, 200);
        }
        let got: Vec<u64> = bs.iter().zip(&before).map(|(b, n)| b.requests() - n).collect();
        assert_eq!(got, vec![0, 0, 20, 0, 0], "one primary left serves alone");
        drain(2);
        let before: Vec<u64> = bs.iter().map(|b| b.requests()).collect();
        for _ in 0..20 {
            assert_eq!(client.get("/").await.unwrap().status, 200);
        }
        let got: Vec<u64> = bs.iter().zip(&before).map(|(b, n)| b.requests() - n).collect();
        println!("every primary drained: b1 {} b2 {}", got[3], got[4]);
        assert_eq!(got[..3], [0, 0, 0]);
        assert_eq!(got[3] + got[4], 20);
        assert!(got[3] > 0 && got[4] > 0, "both backups serve: {got:?}");

        // Back up: the backups wait again. Then the primaries die (down, not drained): the
        // requests that find them refused move on, and the backups serve them all.
        let set = |i: usize, state: &str| {
            let path = format!("/api/upstreams/web/backends/{}", bs[i].addr());
            let body = format!("{{\"state\":\"{state}\"}}");
            let headers = [("Host", "localhost"), ("Content-Type", "application/json")];
            assert_eq!(common::admin_call(admin, "PATCH", &path, &headers, &body).0, 200);
        };
        (0..3).for_each(|i| set(i, "up"));
        let before: Vec<u64> = bs.iter().map(|b| b.requests()).collect();
        for _ in 0..16 {
            assert_eq!(client.get("/").await.unwrap().status, 200);
        }
        let got: Vec<u64> = bs.iter().zip(&before).map(|(b, n)| b.requests() - n).collect();
        assert_eq!(got[3..], [0, 0], "primaries up again: {got:?}");
        for b in bs.drain(..3) {
            b.kill().await;
        }
        let before: Vec<u64> = bs.iter().map(|b| b.requests()).collect();
        for _ in 0..20 {
            assert_eq!(Client::new(addr).get("/").await.unwrap().status, 200);
        }
        let got: Vec<u64> = bs.iter().zip(&before).map(|(b, n)| b.requests() - n).collect();
        println!("every primary down: b1 {} b2 {}", got[0], got[1]);
        assert_eq!(got[0] + got[1], 20, "the backups served all: {got:?}");
        drop(dns);
    });
}

/// `status` of `GET /` through fulcrum at `addr` on a fresh connection.
async fn status(addr: SocketAddr) -> u16 {
    Client::new(addr).get("/").await.unwrap().status.as_u16()
}

/// A name that does not resolve at start: `check` warns and passes, `run` starts and answers
/// 503 (the metrics and the API work on the empty upstream), and serves within 2 s of the
/// record appearing.
#[test]
fn a_name_that_does_not_resolve_yet_starts_empty_and_serves_once_it_does() {
    if !dnsmasq_installed() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = TempDir::new("discovery", "late");
        let bs = backends_on([127, 0, 33], &["late"]).await;
        let name = "late.fulcrum.test";
        let dns = Dnsmasq::start(&dir, "", &[]);
        let cfg = config(&format!(
            "  [upstream.discovery]\n  type = \"a\"\n  name = \"{name}\"\n  port = {}\n  resolvers = [\"{}\"]\n",
            bs[0].addr().port(),
            dns.addr
        ));
        let check = common::fulcrum()
            .args(["check", "--config"])
            .arg(&cfg.0)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&check.stderr);
        assert!(check.status.success(), "{err}");
        assert!(
            err.contains("warning: upstream \"web\": the name late.fulcrum.test (A/AAAA")
                && err.contains("does not resolve now"),
            "{err}"
        );

        let fulcrum = Running::start(&cfg, 1);
        let (addr, admin) = (fulcrum.addr_of("web"), fulcrum.admin.unwrap());
        assert_eq!(status(addr).await, 503);
        assert!(listed(admin).is_empty());
        let text = common::admin_get(admin, "/metrics").await.text();
        common::assert_promtool_accepts(&text);
        assert_eq!(metric(admin, "fulcrum_discovery_backends", name).await, 0.0);
        // NXDOMAIN again and again (every min_interval): logged once.
        let deadline = Instant::now() + Duration::from_secs(10);
        while metric(admin, "fulcrum_discovery_lookup_failures_total", name).await < 2.0 {
            assert!(Instant::now() < deadline, "two lookups failed");
            // Poll interval of a loop bounded by `deadline`.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        let appeared = Instant::now();
        dns.set_hosts(&hosts(name, &[bs[0].addr().ip()]));
        while status(addr).await != 200 {
            assert!(appeared.elapsed() < Duration::from_secs(5), "never served");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let served = appeared.elapsed();
        println!("served {served:?} after the record appeared");
        assert!(served < Duration::from_secs(2), "served after {served:?}");
        assert_eq!(listed(admin), vec![(bs[0].addr().to_string(), Some(name.to_owned()))]);
        // The failing source was logged once, and its recovery once.
        let mut lines: Vec<String> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !lines.iter().any(|l| l.contains("DNS discovery answers again")) {
            lines.push(fulcrum.next_line(deadline));
        }
        lines.extend(fulcrum.lines.try_iter());
        let count = |what: &str| lines.iter().filter(|l| l.contains(what)).count();
        assert_eq!(count("DNS discovery lookup failed"), 1, "{lines:#?}");
        assert_eq!(count("DNS discovery answers again"), 1, "{lines:#?}");
    });
}

/// A backend written `host:port` is re-resolved: its address changes in DNS, it follows; the
/// admin API will not delete it (409) nor add an address DNS gives.
#[test]
fn a_host_name_backend_follows_its_address() {
    if !dnsmasq_installed() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = TempDir::new("discovery", "host");
        let bs = backends_on([127, 0, 34], &["first", "second"]).await;
        let name = "moving.fulcrum.test";
        let dns = Dnsmasq::start(&dir, &hosts(name, &[bs[0].addr().ip()]), &[]);
        let cfg = config(&format!(
            "resolvers = [\"{}\"]\n  [[upstream.backend]]\n  addr = \"{name}:{}\"\n",
            dns.addr,
            bs[0].addr().port()
        ));
        let fulcrum = Running::start(&cfg, 1);
        let (addr, admin) = (fulcrum.addr_of("web"), fulcrum.admin.unwrap());
        let mut client = Client::new(addr);
        assert_eq!(client.get("/").await.unwrap().text(), "first");

        let path = format!("/api/upstreams/web/backends/{}", bs[0].addr());
        let (code, body) = common::admin_call(
            admin,
            "DELETE",
            &path,
            &[("Host", "localhost"), ("Content-Type", "application/json")],
            "",
        );
        assert_eq!(code, 409, "{body}");
        assert!(
            body.contains("comes from DNS name moving.fulcrum.test"),
            "{body}"
        );
        let (code, body) = common::admin_call(
            admin,
            "POST",
            "/api/upstreams/web/backends",
            &[("Host", "localhost"), ("Content-Type", "application/json")],
            &format!("{{\"addr\":\"{}\"}}", bs[0].addr()),
        );
        assert_eq!(code, 409, "{body}");

        let moved = Instant::now();
        dns.set_hosts(&hosts(name, &[bs[1].addr().ip()]));
        loop {
            let text = Client::new(addr).get("/").await.unwrap().text();
            if text == "second" {
                break;
            }
            assert!(moved.elapsed() < Duration::from_secs(5), "still {text}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        println!("followed the new address in {:?}", moved.elapsed());
        assert_eq!(
            listed(admin),
            vec![(bs[1].addr().to_string(), Some(name.to_owned()))]
        );
    });
}

/// A reload with an unrelated change keeps the discovered backends: not one request fails
/// under load, and the reload removes nothing.
#[test]
fn a_reload_keeps_the_discovered_backends() {
    if !dnsmasq_installed() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = TempDir::new("discovery", "reload");
        let bs = backends_on([127, 0, 35], &["a", "b"]).await;
        let name = "kept.fulcrum.test";
        let ips: Vec<IpAddr> = bs.iter().map(|b| b.addr().ip()).collect();
        let dns = Dnsmasq::start(&dir, &hosts(name, &ips), &[]);
        // A TTL the test outlives: DNS is not asked again while the reload happens.
        let discovery = |timeout: &str| {
            format!(
                "connect_timeout = \"{timeout}\"\n  [upstream.discovery]\n  type = \"a\"\n  name = \"{name}\"\n  port = {}\n  resolvers = [\"{}\"]\n  min_interval = \"30s\"\n  max_interval = \"60s\"\n",
                bs[0].addr().port(),
                dns.addr
            )
        };
        let cfg = config(&discovery("5s"));
        let fulcrum = Running::start(&cfg, 1);
        let (addr, admin) = (fulcrum.addr_of("web"), fulcrum.admin.unwrap());
        assert_eq!(listed(admin).len(), 2);
        let plan = load(addr, 100.0, 4);
        let running = tokio::spawn(async move { lab::load::run(&plan).await });
        // The reload happens with the load flowing.
        let served = || bs.iter().map(|b| b.requests()).sum::<u64>();
        wait_until(Duration::from_secs(5), "the load flows", || {
            if served() >= 100 { Ok(()) } else { Err(format!("{} served", served())) }
        });
        let text = std::fs::read_to_string(&cfg.0).unwrap();
        std::fs::write(&cfg.0, text.replace(&discovery("5s"), &discovery("4s"))).unwrap();
        fulcrum.hangup();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let line = fulcrum.next_line(deadline);
            if line.contains("upstream reconfigured") {
                assert!(line.contains("removed=[]"), "{line}");
            }
            if line.contains("configuration reloaded") {
                break;
            }
            assert!(!line.contains("reload refused"), "{line}");
        }
        assert_eq!(listed(admin).len(), 2, "both stay");
        let outcomes = running.await.unwrap();
        common::assert_all_answered(&outcomes, outcomes.len());
        println!("{} requests across the reload, none failed", outcomes.len());
    });
}

/// The state of the backend at `addr` in `web`, as the admin API shows it.
fn state_of(admin: SocketAddr, addr: SocketAddr) -> Option<String> {
    common::backends_of(admin, "web")
        .iter()
        .find(|b| b["addr"] == addr.to_string())
        .map(|b| b["state"].as_str().unwrap().to_owned())
}

/// A backend DNS found, drained through the admin API: the drain holds when DNS drops the
/// address and gives it back (it joins again drained: the override is kept by address), and
/// through a reload; the drained backend gets no request meanwhile.
#[test]
fn a_drained_discovered_backend_stays_drained_when_it_comes_back_and_after_a_reload() {
    if !dnsmasq_installed() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = TempDir::new("discovery", "drained");
        let bs = backends_on([127, 0, 36], &["a", "b"]).await;
        let (a, b) = (bs[0].addr(), bs[1].addr());
        let name = "drained.fulcrum.test";
        let dns = Dnsmasq::start(&dir, &hosts(name, &[a.ip(), b.ip()]), &[]);
        let discovery = |timeout: &str| {
            format!(
                "connect_timeout = \"{timeout}\"\n  [upstream.discovery]\n  type = \"a\"\n  name = \"{name}\"\n  port = {}\n  resolvers = [\"{}\"]\n  min_interval = \"1s\"\n",
                a.port(),
                dns.addr
            )
        };
        let cfg = config(&discovery("5s"));
        let fulcrum = Running::start(&cfg, 1);
        let (addr, admin) = (fulcrum.addr_of("web"), fulcrum.admin.unwrap());
        wait_until(Duration::from_secs(5), "both found", || match listed(admin).len() {
            2 => Ok(()),
            n => Err(format!("{n} listed")),
        });
        let (status, body) = common::admin_call(
            admin,
            "PATCH",
            &format!("/api/upstreams/web/backends/{b}"),
            &[("Host", &admin.to_string()), ("Content-Type", "application/json")],
            r#"{"state": "drain"}"#,
        );
        assert_eq!(status, 200, "{body}");
        // DNS drops b, then gives it back: it joins again, drained.
        dns.set_hosts(&hosts(name, &[a.ip()]));
        wait_until(Duration::from_secs(5), "b leaves", || match state_of(admin, b) {
            None => Ok(()),
            Some(s) => Err(format!("b is still listed, {s}")),
        });
        // Meanwhile the API shows the drain kept for an address that is not a backend now.
        let upstream = || async {
            let text = common::admin_get(admin, "/api/upstreams/web").await.text();
            serde_json::from_str::<serde_json::Value>(&text).unwrap()
        };
        let shown = upstream().await;
        assert_eq!(
            shown["overrides"]["absent"][b.to_string()]["state"]["value"], "drain",
            "{shown}"
        );
        dns.set_hosts(&hosts(name, &[a.ip(), b.ip()]));
        wait_until(Duration::from_secs(5), "b is back", || match state_of(admin, b) {
            Some(_) => Ok(()),
            None => Err("b is not listed".into()),
        });
        assert_eq!(state_of(admin, b).as_deref(), Some("drain"), "b came back drained");
        assert!(upstream().await["overrides"].get("absent").is_none());
        // A reload with an unrelated change: still drained.
        let text = std::fs::read_to_string(&cfg.0).unwrap();
        std::fs::write(&cfg.0, text.replace(&discovery("5s"), &discovery("4s"))).unwrap();
        fulcrum.hangup();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let line = fulcrum.next_line(deadline);
            println!("{line}");
            if line.contains("configuration reloaded") {
                break;
            }
        }
        assert_eq!(state_of(admin, b).as_deref(), Some("drain"), "drained after the reload");
        let before = bs[1].requests();
        for _ in 0..20 {
            assert_eq!(Client::new(addr).get("/").await.unwrap().status, 200);
        }
        assert_eq!(bs[1].requests(), before, "the drained backend got nothing");
        // Gone from DNS again, its drain cleared through the API (DELETE of the address):
        // when DNS gives it back, it comes back up.
        dns.set_hosts(&hosts(name, &[a.ip()]));
        wait_until(Duration::from_secs(5), "b leaves", || match state_of(admin, b) {
            None => Ok(()),
            Some(s) => Err(format!("b is still listed, {s}")),
        });
        let (status, body) = common::admin_call(
            admin,
            "DELETE",
            &format!("/api/upstreams/web/backends/{b}"),
            &[("Host", &admin.to_string()), ("Content-Type", "application/json")],
            "",
        );
        assert_eq!(status, 204, "{body}");
        dns.set_hosts(&hosts(name, &[a.ip(), b.ip()]));
        wait_until(Duration::from_secs(5), "b is back, up", || {
            match state_of(admin, b).as_deref() {
                Some("up") => Ok(()),
                other => Err(format!("b: {other:?}")),
            }
        });
    });
}

/// An SRV answer one of whose targets no longer resolves is a failed lookup: the last known
/// set stays whole (the failure is counted), rather than losing that target's backend to a
/// DNS hiccup.
#[test]
fn an_srv_target_that_stops_resolving_keeps_the_last_set() {
    if !dnsmasq_installed() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = TempDir::new("discovery", "srv-target");
        let bs = backends_on([127, 0, 37], &["t1", "t2"]).await;
        let line = |i: usize| format!("{} t{}.fulcrum.test\n", bs[i].addr().ip(), i + 1);
        let srv: Vec<String> = (0..2)
            .map(|i| {
                format!(
                    "--srv-host=_http._tcp.targets.fulcrum.test,t{}.fulcrum.test,{},0,1",
                    i + 1,
                    bs[i].addr().port()
                )
            })
            .collect();
        let dns = Dnsmasq::start(&dir, &(line(0) + &line(1)), &srv);
        let name = "_http._tcp.targets.fulcrum.test";
        let cfg = config(&format!(
            "  [upstream.discovery]\n  type = \"srv\"\n  name = \"{name}\"\n  resolvers = [\"{}\"]\n  min_interval = \"1s\"\n",
            dns.addr
        ));
        let fulcrum = Running::start(&cfg, 1);
        let admin = fulcrum.admin.unwrap();
        assert_eq!(listed(admin).len(), 2);
        let failures = metric(admin, "fulcrum_discovery_lookup_failures_total", name).await;
        // t2's address record goes: the SRV record still names it.
        dns.set_hosts(&line(0));
        let deadline = Instant::now() + Duration::from_secs(10);
        while metric(admin, "fulcrum_discovery_lookup_failures_total", name).await <= failures {
            assert!(Instant::now() < deadline, "no failed lookup counted");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(listed(admin).len(), 2, "both backends stay");
        // The warning names the target and what its lookup found (both families).
        let warned = std::iter::from_fn(|| fulcrum.lines.try_recv().ok())
            .find(|l| l.contains("lookup failed"))
            .expect("the failure is logged");
        assert!(
            warned.contains("the SRV target t2.fulcrum.test. does not resolve: it has no A or AAAA record"),
            "{warned}"
        );
    });
}

/// A name written with a trailing dot (absolute: no search list) resolves end to end, and
/// the API shows it as written.
#[test]
fn a_name_with_a_trailing_dot_is_followed() {
    if !dnsmasq_installed() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = TempDir::new("discovery", "fqdn");
        let bs = backends_on([127, 0, 38], &["f1"]).await;
        let dns = Dnsmasq::start(&dir, &hosts("fq.fulcrum.test", &[bs[0].addr().ip()]), &[]);
        let cfg = config(&format!(
            "  [upstream.discovery]\n  type = \"a\"\n  name = \"fq.fulcrum.test.\"\n  port = {}\n  resolvers = [\"{}\"]\n",
            bs[0].addr().port(),
            dns.addr
        ));
        let fulcrum = Running::start(&cfg, 1);
        assert_eq!(
            listed(fulcrum.admin.unwrap()),
            vec![(
                bs[0].addr().to_string(),
                Some("fq.fulcrum.test.".to_owned())
            )]
        );
        assert_eq!(status(fulcrum.addr_of("web")).await, 200);
    });
}

/// An SRV answer that gives one address twice (priority 0 weight 1, priority 1 weight 5),
/// and a record of port 0, which dnsmasq lists in a new order at each lookup: one backend,
/// a primary of weight 1, and nothing changes at the lookups that follow (before, the first
/// record listed won: weight and tier flipped); the port-0 record is skipped and said once.
#[test]
fn an_srv_answer_with_a_duplicate_and_port_0_settles() {
    if !dnsmasq_installed() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = TempDir::new("discovery", "srv-dup");
        let bs = backends_on([127, 0, 38], &["d1"]).await;
        let port = bs[0].addr().port();
        let target = "d1.fulcrum.test";
        let srv = [
            format!("--srv-host=_http._tcp.dup.fulcrum.test,{target},{port},0,1"),
            format!("--srv-host=_http._tcp.dup.fulcrum.test,{target},{port},1,5"),
            format!("--srv-host=_http._tcp.dup.fulcrum.test,{target},0,0,3"),
        ];
        let dns = Dnsmasq::start(&dir, &hosts(target, &[bs[0].addr().ip()]), &srv);
        let cfg = config(&format!(
            "  [upstream.discovery]\n  type = \"srv\"\n  name = \"_http._tcp.dup.fulcrum.test\"\n  resolvers = [\"{}\"]\n  min_interval = \"1s\"\n  max_interval = \"1s\"\n",
            dns.addr
        ));
        let fulcrum = Running::start(&cfg, 1);
        let admin = fulcrum.admin.unwrap();
        let only = |why: &str| {
            let b = common::backends_of(admin, "web");
            assert_eq!(b.len(), 1, "{why}: {b:?}");
            assert_eq!(b[0]["addr"], bs[0].addr().to_string(), "{why}");
            assert_eq!(b[0]["weight"]["static"], 1, "{why}: {b:?}");
            assert_eq!(b[0]["backup"], false, "{why}: {b:?}");
        };
        only("at start");
        // Six lookups' time (one a second): what the log says meanwhile.
        let (mut changes, mut port_zero) = (0, 0);
        let until = Instant::now() + Duration::from_secs(6);
        while let Ok(line) = fulcrum
            .lines
            .recv_timeout(until.saturating_duration_since(Instant::now()))
        {
            changes += usize::from(line.contains("upstream reconfigured"));
            port_zero += usize::from(line.contains("give port 0"));
            only("meanwhile");
        }
        assert_eq!(changes, 0, "the upstream changed at a later lookup");
        assert_eq!(port_zero, 1, "the port-0 record is said once");
        only("at the end");
        assert_eq!(status(fulcrum.addr_of("web")).await, 200);
    });
}

/// A weight set through the API on a backend an SRV record gives stays in force when the
/// record's weight changes (the other backend takes the new weight), the API shows it as the
/// override, and the log says the change was DNS's, not the API's.
#[test]
fn an_srv_weight_change_leaves_the_operators_weight() {
    if !dnsmasq_installed() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = TempDir::new("discovery", "srv-weight");
        let bs = backends_on([127, 0, 39], &["w1", "w2"]).await;
        let port = bs[0].addr().port();
        let hosts_file: String = (0..2)
            .map(|i| format!("{} w{}.fulcrum.test\n", bs[i].addr().ip(), i + 1))
            .collect();
        let records = |w: u16| -> Vec<String> {
            (1..=2)
                .map(|i| format!("--srv-host=_http._tcp.w.fulcrum.test,w{i}.fulcrum.test,{port},0,{w}"))
                .collect()
        };
        let dns = Dnsmasq::start(&dir, &hosts_file, &records(5));
        let cfg = config(&format!(
            "  [upstream.discovery]\n  type = \"srv\"\n  name = \"_http._tcp.w.fulcrum.test\"\n  resolvers = [\"{}\"]\n  min_interval = \"1s\"\n  max_interval = \"1s\"\n",
            dns.addr
        ));
        let fulcrum = Running::start(&cfg, 1);
        let admin = fulcrum.admin.unwrap();
        let backend = |i: usize| {
            common::backends_of(admin, "web")
                .into_iter()
                .find(|b| b["addr"] == bs[i].addr().to_string())
                .unwrap_or_else(|| panic!("no backend {}", bs[i].addr()))
        };
        let (code, body) = common::admin_call(
            admin,
            "PATCH",
            &format!("/api/upstreams/web/backends/{}", bs[0].addr()),
            &[("Host", "localhost"), ("Content-Type", "application/json")],
            r#"{"weight":10}"#,
        );
        assert_eq!(code, 200, "{body}");
        // The records' weight goes from 5 to 7: the server starts again with them.
        let dns_port = dns.addr.port();
        dns.stop();
        let _dns = Dnsmasq::start_on(&dir, &hosts_file, &records(7), Some(dns_port));
        let deadline = Instant::now() + Duration::from_secs(15);
        while backend(1)["weight"]["static"] != 7 {
            assert!(Instant::now() < deadline, "w2 never took weight 7: {}", backend(1));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let w1 = backend(0);
        assert_eq!(w1["weight"]["static"], 10, "{w1}");
        assert_eq!(w1["overrides"]["weight"]["value"], 10, "{w1}");
        let mut log = Vec::new();
        while let Ok(line) = fulcrum.lines.try_recv() {
            log.push(line);
        }
        let dns_said = log.iter().any(|l| {
            l.contains("DNS discovery changed a backend's weight")
                && l.contains(&bs[1].addr().to_string())
                && l.contains("to=7")
        });
        assert!(dns_said, "{log:#?}");
        assert!(
            !log.iter().any(|l| l.contains("by the admin API") && l.contains("to=7")),
            "{log:#?}"
        );
    });
}

/// Where the system-resolver test's DNS server listens: port 53 (resolv.conf names no port),
/// on a loopback address of its own.
const SYSTEM_DNS: [u8; 4] = [127, 0, 0, 153];

/// Whether `fulcrum` can run in a mount namespace of its own with another /etc/resolv.conf
/// bound over the system's (root, and util-linux's unshare); says why the test skips when not.
fn can_bind_resolv_conf() -> bool {
    let ok = Command::new("unshare")
        .args(["-m", "sh", "-c", "mount --bind /dev/null /etc/resolv.conf"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        println!(
            "SKIPPED: needs root and unshare (util-linux) to give fulcrum a resolv.conf of its own"
        );
    }
    ok
}

/// fulcrum running `cfg` under `unshare -m`, with `resolv_conf` bound over /etc/resolv.conf
/// (and `hosts` over /etc/hosts, if given); and its admin listener.
fn fulcrum_under(
    resolv_conf: &Path,
    hosts: Option<&Path>,
    cfg: &TempFile,
) -> (ChildGuard, SocketAddr) {
    let mut command = Command::new("unshare");
    command.args(["-m", "sh", "-c"]);
    match hosts {
        Some(h) => command
            .arg("mount --bind \"$1\" /etc/resolv.conf && mount --bind \"$2\" /etc/hosts && shift 2 && exec \"$@\"")
            .arg("sh")
            .arg(resolv_conf)
            .arg(h),
        None => command
            .arg("mount --bind \"$1\" /etc/resolv.conf && shift && exec \"$@\"")
            .arg("sh")
            .arg(resolv_conf),
    };
    let mut child = ChildGuard(
        command
            .arg(env!("CARGO_BIN_EXE_fulcrum"))
            .args(["run", "--config"])
            .arg(&cfg.0)
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let lines = common::lines_of(child.stderr.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    let admin = loop {
        let line = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("fulcrum logs its admin listener");
        let listen = line
            .contains(" admin listener")
            .then(|| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix("listen="))
                    .and_then(|a| a.parse().ok())
            })
            .flatten();
        if let Some(a) = listen {
            break a;
        }
    };
    (child, admin)
}

/// The system's resolver, as a Kubernetes pod has it (`search` and `options ndots:5`), with a
/// wildcard under the search domain: a name written with a trailing dot whose record goes
/// (`NXDOMAIN`) keeps its last set, and no query goes through the search list; before, the
/// dot was dropped and fulcrum switched to the wildcard's address. Runs fulcrum under
/// `unshare -m` with the test's resolv.conf bound over /etc/resolv.conf; dnsmasq on
/// 127.0.0.153:53 (the only test on port 53: resolv.conf names no port). Skips without root.
#[test]
fn a_dotted_name_never_falls_through_the_system_search_list() {
    if !dnsmasq_installed() || !can_bind_resolv_conf() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = TempDir::new("discovery", "search-list");
        let bs = backends_on([127, 0, 40], &["s1"]).await;
        let name = "api.fulcrum.test";
        let dns = Dnsmasq::start_at(
            &dir,
            &hosts(name, &[bs[0].addr().ip()]),
            &["--address=/corp.test/127.9.9.9".to_owned()],
            SYSTEM_DNS,
            Some(53),
        );
        let resolv = dir.0.join("resolv.conf");
        std::fs::write(
            &resolv,
            format!(
                "nameserver {}\nsearch corp.test\noptions ndots:5\n",
                IpAddr::from(SYSTEM_DNS)
            ),
        )
        .unwrap();
        let cfg = config(&format!(
            "  [upstream.discovery]\n  type = \"a\"\n  name = \"{name}.\"\n  port = {}\n  min_interval = \"1s\"\n",
            bs[0].addr().port()
        ));
        let (child, admin) = fulcrum_under(&resolv, None, &cfg);
        let addrs = || -> Vec<String> { listed(admin).into_iter().map(|b| b.0).collect() };
        let found = vec![bs[0].addr().to_string()];
        wait_until(Duration::from_secs(10), "the name's backend is listed", || {
            let now = addrs();
            if now == found {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        });
        // The source as the API names it (its metrics' label).
        let source = listed(admin)[0].1.clone().unwrap_or_default();
        let failures = metric(admin, "fulcrum_discovery_lookup_failures_total", &source).await;
        // The record goes: NXDOMAIN for the name, while the wildcard answers under corp.test.
        dns.set_hosts("");
        let deadline = Instant::now() + Duration::from_secs(10);
        while metric(admin, "fulcrum_discovery_lookup_failures_total", &source).await <= failures {
            assert_eq!(addrs(), found, "the set changed instead of failing");
            assert!(Instant::now() < deadline, "no failed lookup counted");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(addrs(), found, "the last set stays");
        drop(child);
    });
}

/// A name in /etc/hosts (Kubernetes' `hostAliases`, Docker's `extra_hosts`), written without a
/// dot, under a pod's `search` list and `ndots:5`, with no DNS server answering: fulcrum
/// takes its address from the hosts file, as getaddrinfo does, and follows an edit of the
/// file within `min_interval`. Before, only the first search-list form was looked for in
/// the file (hickory's `lookup`), and the name did not resolve. The resolv.conf names
/// 127.0.0.154, where nothing listens. Skips without root.
#[test]
fn a_name_in_the_hosts_file_resolves_through_the_system_search_list() {
    if !can_bind_resolv_conf() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = TempDir::new("discovery", "hosts-file");
        let bs = backends_on([127, 0, 41], &["h1", "h2"]).await;
        let name = "backend.example";
        let resolv = dir.0.join("resolv.conf");
        std::fs::write(
            &resolv,
            "nameserver 127.0.0.154\nsearch corp.test\noptions ndots:5 timeout:1 attempts:1\n",
        )
        .unwrap();
        let hosts_file = dir.0.join("hosts");
        let ip = |i: usize| bs[i].addr().ip();
        std::fs::write(
            &hosts_file,
            format!("# the test's\n127.0.0.1 localhost\n{} {name} other\n", ip(0)),
        )
        .unwrap();
        let cfg = config(&format!(
            "  [upstream.discovery]\n  type = \"a\"\n  name = \"{name}\"\n  port = {}\n  min_interval = \"1s\"\n",
            bs[0].addr().port()
        ));
        let (child, admin) = fulcrum_under(&resolv, Some(&hosts_file), &cfg);
        let addrs = || -> Vec<String> { listed(admin).into_iter().map(|b| b.0).collect() };
        for i in [0, 1] {
            if i == 1 {
                // Edited in place (the bind mount follows the file, not a new one).
                std::fs::write(&hosts_file, hosts(name, &[ip(1)])).unwrap();
            }
            let want = vec![bs[i].addr().to_string()];
            wait_until(Duration::from_secs(15), "the hosts file's address is listed", || {
                let now = addrs();
                if now == want {
                    Ok(())
                } else {
                    Err(format!("{now:?}"))
                }
            });
        }
        drop(child);
    });
}

/// Two sources in one upstream, one asked of a server that never answers (each of its
/// lookups runs into fulcrum's 5 s bound): the other's answers stay fresh, its age never
/// reaching those 5 s, since an upstream's due lookups run at once. Before, they ran one
/// after the other and the answering source was asked only every ~6 s.
#[test]
fn a_source_that_does_not_answer_holds_no_other_back() {
    if !dnsmasq_installed() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = TempDir::new("discovery", "concurrent");
        let bs = backends_on([127, 0, 42], &["fresh"]).await;
        let name = "fresh.fulcrum.test";
        let dns = Dnsmasq::start(&dir, &hosts(name, &[bs[0].addr().ip()]), &[]);
        // Reads nothing, answers nothing; held until the end.
        let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
        let cfg = config(&format!(
            "resolvers = [\"{}\"]\n  [[upstream.backend]]\n  addr = \"{name}:{}\"\n  [upstream.discovery]\n  type = \"a\"\n  name = \"silent.fulcrum.test\"\n  port = 80\n  resolvers = [\"{}\"]\n  min_interval = \"1s\"\n",
            dns.addr,
            bs[0].addr().port(),
            silent.local_addr().unwrap(),
        ));
        let fulcrum = Running::start(&cfg, 1);
        let admin = fulcrum.admin.unwrap();
        let started = Instant::now();
        let mut oldest = 0.0f64;
        // Two of the silent source's lookups and more.
        while started.elapsed() < Duration::from_secs(12) {
            oldest = oldest.max(metric(admin, "fulcrum_discovery_answer_age_seconds", name).await);
            // Poll interval of a loop bounded by the 12 s above.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!("the answering source's answer was at most {oldest} s old");
        assert!(oldest < 4.0, "its answer grew {oldest} s old");
        let failed = metric(
            admin,
            "fulcrum_discovery_lookup_failures_total",
            "silent.fulcrum.test",
        )
        .await;
        assert!(failed >= 2.0, "the silent source failed {failed} times");
        drop(silent);
    });
}
