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

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Socket, Type};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use tokio::net::{TcpListener, TcpStream};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::access_log::{AccessLog, AccessLogSettings, Destination};
use crate::admission::Zones;
use crate::handover::{self, Inherited};
use crate::listener::{ListenerContext, WorkerListener};
use crate::metrics::{Metrics, WorkerStats};
use crate::route::Routes;
use crate::settings::{ListenerSettings, Protocol, ProxySettings};
use crate::tls::{Resumption, ServerTls, TlsSetupError};
use crate::upstream::Keep;
use crate::upstream::{Upstream, WorkerPools, hashed_request_part};
use crate::{dispatch, proxy_protocol, tcp};

/// A proxy that cannot start, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    // `error` is not this error's `source`: its words are already in the message, and a
    // chain printed whole (`{:#}`) would say them twice.
    #[error(
        "cannot listen on {addr}: {error}{hint}",
        hint = if error.kind() == std::io::ErrorKind::AddrInUse {
            " (another process is using this address: stop it or choose another `listen`)"
        } else { "" }
    )]
    Bind {
        addr: SocketAddr,
        error: std::io::Error,
    },
    // `error`, not `source`, as for `Bind`.
    #[error(
        "cannot open the access log {destination}: {error} (check the directory exists and fulcrum may write there)"
    )]
    AccessLog {
        destination: Destination,
        error: std::io::Error,
    },
    #[error("listener {listen}: {source}")]
    Tls {
        listen: SocketAddr,
        source: TlsSetupError,
    },
    #[error("listener {listen} names upstream \"{upstream}\", which is not defined")]
    UnknownUpstream {
        listen: SocketAddr,
        upstream: String,
    },
    #[error("listener {listen}: its routes cannot be built: {why}")]
    Routes { listen: SocketAddr, why: String },
}

/// Backlog of pending connections per socket (nginx uses 511 on Linux).
const LISTEN_BACKLOG: i32 = 511;

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

/// A bound, not yet running, proxy.
#[derive(Debug)]
pub struct Proxy {
    live: Arc<Live>,
    /// The listeners bound at start, dealt to the workers when they start.
    initial: Vec<Listener>,
}

/// What a running proxy's reload changes, shared with its [`ProxyHandle`]s.
#[derive(Debug)]
struct Live {
    workers: usize,
    shutdown_timeout: Duration,
    metrics: Arc<Metrics>,
    registry: std::sync::Mutex<Registry>,
    /// One reload at a time.
    reloading: tokio::sync::Mutex<()>,
    /// Each worker's inbox for listeners added by a reload (set when the workers start).
    commands: std::sync::Mutex<Vec<mpsc::UnboundedSender<WorkerSocket>>>,
    /// The upstreams in force, sent again after every reload: what the control plane follows
    /// ([`ProxyHandle::upstream_set`]).
    upstream_set: watch::Sender<Vec<Arc<Upstream>>>,
}

#[derive(Debug)]
struct Registry {
    /// By name.
    upstreams: Vec<Arc<Upstream>>,
    listeners: Vec<LiveListener>,
    access_log: Option<AccessLog>,
}

/// A listener as reloads see it.
#[derive(Debug)]
struct LiveListener {
    /// As configured: a reload matches listeners by it (port 0 stays 0).
    configured: SocketAddr,
    bound: SocketAddr,
    ctx: watch::Sender<Arc<ListenerContext>>,
    retire: watch::Sender<bool>,
    limit: Arc<Semaphore>,
    /// The permits `limit` was given in all.
    permits: usize,
    /// A descriptor of the listening socket kept to hand it to a new process (an upgrade);
    /// dropped when shutdown begins, so that the socket closes with the workers' and new
    /// connections are refused rather than left waiting in its queue.
    handover: Option<std::net::TcpListener>,
    /// TLS session cache and ticket keys, kept across reloads.
    resumption: Resumption,
}

/// One configured listener, bound: its context, its socket (one descriptor per worker), its
/// connection limit, how its connections are spread over the workers.
#[derive(Debug)]
struct Listener {
    sockets: Vec<std::net::TcpListener>,
    ctx: watch::Receiver<Arc<ListenerContext>>,
    retire: watch::Receiver<bool>,
    limit: Arc<Semaphore>,
    spread: Arc<Spread>,
    inboxes: Vec<mpsc::UnboundedReceiver<Handoff>>,
}

