//! The algorithms by their configuration names, and what each one is besides how it picks:
//! what it hashes ([`Affinity`]), where the weights it balances by come from
//! ([`WeightSource`]: ignored, configured, or a weight model fed by load reports), and which
//! options it takes ([`OptionKey`], set in [`Options`]).
//!
//! Each of these facts is declared once, in one table with a row per algorithm
//! (`Algorithm::properties`), and every part of fulcrum that asks — the configuration's
//! checks, the proxy, the control plane's feedback loop, the lab and the simulator — asks
//! here, so their answers cannot drift apart. Adding an algorithm is adding its row; the
//! table's `match` has no catch-all, so the compiler asks for it.

use std::fmt;
use std::str::FromStr;

use crate::algorithms;
use crate::algorithms::PrequalOptions;
use crate::backend::Nanos;
use crate::balancer::Balancer;
use crate::weights::ModelKind;

/// Which bytes of an IPv4 address `new_hash` hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Octets {
    /// The first three, as seed 000 (and nginx's `ip_hash`) do: a /24 goes to one backend.
    #[default]
    Three,
    /// The whole address.
    All,
}

/// The options of the algorithms that have any, per upstream. Each algorithm reads only its
/// own; the configuration layer refuses an option the chosen algorithm does not use.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// `hash`: place keys on nginx's ketama ring (`hash $key consistent`) instead of
    /// `crc32(key) % total weight`.
    pub consistent: bool,
    /// `new_hash`: which octets of an IPv4 address are hashed (IPv6: always all 16).
    pub octets: Octets,
    /// `maglev`: the lookup table's size, a prime well above the number of backends.
    pub table_size: u32,
    /// `bounded_load`: no backend takes more than `balance_factor` times its fair share of the
    /// requests in flight.
    pub balance_factor: f64,
    /// `latency`: how many recent completions per backend the latency average and the success
    /// rate are taken over.
    pub window: u32,
    /// `latency`: the weight of the newest latency in the moving average, in (0, 1].
    pub smoothing: f64,
    /// `latency` and `p2c_ewma`: the penalty `p` in `l = base + p·(1/s − 1)`: seed 002 sets it
    /// to the timeout (4 s in its testbed, the default here); the configuration uses the
    /// upstream's `read_timeout` unless `penalty` is given. The pool also takes it as its
    /// latency estimate before it has one ([`crate::Completion::verdict`]).
    pub penalty: Nanos,
    /// `dynamic_wrr`: the threshold `H` of seed 001 §III.C: a server whose free share (weighted
    /// remaining performance per unit of size, in [0, 1]) is at most this is highly loaded.
    /// The paper gives no value; ours, below `low_load`.
    pub high_load: f64,
    /// `dynamic_wrr`: the threshold `L`: a server whose free share is at least this is lightly
    /// loaded. The paper gives no value; ours, above `high_load`.
    pub low_load: f64,
    /// `utilization_wrr` (gRFC A58): how long a backend must report before its weight is used.
    pub blackout_period: Nanos,
    /// `utilization_wrr`: how long a weight stays in use without a new report.
    pub weight_expiration_period: Nanos,
    /// `utilization_wrr`: how much errors weigh against a backend (`eps/qps · penalty` is
    /// added to its utilization).
    pub error_utilization_penalty: f64,
    /// How long a backend that joins or recovers takes to reach its full weight (Envoy's slow
    /// start); `None` for no slow start. Only for algorithms where
    /// [`Algorithm::supports_slow_start`] holds.
    pub slow_start: Option<Nanos>,
    /// `prequal`: the probe pool, reuse budget, hot-cold quantile, probe rate, probe age and
    /// timeout (keys `pool_size`, `reuse`, `quantile`, `probe_rate`, `probe_max_age`,
    /// `probe_timeout`; see [`PrequalOptions`]).
    pub prequal: PrequalOptions,
    /// Every algorithm (what the pool and the load-aware ones learn): the answers that count
    /// as failures (`failure_statuses`, with the statuses `next_upstream` lists added by the
    /// configuration); see [`crate::statuses`].
    pub failure_statuses: crate::statuses::FailureStatuses,
}

