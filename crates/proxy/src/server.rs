//! Listeners, workers and client connections.
//!
//! [`Proxy::bind`] binds every listener first, so an address in use is a start-up error naming
//! the address, not a surprise later. Every worker accepts on the same listening socket (each
//! through its own descriptor and its own epoll), as nginx's workers do by default.
//!
//! Keep-alive connections live long, so where a burst of them lands decides how the load is
//! spread for their whole life: a worker that is awake can accept a whole burst before another
//! wakes (measured: 64 of 64 on one worker, at 0.8× the rate of an even split). So the worker
//! that accepts hands the connection to the worker serving the fewest connections of that
//! listener, through a channel; the socket moves to that worker's runtime before anything is
//! read. (One `SO_REUSEPORT` socket per worker was measured too: the kernel's hash spreads
//! unevenly as well, and a second process could silently bind the same port.)
//!
//! [`Proxy::run`] starts `workers` threads, each running its own single-threaded tokio runtime:
//! a connection lives on one thread from accept to close, its wake-ups never cross threads, and
//! each worker keeps its own keep-alive connections to the backends. What the workers share is
//! each upstream's balancing pool (one global sequence, see [`crate::Upstream`]) and each
//! listener's `max_connections`.
//!
//! Shutdown: stop accepting, let every connection finish the request it is on (idle keep-alive
//! connections are closed at once, the last responses say `Connection: close`), and wait up to
//! `shutdown_timeout` for them before closing what is left.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Socket, Type};
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::net::{TcpListener, TcpStream};

use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::client::{self, ListenerContext, WorkerListener};
use crate::connections::Connections;
use crate::metrics::{Metrics, WorkerStats};
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

/// Backlog of pending connections per socket (nginx uses 511 on Linux).
const LISTEN_BACKLOG: i32 = 511;

/// One configured listener: its context, its socket (one descriptor per worker), its
/// connection limit.
#[derive(Debug)]
struct Listener {
    ctx: Arc<ListenerContext>,
    sockets: Vec<std::net::TcpListener>,
    limit: Arc<Semaphore>,
}

/// A connection accepted by one worker for another.
type Handoff = (std::net::TcpStream, SocketAddr);

/// How a listener's connections are spread over the workers.
#[derive(Debug)]
struct Spread {
    /// Open connections per worker.
    open: Vec<AtomicUsize>,
    /// Where each worker takes connections handed to it.
    inboxes: Vec<mpsc::UnboundedSender<Handoff>>,
}

impl Spread {
    /// The worker that should serve the next connection: the one with the fewest open, `me`
    /// on a tie.
    fn least_loaded(&self, me: usize) -> usize {
        let mut best = me;
        let mut fewest = self.open[me].load(Ordering::Relaxed);
        for (i, n) in self.open.iter().enumerate() {
            let n = n.load(Ordering::Relaxed);
            if n < fewest {
                best = i;
                fewest = n;
            }
        }
        best
    }
}

/// Hands a connection accepted by worker `me` to worker `to`, counting it there at once so a
/// burst is dealt out evenly. If `to` cannot take it (its runtime is gone), `me` keeps it:
/// `Some` is the connection to serve here.
fn hand_over(
    spread: &Spread,
    to: usize,
    me: usize,
    stream: TcpStream,
    client: SocketAddr,
) -> Option<(TcpStream, SocketAddr)> {
    let std = match stream.into_std() {
        Ok(std) => std,
        Err(e) => {
            tracing::warn!(%client, error = %e, "cannot hand a connection over");
            return None;
        }
    };
    spread.open[to].fetch_add(1, Ordering::Relaxed);
    let Err(mpsc::error::SendError((std, client))) = spread.inboxes[to].send((std, client)) else {
        return None;
    };
    spread.open[to].fetch_sub(1, Ordering::Relaxed);
    match TcpStream::from_std(std) {
        Ok(stream) => {
            spread.open[me].fetch_add(1, Ordering::Relaxed);
            Some((stream, client))
        }
        Err(e) => {
            tracing::warn!(%client, error = %e, "cannot take a connection back");
            None
        }
    }
}

/// Takes a connection off its worker's open count when it ends (it is counted when it is
/// accepted or handed over).
struct Open<'a>(&'a AtomicUsize);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Each listener's client connections: its address, the permits its connections hold, and
/// how many there are in all.
#[derive(Debug, Clone)]
pub struct ClientConnections(Vec<(SocketAddr, Arc<Semaphore>, usize)>);

