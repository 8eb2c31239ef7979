//! An algorithm in its two implementations: the linear scan it always had, kept as the
//! reference (`crate::reference`), and an index that picks in O(log n)
//! ([`crate::smooth_index`], [`crate::load_index`]). Below a pool size the scan is the faster
//! of the two (docs/performance.md, "O(log n) picks"), so small tiers keep it; both give the
//! same picks, so the choice is one of speed only.

use crate::algorithm::Implementation;
use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, Completion, PickCtx};
use crate::smooth_index::SmoothIndex;

/// From how many backends on a tier is picked from by its index, per family. Measured with the
/// `pick` benchmark's `pick-impl` rows (docs/performance.md, "O(log n) picks"): the smooth
/// round robins' scan is a few instructions a backend and wins up to about 32 backends (123
/// against 133 ns there, 253 against 145 ns at 64); the least-loaded scans cost more a backend
/// and lose from about 16 on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Family {
    SmoothRoundRobin,
    LeastLoaded,
}

impl Family {
    /// Unit tests run the index at every size, so the tests written for the algorithms
    /// exercise it; the equality tests compare it with the scan.
    fn index_from(self) -> usize {
        match self {
            _ if cfg!(test) => 0,
            Family::SmoothRoundRobin => 40,
            Family::LeastLoaded => 16,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Dual<L, I> {
    pub(crate) linear: L,
    pub(crate) index: I,
    /// Which one is in use (the other holds no state that matters).
    pub(crate) indexed: bool,
    index_from: usize,
    fresh: fn() -> I,
}

impl<L: Default, I> Dual<L, I> {
    pub(crate) fn new(
        implementation: Implementation,
        family: Family,
        fresh: fn() -> I,
    ) -> Dual<L, I> {
        let index_from = match implementation {
            Implementation::Auto => family.index_from(),
            Implementation::Indexed => 0,
            Implementation::Reference => usize::MAX,
        };
        Dual {
            linear: L::default(),
            index: fresh(),
            indexed: false,
            index_from,
            fresh,
        }
    }

    /// Chooses the implementation for a rebuild over `n` backends. The one switched to starts
    /// afresh: a switch means the membership changed, and both start a new round then.
    pub(crate) fn prepare(&mut self, n: usize) -> bool {
        let indexed = n >= self.index_from;
        if indexed != self.indexed {
            if indexed {
                self.index = (self.fresh)();
            } else {
                self.linear = L::default();
            }
            self.indexed = indexed;
        }
        indexed
    }
}

/// The [`Balancer`] calls of an algorithm whose index is a [`SmoothIndex`], sent to the
/// implementation in use: the one place that chooses between the two.
impl<L: Balancer + Default> Dual<L, SmoothIndex> {
    /// Rebuilds the implementation `backends` call for; `at_once`: the index takes a changed
    /// weight at once in its round (weights a load model rewrites), as the linear code of such
    /// an algorithm does in its own `rebuild`.
    pub(crate) fn rebuild(&mut self, backends: &Backends<'_>, at_once: bool) {
        if self.prepare(backends.len()) {
            self.index.rebuild(backends, at_once);
        } else {
            self.linear.rebuild(backends);
        }
    }

    pub(crate) fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        if self.indexed {
            self.index.pick(ctx, backends)
        } else {
            self.linear.pick(ctx, backends)
        }
    }

    pub(crate) fn on_complete(&mut self, id: BackendId, c: &Completion) {
        if self.indexed {
            self.index.on_complete(id, c);
        } else {
            self.linear.on_complete(id, c);
        }
    }

    /// Only the index keeps state a backend's change must reach; the linear code reads the
    /// backends afresh at every pick.
    pub(crate) fn on_change(&mut self, id: BackendId) {
        if self.indexed {
            self.index.on_change(id);
        }
    }
}
