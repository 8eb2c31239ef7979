//! Prequal's prober for one upstream (`algorithm = "prequal"`; Wydrowski et al., NSDI 2024,
//! §3; DESIGN §2 "Prequal"): the probes the algorithm asks for as it picks are sent from
//! here, never from a request's path, and their answers fed back to the pool.
//!
//! * **Woken by picks.** A pick wakes this loop ([`proxy::Upstream::probes_wanted`]); it
//!   drains every probe the pool has asked for since ([`proxy::Upstream::take_probes`]) and
//!   sends each as a task of its own. The probe rate is the algorithm's (`probe_rate` per
//!   pick), so probing follows the request rate and stops when requests do.
//! * **Where.** `GET /probe` on the backend's `probe` address, or on the backend itself, in
//!   plain HTTP/1.1 over a kept-alive connection (at most [`MAX_OUT`] per backend, reused:
//!   a probe every few milliseconds must not cost a handshake and a TIME_WAIT each).
//! * **Bounded.** At most [`MAX_OUT`] probes of one backend are out at once; a probe asked
//!   for beyond that is dropped (counted as failed): a backend slow to answer probes gets no
//!   pile of them. Each probe has `probe_timeout` (default 100 ms, `PrequalOptions`) to
//!   answer; a late one is lost, and the pool simply does not hear from that backend (the
//!   algorithm ages out what it knew and falls back when it knows nothing).
//! * **Untrusted answers.** The body is read up to [`MAX_BODY`] bytes and checked by the
//!   protocol's reader ([`agent::probe::parse_probe`]); a bad answer, an error status, a
//!   refused connection or a timeout is counted, ignored, and logged once per backend when
//!   its probes start failing (and once when they work again), never more often.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use balance::{BackendId, Nanos, Probe};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use proxy::Upstream;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Probes of one backend out at once, at most. Prequal asks for `probe_rate` (3) probes per
/// pick spread at random over the backends, each answered within milliseconds; more than a
/// few out at once means the backend is not answering them, and more would only pile up.
pub const MAX_OUT: usize = 4;

/// The largest `/probe` body read; an answer is under 50 bytes.
pub const MAX_BODY: usize = 4 * 1024;

/// One backend's prober: where to probe, and its idle kept-alive connections.
#[derive(Debug)]
struct Target {
    addr: SocketAddr,
    idle: Mutex<Vec<SendRequest<Empty<Bytes>>>>,
}

/// A probe's result, in words for the log when it failed.
type Answer = Result<Probe, String>;

impl Target {
    /// One probe within `timeout`.
    async fn probe(&self, timeout: Duration) -> Answer {
        match tokio::time::timeout(timeout, self.get()).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("no answer within probe_timeout ({timeout:?})")),
        }
    }

    /// `GET /probe` on an idle connection, or a new one; the connection is kept for the next
    /// probe if it can take one.
    async fn get(&self) -> Answer {
        let idle = {
            let mut idle = lock(&self.idle);
            // A kept connection the backend has closed meanwhile is of no use.
            idle.retain(|s| !s.is_closed());
            idle.pop()
        };
        let mut sender = match idle {
            Some(sender) => sender,
            None => self.connect().await?,
        };
        let request = http::Request::get("/probe")
            .header(http::header::HOST, self.addr.to_string())
            .header(http::header::USER_AGENT, "fulcrum")
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("cannot build the request: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| format!("cannot read the answer: {e}"))?
            .to_bytes();
        if sender.is_ready() {
            let mut idle = lock(&self.idle);
            if idle.len() < MAX_OUT {
                idle.push(sender);
            }
        }
        if !status.is_success() {
            return Err(format!("GET /probe answered {status}"));
        }
        let answer = agent::probe::parse_probe(&body).map_err(|e| e.to_string())?;
        Ok(Probe {
            rif: answer.rif,
            latency: Nanos::from(answer.latency),
        })
    }

    async fn connect(&self) -> Result<SendRequest<Empty<Bytes>>, String> {
        let stream = TcpStream::connect(self.addr)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP handshake failed: {e}"))?;
        // Driven by a task of its own; it ends when the peer closes or the sender is dropped.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }
}

/// One backend's probes out and whether its last one failed (for logging transitions).
#[derive(Debug, Default, Clone, Copy)]
struct Book {
    out: usize,
    failing: bool,
}

/// Runs `upstream`'s prober until `stop` turns true or its backends change (the control
/// plane starts another for the new ones).
pub async fn run(upstream: Arc<Upstream>, mut stop: watch::Receiver<bool>) {
    let (generation, order) = upstream.backends_in_pool_order();
    let targets: Vec<Arc<Target>> = order
        .iter()
        .map(|b| {
            Arc::new(Target {
                addr: b.probe.unwrap_or(b.addr),
                idle: Mutex::new(Vec::new()),
            })
        })
        .collect();
    let names: Vec<String> = order.iter().map(|b| b.name.clone()).collect();
    let timeout = Duration::from(upstream.settings().options.prequal.probe_timeout);
    let mut books = vec![Book::default(); targets.len()];
    let mut wanted: Vec<BackendId> = Vec::new();
    let mut probes: JoinSet<(BackendId, Answer)> = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            () = upstream.probes_wanted() => {
                wanted.clear();
                if !upstream.take_probes(generation, &mut wanted) {
                    return;
                }
                for &id in &wanted {
                    let (Some(book), Some(target)) = (books.get_mut(id.index()), targets.get(id.index())) else {
                        continue;
                    };
                    if book.out >= MAX_OUT {
                        upstream.probe_failed(generation, id);
                        continue;
                    }
                    book.out += 1;
                    let target = Arc::clone(target);
                    probes.spawn(async move { (id, target.probe(timeout).await) });
                }
            }
            Some(done) = probes.join_next(), if !probes.is_empty() => {
                let Ok((id, answer)) = done else { continue };
                let Some(book) = books.get_mut(id.index()) else { continue };
                book.out = book.out.saturating_sub(1);
                let name = names.get(id.index()).map_or("?", String::as_str);
                settle(&upstream, generation, id, answer, book, name);
            }
        }
    }
}

/// Feeds a probe's answer to the pool, or counts its failure; logs a backend's probes when
/// they start failing and when they work again.
fn settle(
    upstream: &Upstream,
    generation: u64,
    id: BackendId,
    answer: Answer,
    book: &mut Book,
    backend: &str,
) {
    match answer {
        Ok(probe) => {
            upstream.probed(generation, id, probe);
            if std::mem::replace(&mut book.failing, false) {
                tracing::info!(upstream = %upstream.name(), %backend, "probes answered again");
            }
        }
        Err(why) => {
            upstream.probe_failed(generation, id);
            if !std::mem::replace(&mut book.failing, true) {
                tracing::warn!(
                    upstream = %upstream.name(),
                    %backend,
                    error = %why,
                    "probe failed: the backend is picked without its probes until they answer (logged once until they do)"
                );
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
