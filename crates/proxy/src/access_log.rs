//! The access log: one line for every request fulcrum finished, its own refusals included, in
//! nginx's `combined` format (with fulcrum's fields after it), as one JSON object a line, or
//! in a template of nginx's variables ([`Template`]).
//!
//! `combined`, then fulcrum's fields (nginx's names where nginx has one):
//!
//! ```text
//! 127.1.0.1 - - [23/Nov/2026:17:55:19 +0000] "GET /a HTTP/1.1" 200 5 "-" "curl/8.5" rt=0.003 urt=0.002 ua="127.0.0.1:9001" upstream=web fate=answered
//! ```
//!
//! Times are UTC. `rt`: the request's time, from its head to the end of the answer; `urt`:
//! time spent on backends (`-` if none was tried); `ua`: every backend tried, in order.
//!
//! # What a line costs
//!
//! A worker writes its line straight into a batch of its own (a `Vec<u8>` kept from line to
//! line: no allocation), behind a lock only the log's thread also takes, once every 100 ms;
//! the time strings are made once a second ([`text::Clock`], as nginx's `ngx_time_update`).
//! A batch of 64 KiB goes to the log's own thread through a bounded channel, and comes back
//! to be filled again; that thread also takes whatever the workers hold every 100 ms, when the
//! log is reopened (SIGUSR1, for logrotate) and at shutdown ([`AccessLog::flush`]), and writes
//! each batch with one `write`. Before, each line was a `String` sent through the channel on
//! its own, which woke the log's thread and cost a `write` per line: about 8.5 µs of CPU a
//! request at one worker (issue 29).
//!
//! A worker never waits on the disk or the pipe: when the channel is full (the disk stalls),
//! the worker's batch grows up to [`HOLD`], and past that lines are dropped and counted; the
//! next batch written starts with a line saying how many.

mod entry;
mod line;
mod template;
pub(crate) mod text;

pub(crate) use entry::Entry;
pub use entry::Format;
pub use template::{Template, TemplateError, VARIABLES};

use std::cell::Cell;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A batch this full goes to the log's thread (nginx's `buffer=` is often this size).
const BATCH: usize = 64 * 1024;
/// How long a line may wait in a worker's batch before the log's thread takes it.
const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// Full batches that may wait for the log's thread (2 MiB): beyond, a worker keeps filling its
/// own batch.
const QUEUE: usize = 32;
/// The most a worker's batch holds while the log's thread cannot take it: beyond, dropped.
const HOLD: usize = 16 * BATCH;
/// The batches a worker may fill at once: one per worker thread, up to this many (more
/// workers share them, each still behind its lock).
const SLOTS: usize = 64;
/// Emptied batches kept for the workers to fill again.
const SPARE: usize = 8;

/// Where lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    Stderr,
    /// Appended to; reopened on [`AccessLog::reopen`].
    File(PathBuf),
}

/// As an operator names it: `stderr`, or the file's path.
impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Destination::Stderr => f.write_str("stderr"),
            Destination::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// What the access log is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogSettings {
    pub destination: Destination,
    pub format: Format,
}

/// A running access log: cheap to clone; its thread writes what is left and ends when the
/// last clone is dropped.
#[derive(Debug, Clone)]
pub struct AccessLog {
    settings: Arc<AccessLogSettings>,
    batches: SyncSender<Message>,
    shared: Arc<Shared>,
}

/// What the log's thread is sent.
#[derive(Debug)]
enum Message {
    /// A full batch, to write.
    Batch(Vec<u8>),
    /// Write everything the workers hold, then say so.
    Flush(std::sync::mpsc::Sender<()>),
    /// Write everything the workers hold, reopen the file, then say so.
    Reopen(std::sync::mpsc::Sender<()>),
}

/// What the workers and the log's thread share.
#[derive(Debug)]
struct Shared {
    slots: Box<[Slot]>,
    /// Emptied batches, for the workers to fill again.
    spare: Mutex<Vec<Vec<u8>>>,
    dropped: AtomicU64,
    reopen: AtomicBool,
}

/// One worker's batch (its own cache line: workers do not share one).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Slot(Mutex<Pending>);

