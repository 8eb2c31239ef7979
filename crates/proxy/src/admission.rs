//! Whether a request may go on to its upstream: nginx's preaccess phase (`limit_req`, then
//! `limit_conn`) and its access phase (`allow` / `deny`), in nginx's order, on a listener or
//! a route.
//!
//! * **Order.** nginx runs the handlers of a phase in the reverse of their modules'
//!   registration; `ngx_http_limit_conn_module` registers before `ngx_http_limit_req_module`,
//!   so `limit_req` decides first, then `limit_conn`, and the access phase comes after the
//!   preaccess phase (`ngx_http_core_run_phases`). A request `limit_req` delays waits before
//!   `limit_conn` counts it (nginx resumes the phases when the delay's timer fires).
//! * **Which.** A route's `limit_req`, `limit_conn` and `access` replace the listener's, each
//!   on its own (nginx's location inherits a directive from its server only when it has none
//!   of its own). A route that answers itself (nginx's `return`, in the rewrite phase) meets
//!   none of them.
//! * **Keys.** `client_ip` (nginx's `$binary_remote_addr`: the peer, or the client a PROXY
//!   protocol header named; IPv4-mapped addresses as IPv4), `header:NAME` (nginx's
//!   `$http_NAME`: several fields joined with `, `, `; ` for `Cookie`) and `route` (one key
//!   per route). A request whose key is empty is not counted, as nginx skips an empty key;
//!   nor is one whose key is longer than 65,535 bytes (nginx logs it and skips the limit).
//!   A header's value is kept as a 128-bit keyed hash (SipHash under two random keys per
//!   zone), so every key takes the same room whatever a client sends: where nginx compares
//!   whole keys, two distinct values share a bucket only by a collision no client can aim
//!   for.
//! * **State.** One zone per listener or route, shared by every worker behind a lock, and kept
//!   across a reload that leaves its settings as they were ([`Zones::adopt`]).
//!
//! The request paths ask [`Checks`] (found by `ListenerContext::checks`) and answer a
//! [`Refusal`] with its status; the record says the fate (`limited`, `denied`) and the
//! metrics count it by route and [`Reason`].

use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::access::AccessList;
use crate::limit_conn::LimitConn;
use crate::limit_req::{LimitReq, LimitReqSettings, Verdict};

/// nginx's longest key (`ngx_http_limit_req_handler`, `ngx_http_limit_conn_handler`).
const MAX_KEY_BYTES: usize = 65_535;

/// The body of the answer to a request `limit_req` refused (its status is configured).
const RATE_LIMITED: &str = "the client sends requests faster than this route allows (limit_req)\n";
/// The body of the answer to a request `limit_conn` refused.
const CONN_LIMITED: &str =
    "the client has as many requests in flight as this route allows (limit_conn)\n";

/// What a limit counts by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitKey {
    /// The client's address.
    ClientIp,
    /// The values of a request header (its name in lower case).
    Header(Box<str>),
    /// Every request of the route (of the listener, for requests no route took) alike.
    Route,
}

impl LimitKey {
    /// `client_ip`, `header:NAME` or `route`; `None` for anything else.
    pub fn parse(text: &str) -> Option<LimitKey> {
        match text {
            "client_ip" => Some(LimitKey::ClientIp),
            "route" => Some(LimitKey::Route),
            _ => {
                let name = text.strip_prefix("header:")?;
                let token = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                token.then(|| LimitKey::Header(name.to_ascii_lowercase().into()))
            }
        }
    }
}

/// `limit_req` on a listener or a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    pub key: LimitKey,
    /// The status of a refusal (nginx's `limit_req_status`, 503 by default).
    pub status: u16,
    pub bucket: LimitReqSettings,
}

/// `limit_conn` on a listener or a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnLimit {
    pub key: LimitKey,
    /// Requests of one key in flight at once (nginx: 1 to 65535).
    pub max: u32,
    /// The status of a refusal (nginx's `limit_conn_status`, 503 by default).
    pub status: u16,
}

/// Why a request was not let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    LimitReq,
    LimitConn,
    Access,
}

impl Reason {
    /// Every reason, in the order of [`Reason::index`].
    pub const ALL: [Reason; 3] = [Reason::LimitReq, Reason::LimitConn, Reason::Access];

