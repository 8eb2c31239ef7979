//! An emulated backend: a small HTTP/1.1 server on loopback that answers every request with its
//! name (in the body and the `x-backend` header, on every status). [`Backend::kill`] drops every
//! connection and closes the port at once, as a crashed process would.
//!
//! Without a capacity, every request is served at once after its cost (no slots, no queue).
//! With one ([`Capacity`], the lab's model of an unequal server on one small machine):
//!
//! * **Modes** ([`Mode`]): `cpu` — `workers` slots, like cores; a request holds one for its
//!   cost divided by `speed`, behind a FIFO queue. `io` — the requests in service share a
//!   bandwidth of `workers × speed` (processor sharing), each at most `speed`. `mixed` — half
//!   the cost on the slots, then half on the bandwidth. `burn` — as `cpu`, but a real thread
//!   spins for the slot's time. Beyond `max_queue` waiting, 503 (see [`service`]).
//! * **Antagonist** ([`Antagonist`]): background load that leaves a fraction of the capacity on
//!   a rhythm, timed from a shared epoch so every backend of a run drops in step; a request in
//!   service slows down when a drop begins ([`finish_after`]).
//! * **Cost**: the `X-Lab-Cost: <ms>` header the load generator sets, or `?delay_ms=N`, else a
//!   draw from the capacity's [`crate::schedule::Cost`] with the backend's seeded RNG.
//! * **Faults** ([`Faults`]): a seeded rate of failures (500, or another status), a deadline
//!   (503 for a request not done in time, its work going on), a stall after N requests (nothing
//!   answers again, connections stay open), death after N requests (listener closed,
//!   connections dropped).
//! * **Footprint** ([`footprint::Footprint`]): static memory and network capacities and a
//!   request's footprint on them; `mem` and `net` in `GET /load` then report their use.
//! * **`GET /load`** answers the utilization in the agent's JSON, averaged over a trailing
//!   second, the antagonist's share included (see [`meter`]), so the dynamic algorithms can run
//!   against lab backends end to end. It is the monitoring path: not counted, never faulted.
//! * **`GET /probe`** answers Prequal's probe (DESIGN §2): requests in flight now and the
//!   latency estimated at that RIF from the backend's completions (see [`probe`]). Like
//!   `/load`, not counted and never faulted, but a stalled backend does not answer it.
//!
//! # Layout
//!
//! * [`capacity`]: what is emulated: [`Capacity`], [`Mode`], [`Faults`].
//! * [`footprint`]: memory and network capacities and a request's footprint on them.
//! * [`antagonist`]: the time-varying factor, its exact service-time and utilization math.
//! * [`service`]: the slots, the processor-sharing driver, burn.
//! * [`meter`]: the trailing-window utilization of `GET /load`.
//! * [`probe`]: requests in flight and the latency estimate of `GET /probe`.

pub mod antagonist;
pub mod capacity;
pub mod footprint;
pub mod meter;
pub mod probe;
pub mod service;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64Mcg;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use antagonist::{Antagonist, finish_after};
pub use capacity::{Capacity, Faults, Mode};
use probe::Probes;
use service::{Served, Server};

/// How long a dying backend lets its last answer leave before it drops every connection.
const LAST_WORDS: Duration = Duration::from_millis(50);

/// Where a backend is in its life (faults move it on; nothing moves it back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Life {
    Serving,
    /// `stall_after` passed: nothing is answered any more.
    Stalled,
    /// The `die_after`-th request arrived: the listener is to close.
    Dying,
    /// The listener is closed: no new connections.
    Closed,
    /// That request was answered: the crash follows in [`LAST_WORDS`].
    Dead,
    /// Every connection dropped.
    Gone,
}

