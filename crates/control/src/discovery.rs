//! DNS discovery (`[upstream.discovery]`, and backends written with a host name): each source
//! is looked up with hickory's resolver, again at its answer's TTL clamped to
//! `[min_interval, max_interval]`, and what it finds becomes the upstream's backends of that
//! source ([`proxy::Upstream::apply_discovered`]: the same carry-over as the admin API's).
//!
//! * A: every A and AAAA address of the name, with the source's port.
//! * SRV: each record's target, resolved to its addresses (from the answer's additional
//!   section when the server put them there, else looked up), with the record's port; the
//!   record's weight is the backend's (weight 0 becomes 1: RFC 2782 gives weight-0 records "a
//!   very small chance of being selected" beside weighted ones, and 1 is the smallest weight
//!   a backend has); the records of the lowest priority value are primaries and the others
//!   backups — NGINX Plus's rule for `service=` ("Highest-priority SRV records (records with
//!   the same lowest-number priority value) are resolved as primary servers, the rest of SRV
//!   records are resolved as backup servers", ngx_http_upstream_module, `server`).
//!
//! A failed lookup (a timeout, SERVFAIL, REFUSED, NXDOMAIN, or no usable record) keeps the
//! last known set, is counted, and is retried after `min_interval`; the log says so once when
//! a source starts failing and once when it recovers, never per attempt. A source that never
//! answered leaves the upstream without its backends (503 while it has none at all).
//!
//! The loop runs once per upstream, from the moment control supervises it until it is retired,
//! not once per generation: its own changes make new generations, and the state it keeps (when
//! each source is due, whether it is failing) must outlive them. It reads the sources anew at
//! every change, so a reload that adds, changes or removes one is followed at once.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{
    ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, Record};
use proxy::{BackendSettings, DiscoveryQuery, DiscoverySettings, RecordKind};
use tokio::sync::watch;
use tokio::time::Instant;

/// The longest one lookup may take (each server asked twice, 2 s each, by [`opts`]): past it
/// the lookup counts as failed and the source is asked again after `min_interval`.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// What one good lookup found: the backends and how long the answer holds.
#[derive(Debug)]
pub struct Answer {
    pub backends: Vec<BackendSettings>,
    /// The smallest TTL of the records used (unclamped).
    pub ttl: Duration,
}

/// The resolver options for sources with these bounds: hickory's cache may hold an answer no
/// longer than the loop waits before asking again (`max_interval` for an answer, since the
/// loop waits at least `min_interval` and at most `max_interval`, and `min_interval` for a
/// negative one, after which a failed source is asked again), so every lookup the loop makes
/// reaches the server.
fn opts(min_interval: Duration, max_interval: Duration, system: bool) -> ResolverOpts {
    let mut o = ResolverOpts::default();
    o.timeout = Duration::from_secs(2);
    o.attempts = 2;
    o.positive_max_ttl = Some(max_interval);
    o.negative_max_ttl = Some(min_interval);
    o.positive_min_ttl = None;
    o.negative_min_ttl = None;
    // The hosts file is the system's, as the system's resolver reads it; servers named in
    // the configuration are asked alone.
    o.use_hosts_file = if system {
        ResolveHosts::Auto
    } else {
        ResolveHosts::Never
    };
    o
}

/// A resolver asking `servers` (UDP, TCP for a truncated answer); none: the system's
/// (`/etc/resolv.conf`).
pub fn resolver(
    servers: &[SocketAddr],
    min_interval: Duration,
    max_interval: Duration,
) -> Result<TokioResolver, String> {
    let options = opts(min_interval, max_interval, servers.is_empty());
    let mut builder = if servers.is_empty() {
        TokioResolver::builder_tokio()
            .map_err(|e| format!("cannot read the system's resolver configuration: {e}"))?
    } else {
        let name_servers = servers
            .iter()
            .map(|s| {
                let mut udp = ConnectionConfig::udp();
                udp.port = s.port();
                let mut tcp = ConnectionConfig::tcp();
                tcp.port = s.port();
                NameServerConfig::new(s.ip(), true, vec![udp, tcp])
            })
            .collect();
        TokioResolver::builder_with_config(
            ResolverConfig::from_name_servers(name_servers),
            TokioRuntimeProvider::default(),
        )
    };
    *builder.options_mut() = options;
    builder
        .build()
        .map_err(|e| format!("cannot build a resolver: {e}"))
}

