//! The client connection's socket as hyper sees it, plus one fact hyper does not report:
//! whether part of a request has arrived since the last response was written.
//!
//! hyper's header timeout covers both a slow request head and an idle keep-alive connection,
//! and ends the connection without answering. A slow request deserves a 408 (HAProxy sends one
//! on `timeout http-request`); an idle connection should just be closed, because a client that
//! reuses it at that moment would read the 408 as the answer to its new request.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

#[derive(Debug)]
pub(crate) struct ClientIo {
    stream: TcpStream,
    /// Set when bytes arrive, cleared when a response is written.
    partial_request: Arc<AtomicBool>,
}

impl ClientIo {
    pub(crate) fn new(stream: TcpStream) -> (ClientIo, Arc<AtomicBool>) {
        let flag = Arc::new(AtomicBool::new(false));
        let io = ClientIo {
            stream,
            partial_request: Arc::clone(&flag),
        };
        (io, flag)
    }
}

impl AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.partial_request.store(true, Ordering::Relaxed);
        }
        poll
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.partial_request.store(false, Ordering::Relaxed);
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.partial_request.store(false, Ordering::Relaxed);
        Pin::new(&mut this.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
