//! The process's file descriptor limit.
//!
//! Every client connection takes a descriptor, and one more for its backend connection while
//! it is forwarded; idle backend connections kept for reuse take theirs too. The soft limit a
//! process starts with is often 1024, far below what the defaults allow (10,000 client
//! connections per listener), so at start-up the soft limit is raised to the hard limit (as
//! HAProxy does from its `maxconn`; nginx needs `worker_rlimit_nofile`), and a configuration
//! that may need more than that is refused, instead of failing under load with `EMFILE`.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

use crate::settings::ProxySettings;

/// Descriptors kept for everything but connections: the runtime's epoll and wake-up
/// descriptors per worker, standard streams, log files, the configuration being reread.
const RESERVE: u64 = 64;

/// The descriptors a configuration may need at once: per listener, `max_connections` client
/// connections each with a backend connection, and per upstream, `keepalive` idle connections
/// to each backend in each worker (for each listener sending to it), plus the listening
/// sockets and a reserve.
pub fn descriptors_needed(settings: &ProxySettings) -> u64 {
    let workers = settings.workers.max(1) as u64;
    let mut needed = RESERVE;
    for listener in &settings.listeners {
        needed += 2 * listener.max_connections as u64 + workers;
        if let Some(upstream) = settings
            .upstreams
            .iter()
            .find(|u| u.name == listener.upstream)
        {
            needed += workers * upstream.keepalive as u64 * upstream.backends.len() as u64;
        }
    }
    needed
}

/// Raises the soft limit on open files to the hard limit; returns the limit now in force
/// (`None`: unlimited).
pub fn raise_open_files_limit() -> std::io::Result<Option<u64>> {
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        )?;
    }
    Ok(getrlimit(Resource::Nofile).current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BackendSettings, ListenerSettings, UpstreamSettings};

    #[test]
    fn the_need_counts_clients_their_backends_and_idle_connections() {
        let backends = (1..=3)
            .map(|p| BackendSettings::new(([127, 0, 0, 1], p).into()))
            .collect();
        let mut upstream = UpstreamSettings::new("web", balance::Algorithm::RoundRobin, backends);
        upstream.keepalive = 10;
        let mut listener = ListenerSettings::new(([127, 0, 0, 1], 80).into(), "web");
        listener.max_connections = 100;
        let settings = ProxySettings {
            workers: 2,
            listeners: vec![listener],
            upstreams: vec![upstream],
            access_log: false,
            shutdown_timeout: std::time::Duration::from_secs(1),
        };
        // 2 × 100 clients and their backends, 2 listening sockets, 2 workers × 10 × 3 idle.
        assert_eq!(descriptors_needed(&settings), RESERVE + 200 + 2 + 60);
    }
}
