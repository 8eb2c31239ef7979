//! `limit_req` and `limit_conn`: nginx's rate and connection limits, on a listener or a route.
//! Defaults and bounds are nginx's (`ngx_http_limit_req_module`, `ngx_http_limit_conn_module`):
//! burst 0, a delay for every request of the burst unless `nodelay` or `delay = N`, status 503
//! (nginx's `limit_req_status` / `limit_conn_status`, which take 400 to 599).

use proxy::admission::{ConnLimit, LimitKey, RateLimit};
use proxy::limit_req::{LimitReqSettings, parse_rate};

use super::report::Report;
use super::table::{Section, Table};

const LIMIT_REQ: Section = Section {
    title: "limit_req",
    keys: &[
        "rate",
        "burst",
        "nodelay",
        "delay",
        "key",
        "status",
        "zone_size",
    ],
    not_yet: &[],
};

const LIMIT_CONN: Section = Section {
    title: "limit_conn",
    keys: &["key", "max", "status"],
    not_yet: &[],
};

/// Keys a `limit_req` zone holds when `zone_size` is left out: about 10 MB of state (a key
/// takes about a hundred bytes), as nginx's `zone=name:10m` holds some 80,000.
const DEFAULT_ZONE_SIZE: i64 = 100_000;
/// The most keys a zone may hold: about a gigabyte.
const MAX_ZONE_SIZE: i64 = 10_000_000;
/// nginx's `limit_req_status` and `limit_conn_status` default.
const DEFAULT_STATUS: u16 = 503;

/// `limit_req = { rate, burst, nodelay, delay, key, status, zone_size }`; `None` when absent
/// or wrong (reported).
pub(super) fn limit_req(r: &mut Report<'_>, t: &Table<'_>) -> Option<RateLimit> {
    let l = t.section(r, "limit_req", &LIMIT_REQ)?;
    let errors_before = r.error_count();
    let rate = l.required_text(r, "rate", "a rate", "10r/s").and_then(|text| {
        let rate = parse_rate(text.get_ref());
        if rate.is_none() {
            r.error(
                text.span(),
                &l.key("rate"),
                format!(
                    "\"{}\" is not a rate: write requests a second or a minute, a whole number, such as \"10r/s\" or \"30r/m\"",
                    text.get_ref()
                ),
            );
        }
        rate
    });
    let burst = l.integer(r, "burst", 0..=1_000_000_000, "").unwrap_or(0);
    let nodelay = l.flag(r, "nodelay").unwrap_or(false);
    let delay = l.integer(r, "delay", 0..=1_000_000_000, "");
    if nodelay && delay.is_some() {
        l.error(
            r,
            "delay",
            "`nodelay` lets every request of the burst through at once, `delay` only that many: give one of them",
        );
    }
    let key = key(r, &l);
    let status = status(r, &l);
    let zone_size = l
        .integer(r, "zone_size", 1..=MAX_ZONE_SIZE, " keys")
        .unwrap_or(DEFAULT_ZONE_SIZE as usize);
    if r.error_count() > errors_before {
        return None;
    }
    Some(RateLimit {
        key: key?,
        status,
        bucket: LimitReqSettings {
            rate: rate?,
            burst,
            delay: if nodelay {
                None
            } else {
                Some(delay.unwrap_or(0))
            },
            zone_size,
        },
    })
}

/// `limit_conn = { key, max, status }`; `None` when absent or wrong (reported).
pub(super) fn limit_conn(r: &mut Report<'_>, t: &Table<'_>) -> Option<ConnLimit> {
    let l = t.section(r, "limit_conn", &LIMIT_CONN)?;
    let errors_before = r.error_count();
    if l.value("max").is_none() {
        r.error(
            l.span(),
            &l.key("max"),
            "missing: a limit_conn needs the requests of a key it allows in flight at once, like max = 10",
        );
    }
    // nginx's bound: "invalid number of connections" outside 1 to 65535.
    let max = l.integer(r, "max", 1..=65_535, "");
    let key = key(r, &l);
    let status = status(r, &l);
    if r.error_count() > errors_before {
        return None;
    }
    Some(ConnLimit {
        key: key?,
        max: max?,
        status,
    })
}

/// `key`: `client_ip` (the default), `header:NAME` or `route`.
fn key(r: &mut Report<'_>, l: &Table<'_>) -> Option<LimitKey> {
    let Some(text) = l.text(r, "key", "a key", "client_ip") else {
        return Some(LimitKey::ClientIp);
    };
    let key = LimitKey::parse(text.get_ref());
    if key.is_none() {
        r.error(
            text.span(),
            &l.key("key"),
            format!(
                "\"{}\" is not a key: write \"client_ip\", \"route\" or \"header:NAME\" (a header's name, such as \"header:X-Api-Key\")",
                text.get_ref()
            ),
        );
    }
    key
}

