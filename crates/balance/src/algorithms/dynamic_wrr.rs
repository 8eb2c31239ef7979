//! `dynamic_wrr`: the dynamic weighted round robin of seed 001 (Qin et al., "Research on Nginx
//! Dynamic Load Balancing Algorithm", §III): nginx's smooth weighted round robin (see
//! [`crate::smooth`]) over weights that the entropy-weighted load model
//! ([`crate::weights::dynamic_wrr`]) sets from the servers' load reports. The paper's module
//! reads the weights from memcached and updates "the server weights in the weighted round
//! robin"; here the control plane hands them to [`Pool::set_weights`](crate::Pool::set_weights).
//!
//! Until the model has set weights, the configured ones are used, so the algorithm behaves as
//! `weighted_round_robin`. One difference from it: a changed weight takes effect at once
//! ([`SmoothWeights::rebuild_at_once`](crate::smooth::SmoothWeights::rebuild_at_once)) instead of climbing one unit per pick, since the
//! model's weights are on a scale of hundreds and change every few seconds.

use crate::algorithm::Implementation;
use crate::algorithms::dual::{Dual, Family};
use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, Completion, PickCtx};
use crate::reference;
use crate::smooth_index::{Score, SmoothIndex};

/// `dynamic_wrr` (and `capacity_weighted`, `utilization_wrr`): the linear round on small tiers, [`SmoothIndex`] on large ones (see
/// [`crate::algorithms::dual`]); the same picks either way.
#[derive(Debug)]
pub struct DynamicWrr {
    imp: Dual<reference::DynamicWrr, SmoothIndex>,
}

impl Default for DynamicWrr {
    fn default() -> DynamicWrr {
        DynamicWrr::new(Implementation::Auto)
    }
}

impl DynamicWrr {
    pub(crate) fn new(implementation: Implementation) -> DynamicWrr {
        DynamicWrr {
            imp: Dual::new(implementation, Family::SmoothRoundRobin, || {
                SmoothIndex::new(Score::Flat)
            }),
        }
    }

    /// Every backend's effective weight (tests).
    #[cfg(test)]
    pub(crate) fn effective(&self) -> Vec<i64> {
        if self.imp.indexed {
            self.imp.index.effective()
        } else {
            self.imp.linear.weights.effective().to_vec()
        }
    }
}

impl Balancer for DynamicWrr {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        self.imp.rebuild(backends, true);
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        self.imp.pick(ctx, backends)
    }

    fn on_complete(&mut self, id: BackendId, c: &Completion) {
        self.imp.on_complete(id, c);
    }

    fn on_change(&mut self, id: BackendId) {
        self.imp.on_change(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::WeightedRoundRobin;
    use crate::algorithms::testing::{Harness, names};
    use crate::weights::LoadReport;
    use crate::weights::dynamic_wrr::DynamicWrrModel;

    fn set_weights<B: Balancer>(h: &mut Harness<B>, weights: &[u32]) {
        for (s, &w) in h.states.iter_mut().zip(weights) {
            s.weight = w;
        }
        h.balancer.rebuild(&Backends::new(&h.states, h.now));
    }

    #[test]
    fn configured_weights_serve_until_the_model_speaks() {
        // nginx's smooth WRR sequence for 5, 1, 1 (DESIGN §3).
        let mut h = Harness::new(&[5, 1, 1], DynamicWrr::default());
        assert_eq!(names(&h.picks(7)), "aabacaa");
    }

    #[test]
    fn shares_follow_the_models_weights() {
        // The model's example (weights/dynamic_wrr.rs): c busy, weights 244, 161, 11. From a
        // fresh round, smooth WRR gives every backend exactly its weight in Σw = 416 picks.
        let report = |cpu, mem, disk, net| {
            Some(LoadReport {
                cpu,
                mem,
                disk,
                net,
                container_mem: 0.0,
            })
        };
        let mut model = DynamicWrrModel::new(&[1, 1, 2]);
        model.update(&[
            report(0.2, 0.5, 0.1, 0.3),
            report(0.5, 0.5, 0.1, 0.6),
            report(0.95, 0.5, 0.9, 0.9),
        ]);
        let mut h = Harness::new(&[1, 1, 2], DynamicWrr::default());
        set_weights(&mut h, model.weights());
        assert_eq!(h.counts(416), [244, 161, 11]);
    }

    #[test]
    fn a_raised_weight_applies_at_once() {
        // After a full round of 1, 1, 1 (current weights back at 0), a's weight goes to 5: the
        // next 7 picks are nginx's sequence for 5, 1, 1 from scratch.
        let mut h = Harness::new(&[1, 1, 1], DynamicWrr::default());
        assert_eq!(names(&h.picks(3)), "abc");
        set_weights(&mut h, &[5, 1, 1]);
        assert_eq!(names(&h.picks(7)), "aabacaa");
        // On a model's scale: 1, 1, 1 → 100, 1, 1 gives a exactly 100 of the next 102 picks
        // (a full smooth-WRR round from current weights at 0).
        let mut h = Harness::new(&[1, 1, 1], DynamicWrr::default());
        h.picks(3);
        set_weights(&mut h, &[100, 1, 1]);
        assert_eq!(h.counts(102), [100, 1, 1]);
        // nginx's rebuild lets a's effective weight climb from 1, one unit per pick, so b and
        // c take more of those picks: the difference this algorithm makes.
        let mut wrr = Harness::new(&[1, 1, 1], WeightedRoundRobin::default());
        wrr.picks(3);
        set_weights(&mut wrr, &[100, 1, 1]);
        let counts = wrr.counts(102);
        assert!(counts[0] < 100, "{counts:?}");
    }

    #[test]
    fn a_weight_change_keeps_the_failure_penalty() {
        // Weights 4, 4, max_fails 2: a failure costs a 4/2 = 2 of effective weight (nginx).
        let mut h = Harness::with_max_fails(&[4, 4], 2, DynamicWrr::default());
        let a = h.pick().unwrap();
        assert_eq!(a, BackendId(0));
        h.complete(a, crate::Outcome::Failure);
        assert_eq!(h.balancer.effective(), [2, 4]);
        // Raised to 8: effective 2 + (8 − 4) = 6, the deficit of 2 kept.
        set_weights(&mut h, &[8, 4]);
        assert_eq!(h.balancer.effective(), [6, 4]);
        // Lowered to 1: 6 + (1 − 8) < 0, so 0; b lowered to 3: 4 − 1 = 3.
        set_weights(&mut h, &[1, 3]);
        assert_eq!(h.balancer.effective(), [0, 3]);
    }

    #[test]
    fn unusable_backends_are_skipped() {
        let mut h = Harness::new(&[300, 100, 100], DynamicWrr::default());
        h.mark_down(0);
        for _ in 0..50 {
            let id = h.pick_excluding(&[BackendId(1)]).unwrap();
            assert_eq!(id, BackendId(2));
        }
        h.mark_down(2);
        assert_eq!(h.pick_excluding(&[BackendId(1)]), None);
    }
}