/// Looks `source` up once with `resolver`: its backends, or why there are none.
pub async fn lookup(
    resolver: &TokioResolver,
    source: &DiscoverySettings,
) -> Result<Answer, String> {
    let found = tokio::time::timeout(LOOKUP_TIMEOUT, async {
        match source.query.kind {
            RecordKind::A => lookup_a(resolver, source).await,
            RecordKind::Srv => lookup_srv(resolver, source).await,
        }
    })
    .await
    .unwrap_or_else(|_| Err(format!("no answer within {LOOKUP_TIMEOUT:?}")))?;
    if found.backends.is_empty() {
        return Err("the answer has no usable record".to_owned());
    }
    Ok(found)
}

/// The smallest TTL of `records`, or `None` if there are none.
fn min_ttl<'a>(records: impl Iterator<Item = &'a Record>) -> Option<Duration> {
    records.map(|r| Duration::from_secs(u64::from(r.ttl))).min()
}

async fn lookup_a(resolver: &TokioResolver, source: &DiscoverySettings) -> Result<Answer, String> {
    let port = source.query.port.unwrap_or(0);
    let ips = resolver
        .lookup_ip(source.query.name.as_str())
        .await
        .map_err(|e| e.to_string())?;
    let ttl = min_ttl(ips.as_lookup().answers().iter()).unwrap_or(source.min_interval);
    let backends = ips
        .iter()
        .map(|ip| source.backend(SocketAddr::new(ip, port)))
        .collect();
    Ok(Answer { backends, ttl })
}

async fn lookup_srv(
    resolver: &TokioResolver,
    source: &DiscoverySettings,
) -> Result<Answer, String> {
    let srv = resolver
        .srv_lookup(source.query.name.as_str())
        .await
        .map_err(|e| e.to_string())?;
    let mut ttl = min_ttl(srv.answers().iter()).unwrap_or(source.min_interval);
    let records: Vec<_> = srv
        .answers()
        .iter()
        .filter_map(|r| match &r.data {
            // A target of "." says the service is not offered there (RFC 2782).
            RData::SRV(s) if !s.target.is_root() => Some(s.clone()),
            _ => None,
        })
        .collect();
    let Some(primary) = records.iter().map(|s| s.priority).min() else {
        return Err("no SRV record with a target".to_owned());
    };
    let mut backends = Vec::new();
    for s in &records {
        // The target's addresses from the additional section, when the server sent them.
        let mut ips: Vec<IpAddr> = srv
            .additionals()
            .iter()
            .filter(|r| r.name == s.target)
            .filter_map(|r| r.data.ip_addr())
            .collect();
        if ips.is_empty() {
            match resolver.lookup_ip(s.target.clone()).await {
                Ok(found) => {
                    if let Some(t) = min_ttl(found.as_lookup().answers().iter()) {
                        ttl = ttl.min(t);
                    }
                    ips = found.iter().collect();
                }
                // A target that does not resolve fails the whole lookup, so the last known
                // set stays: applying the rest would take that target's backends out on a
                // DNS hiccup (a resolver that drops the additional section, a SERVFAIL).
                Err(e) => {
                    return Err(format!("the SRV target {} does not resolve: {e}", s.target));
                }
            }
        }
        for ip in ips {
            let mut b = source.backend(SocketAddr::new(ip, s.port));
            b.weight = u32::from(s.weight).max(1);
            b.backup = s.priority != primary;
            backends.push(b);
        }
    }
    Ok(Answer { backends, ttl })
}

/// The wait before asking again: the TTL within the source's bounds.
fn next_wait(source: &DiscoverySettings, ttl: Duration) -> Duration {
    ttl.clamp(source.min_interval, source.max_interval)
}

/// One source followed by the loop.
struct Followed {
    settings: DiscoverySettings,
    due: Instant,
    /// Since when its lookups fail, if they do (logged once, then once at recovery).
    failing: Option<Instant>,
}

/// Resolvers by their servers and bounds (one per distinct list and bounds).
type Resolvers = HashMap<(Vec<SocketAddr>, Duration, Duration), TokioResolver>;

