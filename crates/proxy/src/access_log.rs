//! The access log: one line for every request fulcrum finished, its own refusals included, in
//! nginx's `combined` format (with fulcrum's fields after it) or as one JSON object a line.
//!
//! A worker formats its line and hands it to the log's own thread through a bounded channel;
//! that thread writes to stderr or a file. A worker never waits on the disk or the pipe: when
//! the channel is full (the disk stalls), lines are dropped and counted, and the next line
//! written says how many. `reopen` (SIGUSR1, as nginx) makes the thread reopen the file, for
//! logrotate.
//!
//! `combined`, then fulcrum's fields (nginx's names where nginx has one):
//!
//! ```text
//! 127.1.0.1 - - [23/Nov/2026:17:55:19 +0000] "GET /a HTTP/1.1" 200 5 "-" "curl/8.5" rt=0.003 urt=0.002 ua="127.0.0.1:9001" upstream=web fate=answered
//! ```
//!
//! Times are UTC. `rt`: the request's time, from its head to the end of the answer; `urt`:
//! time spent on backends (`-` if none was tried); `ua`: every backend tried, in order.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, SystemTime};

/// Lines that may wait for the writer thread (about 2 MiB of typical lines): beyond, dropped.
const QUEUE: usize = 8192;

/// How a line is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// nginx's `combined`, then fulcrum's fields.
    #[default]
    Combined,
    /// One JSON object a line.
    Json,
}

/// Where lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    Stderr,
    /// Appended to; reopened on [`AccessLog::reopen`].
    File(PathBuf),
}

/// What the access log is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogSettings {
    pub destination: Destination,
    pub format: Format,
}

/// A running access log: cheap to clone; its thread ends when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct AccessLog {
    settings: AccessLogSettings,
    lines: SyncSender<Vec<u8>>,
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    dropped: AtomicU64,
    reopen: AtomicBool,
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
    pub referer: &'a [u8],
    pub user_agent: &'a [u8],
    pub request_time: Duration,
    pub upstream_time: Option<Duration>,
    pub backends: &'a [SocketAddr],
    pub upstream: &'a str,
    /// The route that took the request, on a listener with routes.
    pub route: Option<&'a str>,
    /// The request's id, on a listener with `request_id = true`.
    pub request_id: Option<&'a [u8]>,
    pub fate: &'a str,
}

impl AccessLog {
    /// Opens the destination (a file is created if missing, appended to) and starts the
    /// writer thread.
    pub fn open(settings: AccessLogSettings) -> std::io::Result<AccessLog> {
        let out = open(&settings.destination)?;
        let (lines, queue) = std::sync::mpsc::sync_channel(QUEUE);
        let shared = Arc::new(Shared::default());
        let thread_shared = Arc::clone(&shared);
        let destination = settings.destination.clone();
        std::thread::Builder::new()
            .name("fulcrum-access-log".into())
            .spawn(move || write_lines(queue, out, destination, &thread_shared))?;
        Ok(AccessLog {
            settings,
            lines,
            shared,
        })
    }

    pub fn settings(&self) -> &AccessLogSettings {
        &self.settings
    }

    /// Asks the writer to reopen its file (after logrotate moved it); nothing for stderr.
    pub fn reopen(&self) {
        self.shared.reopen.store(true, Ordering::Relaxed);
    }

    /// Lines dropped so far because the writer could not keep up.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Formats `e` and queues it, without waiting.
    pub(crate) fn log(&self, e: &Entry<'_>) {
        let mut line = String::with_capacity(256);
        match self.settings.format {
            Format::Combined => combined(&mut line, e),
            Format::Json => json(&mut line, e),
        }
        line.push('\n');
        match self.lines.try_send(line.into_bytes()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

type Out = Box<dyn std::io::Write + Send>;

fn open(destination: &Destination) -> std::io::Result<Out> {
    Ok(match destination {
        Destination::Stderr => Box::new(std::io::stderr()),
        Destination::File(path) => Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?,
        ),
    })
}

/// The writer thread: lines as they come, flushed whenever the queue is empty; reopens the
/// file when asked; ends when every [`AccessLog`] is gone.
fn write_lines(queue: Receiver<Vec<u8>>, out: Out, destination: Destination, shared: &Shared) {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, out);
    let mut reported = 0;
    loop {
        let line = match queue.recv_timeout(Duration::from_secs(1)) {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        if shared.reopen.swap(false, Ordering::Relaxed) {
            let _ = out.flush();
            match open(&destination) {
                Ok(new) => out = std::io::BufWriter::with_capacity(64 * 1024, new),
                Err(e) => {
                    tracing::error!(log = ?destination, error = %e, "cannot reopen the access log; writing on to the old file")
                }
            }
        }
        let dropped = shared.dropped.load(Ordering::Relaxed);
        if dropped > reported {
            let _ = writeln!(
                out,
                "fulcrum: {} access log lines dropped: the log could not keep up",
                dropped - reported
            );
            reported = dropped;
        }
        if let Some(line) = line {
            let _ = out.write_all(&line);
            // Whatever else is waiting goes in the same write.
            while let Ok(line) = queue.try_recv() {
                let _ = out.write_all(&line);
            }
        }
        let _ = out.flush();
    }
    let _ = out.flush();
}

/// `[23/Nov/2026:17:55:19 +0000]`'s inside: nginx's `$time_local`, in UTC.
fn time_local(out: &mut String, t: SystemTime) {
    let t: chrono::DateTime<chrono::Utc> = t.into();
    let _ = write!(out, "{}", t.format("%d/%b/%Y:%H:%M:%S +0000"));
}

/// A request part as nginx writes it in a quoted log field: `"` and `\` escaped, and bytes
/// that are not printable ASCII as `\xHH`; `-` when empty.
fn quoted(out: &mut String, bytes: &[u8]) {
    out.push('"');
    if bytes.is_empty() {
        out.push('-');
    }
    for &b in bytes {
        match b {
            b'"' | b'\\' => {
                let _ = write!(out, "\\x{b:02X}");
            }
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02X}");
            }
        }
    }
    out.push('"');
}

