//! The process's file descriptor limit.
//!
//! Every client connection takes a descriptor, and one more for its backend connection while
//! it is forwarded; idle backend connections kept for reuse take theirs too. The soft limit a
//! process starts with is often 1024, far below what the defaults allow, so at start-up the
//! soft limit is raised to the hard limit ([`raise_open_files_limit`]). Then
//! [`fit_to_limit`] sizes the listeners to it, as HAProxy derives its `maxconn` from the
//! limit when none is set: a listener without `max_connections` gets an equal share of what is
//! left (at most 10,000), and a configuration whose explicit values may need more descriptors
//! than the limit is refused — rather than failing under load with `EMFILE`.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

use crate::settings::{ListenerSettings, ProxySettings};

/// Descriptors kept for everything but connections: standard streams, log files, the
/// configuration being reread, the main runtime.
const RESERVE: u64 = 64;

/// Descriptors each worker's runtime holds: its epoll, its wake-up eventfd, its copy of the
/// signal pipe, and one to spare.
const PER_WORKER: u64 = 4;

/// What a configuration may need beyond its client connections and their backend
/// connections: the reserve, each worker's runtime, each listener's socket in each worker, and
/// the idle connections kept for reuse — `keepalive` to each backend in each worker, but never
/// more than the listener's client connections (idle connections are left over from requests
/// that were in flight at once).
fn fixed_need(settings: &ProxySettings) -> u64 {
    let workers = settings.workers.max(1) as u64;
    let mut needed = RESERVE + PER_WORKER * workers;
    for listener in &settings.listeners {
        needed += workers;
        // Each upstream the listener sends to (its own and its routes'), once.
        let mut names: Vec<&str> = listener.upstream.iter().map(String::as_str).collect();
        for route in &listener.routes {
            if let crate::settings::RouteAction::Upstream { upstream, .. } = &route.action
                && !names.contains(&upstream.as_str())
            {
                names.push(upstream);
            }
        }
        let idle: u64 = settings
            .upstreams
            .iter()
            .filter(|u| names.contains(&u.name.as_str()))
            .map(|u| workers * u.keepalive as u64 * u.backends.len() as u64)
            .sum();
        needed += idle.min(listener.connection_limit() as u64);
    }
    needed
}

/// Descriptors per client connection: its own, and its backend connection's.
const PER_CLIENT: u64 = 2;

/// The descriptors a configuration may need at once: per listener, its connection limit in
/// client connections each with a backend connection, and the [fixed need](fixed_need).
pub fn descriptors_needed(settings: &ProxySettings) -> u64 {
    fixed_need(settings)
        + settings
            .listeners
            .iter()
            .map(|l| PER_CLIENT * l.connection_limit() as u64)
            .sum::<u64>()
}

/// A configuration that needs more descriptors than the process may open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this configuration may need {needed} file descriptors (each listener's max_connections \
     twice, for the backend connections, plus keepalive x backends x workers), but the open \
     files limit is {limit}: raise the hard limit (LimitNOFILE= in a systemd unit, nofile in \
     /etc/security/limits.conf, ulimit -Hn) or lower max_connections or keepalive"
)]
pub struct Shortage {
    pub needed: u64,
    pub limit: u64,
}

/// Sizes every listener without `max_connections` to the open-files `limit` (`None`:
/// unlimited): an equal share of what the explicit listeners and the idle connections leave,
/// at most [`ListenerSettings::DEFAULT_MAX_CONNECTIONS`]. Refuses a configuration that may
/// need more than the limit even so.
pub fn fit_to_limit(settings: &mut ProxySettings, limit: Option<u64>) -> Result<(), Shortage> {
    let default = ListenerSettings::DEFAULT_MAX_CONNECTIONS as u64;
    let unset = settings
        .listeners
        .iter()
        .filter(|l| l.max_connections.is_none())
        .count() as u64;
    let set: u64 = settings
        .listeners
        .iter()
        .filter_map(|l| l.max_connections)
        .map(|n| PER_CLIENT * n as u64)
        .sum();
    let committed = fixed_need(settings) + set;
    let share = match limit {
        None => default,
        Some(limit) if unset == 0 => {
            return if committed > limit {
                Err(Shortage {
                    needed: committed,
                    limit,
                })
            } else {
                Ok(())
            };
        }
        Some(limit) => (limit.saturating_sub(committed) / PER_CLIENT / unset).min(default),
    };
    if share == 0 {
        return Err(Shortage {
            needed: committed + PER_CLIENT * unset,
            limit: limit.unwrap_or(u64::MAX),
        });
    }
    for l in &mut settings.listeners {
        l.max_connections.get_or_insert(share as usize);
    }
    Ok(())
}

