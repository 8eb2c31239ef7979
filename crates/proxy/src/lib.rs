//! fulcrum's data plane: an HTTP/1.1 reverse proxy that spreads requests over pools of
//! backends with the algorithms of the [`balance`] core.
//!
//! # Layout
//!
//! * [`settings`]: what the proxy is told to do, already validated (the binary turns the TOML
//!   configuration into these).
//! * [`server`]: [`Proxy`] binds the listeners, accepts connections up to `max_connections`,
//!   serves them with hyper, and shuts down gracefully.
//! * `handler`: one request's life: checks (Host, sizes, body), the pick-and-retry loop over the
//!   upstream's backends, and the answer (the backend's, or 502/503/504 of our own).
//! * `upstream`: [`Upstream`], one pool of backends shared by every worker thread: the
//!   [`balance::Pool`] behind a mutex (held for a pick or a completion, never across an await)
//!   and the connections to each backend. `Attempt` completes its ticket exactly once, even
//!   when the client goes away.
//! * `client_io`: the client socket, noting whether a request is partly read, so a slow
//!   request head gets a 408 and an idle keep-alive connection is closed quietly.
//! * `connections`: keep-alive connections to one backend, reused LIFO.
//! * `body`: the response body that streams the backend's answer to the client, enforces
//!   `read_timeout` between reads, completes the attempt and returns the connection to the pool
//!   when the body ends.
//! * `headers`: hop-by-hop headers (RFC 9110 §7.6.1) and the forwarding headers
//!   (`X-Forwarded-For`, `X-Forwarded-Proto`, `Forwarded`, RFC 7239).

mod body;
mod client_io;
mod connections;
mod handler;
mod headers;
pub mod server;
pub mod settings;
mod upstream;

pub use server::{Proxy, StartError};
pub use settings::{BackendSettings, ListenerSettings, ProxySettings, UpstreamSettings};
pub use upstream::{BackendSnapshot, Upstream};
