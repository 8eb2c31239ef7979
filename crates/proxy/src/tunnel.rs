//! A tunnel: the bytes of a client connection and a backend connection relayed both ways, for
//! a TCP session (`tcp`) and for an HTTP connection upgraded by the backend's `101`
//! (`forward`): nginx stream's proxy, and its `proxy_pass` after `Upgrade`.
//!
//! Each direction is copied on its own, so a side that shuts its sending half down (a
//! half-close) has its end passed on to the other while the answer still flows back; the
//! relay ends when both directions have ended, either fails (the failure passed on as a reset
//! on the other side, so a truncated stream never looks complete), or nothing moved either
//! way for the idle timeout. Every read and every write that moves bytes counts as activity.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::io::ClientStream;
use crate::upstream_tls::{BackendIo as _, BackendStream};

/// Bytes read at once in each direction (nginx stream's `proxy_buffer_size`, 16 KiB).
const BUFFER: usize = 16 * 1024;

/// Bytes a relay moved, readable while it runs (the session's log line is written even when
/// the relay is aborted at shutdown).
#[derive(Debug, Default)]
pub(crate) struct Moved {
    /// Bytes sent to the client (nginx stream's `$bytes_sent`).
    pub(crate) to_client: AtomicU64,
    /// Bytes received from the client (`$bytes_received`).
    pub(crate) from_client: AtomicU64,
}

/// How a relay ended.
#[derive(Debug)]
pub(crate) enum RelayEnd {
    /// Both sides finished (or the backend finished, and the client went quiet after it).
    Closed,
    /// Nothing moved either way for `idle_timeout`.
    Idle,
    /// Reading from or writing to the backend failed (a reset, mostly): the client's
    /// connection is reset in turn, so a truncated stream never looks complete.
    BackendFailed(std::io::Error),
    /// The client's side failed: the backend's connection is reset in turn.
    ClientFailed(std::io::Error),
}

/// Once the backend has ended its side, how long the client may stay silent before the
/// session ends: a server that closed is done (nginx stream, without `proxy_half_close`, ends
/// the session at once; HAProxy bounds this state with `timeout client-fin`), and a client
/// that does not notice — a pooled database connection the server timed out — would otherwise
/// hold its place on the backend, counted in flight, for the whole `idle_timeout`. The other
/// way round (the client ended first and waits for the answer) keeps `idle_timeout`.
const AFTER_BACKEND_ENDED: Duration = Duration::from_secs(1);

/// The time of the last byte moved either way, in milliseconds since the relay began.
#[derive(Debug)]
struct Activity {
    began: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        let ms = self.began.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_until(&self, timeout: Duration) -> Instant {
        self.began + Duration::from_millis(self.last_ms.load(Ordering::Relaxed)) + timeout
    }
}

/// Which side of a pipe failed.
#[derive(Debug)]
enum PipeError {
    Read(std::io::Error),
    Write(std::io::Error),
}

/// Relays both directions until both have ended, one fails, or nothing moved for `idle`
/// (TCP sessions, and HTTP connections upgraded to a tunnel), counting into `moved`.
pub(crate) async fn relay<C: ClientStream>(
    client: &mut C,
    backend: &mut BackendStream,
    idle: Duration,
    moved: &Moved,
) -> RelayEnd {
    let activity = Activity {
        began: Instant::now(),
        last_ms: AtomicU64::new(0),
    };
    let end = {
        let (mut client_in, mut client_out) = client.halves();
        let (mut backend_in, mut backend_out) = backend.split();
        let up = pipe(
            &mut client_in,
            &mut backend_out,
            &activity,
            &moved.from_client,
        );
        let down = pipe(
            &mut backend_in,
            &mut client_out,
            &activity,
            &moved.to_client,
        );
        tokio::pin!(up, down);
        let (mut up_done, mut down_done) = (false, false);
        loop {
            let limit = if down_done {
                idle.min(AFTER_BACKEND_ENDED)
            } else {
                idle
            };
            // Bytes that move do not wake this loop: the timer, when it fires, looks at when
            // the last one moved and sleeps again if that was recent.
            tokio::select! {
                r = &mut up, if !up_done => match r {
                    Ok(()) => up_done = true,
                    Err(PipeError::Read(e)) => break RelayEnd::ClientFailed(e),
                    Err(PipeError::Write(e)) => break RelayEnd::BackendFailed(e),
                },
                r = &mut down, if !down_done => match r {
                    Ok(()) => down_done = true,
                    Err(PipeError::Read(e)) => break RelayEnd::BackendFailed(e),
                    Err(PipeError::Write(e)) => break RelayEnd::ClientFailed(e),
                },
                () = tokio::time::sleep_until(activity.idle_until(limit)) => {
                    if Instant::now() >= activity.idle_until(limit) {
                        break if down_done { RelayEnd::Closed } else { RelayEnd::Idle };
                    }
                }
            }
            if up_done && down_done {
                break RelayEnd::Closed;
            }
        }
    };
    // A failure on one side is passed on as a reset on the other (closing with SO_LINGER 0),
    // not a clean end of stream.
    match &end {
        RelayEnd::BackendFailed(_) => reset_on_close(client.tcp()),
        RelayEnd::ClientFailed(_) => reset_on_close(backend.tcp()),
        RelayEnd::Closed | RelayEnd::Idle => {}
    }
    end
}

fn reset_on_close(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

/// Copies `from` to `to` until `from` ends, then ends `to`'s sending side (the half-close
/// passed on). Every read and every write that moves bytes counts as activity, so a slow
/// reader that keeps draining is never taken for an idle one (nginx's `proxy_timeout` is
/// "between two successive read or write operations").
async fn pipe(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    activity: &Activity,
    count: &AtomicU64,
) -> Result<(), PipeError> {
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = from.read(&mut buf).await.map_err(PipeError::Read)?;
        if n == 0 {
            return to.shutdown().await.map_err(PipeError::Write);
        }
        activity.touch();
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            let written = to.write(rest).await.map_err(PipeError::Write)?;
            if written == 0 {
                return Err(PipeError::Write(std::io::ErrorKind::WriteZero.into()));
            }
            rest = &rest[written..];
            count.fetch_add(written as u64, Ordering::Relaxed);
            activity.touch();
        }
    }
}
