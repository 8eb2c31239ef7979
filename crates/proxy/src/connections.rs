//! Connections to one backend, for one worker: the upstream connection pool.
//!
//! Each worker keeps its own connections (as nginx's workers do), so a connection is only ever
//! used by the runtime whose reactor it is registered with, and taking one never contends with
//! another thread. After a response has been read to its end the connection goes back on the
//! idle list, and the next request takes the most recently used one (LIFO keeps few
//! connections warm and lets the rest expire).
//!
//! * **Reuse is known.** A [`BackendConn`] says whether it carried an earlier request, which
//!   is what the retry policy needs to tell the keep-alive race from a backend failure.
//! * **Idle connections expire** after `keepalive_timeout` (nginx's upstream
//!   `keepalive_timeout`, 60 s), and at most `keepalive` are kept per backend and worker
//!   (nginx's `keepalive`). [`Connections::reap`], run by each worker on a timer, closes the
//!   expired ones and those the backend closed, wherever they are in the list: a connection
//!   the backend closed would otherwise sit in CLOSE-WAIT until it reached the top.
//! * **A closed idle connection is noticed without a system call** in the common case: the
//!   reactor marks the socket readable when the FIN (or stray bytes) arrive. Readiness is a
//!   hint (a response that filled the read buffer exactly leaves it set too), so a connection
//!   marked readable is confirmed with a non-blocking peek before it is discarded. Before an
//!   idle connection carries a non-idempotent request — which cannot be resent if the backend
//!   closes the connection under it — it is always peeked: a busy worker may not yet have
//!   polled the FIN that already arrived, and that narrows the keep-alive race to the time
//!   the request is in flight.
//! * **Counted**: connections open (busy or idle) and idle, per backend and worker, for the
//!   admin API and metrics to sum.
//! * **The shared HTTP/2 connections** (`backend_protocol = "h2"`): up to
//!   `h2_max_connections` per backend and worker, multiplexed, held in an [`H2Slot`] beside
//!   the HTTP/1.1 ones, with the streams taken on each and by each client connection;
//!   `upstream_h2` opens, drives and forgets them, and requests take streams from here.
//! * **Connect errors are classified** ([`ConnectError::fault`]): running out of descriptors or
//!   local ports is the proxy's problem, not the backend's.

use std::collections::{HashMap, VecDeque};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use balance::{Connection, Fault};
use bytes::Bytes;
use h2::client::SendRequest;
use rustix::io::Errno;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::buffer::Buffer;
use crate::upstream_tls::{BackendIo as _, BackendStream, BackendTls};
use tokio_util::either::Either;

/// Read buffer of a backend connection: response heads must fit (nginx's
/// `proxy_buffer_size`, 4 or 8 KiB there); bodies stream through it.
pub(crate) const BACKEND_BUFFER: usize = 16 * 1024;

/// One connection to a backend, with its read buffer. Counted as open until dropped.
#[derive(Debug)]
pub(crate) struct BackendConn {
    pub(crate) stream: BackendStream,
    /// The TLS settings the connection was made with (`None`: plain): an idle connection is
    /// reused only under the same ones.
    tls: Option<Arc<BackendTls>>,
    pub(crate) buf: Buffer,
    /// Whether it carried an earlier request.
    reused: bool,
    _open: OpenCount,
}

impl BackendConn {
    pub(crate) fn connection(&self) -> Connection {
        if self.reused {
            Connection::Reused
        } else {
            Connection::Fresh
        }
    }
}

/// One open connection in its pool's count, taken off when the connection is dropped.
#[derive(Debug)]
pub(crate) struct OpenCount(Arc<AtomicUsize>);

impl OpenCount {
    fn new(count: &Arc<AtomicUsize>) -> OpenCount {
        count.fetch_add(1, Ordering::Relaxed);
        OpenCount(Arc::clone(count))
    }
}

impl Drop for OpenCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a new connection could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error("connect failed: {0}")]
    Io(std::io::Error),
    #[error("connect timed out")]
    Timeout,
    #[error("TLS handshake with the backend failed: {0}")]
    Tls(std::io::Error),
    #[error(
        "TLS: no name to verify the backend by (its address as written is \"{0}\"): set tls_server_name"
    )]
    NoServerName(String),
    #[error("HTTP/2 handshake failed: {0}")]
    H2(h2::Error),
    /// No stream free on the backend within `connect_timeout`, for a limit of our own
    /// (`h2_max_connections`, `h2_max_streams_per_client`): nothing was sent.
    #[error("{0}")]
    NoStream(String),
}