fn bind_socket(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// Binds `settings.listen` once per worker (or takes the socket an older process handed over,
/// from `inherited`); the listener and what a reload keeps of it.
fn bind_listener(
    settings: ListenerSettings,
    served: Served,
    access_log: Option<AccessLog>,
    workers: usize,
    inherited: &mut Inherited,
) -> Result<(Listener, LiveListener), StartError> {
    let configured = settings.listen;
    let tls_error = |source| StartError::Tls {
        listen: configured,
        source,
    };
    // Certificates first: a bad one leaves nothing bound.
    let resumption = Resumption::new().map_err(|e| tls_error(e.into()))?;
    let tls = server_tls(&settings, &resumption).map_err(tls_error)?;
    let bind_error = |error| StartError::Bind {
        addr: configured,
        error,
    };
    let socket = match inherited.take(&handover::name_of(configured)) {
        Some(socket) => {
            socket.set_nonblocking(true).map_err(bind_error)?;
            socket
        }
        None => bind_socket(configured).map_err(bind_error)?,
    };
    let handover = socket.try_clone().map_err(bind_error)?;
    let bound = socket.local_addr().map_err(bind_error)?;
    let mut sockets = Vec::with_capacity(workers);
    for _ in 1..workers {
        sockets.push(socket.try_clone().map_err(bind_error)?);
    }
    sockets.push(socket);
    let permits = settings.connection_limit();
    let limit = Arc::new(Semaphore::new(permits));
    let (ctx_tx, ctx_rx) = watch::channel(Arc::new(served.context(settings, access_log, tls)));
    let (retire_tx, retire_rx) = watch::channel(false);
    let (inboxes, receivers): (Vec<_>, Vec<_>) =
        (0..workers).map(|_| mpsc::unbounded_channel()).unzip();
    let spread = Arc::new(Spread {
        open: (0..workers).map(|_| AtomicUsize::new(0)).collect(),
        inboxes,
    });
    Ok((
        Listener {
            sockets,
            ctx: ctx_rx,
            retire: retire_rx,
            limit: Arc::clone(&limit),
            spread,
            inboxes: receivers,
        },
        LiveListener {
            configured,
            bound,
            ctx: ctx_tx,
            retire: retire_tx,
            limit,
            permits,
            handover: Some(handover),
            resumption,
        },
    ))
}

/// A listener's TLS read from its certificate files, `None` for plain HTTP.
fn server_tls(
    settings: &ListenerSettings,
    resumption: &Resumption,
) -> Result<Option<ServerTls>, TlsSetupError> {
    if settings.tls.is_empty() {
        return Ok(None);
    }
    ServerTls::new(&settings.tls, resumption, settings.http2.is_some()).map(Some)
}

impl Listener {
    /// Worker `i`'s share: its descriptor and its inbox.
    fn deal(self) -> Vec<WorkerSocket> {
        let Listener {
            sockets,
            ctx,
            retire,
            limit,
            spread,
            inboxes,
        } = self;
        sockets
            .into_iter()
            .zip(inboxes)
            .enumerate()
            .map(|(i, (socket, inbox))| WorkerSocket {
                socket,
                ctx: ctx.clone(),
                retire: retire.clone(),
                limit: Arc::clone(&limit),
                worker: i,
                spread: Arc::clone(&spread),
                inbox,
            })
            .collect()
    }
}

impl Proxy {
    /// Builds the upstreams and binds every listener, once per worker.
    pub async fn bind(settings: ProxySettings) -> Result<Proxy, StartError> {
        Proxy::bind_inherited(settings, &mut Inherited::default()).await
    }

    /// As [`Proxy::bind`], taking the listening sockets a previous process handed over
    /// (matched by configured address) instead of binding them again; those it does not use
    /// are left in `inherited`.
    pub async fn bind_inherited(
        settings: ProxySettings,
        inherited: &mut Inherited,
    ) -> Result<Proxy, StartError> {
        let workers = settings.workers.max(1);
        let mut upstreams: Vec<Arc<Upstream>> = settings
            .upstreams
            .iter()
            .map(|u| Arc::new(Upstream::new(u.clone())))
            .collect();
        upstreams.sort_by(|a, b| a.name().cmp(b.name()));
        let access_log = open_access_log(settings.access_log.as_ref())?;
        let mut initial = Vec::new();
        let mut live = Vec::new();
        for l in settings.listeners {
            let served = served(&l, &upstreams)?;
            let (listener, entry) =
                bind_listener(l, served, access_log.clone(), workers, inherited)?;
            initial.push(listener);
            live.push(entry);
        }
        Ok(Proxy {
            live: Arc::new(Live {
                workers,
                shutdown_timeout: settings.shutdown_timeout,
                metrics: Arc::new(Metrics::default()),
                upstream_set: watch::channel(upstreams.clone()).0,
                registry: std::sync::Mutex::new(Registry {
                    upstreams,
                    listeners: live,
                    access_log,
                }),
                reloading: tokio::sync::Mutex::new(()),
                commands: std::sync::Mutex::new(Vec::new()),
            }),
            initial,
        })
    }

    /// The bound addresses, in configuration order (useful with port 0).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.handle().listeners()
    }

    /// The upstreams, by name.
    pub fn upstreams(&self) -> Vec<Arc<Upstream>> {
        self.handle().upstreams()
    }

    /// What the workers count, for `/metrics`.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.live.metrics)
    }

    /// A handle on the proxy that stays valid while it runs: its state, and reloads.
    pub fn handle(&self) -> ProxyHandle {
        ProxyHandle {
            live: Arc::clone(&self.live),
        }
    }

    /// Serves until `shutdown` resolves, then shuts down gracefully. The workers are threads
    /// of their own; the caller's runtime only waits.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        for l in self.live.registry().listeners.iter() {
            tracing::info!(listen = %l.bound, protocol = %speaks(&l.ctx.borrow()), upstream = %names_of(&l.ctx.borrow()), "listening");
        }
        let workers = self.live.workers;
        // Deal the descriptors out: worker i gets descriptor i of every listener.
        let mut per_worker: Vec<Vec<WorkerSocket>> = (0..workers).map(|_| Vec::new()).collect();
        for l in self.initial {
            for (i, s) in l.deal().into_iter().enumerate() {
                per_worker[i].push(s);
            }
        }
        let mut finished = Vec::new();
        let mut commands = Vec::new();
        for (i, sockets) in per_worker.into_iter().enumerate() {
            // The worker's end, with how many connections it closed at `shutdown_timeout`.
            let (done_tx, done_rx) = oneshot::channel::<usize>();
            let (command_tx, command_rx) = mpsc::unbounded_channel();
            let stop = stop_rx.clone();
            let grace = self.live.shutdown_timeout;
            let stats = self.live.metrics.worker();
            let spawned = std::thread::Builder::new()
                .name(format!("fulcrum-worker-{i}"))
                .spawn(move || {
                    match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => {
                            let closed =
                                rt.block_on(worker(sockets, command_rx, stats, stop, grace));
                            let _ = done_tx.send(closed);
                        }
                        Err(e) => {
                            tracing::error!(worker = i, error = %e, "cannot start a worker runtime")
                        }
                    }
                });
            match spawned {
                Ok(_) => {
                    finished.push(done_rx);
                    commands.push(command_tx);
                }
                Err(e) => tracing::error!(worker = i, error = %e, "cannot start a worker thread"),
            }
        }
        *self.live.commands.lock().unwrap_or_else(|p| p.into_inner()) = commands;
        shutdown.await;
        // Said once for every worker and listener: each worker then drains its own.
        let grace = self.live.shutdown_timeout;
        tracing::info!(
            open_connections = self.live.open_connections(),
            shutdown_timeout_s = grace.as_secs_f64(),
            "shutting down: no new connections; waiting for open connections to finish"
        );
        for l in self.live.registry().listeners.iter_mut() {
            l.handover = None;
        }
        let _ = stop_tx.send(true);
        let mut closed = 0;
        for done in finished {
            // Resolves (with an error) when the worker drops its sender, on any exit.
            closed += done.await.unwrap_or(0);
        }
        if closed > 0 {
            // Each worker closed its own at the deadline; said once here, for them all.
            tracing::warn!(
                closed_connections = closed,
                shutdown_timeout_s = grace.as_secs_f64(),
                "connections still open after shutdown_timeout were closed"
            );
        }
        // The lines the workers still hold are written before the process ends (a stalled
        // disk holds it no longer than this).
        let log = self.live.registry().access_log.clone();
        if log.is_some_and(|log| !log.flush(Duration::from_secs(5))) {
            tracing::warn!("the access log's last lines could not be written within 5 s");
        }
    }
}