/// The backend's state, shared by its connections.
#[derive(Debug)]
struct Shared {
    name: Bytes,
    server: Option<Server>,
    faults: Faults,
    /// Requests in flight and the latency estimate, for `GET /probe`.
    probes: Arc<Probes>,
    /// Requests received (counted on arrival, answered or not).
    requests: Arc<AtomicU64>,
    /// Draws of costs, and of failures, each from its own stream of the seed (so a fail rate
    /// does not change the costs drawn).
    costs: Mutex<Pcg64Mcg>,
    failures: Mutex<Pcg64Mcg>,
    life: watch::Sender<Life>,
}

/// A running emulated backend. Dropping it kills it.
#[derive(Debug)]
pub struct Backend {
    name: String,
    addr: SocketAddr,
    task: JoinHandle<()>,
    requests: Arc<AtomicU64>,
    probes: Arc<Probes>,
    life: watch::Receiver<Life>,
}

/// A request's cost: `X-Lab-Cost: <ms>` (fractions allowed), else `?delay_ms=N`.
fn cost_of(req: &Request<Incoming>) -> Option<Duration> {
    let header = req
        .headers()
        .get("x-lab-cost")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0 && *ms <= capacity::MAX_COST_MS)
        .map(capacity::cost_duration);
    header.or_else(|| {
        req.uri()
            .query()
            .into_iter()
            .flat_map(|q| q.split('&'))
            .find_map(|kv| kv.strip_prefix("delay_ms="))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|ms| capacity::cost_duration(ms as f64))
    })
}

fn text(status: u16, name: &Bytes, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or_default();
    if let Ok(value) = http::HeaderValue::from_maybe_shared(name.clone()) {
        response.headers_mut().insert("x-backend", value);
    }
    response
}

/// A draw from a shared RNG.
fn draw<T>(rng: &Mutex<Pcg64Mcg>, f: impl FnOnce(&mut Pcg64Mcg) -> T) -> T {
    f(&mut rng.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The agent protocol's document for the utilization now (no disk, no containers): `mem`
/// and `net` from the [`footprint::Footprint`] when it gives capacities, else the queue's
/// fill and the shared bandwidth alone.
fn load_report(server: &Server) -> Vec<u8> {
    let used = server.meter.utilization();
    let footprint = server.capacity.footprint;
    let report = balance::weights::LoadReport {
        cpu: used.cpu,
        mem: footprint
            .mem_use(used.held)
            .unwrap_or_else(|| server.queue_fill()),
        disk: 0.0,
        net: (used.net + footprint.net_use(used.answers)).min(1.0),
        container_mem: 0.0,
    };
    let ts_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    agent::protocol::load_json(&report, ts_ms)
}

/// Never answers: a stalled or dying machine.
async fn hang() -> Result<Response<Full<Bytes>>, Infallible> {
    std::future::pending().await
}

async fn answer(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let name = &shared.name;
    let stalled = || *shared.life.borrow() == Life::Stalled;
    if let Some(server) = &shared.server
        && req.uri().path() == "/load"
    {
        if stalled() {
            return hang().await;
        }
        return Ok(text(200, name, load_report(server)));
    }
    if req.uri().path() == "/probe" {
        if stalled() {
            return hang().await;
        }
        let mut answer = text(200, name, shared.probes.answer());
        answer.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        return Ok(answer);
    }
    let n = shared.requests.fetch_add(1, Ordering::Relaxed) + 1;
    let faults = shared.faults;
    if faults.stall_after.is_some_and(|s| n > s) {
        shared.life.send_if_modified(|l| {
            let serving = *l == Life::Serving;
            if serving {
                *l = Life::Stalled;
            }
            serving
        });
        return hang().await;
    }
    if stalled() {
        return hang().await;
    }
    let last = faults.die_after == Some(n);
    if faults.die_after.is_some_and(|d| n > d) {
        // Arrived on an open connection after the last: it dies with the backend.
        return hang().await;
    }
    // The last request: the listener closes now, the crash follows its answer (or its
    // cancellation: the guard's drop).
    let last = last.then(|| LastRequest::new(&shared.life));
    let reply = serve(&shared, &req, faults).await;
    if stalled() {
        return hang().await;
    }
    if let Some(server) = &shared.server
        && reply.status() == http::StatusCode::OK
    {
        // Its bytes cross the link (the footprint's `net`).
        server.meter.answered();
    }
    if last.is_some() {
        // Not a connection more once the last answer is out.
        let mut life = shared.life.subscribe();
        let _ = life.wait_for(|l| *l >= Life::Closed).await;
    }
    Ok(reply)
}

/// The `die_after`-th request in progress: the backend is dying while it lives, and dead once
/// it is answered or cancelled.
#[derive(Debug)]
struct LastRequest<'a>(&'a watch::Sender<Life>);

impl LastRequest<'_> {
    fn new(life: &watch::Sender<Life>) -> LastRequest<'_> {
        life.send_if_modified(|l| {
            let before = *l < Life::Dying;
            if before {
                *l = Life::Dying;
            }
            before
        });
        LastRequest(life)
    }
}