/// Follows `upstream`'s discovery sources until `stop` turns true or the upstream is retired.
pub async fn run(upstream: Arc<proxy::Upstream>, mut stop: watch::Receiver<bool>) {
    let mut changes = upstream.changes();
    let mut followed: Vec<Followed> = Vec::new();
    let mut resolvers: Resolvers = HashMap::new();
    loop {
        reconcile(&upstream, &mut followed, &mut resolvers);
        let now = Instant::now();
        for f in followed.iter_mut().filter(|f| f.due <= now) {
            round(&upstream, f, &mut resolvers).await;
        }
        let next = followed.iter().map(|f| f.due).min();
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep => {}
            _ = stop.changed() => return,
            changed = changes.changed() => {
                if changed.is_err() || changes.borrow_and_update().1 {
                    return;
                }
            }
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// Brings `followed` in line with the upstream's sources: a new or changed source is due at
/// once, one that went is dropped.
fn reconcile(upstream: &proxy::Upstream, followed: &mut Vec<Followed>, resolvers: &mut Resolvers) {
    let sources = upstream.settings().discovery.clone();
    followed.retain(|f| sources.contains(&f.settings));
    for s in sources {
        if !followed.iter().any(|f| f.settings == s) {
            followed.push(Followed {
                settings: s,
                due: Instant::now(),
                failing: None,
            });
        }
    }
    resolvers.retain(|key, _| {
        followed.iter().any(|f| {
            (
                &f.settings.resolvers,
                f.settings.min_interval,
                f.settings.max_interval,
            ) == (&key.0, key.1, key.2)
        })
    });
}

/// Looks one source up and applies what it found; sets when it is due again.
async fn round(upstream: &proxy::Upstream, f: &mut Followed, resolvers: &mut Resolvers) {
    let s = &f.settings;
    let key = (s.resolvers.clone(), s.min_interval, s.max_interval);
    let result = match resolvers.get(&key) {
        Some(r) => lookup(r, s).await,
        None => match resolver(&s.resolvers, s.min_interval, s.max_interval) {
            Ok(r) => {
                let found = lookup(&r, s).await;
                resolvers.insert(key, r);
                found
            }
            Err(e) => Err(e),
        },
    };
    let name = upstream.name();
    match result {
        Ok(answer) => {
            if let Some(since) = f.failing.take() {
                tracing::info!(upstream = %name, source = %s.query, failed_for = ?since.elapsed(), "DNS discovery answers again");
            }
            f.due = Instant::now() + next_wait(s, answer.ttl);
            let found = answer.backends.len();
            if let Some(done) = upstream.apply_discovered(&s.query, answer.backends) {
                tracing::info!(upstream = %name, source = %s.query, found, added = ?done.added, removed = ?done.removed, "DNS discovery changed the backends");
            }
        }
        Err(why) => {
            upstream.note_lookup_failed(&s.query);
            if f.failing.is_none() {
                f.failing = Some(Instant::now());
                tracing::warn!(upstream = %name, source = %s.query, error = %why, "DNS discovery lookup failed; keeping the last known backends and asking again every {:?}", s.min_interval);
            }
            f.due = Instant::now() + s.min_interval;
        }
    }
}

/// Looks every source of `settings` up once, before serving starts (and for `fulcrum check`):
/// their backends join the settings, so that the proxy starts with them. Returns a warning for
/// each source that does not resolve now — not an error: it starts without those backends and
/// the loop keeps asking (NGINX Plus's `resolve` starts the same way).
pub fn resolve_at_start(settings: &mut proxy::ProxySettings) -> Vec<String> {
    let sources: Vec<(usize, DiscoverySettings)> = settings
        .upstreams
        .iter()
        .enumerate()
        .flat_map(|(i, u)| u.discovery.iter().map(move |d| (i, d.clone())))
        .collect();
    if sources.is_empty() {
        return Vec::new();
    }
    // Its own thread and runtime: callable whether or not a runtime runs on this thread.
    let answers = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        // Every source at once: start waits for the slowest (at most LOOKUP_TIMEOUT), not
        // for their sum.
        Ok::<_, String>(rt.block_on(async {
            let mut lookups = tokio::task::JoinSet::new();
            for (n, (i, s)) in sources.into_iter().enumerate() {
                lookups.spawn(async move {
                    let found = match resolver(&s.resolvers, s.min_interval, s.max_interval) {
                        Ok(r) => lookup(&r, &s).await,
                        Err(e) => Err(e),
                    };
                    (n, i, s, found)
                });
            }
            let mut out = Vec::new();
            while let Some(done) = lookups.join_next().await {
                if let Ok(answer) = done {
                    out.push(answer);
                }
            }
            // In the configuration's order, whatever order they answered in.
            out.sort_by_key(|a| a.0);
            out.into_iter()
                .map(|(_, i, s, found)| (i, s, found))
                .collect::<Vec<_>>()
        }))
    })
    .join();
    let answers = match answers {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return vec![format!("DNS discovery could not run before start: {e}")],
        Err(_) => return vec!["DNS discovery could not run before start".to_owned()],
    };
    let mut warnings = Vec::new();
    for (i, s, found) in answers {
        let Some(u) = settings.upstreams.get_mut(i) else {
            continue;
        };
        match found {
            Ok(answer) => add_found(u, &s.query, answer.backends),
            Err(why) => warnings.push(format!(
                "upstream \"{}\": {} does not resolve now ({why}); fulcrum starts without its backends and asks again every {:?} until it does",
                u.name,
                describe(&s),
                s.min_interval,
            )),
        }
    }
    warnings
}

