//! Chained round robin (seed 002, Xu, Miao, Goyal, §III (3)): backends in turn, but each takes a
//! batch of consecutive requests in proportion to its weight before the turn passes on.
//!
//! The paper gives the ratio and notes that it should be reduced to its smallest form ("we
//! would not want to flood our server with a large batch of requests"; weights 1:1:1 make it
//! plain round robin). So a backend's batch is its weight divided by the greatest common
//! divisor of all the weights: 6, 2, 4 send batches of 3, 1 and 2.
//!
//! An unusable backend (down, failed, or excluded because this request already failed there)
//! ends the current batch: the chain moves on to the next usable backend, which starts a full
//! batch of its own.

use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, PickCtx};

#[derive(Debug, Default)]
pub struct ChainedRoundRobin {
    /// Batch size per backend: its weight over the gcd of all weights.
    batch: Vec<u32>,
    /// The backend whose batch is running, if any.
    current: Option<BackendId>,
    /// Requests left in the current batch.
    left: u32,
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Balancer for ChainedRoundRobin {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        let weights: Vec<u32> = backends.ids().map(|id| backends.weight(id)).collect();
        let divisor = weights.iter().copied().fold(0, gcd).max(1);
        self.batch = weights.iter().map(|w| (w / divisor).max(1)).collect();
        self.current = None;
        self.left = 0;
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        let n = self.batch.len();
        if n == 0 {
            return None;
        }
        if let Some(id) = self.current
            && self.left > 0
            && ctx.usable(id, backends)
        {
            self.left -= 1;
            return Some(id);
        }
        // The next usable backend in the chain starts its batch.
        let start = self.current.map_or(0, |id| id.index() + 1);
        let next = (0..n)
            .map(|k| BackendId(((start + k) % n) as u32))
            .find(|&id| ctx.usable(id, backends))?;
        self.current = Some(next);
        self.left = self.batch[next.index()] - 1;
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testing::{Harness, names};

    #[test]
    fn batches_follow_the_reduced_weights() {
        let mut h = Harness::new(&[3, 1, 2], ChainedRoundRobin::default());
        assert_eq!(names(&h.picks(12)), "aaabccaaabcc");
        // 6:2:4 is the same ratio as 3:1:2.
        let mut h = Harness::new(&[6, 2, 4], ChainedRoundRobin::default());
        assert_eq!(names(&h.picks(12)), "aaabccaaabcc");
        // Equal weights: plain round robin, as the paper says.
        let mut h = Harness::new(&[5, 5, 5], ChainedRoundRobin::default());
        assert_eq!(names(&h.picks(6)), "abcabc");
    }

    #[test]
    fn an_unusable_backend_ends_its_batch_and_is_skipped() {
        let mut h = Harness::new(&[2, 2, 1], ChainedRoundRobin::default());
        assert_eq!(names(&h.picks(3)), "aab");
        h.mark_down(1);
        // b's batch is cut short; c, then a again.
        assert_eq!(names(&h.picks(4)), "caac");
        h.mark_up(1);
        assert_eq!(names(&h.picks(5)), "aabbc");
        // A retry excluding the backend whose batch runs moves the chain on.
        assert_eq!(names(&h.picks(1)), "a");
        let next = h.pick_excluding(&[BackendId(0)]).unwrap();
        assert_eq!(names(&[next]), "b");
    }

    #[test]
    fn nothing_usable_gives_none() {
        let mut h = Harness::new(&[1, 1], ChainedRoundRobin::default());
        h.mark_down(0);
        h.mark_down(1);
        assert_eq!(h.pick(), None);
    }
}
