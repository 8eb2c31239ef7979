//! fulcrum's data plane: an HTTP/1.1 and HTTP/2 reverse proxy that spreads requests over
//! pools of backends with the algorithms of the [`balance`] core.
//!
//! # Layout
//!
//! * [`settings`]: what the proxy is told to do, already validated (the binary turns the TOML
//!   configuration into these).
//! * [`server`]: [`Proxy`] binds the listeners and runs `workers` threads, each with its own
//!   single-threaded runtime accepting on every listener (nginx's worker layout); accepts
//!   connections up to `max_connections` and shuts down gracefully.
//! * [`access_log`]: one line per request, nginx's `combined` or JSON, written by a thread of
//!   its own to stderr or a file (reopened on SIGUSR1); a worker never waits for it.
//! * `client`: one client connection: request heads read and checked, bodies buffered, one
//!   access log line per request we answer.
//! * `forward`: a request's attempts over the upstream's backends (`attempts`, shared by
//!   HTTP/1.1 and HTTP/2), as the retry-and-blame policy of [`balance::retry`] decides, ending
//!   in the relayed answer or our own 502/503/504.
//! * `exchange`: one exchange on one backend connection: the request written while the answer
//!   is read, the client watched meanwhile, failures classified, the response relayed.
//! * `http1`: HTTP/1.1 heads parsed with httparse and rewritten in one pass, one file per
//!   part: `request` (the RFC 9112 rules, hop-by-hop headers of RFC 9110 §7.6.1 removed),
//!   `target` (request-target forms, `Host`), `forwarding` (`X-Forwarded-For`, `Forwarded` of
//!   RFC 7239, `X-Real-IP`, `X-Forwarded-Proto`, `X-Forwarded-Host`: replaced, or believed
//!   from `trusted_proxies`), `response`, `chunked` (the decoder).
//! * `upstream`: [`Upstream`], one pool of backends shared by every worker thread: the
//!   [`balance::Pool`] behind a mutex (held for a pick or a completion, never across an await).
//!   `Attempt` completes its ticket exactly once, even when the client goes away.
//! * `connections`: each worker's connections to one backend: reuse known, idle expiry,
//!   a per-backend cap, counts, connect errors classified.
//! * `limits`: the process's file descriptor limit, raised at start-up and checked against
//!   what the configuration may need.
//! * [`metrics`]: what the workers count (answers by upstream, backend and status class,
//!   durations, failed attempts by reason, retries), each into its own counts, summed when
//!   scraped.
//! * [`handover`]: zero-downtime upgrades — the listening sockets passed to a new process over
//!   a Unix socket (`SCM_RIGHTS`), as HAProxy's `-x` does.
//! * `http2`: HTTP/2 to clients (`http2 = true`) on the `h2` crate, one part per file:
//!   `preface` (h2c detected by the client preface, peeked), `connection` (the limits, resets
//!   counted against rapid reset, idle timeout, PING, GOAWAY), `stream` (one stream written as
//!   an HTTP/1.1 head through `http1::parse_request`, its body buffered, our own answers;
//!   its attempts up to the response head are `forward::attempts`, the HTTP/1.1 path's own),
//!   `relay` (the backend's body as DATA frames). Backends get HTTP/1.1 over the same pooled connections.
//! * [`tls`]: TLS termination: certificates read from PEM files, chosen by SNI, resumption,
//!   the handshake bounded by `client_header_timeout`.
//! * [`upstream_tls`]: TLS to backends: the CAs trusted, the name verified, and a backend
//!   connection that is plain TCP or TLS (an enum: no dyn on the request path).
//! * `io`: writes with deadlines, watching a waiting client, and `ClientStream`, what the
//!   HTTP/1.1 code is generic over (plain TCP or TLS), so the plain path pays nothing for TLS.
//! * `buffer`: the read buffer a connection keeps for its life.
//! * `tcp`: TCP (L4) mode: a connection balanced once and relayed both ways, half-closes
//!   passed on, idle sessions closed.
//! * `proxy_protocol`: HAProxy's PROXY protocol header, sent to backends in TCP mode and
//!   accepted from trusted load balancers in front.

pub mod access_log;
mod affinity;
mod answers;
mod buffer;
mod client;
mod connections;
mod dispatch;
mod exchange;
mod forward;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod handover;
mod http1;
mod http2;
mod io;
pub mod limits;
mod listener;
pub mod metrics;
mod proxy_protocol;
mod record;
mod request;
pub mod server;
pub mod settings;
mod tcp;
pub mod tls;
mod tunnel;
mod upstream;
pub mod upstream_h2;
pub mod upstream_tls;

pub use http1::MAX_HEADERS_LIMIT;
pub use server::{Proxy, ProxyHandle, Reloaded, StartError};
pub use settings::{
    BackendSettings, CheckKind, HashKey, HealthCheckSettings, Http2Settings, ListenerSettings,
    LoadSource, Protocol, ProxyProtocol, ProxySettings, UpstreamSettings,
};
pub use upstream::{
    AdminState, BackendSnapshot, ChangeError, Keep, MAX_WEIGHT, Reconfigured, Upstream,
};
pub use upstream_tls::BackendProtocol;
