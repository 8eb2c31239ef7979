//! Runtime state shared by a fleet of fulcrum instances through etcd (`[cluster]`): a key/value
//! map under one prefix that every instance writes its admin-API changes to and watches.
//!
//! This module knows nothing of what the records mean (the state store does): it keeps one
//! instance's view of the keys under the prefix in step with etcd, and hands its own writes
//! to etcd, whether or not etcd is there at the moment.
//!
//! The protocol is etcd v3's own, as its clients and Kubernetes' reflectors use it (etcd's
//! "Watch" API guide, <https://etcd.io/docs/v3.4/learning/api/#watch-api>): read everything
//! under the prefix with the store's revision (a [`Event::Snapshot`]), then watch the prefix
//! from that revision + 1 — every change after the read, none missed, none twice. When the
//! connection is lost the watch is made again from the last revision seen + 1; when etcd has
//! compacted that revision away (it answers the watch with `compact_revision`), the history
//! is gone and the only way back is a fresh read, another snapshot.
//!
//! # Rules
//!
//! * Starting never fails and never waits for etcd: an instance whose etcd is down serves on
//!   what it has, and the sync task retries with a backoff (100 ms doubling to 2 s), logging
//!   once when contact is lost and once when it is back.
//! * [`Cluster::put`] and [`Cluster::delete`] never block: the write is queued (the latest
//!   value per key: only the last of several changes to one key matters) and the sync task
//!   writes it at once when in contact, else as soon as contact is back, BEFORE the watch is
//!   made again, so a change made while etcd was down reaches the fleet and is not
//!   overwritten here by the older values the watch then replays.
//! * An instance sees its own writes come back through the watch, in revision order with
//!   everyone else's: they are passed on like the others'. Skipping them would be wrong: after
//!   a reconnect the watch replays the others' changes made while this instance was away,
//!   older than its own queued write; only by passing its own write after them does this
//!   instance end with the value etcd holds, as every other instance does.
//! * A silent etcd is a lost one: the task asks for a progress report on the watch every
//!   second (etcd 3.4's `WatchProgressRequest`) and gives the connection up when nothing came
//!   for 5 s, which a half-open connection (a host gone without a FIN) would otherwise hide.
//! * Only the keys fulcrum writes are read and watched: those under `{prefix}upstreams/`
//!   ([`RECORDS`]). Another fleet whose prefix is nested in this one's (`/fulcrum/edge/` under
//!   `/fulcrum/`, as the docs' own example has it) writes `/fulcrum/edge/upstreams/...`, which
//!   this fleet never sees: neither applied nor logged.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, EventType, GetOptions, WatchOptions, WatchResponse};
use tokio::sync::{Notify, mpsc, watch};

/// The log target, the binary's (`RUST_LOG=fulcrum=...`).
const LOG: &str = "fulcrum";

/// `prefix` when `[cluster]` leaves it out.
pub const DEFAULT_PREFIX: &str = "/fulcrum/";

/// Where under the prefix the fleet's records are: every key fulcrum writes starts so
/// (`upstreams/{upstream}/backends/{addr}`, `upstreams/{upstream}/algorithm`).
pub const RECORDS: &str = "upstreams/";

/// How long a connection to an etcd endpoint may take before the attempt counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one request (get, put, delete, creating the watch) may take. etcd answers a
/// healthy request in milliseconds; a request to an unreachable cluster would otherwise wait
/// for as long as the client keeps trying to connect.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// The first wait before trying etcd again; doubled at each failure up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(100);
/// The longest wait between two attempts: how late, at worst, an instance notices that etcd
/// is back (the fleet converges within this plus a round trip).
const MAX_RETRY: Duration = Duration::from_secs(2);
/// How often the watch is asked for a progress report when nothing else arrives.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// How long etcd may stay silent on the watch before the connection is given up.
const SILENCE_LIMIT: Duration = Duration::from_secs(5);
/// The HTTP/2 keep-alive ping's interval: above etcd's `--grpc-keepalive-min-time` (5 s by
/// default), below which etcd counts a client's pings as abuse and closes its connection
/// (gRPC's `too_many_pings`). The progress requests detect a silent etcd sooner; the pings
/// keep idle middleboxes from dropping the connection.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(10);
/// Events waiting for their consumer before the sync task waits for it.
const EVENTS_QUEUED: usize = 1024;

/// Where the fleet's state lives: `[cluster]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// etcd's client URLs (`http://host:port`), any of which may answer.
    pub endpoints: Vec<String>,
    /// The key prefix of this fleet's records, ending in `/`; keys given to and read from
    /// [`Cluster`] are relative to it.
    pub prefix: String,
}