    /// As the metrics' `reason` label says it.
    pub fn name(self) -> &'static str {
        match self {
            Reason::LimitReq => "limit_req",
            Reason::LimitConn => "limit_conn",
            Reason::Access => "access",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// A request not let through: why, and our answer's status and body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refusal {
    pub(crate) reason: Reason,
    pub(crate) status: u16,
    pub(crate) text: &'static str,
}

/// A key as a zone holds it: the same size whatever the request sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Ip(IpAddr),
    Text(u128),
    /// A route's (or, for requests no route took, the listener's) counts id.
    Route(usize),
}

/// Turns a request into a zone's [`Key`]: the two random SipHash keys of one zone.
#[derive(Debug, Default)]
struct Keyer(std::hash::RandomState, std::hash::RandomState);

impl Keyer {
    /// The key of `asking` for `kind`; `None`: empty or too long, not counted.
    fn key(&self, kind: &LimitKey, asking: &Asking<'_>) -> Option<Key> {
        match kind {
            LimitKey::ClientIp => Some(Key::Ip(asking.client)),
            LimitKey::Route => Some(Key::Route(asking.route)),
            LimitKey::Header(name) => {
                let separator: &[u8] = if &**name == "cookie" { b"; " } else { b", " };
                let (mut a, mut b) = (self.0.build_hasher(), self.1.build_hasher());
                let mut len = 0;
                asking.fields.values_of(name, &mut |value| {
                    if len > 0 {
                        a.write(separator);
                        b.write(separator);
                        len += separator.len();
                    }
                    a.write(value);
                    b.write(value);
                    len += value.len();
                });
                let digest = (u128::from(a.finish()) << 64) | u128::from(b.finish());
                (1..=MAX_KEY_BYTES)
                    .contains(&len)
                    .then_some(Key::Text(digest))
            }
        }
    }
}

/// A request's header fields, as a key reads them.
pub(crate) trait Fields: Sync {
    /// Calls `each` with the value of every field named `name` (lower case), in order.
    fn values_of(&self, name: &str, each: &mut dyn FnMut(&[u8]));
}

impl Fields for http::HeaderMap {
    fn values_of(&self, name: &str, each: &mut dyn FnMut(&[u8])) {
        for value in self.get_all(name) {
            each(value.as_bytes());
        }
    }
}

/// What the limits read of a request.
pub(crate) struct Asking<'a> {
    pub(crate) client: IpAddr,
    /// The counts id of the route that took it (of the listener, if none did).
    pub(crate) route: usize,
    pub(crate) fields: &'a dyn Fields,
}

/// The milliseconds of `limit_req`'s clock (nginx's `ngx_current_msec`): monotonic, from
/// the first time it is read.
fn now_ms() -> u64 {
    static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);
    EPOCH.elapsed().as_millis() as u64
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A zone's state is plain numbers, consistent after every call: a panic elsewhere
    // cannot leave it half-changed.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One `limit_req` zone.
#[derive(Debug)]
pub(crate) struct RateZone {
    settings: RateLimit,
    keyer: Keyer,
    state: Mutex<LimitReq<Key>>,
}

/// One `limit_conn` zone.
#[derive(Debug)]
pub(crate) struct ConnZone {
    settings: ConnLimit,
    keyer: Keyer,
    state: Mutex<LimitConn<Key>>,
}

/// A request's place in a `limit_conn` zone, given back when it is dropped (the request
/// ended, however).
#[derive(Debug)]
pub(crate) struct ConnGuard {
    zone: Arc<ConnZone>,
    key: Key,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        lock(&self.zone.state).release(&self.key);
    }
}

/// The limits of one listener or one route, with their state.
#[derive(Debug, Default)]
pub(crate) struct Zones {
    rate: Option<Arc<RateZone>>,
    conn: Option<Arc<ConnZone>>,
}

impl Zones {
    /// Empty zones for these settings.
    pub(crate) fn new(rate: Option<&RateLimit>, conn: Option<&ConnLimit>) -> Zones {
        Zones {
            rate: rate.map(|s| {
                Arc::new(RateZone {
                    settings: s.clone(),
                    keyer: Keyer::default(),
                    state: Mutex::new(LimitReq::new(s.bucket)),
                })
            }),
            conn: conn.map(|s| {
                Arc::new(ConnZone {
                    settings: s.clone(),
                    keyer: Keyer::default(),
                    state: Mutex::new(LimitConn::new(s.max)),
                })
            }),
        }
    }

