//! HTTP/2 to clients (RFC 9113): h2c with prior knowledge on a plain listener, and any stream
//! that has already agreed on `h2` (ALPN over TLS) handed to [`serve`].
//!
//! The protocol itself (frames, HPACK, stream states, flow control, SETTINGS) is the `h2`
//! crate's, the codec under hyper: nothing of it is written here. What is ours is what a load
//! balancer does with each stream, and the limits a client is held to:
//!
//! * **Each stream is a request of its own** (`stream`): it is written as the HTTP/1.1 head
//!   the HTTP/1.1 path would have read and goes through the same [`crate::http1::parse_request`]
//!   (hop-by-hop headers gone, the forwarding headers from `trusted_proxies`, `Host`, the hash
//!   key, the header limits), gets its own pick and ticket from the upstream's algorithm, the
//!   same retry policy ([`balance::retry::decide`]) over the worker's connections to the
//!   backends (pooled HTTP/1.1, or multiplexed HTTP/2 with `backend_protocol = "h2"`;
//!   `crate::forward::attempts`, the HTTP/1.1 path's loop), and the same access log line and
//!   counts. The
//!   backend's response is streamed back as the stream's response (`relay`).
//! * **Protections** (`connection`): concurrent streams, header list size tied to
//!   `max_header_bytes`, flow-control windows, resets of streams the client opened and
//!   cancelled before their answer (CVE-2023-44487, rapid reset) counted per second, the `h2`
//!   crate's own bounds on resets and CONTINUATION frames, an idle timeout, pings, and GOAWAY
//!   on shutdown or reload with the streams in flight let finish. `docs/http2.md` lists each
//!   with its default and whose default it follows.
//! * **Detecting h2c** (`preface`): a connection whose first 24 bytes are the client preface
//!   `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n` (RFC 9113 §3.4) is HTTP/2; anything else is HTTP/1.1
//!   as before. The bytes are peeked, not read, so the HTTP/1.1 path gets them untouched.
//!   h2c by `Upgrade: h2c` from HTTP/1.1 (RFC 7540 §3.2, dropped by RFC 9113) is not offered.

mod connection;
mod linger;
mod preface;
mod relay;
mod stream;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, watch};

use crate::client::{self, WorkerListener};

pub(crate) use connection::serve;

/// HTTP/2 on a listener (`http2 = true`) and the limits its connections are held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Settings {
    /// Streams a client may have open at once on one connection (`SETTINGS_MAX_CONCURRENT_
    /// STREAMS`); more are refused with `REFUSED_STREAM` (RFC 9113 §5.1.2). nginx's
    /// `http2_max_concurrent_streams` is 128, HAProxy's `tune.h2.max-concurrent-streams` 100.
    pub max_concurrent_streams: u32,
    /// Streams a client may cancel (RST_STREAM) before their answer within one second; one
    /// more and the connection is closed with GOAWAY `ENHANCE_YOUR_CALM`. Against rapid reset
    /// (CVE-2023-44487), where every cancelled stream costs the server a request and the client
    /// nothing, and no concurrency limit holds because a reset stream no longer counts.
    pub max_resets_per_second: u32,
    /// A connection with no stream open for this long is closed with GOAWAY (nginx's
    /// `keepalive_timeout`, 75 s, which replaced `http2_idle_timeout`).
    pub idle_timeout: Duration,
}

impl Http2Settings {
    pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 128;
    pub const DEFAULT_MAX_RESETS_PER_SECOND: u32 = 100;
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(75);
}

impl Default for Http2Settings {
    fn default() -> Self {
        Http2Settings {
            max_concurrent_streams: Self::DEFAULT_MAX_CONCURRENT_STREAMS,
            max_resets_per_second: Self::DEFAULT_MAX_RESETS_PER_SECOND,
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// Serves a plain connection on a listener with `http2`: as HTTP/2 if it opens with the client
/// preface (h2c with prior knowledge), else as HTTP/1.1.
pub(crate) async fn serve_detected(
    stream: TcpStream,
    peer: SocketAddr,
    listener: Arc<WorkerListener>,
    stop: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
) {
    let wait = listener.ctx.settings.client_header_timeout;
    match preface::sniff(&stream, wait).await {
        preface::Sniffed::Http2 => serve(stream, peer, listener, stop, permit).await,
        preface::Sniffed::Http1 => client::serve(stream, peer, listener, stop, permit).await,
        preface::Sniffed::Neither => {
            tracing::debug!(%peer, "connection closed: neither an HTTP/1.1 request line nor the HTTP/2 preface");
            preface::close_gently(stream).await;
        }
        preface::Sniffed::Nothing => {}
    }
}
