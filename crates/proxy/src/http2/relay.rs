//! A backend's response body streamed into an HTTP/2 stream.
//!
//! From an HTTP/1.1 backend, the body is read as [`crate::exchange::relay`] reads it
//! (`Content-Length`, chunked, delimited by the close) within the same `read_timeout`/
//! `response_timeout`, **ahead of the client**: up to [`AHEAD_PER_STREAM`] bytes of it wait for
//! the client's flow-control window in memory, within budgets per connection
//! ([`AHEAD_PER_CONNECTION`]) and per process ([`AHEAD_PER_PROCESS`]). A response that fits is
//! read whole at the backend's pace, and its backend connection goes back to the pool (its
//! `max_conns` place with it) at once, whatever the client's pace, as nginx's
//! `proxy_buffering` does. A larger one holds its backend connection while the client takes
//! it; a client that keeps it waiting (its buffer full, nothing taken for [`HOLD_GRACE`], or
//! less than `send_min_rate` since) has its stream reset (`CANCEL`) and the backend connection
//! closed: a stalled stream does not hold backend capacity (CVE-2019-9511, "data dribble").
//!
//! Sending is paced as on HTTP/1.1 ([`Pace`]): `send_timeout` for each piece of window (nginx's
//! `send_timeout`), and `send_min_rate` over the whole response, so a window opened a byte at
//! a time does not extend it. Chunked bodies are de-chunked (HTTP/2 frames the body itself;
//! RFC 9113 §8.2.2 forbids `Transfer-Encoding`), their trailers dropped. The attempt completes
//! as a success as soon as the backend's part is over, before the last frame goes out.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use balance::Outcome;
use bytes::Bytes;
use h2::SendStream;
use tokio::time::{Instant, sleep_until, timeout_at};

use crate::buffer::Buffer;
use crate::connections::{BACKEND_BUFFER, BackendConn, Connections};
use crate::exchange::{Patience, Relay, read_some};
use crate::http1::{Chunked, FinalResponse, Framing};
use crate::io::Pace;
use crate::upstream::Attempt;
use crate::upstream_h2::{Expected, H2Body};

/// Bytes of one response read from its HTTP/1.1 backend ahead of the client, at most. nginx
/// holds `proxy_buffers` (8 × 4 or 8 KiB: 32 or 64 KiB) in memory and writes the rest to a
/// temporary file (up to `proxy_max_temp_file_size`, 1 GiB); fulcrum writes no files, so it
/// holds more in memory and less in all: a response up to this size frees its backend at the
/// backend's pace.
pub(crate) const AHEAD_PER_STREAM: usize = 256 * 1024;
/// What one connection's streams hold ahead of their client, at most (beyond it, each stream
/// still holds one read of [`BACKEND_BUFFER`]): a client opening `max_concurrent_streams`
/// large downloads and reading none is held to this.
pub(crate) const AHEAD_PER_CONNECTION: usize = 1024 * 1024;
/// What every connection of the process holds ahead of their clients, at most (beyond it,
/// each stream still holds one read).
pub(crate) const AHEAD_PER_PROCESS: usize = 256 * 1024 * 1024;
/// How long a stream that holds its backend connection with its buffer full may go with the
/// client taking nothing (at most `send_timeout`); after that it must take `send_min_rate`.
pub(crate) const HOLD_GRACE: Duration = Duration::from_secs(2);

/// Bytes all streams of the process hold ahead of their clients.
static AHEAD_IN_PROCESS: AtomicUsize = AtomicUsize::new(0);

/// Bytes one connection's streams hold ahead of their clients.
#[derive(Debug, Default)]
pub(crate) struct AheadBudget(AtomicUsize);

/// The client end: the stream and what it was sent.
#[derive(Debug)]
pub(crate) struct StreamEnd<'a> {
    pub(crate) send: &'a mut SendStream<Bytes>,
    /// `send_timeout` for each piece of window, `send_min_rate` over the whole response.
    pub(crate) pace: Pace,
    /// The connection's read-ahead budget.
    pub(crate) ahead: &'a AheadBudget,
    /// Bytes of body sent so far.
    pub(crate) sent: u64,
}

