//! The operator's stop: SIGTERM (systemd, docker, kill) or SIGINT (Ctrl-C). Every long-running
//! command — `run`, `agent`, `lab backend` — ends on the first of them, each after its own
//! drain.

use crate::LOG;

/// Resolves on the first SIGTERM or SIGINT. The handlers are installed at the call, not at
/// the first poll, so a signal that arrives before the future is awaited is not lost (nor
/// fatal: without a handler SIGTERM kills the process).
pub fn signal() -> impl Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing a SIGINT handler");
    async move {
        tokio::select! {
            _ = term.recv() => tracing::info!(target: LOG, "SIGTERM received"),
            _ = int.recv() => tracing::info!(target: LOG, "SIGINT received"),
        }
    }
}
