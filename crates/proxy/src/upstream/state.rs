//! What an upstream holds, as data: the pool in force with its members and waiting requests
//! ([`State`]), what an operator asked of each backend ([`AdminState`]), and every worker's
//! connections ([`WorkerPools`]). The files beside this one give [`super::Upstream`] its
//! jobs over this data; this file imports none of them, so they form layers.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;
use balance::queue;
use balance::weights::LoadReport;
use balance::{BackendId, Pool, Ticket};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::connections::Connections;

/// One backend of the pool in force, in pool order.
#[derive(Debug, Clone)]
pub(super) struct Member {
    pub(super) addr: SocketAddr,
    pub(super) state: AdminState,
    /// The weight configured, or set through the admin API.
    pub(super) static_weight: u32,
    /// The latest load report and when it came.
    pub(super) report: Option<(LoadReport, Instant)>,
    /// The generation since which it has been a member without a break: tickets of older
    /// generations are not its pool's to complete.
    pub(super) since: u64,
    /// Prequal's probes of it: sent, and failed (no answer in time, or a bad one).
    pub(super) probes: ProbeCounts,
    /// Its load source's polls: failed so far, and whether its report is stale now.
    pub(super) polls: LoadPolls,
}

/// A backend's load-source polls (agent, node_exporter, memcached), for the admin API and the
/// metrics: how many failed, and whether its report is stale (its source missed `stale_after`
/// polls in a row: the backend is weighted as the average of the fresh ones meanwhile).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadPolls {
    pub failed: u64,
    pub stale: bool,
}

/// A backend's probes so far (`prequal`), for the admin API's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProbeCounts {
    /// Probes the algorithm asked for (each sent, unless too many of the backend's were out).
    pub sent: u64,
    /// Of those, the ones that brought no usable answer: not sent, no answer in time, a
    /// refused connection, an error status or a bad document.
    pub failed: u64,
}

/// The pool in force and what goes with it, replaced whole when the backends or the algorithm
/// change (a reload, the admin API).
#[derive(Debug)]
pub(super) struct State {
    pub(super) generation: u64,
    pub(super) pool: Pool,
    pub(super) members: Vec<Member>,
    /// Requests waiting for a backend below its `max_conns`, oldest first (survives a change
    /// of generation: they wait for the upstream, not for one pool).
    pub(super) waiting: VecDeque<Waiter>,
    /// The retries the upstream may still make (`retry_budget`; `None`: no cap). Kept across a
    /// reconfiguration that leaves its settings as they were.
    pub(super) budget: Option<(balance::RetryBudgetSettings, balance::RetryBudget)>,
    /// The members' sticky ids, on an upstream with `sticky` (rebuilt with the members).
    pub(super) sticky: Option<balance::StickyTable>,
}

impl State {
    pub(super) fn position(&self, addr: SocketAddr) -> Option<BackendId> {
        position(&self.members, addr)
    }
}

/// The sticky ids of `members`, if `settings` has sticky sessions.
pub(super) fn sticky_table(
    settings: &crate::settings::UpstreamSettings,
    members: &[Member],
) -> Option<balance::StickyTable> {
    settings
        .sticky
        .as_ref()
        .map(|s| crate::sticky::table(s, members.iter().map(|m| m.addr)))
}

pub(super) fn position(members: &[Member], addr: SocketAddr) -> Option<BackendId> {
    members
        .iter()
        .position(|m| m.addr == addr)
        .map(|i| BackendId(i as u32))
}

/// The pool ids of the backends a request `tried` that are still members.
pub(super) fn excluded(members: &[Member], tried: &[SocketAddr]) -> Vec<BackendId> {
    tried.iter().filter_map(|&a| position(members, a)).collect()
}

/// Why a request got no backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unpicked {
    /// None is healthy and in rotation (or every one was tried already).
    NoBackend,
    /// Every backend left is at its `max_conns` and the queue is full (or off).
    QueueFull,
    /// It waited `queue_timeout` in the queue.
    QueueTimeout,
    /// The client left while its request waited.
    ClientGone,
}

impl Unpicked {
    /// The reason in logs and metrics.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Unpicked::NoBackend => "no_backend",
            Unpicked::QueueFull => "queue_full",
            Unpicked::QueueTimeout => "queue_timeout",
            Unpicked::ClientGone => "client_gone",
        }
    }
}

/// A request in the queue: what its pick needs, and where to hand the backend to.
#[derive(Debug)]
pub(super) struct Waiter {
    pub(super) affinity: Option<Vec<u8>>,
    pub(super) tried: Vec<SocketAddr>,
    pub(super) to: oneshot::Sender<Handed>,
}

/// What a waiting request is handed: a ticket picked for it under the pool lock, or why
/// there will be none.
pub(super) type Handed = Result<(u64, SocketAddr, Ticket), Unpicked>;

impl queue::Waiter for Waiter {
    fn left(&self) -> bool {
        self.to.is_closed()
    }

    fn affinity(&self) -> Option<&[u8]> {
        self.affinity.as_deref()
    }
}

pub use crate::settings::AdminState;

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks cannot leave the state half-updated in a way
    // that matters more than stopping the proxy would, so carry on with the data.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One worker's connections to one upstream's backends, by address: replaced as a whole when
/// the backends change, so the worker reads them without a lock of the upstream's.
#[derive(Debug)]
pub(crate) struct WorkerPools {
    pub(super) by_addr: ArcSwap<ConnectionsByAddr>,
}

/// A worker's connections by backend address, looked up on every request: hashed with
/// foldhash rather than SipHash (the keys are the configured backends, not a client's input,
/// so hash flooding is not a concern; SipHash was ~200 of the ~18,000 instructions a proxied
/// request costs).
pub(crate) type ConnectionsByAddr =
    HashMap<SocketAddr, Arc<Connections>, foldhash::fast::RandomState>;

impl WorkerPools {
    /// This worker's connections to `addr`, if it is a backend of the upstream.
    pub(crate) fn get(&self, addr: SocketAddr) -> Option<Arc<Connections>> {
        self.by_addr.load().get(&addr).cloned()
    }

    /// Forgets `removed` backends' connections in each of `workers`: the idle ones close with
    /// the map; those in use finish their request first (the attempt holds its own
    /// reference).
    pub(super) fn forget(workers: &[Arc<WorkerPools>], removed: &[SocketAddr]) {
        for w in workers {
            let mut map = (**w.by_addr.load()).clone();
            map.retain(|addr, _| !removed.contains(addr));
            w.by_addr.store(Arc::new(map));
        }
    }

    /// Every backend's connections, for the reaper.
    pub(crate) fn all(&self) -> Vec<Arc<Connections>> {
        self.by_addr.load().values().cloned().collect()
    }
}