impl Options {
    pub const DEFAULT_TABLE_SIZE: u32 = 65537;
    pub const DEFAULT_BALANCE_FACTOR: f64 = 1.25;
    pub const DEFAULT_WINDOW: u32 = 10;
    pub const DEFAULT_SMOOTHING: f64 = 0.5;
    pub const DEFAULT_PENALTY: Nanos = Nanos(4_000_000_000);
    /// 0.2: utilization above 0.8 is overload in seed 000's Table 3.
    pub const DEFAULT_HIGH_LOAD: f64 = crate::weights::dynamic_wrr::HIGH_LOAD;
    /// 0.4: utilization below 0.6 is free in seed 000's Table 3.
    pub const DEFAULT_LOW_LOAD: f64 = crate::weights::dynamic_wrr::LOW_LOAD;
    /// A58's default: 10 s.
    pub const DEFAULT_BLACKOUT_PERIOD: Nanos = Nanos(10_000_000_000);
    /// A58's default: 3 minutes.
    pub const DEFAULT_WEIGHT_EXPIRATION_PERIOD: Nanos = Nanos(180_000_000_000);
    /// Envoy's default for A58's penalty: 1.0.
    pub const DEFAULT_ERROR_UTILIZATION_PENALTY: f64 = 1.0;
}

impl Default for Options {
    fn default() -> Options {
        Options {
            consistent: false,
            octets: Octets::default(),
            table_size: Options::DEFAULT_TABLE_SIZE,
            balance_factor: Options::DEFAULT_BALANCE_FACTOR,
            window: Options::DEFAULT_WINDOW,
            smoothing: Options::DEFAULT_SMOOTHING,
            penalty: Options::DEFAULT_PENALTY,
            high_load: Options::DEFAULT_HIGH_LOAD,
            low_load: Options::DEFAULT_LOW_LOAD,
            blackout_period: Options::DEFAULT_BLACKOUT_PERIOD,
            weight_expiration_period: Options::DEFAULT_WEIGHT_EXPIRATION_PERIOD,
            error_utilization_penalty: Options::DEFAULT_ERROR_UTILIZATION_PENALTY,
            slow_start: None,
            prequal: PrequalOptions::default(),
            failure_statuses: crate::statuses::FailureStatuses::DEFAULT,
        }
    }
}

/// The key a hash algorithm expects in [`PickCtx::affinity`](crate::PickCtx::affinity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Affinity {
    /// The client address as octets: 4 for IPv4 (an IPv4-mapped IPv6 address included), 16 for
    /// IPv6 (`ip_hash`, `new_hash`).
    AddressOctets,
    /// The configured `hash_key` as bytes: for `client_ip` the address as text (`"10.0.0.1"`,
    /// nginx's `$remote_addr`), else the header value, cookie value or request URI (`hash`,
    /// `maglev`, `bounded_load`). A request without the header or cookie has an empty key.
    Key,
}

/// An option of [`Options`], by its key in an `[[upstream]]` section. Which algorithms take
/// which is declared with the algorithms ([`Algorithm::options`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OptionKey {
    Consistent,
    Octets,
    TableSize,
    BalanceFactor,
    Window,
    Smoothing,
    Penalty,
    HighLoad,
    LowLoad,
    BlackoutPeriod,
    WeightExpirationPeriod,
    ErrorUtilizationPenalty,
    SlowStart,
    PoolSize,
    Reuse,
    Quantile,
    ProbeRate,
    ProbeMaxAge,
    ProbeTimeout,
}

impl OptionKey {
    /// Every option, in the order the configuration lists them.
    pub const ALL: &'static [OptionKey] = &[
        OptionKey::Consistent,
        OptionKey::Octets,
        OptionKey::TableSize,
        OptionKey::BalanceFactor,
        OptionKey::Window,
        OptionKey::Smoothing,
        OptionKey::Penalty,
        OptionKey::HighLoad,
        OptionKey::LowLoad,
        OptionKey::BlackoutPeriod,
        OptionKey::WeightExpirationPeriod,
        OptionKey::ErrorUtilizationPenalty,
        OptionKey::SlowStart,
        OptionKey::PoolSize,
        OptionKey::Reuse,
        OptionKey::Quantile,
        OptionKey::ProbeRate,
        OptionKey::ProbeMaxAge,
        OptionKey::ProbeTimeout,
    ];

    /// Its key in the configuration (the field of [`Options`] it sets has the same name;
    /// `prequal`'s set the fields of [`Options::prequal`] without the `probe_` prefix of
    /// `probe_max_age`).
    pub fn name(self) -> &'static str {
        match self {
            OptionKey::Consistent => "consistent",
            OptionKey::Octets => "octets",
            OptionKey::TableSize => "table_size",
            OptionKey::BalanceFactor => "balance_factor",
            OptionKey::Window => "window",
            OptionKey::Smoothing => "smoothing",
            OptionKey::Penalty => "penalty",
            OptionKey::HighLoad => "high_load",
            OptionKey::LowLoad => "low_load",
            OptionKey::BlackoutPeriod => "blackout_period",
            OptionKey::WeightExpirationPeriod => "weight_expiration_period",
            OptionKey::ErrorUtilizationPenalty => "error_utilization_penalty",
            OptionKey::SlowStart => "slow_start",
            OptionKey::PoolSize => "pool_size",
            OptionKey::Reuse => "reuse",
            OptionKey::Quantile => "quantile",
            OptionKey::ProbeRate => "probe_rate",
            OptionKey::ProbeMaxAge => "probe_max_age",
            OptionKey::ProbeTimeout => "probe_timeout",
        }
    }

    /// The option whose key is `name`, if there is one.
    pub fn from_name(name: &str) -> Option<OptionKey> {
        OptionKey::ALL.iter().copied().find(|o| o.name() == name)
    }

    /// The algorithms that take it, in [`Algorithm::ALL`]'s order.
    pub fn users(self) -> impl Iterator<Item = Algorithm> {
        Algorithm::ALL
            .iter()
            .copied()
            .filter(move |a| a.takes(self))
    }
}

