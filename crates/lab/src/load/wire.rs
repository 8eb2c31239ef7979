//! The generator's own HTTP/1.1 connection: it writes a `GET` and reads the answer in the task
//! that sends, and keeps only what an [`Outcome`](super::Outcome) needs (the status and
//! `X-Backend`).
//!
//! Why not the lab's [`Client`](crate::Client) (hyper): profiled at 3000 requests per second in
//! a debug build (`perf record` on `fulcrum lab load` against a lab backend in another
//! process), the generator spent about 190 µs of CPU per request, twice what the backend
//! spent, most of it in hyper's client machinery: a connection task per connection, a channel
//! and two task wake-ups per request, and a full header map per answer. This connection has
//! none of those. The framing it reads is the whole of RFC 9112 §6.3 that a GET meets:
//! no body for 1xx/204/304, `Transfer-Encoding: chunked`, `Content-Length`, else the body runs
//! to the close; the connection is kept unless the answer or HTTP/1.0 says otherwise.

use std::net::{IpAddr, SocketAddr};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The longest answer head read (status line and headers), as hyper's default.
const MAX_HEAD: usize = 64 * 1024;
/// The most answer headers read.
const MAX_HEADERS: usize = 64;

/// What the generator keeps of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Answer {
    pub status: u16,
    pub backend: Option<String>,
}

/// Why an exchange failed (the error is logged at debug level).
#[derive(Debug)]
#[allow(dead_code)] // The error is read through Debug only.
pub(super) enum Failure {
    /// A kept connection was found closed before it answered: send again on a new one.
    Stale,
    Io(std::io::Error),
}

/// One kept-alive connection.
#[derive(Debug)]
pub(super) struct Connection {
    stream: TcpStream,
    /// Bytes read and not yet consumed.
    buf: BytesMut,
    /// Whether a request has been answered on it (so that it may have gone stale).
    used: bool,
}

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned())
}

impl Connection {
    /// Opens a connection to `server` from `local` (any port).
    pub(super) async fn open(server: SocketAddr, local: Option<IpAddr>) -> std::io::Result<Self> {
        let socket = if server.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if let Some(local) = local {
            socket.bind(SocketAddr::new(local, 0))?;
        }
        let stream = socket.connect(server).await?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            buf: BytesMut::with_capacity(4096),
            used: false,
        })
    }

    /// Sends `request` (a whole request head, without a body) and reads the answer. Returns
    /// the answer and whether the connection may carry another request.
    pub(super) async fn exchange(&mut self, request: &[u8]) -> Result<(Answer, bool), Failure> {
        let reused = self.used;
        // A kept connection the server has closed meanwhile (an idle timeout) fails here, or
        // at the first read, before any byte of an answer: the server never saw the request.
        let stale = |c: &Connection, e: std::io::Error| {
            if reused && c.buf.is_empty() {
                Failure::Stale
            } else {
                Failure::Io(e)
            }
        };
        if let Err(e) = self.stream.write_all(request).await {
            return Err(stale(self, e));
        }
        let (answer, framing, keep) = match self.read_head().await {
            Ok(head) => head,
            Err(e) => return Err(stale(self, e)),
        };
        self.used = true;
        let keep = keep && self.skip_body(framing).await.map_err(Failure::Io)?;
        Ok((answer, keep && self.buf.is_empty()))
    }

    /// Reads more into the buffer; an error at the end of the stream.
    async fn fill(&mut self) -> std::io::Result<()> {
        if self.buf.capacity() - self.buf.len() < 1024 {
            self.buf.reserve(4096);
        }
        match self.stream.read_buf(&mut self.buf).await? {
            0 => Err(std::io::ErrorKind::UnexpectedEof.into()),
            _ => Ok(()),
        }
    }

    async fn read_head(&mut self) -> std::io::Result<(Answer, Framing, bool)> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut response = httparse::Response::new(&mut headers);
            match response.parse(&self.buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let head = Head::of(&response)?;
                    self.buf.advance(len);
                    return Ok(head);
                }
                Ok(httparse::Status::Partial) if self.buf.len() < MAX_HEAD => {}
                Ok(httparse::Status::Partial) => return Err(invalid("answer head too long")),
                Err(e) => return Err(invalid(&format!("malformed answer: {e}"))),
            }
            self.fill().await?;
        }
    }

    /// Reads past the body; whether the connection is still usable after it.
    async fn skip_body(&mut self, framing: Framing) -> std::io::Result<bool> {
        match framing {
            Framing::None => Ok(true),
            Framing::Length(mut left) => loop {
                let n = left.min(self.buf.len() as u64);
                self.buf.advance(n as usize);
                left -= n;
                if left == 0 {
                    return Ok(true);
                }
                self.fill().await?;
            },
            Framing::Chunked => {
                loop {
                    let size = loop {
                        match httparse::parse_chunk_size(&self.buf) {
                            Ok(httparse::Status::Complete((len, size))) => {
                                self.buf.advance(len);
                                break size;
                            }
                            Ok(httparse::Status::Partial) if self.buf.len() < MAX_HEAD => {
                                self.fill().await?
                            }
                            _ => return Err(invalid("malformed chunk size")),
                        }
                    };
                    if size == 0 {
                        break;
                    }
                    // The chunk and its CRLF.
                    let mut left = size.saturating_add(2);
                    loop {
                        let n = left.min(self.buf.len() as u64);
                        self.buf.advance(n as usize);
                        left -= n;
                        if left == 0 {
                            break;
                        }
                        self.fill().await?;
                    }
                }
                // Trailers, up to the empty line.
                loop {
                    if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                        self.buf.advance(end + 2);
                        if end == 0 {
                            return Ok(true);
                        }
                    } else if self.buf.len() < MAX_HEAD {
                        self.fill().await?;
                    } else {
                        return Err(invalid("trailers too long"));
                    }
                }
            }
            Framing::UntilClose => loop {
                self.buf.clear();
                match self.fill().await {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                        return Ok(false);
                    }
                    Err(e) => return Err(e),
                }
            },
        }
    }
}

