//! `fair`'s choice in O(log n): the least loaded usable backend (requests in flight per unit
//! of share) that comes first in turn from a cursor, as the linear walk in `reference::Fair`
//! finds it.
//!
//! A segment tree over the backends in pool order keeps, at each node, the least loaded usable
//! backend of its range, the leftmost on a tie (loads compared cross-multiplied, as the walk
//! does). The walk from the cursor is two ranges, `[cursor, n)` then `[0, cursor)`: the best
//! of the first wins unless the second's is strictly less loaded. A change of one backend's
//! load or health is one leaf replayed to the root. The pool reports changes and the clock's
//! own (a `fail_timeout` running out) are kept track of, as for [`crate::smooth_index`].

use crate::backend::{BackendId, Backends};
use crate::balancer::PickCtx;
use crate::tracking::{Stale, Tracker, failure_window};

const NONE: u32 = u32::MAX;

#[derive(Debug, Default, Clone)]
pub(crate) struct LoadIndex {
    /// A usable backend's load as `in_flight / share`; `den` 0 for one that is not usable.
    num: Vec<u64>,
    den: Vec<u64>,
    /// Leaves at `size..2·size`: each node the least loaded usable backend of its range.
    size: usize,
    tree: Vec<u32>,
    tracker: Tracker,
    scratch: Vec<u32>,
    excluded: Vec<u32>,
}

impl LoadIndex {
    /// Whether `a` wins over `b`, `a` being the earlier of the two in the order walked: less
    /// loaded, or as loaded.
    #[inline]
    fn wins(&self, a: u32, b: u32) -> bool {
        if a == NONE {
            return false;
        }
        if b == NONE {
            return true;
        }
        let (a, b) = (a as usize, b as usize);
        u128::from(self.num[a]) * u128::from(self.den[b])
            <= u128::from(self.num[b]) * u128::from(self.den[a])
    }

    #[inline]
    fn better(&self, a: u32, b: u32) -> u32 {
        if self.wins(a, b) { a } else { b }
    }

    /// Looks at every backend again: O(n).
    pub(crate) fn rebuild(&mut self, backends: &Backends<'_>) {
        let n = backends.len();
        self.num = vec![0; n];
        self.den = vec![0; n];
        self.size = n.next_power_of_two().max(1);
        self.tree = vec![NONE; 2 * self.size];
        self.tracker.reset(n);
        for id in backends.ids() {
            self.set(id, backends);
            self.tree[self.size + id.index()] = self.leaf(id.index());
        }
        for v in (1..self.size).rev() {
            self.tree[v] = self.better(self.tree[2 * v], self.tree[2 * v + 1]);
        }
    }

    /// Reads backend `id`'s load and health, and when the clock alone will change them.
    #[inline]
    fn set(&mut self, id: BackendId, backends: &Backends<'_>) {
        let i = id.index();
        if backends.is_eligible(id) {
            self.num[i] = u64::from(backends.in_flight(id));
            self.den[i] = backends.share(id);
        } else {
            self.num[i] = 0;
            self.den[i] = 0;
        }
        self.tracker.read(i, failure_window(backends, id));
    }

    #[inline]
    fn leaf(&self, i: usize) -> u32 {
        if self.den[i] == 0 { NONE } else { i as u32 }
    }

    fn update(&mut self, i: usize) {
        let mut v = self.size + i;
        self.tree[v] = self.leaf(i);
        while v > 1 {
            v /= 2;
            self.tree[v] = self.better(self.tree[2 * v], self.tree[2 * v + 1]);
        }
    }

    /// The least loaded usable backend in `[lo, hi)`, the leftmost on a tie.
    fn best_in(&self, lo: usize, hi: usize) -> u32 {
        let (mut l, mut r) = (lo + self.size, hi + self.size);
        let (mut left, mut right) = (NONE, NONE);
        while l < r {
            if l & 1 == 1 {
                left = self.better(left, self.tree[l]);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                right = self.better(self.tree[r], right);
            }
            l /= 2;
            r /= 2;
        }
        self.better(left, right)
    }

    fn sync(&mut self, backends: &Backends<'_>) {
        if self.num.len() != backends.len() {
            self.rebuild(backends);
        }
        let mut stale = std::mem::take(&mut self.scratch);
        stale.clear();
        match self.tracker.take(backends, &mut stale) {
            Stale::All => self.rebuild(backends),
            Stale::Some => {
                for &i in &stale {
                    self.set(BackendId(i), backends);
                    self.update(i as usize);
                }
            }
        }
        self.scratch = stale;
    }

    /// The least loaded usable backend not in `ctx.exclude`, the first in turn from `next`.
    pub(crate) fn pick(
        &mut self,
        ctx: &PickCtx<'_>,
        backends: &Backends<'_>,
        next: usize,
    ) -> Option<BackendId> {
        self.sync(backends);
        let n = self.num.len();
        let mut excluded = std::mem::take(&mut self.excluded);
        for &id in ctx.exclude {
            let i = id.index();
            if i < n && self.den[i] != 0 {
                self.den[i] = 0;
                self.update(i);
                excluded.push(i as u32);
            }
        }
        let next = next.min(n);
        let best = self.better(self.best_in(next, n), self.best_in(0, next));
        for &i in &excluded {
            self.set(BackendId(i), backends);
            self.update(i as usize);
        }
        excluded.clear();
        self.excluded = excluded;
        (best != NONE).then_some(BackendId(best))
    }

    pub(crate) fn on_change(&mut self, id: BackendId) {
        self.tracker.mark(id.index());
    }
}