/// The access log `settings` ask for, opened (a file is created if missing).
fn open_access_log(settings: Option<&AccessLogSettings>) -> Result<Option<AccessLog>, StartError> {
    settings
        .map(|s| {
            AccessLog::open(s.clone()).map_err(|error| StartError::AccessLog {
                destination: s.destination.clone(),
                error,
            })
        })
        .transpose()
}

fn find(upstreams: &[Arc<Upstream>], name: &str) -> Option<Arc<Upstream>> {
    upstreams.iter().find(|u| u.name() == name).cloned()
}

/// The names of the upstreams a listener sends to, for its log lines.
fn names_of(ctx: &ListenerContext) -> String {
    let names: Vec<&str> = ctx.upstreams.iter().map(|u| u.name()).collect();
    names.join(",")
}

/// What a listener speaks, for its start-up line: `tcp`, or `http` with `+tls` and `+h2` as
/// configured (`https+h2`: TLS with HTTP/2 by ALPN; `http+h2`: h2c beside HTTP/1.1).
fn speaks(ctx: &ListenerContext) -> String {
    let s = &ctx.settings;
    if s.protocol == crate::Protocol::Tcp {
        return "tcp".to_owned();
    }
    let base = if ctx.tls.is_some() { "https" } else { "http" };
    match s.http2.is_some() {
        true => format!("{base}+h2"),
        false => base.to_owned(),
    }
}

/// What a listener's requests may go to: the upstreams (its own first, then those its routes
/// name) and its routes, compiled.
#[derive(Debug)]
struct Served {
    upstreams: Vec<Arc<Upstream>>,
    has_default: bool,
    routes: Option<Routes>,
    /// The listener's own `limit_req` and `limit_conn`, their state new.
    zones: crate::admission::Zones,
}

impl Served {
    /// What `l`'s listener context is made of, with its counts id.
    fn context(
        self,
        l: ListenerSettings,
        access_log: Option<AccessLog>,
        tls: Option<ServerTls>,
    ) -> ListenerContext {
        ListenerContext {
            counts_id: crate::metrics::route_id(&l.listen.to_string(), ""),
            settings: l,
            upstreams: self.upstreams,
            has_default: self.has_default,
            routes: self.routes,
            access_log,
            tls,
            zones: self.zones,
        }
    }

    /// Takes the state of the running context's limits where their settings are unchanged.
    fn adopt_zones(&mut self, old: &ListenerContext) {
        self.zones.adopt(&old.zones);
        if let (Some(new), Some(old)) = (&mut self.routes, &old.routes) {
            new.adopt_zones(old);
        }
    }
}

