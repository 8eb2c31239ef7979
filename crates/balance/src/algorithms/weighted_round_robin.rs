//! nginx's default algorithm: smooth weighted round robin (see [`crate::smooth`]). Each backend
//! gets its weight's share of requests, spread out rather than in bursts: weights 5, 1, 1 give
//! `a a b a c a a`.

use crate::algorithm::Implementation;
use crate::algorithms::dual::{Dual, Family};
use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, Completion, PickCtx};
use crate::reference;
use crate::smooth_index::{Score, SmoothIndex};

/// `weighted_round_robin`: the linear round on small tiers, [`SmoothIndex`] on large ones (see
/// [`crate::algorithms::dual`]); the same picks either way.
#[derive(Debug)]
pub struct WeightedRoundRobin {
    imp: Dual<reference::WeightedRoundRobin, SmoothIndex>,
}

impl Default for WeightedRoundRobin {
    fn default() -> WeightedRoundRobin {
        WeightedRoundRobin::new(Implementation::Auto)
    }
}

impl WeightedRoundRobin {
    pub(crate) fn new(implementation: Implementation) -> WeightedRoundRobin {
        WeightedRoundRobin {
            imp: Dual::new(implementation, Family::SmoothRoundRobin, || {
                SmoothIndex::new(Score::Flat)
            }),
        }
    }

    /// Every backend's `current` (tests).
    #[cfg(test)]
    pub(crate) fn current(&self) -> Vec<i64> {
        if self.imp.indexed {
            self.imp.index.current()
        } else {
            self.imp.linear.weights.current().to_vec()
        }
    }
}

impl Balancer for WeightedRoundRobin {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        self.imp.rebuild(backends, false);
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
    use crate::algorithms::testing::{Harness, names};
    use crate::balancer::Outcome;

    #[test]
    fn nginx_sequence_for_5_1_1() {
        let mut h = Harness::new(&[5, 1, 1], WeightedRoundRobin::default());
        assert_eq!(names(&h.picks(7)), "aabacaa");
        assert_eq!(names(&h.picks(7)), "aabacaa");
    }

    #[test]
    fn current_weights_step_by_step() {
        // Weights 5, 1, 1 (the example in nginx's commit introducing smooth WRR): the
        // current weights after each pick (the winner has already given back the total, 7).
        // They are kept in 1/1024ths for slow start, so nginx's values are 1024 times smaller.
        let mut h = Harness::new(&[5, 1, 1], WeightedRoundRobin::default());
        let expected: [[i64; 3]; 7] = [
            [-2, 1, 1],
            [-4, 2, 2],
            [1, -4, 3],
            [-1, -3, 4],
            [4, -2, -2],
            [2, -1, -1],
            [0, 0, 0],
        ];
        for row in expected {
            h.picks(1);
            let current = h.balancer.current();
            assert!(current.iter().all(|c| c % i64::from(crate::RAMP_FULL) == 0));
            let nginx: Vec<i64> = current.iter().map(|c| c / 1024).collect();
            assert_eq!(nginx, row);
        }
    }

    #[test]
    fn failure_lowers_effective_weight_then_recovers() {
        // weight 4, max_fails 2: one failure lowers effective weight by 4/2 = 2.
        let mut h = Harness::with_max_fails(&[4, 4], 2, WeightedRoundRobin::default());
        let id = h.pick().unwrap();
        h.complete(id, Outcome::Failure);
        // The failed backend now has effective weight 2 (growing back by one per round), so
        // the other one takes more of the next rounds until the weights are equal again.
        let next: String = names(&h.picks(8));
        let a = next.matches('a').count();
        let b = next.matches('b').count();
        assert!(
            b > a,
            "the backend that failed should get fewer picks: {next}"
        );
    }

    #[test]
    fn excluded_backend_is_skipped() {
        let mut h = Harness::new(&[5, 1, 1], WeightedRoundRobin::default());
        for _ in 0..20 {
            let id = h.pick_excluding(&[BackendId(0)]).unwrap();
            assert_ne!(id, BackendId(0));
        }
    }
}
