//! The routes of the admin listener, its authorization, and the JSON API.
//!
//! * `GET /api/upstreams`: every upstream and backend with its live state.
//! * `PATCH /api/upstreams/{upstream}/backends/{addr}` with `{"weight": N}` and/or
//!   `{"state": "up" | "drain" | "disabled"}`.
//! * `GET /api/history` (`?upstream=NAME&seconds=N`): each backend's last 15 minutes, second
//!   by second ([`crate::history`]).
//! * `GET /metrics`: the Prometheus text exposition.
//!
//! Every request first passes [`crate::guard`]: addressed to this listener (`Host`), not sent
//! by another site's page (`Origin`, `Sec-Fetch-Site`), and for a change the token (401, with
//! `WWW-Authenticate: Bearer`) and `Content-Type: application/json` (415). Reading is then
//! open to whoever reaches the listener. Errors are JSON objects `{"error": "..."}` that say
//! what was wrong and what would be accepted.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::{Value, json};

use proxy::metrics::{FAULTS, reason};
use proxy::{AdminState, BackendSnapshot, ChangeError, Keep, Upstream};

use crate::guard::{Access, Guard};
use crate::{Balancing, Change, View};

/// The dashboard (`GET /`): one page, our own, that draws `/api/history` and polls it and
/// `/api/upstreams`.
const DASHBOARD: &str = include_str!("../assets/dashboard.html");

/// The charting library the dashboard draws with: uPlot 1.6.32 (MIT, its LICENSE beside it),
/// served from the binary so the page works without a network.
const UPLOT_JS: &str = include_str!("../assets/vendor/uplot-1.6.32/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../assets/vendor/uplot-1.6.32/uPlot.min.css");

fn asset(name: &str) -> Option<(&'static str, &'static str)> {
    match name {
        "uPlot.iife.min.js" => Some(("text/javascript; charset=utf-8", UPLOT_JS)),
        "uPlot.min.css" => Some(("text/css; charset=utf-8", UPLOT_CSS)),
        _ => None,
    }
}

/// The largest request body the API reads.
const MAX_BODY: usize = 64 * 1024;

/// What every connection of the admin listener shares.
#[derive(Debug)]
pub struct Shared {
    guard: Guard,
    pub(crate) view: View,
    /// The backends' last minutes, which the listener's sampler fills.
    pub(crate) history: Arc<crate::history::History>,
    /// The 401s, logged sparingly.
    unauthorized: crate::guard::Unauthorized,
}

impl Shared {
    /// The state of a listener bound to `bound`.
    pub fn new(access: Access, bound: SocketAddr, view: View) -> Shared {
        Shared {
            guard: Guard::new(access, bound),
            view,
            history: Arc::default(),
            unauthorized: Default::default(),
        }
    }
}

type Answer = Response<Full<Bytes>>;

fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Answer {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    let headers = r.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // No other site may frame the dashboard (clickjacking its buttons) or have an answer
    // read as another type.
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'none'"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

fn json_answer(status: StatusCode, value: &Value) -> Answer {
    let mut text = serde_json::to_vec_pretty(value).unwrap_or_default();
    text.push(b'\n');
    respond(status, "application/json", text)
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Answer {
    json_answer(status, &json!({ "error": message.to_string() }))
}

fn method_not_allowed(allow: &'static str) -> Answer {
    let mut r = error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("this resource answers {allow}"),
    );
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

/// One request to the admin listener, which came in on a connection to `local`. (Its log
/// lines are in the span the listener opens for it, naming the caller, the method and the
/// path: a change or a refusal says who asked.)
pub async fn handle(shared: &Shared, local: SocketAddr, req: Request<Incoming>) -> Answer {
    if let Err((status, message)) = shared.guard.admit(&req, local) {
        let mut r = error(status, message);
        if status == StatusCode::UNAUTHORIZED {
            shared.unauthorized.refused();
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        return r;
    }
    let path = req.uri().path().to_owned();
    let segments = decoded_segments(&path);
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let reading = matches!(*req.method(), Method::GET | Method::HEAD);
    match segments.as_slice() {
        [""] => match reading {
            true => respond(StatusCode::OK, "text/html; charset=utf-8", DASHBOARD),
            false => method_not_allowed("GET, HEAD"),
        },
        ["assets", name] => match (reading, asset(name)) {
            (true, Some((content_type, body))) => respond(StatusCode::OK, content_type, body),
            (false, Some(_)) => method_not_allowed("GET, HEAD"),
            (_, None) => error(StatusCode::NOT_FOUND, format!("no asset {name:?}")),
        },
        ["metrics"] => match reading {
            true => respond(
                StatusCode::OK,
                crate::metrics::CONTENT_TYPE,
                crate::metrics::exposition(&shared.view),
            ),
            false => method_not_allowed("GET, HEAD"),
        },
        ["api", "upstreams"] => match reading {
            true => json_answer(StatusCode::OK, &upstreams(&shared.view)),
            false => method_not_allowed("GET, HEAD"),
        },
        ["api", "history"] => match reading {
            true => history(shared, req.uri().query()),
            false => method_not_allowed("GET, HEAD"),
        },
        ["api", "listeners"] => match reading {
            true => json_answer(StatusCode::OK, &listeners(&shared.view)),
            false => method_not_allowed("GET, HEAD"),
        },
        ["api", "health"] => match reading {
            true => {
                let (healthy, body) = health(&shared.view);
                // A cloud balancer's, HAProxy's `httpchk` or Kubernetes' probe reads the
                // status alone: 503 while some upstream has no backend a request may go to.
                let status = match healthy {
                    true => StatusCode::OK,
                    false => StatusCode::SERVICE_UNAVAILABLE,
                };
                json_answer(status, &body)
            }
            false => method_not_allowed("GET, HEAD"),
        },
        ["api", "reload"] => match *req.method() {
            Method::POST => {
                tracing::info!("reload asked through the admin API");
                reload(&shared.view).await
            }
            _ => method_not_allowed("POST"),
        },
        ["api", "upstreams", name] => match find(&shared.view, name) {
            Err(e) => refused(e),
            Ok(u) if reading => json_answer(
                StatusCode::OK,
                &upstream(&shared.view, &u, &errors(&shared.view, &u)),
            ),
            Ok(u) if *req.method() == Method::PATCH => patch_upstream(&shared.view, &u, req).await,
            Ok(_) => method_not_allowed("GET, HEAD, PATCH"),
        },
        ["api", "upstreams", name, "backends"] => match find(&shared.view, name) {
            Err(e) => refused(e),
            Ok(u) if *req.method() == Method::POST => add_backend(&shared.view, &u, req).await,
            Ok(_) => method_not_allowed("POST"),
        },
        ["api", "upstreams", name, "backends", addr] => {
            backend_resource(shared, name, addr, req).await
        }
        _ => error(
            StatusCode::NOT_FOUND,
            format!(
                "no such resource {path:?}: the admin listener serves / (the dashboard), /metrics, /api/health, /api/history, /api/reload, /api/listeners, /api/upstreams, /api/upstreams/NAME, /api/upstreams/NAME/backends and /api/upstreams/NAME/backends/ADDR"
            ),
        ),
    }
}

/// `GET /api/history?upstream=NAME&seconds=N`: the last `N` seconds (all that is kept
/// without it) of `NAME`'s backends (every upstream's without it).
fn history(shared: &Shared, query: Option<&str>) -> Answer {
    use crate::history::KEEP;
    let mut upstream = None;
    let mut seconds = KEEP;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_encoding::percent_decode_str(value)
            .decode_utf8_lossy()
            .into_owned();
        match key {
            "upstream" => upstream = Some(value),
            "seconds" => match value.parse::<usize>() {
                Ok(n) if (1..=KEEP).contains(&n) => seconds = n,
                _ => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "seconds={value:?}: give a whole number of seconds from 1 to {KEEP} (the history keeps {KEEP})"
                        ),
                    );
                }
            },
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "unknown parameter {key:?}: /api/history takes upstream=NAME and seconds=N (1 to {KEEP})"
                    ),
                );
            }
        }
    }
    match shared.history.json(upstream.as_deref(), seconds) {
        // Compact: 900 values a series, one a line pretty-printed, would triple its size.
        Some(body) => respond(StatusCode::OK, "application/json", body),
        // No samples of it: an upstream that exists but was not sampled yet has an empty
        // history; any other name is not an upstream.
        None => match upstream.as_deref().map(|name| find(&shared.view, name)) {
            Some(Err(e)) => refused(e),
            _ => respond(
                StatusCode::OK,
                "application/json",
                crate::history::History::empty_json(),
            ),
        },
    }
}

