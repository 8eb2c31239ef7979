//! One request's line, in the log's format, appended to a worker's batch: `combined` (nginx's,
//! then fulcrum's fields), JSON, or a template of nginx's variables.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use super::entry::{Entry, Format};
use super::template::{Part, Template, Var};
use super::text::{self, Clock};

/// What a worker keeps to write lines with, besides its batch: the time strings of the
/// current second and room to build a value in ($uri, $remote_user).
#[derive(Debug, Default)]
pub(crate) struct Tools {
    pub(crate) clock: Clock,
    scratch: Vec<u8>,
}

/// Appends `e`'s line, its newline included, to `out`.
pub(crate) fn write(out: &mut Vec<u8>, format: &Format, tools: &mut Tools, e: &Entry<'_>) {
    match format {
        Format::Combined => combined(out, &mut tools.clock, e),
        Format::Json => json(out, e),
        Format::Template(t) => template(out, t, tools, e),
    }
    out.push(b'\n');
}

/// The request line as nginx's `$request`: method, target and protocol; empty when there
/// was no method.
fn request(out: &mut Vec<u8>, e: &Entry<'_>) {
    if e.method.is_empty() {
        return;
    }
    text::escape(out, e.method);
    out.push(b' ');
    text::escape(out, e.target);
    if !e.protocol.is_empty() {
        out.push(b' ');
        text::escape(out, e.protocol);
    }
}

/// `"…"` around `bytes` escaped, `"-"` for none.
fn quoted(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    text::escape_or_dash(out, bytes);
    out.push(b'"');
}

/// Backends as a list: `a, b` (nginx's `$upstream_addr`) or `a,b` (`combined`'s `ua=`).
fn backends(out: &mut Vec<u8>, list: &[SocketAddr], separator: &[u8]) {
    for (i, b) in list.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(separator);
        }
        text::socket(out, *b);
    }
}

/// nginx's `combined`, then fulcrum's fields: byte for byte what this log always wrote
/// (the request's time is when its head came; `rt` and `urt` rounded).
fn combined(out: &mut Vec<u8>, clock: &mut Clock, e: &Entry<'_>) {
    text::ip(out, e.client);
    out.extend_from_slice(b" - - [");
    out.extend_from_slice(clock.local(e.time));
    out.extend_from_slice(b"] \"");
    if e.method.is_empty() {
        out.push(b'-');
    } else {
        request(out, e);
    }
    out.extend_from_slice(b"\" ");
    text::number(out, u64::from(e.status));
    out.push(b' ');
    text::number(out, e.body_bytes);
    out.push(b' ');
    quoted(out, e.referer);
    out.push(b' ');
    quoted(out, e.user_agent);
    out.extend_from_slice(b" rt=");
    text::seconds_rounded(out, e.request_time);
    out.extend_from_slice(b" urt=");
    match e.upstream_time {
        Some(d) => text::seconds_rounded(out, d),
        None => out.push(b'-'),
    }
    out.extend_from_slice(b" ua=\"");
    if e.backends.is_empty() {
        out.push(b'-');
    }
    backends(out, e.backends, b",");
    out.extend_from_slice(b"\" upstream=");
    out.extend_from_slice(e.upstream.as_bytes());
    out.extend_from_slice(b" fate=");
    out.extend_from_slice(e.fate.as_bytes());
    if let Some(route) = e.route {
        out.extend_from_slice(b" route=");
        out.extend_from_slice(route.as_bytes());
    }
    if let Some(id) = e.request_id {
        out.extend_from_slice(b" request_id=");
        match std::str::from_utf8(id) {
            Ok(id) => out.extend_from_slice(id.as_bytes()),
            Err(_) => out.extend_from_slice(String::from_utf8_lossy(id).as_bytes()),
        }
    }
}

/// One JSON object.
fn json(out: &mut Vec<u8>, e: &Entry<'_>) {
    let text = |b: &[u8]| (!b.is_empty()).then(|| String::from_utf8_lossy(b).into_owned());
    let t: chrono::DateTime<chrono::Utc> = e.time.into();
    let value = serde_json::json!({
        "time": t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "client": e.client.to_string(),
        "method": text(e.method),
        "target": text(e.target),
        "protocol": text(e.protocol),
        "status": e.status,
        "body_bytes": e.body_bytes,
        "referer": text(e.referer),
        "user_agent": text(e.user_agent),
        "request_time": e.request_time.as_secs_f64(),
        "upstream_time": e.upstream_time.map(|d| d.as_secs_f64()),
        "backends": e.backends.iter().map(|b| b.to_string()).collect::<Vec<_>>(),
        "upstream": e.upstream,
        "route": e.route,
        "request_id": e.request_id.map(|id| String::from_utf8_lossy(id).into_owned()),
        "fate": e.fate,
    });
    let _ = serde_json::to_writer(&mut *out, &value);
}

/// A template's parts, each variable as nginx writes it.
fn template(out: &mut Vec<u8>, t: &Template, tools: &mut Tools, e: &Entry<'_>) {
    // The time the line is written, nginx's for `$time_local`, `$time_iso8601` and `$msec`;
    // read once, and only if asked for.
    let mut now = None;
    for part in &t.parts {
        match part {
            Part::Literal(bytes) => out.extend_from_slice(bytes),
            Part::Var(var) => variable(out, *var, tools, e, &mut now),
        }
    }
}

/// The value of a header the template reads, `None` if the request had none.
fn header<'a>(e: &'a Entry<'_>, i: usize) -> Option<&'a [u8]> {
    e.headers.get(i)?.as_deref()
}

