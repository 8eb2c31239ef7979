//! Keep-alive connections to one backend, for one worker.
//!
//! Each worker keeps its own idle connections (as nginx's workers do), so a connection is only
//! ever used by the runtime whose reactor it is registered with, and taking one never
//! contends with another thread. After a response has been read to its end the connection
//! goes back on the idle list, and the next request takes the most recently used one (LIFO
//! keeps few connections warm and lets the rest time out).
//!
//! An idle connection is not read, so a backend closing it is noticed through readiness: the
//! reactor marks the socket readable when the FIN (or stray bytes) arrive, and a connection
//! that is readable while idle is discarded when taken, without a system call.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::task::{Context, Waker};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::buffer::Buffer;

/// Read buffer of a backend connection: response heads must fit (nginx's
/// `proxy_buffer_size`, 4 or 8 KiB there); bodies stream through it.
const BACKEND_BUFFER: usize = 16 * 1024;

/// One connection to a backend, with its read buffer.
#[derive(Debug)]
pub(crate) struct BackendConn {
    pub(crate) stream: TcpStream,
    pub(crate) buf: Buffer,
}

/// Why a new connection could not be had.
#[derive(Debug)]
pub(crate) enum ConnectError {
    Io(std::io::Error),
    Timeout,
}

#[derive(Debug)]
struct Idle {
    conn: BackendConn,
    since: Instant,
}

#[derive(Debug)]
pub(crate) struct Connections {
    addr: SocketAddr,
    /// Only this worker's tasks use the list: the lock is never contended.
    idle: Mutex<Vec<Idle>>,
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
            max_idle,
            idle_timeout,
        }
    }

    /// The most recently returned connection that is still open and not idle for too long.
    pub(crate) fn take_idle(&self) -> Option<BackendConn> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        while let Some(entry) = idle.pop() {
            if now.duration_since(entry.since) < self.idle_timeout && !readable(&entry.conn.stream)
            {
                return Some(entry.conn);
            }
        }
        None
    }

    /// Puts a connection back for reuse, unless enough are idle already.
    pub(crate) fn put_idle(&self, conn: BackendConn) {
        debug_assert!(conn.buf.is_empty());
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.max_idle {
            idle.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
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
        })
    }
}