/// The path's segments, each percent-decoded (a name may hold characters a URL escapes).
fn decoded_segments(path: &str) -> Vec<String> {
    path.trim_matches('/')
        .split('/')
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect()
}

/// `/api/upstreams/NAME/backends/ADDR`: one backend, read, changed or removed.
async fn backend_resource(
    shared: &Shared,
    name: &str,
    addr: &str,
    req: Request<Incoming>,
) -> Answer {
    let u = match find(&shared.view, name) {
        Ok(u) => u,
        Err(e) => return refused(e),
    };
    let addr: SocketAddr = match addr.parse() {
        Ok(a) => a,
        Err(_) => {
            return error(
                StatusCode::NOT_FOUND,
                format!(
                    "{addr:?} is not a backend address: write it as in the configuration, such as 127.0.0.1:9001"
                ),
            );
        }
    };
    match *req.method() {
        Method::GET | Method::HEAD => match u.snapshot().iter().find(|b| b.addr == addr) {
            Some(b) => json_answer(
                StatusCode::OK,
                &backend_json(&shared.view, &u, b, &errors(&shared.view, &u)),
            ),
            None => error(
                StatusCode::NOT_FOUND,
                ChangeError::NoSuchBackend {
                    upstream: u.name().to_owned(),
                    addr,
                },
            ),
        },
        Method::PATCH => patch_backend(&shared.view, &u, addr, req).await,
        Method::DELETE => remove_backend(&shared.view, &u, addr),
        _ => method_not_allowed("GET, HEAD, PATCH, DELETE"),
    }
}

/// A refused call: its status and what to say.
type Refusal = crate::guard::Refusal;

fn refused((status, message): Refusal) -> Answer {
    error(status, message)
}

fn find(view: &View, name: &str) -> Result<Arc<Upstream>, Refusal> {
    let upstreams = view.proxy.upstreams();
    upstreams
        .iter()
        .find(|u| u.name() == name)
        .cloned()
        .ok_or_else(|| {
            let names: Vec<&str> = upstreams.iter().map(|u| u.name()).collect();
            (
                StatusCode::NOT_FOUND,
                format!("no upstream is named {name:?}; there are {names:?}"),
            )
        })
}

/// The body of `PATCH /api/upstreams/{upstream}/backends/{addr}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BackendChange {
    weight: Option<u64>,
    state: Option<String>,
}

async fn read_json<T: serde::de::DeserializeOwned>(req: Request<Incoming>) -> Result<T, Refusal> {
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is larger than {MAX_BODY} bytes, or it did not arrive whole"),
            ));
        }
    };
    serde_json::from_slice(&body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("the body is not what this call takes: {e}"),
        )
    })
}

async fn patch_backend(
    view: &View,
    u: &Upstream,
    addr: SocketAddr,
    req: Request<Incoming>,
) -> Answer {
    let change: BackendChange = match read_json(req).await {
        Ok(c) => c,
        Err(e) => return refused(e),
    };
    if change.weight.is_none() && change.state.is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            r#"nothing to change: send {"weight": N} or {"state": "up" | "drain" | "disabled"}"#,
        );
    }
    // Everything is checked before anything changes.
    let state = match change.state.as_deref().map(str::parse::<AdminState>) {
        Some(Err(e)) => return error(StatusCode::BAD_REQUEST, e),
        Some(Ok(s)) => Some(s),
        None => None,
    };
    if change.weight.is_some() && u.weights_from_reports() {
        return error(
            StatusCode::CONFLICT,
            ChangeError::WeightsFromReports {
                upstream: u.name().to_owned(),
                algorithm: u.settings().algorithm.name(),
            },
        );
    }
    if let Some(w) = change.weight {
        match u.set_static_weight(addr, w) {
            Err(e) => return change_error(e),
            Ok(_) => tell(
                view,
                Change::Weight {
                    upstream: u.name(),
                    addr,
                    // Within 1..=MAX_WEIGHT: `set_static_weight` took it.
                    weight: u32::try_from(w).unwrap_or(proxy::MAX_WEIGHT),
                },
            ),
        }
    }
    if let Some(state) = state {
        match u.set_state(addr, state) {
            Err(e) => return change_error(e),
            Ok(_) => tell(
                view,
                Change::State {
                    upstream: u.name(),
                    addr,
                    state,
                },
            ),
        }
    }
    match u.snapshot().iter().find(|b| b.addr == addr) {
        Some(b) => changed_answer(
            view,
            StatusCode::OK,
            backend_json(view, u, b, &errors(view, u)),
        ),
        None => error(StatusCode::NOT_FOUND, "the backend went away meanwhile"),
    }
}

