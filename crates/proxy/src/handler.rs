//! One request's life in the proxy.
//!
//! 1. Checks hyper does not make: exactly one valid `Host` (RFC 9112 §3.2: 400 otherwise), and
//!    the body size limit (413).
//! 2. The request body is read in full first (nginx's default `proxy_request_buffering on`), so
//!    that a failed attempt can be retried on the next backend with the same bytes.
//! 3. Attempts: pick a backend, send, and on a failure that allows it (connect error, timeout,
//!    reset before the response head; after sending, only for idempotent methods) try the next
//!    backend, skipping those already tried (chained failover, seed 004).
//! 4. The answer: the backend's response streamed through, or our own 502 (invalid answer or
//!    reset), 503 (no backend available or none reachable) or 504 (timeout).

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use balance::{BackendId, Outcome};
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::uri::{Authority, Uri};
use http::{Method, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::body::{ProxyBody, UpstreamBody};
use crate::headers;
use crate::settings::ListenerSettings;
use crate::upstream::{AttemptError, Upstream};

/// What every request on one listener shares.
#[derive(Debug)]
pub(crate) struct ListenerContext {
    pub(crate) settings: ListenerSettings,
    pub(crate) upstream: Arc<Upstream>,
    pub(crate) access_log: bool,
}

fn local(status: StatusCode, text: &'static str) -> Response<ProxyBody> {
    let mut response = Response::new(ProxyBody::text(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The request's target host, from an absolute-form URI or else the single `Host` header;
/// `Err` with the reason when the request must be rejected with 400.
fn check_host(req: &Request<Incoming>) -> Result<Option<HeaderValue>, &'static str> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err("400 Bad Request: more than one Host header\n");
    }
    if let Some(h) = host
        && Authority::try_from(h.as_bytes()).is_err()
    {
        return Err("400 Bad Request: invalid Host header\n");
    }
    if let Some(authority) = req.uri().authority() {
        // Absolute form: the URI's authority wins over Host (RFC 9112 §3.2.2).
        return Ok(HeaderValue::from_str(authority.as_str()).ok());
    }
    if host.is_none() && req.version() == Version::HTTP_11 {
        return Err("400 Bad Request: HTTP/1.1 requests need a Host header\n");
    }
    Ok(host.cloned())
}

/// RFC 9110 §9.2.2: methods whose repetition has the same effect as one request.
fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::PUT | Method::DELETE | Method::OPTIONS | Method::TRACE
    )
}

/// The client address as a hash key: 4 octets for IPv4 (IPv4-mapped IPv6 included), 16 for
/// IPv6. Algorithms that hash it decide how many octets count.
fn address_octets(ip: IpAddr, buf: &mut [u8; 16]) -> &[u8] {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            buf[..4].copy_from_slice(&v4.octets());
            &buf[..4]
        }
        IpAddr::V6(v6) => {
            *buf = v6.octets();
            &buf[..]
        }
    }
}

pub(crate) async fn handle(
    req: Request<Incoming>,
    ctx: Arc<ListenerContext>,
    client: SocketAddr,
) -> Result<Response<ProxyBody>, Infallible> {
    if !ctx.access_log {
        return Ok(proxy(req, &ctx, client).await.0);
    }
    let started = Instant::now();
    let method = req.method().clone();
    let path = req
        .uri()
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
    let (response, backend) = proxy(req, &ctx, client).await;
    tracing::info!(
        target: "fulcrum::access",
        client = %client.ip(),
        method = %method,
        path = %path,
        upstream = %ctx.upstream.name(),
        backend = %backend.map_or_else(|| "-".to_owned(), |b| b.to_string()),
        status = response.status().as_u16(),
        duration_us = started.elapsed().as_micros() as u64,
    );
    Ok(response)
}

