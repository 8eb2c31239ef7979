//! `--push memcached://HOST:PORT`: after each sample, `set` the report's JSON under
//! `fulcrum/load/<name>` (the record and key of [`crate::protocol`]) — seed 001's hub, where
//! every web server writes its load and the balancer reads them all. The entry expires after a few intervals, so a dead agent's last
//! report disappears instead of lingering as a fresh-looking figure.
//!
//! One connection, kept between samples and opened again after any failure. A push that takes
//! longer than one interval is abandoned (the next sample is due). Failures are never fatal
//! and are logged on the transition only: once when pushing starts failing, once when it works
//! again.

use std::sync::Arc;
use std::time::Duration;

use async_memcached::{AsciiProtocol as _, Client};
use tokio::sync::watch;

use crate::Published;
use crate::protocol;
use crate::shutdown::Shutdown;

/// Where and under which name to push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `HOST:PORT` of the memcached server.
    pub server: String,
    /// The backend address the report is filed under.
    pub name: String,
}

impl Target {
    /// Checks `memcached://HOST:PORT` and a name that makes a valid memcached key (no spaces
    /// or control characters, at most 250 bytes with the prefix).
    pub fn new(url: &str, name: &str) -> Result<Target, String> {
        let server = url
            .strip_prefix("memcached://")
            .ok_or_else(|| format!("{url:?}: expected memcached://HOST:PORT"))?
            .trim_end_matches('/');
        let (host, port) = server.rsplit_once(':').ok_or_else(|| {
            format!("{url:?}: expected memcached://HOST:PORT (the port is required)")
        })?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(format!("{url:?}: expected memcached://HOST:PORT"));
        }
        if !protocol::is_valid_name(name) {
            return Err(format!(
                "--name {name:?}: a backend address without spaces or control characters, at most {} bytes",
                protocol::MAX_KEY - protocol::KEY_PREFIX.len()
            ));
        }
        Ok(Target {
            server: server.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The memcached key of this agent's reports.
    pub fn key(&self) -> String {
        protocol::key(&self.name)
    }
}

/// The expiry of a pushed report: three intervals, rounded up to whole seconds (memcached's
/// unit), and at least 2 s so that a report cannot expire before the next one lands.
pub fn expiry(interval: Duration) -> i64 {
    let seconds = (interval.as_secs_f64() * 3.0).ceil();
    (seconds as i64).max(2)
}

async fn push(
    client: &mut Option<Client>,
    target: &Target,
    json: &[u8],
    ttl: i64,
) -> Result<(), String> {
    if client.is_none() {
        let dsn = format!("tcp://{}", target.server);
        *client = Some(
            Client::new(dsn)
                .await
                .map_err(|e| format!("cannot connect: {e}"))?,
        );
    }
    let c = client.as_mut().expect("connected above");
    let result = c.set(target.key(), json, Some(ttl), None).await;
    result.map_err(|e| {
        // The connection may be mid-reply: start afresh next time.
        *client = None;
        format!("set failed: {e}")
    })
}

/// Pushes every new sample until shutdown.
pub async fn run(
    target: Target,
    interval: Duration,
    mut latest: watch::Receiver<Option<Arc<Published>>>,
    mut shutdown: Shutdown,
) {
    let ttl = expiry(interval);
    let key = target.key();
    let mut client = None;
    let mut failing = false;
    loop {
        tokio::select! {
            changed = latest.changed() => if changed.is_err() { break },
            () = shutdown.wait() => break,
        }
        let Some(published) = latest.borrow_and_update().clone() else {
            continue;
        };
        let attempt =
            tokio::time::timeout(interval, push(&mut client, &target, &published.json, ttl));
        let result = tokio::select! {
            r = attempt => r.unwrap_or_else(|_| {
                client = None;
                Err(format!("no answer within {interval:?}"))
            }),
            () = shutdown.wait() => break,
        };
        match result {
            Ok(()) if failing => {
                failing = false;
                tracing::info!(server = %target.server, %key, "pushing load reports to memcached again");
            }
            Ok(()) => {}
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(server = %target.server, %key, %error, "cannot push the load report to memcached; retrying every interval");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let t = Target::new("memcached://127.0.0.1:11211", "10.0.0.1:8080").unwrap();
        assert_eq!(t.server, "127.0.0.1:11211");
        assert_eq!(t.key(), "fulcrum/load/10.0.0.1:8080");
        assert!(Target::new("memcached://[::1]:11211", "b").is_ok());
        assert!(
            Target::new("127.0.0.1:11211", "b").is_err(),
            "scheme required"
        );
        assert!(
            Target::new("memcached://host", "b").is_err(),
            "port required"
        );
        assert!(Target::new("memcached://:11211", "b").is_err());
        assert!(Target::new("memcached://h:port", "b").is_err());
        assert!(Target::new("memcached://h:1", "").is_err());
        assert!(Target::new("memcached://h:1", "a b").is_err());
        assert!(Target::new("memcached://h:1", "a\nb").is_err());
        assert!(Target::new("memcached://h:1", &"x".repeat(240)).is_err());
    }

    #[test]
    fn expiry_is_a_few_intervals() {
        assert_eq!(expiry(Duration::from_secs(1)), 3);
        assert_eq!(expiry(Duration::from_millis(100)), 2);
        assert_eq!(expiry(Duration::from_millis(1500)), 5);
        assert_eq!(expiry(Duration::from_secs(3)), 9);
    }
}
