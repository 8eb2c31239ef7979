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
//! * **A closed idle connection is noticed without a system call**: the reactor marks the
//!   socket readable when the FIN (or stray bytes) arrive, and a connection that is readable
//!   while idle is discarded.
//! * **Counted**: connections open (busy or idle) and idle, per backend and worker, for the
//!   admin API and metrics to sum.
//! * **Connect errors are classified** ([`ConnectError::fault`]): running out of descriptors or
//!   local ports is the proxy's problem, not the backend's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Waker};
use std::time::Duration;

use balance::{Connection, Fault};
use rustix::io::Errno;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::buffer::Buffer;

/// Read buffer of a backend connection: response heads must fit (nginx's
/// `proxy_buffer_size`, 4 or 8 KiB there); bodies stream through it.
pub(crate) const BACKEND_BUFFER: usize = 16 * 1024;

/// One connection to a backend, with its read buffer. Counted as open until dropped.
#[derive(Debug)]
pub(crate) struct BackendConn {
    pub(crate) stream: TcpStream,
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
struct OpenCount(Arc<AtomicUsize>);

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
}

impl ConnectError {
    /// Whose problem it is, for the retry policy.
    pub(crate) fn fault(&self) -> Fault {
        match self {
            ConnectError::Timeout => Fault::ConnectTimeout,
            ConnectError::Io(e) if is_local_shortage(e) => Fault::LocalResources,
            ConnectError::Io(_) => Fault::ConnectFailed,
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
    idle: Mutex<Vec<Idle>>,
    /// Connections open to the backend, busy or idle.
    open: Arc<AtomicUsize>,
    max_idle: usize,
    idle_timeout: Duration,
}

/// Whether the reactor has seen the socket become readable (data or end of stream), which an
/// idle connection must not be.
fn readable(stream: &TcpStream) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    stream.poll_read_ready(&mut cx).is_ready()
}

impl Connections {
    pub(crate) fn new(addr: SocketAddr, max_idle: usize, idle_timeout: Duration) -> Connections {
        Connections {
            addr,
            idle: Mutex::new(Vec::new()),
            open: Arc::new(AtomicUsize::new(0)),
            max_idle,
            idle_timeout,
        }
    }

    fn idle_list(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether an idle connection can still be used at `now`.
    fn usable(&self, entry: &Idle, now: Instant) -> bool {
        now.duration_since(entry.since) < self.idle_timeout && !readable(&entry.conn.stream)
    }

    /// The most recently returned connection that is still open and not idle for too long.
    pub(crate) fn take_idle(&self) -> Option<BackendConn> {
        let mut idle = self.idle_list();
        let now = Instant::now();
        while let Some(entry) = idle.pop() {
            if self.usable(&entry, now) {
                let mut conn = entry.conn;
                conn.reused = true;
                return Some(conn);
            }
        }
        None
    }

    /// Puts a connection back for reuse, unless enough are idle already.
    pub(crate) fn put_idle(&self, conn: BackendConn) {
        debug_assert!(conn.buf.is_empty());
        let mut idle = self.idle_list();
        if idle.len() < self.max_idle {
            idle.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
    }

    /// Closes the idle connections that expired or that the backend closed; returns how many.
    pub(crate) fn reap(&self) -> usize {
        let now = Instant::now();
        let mut idle = self.idle_list();
        let before = idle.len();
        idle.retain(|entry| self.usable(entry, now));
        before - idle.len()
    }

    /// Connections open to the backend (busy or idle), and how many of them are idle.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let idle = self.idle_list().len();
        (self.open.load(Ordering::Relaxed), idle)
    }

    /// Opens a new connection within `timeout`.
    pub(crate) async fn connect(&self, timeout: Duration) -> Result<BackendConn, ConnectError> {
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(self.addr)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(ConnectError::Io(e)),
            Err(_) => return Err(ConnectError::Timeout),
        };
        stream.set_nodelay(true).map_err(ConnectError::Io)?;
        Ok(BackendConn {
            stream,
            buf: Buffer::new(BACKEND_BUFFER),
            reused: false,
            _open: OpenCount::new(&self.open),
        })
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
            conns.push(pool.connect(Duration::from_secs(1)).await.unwrap());
        }
        let _held = accept.await.unwrap();
        assert_eq!(pool.counts(), (3, 0));
        for c in conns {
            assert_eq!(c.connection(), Connection::Fresh);
            pool.put_idle(c);
        }
        // The cap: the third is closed, not kept.
        assert_eq!(pool.counts(), (2, 2));
        let c = pool.take_idle().unwrap();
        assert_eq!(c.connection(), Connection::Reused);
        pool.put_idle(c);
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(pool.reap(), 0);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(pool.reap(), 2);
        assert_eq!(pool.counts(), (0, 0));
        assert!(pool.take_idle().is_none());
    }
}