impl fmt::Display for OptionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which code an algorithm picks with, where it has two: the linear scan it always had (kept
/// in `reference`), or the O(log n) index. [`Auto`](Implementation::Auto), what fulcrum runs,
/// takes the index from a tier size on where it is the faster; the others are for the tests
/// and the benchmark that compare the two. The picks are the same whichever runs.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Implementation {
    #[default]
    Auto,
    Indexed,
    Reference,
}

impl Implementation {
    /// The algorithms that have both codes (an O(log n) index beside their linear scan); the
    /// others pick the same way whatever is asked.
    pub const INDEXED: [Algorithm; 8] = [
        Algorithm::WeightedRoundRobin,
        Algorithm::LeastConn,
        Algorithm::Fair,
        Algorithm::LeastTime,
        Algorithm::DynamicWrr,
        Algorithm::Dwlc,
        Algorithm::CapacityWeighted,
        Algorithm::UtilizationWrr,
    ];
}

/// Where the weights an algorithm balances by come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightSource {
    /// Nowhere: weights change nothing (`round_robin` takes turns, `latency` weighs by
    /// latency and success).
    Ignored,
    /// The configured weights (and those the admin API or a HAProxy agent-check sets).
    Configured,
    /// A weight model's, computed from the backends' load reports every poll round
    /// ([`crate::weights::feed`]).
    LoadReports(ModelKind),
}

/// What an algorithm is besides how it picks: one row of `Algorithm::properties`.
#[derive(Debug, Clone, Copy)]
struct Properties {
    name: &'static str,
    affinity: Option<Affinity>,
    weights: WeightSource,
    /// In [`OptionKey::ALL`]'s order.
    options: &'static [OptionKey],
}

/// The algorithms by their configuration names (`algorithm = "..."`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    RoundRobin,
    WeightedRoundRobin,
    Random,
    ChainedRoundRobin,
    LeastConn,
    Fair,
    RandomTwo,
    IpHash,
    DynamicWrr,
    Dwlc,
    CapacityWeighted,
    UtilizationWrr,
    NewHash,
    LeastTime,
    P2cEwma,
    Latency,
    Hash,
    Maglev,
    BoundedLoad,
    Prequal,
}

