//! The O(n) algorithms as they were before issue 27 made them O(log n): kept, unchanged, as
//! the reference the indexed ones must match pick for pick. The equality tests
//! (`algorithms::equality`) run both over long random sequences, and the `pick` benchmark
//! measures both in the same run. Nothing in fulcrum builds these except through
//! [`Implementation::Reference`](crate::algorithm::Implementation::Reference).
//!
//! Each type is the algorithm of the same name in [`crate::algorithms`], at the commit before
//! issue 27 (`de05824`): a linear scan over the backends per pick. `dwlc` has none of its own:
//! it is `least_conn` over weights a model rewrites, so its reference is [`LeastConn`]'s.

use std::cmp::Ordering;

use crate::algorithms::least_time::shaped_rt_ms;
use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, Completion, PickCtx};
use crate::smooth::SmoothWeights;

/// `least_conn` by a linear scan, smooth WRR among the tied.
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

/// `fair` by a linear walk from the cursor.
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

/// `least_time` by a linear scan, smooth WRR among the tied.
#[derive(Debug, Default)]
pub struct LeastTime {
    tie_break: SmoothWeights,
}

impl Balancer for LeastTime {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        self.tie_break.rebuild(backends);
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        let eta = |id: BackendId| {
            u128::from(shaped_rt_ms(backends, id, ctx.now))
                * (1 + u128::from(backends.in_flight(id)))
        };
        // `eta_a / share_a` against `eta_b / share_b`, cross-multiplied.
        let cmp = |a: BackendId, eta_a: u128, b: BackendId, eta_b: u128| {
            (eta_a * u128::from(backends.share(b))).cmp(&(eta_b * u128::from(backends.share(a))))
        };
        let mut best: Option<(BackendId, u128)> = None;
        let mut tied = false;
        for id in backends.ids().filter(|&id| ctx.usable(id, backends)) {
            let e = eta(id);
            match best.map(|(b, eb)| cmp(id, e, b, eb)) {
                None | Some(std::cmp::Ordering::Less) => {
                    best = Some((id, e));
                    tied = false;
                }
                Some(std::cmp::Ordering::Equal) => tied = true,
                Some(std::cmp::Ordering::Greater) => {}
            }
        }
        let (best, best_eta) = best?;
        if !tied {
            return Some(best);
        }
        self.tie_break.pick(
            (best.0..backends.len() as u32)
                .map(BackendId)
                .filter(|&id| ctx.usable(id, backends) && cmp(id, eta(id), best, best_eta).is_eq()),
        )
    }

    fn on_complete(&mut self, id: BackendId, c: &Completion) {
        self.tie_break.on_complete(id, c);
    }
}

/// nginx's smooth weighted round robin over every usable backend.
#[derive(Debug, Default)]
pub struct WeightedRoundRobin {
    pub(crate) weights: SmoothWeights,
}

impl Balancer for WeightedRoundRobin {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        self.weights.rebuild(backends);
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        self.weights.pick_usable(ctx, backends)
    }

    fn on_complete(&mut self, id: BackendId, c: &Completion) {
        self.weights.on_complete(id, c);
    }
}

/// Smooth weighted round robin applying changed weights at once (`dynamic_wrr`,
/// `capacity_weighted`, `utilization_wrr`).
#[derive(Debug, Default)]
pub struct DynamicWrr {
    pub(crate) weights: SmoothWeights,
}

impl Balancer for DynamicWrr {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        self.weights.rebuild_at_once(backends);
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        self.weights.pick_usable(ctx, backends)
    }

    fn on_complete(&mut self, id: BackendId, c: &Completion) {
        self.weights.on_complete(id, c);
    }
}