/// Raises the soft limit on open files to the hard limit; returns the limit in force
/// afterwards (`None`: unlimited) and, if raising failed, why (the soft limit then stays).
pub fn raise_open_files_limit() -> (Option<u64>, Option<std::io::Error>) {
    let limit = getrlimit(Resource::Nofile);
    let mut error = None;
    if limit.current != limit.maximum
        && let Err(e) = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        )
    {
        error = Some(e.into());
    }
    (getrlimit(Resource::Nofile).current, error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BackendSettings, UpstreamSettings};

    /// Two workers; listeners with these `max_connections`, all sending to one upstream of 3
    /// backends with `keepalive = 10`.
    fn settings(max_connections: &[Option<usize>]) -> ProxySettings {
        let backends = (1..=3)
            .map(|p| BackendSettings::new(([127, 0, 0, 1], p).into()))
            .collect();
        let mut upstream = UpstreamSettings::new("web", balance::Algorithm::RoundRobin, backends);
        upstream.keepalive = 10;
        let listeners = max_connections
            .iter()
            .map(|&n| {
                let mut l = ListenerSettings::new(([127, 0, 0, 1], 80).into(), "web");
                l.max_connections = n;
                l
            })
            .collect();
        ProxySettings {
            workers: 2,
            listeners,
            upstreams: vec![upstream],
            access_log: None,
            shutdown_timeout: std::time::Duration::from_secs(1),
        }
    }

    /// Two workers' runtimes, then per listener: 2 listening sockets and 2 workers × 10 × 3
    /// idle connections.
    const WORKERS: u64 = 2 * PER_WORKER;
    const PER_LISTENER: u64 = 2 + 60;

    #[test]
    fn the_need_counts_clients_their_backends_and_idle_connections() {
        let s = settings(&[Some(100)]);
        assert_eq!(
            descriptors_needed(&s),
            RESERVE + WORKERS + PER_LISTENER + 200
        );
        // Idle connections never outnumber the client connections they were left by.
        let s = settings(&[Some(20)]);
        assert_eq!(descriptors_needed(&s), RESERVE + WORKERS + 2 + 20 + 40);
    }

    #[test]
    fn unset_listeners_share_what_the_limit_leaves() {
        // Plenty: the default.
        let mut s = settings(&[None, Some(100)]);
        fit_to_limit(&mut s, Some(1 << 20)).unwrap();
        assert_eq!(s.listeners[0].max_connections, Some(10_000));
        // 20,000 (as on this machine): what is left after the fixed part and 200 for the
        // explicit listener, halved.
        let mut s = settings(&[None, Some(100)]);
        fit_to_limit(&mut s, Some(20_000)).unwrap();
        let left = 20_000 - (RESERVE + WORKERS + 2 * PER_LISTENER + 200);
        assert_eq!(s.listeners[0].max_connections, Some((left / 2) as usize));
        assert_eq!(s.listeners[1].max_connections, Some(100));
        assert!(descriptors_needed(&s) <= 20_000);
        // Unlimited.
        let mut s = settings(&[None]);
        fit_to_limit(&mut s, None).unwrap();
        assert_eq!(s.listeners[0].max_connections, Some(10_000));
    }

    #[test]
    fn explicit_values_over_the_limit_are_refused() {
        let mut s = settings(&[Some(10_000)]);
        let e = fit_to_limit(&mut s, Some(1024)).unwrap_err();
        assert_eq!(
            e,
            Shortage {
                needed: RESERVE + WORKERS + PER_LISTENER + 20_000,
                limit: 1024
            }
        );
        assert!(e.to_string().contains("ulimit -Hn"), "{e}");
        // Nothing left for an unset listener.
        let mut s = settings(&[None, Some(500)]);
        assert!(fit_to_limit(&mut s, Some(1024)).is_err());
    }
}
