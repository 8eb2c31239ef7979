//! `fulcrum::cluster` against a real etcd (Debian's etcd-server, started by each test on
//! loopback ports of its own): writes reach a second instance, queued writes survive an etcd
//! restart and are written when it is back, a watch resumes from the last revision seen, and a
//! compacted revision gives a fresh snapshot.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Etcd, installed};
use fulcrum::cluster::{Cluster, ClusterSettings, Event};
use tokio::sync::{mpsc, watch};

/// How long a change may take to reach another instance with etcd up: generous for a loaded
/// machine (it takes milliseconds).
const PROPAGATION: Duration = Duration::from_secs(10);

/// One instance's view of the records: what its events say, applied in order.
struct View {
    events: mpsc::Receiver<Event>,
    records: BTreeMap<String, Vec<u8>>,
    /// Every event received, in order.
    log: Vec<Event>,
}

impl View {
    fn new(events: mpsc::Receiver<Event>) -> View {
        View {
            events,
            records: BTreeMap::new(),
            log: Vec::new(),
        }
    }

    /// Applies events until `records` is `want`; panics with what it has after `within`.
    async fn until(&mut self, want: &[(&str, &str)], within: Duration) {
        let want: BTreeMap<String, Vec<u8>> = want
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
            .collect();
        let deadline = tokio::time::Instant::now() + within;
        while self.records != want {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(event)) => self.apply(event),
                Ok(None) => panic!("the sync task stopped; events: {:?}", self.log),
                Err(_) => panic!(
                    "records {:?} after {within:?}, want {want:?}; events: {:?}",
                    self.records, self.log
                ),
            }
        }
    }

    fn apply(&mut self, event: Event) {
        match &event {
            Event::Snapshot { records, .. } => self.records = records.clone(),
            Event::Put { key, value, .. } => {
                self.records.insert(key.clone(), value.clone());
            }
            Event::Delete { key, .. } => {
                self.records.remove(key);
            }
        }
        self.log.push(event);
    }
}

fn start(endpoint: &str, stop: &watch::Receiver<bool>) -> (Cluster, View) {
    let settings = ClusterSettings {
        endpoints: vec![endpoint.to_owned()],
        prefix: "/fulcrum/".to_owned(),
    };
    let (cluster, events) = Cluster::start(settings, stop.clone());
    (cluster, View::new(events))
}

