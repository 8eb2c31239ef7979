//! Reports that agents push to memcached (seed 001's hub: every web server writes its load
//! there, the balancer reads it): `get fulcrum/load/<backend>` on the configured memcached,
//! where `<backend>` is the backend's `addr` as configured and as `fulcrum agent --push
//! memcached://… --name <backend>` writes it. The key and the record are the agent
//! protocol's ([`agent::protocol`]); a record whose `ts_ms` is older than `max_age` is as
//! good as none (the agent that wrote it has stopped).

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent::protocol;
use async_memcached::{AsciiProtocol as _, Client};
use balance::weights::LoadReport;

use crate::source::PollError;

/// The key an agent pushes `backend`'s reports under.
pub fn key(backend: &str) -> String {
    protocol::key(backend)
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
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    read_record(&key, &data, now, max_age)
}

/// The report in the record `data` found under `key`, if it is no older than `max_age` at
/// `now_ms` (Unix milliseconds) and not dated in the future beyond that.
pub fn read_record(
    key: &str,
    data: &[u8],
    now_ms: u64,
    max_age: Duration,
) -> Result<LoadReport, PollError> {
    let pushed = protocol::parse_pushed(data)?;
    let written = pushed.ts_ms;
    if written > now_ms.saturating_add(max_age.as_millis() as u64) {
        return Err(PollError(format!(
            "the report under {key} is dated {}ms ahead of this host's clock: fix the clocks",
            written - now_ms
        )));
    }
    let age = Duration::from_millis(now_ms.saturating_sub(written));
    if age > max_age {
        return Err(PollError(format!(
            "the report under {key} is {age:?} old (more than {max_age:?}): its agent has stopped"
        )));
    }
    Ok(pushed.report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_ages() {
        assert_eq!(key("10.0.0.1:8080"), "fulcrum/load/10.0.0.1:8080");
        let record =
            br#"{"cpu":0.1,"mem":0,"disk":0,"net":0,"container_mem":0,"ts_ms":1700000000000}"#;
        let max_age = Duration::from_secs(9);
        let read = |now| read_record("k", record, now, max_age);
        assert_eq!(read(1_700_000_000_000).unwrap().cpu, 0.1);
        assert_eq!(read(1_700_000_009_000).unwrap().cpu, 0.1);
        assert!(
            read(1_700_000_009_001)
                .unwrap_err()
                .0
                .contains("its agent has stopped")
        );
        assert!(
            read(1_699_999_990_999)
                .unwrap_err()
                .0
                .contains("ahead of this host's clock")
        );
        let e = read_record("k", br#"{"cpu":0.1}"#, 0, max_age).unwrap_err();
        assert!(e.0.starts_with("not a load report"), "{e}");
        let unstamped = br#"{"cpu":0.1,"mem":0,"disk":0,"net":0,"container_mem":0}"#;
        let e = read_record("k", unstamped, 0, max_age).unwrap_err();
        assert_eq!(e.0, "a pushed report needs ts_ms (Unix milliseconds)");
    }
}
