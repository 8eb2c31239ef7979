//! Listeners and client connections.
//!
//! [`Proxy::bind`] binds every listener first, so an address in use is a start-up error naming
//! the address, not a surprise later. [`Proxy::run`] accepts connections until the shutdown
//! future resolves, then stops accepting, lets every connection finish the request it is on
//! (idle keep-alive connections are closed at once), and waits up to `shutdown_timeout` for
//! them.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{Semaphore, watch};

use crate::client_io::ClientIo;
use crate::handler::{self, ListenerContext};
use crate::settings::ProxySettings;
use crate::upstream::Upstream;

/// A proxy that cannot start, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "cannot listen on {addr}: {source}{hint}",
        hint = if source.kind() == std::io::ErrorKind::AddrInUse {
            " (another process is using this address: stop it or choose another `listen`)"
        } else { "" }
    )]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("listener {listen} names upstream \"{upstream}\", which is not defined")]
    UnknownUpstream {
        listen: SocketAddr,
        upstream: String,
    },
}

/// Backlog of pending connections per listener (nginx uses 511 on Linux).
const LISTEN_BACKLOG: u32 = 511;

/// A bound, not yet running, proxy.
#[derive(Debug)]
pub struct Proxy {
    listeners: Vec<(TcpListener, Arc<ListenerContext>)>,
    upstreams: Vec<Arc<Upstream>>,
    shutdown_timeout: Duration,
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

impl Proxy {
    /// Builds the upstreams and binds every listener.
    pub async fn bind(settings: ProxySettings) -> Result<Proxy, StartError> {
        let upstreams: HashMap<String, Arc<Upstream>> = settings
            .upstreams
            .iter()
            .map(|u| (u.name.clone(), Arc::new(Upstream::new(u.clone()))))
            .collect();
        let mut listeners = Vec::new();
        for l in settings.listeners {
            let upstream =
                upstreams
                    .get(&l.upstream)
                    .cloned()
                    .ok_or_else(|| StartError::UnknownUpstream {
                        listen: l.listen,
                        upstream: l.upstream.clone(),
                    })?;
            let listener = bind(l.listen).map_err(|source| StartError::Bind {
                addr: l.listen,
                source,
            })?;
            let ctx = ListenerContext {
                settings: l,
                upstream,
                access_log: settings.access_log,
            };
            listeners.push((listener, Arc::new(ctx)));
        }
        let mut upstreams: Vec<_> = upstreams.into_values().collect();
        upstreams.sort_by(|a, b| a.name().cmp(b.name()));
        Ok(Proxy {
            listeners,
            upstreams,
            shutdown_timeout: settings.shutdown_timeout,
        })
    }

    /// The bound addresses, in configuration order (useful with port 0).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .map(|(l, _)| l.local_addr().expect("a bound listener has an address"))
            .collect()
    }

    /// The upstreams, by name.
    pub fn upstreams(&self) -> &[Arc<Upstream>] {
        &self.upstreams
    }

    /// Serves until `shutdown` resolves, then shuts down gracefully.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        for (listener, ctx) in self.listeners {
            // Logged here, in configuration order, before any accept loop runs.
            if let Ok(addr) = listener.local_addr() {
                tracing::info!(listen = %addr, upstream = %ctx.upstream.name(), "listening");
            }
            let stop = stop_rx.clone();
            let grace = self.shutdown_timeout;
            tasks.push(tokio::spawn(accept_loop(listener, ctx, stop, grace)));
        }
        shutdown.await;
        tracing::info!("shutting down: no new connections; finishing requests in flight");
        let _ = stop_tx.send(true);
        for task in tasks {
            let _ = task.await;
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    ctx: Arc<ListenerContext>,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
) {
    let limit = Arc::new(Semaphore::new(ctx.settings.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(ctx.settings.client_header_timeout)
        .max_headers(ctx.settings.max_headers)
        .max_header_size(ctx.settings.max_header_bytes);
    let mut connections = tokio::task::JoinSet::new();
    let addr = listener
        .local_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.to_string());
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&limit).acquire_owned() => permit.expect("the semaphore is never closed"),
            _ = stop.changed() => break,
        };
        let (stream, client) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors or similar: back off briefly instead of spinning.
                    tracing::error!(listen = %addr, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        // A second handle on the socket, to answer 408 after hyper gives up on a slow head.
        let answer_timeout = socket2::SockRef::from(&stream).try_clone().ok();
        let ctx = Arc::clone(&ctx);
        let service = service_fn(move |req| handler::handle(req, Arc::clone(&ctx), client));
        let (io, partial_request) = ClientIo::new(stream);
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(io), service));
        while connections.try_join_next().is_some() {}
        connections.spawn(async move {
            if let Err(e) = conn.await {
                if e.is_timeout() {
                    if let Some(socket) = answer_timeout
                        && partial_request.load(Ordering::Relaxed)
                    {
                        let _ = socket.send(RESPONSE_408);
                    }
                } else {
                    tracing::debug!(%client, error = %e, "client connection ended with an error");
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    let open = graceful.count();
    if open > 0 {
        tracing::info!(listen = %addr, connections = open, "waiting for open connections");
    }
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            listen = %addr,
            grace = ?grace,
            "connections still open after shutdown_timeout; closing them"
        );
        connections.abort_all();
    }
}

/// Sent when a client did not finish its request head within `client_header_timeout`.
const RESPONSE_408: &[u8] = b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 61\r\nConnection: close\r\n\r\n408 Request Timeout: the request head did not arrive in time\n";