    /// Takes `old`'s state for each limit whose settings did not change (a reload): clients
    /// keep their excess and their requests in flight.
    pub(crate) fn adopt(&mut self, old: &Zones) {
        if let (Some(new), Some(old)) = (&mut self.rate, &old.rate)
            && new.settings == old.settings
        {
            *new = Arc::clone(old);
        }
        if let (Some(new), Some(old)) = (&mut self.conn, &old.conn)
            && new.settings == old.settings
        {
            *new = Arc::clone(old);
        }
    }

    /// Keys the `limit_req` zone holds (0 without one).
    #[cfg(test)]
    pub(crate) fn rate_keys(&self) -> usize {
        self.rate.as_ref().map_or(0, |z| lock(&z.state).len())
    }
}

/// The limits and rules a request meets: its route's, each in place of its listener's.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Checks<'a> {
    pub(crate) rate: Option<&'a RateZone>,
    pub(crate) conn: Option<&'a Arc<ConnZone>>,
    pub(crate) access: Option<&'a AccessList>,
}

impl<'a> Checks<'a> {
    /// A route's (`None` when the request goes to no route) over its listener's.
    pub(crate) fn of(
        listener: (&'a Zones, Option<&'a AccessList>),
        route: Option<(&'a Zones, Option<&'a AccessList>)>,
    ) -> Checks<'a> {
        let (route_zones, route_access) = route.unzip();
        Checks {
            rate: route_zones
                .and_then(|z| z.rate.as_deref())
                .or(listener.0.rate.as_deref()),
            conn: route_zones
                .and_then(|z| z.conn.as_ref())
                .or(listener.0.conn.as_ref()),
            access: route_access.flatten().or(listener.1),
        }
    }

    /// nginx's `limit_req`: how long the request waits before it goes on, or its refusal.
    pub(crate) fn rate(&self, asking: &Asking<'_>) -> Result<Duration, Refusal> {
        let Some(zone) = self.rate else {
            return Ok(Duration::ZERO);
        };
        let Some(key) = zone.keyer.key(&zone.settings.key, asking) else {
            return Ok(Duration::ZERO);
        };
        let verdict = lock(&zone.state).check(key, now_ms());
        match verdict {
            Verdict::Accept { delay_ms } => Ok(Duration::from_millis(delay_ms)),
            Verdict::Refuse => Err(Refusal {
                reason: Reason::LimitReq,
                status: zone.settings.status,
                text: RATE_LIMITED,
            }),
        }
    }

    /// nginx's `limit_conn`, then `allow` / `deny`: the request's place in flight (held
    /// until it ends), or its refusal.
    pub(crate) fn admit(&self, asking: &Asking<'_>) -> Result<Option<ConnGuard>, Refusal> {
        let guard = match self.conn {
            Some(zone) => match zone.keyer.key(&zone.settings.key, asking) {
                Some(key) if lock(&zone.state).acquire(key) => Some(ConnGuard {
                    zone: Arc::clone(zone),
                    key,
                }),
                Some(_) => {
                    return Err(Refusal {
                        reason: Reason::LimitConn,
                        status: zone.settings.status,
                        text: CONN_LIMITED,
                    });
                }
                None => None,
            },
            None => None,
        };
        if self
            .access
            .is_some_and(|rules| !rules.allows(asking.client))
        {
            return Err(Refusal {
                reason: Reason::Access,
                status: 403,
                text: crate::access::FORBIDDEN,
            });
        }
        Ok(guard)
    }

    /// Whether there is nothing to check.
    pub(crate) fn is_empty(&self) -> bool {
        self.rate.is_none() && self.conn.is_none() && self.access.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Headers(Vec<(&'static str, &'static str)>);

    impl Fields for Headers {
        fn values_of(&self, name: &str, each: &mut dyn FnMut(&[u8])) {
            for (n, v) in &self.0 {
                if n.eq_ignore_ascii_case(name) {
                    each(v.as_bytes());
                }
            }
        }
    }

    fn asking<'a>(client: [u8; 4], fields: &'a Headers) -> Asking<'a> {
        Asking {
            client: IpAddr::from(client),
            route: 7,
            fields,
        }
    }

    fn rate(key: LimitKey, burst: i64) -> RateLimit {
        RateLimit {
            key,
            status: 429,
            bucket: LimitReqSettings {
                rate: 1,
                burst,
                delay: None,
                zone_size: 100,
            },
        }
    }

    #[test]
    fn keys_are_parsed_as_the_docs_write_them() {
        assert_eq!(LimitKey::parse("client_ip"), Some(LimitKey::ClientIp));
        assert_eq!(LimitKey::parse("route"), Some(LimitKey::Route));
        assert_eq!(
            LimitKey::parse("header:X-Api-Key"),
            Some(LimitKey::Header("x-api-key".into()))
        );
        for bad in ["", "header:", "header:a b", "ip", "Client_IP"] {
            assert_eq!(LimitKey::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_header_key_joins_fields_and_an_empty_one_is_not_counted() {
        let zones = Zones::new(Some(&rate(LimitKey::Header("x-key".into()), 0)), None);
        let checks = Checks::of((&zones, None), None);
        let none = Headers(vec![]);
        for _ in 0..5 {
            assert!(checks.rate(&asking([127, 0, 0, 1], &none)).is_ok());
        }
        let a = Headers(vec![("X-Key", "a")]);
        assert!(checks.rate(&asking([127, 0, 0, 1], &a)).is_ok());
        let refused = checks.rate(&asking([127, 0, 0, 2], &a)).unwrap_err();
        assert_eq!((refused.reason, refused.status), (Reason::LimitReq, 429));
        // Two fields are their values joined: "a, b" is one key, not "a" nor "b".
        let ab = Headers(vec![("x-key", "a"), ("x-key", "b")]);
        assert!(checks.rate(&asking([127, 0, 0, 1], &ab)).is_ok());
        let joined = Headers(vec![("x-key", "a, b")]);
        assert!(checks.rate(&asking([127, 0, 0, 1], &joined)).is_err());
        assert_eq!(zones.rate_keys(), 2);
    }

    #[test]
    fn a_route_s_limits_replace_the_listener_s_each_on_its_own() {
        let listener = Zones::new(
            Some(&rate(LimitKey::ClientIp, 0)),
            Some(&ConnLimit {
                key: LimitKey::Route,
                max: 1,
                status: 503,
            }),
        );
        let route = Zones::new(Some(&rate(LimitKey::ClientIp, 1)), None);
        let deny = AccessList::parse(&["deny all"]).unwrap().0;
        let checks = Checks::of((&listener, Some(&deny)), Some((&route, None)));
        let none = Headers(vec![]);
        let me = asking([127, 0, 0, 1], &none);
        // The route's burst of 1: two pass, the third is refused.
        assert!(checks.rate(&me).is_ok() && checks.rate(&me).is_ok());
        assert!(checks.rate(&me).is_err());
        // The listener's limit_conn (max 1 per route) and access list still apply.
        let refused = checks.admit(&me).unwrap_err();
        assert_eq!((refused.reason, refused.status), (Reason::Access, 403));
        let open = Checks::of((&listener, None), Some((&route, None)));
        let held = open.admit(&me).unwrap();
        let refused = open.admit(&asking([127, 0, 0, 9], &none)).unwrap_err();
        assert_eq!(refused.reason, Reason::LimitConn);
        drop(held);
        assert!(open.admit(&me).unwrap().is_some(), "the place came back");
    }

    #[test]
    fn a_reload_with_the_same_settings_keeps_the_state() {
        let settings = rate(LimitKey::ClientIp, 0);
        let old = Zones::new(Some(&settings), None);
        let none = Headers(vec![]);
        let me = asking([127, 0, 0, 1], &none);
        assert!(Checks::of((&old, None), None).rate(&me).is_ok());
        let mut same = Zones::new(Some(&settings), None);
        same.adopt(&old);
        assert!(Checks::of((&same, None), None).rate(&me).is_err());
        let mut changed = Zones::new(Some(&rate(LimitKey::ClientIp, 3)), None);
        changed.adopt(&old);
        assert!(Checks::of((&changed, None), None).rate(&me).is_ok());
    }
}
