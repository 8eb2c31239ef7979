//! A fleet sharing its runtime state through etcd (issue 31), with real processes: three
//! `fulcrum run` on one configuration file (each on free ports of its own) and one etcd
//! (Debian's etcd-server), real HTTP backends that note when each request arrived and which
//! instance sent it.
//!
//! 1. A drain through instance 1's API stops new requests to that backend from all three
//!    within 1 s, measured from the API's answer to each instance's last request to it.
//! 2. etcd killed: all three keep serving on their state (every request answered, the drain
//!    in force).
//! 3. A change made through instance 2's API while etcd is down reaches the two others once
//!    etcd is back: the three APIs show the same backends within [`CONVERGE`].

mod common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{Etcd, Running, TempFile, admin_call, backends_of, installed, wait_until};

/// The bound of the claim: a drain through one instance stops every instance's new requests
/// to the backend within this.
const DRAIN_BOUND: Duration = Duration::from_secs(1);

/// How long after etcd answers again the three instances may take to show the same state:
/// an instance tries etcd again every 2 s at most (`cluster::MAX_RETRY`), and a request that
/// went out while etcd was still down waits up to 3 s (`REQUEST_TIMEOUT`); the rest is margin
/// for a loaded machine.
const CONVERGE: Duration = Duration::from_secs(10);

/// A backend that answers 200 to every request (HTTP/1.1, kept alive) and notes when each
/// arrived and its path.
struct Backend {
    addr: SocketAddr,
    arrivals: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Backend {
    fn start() -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let noted = arrivals.clone();
        // The accept thread ends with the test's process: the listener lives as long.
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let noted = noted.clone();
                std::thread::spawn(move || serve(stream, &noted));
            }
        });
        Backend { addr, arrivals }
    }

    /// When each request sent by instance `i` (its path starts `/i/`) arrived.
    fn sent_by(&self, i: usize) -> Vec<Instant> {
        let prefix = format!("/{i}/");
        self.arrivals
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, path)| path.starts_with(&prefix))
            .map(|(at, _)| *at)
            .collect()
    }

    fn count(&self) -> usize {
        self.arrivals.lock().unwrap().len()
    }
}

/// Answers the requests of one connection until it closes.
fn serve(stream: TcpStream, noted: &Mutex<Vec<(Instant, String)>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let at = Instant::now();
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        // The head's other lines; the test's requests have no body.
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" {
                break;
            }
        }
        noted.lock().unwrap().push((at, path));
        if writer
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .is_err()
        {
            return;
        }
    }
}

/// Requests to each instance of the fleet, one every 10 ms per instance, each on a new
/// connection, path `/{instance}/{n}`: the statuses, until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Vec<u16>>>,
}

impl Load {
    fn start(fleet: &[Running]) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = fleet
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let (to, stop) = (f.addr_of("web"), stop.clone());
                std::thread::spawn(move || {
                    let mut statuses = Vec::new();
                    let mut next = Instant::now();
                    while !stop.load(Ordering::SeqCst) {
                        statuses.push(get(to, &format!("/{i}/{}", statuses.len())));
                        next += Duration::from_millis(10);
                        // The load's own pace: one request every 10 ms.
                        std::thread::sleep(next.saturating_duration_since(Instant::now()));
                    }
                    statuses
                })
            })
            .collect();
        Load { stop, threads }
    }

    /// Stops the load: each instance's statuses.
    fn stop(self) -> Vec<Vec<u16>> {
        self.stop.store(true, Ordering::SeqCst);
        self.threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect()
    }
}

