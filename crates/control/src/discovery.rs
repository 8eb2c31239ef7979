//! DNS discovery (`[upstream.discovery]`, and backends written with a host name): each source
//! is looked up with hickory's resolver, again at its answer's TTL clamped to
//! `[min_interval, max_interval]`, and what it finds becomes the upstream's backends of that
//! source ([`proxy::Upstream::apply_discovered`]: the same carry-over as the admin API's).
//!
//! * A: every A and AAAA address of the name, with the source's port; the two queries are
//!   asked apart, and either failing (but for "no record of this type") fails the lookup.
//! * SRV: each record's target, resolved to its addresses (from the answer's additional
//!   section when the server put them there, else looked up), with the record's port; the
//!   record's weight is the backend's (weight 0 becomes 1: RFC 2782 gives weight-0 records "a
//!   very small chance of being selected" beside weighted ones, and 1 is the smallest weight
//!   a backend has); the records of the lowest priority value are primaries and the others
//!   backups — NGINX Plus's rule for `service=` ("Highest-priority SRV records (records with
//!   the same lowest-number priority value) are resolved as primary servers, the rest of SRV
//!   records are resolved as backup servers", ngx_http_upstream_module, `server`).
//!   A record with port 0 is skipped; an address several records give is one backend
//!   ([`merge_srv`]).
//!
//! A name written with a trailing dot is absolute: the system's search list never applies to
//! it. The system's resolver is configured from `/etc/resolv.conf` as glibc reads it
//! ([`system_config`]), and `/etc/hosts` is read before it at every lookup, as glibc's
//! `hosts: files dns` does: a name the file has (as written) is answered from it alone,
//! DNS not asked ([`addresses`]). One lookup takes at most [`LOOKUP_TIMEOUT`].
//!
//! A failed lookup (a timeout, SERVFAIL, REFUSED, NXDOMAIN, or no usable record) keeps the
//! last known set, is counted, and is retried after `min_interval`; the log says so once when
//! a source starts failing and once when it recovers, never per attempt. A source that never
//! answered leaves the upstream without its backends (503 while it has none at all).
//!
//! The sources of an upstream are asked each on its own, the loop waiting for none of
//! them: a source whose server does not answer holds the others back no longer.
//!
//! The loop runs once per upstream, from the moment control supervises it until it is retired,
//! not once per generation: its own changes make new generations, and the state it keeps (when
//! each source is due, whether it is failing) must outlive them. It reads the sources anew at
//! every change, so a reload that adds, changes or removes one is followed at once.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::config::{
    ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
    ServerOrderingStrategy,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::op::Query;
use hickory_resolver::proto::rr::{Name, RData, Record, RecordType};
use hickory_resolver::{Hosts, TokioResolver};
use proxy::{BackendSettings, DiscoveryQuery, DiscoverySettings, RecordKind};
use tokio::sync::watch;
use tokio::time::Instant;

/// The bound on one lookup, whatever the resolver's options (resolv.conf's `timeout` ×
/// `attempts` may allow far longer): past it the lookup counts as failed and the source is
/// asked again after `min_interval`.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The system's hosts file, read before DNS when the system's resolver is used.
const HOSTS_FILE: &str = "/etc/hosts";

/// What one good lookup found: the backends and how long the answer holds.
#[derive(Debug)]
pub struct Answer {
    pub backends: Vec<BackendSettings>,
    /// The smallest TTL of the records used (unclamped).
    pub ttl: Duration,
    /// SRV records skipped for their port 0 (no backend listens there).
    pub port_zero: usize,
}

/// Bounds hickory's cache for sources with these bounds: it may hold an answer no longer
/// than the loop waits before asking again (`max_interval` for an answer, since the loop
/// waits at least `min_interval` and at most `max_interval`, and `min_interval` for a
/// negative one, after which a failed source is asked again), so every lookup the loop makes
/// reaches the server. The rest of `o` stays as it is.
fn bound_cache(o: &mut ResolverOpts, min_interval: Duration, max_interval: Duration) {
    o.positive_max_ttl = Some(max_interval);
    o.negative_max_ttl = Some(min_interval);
    o.positive_min_ttl = None;
    o.negative_min_ttl = None;
}

/// The resolver options for servers named in the configuration: each asked twice, 2 s
/// each, alone (no hosts file).
fn opts(min_interval: Duration, max_interval: Duration) -> ResolverOpts {
    let mut o = ResolverOpts::default();
    o.timeout = Duration::from_secs(2);
    o.attempts = 2;
    o.use_hosts_file = ResolveHosts::Never;
    bound_cache(&mut o, min_interval, max_interval);
    o
}

