//! fulcrum's admin listener (`[admin]`): the JSON API an operator steers the proxy with,
//! Prometheus `/metrics`, and the live dashboard.
//!
//! It runs on the main runtime, beside the control plane, never on a worker's: a slow scrape or
//! a stuck client of the API cannot hold up a request. What it reads and changes lives in the
//! proxy's [`proxy::Upstream`]s (one lock per change, as the control plane's) and in the
//! workers' counts ([`proxy::metrics`]), summed when asked.
//!
//! # Layout
//!
//! * [`guard`]: what a request must show first — addressed to this listener, not sent by
//!   another site's page, and for a change the token and a JSON body.
//! * [`api`]: routing and the JSON API.
//! * [`metrics`]: the Prometheus exposition (text format 0.0.4), through the `prometheus`
//!   crate's data model and text encoder.
//! * [`history`]: the last 15 minutes of every backend, sampled each second, which the
//!   dashboard draws on opening (`GET /api/history`).
//!
//! Changes made through the API are not written to the configuration file: they are told to
//! [`View::overrides`] (the binary's state store), which keeps them across reloads and
//! restarts unless the file changes the same item.

pub mod api;
pub mod guard;
pub mod history;
pub mod metrics;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tracing::Instrument as _;

use proxy::ProxyHandle;

pub use guard::Access;

/// What the admin listener is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub listen: SocketAddr,
    /// Who may call: the token and the host names besides the listener's own.
    pub access: Access,
}

/// How `POST /api/reload` hears how the reload went: what was done, or why nothing was —
/// one line per problem (a configuration problem's location and message, without the
/// underlined line `fulcrum check` prints under it).
pub type ReloadReply = tokio::sync::oneshot::Sender<Result<String, Vec<String>>>;

/// What the admin listener sees of the running proxy.
#[derive(Debug, Clone)]
pub struct View {
    pub proxy: ProxyHandle,
    /// Where `POST /api/reload` asks for a reload (`None`: it answers 501).
    pub reload: Option<tokio::sync::mpsc::Sender<ReloadReply>>,
    /// How `PATCH /api/upstreams/{upstream}` reads an algorithm's options (`None`: it takes
    /// the algorithm alone, with default options).
    pub balancing: Option<Balancing>,
    /// Where the API's changes are kept beyond the running upstream (the binary's state
    /// store: across reloads and restarts, shared by a fleet); `None`: nowhere, and no value
    /// is shown as an override.
    pub overrides: Option<Arc<dyn Overrides>>,
    /// Where the fleet's shared state stands (`[cluster]`; `None`: no cluster, no metrics
    /// about it).
    pub cluster: Option<ClusterView>,
    /// How the reloads went, for `/metrics`.
    pub reloads: Reloads,
}

/// How the configuration's reloads went: whether the last one was applied, and when the
/// configuration in force was (the start, or the last reload applied). The binary's reloader
/// writes it; `/metrics` reads it.
#[derive(Debug, Clone)]
pub struct Reloads(Arc<std::sync::Mutex<(bool, f64)>>);

impl Default for Reloads {
    /// The configuration of the start, applied now.
    fn default() -> Reloads {
        Reloads(Arc::new(std::sync::Mutex::new((true, unix_now()))))
    }
}

impl Reloads {
    /// A reload was applied (`true`, now) or refused.
    pub fn record(&self, applied: bool) {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        last.0 = applied;
        if applied {
            last.1 = unix_now();
        }
    }

    /// Whether the last reload was applied, and the Unix time of the last configuration that
    /// was.
    pub fn last(&self) -> (bool, f64) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One change the API made to a running upstream, told to [`Overrides::changed`] once it
/// succeeded.
#[derive(Debug, Clone, PartialEq)]
pub enum Change<'a> {
    /// `PATCH .../backends/{addr}` with `state`.
    State {
        upstream: &'a str,
        addr: SocketAddr,
        state: proxy::AdminState,
    },
    /// `PATCH .../backends/{addr}` with `weight`.
    Weight {
        upstream: &'a str,
        addr: SocketAddr,
        weight: u32,
    },
    /// `POST .../backends`.
    Added {
        upstream: &'a str,
        addr: SocketAddr,
        weight: u32,
        backup: bool,
    },
    /// `DELETE .../backends/{addr}`.
    Removed { upstream: &'a str, addr: SocketAddr },
    /// `PATCH /api/upstreams/{upstream}`: the algorithm and its options as they were sent.
    Algorithm {
        upstream: &'a str,
        algorithm: &'a str,
        options: &'a serde_json::Map<String, serde_json::Value>,
    },
}

/// What keeps the API's changes as overrides of the configuration file, and says which
/// values are overrides (each answer's `overrides`).
pub trait Overrides: Send + Sync + std::fmt::Debug {
    /// A change the API made (after it succeeded).
    fn changed(&self, change: Change<'_>);
    /// The overrides of one backend, shown as its `overrides` (`{}`: none).
    fn backend(&self, upstream: &str, addr: SocketAddr) -> serde_json::Value;
    /// The overrides of one upstream as a whole (its algorithm, its removed backends), shown
    /// as its `overrides` (`{}`: none).
    fn upstream(&self, upstream: &str) -> serde_json::Value;
    /// Clears the overrides kept for `addr`, an address that is not a backend of `upstream`
    /// now (one DNS no longer gives); whether there were any.
    fn forget(&self, upstream: &str, addr: SocketAddr) -> bool;
    /// Why the overrides in force are not all saved (the state file's last write failed):
    /// a change just made is applied but would not survive a restart. `None`: saved, or no
    /// state file to save them in.
    fn unsaved(&self) -> Option<String> {
        None
    }
    /// How the state file's writes went, for `/metrics` (`None`: no state file).
    fn writes(&self) -> Option<StateFileWrites> {
        None
    }
}

/// How the state file's writes went, as `/metrics` shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateFileWrites {
    /// Whether the last write succeeded (true before any).
    pub last_successful: bool,
    /// Writes that failed (or could not be made) since the start.
    pub failures: u64,
}

/// The function behind [`Balancing`].
pub type CheckBalancing = dyn Fn(
        &proxy::UpstreamSettings,
        &str,
        &serde_json::Map<String, serde_json::Value>,
    ) -> Result<proxy::UpstreamSettings, String>
    + Send
    + Sync;

/// Turns an upstream's settings, an algorithm's name and its options (JSON, valued as in the
/// configuration file) into the new settings, or says what is wrong. The binary checks them
/// with its configuration code, so the API refuses what `fulcrum check` would.
#[derive(Clone)]
pub struct Balancing(pub Arc<CheckBalancing>);

impl std::fmt::Debug for Balancing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Balancing(..)")
    }
}

