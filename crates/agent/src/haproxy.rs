//! HAProxy's agent-check protocol (HAProxy configuration manual, §5.2 `agent-check`): HAProxy
//! connects to the agent's port every `agent-inter`, reads one ASCII line, and the agent
//! closes. A line `75%` sets the server's weight to 75% of the weight it was configured with;
//! other words (`drain`, `maint`, `down`, `up`, `ready`) change its state, which is health
//! checking's business and not a load report's, so this agent only ever sends a percentage.
//!
//! The percentage is the spare capacity of the busier of CPU and memory:
//! `round(100 × (1 − max(cpu, mem)))`, clamped to [1, 100]. HAProxy multiplies the configured
//! weight by it, so a server at 25% CPU keeps three quarters of its share. The larger of the
//! two because whichever runs out first limits the server. The floor of 1% because `0%` is
//! weight 0, which HAProxy treats as draining: a loaded server should get little new traffic,
//! but taking it out is a health check's decision (as `balance::weights::MIN_WEIGHT` holds
//! for fulcrum's own models).

use std::sync::Arc;
use std::time::Duration;

use balance::weights::LoadReport;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::Published;
use crate::shutdown::Shutdown;

/// How long one check may take, the wait for the first sample included; HAProxy's own agent
/// timeout is its `agent-inter`, 2 s by default.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// HAProxy's weight percentage for a report: see the module doc.
pub fn spare_percent(report: &LoadReport) -> u8 {
    let r = report.sanitized();
    let busy = r.cpu.max(r.mem);
    (100.0_f64 * (1.0 - busy)).round().clamp(1.0, 100.0) as u8
}

/// The line the agent sends, newline included.
pub fn line(report: &LoadReport) -> String {
    format!("{}%\n", spare_percent(report))
}

async fn check(mut stream: TcpStream, mut latest: watch::Receiver<Option<Arc<Published>>>) {
    // Before the first sample there is nothing true to say: hold the connection until there is.
    let report = match latest.wait_for(Option::is_some).await {
        Ok(published) => published.as_ref().map(|p| p.sample.report),
        Err(_) => None,
    };
    let Some(report) = report else { return };
    let text = line(&report);
    if stream.write_all(text.as_bytes()).await.is_err() || stream.shutdown().await.is_err() {
        return;
    }
    // HAProxy may send an `agent-send` string. Closing with unread bytes would answer with a
    // reset, which can discard the line before HAProxy reads it; so read until HAProxy closes.
    let mut sink = [0u8; 512];
    while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
}

/// Answers agent checks until shutdown.
pub async fn serve(
    listener: TcpListener,
    latest: watch::Receiver<Option<Arc<Published>>>,
    mut shutdown: Shutdown,
) {
    let mut checks = tokio::task::JoinSet::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot accept an agent-check connection");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                        () = shutdown.wait() => break,
                    }
                }
            },
            () = shutdown.wait() => break,
        };
        while checks.try_join_next().is_some() {}
        let latest = latest.clone();
        checks.spawn(async move {
            let _ = tokio::time::timeout(CHECK_TIMEOUT, check(stream, latest)).await;
        });
    }
    // Dropping the set ends the checks still open.
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(cpu: f64, mem: f64) -> LoadReport {
        LoadReport {
            cpu,
            mem,
            ..LoadReport::default()
        }
    }

    #[test]
    fn spare_capacity_of_the_busier_resource() {
        assert_eq!(line(&report(0.25, 0.1)), "75%\n");
        assert_eq!(line(&report(0.1, 0.6)), "40%\n");
        assert_eq!(line(&report(0.0, 0.0)), "100%\n");
        assert_eq!(line(&report(0.424, 0.0)), "58%\n");
        assert_eq!(line(&report(0.004, 0.0)), "100%\n");
    }

    #[test]
    fn never_zero_so_never_a_drain() {
        assert_eq!(line(&report(1.0, 0.0)), "1%\n");
        assert_eq!(line(&report(0.999, 0.999)), "1%\n");
        assert_eq!(
            line(&report(f64::NAN, 0.0)),
            "1%\n",
            "NaN counts as fully used"
        );
        assert_eq!(line(&report(-5.0, 0.0)), "100%\n");
    }
}