/// The upstreams and routes of listener `l`, found among `all`.
fn served(l: &ListenerSettings, all: &[Arc<Upstream>]) -> Result<Served, StartError> {
    let unknown = |upstream: &str| StartError::UnknownUpstream {
        listen: l.listen,
        upstream: upstream.to_owned(),
    };
    let mut upstreams = Vec::new();
    if let Some(name) = &l.upstream {
        upstreams.push(find(all, name).ok_or_else(|| unknown(name))?);
    }
    let has_default = !upstreams.is_empty();
    if l.routes.is_empty() {
        return if has_default {
            Ok(Served {
                upstreams,
                has_default,
                routes: None,
                zones: Zones::new(l.limit_req.as_ref(), l.limit_conn.as_ref()),
            })
        } else {
            Err(StartError::Routes {
                listen: l.listen,
                why: "no upstream and no routes: name an upstream".to_owned(),
            })
        };
    }
    for r in &l.routes {
        if let crate::settings::RouteAction::Upstream { upstream, .. } = &r.action
            && !upstreams.iter().any(|u| u.name() == upstream)
        {
            upstreams.push(find(all, upstream).ok_or_else(|| unknown(upstream))?);
        }
    }
    let routes = Routes::build(l.listen, &l.routes, |name| {
        let i = upstreams.iter().position(|u| u.name() == name)?;
        let settings = upstreams[i].settings();
        let sticky = settings.sticky.as_ref().map(|s| s.cookie.as_str().into());
        Some((i, hashed_request_part(&settings).cloned(), sticky))
    })
    .map_err(|e| StartError::Routes {
        listen: l.listen,
        why: format!("{e:?}"),
    })?;
    Ok(Served {
        upstreams,
        has_default,
        routes: Some(routes),
        zones: Zones::new(l.limit_req.as_ref(), l.limit_conn.as_ref()),
    })
}

impl Live {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running proxy, as the admin API and the reload signal see it.
#[derive(Debug, Clone)]
pub struct ProxyHandle {
    live: Arc<Live>,
}

/// What a reload did.
#[derive(Debug, Default)]
pub struct Reloaded {
    /// Upstreams that are new: their control loops must be started.
    pub new_upstreams: Vec<Arc<Upstream>>,
    /// Upstreams reconfigured in place with settings that changed, by name (one rebuilt the
    /// same, what DNS found carried, is not listed).
    pub reconfigured: Vec<String>,
    /// Upstreams no longer in the configuration (retired: their control loops stop).
    pub removed_upstreams: Vec<String>,
    pub new_listeners: Vec<SocketAddr>,
    pub changed_listeners: Vec<SocketAddr>,
    pub removed_listeners: Vec<SocketAddr>,
    /// Changes a reload cannot apply (they take a restart), in words.
    pub not_applied: Vec<String>,
}

/// What [`ProxyHandle::reopen_logs`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reopened {
    /// No access log is configured.
    NoFile,
    /// The writer wrote what it held to the old file and opened the new one: lines logged
    /// from now on go there.
    Done,
    /// The writer was busy; it reopens within its next flush (a tenth of a second).
    Soon,
}

impl ProxyHandle {
    /// The upstreams in force, by name.
    pub fn upstreams(&self) -> Vec<Arc<Upstream>> {
        self.live.registry().upstreams.clone()
    }

    /// The upstreams in force, told again after every reload that changed the configuration:
    /// the control plane follows it to start the loops of upstreams a reload adds (those a
    /// reload removes are retired, [`Upstream::changes`]).
    pub fn upstream_set(&self) -> watch::Receiver<Vec<Arc<Upstream>>> {
        self.live.upstream_set.subscribe()
    }

    /// What the workers count.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.live.metrics)
    }

    /// A descriptor of each listening socket, named by its configured address, to hand to a
    /// new process ([`crate::handover`]).
    pub fn sockets_for_handover(&self) -> Vec<(String, std::net::TcpListener)> {
        self.live
            .registry()
            .listeners
            .iter()
            .filter_map(|l| {
                let socket = l.handover.as_ref()?.try_clone().ok()?;
                Some((handover::name_of(l.configured), socket))
            })
            .collect()
    }

    /// Each listener's bound address.
    pub fn listeners(&self) -> Vec<SocketAddr> {
        self.live
            .registry()
            .listeners
            .iter()
            .map(|l| l.bound)
            .collect()
    }

    /// Each listener's bound address and its settings in force (its upstream and routes among
    /// them), in configuration order: what the admin API lists.
    pub fn listener_settings(&self) -> Vec<(SocketAddr, ListenerSettings)> {
        self.live
            .registry()
            .listeners
            .iter()
            .map(|l| (l.bound, l.ctx.borrow().settings.clone()))
            .collect()
    }

    /// Reopens the access log's file (SIGUSR1, after logrotate moved it); blocks up to a
    /// second for the log's writer.
    pub fn reopen_logs(&self) -> Reopened {
        match &self.live.registry().access_log {
            None => Reopened::NoFile,
            Some(log) if log.reopen() => Reopened::Done,
            Some(_) => Reopened::Soon,
        }
    }

    /// Each listener's address and the client connections it is serving now.
    pub fn client_connections(&self) -> Vec<(SocketAddr, usize)> {
        self.live
            .registry()
            .listeners
            .iter()
            .map(|l| {
                (
                    l.bound,
                    l.permits.saturating_sub(l.limit.available_permits()),
                )
            })
            .collect()
    }

    /// Applies a new configuration without dropping a request or refusing a connection:
    ///
    /// * new listeners are bound first — one that cannot be bound stops the reload before
    ///   anything changes;
    /// * an upstream that stays (same name) is reconfigured in place: its backends that stay
    ///   (same address) keep their statistics, health and connections, and requests in flight
    ///   finish ([`Upstream::reconfigure`]); new upstreams are built, removed ones retired;
    /// * a listener that stays (same address) keeps its socket, so no connection is refused;
    ///   if its settings or upstream changed, new connections get the new ones, and open
    ///   connections finish the request they are on with `Connection: close`;
    /// * a removed listener stops accepting and its connections finish as at shutdown.
    ///
    /// `workers` and `shutdown_timeout` take a restart: they are reported in `not_applied`.
    pub async fn reload(&self, settings: ProxySettings) -> Result<Reloaded, StartError> {
        let _one_at_a_time = self.live.reloading.lock().await;
        let mut done = Reloaded {
            not_applied: self.live.restart_only(&settings),
            ..Reloaded::default()
        };
        // Everything that can fail, before anything changes.
        let prepared = self.live.prepare(settings, &mut done)?;
        // From here on nothing fails.
        self.live.apply(prepared, &mut done);
        Ok(done)
    }
}