/// The system's resolver configuration, from the text of its `/etc/resolv.conf`: its
/// servers, search list and options (`ndots`, `timeout`, `attempts`, `rotate`, `edns0`) as
/// the system's resolver would use them; fulcrum sets only the bounds of the cache
/// ([`bound_cache`]). `use_hosts_file` stays on, and says [`lookup`] reads the hosts file
/// first: hickory's own reading of it covers only the first name of the search list.
fn system_config(
    resolv_conf: &[u8],
    min_interval: Duration,
    max_interval: Duration,
) -> Result<(ResolverConfig, ResolverOpts), String> {
    let (config, mut o) =
        hickory_resolver::system_conf::parse_resolv_conf(resolv_conf).map_err(|e| {
            format!("cannot read the system's resolver configuration (/etc/resolv.conf): {e}")
        })?;
    // hickory reads no `rotate`: glibc's round robin over the servers.
    if rotates(resolv_conf) {
        o.server_ordering_strategy = ServerOrderingStrategy::RoundRobin;
    }
    // `timeout:0` (glibc waits a second then) or `attempts:0` would make every lookup
    // fail at once: at least a second, at least one attempt.
    o.timeout = o.timeout.max(Duration::from_secs(1));
    o.attempts = o.attempts.max(1);
    o.use_hosts_file = ResolveHosts::Auto;
    bound_cache(&mut o, min_interval, max_interval);
    Ok((config, o))
}

/// Whether one of resolv.conf's `options` lines says `rotate`.
fn rotates(resolv_conf: &[u8]) -> bool {
    String::from_utf8_lossy(resolv_conf).lines().any(|l| {
        let mut words = l.split_whitespace();
        words.next() == Some("options") && words.any(|w| w == "rotate")
    })
}

/// A resolver asking `servers` (UDP, TCP for a truncated answer); none: the system's
/// (`/etc/resolv.conf`, with its search list and options).
pub fn resolver(
    servers: &[SocketAddr],
    min_interval: Duration,
    max_interval: Duration,
) -> Result<TokioResolver, String> {
    let (config, options) = if servers.is_empty() {
        let text = std::fs::read("/etc/resolv.conf").map_err(|e| {
            format!("cannot read the system's resolver configuration (/etc/resolv.conf): {e}")
        })?;
        system_config(&text, min_interval, max_interval)?
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
        (
            ResolverConfig::from_name_servers(name_servers),
            opts(min_interval, max_interval),
        )
    };
    let mut builder = TokioResolver::builder_with_config(config, TokioRuntimeProvider::default());
    *builder.options_mut() = options;
    builder
        .build()
        .map_err(|e| format!("cannot build a resolver: {e}"))
}

/// Looks `source` up once with `resolver`: its backends, or why there are none. With the
/// system's resolver (it reads the hosts file), the hosts file is read anew first.
pub async fn lookup(
    resolver: &TokioResolver,
    source: &DiscoverySettings,
) -> Result<Answer, String> {
    let hosts = if resolver.options().use_hosts_file == ResolveHosts::Never {
        None
    } else {
        Some(read_hosts(HOSTS_FILE))
    };
    lookup_with(resolver, hosts.as_ref(), source).await
}

/// The hosts file at `path`, as the system's resolver would read it now: one missing or
/// unreadable has no names (glibc's files source then leaves the name to DNS).
/// A file of a few lines, read on the runtime's thread (tokio's `fs` is not built in).
fn read_hosts(path: &str) -> Hosts {
    let mut hosts = Hosts::default();
    if let Ok(text) = std::fs::read(path) {
        // Only read errors fail the parser, and a slice gives none.
        let _ = hosts.read_hosts_conf(usable_hosts_lines(&text).as_bytes());
    }
    hosts
}

