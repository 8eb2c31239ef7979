//! nginx's `least_conn` (`ngx_http_upstream_least_conn_module.c`): the backend with the fewest
//! requests in flight relative to its weight, comparing `conns_a · weight_b < conns_b ·
//! weight_a` so there is no division. When several backends tie, smooth weighted round robin
//! chooses among them, so equal backends under equal load still share requests by weight.

use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, Completion, PickCtx};
use crate::smooth::SmoothWeights;

#[derive(Debug, Default)]
pub struct LeastConn {
    tie_break: SmoothWeights,
}

impl LeastConn {
    /// As [`Balancer::rebuild`], but a changed weight takes effect at once in the tie-break
    /// (see [`SmoothWeights::rebuild_at_once`]): for weights a load model rewrites.
    pub fn rebuild_at_once(&mut self, backends: &Backends<'_>) {
        self.tie_break.rebuild_at_once(backends);
    }
}

impl Balancer for LeastConn {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        self.tie_break.rebuild(backends);
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        // Load of `a` compared with `b`, as conns/weight cross-multiplied.
        let cmp = |a: BackendId, b: BackendId| {
            let la = u128::from(backends.in_flight(a)) * u128::from(backends.share(b));
            let lb = u128::from(backends.in_flight(b)) * u128::from(backends.share(a));
            la.cmp(&lb)
        };
        let mut best: Option<BackendId> = None;
        let mut tied = false;
        for id in backends.ids().filter(|&id| ctx.usable(id, backends)) {
            match best.map(|b| cmp(id, b)) {
                None | Some(std::cmp::Ordering::Less) => {
                    best = Some(id);
                    tied = false;
                }
                Some(std::cmp::Ordering::Equal) => tied = true,
                Some(std::cmp::Ordering::Greater) => {}
            }
        }
        let best = best?;
        if !tied {
            return Some(best);
        }
        self.tie_break.pick(
            (best.0..backends.len() as u32)
                .map(BackendId)
                .filter(|&id| ctx.usable(id, backends) && cmp(id, best).is_eq()),
        )
    }

    fn on_complete(&mut self, id: BackendId, c: &Completion) {
        self.tie_break.on_complete(id, c);
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