impl Drop for LastRequest<'_> {
    fn drop(&mut self) {
        self.0.send_if_modified(|l| {
            let before = *l < Life::Dead;
            if before {
                *l = Life::Dead;
            }
            before
        });
    }
}

/// A counted request's answer: a drawn failure, a refusal, a missed deadline, or the name
/// after its cost.
async fn serve(
    shared: &Arc<Shared>,
    req: &Request<Incoming>,
    faults: Faults,
) -> Response<Full<Bytes>> {
    let name = &shared.name;
    if faults.fail_rate > 0.0 && draw(&shared.failures, |r| r.random::<f64>()) < faults.fail_rate {
        return text(
            faults.fail_status,
            name,
            "failed: an emulated fault (--fail-rate)\n",
        );
    }
    let cost = cost_of(req);
    let in_flight = shared.probes.arrive();
    let Some(server) = &shared.server else {
        if let Some(cost) = cost {
            tokio::time::sleep(cost).await;
        }
        in_flight.done();
        return text(200, name, name.clone());
    };
    let cost = cost.unwrap_or_else(|| {
        capacity::cost_duration(draw(&shared.costs, |r| server.capacity.cost.draw(r)))
    });
    let served = match faults.deadline {
        None => {
            let served = server.serve(cost).await;
            if served == Served::Done {
                in_flight.done();
            }
            served
        }
        Some(deadline) => {
            // The work is its own task: it goes on after the deadline's answer, and after
            // the client left.
            let shared = Arc::clone(shared);
            let work = tokio::spawn(async move {
                let served = match &shared.server {
                    Some(server) => server.serve(cost).await,
                    None => Served::Done,
                };
                if served == Served::Done {
                    in_flight.done();
                }
                served
            });
            match tokio::time::timeout(deadline, work).await {
                Ok(Ok(served)) => served,
                Ok(Err(_)) | Err(_) => {
                    return text(
                        503,
                        name,
                        "timed out: not done by the deadline (--deadline)\n",
                    );
                }
            }
        }
    };
    match served {
        Served::Done => text(200, name, name.clone()),
        Served::Refused => text(503, name, "overloaded: the queue is full\n"),
    }
}

