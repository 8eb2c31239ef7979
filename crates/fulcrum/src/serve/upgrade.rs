//! Restarts and binary upgrades without a refused connection (`--upgrade-socket`), the
//! command's side of [`proxy::handover`]: at start, the listening sockets taken over from the
//! fulcrum serving on the socket; once serving, that fulcrum told to let go, and our own
//! sockets offered to the next one — whose takeover stops this process as SIGTERM would.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use proxy::handover::{Handshake, Inherited, Offer};
use tokio::sync::watch;

use crate::LOG;

/// The sockets of the fulcrum serving on `upgrade_socket`, if one does, and the handshake that
/// tells it to let go; none without the option. `Err`: the takeover failed (the reason on
/// stderr), and the exit status to end with.
pub fn take_over(
    upgrade_socket: Option<&Path>,
) -> Result<(Inherited, Option<Handshake>), ExitCode> {
    match upgrade_socket.map(proxy::handover::take_over) {
        Some(Ok(Some((inherited, handshake)))) => {
            tracing::info!(
                target: LOG,
                sockets = inherited.len(),
                "took over the sockets of the running fulcrum"
            );
            Ok((inherited, Some(handshake)))
        }
        Some(Ok(None)) | None => Ok((Inherited::default(), None)),
        Some(Err(e)) => {
            eprintln!(
                "fulcrum: error: --upgrade-socket {}: cannot take the sockets over from the running fulcrum: {e}",
                upgrade_socket.map_or_else(String::new, |p| p.display().to_string())
            );
            Err(ExitCode::FAILURE)
        }
    }
}

/// What a successor is handed, and how this process learns that it took it.
pub struct Handover {
    /// The proxy, whose listening sockets are handed over.
    pub proxy: proxy::ProxyHandle,
    /// A copy of the admin listener's socket, when there is one.
    pub admin: Option<std::net::TcpListener>,
    /// Set once a successor took the sockets: this process then stops as at SIGTERM.
    pub done: watch::Sender<bool>,
}

/// Once serving: tells the fulcrum we replace (if any) to stop accepting, then offers our
/// sockets on `path` to the next one, on a thread of its own.
pub async fn offer(path: PathBuf, handshake: Option<Handshake>, handover: Handover) {
    if let Some(handshake) = handshake {
        // Its workers accept within milliseconds; meanwhile the kernel queues.
        tokio::time::sleep(Duration::from_millis(100)).await;
        match tokio::task::spawn_blocking(move || handshake.ready()).await {
            Ok(Ok(())) => {
                tracing::info!(target: LOG, "the previous fulcrum stopped accepting and drains")
            }
            Ok(Err(e)) => {
                tracing::error!(target: LOG, error = %e, "the previous fulcrum did not let go; both serve until it stops")
            }
            Err(e) => tracing::error!(target: LOG, error = %e, "the upgrade handshake failed"),
        }
    }
    match Offer::bind(&path) {
        Ok(offer) => {
            tracing::info!(target: LOG, path = %path.display(), "upgrade socket ready");
            let _ = std::thread::Builder::new()
                .name("fulcrum-upgrade".into())
                .spawn(move || serve_offer(&offer, handover));
        }
        // TODO: keep serving here, as the message says. Returning drops `handover.done`,
        // which the serving loop takes for a takeover, so this process stops at once (as it
        // did before the binary was split into modules; a change of behaviour, left out of
        // that restructuring).
        Err(e) => {
            tracing::error!(target: LOG, path = %path.display(), error = %e, "cannot listen on the upgrade socket; upgrades need a restart")
        }
    }
}

/// Answers on the upgrade socket until a successor takes the sockets, then says so.
fn serve_offer(offer: &Offer, handover: Handover) {
    offer.serve(&|| {
        let mut sockets = handover.proxy.sockets_for_handover();
        if let Some(admin) = handover.admin.as_ref().and_then(|a| a.try_clone().ok()) {
            sockets.push(("admin".to_owned(), admin));
        }
        sockets
    });
    tracing::info!(target: LOG, "a new fulcrum took the sockets over: stopping as at SIGTERM");
    let _ = handover.done.send(true);
}
