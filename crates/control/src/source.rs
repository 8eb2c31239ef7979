//! Reading a backend's load source: `GET /load` on its `fulcrum agent` (DESIGN §2), the JSON
//! `{"cpu":0.42,"mem":0.63,"disk":0.10,"net":0.05,"container_mem":0.50,"ts_ms":...}`.
//!
//! A source is untrusted input: the body is read up to [`MAX_BODY`] bytes and parsed by the
//! agent protocol's own reader ([`agent::protocol::parse_load`]): every field must be a
//! finite number (NaN, infinities and strings are refused), and values outside [0, 1] are
//! clamped, so no report can carry a model outside its range.

use std::net::SocketAddr;
use std::time::Duration;

use balance::weights::LoadReport;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The largest `/load` body read; a report is under 200 bytes.
pub const MAX_BODY: usize = 16 * 1024;

/// Why a poll gave no report, in words for the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PollError(pub String);

impl From<agent::protocol::ParseError> for PollError {
    fn from(e: agent::protocol::ParseError) -> PollError {
        PollError(e.to_string())
    }
}

/// Parses an agent's `/load` body into a checked report.
pub fn parse_load(body: &[u8]) -> Result<LoadReport, PollError> {
    Ok(agent::protocol::parse_load(body)?)
}

/// Polls a `fulcrum agent` once, within `timeout`.
pub async fn poll_agent(addr: SocketAddr, timeout: Duration) -> Result<LoadReport, PollError> {
    match tokio::time::timeout(timeout, get_load(addr)).await {
        Ok(result) => result,
        Err(_) => Err(PollError(format!(
            "no answer within poll_timeout ({timeout:?})"
        ))),
    }
}

async fn get_load(addr: SocketAddr) -> Result<LoadReport, PollError> {
    let (status, body) = get(addr, "/load", MAX_BODY).await?;
    if !status.is_success() {
        return Err(PollError(format!("GET /load answered {status}")));
    }
    parse_load(&body)
}

/// `GET path` on `addr`, one request on its own connection: the status and the first
/// `max_body` bytes of the body at most (0: the body is not read).
pub async fn get(
    addr: SocketAddr,
    path: &str,
    max_body: usize,
) -> Result<(http::StatusCode, Bytes), PollError> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| PollError(format!("cannot connect: {e}")))?;
    get_on(stream, &addr.to_string(), path, max_body).await
}

/// As [`get`], on a connection already open (a TLS one, for a health check of an upstream
/// with `tls = true`); `host` is the `Host` header.
pub async fn get_on<T>(
    stream: T,
    host: &str,
    path: &str,
    max_body: usize,
) -> Result<(http::StatusCode, Bytes), PollError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let fail = |what: &str, e: &dyn std::fmt::Display| PollError(format!("{what}: {e}"));
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| fail("HTTP handshake failed", &e))?;
    // The connection is driven by a task of its own; it ends when the peer closes it or when
    // `sender` is dropped at the end of this request.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = http::Request::get(path)
        .header(http::header::HOST, host)
        .header(http::header::USER_AGENT, "fulcrum")
        .body(Empty::<Bytes>::new())
        .map_err(|e| fail("cannot build the request", &e))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| fail("request failed", &e))?;
    let status = response.status();
    if max_body == 0 {
        return Ok((status, Bytes::new()));
    }
    let body = Limited::new(response.into_body(), max_body)
        .collect()
        .await
        .map_err(|e| fail("cannot read the body", &*e))?
        .to_bytes();
    Ok((status, body))
}
