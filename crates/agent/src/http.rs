//! The HTTP/1.1 endpoint (hyper): `GET /load` answers the agent protocol's JSON (DESIGN §2),
//! `GET /metrics` the Prometheus exposition, and with `--probe-target` `GET /probe` Prequal's
//! probe (see [`crate::target`]); any other path is 404, any other method on those 405.
//! Keep-alive is hyper's default, so a poller may reuse one connection.
//!
//! The agent serves only once its first sample exists (one interval after start, since CPU,
//! disk and network are deltas): a request that comes before waits in the socket's backlog.
//! Were there no sample all the same, both would answer 503 with `Retry-After`: a made-up
//! figure would be worse than none, and a balancer treats a missing report as no report.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::Published;
use crate::report::METRICS_CONTENT_TYPE;
use crate::shutdown::Shutdown;
use crate::target::Prober;

/// How long open connections get to finish their request after shutdown begins.
const DRAIN: Duration = Duration::from_secs(2);

fn answer(
    latest: &watch::Receiver<Option<Arc<Published>>>,
    req: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *r.status_mut() = status;
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        r
    };
    let metrics = match req.uri().path() {
        "/load" => false,
        "/metrics" => true,
        _ => {
            return text(
                StatusCode::NOT_FOUND,
                "not found: the agent serves GET /load, GET /metrics and (with --probe-target) GET /probe\n",
            );
        }
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        r.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let Some(published) = latest.borrow().clone() else {
        let mut r = text(StatusCode::SERVICE_UNAVAILABLE, "no sample yet\n");
        r.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        return r;
    };
    let (body, content_type) = if metrics {
        (published.metrics.clone(), METRICS_CONTENT_TYPE)
    } else {
        (published.json.clone(), "application/json")
    };
    let mut r = Response::new(Full::new(body));
    let headers = r.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    r
}

/// `GET /probe`: the kernel's tables are read on the blocking pool, never on the thread
/// that serves connections.
async fn probe_answer(prober: Arc<Prober>) -> Response<Full<Bytes>> {
    let body = tokio::task::spawn_blocking(move || prober.answer())
        .await
        .unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(body)));
    let headers = r.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    r
}

/// Serves until shutdown, then gives open connections [`DRAIN`] to finish. `prober`: the
/// estimate `GET /probe` answers, with `--probe-target`.
pub async fn serve(
    listener: TcpListener,
    latest: watch::Receiver<Option<Arc<Published>>>,
    prober: Option<Arc<Prober>>,
    mut shutdown: Shutdown,
) {
    let graceful = GracefulShutdown::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "cannot accept an HTTP connection");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                        () = shutdown.wait() => break,
                    }
                }
            },
            () = shutdown.wait() => break,
        };
        let _ = stream.set_nodelay(true);
        let latest = latest.clone();
        let prober = prober.clone();
        let service = service_fn(move |req: Request<Incoming>| {
            let latest = latest.clone();
            let prober = prober.clone();
            async move {
                let response = match prober {
                    Some(p) if req.uri().path() == "/probe" && req.method() == Method::GET => {
                        probe_answer(p).await
                    }
                    _ => answer(&latest, &req),
                };
                Ok::<_, Infallible>(response)
            }
        });
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(Duration::from_secs(10))
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(DRAIN, graceful.shutdown()).await;
}
