//! Telling h2c with prior knowledge from HTTP/1.1 on the first bytes of a connection.
//!
//! An HTTP/2 client that knows the server speaks it starts with the 24-byte preface
//! `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n` (RFC 9113 §3.4); no HTTP/1.1 request starts that way (the
//! `PRI` method was reserved for it, RFC 9113 §11.1). The bytes are peeked (`MSG_PEEK`), so
//! whichever path serves the connection reads them as if nothing had looked.
//!
//! Once the bytes differ from the preface, the connection is HTTP/1.1 when its first line is
//! complete and ends like a request line (`... HTTP/d.d`, RFC 9112 §3), or is too long to be
//! looked at here (the HTTP/1.1 path answers it, 414 or 431). A first line that is neither
//! (`INVALID CONNECTION PREFACE`, which h2spec sends) is closed unanswered: on a listener that
//! speaks both protocols, an HTTP/1.1 400 would be noise to an HTTP/2 client, which RFC 9113
//! §3.4 requires to see the connection end.
//!
//! While the bytes do not decide yet, the socket's readiness is cleared under tokio's tick
//! (the peek runs inside `try_io`) so the next wait ends with the next bytes, not at once: no
//! busy loop on a client that sends its first bytes one at a time.

use std::io;
use std::time::Duration;

