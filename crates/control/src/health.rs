//! Active health checks for one upstream (`[upstream.health_check]`), run from one place for
//! all workers.
//!
//! Every `interval`, every backend is checked at once, each within `timeout`: `type = "http"`
//! sends `GET path` and passes when the status is within `expect`; `type = "tcp"` passes when
//! a connection can be made. As HAProxy: `fall` failed checks in a row take a backend out,
//! `rise` passed checks in a row bring it back; a backend starts in, so a restart does not
//! empty the pool. Active and passive health combine: either takes a backend out (the pool's
//! `max_fails` window still applies while checks pass), and one the checks bring back enters
//! its slow start, if it has one. Each change is logged once. An upstream with `tls = true` is
//! checked over TLS, its backends verified as requests' connections verify them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use balance::BackendId;
use proxy::upstream_tls::BackendTls;
use proxy::{BackendProtocol, CheckKind, HealthCheckSettings, Upstream};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::source;

/// One backend's run of results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Streak {
    healthy: bool,
    /// Checks in a row that disagree with `healthy`.
    against: u32,
}

impl Streak {
    /// Records one check; returns the new state when it flips.
    fn record(&mut self, passed: bool, rise: u32, fall: u32) -> Option<bool> {
        if passed == self.healthy {
            self.against = 0;
            return None;
        }
        self.against += 1;
        let needed = if self.healthy { fall } else { rise };
        if self.against < needed {
            return None;
        }
        self.healthy = passed;
        self.against = 0;
        Some(passed)
    }
}

/// One check of the backend at `addr`: `Ok` when it passes, else why not.
pub async fn check(
    addr: SocketAddr,
    written: &str,
    settings: &HealthCheckSettings,
    tls: Option<&BackendTls>,
    protocol: BackendProtocol,
) -> Result<(), String> {
    let attempt = async {
        match (&settings.kind, tls) {
            (CheckKind::Tcp, None) => TcpStream::connect(addr)
                .await
                .map(drop)
                .map_err(|e| format!("cannot connect: {e}")),
            // Over TLS a connection is made only by a handshake that verifies the backend (as
            // HAProxy's `check-ssl`): one with a bad certificate is not healthy.
            (CheckKind::Tcp, Some(tls)) => tls
                .connect(addr, written)
                .await
                .map(drop)
                .map_err(|e| format!("TLS: {e}")),
            // An upstream spoken to in HTTP/2 is checked in HTTP/2: its backends may speak
            // nothing else.
            (CheckKind::Http { path, .. }, tls) if protocol == BackendProtocol::H2 => {
                let status = proxy::upstream_h2::check_get(addr, written, path, tls).await?;
                passes(status, settings)
            }
            (CheckKind::Http { path, .. }, tls) => {
                let (status, _) = match tls {
                    None => source::get(addr, path, 0).await,
                    Some(tls) => {
                        let stream = tls
                            .connect(addr, written)
                            .await
                            .map_err(|e| format!("TLS: {e}"))?;
                        source::get_on(stream, written, path, 0).await
                    }
                }
                .map_err(|e| e.0)?;
                passes(status, settings)
            }
        }
    };
    match tokio::time::timeout(settings.timeout, attempt).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {:?}", settings.timeout)),
    }
}

/// Whether an HTTP check's answer `status` is within `expect`.
fn passes(status: http::StatusCode, settings: &HealthCheckSettings) -> Result<(), String> {
    let CheckKind::Http { path, expect } = &settings.kind else {
        return Ok(());
    };
    let code = status.as_u16();
    if (expect.0..=expect.1).contains(&code) {
        Ok(())
    } else {
        Err(format!(
            "GET {path} answered {status}, not within {}-{}",
            expect.0, expect.1
        ))
    }
}

/// Runs `upstream`'s health checks until `stop` turns true (returns at once without
/// `[upstream.health_check]`).
pub async fn run(upstream: Arc<Upstream>, stop: watch::Receiver<bool>) {
    let Some(settings) = upstream.settings().health_check.clone() else {
        return;
    };
    // Backends configured `down` are never in rotation: not checked.
    let (generation, order) = upstream.backends_in_pool_order();
    let backends: Vec<(SocketAddr, String, bool)> = order
        .iter()
        .map(|b| (b.addr, b.name.clone(), b.down))
        .collect();
    let mut streaks = vec![
        Streak {
            healthy: true,
            against: 0
        };
        backends.len()
    ];
    let settings = Arc::new(settings);
    let tls = upstream.settings().tls.clone();
    let protocol = upstream.settings().backend_protocol;
    let mut rounds = crate::Rounds::new(settings.interval, stop);
    while rounds.next().await {
        let mut checks = JoinSet::new();
        for (i, (addr, written, down)) in backends.iter().enumerate() {
            if *down {
                continue;
            }
            let settings = Arc::clone(&settings);
            let (addr, written, tls) = (*addr, written.clone(), tls.clone());
            checks.spawn(async move {
                (
                    i,
                    check(addr, &written, &settings, tls.as_deref(), protocol).await,
                )
            });
        }
        let Some(results) = rounds.gather(checks, backends.len()).await else {
            return;
        };
        for (i, result) in results.into_iter().enumerate() {
            let Some(result) = result else { continue };
            let passed = result.is_ok();
            let Some(healthy) = streaks[i].record(passed, settings.rise, settings.fall) else {
                continue;
            };
            upstream.set_check_result(generation, BackendId(i as u32), healthy);
            let backend = &backends[i].1;
            match result {
                Ok(()) => tracing::info!(
                    upstream = %upstream.name(),
                    %backend,
                    rise = settings.rise,
                    "backend passed its health checks: back in rotation"
                ),
                Err(why) => tracing::warn!(
                    upstream = %upstream.name(),
                    %backend,
                    error = %why,
                    fall = settings.fall,
                    "backend failed its health checks: out of rotation"
                ),
            }
        }
    }
}

/// The longest a backend can keep failing before it is taken out: `fall` checks, one
/// `interval` apart, the last taking up to `timeout`.
pub fn detection_bound(settings: &HealthCheckSettings) -> Duration {
    settings.interval * settings.fall + settings.timeout
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fall_checks_in_a_row_take_out_and_rise_bring_back() {
        let mut s = Streak {
            healthy: true,
            against: 0,
        };
        // rise 2, fall 3: two failures and a pass change nothing.
        assert_eq!(s.record(false, 2, 3), None);
        assert_eq!(s.record(false, 2, 3), None);
        assert_eq!(s.record(true, 2, 3), None);
        assert_eq!(s.record(false, 2, 3), None);
        assert_eq!(s.record(false, 2, 3), None);
        assert_eq!(s.record(false, 2, 3), Some(false));
        assert_eq!(s.record(false, 2, 3), None);
        assert_eq!(s.record(true, 2, 3), None);
        assert_eq!(s.record(true, 2, 3), Some(true));
    }
}
