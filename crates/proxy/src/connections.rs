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
//! * **The shared HTTP/2 connection** (`backend_protocol = "h2"`): one per backend and
//!   worker, multiplexed, held in an [`H2Slot`] beside the HTTP/1.1 ones; `upstream_h2` opens,
//!   drives and forgets it, and requests take it from here.
//! * **Connect errors are classified** ([`ConnectError::fault`]): running out of descriptors or
//!   local ports is the proxy's problem, not the backend's.

use std::collections::VecDeque;
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
}

impl ConnectError {
    /// Whose problem it is, for the retry policy.
    pub(crate) fn fault(&self) -> Fault {
        match self {
            ConnectError::Timeout => Fault::ConnectTimeout,
            ConnectError::Io(e) if is_local_shortage(e) => Fault::LocalResources,
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

/// The HTTP/2 connection a worker's requests to one backend share (`backend_protocol = "h2"`,
/// opened and driven by [`crate::upstream_h2`]), if one is open: kept beside the worker's
/// HTTP/1.1 connections to the same backend, so that disabling the backend forgets both.
#[derive(Debug, Default)]
pub(crate) struct H2Slot {
    current: Mutex<Option<SharedH2>>,
    /// Held while a connection is being opened, so that requests arriving meanwhile wait for
    /// it instead of each opening their own.
    pub(crate) opening: tokio::sync::Mutex<()>,
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
}

/// Numbers connections for [`H2Slot::forget`].
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl H2Slot {
    fn shared(&self) -> std::sync::MutexGuard<'_, Option<SharedH2>> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes `shared` the connection later requests take.
    pub(crate) fn keep(&self, shared: SharedH2) {
        *self.shared() = Some(shared);
    }

    /// Forgets connection `id` if it is still the current one: later requests open another.
    pub(crate) fn forget(&self, id: u64) {
        let mut current = self.shared();
        if current.as_ref().is_some_and(|s| s.id == id) {
            *current = None;
        }
    }

    /// Forgets the current connection, whichever it is (the backend was disabled): it closes
    /// once its streams are over.
    pub(crate) fn forget_any(&self) {
        *self.shared() = None;
    }

    /// The current connection, if there is one made with `tls` (the upstream's TLS in force).
    pub(crate) fn current(&self, tls: Option<&Arc<BackendTls>>) -> Option<SharedH2> {
        let current = self.shared();
        let shared = current.as_ref()?;
        let same_tls = match (&shared.tls, tls) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        if !same_tls {
            return None;
        }
        shared.touch();
        Some(shared.clone())
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