/// `POST /api/reload`: the same reload as SIGHUP; answers once it is done.
async fn reload(view: &View) -> Answer {
    let Some(reloads) = &view.reload else {
        return error(
            StatusCode::NOT_IMPLEMENTED,
            "this fulcrum cannot reload (it was not started from a configuration file)",
        );
    };
    let (reply, result) = tokio::sync::oneshot::channel();
    if reloads.send(reply).await.is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "fulcrum is stopping");
    }
    match result.await {
        Ok(Ok(done)) => json_answer(StatusCode::OK, &json!({ "reloaded": done })),
        Ok(Err(problems)) => json_answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({
                "error": format!(
                    "the configuration was not applied; the running one stays: {}",
                    match problems.as_slice() {
                        [] => "no reason given".to_owned(),
                        [one] => one.clone(),
                        [first, ..] => format!("{} problems, the first: {first}", problems.len()),
                    }
                ),
                "problems": problems,
            }),
        ),
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "fulcrum is stopping"),
    }
}

/// The body of `POST /api/upstreams/{upstream}/backends`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewBackend {
    addr: String,
    weight: Option<u64>,
    #[serde(default)]
    backup: bool,
}

/// `POST /api/upstreams/{upstream}/backends`: a backend joins the upstream at once. It gets
/// the passive-health and slow-start settings of the upstream's first backend (the file's
/// usual case: every backend alike).
async fn add_backend(view: &View, u: &Upstream, req: Request<Incoming>) -> Answer {
    let new: NewBackend = match read_json(req).await {
        Ok(n) => n,
        Err(e) => return refused(e),
    };
    let Some(addr) = new
        .addr
        .parse::<SocketAddr>()
        .ok()
        .filter(|a| a.port() != 0)
    else {
        return error(
            StatusCode::BAD_REQUEST,
            format!(
                "addr {:?}: write an IP address and a port from 1 to 65535 (port 0 cannot be connected to), such as \"127.0.0.1:9001\"",
                new.addr
            ),
        );
    };
    let weight = new.weight.unwrap_or(1);
    let Some(weight) = u32::try_from(weight)
        .ok()
        .filter(|w| (1..=proxy::MAX_WEIGHT).contains(w))
    else {
        return error(
            StatusCode::BAD_REQUEST,
            format!("a weight is from 1 to {}, not {weight}", proxy::MAX_WEIGHT),
        );
    };
    let mut settings = u.runtime_settings();
    if let Some(source) = u.discovered_by(addr) {
        return error(
            StatusCode::CONFLICT,
            format!(
                "upstream \"{}\" already has backend {addr} from DNS name {}: DNS discovery keeps it while the records give it",
                u.name(),
                source.name
            ),
        );
    }
    if settings.backends.iter().any(|b| b.addr == addr) {
        return error(
            StatusCode::CONFLICT,
            format!("upstream \"{}\" already has backend {addr}", u.name()),
        );
    }
    if let Err(e) = u.fits_ring(addr, weight) {
        return change_error(e);
    }
    let mut backend = proxy::BackendSettings::new(addr);
    if let Some(first) = settings.backends.first() {
        backend.max_fails = first.max_fails;
        backend.fail_timeout = first.fail_timeout;
        backend.slow_start = first.slow_start;
    }
    backend.weight = weight;
    backend.backup = new.backup;
    settings.backends.push(backend);
    u.reconfigure(settings, Keep::Runtime);
    tracing::info!(upstream = %u.name(), backend = %addr, weight, "backend added by the admin API");
    let backup = new.backup;
    tell(
        view,
        Change::Added {
            upstream: u.name(),
            addr,
            weight,
            backup,
        },
    );
    match u.snapshot().iter().find(|b| b.addr == addr) {
        Some(b) => changed_answer(
            view,
            StatusCode::CREATED,
            backend_json(view, u, b, &errors(view, u)),
        ),
        None => error(StatusCode::CONFLICT, "the backend went away meanwhile"),
    }
}

