//! High availability: what a keepalived pair of fulcrums needs of them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use lab::Client;

mod common;
use common::{Running, TempFile, backend_block};

/// The two nodes of a pair run the same file; a failover must not move a client whose key
/// the algorithm hashes. Every hash algorithm places keys by the backends' names alone (and
/// `random`-drawing ones by `seed`), so two fulcrums with one file agree on every client.
#[test]
fn two_nodes_with_one_file_send_every_client_to_the_same_backend() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let backends = common::backends(&["a", "b", "c", "d"]).await;
        let block = backend_block(&backends.iter().map(|b| (b.addr(), 1)).collect::<Vec<_>>());
        for (algorithm, extra) in [
            ("ip_hash", ""),
            ("maglev", ""),
            ("hash", "hash_key = \"client_ip\"\nconsistent = true\n"),
            ("bounded_load", "hash_key = \"client_ip\"\n"),
        ] {
            let text = format!(
                "workers = 2\naccess_log = false\n\n\
                 [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
                 [[upstream]]\nname = \"web\"\nalgorithm = \"{algorithm}\"\n{extra}{block}"
            );
            let file = TempFile::new(&format!("ha-{algorithm}.toml"), &text);
            let node_a = Running::start(&file, 1);
            let node_b = Running::start(&file, 1);
            let mut answers: Vec<HashMap<IpAddr, String>> = Vec::new();
            for node in [&node_a, &node_b] {
                let mut seen = HashMap::new();
                // 200 clients in distinct /24s (ip_hash hashes the first three octets).
                for i in 0..200u32 {
                    let ip = lab::load::client_addr(i);
                    let mut client = Client::bound(node.addr_of("web"), ip);
                    let reply = client.get("/").await.unwrap();
                    assert_eq!(reply.status, 200);
                    seen.insert(ip, reply.text());
                }
                answers.push(seen);
            }
            assert_eq!(answers[0], answers[1], "{algorithm}: the nodes disagree");
            let used: std::collections::HashSet<&String> = answers[0].values().collect();
            assert_eq!(
                used.len(),
                4,
                "{algorithm}: the clients spread over every backend"
            );
        }
    });
}

/// A process started by the failover test, killed (by PID) when dropped.
struct Proc(std::process::Child);

impl Proc {
    fn start(ns: &str, program: &str, args: &[&str]) -> Proc {
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", ns, program])
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        Proc(child)
    }

    fn signal(&self, signal: &str) {
        let _ = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &self.0.id().to_string()])
            .status();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Network namespaces made for one test, deleted when dropped (with everything in them).
struct Namespaces(Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.0 {
            delete_namespace(ns);
        }
    }
}

fn ip(args: &[&str]) {
    let status = std::process::Command::new("ip")
        .args(args)
        .status()
        .unwrap();
    assert!(status.success(), "ip {}", args.join(" "));
}

