//! `fulcrum run`: the proxy's lifecycle, from the configuration file to the last drained
//! connection.
//!
//! 1. Start: the file read and checked as `fulcrum check` does, the open-files limit raised
//!    and the configuration fitted to it, the admin API's earlier changes applied again
//!    ([`fulcrum::state`]), and — with `--upgrade-socket` — the listening
//!    sockets taken over from the fulcrum serving there.
//! 2. Serve: the proxy's workers bound (each its own runtime); on this process's main runtime,
//!    beside them, the admin listener, the control plane (load feedback, health checks), the
//!    reloads, the signal handlers and, with `[cluster]`, the sync of the admin API's changes
//!    with the fleet through etcd ([`fleet`]).
//! 3. Change while serving: SIGHUP or `POST /api/reload` reload the file ([`reload`]); SIGUSR1
//!    reopens the access log; a new fulcrum on the upgrade socket takes the sockets over
//!    ([`upgrade`]).
//! 4. Stop: at SIGTERM, SIGINT or SIGQUIT, or once replaced, the proxy drains its connections, then
//!    the control plane stops.
//!
//! The order matters where a comment says so: every handler is installed and every socket
//! bound before anything is served, so that an early signal or a port in use stops the
//! start rather than a running proxy.

mod fleet;
mod reload;
mod upgrade;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use fulcrum::config;
use fulcrum::state::StateStore;
use proxy::handover::{Handshake, Inherited};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};

use crate::{LOG, logs, shutdown};

/// Runs the load balancer until it is stopped or replaced; 1 when the start is refused.
pub fn run(args: &crate::cli::RunArgs) -> anyhow::Result<ExitCode> {
    let (path, upgrade_socket) = (args.config.as_path(), args.upgrade_socket.as_deref());
    // The file first (quietly): its log_level and log_format start the log, below the flags.
    let loaded = config::load(path);
    let from_file = loaded.as_ref().map(|c| c.log.clone()).unwrap_or_default();
    let _logs = logs::init_with(
        args.log_level
            .or_else(|| from_file.level.and_then(logs::Level::named)),
        args.log_format
            .or_else(|| from_file.format.and_then(logs::Format::named))
            .unwrap_or_default(),
    );
    let cfg = match checked_config(path, loaded) {
        Ok(cfg) => cfg,
        Err(code) => return Ok(code),
    };
    // A fulcrum already serving on the upgrade socket hands its listening sockets over.
    let (inherited, handshake) = match upgrade::take_over(upgrade_socket) {
        Ok(taken) => taken,
        Err(code) => return Ok(code),
    };
    // The proxy runs its own worker threads; this runtime only waits for a signal.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let start = Start {
        path: path.to_owned(),
        cfg,
        inherited,
        handshake,
        upgrade_socket: upgrade_socket.map(Path::to_owned),
    };
    rt.block_on(serve(start))
}

/// The configuration to serve: read and checked (its warnings logged), and fitted to the
/// open-files limit, raised as far as it goes. `Err`: refused, the reasons on stderr, and the
/// exit status to end with.
fn checked_config(
    path: &Path,
    loaded: Result<config::Config, config::ConfigError>,
) -> Result<config::Config, ExitCode> {
    let cfg = match loaded {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("{e}");
            return Err(ExitCode::FAILURE);
        }
    };
    for w in &cfg.warnings {
        tracing::warn!(target: LOG, "{w}");
    }
    let mut cfg = cfg;
    // The backends DNS discovery finds now: the proxy starts with them.
    for w in control::discovery::resolve_at_start(&mut cfg.proxy) {
        tracing::warn!(target: LOG, "{w}");
    }
    let (limit, error) = proxy::limits::raise_open_files_limit();
    if let Some(e) = error {
        tracing::warn!(target: LOG, error = %e, "cannot raise the open files limit to the hard limit");
    }
    if let Err(e) = proxy::limits::fit_to_limit(&mut cfg.proxy, limit) {
        eprintln!("fulcrum: error: {}: {e}", path.display());
        return Err(ExitCode::FAILURE);
    }
    tracing::info!(
        target: LOG,
        open_files_limit = %limit.map_or_else(|| "unlimited".to_owned(), |l| l.to_string()),
        descriptors_needed = proxy::limits::descriptors_needed(&cfg.proxy),
        // Each listener's limit beside its address: `127.0.0.1:8080=9195,...`.
        max_connections = %cfg
            .proxy
            .listeners
            .iter()
            .map(|l| format!("{}={}", l.listen, l.connection_limit()))
            .collect::<Vec<_>>()
            .join(","),
        "file descriptors"
    );
    Ok(cfg)
}

