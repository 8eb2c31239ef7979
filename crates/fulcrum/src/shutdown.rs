//! The operator's stop: SIGTERM (systemd, docker, kill), SIGINT (Ctrl-C) or SIGQUIT. Every
//! long-running command — `run`, `agent`, `lab backend` — ends on the first of them, each
//! after its own drain; `run` ends at once on a second one ([`signals`]), as an operator
//! pressing Ctrl-C twice expects. SIGQUIT drains as SIGTERM does: nginx's graceful stop
//! (`nginx -s quit`), where its default action would end the process at once with a core.

use crate::LOG;

/// Resolves on the first SIGTERM, SIGINT or SIGQUIT. The handlers are installed at the call, not at
/// the first poll, so a signal that arrives before the future is awaited is not lost (nor
/// fatal: without a handler SIGTERM kills the process).
pub fn signal() -> impl Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing a SIGINT handler");
    let mut quit = signal(SignalKind::quit()).expect("installing a SIGQUIT handler");
    async move {
        tokio::select! {
            _ = term.recv() => tracing::info!(target: LOG, "SIGTERM received"),
            _ = int.recv() => tracing::info!(target: LOG, "SIGINT received"),
            _ = quit.recv() => tracing::info!(target: LOG, "SIGQUIT received"),
        }
    }
}

/// The first and the second SIGTERM, SIGINT or SIGQUIT: the first starts the graceful stop, the second
/// says not to wait for it. The handlers are installed at the call, as [`signal`]'s.
pub fn signals() -> (impl Future<Output = ()>, impl Future<Output = ()>) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing a SIGINT handler");
    let mut quit = signal(SignalKind::quit()).expect("installing a SIGQUIT handler");
    let (count, _) = tokio::sync::watch::channel(0u32);
    let counted = count.clone();
    tokio::spawn(async move {
        loop {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
                _ = quit.recv() => "SIGQUIT",
            };
            let n = *counted.borrow() + 1;
            if n == 1 {
                tracing::info!(target: LOG, "{name} received: stopping gracefully");
            } else {
                tracing::info!(target: LOG, "{name} received");
            }
            counted.send_replace(n);
        }
    });
    let reached = move |at_least: u32| {
        let mut seen = count.subscribe();
        async move {
            let _ = seen.wait_for(|&n| n >= at_least).await;
        }
    };
    (reached(1), reached(2))
}