/// `DELETE /api/upstreams/{upstream}/backends/{addr}`: the backend leaves at once; its
/// requests in flight finish on it.
fn remove_backend(view: &View, u: &Upstream, addr: SocketAddr) -> Answer {
    if let Some(source) = u.discovered_by(addr) {
        return error(
            StatusCode::CONFLICT,
            format!(
                "backend {addr} of upstream \"{}\" comes from DNS name {}: drain it (PATCH its state), or change the records",
                u.name(),
                source.name
            ),
        );
    }
    let mut settings = u.runtime_settings();
    let before = settings.backends.len();
    settings.backends.retain(|b| b.addr != addr);
    if settings.backends.len() == before {
        // Not a backend now, but with overrides kept for it (DNS gave it once): they go.
        if view
            .overrides
            .as_ref()
            .is_some_and(|o| o.forget(u.name(), addr))
        {
            tracing::info!(upstream = %u.name(), backend = %addr, "overrides of an address that is not a backend now cleared by the admin API");
            return no_content(view);
        }
        return change_error(ChangeError::NoSuchBackend {
            upstream: u.name().to_owned(),
            addr,
        });
    }
    // An upstream with DNS discovery may be left without backends (503 until DNS gives some).
    if settings.discovery.is_empty() && settings.backends.iter().all(|b| b.backup) {
        return error(
            StatusCode::CONFLICT,
            format!(
                "{addr} is the last primary backend of upstream \"{}\": add another first (an upstream needs one)",
                u.name()
            ),
        );
    }
    u.reconfigure(settings, Keep::Runtime);
    tracing::info!(upstream = %u.name(), backend = %addr, "backend removed by the admin API");
    tell(
        view,
        Change::Removed {
            upstream: u.name(),
            addr,
        },
    );
    no_content(view)
}

/// The body of `PATCH /api/upstreams/{upstream}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpstreamChange {
    algorithm: String,
    #[serde(default)]
    options: serde_json::Map<String, Value>,
}

/// `PATCH /api/upstreams/{upstream}` with `{"algorithm": NAME, "options": {...}}`: the
/// upstream balances with another algorithm (and options: those not given take their
/// defaults) from now on; its backends keep their state.
async fn patch_upstream(view: &View, u: &Upstream, req: Request<Incoming>) -> Answer {
    let change: UpstreamChange = match read_json(req).await {
        Ok(c) => c,
        Err(e) => return refused(e),
    };
    let current = u.runtime_settings();
    let was = current.algorithm;
    let settings = match &view.balancing {
        Some(Balancing(check)) => match check(&current, &change.algorithm, &change.options) {
            Ok(s) => s,
            Err(e) => return error(StatusCode::BAD_REQUEST, e),
        },
        None if !change.options.is_empty() => {
            return error(
                StatusCode::NOT_IMPLEMENTED,
                "this fulcrum takes an algorithm without options",
            );
        }
        None => match change.algorithm.parse() {
            Ok(algorithm) => proxy::UpstreamSettings {
                algorithm,
                options: balance::Options::default(),
                ..current
            },
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("algorithm: {e}")),
        },
    };
    let algorithm = settings.algorithm;
    u.reconfigure(settings, Keep::Runtime);
    tracing::info!(upstream = %u.name(), from = was.name(), to = algorithm.name(), "algorithm changed by the admin API");
    tell(
        view,
        Change::Algorithm {
            upstream: u.name(),
            algorithm: &change.algorithm,
            options: &change.options,
        },
    );
    changed_answer(view, StatusCode::OK, upstream(view, u, &errors(view, u)))
}

/// Tells the state store, if there is one, of a change the API made.
fn tell(view: &View, change: Change<'_>) {
    if let Some(o) = &view.overrides {
        o.changed(change);
    }
}

