//! Reloads while serving: on SIGHUP (`systemctl reload`) or `POST /api/reload`, one at a
//! time, the file read and checked again as `fulcrum check` does. A file with errors changes
//! nothing; a valid one is applied without dropping a request
//! ([`proxy::ProxyHandle::reload`]) with the admin API's changes applied again over it
//! ([`fulcrum::state`]: those of items the file changed since are dropped, and said), and
//! what could not be applied (`[admin]`, a listener's settings that take a restart) is said.

use std::path::{Path, PathBuf};

use fulcrum::config;
use fulcrum::state::{StateStore, Summary};
use tokio::signal::unix::Signal;
use tokio::sync::{mpsc, watch};

use crate::LOG;

/// What the reloads work on.
pub struct Reloading {
    /// The configuration file, read again at each reload.
    pub path: PathBuf,
    pub proxy: proxy::ProxyHandle,
    pub store: StateStore,
    /// The `[admin]` section the process started with (a change takes a restart).
    pub admin: Option<config::admin::Admin>,
    /// The workers running (a change takes a restart).
    pub workers: usize,
    /// The file's `log_level` and `log_format` at the start (a change takes a restart).
    pub log: config::log::Log,
    /// How the reloads went, for /metrics.
    pub record: admin::Reloads,
}

/// Reloads the configuration on SIGHUP and on `POST /api/reload`, one at a time, until the
/// proxy stops.
pub async fn reloader(
    on: Reloading,
    mut hangups: Signal,
    mut requests: mpsc::Receiver<admin::ReloadReply>,
    mut stop: watch::Receiver<bool>,
) {
    let Reloading {
        path,
        proxy,
        store,
        admin,
        workers,
        log,
        record,
    } = on;
    loop {
        let reply = tokio::select! {
            _ = hangups.recv() => {
                tracing::info!(target: LOG, "SIGHUP received: reloading the configuration");
                None
            }
            // Logged by the admin listener, with the caller's address.
            Some(reply) = requests.recv() => Some(reply),
            _ = stop.changed() => return,
        };
        let running = Running {
            admin: admin.as_ref(),
            workers,
            log: &log,
        };
        let result = reload(&path, &proxy, &store, running).await;
        record.record(result.is_ok());
        if let Some(reply) = reply {
            let _ = reply.send(result);
        }
    }
}

/// What a reload cannot change: the process's settings as it started.
#[derive(Clone, Copy)]
struct Running<'a> {
    admin: Option<&'a config::admin::Admin>,
    /// The workers serving: the listeners are sized for them until a restart.
    workers: usize,
    log: &'a config::log::Log,
}

/// One reload: the file is read and checked as `fulcrum check` does; a file with errors
/// changes nothing (its problems are logged); a valid one is applied without dropping a
/// request ([`proxy::ProxyHandle::reload`]). Returns what was done, or why nothing was.
async fn reload(
    path: &Path,
    proxy: &proxy::ProxyHandle,
    store: &StateStore,
    running: Running<'_>,
) -> Result<String, Vec<String>> {
    let mut cfg = checked_config(path, running.workers)?;
    let mut not_applied = Vec::new();
    if cfg.admin.as_ref() != running.admin {
        not_applied.push("[admin]: takes a restart".to_owned());
    }
    if cfg.state_file.as_deref() != store.path() {
        not_applied.push("state_file: takes a restart".to_owned());
    }
    if &cfg.log != running.log {
        not_applied.push("log_level, log_format: take a restart".to_owned());
    }
    // The admin API's changes, over the file's settings; kept once the proxy takes them.
    let prepared = store.prepare(&mut cfg.proxy, &cfg.written);
    match proxy.reload(cfg.proxy).await {
        Ok(done) => {
            // The control plane follows the set of upstreams (control::follow): those this
            // reload added get their loops without a word from here.
            not_applied.extend(done.not_applied.iter().cloned());
            let overrides = store.commit(prepared);
            Ok(reloaded(&done, &not_applied, &overrides))
        }
        Err(e) => {
            tracing::error!(target: LOG, error = %e, "reload refused; the running configuration stays");
            Err(vec![e.to_string()])
        }
    }
}

/// The file read, checked (its warnings logged) and fitted to the open-files limit as the
/// running `workers` use it (a new `workers` takes a restart, so the listeners' share of the
/// limit must not change with it); `Err`: why it is refused, logged.
fn checked_config(path: &Path, workers: usize) -> Result<config::Config, Vec<String>> {
    let mut cfg = match config::load(path) {
        Ok(cfg) => cfg,
        Err(e) => {
            // One event per problem: its location and message (the underlined line `fulcrum
            // check` prints under it is for a terminal, not a log).
            let problems: Vec<String> = e
                .problems
                .iter()
                .filter_map(|p| p.lines().next())
                .map(str::to_owned)
                .collect();
            for problem in &problems {
                tracing::error!(target: LOG, "{problem}");
            }
            tracing::error!(
                target: LOG,
                problems = problems.len(),
                "reload refused: {} has errors; the running configuration stays",
                path.display()
            );
            return Err(problems);
        }
    };
    for w in &cfg.warnings {
        tracing::warn!(target: LOG, "{w}");
    }
    let (limit, _) = proxy::limits::raise_open_files_limit();
    let asked = std::mem::replace(&mut cfg.proxy.workers, workers);
    let fitted = proxy::limits::fit_to_limit(&mut cfg.proxy, limit);
    cfg.proxy.workers = asked;
    if let Err(e) = fitted {
        let text = format!("{}: {e}", path.display());
        tracing::error!(target: LOG, "reload refused: {text}; the running configuration stays");
        return Err(vec![text]);
    }
    Ok(cfg)
}

/// An applied reload, logged, and the answer to whoever asked for it: what changed, in
/// words, or that nothing did.
fn reloaded(done: &proxy::Reloaded, not_applied: &[String], overrides: &Summary) -> String {
    for n in not_applied {
        tracing::warn!(target: LOG, "reload: not applied: {n}");
    }
    let addrs = |a: &[std::net::SocketAddr]| a.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let new_upstreams: Vec<String> = done
        .new_upstreams
        .iter()
        .map(|u| u.name().to_owned())
        .collect();
    let parts = [
        ("upstreams reconfigured", done.reconfigured.clone()),
        ("new upstreams", new_upstreams),
        ("removed upstreams", done.removed_upstreams.clone()),
        ("new listeners", addrs(&done.new_listeners)),
        ("changed listeners", addrs(&done.changed_listeners)),
        ("removed listeners", addrs(&done.removed_listeners)),
        ("admin API changes dropped", overrides.dropped.clone()),
    ];
    let changes: Vec<String> = parts
        .iter()
        .filter(|(_, items)| !items.is_empty())
        .map(|(what, items)| format!("{what}: {}", items.join(", ")))
        .collect();
    let mut text = if changes.is_empty() {
        "nothing changed".to_owned()
    } else {
        changes.join("; ")
    };
    // The admin API's changes applied again over the file: kept, not a change.
    if !overrides.applied.is_empty() {
        text.push_str(&format!(
            "; admin API changes kept: {}",
            overrides.applied.join(", ")
        ));
    }
    if !not_applied.is_empty() {
        text.push_str(&format!("; not applied: {}", not_applied.join("; ")));
    }
    tracing::info!(target: LOG, "configuration reloaded: {text}");
    format!("reloaded: {text}")
}
