//! `fair`, after the nginx-upstream-fair module (Grzegorz Nosek) the seeds compare with: the
//! backend with the fewest requests in flight relative to its weight, and among equally loaded
//! backends plain round robin, so an idle pool is walked in turn rather than by weight.
//!
//! Load is compared cross-multiplied (`conns_a · weight_b < conns_b · weight_a`), as nginx's
//! `least_conn` does. What differs from `least_conn` is the tie-break: a rotating cursor instead
//! of smooth weighted round robin. The module's further heuristics (scoring how long a backend
//! has been busy) are left out; see docs/algorithms.md.

use crate::algorithm::Implementation;
use crate::algorithms::dual::{Dual, Family};
use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, PickCtx};
use crate::load_index::LoadIndex;
use crate::reference;

/// `fair`: the linear walk on small tiers, [`LoadIndex`] on large ones (see
/// [`crate::algorithms::dual`]); the same picks either way.
#[derive(Debug)]
pub struct Fair {
    imp: Dual<reference::Fair, LoadIndex>,
    /// Where the round robin among tied backends starts next (for the index; the walk keeps
    /// its own).
    next: usize,
}

impl Default for Fair {
    fn default() -> Fair {
        Fair::new(Implementation::Auto)
    }
}

impl Fair {
    pub(crate) fn new(implementation: Implementation) -> Fair {
        Fair {
            imp: Dual::new(implementation, Family::LeastLoaded, LoadIndex::default),
            next: 0,
        }
    }
}

impl Balancer for Fair {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        self.next = 0;
        if self.imp.prepare(backends.len()) {
            self.imp.index.rebuild(backends);
        } else {
            self.imp.linear.rebuild(backends);
        }
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        if !self.imp.indexed {
            return self.imp.linear.pick(ctx, backends);
        }
        let best = self.imp.index.pick(ctx, backends, self.next)?;
        self.next = (best.index() + 1) % backends.len();
        Some(best)
    }

    fn on_change(&mut self, id: BackendId) {
        if self.imp.indexed {
            self.imp.index.on_change(id);
        }
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