/// The lines of a hosts file whose first word is an address: hickory's parser would log a
/// warning at every lookup for each other one (an address with a scope, `fe80::1%eth0`,
/// which glibc skips too, or a stray word), and read them no differently.
fn usable_hosts_lines(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let line = line.trim_start_matches('\u{feff}');
        let first = line.split_whitespace().next();
        if first.is_some_and(|w| w.parse::<IpAddr>().is_ok()) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The addresses `hosts` gives `name` (as written; the search list never applies, a trailing
/// dot makes no difference), of both families, each once; empty when it has none.
fn from_hosts(hosts: &Hosts, name: &Name) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = Vec::new();
    for kind in [RecordType::A, RecordType::AAAA] {
        if let Some(found) = hosts.lookup_static_host(&Query::query(name.clone(), kind)) {
            for ip in found.answers().iter().filter_map(|r| r.data.ip_addr()) {
                if !ips.contains(&ip) {
                    ips.push(ip);
                }
            }
        }
    }
    ips
}

/// [`lookup`] with `hosts` read before DNS (none: DNS alone), bounded by [`LOOKUP_TIMEOUT`].
async fn lookup_with(
    resolver: &TokioResolver,
    hosts: Option<&Hosts>,
    source: &DiscoverySettings,
) -> Result<Answer, String> {
    let found = tokio::time::timeout(LOOKUP_TIMEOUT, async {
        match source.query.kind {
            RecordKind::A => lookup_a(resolver, hosts, source).await,
            RecordKind::Srv => lookup_srv(resolver, hosts, source).await,
        }
    })
    .await
    .unwrap_or_else(|_| Err(format!("no answer within {LOOKUP_TIMEOUT:?}")))?;
    if found.backends.is_empty() {
        return Err(if found.port_zero > 0 {
            format!(
                "the answer has no usable record: its {} SRV record(s) give port 0",
                found.port_zero
            )
        } else {
            "the answer has no usable record".to_owned()
        });
    }
    Ok(found)
}

/// The smallest TTL of `records`, or `None` if there are none.
fn min_ttl<'a>(records: impl Iterator<Item = &'a Record>) -> Option<Duration> {
    records.map(|r| Duration::from_secs(u64::from(r.ttl))).min()
}

/// What the query of one address family (A or AAAA) gave.
#[derive(Debug, Clone, PartialEq)]
enum Family {
    /// Addresses, and the smallest TTL of the answer's records.
    Found(Vec<IpAddr>, Option<Duration>),
    /// No record of this type (NOERROR with no answer, or NXDOMAIN).
    NoRecords,
    /// Anything else: a timeout, SERVFAIL, REFUSED...
    Failed(String),
}

/// Asks `name`'s records of type `kind` (A or AAAA).
async fn family(resolver: &TokioResolver, name: &Name, kind: RecordType) -> Family {
    match resolver.lookup(name.clone(), kind).await {
        Ok(found) => {
            let ips: Vec<IpAddr> = found
                .answers()
                .iter()
                .filter_map(|r| r.data.ip_addr())
                .collect();
            if ips.is_empty() {
                Family::NoRecords
            } else {
                Family::Found(ips, min_ttl(found.answers().iter()))
            }
        }
        Err(e) if e.is_no_records_found() => Family::NoRecords,
        Err(e) => Family::Failed(e.to_string()),
    }
}

/// The addresses of `name` from its A and AAAA queries, asked apart: a lookup one of whose
/// queries failed (but for "no record of this type") fails whole, so that a DNS hiccup on one
/// family never takes the other family's backends away; neither having a record fails too.
fn combine(name: &str, v4: Family, v6: Family) -> Result<(Vec<IpAddr>, Option<Duration>), String> {
    match (v4, v6) {
        (Family::Failed(a), Family::Failed(aaaa)) => Err(format!(
            "{name} does not resolve: its A query failed ({a}) and its AAAA query failed ({aaaa})"
        )),
        (Family::Failed(e), _) => Err(format!("{name} does not resolve: its A query failed ({e})")),
        (_, Family::Failed(e)) => Err(format!(
            "{name} does not resolve: its AAAA query failed ({e})"
        )),
        (Family::NoRecords, Family::NoRecords) => Err(format!(
            "{name} does not resolve: it has no A or AAAA record"
        )),
        (a, b) => {
            let mut ips = Vec::new();
            let mut ttl: Option<Duration> = None;
            for f in [a, b] {
                if let Family::Found(found, t) = f {
                    ips.extend(found);
                    ttl = match (ttl, t) {
                        (Some(x), Some(y)) => Some(x.min(y)),
                        (x, y) => x.or(y),
                    };
                }
            }
            Ok((ips, ttl))
        }
    }
}

/// The addresses of `name` and the smallest TTL of the records: from `hosts` when it has the
/// name (any family; held `hosts_ttl`, and DNS is not asked, as glibc's `hosts: files dns`
/// has it), else from DNS (A and AAAA, asked at once; A alone without `ipv6`, and a hosts
/// file's IPv6 addresses left out too, as nginx's `ipv6=off` has it).
async fn addresses(
    resolver: &TokioResolver,
    hosts: Option<&Hosts>,
    (hosts_ttl, ipv6): (Duration, bool),
    name: &Name,
) -> Result<(Vec<IpAddr>, Option<Duration>), String> {
    if let Some(hosts) = hosts {
        let mut ips = from_hosts(hosts, name);
        ips.retain(|ip| ipv6 || ip.is_ipv4());
        if !ips.is_empty() {
            return Ok((ips, Some(hosts_ttl)));
        }
    }
    let (v4, v6) = if ipv6 {
        tokio::join!(
            family(resolver, name, RecordType::A),
            family(resolver, name, RecordType::AAAA)
        )
    } else {
        (
            family(resolver, name, RecordType::A).await,
            Family::NoRecords,
        )
    };
    combine(&name.to_string(), v4, v6)
}

