//! Power of two choices on least connections: nginx's `random two least_conn`
//! (`ngx_http_upstream_get_random2_peer`, `src/http/modules/ngx_http_upstream_random_module.c`;
//! Mitzenmacher, "The Power of Two Choices in Randomized Load Balancing").
//!
//! Two different usable backends are drawn by weight, and the one with fewer requests in
//! flight relative to its weight gets the request, compared as nginx does without division:
//! the first is kept only if `conns₂ · weight₁ > conns₁ · weight₂`, so a tie goes to the
//! second. With one usable backend, it is chosen. Two draws cost O(log n) each; nothing scans
//! all backends unless a draw lands on an unusable one.

use crate::algorithms::Random;
use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, PickCtx};

#[derive(Debug)]
pub struct RandomTwo {
    draws: Random,
}

impl RandomTwo {
    pub fn new(seed: u64) -> RandomTwo {
        RandomTwo {
            draws: Random::new(seed),
        }
    }
}

impl Balancer for RandomTwo {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        self.draws.rebuild(backends);
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        let first = self.draws.draw(ctx, backends, None)?;
        let Some(second) = self.draws.draw(ctx, backends, Some(first)) else {
            return Some(first);
        };
        let load = |a: BackendId, b: BackendId| {
            u128::from(backends.in_flight(a)) * u128::from(backends.share(b))
        };
        Some(if load(second, first) > load(first, second) {
            first
        } else {
            second
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testing::Harness;

    #[test]
    fn the_less_loaded_of_two_wins() {
        // Two backends: both are always drawn, so the lighter one must win every time.
        let mut h = Harness::new(&[1, 1], RandomTwo::new(5));
        let held = h.hold(1);
        for _ in 0..50 {
            let id = h.pick().unwrap();
            assert_ne!(id, held[0], "the loaded backend was chosen");
            h.complete(id, crate::balancer::Outcome::Success);
        }
    }

    #[test]
    fn load_is_compared_per_weight() {
        // a: 3 in flight at weight 4 (0.75 each); b: 1 in flight at weight 1 (1.0): a wins.
        let mut h = Harness::new(&[4, 1], RandomTwo::new(9));
        h.states[0].in_flight = 3;
        h.states[1].in_flight = 1;
        for _ in 0..20 {
            let id = h.pick().unwrap();
            assert_eq!(id, BackendId(0));
            h.complete(id, crate::balancer::Outcome::Success);
        }
    }

    #[test]
    fn under_held_load_the_spread_stays_even_and_follows_weights() {
        // Requests held in flight: P2C keeps the in-flight counts close to the weights.
        let mut h = Harness::new(&[2, 1, 1, 2], RandomTwo::new(11));
        h.hold(600);
        let in_flight = h.in_flight();
        for (got, weight) in in_flight.iter().zip([2u32, 1, 1, 2]) {
            let want = 100 * weight;
            assert!(got.abs_diff(want) <= 10, "{in_flight:?}");
        }
    }

    #[test]
    fn one_usable_backend_is_chosen_and_none_gives_none() {
        let mut h = Harness::new(&[1, 1, 1], RandomTwo::new(1));
        h.mark_down(0);
        h.mark_down(2);
        assert_eq!(h.pick(), Some(BackendId(1)));
        h.mark_down(1);
        assert_eq!(h.pick(), None);
    }
}
