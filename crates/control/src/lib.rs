//! fulcrum's control plane: what runs periodically beside the data plane (load feedback and
//! active health checks).
//!
//! Nothing here blocks a worker: every loop runs on the main runtime, not on the workers', and
//! touches an upstream's pool only to apply a result (one lock, one rebuild). Every loop races
//! its timer against shutdown.
//!
//! # Layout
//!
//! * [`feedback`]: polls each backend's load source every `poll_interval`, keeps track of
//!   stale reports, feeds the upstream's weight model (seed 001's `dynamic_wrr`, seed 003's
//!   `dwlc`, seed 000's `capacity_weighted`) and applies its weights with
//!   [`proxy::Upstream::set_weights`].
//! * [`agent_check`]: HAProxy's agent-check protocol as a source: a percentage of the
//!   configured weight, drain, down and up, as HAProxy applies them.
//! * [`health`]: active health checks (`[upstream.health_check]`): HTTP or TCP, `rise` and
//!   `fall`, combined with passive health in the pool.
//! * [`memcached`]: reports agents pushed to memcached (seed 001's hub).
//! * [`node_exporter`]: a Prometheus node_exporter as a load source.
//! * [`source`]: reading one load source (`fulcrum agent`'s `GET /load`), and the one-request
//!   HTTP client the checks share.
//! * [`model`]: the weight model of an upstream, behind one interface.

pub mod agent_check;
pub mod feedback;
pub mod health;
pub mod memcached;
pub mod model;
pub mod node_exporter;
pub mod source;

use std::sync::Arc;

use tokio::sync::watch;

/// Starts the control loops of every upstream on the current runtime; they end when `stop`
/// turns true.
pub fn spawn(upstreams: &[Arc<proxy::Upstream>], stop: &watch::Receiver<bool>) {
    for upstream in upstreams {
        if feedback::Feedback::wanted(upstream) {
            tokio::spawn(feedback::run(Arc::clone(upstream), stop.clone()));
        }
        if upstream
            .settings()
            .backends
            .iter()
            .any(|b| matches!(b.load_source, Some(proxy::LoadSource::AgentCheck(_))))
        {
            tokio::spawn(agent_check::run(Arc::clone(upstream), stop.clone()));
        }
        if upstream.settings().health_check.is_some() {
            tokio::spawn(health::run(Arc::clone(upstream), stop.clone()));
        }
    }
}
