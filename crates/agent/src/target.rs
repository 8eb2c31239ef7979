//! `--probe-target ADDR`: the agent answers Prequal's `GET /probe` (see [`crate::probe`]) for
//! a backend it runs beside that does not answer probes itself.
//!
//! An agent does not see the backend's requests, so it estimates both figures from outside:
//!
//! * **RIF**: the TCP connections in state ESTABLISHED whose local port is the target's, read
//!   from `/proc/net/tcp` and `/proc/net/tcp6` when the probe arrives (the kernel's table, the
//!   same one `ss -tn state established sport = :PORT` reads; any local address, since a
//!   backend on `0.0.0.0` is reached on whatever address a client dialled). With one request
//!   per connection (HTTP/1.1 without keep-alive, or a balancer that does not keep idle
//!   connections) this is exactly the requests in flight. With keep-alive it also counts idle
//!   connections: the kernel cannot tell a connection whose request is being worked on from an
//!   idle one once the request has been read (both have empty queues). It is then an upper
//!   bound that moves with the load; Prequal compares RIFs between backends and against a
//!   quantile of recent ones, so a bias that every backend shares matters less than the
//!   differences. Documented in docs/algorithms.md ("Prequal: the agent's probe").
//! * **Latency**: every [`PERIOD`] the agent sends one small request of its own
//!   (`GET --probe-path`, default `/`) to the target on a new connection, times it to the end
//!   of the answer, and records it with the RIF it found when it sent it in the same
//!   estimator the lab's backends keep ([`RifLatency`]). The estimate at a RIF is thus from
//!   requests like this one: it is the target's latency for a cheap request, queueing
//!   included, not for the average one. A request that times out is recorded at the timeout
//!   (a lower bound: the target is at least that slow).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use balance::Nanos;
use balance::RifLatency;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::shutdown::Shutdown;

/// How often the agent times a request of its own. Prequal's estimator keeps recent samples
/// per RIF; five a second fill it within seconds of a change while adding one cheap request
/// per 200 ms to the backend's load.
pub const PERIOD: Duration = Duration::from_millis(200);

/// The longest the agent waits for its own request's answer.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// The most of an answer read (the timing ends at its end or here).
const MAX_ANSWER: usize = 64 * 1024;

/// What `--probe-target` and `--probe-path` ask for.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    /// The path of the agent's own timed request.
    pub path: String,
    /// `/proc/net/tcp` and `/proc/net/tcp6`.
    pub tables: [PathBuf; 2],
}

impl Target {
    pub fn new(addr: SocketAddr, path: String) -> Target {
        Target {
            addr,
            path,
            tables: ["/proc/net/tcp".into(), "/proc/net/tcp6".into()],
        }
    }
}

/// The target's estimator and how to count its connections, shared by the timing loop and
/// the HTTP endpoint.
#[derive(Debug)]
pub struct Prober {
    target: Target,
    epoch: Instant,
    latency: Mutex<RifLatency>,
}

impl Prober {
    pub fn new(target: Target) -> Prober {
        Prober {
            target,
            epoch: Instant::now(),
            latency: Mutex::new(RifLatency::new()),
        }
    }

    fn now(&self) -> Nanos {
        Nanos::from(self.epoch.elapsed())
    }

    /// Established connections to the target's port now (0 when neither table can be read).
    pub fn rif(&self) -> u32 {
        let port = self.target.addr.port();
        self.target
            .tables
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .map(|text| established_on(&text, port))
            .fold(0u32, u32::saturating_add)
    }

    /// The `GET /probe` body now (reads the kernel's tables: call it off the reactor).
    pub fn answer(&self) -> Vec<u8> {
        let rif = self.rif();
        let now = self.now();
        let estimate = lock(&self.latency).estimate(rif, now);
        crate::probe::probe_json(rif, Duration::from(estimate))
    }

    /// Times one request of the agent's own and records it (the kernel's tables are read on
    /// the blocking pool, never on the thread that serves probes).
    async fn time_one(self: &Arc<Self>) {
        let counting = Arc::clone(self);
        let rif = tokio::task::spawn_blocking(move || counting.rif())
            .await
            .unwrap_or(0);
        let sent = Instant::now();
        let result = tokio::time::timeout(TIMEOUT, request(&self.target)).await;
        let took = match result {
            Ok(Ok(())) => sent.elapsed(),
            Err(_) => TIMEOUT,
            Ok(Err(e)) => {
                tracing::debug!(target = %self.target.addr, error = %e, "the probe target's request failed");
                return;
            }
        };
        let now = self.now();
        lock(&self.latency).record(rif, Nanos::from(took), now);
    }
}

/// One `GET path` on a new connection, read to its end (or [`MAX_ANSWER`]).
async fn request(target: &Target) -> std::io::Result<()> {
    let mut stream = TcpStream::connect(target.addr).await?;
    stream.set_nodelay(true)?;
    let head = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: fulcrum-agent\r\nConnection: close\r\n\r\n",
        target.path, target.addr
    );
    stream.write_all(head.as_bytes()).await?;
    let mut buf = vec![0u8; 8192];
    let mut read = 0usize;
    loop {
        let n = stream.read(&mut buf).await?;
        read += n;
        if n == 0 || read >= MAX_ANSWER {
            return Ok(());
        }
    }
}

/// Times a request of the agent's own every [`PERIOD`] until shutdown.
pub async fn run(prober: Arc<Prober>, mut shutdown: Shutdown) {
    let mut ticks = tokio::time::interval(PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = shutdown.wait() => return,
        }
        tokio::select! {
            () = prober.time_one() => {}
            () = shutdown.wait() => return,
        }
    }
}

/// The connections in state ESTABLISHED (`01`) whose local port is `port`, in the text of
/// `/proc/net/tcp` or `/proc/net/tcp6` (columns: `sl local_address rem_address st ...`,
/// addresses as `HEXADDR:HEXPORT`). Lines that do not parse are skipped.
pub fn established_on(table: &str, port: u16) -> u32 {
    let mut n = 0u32;
    for line in table.lines().skip(1) {
        let mut fields = line.split_whitespace();
        let (Some(_sl), Some(local), Some(_remote), Some(state)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let local_port = local
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        if state == "01" && local_port == Some(port) {
            n = n.saturating_add(1);
        }
    }
    n
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as the kernel writes them: a listener on 8080 (0A), two established connections
    /// to it (one over IPv4, one from a client's side whose *remote* port is 8080, which does
    /// not count), one in TIME_WAIT (06).
    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1 0 100 0 0 10 0
   1: 0100007F:1F90 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000  1000        0 2 1 0 20 4 30 10 -1
   2: 0100007F:A1B2 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 3 1 0 20 4 30 10 -1
   3: 0100007F:1F90 0100007F:A1B3 06 00000000:00000000 03:00000F9E 00000000     0        0 0 3 0
   4: 0100007F:1F90 0100007F:A1B4 01 00000000:00000000 00:00000000 00000000  1000        0 4 1 0 20 4 30 10 -1
   garbage
";

    #[test]
    fn counts_established_connections_on_the_local_port() {
        assert_eq!(established_on(TABLE, 8080), 2);
        assert_eq!(established_on(TABLE, 0xA1B2), 1);
        assert_eq!(established_on(TABLE, 9), 0);
        assert_eq!(established_on("", 8080), 0);
        let v6 = "  sl  local_address                         remote_address                        st\n   0: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:C350 01 0";
        assert_eq!(established_on(v6, 8080), 1);
    }
}
