//! Socket writes with deadlines, watching a client while it waits, and what a client
//! connection is: plain TCP or TLS over it ([`ClientStream`]).

use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The instant `d` from now; a duration too large for the clock (a configured "10000y") means
/// never, instead of an overflow.
pub(crate) fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}

/// How long a transfer that should keep a minimum pace may take: `between` from one piece to
/// the next (nginx's `client_body_timeout` and `send_timeout`), and, with a `min_rate`, a
/// deadline for the whole that starts at `between` and moves one second later for every
/// `min_rate` bytes moved (Apache's `mod_reqtimeout` `MinRate`). A transfer trickled a few bytes
/// at a time is cut at about `between` after it began, whatever each trickle resets; one at
/// least that fast runs to its end. Request bodies (`client_body_min_rate`) and responses
/// (`send_min_rate`) are held to it alike.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    started: Instant,
    between: Duration,
    min_rate: u64,
    moved: u64,
}

impl Pace {
    /// A transfer starting now; `min_rate` 0: only `between` is limited.
    pub(crate) fn new(between: Duration, min_rate: u64) -> Pace {
        Pace {
            started: Instant::now(),
            between,
            min_rate,
            moved: 0,
        }
    }

    /// The time allowed from one piece to the next.
    pub(crate) fn between(&self) -> Duration {
        self.between
    }

    /// The bytes per second the whole must average (0: no minimum).
    pub(crate) fn min_rate(&self) -> u64 {
        self.min_rate
    }

    /// Counts `n` more bytes moved.
    pub(crate) fn count(&mut self, n: u64) {
        self.moved = self.moved.saturating_add(n);
    }

    /// When the next piece must have moved, waiting from now.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline_from(Instant::now())
    }

    /// When the next piece must have moved, waiting since `since` (the last progress): a few
    /// integer operations, no system call.
    pub(crate) fn deadline_from(&self, since: Instant) -> Instant {
        let next = since
            .checked_add(self.between)
            .unwrap_or_else(|| after(self.between));
        if self.min_rate == 0 {
            return next;
        }
        // `moved / min_rate` seconds earned, without floating point (which could overflow a
        // `Duration` and panic).
        let secs = self.moved / self.min_rate;
        let nanos = (u128::from(self.moved % self.min_rate) * 1_000_000_000
            / u128::from(self.min_rate)) as u32;
        let earned = Duration::new(secs, nanos);
        self.started
            .checked_add(self.between.saturating_add(earned))
            .map_or(next, |whole| whole.min(next))
    }
}

/// Writes `a` then `b` to the client within `pace` (nginx `send_timeout` between writes, and
/// `send_min_rate` over the whole response), counting what went out in it.
pub(crate) async fn send_paced<W: tokio::io::AsyncWrite + Unpin>(
    stream: &mut W,
    a: &[u8],
    b: &[u8],
    pace: &mut Pace,
) -> io::Result<()> {
    let written = AtomicUsize::new(0);
    let result = tokio::time::timeout_at(pace.deadline(), write_two(stream, a, b, &written)).await;
    pace.count(written.load(Ordering::Relaxed) as u64);
    match result {
        Ok(written) => written,
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}

/// Writes `a` then `b` to the client within `timeout` (nginx `send_timeout`: a client that
/// stops reading does not hold its backend connection forever).
pub(crate) async fn send<W: tokio::io::AsyncWrite + Unpin>(
    stream: &mut W,
    a: &[u8],
    b: &[u8],
    timeout: Duration,
) -> io::Result<()> {
    match tokio::time::timeout(timeout, write_two(stream, a, b, &AtomicUsize::new(0))).await {
        Ok(written) => written,
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}

/// A client connection as the HTTP/1.1 code serves it: a byte stream, and the TCP socket
/// under it for what only the socket can tell (whether the client left: a peek, which nginx
/// also does on the raw socket under SSL; whether it is readable; linger on a reset). The
/// client code is generic over it, so the plain path is compiled for `TcpStream` itself and
/// pays nothing for TLS.
pub(crate) trait ClientStream:
    tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send
{
    /// The TCP socket under the stream.
    fn tcp(&self) -> &TcpStream;

    /// The halves a tunnel reads and writes at once (an upgraded connection is relayed both
    /// ways): a `TcpStream`'s own borrowed halves, or a TLS stream split.
    type Reader<'a>: tokio::io::AsyncRead + Unpin + Send
    where
        Self: 'a;
    type Writer<'a>: tokio::io::AsyncWrite + Unpin + Send
    where
        Self: 'a;
    fn halves(&mut self) -> (Self::Reader<'_>, Self::Writer<'_>);

    /// Whether input is already buffered above the socket (decrypted TLS records not yet
    /// read), so waiting for the socket to become readable would wait for nothing.
    fn has_buffered_input(&mut self) -> bool {
        false
    }

    /// Whether the protocol has a message of its own for the end of the connection (TLS's
    /// `close_notify`), sent by `shutdown`.
    const SAYS_GOODBYE: bool = false;
}

/// Whether the reactor has seen the socket become readable (data or end of stream). A hint,
/// with no system call: the reactor may not have been told yet, and a mark may be stale.
pub(crate) fn marked_readable(stream: &TcpStream) -> bool {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    stream.poll_read_ready(&mut cx).is_ready()
}

impl ClientStream for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }

    type Reader<'a> = tokio::net::tcp::ReadHalf<'a>;
    type Writer<'a> = tokio::net::tcp::WriteHalf<'a>;
    fn halves(&mut self) -> (Self::Reader<'_>, Self::Writer<'_>) {
        self.split()
    }
}