fn has_vip(ns: &str, vip: &str) -> bool {
    let out = std::process::Command::new("ip")
        .args(["-n", ns, "-4", "addr", "show", "dev", "eth0"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains(&format!("{vip}/"))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The failover tests' hold on what they share with every other namespace test on the
/// machine, across test binaries and checkouts: an exclusive `flock` on one file, released
/// when dropped. Their names are their own (see [`Names`]), but keepalived keeps global state
/// under `/run` (it writes `/run/keepalived.reload` on a SIGHUP, which the planned switch
/// sends), `ip netns add` makes `/run/netns` a mount point on first use (two first uses at
/// once can stack two mounts and hide a namespace mounted under the lower one), and the recovery
/// times they assert and docs/high-availability.md compares are measured one run at a time:
/// two failovers at once on a 2-core machine measure each other.
struct NamespaceLock {
    _held: std::fs::File,
}

impl NamespaceLock {
    fn take() -> NamespaceLock {
        // A fixed name on purpose: every holder must find the same file. It is never removed
        // (removing a lock file lets a waiter lock the old one while a newcomer locks a new one).
        let path = std::env::temp_dir().join("fulcrum-namespace-tests.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .unwrap_or_else(|e| panic!("flock {}: {e}", path.display()));
        NamespaceLock { _held: file }
    }
}

/// The names of one failover run's namespaces: `fulcrum-{pid}-{tag}-{role}`, unique on the
/// machine while this process lives (the pid) and within it (the tag, one per test). Interfaces
/// need no such care: each veth is made inside its namespace and its peer inside the switch's
/// (`ip -n NS link add eth0 ... peer name pc netns SWITCH`), so no test's interface ever
/// exists in the host's namespace, where the names would be shared and limited to 15 bytes.
struct Names {
    pid: u32,
    tag: &'static str,
}

impl Names {
    fn new(tag: &'static str) -> Names {
        Names {
            pid: std::process::id(),
            tag,
        }
    }

    fn of(&self, role: &str) -> String {
        format!("fulcrum-{}-{}-{role}", self.pid, self.tag)
    }
}

/// Whether this process holds CAP_NET_ADMIN (to make links and addresses) and CAP_SYS_ADMIN
/// (`ip netns add` bind-mounts the namespace and `ip netns exec` remounts `/sys`): the
/// effective set in `/proc/self/status`, bits 12 and 21 (capability.h).
fn may_make_namespaces() -> bool {
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_SYS_ADMIN: u32 = 21;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    [CAP_NET_ADMIN, CAP_SYS_ADMIN]
        .iter()
        .all(|bit| effective & (1 << bit) != 0)
}

/// Why the failover test cannot run here, if it cannot. Called with the [`NamespaceLock`]
/// held. A process that may make namespaces (root, as `scripts/test` and CI run) and cannot is
/// a failure here, not a skip: a test that skips there would pass without having run.
fn cannot_make_namespaces(names: &Names) -> Option<String> {
    if !common::installed("keepalived", "--version") {
        return Some("keepalived is not installed (`.ci/run` installs it)".into());
    }
    if !common::installed("curl", "--version") {
        return Some("curl is not installed".into());
    }
    if !may_make_namespaces() {
        return Some(
            "network namespaces cannot be made here (CAP_NET_ADMIN and CAP_SYS_ADMIN needed: run as root)"
                .into(),
        );
    }
    // The probe is this test's own name, made and removed under the lock: no other test can
    // make, see or remove it meanwhile.
    let probe = names.of("probe");
    delete_namespace(&probe);
    let made = std::process::Command::new("ip")
        .args(["netns", "add", &probe])
        .output()
        .unwrap();
    delete_namespace(&probe);
    assert!(
        made.status.success(),
        "as root, `ip netns add {probe}` failed: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    None
}

/// Removes namespace `ns` if it exists: one left by an earlier process that had this pid and
/// was killed before it cleaned up, or this test's own.
fn delete_namespace(ns: &str) {
    let _ = std::process::Command::new("ip")
        .args(["netns", "del", ns])
        .stderr(std::process::Stdio::null())
        .status();
}

/// The real thing: keepalived on two balancer namespaces with VRRP between them over a bridge,
/// fulcrum behind the VIP on each, a backend namespace, and a client namespace sending a
/// steady stream of new connections to the VIP — all on 10.99.0.0/24, which exists only
/// inside the namespaces (none has a route out). Then: the master's fulcrum is killed, comes
/// back (preemption takes the VIP back), the master's keepalived is killed, comes back, and
/// is stopped gracefully (a planned switch). Each event's failed requests and time to
/// recover are printed; docs/high-availability.md quotes them.
#[test]
fn a_keepalived_pair_moves_the_vip_when_the_master_s_fulcrum_dies() {
    let _lock = NamespaceLock::take();
    let names = Names::new("fulcrum");
    if let Some(why) = cannot_make_namespaces(&names) {
        println!("SKIPPED: {why}");
        return;
    }
    let (report, moved) = failover(Balancer::Fulcrum, &names);
    let (_, _, _, recovered) = &report[0];
    assert!(
        *recovered <= 3000,
        "after the master's fulcrum died, requests succeeded again only after {recovered} ms: {report:?}"
    );
    assert!(
        report.iter().all(|r| r.3 < u64::MAX),
        "every event recovered: {report:?}"
    );
    // Every hand-over of the VIP between two answering balancers — (d) and "it comes back"
    // by preemption, (c) by the backup's raised priority — loses at most the one request in
    // flight at that instant: the client's next packet for a connection made with the old
    // master goes to the new one, which never saw it and resets it (or a SYN sent as the old
    // master drops the address is retried after 1 s, past this client's limit). The client
    // sends one request at a time, so one is the bound; more would be fulcrum's loss.
    // Measured: 1 lost of 3,654 requests over 40 such switches (docs/high-availability.md).
    for handover in [1, 3, 4] {
        assert!(
            report[handover].2 <= 1,
            "a hand-over between two answering balancers loses at most the request in flight: {report:?}"
        );
    }
    // The switch happened: the backup holds the VIP, the master does not.
    assert!(moved, "the planned switch moved the VIP to the backup");
}

/// The same events with nginx in fulcrum's place and `curl` as the check: the peer the
/// numbers above are compared with, measured the same way on the same machine. It asserts only
/// that nginx recovered; docs/high-availability.md puts the two side by side.
#[test]
fn for_scale_the_same_pair_with_nginx_in_fulcrum_s_place() {
    if !common::installed("nginx", "-v") {
        return;
    }
    let _lock = NamespaceLock::take();
    let names = Names::new("nginx");
    if let Some(why) = cannot_make_namespaces(&names) {
        println!("SKIPPED: {why}");
        return;
    }
    let (report, _) = failover(Balancer::Nginx, &names);
    assert!(report.iter().all(|r| r.3 < u64::MAX), "{report:?}");
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Balancer {
    Fulcrum,
    Nginx,
}

/// One event's result: what happened, requests sent and failed in its window, and how long
/// after it requests succeeded again (0: none failed).
type Event = (String, usize, usize, u64);

/// Runs the failover sequence with `balancer` on both nodes: each event's result, and whether
/// the planned switch left the VIP on the backup alone. The caller holds the
/// [`NamespaceLock`].
fn failover(balancer: Balancer, names: &Names) -> (Vec<Event>, bool) {
    let bin = env!("CARGO_BIN_EXE_fulcrum");
    let (client, lb1, lb2, backend, switch) = (
        names.of("client"),
        names.of("lb1"),
        names.of("lb2"),
        names.of("backend"),
        names.of("switch"),
    );
    let namespaces = Namespaces(vec![
        client.clone(),
        lb1.clone(),
        lb2.clone(),
        backend.clone(),
        switch.clone(),
    ]);
    for ns in &namespaces.0 {
        delete_namespace(ns);
        ip(&["netns", "add", ns]);
        ip(&["-n", ns, "link", "set", "lo", "up"]);
    }
    ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"]);
    ip(&["-n", &switch, "link", "set", "br0", "up"]);
    for (ns, addr, port) in [
        (&client, "10.99.0.10/24", "pc"),
        (&lb1, "10.99.0.11/24", "pa"),
        (&lb2, "10.99.0.12/24", "pb"),
        (&backend, "10.99.0.20/24", "ps"),
    ] {
        ip(&[
            "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", &switch,
        ]);
        ip(&["-n", &switch, "link", "set", port, "master", "br0", "up"]);
        ip(&["-n", ns, "addr", "add", addr, "dev", "eth0"]);
        ip(&["-n", ns, "link", "set", "eth0", "up"]);
    }
    let dir = common::TempDir::new("ha", &format!("failover-{}", names.tag));
    let _backend = Proc::start(
        &backend,
        bin,
        &[
            "lab",
            "backend",
            "--listen",
            "10.99.0.20:9001",
            "--name",
            "s",
        ],
    );
    let fulcrum_toml = format!("{}/fulcrum.toml", dir.path());
    std::fs::write(
        &fulcrum_toml,
        "workers = 1\naccess_log = false\n\n\
         [[listener]]\nlisten = \"0.0.0.0:8080\"\nupstream = \"web\"\n\n\
         [[upstream]]\nname = \"web\"\n  [[upstream.backend]]\n  addr = \"10.99.0.20:9001\"\n\n\
         [admin]\nlisten = \"127.0.0.1:9900\"\n",
    )
    .unwrap();
    let check = match balancer {
        Balancer::Fulcrum => format!("{bin} health --admin 127.0.0.1:9900 --timeout 800ms"),
        Balancer::Nginx => {
            "/usr/bin/curl -sf -o /dev/null --max-time 0.8 http://127.0.0.1:8080/".to_owned()
        }
    };
    let nginx_conf = format!("{}/nginx.conf", dir.path());
    std::fs::create_dir_all(format!("{}/nginx", dir.path())).unwrap();
    std::fs::write(
        &nginx_conf,
        format!(
            "master_process off;
daemon off;
error_log stderr error;
pid {d}/nginx.pid;
             events {{}}
http {{
  access_log off;
  client_body_temp_path {d}/nginx;
  proxy_temp_path {d}/nginx;
               fastcgi_temp_path {d}/nginx;
  uwsgi_temp_path {d}/nginx;
  scgi_temp_path {d}/nginx;
               upstream web {{ server 10.99.0.20:9001; }}
               server {{ listen 0.0.0.0:8080; location / {{ proxy_pass http://web; }} }}
}}
",
            d = dir.path()
        ),
    )
    .unwrap();
    let keepalived_conf = |ns: &str, priority: u32| {
        let conf = format!("{}/keepalived-{ns}.conf", dir.path());
        std::fs::write(
            &conf,
            format!(
                "global_defs {{\n  script_user root\n}}\n\
                 vrrp_script fulcrum_healthy {{\n  script \"{check}\"\n  interval 1\n  timeout 1\n  fall 1\n  rise 2\n}}\n\
                 vrrp_instance fulcrum {{\n  state BACKUP\n  interface eth0\n  virtual_router_id 51\n  priority {priority}\n  advert_int 1\n  virtual_ipaddress {{\n    10.99.0.100/24\n  }}\n  track_script {{\n    fulcrum_healthy\n  }}\n}}\n"
            ),
        )
        .unwrap();
        conf
    };
    let keepalived = |ns: &str, priority: u32| -> Proc {
        let conf = keepalived_conf(ns, priority);
        let d = dir.path();
        Proc::start(
            ns,
            "keepalived",
            &[
                "--dont-fork",
                "--vrrp",
                "--use-file",
                &conf,
                "--pid",
                &format!("{d}/{ns}.pid"),
                "--vrrp_pid",
                &format!("{d}/{ns}-vrrp.pid"),
                "--checkers_pid",
                &format!("{d}/{ns}-checkers.pid"),
            ],
        )
    };
    let run_fulcrum = |ns: &str| match balancer {
        Balancer::Fulcrum => Proc::start(ns, bin, &["run", "--config", &fulcrum_toml]),
        Balancer::Nginx => Proc::start(
            ns,
            "nginx",
            &["-e", "stderr", "-c", &nginx_conf, "-p", dir.path()],
        ),
    };
    let mut fulcrum1 = run_fulcrum(&lb1);
    let _fulcrum2 = run_fulcrum(&lb2);
    // Both balancers pass the check before keepalived starts, however slowly a busy machine
    // started them: the backup is electable when the first event comes.
    for ns in [&lb1, &lb2] {
        common::wait_until(
            Duration::from_secs(20),
            &format!("the balancer in {ns} passes the check"),
            || {
                let out = std::process::Command::new("ip")
                    .args(["netns", "exec", ns, "sh", "-c", &check])
                    .output()
                    .unwrap();
                if out.status.success() {
                    return Ok(());
                }
                Err(format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ))
            },
        );
    }
    // Priorities close to the top: a backup's skew time before it takes a released VIP is
    // (256 - priority) / 256 of an advert interval (RFC 5798), 0.3 s at 180.
    let mut keepalived1 = keepalived(&lb1, 200);
    let keepalived2 = keepalived(&lb2, 180);
    let vip = "10.99.0.100";
    let started = Instant::now();
    while !has_vip(&lb1, vip) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the master did not take the VIP"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The client: a new connection for every request, 20 a second, each given 1 s; each
    // logged with when it started, its status and how long it took (curl's own clock: no
    // process more per request).
    let log = format!("{}/client.log", dir.path());
    let script = format!(
        "end=$(( $(date +%s) + 44 )); while [ $(date +%s) -lt $end ]; do \
         t=$(date +%s%3N); c=$(curl -s -o /dev/null -w '%{{http_code}} %{{time_total}}' --max-time 1 http://{vip}:8080/); \
         echo \"$t $c\" >> {log}; sleep 0.05; done"
    );
    let mut stream = Proc(
        std::process::Command::new("ip")
            .args(["netns", "exec", &client, "sh", "-c", &script])
            .env("LC_ALL", "C")
            .spawn()
            .unwrap(),
    );
    let t0 = now_ms();
    let at = |s: u64| {
        std::thread::sleep(Duration::from_millis(
            (t0 + s * 1000).saturating_sub(now_ms()),
        ))
    };
    let mut events: Vec<(&str, u64)> = Vec::new();
    at(5);
    events.push(("(a) the master's balancer killed", now_ms()));
    fulcrum1.signal("KILL");
    at(12);
    events.push(("(d) it comes back: the master takes the VIP back", now_ms()));
    fulcrum1 = run_fulcrum(&lb1);
    at(20);
    events.push(("(b) the master's keepalived killed", now_ms()));
    keepalived1.signal("KILL");
    at(28);
    events.push(("it comes back", now_ms()));
    keepalived1 = keepalived(&lb1, 200);
    at(36);
    // A planned switch: the backup's priority raised above the master's (keepalived reads
    // its file again on SIGHUP); it takes the VIP over while the master still answers.
    events.push(("(c) planned: the backup's priority raised", now_ms()));
    keepalived_conf(&lb2, 250);
    keepalived2.signal("HUP");
    let _ = stream.0.wait();
    let moved = has_vip(&lb2, vip) && !has_vip(&lb1, vip);
    drop(keepalived1);
    drop(fulcrum1);
    // (started, ended, status) of each request, one after another, in ms.
    let lines: Vec<(u64, u64, String)> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let mut fields = l.split(' ');
            let started: u64 = fields.next()?.parse().ok()?;
            let code = fields.next()?.to_owned();
            let seconds: f64 = fields.next()?.parse().ok()?;
            Some((started, started + (seconds * 1000.0) as u64, code))
        })
        .collect();
    let mut report = Vec::new();
    for (i, (what, start)) in events.iter().enumerate() {
        let end = events.get(i + 1).map_or(u64::MAX, |e| e.1);
        // A request counts for the event in force when it ended: one sent a few ms before a
        // kill and failing because of it is that kill's failure, not a failure of the event
        // before with no recovery after it (as it was when requests counted where they began).
        let window: Vec<&(u64, u64, String)> = lines
            .iter()
            .filter(|(_, ended, _)| *ended >= *start && *ended < end)
            .collect();
        // The stream ran through the event. (About 12 requests a second on a quiet machine,
        // 6 beside other tests and busy loops; a bound on the total, 300 of some 500, once
        // came within 25 of failing there.)
        assert!(
            window.len() >= 10,
            "{what}: {} requests in its window; the client did not keep up",
            window.len()
        );
        let failed = window.iter().filter(|(_, _, c)| c != "200").count();
        let last_failure = window
            .iter()
            .rev()
            .find(|(_, _, c)| c != "200")
            .map(|(t, _, _)| *t);
        // From the event to the start of the first request after the last failure that was
        // answered (requests do not overlap, so it started after the event).
        let recovered_ms = last_failure.map_or(0, |last| {
            window
                .iter()
                .find(|(t, _, c)| *t > last && c == "200")
                .map_or(u64::MAX, |(t, _, _)| t.saturating_sub(*start))
        });
        report.push((what.to_string(), window.len(), failed, recovered_ms));
    }
    for (what, sent, failed, recovered) in &report {
        println!(
            "{balancer:?}: {what}: {failed} of {sent} requests failed; answered again after {recovered} ms"
        );
    }
    drop(_fulcrum2);
    (report, moved)
}
