//! A lingering close for HTTP/2 connections.
//!
//! When the server ends a connection (GOAWAY, then close), the client may still be sending: a
//! flood does not stop for a GOAWAY. Closing a socket with unread input makes the kernel answer
//! with a reset, and a reset can destroy the GOAWAY before the client reads it, so the client
//! sees "connection reset" instead of why. As nginx's `lingering_close` and the HTTP/1.1 path's
//! `linger` do, the shutdown sends our FIN and then reads and discards the client's input for a
//! while ([`LINGER`]), so the close that follows finds nothing unread.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How long input is drained after our FIN.
pub(crate) const LINGER: Duration = Duration::from_secs(1);

/// A stream whose shutdown lingers.
#[derive(Debug)]
pub(crate) struct Linger<S> {
    io: S,
    /// Set once our FIN went out: until when input is drained.
    draining: Option<Pin<Box<Sleep>>>,
}

impl<S> Linger<S> {
    pub(crate) fn new(io: S) -> Linger<S> {
        Linger { io, draining: None }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Linger<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Linger<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.draining.is_none() {
            ready!(Pin::new(&mut this.io).poll_shutdown(cx))?;
            this.draining = Some(Box::pin(tokio::time::sleep(LINGER)));
        }
        let mut sink = [0u8; 4096];
        loop {
            if let Some(deadline) = this.draining.as_mut()
                && deadline.as_mut().poll(cx).is_ready()
            {
                return Poll::Ready(Ok(()));
            }
            let mut buf = ReadBuf::new(&mut sink);
            match ready!(Pin::new(&mut this.io).poll_read(cx, &mut buf)) {
                Ok(()) if buf.filled().is_empty() => return Poll::Ready(Ok(())),
                Ok(()) => {}
                // The client reset first: nothing left to protect.
                Err(_) => return Poll::Ready(Ok(())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[tokio::test]
    async fn shutdown_drains_what_the_peer_still_sends() {
        let (client, server) = tokio::io::duplex(64);
        let (mut client_rd, mut client_wr) = tokio::io::split(client);
        let mut server = Linger::new(server);
        client_wr.write_all(b"unread input").await.unwrap();
        server.write_all(b"GOAWAY").await.unwrap();
        let closing = tokio::spawn(async move {
            server.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        client_rd.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"GOAWAY", "our data, then our FIN");
        drop(client_wr);
        closing.await.unwrap();
    }
}
