//! `fair`, after the nginx-upstream-fair module (Grzegorz Nosek) the seeds compare with: the
//! backend with the fewest requests in flight relative to its weight, and among equally loaded
//! backends plain round robin, so an idle pool is walked in turn rather than by weight.
//!
//! Load is compared cross-multiplied (`conns_a · weight_b < conns_b · weight_a`), as nginx's
//! `least_conn` does. What differs from `least_conn` is the tie-break: a rotating cursor instead
//! of smooth weighted round robin. The module's further heuristics (scoring how long a backend
//! has been busy) are left out; see docs/algorithms.md.

use std::cmp::Ordering;

use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, PickCtx};

#[derive(Debug, Default)]
pub struct Fair {
    /// Where the round robin among tied backends starts next.
    next: usize,
}

impl Balancer for Fair {
    fn rebuild(&mut self, _backends: &Backends<'_>) {
        self.next = 0;
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        let n = backends.len();
        let cmp = |a: BackendId, b: BackendId| {
            let la = u128::from(backends.in_flight(a)) * u128::from(backends.share(b));
            let lb = u128::from(backends.in_flight(b)) * u128::from(backends.share(a));
            la.cmp(&lb)
        };
        // Walk from the cursor, so the first of the least loaded is the next in turn.
        let mut best: Option<BackendId> = None;
        for k in 0..n {
            let id = BackendId(((self.next + k) % n) as u32);
            if !ctx.usable(id, backends) {
                continue;
            }
            if best.is_none_or(|b| cmp(id, b) == Ordering::Less) {
                best = Some(id);
            }
        }
        let best = best?;
        self.next = (best.index() + 1) % n;
        Some(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testing::{Harness, names};

    #[test]
    fn idle_backends_take_turns_whatever_their_weights() {
        let mut h = Harness::new(&[5, 1, 1], Fair::default());
        assert_eq!(names(&h.picks(6)), "abcabc");
    }

    #[test]
    fn the_least_loaded_per_weight_wins() {
        let mut h = Harness::new(&[2, 1, 1], Fair::default());
        // Held requests fill by load per weight: a takes two for every one of b and c.
        let held = h.hold(8);
        assert_eq!(names(&held), "abcabcaa");
        assert_eq!(h.in_flight(), [4, 2, 2]);
    }

    #[test]
    fn unusable_backends_are_skipped() {
        let mut h = Harness::new(&[1, 1, 1], Fair::default());
        h.mark_down(1);
        assert_eq!(names(&h.picks(4)), "acac");
        h.mark_down(0);
        h.mark_down(2);
        assert_eq!(h.pick(), None);
    }
}