/// What serving starts from.
struct Start {
    /// The configuration file, read again at each reload.
    path: PathBuf,
    cfg: config::Config,
    /// The listening sockets handed over by the fulcrum this one replaces (none without one).
    inherited: Inherited,
    /// The step that tells that fulcrum to stop accepting, once this one serves.
    handshake: Option<Handshake>,
    upgrade_socket: Option<PathBuf>,
}

/// Serves until SIGTERM, SIGINT or a successor's takeover, then drains and stops the control
/// plane.
async fn serve(start: Start) -> anyhow::Result<ExitCode> {
    let Start {
        path,
        mut cfg,
        mut inherited,
        handshake,
        upgrade_socket,
    } = start;
    let workers = cfg.proxy.workers;
    let admin_settings = cfg.admin.clone();
    let log_settings = cfg.log.clone();
    // Installed before anything is served: an operator's `systemctl reload` (SIGHUP) must
    // never kill the process, however early it comes.
    let hangups = signal(SignalKind::hangup()).context("installing a SIGHUP handler")?;
    // The admin API's changes made before the last stop, applied again where the file did
    // not change the same item since: in the settings the proxy starts with.
    let store = StateStore::open(cfg.state_file.clone());
    let prepared = store.prepare(&mut cfg.proxy, &cfg.written);
    store.commit(prepared);
    let proxy = proxy::Proxy::bind_inherited(cfg.proxy, &mut inherited).await?;
    let handle = proxy.handle();
    store.attach(handle.clone());
    let (reloads, reload_requests) = mpsc::channel(4);
    // How the reloads go, for /metrics.
    let reload_record = admin::Reloads::default();
    // The fleet's shared state (`[cluster]`): started before the admin listener, whose
    // /metrics shows it, and stopped with the control plane.
    let (stop_fleet, fleet_stopped) = watch::channel(false);
    let cluster = cfg.cluster.map(|c| fleet::share(c, &store, &fleet_stopped));
    // The admin listener is bound before anything is served, so a port in use stops the
    // start, as a listener's does.
    let mut admin_handover = None;
    let admin = match admin_settings.clone() {
        Some(a) => {
            let hooks = AdminHooks {
                reloads,
                reload_record: reload_record.clone(),
                cluster,
            };
            let (admin, socket) = bind_admin(a, &mut inherited, &handle, &store, hooks)?;
            admin_handover = Some(socket);
            Some(admin)
        }
        None => None,
    };
    tracing::info!(
        target: LOG,
        workers,
        version = env!("CARGO_PKG_VERSION"),
        "fulcrum started"
    );
    // The control plane (load feedback, health checks), the reloads, the forgetting of
    // departed backends' counts and the admin listener run on this runtime, beside the
    // workers.
    let (stop_control, stopped) = watch::channel(false);
    tokio::spawn(control::follow(handle.upstream_set(), stopped.clone()));
    tokio::spawn(proxy::metrics::forget_departed(
        handle.metrics(),
        handle.upstream_set(),
        stopped.clone(),
    ));
    let reloading = reload::Reloading {
        path,
        proxy: handle.clone(),
        store: store.clone(),
        admin: admin_settings,
        workers,
        log: log_settings,
        record: reload_record,
    };
    tokio::spawn(reload::reloader(
        reloading,
        hangups,
        reload_requests,
        stopped.clone(),
    ));
    reopen_logs_on_usr1(&handle, stopped.clone())?;
    // Upgrades: once serving, tell the fulcrum we replace (it drains and exits) and offer
    // our own sockets to the next one; when one takes them, stop as at SIGTERM. Without an
    // upgrade socket `handed_over` lives until this function returns: dropped, it would
    // wake `replaced`, and the proxy would stop as if replaced.
    let (handed_over, replaced) = watch::channel(false);
    if let Some(path) = upgrade_socket {
        let handover = upgrade::Handover {
            proxy: handle.clone(),
            admin: admin_handover,
            done: handed_over,
        };
        tokio::spawn(upgrade::offer(path, handshake, handover));
    }
    if let Some(admin) = admin {
        spawn_admin(admin, stopped.clone(), replaced.clone())?;
    }
    serve_until_stopped(proxy, replaced).await;
    let _ = stop_control.send(true);
    let _ = stop_fleet.send(true);
    tracing::info!(target: LOG, "fulcrum stopped");
    Ok(ExitCode::SUCCESS)
}