/// How the body of an answer ends (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// What the generator reads from an answer head.
struct Head;

impl Head {
    fn of(response: &httparse::Response<'_, '_>) -> std::io::Result<(Answer, Framing, bool)> {
        let status = response.code.ok_or_else(|| invalid("no status"))?;
        let mut backend = None;
        let mut length = None;
        let mut chunked = false;
        let mut encoded = false;
        let mut keep = response.version == Some(1);
        for h in response.headers.iter() {
            let name = h.name;
            if name.eq_ignore_ascii_case("x-backend") {
                backend = std::str::from_utf8(h.value).ok().map(str::to_owned);
            } else if name.eq_ignore_ascii_case("content-length") {
                let n = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .ok_or_else(|| invalid("bad Content-Length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(invalid("two different Content-Lengths"));
                }
                length = Some(n);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                // Chunked must come last (RFC 9112 §6.1); anything else runs to the close.
                let last = h.value.rsplit(|&b| b == b',').next().unwrap_or_default();
                encoded = true;
                chunked = last.trim_ascii().eq_ignore_ascii_case(b"chunked");
            } else if name.eq_ignore_ascii_case("connection") {
                for token in h.value.split(|&b| b == b',') {
                    let token = token.trim_ascii();
                    if token.eq_ignore_ascii_case(b"close") {
                        keep = false;
                    } else if token.eq_ignore_ascii_case(b"keep-alive")
                        && response.version == Some(0)
                    {
                        keep = true;
                    }
                }
            }
        }
        let framing = if (100..200).contains(&status) || status == 204 || status == 304 {
            Framing::None
        } else if chunked {
            Framing::Chunked
        } else if let Some(n) = length.filter(|_| !encoded) {
            Framing::Length(n)
        } else {
            keep = false;
            Framing::UntilClose
        };
        Ok((Answer { status, backend }, framing, keep))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    const GET: &[u8] = b"GET / HTTP/1.1\r\nhost: lab\r\n\r\n";

    /// A server that reads one request head per answer in `answers` and writes the answer (in
    /// two pieces, to exercise partial reads), then closes the connection.
    async fn server(answers: Vec<&'static [u8]>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            for answer in answers {
                let mut seen = Vec::new();
                while !seen.ends_with(b"\r\n\r\n") {
                    let mut byte = [0u8; 1];
                    if stream.read_exact(&mut byte).await.is_err() {
                        return;
                    }
                    seen.push(byte[0]);
                }
                let (a, b) = answer.split_at(answer.len() / 2);
                stream.write_all(a).await.unwrap();
                stream.flush().await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                stream.write_all(b).await.unwrap();
            }
        });
        addr
    }

    fn ok(backend: &str) -> Answer {
        Answer {
            status: 200,
            backend: Some(backend.into()),
        }
    }

    #[tokio::test]
    async fn chunked_and_sized_answers_keep_the_connection() {
        let addr = server(vec![
            b"HTTP/1.1 200 OK\r\nX-Backend: a\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nT: 1\r\n\r\n",
            b"HTTP/1.1 503 Busy\r\nx-backend: b\r\ncontent-length: 4\r\n\r\nbusy",
            b"HTTP/1.1 204 No Content\r\nx-backend: c\r\n\r\n",
        ])
        .await;
        let mut c = Connection::open(addr, None).await.unwrap();
        assert_eq!(c.exchange(GET).await.unwrap(), (ok("a"), true));
        let busy = Answer {
            status: 503,
            backend: Some("b".into()),
        };
        assert_eq!(c.exchange(GET).await.unwrap(), (busy, true));
        let none = Answer {
            status: 204,
            backend: Some("c".into()),
        };
        assert_eq!(c.exchange(GET).await.unwrap(), (none, true));
        // The server has closed it: the next request finds it stale, before any answer.
        assert!(matches!(c.exchange(GET).await, Err(Failure::Stale)));
    }

    #[tokio::test]
    async fn close_and_unsized_answers_end_the_connection() {
        let addr = server(vec![
            b"HTTP/1.1 200 OK\r\nx-backend: a\r\nConnection: keep-alive, close\r\ncontent-length: 2\r\n\r\nok",
        ])
        .await;
        let mut c = Connection::open(addr, None).await.unwrap();
        assert_eq!(c.exchange(GET).await.unwrap(), (ok("a"), false));
        let addr = server(vec![b"HTTP/1.1 200 OK\r\nx-backend: a\r\n\r\nto the end"]).await;
        let mut c = Connection::open(addr, None).await.unwrap();
        assert_eq!(c.exchange(GET).await.unwrap(), (ok("a"), false));
        let addr = server(vec![
            b"HTTP/1.0 200 OK\r\nx-backend: a\r\ncontent-length: 0\r\n\r\n",
        ])
        .await;
        let mut c = Connection::open(addr, None).await.unwrap();
        assert_eq!(c.exchange(GET).await.unwrap(), (ok("a"), false));
    }

    #[tokio::test]
    async fn a_malformed_or_cut_answer_fails_and_is_not_stale() {
        for answer in [
            &b"HTTP/1.1 2OO OK\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        ] {
            let addr = server(vec![answer]).await;
            let mut c = Connection::open(addr, None).await.unwrap();
            let result = c.exchange(GET).await;
            assert!(
                matches!(result, Err(Failure::Io(_))),
                "{answer:?}: {result:?}"
            );
        }
    }
}