impl ConnectError {
    /// Whose problem it is, for the retry policy.
    pub(crate) fn fault(&self) -> Fault {
        match self {
            ConnectError::Timeout => Fault::ConnectTimeout,
            ConnectError::Io(e) if is_local_shortage(e) => Fault::LocalResources,
            // Our own limit, not the backend's doing: the next backend, no blame, and 503
            // if none is left.
            ConnectError::NoStream(_) => Fault::LocalResources,
            ConnectError::Io(_) | ConnectError::NoServerName(_) | ConnectError::H2(_) => {
                Fault::ConnectFailed
            }
            ConnectError::Tls(_) => Fault::TlsHandshake,
        }
    }
}

/// Errors of `socket` or `connect` that say this process or host ran out of something
/// (descriptors, ephemeral ports, buffers, memory), whatever the backend.
pub(crate) fn is_local_shortage(e: &std::io::Error) -> bool {
    const LOCAL: [Errno; 5] = [
        Errno::MFILE,
        Errno::NFILE,
        Errno::ADDRNOTAVAIL,
        Errno::NOBUFS,
        Errno::NOMEM,
    ];
    e.raw_os_error()
        .is_some_and(|code| LOCAL.iter().any(|l| l.raw_os_error() == code))
}

#[derive(Debug)]
struct Idle {
    conn: BackendConn,
    since: Instant,
}

/// A worker's connections to one backend.
#[derive(Debug)]
pub(crate) struct Connections {
    addr: SocketAddr,
    /// Only this worker's tasks use the list: the lock is never contended (the admin API's
    /// reads aside).
    idle: Mutex<VecDeque<Idle>>,
    /// Connections open to the backend, busy or idle.
    open: Arc<AtomicUsize>,
    max_idle: usize,
    idle_timeout: Duration,
    /// The HTTP/2 connection this worker's requests share (`backend_protocol = "h2"`).
    pub(crate) h2: H2Slot,
}

/// The HTTP/2 connections a worker's requests to one backend share (`backend_protocol =
/// "h2"`, opened and driven by [`crate::upstream_h2`]): kept beside the worker's HTTP/1.1
/// connections to the same backend, so that disabling the backend forgets both.
///
/// * **A stream goes on the oldest connection with one free**: one whose streams in use are
///   below the backend's `SETTINGS_MAX_CONCURRENT_STREAMS`, as the `h2` crate reports it.
///   Only when every open connection is at that limit is another opened, up to
///   `h2_max_connections` (Envoy's HTTP/2 pool marks a connection at its concurrent-stream
///   limit busy and opens a new one for a request that finds none ready; HAProxy takes a
///   connection off its list of available ones when it has no stream left). Taking the
///   oldest first leaves the extra connections unused once the load is gone, so they close
///   after `keepalive_timeout`.
/// * **One client connection holds at most its share**: the streams each HTTP/2 client
///   connection holds here are counted, and past `h2_max_streams_per_client` (by default
///   half the backend's limit) its next request waits for one of its own to end. A client
///   that stops reading its answers so stalls at most half a connection; the others find
///   room (HAProxy goes further under `http-reuse safe`: a busy HTTP/2 connection serves
///   only the client session that opened it).
/// * **Room is said**: a stream that ends, and a connection opened or forgotten, wake the
///   requests waiting for room, which look again (within their `connect_timeout`).
#[derive(Debug, Default)]
pub(crate) struct H2Slot {
    set: Mutex<H2Set>,
    /// Notified when room may have come.
    room: tokio::sync::Notify,
    /// Held while a connection is being opened, so that requests arriving meanwhile wait for
    /// it instead of each opening their own.
    pub(crate) opening: tokio::sync::Mutex<()>,
}

/// What an [`H2Slot`] holds.
#[derive(Debug, Default)]
struct H2Set {
    /// The connections requests may take, oldest first.
    open: Vec<H2Entry>,
    /// Streams held on this backend by each HTTP/2 client connection, by its number.
    clients: HashMap<u64, usize>,
}

/// One connection and the streams taken on it and not yet given back.
#[derive(Debug)]
struct H2Entry {
    shared: SharedH2,
    streams: usize,
}