/// A reload made ready: every new upstream built, every certificate read, every new listener
/// bound. Applying it cannot fail.
struct Prepared {
    listeners: Vec<ListenerSettings>,
    /// For each of `listeners` that continues one, its upstreams and routes (`None` for those
    /// bound anew: theirs went into their context).
    served: Vec<Option<Served>>,
    /// For each of `listeners`, the running listener it continues (same configured address).
    matches: Vec<Option<usize>>,
    /// For each of `listeners` that continues one, its certificates read again.
    tls: Vec<Option<ServerTls>>,
    /// The listeners that continue none, bound, in order.
    bound: Vec<(Listener, LiveListener)>,
    upstream_settings: Vec<crate::UpstreamSettings>,
    /// The new set of upstreams, by name: those that stay (not yet reconfigured) and the new.
    upstreams: Vec<Arc<Upstream>>,
    old_upstreams: Vec<Arc<Upstream>>,
    access_log: Option<AccessLog>,
}

impl Live {
    /// The client connections every listener is serving now.
    fn open_connections(&self) -> usize {
        self.registry()
            .listeners
            .iter()
            .map(|l| l.permits.saturating_sub(l.limit.available_permits()))
            .sum()
    }

    /// What of `settings` a reload cannot apply.
    fn restart_only(&self, settings: &ProxySettings) -> Vec<String> {
        let mut not_applied = Vec::new();
        if settings.workers.max(1) != self.workers {
            not_applied.push(format!(
                "workers = {} (running with {}): takes a restart",
                settings.workers, self.workers
            ));
        }
        if settings.shutdown_timeout != self.shutdown_timeout {
            not_applied.push(format!(
                "shutdown_timeout = {:?} (running with {:?}): takes a restart",
                settings.shutdown_timeout, self.shutdown_timeout
            ));
        }
        not_applied
    }

    /// Prepares `settings` for [`Live::apply`]: the new upstreams are noted in `done`.
    fn prepare(
        &self,
        settings: ProxySettings,
        done: &mut Reloaded,
    ) -> Result<Prepared, StartError> {
        let (old_listeners, old_resumption, old_upstreams, old_log) = {
            let r = self.registry();
            (
                r.listeners
                    .iter()
                    .map(|l| l.configured)
                    .collect::<Vec<SocketAddr>>(),
                r.listeners
                    .iter()
                    .map(|l| l.resumption.clone())
                    .collect::<Vec<_>>(),
                r.upstreams.clone(),
                r.access_log.clone(),
            )
        };
        // The access log: the running one if unchanged, else a new one (a file that cannot be
        // opened stops the reload before anything changes).
        let access_log = match (&old_log, &settings.access_log) {
            (Some(old), Some(new)) if old.settings() == new => Some(old.clone()),
            _ => open_access_log(settings.access_log.as_ref())?,
        };
        let matches = match_listeners(&old_listeners, &settings.listeners);
        let upstreams = upstream_set(&settings.upstreams, &old_upstreams, done);
        let mut served = settings
            .listeners
            .iter()
            .map(|l| served(l, &upstreams).map(Some))
            .collect::<Result<Vec<_>, _>>()?;
        // Certificates of the listeners that stay are read again (a renewed certificate is in
        // force after the reload); one that cannot be read stops the reload before anything
        // changes, and the old ones go on being served.
        let mut tls = Vec::new();
        for (l, matched) in settings.listeners.iter().zip(&matches) {
            tls.push(match matched {
                Some(i) => {
                    server_tls(l, &old_resumption[*i]).map_err(|source| StartError::Tls {
                        listen: l.listen,
                        source,
                    })?
                }
                None => None,
            });
        }
        // Bind the new listeners before anything changes.
        let mut bound = Vec::new();
        for ((l, matched), served) in settings.listeners.iter().zip(&matches).zip(&mut served) {
            if matched.is_some() {
                continue;
            }
            let Some(served) = served.take() else {
                continue;
            };
            bound.push(bind_listener(
                l.clone(),
                served,
                access_log.clone(),
                self.workers,
                &mut Inherited::default(),
            )?);
        }
        Ok(Prepared {
            listeners: settings.listeners,
            served,
            matches,
            tls,
            bound,
            upstream_settings: settings.upstreams,
            upstreams,
            old_upstreams,
            access_log,
        })
    }

