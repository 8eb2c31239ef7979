//! HTTP/2 to clients (RFC 9113): a connection that [`crate::dispatch`] found speaking it — h2c
//! with prior knowledge on a plain listener, `h2` chosen by ALPN over TLS — handed to
//! [`serve`].
//!
//! The protocol itself (frames, HPACK, stream states, flow control, SETTINGS) is the `h2`
//! crate's, the codec under hyper: nothing of it is written here. What is ours is what a load
//! balancer does with each stream, and the limits a client is held to:
//!
//! * **Each stream is a request of its own** (`stream`): it is written as the HTTP/1.1 head
//!   the HTTP/1.1 path would have read and goes through the same [`crate::http1::parse_request`]
//!   (hop-by-hop headers gone, the forwarding headers from `trusted_proxies`, `Host`, the hash
//!   key, the header limits), gets its own pick and ticket from the upstream's algorithm, the
//!   same retry policy ([`balance::retry::decide`]) over the worker's connections to the
//!   backends (pooled HTTP/1.1, or multiplexed HTTP/2 with `backend_protocol = "h2"`;
//!   `crate::forward::attempts`, the HTTP/1.1 path's loop), and the same record, counted and
//!   logged (`crate::record`). The backend's response is streamed back as the stream's
//!   response (`relay`).
//! * **Protections** (`connection`): concurrent streams, header list size tied to
//!   `max_header_bytes`, flow-control windows, resets of streams the client opened and
//!   cancelled before their answer (CVE-2023-44487, rapid reset) counted per second, the `h2`
//!   crate's own bounds on resets and CONTINUATION frames, an idle timeout, pings, and GOAWAY
//!   on shutdown or reload with the streams in flight let finish. `docs/http2.md` lists each
//!   with its default and whose default it follows.
//! * **Detecting h2c** (`preface`, for `crate::dispatch`): a connection whose first 24 bytes
//!   are the client preface `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n` (RFC 9113 §3.4) is HTTP/2; one
//!   that opens with a request line is HTTP/1.1 as before. The bytes are peeked, not read, so
//!   the HTTP/1.1 path gets them untouched. h2c by `Upgrade: h2c` from HTTP/1.1 (RFC 7540
//!   §3.2, dropped by RFC 9113) is not offered.

mod connection;
mod linger;
pub(crate) mod preface;
mod relay;
mod stream;

pub(crate) use connection::serve;
#[cfg(feature = "fuzzing")]
pub(crate) use stream::backend_head;
