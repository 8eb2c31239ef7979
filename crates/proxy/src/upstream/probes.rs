//! `prequal`'s probes (DESIGN §2 "Prequal"; Wydrowski et al., NSDI 2024): the algorithm asks
//! for probes as it picks, and the answers it picks by come from the control plane's prober
//! (`control::probe`), never from a request's path.
//!
//! A pick of a probing algorithm wakes [`Upstream::probes_wanted`] (a `Notify`: one stored
//! wake-up however many picks happen before the prober looks, so picks never queue work);
//! the prober then drains the pool's wishes with [`Upstream::take_probes`] under the pool
//! lock, sends them, and hands each answer to [`Upstream::probed`]. The upstream holds one
//! pool shared by every worker, so each answer feeds the one copy that picks. Probes are
//! counted per backend for the admin API's metrics.

use std::sync::atomic::Ordering;

use balance::{BackendId, Probe};

use super::Upstream;
use super::state::{ProbeCounts, lock};

impl Upstream {
    /// A pick was made: a probing algorithm may have asked for probes.
    pub(super) fn picked(&self) {
        if self.probing.load(Ordering::Relaxed) {
            self.probe_wake.notify_one();
        }
    }

    /// Whether the upstream's algorithm probes its backends (the control plane runs a prober
    /// for it).
    pub fn probes_backends(&self) -> bool {
        self.settings().probes_backends()
    }

    /// Resolves once a pick has been made since the last time it resolved (at once if one
    /// has): the moment to look for probes to send.
    pub async fn probes_wanted(&self) {
        self.probe_wake.notified().await;
    }

    /// Appends the backends the pool wants probed to `out` (pool order of `generation`) and
    /// forgets them; `false`, with nothing taken, once the backends have changed since.
    pub fn take_probes(&self, generation: u64, out: &mut Vec<BackendId>) -> bool {
        let mut st = lock(&self.state);
        if st.generation != generation {
            return false;
        }
        let first = out.len();
        st.pool.take_probes(out);
        for id in &out[first..] {
            if let Some(m) = st.members.get_mut(id.index()) {
                m.probes.sent += 1;
            }
        }
        true
    }

    /// Backend `id` (pool order of `generation`) answered a probe with `probe`; ignored if
    /// the backends changed since.
    pub fn probed(&self, generation: u64, id: BackendId, probe: Probe) {
        let now = self.now();
        let mut st = lock(&self.state);
        if st.generation == generation {
            st.pool.probed(id, probe, now);
        }
    }

    /// A probe of backend `id` (pool order of `generation`) brought no usable answer (none in
    /// time, or a bad one), or was not sent (too many of its probes were out).
    pub fn probe_failed(&self, generation: u64, id: BackendId) {
        let mut st = lock(&self.state);
        if st.generation == generation
            && let Some(m) = st.members.get_mut(id.index())
        {
            m.probes.failed += 1;
        }
    }

    /// Every backend's probes so far, pool order.
    pub fn probe_counts(&self) -> Vec<ProbeCounts> {
        lock(&self.state).members.iter().map(|m| m.probes).collect()
    }
}