impl ClientConnections {
    /// Each listener's address and the client connections it is serving now.
    pub fn open(&self) -> Vec<(SocketAddr, usize)> {
        self.0
            .iter()
            .map(|(addr, permits, limit)| {
                (*addr, limit.saturating_sub(permits.available_permits()))
            })
            .collect()
    }
}

/// A bound, not yet running, proxy.
#[derive(Debug)]
pub struct Proxy {
    workers: usize,
    listeners: Vec<Listener>,
    upstreams: Vec<Arc<Upstream>>,
    shutdown_timeout: Duration,
    metrics: Arc<Metrics>,
}

fn bind_socket(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

impl Proxy {
    /// Builds the upstreams and binds every listener, once per worker.
    pub async fn bind(settings: ProxySettings) -> Result<Proxy, StartError> {
        let workers = settings.workers.max(1);
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
            let bind_error = |source| StartError::Bind {
                addr: l.listen,
                source,
            };
            let socket = bind_socket(l.listen).map_err(bind_error)?;
            let mut sockets = Vec::with_capacity(workers);
            for _ in 1..workers {
                sockets.push(socket.try_clone().map_err(bind_error)?);
            }
            sockets.push(socket);
            listeners.push(Listener {
                limit: Arc::new(Semaphore::new(l.connection_limit())),
                ctx: Arc::new(ListenerContext {
                    settings: l,
                    upstream,
                    access_log: settings.access_log,
                }),
                sockets,
            });
        }
        let mut upstreams: Vec<_> = upstreams.into_values().collect();
        upstreams.sort_by(|a, b| a.name().cmp(b.name()));
        Ok(Proxy {
            workers,
            listeners,
            upstreams,
            shutdown_timeout: settings.shutdown_timeout,
            metrics: Arc::new(Metrics::default()),
        })
    }

    /// The bound addresses, in configuration order (useful with port 0).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .map(|l| {
                l.sockets[0]
                    .local_addr()
                    .expect("a bound listener has an address")
            })
            .collect()
    }

    /// The upstreams, by name.
    pub fn upstreams(&self) -> &[Arc<Upstream>] {
        &self.upstreams
    }

    /// What the workers count, for `/metrics`.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// Each listener's open client connections, readable while the proxy runs.
    pub fn client_connections(&self) -> ClientConnections {
        ClientConnections(
            self.listeners
                .iter()
                .filter_map(|l| {
                    let addr = l.sockets[0].local_addr().ok()?;
                    Some((
                        addr,
                        Arc::clone(&l.limit),
                        l.ctx.settings.connection_limit(),
                    ))
                })
                .collect(),
        )
    }

    /// Serves until `shutdown` resolves, then shuts down gracefully. The workers are threads
    /// of their own; the caller's runtime only waits.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        for l in &self.listeners {
            if let Ok(addr) = l.sockets[0].local_addr() {
                tracing::info!(listen = %addr, upstream = %l.ctx.upstream.name(), "listening");
            }
        }
        // Deal the descriptors out: worker i gets descriptor i of every listener.
        let mut per_worker: Vec<Vec<WorkerSocket>> =
            (0..self.workers).map(|_| Vec::new()).collect();
        for l in self.listeners {
            let (inboxes, receivers): (Vec<_>, Vec<_>) =
                (0..self.workers).map(|_| mpsc::unbounded_channel()).unzip();
            let spread = Arc::new(Spread {
                open: (0..self.workers).map(|_| AtomicUsize::new(0)).collect(),
                inboxes,
            });
            for (i, (socket, inbox)) in l.sockets.into_iter().zip(receivers).enumerate() {
                per_worker[i].push(WorkerSocket {
                    socket,
                    ctx: Arc::clone(&l.ctx),
                    limit: Arc::clone(&l.limit),
                    worker: i,
                    spread: Arc::clone(&spread),
                    inbox,
                });
            }
        }
        let mut finished = Vec::new();
        for (i, sockets) in per_worker.into_iter().enumerate() {
            let (done_tx, done_rx) = oneshot::channel::<()>();
            let stop = stop_rx.clone();
            let grace = self.shutdown_timeout;
            let stats = self.metrics.worker();
            let spawned = std::thread::Builder::new()
                .name(format!("fulcrum-worker-{i}"))
                .spawn(move || {
                    match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt.block_on(worker(sockets, stats, stop, grace)),
                        Err(e) => {
                            tracing::error!(worker = i, error = %e, "cannot start a worker runtime")
                        }
                    }
                    drop(done_tx);
                });
            match spawned {
                Ok(_) => finished.push(done_rx),
                Err(e) => tracing::error!(worker = i, error = %e, "cannot start a worker thread"),
            }
        }
        shutdown.await;
        tracing::info!("shutting down: no new connections; finishing requests in flight");
        let _ = stop_tx.send(true);
        for done in finished {
            // Resolves (with an error) when the worker drops its sender, on any exit.
            let _ = done.await;
        }
    }
}

