//! fulcrum's data plane: an HTTP/1.1 and HTTP/2 reverse proxy that spreads requests over
//! pools of backends with the algorithms of the [`balance`] core.
//!
//! # Layout
//!
//! The request path runs downwards: each file imports only from layers below it, never from
//! one above, a folder being one layer (`tests/layers.rs` checks it, resolving every file's
//! references, and prints the layers). From the top:
//!
//! * [`server`]: [`Proxy`] binds the listeners and runs `workers` threads, each with its own
//!   single-threaded runtime accepting on every listener (nginx's worker layout); accepts
//!   connections up to `max_connections`, reads a PROXY protocol header where the listener
//!   takes one, hands each connection to `dispatch` (HTTP) or `tcp`, and shuts down
//!   gracefully. [`handover`]: zero-downtime upgrades — the listening sockets passed to a new
//!   process over a Unix socket (`SCM_RIGHTS`), as HAProxy's `-x` does.
//! * `dispatch`: which HTTP a connection speaks, decided in one place — the TLS handshake and
//!   ALPN, or h2c's client preface peeked on a plain listener — and the connection handed to
//!   `http2` or `client`.
//! * The three paths, side by side:
//!   * `client`: one HTTP/1.1 connection: request heads read and checked, bodies buffered,
//!     each request forwarded, our own refusals answered, one record per request.
//!   * `http2`: HTTP/2 to clients (`http2 = true`) on the `h2` crate, one part per file:
//!     `connection` (the limits, resets counted against rapid reset, idle timeout, PING,
//!     GOAWAY), `stream` (one stream written as an HTTP/1.1 head through
//!     `http1::parse_request`, its body buffered, forwarded through `forward::attempts` as an
//!     HTTP/1.1 request is, our own answers), `relay` (the backend's body as DATA frames),
//!     `preface` (the h2c preface, peeked for `dispatch`), `linger`.
//!   * `tcp`: TCP (L4) mode: a connection balanced once, connected with the retry policy for
//!     connects, and relayed as a `tunnel`.
//! * `forward`: a request's attempts over the upstream's backends (`attempts`, shared by
//!   HTTP/1.1 and HTTP/2), as [`balance::Attempts`] (the retry-and-blame policy of
//!   [`balance::retry`]) decides, ending in the relayed answer, a tunnel after a 101, or our
//!   own 502/503/504.
//! * What the attempts speak to a backend: `exchange`, one HTTP/1.1 exchange on one backend
//!   connection (the request written while the answer is read, the client watched meanwhile,
//!   failures classified, the response relayed), and [`upstream_h2`], HTTP/2 to backends
//!   (`backend_protocol = "h2"`: one multiplexed connection per backend and worker, the head
//!   written as fields, failures classified alike).
//! * What the paths share, below them:
//!   * `request`: `Forward`, a request on its way to the backends whatever the client spoke,
//!     its one builder, the head finished per attempt, and `Tried`, what one try came to.
//!   * `record`: the record of every finished request and session, its `Fate` an enum, and
//!     the one place it is counted and written to the access log.
//!   * `listener`: a listener as the paths see it: its settings, upstream, access log and
//!     certificates, and each worker's connections and counts.
//!   * `answers`: our own answers (statuses and texts) and the 499 of a client that left.
//!   * [`admission`]: whether a request goes on, in nginx's order: [`limit_req`] (the leaky
//!     bucket, with its delay), [`limit_conn`] (requests in flight per key), then
//!     [`access`] (allow / deny); a route's own in place of its listener's, the zones shared
//!     by every worker and kept across a reload that leaves them unchanged.
//!   * `affinity`: the key a request or session is balanced by (address octets, `hash_key`).
//!   * `sticky`: sticky sessions' cookie as HTTP carries it (HAProxy's `insert indirect
//!     nocache`): the `sticky` settings and the `Set-Cookie` they make, a backend's opaque id,
//!     the cookie taken out of what the backend gets.
//!   * `tunnel`: bytes relayed both ways, half-closes passed on, idle tunnels closed: a TCP
//!     session, or an HTTP connection a backend upgraded.
//! * `upstream`: [`Upstream`], one pool of backends shared by every worker thread: the
//!   [`balance::Pool`] behind a mutex (held for a pick or a completion, never across an
//!   await), split by job (`pick`, `queue`, `membership`, `workers`, `view`). `Attempt`
//!   completes its ticket exactly once, even when the client goes away.
//! * [`metrics`]: what the workers count (answers by upstream, backend and status class,
//!   durations by upstream and backend and by route, failed attempts by reason, retries), each into its own counts, summed when
//!   scraped. [`access_log`]: one line per request, nginx's `combined` or JSON, written by a
//!   thread of its own to stderr or a file (reopened on SIGUSR1); a worker never waits for it.
//! * `connections`: each worker's connections to one backend: reuse known, idle expiry,
//!   a per-backend cap, counts, connect errors classified, and the shared HTTP/2 connection's
//!   slot.
//! * `http1`: HTTP/1.1 heads parsed with httparse and rewritten in one pass, one file per
//!   part: `request` (the RFC 9112 rules, hop-by-hop headers of RFC 9110 §7.6.1 removed),
//!   `target` (request-target forms, `Host`), `forwarding` (`X-Forwarded-For`, `Forwarded` of
//!   RFC 7239, `X-Real-IP`, `X-Forwarded-Proto`, `X-Forwarded-Host`: replaced, or believed
//!   from `trusted_proxies`), `response`, `chunked` (the decoder), `routing` (which route
//!   takes a request, decided as its head is parsed: the route's upstream, its path rewrite,
//!   a redirect's `Location`), `edit` (header rules and the request id applied to the head,
//!   and what the answer gets).
//! * `route`: a listener's routes compiled for the request path (the [`routes`] crate's table
//!   and each route's action, its upstream found in the listener's list). [`header_rules`]:
//!   the rules' types, nginx's variables, request ids.
//! * `proxy_protocol`: HAProxy's PROXY protocol header, sent to backends in TCP mode and
//!   accepted from trusted load balancers in front.
//! * [`settings`]: what the proxy is told to do, already validated (the binary turns the TOML
//!   configuration into these). `limits`: the process's file descriptor limit, raised at
//!   start-up and checked against what the configuration may need.
//! * [`tls`]: TLS termination: certificates read from PEM files, chosen by SNI, resumption,
//!   the handshake bounded by `client_header_timeout`. [`upstream_tls`]: TLS to backends: the
//!   CAs trusted, the name verified, a backend connection that is plain TCP or TLS (an
//!   `Either`: no dyn on the request path), and the protocol ALPN offers them.
//! * `io`: writes with deadlines, watching a waiting client, and `ClientStream`, what the
//!   HTTP/1.1 code is generic over (plain TCP or TLS), so the plain path pays nothing for TLS.
//!   `buffer`: the read buffer a connection keeps for its life.

