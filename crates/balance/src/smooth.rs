//! nginx's smooth weighted round robin (`ngx_http_upstream_get_peer` in
//! `ngx_http_upstream_round_robin.c`), kept apart because three algorithms use it: weighted
//! round robin itself, least_conn to break ties, and ip_hash as its fallback.
//!
//! Each pick, every candidate's `current` grows by its `effective` weight and the candidate with
//! the highest `current` wins (the first one on a tie); the winner then gives back the sum of all
//! candidates' `effective` weights. Weights 5, 1, 1 thus give `a a b a c a a`, never five `a` in a
//! row. A failure lowers `effective` by `weight / max_fails`; every pick it takes part in gives
//! one back, so a flapping backend is eased back in rather than hit with its full share.
//!
//! Slow start scales a candidate's `effective` weight by its ramp: `current` and `total` grow
//! by `effective · ramp` (ramps are in 1/1024ths, so outside slow start every term is 1024
//! times nginx's and the order of picks is exactly nginx's).

use crate::backend::{BackendId, Backends};
use crate::balancer::Completion;

/// The scale a round's `current`s are on: the sum of every backend's weight times its ramp.
pub(crate) fn scale_total(weight: &[i64], ramp: &[i64]) -> i64 {
    weight
        .iter()
        .zip(ramp)
        .fold(0i64, |t, (&w, &r)| t.saturating_add(w.saturating_mul(r)))
}

/// A weight change moves every `current` to the new weights' scale (`new` over `old`), keeping
/// the round's progress: zeroed, every change would restart nginx's sequence from the lowest
/// index (a herd onto the first backends when weights change every few picks); kept as they
/// were, a backend left far ahead on the old scale would take many picks in a row.
pub(crate) fn rescale(current: &mut [i64], old: i64, new: i64) {
    if old <= 0 {
        current.fill(0);
        return;
    }
    for c in current {
        *c = (i128::from(*c) * i128::from(new) / i128::from(old)) as i64;
    }
}

#[derive(Debug, Default, Clone)]
pub struct SmoothWeights {
    current: Vec<i64>,
    effective: Vec<i64>,
    weight: Vec<i64>,
    ramp: Vec<i64>,
    max_fails: Vec<u32>,
}

impl SmoothWeights {
    /// Takes the weights from `backends`. A new membership starts a fresh round (every
    /// `current` at 0); a weight change moves every `current` to the new weights' scale
    /// ([`rescale`]); a health or slow-start change keeps the round as it is.
    ///
    /// Why a weight change rescales (issue 30): `current` values are on the scale of the old
    /// weights. Kept across a change from a model's scale of hundreds to the configured 1, 1, 2,
    /// the backend left with the highest `current` would win every pick until the small new
    /// total wore it down (11 to 60 picks in a row); zeroed, as before, every change restarted
    /// nginx's sequence from the lowest index, and with weights rewritten every few picks the
    /// first backends took them all (100 backends, a change every 20 picks: 19 got every pick).
    pub fn rebuild(&mut self, backends: &Backends<'_>) {
        let n = backends.len();
        let weight: Vec<i64> = backends
            .ids()
            .map(|id| backends.weight(id) as i64)
            .collect();
        let old_total = scale_total(&self.weight, &self.ramp);
        let changed = self.current.len() == n && self.weight != weight;
        if self.current.len() != n {
            self.current = vec![0; n];
            self.effective = weight.clone();
        }
        self.weight = weight;
        self.ramp = backends
            .ids()
            .map(|id| i64::from(backends.state(id).ramp()))
            .collect();
        if changed {
            rescale(
                &mut self.current,
                old_total,
                scale_total(&self.weight, &self.ramp),
            );
        }
        self.max_fails = backends.ids().map(|id| backends.max_fails(id)).collect();
        for (e, &w) in self.effective.iter_mut().zip(&self.weight) {
            *e = (*e).min(w);
        }
    }

    /// As [`rebuild`](Self::rebuild), but a weight that changed takes effect at once: the
    /// effective weight moves by the same amount, keeping any failure penalty, instead of
    /// climbing to a raised weight one unit per pick. For weights that a load model rewrites
    /// every few seconds on a scale of hundreds, where climbing would take hundreds of picks.
    pub fn rebuild_at_once(&mut self, backends: &Backends<'_>) {
        if self.current.len() == backends.len() {
            for (i, id) in backends.ids().enumerate() {
                let weight = backends.weight(id) as i64;
                self.effective[i] = (self.effective[i] + weight - self.weight[i]).max(0);
            }
        }
        self.rebuild(backends);
    }

    /// One round among `candidates` (ids in ascending order); `None` if there are none.
    #[inline]
    pub fn pick(&mut self, candidates: impl Iterator<Item = BackendId>) -> Option<BackendId> {
        let mut best: Option<usize> = None;
        let mut total = 0i64;
        for id in candidates {
            let i = id.index();
            let share = self.effective[i] * self.ramp[i];
            self.current[i] += share;
            total += share;
            if self.effective[i] < self.weight[i] {
                self.effective[i] += 1;
            }
            if best.is_none_or(|b| self.current[i] > self.current[b]) {
                best = Some(i);
            }
        }
        let b = best?;
        self.current[b] -= total;
        Some(BackendId(b as u32))
    }

    /// The pick among all usable backends, as weighted round robin does.
    pub fn pick_usable(
        &mut self,
        ctx: &crate::PickCtx<'_>,
        backends: &Backends<'_>,
    ) -> Option<BackendId> {
        self.pick(backends.ids().filter(|&id| ctx.usable(id, backends)))
    }

    /// nginx lowers a failed peer's effective weight by `weight / max_fails`, floored at zero.
    pub fn on_complete(&mut self, id: BackendId, c: &Completion) {
        let i = id.index();
        if c.outcome == crate::Outcome::Failure && i < self.effective.len() {
            let max_fails = self.max_fails[i];
            if max_fails > 0 {
                self.effective[i] = (self.effective[i] - self.weight[i] / max_fails as i64).max(0);
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn current(&self) -> &[i64] {
        &self.current
    }

    #[cfg(test)]
    pub(crate) fn effective(&self) -> &[i64] {
        &self.effective
    }
}