/// A listener's socket as one worker gets it.
#[derive(Debug)]
struct WorkerSocket {
    socket: std::net::TcpListener,
    ctx: Arc<ListenerContext>,
    limit: Arc<Semaphore>,
    worker: usize,
    spread: Arc<Spread>,
    inbox: mpsc::UnboundedReceiver<Handoff>,
}

/// One worker: an accept loop per listener, and the expiry of its idle backend connections,
/// on this thread's runtime.
async fn worker(
    sockets: Vec<WorkerSocket>,
    stats: Arc<WorkerStats>,
    stop: watch::Receiver<bool>,
    grace: Duration,
) {
    let mut loops = JoinSet::new();
    let mut pools = Vec::new();
    for s in sockets {
        let listener = match TcpListener::from_std(s.socket) {
            Ok(listener) => listener,
            Err(e) => {
                tracing::error!(error = %e, "cannot register a listening socket");
                continue;
            }
        };
        let connections = s.ctx.upstream.worker_connections();
        pools.push((
            Arc::clone(&connections),
            s.ctx.upstream.settings().keepalive_timeout,
        ));
        let worker_listener = Arc::new(WorkerListener {
            connections,
            stats: Arc::clone(&stats),
            ctx: s.ctx,
        });
        loops.spawn(accept_loop(
            AcceptLoop {
                listener,
                worker_listener,
                limit: s.limit,
                worker: s.worker,
                spread: s.spread,
                inbox: s.inbox,
            },
            stop.clone(),
            grace,
        ));
    }
    let reaper = tokio::spawn(reap_idle(pools, stop.clone()));
    while loops.join_next().await.is_some() {}
    reaper.abort();
}

/// Closes idle backend connections that expired (`keepalive_timeout`) or that their backend
/// closed, wherever they are in the idle lists, until the worker stops. Runs every second, or
/// more often for a shorter `keepalive_timeout`: an idle connection lives at most about
/// `keepalive_timeout` plus that period.
async fn reap_idle(pools: Vec<(Arc<[Connections]>, Duration)>, mut stop: watch::Receiver<bool>) {
    let Some(shortest) = pools.iter().map(|(_, timeout)| *timeout).min() else {
        return;
    };
    let period = shortest.clamp(Duration::from_millis(10), Duration::from_secs(1));
    loop {
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            _ = stop.changed() => return,
        }
        for (backends, _) in &pools {
            for backend in backends.iter() {
                backend.reap();
            }
        }
    }
}

/// What one worker's accept loop for one listener works with.
struct AcceptLoop {
    listener: TcpListener,
    worker_listener: Arc<WorkerListener>,
    limit: Arc<Semaphore>,
    worker: usize,
    spread: Arc<Spread>,
    inbox: mpsc::UnboundedReceiver<Handoff>,
}

