//! `fulcrum agent`: the backend-side load reporter (DESIGN §1, issue 11). It samples the
//! host's CPU, memory, disk, network and container memory every interval, each as a
//! utilization in [0, 1], and serves the latest sample three ways: the agent protocol's
//! `GET /load` (JSON, DESIGN §2) and a Prometheus `GET /metrics`, HAProxy's agent-check
//! protocol, and pushes to memcached (seed 001's hub). See docs/feedback.md, "The agent".
//! With `--probe-target` it also answers Prequal's `GET /probe` for a backend beside it.
//!
//! # Layout
//!
//! * [`measure`]: one pure parser per kernel file (`/proc/stat`, `/proc/meminfo`,
//!   `/proc/diskstats`, `/proc/net/dev`, cgroup v2 `memory.*`) and the delta arithmetic.
//! * [`sampler`]: reads those files every interval, owns the previous counters and each
//!   source's health (a failing source is logged once per transition and reported as 0).
//! * [`protocol`]: the agent protocol itself, both ends: the `GET /load` document and the
//!   memcached record and key, written here and read by the control plane (which depends on
//!   this module, and on nothing else of the agent).
//! * [`report`]: a [`Sample`](report::Sample) rendered as the protocol's JSON and as the
//!   Prometheus exposition, once per sample.
//! * [`http`]: the HTTP/1.1 endpoint. [`haproxy`]: the agent-check listener and its
//!   percentage. [`push`]: the memcached writer.
//! * [`shutdown`]: the stop signal every loop races its timer or its accept against.
//! * [`probe`]: Prequal's `GET /probe` document, both ends. [`target`]: the estimate the
//!   agent answers it with for `--probe-target` (connections counted, its own request timed).
//!
//! The sampling loop is the only writer: it publishes each sample, already rendered, on a
//! `watch` channel, and every server and the pusher only read the latest.

#![forbid(unsafe_code)]

pub mod haproxy;
pub mod http;
pub mod measure;
pub mod probe;
pub mod protocol;
pub mod push;
pub mod report;
pub mod sampler;
pub mod shutdown;
pub mod target;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::report::{Exposition, Sample};
use crate::sampler::{Paths, Sampler};
use crate::shutdown::Shutdown;

/// What `fulcrum agent` was asked to do.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--listen`: the HTTP endpoint.
    pub listen: SocketAddr,
    /// `--interval`: time between samples (default 1 s).
    pub interval: Duration,
    /// `--net-speed` in bit/s; `None` reads each interface's speed from sysfs.
    pub net_speed: Option<u64>,
    /// `--cgroup-root` (default `/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    /// `--push` and `--name`.
    pub push: Option<push::Target>,
    /// `--haproxy-agent`: the agent-check listener.
    pub haproxy_agent: Option<SocketAddr>,
    /// `--probe-target` and `--probe-path`: answer `GET /probe` for that backend.
    pub probe_target: Option<target::Target>,
}

/// One sample with its two renderings, as the sampling loop publishes it.
#[derive(Debug)]
pub struct Published {
    pub sample: Sample,
    /// The body of `GET /load`.
    pub json: Bytes,
    /// The body of `GET /metrics`.
    pub metrics: Bytes,
}

/// An agent whose sockets are bound; [`Agent::run`] serves them.
#[derive(Debug)]
pub struct Agent {
    settings: Settings,
    http: TcpListener,
    haproxy: Option<TcpListener>,
}

impl Agent {
    /// Binds the HTTP listener and, when asked, the agent-check listener (port 0 picks a free
    /// port; [`Agent::http_addr`] tells which).
    pub async fn bind(settings: Settings) -> std::io::Result<Agent> {
        let http = TcpListener::bind(settings.listen).await?;
        let haproxy = match settings.haproxy_agent {
            Some(addr) => Some(TcpListener::bind(addr).await?),
            None => None,
        };
        Ok(Agent {
            settings,
            http,
            haproxy,
        })
    }

    /// The address the HTTP endpoint listens on.
    pub fn http_addr(&self) -> std::io::Result<SocketAddr> {
        self.http.local_addr()
    }

    /// The address the agent-check listener listens on, if there is one.
    pub fn haproxy_addr(&self) -> Option<std::io::Result<SocketAddr>> {
        self.haproxy.as_ref().map(TcpListener::local_addr)
    }

    /// Samples and serves until `stop` resolves, then stops every loop and returns.
    pub async fn run(self, stop: impl Future<Output = ()>) {
        let (trigger, shutdown) = shutdown::channel();
        let (publish, latest) = watch::channel(None);
        let paths = Paths {
            cgroup_root: self.settings.cgroup_root.clone(),
            ..Paths::default()
        };
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(sample_every(
            self.settings.interval,
            paths,
            self.settings.net_speed,
            publish,
            shutdown.clone(),
        ));
        let prober = self
            .settings
            .probe_target
            .clone()
            .map(|t| Arc::new(target::Prober::new(t)));
        if let Some(prober) = &prober {
            tasks.spawn(target::run(Arc::clone(prober), shutdown.clone()));
        }
        // The first sample before the first answer: a request that comes meanwhile waits in
        // the listening socket's backlog (one interval at most) rather than get 503.
        let stop = std::pin::pin!(stop);
        let mut stop = stop;
        let mut first = latest.clone();
        tokio::select! {
            _ = first.wait_for(Option::is_some) => {}
            () = &mut stop => {
                trigger.fire();
                while tasks.join_next().await.is_some() {}
                return;
            }
        }
        tasks.spawn(http::serve(
            self.http,
            latest.clone(),
            prober,
            shutdown.clone(),
        ));
        if let Some(listener) = self.haproxy {
            tasks.spawn(haproxy::serve(listener, latest.clone(), shutdown.clone()));
        }
        if let Some(target) = self.settings.push {
            tasks.spawn(push::run(target, self.settings.interval, latest, shutdown));
        }
        stop.await;
        trigger.fire();
        while tasks.join_next().await.is_some() {}
    }
}

/// The sampling loop: the first reading at start, then a sample every `interval`.
async fn sample_every(
    interval: Duration,
    paths: Paths,
    net_speed: Option<u64>,
    publish: watch::Sender<Option<Arc<Published>>>,
    mut shutdown: Shutdown,
) {
    // The files are small and in memory, but a cgroup walk over many containers is real work:
    // it runs on the blocking pool, never on a thread that serves requests.
    let start = tokio::task::spawn_blocking(move || Sampler::new(paths, net_speed));
    let Ok(mut sampler) = start.await else { return };
    let exposition = Arc::new(Exposition::default());
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = shutdown.wait() => break,
        }
        let exposition = Arc::clone(&exposition);
        let work = tokio::task::spawn_blocking(move || {
            let sample = sampler.sample();
            let published = Published {
                sample,
                json: sample.to_json(),
                metrics: exposition.render(&sample),
            };
            (sampler, published)
        });
        let Ok((back, published)) = work.await else {
            return;
        };
        sampler = back;
        publish.send_replace(Some(Arc::new(published)));
    }
}
