//! Reports that agents push to memcached (seed 001's hub: every web server writes its load
//! there, the balancer reads it): `get fulcrum/load/<backend>` on the configured memcached,
//! where `<backend>` is the backend's `addr` as configured and as `fulcrum agent --push
//! memcached://… --name <backend>` writes it. The value is the agent's JSON; a report whose
//! `ts_ms` is older than `max_age` is as good as none (the agent that wrote it has stopped).

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_memcached::{AsciiProtocol as _, Client};
use balance::weights::LoadReport;

use crate::source::{PollError, parse_load};

/// The key an agent pushes `backend`'s reports under.
pub fn key(backend: &str) -> String {
    format!("fulcrum/load/{backend}")
}

/// Reads `backend`'s report from the memcached at `server` within `timeout`; refuses one
/// older than `max_age`.
pub async fn poll(
    server: SocketAddr,
    backend: &str,
    timeout: Duration,
    max_age: Duration,
) -> Result<LoadReport, PollError> {
    let key = key(backend);
    let read = async {
        let mut client = Client::new(format!("tcp://{server}"))
            .await
            .map_err(|e| PollError(format!("cannot connect to memcached {server}: {e}")))?;
        client
            .get(&key)
            .await
            .map_err(|e| PollError(format!("memcached get {key}: {e}")))
    };
    let value = tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| PollError(format!("no answer within poll_timeout ({timeout:?})")))??;
    let data = value
        .and_then(|v| v.data)
        .ok_or_else(|| PollError(format!("no report under {key} (is the agent pushing?)")))?;
    let report = parse_load(&data)?;
    let written = timestamp_ms(&data)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    if written > now.saturating_add(max_age.as_millis() as u64) {
        return Err(PollError(format!(
            "the report under {key} is dated {}ms ahead of this host's clock: fix the clocks",
            written - now
        )));
    }
    let age = Duration::from_millis(now.saturating_sub(written));
    if age > max_age {
        return Err(PollError(format!(
            "the report under {key} is {age:?} old (more than {max_age:?}): its agent has stopped"
        )));
    }
    Ok(report)
}

/// The `ts_ms` of a report: when the agent sampled it (Unix milliseconds).
fn timestamp_ms(body: &[u8]) -> Result<u64, PollError> {
    #[derive(serde::Deserialize)]
    struct Stamp {
        ts_ms: u64,
    }
    serde_json::from_slice::<Stamp>(body)
        .map(|s| s.ts_ms)
        .map_err(|_| PollError("a pushed report needs ts_ms (Unix milliseconds)".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_timestamps() {
        assert_eq!(key("10.0.0.1:8080"), "fulcrum/load/10.0.0.1:8080");
        assert_eq!(
            timestamp_ms(br#"{"cpu":0.1,"ts_ms":1700000000000}"#).unwrap(),
            1700000000000
        );
        assert!(timestamp_ms(br#"{"cpu":0.1}"#).is_err());
    }
}
