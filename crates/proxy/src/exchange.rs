//! One exchange with a backend on one connection: the request written while the answer is
//! read, the response head parsed and rewritten for the client, then the body relayed.
//!
//! * **Reading while writing.** A backend may answer before it has read the whole request (a
//!   413 or 401 for a large upload) and stop reading; writing the whole body first would block
//!   until `read_timeout` and turn its answer into a 504. So the request is written and the
//!   answer read at once, as nginx does; an answer that comes before the request went out
//!   whole is passed on, and its connection is not reused (the rest of the request would be
//!   taken for the next one).
//! * **Watching the client.** While the backend works, a client that closes is noticed at
//!   once ([`client_gone`]): the exchange ends, the backend connection is closed so the backend
//!   stops working for nobody, and the attempt completes as cancelled.
//! * **Classifying failures.** What went wrong before a complete head is reported as a
//!   [`balance::AttemptFailure`] (reused or fresh connection, how much of the request went out,
//!   whether any of the answer came), for the retry policy to decide on.
//! * **Relaying.** The head is written with the first body bytes in one write, the rest of the
//!   body as it arrives, at most `read_timeout` between two reads. The attempt completes as a
//!   success as soon as the backend's part is over, before the last write to the client.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use balance::{AttemptFailure, Fault, Outcome, Replay, RequestSent, ResponseReceived};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

use crate::buffer::Buffer;
use crate::connections::{BACKEND_BUFFER, BackendConn};
use crate::http1::{self, Chunked, ClientSide, FinalResponse, Framing, ResponseHead};
use crate::io::{ClientStream, Pace, after, send_paced, watch, write_two};
use crate::upstream::Attempt;
use crate::upstream_tls::BackendIo as _;

/// The request as every attempt sends it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    /// The head for the backend, blank line included.
    pub(crate) head: &'a [u8],
    pub(crate) body: &'a [u8],
    /// What the client asked of the response's connection.
    pub(crate) client: ClientSide,
    pub(crate) replay: Replay,
    /// Whether a client that closes its side is taken as gone (not when it has already sent
    /// its next request: it still wants the answers).
    pub(crate) watch_client: bool,
    /// What the answer's head gets of the header rules, the request id and a sticky session.
    pub(crate) edit: http1::AnswerEdits<'a>,
}

/// How the first half of an exchange ended.
#[derive(Debug)]
pub(crate) enum Head {
    /// A final response head, rewritten for the client into the output buffer, and consumed
    /// from the connection's buffer.
    Response(FinalResponse),
    /// No usable head: what happened, and in words for the log.
    Failed(AttemptFailure, String),
    /// The client closed its connection while waiting.
    ClientGone,
}

/// Interim (1xx) responses taken before the final one at most. They do not move the
/// `read_timeout` deadline, so a flood of them is bounded in time anyway; this bounds the work
/// (a backend that streams `102 Processing` forever gets a 502 at once, not after 60 s).
const MAX_INTERIM: u32 = 100;

/// How long a backend may take over a response: `each` between two reads (`read_timeout`),
/// and all of it by `until` (the request's `response_timeout`, if any).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Patience {
    pub(crate) each: Duration,
    pub(crate) until: Option<(Instant, Duration)>,
}

impl Patience {
    /// When the next read gives up.
    pub(crate) fn next_read(&self) -> Instant {
        let each = after(self.each);
        self.until.map_or(each, |(until, _)| until.min(each))
    }

    /// Whether the whole response's time is up.
    pub(crate) fn spent(&self) -> bool {
        self.until.is_some_and(|(until, _)| Instant::now() >= until)
    }

    /// Why a read gave up, `what` not having come.
    pub(crate) fn expired(&self, what: &str) -> String {
        match self.until {
            Some((_, total)) if self.spent() => {
                format!("{what} not within response_timeout ({total:?})")
            }
            _ => format!("{what} not within read_timeout ({:?})", self.each),
        }
    }
}

