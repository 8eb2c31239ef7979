//! An emulated backend: a small HTTP/1.1 server on loopback that answers every request with its
//! name (in the body and the `x-backend` header). [`Backend::kill`] drops every connection and
//! closes the port at once, as a crashed process would.
//!
//! **Capacity** ([`Capacity`], the lab's model of an unequal server that burns no CPU):
//! `workers` service slots, like cores; a request holds one for its cost divided by `speed`;
//! requests that find every slot busy wait in a FIFO queue (tokio's semaphore is fair), and
//! one that would make the queue longer than `max_queue` is refused with 503, as an overloaded
//! server does. A request's cost is the `X-Lab-Cost: <ms>` header the load generator sets (or
//! `?delay_ms=N`, or the backend's default cost). `GET /load` answers the emulated utilization
//! in the agent's format: busy slots over workers as `cpu`, queue fill as `mem`, so the dynamic
//! algorithms can run against lab backends end to end. Without a capacity, every request is
//! served at once after its cost (no slots, no queue).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The emulated capacity of a backend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capacity {
    /// Service slots (like cores): requests served at once.
    pub workers: u32,
    /// Relative speed: a request of cost `c` holds a slot for `c / speed`.
    pub speed: f64,
    /// Requests that may wait for a slot; beyond that, 503.
    pub max_queue: usize,
    /// The cost of a request that names none.
    pub default_cost: Duration,
}

impl Default for Capacity {
    fn default() -> Capacity {
        Capacity {
            workers: 4,
            speed: 1.0,
            max_queue: 1000,
            default_cost: Duration::ZERO,
        }
    }
}

/// The live state of a backend with a capacity.
#[derive(Debug)]
struct Slots {
    capacity: Capacity,
    slots: tokio::sync::Semaphore,
    /// Requests waiting for a slot.
    waiting: std::sync::atomic::AtomicUsize,
}

impl Slots {
    /// The emulated utilization in the agent's JSON: busy slots as cpu, queue fill as mem.
    fn load(&self) -> String {
        use std::sync::atomic::Ordering;
        let workers = self.capacity.workers.max(1) as f64;
        let busy = workers - self.slots.available_permits() as f64;
        let waiting = self.waiting.load(Ordering::Relaxed) as f64;
        let cpu = (busy / workers).clamp(0.0, 1.0);
        let mem = (waiting / self.capacity.max_queue.max(1) as f64).clamp(0.0, 1.0);
        let ts_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        format!(
            "{{\"cpu\":{cpu:.4},\"mem\":{mem:.4},\"disk\":0,\"net\":0,\"container_mem\":0,\"ts_ms\":{ts_ms}}}"
        )
    }
}

/// A running emulated backend. Dropping it kills it.
#[derive(Debug)]
pub struct Backend {
    name: String,
    addr: SocketAddr,
    task: JoinHandle<()>,
    /// Requests received (counted on arrival, answered or not).
    requests: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// A request's cost: `X-Lab-Cost: <ms>` (fractions allowed), else `?delay_ms=N`.
fn cost_of(req: &Request<Incoming>) -> Option<Duration> {
    let header = req
        .headers()
        .get("x-lab-cost")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0 && *ms <= 3_600_000.0)
        .map(|ms| Duration::from_secs_f64(ms / 1000.0));
    header.or_else(|| {
        req.uri()
            .query()
            .into_iter()
            .flat_map(|q| q.split('&'))
            .find_map(|kv| kv.strip_prefix("delay_ms="))
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis)
    })
}

fn text(status: u16, name: &Bytes, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or_default();
    response.headers_mut().insert(
        "x-backend",
        http::HeaderValue::from_maybe_shared(name.clone())
            .expect("backend names are valid header values"),
    );
    response
}

async fn answer(
    name: Bytes,
    slots: Option<std::sync::Arc<Slots>>,
    requests: std::sync::Arc<std::sync::atomic::AtomicU64>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    use std::sync::atomic::Ordering;
    requests.fetch_add(1, Ordering::Relaxed);
    let cost = cost_of(&req);
    let Some(slots) = slots else {
        if let Some(cost) = cost {
            tokio::time::sleep(cost).await;
        }
        return Ok(text(200, &name, name.clone()));
    };
    if req.uri().path() == "/load" {
        return Ok(text(200, &name, slots.load()));
    }
    let cost = cost.unwrap_or(slots.capacity.default_cost);
    let permit = match slots.slots.try_acquire() {
        Ok(permit) => permit,
        Err(_) => {
            // Every slot busy: wait in line, unless the line is full.
            if slots.waiting.fetch_add(1, Ordering::SeqCst) >= slots.capacity.max_queue {
                slots.waiting.fetch_sub(1, Ordering::SeqCst);
                return Ok(text(503, &name, "overloaded: the queue is full\n"));
            }
            let permit = slots.slots.acquire().await;
            slots.waiting.fetch_sub(1, Ordering::SeqCst);
            match permit {
                Ok(permit) => permit,
                Err(_) => return Ok(text(503, &name, "shutting down\n")),
            }
        }
    };
    tokio::time::sleep(cost.div_f64(slots.capacity.speed.max(1e-6))).await;
    drop(permit);
    Ok(text(200, &name, name.clone()))
}

impl Backend {
    /// Starts a backend called `name` on `addr` (port 0 picks a free port), without a
    /// capacity model.
    pub async fn start(name: &str, addr: SocketAddr) -> std::io::Result<Backend> {
        Backend::start_with(name, addr, None).await
    }

    /// Starts a backend called `name` on `addr` with `capacity`, if any.
    pub async fn start_with(
        name: &str,
        addr: SocketAddr,
        capacity: Option<Capacity>,
    ) -> std::io::Result<Backend> {
        let slots = capacity.map(|capacity| {
            std::sync::Arc::new(Slots {
                capacity,
                slots: tokio::sync::Semaphore::new(capacity.workers.max(1) as usize),
                waiting: std::sync::atomic::AtomicUsize::new(0),
            })
        });
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let requests = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = std::sync::Arc::clone(&requests);
        let body = Bytes::from(name.to_owned());
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let body = body.clone();
                let slots = slots.clone();
                let counted = std::sync::Arc::clone(&counted);
                while connections.try_join_next().is_some() {}
                connections.spawn(async move {
                    let service = service_fn(move |req| {
                        answer(
                            body.clone(),
                            slots.clone(),
                            std::sync::Arc::clone(&counted),
                            req,
                        )
                    });
                    // Room for a proxy's own headers on top of a client at the proxy's limit.
                    let _ = http1::Builder::new()
                        .max_headers(200)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            // Dropping the task drops the JoinSet, which aborts every connection.
        });
        Ok(Backend {
            name: name.to_owned(),
            addr,
            task,
            requests,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(std::sync::atomic::Ordering::Relaxed)
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