/// A change to the fleet's records, as seen from this instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Everything under the prefix (keys relative to it), at `revision`: on first contact, and
    /// whenever a watch cannot resume where it left off (compacted history, or an etcd that is
    /// not the one it was: another cluster, or one whose data was lost).
    Snapshot {
        records: BTreeMap<String, Vec<u8>>,
        revision: i64,
    },
    /// `key` set to `value` at etcd's `revision`.
    Put {
        key: String,
        value: Vec<u8>,
        revision: i64,
    },
    /// `key` removed at etcd's `revision`.
    Delete { key: String, revision: i64 },
}

/// etcd acknowledged this instance's latest write of `key`: `value` (`None`: a delete) is
/// what it holds from `revision` on (its put or delete answer's revision). Changes at or
/// below it are this write or older; changes above it are newer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub key: String,
    pub value: Option<Vec<u8>>,
    pub revision: i64,
}

/// Where the sync stands, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterStatus {
    /// Whether etcd answers now.
    pub connected: bool,
    /// The last revision of the records this instance has seen (0: none yet).
    pub revision: i64,
    /// When etcd last answered; `None` before it ever did.
    pub last_contact: Option<Instant>,
    /// Keys whose latest local write etcd has not acknowledged yet.
    pub pending: usize,
}

/// This instance's handle on the fleet's records: writes and status. Cheap to clone; the
/// sync task lives until the stop signal given to [`Cluster::start`].
#[derive(Debug, Clone)]
pub struct Cluster {
    shared: Arc<Shared>,
}

/// What the handles and the sync task share.
#[derive(Debug)]
struct Shared {
    /// Local writes not yet acknowledged: the latest value per relative key (`None`: delete).
    pending: Mutex<BTreeMap<String, Option<Vec<u8>>>>,
    /// Connected, revision, last contact (its `pending` unused: see [`Cluster::status`]).
    status: Mutex<ClusterStatus>,
    /// Wakes the sync task when a write is queued.
    wake: Notify,
    /// Told each key whose latest queued value etcd acknowledged.
    written: Option<mpsc::UnboundedSender<Written>>,
}

/// A lock whose holder panicked still guards consistent data here (each holder makes one
/// insert or one assignment), so a poisoned lock is used as it is.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Cluster {
    /// Starts the sync task on the current runtime. Never fails and never waits: etcd down,
    /// the task keeps trying (see the module's rules). The events are the records as etcd has
    /// them, a [`Event::Snapshot`] first.
    pub fn start(
        settings: ClusterSettings,
        stop: watch::Receiver<bool>,
    ) -> (Cluster, mpsc::Receiver<Event>) {
        Cluster::start_with(settings, stop, BTreeMap::new(), None)
    }

    /// [`Cluster::start`] with writes already queued (`pending`: those a former run left
    /// unacknowledged, written before anything is read), and `written` told each key whose
    /// latest queued value etcd acknowledged.
    pub fn start_with(
        settings: ClusterSettings,
        stop: watch::Receiver<bool>,
        pending: BTreeMap<String, Option<Vec<u8>>>,
        written: Option<mpsc::UnboundedSender<Written>>,
    ) -> (Cluster, mpsc::Receiver<Event>) {
        let shared = Arc::new(Shared {
            pending: Mutex::new(pending),
            status: Mutex::new(ClusterStatus {
                connected: false,
                revision: 0,
                last_contact: None,
                pending: 0,
            }),
            wake: Notify::new(),
            written,
        });
        let (events, receiver) = mpsc::channel(EVENTS_QUEUED);
        let sync = Sync {
            shared: shared.clone(),
            settings,
            events,
            revision: 0,
            cluster_id: None,
            reported: false,
        };
        tokio::spawn(sync.run(stop));
        (Cluster { shared }, receiver)
    }

    /// Sets `key` (relative to the prefix) to `value` in etcd: at once when etcd answers,
    /// else when it is back. Never blocks.
    pub fn put(&self, key: &str, value: Vec<u8>) {
        self.queue(key, Some(value));
    }

    /// Removes `key` (relative to the prefix) from etcd, as [`Cluster::put`] writes.
    pub fn delete(&self, key: &str) {
        self.queue(key, None);
    }

    fn queue(&self, key: &str, value: Option<Vec<u8>>) {
        lock(&self.shared.pending).insert(key.to_owned(), value);
        self.shared.wake.notify_one();
    }

    /// Connected, last revision seen, when last in contact, writes pending.
    pub fn status(&self) -> ClusterStatus {
        let mut status = *lock(&self.shared.status);
        status.pending = lock(&self.shared.pending).len();
        status
    }
}