/// `text` as a DNS name: one written with a trailing dot stays absolute (fully qualified),
/// so the search list never applies to it.
fn dns_name(text: &str) -> Result<Name, String> {
    Name::from_str(text).map_err(|e| format!("\"{text}\" is not a DNS name: {e}"))
}

async fn lookup_a(
    resolver: &TokioResolver,
    hosts: Option<&Hosts>,
    source: &DiscoverySettings,
) -> Result<Answer, String> {
    let port = source.query.port.unwrap_or(0);
    let written = &source.query.name;
    // An address written as the name is that address (as getaddrinfo has it).
    let (ips, ttl) = match written.trim_end_matches('.').parse::<IpAddr>() {
        Ok(ip) => (vec![ip], None),
        Err(_) => {
            let within = (source.min_interval, source.ipv6);
            addresses(resolver, hosts, within, &dns_name(written)?).await?
        }
    };
    let backends = ips
        .into_iter()
        .map(|ip| source.backend(SocketAddr::new(ip, port)))
        .collect();
    Ok(Answer {
        backends,
        ttl: ttl.unwrap_or(source.min_interval),
        port_zero: 0,
    })
}

/// One backend an SRV answer gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SrvBackend {
    addr: SocketAddr,
    priority: u16,
    /// The record's weight (0 stays 0 here).
    weight: u32,
}

/// The SRV answer's backends with each address once, in the order they first appear: the
/// same address in several records (one target written twice, or two targets with one
/// address) takes the lowest priority value among them (its best tier: it is a primary if
/// any record makes it one), and the sum of the weights of its records of that priority —
/// RFC 2782 picks among the records of a priority in proportion to their weights, so an
/// address named by two records gets both their shares. Whatever order the server lists
/// them in, the result is the same set with the same weights and tiers.
fn merge_srv(found: Vec<SrvBackend>) -> Vec<SrvBackend> {
    let mut out: Vec<SrvBackend> = Vec::with_capacity(found.len());
    let mut at: HashMap<SocketAddr, usize> = HashMap::with_capacity(found.len());
    for f in found {
        match at.get(&f.addr) {
            None => {
                at.insert(f.addr, out.len());
                out.push(f);
            }
            Some(&i) => {
                let o = &mut out[i];
                if f.priority < o.priority {
                    *o = f;
                } else if f.priority == o.priority {
                    o.weight = o.weight.saturating_add(f.weight);
                }
            }
        }
    }
    out
}

async fn lookup_srv(
    resolver: &TokioResolver,
    hosts: Option<&Hosts>,
    source: &DiscoverySettings,
) -> Result<Answer, String> {
    let name = dns_name(&source.query.name)?;
    let srv = resolver.srv_lookup(name).await.map_err(|e| e.to_string())?;
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
    if records.is_empty() {
        return Err("no SRV record with a target".to_owned());
    }
    // A record with port 0 names no backend that can be connected to: skipped (and said).
    let port_zero = records.iter().filter(|s| s.port == 0).count();
    let mut found = Vec::new();
    for s in records.iter().filter(|s| s.port != 0) {
        // The target's addresses from the additional section, when the server sent them.
        let mut ips: Vec<IpAddr> = srv
            .additionals()
            .iter()
            .filter(|r| r.name == s.target)
            .filter_map(|r| r.data.ip_addr())
            .filter(|ip| source.ipv6 || ip.is_ipv4())
            .collect();
        if ips.is_empty() {
            // A target that does not resolve fails the whole lookup, so the last known set
            // stays: applying the rest would take that target's backends out on a DNS
            // hiccup (a resolver that drops the additional section, a SERVFAIL).
            let within = (source.min_interval, source.ipv6);
            let (found, t) = addresses(resolver, hosts, within, &s.target)
                .await
                .map_err(|e| format!("the SRV target {e}"))?;
            if let Some(t) = t {
                ttl = ttl.min(t);
            }
            ips = found;
        }
        for ip in ips {
            found.push(SrvBackend {
                addr: SocketAddr::new(ip, s.port),
                priority: s.priority,
                weight: u32::from(s.weight),
            });
        }
    }
    let found = merge_srv(found);
    let primary = found.iter().map(|f| f.priority).min();
    let backends = found
        .into_iter()
        .map(|f| {
            let mut b = source.backend(f.addr);
            b.weight = f.weight.clamp(1, proxy::MAX_WEIGHT);
            b.backup = Some(f.priority) != primary;
            b
        })
        .collect();
    Ok(Answer {
        backends,
        ttl,
        port_zero,
    })
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
    /// Whether the log said its answers have SRV records of port 0 (once, until an answer
    /// has none).
    port_zero_told: bool,
    /// Whether a lookup of it is under way.
    asking: bool,
}