/// A change's answer, with a `warning` when the change is applied but not saved (the state
/// file could not be written): it would not survive a restart.
fn changed_answer(view: &View, status: StatusCode, mut body: Value) -> Answer {
    if let (Some(why), Value::Object(fields)) =
        (view.overrides.as_ref().and_then(|o| o.unsaved()), &mut body)
    {
        fields.insert("warning".into(), Value::String(why));
    }
    json_answer(status, &body)
}

/// The answer to a change that has no body to show (`204`), or `200` with a `warning` when
/// it is applied but not saved (see [`changed_answer`]).
fn no_content(view: &View) -> Answer {
    if let Some(why) = view.overrides.as_ref().and_then(|o| o.unsaved()) {
        return json_answer(StatusCode::OK, &serde_json::json!({ "warning": why }));
    }
    let mut r = respond(StatusCode::NO_CONTENT, "application/json", Bytes::new());
    r.headers_mut().remove(header::CONTENT_TYPE);
    r
}

fn change_error(e: ChangeError) -> Answer {
    let status = match e {
        ChangeError::NoSuchBackend { .. } => StatusCode::NOT_FOUND,
        ChangeError::WeightsFromReports { .. } => StatusCode::CONFLICT,
        ChangeError::WeightOutOfRange { .. } => StatusCode::BAD_REQUEST,
        ChangeError::RingTooHeavy(_) => StatusCode::CONFLICT,
    };
    error(status, e)
}

/// Failed attempts by backend and reason, summed over the workers.
type Errors = proxy::metrics::CountMap<SocketAddr, [u64; proxy::metrics::FAULTS.len()]>;

fn errors(view: &View, u: &Upstream) -> Errors {
    view.proxy
        .metrics()
        .totals()
        .remove(u.name())
        .map(|c| c.failures)
        .unwrap_or_default()
}

/// `GET /api/health`: what `fulcrum health` checks — the listeners (it connects to each) and
/// each upstream's usable backends — and whether every upstream has one.
fn health(view: &View) -> (bool, Value) {
    let upstreams: Vec<(String, usize, usize)> = view
        .proxy
        .upstreams()
        .iter()
        .map(|u| {
            let backends = u.snapshot();
            let usable = backends.iter().filter(|b| b.available).count();
            (u.name().to_owned(), usable, backends.len())
        })
        .collect();
    let healthy = upstreams.iter().all(|&(_, usable, _)| usable > 0);
    let body = json!({
        "healthy": healthy,
        "listeners": view.proxy.listeners().iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        "upstreams": upstreams.iter().map(|(name, usable, backends)| json!({
            "name": name,
            "usable": usable,
            "backends": backends,
        })).collect::<Vec<_>>(),
    });
    (healthy, body)
}