/// `status`: 400 to 599, 503 by default (nginx's).
fn status(r: &mut Report<'_>, l: &Table<'_>) -> u16 {
    l.integer(
        r,
        "status",
        400..=599,
        " (nginx's limit_req_status takes 400 to 599; 429 is common)",
    )
    .unwrap_or(DEFAULT_STATUS)
}

#[cfg(test)]
mod tests {
    use crate::config::testing::*;
    use proxy::admission::LimitKey;

    #[test]
    fn nginx_s_defaults_and_the_keys_as_written() {
        let c = ok(&with_listener(
            "limit_req = { rate = \"30r/m\" }\nlimit_conn = { max = 10 }",
        ));
        let l = &c.proxy.listeners[0];
        let req = l.limit_req.as_ref().unwrap();
        assert_eq!(req.bucket.rate, 500);
        assert_eq!((req.bucket.burst, req.bucket.delay), (0, Some(0)));
        assert_eq!((req.status, req.bucket.zone_size), (503, 100_000));
        assert_eq!(req.key, LimitKey::ClientIp);
        let conn = l.limit_conn.as_ref().unwrap();
        assert_eq!(
            (conn.max, conn.status, &conn.key),
            (10, 503, &LimitKey::ClientIp)
        );
        let c = ok(&with_listener(
            "limit_req = { rate = \"10r/s\", burst = 20, nodelay = true, key = \"header:X-Api-Key\", status = 429, zone_size = 1000 }",
        ));
        let req = c.proxy.listeners[0].limit_req.clone().unwrap();
        assert_eq!(req.bucket.delay, None);
        assert_eq!(req.key, LimitKey::Header("x-api-key".into()));
        assert_eq!((req.status, req.bucket.zone_size), (429, 1000));
    }

    #[test]
    fn a_route_has_its_own() {
        let c = ok(&with_listener(
            "limit_req = { rate = \"10r/s\" }\n\n  [[listener.route]]\n  path = \"/login\"\n  upstream = \"web\"\n  limit_req = { rate = \"1r/s\", key = \"route\" }\n  limit_conn = { max = 3 }\n",
        ));
        let route = &c.proxy.listeners[0].routes[0];
        let req = route.limit_req.as_ref().unwrap();
        assert_eq!((req.bucket.rate, &req.key), (1000, &LimitKey::Route));
        assert_eq!(route.limit_conn.as_ref().unwrap().max, 3);
        assert_eq!(
            c.proxy.listeners[0].limit_req.as_ref().unwrap().bucket.rate,
            10_000
        );
    }

    #[test]
    fn a_tcp_listener_is_warned_that_they_do_nothing() {
        let c = ok(&with_listener(
            "protocol = \"tcp\"\nlimit_req = { rate = \"1r/s\" }\nlimit_conn = { max = 1 }",
        ));
        for key in ["limit_req", "limit_conn"] {
            let warned = c.warnings.iter().any(|w| {
                w.contains(&format!(
                    "listener[0].{key}: does nothing on a TCP listener"
                ))
            });
            assert!(warned, "{key}: {:?}", c.warnings);
        }
    }

    #[test]
    fn what_is_refused_says_what_to_write() {
        for (lines, says) in [
            ("limit_req = { burst = 5 }", "limit_req.rate: missing"),
            ("limit_req = { rate = \"10/s\" }", "is not a rate"),
            (
                "limit_req = { rate = \"1r/s\", nodelay = true, delay = 2 }",
                "give one of them",
            ),
            (
                "limit_req = { rate = \"1r/s\", key = \"ip\" }",
                "is not a key",
            ),
            (
                "limit_req = { rate = \"1r/s\", status = 200 }",
                "between 400 and 599",
            ),
            (
                "limit_req = { rate = \"1r/s\", zone_size = 0 }",
                "between 1 and",
            ),
            ("limit_req = { rate = \"1r/s\", bursts = 3 }", "bursts"),
            ("limit_req = \"10r/s\"", "limit_req"),
            (
                "limit_conn = { key = \"route\" }",
                "limit_conn.max: missing",
            ),
            ("limit_conn = { max = 0 }", "between 1 and 65535"),
        ] {
            let e = refused(&with_listener(lines));
            assert!(e.contains(says), "{lines}: {e}");
        }
    }
}
