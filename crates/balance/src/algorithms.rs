//! Every balancing algorithm, one file each. See `docs/algorithms.md` for what each does and
//! where it comes from.

mod bounded_load;
mod capacity_weighted;
mod chained_round_robin;
mod dual;
mod dwlc;
mod dynamic_wrr;
mod fair;
mod hash;
mod ip_hash;
mod latency;
mod least_conn;
pub(crate) mod least_time;
mod maglev;
mod new_hash;
mod p2c_ewma;
mod prequal;
mod random;
mod random_two;
mod round_robin;
mod weighted_round_robin;

pub use bounded_load::BoundedLoad;
pub use capacity_weighted::CapacityWeighted;
pub use chained_round_robin::ChainedRoundRobin;
pub use dwlc::Dwlc;
pub use dynamic_wrr::DynamicWrr;
pub use fair::Fair;
pub use hash::Hash;
pub use ip_hash::IpHash;
pub use latency::Latency;
pub use least_conn::LeastConn;
pub use least_time::LeastTime;
pub use maglev::{Maglev, MaglevTable};
pub use new_hash::NewHash;
pub use p2c_ewma::P2cEwma;
pub use prequal::{Prequal, PrequalOptions, RifLatency};
pub use random::Random;
pub use random_two::RandomTwo;
pub use round_robin::RoundRobin;
pub use weighted_round_robin::WeightedRoundRobin;

#[cfg(test)]
pub(crate) mod testing;