pub mod access;
pub mod access_log;
pub mod admission;
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
pub mod header_rules;
mod http1;
mod http2;
mod io;
pub mod limit_conn;
pub mod limit_req;
pub mod limits;
mod listener;
pub mod metrics;
mod proxy_protocol;
mod record;
mod request;
mod route;
pub mod server;
pub mod settings;
mod sticky;
mod tcp;
pub mod tls;
mod tunnel;
mod upstream;
pub mod upstream_h2;
pub mod upstream_tls;

pub use balance::StickyKey;
pub use http1::MAX_HEADERS_LIMIT;
pub use server::{Proxy, ProxyHandle, Reloaded, Reopened, StartError};
pub use settings::{
    BackendSettings, CheckKind, HashKey, HealthCheckSettings, Http2Settings, ListenerSettings,
    LoadSource, Protocol, ProxyProtocol, ProxySettings, Redirect, RouteAction, RouteSettings,
    UpstreamSettings,
};
pub use settings::{DiscoveryQuery, DiscoverySettings, RecordKind};
pub use sticky::{SameSite, StickySettings};
pub use upstream::SourceStatus;
pub use upstream::{
    AdminState, BackendSnapshot, ChangeError, Keep, LoadPolls, MAX_WEIGHT, Reconfigured, Upstream,
};
pub use upstream_tls::BackendProtocol;