/// Lines a worker wrote that the log's thread has not taken yet.
#[derive(Debug, Default)]
struct Pending {
    batch: Vec<u8>,
    tools: line::Tools,
}

thread_local! {
    /// This thread's slot number, given out on its first line.
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

/// The slot of the calling thread: each worker thread its own (up to [`SLOTS`]).
fn slot_number() -> usize {
    SLOT.with(|slot| {
        let mut n = slot.get();
        if n == usize::MAX {
            n = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
            slot.set(n);
        }
        n % SLOTS
    })
}

/// A lock whose holder panicked is still good: the batch is bytes.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl AccessLog {
    /// Opens the destination (a file is created if missing, appended to) and starts the
    /// writer thread.
    pub fn open(settings: AccessLogSettings) -> std::io::Result<AccessLog> {
        let out = open(&settings.destination)?;
        AccessLog::start(settings, out)
    }

    /// Starts the log's thread writing to `out`.
    fn start(settings: AccessLogSettings, out: Out) -> std::io::Result<AccessLog> {
        let (batches, queue) = std::sync::mpsc::sync_channel(QUEUE);
        let shared = Arc::new(Shared {
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
            spare: Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
            reopen: AtomicBool::new(false),
        });
        let mut writer = Writer {
            out,
            destination: settings.destination.clone(),
            shared: Arc::clone(&shared),
            reported: 0,
            empty: Vec::with_capacity(BATCH),
        };
        std::thread::Builder::new()
            .name("fulcrum-access-log".into())
            .spawn(move || writer.run(&queue))?;
        Ok(AccessLog {
            settings: Arc::new(settings),
            batches,
            shared,
        })
    }

    pub fn settings(&self) -> &AccessLogSettings {
        &self.settings
    }

    /// Has the writer write what the workers hold to the file, then reopen it (after
    /// logrotate moved it; nothing more for stderr), and waits for that (up to a second:
    /// lines logged from then on go to the new file). With the writer's queue full, it is
    /// done within [`FLUSH_EVERY`] instead. Whether the writer said it was done.
    pub fn reopen(&self) -> bool {
        let (done, reopened) = std::sync::mpsc::channel();
        match self.batches.try_send(Message::Reopen(done)) {
            Ok(()) => reopened.recv_timeout(Duration::from_secs(1)).is_ok(),
            Err(_) => {
                self.shared.reopen.store(true, Ordering::Relaxed);
                false
            }
        }
    }

    /// Lines dropped so far because the writer could not keep up.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Has every line logged so far written, waiting up to `within` (shutdown: the workers
    /// have stopped; a stalled disk does not hold the process longer). Whether it was.
    pub fn flush(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let (done, written) = std::sync::mpsc::channel();
        let mut message = Message::Flush(done);
        loop {
            match self.batches.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(m)) if Instant::now() < deadline => {
                    message = m;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(TrySendError::Full(_)) => return false,
            }
        }
        written
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_ok()
    }

    /// Writes `e`'s line into this worker's batch, without waiting on the disk.
    pub(crate) fn log(&self, e: &Entry<'_>) {
        let slot = &self.shared.slots[slot_number()];
        let mut pending = lock(&slot.0);
        let pending = &mut *pending;
        if pending.batch.len() >= HOLD {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if pending.batch.capacity() == 0 {
            pending.batch = self.shared.spare_batch();
        }
        line::write(
            &mut pending.batch,
            &self.settings.format,
            &mut pending.tools,
            e,
        );
        if pending.batch.len() >= BATCH {
            let full = std::mem::take(&mut pending.batch);
            match self.batches.try_send(Message::Batch(full)) {
                Ok(()) => pending.batch = self.shared.spare_batch(),
                // The log's thread is behind (or gone): the batch stays, and grows.
                Err(TrySendError::Full(Message::Batch(full)))
                | Err(TrySendError::Disconnected(Message::Batch(full))) => pending.batch = full,
                Err(_) => {}
            }
        }
    }
}

