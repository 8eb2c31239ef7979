//! What a request must show before the admin API routes it: that it was addressed to this
//! listener, that no other site's page sent it, and, for a change, the token and a JSON body.
//!
//! The API has no cookies or sessions, yet a browser on the operator's machine reaches a
//! loopback listener like any program there. A page of any site can send it a "simple"
//! cross-origin request — a `POST` with a `text/plain` or form body — without asking first
//! (no CORS preflight), and DNS rebinding (a name of the attacker's that resolves to
//! 127.0.0.1 once the page has loaded) lets the page read and change it as if it were its own
//! origin. So, in this order:
//!
//! 1. **`Host`**, on every request: the listener's own address (the IP the connection reached,
//!    or the one it is bound to), `localhost`, or a name of `[admin] allowed_hosts`; anything
//!    else is 403. A rebinding page cannot help sending its own name. The port is not
//!    compared, as Django's `ALLOWED_HOSTS` does not compare it: rebinding is about names, and
//!    a reverse proxy or a port mapping changes the port. An HTTP/1.0 request without `Host`
//!    is served (no browser sends one); an HTTP/1.1 one is 400, as RFC 9112 §3.2 requires.
//! 2. **`Origin`**, on every request that has one: the request's own origin (`http://` or
//!    `https://` and its `Host`), else 403 (`null` too). Browsers send it with every
//!    cross-origin request and every `POST`; curl and scripts send none, and pass. Go's
//!    `net/http.CrossOriginProtection` compares the same two headers.
//! 3. **`Sec-Fetch-Site`**, when present: a change must be `same-origin` or `none` (as Go's);
//!    a read may not be `cross-site` unless it is a `GET`/`HEAD` navigation, so a link to the
//!    dashboard from another site still opens it (the "resource isolation policy" of
//!    web.dev's Fetch Metadata article).
//! 4. For a change (any method but `GET` and `HEAD`), **the token** when one is configured
//!    (401): both it and what was sent are hashed with SHA-256 and the digests compared in
//!    constant time, so the time taken shows neither the token's bytes nor its length.
//! 5. For `POST`, `PUT`, `PATCH` and `DELETE`, **`Content-Type: application/json`**
//!    (parameters such as `; charset=utf-8` allowed), even without a body (`POST
//!    /api/reload`, `DELETE`), else 415. It is not a type a page may send to another origin
//!    without a preflight, and this listener answers no preflight, so the browser never sends
//!    the change; a body-less call without a type would be a "simple" request again.

use std::net::{IpAddr, SocketAddr};

use constant_time_eq::constant_time_eq_32;
use http::{HeaderMap, Method, Request, StatusCode, Version, header};

/// Who may call the admin API, from `[admin]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// The bearer token every change must carry; `None`: none needed (a loopback listener
    /// only: the configuration refuses anything else).
    pub token: Option<String>,
    /// Host names (or IP addresses) besides the listener's own address and `localhost`
    /// that requests may be addressed to (`[admin] allowed_hosts`), checked already.
    pub allowed_hosts: Vec<String>,
}

/// A refused request: its status and what to say.
pub(crate) type Refusal = (StatusCode, String);

/// The checks of one admin listener.
pub(crate) struct Guard {
    /// The token's SHA-256 digest (the token itself is not kept).
    token: Option<[u8; 32]>,
    /// The listener's address as bound (`0.0.0.0:9900` for a wildcard).
    bound: SocketAddr,
    /// `allowed_hosts` that are IP addresses.
    ips: Vec<IpAddr>,
    /// `allowed_hosts` that are names, in lower case, without a trailing dot.
    names: Vec<String>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("token", &self.token.map(|_| "(set)"))
            .field("bound", &self.bound)
            .field("ips", &self.ips)
            .field("names", &self.names)
            .finish()
    }
}

/// Calls refused 401 (no token, or a wrong one), logged at WARN at most once a
/// [`UNAUTHORIZED_LOG_EVERY`]: a client guessing tokens must not flood the log (nor fill the
/// disk), and one line still says who tried, where, and how many more were refused since.
/// The ones refused in the second after a logged one are said in one line when that second
/// ends, so that the last burst's count is not left waiting for another refusal.
#[derive(Debug, Default)]
pub(crate) struct Unauthorized(std::sync::Arc<std::sync::Mutex<Window>>);