impl ClientStream for tokio_rustls::server::TlsStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }

    type Reader<'a> = tokio::io::ReadHalf<&'a mut Self>;
    type Writer<'a> = tokio::io::WriteHalf<&'a mut Self>;
    fn halves(&mut self) -> (Self::Reader<'_>, Self::Writer<'_>) {
        tokio::io::split(self)
    }

    const SAYS_GOODBYE: bool = true;

    fn has_buffered_input(&mut self) -> bool {
        // Decrypts whatever whole records rustls holds; an error is "input" too, so that the
        // read which follows finds it and ends the connection.
        self.get_mut()
            .1
            .process_new_packets()
            .map_or(true, |state| state.plaintext_bytes_to_read() > 0)
    }
}

/// Writes `a` then `b` with as few system calls as the socket allows (one, usually), counting
/// what was written in `written` as it goes (so a caller that gives up on the write still
/// knows how much went out; atomic only because a task must be `Send`).
pub(crate) async fn write_two<W: tokio::io::AsyncWrite + Unpin>(
    stream: &mut W,
    a: &[u8],
    b: &[u8],
    written: &AtomicUsize,
) -> io::Result<()> {
    let mut slices = [IoSlice::new(a), IoSlice::new(b)];
    let used = if b.is_empty() { 1 } else { 2 };
    let mut rest = &mut slices[..used];
    while !rest.is_empty() {
        let n = stream.write_vectored(rest).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        // Only this task writes it: a plain store, no read-modify-write.
        written.store(written.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        IoSlice::advance_slices(&mut rest, n);
    }
    // A TLS stream may hold the last records it encrypted when the socket was full (a write
    // is accepted once it is in the TLS layer): push them out. On a TCP socket this is free.
    stream.flush().await
}

/// Resolves when the client has closed its side (or its connection failed) while it waits for
/// an answer; never resolves once it has sent more (a pipelined request is not a departure).
///
/// Costs no system call while nothing happens: the peek first asks the reactor, and the read
/// that took the request head in left the socket marked as drained. This is how nginx notices
/// a client that gave up (`ngx_http_upstream_check_broken_connection`, a `recv` with
/// `MSG_PEEK`); like nginx, a client that only half-closes after sending is taken as gone.
pub(crate) async fn client_gone(client: &TcpStream) {
    let mut byte = [0u8; 1];
    let mut buf = tokio::io::ReadBuf::new(&mut byte);
    // `poll_peek` waits in the socket's reader slot; the `peek` future would queue a waiter
    // behind a lock on every request.
    match std::future::poll_fn(|cx| client.poll_peek(cx, &mut buf)).await {
        Ok(0) | Err(_) => {}
        Ok(_) => std::future::pending().await,
    }
}

/// [`client_gone`], or never when the client is not watched (or there is no socket to watch:
/// an HTTP/2 stream, whose cancellation drops the request's future instead).
pub(crate) async fn watch(client: Option<&TcpStream>, watched: bool) {
    match client {
        Some(client) if watched => client_gone(client).await,
        _ => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pace_gives_between_from_the_last_progress_and_min_rate_over_the_whole() {
        let s = Duration::from_secs;
        let mut pace = Pace::new(s(5), 500);
        let t0 = pace.started;
        assert_eq!(pace.deadline_from(t0), t0 + s(5));
        // 1,000 bytes at 500 B/s earn 2 s: a byte now and then cannot push the end further.
        pace.count(1000);
        assert_eq!(pace.deadline_from(t0 + s(1)), t0 + s(6));
        assert_eq!(pace.deadline_from(t0 + s(10)), t0 + s(7));
        pace.count(250);
        assert_eq!(
            pace.deadline_from(t0 + s(10)),
            t0 + s(7) + Duration::from_millis(500)
        );
        // No minimum: only the time between pieces.
        let mut nginx = Pace::new(s(5), 0);
        nginx.count(1);
        assert_eq!(nginx.deadline_from(t0 + s(100)), t0 + s(105));
        // Absurd counts and rates neither panic nor overflow.
        let mut huge = Pace::new(s(5), 1);
        huge.count(u64::MAX);
        huge.count(1);
        assert_eq!(huge.deadline_from(t0), t0 + s(5));
        let mut fast = Pace::new(s(5), u64::MAX);
        fast.count(u64::MAX - 1);
        assert!(fast.deadline_from(t0) <= t0 + s(6));
    }
}