/// The source as an operator wrote it.
fn describe(s: &DiscoverySettings) -> String {
    let servers = if s.resolvers.is_empty() {
        "the system's resolvers".to_owned()
    } else {
        let list: Vec<String> = s.resolvers.iter().map(ToString::to_string).collect();
        list.join(", ")
    };
    match s.query.kind {
        RecordKind::A => format!(
            "the name {} (A/AAAA, port {}, asked of {servers})",
            s.query.name,
            s.query.port.unwrap_or(0)
        ),
        RecordKind::Srv => format!("the SRV name {} (asked of {servers})", s.query.name),
    }
}

/// Adds what `query` found to `u`'s backends, but for addresses it already has.
fn add_found(
    u: &mut proxy::UpstreamSettings,
    query: &DiscoveryQuery,
    mut found: Vec<BackendSettings>,
) {
    found.retain(|b| !u.backends.iter().any(|o| o.addr == b.addr));
    u.fit_to_ring(query, &mut found);
    for b in found {
        if !u.backends.iter().any(|o| o.addr == b.addr) {
            debug_assert_eq!(b.discovered.as_ref(), Some(query));
            u.backends.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(min: u64, max: u64) -> DiscoverySettings {
        DiscoverySettings {
            query: DiscoveryQuery {
                kind: RecordKind::A,
                name: "app.test".into(),
                port: Some(80),
            },
            resolvers: Vec::new(),
            min_interval: Duration::from_secs(min),
            max_interval: Duration::from_secs(max),
            template: BackendSettings::new(SocketAddr::from(([0, 0, 0, 0], 0))),
        }
    }

    #[test]
    fn the_ttl_is_clamped_to_the_intervals() {
        let s = source(2, 30);
        assert_eq!(next_wait(&s, Duration::ZERO), Duration::from_secs(2));
        assert_eq!(
            next_wait(&s, Duration::from_secs(10)),
            Duration::from_secs(10)
        );
        assert_eq!(
            next_wait(&s, Duration::from_secs(3600)),
            Duration::from_secs(30)
        );
    }

    /// What the start-up lookup adds: addresses the upstream has not got, their weights fitted
    /// to a ketama ring as a later answer's would be.
    #[test]
    fn what_start_finds_joins_once_and_fits_a_ring() {
        let s = source(1, 60);
        let mut u = proxy::UpstreamSettings::new(
            "d",
            balance::Algorithm::BoundedLoad,
            vec![BackendSettings::new(SocketAddr::from(([10, 0, 0, 1], 80)))],
        );
        let found: Vec<BackendSettings> = (1..=3)
            .map(|i| {
                let mut b = s.backend(SocketAddr::from(([10, 0, 0, i], 80)));
                b.weight = 65535;
                b
            })
            .collect();
        add_found(&mut u, &s.query, found);
        let weights: Vec<u32> = u.backends.iter().map(|b| b.weight).collect();
        assert_eq!(
            weights,
            vec![1, 4999, 4999],
            "the static one stays; the rest fit"
        );
    }

    #[test]
    fn the_cache_holds_nothing_longer_than_the_loop_waits() {
        let o = opts(Duration::from_secs(1), Duration::from_secs(60), false);
        assert_eq!(o.positive_max_ttl, Some(Duration::from_secs(60)));
        assert_eq!(o.negative_max_ttl, Some(Duration::from_secs(1)));
        assert_eq!(o.use_hosts_file, ResolveHosts::Never);
    }
}