impl StreamEnd<'_> {
    /// Sends `data` as the window allows, in pieces of it (not copied).
    async fn put_bytes(&mut self, mut data: Bytes) -> Result<(), Relay> {
        self.send.reserve_capacity(data.len());
        while !data.is_empty() {
            let capacity = std::future::poll_fn(|cx| self.send.poll_capacity(cx));
            let granted = match timeout_at(self.pace.deadline(), capacity).await {
                Ok(Some(Ok(n))) => n,
                // Reset by the client, the connection gone, or no window in time.
                Ok(Some(Err(_)) | None) | Err(_) => return Err(Relay::Client),
            };
            let n = granted.min(data.len());
            if n == 0 {
                continue;
            }
            self.send
                .send_data(data.split_to(n), false)
                .map_err(|_| Relay::Client)?;
            self.sent += n as u64;
            self.pace.count(n as u64);
        }
        Ok(())
    }

    /// Sends what of `ahead` the stream's window takes now, without waiting: the bytes sent
    /// (which the caller's [`Watch`] counts).
    fn put_ready(&mut self, ahead: &mut Ahead<'_>) -> Result<usize, Relay> {
        let mut sent = 0;
        while !ahead.is_empty() {
            let capacity = self.send.capacity();
            if capacity == 0 {
                break;
            }
            let Some(piece) = ahead.take(capacity) else {
                break;
            };
            sent += piece.len();
            self.send
                .send_data(piece, false)
                .map_err(|_| Relay::Client)?;
        }
        self.sent += sent as u64;
        Ok(sent)
    }

    /// Ends the stream.
    fn finish(&mut self) -> Result<(), Relay> {
        self.send
            .send_data(Bytes::new(), true)
            .map_err(|_| Relay::Client)
    }
}

/// One stream's body read ahead of its client, and the room it takes from the connection's
/// and the process's budgets (given back as it goes out, and when dropped).
#[derive(Debug)]
struct Ahead<'a> {
    queue: VecDeque<Bytes>,
    held: usize,
    connection: &'a AtomicUsize,
}

impl<'a> Ahead<'a> {
    fn new(budget: &'a AheadBudget) -> Ahead<'a> {
        Ahead {
            queue: VecDeque::new(),
            held: 0,
            connection: &budget.0,
        }
    }

    fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// Whether one more read of the backend may be taken in: always when nothing is held
    /// (each stream may hold one read, as without read-ahead), else within the three bounds.
    fn has_room(&self) -> bool {
        self.held == 0
            || (self.held + BACKEND_BUFFER <= AHEAD_PER_STREAM
                && self.connection.load(Ordering::Relaxed) + BACKEND_BUFFER <= AHEAD_PER_CONNECTION
                && AHEAD_IN_PROCESS.load(Ordering::Relaxed) + BACKEND_BUFFER <= AHEAD_PER_PROCESS)
    }

    fn push(&mut self, data: Bytes) {
        let n = data.len();
        if n == 0 {
            return;
        }
        self.held += n;
        self.connection.fetch_add(n, Ordering::Relaxed);
        AHEAD_IN_PROCESS.fetch_add(n, Ordering::Relaxed);
        self.queue.push_back(data);
    }

    /// Up to `n` bytes from the front.
    fn take(&mut self, n: usize) -> Option<Bytes> {
        let front = self.queue.front_mut()?;
        let piece = if front.len() <= n {
            self.queue.pop_front()?
        } else {
            front.split_to(n)
        };
        self.give_back(piece.len());
        Some(piece)
    }

    fn give_back(&mut self, n: usize) {
        self.held -= n;
        self.connection.fetch_sub(n, Ordering::Relaxed);
        AHEAD_IN_PROCESS.fetch_sub(n, Ordering::Relaxed);
    }
}

impl Drop for Ahead<'_> {
    fn drop(&mut self) {
        self.give_back(self.held);
    }
}

/// Where the body stands in the backend's bytes, by its framing.
#[derive(Debug)]
enum Source {
    /// `Content-Length`: bytes still to come.
    Length(u64),
    Chunked(Chunked),
    /// Delimited by the end of the connection.
    Close,
    /// The backend's part is over.
    Done,
}

