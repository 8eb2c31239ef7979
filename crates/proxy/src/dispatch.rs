//! Which HTTP a client connection speaks, decided in one place, and the connection handed to
//! the path that serves it: [`http2::serve`] or [`client::serve`] (HTTP/1.1). It never comes
//! back.
//!
//! * **Over TLS** (a listener with `[[listener.tls]]`) the handshake comes first, within
//!   `client_header_timeout`, and the client's choice by ALPN decides: `h2` is HTTP/2 (offered
//!   only on a listener with `http2`), anything else HTTP/1.1. No sniffing there: the first
//!   bytes were a ClientHello.
//! * **In the clear**, on a listener with `http2`, the first bytes decide (peeked, so the
//!   chosen path reads them untouched, [`preface::sniff`]): the client preface of RFC 9113
//!   §3.4 is HTTP/2 with prior knowledge (h2c), a request line HTTP/1.1, and anything else is
//!   closed unanswered. h2c by `Upgrade: h2c` (RFC 7540 §3.2, dropped by RFC 9113) is not
//!   offered.
//! * Otherwise the connection is HTTP/1.1, with nothing looked at first.
//!
//! All of it runs on one clock, `client_header_timeout` from the accept (`head_by`, which the
//! PROXY protocol header, if any, has already spent from): the TLS handshake, the sniff, then
//! the first request head on HTTP/1.1 or the preface and the first stream's head on HTTP/2
//! each get what is left, so no step starts the timeout again. nginx does the same: its
//! `client_header_timeout` timer is set at the accept and only re-armed when it is not
//! running, so the TLS handshake and the first request head share it.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::time::Instant;

use crate::client;
use crate::http2::{self, preface};
use crate::listener::WorkerListener;
use crate::tls::HandshakeFailure;

/// Serves one connection of an HTTP listener until it closes, the proxy stops, or an error
/// ends it, in the protocol it turns out to speak. `head_by`: when its first request's head
/// must be whole (`client_header_timeout` from the accept).
pub(crate) async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    listener: Arc<WorkerListener>,
    stop: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
    head_by: Instant,
) {
    if listener.ctx.tls.is_some() {
        // Boxed: a task is as large as the largest future it may run, and a TLS session's
        // state (rustls's buffers and secrets) would otherwise make every plain connection's
        // task that large (measured: 8.6 KB of RSS per idle plain client instead of under
        // 6 KB).
        return Box::pin(serve_tls(stream, peer, listener, stop, permit, head_by)).await;
    }
    if listener.ctx.settings.http2.is_some() {
        // On the heap too: the HTTP/2 server's state would otherwise make every connection's
        // task larger, HTTP/1.1-only listeners' included (an idle connection's cost is its
        // task).
        return Box::pin(serve_sniffed(stream, peer, listener, stop, permit, head_by)).await;
    }
    client::serve(stream, peer, listener, stop, permit, head_by).await;
}

/// The TLS handshake, then HTTP/2 if the client chose it by ALPN, else HTTP/1.1 over it.
async fn serve_tls(
    stream: TcpStream,
    peer: SocketAddr,
    listener: Arc<WorkerListener>,
    mut stop: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
    head_by: Instant,
) {
    let Some(tls) = &listener.ctx.tls else {
        return;
    };
    let timeout = head_by.saturating_duration_since(Instant::now());
    match tls.handshake(stream, peer, timeout, &mut stop).await {
        Ok(stream) if stream.get_ref().1.alpn_protocol() == Some(crate::tls::H2) => {
            http2::serve(stream, peer, listener, stop, permit, head_by).await;
        }
        Ok(stream) => client::serve(stream, peer, listener, stop, permit, head_by).await,
        Err(HandshakeFailure::Stopping) => {}
        Err(_) => listener.stats.tls_handshake_failed(),
    }
}

/// A plain connection on a listener with `http2`: HTTP/2 if it opens with the client preface
/// (h2c with prior knowledge), HTTP/1.1 if with a request line.
async fn serve_sniffed(
    stream: TcpStream,
    peer: SocketAddr,
    listener: Arc<WorkerListener>,
    stop: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
    head_by: Instant,
) {
    match preface::sniff(&stream, head_by).await {
        preface::Sniffed::Http2 => {
            http2::serve(stream, peer, listener, stop, permit, head_by).await;
        }
        // A first line still unfinished at `head_by` comes here too: the HTTP/1.1 path reads
        // it, finds the time gone, and answers 408 as it would on a listener without `http2`.
        preface::Sniffed::Http1 => {
            client::serve(stream, peer, listener, stop, permit, head_by).await;
        }
        preface::Sniffed::Neither => {
            tracing::debug!(%peer, "connection closed: neither an HTTP/1.1 request line nor the HTTP/2 preface");
            preface::close_gently(stream).await;
        }
        preface::Sniffed::Nothing => {}
    }
}