use rustix::net::RecvFlags;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The client connection preface (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What a connection opened with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sniffed {
    Http2,
    Http1,
    /// Neither protocol: close it, reading what it sent first (so that the close is a FIN,
    /// not the reset that unread input causes).
    Neither,
    /// It closed, failed, or sent nothing within the wait: close it.
    Nothing,
}

/// Bytes peeked at most: a first line longer than this goes to the HTTP/1.1 path as it is.
const LOOK: usize = 2048;

/// What the first `seen` bytes say; `None`: not yet (a proper prefix of the preface, or a first
/// line not yet complete). `full`: no more bytes can be looked at.
fn decide(seen: &[u8], full: bool) -> Option<Sniffed> {
    let n = seen.len().min(PREFACE.len());
    if seen[..n] == PREFACE[..n] {
        return (n == PREFACE.len()).then_some(Sniffed::Http2);
    }
    // Empty lines before a request line are allowed (RFC 9112 §2.2).
    let start = seen
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(seen.len());
    let Some(end) = seen[start..].iter().position(|&b| b == b'\n') else {
        return full.then_some(Sniffed::Http1);
    };
    let line = seen[start..start + end]
        .strip_suffix(b"\r")
        .unwrap_or(&seen[start..start + end]);
    let request_line = matches!(
        line,
        [.., b' ', b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit()
    );
    Some(if request_line {
        Sniffed::Http1
    } else {
        Sniffed::Neither
    })
}

/// Peeks at the start of `stream` until it says which protocol it speaks, until `deadline`
/// (what is left of the listener's `client_header_timeout`, counted from the accept: the
/// first request head gets only what the sniff leaves of it). At the deadline, a first line
/// begun and not finished that cannot be the preface is HTTP/1.1's to answer (408, as on a
/// listener without `http2`); nothing, or a part of the preface, is closed.
pub(crate) async fn sniff(stream: &TcpStream, deadline: Instant) -> Sniffed {
    let mut buf = vec![0u8; LOOK];
    // Bytes have come that are no part of the preface.
    let mut http1_begun = false;
    loop {
        if tokio::time::timeout_at(deadline, stream.readable())
            .await
            .is_err()
        {
            return if http1_begun {
                Sniffed::Http1
            } else {
                Sniffed::Nothing
            };
        }
        let peeked = stream.try_io(Interest::READABLE, || {
            let (n, _) = rustix::net::recv(stream, &mut buf[..], RecvFlags::PEEK)
                .map_err(io::Error::from)?;
            if n == 0 {
                return Ok(Sniffed::Nothing);
            }
            let seen = &buf[..n];
            http1_begun = !PREFACE.starts_with(&seen[..n.min(PREFACE.len())]);
            decide(seen, n == LOOK).ok_or_else(|| io::ErrorKind::WouldBlock.into())
        });
        match peeked {
            Ok(sniffed) => return sniffed,
            // Spurious readiness, or a prefix of the preface: wait for more.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return Sniffed::Nothing,
        }
    }
}

/// Closes our side of a connection that spoke neither protocol, then reads and discards what
/// it still sends, for a second at most.
pub(crate) async fn close_gently(mut stream: TcpStream) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    if stream.shutdown().await.is_err() {
        return;
    }
    let deadline = crate::io::after(Duration::from_secs(1));
    let mut sink = [0u8; 4096];
    while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, stream.read(&mut sink)).await {
        if n == 0 {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt as _;

    #[test]
    fn the_preface_decides_at_the_first_difference() {
        assert_eq!(decide(b"G", false), None);
        assert_eq!(
            decide(b"G", true),
            Some(Sniffed::Http1),
            "too long to look at"
        );
        assert_eq!(decide(b"GET / HTTP/1.1\r\n", false), Some(Sniffed::Http1));
        assert_eq!(decide(b"\r\nGET / HTTP/1.0\n", false), Some(Sniffed::Http1));
        assert_eq!(decide(b"PRI * HTTP/1.1\r\n", false), Some(Sniffed::Http1));
        assert_eq!(decide(b"PRI * HTTP/2.0\r\n", false), None);
        assert_eq!(decide(b"P", false), None);
        assert_eq!(decide(PREFACE, false), Some(Sniffed::Http2));
        assert_eq!(
            decide(b"INVALID CONNECTION PREFACE\r\n\r\n", false),
            Some(Sniffed::Neither)
        );
    }

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    #[tokio::test]
    async fn a_preface_sent_in_pieces_is_found_and_left_unread() {
        let (mut client, server) = pair().await;
        let sniffing = tokio::spawn(async move {
            let s = sniff(&server, in_secs(5)).await;
            (s, server)
        });
        for piece in [&PREFACE[..3], &PREFACE[3..10], &PREFACE[10..]] {
            client.write_all(piece).await.unwrap();
            tokio::task::yield_now().await;
        }
        let (sniffed, server) = sniffing.await.unwrap();
        assert_eq!(sniffed, Sniffed::Http2);
        let mut all = [0u8; 24];
        let n = server.peek(&mut all).await.unwrap();
        assert_eq!(
            &all[..n],
            &PREFACE[..n],
            "still there for the HTTP/2 server"
        );
    }

    #[tokio::test]
    async fn http1_and_silence() {
        let (mut client, server) = pair().await;
        client.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
        assert_eq!(sniff(&server, in_secs(5)).await, Sniffed::Http1);
        let (_client, server) = pair().await;
        let soon = Instant::now() + Duration::from_millis(50);
        assert_eq!(sniff(&server, soon).await, Sniffed::Nothing);
        let (client, server) = pair().await;
        drop(client);
        assert_eq!(sniff(&server, in_secs(5)).await, Sniffed::Nothing);
    }

    fn in_secs(n: u64) -> Instant {
        Instant::now() + Duration::from_secs(n)
    }

    /// Issue 26: a first line unfinished at the deadline is HTTP/1.1's (which answers 408);
    /// a part of the preface is closed.
    #[tokio::test]
    async fn an_unfinished_first_line_at_the_deadline() {
        let soon = || Instant::now() + Duration::from_millis(50);
        let (mut client, server) = pair().await;
        client.write_all(b"GET / HT").await.unwrap();
        assert_eq!(sniff(&server, soon()).await, Sniffed::Http1);
        let (mut client, server) = pair().await;
        client.write_all(&PREFACE[..20]).await.unwrap();
        assert_eq!(sniff(&server, soon()).await, Sniffed::Nothing);
    }
}
