//! An upstream's weight model, behind one interface: reports in (one per backend, pool
//! order), the weights for [`Pool::set_weights`](crate::Pool::set_weights) out. The models
//! themselves are the sibling modules; this only picks the one the upstream's algorithm
//! balances by. The control plane and the simulator both reach it through [`super::feed`].

use super::LoadReport;
use super::capacity_weighted::CapacityModel;
use super::dwlc::DwlcModel;
use super::dynamic_wrr::DynamicWrrModel;
use super::utilization::{Observed, UtilizationModel, UtilizationSettings};
use crate::{Algorithm, Nanos};

/// The weight model of one upstream.
#[derive(Debug, Clone)]
pub enum Model {
    /// Seed 003: `W = 100 − L`, changed by steps of at least 5.
    Dwlc(DwlcModel),
    /// Seed 001: entropy-weighted remaining performance.
    DynamicWrr(DynamicWrrModel),
    /// Seed 000: capacity × free share. The capacities are the configured weights.
    CapacityWeighted {
        model: CapacityModel,
        capacities: Vec<f64>,
    },
    /// gRFC A58: `qps / (utilization + eps/qps · penalty)`, from the balancer's own request and
    /// error rates and the reported CPU utilization.
    UtilizationWrr {
        model: UtilizationModel,
        /// The weights while no backend has a usable one.
        configured: Vec<u32>,
    },
}

/// Which weight model an algorithm balances by; which algorithm has which is declared with
/// the algorithms ([`Algorithm::weight_model`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// Seed 003's (`dwlc`).
    Dwlc,
    /// Seed 001's (`dynamic_wrr`).
    DynamicWrr,
    /// Seed 000's (`capacity_weighted`).
    CapacityWeighted,
    /// gRFC A58's (`utilization_wrr`).
    UtilizationWrr,
}

impl Model {
    /// The model `algorithm` balances by, over backends with the `configured` weights (pool
    /// order) and the upstream's `options` (seed 001's thresholds H and L, A58's periods);
    /// `None` for an algorithm that takes no load reports.
    pub fn for_algorithm(
        algorithm: Algorithm,
        configured: &[u32],
        options: &crate::Options,
    ) -> Option<Model> {
        Some(match algorithm.weight_model()? {
            ModelKind::Dwlc => Model::Dwlc(DwlcModel::new(configured.len())),
            ModelKind::DynamicWrr => {
                Model::DynamicWrr(DynamicWrrModel::with_options(configured, options))
            }
            ModelKind::UtilizationWrr => Model::UtilizationWrr {
                model: UtilizationModel::new(configured.len(), UtilizationSettings::from(options)),
                configured: configured.to_vec(),
            },
            ModelKind::CapacityWeighted => Model::CapacityWeighted {
                model: CapacityModel::default(),
                capacities: configured.iter().map(|&w| f64::from(w)).collect(),
            },
        })
    }

    /// The weights for `reports` at `now`; `observed` is what the balancer saw of each backend
    /// over the last period (its rates, and the utilization of a fresh report only), which
    /// only A58's model reads.
    pub fn weights(
        &mut self,
        reports: &[Option<LoadReport>],
        observed: &[Observed],
        now: Nanos,
    ) -> Vec<u32> {
        match self {
            Model::UtilizationWrr { model, configured } => {
                model.record(observed, now);
                model.weights(now).unwrap_or_else(|| configured.clone())
            }
            Model::Dwlc(m) => {
                m.update(reports, now);
                m.weights().to_vec()
            }
            Model::DynamicWrr(m) => {
                m.update(reports);
                m.weights().to_vec()
            }
            Model::CapacityWeighted { model, capacities } => model.weights(capacities, reports),
        }
    }
}