/// Waits until `what` holds for `cluster`'s status.
async fn status_until(
    cluster: &Cluster,
    what: &str,
    within: Duration,
    done: impl Fn(&fulcrum::cluster::ClusterStatus) -> bool,
) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let status = cluster.status();
        if done(&status) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {status:?} after {within:?}"
        );
        // Poll interval of a loop bounded by `deadline`.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puts_and_deletes_reach_another_instance() {
    if !installed("etcd", "--version") {
        return;
    }
    let etcd = Etcd::start();
    let (_stop, stop) = watch::channel(false);
    let (a, mut a_view) = start(&etcd.url(), &stop);
    a.put("upstreams/web/algorithm", b"before".to_vec());
    a_view
        .until(&[("upstreams/web/algorithm", "before")], PROPAGATION)
        .await;
    // Keys outside the prefix are not the fleet's.
    etcd.ctl(&["put", "/other/x", "y"]);
    etcd.ctl(&["put", "/fulcrum-staging/x", "y"]);
    // A second instance starts from a snapshot holding what is there.
    let (b, mut b_view) = start(&etcd.url(), &stop);
    b_view
        .until(&[("upstreams/web/algorithm", "before")], PROPAGATION)
        .await;
    assert!(
        matches!(b_view.log[0], Event::Snapshot { revision, .. } if revision > 0),
        "{:?}",
        b_view.log
    );
    let key = "upstreams/web/backends/127.0.0.1:9001";
    a.put(key, br#"{"state":"drain"}"#.to_vec());
    b_view
        .until(
            &[
                ("upstreams/web/algorithm", "before"),
                (key, r#"{"state":"drain"}"#),
            ],
            PROPAGATION,
        )
        .await;
    b.delete("upstreams/web/algorithm");
    a_view
        .until(&[(key, r#"{"state":"drain"}"#)], PROPAGATION)
        .await;
    assert!(
        matches!(a_view.log.last(), Some(Event::Delete { key, .. }) if key == "upstreams/web/algorithm"),
        "{:?}",
        a_view.log
    );
    assert_eq!(
        etcd.ctl(&["get", "--print-value-only", &format!("/fulcrum/{key}")])
            .trim(),
        r#"{"state":"drain"}"#
    );
    for c in [&a, &b] {
        let s = c.status();
        assert!(s.connected && s.revision > 0 && s.pending == 0, "{s:?}");
        assert!(s.last_contact.is_some(), "{s:?}");
    }
}

/// etcd killed and started again on its data: the writes made meanwhile are queued, written
/// when it is back, and reach the other instance through its watch, resumed where it was
/// (events, not a new snapshot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_made_while_etcd_is_down_are_written_when_it_is_back() {
    if !installed("etcd", "--version") {
        return;
    }
    let mut etcd = Etcd::start();
    let (_stop, stop) = watch::channel(false);
    let (a, _a_view) = start(&etcd.url(), &stop);
    let (b, mut b_view) = start(&etcd.url(), &stop);
    a.put("upstreams/k1", b"v1".to_vec());
    b_view.until(&[("upstreams/k1", "v1")], PROPAGATION).await;
    let seen = b_view.log.len();
    etcd.kill();
    for c in [&a, &b] {
        status_until(c, "contact lost", PROPAGATION, |s| !s.connected).await;
    }
    a.put("upstreams/k2", b"v2".to_vec());
    a.put("upstreams/k2", b"v2 again".to_vec());
    a.delete("upstreams/k1");
    assert_eq!(a.status().pending, 2, "the latest write per key, queued");
    etcd.restart();
    b_view
        .until(&[("upstreams/k2", "v2 again")], PROPAGATION)
        .await;
    let after: Vec<_> = b_view.log[seen..].to_vec();
    assert!(
        after.iter().all(|e| !matches!(e, Event::Snapshot { .. })),
        "the watch resumed, no snapshot: {after:?}"
    );
    status_until(&a, "writes flushed", PROPAGATION, |s| {
        s.connected && s.pending == 0
    })
    .await;
    assert_eq!(
        etcd.ctl(&["get", "--print-value-only", "/fulcrum/upstreams/k2"])
            .trim(),
        "v2 again"
    );
    assert_eq!(
        etcd.ctl(&["get", "--print-value-only", "/fulcrum/upstreams/k1"])
            .trim(),
        ""
    );
}

/// An instance started while etcd is down serves (start does not wait), queues its writes,
/// and writes them at first contact, before reading the snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_started_without_etcd_catches_up() {
    if !installed("etcd", "--version") {
        return;
    }
    let mut etcd = Etcd::start();
    etcd.ctl(&["put", "/fulcrum/upstreams/there", "before"]);
    etcd.kill();
    let (_stop, stop) = watch::channel(false);
    let (a, mut a_view) = start(&etcd.url(), &stop);
    a.put("upstreams/mine", b"queued".to_vec());
    let s = a.status();
    assert!(
        !s.connected && s.pending == 1 && s.last_contact.is_none(),
        "{s:?}"
    );
    etcd.restart();
    a_view
        .until(
            &[("upstreams/mine", "queued"), ("upstreams/there", "before")],
            PROPAGATION,
        )
        .await;
    assert!(
        matches!(&a_view.log[0], Event::Snapshot { records, .. } if records.len() == 2),
        "the queued write is in the first snapshot: {:?}",
        a_view.log
    );
}

/// A TCP relay to etcd that can be cut (every connection closed, new ones refused) and
/// restored, to take one instance away from an etcd that stays up.
struct Relay {
    addr: SocketAddr,
    open: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(to: SocketAddr) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(AtomicBool::new(true));
        let connections = Arc::new(Mutex::new(Vec::new()));
        let (is_open, all) = (open.clone(), connections.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !is_open.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let relay = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                all.lock().unwrap().push(relay.abort_handle());
            }
        });
        Relay {
            addr,
            open,
            connections,
            accept,
        }
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for c in self.connections.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

/// An instance away while etcd compacted the revisions it would resume from: a fresh
/// snapshot, holding what changed meanwhile (a delete included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_revision_gives_a_snapshot() {
    if !installed("etcd", "--version") {
        return;
    }
    let etcd = Etcd::start();
    let (_stop, stop) = watch::channel(false);
    let etcd_addr: SocketAddr = etcd.url().trim_start_matches("http://").parse().unwrap();
    let relay = Relay::start(etcd_addr).await;
    let (a, _a_view) = start(&etcd.url(), &stop);
    let (b, mut b_view) = start(&format!("http://{}", relay.addr), &stop);
    a.put("upstreams/gone", b"1".to_vec());
    b_view.until(&[("upstreams/gone", "1")], PROPAGATION).await;
    let seen = b_view.log.len();
    relay.cut();
    status_until(&b, "contact lost", PROPAGATION, |s| !s.connected).await;
    a.delete("upstreams/gone");
    a.put("upstreams/new", b"2".to_vec());
    status_until(&a, "writes done", PROPAGATION, |s| s.pending == 0).await;
    let status = etcd.ctl(&["endpoint", "status", "--write-out", "json"]);
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let revision = status[0]["Status"]["header"]["revision"].as_i64().unwrap();
    etcd.ctl(&["compact", &revision.to_string()]);
    relay.restore();
    b_view.until(&[("upstreams/new", "2")], PROPAGATION).await;
    assert!(
        matches!(&b_view.log[seen..], [Event::Snapshot { revision: r, .. }] if *r >= revision),
        "one snapshot at or after the compaction ({revision}): {:?}",
        &b_view.log[seen..]
    );
}