impl Shared {
    /// An emptied batch to fill, or a new one.
    fn spare_batch(&self) -> Vec<u8> {
        lock(&self.spare)
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BATCH + BATCH / 4))
    }

    /// Keeps `batch`, emptied, for a worker (as many as [`SPARE`]).
    fn recycle(&self, mut batch: Vec<u8>) {
        // One that grew while the writer was behind goes back to the allocator.
        if batch.capacity() > 2 * BATCH {
            return;
        }
        batch.clear();
        let mut spare = lock(&self.spare);
        if spare.len() < SPARE {
            spare.push(batch);
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

/// The log's thread.
struct Writer {
    out: Out,
    destination: Destination,
    shared: Arc<Shared>,
    /// Drops already reported in the log.
    reported: u64,
    /// The batch swapped into a worker's slot when its lines are taken.
    empty: Vec<u8>,
}

impl Writer {
    /// Writes full batches as they come, and every [`FLUSH_EVERY`] what the workers hold;
    /// reopens the file when asked; ends, having written everything, when every
    /// [`AccessLog`] is gone.
    fn run(&mut self, queue: &Receiver<Message>) {
        let mut next_sweep = Instant::now() + FLUSH_EVERY;
        loop {
            let wait = next_sweep.saturating_duration_since(Instant::now());
            match queue.recv_timeout(wait) {
                Ok(Message::Batch(batch)) => {
                    self.write(&batch);
                    self.shared.recycle(batch);
                }
                Ok(Message::Flush(done)) => {
                    self.sweep();
                    let _ = done.send(());
                }
                Ok(Message::Reopen(done)) => {
                    self.sweep();
                    self.reopen();
                    let _ = done.send(());
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            let now = Instant::now();
            if now >= next_sweep {
                self.sweep();
                if self.shared.reopen.swap(false, Ordering::Relaxed) {
                    self.reopen();
                }
                next_sweep = now + FLUSH_EVERY;
            }
        }
        self.sweep();
    }

    /// Takes and writes what every worker holds.
    fn sweep(&mut self) {
        let shared = Arc::clone(&self.shared);
        for slot in shared.slots.iter() {
            let mut batch = {
                let mut pending = lock(&slot.0);
                if pending.batch.is_empty() {
                    continue;
                }
                std::mem::replace(&mut pending.batch, std::mem::take(&mut self.empty))
            };
            self.write(&batch);
            batch.clear();
            if batch.capacity() <= 2 * BATCH {
                self.empty = batch;
            }
        }
    }

    /// One batch, in one `write` (the drops since the last, if any, said first).
    fn write(&mut self, batch: &[u8]) {
        let dropped = self.shared.dropped.load(Ordering::Relaxed);
        if dropped > self.reported {
            let _ = writeln!(
                self.out,
                "fulcrum: {} access log lines dropped: the log could not keep up",
                dropped - self.reported
            );
            self.reported = dropped;
        }
        let _ = self.out.write_all(batch);
        let _ = self.out.flush();
    }

    fn reopen(&mut self) {
        match open(&self.destination) {
            Ok(new) => self.out = new,
            Err(e) => {
                tracing::error!(log = %self.destination, error = %e, "cannot reopen the access log; writing on to the old file")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use std::sync::Condvar;
    use std::time::SystemTime;

    fn entry<'a>(backends: &'a [SocketAddr]) -> Entry<'a> {
        Entry {
            client: "127.1.0.1".parse().unwrap(),
            time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_456_519),
            method: b"GET",
            target: b"/a?b=\"c\"",
            protocol: b"HTTP/1.1",
            status: 200,
            body_bytes: 5,
            bytes_sent: None,
            referer: b"",
            user_agent: b"curl/8.5 \xff",
            headers: &[],
            request_time: Duration::from_millis(3),
            upstream_time: Some(Duration::from_micros(2500)),
            upstream_status: Some(200),
            backends,
            earlier: &[],
            upstream: "web",
            route: None,
            request_id: None,
            fate: "answered",
        }
    }

    fn line_of(format: &Format, e: &Entry<'_>) -> String {
        let mut out = Vec::new();
        line::write(&mut out, format, &mut line::Tools::default(), e);
        assert_eq!(out.pop(), Some(b'\n'));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn combined_is_nginx_s_with_fulcrum_s_fields_after() {
        let backends: Vec<SocketAddr> = vec!["127.0.0.1:9001".parse().unwrap()];
        let line = line_of(&Format::Combined, &entry(&backends));
        assert_eq!(
            line,
            "127.1.0.1 - - [23/Nov/2026:17:55:19 +0000] \"GET /a?b=\\x22c\\x22 HTTP/1.1\" 200 5 \"-\" \"curl/8.5 \\xFF\" rt=0.003 urt=0.003 ua=\"127.0.0.1:9001\" upstream=web fate=answered"
        );
        let mut refused = entry(&[]);
        refused.method = b"";
        refused.upstream_time = None;
        let line = line_of(&Format::Combined, &refused);
        assert!(line.contains(" \"-\" 200 5 "), "{line}");
        assert!(line.contains("urt=- ua=\"-\""), "{line}");
        // On a listener with routes, the route's name comes last, then the request id.
        let mut routed = entry(&[]);
        routed.route = Some("api");
        routed.request_id = Some(b"abc\xff");
        let line = line_of(&Format::Combined, &routed);
        assert!(
            line.ends_with(" upstream=web fate=answered route=api request_id=abc\u{fffd}"),
            "{line}"
        );
    }

    #[test]
    fn json_is_one_object_with_every_field() {
        let backends: Vec<SocketAddr> = vec![
            "127.0.0.1:9001".parse().unwrap(),
            "127.0.0.1:9002".parse().unwrap(),
        ];
        let line = line_of(&Format::Json, &entry(&backends));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["time"], "2026-11-23T17:55:19.000Z");
        assert_eq!(v["target"], "/a?b=\"c\"");
        assert_eq!(v["status"], 200);
        assert_eq!(v["referer"], serde_json::Value::Null);
        assert_eq!(v["backends"][1], "127.0.0.1:9002");
        assert_eq!(v["upstream_time"], 0.0025);
        assert_eq!(v["route"], serde_json::Value::Null);
    }

    /// Every variable of a template, as nginx writes it.
    #[test]
    fn every_template_variable_is_written_as_nginx_writes_it() {
        let t = |source: &str| Format::Template(Arc::new(Template::parse(source).unwrap()));
        let backends: Vec<SocketAddr> = vec![
            "127.0.0.1:9001".parse().unwrap(),
            "127.0.0.1:9002".parse().unwrap(),
        ];
        let template = t("$remote_user|$http_x_a|$host|$http_user_agent|$http_absent");
        let headers: Vec<Option<Box<[u8]>>> = vec![
            Some(b"Basic YWxpY2U6c2VjcmV0".to_vec().into()), // alice:secret
            Some(b"v \"1\"".to_vec().into()),
            Some(b"WWW.Example.COM:8080".to_vec().into()),
            Some(b"".to_vec().into()),
            None,
        ];
        let mut e = entry(&backends);
        e.target = b"/a/./b/../%63?x=1&y=\"";
        e.bytes_sent = Some(120);
        e.request_time = Duration::from_micros(2999);
        // The first backend timed out after 3.456 ms (our 504); the second's 503 is relayed.
        let earlier = [(504, Duration::from_micros(3456))];
        e.earlier = &earlier;
        e.upstream_time = Some(Duration::from_micros(5000));
        e.upstream_status = Some(503);
        e.route = Some("api");
        e.request_id = Some(b"0123abcd");
        e.headers = &headers;
        assert_eq!(
            line_of(&template, &e),
            "alice|v \\x221\\x22|www.example.com||-"
        );
        let cases = [
            ("$remote_addr", "127.1.0.1"),
            ("$request", "GET /a/./b/../%63?x=1&y=\\x22 HTTP/1.1"),
            ("$request_method", "GET"),
            ("$request_uri", "/a/./b/../%63?x=1&y=\\x22"),
            ("$uri", "/a/c"),
            ("$args", "x=1&y=\\x22"),
            ("$server_protocol", "HTTP/1.1"),
            ("$status", "200"),
            ("$body_bytes_sent", "5"),
            ("$bytes_sent", "120"),
            ("$request_time", "0.002"),
            ("$upstream_addr", "127.0.0.1:9001, 127.0.0.1:9002"),
            ("$upstream_status", "504, 503"),
            ("$upstream_response_time", "0.003, 0.001"),
            ("$request_id", "0123abcd"),
            ("$route", "api"),
            ("$fate", "answered"),
            ("$upstream", "web"),
            ("${status}${status}", "200200"),
        ];
        for (source, expected) in cases {
            assert_eq!(line_of(&t(source), &e), expected, "{source}");
        }
        // What a request without them writes.
        let mut bare = entry(&[]);
        bare.method = b"";
        bare.target = b"";
        bare.protocol = b"";
        bare.status = 9;
        bare.upstream_time = None;
        bare.upstream_status = None;
        bare.upstream = "-";
        bare.headers = &[None, None, None, None, None];
        for (source, expected) in [
            (
                "$remote_user|$http_x_a|$host|$http_user_agent|$http_absent",
                "-|-||-|-",
            ),
            (
                "$request $request_method $request_uri $uri $args",
                "- - - - -",
            ),
            ("$server_protocol $status $bytes_sent", "- 009 -"),
            (
                "$upstream_addr $upstream_status $upstream_response_time",
                "- - -",
            ),
            ("$request_id $route $upstream", "- - -"),
        ] {
            assert_eq!(line_of(&t(source), &bare), expected, "{source}");
        }
        // Every backend failed: each attempt's own status and time (nginx: "502, 504").
        let mut failed = entry(&backends);
        let both = [
            (502, Duration::from_micros(1500)),
            (504, Duration::from_micros(2500)),
        ];
        failed.earlier = &both;
        failed.upstream_status = Some(504);
        let trail = t("$upstream_status|$upstream_response_time");
        assert_eq!(line_of(&trail, &failed), "502, 504|0.001, 0.002");
        // An attempt whose end was not recorded (none here) is `-`; the last is the answer's.
        let three: Vec<SocketAddr> = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let mut gap = entry(&three);
        let first = [(502, Duration::from_micros(1000))];
        gap.earlier = &first;
        assert_eq!(line_of(&trail, &gap), "502, -, 200|0.001, -, 0.001");
        let mut no_query = entry(&[]);
        no_query.target = b"/p?";
        assert_eq!(line_of(&t("[$args]"), &no_query), "[]");
        no_query.target = b"/p";
        assert_eq!(line_of(&t("[$args]"), &no_query), "[-]");
    }

    /// The time variables are the line's own, the current second's strings and milliseconds.
    #[test]
    fn time_variables_are_the_time_of_the_line() {
        let template = Template::parse("$time_local|$time_iso8601|$msec").unwrap();
        let format = Format::Template(Arc::new(template));
        let before = SystemTime::now();
        let line = line_of(&format, &entry(&[]));
        let after = SystemTime::now();
        let parts: Vec<&str> = line.split('|').collect();
        let msec: f64 = parts[2].parse().unwrap();
        let secs = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
        };
        assert!(
            secs(before) - 0.001 <= msec && msec <= secs(after),
            "{line}"
        );
        assert!(
            parts[2].split('.').nth(1).is_some_and(|ms| ms.len() == 3),
            "{line}"
        );
        let at = chrono::DateTime::<chrono::Utc>::from_timestamp(msec as i64, 0).unwrap();
        assert_eq!(parts[0], at.format("%d/%b/%Y:%H:%M:%S +0000").to_string());
        assert_eq!(parts[1], at.format("%Y-%m-%dT%H:%M:%S+00:00").to_string());
    }

    /// Where the log's thread writes in the tests: each `write` call kept apart; with a gate
    /// closed, a write waits until it opens (a stalled disk).
    #[derive(Clone, Default)]
    struct Recorder {
        writes: Arc<Mutex<Vec<Vec<u8>>>>,
        gate: Arc<(Mutex<bool>, Condvar)>,
    }

    impl Recorder {
        fn stall(&self, closed: bool) {
            *lock(&self.gate.0) = closed;
            self.gate.1.notify_all();
        }
        fn text(&self) -> String {
            String::from_utf8(lock(&self.writes).concat()).unwrap()
        }
        fn writes(&self) -> usize {
            lock(&self.writes).len()
        }
    }

    impl std::io::Write for Recorder {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut closed = lock(&self.gate.0);
            while *closed {
                closed = self.gate.1.wait(closed).unwrap_or_else(|p| p.into_inner());
            }
            lock(&self.writes).push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn recorded(format: Format) -> (AccessLog, Recorder) {
        let recorder = Recorder::default();
        let settings = AccessLogSettings {
            destination: Destination::Stderr,
            format,
        };
        let log = AccessLog::start(settings, Box::new(recorder.clone())).unwrap();
        (log, recorder)
    }

    /// Waits (up to 5 s) until `done` holds.
    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(Instant::now() < deadline, "waited 5 s for {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Lines go out in batches: thousands of lines in a few writes, one per 64 KiB or so, not
    /// one per line; and flush writes what the workers hold, at once.
    #[test]
    fn lines_are_written_in_batches() {
        let (log, recorder) = recorded(Format::Combined);
        let backends: Vec<SocketAddr> = vec!["127.0.0.1:9001".parse().unwrap()];
        let lines = 5000;
        for _ in 0..lines {
            log.log(&entry(&backends));
        }
        assert!(log.flush(Duration::from_secs(5)));
        let text = recorder.text();
        assert_eq!(text.lines().count(), lines);
        let bytes = text.len();
        // A batch is written when it passes 64 KiB, the rest at the flush (and maybe a sweep
        // on the way): a handful of writes, not 5,000.
        let writes = recorder.writes();
        assert!(
            writes <= bytes / BATCH + 3,
            "{writes} writes for {bytes} bytes"
        );
        assert_eq!(log.dropped(), 0);
    }

    /// An idle log does not keep its last lines: they are written within about 100 ms.
    #[test]
    fn a_line_is_written_within_a_tenth_of_a_second() {
        let (log, recorder) = recorded(Format::Combined);
        let logged = Instant::now();
        log.log(&entry(&[]));
        wait_until("the line", || recorder.text().lines().count() == 1);
        let took = logged.elapsed();
        // 100 ms, with room for a busy machine; a log that only wrote full batches (or once
        // a second) would not be here yet.
        assert!(took < Duration::from_millis(400), "{took:?}");
        drop(log);
    }

    /// Dropping the last handle writes what the workers held: nothing is lost at shutdown.
    #[test]
    fn nothing_is_lost_when_the_log_ends() {
        let (log, recorder) = recorded(Format::Combined);
        let second = log.clone();
        for _ in 0..100 {
            second.log(&entry(&[]));
        }
        drop(second);
        drop(log);
        wait_until("100 lines", || recorder.text().lines().count() == 100);
    }

    /// A stalled writer makes the workers drop lines rather than wait; they are counted, and
    /// the log says how many once it can write again.
    #[test]
    fn drops_are_counted_when_the_writer_stalls() {
        let (log, recorder) = recorded(Format::Combined);
        recorder.stall(true);
        let mut logged = 0u64;
        // More than the queue and a worker's batch can hold: QUEUE batches, HOLD, and the
        // batch the writer is stuck on.
        let started = Instant::now();
        while log.dropped() < 100 {
            log.log(&entry(&[]));
            logged += 1;
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no drops after {logged} lines"
            );
        }
        // Logging never waited on the stalled writer.
        let dropped = log.dropped();
        recorder.stall(false);
        assert!(log.flush(Duration::from_secs(10)));
        log.log(&entry(&[]));
        logged += 1;
        assert!(log.flush(Duration::from_secs(10)));
        let text = recorder.text();
        let said =
            format!("fulcrum: {dropped} access log lines dropped: the log could not keep up");
        assert_eq!(text.lines().filter(|l| *l == said).count(), 1, "{said}");
        let written = text.lines().filter(|l| l.starts_with("127.1.0.1 ")).count() as u64;
        assert_eq!(written + dropped, logged);
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
        let lines =
            |p: &std::path::Path| std::fs::read_to_string(p).map_or(0, |t| t.lines().count());
        wait_until("the first line", || lines(&path) == 1);
        // logrotate: the file is moved away, the log told to reopen.
        let rotated = dir.join("access.log.1");
        std::fs::rename(&path, &rotated).unwrap();
        log.log(&entry(&backends));
        // The line logged before the reopen goes to the old file, the next to the new one.
        log.reopen();
        log.log(&entry(&backends));
        assert!(log.flush(Duration::from_secs(5)));
        assert_eq!(lines(&rotated), 2, "the old file keeps its lines");
        assert_eq!(lines(&path), 1);
        drop(log);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
