//! The weight models over arbitrary reports, sizes and figures (including NaN, infinities and
//! values outside [0, 1], as a broken reporter sends them): they never panic, and their
//! weights stay within each model's range, round after round.

use balance::weights::LoadReport;
use balance::weights::capacity_weighted::{Capacity, CapacityModel};
use balance::weights::dynamic_wrr::{Adjustment, DynamicWrrModel};
use proptest::prelude::*;

/// Any f64 a source could hand over, with the awkward ones often.
fn any_value() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 0.0..=1.0f64,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => -10.0..10.0f64,
    ]
}

fn any_report() -> impl Strategy<Value = Option<LoadReport>> {
    prop::option::of(
        (
            any_value(),
            any_value(),
            any_value(),
            any_value(),
            any_value(),
        )
            .prop_map(|(cpu, mem, disk, net, container_mem)| LoadReport {
                cpu,
                mem,
                disk,
                net,
                container_mem,
            }),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// dynamic_wrr: every weight in [1, 1000] (the base weights sum to 1000, `F·W_S` is
    /// smaller, the return moves between the two), one per server.
    #[test]
    fn dynamic_wrr_weights_stay_on_its_scale(
        sizes in prop::collection::vec(0u32..100, 1..8),
        rounds in prop::collection::vec(prop::collection::vec(any_report(), 0..10), 1..6),
        high in 0.0..0.5f64,
    ) {
        let mut m = DynamicWrrModel::with_thresholds(&sizes, high, high + 0.2);
        for reports in &rounds {
            let before = m.weights().to_vec();
            let adjustment = m.update(reports);
            prop_assert_eq!(m.weights().len(), sizes.len());
            prop_assert!(m.weights().iter().all(|&w| (1..=1000).contains(&w)), "{:?}", m.weights());
            if adjustment == Adjustment::Saturated {
                prop_assert_eq!(m.weights(), &before[..]);
            }
        }
    }

    /// capacity_weighted: every weight in [1, 1000], and an idle cluster's weights (no
    /// reports) add up to about 1000, whatever units the figures are in.
    #[test]
    fn capacity_weights_stay_on_its_scale(
        figures in prop::collection::vec(
            (any_value(), any_value(), any_value(), any_value()),
            1..8,
        ),
        scale in prop::array::uniform4(1e-3..1e4f64),
        reports in prop::collection::vec(any_report(), 0..10),
    ) {
        let figures: Vec<Capacity> = figures
            .iter()
            .map(|&(cpu, mem, disk, net)| Capacity { cpu, mem, disk, net })
            .collect();
        let m = CapacityModel::default();
        let w = m.weights_for(&figures, &reports);
        prop_assert_eq!(w.len(), figures.len());
        prop_assert!(w.iter().all(|&w| (1..=1000).contains(&w)), "{:?}", w);
        // Units do not matter: every figure rescaled by its own factor gives the same weights.
        let rescaled: Vec<Capacity> = figures
            .iter()
            .map(|p| Capacity {
                cpu: p.cpu * scale[0],
                mem: p.mem * scale[1],
                disk: p.disk * scale[2],
                net: p.net * scale[3],
            })
            .collect();
        let caps = m.capacities(&figures);
        let caps_rescaled = m.capacities(&rescaled);
        for (a, b) in caps.iter().zip(&caps_rescaled) {
            prop_assert!((a - b).abs() < 1e-9, "{:?} vs {:?}", caps, caps_rescaled);
        }
        let idle: u32 = m.weights_for(&figures, &[]).iter().sum();
        prop_assert!(idle.abs_diff(1000) <= figures.len() as u32, "{}", idle);
    }
}