/// Sends `req` on `conn` and reads the final response head, writing the client's version of it
/// into `out`. Gives up after `read_timeout` without an answer once the request went out
/// whole, or without progress while it is written, or as soon as `client` leaves.
pub(crate) async fn send_and_read_head(
    conn: &mut BackendConn,
    req: &Request<'_>,
    client: Option<&TcpStream>,
    patience: Patience,
    out: &mut Vec<u8>,
) -> Head {
    let connection = conn.connection();
    let written = AtomicUsize::new(0);
    // `None` while the request is being written.
    let mut write_result: Option<std::io::Result<()>> = None;
    let mut received = false;
    let mut interim = 0;
    // While the request is being written, the deadline moves with every write that makes
    // progress (a large upload to a slow reader is not a timeout); once it is written, the
    // backend has `read_timeout` to answer (nginx: `proxy_send_timeout` between writes, then
    // `proxy_read_timeout`).
    let mut deadline = patience.next_read();
    let mut written_by_deadline = 0;
    let failed = {
        let (mut rd, mut wr) = conn.stream.split();
        let write = write_two(&mut wr, req.head, req.body, &written);
        tokio::pin!(write);
        let gone = watch(client, req.watch_client);
        tokio::pin!(gone);
        loop {
            if !conn.buf.is_empty() {
                received = true;
                match final_head(&mut conn.buf, (req.client, req.edit), out, &mut interim) {
                    Ok(Some(mut response)) => {
                        if response.status == 101 && write_result.is_none() {
                            // A tunnel must not begin before the request has gone out whole: its
                            // bytes would be cut off by the new protocol's.
                            match written_whole(write.as_mut(), deadline, patience).await {
                                Ok(()) => write_result = Some(Ok(())),
                                Err(failed) => break failed,
                            }
                        }
                        response.backend_keep_alive &= matches!(write_result, Some(Ok(())));
                        conn.buf.consume(response.head_len);
                        return Head::Response(response);
                    }
                    Ok(None) => {}
                    Err(failed) => break failed,
                }
            }
            tokio::select! {
                biased;
                done = &mut write, if write_result.is_none() => {
                    if done.is_ok() {
                        deadline = patience.next_read();
                    }
                    // A failed write is not the end: the backend may have answered before
                    // closing, and its answer is what the client gets.
                    write_result = Some(done);
                }
                read = timeout_at(deadline, conn.buf.read_from(&mut rd)) => match read {
                    Ok(Ok(n)) if n > 0 => {}
                    Ok(Ok(_)) => break (
                        Fault::Closed,
                        "connection closed before the response head".to_owned(),
                    ),
                    Ok(Err(e)) => break (
                        Fault::Closed,
                        format!("connection failed before the response head: {e}"),
                    ),
                    Err(_) if write_result.is_none()
                        && written.load(Ordering::Relaxed) > written_by_deadline
                        && !patience.spent() =>
                    {
                        written_by_deadline = written.load(Ordering::Relaxed);
                        deadline = patience.next_read();
                    }
                    Err(_) => break (Fault::ReadTimeout, patience.expired("a response")),
                },
                () = &mut gone => return Head::ClientGone,
            }
        }
    };
    let (fault, why) = failed;
    let written = written.load(Ordering::Relaxed);
    Head::Failed(failure(req, connection, written, received, fault), why)
}

