//! An algorithm in its two implementations: the linear scan it always had, kept as the
//! reference (`crate::reference`), and an index that picks in O(log n)
//! ([`crate::smooth_index`], [`crate::load_index`]). Below a pool size the scan is the faster
//! of the two (docs/performance.md, "O(log n) picks"), so small tiers keep it; both give the
//! same picks, so the choice is one of speed only.

use crate::algorithm::Implementation;

/// From this many backends on, a tier is picked from by its index. Measured with the `pick`
/// benchmark (docs/performance.md): below it the scan wins. Unit tests run the index at every
/// size, so the tests written for the algorithms exercise it; the equality tests compare it
/// with the scan.
pub(crate) const INDEX_FROM: usize = if cfg!(test) { 0 } else { 32 };

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
    pub(crate) fn new(implementation: Implementation, fresh: fn() -> I) -> Dual<L, I> {
        let index_from = match implementation {
            Implementation::Auto => INDEX_FROM,
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
