//! nginx's `least_conn` (`ngx_http_upstream_least_conn_module.c`): the backend with the fewest
//! requests in flight relative to its weight, comparing `conns_a · weight_b < conns_b ·
//! weight_a` so there is no division. When several backends tie, smooth weighted round robin
//! chooses among them, so equal backends under equal load still share requests by weight.

use crate::algorithm::Implementation;
use crate::algorithms::dual::{Dual, Family};
use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, Completion, PickCtx};
use crate::reference;
use crate::smooth_index::{Score, SmoothIndex};

/// `least_conn`: the linear scan on small tiers, [`SmoothIndex`] over load levels on large
/// ones (see [`crate::algorithms::dual`]); the same picks either way.
#[derive(Debug)]
pub struct LeastConn {
    imp: Dual<reference::LeastConn, SmoothIndex>,
}

impl Default for LeastConn {
    fn default() -> LeastConn {
        LeastConn::new(Implementation::Auto)
    }
}

impl LeastConn {
    pub(crate) fn new(implementation: Implementation) -> LeastConn {
        LeastConn {
            imp: Dual::new(implementation, Family::LeastLoaded, || {
                SmoothIndex::new(Score::Conns)
            }),
        }
    }

    /// As [`Balancer::rebuild`], but a changed weight takes effect at once in the tie-break
    /// (see [`SmoothWeights::rebuild_at_once`](crate::smooth::SmoothWeights::rebuild_at_once)):
    /// for weights a load model rewrites.
    pub fn rebuild_at_once(&mut self, backends: &Backends<'_>) {
        if self.imp.prepare(backends.len()) {
            self.imp.index.rebuild(backends, true);
        } else {
            self.imp.linear.rebuild_at_once(backends);
        }
    }
}

impl Balancer for LeastConn {
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
    fn fewest_in_flight_per_weight_wins() {
        let mut h = Harness::new(&[1, 2, 1], LeastConn::default());
        // Hold tickets so in-flight counts grow: b (weight 2) takes two for every one of a, c.
        let held = h.hold(8);
        let counts = h.in_flight();
        assert_eq!(counts, vec![2, 4, 2], "picks: {}", names(&held));
    }

    #[test]
    fn ties_follow_smooth_wrr_step_by_step() {
        // All idle, weights 5, 1, 1: every pick is a tie, so the sequence is exactly smooth
        // WRR's when each request completes before the next.
        let mut h = Harness::new(&[5, 1, 1], LeastConn::default());
        let mut seq = String::new();
        for _ in 0..7 {
            let id = h.pick().unwrap();
            seq.push_str(&names(&[id]));
            h.complete(id, Outcome::Success);
        }
        assert_eq!(seq, "aabacaa");
    }

    #[test]
    fn tie_break_only_among_the_tied() {
        // a busy, b and c idle and tied: only b and c take part in the smooth WRR round.
        let mut h = Harness::new(&[1, 1, 1], LeastConn::default());
        let a = h.pick().unwrap();
        assert_eq!(a, BackendId(0));
        let mut seq = Vec::new();
        for _ in 0..4 {
            let id = h.pick().unwrap();
            seq.push(id);
            h.complete(id, Outcome::Success);
        }
        assert_eq!(names(&seq), "bcbc");
    }
}