    /// Applies a prepared reload; what it did goes into `done`.
    fn apply(&self, prepared: Prepared, done: &mut Reloaded) {
        let Prepared {
            listeners: settings,
            served,
            matches,
            tls,
            bound,
            upstream_settings,
            upstreams,
            old_upstreams,
            access_log,
        } = prepared;
        for u in &upstream_settings {
            if let Some(existing) = find(&old_upstreams, &u.name)
                && !existing.reconfigure(u.clone(), Keep::Settings).unchanged
            {
                done.reconfigured.push(u.name.clone());
            }
        }
        for old in &old_upstreams {
            if find(&upstreams, old.name()).is_none() {
                old.retire();
                done.removed_upstreams.push(old.name().to_owned());
            }
        }
        let mut registry = self.registry();
        let old_entries = std::mem::take(&mut registry.listeners);
        let mut old_entries: Vec<Option<LiveListener>> =
            old_entries.into_iter().map(Some).collect();
        let mut bound = bound.into_iter();
        let mut listeners = Vec::new();
        let mut added = Vec::new();
        for (((l, matched), tls), served) in settings.into_iter().zip(matches).zip(tls).zip(served)
        {
            match (matched.and_then(|i| old_entries[i].take()), served) {
                (Some(mut entry), Some(mut served)) => {
                    served.adopt_zones(&entry.ctx.borrow());
                    let context = served.context(l, access_log.clone(), tls);
                    if continue_listener(&mut entry, context) {
                        done.changed_listeners.push(entry.bound);
                    }
                    listeners.push(entry);
                }
                _ => {
                    let (listener, entry) = bound.next().expect("bound in prepare, in order");
                    done.new_listeners.push(entry.bound);
                    tracing::info!(listen = %entry.bound, protocol = %speaks(&listener.ctx.borrow()), upstream = %names_of(&listener.ctx.borrow()), "listening");
                    added.push(listener);
                    listeners.push(entry);
                }
            }
        }
        for entry in old_entries.into_iter().flatten() {
            done.removed_listeners.push(entry.bound);
            let _ = entry.retire.send(true);
        }
        registry.listeners = listeners;
        registry.upstreams = upstreams.clone();
        registry.access_log = access_log;
        drop(registry);
        let commands = self
            .commands
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for listener in added {
            for (i, socket) in listener.deal().into_iter().enumerate() {
                if let Some(c) = commands.get(i) {
                    let _ = c.send(socket);
                }
            }
        }
        // Once the new upstreams serve: the control plane starts their loops.
        self.upstream_set.send_replace(upstreams);
    }
}

/// For each of the `new` listeners, the running listener (index into `old`, configured
/// addresses) it continues: the first not yet taken with the same address.
fn match_listeners(old: &[SocketAddr], new: &[ListenerSettings]) -> Vec<Option<usize>> {
    let mut taken = vec![false; old.len()];
    new.iter()
        .map(|l| {
            let i = old
                .iter()
                .enumerate()
                .position(|(i, &a)| !taken[i] && a == l.listen)?;
            taken[i] = true;
            Some(i)
        })
        .collect()
}

/// The upstreams of `settings`, by name: those of `old` that stay (not yet reconfigured), and
/// new ones, built (and noted in `done`).
fn upstream_set(
    settings: &[crate::UpstreamSettings],
    old: &[Arc<Upstream>],
    done: &mut Reloaded,
) -> Vec<Arc<Upstream>> {
    let mut upstreams: Vec<Arc<Upstream>> = Vec::new();
    for u in settings {
        match find(old, &u.name) {
            Some(existing) => upstreams.push(existing),
            None => {
                let new = Arc::new(Upstream::new(u.clone()));
                done.new_upstreams.push(Arc::clone(&new));
                upstreams.push(new);
            }
        }
    }
    upstreams.sort_by(|a, b| a.name().cmp(b.name()));
    upstreams
}

/// A running listener goes on under `context`: its connection limit follows the new one, and
/// new connections get the new context. Returns whether more than its certificates changed
/// (open connections then finish the request they are on with `Connection: close`; new
/// certificates alone do not retire them, see the accept loop).
fn continue_listener(entry: &mut LiveListener, context: ListenerContext) -> bool {
    let changed = !entry.ctx.borrow().same_but_tls(&context);
    let permits = context.settings.connection_limit();
    if permits > entry.permits {
        entry.limit.add_permits(permits - entry.permits);
        entry.permits = permits;
    } else if permits < entry.permits {
        // Permits held by open connections come back and are not reissued.
        let forgotten = entry.limit.forget_permits(entry.permits - permits);
        entry.permits -= forgotten;
    }
    if changed || context.tls.is_some() {
        let _ = entry.ctx.send(Arc::new(context));
    }
    changed
}

/// A listener's socket as one worker gets it.
#[derive(Debug)]
struct WorkerSocket {
    socket: std::net::TcpListener,
    ctx: watch::Receiver<Arc<ListenerContext>>,
    retire: watch::Receiver<bool>,
    limit: Arc<Semaphore>,
    worker: usize,
    spread: Arc<Spread>,
    inbox: mpsc::UnboundedReceiver<Handoff>,
}

/// The backend connections a worker reaps, with their idle timeout.
type Reaped = Arc<std::sync::Mutex<Vec<(Arc<WorkerPools>, Duration)>>>;

/// One worker: an accept loop per listener (those a reload adds come through `commands`), and
/// the expiry of its idle backend connections, on this thread's runtime.
async fn worker(
    sockets: Vec<WorkerSocket>,
    mut commands: mpsc::UnboundedReceiver<WorkerSocket>,
    stats: Arc<WorkerStats>,
    stop: watch::Receiver<bool>,
    grace: Duration,
) -> usize {
    let mut loops = JoinSet::new();
    let reaped: Reaped = Arc::default();
    let start = |s: WorkerSocket, loops: &mut JoinSet<usize>| {
        let listener = match TcpListener::from_std(s.socket) {
            Ok(listener) => listener,
            Err(e) => {
                tracing::error!(error = %e, "cannot register a listening socket");
                return;
            }
        };
        loops.spawn(accept_loop(
            AcceptLoop {
                listener,
                ctx: s.ctx,
                retire: s.retire,
                stats: Arc::clone(&stats),
                reaped: Arc::clone(&reaped),
                limit: s.limit,
                worker: s.worker,
                spread: s.spread,
                inbox: s.inbox,
            },
            stop.clone(),
            grace,
        ));
    };
    for s in sockets {
        start(s, &mut loops);
    }
    let reaper = tokio::spawn(reap_idle(Arc::clone(&reaped), stop.clone()));
    let mut stopping = stop.clone();
    // Connections closed at `shutdown_timeout` by the loops that ended with the stop.
    let mut closed = 0;
    loop {
        if *stopping.borrow() && loops.is_empty() {
            break;
        }
        tokio::select! {
            Some(s) = commands.recv(), if !*stopping.borrow() => start(s, &mut loops),
            Some(ended) = loops.join_next() => {
                if *stopping.borrow() {
                    closed += ended.unwrap_or(0);
                }
            }
            changed = stopping.changed() => {
                if changed.is_err() && loops.is_empty() {
                    break;
                }
            }
        }
    }
    reaper.abort();
    closed
}