/// What the `h2` crate reports as the backend's concurrent-stream limit until the backend's
/// first SETTINGS frame has been read (set as the connection's initial value): a value no
/// SETTINGS can give (they say at most 2^32 - 1, or nothing, which the crate reports as
/// `usize::MAX`).
pub(crate) const H2_LIMIT_UNKNOWN: usize = usize::MAX - 1;

impl H2Entry {
    /// The backend's concurrent-stream limit, once its SETTINGS said it.
    fn known_limit(&self) -> Option<usize> {
        Some(self.shared.send.current_max_send_streams()).filter(|&l| l != H2_LIMIT_UNKNOWN)
    }

    /// The streams the connection may carry at once: before the backend's SETTINGS, only the
    /// one of the request that opened it.
    fn limit(&self) -> usize {
        self.known_limit().unwrap_or(1)
    }
}

/// A handle to a shared HTTP/2 connection.
#[derive(Debug, Clone)]
pub(crate) struct SharedH2 {
    pub(crate) send: SendRequest<Bytes>,
    /// The TLS settings it was made with (`None`: plain): a reload that changes them makes
    /// requests open a new connection, as pooled HTTP/1.1 connections are not reused then.
    tls: Option<Arc<BackendTls>>,
    /// Which connection it is (to forget only that one).
    pub(crate) id: u64,
    /// When a request last used it: milliseconds since `born`.
    pub(crate) used: Arc<AtomicU64>,
    pub(crate) born: Instant,
}

