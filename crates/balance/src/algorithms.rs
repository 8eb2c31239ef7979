//! Every balancing algorithm, one file each. See `docs/algorithms.md` for what each does and
//! where it comes from.

mod bounded_load;
mod chained_round_robin;
mod fair;
mod hash;
mod ip_hash;
mod least_conn;
mod maglev;
mod random;
mod random_two;
mod round_robin;
mod weighted_round_robin;

pub use bounded_load::BoundedLoad;
pub use chained_round_robin::ChainedRoundRobin;
pub use fair::Fair;
pub use hash::Hash;
pub use ip_hash::IpHash;
pub use least_conn::LeastConn;
pub use maglev::{Maglev, MaglevTable};
pub use random::Random;
pub use random_two::RandomTwo;
pub use round_robin::RoundRobin;
pub use weighted_round_robin::WeightedRoundRobin;

#[cfg(test)]
pub(crate) mod testing;