async fn accept_loop(mut a: AcceptLoop, mut stop: watch::Receiver<bool>, grace: Duration) {
    let mut connections = JoinSet::new();
    let addr = a
        .listener
        .local_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.to_string());
    loop {
        let (stream, client) = tokio::select! {
            accepted = a.listener.accept() => {
                let (stream, client) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) if is_transient(&e) => continue,
                    Err(e) => {
                        // Out of file descriptors or similar: back off instead of spinning.
                        tracing::error!(listen = %addr, error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let to = a.spread.least_loaded(a.worker);
                if to == a.worker {
                    a.spread.open[a.worker].fetch_add(1, Ordering::Relaxed);
                    (stream, client)
                } else {
                    match hand_over(&a.spread, to, a.worker, stream, client) {
                        Some(kept) => kept,
                        None => continue,
                    }
                }
            },
            Some((std, client)) = a.inbox.recv() => match TcpStream::from_std(std) {
                // Already counted by the worker that handed it over.
                Ok(stream) => (stream, client),
                Err(e) => {
                    a.spread.open[a.worker].fetch_sub(1, Ordering::Relaxed);
                    tracing::warn!(listen = %addr, error = %e, "cannot take a connection over");
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        // The permit (max_connections) is taken by the worker that will serve the
        // connection, after it has one: permits are held only by connections being served,
        // which finish on their own, so waiting for one can never wait on another worker.
        // Meanwhile this worker's accepts and hand-overs wait; the counts steer new
        // connections elsewhere.
        let permit = tokio::select! {
            permit = Arc::clone(&a.limit).acquire_owned() => permit.expect("the semaphore is never closed"),
            _ = stop.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        while connections.try_join_next().is_some() {}
        let worker_listener = Arc::clone(&a.worker_listener);
        let spread = Arc::clone(&a.spread);
        let worker = a.worker;
        let stop = stop.clone();
        connections.spawn(async move {
            let _open = Open(&spread.open[worker]);
            client::serve(stream, client, worker_listener, stop, permit).await;
        });
    }
    let listener = a.listener;
    drop(listener);
    close_unserved(&mut a.inbox, &a.spread.open[a.worker]);
    if !connections.is_empty() {
        tracing::info!(listen = %addr, connections = connections.len(), "waiting for open connections");
    }
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, drained).await.is_err() {
        tracing::warn!(
            listen = %addr,
            grace = ?grace,
            "connections still open after shutdown_timeout; closing them"
        );
        connections.abort_all();
    }
}

/// Closes the connections handed to a worker that has stopped and not yet taken, like those
/// still in the kernel's queue, rather than leaving them waiting for the whole
/// `shutdown_timeout` while the worker's other connections finish; no more can come.
fn close_unserved(inbox: &mut mpsc::UnboundedReceiver<Handoff>, open: &AtomicUsize) {
    inbox.close();
    while let Ok((stream, _)) = inbox.try_recv() {
        open.fetch_sub(1, Ordering::Relaxed);
        drop(stream);
    }
}

/// Accept errors about one connection (it was reset or aborted before we took it), not the
/// socket.
fn is_transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(open: &[usize]) -> Spread {
        Spread {
            open: open.iter().map(|&n| AtomicUsize::new(n)).collect(),
            inboxes: open.iter().map(|_| mpsc::unbounded_channel().0).collect(),
        }
    }

    #[test]
    fn connections_handed_to_a_stopped_worker_are_closed_at_once() {
        use std::io::Read as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, mut inbox) = mpsc::unbounded_channel();
        let open = AtomicUsize::new(0);
        let mut clients = Vec::new();
        for _ in 0..2 {
            let client = std::net::TcpStream::connect(addr).unwrap();
            client
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            clients.push(client);
            tx.send(listener.accept().unwrap()).unwrap();
            open.fetch_add(1, Ordering::Relaxed);
        }
        close_unserved(&mut inbox, &open);
        assert_eq!(open.load(Ordering::Relaxed), 0);
        for mut client in clients {
            assert_eq!(client.read(&mut [0; 1]).unwrap(), 0, "closed, not held");
        }
        // A worker handing over after that keeps the connection.
        let late = std::net::TcpStream::connect(addr).unwrap();
        assert!(tx.send(listener.accept().unwrap()).is_err());
        drop(late);
    }

    #[test]
    fn connections_go_to_the_least_loaded_worker_and_stay_on_a_tie() {
        assert_eq!(spread(&[3, 1, 2]).least_loaded(0), 1);
        assert_eq!(spread(&[2, 2, 2]).least_loaded(2), 2);
        assert_eq!(spread(&[0, 5]).least_loaded(1), 0);
        // A burst dealt out by one worker: counting each hand-over at once alternates them.
        let s = spread(&[0, 0]);
        let mut served = [0; 2];
        for _ in 0..64 {
            let to = s.least_loaded(0);
            s.open[to].fetch_add(1, Ordering::Relaxed);
            served[to] += 1;
        }
        assert_eq!(served, [32, 32]);
    }
}