impl Algorithm {
    pub const ALL: &'static [Algorithm] = &[
        // Static.
        Algorithm::RoundRobin,
        Algorithm::WeightedRoundRobin,
        Algorithm::Random,
        Algorithm::ChainedRoundRobin,
        // By load or latency.
        Algorithm::LeastConn,
        Algorithm::Fair,
        Algorithm::RandomTwo,
        Algorithm::LeastTime,
        Algorithm::P2cEwma,
        Algorithm::Latency,
        Algorithm::Prequal,
        // By a hash of the client or the request.
        Algorithm::IpHash,
        Algorithm::NewHash,
        Algorithm::Hash,
        Algorithm::Maglev,
        Algorithm::BoundedLoad,
        // By weights that backend load reports set.
        Algorithm::DynamicWrr,
        Algorithm::Dwlc,
        Algorithm::CapacityWeighted,
        Algorithm::UtilizationWrr,
    ];

    /// What the algorithm is, besides how it picks: its row of the table every question
    /// below is answered from.
    fn properties(self) -> Properties {
        use OptionKey as O;
        use WeightSource::{Configured, Ignored, LoadReports};
        match self {
            Algorithm::RoundRobin => Properties {
                name: "round_robin",
                affinity: None,
                weights: Ignored,
                options: &[],
            },
            Algorithm::WeightedRoundRobin => Properties {
                name: "weighted_round_robin",
                affinity: None,
                weights: Configured,
                options: &[O::SlowStart],
            },
            Algorithm::Random => Properties {
                name: "random",
                affinity: None,
                weights: Configured,
                options: &[O::SlowStart],
            },
            Algorithm::ChainedRoundRobin => Properties {
                name: "chained_round_robin",
                affinity: None,
                weights: Configured,
                options: &[],
            },
            Algorithm::LeastConn => Properties {
                name: "least_conn",
                affinity: None,
                weights: Configured,
                options: &[O::SlowStart],
            },
            Algorithm::Fair => Properties {
                name: "fair",
                affinity: None,
                weights: Configured,
                options: &[O::SlowStart],
            },
            Algorithm::RandomTwo => Properties {
                name: "random_two",
                affinity: None,
                weights: Configured,
                options: &[O::SlowStart],
            },
            Algorithm::LeastTime => Properties {
                name: "least_time",
                affinity: None,
                weights: Configured,
                options: &[O::SlowStart],
            },
            Algorithm::P2cEwma => Properties {
                name: "p2c_ewma",
                affinity: None,
                weights: Configured,
                options: &[O::Penalty, O::SlowStart],
            },
            Algorithm::Latency => Properties {
                name: "latency",
                affinity: None,
                weights: Ignored,
                options: &[O::Window, O::Smoothing, O::Penalty],
            },
            Algorithm::Prequal => Properties {
                name: "prequal",
                affinity: None,
                weights: Configured,
                options: &[
                    O::PoolSize,
                    O::Reuse,
                    O::Quantile,
                    O::ProbeRate,
                    O::ProbeMaxAge,
                    O::ProbeTimeout,
                ],
            },
            Algorithm::IpHash => Properties {
                name: "ip_hash",
                affinity: Some(Affinity::AddressOctets),
                weights: Configured,
                options: &[],
            },
            Algorithm::NewHash => Properties {
                name: "new_hash",
                affinity: Some(Affinity::AddressOctets),
                weights: Configured,
                options: &[O::Octets],
            },
            Algorithm::Hash => Properties {
                name: "hash",
                affinity: Some(Affinity::Key),
                weights: Configured,
                options: &[O::Consistent],
            },
            Algorithm::Maglev => Properties {
                name: "maglev",
                affinity: Some(Affinity::Key),
                weights: Configured,
                options: &[O::TableSize],
            },
            Algorithm::BoundedLoad => Properties {
                name: "bounded_load",
                affinity: Some(Affinity::Key),
                weights: Configured,
                options: &[O::BalanceFactor],
            },
            Algorithm::DynamicWrr => Properties {
                name: "dynamic_wrr",
                affinity: None,
                weights: LoadReports(ModelKind::DynamicWrr),
                options: &[O::HighLoad, O::LowLoad, O::SlowStart],
            },
            Algorithm::Dwlc => Properties {
                name: "dwlc",
                affinity: None,
                weights: LoadReports(ModelKind::Dwlc),
                options: &[O::SlowStart],
            },
            Algorithm::CapacityWeighted => Properties {
                name: "capacity_weighted",
                affinity: None,
                weights: LoadReports(ModelKind::CapacityWeighted),
                options: &[O::SlowStart],
            },
            Algorithm::UtilizationWrr => Properties {
                name: "utilization_wrr",
                affinity: None,
                weights: LoadReports(ModelKind::UtilizationWrr),
                options: &[
                    O::BlackoutPeriod,
                    O::WeightExpirationPeriod,
                    O::ErrorUtilizationPenalty,
                    O::SlowStart,
                ],
            },
        }
    }

    /// Its name in the configuration (`algorithm = "..."`).
    pub fn name(self) -> &'static str {
        self.properties().name
    }

    /// Whether the algorithm chooses by the request's affinity key.
    pub fn uses_affinity(self) -> bool {
        self.affinity().is_some()
    }

    /// What the algorithm hashes, if anything: the client address as octets, or the
    /// configured `hash_key` as text.
    pub fn affinity(self) -> Option<Affinity> {
        self.properties().affinity
    }

    /// Where the weights it balances by come from.
    pub fn weight_source(self) -> WeightSource {
        self.properties().weights
    }

    /// Whether weights (configured or a model's) change what the algorithm does.
    pub fn uses_weights(self) -> bool {
        self.weight_source() != WeightSource::Ignored
    }

    /// The weight model that computes its weights from the backends' load reports, if it
    /// balances by one.
    pub fn weight_model(self) -> Option<ModelKind> {
        match self.weight_source() {
            WeightSource::LoadReports(model) => Some(model),
            WeightSource::Ignored | WeightSource::Configured => None,
        }
    }

    /// Whether it reads the backends' load reports (`agent`, `node_exporter`, `memcached`):
    /// whether a weight model sets its weights. Only these algorithms take a load source, and
    /// only their upstreams are polled.
    pub fn reads_load_reports(self) -> bool {
        self.weight_model().is_some()
    }

    /// The options it takes, in [`OptionKey::ALL`]'s order; the configuration refuses the
    /// others for it.
    pub fn options(self) -> &'static [OptionKey] {
        self.properties().options
    }

    /// Whether it takes `option`.
    pub fn takes(self, option: OptionKey) -> bool {
        self.options().contains(&option)
    }

    /// Whether the algorithm balances by [`Backends::share`](crate::Backends::share), so
    /// `slow_start` can ramp a backend's weight up (Envoy offers it for round robin and least
    /// request, for the same reason: the share is what the weight decides, not a hash
    /// mapping). The same fact as taking the `slow_start` option.
    pub fn supports_slow_start(self) -> bool {
        self.takes(OptionKey::SlowStart)
    }

    /// A fresh instance with the given options. `seed` feeds the algorithms that draw random
    /// numbers, so two runs with the same seed make the same choices.
    pub fn build(self, options: &Options, seed: u64) -> Box<dyn Balancer> {
        self.build_as(options, seed, Implementation::Auto)
    }

    /// [`build`](Algorithm::build) with the given implementation, for the algorithms that
    /// have two (the others ignore it).
    #[doc(hidden)]
    pub fn build_as(
        self,
        options: &Options,
        seed: u64,
        implementation: Implementation,
    ) -> Box<dyn Balancer> {
        let imp = implementation;
        match self {
            Algorithm::RoundRobin => Box::new(algorithms::RoundRobin::default()),
            Algorithm::WeightedRoundRobin => Box::new(algorithms::WeightedRoundRobin::new(imp)),
            Algorithm::Random => Box::new(algorithms::Random::new(seed)),
            Algorithm::ChainedRoundRobin => Box::new(algorithms::ChainedRoundRobin::default()),
            Algorithm::LeastConn => Box::new(algorithms::LeastConn::new(imp)),
            Algorithm::Fair => Box::new(algorithms::Fair::new(imp)),
            Algorithm::RandomTwo => Box::new(algorithms::RandomTwo::new(seed)),
            Algorithm::IpHash => Box::new(algorithms::IpHash::default()),
            Algorithm::DynamicWrr => Box::new(algorithms::DynamicWrr::new(imp)),
            Algorithm::Dwlc => Box::new(algorithms::Dwlc::new(imp)),
            Algorithm::CapacityWeighted => Box::new(algorithms::CapacityWeighted::new(imp)),
            // The same smooth WRR, weighted by A58's model (weights::utilization).
            Algorithm::UtilizationWrr => Box::new(algorithms::DynamicWrr::new(imp)),
            Algorithm::NewHash => Box::new(algorithms::NewHash::new(options.octets)),
            Algorithm::LeastTime => Box::new(algorithms::LeastTime::new(imp)),
            Algorithm::P2cEwma => Box::new(algorithms::P2cEwma::new(options.penalty, seed)),
            Algorithm::Latency => Box::new(algorithms::Latency::new(options, seed)),
            Algorithm::Prequal => Box::new(algorithms::Prequal::new(&options.prequal, seed)),
            Algorithm::Hash => Box::new(algorithms::Hash::new(options.consistent)),
            Algorithm::Maglev => Box::new(algorithms::Maglev::new(options.table_size)),
            Algorithm::BoundedLoad => {
                Box::new(algorithms::BoundedLoad::new(options.balance_factor))
            }
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An algorithm name that is not one of [`Algorithm::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAlgorithm(pub String);

impl fmt::Display for UnknownAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown algorithm \"{}\"; known algorithms: ", self.0)?;
        for (i, a) in Algorithm::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(a.name())?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownAlgorithm {}

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Algorithm, UnknownAlgorithm> {
        Algorithm::ALL
            .iter()
            .copied()
            .find(|a| a.name() == s)
            .ok_or_else(|| UnknownAlgorithm(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn having(fact: impl Fn(Algorithm) -> bool) -> Vec<&'static str> {
        Algorithm::ALL
            .iter()
            .copied()
            .filter(|&a| fact(a))
            .map(Algorithm::name)
            .collect()
    }

    #[test]
    fn names_are_unique_and_parse_back() {
        for &a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>(), Ok(a));
        }
        for &o in OptionKey::ALL {
            assert_eq!(OptionKey::from_name(o.name()), Some(o));
        }
        assert_eq!(OptionKey::from_name("hash_key"), None);
    }

    /// The answers each place gave before they were declared here (the configuration's
    /// `uses_load_reports`, the lab's `reads_load_reports`, the simulator's `reads_reports`,
    /// the proxy's weight model test, and the configuration's `option_users`): a change to the
    /// table is a change of behaviour, and should show up here.
    #[test]
    fn the_table_answers_as_the_places_it_replaced() {
        assert_eq!(
            having(Algorithm::reads_load_reports),
            [
                "dynamic_wrr",
                "dwlc",
                "capacity_weighted",
                "utilization_wrr"
            ]
        );
        assert_eq!(having(|a| !a.uses_weights()), ["round_robin", "latency"]);
        assert_eq!(
            having(Algorithm::supports_slow_start),
            [
                "weighted_round_robin",
                "random",
                "least_conn",
                "fair",
                "random_two",
                "least_time",
                "p2c_ewma",
                "dynamic_wrr",
                "dwlc",
                "capacity_weighted",
                "utilization_wrr"
            ]
        );
        assert_eq!(
            having(|a| a.affinity() == Some(Affinity::AddressOctets)),
            ["ip_hash", "new_hash"]
        );
        assert_eq!(
            having(|a| a.affinity() == Some(Affinity::Key)),
            ["hash", "maglev", "bounded_load"]
        );
        let users = |o: OptionKey| o.users().map(Algorithm::name).collect::<Vec<_>>();
        for (option, by) in [
            (OptionKey::Consistent, "hash"),
            (OptionKey::Octets, "new_hash"),
            (OptionKey::TableSize, "maglev"),
            (OptionKey::BalanceFactor, "bounded_load"),
            (OptionKey::Window, "latency"),
            (OptionKey::Smoothing, "latency"),
            (OptionKey::HighLoad, "dynamic_wrr"),
            (OptionKey::LowLoad, "dynamic_wrr"),
            (OptionKey::BlackoutPeriod, "utilization_wrr"),
            (OptionKey::WeightExpirationPeriod, "utilization_wrr"),
            (OptionKey::ErrorUtilizationPenalty, "utilization_wrr"),
            (OptionKey::PoolSize, "prequal"),
            (OptionKey::Reuse, "prequal"),
            (OptionKey::Quantile, "prequal"),
            (OptionKey::ProbeRate, "prequal"),
            (OptionKey::ProbeMaxAge, "prequal"),
            (OptionKey::ProbeTimeout, "prequal"),
        ] {
            assert_eq!(users(option), [by], "{option}");
        }
        assert_eq!(users(OptionKey::Penalty), ["p2c_ewma", "latency"]);
        assert_eq!(
            users(OptionKey::SlowStart),
            having(Algorithm::supports_slow_start)
        );
    }

    #[test]
    fn every_option_has_a_user_and_rows_list_options_in_order() {
        for &o in OptionKey::ALL {
            assert!(o.users().next().is_some(), "{o} has no algorithm");
        }
        let rank = |o: &OptionKey| OptionKey::ALL.iter().position(|x| x == o);
        for &a in Algorithm::ALL {
            let ranks: Vec<_> = a.options().iter().map(rank).collect();
            assert!(ranks.is_sorted(), "{a}: {:?}", a.options());
        }
    }

    #[test]
    fn an_algorithm_reads_load_reports_exactly_when_it_has_a_model() {
        for &a in Algorithm::ALL {
            let model =
                crate::weights::model::Model::for_algorithm(a, &[1, 2], &Options::default());
            assert_eq!(model.is_some(), a.reads_load_reports(), "{a}");
            assert_eq!(
                a.reads_load_reports(),
                a.uses_weights() && a.weight_model().is_some()
            );
        }
    }
}