fn variable(
    out: &mut Vec<u8>,
    var: Var,
    tools: &mut Tools,
    e: &Entry<'_>,
    now: &mut Option<SystemTime>,
) {
    match var {
        Var::RemoteAddr => text::ip(out, e.client),
        Var::RemoteUser(i) => remote_user(out, header(e, i), &mut tools.scratch),
        Var::TimeLocal => {
            out.extend_from_slice(tools.clock.local(*now.get_or_insert_with(SystemTime::now)))
        }
        Var::TimeIso8601 => {
            out.extend_from_slice(tools.clock.iso(*now.get_or_insert_with(SystemTime::now)))
        }
        Var::Msec => {
            let (secs, ms) = text::since_epoch(*now.get_or_insert_with(SystemTime::now));
            text::millis(out, secs * 1000 + ms);
        }
        Var::Request if e.method.is_empty() => out.push(b'-'),
        Var::Request => request(out, e),
        Var::RequestMethod => text::escape_or_dash(out, e.method),
        Var::RequestUri => text::escape_or_dash(out, e.target),
        Var::Uri => uri(out, e.target, &mut tools.scratch),
        Var::Args => match e.target.iter().position(|&b| b == b'?') {
            Some(q) => text::escape(out, &e.target[q + 1..]),
            None => out.push(b'-'),
        },
        Var::ServerProtocol => text::escape_or_dash(out, e.protocol),
        Var::Status => text::number3(out, u64::from(e.status)),
        Var::BodyBytesSent => text::number(out, e.body_bytes),
        Var::BytesSent => match e.bytes_sent {
            Some(n) => text::number(out, n),
            None => out.push(b'-'),
        },
        Var::RequestTime => text::seconds_truncated(out, e.request_time),
        Var::UpstreamAddr if e.backends.is_empty() => out.push(b'-'),
        Var::UpstreamAddr => backends(out, e.backends, b", "),
        Var::UpstreamStatus => per_attempt(
            out,
            e,
            |out, (status, _)| text::number(out, u64::from(status)),
            |out| match e.upstream_status {
                Some(s) => text::number(out, u64::from(s)),
                None => out.push(b'-'),
            },
        ),
        Var::UpstreamResponseTime => per_attempt(
            out,
            e,
            |out, (_, took)| text::seconds_truncated(out, took),
            // The last attempt's: the time on backends less the earlier attempts'.
            |out| match e.upstream_time {
                Some(d) => {
                    let earlier: Duration = e.earlier.iter().map(|&(_, took)| took).sum();
                    text::seconds_truncated(out, d.saturating_sub(earlier));
                }
                None => out.push(b'-'),
            },
        ),
        Var::Http(i) => match header(e, i) {
            Some(value) => text::escape(out, value),
            None => out.push(b'-'),
        },
        Var::Host(i) => host(out, header(e, i), &mut tools.scratch),
        Var::RequestId => match e.request_id {
            Some(id) => text::escape(out, id),
            None => out.push(b'-'),
        },
        Var::Route => out.extend_from_slice(e.route.unwrap_or("-").as_bytes()),
        Var::Fate => out.extend_from_slice(e.fate.as_bytes()),
        Var::Upstream => out.extend_from_slice(e.upstream.as_bytes()),
    }
}

/// A value per backend tried, `, ` between them (nginx's `$upstream_status` and
/// `$upstream_response_time`), `-` if none was: an attempt that was not relayed by `each` of
/// what it came to ([`Entry::earlier`]), the relayed one by `last`; one whose end was not
/// recorded (the client left during it) is `-`.
fn per_attempt(
    out: &mut Vec<u8>,
    e: &Entry<'_>,
    each: impl Fn(&mut Vec<u8>, (u16, Duration)),
    last: impl FnOnce(&mut Vec<u8>),
) {
    let Some(n) = e.backends.len().checked_sub(1) else {
        out.push(b'-');
        return;
    };
    // Every attempt but the last, then the last: a failed one's own, or the relayed answer's.
    for i in 0..n {
        match e.earlier.get(i) {
            Some(&attempt) => each(out, attempt),
            None => out.push(b'-'),
        }
        out.extend_from_slice(b", ");
    }
    match e.earlier.get(n) {
        Some(&attempt) => each(out, attempt),
        None => last(out),
    }
}

/// nginx's `$remote_user`: the user of a `Basic` authorization, escaped; `-` for none.
fn remote_user(out: &mut Vec<u8>, authorization: Option<&[u8]>, scratch: &mut Vec<u8>) {
    scratch.clear();
    match authorization.and_then(|v| text::basic_user(v, scratch)) {
        Some(()) => text::escape(out, scratch),
        None => out.push(b'-'),
    }
}

/// nginx's `$uri`: the target's path as nginx normalizes it (escapes decoded, `.` and `..`
/// segments resolved, slashes merged: [`routes::normalize`]), escaped; a path nginx would
/// have refused is written as it came.
fn uri(out: &mut Vec<u8>, target: &[u8], scratch: &mut Vec<u8>) {
    let path = match target.iter().position(|&b| b == b'?') {
        Some(q) => &target[..q],
        None => target,
    };
    if path.is_empty() {
        out.push(b'-');
    } else if routes::is_normal(path) {
        text::escape(out, path);
    } else if routes::normalize(path, scratch).is_ok() {
        text::escape(out, scratch);
    } else {
        text::escape(out, path);
    }
}

/// nginx's `$host`: the `Host` header's name in lower case, its port left out
/// ([`routes::host_name`]); empty without one (nginx: the server's name, `""` by default).
fn host(out: &mut Vec<u8>, value: Option<&[u8]>, scratch: &mut Vec<u8>) {
    let Some(value) = value else { return };
    let Some((len, _)) = routes::host_name(value) else {
        return;
    };
    scratch.clear();
    scratch.extend_from_slice(&value[..len.min(value.len())]);
    scratch.make_ascii_lowercase();
    text::escape(out, scratch);
}
