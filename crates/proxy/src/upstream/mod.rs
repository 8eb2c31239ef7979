//! One upstream: its [`balance::Pool`], shared by every worker thread, and how one attempt
//! reaches a backend (each worker keeps its own connections, see [`crate::connections`]).
//!
//! The pool sits behind a mutex that is held only for a pick or a completion (a few hundred
//! nanoseconds, never across an await), so the algorithm sees one global sequence: weighted round
//! robin gives `a a b a c a a` however many threads serve.
//!
//! The backends, the algorithm and the settings can change while requests are in flight (a
//! reload, the admin API): [`Upstream::reconfigure`] builds a new pool that takes over the old
//! one's live state for the backends that stay, and swaps it in under the same lock. Each
//! attempt remembers the generation of the pool it was picked from and its backend's address,
//! so its ticket completes in the pool in force where that backend still is.
//!
//! # Layout
//!
//! * [`state`]: the data the others work on (the pool in force, its members and waiting
//!   requests, operator states, the workers' connections), importing none of them;
//! * this file: [`Upstream`] itself — its settings, its name, its generation and the
//!   watch that tells the control plane of changes;
//! * [`pick`]: the pool in force with its generation, the pick that hands out an
//!   [`Attempt`] and the completion of its ticket;
//! * [`queue`]: requests waiting for a backend below its `max_conns`, served by the rule in
//!   [`balance::queue`];
//! * [`membership`]: reconfiguration (reloads, the admin API's changes) with the carry-over
//!   of live state, and what the control plane sets (weights, health check verdicts);
//! * [`workers`]: every worker's connections to the backends, kept in step with membership;
//! * [`view`]: what the admin API and the control plane read (snapshots, counts) and the
//!   operator's changes to one backend.
//! * [`sources`]: what the upstream keeps of its DNS discovery sources (their records, and
//!   the carry-over of what they found across a reload), as data;
//! * [`discovery`]: what a source's answer changes in the membership (through the same
//!   carry-over as the admin API's), and what the metrics read of the sources.
//! * [`probes`]: `prequal`'s probes: picks wake the control plane's prober, which drains the
//!   pool's wishes and feeds the answers back.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use balance::{Nanos, Pool};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::settings::{HashKey, UpstreamSettings};

mod discovery;
mod membership;
mod pick;
mod probes;
mod queue;
mod sources;
mod state;
mod view;
mod workers;

pub use discovery::SourceStatus;
pub use membership::{Keep, Reconfigured};
pub(crate) use pick::Attempt;
pub use state::{AdminState, LoadPolls, ProbeCounts};
pub(crate) use state::{Unpicked, WorkerPools};
pub use view::{BackendSnapshot, ChangeError, MAX_WEIGHT};

use state::{Member, State, lock, sticky_table};

#[derive(Debug)]
pub struct Upstream {
    /// The settings in force; replaced with the pool (readers get the one of their moment).
    settings: ArcSwap<UpstreamSettings>,
    /// The name, shared with the workers' counts (an upstream keeps its name for life).
    shared_name: Arc<str>,
    state: Mutex<State>,
    /// Time zero of the `Nanos` handed to the pool.
    epoch: Instant,
    /// Every worker's connections to the backends, for counting and for membership changes.
    worker_pools: Mutex<Vec<Arc<WorkerPools>>>,
    /// The generation in force, and whether the upstream has been retired (a reload removed
    /// it): the control plane restarts its loops on a change and stops them on retirement.
    changes: watch::Sender<(u64, bool)>,
    /// How many requests wait in `State::waiting`, read without the lock (a completion looks
    /// whether anyone waits before it takes the lock again).
    queued: AtomicUsize,
    /// Whether the algorithm probes its backends (`prequal`): picks then wake `probe_wake`.
    probing: AtomicBool,
    /// Woken by a pick of a probing algorithm: the control plane's prober drains the pool's
    /// wishes ([`Upstream::take_probes`]) without ever being on a request's path.
    probe_wake: Notify,
    /// What each discovery source has done so far (for the metrics).
    sources: Mutex<Vec<sources::SourceRecord>>,
    /// Held by DNS discovery's change (computed from the settings in force) and by a reload's,
    /// so that neither is computed from settings the other is replacing.
    membership: Mutex<()>,
}

