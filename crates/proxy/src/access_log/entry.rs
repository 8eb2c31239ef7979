//! What the log is given: a finished request ([`Entry`]) and how to write it ([`Format`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::template::Template;

/// How a line is written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Format {
    /// nginx's `combined`, then fulcrum's fields.
    #[default]
    Combined,
    /// One JSON object a line.
    Json,
    /// A template of nginx's variables.
    Template(Arc<Template>),
}

impl Format {
    /// The request headers the format writes (a template's `$http_NAME`, `$host`,
    /// `$remote_user`), lower case, in the order [`Entry::headers`] gives their values.
    pub(crate) fn headers(&self) -> &[Box<str>] {
        match self {
            Format::Template(t) => &t.headers,
            Format::Combined | Format::Json => &[],
        }
    }
}

/// One finished request, as the log takes it.
#[derive(Debug)]
pub(crate) struct Entry<'a> {
    pub client: IpAddr,
    pub time: SystemTime,
    pub method: &'a [u8],
    pub target: &'a [u8],
    /// `HTTP/1.1`, as the request line said.
    pub protocol: &'a [u8],
    pub status: u16,
    /// Bytes of the response body sent to the client.
    pub body_bytes: u64,
    /// Bytes sent to the client, head and body (nginx's `$bytes_sent`), where known.
    pub bytes_sent: Option<u64>,
    pub referer: &'a [u8],
    pub user_agent: &'a [u8],
    /// The values of the headers the format asks for ([`Format::headers`]), `None` for one
    /// the request did not have.
    pub headers: &'a [Option<Box<[u8]>>],
    pub request_time: Duration,
    pub upstream_time: Option<Duration>,
    /// The status the last backend tried answered (or failed with: our own 502 or 504),
    /// `None` if it gave none.
    pub upstream_status: Option<u16>,
    pub backends: &'a [SocketAddr],
    /// What each attempt that was not relayed came to, in order: its status (a listed one, or
    /// the 502 or 504 its failure makes ours) and its time. Shorter than `backends` by one
    /// when the last backend's answer was relayed (its status and time are
    /// `upstream_status` and what `upstream_time` leaves after these).
    pub earlier: &'a [(u16, Duration)],
    pub upstream: &'a str,
    /// The route that took the request, on a listener with routes.
    pub route: Option<&'a str>,
    /// The request's id, on a listener with `request_id = true`.
    pub request_id: Option<&'a [u8]>,
    pub fate: &'a str,
}