/// The final response head in what the backend has sent so far, rewritten for the client
/// into `out` (and left in `buf`), once the interim (1xx) ones before it are skipped; `None`:
/// read more. `interim` counts those skipped, against [`MAX_INTERIM`].
fn final_head(
    buf: &mut Buffer,
    (client, edit): (ClientSide, http1::AnswerEdits<'_>),
    out: &mut Vec<u8>,
    interim: &mut u32,
) -> Result<Option<FinalResponse>, (Fault, String)> {
    while !buf.is_empty() {
        match http1::parse_response(buf.filled(), client, out, edit) {
            Ok(Some(ResponseHead::Final(response))) => return Ok(Some(response)),
            Ok(Some(ResponseHead::Interim(n))) => {
                buf.consume(n);
                *interim += 1;
                if *interim > MAX_INTERIM {
                    return Err((
                        Fault::InvalidResponse,
                        format!("more than {MAX_INTERIM} interim (1xx) responses"),
                    ));
                }
            }
            Ok(None) if buf.len() >= BACKEND_BUFFER => {
                return Err((
                    Fault::InvalidResponse,
                    "response head larger than 16 KiB".to_owned(),
                ));
            }
            Ok(None) => return Ok(None),
            Err(why) => return Err((Fault::InvalidResponse, format!("invalid response: {why}"))),
        }
    }
    Ok(None)
}

/// Waits (until `deadline`) for the rest of the request to be written: what failed, if it
/// could not be.
async fn written_whole(
    write: std::pin::Pin<&mut impl std::future::Future<Output = std::io::Result<()>>>,
    deadline: Instant,
    patience: Patience,
) -> Result<(), (Fault, String)> {
    match timeout_at(deadline, write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err((
            Fault::Closed,
            format!("connection failed before the upgrade request was written: {e}"),
        )),
        Err(_) => Err((
            Fault::ReadTimeout,
            patience.expired("the upgrade request's writing"),
        )),
    }
}

/// A failed exchange as the retry policy sees it: `written` bytes of the request went out,
/// and some of the answer if `received`.
fn failure(
    req: &Request<'_>,
    connection: balance::Connection,
    written: usize,
    received: bool,
    fault: Fault,
) -> AttemptFailure {
    let total = req.head.len() + req.body.len();
    let request = match written {
        0 => RequestSent::Nothing,
        n if n < total => RequestSent::Partly,
        _ => RequestSent::Whole,
    };
    let response = if received {
        ResponseReceived::Partly
    } else {
        ResponseReceived::Nothing
    };
    AttemptFailure {
        fault,
        connection,
        request,
        response,
        replay: req.replay,
    }
}

/// Why a relay stopped.
#[derive(Debug)]
pub(crate) enum Relay {
    /// The backend's part ended before the body's end: what happened, and whether the backend
    /// is to blame (not when the request's `response_timeout` passed: a slow client's reading
    /// counts towards it too).
    Backend { why: String, blamed: bool },
    /// The client went away or stopped reading.
    Client,
}

impl Relay {
    /// How a relay that came to `relayed` ended, for [`balance::BodyEnd::outcome`]'s rule of
    /// blame.
    pub(crate) fn end(relayed: &Result<(), Relay>) -> balance::BodyEnd {
        match relayed {
            Ok(()) => balance::BodyEnd::Whole,
            Err(Relay::Backend { blamed: true, .. }) => balance::BodyEnd::BackendFailed,
            Err(Relay::Backend { blamed: false, .. }) => balance::BodyEnd::TimeUp,
            Err(Relay::Client) => balance::BodyEnd::ClientLeft,
        }
    }

    pub(crate) fn backend(why: impl Into<String>) -> Relay {
        Relay::Backend {
            why: why.into(),
            blamed: true,
        }
    }
}

/// The client side of a relay.
#[derive(Debug)]
pub(crate) struct ClientEnd<'a, S> {
    pub(crate) stream: &'a mut S,
    /// `send_timeout` between two writes, `send_min_rate` over the whole response.
    pub(crate) pace: Pace,
    /// De-chunked response data, for HTTP/1.0 clients.
    pub(crate) dechunked: &'a mut Vec<u8>,
    /// See [`Request::watch_client`].
    pub(crate) watch: bool,
    /// Bytes written to the client so far, head included.
    pub(crate) sent: u64,
}

impl<S: ClientStream> ClientEnd<'_, S> {
    pub(crate) async fn send(&mut self, a: &[u8], b: &[u8]) -> Result<(), Relay> {
        send_paced(self.stream, a, b, &mut self.pace)
            .await
            .map_err(|_| Relay::Client)?;
        self.sent += (a.len() + b.len()) as u64;
        Ok(())
    }
}

/// Sends the response head and relays the body to the client. The attempt completes as a
/// success as soon as the backend's part is over, before the last write to the client: the
/// backend is free from then on.
pub(crate) async fn relay<S: ClientStream>(
    conn: &mut BackendConn,
    response: &FinalResponse,
    head: &[u8],
    client: &mut ClientEnd<'_, S>,
    attempt: &mut Attempt,
    patience: Patience,
) -> Result<(), Relay> {
    match response.framing {
        Framing::None => {
            attempt.complete(Outcome::Success);
            client.send(head, &[]).await
        }
        Framing::Length(n) => relay_length(conn, n, head, client, attempt, patience).await,
        Framing::Chunked => {
            let dechunk = response.dechunk;
            relay_chunked(conn, dechunk, head, client, attempt, patience).await
        }
        Framing::Close => relay_close(conn, head, client, attempt, patience).await,
    }
}

/// A body of `n` bytes (`Content-Length`). The attempt completes as soon as its last byte is
/// read, before it is written to the client: the backend's part is over.
async fn relay_length<S: ClientStream>(
    conn: &mut BackendConn,
    n: u64,
    head: &[u8],
    client: &mut ClientEnd<'_, S>,
    attempt: &mut Attempt,
    patience: Patience,
) -> Result<(), Relay> {
    let first = conn.buf.len().min(usize::try_from(n).unwrap_or(usize::MAX));
    let mut remaining = n - first as u64;
    if remaining == 0 {
        attempt.complete(Outcome::Success);
    }
    client.send(head, &conn.buf.filled()[..first]).await?;
    conn.buf.consume(first);
    while remaining > 0 {
        read_backend(
            conn,
            watch(Some(client.stream.tcp()), client.watch),
            patience,
        )
        .await?;
        let k = conn
            .buf
            .len()
            .min(usize::try_from(remaining).unwrap_or(usize::MAX));
        if k as u64 == remaining {
            attempt.complete(Outcome::Success);
        }
        client.send(&conn.buf.filled()[..k], &[]).await?;
        conn.buf.consume(k);
        remaining -= k as u64;
    }
    Ok(())
}

