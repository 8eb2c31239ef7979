//! HAProxy's agent-check protocol as a source (`agent_check = "host:port"`): every
//! `poll_interval` fulcrum connects to the backend's agent, reads one line, and acts on it as
//! HAProxy does (HAProxy configuration manual, `agent-check`):
//!
//! * `75%`: the backend's weight becomes 75% of its configured weight (at least 1; `0%`
//!   drains it, weight 0), and stays so until the next percentage. Above 100% is read as 100%:
//!   HAProxy lets an agent raise a weight up to 256, but here an agent must not be able to grow
//!   a consistent-hash ring beyond what the configuration was checked for;
//! * `drain`: weight 0 — no new requests, those in flight finish; `ready` ends a drain;
//! * `down`, `fail`, `stopped`, `maint`: taken out, as by a failed health check; `up` brings it
//!   back (into its slow start);
//! * other words (`maxconn:N`, free text after `#`) are ignored.
//!
//! Words may be combined (`75% up`, separated by spaces, commas or tabs). A line is at most
//! 1 KiB; an agent that does not answer within `poll_timeout`, or answers nothing usable,
//! changes nothing (logged once until it answers again).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use balance::BackendId;
use proxy::{LoadSource, Upstream};
use tokio::io::AsyncReadExt as _;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// The longest reply read.
const MAX_LINE: usize = 1024;

/// What one reply asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reply {
    /// The share of the configured weight, in percent.
    pub percent: Option<u32>,
    /// `Some(true)`: drain; `Some(false)`: ready (end a drain).
    pub drain: Option<bool>,
    /// `Some(false)`: down; `Some(true)`: up.
    pub up: Option<bool>,
}

/// Parses an agent's reply; `None` when it says nothing this protocol knows.
pub fn parse(line: &str) -> Option<Reply> {
    let line = line.split('#').next().unwrap_or("");
    let mut reply = Reply::default();
    let mut understood = false;
    for word in line
        .split([' ', ',', '\t', '\r', '\n'])
        .filter(|w| !w.is_empty())
    {
        let word = word.to_ascii_lowercase();
        if let Some(n) = word.strip_suffix('%') {
            if let Ok(p) = n.parse::<u32>() {
                reply.percent = Some(p.min(100));
                understood = true;
            }
            continue;
        }
        match word.as_str() {
            "drain" => reply.drain = Some(true),
            "ready" => reply.drain = Some(false),
            "down" | "fail" | "stopped" | "maint" => reply.up = Some(false),
            "up" => reply.up = Some(true),
            _ => continue,
        }
        understood = true;
    }
    understood.then_some(reply)
}

/// The weight a percentage gives a backend configured with `configured`: at least 1, except
/// that 0% drains (0).
pub fn scaled(percent: u32, configured: u32) -> u32 {
    if percent == 0 {
        return 0;
    }
    (u64::from(configured) * u64::from(percent.min(100)) / 100).max(1) as u32
}

/// Reads one reply from the agent at `addr` within `timeout`.
async fn ask(addr: SocketAddr, timeout: Duration) -> Result<String, String> {
    let read = async {
        let mut stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let mut buf = vec![0u8; MAX_LINE];
        let mut len = 0;
        while len < MAX_LINE && !buf[..len].contains(&b'\n') {
            match stream.read(&mut buf[len..]).await {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(e) => return Err(format!("read failed: {e}")),
            }
        }
        Ok(String::from_utf8_lossy(&buf[..len]).into_owned())
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}

/// Runs `upstream`'s agent checks until `stop` turns true (returns at once when no backend
/// has `agent_check`).
pub async fn run(upstream: Arc<Upstream>, stop: watch::Receiver<bool>) {
    let (generation, order) = upstream.backends_in_pool_order();
    let backends: Vec<(Option<SocketAddr>, String, u32)> = order
        .iter()
        .map(|b| {
            let agent = match b.load_source {
                Some(LoadSource::AgentCheck(addr)) => Some(addr),
                _ => None,
            };
            (agent, b.name.clone(), b.weight)
        })
        .collect();
    if backends.iter().all(|(agent, _, _)| agent.is_none()) {
        return;
    }
    let settings = upstream.settings();
    let (interval, timeout) = (settings.poll_interval, settings.poll_timeout);
    let mut failing = vec![false; backends.len()];
    let mut draining = vec![false; backends.len()];
    // The weight the last percentage set (the configured one until a percentage comes).
    let mut by_percent: Vec<u32> = backends.iter().map(|b| b.2).collect();
    let mut rounds = crate::Rounds::new(interval, stop);
    while rounds.next().await {
        let mut asks = JoinSet::new();
        for (i, (agent, _, _)) in backends.iter().enumerate() {
            if let Some(addr) = *agent {
                asks.spawn(async move { (i, ask(addr, timeout).await) });
            }
        }
        let Some(replies) = rounds.gather(asks, backends.len()).await else {
            return;
        };
        let mut weights = upstream.weights();
        if weights.len() != backends.len() {
            // The backends changed since the loop started: it is about to be restarted.
            continue;
        }
        let before = weights.clone();
        for (i, answer) in replies.into_iter().enumerate() {
            let Some(answer) = answer else { continue };
            let (_, name, configured) = &backends[i];
            let reply = match answer.as_deref().map(parse) {
                Ok(Some(reply)) => reply,
                other => {
                    if !failing[i] {
                        failing[i] = true;
                        let why = match other {
                            Err(e) => e.clone(),
                            _ => format!("no agent-check word in {:?}", answer.unwrap_or_default()),
                        };
                        tracing::warn!(upstream = %upstream.name(), backend = %name, error = %why, "agent check gave nothing usable; the backend keeps its state");
                    }
                    continue;
                }
            };
            failing[i] = false;
            if let Some(drain) = reply.drain {
                draining[i] = drain;
            }
            if let Some(p) = reply.percent {
                by_percent[i] = scaled(p, *configured);
            }
            weights[i] = if draining[i] { 0 } else { by_percent[i] };
            if let Some(up) = reply.up
                && upstream.set_check_result(generation, BackendId(i as u32), up)
            {
                tracing::info!(upstream = %upstream.name(), backend = %name, up, "agent check changed the backend's state");
            }
        }
        if weights != before {
            upstream.set_weights(generation, &weights);
            tracing::info!(upstream = %upstream.name(), old = ?before, new = ?weights, "weights applied from agent checks");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_as_haproxy_reads_them() {
        assert_eq!(
            parse("75%\n"),
            Some(Reply {
                percent: Some(75),
                ..Reply::default()
            })
        );
        assert_eq!(
            parse("up, 50%  # fine"),
            Some(Reply {
                percent: Some(50),
                up: Some(true),
                ..Reply::default()
            })
        );
        assert_eq!(parse("DRAIN").unwrap().drain, Some(true));
        assert_eq!(parse("maint").unwrap().up, Some(false));
        assert_eq!(parse("maxconn:30"), None);
        assert_eq!(parse("garbage"), None);
        assert_eq!(parse(""), None);
        assert_eq!(parse("-5%"), None);
    }

    #[test]
    fn weights_from_percentages() {
        assert_eq!(scaled(75, 4), 3);
        assert_eq!(scaled(1, 4), 1, "at least 1");
        assert_eq!(scaled(0, 4), 0, "0% drains");
        assert_eq!(scaled(200, 4), 4, "at most the configured weight");
        assert_eq!(parse("100000%").unwrap().percent, Some(100));
    }
}
