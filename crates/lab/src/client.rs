//! A minimal HTTP/1.1 client for the lab, the demo and tests: one keep-alive connection,
//! reopened when it closes, optionally bound to a chosen local address.

use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpSocket;

/// A response, read in full.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Reply {
    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

#[derive(Debug)]
pub struct Client {
    server: SocketAddr,
    local: Option<IpAddr>,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Client {
    pub fn new(server: SocketAddr) -> Client {
        Client {
            server,
            local: None,
            sender: None,
        }
    }

    /// A client whose connections come from `local` (any address in 127.0.0.0/8 works on
    /// loopback).
    pub fn bound(server: SocketAddr, local: IpAddr) -> Client {
        Client {
            local: Some(local),
            ..Client::new(server)
        }
    }

    async fn connect(&self) -> std::io::Result<SendRequest<Full<Bytes>>> {
        let socket = if self.server.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if let Some(local) = self.local {
            socket.bind(SocketAddr::new(local, 0))?;
        }
        let stream = socket.connect(self.server).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// Sends `GET path` and reads the whole response.
    pub async fn get(&mut self, path: &str) -> std::io::Result<Reply> {
        let req = Request::get(path)
            .header(http::header::HOST, "fulcrum.test")
            .body(Full::new(Bytes::new()))
            .map_err(std::io::Error::other)?;
        self.send(req).await
    }

    /// Sends a request and reads the whole response. The connection is kept for the next
    /// request unless the server closed it.
    pub async fn send(&mut self, req: Request<Full<Bytes>>) -> std::io::Result<Reply> {
        let mut sender = match self.sender.take() {
            Some(mut s) => match s.ready().await {
                Ok(()) => s,
                Err(_) => self.connect().await?,
            },
            None => self.connect().await?,
        };
        let response = sender
            .send_request(req)
            .await
            .map_err(std::io::Error::other)?;
        let (head, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map_err(std::io::Error::other)?
            .to_bytes();
        if !sender.is_closed() {
            self.sender = Some(sender);
        }
        Ok(Reply {
            status: head.status,
            headers: head.headers,
            body,
        })
    }
}