/// A chunked body, relayed as it is or de-chunked (`dechunk`, for an HTTP/1.0 client).
async fn relay_chunked<S: ClientStream>(
    conn: &mut BackendConn,
    dechunk: bool,
    head: &[u8],
    client: &mut ClientEnd<'_, S>,
    attempt: &mut Attempt,
    patience: Patience,
) -> Result<(), Relay> {
    let mut chunked = Chunked::default();
    let mut head = Some(head);
    loop {
        let used = if dechunk {
            client.dechunked.clear();
            let dechunked = &mut *client.dechunked;
            chunked.advance(conn.buf.filled(), |d| dechunked.extend_from_slice(d))
        } else {
            chunked.advance(conn.buf.filled(), |_| {})
        }
        .map_err(|e| Relay::backend(e.to_string()))?;
        if chunked.is_done() {
            attempt.complete(Outcome::Success);
        }
        let bytes: &[u8] = if dechunk {
            client.dechunked
        } else {
            &conn.buf.filled()[..used]
        };
        let (a, b) = match head.take() {
            Some(h) => (h, bytes),
            None => (bytes, &[][..]),
        };
        // `ClientEnd::send` would borrow `dechunked` again: count what it would.
        let n = (a.len() + b.len()) as u64;
        send_paced(client.stream, a, b, &mut client.pace)
            .await
            .map_err(|_| Relay::Client)?;
        client.sent += n;
        conn.buf.consume(used);
        if chunked.is_done() {
            return Ok(());
        }
        read_backend(
            conn,
            watch(Some(client.stream.tcp()), client.watch),
            patience,
        )
        .await?;
    }
}

/// A body delimited by the end of the connection.
async fn relay_close<S: ClientStream>(
    conn: &mut BackendConn,
    head: &[u8],
    client: &mut ClientEnd<'_, S>,
    attempt: &mut Attempt,
    patience: Patience,
) -> Result<(), Relay> {
    client.send(head, conn.buf.filled()).await?;
    loop {
        conn.buf.consume(conn.buf.len());
        let gone = watch(Some(client.stream.tcp()), client.watch);
        if read_some(conn, gone, patience).await? == 0 {
            // The end of the stream is the end of this body.
            attempt.complete(Outcome::Success);
            return Ok(());
        }
        client.send(conn.buf.filled(), &[]).await?;
    }
}

/// Reads more of a response body within `patience`: the bytes read, 0 at the end of the
/// stream. `gone` resolving (the client left, or reset its HTTP/2 stream) ends the relay.
pub(crate) async fn read_some(
    conn: &mut BackendConn,
    gone: impl std::future::Future<Output = ()>,
    patience: Patience,
) -> Result<usize, Relay> {
    let read = async {
        conn.buf
            .read_from(&mut conn.stream)
            .await
            .map_err(|e| e.to_string())
    };
    within(read, gone, patience).await
}

/// Waits for `read`, one read of a response body (`Err`: what failed, the backend's doing),
/// within `patience`, unless `gone` resolves first (the client left): the one rule for how
/// long a body may pause, whatever protocol it comes in.
pub(crate) async fn within<T>(
    read: impl std::future::Future<Output = Result<T, String>>,
    gone: impl std::future::Future<Output = ()>,
    patience: Patience,
) -> Result<T, Relay> {
    let time_up = || Relay::Backend {
        why: patience.expired("the rest of the body"),
        blamed: false,
    };
    if patience.spent() {
        return Err(time_up());
    }
    tokio::select! {
        biased;
        read = timeout_at(patience.next_read(), read) => match read {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(why)) => Err(Relay::backend(why)),
            Err(_) if patience.spent() => Err(time_up()),
            Err(_) => Err(Relay::backend(patience.expired("the rest of the body"))),
        },
        () = gone => Err(Relay::Client),
    }
}

/// Reads more of a response body whose end is not reached; the end of the stream is an error
/// (the body was not complete).
pub(crate) async fn read_backend(
    conn: &mut BackendConn,
    gone: impl std::future::Future<Output = ()>,
    patience: Patience,
) -> Result<(), Relay> {
    match read_some(conn, gone, patience).await? {
        0 => Err(Relay::backend(
            "connection closed before the end of the body",
        )),
        _ => Ok(()),
    }
}