/// The second begun by the last 401 logged, and the refusals not logged in it.
#[derive(Debug, Default)]
pub(crate) struct Window {
    logged_at: Option<std::time::Instant>,
    not_logged: u64,
}

/// How often a 401 is logged at most.
pub(crate) const UNAUTHORIZED_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Unauthorized {
    fn lock(window: &std::sync::Mutex<Window>) -> std::sync::MutexGuard<'_, Window> {
        // Two numbers: a panic elsewhere cannot leave them inconsistent.
        window.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Logs a refusal, unless one was logged less than [`UNAUTHORIZED_LOG_EVERY`] ago (then
    /// it is counted, and the count said when that second ends). The call's caller, method
    /// and path are in the span the admin listener opens for each request.
    pub(crate) fn refused(&self) {
        let now = std::time::Instant::now();
        let mut window = Self::lock(&self.0);
        match window.logged_at {
            Some(at) if now.duration_since(at) < UNAUTHORIZED_LOG_EVERY => {
                window.not_logged += 1;
                if window.not_logged == 1 {
                    self.say_count_at(at + UNAUTHORIZED_LOG_EVERY);
                }
            }
            _ => {
                // Those of the second before, if its count was not said yet.
                tracing::warn!(
                    not_logged_since = window.not_logged,
                    "admin API: call refused 401: no token or a wrong one"
                );
                *window = Window {
                    logged_at: Some(now),
                    not_logged: 0,
                };
            }
        }
    }

    /// Says at `end` how many were refused without a line of their own since the last one
    /// logged (outside a runtime, as in unit tests, they are said with the next one).
    fn say_count_at(&self, end: std::time::Instant) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let shared = std::sync::Arc::clone(&self.0);
        runtime.spawn(async move {
            tokio::time::sleep_until(end.into()).await;
            let mut window = Self::lock(&shared);
            if window.not_logged > 0 {
                tracing::warn!(
                    refused = window.not_logged,
                    "admin API: more calls refused (401) in the second after the one logged"
                );
                window.not_logged = 0;
            }
        });
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

impl Guard {
    pub(crate) fn new(access: Access, bound: SocketAddr) -> Guard {
        let mut ips = Vec::new();
        let mut names = Vec::new();
        for host in &access.allowed_hosts {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            match host.parse::<IpAddr>() {
                Ok(ip) => ips.push(ip.to_canonical()),
                Err(_) => names.push(host.trim_end_matches('.').to_ascii_lowercase()),
            }
        }
        Guard {
            token: access.token.as_deref().map(|t| sha256(t.as_bytes())),
            bound,
            ips,
            names,
        }
    }

    /// Whether `req`, which came in on a connection to `local`, may be routed.
    pub(crate) fn admit<B>(&self, req: &Request<B>, local: SocketAddr) -> Result<(), Refusal> {
        let host = self.check_host(req, local)?;
        let headers = req.headers();
        let changing = !matches!(*req.method(), Method::GET | Method::HEAD);
        check_origin(headers, host)?;
        check_fetch_site(headers, changing)?;
        if changing && !self.authorized(headers) {
            return Err((
                StatusCode::UNAUTHORIZED,
                "changes need `Authorization: Bearer <token>`, the token of [admin] token_file"
                    .to_owned(),
            ));
        }
        if matches!(
            *req.method(),
            Method::POST | Method::PUT | Method::PATCH | Method::DELETE
        ) {
            check_json(headers)?;
        }
        Ok(())
    }

    /// The authority the request was addressed to (the target's, else `Host`), once it is
    /// one of ours; `None` for an HTTP/1.0 request without either.
    fn check_host<'r, B>(
        &self,
        req: &'r Request<B>,
        local: SocketAddr,
    ) -> Result<Option<&'r str>, Refusal> {
        let mut hosts = req.headers().get_all(header::HOST).iter();
        let (header, more) = (hosts.next(), hosts.next());
        if more.is_some() {
            return Err((
                StatusCode::BAD_REQUEST,
                "more than one Host header".to_owned(),
            ));
        }
        let header = match header {
            Some(h) => match h.to_str() {
                Ok(text) => Some(text.trim()),
                Err(_) => return Err(self.foreign(&String::from_utf8_lossy(h.as_bytes()))),
            },
            None => None,
        };
        // An absolute target (`POST http://name/api/reload`) names the host itself; both it
        // and the header must be ours.
        let target = req.uri().authority().map(|a| a.as_str());
        for given in [target, header].into_iter().flatten() {
            if !self.ours(given, local) {
                return Err(self.foreign(given));
            }
        }
        match target.or(header) {
            Some(h) => Ok(Some(h)),
            None if req.version() <= Version::HTTP_10 => Ok(None),
            None => Err((
                StatusCode::BAD_REQUEST,
                "an HTTP/1.1 request needs a Host header (RFC 9112 §3.2)".to_owned(),
            )),
        }
    }

    fn foreign(&self, given: &str) -> Refusal {
        (
            StatusCode::FORBIDDEN,
            format!(
                "Host {given:?} is not a name of this admin listener: it answers to its own address ({}), localhost, and the names of [admin] allowed_hosts (add this one there if it is yours)",
                self.bound
            ),
        )
    }

    /// Whether `authority` (`host[:port]`) names this listener.
    fn ours(&self, authority: &str, local: SocketAddr) -> bool {
        let Some(host) = host_of(authority) else {
            return false;
        };
        if let Ok(ip) = host.parse::<IpAddr>() {
            let ip = ip.to_canonical();
            return ip == local.ip().to_canonical()
                || ip == self.bound.ip().to_canonical()
                || self.ips.contains(&ip);
        }
        let host = host.trim_end_matches('.');
        host.eq_ignore_ascii_case("localhost")
            || self.names.iter().any(|n| n.eq_ignore_ascii_case(host))
    }

    /// Whether the request carries the configured token (always, when none is configured).
    fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let Some(given) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, credentials)| credentials.trim())
        else {
            return false;
        };
        constant_time_eq_32(&sha256(given.as_bytes()), token)
    }
}