/// The backends of `settings` in pool order (primaries, then backups).
fn pool_order(settings: &UpstreamSettings) -> Vec<&crate::BackendSettings> {
    let (backup, primary): (Vec<_>, Vec<_>) = settings.backends.iter().partition(|b| b.backup);
    primary.into_iter().chain(backup).collect()
}

fn build_pool(settings: &UpstreamSettings) -> Pool {
    settings.policy().pool(settings.seed)
}

/// The part of a request head `settings`' algorithm hashes (a header, a cookie, the URI), if
/// any: what the request parser must locate.
pub(crate) fn hashed_request_part(settings: &UpstreamSettings) -> Option<&HashKey> {
    let hashed = settings.algorithm.affinity() == Some(balance::Affinity::Key);
    (hashed && settings.hash_key != HashKey::ClientIp).then_some(&settings.hash_key)
}

/// The name of `settings`' sticky cookie, if it has sticky sessions: what the request parser
/// reads and takes out.
pub(crate) fn sticky_cookie(settings: &UpstreamSettings) -> Option<&str> {
    settings.sticky.as_ref().map(|s| s.cookie.as_str())
}

impl Upstream {
    pub fn new(settings: UpstreamSettings) -> Upstream {
        let pool = build_pool(&settings);
        let members: Vec<Member> = pool_order(&settings)
            .into_iter()
            .map(|b| Member {
                addr: b.addr,
                state: settings.pinned(b).0,
                static_weight: settings.pinned(b).1,
                report: None,
                since: 0,
                probes: ProbeCounts::default(),
                polls: Default::default(),
            })
            .collect();
        let budget = settings
            .retry_budget
            .map(|b| (b, balance::RetryBudget::new(b)));
        let sticky = sticky_table(&settings, &members);
        let probing = AtomicBool::new(settings.probes_backends());
        let sources = Mutex::new(sources::source_records(&settings, &[]));
        Upstream {
            sources,
            membership: Mutex::new(()),
            shared_name: Arc::from(settings.name.as_str()),
            settings: ArcSwap::from_pointee(settings),
            state: Mutex::new(State {
                generation: 0,
                pool,
                members,
                waiting: VecDeque::new(),
                budget,
                sticky,
            }),
            epoch: Instant::now(),
            worker_pools: Mutex::new(Vec::new()),
            changes: watch::channel((0, false)).0,
            queued: AtomicUsize::new(0),
            probing,
            probe_wake: Notify::new(),
        }
    }

    pub fn name(&self) -> &str {
        &self.shared_name
    }

    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.shared_name
    }

    /// What the upstream runs with now.
    pub fn settings(&self) -> Arc<UpstreamSettings> {
        self.settings.load_full()
    }

    /// The generation in force: it changes whenever the backends or the algorithm do.
    pub fn generation(&self) -> u64 {
        lock(&self.state).generation
    }

    /// Tells of every change of generation, and of the upstream's retirement (`true`).
    pub fn changes(&self) -> watch::Receiver<(u64, bool)> {
        self.changes.subscribe()
    }

    /// The upstream left the configuration: its control loops stop. Requests in flight (and
    /// client connections still bound to it) finish with it.
    pub fn retire(&self) {
        self.changes.send_modify(|c| c.1 = true);
    }

    fn now(&self) -> Nanos {
        Nanos::from(self.epoch.elapsed())
    }

    /// Whether the retry budget allows one more retry now (paid for if so); always with no
    /// budget.
    pub(crate) fn may_retry(&self) -> bool {
        let now = self.now();
        match &mut lock(&self.state).budget {
            Some((_, budget)) => budget.try_withdraw(now),
            None => true,
        }
    }

    /// A retry [`Upstream::may_retry`] allowed found no backend: the budget gets it back.
    pub(crate) fn refund_retry(&self) {
        let now = self.now();
        if let Some((_, budget)) = &mut lock(&self.state).budget {
            budget.refund(now);
        }
    }
}