/// `GET /api/listeners`: each listener, its upstream and its routes in force, in file order.
fn listeners(view: &View) -> Value {
    let all = view.proxy.listener_settings();
    json!({
        "listeners": all.iter().map(|(bound, l)| json!({
            "listen": bound.to_string(),
            "protocol": match l.protocol {
                proxy::Protocol::Http => "http",
                proxy::Protocol::Tcp => "tcp",
            },
            "upstream": l.upstream,
            "routes": l.routes.iter().map(route).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// One route as `GET /api/listeners` shows it: its conditions as the configuration writes
/// them, and its action.
fn route(r: &proxy::RouteSettings) -> Value {
    let spec = &r.spec;
    let path = match &spec.path {
        routes::PathMatch::Any => Value::Null,
        routes::PathMatch::Prefix { prefix, wins } => {
            json!({"prefix": prefix, "prefix_wins": wins})
        }
        routes::PathMatch::Exact(p) => json!({"exact": p}),
        routes::PathMatch::Regex { pattern, nocase } => {
            json!({"regex": pattern, "nocase": nocase})
        }
    };
    let pairs = |p: &[(String, String)]| {
        p.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect::<serde_json::Map<_, _>>()
    };
    let action = match &r.action {
        proxy::RouteAction::Upstream { upstream, rewrite } => {
            json!({"upstream": upstream, "rewrite_prefix": rewrite})
        }
        proxy::RouteAction::Redirect(d) => json!({"redirect": {
            "status": d.status, "scheme": d.scheme, "host": d.host, "port": d.port, "path": d.path,
        }}),
        proxy::RouteAction::Respond {
            status,
            content_type,
            ..
        } => json!({"respond": {"status": status, "content_type": content_type}}),
    };
    json!({
        "name": r.name,
        "host": spec.hosts,
        "path": path,
        "methods": spec.methods,
        "headers": pairs(&spec.headers),
        "query": pairs(&spec.query),
        "action": action,
    })
}

/// `GET /api/upstreams`.
pub fn upstreams(view: &View) -> Value {
    let mut totals = view.proxy.metrics().totals();
    json!({
        "upstreams": view.proxy.upstreams().iter().map(|u| {
            let errors = totals.remove(u.name()).map(|c| c.failures).unwrap_or_default();
            upstream(view, u, &errors)
        }).collect::<Vec<_>>(),
    })
}

fn upstream(view: &View, u: &Upstream, errors: &Errors) -> Value {
    let s = u.settings();
    json!({
        "name": u.name(),
        "algorithm": s.algorithm.name(),
        "weights_from_reports": u.weights_from_reports(),
        "queue": {
            "waiting": u.queued(),
            "size": s.queue,
            "timeout_seconds": s.queue_timeout.as_secs_f64(),
        },
        "backends": u.snapshot().iter().map(|b| backend_json(view, u, b, errors)).collect::<Vec<_>>(),
        "overrides": view.overrides.as_ref().map_or_else(|| json!({}), |o| o.upstream(u.name())),
    })
}

/// Why a backend gets no new requests, in an operator's words; `None` when it may.
fn why_not(b: &BackendSnapshot) -> Option<String> {
    if b.available {
        return None;
    }
    Some(match b.state {
        AdminState::Drain => "draining (set by the admin API)".to_owned(),
        AdminState::Disabled => "disabled (by the admin API or `down = true`)".to_owned(),
        AdminState::Up if b.check_failed => "failing its active health checks".to_owned(),
        AdminState::Up if b.passive_failed => format!(
            "{} failure{} within fail_timeout (max_fails = {})",
            b.fails,
            if b.fails == 1 { "" } else { "s" },
            b.max_fails
        ),
        AdminState::Up if b.weight == 0 => "its weight is 0".to_owned(),
        AdminState::Up => "not usable".to_owned(),
    })
}

fn backend_json(view: &View, u: &Upstream, b: &BackendSnapshot, errors: &Errors) -> Value {
    let upstream = u.name();
    let by_reason = errors.get(&b.addr).copied().unwrap_or_default();
    let errors: serde_json::Map<String, Value> = FAULTS
        .iter()
        .zip(by_reason)
        .map(|(&f, n)| (reason(f).to_owned(), json!(n)))
        .collect();
    json!({
        "addr": b.addr.to_string(),
        "backup": b.backup,
        "state": b.state.name(),
        "weight": { "static": b.static_weight, "effective": b.weight },
        "in_flight": b.in_flight,
        "max_conns": b.max_conns,
        "requests": b.requests,
        "failures": b.failures,
        "errors": errors,
        "latency_ms": b.latency.map(|l| l.as_secs_f64() * 1e3),
        "health": {
            "available": b.available,
            "why": why_not(b),
            // "none" without [upstream.health_check]: no check runs, so none passes.
            "active_check": match (u.settings().health_check.is_some(), b.check_failed) {
                (false, _) => "none",
                (true, true) => "failing",
                (true, false) => "passing",
            },
            "passive": { "failed": b.passive_failed, "fails": b.fails, "max_fails": b.max_fails },
        },
        "slow_start": b.ramp,
        "load_report": b.report.map(|(r, age)| json!({
            "cpu": r.cpu, "mem": r.mem, "disk": r.disk, "net": r.net,
            "container_mem": r.container_mem,
            "age_seconds": age.as_secs_f64(),
            // Its source missed stale_after polls in a row: these numbers are old, and the
            // backend is weighted as the average of the fresh ones.
            "stale": b.polls.stale,
            "failed_polls": b.polls.failed,
        })),
        "connections": { "open": b.connections_open, "idle": b.connections_idle },
        "overrides": view.overrides.as_ref().map_or_else(|| json!({}), |o| o.backend(upstream, b.addr)),
        "source": b.source,
    })
}