/// Resolvers by their servers and bounds (one per distinct list and bounds).
type Resolvers = HashMap<(Vec<SocketAddr>, Duration, Duration), TokioResolver>;

/// Follows `upstream`'s discovery sources until `stop` turns true or the upstream is retired.
pub async fn run(upstream: Arc<proxy::Upstream>, mut stop: watch::Receiver<bool>) {
    let mut changes = upstream.changes();
    let mut followed: Vec<Followed> = Vec::new();
    let mut resolvers: Resolvers = HashMap::new();
    // Each source's lookup runs on its own, the loop waiting for none: one that does not
    // answer (up to LOOKUP_TIMEOUT) holds none of the others back. Dropped (aborted) with
    // the loop.
    let mut lookups: tokio::task::JoinSet<Result<Answer, String>> = tokio::task::JoinSet::new();
    // The source each lookup under way asks.
    let mut asked: HashMap<tokio::task::Id, DiscoverySettings> = HashMap::new();
    loop {
        reconcile(&upstream, &mut followed, &mut resolvers);
        let now = Instant::now();
        for f in followed.iter_mut().filter(|f| !f.asking && f.due <= now) {
            f.asking = true;
            let s = f.settings.clone();
            let r = resolver_for(&s, &mut resolvers);
            let task = lookups.spawn(async move {
                match r {
                    Ok(r) => lookup(&r, &s).await,
                    Err(e) => Err(e),
                }
            });
            asked.insert(task.id(), f.settings.clone());
        }
        let next = followed.iter().filter(|f| !f.asking).map(|f| f.due).min();
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep => {}
            Some(done) = lookups.join_next_with_id(), if !lookups.is_empty() => {
                let (id, found) = match done {
                    Ok((id, found)) => (id, found),
                    Err(e) => (e.id(), Err(format!("the lookup stopped: {e}"))),
                };
                // A source that went (or changed) while it was asked: its answer is dropped.
                if let Some(s) = asked.remove(&id)
                    && let Some(f) = followed.iter_mut().find(|f| f.settings == s)
                {
                    f.asking = false;
                    apply(&upstream, f, found);
                }
            }
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
                port_zero_told: false,
                asking: false,
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

/// The resolver for source `s` (one per distinct servers and bounds, kept in `resolvers`).
fn resolver_for(s: &DiscoverySettings, resolvers: &mut Resolvers) -> Result<TokioResolver, String> {
    let key = (s.resolvers.clone(), s.min_interval, s.max_interval);
    if let Some(r) = resolvers.get(&key) {
        return Ok(r.clone());
    }
    let r = resolver(&s.resolvers, s.min_interval, s.max_interval)?;
    resolvers.insert(key, r.clone());
    Ok(r)
}

/// Applies what one lookup of `f` found; sets when it is due again.
fn apply(upstream: &proxy::Upstream, f: &mut Followed, result: Result<Answer, String>) {
    let s = &f.settings;
    let name = upstream.name();
    let port_zero = match &result {
        Ok(answer) => answer.port_zero,
        Err(_) => 0,
    };
    if port_zero == 0 && result.is_ok() {
        f.port_zero_told = false;
    } else if port_zero > 0 && !f.port_zero_told {
        f.port_zero_told = true;
        tracing::warn!(upstream = %name, source = %s.query, records = port_zero, "DNS discovery skips SRV records that give port 0: no backend can be connected to there");
    }
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
            ipv6: true,
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
        let o = opts(Duration::from_secs(1), Duration::from_secs(60));
        assert_eq!(o.positive_max_ttl, Some(Duration::from_secs(60)));
        assert_eq!(o.negative_max_ttl, Some(Duration::from_secs(1)));
        assert_eq!(o.use_hosts_file, ResolveHosts::Never);
    }

    /// Kubernetes' resolv.conf: its search list and options are the resolver's, fulcrum sets
    /// the cache's bounds alone.
    const POD_RESOLV_CONF: &str = "nameserver 127.0.0.153\nsearch corp.test svc.cluster.local\noptions ndots:5 timeout:3 attempts:4 rotate\n";

    #[test]
    fn the_systems_options_are_kept_but_for_the_cache_bounds() {
        let (config, o) = system_config(
            POD_RESOLV_CONF.as_bytes(),
            Duration::from_secs(1),
            Duration::from_secs(60),
        )
        .unwrap();
        let search: Vec<String> = config.search().iter().map(ToString::to_string).collect();
        assert_eq!(search, vec!["corp.test", "svc.cluster.local"]);
        assert_eq!(o.ndots, 5);
        assert_eq!(o.timeout, Duration::from_secs(3));
        assert_eq!(o.attempts, 4);
        assert_eq!(
            o.server_ordering_strategy,
            ServerOrderingStrategy::RoundRobin
        );
        assert_eq!(o.use_hosts_file, ResolveHosts::Auto);
        assert_eq!(o.positive_max_ttl, Some(Duration::from_secs(60)));
        assert_eq!(o.negative_max_ttl, Some(Duration::from_secs(1)));
        let (_, plain) = system_config(
            b"nameserver 127.0.0.1\n",
            Duration::from_secs(1),
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(plain.ndots, 1);
        assert_ne!(
            plain.server_ordering_strategy,
            ServerOrderingStrategy::RoundRobin
        );
        assert_eq!(
            (plain.timeout, plain.attempts),
            (Duration::from_secs(5), 2),
            "glibc's defaults"
        );
        let (_, zero) = system_config(
            b"nameserver 127.0.0.1\noptions timeout:0 attempts:0\n",
            Duration::from_secs(1),
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!((zero.timeout, zero.attempts), (Duration::from_secs(1), 1));
        assert!(
            system_config(
                b"search x\n",
                Duration::from_secs(1),
                Duration::from_secs(60)
            )
            .is_err(),
            "no server"
        );
    }

    /// A DNS server on a loopback port that answers NXDOMAIN to every query and tells the
    /// names it was asked, each with its record type.
    async fn nxdomain_server() -> (
        SocketAddr,
        tokio::sync::mpsc::UnboundedReceiver<(String, String)>,
    ) {
        use hickory_resolver::proto::op::{Message, OpCode, ResponseCode};
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                let Ok(query) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                for q in &query.queries {
                    let _ = tx.send((
                        q.name().to_string().to_lowercase(),
                        q.query_type().to_string(),
                    ));
                }
                let mut answer =
                    Message::error_msg(query.metadata.id, OpCode::Query, ResponseCode::NXDomain);
                answer.add_queries(query.queries.clone());
                if let Ok(bytes) = answer.to_vec() {
                    let _ = socket.send_to(&bytes, from).await;
                }
            }
        });
        (addr, rx)
    }

    /// A resolver configured by `resolv_conf`, but that it asks `server` and reads no hosts
    /// file of its own.
    fn resolver_of(resolv_conf: &str, server: SocketAddr) -> TokioResolver {
        let (config, mut o) = system_config(
            resolv_conf.as_bytes(),
            Duration::from_secs(1),
            Duration::from_secs(60),
        )
        .unwrap();
        o.use_hosts_file = ResolveHosts::Never;
        let mut udp = ConnectionConfig::udp();
        udp.port = server.port();
        let config = ResolverConfig::from_parts(
            config.domain().cloned(),
            config.search().to_vec(),
            vec![NameServerConfig::new(server.ip(), true, vec![udp])],
        );
        let mut builder =
            TokioResolver::builder_with_config(config, TokioRuntimeProvider::default());
        *builder.options_mut() = o;
        builder.build().unwrap()
    }

    /// The names a resolver configured by `POD_RESOLV_CONF` (its server the test's) asks
    /// for when looking `name` up.
    async fn names_asked_for(name: &str) -> Vec<String> {
        let (server, mut asked) = nxdomain_server().await;
        let resolver = resolver_of(POD_RESOLV_CONF, server);
        let mut s = source(1, 60);
        s.query.name = name.to_owned();
        let found = lookup(&resolver, &s).await;
        assert!(found.is_err(), "{found:?}");
        let mut names = Vec::new();
        while let Ok((n, _)) = asked.try_recv() {
            names.push(n);
        }
        names.sort();
        names.dedup();
        names
    }

    /// A name written with a trailing dot is absolute: with Kubernetes' `ndots:5` and a
    /// search list, only the name itself is asked (an NXDOMAIN never falls through to
    /// whatever a search domain's wildcard answers); without the dot the search list applies,
    /// as getaddrinfo would apply it.
    #[tokio::test]
    async fn a_name_with_a_trailing_dot_never_goes_through_the_search_list() {
        assert_eq!(
            names_asked_for("api.fulcrum.test.").await,
            vec!["api.fulcrum.test."]
        );
        let relative = names_asked_for("app.fulcrum.test").await;
        assert!(
            relative.contains(&"app.fulcrum.test.corp.test.".to_owned())
                && relative.contains(&"app.fulcrum.test.".to_owned()),
            "{relative:?}"
        );
    }

    fn v4(ips: &[u8], ttl: u64) -> Family {
        Family::Found(
            ips.iter().map(|&i| IpAddr::from([10, 0, 0, i])).collect(),
            Some(Duration::from_secs(ttl)),
        )
    }

    /// A and AAAA are asked apart: one that fails (but for having no record) fails the
    /// lookup, so the last known set stays whole.
    #[test]
    fn a_lookup_fails_when_either_family_fails() {
        let v6 = Family::Found(
            vec![IpAddr::from([0, 0, 0, 0, 0, 0, 0, 1])],
            Some(Duration::from_secs(3)),
        );
        let servfail = || Family::Failed("error response: Server Failure".to_owned());
        let e = combine("app.test", v4(&[1], 5), servfail()).unwrap_err();
        assert!(
            e.contains("app.test") && e.contains("AAAA query failed"),
            "{e}"
        );
        let e = combine("app.test", servfail(), v6.clone()).unwrap_err();
        assert!(e.contains("its A query failed"), "{e}");
        let e = combine("app.test", servfail(), servfail()).unwrap_err();
        assert!(
            e.contains("A query failed") && e.contains("AAAA query failed"),
            "{e}"
        );
        assert_eq!(
            combine("app.test", v4(&[1, 2], 5), Family::NoRecords).unwrap(),
            (
                vec![IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2])],
                Some(Duration::from_secs(5))
            )
        );
        assert_eq!(
            combine("app.test", v4(&[1], 5), v6).unwrap(),
            (
                vec![
                    IpAddr::from([10, 0, 0, 1]),
                    IpAddr::from([0, 0, 0, 0, 0, 0, 0, 1])
                ],
                Some(Duration::from_secs(3))
            )
        );
        let e = combine("app.test", Family::NoRecords, Family::NoRecords).unwrap_err();
        assert!(e.contains("no A or AAAA record"), "{e}");
    }

    fn srv(port: u16, priority: u16, weight: u32) -> SrvBackend {
        SrvBackend {
            addr: SocketAddr::from(([127, 0, 41, 2], port)),
            priority,
            weight,
        }
    }

    /// One address in two records of an answer: the lowest priority value wins, the weights
    /// of its records at that priority add up; the server's order makes no difference.
    #[test]
    fn an_address_twice_in_an_srv_answer_is_merged_the_same_in_any_order() {
        let other = srv(9000, 1, 3);
        let one = merge_srv(vec![srv(18101, 0, 1), other, srv(18101, 1, 5)]);
        let two = merge_srv(vec![srv(18101, 1, 5), other, srv(18101, 0, 1)]);
        assert_eq!(one, vec![srv(18101, 0, 1), other]);
        assert_eq!(two, vec![srv(18101, 0, 1), other]);
        let summed = merge_srv(vec![srv(18101, 0, 2), srv(18101, 0, 5), srv(18101, 1, 9)]);
        assert_eq!(summed, vec![srv(18101, 0, 7)]);
    }

    fn hosts(text: &str) -> Hosts {
        let mut h = Hosts::default();
        h.read_hosts_conf(usable_hosts_lines(text.as_bytes()).as_bytes())
            .unwrap();
        h
    }

    fn name(text: &str) -> Name {
        dns_name(text).unwrap()
    }

    /// The hosts file as glibc's files source reads it: comments, several names on a line,
    /// both families, a scoped address skipped; the name as written, a trailing dot or not,
    /// never with a search domain.
    #[test]
    fn the_hosts_file_gives_a_name_as_written() {
        let h = hosts(
            "\u{feff}# comment\n127.0.0.11 backend.example other # trailing\n\
             fe80::1%eth0 scoped.example\nnot-an-address x.example\n\
             ::1 backend.example\n127.0.0.12 Dotted.Example\n127.0.0.11 backend.example\n",
        );
        let v4 = IpAddr::from([127, 0, 0, 11]);
        let v6 = IpAddr::from([0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(from_hosts(&h, &name("backend.example")), vec![v4, v6]);
        assert_eq!(from_hosts(&h, &name("backend.example.")), vec![v4, v6]);
        assert_eq!(from_hosts(&h, &name("other")), vec![v4]);
        assert_eq!(
            from_hosts(&h, &name("dotted.example.")),
            vec![IpAddr::from([127, 0, 0, 12])]
        );
        assert!(from_hosts(&h, &name("scoped.example")).is_empty());
        assert!(from_hosts(&h, &name("x.example")).is_empty());
        assert!(from_hosts(&h, &name("backend")).is_empty());
        assert!(from_hosts(&h, &name("backend.example.corp.test")).is_empty());
    }

    /// A name the hosts file has is answered from it, the search list and DNS never asked
    /// (Kubernetes' hostAliases under `ndots:5`), held `min_interval`; one it has not goes
    /// to DNS.
    #[tokio::test]
    async fn a_name_in_the_hosts_file_is_not_asked_of_dns() {
        let (server, mut asked) = nxdomain_server().await;
        let resolver = resolver_of(POD_RESOLV_CONF, server);
        let h = hosts("127.0.0.11 backend.example\n");
        let mut s = source(3, 60);
        s.query.name = "backend.example".to_owned();
        let found = lookup_with(&resolver, Some(&h), &s).await.unwrap();
        let addrs: Vec<SocketAddr> = found.backends.iter().map(|b| b.addr).collect();
        assert_eq!(addrs, vec![SocketAddr::from(([127, 0, 0, 11], 80))]);
        assert_eq!(found.ttl, Duration::from_secs(3));
        assert!(asked.try_recv().is_err(), "DNS was asked");
        s.query.name = "elsewhere.example".to_owned();
        let e = lookup_with(&resolver, Some(&h), &s).await.unwrap_err();
        assert!(e.contains("no A or AAAA record"), "{e}");
        assert!(asked.try_recv().is_ok(), "DNS was not asked");
    }

    /// `ipv6 = false` asks for A records alone (nginx's `resolver ... ipv6=off`), and leaves
    /// a hosts file's IPv6 addresses out; by default both families.
    #[tokio::test]
    async fn without_ipv6_only_a_records_are_asked() {
        for (ipv6, want) in [(true, vec!["A", "AAAA"]), (false, vec!["A"])] {
            let (server, mut asked) = nxdomain_server().await;
            let resolver = resolver_of(POD_RESOLV_CONF, server);
            let mut s = source(1, 60);
            s.query.name = "api.fulcrum.test.".to_owned();
            s.ipv6 = ipv6;
            assert!(lookup(&resolver, &s).await.is_err());
            let mut types = Vec::new();
            while let Ok((_, t)) = asked.try_recv() {
                types.push(t);
            }
            types.sort();
            types.dedup();
            assert_eq!(types, want, "ipv6 = {ipv6}");
            let h = hosts("127.0.0.11 both.example\n::11 both.example\n");
            s.query.name = "both.example".to_owned();
            let found = lookup_with(&resolver, Some(&h), &s).await.unwrap();
            let families: Vec<bool> = found.backends.iter().map(|b| b.addr.is_ipv4()).collect();
            let want = if ipv6 { vec![true, false] } else { vec![true] };
            assert_eq!(families, want, "ipv6 = {ipv6}");
        }
    }

    /// A server that reads every query and never answers.
    async fn silent_server() -> SocketAddr {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while socket.recv_from(&mut buf).await.is_ok() {}
        });
        addr
    }

    /// A dotted name the hosts file has with IPv4 only, DNS unreachable: its address, at
    /// once (no AAAA query waits for DNS).
    #[tokio::test]
    async fn a_name_in_the_hosts_file_resolves_while_dns_is_down() {
        let resolver = resolver_of(POD_RESOLV_CONF, silent_server().await);
        let h = hosts("127.0.0.12 dotted.example\n");
        let mut s = source(1, 60);
        s.query.name = "dotted.example.".to_owned();
        let started = std::time::Instant::now();
        let found = lookup_with(&resolver, Some(&h), &s).await.unwrap();
        let addrs: Vec<SocketAddr> = found.backends.iter().map(|b| b.addr).collect();
        assert_eq!(addrs, vec![SocketAddr::from(([127, 0, 0, 12], 80))]);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    /// One lookup takes at most `LOOKUP_TIMEOUT`, however long resolv.conf lets the
    /// resolver wait (here 30 s × 5).
    #[tokio::test]
    async fn a_lookup_is_bounded_whatever_resolv_conf_allows() {
        let conf = "nameserver 127.0.0.153\noptions timeout:30 attempts:5\n";
        let resolver = resolver_of(conf, silent_server().await);
        assert_eq!(resolver.options().timeout, Duration::from_secs(30));
        let s = source(1, 60);
        let started = std::time::Instant::now();
        let e = lookup_with(&resolver, None, &s).await.unwrap_err();
        let took = started.elapsed();
        assert!(e.contains("no answer within 5s"), "{e}");
        assert!(
            took >= LOOKUP_TIMEOUT && took < LOOKUP_TIMEOUT + Duration::from_secs(5),
            "{took:?}"
        );
    }
}