/// The host part of `host[:port]` or `[v6][:port]`; `None` when it is neither.
fn host_of(authority: &str) -> Option<&str> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => {
            let (v6, after) = rest.split_once(']')?;
            v6.parse::<std::net::Ipv6Addr>().ok()?;
            (v6, after.strip_prefix(':').unwrap_or(after))
        }
        None => match authority.split_once(':') {
            Some((host, port)) => (host, port),
            None => (authority, ""),
        },
    };
    let name = |c: char| c.is_ascii_alphanumeric() || c == '.' || c == '-';
    (!host.is_empty()
        && (authority.starts_with('[') || host.chars().all(name))
        && port.chars().all(|c| c.is_ascii_digit()))
    .then_some(host)
}

/// `Origin`, when present, must be the request's own: `http(s)://` and its `Host`.
fn check_origin(headers: &HeaderMap, host: Option<&str>) -> Result<(), Refusal> {
    let mut origins = headers.get_all(header::ORIGIN).iter();
    let Some(origin) = origins.next() else {
        return Ok(());
    };
    let text = origin.to_str().unwrap_or("").trim();
    let authority = ["http://", "https://"].iter().find_map(|scheme| {
        text.get(..scheme.len())
            .filter(|s| s.eq_ignore_ascii_case(scheme))
            .map(|_| &text[scheme.len()..])
    });
    match (authority, host) {
        (Some(a), Some(h)) if a.eq_ignore_ascii_case(h) && origins.next().is_none() => Ok(()),
        _ => Err((
            StatusCode::FORBIDDEN,
            format!(
                "a page of another origin ({:?}) may not call the admin API: open the dashboard from the admin listener itself{}",
                String::from_utf8_lossy(origin.as_bytes()),
                host.map(|h| format!(" (http://{h}/)")).unwrap_or_default()
            ),
        )),
    }
}

/// `Sec-Fetch-Site` (sent by browsers only): a change from our own origin or typed by the
/// user; a read from anywhere but another site, unless it is a navigation to it.
fn check_fetch_site(headers: &HeaderMap, changing: bool) -> Result<(), Refusal> {
    let Some(site) = headers.get("sec-fetch-site").map(|v| v.as_bytes()) else {
        return Ok(());
    };
    let navigation = headers
        .get("sec-fetch-mode")
        .is_some_and(|m| m.as_bytes().eq_ignore_ascii_case(b"navigate"));
    let allowed = if changing {
        site.eq_ignore_ascii_case(b"same-origin") || site.eq_ignore_ascii_case(b"none")
    } else {
        !site.eq_ignore_ascii_case(b"cross-site") || navigation
    };
    match allowed {
        true => Ok(()),
        false => Err((
            StatusCode::FORBIDDEN,
            format!(
                "the browser says a page of another site sent this (Sec-Fetch-Site: {}): the admin API answers its own dashboard only",
                String::from_utf8_lossy(site)
            ),
        )),
    }
}

