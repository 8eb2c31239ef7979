//! Weighted random (seed 002, §III; nginx `random` without `two`): each request goes to a backend
//! drawn with probability proportional to its weight.
//!
//! The draw is a binary search over cumulative weights built in `rebuild`, so a pick is
//! O(log n); when every share is the same, the index is the draw divided by the share, the
//! same answer in O(1). If the drawn backend cannot be used, the draw is repeated over the usable backends
//! only (O(n), and only then), which keeps the choice exactly proportional to weight among the
//! backends that remain.

use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, PickCtx};

#[derive(Debug)]
pub struct Random {
    rng: Pcg64Mcg,
    /// `cumulative[i]` is the sum of the shares (weight · slow-start ramp) of backends `0..=i`.
    cumulative: Vec<u64>,
    /// The share every backend has, when all have the same.
    equal: Option<u64>,
}

impl Random {
    pub fn new(seed: u64) -> Random {
        Random {
            rng: Pcg64Mcg::seed_from_u64(seed),
            cumulative: Vec::new(),
            equal: None,
        }
    }
}

impl Balancer for Random {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        let first = backends.ids().next().map(|id| backends.share(id));
        self.equal = first.filter(|&w| w > 0 && backends.ids().all(|id| backends.share(id) == w));
        let mut sum = 0u64;
        self.cumulative = backends
            .ids()
            .map(|id| {
                sum += backends.share(id);
                sum
            })
            .collect();
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        self.draw(ctx, backends, None)
    }
}

impl Random {
    /// A usable backend drawn by weight, other than `besides`.
    pub(crate) fn draw(
        &mut self,
        ctx: &PickCtx<'_>,
        backends: &Backends<'_>,
        besides: Option<BackendId>,
    ) -> Option<BackendId> {
        let total = self.cumulative.last().copied().unwrap_or(0);
        if total == 0 {
            return None;
        }
        let r = self.rng.random_range(0..total);
        let i = match self.equal {
            // All alike: the same index the search finds, without the search (10,000
            // backends are 14 steps of cache misses).
            Some(w) => (r / w) as usize,
            None => self.cumulative.partition_point(|&c| c <= r),
        };
        let id = BackendId(i as u32);
        let allowed = |id: BackendId| ctx.usable(id, backends) && Some(id) != besides;
        if allowed(id) {
            return Some(id);
        }
        let usable_total: u64 = backends
            .ids()
            .filter(|&id| allowed(id))
            .map(|id| backends.share(id))
            .sum();
        if usable_total == 0 {
            return None;
        }
        let mut r = self.rng.random_range(0..usable_total);
        for id in backends.ids().filter(|&id| allowed(id)) {
            let w = backends.share(id);
            if r < w {
                return Some(id);
            }
            r -= w;
        }
        unreachable!("r < usable_total, the sum of the weights walked")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testing::Harness;

    #[test]
    fn same_seed_same_choices() {
        let mut a = Harness::new(&[3, 1, 2], Random::new(7));
        let mut b = Harness::new(&[3, 1, 2], Random::new(7));
        assert_eq!(a.picks(100), b.picks(100));
        let mut c = Harness::new(&[3, 1, 2], Random::new(8));
        assert_ne!(a.picks(100), c.picks(100));
    }

    #[test]
    fn shares_follow_weights() {
        let mut h = Harness::new(&[3, 1, 2], Random::new(1));
        let counts = h.counts(60_000);
        // Expected 30000, 10000, 20000; a binomial's sd here is under 130.
        for (got, want) in counts.iter().zip([30_000i64, 10_000, 20_000]) {
            assert!((*got as i64 - want).abs() < 800, "{counts:?}");
        }
    }

    #[test]
    fn redraws_among_usable_in_proportion() {
        let mut h = Harness::new(&[3, 1, 2], Random::new(3));
        h.mark_down(0);
        let counts = h.counts(30_000);
        assert_eq!(counts[0], 0);
        // b : c should be 1 : 2.
        assert!(
            (counts[2] as f64 / counts[1] as f64 - 2.0).abs() < 0.15,
            "{counts:?}"
        );
    }
}