/// An etcd that stops answering without closing its connections (SIGSTOP: the kernel still
/// holds them open, as a host gone without a FIN would): contact is given up after the
/// silence limit (5 s), writes are queued, and written once it answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_etcd_is_a_lost_one() {
    if !installed("etcd", "--version") {
        return;
    }
    let etcd = Etcd::start();
    let (_stop, stop) = watch::channel(false);
    let (a, mut a_view) = start(&etcd.url(), &stop);
    a_view.until(&[], PROPAGATION).await;
    status_until(&a, "in contact", PROPAGATION, |s| s.connected).await;
    let pid = etcd.pid().unwrap().to_string();
    let signal = |sig: &str| {
        let status = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap();
        assert!(status.success());
    };
    signal("-STOP");
    let frozen = std::time::Instant::now();
    // The silence limit (5 s) and a progress tick; the keep-alive pings alone would take 15 s.
    status_until(&a, "contact lost", Duration::from_secs(8), |s| !s.connected).await;
    println!(
        "MEASURED contact given up {:?} after etcd froze",
        frozen.elapsed()
    );
    a.put("upstreams/while-frozen", b"1".to_vec());
    signal("-CONT");
    a_view
        .until(&[("upstreams/while-frozen", "1")], PROPAGATION)
        .await;
    status_until(&a, "back", PROPAGATION, |s| s.connected && s.pending == 0).await;
}

/// Two fleets on one etcd, B's prefix nested in A's (`/fulcrum/edge/` under `/fulcrum/`, the
/// docs' own example): B's records never reach A — not in A's snapshot, not through its watch
/// (A's own later write arrives with nothing of B's before it) — and A's never reach B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_fleets_records_are_not_this_fleets() {
    if !installed("etcd", "--version") {
        return;
    }
    let etcd = Etcd::start();
    let (_stop, stop) = watch::channel(false);
    let start_at = |prefix: &str| {
        let settings = ClusterSettings {
            endpoints: vec![etcd.url()],
            prefix: prefix.to_owned(),
        };
        let (cluster, events) = Cluster::start(settings, stop.clone());
        (cluster, View::new(events))
    };
    let (b, mut b_view) = start_at("/fulcrum/edge/");
    let drain = "upstreams/web/backends/127.0.0.1:9001";
    b.put(
        drain,
        br#"{"state":{"value":"drain","file":"up"}}"#.to_vec(),
    );
    b_view
        .until(
            &[(drain, r#"{"state":{"value":"drain","file":"up"}}"#)],
            PROPAGATION,
        )
        .await;
    // A starts after B's write: its snapshot has none of B's.
    let (a, mut a_view) = start_at("/fulcrum/");
    a_view.until(&[], PROPAGATION).await;
    // B writes again while A watches, then A writes: A sees its own write and nothing else.
    b.put("upstreams/web/algorithm", b"edge".to_vec());
    b_view
        .until(
            &[
                (drain, r#"{"state":{"value":"drain","file":"up"}}"#),
                ("upstreams/web/algorithm", "edge"),
            ],
            PROPAGATION,
        )
        .await;
    a.put("upstreams/api/algorithm", b"core".to_vec());
    a_view
        .until(&[("upstreams/api/algorithm", "core")], PROPAGATION)
        .await;
    assert!(
        matches!(&a_view.log[..], [_, Event::Put { key, value, .. }] if key == "upstreams/api/algorithm" && value == b"core"),
        "A saw only its own records: {:?}",
        a_view.log
    );
    assert!(
        matches!(&a_view.log[0], Event::Snapshot { records, .. } if records.is_empty()),
        "{:?}",
        a_view.log
    );
    // Nor does A's write reach B: B's next event is its own.
    b.delete(drain);
    b_view
        .until(&[("upstreams/web/algorithm", "edge")], PROPAGATION)
        .await;
    assert!(
        b_view
            .log
            .iter()
            .all(|e| !matches!(e, Event::Put { key, .. } if key.contains("api"))),
        "{:?}",
        b_view.log
    );
}