impl Source {
    /// Moves what `buf` holds of the body into `ahead`.
    fn take(&mut self, buf: &mut Buffer, ahead: &mut Ahead<'_>) -> Result<(), Relay> {
        match self {
            Source::Length(remaining) => {
                let k = buf
                    .len()
                    .min(usize::try_from(*remaining).unwrap_or(usize::MAX));
                if k > 0 {
                    ahead.push(Bytes::copy_from_slice(&buf.filled()[..k]));
                    buf.consume(k);
                    *remaining -= k as u64;
                }
                if *remaining == 0 {
                    *self = Source::Done;
                }
            }
            Source::Chunked(chunked) => {
                let mut data = Vec::new();
                let used = chunked
                    .advance(buf.filled(), |d| data.extend_from_slice(d))
                    .map_err(|e| Relay::backend(e.to_string()))?;
                buf.consume(used);
                ahead.push(Bytes::from(data));
                if chunked.is_done() {
                    *self = Source::Done;
                }
            }
            Source::Close => {
                if !buf.is_empty() {
                    ahead.push(Bytes::copy_from_slice(buf.filled()));
                    buf.consume(buf.len());
                }
            }
            Source::Done => {}
        }
        Ok(())
    }
}

/// What a relay waited for.
enum Event {
    /// The client reset the stream, or its connection is gone.
    ClientGone,
    /// The stream's window opened.
    Window,
    /// A read of the backend: the bytes read, 0 at the end of its stream.
    Read(usize),
    /// The client did not take its bytes in time (`send_timeout`, `send_min_rate`).
    TooSlow,
    /// The client kept the backend waiting too long ([`HOLD_GRACE`]).
    Stalled,
}

/// Relays the body of `response` from `conn` to `end`, ending the stream; `conn` goes back to
/// `pool` as soon as the backend's part is over and it may be reused, or is closed.
pub(crate) async fn relay(
    conn: BackendConn,
    pool: &Connections,
    response: &FinalResponse,
    end: &mut StreamEnd<'_>,
    attempt: &mut Attempt,
    patience: Patience,
) -> Result<(), Relay> {
    let mut source = match response.framing {
        // The head went out with END_STREAM.
        Framing::None => {
            attempt.complete(Outcome::Success);
            if response.backend_keep_alive && conn.buf.is_empty() {
                pool.put_idle(conn);
            }
            return Ok(());
        }
        Framing::Length(n) => Source::Length(n),
        Framing::Chunked => Source::Chunked(Chunked::default()),
        Framing::Close => Source::Close,
    };
    let mut backend = Some(conn);
    let mut ahead = Ahead::new(end.ahead);
    let mut watch = Watch::new(end.pace);
    let mut reserved = 0;
    loop {
        if let Some(conn) = backend.as_mut() {
            source.take(&mut conn.buf, &mut ahead)?;
            if matches!(source, Source::Done) {
                attempt.complete(Outcome::Success);
                if let Some(conn) = backend.take()
                    && response.backend_keep_alive
                    && conn.buf.is_empty()
                {
                    pool.put_idle(conn);
                }
            }
        }
        // The capacity asked for is what waits (h2 takes what is sent off it); asked before
        // sending, as h2 assigns what the windows allow at once.
        if reserved != ahead.held {
            end.send.reserve_capacity(ahead.held);
            reserved = ahead.held;
        }
        let sent = end.put_ready(&mut ahead)?;
        reserved -= sent;
        if ahead.is_empty() && backend.is_none() {
            return end.finish();
        }
        let reading = backend.is_some() && ahead.has_room();
        watch.after(sent, !ahead.is_empty(), backend.is_some() && !reading);
        match wait(end, &mut backend, reading, &watch, patience).await? {
            Event::ClientGone | Event::TooSlow => return Err(Relay::Client),
            Event::Stalled => {
                tracing::debug!("an HTTP/2 client kept its backend waiting; resetting the stream");
                return Err(Relay::Client);
            }
            Event::Window => {}
            Event::Read(0) if matches!(source, Source::Close) => source = Source::Done,
            Event::Read(0) => {
                return Err(Relay::backend(
                    "connection closed before the end of the body",
                ));
            }
            Event::Read(_) => {}
        }
    }
}

/// The client's deadlines while a body is relayed: for the bytes waiting to go
/// (`send_timeout` since the last progress, `send_min_rate` over the response), and while the
/// backend waits for the client ([`HOLD_GRACE`] since the last progress, `send_min_rate` since
/// the buffer first filled).
struct Watch {
    pace: Pace,
    /// Since when bytes have waited for the client with none taken.
    waiting: Option<Instant>,
    /// The backend's wait: its pace (from when the buffer first filled), and since when it has
    /// waited with nothing taken.
    hold: Option<(Pace, Option<Instant>)>,
}

impl Watch {
    fn new(pace: Pace) -> Watch {
        Watch {
            pace,
            waiting: None,
            hold: None,
        }
    }