/// Where the sync with the fleet's etcd stands, as `/metrics` shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClusterHealth {
    /// Whether etcd answers now.
    pub connected: bool,
    /// Since etcd last answered (since the sync started, when it never did).
    pub since_contact: Duration,
    /// Local changes etcd has not acknowledged yet.
    pub pending: usize,
    /// The last revision of the fleet's records seen (0: none yet).
    pub revision: i64,
}

/// The function behind [`ClusterView`].
pub type ReadCluster = dyn Fn() -> ClusterHealth + Send + Sync;

/// Reads where the sync with the fleet's etcd stands at each scrape (the binary owns the
/// sync; this crate only shows it).
#[derive(Clone)]
pub struct ClusterView(pub Arc<ReadCluster>);

impl std::fmt::Debug for ClusterView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterView(..)")
    }
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How long open connections get to finish after shutdown begins.
const DRAIN: Duration = Duration::from_secs(2);

/// A bound admin listener.
#[derive(Debug)]
pub struct Admin {
    listener: TcpListener,
    shared: Arc<api::Shared>,
}

impl Admin {
    /// Binds `settings.listen`; an address in use is an error naming it.
    pub async fn bind(settings: Settings, view: View) -> std::io::Result<Admin> {
        let listener = TcpListener::bind(settings.listen).await.map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("admin listener: cannot listen on {}: {e}", settings.listen),
            )
        })?;
        let bound = listener.local_addr()?;
        Ok(Admin {
            listener,
            shared: Arc::new(api::Shared::new(settings.access, bound, view)),
        })
    }

    /// The same on a listening socket already bound (one handed over by the process this
    /// one replaces, see `proxy::handover`).
    pub fn from_listener(
        listener: std::net::TcpListener,
        access: Access,
        view: View,
    ) -> std::io::Result<Admin> {
        listener.set_nonblocking(true)?;
        let bound = listener.local_addr()?;
        Ok(Admin {
            listener: TcpListener::from_std(listener)?,
            shared: Arc::new(api::Shared::new(access, bound, view)),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `stop` resolves, then gives open connections [`DRAIN`] to finish. The
    /// dashboard's history is sampled meanwhile (and only then).
    pub async fn run(self, stop: impl Future<Output = ()>) {
        let sampler = tokio::spawn(history::run(
            Arc::clone(&self.shared.history),
            self.shared.view.clone(),
        ));
        // Stopped however this ends, dropped mid-way too.
        let _sampler = AbortOnDrop(sampler);
        let graceful = GracefulShutdown::new();
        tokio::pin!(stop);
        loop {
            let (stream, caller) = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "admin listener: cannot accept a connection");
                        tokio::select! {
                            () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                            () = &mut stop => break,
                        }
                    }
                },
                () = &mut stop => break,
            };
            let _ = stream.set_nodelay(true);
            // The address this connection reached: what a `Host` naming the listener by
            // address says, on a wildcard listener too.
            let Ok(local) = stream.local_addr() else {
                continue;
            };
            let shared = Arc::clone(&self.shared);
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let shared = Arc::clone(&shared);
                // Every line a call logs (a change, a refusal) names its caller. At WARN, so
                // that it is on as long as the refusals' WARN lines are (a span below the
                // filter's level would be off, and its fields missing from them).
                let span = tracing::warn_span!("admin", caller = %caller, method = %req.method(), path = %req.uri().path());
                async move { Ok::<_, Infallible>(api::handle(&shared, local, req).await) }
                    .instrument(span)
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service);
            let connection = graceful.watch(connection);
            tokio::spawn(async move {
                let _ = connection.await;
            });
        }
        drop(self.listener);
        let _ = tokio::time::timeout(DRAIN, graceful.shutdown()).await;
    }
}