impl SharedH2 {
    /// A connection just opened with `tls`, numbered.
    pub(crate) fn new(send: SendRequest<Bytes>, tls: Option<Arc<BackendTls>>) -> SharedH2 {
        SharedH2 {
            send,
            tls,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            used: Arc::new(AtomicU64::new(0)),
            born: Instant::now(),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.used.store(ms, Ordering::Relaxed);
    }

    fn made_with(&self, tls: Option<&Arc<BackendTls>>) -> bool {
        match (&self.tls, tls) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// Numbers connections for [`H2Slot::forget`].
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What a request looking for a stream finds ([`H2Slot::take`]).
#[derive(Debug)]
pub(crate) enum H2Room {
    /// A stream on this connection, held until the lease is dropped.
    Stream(SharedH2, H2Lease),
    /// The request's client connection holds `cap` streams to this backend already.
    ClientAtCap { cap: usize },
    /// Every one of the `open` connections is at the backend's limit.
    Full { open: usize },
}

/// One stream taken on a shared connection, for a client connection (`None`: an HTTP/1.x
/// one): given back when dropped, which wakes the requests waiting for room.
#[derive(Debug)]
pub(crate) struct H2Lease {
    pool: Arc<Connections>,
    id: u64,
    client: Option<u64>,
}

impl Drop for H2Lease {
    fn drop(&mut self) {
        self.pool.h2.give_back(self.id, self.client);
    }
}

impl H2Slot {
    fn set(&self) -> std::sync::MutexGuard<'_, H2Set> {
        self.set.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A future that completes once room may have come: made before looking, so that room
    /// given back in between is not missed.
    pub(crate) fn room(&self) -> tokio::sync::futures::Notified<'_> {
        self.room.notified()
    }

    /// A stream on the oldest connection made with `tls` that has one free, for `client`
    /// (an HTTP/2 client connection's number) unless it holds `per_client` streams here
    /// already (`None`: half the backend's limit). Connections made with other TLS settings
    /// (before a reload) are left: they close once their streams are over.
    pub(crate) fn take(
        &self,
        pool: &Arc<Connections>,
        tls: Option<&Arc<BackendTls>>,
        client: Option<u64>,
        per_client: Option<usize>,
    ) -> H2Room {
        let mut set = self.set();
        set.open.retain(|e| e.shared.made_with(tls));
        if let Some(client) = client {
            let limit = set.open.iter().filter_map(H2Entry::known_limit).max();
            let cap = per_client.or_else(|| limit.map(|l| (l / 2).max(1)));
            let held = set.clients.get(&client).copied().unwrap_or(0);
            if let Some(cap) = cap.filter(|&cap| held >= cap) {
                return H2Room::ClientAtCap { cap };
            }
        }
        let open = set.open.len();
        let Some(entry) = set.open.iter_mut().find(|e| e.streams < e.limit()) else {
            return H2Room::Full { open };
        };
        entry.streams += 1;
        entry.shared.touch();
        let shared = entry.shared.clone();
        if let Some(client) = client {
            *set.clients.entry(client).or_default() += 1;
        }
        let lease = H2Lease {
            pool: Arc::clone(pool),
            id: shared.id,
            client,
        };
        H2Room::Stream(shared, lease)
    }

    /// Makes `shared` (just opened) one that later requests take, with one stream taken on it
    /// for `client`.
    pub(crate) fn keep(
        &self,
        pool: &Arc<Connections>,
        shared: SharedH2,
        client: Option<u64>,
    ) -> H2Lease {
        let id = shared.id;
        {
            let mut set = self.set();
            set.open.push(H2Entry { shared, streams: 1 });
            if let Some(client) = client {
                *set.clients.entry(client).or_default() += 1;
            }
        }
        self.room.notify_waiters();
        H2Lease {
            pool: Arc::clone(pool),
            id,
            client,
        }
    }

    /// Wakes the requests waiting for room (a connection's limit became known).
    pub(crate) fn room_came(&self) {
        self.room.notify_waiters();
    }

    fn give_back(&self, id: u64, client: Option<u64>) {
        {
            let mut set = self.set();
            if let Some(entry) = set.open.iter_mut().find(|e| e.shared.id == id) {
                entry.streams = entry.streams.saturating_sub(1);
            }
            if let Some(client) = client
                && let std::collections::hash_map::Entry::Occupied(mut held) =
                    set.clients.entry(client)
            {
                *held.get_mut() -= 1;
                if *held.get() == 0 {
                    held.remove();
                }
            }
        }
        self.room.notify_waiters();
    }

    /// Forgets connection `id` if it is still one requests take: they open another once the
    /// rest are full. Its streams finish on it.
    pub(crate) fn forget(&self, id: u64) {
        self.set().open.retain(|e| e.shared.id != id);
        self.room.notify_waiters();
    }

    /// Forgets every connection (the backend was disabled): each closes once its streams are
    /// over.
    pub(crate) fn forget_any(&self) {
        self.set().open.clear();
        self.room.notify_waiters();
    }
}

/// Looks at the socket's input without taking it: `Ok(0)` at the end of the stream.
fn peek(stream: &TcpStream) -> std::io::Result<usize> {
    socket2::SockRef::from(stream).peek(&mut [MaybeUninit::uninit(); 1])
}

/// Whether an idle connection is still open with nothing to read: what the reactor says,
/// confirmed by a peek when it says readable (which clears a stale mark), or always peeked
/// when `careful`.
fn quiet(stream: &TcpStream, careful: bool) -> bool {
    let nothing = |r: std::io::Result<usize>| matches!(r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    if crate::io::marked_readable(stream) {
        nothing(stream.try_io(Interest::READABLE, || peek(stream)))
    } else {
        !careful || nothing(peek(stream))
    }
}

impl Connections {
    pub(crate) fn new(addr: SocketAddr, max_idle: usize, idle_timeout: Duration) -> Connections {
        Connections {
            addr,
            idle: Mutex::new(VecDeque::new()),
            open: Arc::new(AtomicUsize::new(0)),
            max_idle,
            idle_timeout,
            h2: H2Slot::default(),
        }
    }

    /// The address connections go to.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How long an unused connection is kept (`keepalive_timeout`).
    pub(crate) fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    fn idle_list(&self) -> std::sync::MutexGuard<'_, VecDeque<Idle>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether an idle connection can still be used at `now`.
    fn usable(&self, entry: &Idle, now: Instant, careful: bool) -> bool {
        now.duration_since(entry.since) < self.idle_timeout
            && quiet(entry.conn.stream.tcp(), careful)
    }

    /// Whether connections are kept for reuse at all (`keepalive` > 0).
    pub(crate) fn keeps_idle(&self) -> bool {
        self.max_idle > 0
    }

    /// The most recently returned connection that is still open and not idle for too long;
    /// `careful` (for a request that cannot be resent): make sure with a system call that the
    /// backend has not closed it. Only a connection made with `tls` (the upstream's TLS
    /// settings in force) is taken; others, from before a reload, are closed.
    pub(crate) fn take_idle(
        &self,
        careful: bool,
        tls: Option<&Arc<BackendTls>>,
    ) -> Option<BackendConn> {
        let mut idle = self.idle_list();
        let now = Instant::now();
        while let Some(entry) = idle.pop_back() {
            let same_tls = match (&entry.conn.tls, tls) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            };
            if same_tls && self.usable(&entry, now, careful) {
                let mut conn = entry.conn;
                conn.reused = true;
                return Some(conn);
            }
        }
        None
    }

    /// Puts a connection back for reuse. When `keepalive` are idle already, the one idle the
    /// longest is closed instead (as nginx's cache evicts its least recently used).
    pub(crate) fn put_idle(&self, conn: BackendConn) {
        debug_assert!(conn.buf.is_empty());
        if self.max_idle == 0 {
            return;
        }
        let mut idle = self.idle_list();
        if idle.len() >= self.max_idle {
            idle.pop_front();
        }
        idle.push_back(Idle {
            conn,
            since: Instant::now(),
        });
    }

    /// Closes the idle connections that expired or that the backend closed; returns how many.
    pub(crate) fn reap(&self) -> usize {
        let now = Instant::now();
        let mut idle = self.idle_list();
        let before = idle.len();
        idle.retain(|entry| self.usable(entry, now, false));
        before - idle.len()
    }

    /// Closes every idle connection (the backend was disabled), and lets the shared HTTP/2
    /// connection close once its streams are over; returns how many idle ones were closed.
    pub(crate) fn close_idle(&self) -> usize {
        self.h2.forget_any();
        let mut idle = self.idle_list();
        let n = idle.len();
        idle.clear();
        n
    }

    /// Connections open to the backend (busy or idle), and how many of them are idle.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let idle = self.idle_list().len();
        (self.open.load(Ordering::Relaxed), idle)
    }

    /// Opens a new connection within `timeout`: TCP, and with `tls` the TLS handshake too,
    /// verifying the backend by the name `tls` gives for `written` (its address as written).
    pub(crate) async fn connect(
        &self,
        timeout: Duration,
        tls: Option<(&Arc<BackendTls>, &str)>,
    ) -> Result<BackendConn, ConnectError> {
        let (stream, open) = self.connect_stream(timeout, tls).await?;
        Ok(BackendConn {
            stream,
            tls: tls.map(|(tls, _)| Arc::clone(tls)),
            buf: Buffer::new(BACKEND_BUFFER),
            reused: false,
            _open: open,
        })
    }

    /// [`Connections::connect`]'s stream alone, counted open while the count lives.
    pub(crate) async fn connect_stream(
        &self,
        timeout: Duration,
        tls: Option<(&Arc<BackendTls>, &str)>,
    ) -> Result<(BackendStream, OpenCount), ConnectError> {
        let connect = async {
            let tcp = TcpStream::connect(self.addr)
                .await
                .map_err(ConnectError::Io)?;
            tcp.set_nodelay(true).map_err(ConnectError::Io)?;
            let Some((tls, written)) = tls else {
                return Ok(Either::Left(tcp));
            };
            // A backend only the admin API knows has no address as written: its IP then.
            let written = match written {
                "" => self.addr.ip().to_string(),
                w => w.to_owned(),
            };
            let name = tls
                .name_for(&written)
                .ok_or(ConnectError::NoServerName(written))?;
            let stream = tls.handshake(tcp, name).await.map_err(ConnectError::Tls)?;
            Ok(Either::Right(Box::new(stream)))
        };
        match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(stream)) => Ok((stream, OpenCount::new(&self.open))),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ConnectError::Timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_out_of_descriptors_or_ports_is_our_own_shortage() {
        for errno in [
            Errno::MFILE,
            Errno::NFILE,
            Errno::ADDRNOTAVAIL,
            Errno::NOBUFS,
        ] {
            let e = std::io::Error::from_raw_os_error(errno.raw_os_error());
            assert_eq!(
                ConnectError::Io(e).fault(),
                Fault::LocalResources,
                "{errno}"
            );
        }
        for errno in [Errno::CONNREFUSED, Errno::HOSTUNREACH, Errno::CONNRESET] {
            let e = std::io::Error::from_raw_os_error(errno.raw_os_error());
            assert_eq!(ConnectError::Io(e).fault(), Fault::ConnectFailed, "{errno}");
        }
        assert_eq!(ConnectError::Timeout.fault(), Fault::ConnectTimeout);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connections_expire_and_are_counted() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accept = tokio::spawn(async move {
            let mut held = Vec::new();
            for _ in 0..3 {
                held.push(listener.accept().await.unwrap().0);
            }
            held
        });
        let pool = Connections::new(addr, 2, Duration::from_secs(60));
        let mut conns = Vec::new();
        for _ in 0..3 {
            conns.push(pool.connect(Duration::from_secs(1), None).await.unwrap());
        }
        let _held = accept.await.unwrap();
        assert_eq!(pool.counts(), (3, 0));
        for c in conns {
            assert_eq!(c.connection(), Connection::Fresh);
            pool.put_idle(c);
        }
        // The cap: the one idle the longest is closed.
        assert_eq!(pool.counts(), (2, 2));
        let c = pool.take_idle(true, None).unwrap();
        assert_eq!(c.connection(), Connection::Reused);
        pool.put_idle(c);
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(pool.reap(), 0);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(pool.reap(), 2);
        assert_eq!(pool.counts(), (0, 0));
        assert!(pool.take_idle(false, None).is_none());
    }

    /// A connection to an in-memory HTTP/2 server that allows `max_streams` at once, once its
    /// SETTINGS have been read.
    async fn h2_connection(max_streams: u32) -> SharedH2 {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            let mut conn = h2::server::Builder::new()
                .max_concurrent_streams(max_streams)
                .handshake::<_, Bytes>(server_io)
                .await
                .unwrap();
            while let Some(Ok(_)) = conn.accept().await {}
        });
        let (send, conn) = h2::client::Builder::new()
            .initial_max_send_streams(H2_LIMIT_UNKNOWN)
            .handshake::<_, Bytes>(client_io)
            .await
            .unwrap();
        tokio::spawn(conn);
        let said = async {
            while send.current_max_send_streams() != max_streams as usize {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), said)
            .await
            .expect("the server's SETTINGS");
        SharedH2::new(send, None)
    }

    #[tokio::test]
    async fn streams_fill_the_oldest_connection_and_a_client_holds_half_of_one() {
        let pool = Arc::new(Connections::new(
            "127.0.0.1:9".parse().unwrap(),
            4,
            Duration::from_secs(60),
        ));
        let take = |client: Option<u64>| pool.h2.take(&pool, None, client, None);
        let first = h2_connection(4).await;
        let first_id = first.id;
        let _opener = pool.h2.keep(&pool, first, Some(1));
        // Client 1 may hold half of 4.
        let H2Room::Stream(on, second) = take(Some(1)) else {
            panic!("a stream for client 1")
        };
        assert_eq!(on.id, first_id);
        assert!(matches!(take(Some(1)), H2Room::ClientAtCap { cap: 2 }));
        // Others fill the connection; HTTP/1.1 clients (None) are not counted.
        let taken: Vec<H2Room> = vec![take(Some(2)), take(None)];
        assert!(taken.iter().all(|r| matches!(r, H2Room::Stream(..))));
        assert!(matches!(take(None), H2Room::Full { open: 1 }));
        // A stream given back is room again, for its own client too.
        drop(second);
        let again = take(Some(1));
        assert!(matches!(again, H2Room::Stream(..)));
        // A second connection takes what the first cannot; a stream given back on the first
        // makes it the one taken again (the oldest first).
        let extra = h2_connection(4).await;
        let extra_id = extra.id;
        let _on_extra = pool.h2.keep(&pool, extra, None);
        let H2Room::Stream(on, _third_a) = take(Some(3)) else {
            panic!("room on the second connection")
        };
        assert_eq!(on.id, extra_id);
        drop(taken);
        let H2Room::Stream(on, _third_b) = take(Some(3)) else {
            panic!("room on the first again")
        };
        assert_eq!(on.id, first_id);
        // An explicit share overrides the derived one (client 3 holds 2).
        assert!(matches!(
            pool.h2.take(&pool, None, Some(3), Some(2)),
            H2Room::ClientAtCap { cap: 2 }
        ));
        assert!(matches!(
            pool.h2.take(&pool, None, Some(3), Some(3)),
            H2Room::Stream(..)
        ));
    }

    #[tokio::test]
    async fn a_careful_take_sees_a_close_the_reactor_has_not_reported() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let pool = Connections::new(addr, 4, Duration::from_secs(60));
        for _ in 0..2 {
            let conn = pool.connect(Duration::from_secs(1), None).await.unwrap();
            let (server_side, _) = listener.accept().await.unwrap();
            pool.put_idle(conn);
            drop(server_side);
        }
        // No await since the backend closed both: the reactor has not polled the FINs, but
        // they are in the kernel (loopback delivers at once).
        assert!(
            pool.take_idle(true, None).is_none(),
            "both closed, both seen by the peek"
        );
        assert_eq!(pool.counts(), (0, 0));
    }
}
