//! The algorithms by their configuration names, and their options.

use std::fmt;
use std::str::FromStr;

use crate::algorithms;
use crate::backend::Nanos;
use crate::balancer::Balancer;

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
    /// `latency`: the penalty `p` in `l = base + p·(1/s − 1)`: seed 002 sets it to the timeout
    /// (4 s in its testbed, the default here); the configuration uses the upstream's
    /// `read_timeout` unless `penalty` is given.
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
        }
    }
}

/// The key a hash algorithm expects in [`PickCtx::affinity`].
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

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::RoundRobin => "round_robin",
            Algorithm::WeightedRoundRobin => "weighted_round_robin",
            Algorithm::Random => "random",
            Algorithm::ChainedRoundRobin => "chained_round_robin",
            Algorithm::LeastConn => "least_conn",
            Algorithm::Fair => "fair",
            Algorithm::RandomTwo => "random_two",
            Algorithm::IpHash => "ip_hash",
            Algorithm::DynamicWrr => "dynamic_wrr",
            Algorithm::Dwlc => "dwlc",
            Algorithm::CapacityWeighted => "capacity_weighted",
            Algorithm::UtilizationWrr => "utilization_wrr",
            Algorithm::NewHash => "new_hash",
            Algorithm::LeastTime => "least_time",
            Algorithm::P2cEwma => "p2c_ewma",
            Algorithm::Latency => "latency",
            Algorithm::Hash => "hash",
            Algorithm::Maglev => "maglev",
            Algorithm::BoundedLoad => "bounded_load",
        }
    }

    /// Whether the algorithm chooses by the request's affinity key.
    pub fn uses_affinity(self) -> bool {
        self.affinity().is_some()
    }

    /// What the algorithm hashes, if anything: the client address as octets, or the
    /// configured `hash_key` as text.
    pub fn affinity(self) -> Option<Affinity> {
        match self {
            Algorithm::IpHash | Algorithm::NewHash => Some(Affinity::AddressOctets),
            Algorithm::Hash | Algorithm::Maglev | Algorithm::BoundedLoad => Some(Affinity::Key),
            _ => None,
        }
    }

    /// Whether configured weights change what the algorithm does.
    pub fn uses_weights(self) -> bool {
        !matches!(self, Algorithm::RoundRobin | Algorithm::Latency)
    }

    /// Whether the algorithm balances by [`Backends::share`], so `slow_start` can ramp a
    /// backend's weight up (Envoy offers it for round robin and least request, for the same
    /// reason: the share is what the weight decides, not a hash mapping).
    pub fn supports_slow_start(self) -> bool {
        matches!(
            self,
            Algorithm::WeightedRoundRobin
                | Algorithm::Random
                | Algorithm::LeastConn
                | Algorithm::Fair
                | Algorithm::RandomTwo
                | Algorithm::DynamicWrr
                | Algorithm::Dwlc
                | Algorithm::CapacityWeighted
                | Algorithm::UtilizationWrr
                | Algorithm::LeastTime
                | Algorithm::P2cEwma
        )
    }

    /// A fresh instance with the given options. `seed` feeds the algorithms that draw random
    /// numbers, so two runs with the same seed make the same choices.
    pub fn build(self, options: &Options, seed: u64) -> Box<dyn Balancer> {
        match self {
            Algorithm::RoundRobin => Box::new(algorithms::RoundRobin::default()),
            Algorithm::WeightedRoundRobin => Box::new(algorithms::WeightedRoundRobin::default()),
            Algorithm::Random => Box::new(algorithms::Random::new(seed)),
            Algorithm::ChainedRoundRobin => Box::new(algorithms::ChainedRoundRobin::default()),
            Algorithm::LeastConn => Box::new(algorithms::LeastConn::default()),
            Algorithm::Fair => Box::new(algorithms::Fair::default()),
            Algorithm::RandomTwo => Box::new(algorithms::RandomTwo::new(seed)),
            Algorithm::IpHash => Box::new(algorithms::IpHash::default()),
            Algorithm::DynamicWrr => Box::new(algorithms::DynamicWrr::default()),
            Algorithm::Dwlc => Box::new(algorithms::Dwlc::default()),
            Algorithm::CapacityWeighted => Box::new(algorithms::CapacityWeighted::default()),
            // The same smooth WRR, weighted by A58's model (weights::utilization).
            Algorithm::UtilizationWrr => Box::new(algorithms::DynamicWrr::default()),
            Algorithm::NewHash => Box::new(algorithms::NewHash::new(options.octets)),
            Algorithm::LeastTime => Box::new(algorithms::LeastTime::default()),
            Algorithm::P2cEwma => Box::new(algorithms::P2cEwma::new(seed)),
            Algorithm::Latency => Box::new(algorithms::Latency::new(options, seed)),
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