/// What the admin listener is connected to beside the proxy and the state store.
struct AdminHooks {
    /// Where `POST /api/reload` asks for a reload.
    reloads: mpsc::Sender<admin::ReloadReply>,
    /// How the reloads went, for /metrics.
    reload_record: admin::Reloads,
    cluster: Option<admin::ClusterView>,
}

/// The admin listener on its socket — the one handed over, or a new one — and a copy of
/// the socket for the next upgrade's handover.
fn bind_admin(
    settings: config::admin::Admin,
    inherited: &mut Inherited,
    proxy: &proxy::ProxyHandle,
    store: &StateStore,
    hooks: AdminHooks,
) -> anyhow::Result<(admin::Admin, std::net::TcpListener)> {
    let socket = match inherited.take("admin") {
        Some(socket) => socket,
        None => std::net::TcpListener::bind(settings.listen)
            .map_err(|e| admin_bind_error(settings.listen, &e))?,
    };
    let handover = socket.try_clone()?;
    let view = admin::View {
        proxy: proxy.clone(),
        reload: Some(hooks.reloads),
        balancing: Some(admin::Balancing(Arc::new(config::balancing::apply))),
        overrides: Some(Arc::new(store.clone())),
        cluster: hooks.cluster,
        reloads: hooks.reload_record,
    };
    let access = admin::Access {
        token: settings.token,
        allowed_hosts: settings.allowed_hosts,
    };
    let admin = admin::Admin::from_listener(socket, access, view)?;
    Ok((admin, handover))
}

/// Why the admin listener cannot listen, once, and what to do about it.
fn admin_bind_error(listen: std::net::SocketAddr, e: &std::io::Error) -> anyhow::Error {
    let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
        " (another process is using this address: stop it or choose another [admin] listen)"
    } else {
        ""
    };
    anyhow::anyhow!("admin listener: cannot listen on {listen}: {e}{hint}")
}

/// SIGUSR1 reopens the access log's file, as nginx's does (logrotate's postrotate), until
/// the control plane stops.
fn reopen_logs_on_usr1(
    proxy: &proxy::ProxyHandle,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut usr1 = signal(SignalKind::user_defined1()).context("installing a SIGUSR1 handler")?;
    let reopen = proxy.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = usr1.recv() => {
                    // Said once done, so that whoever waits for the line (logrotate's
                    // postrotate, a test) knows later lines go to the new file.
                    let proxy = reopen.clone();
                    match tokio::task::spawn_blocking(move || proxy.reopen_logs()).await {
                        Ok(proxy::Reopened::Done) => {
                            tracing::info!(target: LOG, "SIGUSR1 received: the access log reopened");
                        }
                        Ok(proxy::Reopened::Soon) => {
                            tracing::info!(target: LOG, "SIGUSR1 received: the access log is reopened at its writer's next flush (it was busy)");
                        }
                        Ok(proxy::Reopened::NoFile) => {
                            tracing::info!(target: LOG, "SIGUSR1 received: no access log to reopen");
                        }
                        Err(e) => tracing::error!(target: LOG, error = %e, "SIGUSR1: reopening the access log failed"),
                    }
                }
                _ = stop.changed() => return,
            }
        }
    });
    Ok(())
}

/// Serves the admin listener until the control plane stops or a successor takes over.
fn spawn_admin(
    admin: admin::Admin,
    mut stop: watch::Receiver<bool>,
    mut replaced: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    tracing::info!(target: LOG, listen = %admin.local_addr()?, "admin listener");
    tokio::spawn(admin.run(async move {
        tokio::select! {
            _ = stop.changed() => {}
            _ = replaced.changed() => {}
        }
    }));
    Ok(())
}

/// Runs the proxy until SIGTERM, SIGINT or a successor's takeover, and its drain.
async fn serve_until_stopped(proxy: proxy::Proxy, mut replaced: watch::Receiver<bool>) {
    let (signal, again) = shutdown::signals();
    // A second SIGTERM, SIGINT or SIGQUIT during the drain: stop now, without waiting for open
    // connections (the first one's graceful stop can last `shutdown_timeout`).
    tokio::spawn(async move {
        again.await;
        tracing::warn!(target: LOG, "a second stop signal: exiting now, without waiting for open connections");
        std::process::exit(1);
    });
    proxy
        .run(async move {
            tokio::select! {
                () = signal => {}
                _ = replaced.changed() => {}
            }
        })
        .await;
}
