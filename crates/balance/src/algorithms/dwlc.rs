//! `dwlc`: the Dynamic Weighted Least-Connection algorithm of seed 003 (Li, Li, Li, "An
//! Integrated Load-balancing Scheduling Algorithm for Nginx-Based Web Application Clusters",
//! §3–4): nginx's weighted least connection over weights that the load model
//! ([`crate::weights::dwlc`], `W = 100 − L`, changed by steps of at least 5, every 3 s) sets.
//!
//! The paper makes nginx's own least-connection algorithm dynamic by rewriting its weights; it
//! gives no selection rule or tie-break of its own. So the selection is exactly `least_conn`'s
//! ([`LeastConn`]): the usable backend with the fewest requests in flight per unit of weight,
//! compared as `conns_a · weight_b < conns_b · weight_a`, and smooth weighted round robin among
//! the tied. Until the control plane sets model weights
//! ([`Pool::set_weights`](crate::Pool::set_weights)), the configured weights are used.

use crate::algorithm::Implementation;
use crate::algorithms::LeastConn;
use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, Completion, PickCtx};

#[derive(Debug, Default)]
pub struct Dwlc {
    least_conn: LeastConn,
}

impl Dwlc {
    pub(crate) fn new(implementation: Implementation) -> Dwlc {
        Dwlc {
            least_conn: LeastConn::new(implementation),
        }
    }
}

impl Balancer for Dwlc {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        // The model rewrites weights by tens at a time (seed 003: W = 100 − L): they apply at
        // once rather than climbing one unit per pick, which took the first hundred picks
        // after a change to reach 40, 80, 10 from 1, 1, 1.
        self.least_conn.rebuild_at_once(backends);
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        self.least_conn.pick(ctx, backends)
    }

    fn on_complete(&mut self, id: BackendId, c: &Completion) {
        self.least_conn.on_complete(id, c);
    }

    fn on_change(&mut self, id: BackendId) {
        self.least_conn.on_change(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testing::{Harness, names};
    use crate::backend::Nanos;
    use crate::balancer::Outcome;
    use crate::weights::LoadReport;
    use crate::weights::dwlc::DwlcModel;

    #[test]
    fn idle_backends_tie_and_smooth_wrr_decides() {
        // Every request completes before the next: all tie at 0 in flight, so the order is
        // nginx's smooth WRR for 5, 1, 1 (DESIGN §3).
        let mut h = Harness::new(&[5, 1, 1], Dwlc::default());
        let mut seq = String::new();
        for _ in 0..7 {
            let id = h.pick().unwrap();
            seq.push_str(&names(&[id]));
            h.complete(id, Outcome::Success);
        }
        assert_eq!(seq, "aabacaa");
    }

    #[test]
    fn new_model_weights_apply_from_the_next_pick() {
        // From 1, 1, 1 to the model's 40, 80, 10: one request at a time, the first 130 picks
        // already split 40 / 80 / 10 (they climbed one unit per pick before, skewing the first
        // hundred picks towards the backends that had been equal).
        let mut h = Harness::new(&[1, 1, 1], Dwlc::default());
        for _ in 0..3 {
            let id = h.pick().unwrap();
            h.complete(id, Outcome::Success);
        }
        for (s, w) in h.states.iter_mut().zip([40, 80, 10]) {
            s.weight = w;
        }
        h.balancer.rebuild(&Backends::new(&h.states, h.now));
        let mut counts = [0; 3];
        for _ in 0..130 {
            let id = h.pick().unwrap();
            counts[id.index()] += 1;
            h.complete(id, Outcome::Success);
        }
        assert_eq!(counts, [40, 80, 10]);
    }

    #[test]
    fn held_requests_follow_the_models_weights() {
        // Model weights (weights/dwlc.rs): a: L = 41.5 % → 59; b: no report → 100;
        // c: NaN cpu read as 100 % → L = 35 % → 65. Weighted least connection sends each
        // request to the lowest conns/weight, so holding Σw = 224 requests leaves exactly
        // 59, 100, 65 in flight (a divisor apportionment: integer quotas are met exactly).
        let mut model = DwlcModel::new(3);
        let a = LoadReport {
            cpu: 0.5,
            mem: 0.4,
            disk: 0.0,
            net: 0.1,
            container_mem: 0.8,
        };
        let c = LoadReport {
            cpu: f64::NAN,
            ..LoadReport::default()
        };
        model.update(&[Some(a), None, Some(c)], Nanos(0));
        assert_eq!(model.weights(), [59, 100, 65]);
        let mut h = Harness::new(&[1, 1, 1], Dwlc::default());
        for (s, &w) in h.states.iter_mut().zip(model.weights()) {
            s.weight = w;
        }
        h.balancer.rebuild(&Backends::new(&h.states, h.now));
        h.hold(224);
        assert_eq!(h.in_flight(), [59, 100, 65]);
    }

    #[test]
    fn the_least_loaded_per_weight_wins() {
        // a: 3 in flight at weight 95 (0.0316 each); b: 2 at weight 60 (0.0333): a wins, as
        // 3·60 = 180 < 2·95 = 190.
        let mut h = Harness::new(&[95, 60], Dwlc::default());
        h.states[0].in_flight = 3;
        h.states[1].in_flight = 2;
        assert_eq!(h.pick(), Some(BackendId(0)));
        // Now a has 4: 4·60 = 240 > 2·95 = 190, b wins.
        assert_eq!(h.pick(), Some(BackendId(1)));
    }

    #[test]
    fn unusable_backends_are_skipped() {
        let mut h = Harness::new(&[100, 100, 100], Dwlc::default());
        h.mark_down(0);
        h.hold(10);
        assert_eq!(h.in_flight()[0], 0);
        h.mark_down(1);
        h.mark_down(2);
        assert_eq!(h.pick(), None);
    }
}