/// Closes idle backend connections that expired (`keepalive_timeout`) or that their backend
/// closed, wherever they are in the idle lists, until the worker stops. Runs every second, or
/// more often for a shorter `keepalive_timeout`: an idle connection lives at most about
/// `keepalive_timeout` plus that period.
async fn reap_idle(reaped: Reaped, mut stop: watch::Receiver<bool>) {
    loop {
        let (pools, shortest) = {
            let list = reaped.lock().unwrap_or_else(|p| p.into_inner());
            let shortest = list.iter().map(|(_, t)| *t).min();
            (
                list.iter().map(|(p, _)| Arc::clone(p)).collect::<Vec<_>>(),
                shortest,
            )
        };
        let period = shortest
            .unwrap_or(Duration::from_secs(1))
            .clamp(Duration::from_millis(10), Duration::from_secs(1));
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            _ = stop.changed() => return,
        }
        for backends in &pools {
            for backend in backends.all() {
                backend.reap();
            }
        }
    }
}

/// What one worker's accept loop for one listener works with.
struct AcceptLoop {
    listener: TcpListener,
    ctx: watch::Receiver<Arc<ListenerContext>>,
    retire: watch::Receiver<bool>,
    stats: Arc<WorkerStats>,
    reaped: Reaped,
    limit: Arc<Semaphore>,
    worker: usize,
    spread: Arc<Spread>,
    inbox: mpsc::UnboundedReceiver<Handoff>,
}

impl AcceptLoop {
    /// A connection this worker accepted: kept here (and counted), or handed over to a less
    /// loaded worker (`None`, as is a failed accept).
    async fn take(
        &self,
        accepted: std::io::Result<(TcpStream, SocketAddr)>,
        addr: &str,
    ) -> Option<(TcpStream, SocketAddr)> {
        let (stream, client) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if is_transient(&e) => return None,
            Err(e) => {
                // Out of file descriptors or similar: back off instead of spinning.
                tracing::error!(listen = %addr, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                return None;
            }
        };
        let to = self.spread.least_loaded(self.worker);
        if to == self.worker {
            self.spread.open[self.worker].fetch_add(1, Ordering::Relaxed);
            Some((stream, client))
        } else {
            hand_over(&self.spread, to, self.worker, stream, client)
        }
    }

    /// A connection another worker handed over (already counted here by it).
    fn take_over(
        &self,
        std: std::net::TcpStream,
        client: SocketAddr,
        addr: &str,
    ) -> Option<(TcpStream, SocketAddr)> {
        match TcpStream::from_std(std) {
            Ok(stream) => Some((stream, client)),
            Err(e) => {
                self.spread.open[self.worker].fetch_sub(1, Ordering::Relaxed);
                tracing::warn!(listen = %addr, error = %e, "cannot take a connection over");
                None
            }
        }
    }

    /// After a reload changed the listener: the worker's view of the new context. Connections
    /// opened under `current` finish their request and close, and one that gets another
    /// request serves it under the new one ([`WorkerListener::latest`]), unless only the
    /// certificates changed (their sessions are established: they go on).
    fn take_reload(&self, current: Arc<WorkerListener>) -> Arc<WorkerListener> {
        let next = self.worker_listener(Some(&current));
        if !next.ctx.same_but_tls(&current.ctx) {
            let _ = current.successor.set(Arc::clone(&next));
            current.retired.store(true, Ordering::Release);
        }
        next
    }

    /// This worker's view of the listener's context in force: its connections to the
    /// upstream's backends are kept while the upstream is the same.
    fn worker_listener(&self, previous: Option<&WorkerListener>) -> Arc<WorkerListener> {
        let ctx = self.ctx.borrow().clone();
        let connections = ctx
            .upstreams
            .iter()
            .map(|upstream| {
                // An upstream the listener already sent to keeps its connections.
                let kept = previous.and_then(|p| {
                    let i = p
                        .ctx
                        .upstreams
                        .iter()
                        .position(|u| Arc::ptr_eq(u, upstream))?;
                    p.connections.get(i).cloned()
                });
                kept.unwrap_or_else(|| {
                    let c = upstream.worker_connections();
                    self.reaped
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((Arc::clone(&c), upstream.settings().keepalive_timeout));
                    c
                })
            })
            .collect();
        Arc::new(WorkerListener {
            ctx,
            connections,
            stats: Arc::clone(&self.stats),
            retired: AtomicBool::new(false),
            successor: std::sync::OnceLock::new(),
        })
    }
}

