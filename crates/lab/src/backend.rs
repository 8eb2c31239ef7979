//! An emulated backend: a small HTTP/1.1 server on loopback that answers every request with its
//! name (in the body and the `x-backend` header). `?delay_ms=N` in the query delays the answer,
//! to emulate slow work. [`Backend::kill`] drops every connection and closes the port at once,
//! as a crashed process would.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A running emulated backend. Dropping it kills it.
#[derive(Debug)]
pub struct Backend {
    name: String,
    addr: SocketAddr,
    task: JoinHandle<()>,
}

async fn answer(name: Bytes, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let delay = req
        .uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("delay_ms="))
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(ms) = delay {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let mut response = Response::new(Full::new(name.clone()));
    response.headers_mut().insert(
        "x-backend",
        http::HeaderValue::from_maybe_shared(name).expect("backend names are valid header values"),
    );
    Ok(response)
}

impl Backend {
    /// Starts a backend called `name` on `addr` (port 0 picks a free port).
    pub async fn start(name: &str, addr: SocketAddr) -> std::io::Result<Backend> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let body = Bytes::from(name.to_owned());
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let body = body.clone();
                while connections.try_join_next().is_some() {}
                connections.spawn(async move {
                    let service = service_fn(move |req| answer(body.clone(), req));
                    // Room for a proxy's own headers on top of a client at the proxy's limit.
                    let _ = http1::Builder::new()
                        .max_headers(200)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            // Dropping the task drops the JoinSet, which aborts every connection.
        });
        Ok(Backend {
            name: name.to_owned(),
            addr,
            task,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Drops every connection and closes the listening socket, and waits until both are gone.
    pub async fn kill(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}