fn seconds(out: &mut String, d: Option<Duration>) {
    match d {
        Some(d) => {
            let _ = write!(out, "{:.3}", d.as_secs_f64());
        }
        None => out.push('-'),
    }
}

fn combined(out: &mut String, e: &Entry<'_>) {
    let _ = write!(out, "{} - - [", e.client);
    time_local(out, e.time);
    out.push_str("] ");
    let mut request = Vec::with_capacity(e.method.len() + e.target.len() + 10);
    if !e.method.is_empty() {
        request.extend_from_slice(e.method);
        request.push(b' ');
        request.extend_from_slice(e.target);
        if !e.protocol.is_empty() {
            request.push(b' ');
            request.extend_from_slice(e.protocol);
        }
    }
    quoted(out, &request);
    let _ = write!(out, " {} {} ", e.status, e.body_bytes);
    quoted(out, e.referer);
    out.push(' ');
    quoted(out, e.user_agent);
    out.push_str(" rt=");
    seconds(out, Some(e.request_time));
    out.push_str(" urt=");
    seconds(out, e.upstream_time);
    out.push_str(" ua=\"");
    for (i, b) in e.backends.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{b}");
    }
    if e.backends.is_empty() {
        out.push('-');
    }
    let _ = write!(out, "\" upstream={} fate={}", e.upstream, e.fate);
    if let Some(route) = e.route {
        let _ = write!(out, " route={route}");
    }
    if let Some(id) = e.request_id {
        out.push_str(" request_id=");
        out.push_str(&String::from_utf8_lossy(id));
    }
}

fn json(out: &mut String, e: &Entry<'_>) {
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
    out.push_str(&value.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(backends: &'a [SocketAddr]) -> Entry<'a> {
        Entry {
            client: "127.1.0.1".parse().unwrap(),
            time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_456_519),
            method: b"GET",
            target: b"/a?b=\"c\"",
            protocol: b"HTTP/1.1",
            status: 200,
            body_bytes: 5,
            referer: b"",
            user_agent: b"curl/8.5 \xff",
            request_time: Duration::from_millis(3),
            upstream_time: Some(Duration::from_micros(2500)),
            backends,
            upstream: "web",
            route: None,
            request_id: None,
            fate: "answered",
        }
    }

    #[test]
    fn combined_is_nginx_s_with_fulcrum_s_fields_after() {
        let backends: Vec<SocketAddr> = vec!["127.0.0.1:9001".parse().unwrap()];
        let mut line = String::new();
        combined(&mut line, &entry(&backends));
        assert_eq!(
            line,
            "127.1.0.1 - - [23/Nov/2026:17:55:19 +0000] \"GET /a?b=\\x22c\\x22 HTTP/1.1\" 200 5 \"-\" \"curl/8.5 \\xFF\" rt=0.003 urt=0.003 ua=\"127.0.0.1:9001\" upstream=web fate=answered"
        );
        let mut refused = entry(&[]);
        refused.method = b"";
        refused.upstream_time = None;
        let mut line = String::new();
        combined(&mut line, &refused);
        assert!(line.contains(" \"-\" 200 5 "), "{line}");
        assert!(line.contains("urt=- ua=\"-\""), "{line}");
        // On a listener with routes, the route's name comes last.
        let mut routed = entry(&[]);
        routed.route = Some("api");
        let mut line = String::new();
        combined(&mut line, &routed);
        assert!(
            line.ends_with(" upstream=web fate=answered route=api"),
            "{line}"
        );
    }

    #[test]
    fn json_is_one_object_with_every_field() {
        let backends: Vec<SocketAddr> = vec![
            "127.0.0.1:9001".parse().unwrap(),
            "127.0.0.1:9002".parse().unwrap(),
        ];
        let mut line = String::new();
        json(&mut line, &entry(&backends));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["time"], "2026-11-23T17:55:19.000Z");
        assert_eq!(v["target"], "/a?b=\"c\"");
        assert_eq!(v["status"], 200);
        assert_eq!(v["referer"], serde_json::Value::Null);
        assert_eq!(v["backends"][1], "127.0.0.1:9002");
        assert_eq!(v["upstream_time"], 0.0025);
        assert_eq!(v["route"], serde_json::Value::Null);
        assert!(!line.contains('\n'));
    }

    #[test]
    fn a_file_log_is_appended_to_and_reopened() {
        let dir = std::env::temp_dir().join(format!("fulcrum-access-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("access.log");
        let _ = std::fs::remove_file(&path);
        let log = AccessLog::open(AccessLogSettings {
            destination: Destination::File(path.clone()),
            format: Format::Json,
        })
        .unwrap();
        let backends: Vec<SocketAddr> = vec![];
        log.log(&entry(&backends));
        let wait_for = |p: &std::path::Path, lines: usize| {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            loop {
                let n = std::fs::read_to_string(p).map_or(0, |t| t.lines().count());
                if n >= lines {
                    return n;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{lines} lines in {p:?}"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        assert_eq!(wait_for(&path, 1), 1);
        // logrotate: the file is moved away, the log told to reopen.
        let rotated = dir.join("access.log.1");
        std::fs::rename(&path, &rotated).unwrap();
        log.reopen();
        log.log(&entry(&backends));
        assert_eq!(wait_for(&path, 1), 1);
        assert_eq!(wait_for(&rotated, 1), 1, "the old file keeps its line");
        drop(log);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