/// Waits for a stopped listener's open connections to finish, for at most `grace`; then
/// closes those left, and says how many.
async fn drain(mut connections: JoinSet<()>, grace: Duration, addr: &str) -> usize {
    if !connections.is_empty() {
        tracing::debug!(listen = %addr, connections = connections.len(), "worker: waiting for its open connections");
    }
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, drained).await.is_err() {
        // Said once for the whole proxy ([`Proxy::run`]).
        tracing::debug!(
            listen = %addr,
            connections = connections.len(),
            "worker: closing its connections still open after shutdown_timeout"
        );
        let left = connections.len();
        connections.abort_all();
        return left;
    }
    0
}

/// Accepts on one listener until the proxy stops or the listener is retired, then drains its
/// connections; how many had to be closed at `grace`.
async fn accept_loop(mut a: AcceptLoop, mut stop: watch::Receiver<bool>, grace: Duration) -> usize {
    let mut connections = JoinSet::new();
    let addr = a
        .listener
        .local_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.to_string());
    // What this listener's connections watch: the proxy stopping, or the listener removed.
    let (conn_stop, conn_stopped) = watch::channel(false);
    let mut current = a.worker_listener(None);
    let mut retire = a.retire.clone();
    let mut ctx = a.ctx.clone();
    loop {
        let (stream, client) = tokio::select! {
            accepted = a.listener.accept() => match a.take(accepted, &addr).await {
                Some(kept) => kept,
                None => continue,
            },
            Some((std, client)) = a.inbox.recv() => match a.take_over(std, client, &addr) {
                Some(taken) => taken,
                None => continue,
            },
            changed = ctx.changed() => {
                if changed.is_err() {
                    // The listener left the configuration (its retirement follows).
                    break;
                }
                current = a.take_reload(current);
                continue;
            },
            _ = stop.changed() => break,
            _ = retire.changed() => break,
        };
        // A connection accepted after a reload was done is served by the new configuration,
        // even when the accept and the change were ready together (the select takes either).
        if matches!(ctx.has_changed(), Ok(true)) {
            let _ = ctx.borrow_and_update();
            current = a.take_reload(current);
        }
        // The permit (max_connections) is taken by the worker that will serve the
        // connection, after it has one: permits are held only by connections being served,
        // which finish on their own, so waiting for one can never wait on another worker.
        // Meanwhile this worker's accepts and hand-overs wait; the counts steer new
        // connections elsewhere.
        // Most often one is free at once: taken without the select's futures (issue 27).
        let permit = match Arc::clone(&a.limit).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => tokio::select! {
                permit = Arc::clone(&a.limit).acquire_owned() => permit.expect("the semaphore is never closed"),
                _ = stop.changed() => break,
                _ = retire.changed() => break,
            },
        };
        let _ = stream.set_nodelay(true);
        while connections.try_join_next().is_some() {}
        let worker_listener = Arc::clone(&current);
        let spread = Arc::clone(&a.spread);
        let worker = a.worker;
        let conn_stopped = conn_stopped.clone();
        connections.spawn(async move {
            let _open = Open(&spread.open[worker]);
            serve(stream, client, worker_listener, conn_stopped, permit).await;
        });
    }
    let _ = conn_stop.send(true);
    let listener = a.listener;
    drop(listener);
    close_unserved(&mut a.inbox, &a.spread.open[a.worker]);
    drain(connections, grace, &addr).await
}

/// Serves one accepted connection as its listener says: after the PROXY protocol header that
/// names its client, if the listener takes one; then HTTP or TCP.
async fn serve(
    mut stream: TcpStream,
    mut client: SocketAddr,
    listener: Arc<WorkerListener>,
    stop: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
) {
    let settings = &listener.ctx.settings;
    // One clock for all a client must send before its first request is whole — the PROXY
    // header, the TLS handshake, the HTTP/2 preface, the request head — started at the accept,
    // as nginx starts `client_header_timeout`'s: each step gets what the others left.
    let head_by = crate::io::after(settings.client_header_timeout);
    if settings.accept_proxy_protocol {
        if !settings
            .trusted_proxies
            .iter()
            .any(|net| net.contains(&client.ip().to_canonical()))
        {
            refused(settings.listen, client, "a peer not in trusted_proxies");
            return;
        }
        let within = head_by.saturating_duration_since(tokio::time::Instant::now());
        match proxy_protocol::accept(&mut stream, client, within).await {
            Ok(named) => client = named,
            Err(e) => {
                refused(settings.listen, client, &e.to_string());
                return;
            }
        }
    }
    match settings.protocol {
        Protocol::Http => dispatch::serve(stream, client, listener, stop, permit, head_by).await,
        Protocol::Tcp => tcp::serve(stream, client, listener, permit).await,
    }
}

/// Says that a connection was closed for want of a good PROXY protocol header: a warning at
/// most every 10 s with the number closed since (a load balancer left out of
/// `trusted_proxies`, or one that does not send the header, closes every connection; an
/// attacker must not flood the log), the rest at debug.
fn refused(listen: SocketAddr, peer: SocketAddr, why: &str) {
    static NEXT_WARNING: AtomicU64 = AtomicU64::new(0);
    static UNSAID: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let next = NEXT_WARNING.load(Ordering::Relaxed);
    if now >= next
        && NEXT_WARNING
            .compare_exchange(next, now + 10, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        let also = UNSAID.swap(0, Ordering::Relaxed);
        tracing::warn!(%listen, %peer, why, closed_since_last_warning = also, "connection closed: accept_proxy_protocol needs a PROXY protocol header from a peer in trusted_proxies");
    } else {
        UNSAID.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%listen, %peer, why, "connection closed (accept_proxy_protocol)");
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
