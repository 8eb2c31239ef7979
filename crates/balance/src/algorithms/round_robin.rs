//! Plain round robin (seed 002, "Design and Analysis for Layer 7 Load Balancing Algorithms",
//! §III; seed 004, "Load Balancing Strategies, Algorithms and Comparison"): backends in turn,
//! one request each, weights ignored. A backend that cannot be used this time is skipped and
//! the turn passes to the next one.

use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, PickCtx};

#[derive(Debug, Default)]
pub struct RoundRobin {
    /// The backend whose turn is next.
    next: usize,
}

impl Balancer for RoundRobin {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        if self.next >= backends.len() {
            self.next = 0;
        }
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        let n = backends.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            let id = BackendId(i as u32);
            if ctx.usable(id, backends) {
                self.next = (i + 1) % n;
                return Some(id);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testing::{Harness, names};

    #[test]
    fn takes_turns_and_skips_unusable() {
        let mut h = Harness::new(&[1, 5, 1], RoundRobin::default());
        assert_eq!(names(&h.picks(6)), "abcabc");
        h.mark_down(1);
        assert_eq!(names(&h.picks(4)), "acac");
        h.mark_up(1);
        let first = h.pick_excluding(&[BackendId(0)]).unwrap();
        assert_eq!(first, BackendId(1));
    }
}
