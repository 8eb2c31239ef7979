//! `capacity_weighted`: seed 000's weight model (Ma & Chi, "Evaluation Test and Improvement of
//! Load Balancing Algorithms of Nginx", §IV.B, eq. 5: `Weight = C·(1 − L)/ΣC`, see
//! [`crate::weights::capacity_weighted`]) balanced by nginx's smooth weighted round robin.
//!
//! The paper evaluates nginx's algorithms and proposes the weight model for dynamically
//! adjusting "the weight of the single server node", naming WRR as the algorithm whose
//! weights change; it gives no selection rule of its own, so the weights are used as nginx's
//! WRR uses weights (the paper's Algorithm 1). Until the control plane sets model weights
//! ([`Pool::set_weights`](crate::Pool::set_weights)), the configured weights are used. A
//! changed weight takes effect at once ([`SmoothWeights::rebuild_at_once`](crate::smooth::SmoothWeights::rebuild_at_once)), since the model's
//! weights are per mille of the cluster.

/// The same balancer as [`DynamicWrr`](crate::algorithms::DynamicWrr) — smooth WRR applying
/// model weights at once; the two algorithms differ only in the model that sets the weights.
pub type CapacityWeighted = crate::algorithms::DynamicWrr;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testing::{Harness, names};
    use crate::backend::{BackendId, Backends};
    use crate::balancer::Balancer;
    use crate::weights::LoadReport;
    use crate::weights::capacity_weighted::{Capacity, CapacityModel};

    #[test]
    fn configured_weights_serve_until_the_model_speaks() {
        // nginx's smooth WRR sequence for 5, 1, 1 (DESIGN §3).
        let mut h = Harness::new(&[5, 1, 1], CapacityWeighted::default());
        assert_eq!(names(&h.picks(7)), "aabacaa");
    }

    #[test]
    fn shares_follow_the_models_weights() {
        // The model's example (weights/capacity_weighted.rs): capacities 0.2446, 0.3018,
        // 0.4536 (dual core 1 GB, dual core 2 GB, quad core 4 GB), loads 0.5, 0.3, 0.1 →
        // weights 122, 211, 408. From a fresh round, smooth WRR gives every backend exactly
        // its weight in Σw = 741 picks.
        let m = CapacityModel::default();
        let figures: Vec<Capacity> = [(2.0, 1.0), (2.0, 2.0), (4.0, 4.0)]
            .iter()
            .map(|&(cpu, mem)| Capacity {
                cpu,
                mem,
                disk: 1.0,
                net: 1.0,
            })
            .collect();
        let report = |cpu, mem, disk, net| {
            Some(LoadReport {
                cpu,
                mem,
                disk,
                net,
                container_mem: 0.0,
            })
        };
        let weights = m.weights_for(
            &figures,
            &[
                report(0.8, 0.6, 0.2, 0.4),
                report(0.4, 0.4, 0.2, 0.2),
                report(0.2, 0.2, 0.0, 0.0),
            ],
        );
        let mut h = Harness::new(&[1, 1, 1], CapacityWeighted::default());
        for (s, &w) in h.states.iter_mut().zip(&weights) {
            s.weight = w;
        }
        h.balancer.rebuild(&Backends::new(&h.states, h.now));
        assert_eq!(h.counts(741), [122, 211, 408]);
    }

    #[test]
    fn a_failure_costs_the_failed_backend_its_share_for_a_while() {
        // nginx's penalty: effective −= weight/max_fails (max_fails 1: to 0), +1 per pick. On
        // a per-mille scale that is hundreds of picks; the other backend takes them.
        let mut h = Harness::with_max_fails(&[500, 500], 10, CapacityWeighted::default());
        let a = h.pick().unwrap();
        assert_eq!(a, BackendId(0));
        h.complete(a, crate::Outcome::Failure);
        // effective a = 500 − 50 = 450, climbing back by 1 per pick: b leads the next rounds.
        let counts = h.counts(100);
        assert!(counts[1] > counts[0], "{counts:?}");
    }

    #[test]
    fn unusable_backends_are_skipped() {
        let mut h = Harness::new(&[300, 100, 100], CapacityWeighted::default());
        h.mark_down(1);
        for _ in 0..50 {
            let id = h.pick_excluding(&[BackendId(0)]).unwrap();
            assert_eq!(id, BackendId(2));
        }
        h.mark_down(2);
        assert_eq!(h.pick_excluding(&[BackendId(0)]), None);
    }
}