/// Accepts connections until the backend is dying, then closes the listener and keeps the
/// connections (until the whole task ends).
async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    let mut life = shared.life.subscribe();
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = life.wait_for(|l| *l >= Life::Dying) => break,
        };
        let Ok((stream, _)) = accepted else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        while connections.try_join_next().is_some() {}
        connections.spawn(async move {
            let service = service_fn(move |req| answer(Arc::clone(&shared), req));
            // Room for a proxy's own headers on top of a client at the proxy's limit.
            let _ = http1::Builder::new()
                .max_headers(200)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
    drop(listener);
    shared.life.send_if_modified(|l| {
        let dying = *l == Life::Dying;
        if dying {
            *l = Life::Closed;
        }
        dying
    });
    std::future::pending::<()>().await;
    // Dropping this future drops the JoinSet, which aborts every connection.
    drop(connections);
}

impl Backend {
    /// Starts a backend called `name` on `addr` (port 0 picks a free port), without a
    /// capacity model.
    pub async fn start(name: &str, addr: SocketAddr) -> std::io::Result<Backend> {
        Backend::start_with(name, addr, None).await
    }

    /// Starts a backend called `name` on `addr` with `capacity`, if any, and no faults.
    pub async fn start_with(
        name: &str,
        addr: SocketAddr,
        capacity: Option<Capacity>,
    ) -> std::io::Result<Backend> {
        Backend::start_faulty(name, addr, capacity, Faults::default()).await
    }

    /// Starts a backend called `name` on `addr` with `capacity`, if any, that fails as
    /// `faults` says.
    pub async fn start_faulty(
        name: &str,
        addr: SocketAddr,
        capacity: Option<Capacity>,
        faults: Faults,
    ) -> std::io::Result<Backend> {
        if http::HeaderValue::from_str(name).is_err() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "the backend name {name:?} cannot be sent in X-Backend: use printable ASCII"
                ),
            ));
        }
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (server, driver) = match capacity.map(Server::new) {
            Some((server, driver)) => (Some(server), Some(driver)),
            None => (None, None),
        };
        let seed = capacity.map_or(1, |c| c.seed);
        let requests = Arc::new(AtomicU64::new(0));
        let probes = Arc::new(Probes::new());
        let (life, watching) = watch::channel(if faults.die_after == Some(0) {
            Life::Dead
        } else {
            Life::Serving
        });
        let shared = Arc::new(Shared {
            name: Bytes::from(name.to_owned()),
            server,
            faults,
            probes: Arc::clone(&probes),
            requests: Arc::clone(&requests),
            costs: Mutex::new(Pcg64Mcg::seed_from_u64(seed)),
            // Another stream of the same seed (seed_from_u64 scrambles it).
            failures: Mutex::new(Pcg64Mcg::seed_from_u64(seed ^ 0x5eed_fa11)),
            life,
        });
        let task = tokio::spawn(async move {
            let meter = shared.server.as_ref().map(|s| Arc::clone(&s.meter));
            let sampler = async move {
                let Some(meter) = meter else {
                    return std::future::pending().await;
                };
                let mut tick = tokio::time::interval(meter::SAMPLE_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    tick.tick().await;
                    meter.sample();
                }
            };
            let driver = async move {
                match driver {
                    Some(driver) => driver.await,
                    None => std::future::pending().await,
                }
            };
            let mut life = shared.life.subscribe();
            let death = async move {
                if life.wait_for(|l| *l >= Life::Dead).await.is_ok() {
                    tokio::time::sleep(LAST_WORDS).await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = accept(listener, Arc::clone(&shared)) => {}
                () = sampler => {}
                () = driver => {}
                () = death => {}
            }
            // Every connection and the listener are gone with the futures above.
            shared.life.send_replace(Life::Gone);
        });
        Ok(Backend {
            name: name.to_owned(),
            addr,
            task,
            requests,
            probes,
            life: watching,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests received so far (not counting `GET /load` on a backend with a capacity, nor
    /// `GET /probe`).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Requests in flight now: what `GET /probe` answers as `rif`.
    pub fn in_flight(&self) -> u32 {
        self.probes.rif()
    }

    /// `GET /probe` answers so far, and the wall time the backend spent answering them.
    pub fn probe_cost(&self) -> (u64, Duration) {
        self.probes.cost()
    }

    /// Resolves once the backend has died of [`Faults::die_after`] (its connections dropped,
    /// its port closed), or has been killed; never otherwise.
    pub async fn died(&self) {
        let mut life = self.life.clone();
        let _ = life.wait_for(|l| *l == Life::Gone).await;
    }

    /// Drops every connection and closes the listening socket, and waits until both are gone.
    pub async fn kill(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}
