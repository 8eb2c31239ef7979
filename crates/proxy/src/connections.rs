//! Keep-alive connections to one backend.
//!
//! Each connection is a hyper HTTP/1.1 client connection whose I/O runs in its own task; we
//! keep the sending half. After a response body has been read to its end the connection goes
//! back on the idle list, and the next request takes the most recently used one (LIFO keeps few
//! connections warm and lets the rest time out). A connection the backend closed while idle is
//! noticed by its task, and is discarded when taken.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

pub(crate) type Sender = SendRequest<Full<Bytes>>;

/// Why a new connection could not be had.
#[derive(Debug)]
pub(crate) enum ConnectError {
    Io(std::io::Error),
    Timeout,
}

#[derive(Debug)]
struct Idle {
    sender: Sender,
    since: Instant,
}

#[derive(Debug)]
pub(crate) struct Connections {
    addr: SocketAddr,
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
    idle_timeout: Duration,
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

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The most recently returned connection that is still open and not idle for too long.
    pub(crate) fn take_idle(&self) -> Option<Sender> {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(conn) = idle.pop() {
            if !conn.sender.is_closed() && now.duration_since(conn.since) < self.idle_timeout {
                return Some(conn.sender);
            }
        }
        None
    }

    /// Puts a connection back for reuse, unless enough are idle already.
    pub(crate) fn put_idle(&self, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.max_idle {
            idle.push(Idle {
                sender,
                since: Instant::now(),
            });
        }
    }

    /// Opens a new connection within `timeout`.
    pub(crate) async fn connect(&self, timeout: Duration) -> Result<Sender, ConnectError> {
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(self.addr)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(ConnectError::Io(e)),
            Err(_) => return Err(ConnectError::Timeout),
        };
        stream.set_nodelay(true).map_err(ConnectError::Io)?;
        let (sender, conn) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ConnectError::Io(std::io::Error::other(e)))?;
        let addr = self.addr;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(backend = %addr, error = %e, "backend connection ended");
            }
        });
        Ok(sender)
    }
}