    /// After `sent` bytes went out: whether bytes still wait (`pending`), and whether the
    /// backend waits for the client (`holding`).
    fn after(&mut self, sent: usize, pending: bool, holding: bool) {
        let now = Instant::now;
        self.pace.count(sent as u64);
        if sent > 0 || !pending {
            self.waiting = None;
        }
        if pending && self.waiting.is_none() {
            self.waiting = Some(now());
        }
        if let Some((pace, since)) = self.hold.as_mut() {
            pace.count(sent as u64);
            if sent > 0 || !holding {
                *since = None;
            }
        }
        if holding {
            let grace = HOLD_GRACE.min(self.pace.between());
            let min_rate = self.pace.min_rate();
            let (_, since) = self
                .hold
                .get_or_insert_with(|| (Pace::new(grace, min_rate), None));
            since.get_or_insert_with(now);
        }
    }

    /// When the bytes waiting must have gone; `None`: none wait.
    fn send_deadline(&self) -> Option<Instant> {
        self.waiting.map(|since| self.pace.deadline_from(since))
    }

    /// When the backend's wait for the client ends it; `None`: it does not wait.
    fn hold_deadline(&self) -> Option<Instant> {
        let (pace, since) = self.hold.as_ref()?;
        since.map(|since| pace.deadline_from(since))
    }
}

/// Waits for the client's window or reset, a read of the backend (`reading`), or a deadline
/// of `watch`.
async fn wait(
    end: &mut StreamEnd<'_>,
    backend: &mut Option<BackendConn>,
    reading: bool,
    watch: &Watch,
    patience: Patience,
) -> Result<Event, Relay> {
    let send_deadline = watch.send_deadline();
    let hold_deadline = watch.hold_deadline();
    let never = || std::future::pending::<()>();
    let want_window = send_deadline.is_some();
    let client = std::future::poll_fn(|cx| {
        if end.send.poll_reset(cx).is_ready() {
            return Poll::Ready(Event::ClientGone);
        }
        if want_window {
            match end.send.poll_capacity(cx) {
                Poll::Ready(Some(Ok(_))) => return Poll::Ready(Event::Window),
                Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(Event::ClientGone),
                Poll::Pending => {}
            }
        }
        Poll::Pending
    });
    let read = async {
        match backend.as_mut() {
            Some(conn) if reading => read_some(conn, never(), patience).await.map(Event::Read),
            _ => std::future::pending().await,
        }
    };
    let until = |deadline: Option<Instant>| async move {
        match deadline {
            Some(at) => sleep_until(at).await,
            None => never().await,
        }
    };
    tokio::select! {
        biased;
        event = client => Ok(event),
        read = read => read,
        () = until(send_deadline) => Ok(Event::TooSlow),
        () = until(hold_deadline) => Ok(Event::Stalled),
    }
}

/// Relays the body of `response` from an HTTP/2 backend's stream to `end`, ending the stream;
/// the window each DATA frame took is given back to the backend once it went on. With
/// `trailers` (the client said `te: trailers`), the backend's trailers end the client's stream
/// too, as gRPC's `grpc-status` must.
pub(crate) async fn relay_h2(
    body: &mut H2Body,
    response: &FinalResponse,
    end: &mut StreamEnd<'_>,
    attempt: &mut Attempt,
    patience: Patience,
    trailers: bool,
) -> Result<(), Relay> {
    if response.framing == Framing::None {
        attempt.complete(Outcome::Success);
        return Ok(());
    }
    let mut expected = Expected::new(response.framing);
    loop {
        // With trailers to come, the stream's end is waited for even once the whole
        // `content-length` came.
        let next = if expected.done() && !trailers {
            None
        } else {
            body.next(reset(end), patience).await?
        };
        let Some(data) = next else {
            expected.end()?;
            if trailers && let Some(fields) = body.trailers(reset(end), patience).await? {
                attempt.complete(Outcome::Success);
                return end.send.send_trailers(fields).map_err(|_| Relay::Client);
            }
            attempt.complete(Outcome::Success);
            return end.finish();
        };
        expected.take(data.len())?;
        if expected.done() {
            attempt.complete(Outcome::Success);
        }
        let n = data.len();
        end.put_bytes(data).await?;
        body.release(n);
    }
}

/// Resolves when the client resets the stream: what ends a relay early, as a departed client
/// does on HTTP/1.1.
async fn reset(end: &mut StreamEnd<'_>) {
    let _ = std::future::poll_fn(|cx| end.send.poll_reset(cx)).await;
}
