//! `fulcrum health`: the check keepalived's `vrrp_script` runs every second — exit 0 only
//! when the local fulcrum answers on its admin listener, each of its listeners accepts a
//! connection, and every upstream has at least one backend a request may go to; otherwise
//! exit 1 with one line saying why. The whole check is bounded by `--timeout`.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use tokio::time::{Instant, timeout_at};

/// What the check found wrong, in one line.
pub type Unhealthy = String;

/// Runs the check against the admin listener at `admin`: what is healthy, in one line, or
/// why not.
pub async fn check(admin: SocketAddr, within: Duration) -> Result<String, Unhealthy> {
    let deadline = Instant::now() + within;
    let answer = timeout_at(
        deadline,
        control::source::get(admin, "/api/health", 1 << 20),
    )
    .await
    .map_err(|_| format!("the admin listener {admin} did not answer within {within:?}"))?
    .map_err(|e| format!("the admin listener {admin}: {}", e.0))?;
    let (status, body) = answer;
    // 503 says an upstream has no usable backend; its body says which, as 200's does.
    if status != http::StatusCode::OK && status != http::StatusCode::SERVICE_UNAVAILABLE {
        return Err(format!("GET /api/health on {admin} answered {status}"));
    }
    let health: Value = serde_json::from_slice(&body)
        .map_err(|e| format!("GET /api/health on {admin}: not the JSON expected ({e})"))?;
    let listeners: Vec<SocketAddr> = health["listeners"]
        .as_array()
        .map(|l| l.iter().filter_map(|a| a.as_str()?.parse().ok()).collect())
        .unwrap_or_default();
    if listeners.is_empty() {
        return Err("fulcrum has no listener".to_owned());
    }
    // Each listener accepts: a connection made and closed without a request (fulcrum logs
    // nothing for it).
    for &listen in &listeners {
        match timeout_at(deadline, tokio::net::TcpStream::connect(listen)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(format!("listener {listen} does not accept: {e}")),
            Err(_) => {
                return Err(format!(
                    "listener {listen} did not accept within {within:?}"
                ));
            }
        }
    }
    let mut summary = Vec::new();
    for u in health["upstreams"].as_array().into_iter().flatten() {
        let name = u["name"].as_str().unwrap_or("?");
        let usable = u["usable"].as_u64().unwrap_or(0);
        let backends = u["backends"].as_u64().unwrap_or(0);
        if usable == 0 {
            return Err(format!(
                "upstream \"{name}\" has no usable backend ({backends} configured: down, failed, drained or disabled)"
            ));
        }
        summary.push(format!("{name} {usable}/{backends}"));
    }
    Ok(format!(
        "healthy: {} listener{} accept{}; usable backends: {}",
        listeners.len(),
        if listeners.len() == 1 { "" } else { "s" },
        if listeners.len() == 1 { "s" } else { "" },
        summary.join(", ")
    ))
}