/// The sync task: one connection to etcd at a time, its writes and its watch handled in turn,
/// so that what it passes on is in etcd's order.
struct Sync {
    shared: Arc<Shared>,
    settings: ClusterSettings,
    events: mpsc::Sender<Event>,
    /// The last revision whose changes were all passed on (0: nothing read yet).
    revision: i64,
    /// The etcd cluster `revision` belongs to: another one's revisions mean nothing here.
    cluster_id: Option<u64>,
    /// Whether the state of contact was logged yet (contact made, or the first failure): a
    /// failure before any contact is logged once, as a loss of contact is.
    reported: bool,
}

/// Why a watch ended without an error.
enum WatchEnd {
    /// etcd no longer has the revision to resume from: read everything again.
    Compacted(i64),
}

impl Sync {
    /// Sessions one after the other, with a backoff between them, until `stop`.
    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut retry = FIRST_RETRY;
        loop {
            let failed = tokio::select! {
                Err(why) = self.session() => why,
                () = stopped(&mut stop) => return,
            };
            if self.lost(&failed) {
                retry = FIRST_RETRY;
            }
            tokio::select! {
                () = tokio::time::sleep(retry) => {}
                () = stopped(&mut stop) => return,
            }
            retry = (retry * 2).min(MAX_RETRY);
        }
    }

    /// One connection: the queued writes, a snapshot when needed, then the watch until the
    /// connection fails (the reason returned).
    async fn session(&mut self) -> Result<Infallible, String> {
        let options = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT)
            .with_keep_alive(KEEP_ALIVE_EVERY, SILENCE_LIMIT);
        let mut client = call(Client::connect(&self.settings.endpoints, Some(options))).await?;
        // Where etcd stands, before anything is written: the cluster and its revision.
        let prefix = self.records();
        let count = GetOptions::new().with_prefix().with_count_only();
        let head = call(client.get(prefix.as_str(), Some(count))).await?;
        let header = head.header().ok_or("etcd's answer has no header")?;
        let (cluster_id, now) = (header.cluster_id(), header.revision());
        self.contact();
        self.flush(&mut client).await?;
        // History that does not continue ours cannot be resumed: etcd's data was replaced
        // (another cluster, or a store restored or lost).
        if self.revision == 0 || self.cluster_id != Some(cluster_id) || now < self.revision {
            self.cluster_id = Some(cluster_id);
            self.snapshot(&mut client).await?;
        }
        loop {
            let WatchEnd::Compacted(at) = self.watch(&mut client).await?;
            tracing::info!(
                target: LOG,
                from = self.revision + 1,
                compacted = at,
                "etcd compacted the revisions to resume from: reading the whole state again"
            );
            self.snapshot(&mut client).await?;
        }
    }

    /// Writes the queued changes, oldest key first; a key changed again meanwhile stays
    /// queued with its newer value.
    async fn flush(&mut self, client: &mut Client) -> Result<(), String> {
        loop {
            let Some((key, value)) = lock(&self.shared.pending)
                .iter()
                .next()
                .map(|(k, v)| (k.clone(), v.clone()))
            else {
                return Ok(());
            };
            let full = format!("{}{key}", self.settings.prefix);
            let header = match &value {
                Some(v) => call(client.put(full, v.clone(), None))
                    .await?
                    .header()
                    .cloned(),
                None => call(client.delete(full, None)).await?.header().cloned(),
            };
            let revision = header.ok_or("etcd's answer has no header")?.revision();
            self.contact();
            let acknowledged = {
                let mut pending = lock(&self.shared.pending);
                pending.get(&key) == Some(&value) && pending.remove(&key).is_some()
            };
            if acknowledged && let Some(written) = &self.shared.written {
                let _ = written.send(Written {
                    key,
                    value,
                    revision,
                });
            }
        }
    }

    /// Reads every record under the prefix and passes them on as one snapshot.
    async fn snapshot(&mut self, client: &mut Client) -> Result<(), String> {
        let prefix = self.records();
        let all = GetOptions::new().with_prefix();
        let answer = call(client.get(prefix.as_str(), Some(all))).await?;
        let revision = answer
            .header()
            .ok_or("etcd's answer has no header")?
            .revision();
        let mut records = BTreeMap::new();
        for kv in answer.kvs() {
            if let Some(key) = self.relative(kv.key()) {
                records.insert(key, kv.value().to_vec());
            }
        }
        self.contact();
        self.pass(Event::Snapshot { records, revision }).await;
        self.seen(revision);
        Ok(())
    }

    /// Watches the prefix from the revision after the last seen, writing queued changes as
    /// they come, until the watch cannot go on.
    async fn watch(&mut self, client: &mut Client) -> Result<WatchEnd, String> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(self.revision + 1);
        let prefix = self.records();
        let stream = call(client.watch(prefix.as_str(), Some(options))).await?;
        let (mut requests, mut answers) = stream.split();
        let mut progress = tokio::time::interval(PROGRESS_EVERY);
        let mut heard = Instant::now();
        // What was queued while the watch was being made.
        self.flush(client).await?;
        loop {
            tokio::select! {
                answer = answers.message() => {
                    let answer = answer
                        .map_err(|e| format!("the watch failed: {e}"))?
                        .ok_or("etcd closed the watch")?;
                    heard = Instant::now();
                    self.contact();
                    if let Some(end) = self.follow(answer).await? {
                        return Ok(end);
                    }
                }
                () = self.shared.wake.notified() => self.flush(client).await?,
                _ = progress.tick() => {
                    if heard.elapsed() > SILENCE_LIMIT {
                        return Err(format!("etcd sent nothing for {SILENCE_LIMIT:?}"));
                    }
                    requests
                        .request_progress()
                        .await
                        .map_err(|e| format!("the watch failed: {e}"))?;
                }
            }
        }
    }

    /// The key prefix of the records read and watched: `{prefix}upstreams/`.
    fn records(&self) -> String {
        format!("{}{RECORDS}", self.settings.prefix)
    }

    /// Passes on one watch answer's changes; `Some` when the watch ended.
    async fn follow(&mut self, answer: WatchResponse) -> Result<Option<WatchEnd>, String> {
        if answer.compact_revision() > 0 {
            return Ok(Some(WatchEnd::Compacted(answer.compact_revision())));
        }
        if answer.canceled() {
            return Err(format!(
                "etcd cancelled the watch: {}",
                answer.cancel_reason()
            ));
        }
        if answer.events().is_empty() {
            // A progress report: every change up to its revision has been sent. (The answer
            // to the watch's creation carries etcd's revision, not ours: skipped.)
            if !answer.created()
                && let Some(header) = answer.header()
            {
                self.seen(header.revision());
            }
            return Ok(None);
        }
        for event in answer.events() {
            let Some(kv) = event.kv() else { continue };
            let revision = kv.mod_revision();
            if let Some(key) = self.relative(kv.key()) {
                let change = match event.event_type() {
                    EventType::Put => Event::Put {
                        key,
                        value: kv.value().to_vec(),
                        revision,
                    },
                    EventType::Delete => Event::Delete { key, revision },
                };
                self.pass(change).await;
            }
            self.seen(revision);
        }
        Ok(None)
    }

    /// `key` relative to the prefix; `None` (logged) for a key that is not UTF-8, which no
    /// fulcrum writes.
    fn relative(&self, key: &[u8]) -> Option<String> {
        let rest = key.strip_prefix(self.settings.prefix.as_bytes())?;
        match std::str::from_utf8(rest) {
            Ok(k) => Some(k.to_owned()),
            Err(_) => {
                tracing::warn!(
                    target: LOG,
                    key = %String::from_utf8_lossy(key),
                    "etcd holds a key under the prefix that is not UTF-8: ignored (no fulcrum writes such keys; remove it with etcdctl del)"
                );
                None
            }
        }
    }

    /// Hands `event` to the consumer, waiting while its queue is full; a consumer gone (the
    /// process stopping) is not an error.
    async fn pass(&self, event: Event) {
        let _ = self.events.send(event).await;
    }

    fn seen(&mut self, revision: i64) {
        self.revision = self.revision.max(revision);
        lock(&self.shared.status).revision = self.revision;
    }

    /// etcd answered: contact is (back) on; logged when it was off.
    fn contact(&mut self) {
        let mut status = lock(&self.shared.status);
        status.last_contact = Some(Instant::now());
        if !status.connected {
            status.connected = true;
            tracing::info!(
                target: LOG,
                endpoints = ?self.settings.endpoints,
                revision = self.revision,
                "in contact with etcd: the fleet's state is shared"
            );
        }
        self.reported = true;
    }

    /// Contact lost (or never made) for `why`; logged once per loss. True when contact had
    /// been made in this session (the backoff starts again from its first step).
    fn lost(&mut self, why: &str) -> bool {
        let mut status = lock(&self.shared.status);
        let was = status.connected;
        status.connected = false;
        drop(status);
        if was {
            tracing::warn!(
                target: LOG,
                endpoints = ?self.settings.endpoints,
                reason = why,
                "lost contact with etcd: serving on the last state known, changes queued until it is back"
            );
        } else if !self.reported {
            tracing::warn!(
                target: LOG,
                endpoints = ?self.settings.endpoints,
                reason = why,
                "cannot reach etcd: serving on the local state, trying again"
            );
        }
        self.reported = true;
        was
    }
}

/// `request` with [`REQUEST_TIMEOUT`], its error in words.
async fn call<T>(
    request: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("etcd did not answer within {REQUEST_TIMEOUT:?}")),
    }
}

/// Resolves once `stop` says true, or once its sender is gone.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