/// A change carries `Content-Type: application/json` (with parameters or not), once.
fn check_json(headers: &HeaderMap) -> Result<(), Refusal> {
    let mut types = headers.get_all(header::CONTENT_TYPE).iter();
    let given = match (types.next(), types.next()) {
        (Some(t), None) => t.to_str().unwrap_or(""),
        (None, _) => "none",
        (Some(_), Some(_)) => "more than one",
    };
    let media = given.split(';').next().unwrap_or("").trim();
    match media.eq_ignore_ascii_case("application/json") {
        true => Ok(()),
        false => Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "changes take `Content-Type: application/json`, even without a body (a web page cannot send that type to another site unasked); the type was {given:?}"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTEN: &str = "127.0.0.1:9900";

    fn guard(token: Option<&str>, allowed: &[&str]) -> Guard {
        let access = Access {
            token: token.map(str::to_owned),
            allowed_hosts: allowed.iter().map(|h| (*h).to_owned()).collect(),
        };
        Guard::new(access, LISTEN.parse().unwrap())
    }

    fn request(method: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut r = Request::builder().method(method).uri("/api/reload");
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.body(()).unwrap()
    }

    fn status(g: &Guard, method: &str, headers: &[(&str, &str)]) -> u16 {
        match g.admit(&request(method, headers), LISTEN.parse().unwrap()) {
            Ok(()) => 200,
            Err((s, _)) => s.as_u16(),
        }
    }

    const JSON: (&str, &str) = ("content-type", "application/json");

    #[test]
    fn hosts_are_the_listeners_address_localhost_and_the_configured_names() {
        let g = guard(None, &["Admin.Example", "10.0.0.5", "[::1]"]);
        for ok in [
            "127.0.0.1:9900",
            "127.0.0.1",
            "127.0.0.1:19900",
            "localhost",
            "LOCALHOST:9900",
            "localhost.:9900",
            "admin.example",
            "admin.EXAMPLE:443",
            "10.0.0.5:80",
            "[::1]:9900",
        ] {
            assert_eq!(status(&g, "GET", &[("host", ok)]), 200, "{ok}");
        }
        for foreign in [
            "evil.example:9900",
            "localhost.evil.example",
            "127.0.0.2:9900",
            "admin.example.evil",
            "127.0.0.1:x",
            "admin.example@evil",
            "",
            "[::2]:9900",
            "[127.0.0.1]",
        ] {
            assert_eq!(status(&g, "GET", &[("host", foreign)]), 403, "{foreign}");
        }
        // Two Host headers, or none on HTTP/1.1, are malformed.
        assert_eq!(
            status(&g, "GET", &[("host", "localhost"), ("host", "localhost")]),
            400
        );
        assert_eq!(status(&g, "GET", &[]), 400);
        let mut old = request("GET", &[]);
        *old.version_mut() = Version::HTTP_10;
        assert!(g.admit(&old, LISTEN.parse().unwrap()).is_ok());
    }

    #[test]
    fn a_wildcard_listener_answers_to_the_address_the_connection_reached() {
        let g = Guard::new(Access::default(), "0.0.0.0:9900".parse().unwrap());
        let local: SocketAddr = "192.0.2.7:9900".parse().unwrap();
        let admit = |host: &str| g.admit(&request("GET", &[("host", host)]), local).is_ok();
        assert!(admit("192.0.2.7:9900"));
        assert!(admit("0.0.0.0:9900"));
        assert!(!admit("192.0.2.8:9900"));
        // An IPv4 client of a dual-stack listener.
        let mapped: SocketAddr = "[::ffff:192.0.2.7]:9900".parse().unwrap();
        assert!(
            g.admit(&request("GET", &[("host", "192.0.2.7:9900")]), mapped)
                .is_ok()
        );
    }

    #[test]
    fn an_absolute_target_must_name_us_too() {
        let g = guard(None, &[]);
        let r = Request::builder()
            .method("GET")
            .uri("http://evil.example/api/upstreams")
            .header("host", "localhost")
            .body(())
            .unwrap();
        let (s, _) = g.admit(&r, LISTEN.parse().unwrap()).unwrap_err();
        assert_eq!(s, StatusCode::FORBIDDEN);
    }

    #[test]
    fn an_origin_must_be_the_requests_own() {
        let g = guard(None, &[]);
        let host = ("host", "127.0.0.1:9900");
        let own = [host, ("origin", "http://127.0.0.1:9900"), JSON];
        assert_eq!(status(&g, "POST", &own), 200);
        let tls = [host, ("origin", "HTTPS://127.0.0.1:9900"), JSON];
        assert_eq!(status(&g, "POST", &tls), 200);
        for other in [
            "http://evil.example",
            "http://127.0.0.1:9901",
            "http://localhost:9900",
            "null",
            "file://",
            "http://127.0.0.1:9900/x",
        ] {
            assert_eq!(
                status(&g, "POST", &[host, ("origin", other), JSON]),
                403,
                "{other}"
            );
            assert_eq!(
                status(&g, "GET", &[host, ("origin", other)]),
                403,
                "{other}"
            );
        }
        // No Origin at all: curl, scripts.
        assert_eq!(status(&g, "POST", &[host, JSON]), 200);
    }

    #[test]
    fn fetch_metadata_refuses_other_sites_but_lets_a_link_open_the_dashboard() {
        let g = guard(None, &[]);
        let host = ("host", "localhost:9900");
        let site = |s| ("sec-fetch-site", s);
        assert_eq!(status(&g, "POST", &[host, site("cross-site"), JSON]), 403);
        assert_eq!(status(&g, "POST", &[host, site("same-site"), JSON]), 403);
        assert_eq!(status(&g, "POST", &[host, site("same-origin"), JSON]), 200);
        assert_eq!(status(&g, "POST", &[host, site("none"), JSON]), 200);
        assert_eq!(status(&g, "GET", &[host, site("cross-site")]), 403);
        assert_eq!(status(&g, "GET", &[host, site("same-site")]), 200);
        let navigate = ("sec-fetch-mode", "navigate");
        assert_eq!(
            status(&g, "GET", &[host, site("cross-site"), navigate]),
            200
        );
        assert_eq!(
            status(&g, "POST", &[host, site("cross-site"), navigate, JSON]),
            403
        );
    }

    #[test]
    fn changes_take_json_and_nothing_else() {
        let g = guard(None, &[]);
        let host = ("host", "localhost");
        let typed = |t| [host, ("content-type", t)];
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON;charset=UTF-8",
        ] {
            assert_eq!(status(&g, "POST", &typed(ok)), 200, "{ok}");
        }
        for method in ["POST", "PUT", "PATCH", "DELETE"] {
            for bad in [
                "text/plain;charset=UTF-8",
                "application/x-www-form-urlencoded",
                "multipart/form-data; boundary=x",
                "text/plain; application/json",
                "application/jsonx",
            ] {
                assert_eq!(status(&g, method, &typed(bad)), 415, "{method} {bad}");
            }
            assert_eq!(status(&g, method, &[host]), 415, "{method} without a type");
        }
        let twice = [host, JSON, JSON];
        assert_eq!(status(&g, "POST", &twice), 415);
        // Reads take any type, or none.
        assert_eq!(status(&g, "GET", &[host]), 200);
    }

    #[test]
    fn the_token_is_compared_whole_whatever_its_length() {
        let token = "a-token-of-32-characters-exactly";
        let g = guard(Some(token), &[]);
        let host = ("host", "localhost");
        let with = |auth: &str| status(&g, "POST", &[host, JSON, ("authorization", auth)]);
        assert_eq!(with(&format!("Bearer {token}")), 200);
        assert_eq!(with(&format!("bearer  {token} ")), 200);
        for wrong in [
            String::new(),
            "Bearer ".to_owned(),
            format!("Bearer {}", &token[..31]),
            format!("Bearer {token}x"),
            format!("Basic {token}"),
            token.to_owned(),
        ] {
            assert_eq!(with(&wrong), 401, "{wrong:?}");
        }
        assert_eq!(status(&g, "POST", &[host, JSON]), 401);
        // Reads need none.
        assert_eq!(status(&g, "GET", &[host]), 200);
        assert!(!format!("{g:?}").contains(token), "the token is not kept");
    }
}