/// `GET path` on a connection of its own: the status (0 when none came).
fn get(to: SocketAddr, path: &str) -> u16 {
    let Ok(mut s) = TcpStream::connect(to) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    if s.write_all(request.as_bytes()).is_err() {
        return 0;
    }
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    std::str::from_utf8(answer.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

/// `PATCH` a backend of `web` through the admin API at `admin`; asserts it answered 200.
fn patch(admin: SocketAddr, backend: SocketAddr, body: &str) {
    let path = format!("/api/upstreams/web/backends/{backend}");
    let headers = [("Host", "localhost"), ("Content-Type", "application/json")];
    let (status, answer) = admin_call(admin, "PATCH", &path, &headers, body);
    assert_eq!(status, 200, "PATCH {path} {body}: {answer}");
}

/// What an instance's API shows of each backend: address, state, weight.
fn shown(admin: SocketAddr) -> Vec<(String, String, u64)> {
    backends_of(admin, "web")
        .iter()
        .map(|b| {
            (
                b["addr"].as_str().unwrap_or("").to_owned(),
                b["state"].as_str().unwrap_or("").to_owned(),
                b["weight"]["static"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn state_of(admin: SocketAddr, backend: SocketAddr) -> String {
    shown(admin)
        .into_iter()
        .find(|(addr, _, _)| *addr == backend.to_string())
        .map(|(_, state, _)| state)
        .unwrap_or_default()
}

/// The value of the unlabelled gauge `name` on the admin listener at `admin`.
fn gauge(admin: SocketAddr, name: &str) -> Option<f64> {
    let (status, text) = admin_call(admin, "GET", "/metrics", &[("Host", "localhost")], "");
    assert_eq!(status, 200);
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

fn config(backends: &[&Backend], etcd: &Etcd) -> String {
    let mut text = "workers = 1\naccess_log = false\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
         [[upstream]]\nname = \"web\"\nalgorithm = \"round_robin\"\n"
        .to_owned();
    for b in backends {
        text.push_str(&format!(
            "  [[upstream.backend]]\n  addr = \"{}\"\n",
            b.addr
        ));
    }
    text.push_str("\n[admin]\nlisten = \"127.0.0.1:0\"\n");
    text.push_str(&format!(
        "\n[cluster]\netcd = [\"{}\"]\nprefix = \"/fleet-test/\"\n",
        etcd.url()
    ));
    text
}

/// Asserts that every request of a load was answered 200.
fn all_answered(statuses: &[Vec<u16>], when: &str) {
    for (i, s) in statuses.iter().enumerate() {
        let failed = s.iter().filter(|&&code| code != 200).count();
        assert!(!s.is_empty(), "{when}: instance {i} sent nothing");
        assert_eq!(
            failed,
            0,
            "{when}: instance {i}: {failed} of {} failed",
            s.len()
        );
    }
}

#[test]
fn a_fleet_shares_its_state_through_etcd() {
    if !installed("etcd", "--version") {
        return;
    }
    let mut etcd = Etcd::start();
    let backends = [Backend::start(), Backend::start(), Backend::start()];
    let [b1, b2, b3] = &backends;
    let file = TempFile::new("fleet.toml", &config(&[b1, b2, b3], &etcd));
    let fleet: Vec<Running> = (0..3).map(|_| Running::start(&file, 1)).collect();
    let admins: Vec<SocketAddr> = fleet.iter().map(|f| f.admin.unwrap()).collect();
    for (i, &admin) in admins.iter().enumerate() {
        wait_until(
            CONVERGE,
            "each instance in contact with etcd",
            || match gauge(admin, "fulcrum_cluster_connected") {
                Some(1.0) => Ok(()),
                other => Err(format!("instance {}: connected = {other:?}", i + 1)),
            },
        );
    }
    // The cluster's gauges are there from the start, in a form Prometheus takes.
    let (_, metrics) = admin_call(admins[0], "GET", "/metrics", &[("Host", "localhost")], "");
    for name in [
        "fulcrum_cluster_last_contact_seconds",
        "fulcrum_cluster_writes_pending",
        "fulcrum_cluster_revision",
    ] {
        assert!(gauge(admins[0], name).is_some(), "{name} in\n{metrics}");
    }
    common::assert_promtool_accepts(&metrics);
    drain_reaches_the_fleet(&fleet, &backends);
    etcd.kill();
    the_fleet_serves_without_etcd(&fleet, &backends);
    a_change_made_without_etcd_reaches_the_fleet(&fleet, &backends, &mut etcd);
}

/// Phase 1: a drain through instance 1 (index 0), under load on all three.
fn drain_reaches_the_fleet(fleet: &[Running], backends: &[Backend; 3]) {
    let [b1, b2, _] = backends;
    let admins: Vec<SocketAddr> = fleet.iter().map(|f| f.admin.unwrap()).collect();
    let load = Load::start(fleet);
    wait_until(CONVERGE, "every instance sends to b1", || {
        let counts: Vec<usize> = (0..3).map(|i| b1.sent_by(i).len()).collect();
        if counts.iter().all(|&n| n >= 5) {
            Ok(())
        } else {
            Err(format!("{counts:?}"))
        }
    });
    patch(admins[0], b1.addr, r#"{"state": "drain"}"#);
    let answered = Instant::now();
    // When each instance's API first shows the drain (polled: each poll takes a few ms).
    let mut shown_at = [None; 3];
    wait_until(CONVERGE, "every API shows the drain", || {
        for (i, &admin) in admins.iter().enumerate() {
            if shown_at[i].is_none() && state_of(admin, b1.addr) == "drain" {
                shown_at[i] = Some(answered.elapsed());
            }
        }
        match shown_at.iter().position(Option::is_none) {
            None => Ok(()),
            Some(i) => Err(format!(
                "instance {}: {}",
                i + 1,
                state_of(admins[i], b1.addr)
            )),
        }
    });
    // Requests keep going until every instance has sent b2 a request after twice the bound:
    // long enough to see one to b1 after the bound, had there been any.
    wait_until(CONVERGE, "the load goes on past twice the bound", || {
        let past = |i| {
            b2.sent_by(i)
                .iter()
                .any(|&at| at > answered + 2 * DRAIN_BOUND)
        };
        if (0..3).all(past) {
            Ok(())
        } else {
            Err("not yet".to_owned())
        }
    });
    let statuses = load.stop();
    all_answered(&statuses, "during the drain");
    for (i, shown_at) in shown_at.iter().enumerate() {
        let arrivals = b1.sent_by(i);
        let last = arrivals.iter().copied().max().unwrap();
        let first = arrivals.iter().copied().min().unwrap();
        // The measure's resolution: how often this instance sent b1 a request before.
        let every_ms = (last - first).as_secs_f64() * 1e3 / (arrivals.len().max(2) - 1) as f64;
        let after_ms = if last >= answered {
            (last - answered).as_secs_f64() * 1e3
        } else {
            -(answered - last).as_secs_f64() * 1e3
        };
        println!(
            "MEASURED instance {}: last request to the drained backend {after_ms:+.1} ms after instance 1's API answered (it sent one every {every_ms:.0} ms before); its API showed the drain {:.1} ms after",
            i + 1,
            shown_at.unwrap_or_default().as_secs_f64() * 1e3
        );
        assert!(
            last < answered + DRAIN_BOUND,
            "instance {}: its last request to the drained backend came {after_ms:.0} ms after the API's answer",
            i + 1
        );
    }
}

/// Phase 2: etcd gone, every instance serves on its state.
fn the_fleet_serves_without_etcd(fleet: &[Running], backends: &[Backend; 3]) {
    let [b1, b2, _] = backends;
    let admins: Vec<SocketAddr> = fleet.iter().map(|f| f.admin.unwrap()).collect();
    for (i, &admin) in admins.iter().enumerate() {
        wait_until(
            CONVERGE,
            "each instance notices etcd is gone",
            || match gauge(admin, "fulcrum_cluster_connected") {
                Some(0.0) => Ok(()),
                other => Err(format!("instance {}: connected = {other:?}", i + 1)),
            },
        );
    }
    let drained_before = b1.count();
    let sent_before: Vec<usize> = (0..3).map(|i| b2.sent_by(i).len()).collect();
    let load = Load::start(fleet);
    wait_until(
        CONVERGE,
        "each instance serves 30 more requests to b2",
        || {
            let sent: Vec<usize> = (0..3).map(|i| b2.sent_by(i).len()).collect();
            if sent.iter().zip(&sent_before).all(|(n, b)| *n >= b + 30) {
                Ok(())
            } else {
                Err(format!("{sent:?} from {sent_before:?}"))
            }
        },
    );
    let statuses = load.stop();
    all_answered(&statuses, "etcd down");
    assert_eq!(b1.count(), drained_before, "the drain holds without etcd");
    for (i, &admin) in admins.iter().enumerate() {
        assert_eq!(state_of(admin, b1.addr), "drain", "instance {}", i + 1);
        let age = gauge(admin, "fulcrum_cluster_last_contact_seconds").unwrap();
        assert!(age > 0.0, "instance {}: last contact {age} s ago", i + 1);
    }
    println!(
        "MEASURED etcd down: {} requests answered 200 by the three instances, none to the drained backend",
        statuses.iter().map(Vec::len).sum::<usize>()
    );
}

/// Phase 3: through instance 2 (index 1) while etcd is down, b1 back up and b3's weight 3;
/// then etcd back, and the three converge.
fn a_change_made_without_etcd_reaches_the_fleet(
    fleet: &[Running],
    backends: &[Backend; 3],
    etcd: &mut Etcd,
) {
    let [b1, _, b3] = backends;
    let admins: Vec<SocketAddr> = fleet.iter().map(|f| f.admin.unwrap()).collect();
    patch(admins[1], b1.addr, r#"{"state": "up"}"#);
    patch(admins[1], b3.addr, r#"{"weight": 3}"#);
    let want = shown(admins[1]);
    assert_eq!(state_of(admins[1], b1.addr), "up");
    assert_eq!(
        gauge(admins[1], "fulcrum_cluster_writes_pending"),
        Some(2.0),
        "instance 2 holds its two changes for etcd"
    );
    for i in [0, 2] {
        assert_eq!(state_of(admins[i], b1.addr), "drain", "instance {}", i + 1);
    }
    etcd.restart();
    let back = Instant::now();
    let mut converged = [None; 3];
    wait_until(CONVERGE, "the three APIs show the same state", || {
        for (i, &admin) in admins.iter().enumerate() {
            if converged[i].is_none() && shown(admin) == want {
                converged[i] = Some(back.elapsed());
            }
        }
        if converged.iter().all(Option::is_some) {
            Ok(())
        } else {
            let now: Vec<_> = admins.iter().map(|&a| shown(a)).collect();
            Err(format!("want {want:?}, the three show {now:?}"))
        }
    });
    for (i, t) in converged.iter().enumerate() {
        println!(
            "MEASURED instance {}: shows the change made through instance 2 {:.0} ms after etcd answered again",
            i + 1,
            t.unwrap_or_default().as_secs_f64() * 1e3
        );
    }
    wait_until(CONVERGE, "instance 2's writes flushed", || {
        match gauge(admins[1], "fulcrum_cluster_writes_pending") {
            Some(0.0) => Ok(()),
            other => Err(format!("pending = {other:?}")),
        }
    });
}

/// A change made while etcd is down survives a restart of the instance it was made on: the
/// state file keeps it as not yet acknowledged, and the restarted instance writes it to etcd
/// before it reads the fleet's state, so the other instance gets it too (before, the first
/// read replaced it with etcd's older state on both).
#[test]
fn a_change_made_without_etcd_survives_a_restart_before_etcd_is_back() {
    if !installed("etcd", "--version") {
        return;
    }
    let mut etcd = Etcd::start();
    let backends = [Backend::start(), Backend::start()];
    let [b1, b2] = &backends;
    let dir = common::TempDir::new("fleet", "unsynced");
    let files: Vec<TempFile> = (0..2)
        .map(|i| {
            let state = dir.0.join(format!("state-{i}.json"));
            let text = format!(
                "state_file = \"{}\"\n{}",
                state.display(),
                config(&[b1, b2], &etcd)
            );
            TempFile::new(&format!("fleet-unsynced-{i}.toml"), &text)
        })
        .collect();
    let other = Running::start(&files[0], 1);
    let mut changed = Running::start(&files[1], 1);
    let connected = |admin: SocketAddr| {
        wait_until(CONVERGE, "in contact with etcd", || {
            match gauge(admin, "fulcrum_cluster_connected") {
                Some(1.0) => Ok(()),
                v => Err(format!("connected = {v:?}")),
            }
        })
    };
    connected(other.admin.unwrap());
    connected(changed.admin.unwrap());
    etcd.kill();
    patch(changed.admin.unwrap(), b1.addr, r#"{"state": "drain"}"#);
    let state_file = dir.0.join("state-1.json");
    let text = std::fs::read_to_string(&state_file).unwrap();
    assert!(text.contains("\"unsynced\""), "{text}");
    // Restarted before etcd is back: the drain comes from its state file.
    drop(changed);
    changed = Running::start(&files[1], 1);
    assert_eq!(state_of(changed.admin.unwrap(), b1.addr), "drain");
    etcd.restart();
    for (who, admin) in [
        ("the other", other.admin.unwrap()),
        ("the restarted", changed.admin.unwrap()),
    ] {
        wait_until(
            CONVERGE,
            "the drain reaches both instances",
            || match state_of(admin, b1.addr).as_str() {
                "drain" => Ok(()),
                s => Err(format!("{who} instance shows {b1:?} {s}", b1 = b1.addr)),
            },
        );
    }
    wait_until(CONVERGE, "etcd acknowledged it", || {
        let text = std::fs::read_to_string(&state_file).unwrap();
        if text.contains("\"unsynced\"") {
            Err(format!("still unsynced: {text}"))
        } else {
            Ok(())
        }
    });
    // Both keep it: the restarted instance read it back from etcd.
    assert_eq!(state_of(changed.admin.unwrap(), b1.addr), "drain");
}

/// A state-file entry that cannot be used (a field this fulcrum does not know), listed as not
/// yet acknowledged by etcd, is not written to etcd: etcd keeps the fleet's drain of the
/// backend, and the restarted instance reads it from there. Before, the entry was dropped but
/// its key stayed unsynced with no value, so it was written first as a delete: etcd was
/// emptied and the backend up on every instance (review 31b).
#[test]
fn a_dropped_entry_listed_as_unsynced_is_not_written_to_etcd() {
    if !installed("etcd", "--version") {
        return;
    }
    let etcd = Etcd::start();
    let backends = [Backend::start(), Backend::start()];
    let [b1, b2] = &backends;
    let dir = common::TempDir::new("fleet", "dropped");
    let instance = |i: usize| {
        let state = dir.0.join(format!("state-{i}.json"));
        let text = format!(
            "state_file = \"{}\"\n{}",
            state.display(),
            config(&[b1, b2], &etcd)
        );
        (
            state,
            TempFile::new(&format!("fleet-dropped-{i}.toml"), &text),
        )
    };
    let key = format!("upstreams/web/backends/{}", b1.addr);
    let (state0, file0) = instance(0);
    let first = Running::start(&file0, 1);
    patch(first.admin.unwrap(), b1.addr, r#"{"state": "drain"}"#);
    // etcd acknowledged the drain: the first instance's state file holds it, and no longer
    // as unsynced.
    wait_until(CONVERGE, "etcd acknowledged the drain", || {
        let text = std::fs::read_to_string(&state0).unwrap_or_default();
        match text.contains(&key) && !text.contains("\"unsynced\"") {
            true => Ok(()),
            false => Err(text),
        }
    });
    let (state1, file1) = instance(1);
    std::fs::write(
        &state1,
        format!(
            r#"{{"version": 1, "overrides": {{"{key}": {{"state": {{"value": "drain", "file": "up"}}, "since": 12345}}}}, "unsynced": ["{key}"]}}"#
        ),
    )
    .unwrap();
    let second = Running::start(&file1, 1);
    let warned = second
        .started
        .iter()
        .find(|l| l.contains("entry cannot be used") && l.contains(&key))
        .unwrap_or_else(|| panic!("a WARN naming {key}: {:#?}", second.started));
    assert!(warned.contains("since"), "what: {warned}");
    assert!(warned.contains("not written to etcd"), "{warned}");
    // Its state file is written again without the entry, nor the key as unsynced.
    let text = std::fs::read_to_string(&state1).unwrap();
    assert!(
        !text.contains("since") && !text.contains("\"unsynced\""),
        "{text}"
    );
    wait_until(
        CONVERGE,
        "the second instance reads the drain from etcd",
        || match state_of(second.admin.unwrap(), b1.addr).as_str() {
            "drain" => Ok(()),
            s => Err(format!("the second instance shows {} {s}", b1.addr)),
        },
    );
    assert_eq!(state_of(first.admin.unwrap(), b1.addr), "drain");
    // etcd itself still holds it.
    if installed("etcdctl", "version") {
        let out = std::process::Command::new("etcdctl")
            .args(["--endpoints", &etcd.url(), "get", "--print-value-only"])
            .arg(format!("/fleet-test/{key}"))
            .output()
            .unwrap();
        let value = String::from_utf8_lossy(&out.stdout);
        assert!(value.contains("drain"), "etcd holds {value:?}");
    }
}