/// Proxies one request; also returns the backend that answered, if one did.
async fn proxy(
    req: Request<Incoming>,
    ctx: &ListenerContext,
    client: SocketAddr,
) -> (Response<ProxyBody>, Option<SocketAddr>) {
    let host = match check_host(&req) {
        Ok(host) => host,
        Err(why) => return (local(StatusCode::BAD_REQUEST, why), None),
    };
    let limit = ctx.settings.max_body_bytes;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return (too_large(), None);
    }
    let (mut parts, body) = req.into_parts();
    let body = if hyper::body::Body::is_end_stream(&body) {
        Bytes::new()
    } else {
        let collect = Limited::new(body, limit as usize).collect();
        match tokio::time::timeout(ctx.settings.client_body_timeout, collect).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return (too_large(), None),
            Ok(Err(_)) => {
                return (
                    local(
                        StatusCode::BAD_REQUEST,
                        "400 Bad Request: incomplete request body\n",
                    ),
                    None,
                );
            }
            Err(_) => {
                return (
                    local(
                        StatusCode::REQUEST_TIMEOUT,
                        "408 Request Timeout: the request body did not arrive in time\n",
                    ),
                    None,
                );
            }
        }
    };

    headers::remove_hop_by_hop(&mut parts.headers);
    parts.headers.remove(header::EXPECT);
    let has_host = host.is_some();
    if let Some(host) = host {
        parts.headers.insert(header::HOST, host);
    }
    headers::add_forwarded(&mut parts.headers, client);
    let uri = parts
        .uri
        .path_and_query()
        .map_or_else(|| Uri::from_static("/"), |pq| Uri::from(pq.clone()));

    let upstream = &ctx.upstream;
    let algorithm = upstream.settings().algorithm;
    let mut key = [0u8; 16];
    let affinity = algorithm
        .uses_affinity()
        .then(|| address_octets(client.ip(), &mut key));
    let idempotent = is_idempotent(&parts.method) || upstream.settings().retry_non_idempotent;
    let mut tried: Vec<BackendId> = Vec::new();
    let mut last_error: Option<AttemptError> = None;

    while tried.len() < upstream.max_attempts() {
        let Some(mut attempt) = upstream.pick(affinity, &tried) else {
            break;
        };
        let backend = attempt.backend;
        let mut request = Request::new(Full::new(body.clone()));
        *request.method_mut() = parts.method.clone();
        *request.uri_mut() = uri.clone();
        *request.headers_mut() = parts.headers.clone();
        if !has_host {
            // An HTTP/1.0 client may leave Host out; the backend gets HTTP/1.1, which needs
            // one: name the backend, as nginx's default `proxy_set_header Host $proxy_host`.
            let addr = upstream.backend_addr(backend).to_string();
            if let Ok(v) = HeaderValue::from_str(&addr) {
                request.headers_mut().insert(header::HOST, v);
            }
        }
        match upstream.send(backend, request).await {
            Ok((response, sender)) => {
                let (mut head, incoming) = response.into_parts();
                headers::remove_hop_by_hop(&mut head.headers);
                let read_timeout = upstream.settings().read_timeout;
                let body = UpstreamBody::new(incoming, attempt, sender, read_timeout);
                let addr = upstream.backend_addr(backend);
                return (
                    Response::from_parts(head, ProxyBody::Upstream(body)),
                    Some(addr),
                );
            }
            Err(e) => {
                attempt.complete(Outcome::Failure);
                tracing::warn!(
                    upstream = %upstream.name(),
                    backend = %upstream.backend_addr(backend),
                    error = %e,
                    "attempt failed"
                );
                let next = e.retriable() && (idempotent || !e.request_sent());
                last_error = Some(e);
                if !next {
                    break;
                }
                tried.push(backend);
            }
        }
    }
    (failure_response(last_error.as_ref()), None)
}

fn too_large() -> Response<ProxyBody> {
    local(
        StatusCode::PAYLOAD_TOO_LARGE,
        "413 Content Too Large: the request body exceeds max_body_size\n",
    )
}

/// Our answer when no backend answered, by the last failure (as nginx does).
fn failure_response(last: Option<&AttemptError>) -> Response<ProxyBody> {
    match last {
        None | Some(AttemptError::Connect(_)) => local(
            StatusCode::SERVICE_UNAVAILABLE,
            "503 Service Unavailable: no backend available\n",
        ),
        Some(AttemptError::ConnectTimeout) | Some(AttemptError::ReadTimeout) => local(
            StatusCode::GATEWAY_TIMEOUT,
            "504 Gateway Timeout: the backend did not answer in time\n",
        ),
        Some(AttemptError::Reset(_)) | Some(AttemptError::Invalid(_)) => local(
            StatusCode::BAD_GATEWAY,
            "502 Bad Gateway: the backend's answer was invalid or cut short\n",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotent_methods() {
        for m in ["GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"] {
            assert!(is_idempotent(&m.parse().unwrap()), "{m}");
        }
        for m in ["POST", "PATCH", "CONNECT", "LOCK"] {
            assert!(!is_idempotent(&m.parse().unwrap()), "{m}");
        }
    }

    #[test]
    fn octets_of_mapped_and_v6() {
        let mut buf = [0; 16];
        let v4: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        assert_eq!(address_octets(v4, &mut buf), [10, 1, 2, 3]);
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(address_octets(v6, &mut buf).len(), 16);
    }
}
