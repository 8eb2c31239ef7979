//! A backend's HTTP/1.1 response body streamed into an HTTP/2 stream.
//!
//! The body is read as [`crate::exchange::relay`] reads it (`Content-Length`, chunked,
//! delimited by the close) within the same `read_timeout`/`response_timeout`, and each piece is
//! sent as DATA frames as the client's flow-control window allows: a window that does not open
//! within `send_timeout` is a client that stopped reading (nginx's `send_timeout`, as on
//! HTTP/1.1). Chunked bodies are de-chunked (HTTP/2 frames the body itself; RFC 9113 §8.2.2
//! forbids `Transfer-Encoding`), their trailers dropped. The attempt completes as a success as
//! soon as the backend's part is over, before the last frame goes out.

use std::time::Duration;

use balance::Outcome;
use bytes::Bytes;
use h2::SendStream;

use crate::connections::BackendConn;
use crate::exchange::{Patience, Relay, read_backend, read_some};
use crate::http1::{Chunked, FinalResponse, Framing};
use crate::upstream::Attempt;
use crate::upstream_h2::{Expected, H2Body};

/// The client end: the stream and what it was sent.
#[derive(Debug)]
pub(crate) struct StreamEnd<'a> {
    pub(crate) send: &'a mut SendStream<Bytes>,
    pub(crate) send_timeout: Duration,
    /// Bytes of body sent so far.
    pub(crate) sent: u64,
}

impl StreamEnd<'_> {
    /// Sends `data` as the window allows.
    async fn put(&mut self, data: &[u8]) -> Result<(), Relay> {
        if data.is_empty() {
            return Ok(());
        }
        self.put_bytes(Bytes::copy_from_slice(data)).await
    }

    /// Sends `data` as the window allows, in pieces of it (not copied).
    async fn put_bytes(&mut self, mut data: Bytes) -> Result<(), Relay> {
        self.send.reserve_capacity(data.len());
        while !data.is_empty() {
            let capacity = std::future::poll_fn(|cx| self.send.poll_capacity(cx));
            let granted = match tokio::time::timeout(self.send_timeout, capacity).await {
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
        }
        Ok(())
    }

    /// Ends the stream.
    fn finish(&mut self) -> Result<(), Relay> {
        self.send
            .send_data(Bytes::new(), true)
            .map_err(|_| Relay::Client)
    }
}

/// Relays the body of `response` from `conn` to `end`, ending the stream.
pub(crate) async fn relay(
    conn: &mut BackendConn,
    response: &FinalResponse,
    end: &mut StreamEnd<'_>,
    attempt: &mut Attempt,
    patience: Patience,
) -> Result<(), Relay> {
    match response.framing {
        // The head went out with END_STREAM.
        Framing::None => {
            attempt.complete(Outcome::Success);
            Ok(())
        }
        Framing::Length(n) => {
            let mut remaining = n;
            loop {
                let k = conn
                    .buf
                    .len()
                    .min(usize::try_from(remaining).unwrap_or(usize::MAX));
                remaining -= k as u64;
                if remaining == 0 {
                    attempt.complete(Outcome::Success);
                }
                end.put(&conn.buf.filled()[..k]).await?;
                conn.buf.consume(k);
                if remaining == 0 {
                    return end.finish();
                }
                read_backend(conn, reset(end), patience).await?;
            }
        }
        Framing::Chunked => {
            let mut chunked = Chunked::default();
            let mut data = Vec::new();
            loop {
                data.clear();
                let used = chunked
                    .advance(conn.buf.filled(), |d| data.extend_from_slice(d))
                    .map_err(|e| Relay::Backend {
                        why: e.to_string(),
                        blamed: true,
                    })?;
                conn.buf.consume(used);
                if chunked.is_done() {
                    attempt.complete(Outcome::Success);
                }
                end.put(&data).await?;
                if chunked.is_done() {
                    return end.finish();
                }
                read_backend(conn, reset(end), patience).await?;
            }
        }
        Framing::Close => loop {
            let data = conn.buf.filled();
            end.put(data).await?;
            conn.buf.consume(conn.buf.len());
            if read_some(conn, reset(end), patience).await? == 0 {
                attempt.complete(Outcome::Success);
                return end.finish();
            }
        },
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
