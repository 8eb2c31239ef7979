//! A lab scenario: the backends, the traffic and the algorithms of one experiment, read from a
//! TOML file (see `lab/scenarios/` and `docs/lab.md`).
//!
//! ```toml
//! description = "seed 002, CPU-bound requests under a sine wave"
//! seed = 7
//! repetitions = 1
//!
//! [[backend]]
//! name = "a"
//! workers = 2
//! speed = 0.96
//! antagonist = "0.3:20s:60s"
//!
//! [traffic]
//! pattern = "sine:40-100:30s"
//! duration = "60s"
//! cost = "lognormal:3.7:1"
//!
//! [[algorithm]]
//! name = "round_robin"
//!
//! [[algorithm]]
//! name = "nginx least_conn"
//! compare = "nginx"
//! algorithm = "least_conn"
//! ```
//!
//! Everything is checked when the file is read, before any process starts: an unknown key, a
//! pattern that does not parse or an algorithm nginx does not have is an error naming the
//! file and the key.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use crate::schedule::{Cost, Pattern, Spacing};

/// A scenario as written, checked.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Its name (default: the file's name without `.toml`).
    #[serde(default)]
    pub name: String,
    /// What it reproduces, one line (shown in the reports).
    #[serde(default)]
    pub description: String,
    /// Seed of the trace (and of the backends' fault draws).
    #[serde(default = "one_u64")]
    pub seed: u64,
    /// Runs of every algorithm; the results are their medians.
    #[serde(default = "one")]
    pub repetitions: u32,
    #[serde(default)]
    pub proxy: ProxySpec,
    #[serde(rename = "backend")]
    pub backends: Vec<BackendSpec>,
    pub traffic: TrafficSpec,
    #[serde(rename = "algorithm")]
    pub algorithms: Vec<AlgorithmSpec>,
    /// Knobs only the simulator has (`fulcrum sim`); a scenario with them is the simulator's.
    pub sim: Option<SimSpec>,
}

/// `[sim]`: what only a simulator can offer (see `docs/simulator.md`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimSpec {
    /// Balancer instances in front of the same backends, each with its own pool (a fleet
    /// behind ECMP or keepalived addresses); a client's requests all go to one. A list
    /// (`[1, 8]`) runs every contender at each, one row each.
    #[serde(default)]
    pub balancers: Counts,
    /// One-way delay between a balancer and a backend (default 0).
    pub network_delay: Option<String>,
    /// How old a load report is when a balancer reads it (default 0): the backend measured
    /// its trailing second this long before. A list (`["0s", "3s"]`) runs every contender at
    /// each, one row each.
    pub report_delay: Option<OneOrMany>,
    /// Requests measured; the traffic (a constant rate) lasts as long as they take, and
    /// `traffic.duration` is left out.
    pub requests: Option<u64>,
    /// Requests sent before the measured ones and not counted (a warm-up).
    #[serde(default)]
    pub warmup: u64,
    /// Loads λ (0 < λ < 1.5) to run every algorithm at, one row each: the rate is λ times the
    /// primaries' capacity (slots × speed over the mean cost); `traffic.pattern` is left out.
    #[serde(default)]
    pub offered_load: Vec<f64>,
    /// Outages, `NAME:FROM-UNTIL` (`"a:10s-20s"`): the backend is down (connections refused,
    /// those open dropped) from `FROM` until `UNTIL`, then serves again.
    #[serde(default)]
    pub outages: Vec<String>,
    /// Probing algorithms (`prequal`): the chance that a probe or its answer is lost (0 to 1,
    /// default 0); a lost probe never answers.
    pub probe_loss: Option<f64>,
    /// Probing algorithms: the work a probe costs the backend it reaches, a duration at speed
    /// 1 (default "20us"), taken from its capacity as a request's cost is.
    pub probe_cost: Option<String>,
}

/// A value, or a list of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn values(&self) -> Vec<&str> {
        match self {
            OneOrMany::One(v) => vec![v.as_str()],
            OneOrMany::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// A count, or a list of them (`[sim] balancers`): what TOML gives, checked when read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts(pub Vec<u32>);

impl Default for Counts {
    fn default() -> Counts {
        Counts(vec![1])
    }
}

impl<'de> Deserialize<'de> for Counts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Counts, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Counts;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a whole number such as 8, or a list of them such as [1, 2, 8, 32]")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Counts, E> {
                count(v).map(|n| Counts(vec![n]))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Counts, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(-1))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Counts, A::Error> {
                let mut counts = Vec::new();
                while let Some(v) = seq.next_element::<i64>()? {
                    counts.push(count(v)?);
                }
                Ok(Counts(counts))
            }
        }
        /// A count that fits; the check refuses 0 and the large by value.
        fn count<E: serde::de::Error>(v: i64) -> Result<u32, E> {
            u32::try_from(v).map_err(|_| {
                E::invalid_value(serde::de::Unexpected::Signed(v), &"a count, 1 or more")
            })
        }
        d.deserialize_any(Visit)
    }
}

/// The most backends a simulated scenario may have (the lab runs at most 64).
pub const SIM_MAX_BACKENDS: u32 = 100_000;
/// The most backends the lab starts.
pub const LAB_MAX_BACKENDS: u32 = 64;

/// One outage of `[sim] outages`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outage {
    pub backend: String,
    pub from: Duration,
    pub until: Duration,
}

impl std::str::FromStr for Outage {
    type Err = String;

    fn from_str(s: &str) -> Result<Outage, String> {
        let form = || format!("outage {s:?}: write NAME:FROM-UNTIL, such as \"a:10s-20s\"");
        let (backend, span) = s.rsplit_once(':').ok_or_else(form)?;
        let (from, until) = span.split_once('-').ok_or_else(form)?;
        let parse = |v: &str| humantime::parse_duration(v).map_err(|_| form());
        let (from, until) = (parse(from)?, parse(until)?);
        if backend.is_empty() || until <= from {
            return Err(form());
        }
        Ok(Outage {
            backend: backend.to_owned(),
            from,
            until,
        })
    }
}

/// The balancer's own settings (the same for every algorithm).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxySpec {
    /// Data-plane threads of fulcrum (nginx runs one process, HAProxy this many threads).
    #[serde(default = "two")]
    pub workers: u32,
}

impl Default for ProxySpec {
    fn default() -> ProxySpec {
        ProxySpec { workers: two() }
    }
}

/// One emulated backend (or `count` alike).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendSpec {
    pub name: String,
    /// Backends alike, named `name-1`, `name-2`, … (1: just `name`).
    #[serde(default = "one")]
    pub count: u32,
    /// Its weight in the balancer's configuration.
    #[serde(default = "one")]
    pub weight: u32,
    #[serde(default = "four")]
    pub workers: u32,
    #[serde(default = "one_f64")]
    pub speed: f64,
    /// `cpu`, `io`, `mixed` or `burn` (`fulcrum lab backend --mode`).
    #[serde(default = "cpu")]
    pub mode: String,
    #[serde(default = "thousand")]
    pub max_queue: usize,
    /// `FRACTION:FOR:EVERY[:OFFSET]` (`fulcrum lab backend --antagonist`).
    pub antagonist: Option<String>,
    /// The cost of a request without `X-Lab-Cost` (the traffic always sets one).
    pub cost: Option<String>,
    pub fail_rate: Option<f64>,
    /// The status of a `fail_rate` failure (default 500).
    pub fail_status: Option<u16>,
    /// A request not done this long after it arrived is answered 503, its work going on
    /// ([`crate::backend::Faults::deadline`]).
    pub deadline: Option<String>,
    pub stall_after: Option<u64>,
    pub die_after: Option<u64>,
    /// Used only when no other backend can be.
    #[serde(default)]
    pub backup: bool,
    /// Requests the balancer sends it at once at most (fulcrum's and nginx's `max_conns`,
    /// HAProxy's `maxconn`); 0: no limit. With fulcrum's `queue` (an algorithm option), the
    /// others wait in the balancer.
    #[serde(default)]
    pub max_conns: u32,
    /// Its memory (`"4GB"`): `mem` in `/load` is then the memory held over it
    /// ([`crate::backend::footprint::Footprint`]); without it, the queue's fill.
    pub mem: Option<String>,
    /// Memory held with no request in flight (`"1GB"`; default 0; needs `mem`).
    pub mem_base: Option<String>,
    /// Memory each request in flight holds (`"32MB"`; default 0; needs `mem`).
    pub mem_per_request: Option<String>,
    /// Its link (`"942Mbit"`): `net` in `/load` then adds the answers' bytes over it.
    pub net: Option<String>,
    /// Bytes an answered request moves over the link (`"64KB"`; default 0; needs `net`).
    pub net_per_request: Option<String>,
}

impl BackendSpec {
    /// Its memory and network capacities and a request's footprint on them, as the lab
    /// backend and the simulator run them.
    pub fn footprint(&self) -> Result<crate::backend::footprint::Footprint, String> {
        use crate::backend::footprint::{parse_bits, parse_bytes};
        let bytes = |key: &str, v: &Option<String>| -> Result<Option<f64>, String> {
            v.as_deref()
                .map(|v| parse_bytes(v).map_err(|e| format!("{key} = {e}")))
                .transpose()
        };
        let mem = bytes("mem", &self.mem)?;
        if mem == Some(0.0) {
            return Err(format!(
                "mem = {:?}: write the host's memory, above 0, such as \"4GB\"",
                self.mem.as_deref().unwrap_or_default()
            ));
        }
        let net = self
            .net
            .as_deref()
            .map(|v| parse_bits(v).map_err(|e| format!("net = {e}")))
            .transpose()?;
        let mem_base = bytes("mem_base", &self.mem_base)?;
        let mem_per_request = bytes("mem_per_request", &self.mem_per_request)?;
        let net_per_request = bytes("net_per_request", &self.net_per_request)?;
        for (key, given, needs, of) in [
            ("mem_base", mem_base, "mem", mem),
            ("mem_per_request", mem_per_request, "mem", mem),
            ("net_per_request", net_per_request, "net", net),
        ] {
            if given.is_some() && of.is_none() {
                return Err(format!(
                    "{key} needs {needs}: give the capacity it is a share of (such as {needs} = {})",
                    if needs == "mem" {
                        "\"4GB\""
                    } else {
                        "\"1Gbit\""
                    }
                ));
            }
        }
        if let (Some(m), Some(b)) = (mem, mem_base)
            && b > m
        {
            return Err(format!(
                "mem_base = {:?} is more than mem = {:?}: the memory held at rest fits in the memory",
                self.mem_base.as_deref().unwrap_or_default(),
                self.mem.as_deref().unwrap_or_default()
            ));
        }
        Ok(crate::backend::footprint::Footprint {
            mem,
            mem_base: mem_base.unwrap_or(0.0),
            mem_per_request: mem_per_request.unwrap_or(0.0),
            net,
            net_per_request: net_per_request.unwrap_or(0.0),
        })
    }

    /// Its faults, as the lab backend and the simulator run them.
    pub fn faults(&self) -> Result<crate::backend::Faults, String> {
        let deadline = match &self.deadline {
            None => None,
            Some(d) => match humantime::parse_duration(d) {
                Ok(d) if d >= Duration::from_millis(10) => Some(d),
                _ => {
                    return Err(format!(
                        "deadline = {d:?}: write a duration of at least 10ms, such as \"1s\""
                    ));
                }
            },
        };
        Ok(crate::backend::Faults {
            fail_rate: self.fail_rate.unwrap_or(0.0),
            fail_status: self.fail_status.unwrap_or(500),
            deadline,
            stall_after: self.stall_after,
            die_after: self.die_after,
        })
    }
}

/// The traffic: open loop (`pattern`) or closed loop (`concurrency`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficSpec {
    /// `constant:RPS`, `sine:MIN-MAX:PERIOD`, `steps:START-END:STEP:HOLD`, `burst:N:GAP:REPEAT`.
    pub pattern: Option<String>,
    /// Closed loop: a number of users, or `steps:START-END:STEP:HOLD`.
    pub concurrency: Option<String>,
    /// `poisson` or `even`.
    #[serde(default = "poisson")]
    pub spacing: String,
    /// How long the traffic lasts (left out when `[sim] requests` says how many).
    #[serde(default)]
    pub duration: String,
    #[serde(default = "zero_cost")]
    pub cost: String,
    /// A request not answered this long after its intended time is a timeout; also the
    /// balancer's read timeout towards the backends (seed 002's 4 s).
    #[serde(default = "four_seconds")]
    pub timeout: String,
    #[serde(default = "one")]
    pub clients: u32,
    #[serde(default = "slash")]
    pub path: String,
}

/// One contender.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlgorithmSpec {
    /// Its label in the results (unique).
    pub name: String,
    /// The algorithm (default: `name`): one of fulcrum's, or for `compare`, the same name of
    /// the algorithm nginx or HAProxy has.
    pub algorithm: Option<String>,
    /// `nginx` or `haproxy`: run that, configured the same way, instead of fulcrum.
    pub compare: Option<String>,
    /// More keys of fulcrum's `[[upstream]]` (e.g. `poll_interval = "1s"`, `window = 20`).
    #[serde(default)]
    pub options: toml::Table,
    /// Balancer processes, each with the same configuration on its own port over the same
    /// backends; the load generator spreads requests over them round-robin (a fleet). The
    /// lab's only: the simulator's fleets are `[sim] balancers`.
    #[serde(default = "one")]
    pub instances: u32,
    /// How a fleet shares the requests: `round_robin` (default: arrival k to instance k mod n)
    /// or `client` (client c to instance c mod n, as ECMP). Only with `instances` above 1.
    pub spread: Option<String>,
    /// Each fulcrum instance of a fleet its own `seed` (the options' seed, default 0, plus the
    /// instance's index from 0) instead of the same configuration's same seed. Only with
    /// `instances` above 1.
    #[serde(default)]
    pub distinct_seeds: bool,
}

/// The most balancer processes one lab contender starts.
pub const LAB_MAX_INSTANCES: u32 = 16;

fn one() -> u32 {
    1
}
fn one_u64() -> u64 {
    1
}
fn two() -> u32 {
    2
}
fn four() -> u32 {
    4
}
fn one_f64() -> f64 {
    1.0
}
fn thousand() -> usize {
    1000
}
fn cpu() -> String {
    "cpu".into()
}
fn poisson() -> String {
    "poisson".into()
}
fn zero_cost() -> String {
    "const:0".into()
}
fn four_seconds() -> String {
    "4s".into()
}
fn slash() -> String {
    "/".into()
}

/// Which balancer serves a contender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balancer {
    Fulcrum(balance::Algorithm),
    Nginx(NginxAlgorithm),
    Haproxy(HaproxyAlgorithm),
}

/// nginx's algorithms the lab can configure (`upstream` directives).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NginxAlgorithm {
    /// The default: smooth weighted round robin.
    WeightedRoundRobin,
    LeastConn,
    IpHash,
    /// `hash $remote_addr consistent`.
    Hash,
    Random,
    /// `random two least_conn`.
    RandomTwo,
}

/// HAProxy's `balance` algorithms the lab can configure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HaproxyAlgorithm {
    RoundRobin,
    LeastConn,
    /// `balance source`.
    Source,
    /// `balance random(2)`.
    RandomTwo,
}

impl NginxAlgorithm {
    fn from_name(name: &str) -> Option<NginxAlgorithm> {
        Some(match name {
            "weighted_round_robin" | "round_robin" => NginxAlgorithm::WeightedRoundRobin,
            "least_conn" => NginxAlgorithm::LeastConn,
            "ip_hash" => NginxAlgorithm::IpHash,
            "hash" => NginxAlgorithm::Hash,
            "random" => NginxAlgorithm::Random,
            "random_two" => NginxAlgorithm::RandomTwo,
            _ => return None,
        })
    }
}

impl HaproxyAlgorithm {
    fn from_name(name: &str) -> Option<HaproxyAlgorithm> {
        Some(match name {
            "weighted_round_robin" | "round_robin" => HaproxyAlgorithm::RoundRobin,
            "least_conn" => HaproxyAlgorithm::LeastConn,
            "source" | "ip_hash" => HaproxyAlgorithm::Source,
            "random_two" => HaproxyAlgorithm::RandomTwo,
            _ => return None,
        })
    }
}

/// The traffic, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Traffic {
    pub load: Load,
    pub spacing: Spacing,
    pub duration: Duration,
    pub cost: Cost,
    pub timeout: Duration,
    pub clients: u32,
    pub path: String,
}

/// Open or closed loop.
#[derive(Debug, Clone, PartialEq)]
pub enum Load {
    Open(Pattern),
    /// Virtual users (a number, or `steps:…`).
    Closed(crate::load::closed::Users),
}

/// One emulated backend, as started (after `count` is expanded).
#[derive(Debug, Clone)]
pub struct BackendPlan {
    pub name: String,
    pub spec: BackendSpec,
}

impl Scenario {
    /// Reads and checks the scenario in `path`.
    pub fn load(path: &Path) -> Result<Scenario, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the scenario {}: {e}", path.display()))?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Scenario::parse(&text, &stem).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses and checks a scenario; `default_name` names it when it does not.
    pub fn parse(text: &str, default_name: &str) -> Result<Scenario, String> {
        let mut scenario: Scenario = toml::from_str(text).map_err(|e| e.to_string())?;
        if scenario.name.is_empty() {
            scenario.name = default_name.to_owned();
        }
        scenario.check()?;
        Ok(scenario)
    }

    fn check(&self) -> Result<(), String> {
        if self.backends.is_empty() {
            return Err("no [[backend]]: a scenario needs at least one".into());
        }
        if self.algorithms.is_empty() {
            return Err("no [[algorithm]]: a scenario compares at least one".into());
        }
        if !(1..=100).contains(&self.repetitions) {
            return Err(format!(
                "repetitions = {}: write 1 to 100",
                self.repetitions
            ));
        }
        if !(1..=64).contains(&self.proxy.workers) {
            return Err(format!(
                "proxy.workers = {}: write 1 to 64",
                self.proxy.workers
            ));
        }
        let mut names = std::collections::HashSet::new();
        for b in &self.backends {
            let at = format!("backend {:?}", b.name);
            if b.name.is_empty()
                || !b
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(format!(
                    "{at}: a name is letters, digits, '-' and '_' (it goes into headers and file names)"
                ));
            }
            let most = if self.sim.is_some() {
                SIM_MAX_BACKENDS
            } else {
                LAB_MAX_BACKENDS
            };
            if !(1..=most).contains(&b.count) {
                return Err(format!(
                    "{at}: count = {}: write 1 to {most} ({LAB_MAX_BACKENDS} in the lab, {SIM_MAX_BACKENDS} with a [sim] section)",
                    b.count
                ));
            }
            if !(1..=1_000_000).contains(&b.weight) {
                return Err(format!("{at}: weight = {}: write 1 to 1000000", b.weight));
            }
            if !(1..=100_000).contains(&b.workers) {
                return Err(format!("{at}: workers = {}: write 1 to 100000", b.workers));
            }
            if !(b.speed > 0.0 && b.speed <= 1000.0) {
                return Err(format!(
                    "{at}: speed = {}: write a number above 0, at most 1000",
                    b.speed
                ));
            }
            if !["cpu", "io", "mixed", "burn"].contains(&b.mode.as_str()) {
                return Err(format!(
                    "{at}: mode = {:?}: write cpu, io, mixed or burn",
                    b.mode
                ));
            }
            if b.die_after == Some(0) {
                return Err(format!(
                    "{at}: die_after = 0: write 1 or more (it dies on that request)"
                ));
            }
            if let Some(p) = b.fail_rate
                && !(0.0..=1.0).contains(&p)
            {
                return Err(format!(
                    "{at}: fail_rate = {p}: write a probability, 0 to 1"
                ));
            }
            if let Some(status) = b.fail_status
                && !(100..=599).contains(&status)
            {
                return Err(format!(
                    "{at}: fail_status = {status}: write an HTTP status, 100 to 599 (such as 503)"
                ));
            }
            b.faults().map_err(|e| format!("{at}: {e}"))?;
            b.footprint().map_err(|e| format!("{at}: {e}"))?;
            if let Some(c) = &b.cost {
                Cost::from_str(c).map_err(|e| format!("{at}: cost: {e}"))?;
            }
            if let Some(a) = &b.antagonist {
                crate::backend::Antagonist::from_str(a)
                    .map_err(|e| format!("{at}: antagonist: {e}"))?;
            }
            for plan in self.expand(b) {
                if !names.insert(plan.name.clone()) {
                    return Err(format!("two backends are called {:?}", plan.name));
                }
            }
        }
        if self.backends.iter().all(|b| b.backup) {
            return Err("every backend is a backup: at least one must not be".into());
        }
        let total: u64 = self.backends.iter().map(|b| u64::from(b.count)).sum();
        if total > u64::from(SIM_MAX_BACKENDS) {
            return Err(format!(
                "{total} backends in all: at most {SIM_MAX_BACKENDS}"
            ));
        }
        if let Some(sim) = &self.sim {
            self.check_sim(sim, &names)?;
        }
        self.traffic()?;
        let mut labels = std::collections::HashSet::new();
        for a in &self.algorithms {
            if !labels.insert(a.name.as_str()) {
                return Err(format!("two algorithms are labelled {:?}", a.name));
            }
            if a.name.is_empty() || a.name.contains([',', '"']) || a.name.contains(char::is_control)
            {
                return Err(format!(
                    "algorithm {:?}: a label is not empty and has no commas, quotes or control characters (it is a CSV cell)",
                    a.name
                ));
            }
            let balancer = a.balancer()?;
            if !(1..=LAB_MAX_INSTANCES).contains(&a.instances) {
                return Err(format!(
                    "algorithm {:?}: instances = {}: write 1 to {LAB_MAX_INSTANCES}",
                    a.name, a.instances
                ));
            }
            if let Some(spread) = &a.spread {
                if a.instances < 2 {
                    return Err(format!(
                        "algorithm {:?}: spread says how a fleet shares the requests: set instances above 1, or leave spread out",
                        a.name
                    ));
                }
                crate::load::Spread::from_str(spread)
                    .map_err(|e| format!("algorithm {:?}: spread = {e}", a.name))?;
            }
            if a.distinct_seeds && (a.instances < 2 || !matches!(balancer, Balancer::Fulcrum(_))) {
                return Err(format!(
                    "algorithm {:?}: distinct_seeds seeds each fulcrum instance of a fleet apart: set instances above 1 on a fulcrum contender, or leave it out",
                    a.name
                ));
            }
            if a.instances > 1 && self.sim.is_some() {
                return Err(format!(
                    "algorithm {:?}: instances is the lab's; the simulator's fleets are [sim] balancers",
                    a.name
                ));
            }
            if matches!(
                balancer,
                Balancer::Nginx(
                    NginxAlgorithm::IpHash
                        | NginxAlgorithm::Hash
                        | NginxAlgorithm::Random
                        | NginxAlgorithm::RandomTwo
                )
            ) && self.backends.iter().any(|b| b.backup)
            {
                return Err(format!(
                    "algorithm {:?}: nginx refuses backup servers with hash, ip_hash and random; drop `backup` or this contender",
                    a.name
                ));
            }
            if !a.options.is_empty() && !matches!(balancer, Balancer::Fulcrum(_)) {
                return Err(format!(
                    "algorithm {:?}: options are fulcrum's [[upstream]] keys; {} is configured the same way as fulcrum without them",
                    a.name,
                    a.compare.as_deref().unwrap_or_default()
                ));
            }
            for key in a.options.keys() {
                if ["name", "algorithm", "backend", "read_timeout"].contains(&key.as_str()) {
                    return Err(format!(
                        "algorithm {:?}: options.{key} is set by the lab itself",
                        a.name
                    ));
                }
            }
        }
        Ok(())
    }

    /// The backends to start, `count` expanded.
    fn check_sim(
        &self,
        sim: &SimSpec,
        names: &std::collections::HashSet<String>,
    ) -> Result<(), String> {
        let fleets = &sim.balancers.0;
        if fleets.is_empty() || fleets.len() > 16 {
            return Err("sim.balancers: write one count, or a list of 1 to 16".into());
        }
        for (i, &n) in fleets.iter().enumerate() {
            if !(1..=1024).contains(&n) {
                return Err(format!("sim.balancers = {n}: write 1 to 1024"));
            }
            if fleets[..i].contains(&n) {
                return Err(format!(
                    "sim.balancers: {n} is listed twice (each count is a row)"
                ));
            }
        }
        let delays = sim.report_delay.as_ref().map(OneOrMany::values);
        if delays
            .as_ref()
            .is_some_and(|d| d.is_empty() || d.len() > 16)
        {
            return Err("sim.report_delay: write one delay, or a list of 1 to 16".into());
        }
        let network = sim.network_delay.as_deref().map(|v| ("network_delay", v));
        let reports = delays.into_iter().flatten().map(|v| ("report_delay", v));
        for (key, v) in network.into_iter().chain(reports) {
            {
                match humantime::parse_duration(v) {
                    Ok(d) if d <= Duration::from_secs(3600) => {}
                    _ => {
                        return Err(format!(
                            "sim.{key} = {v:?}: write a duration such as \"2s\", at most an hour"
                        ));
                    }
                }
            }
        }
        if let Some(n) = sim.requests
            && !(1..=1_000_000_000).contains(&n)
        {
            return Err(format!("sim.requests = {n}: write 1 to 1000000000"));
        }
        if sim.warmup > 1_000_000_000 {
            return Err(format!(
                "sim.warmup = {}: write at most 1000000000",
                sim.warmup
            ));
        }
        if sim.warmup > 0 && sim.requests.is_none() {
            return Err(
                "sim.warmup needs sim.requests (the warm-up is counted in requests)".into(),
            );
        }
        for &l in &sim.offered_load {
            if !(l > 0.0 && l < 1.5) {
                return Err(format!(
                    "sim.offered_load: {l} is not a load: write numbers above 0 and below 1.5"
                ));
            }
        }
        if let Some(l) = sim.probe_loss
            && !(0.0..=1.0).contains(&l)
        {
            return Err(format!(
                "sim.probe_loss = {l}: write a probability from 0 to 1"
            ));
        }
        if let Some(c) = &sim.probe_cost
            && !humantime::parse_duration(c).is_ok_and(|d| d <= Duration::from_secs(1))
        {
            return Err(format!(
                "sim.probe_cost = {c:?}: write a duration such as \"20us\", at most a second"
            ));
        }
        for o in &sim.outages {
            let outage = Outage::from_str(o).map_err(|e| format!("sim.outages: {e}"))?;
            if !names.contains(&outage.backend) {
                return Err(format!(
                    "sim.outages: no backend is called {:?}",
                    outage.backend
                ));
            }
        }
        Ok(())
    }

    /// The primaries' capacity in requests per second: slots × speed over the traffic's mean
    /// cost (the rate λ = 1 stands for in `[sim] offered_load`).
    pub fn capacity_rps(&self) -> Result<f64, String> {
        let cost = Cost::from_str(&self.traffic.cost).map_err(|e| format!("traffic.cost: {e}"))?;
        let slots: f64 = self
            .backends
            .iter()
            .filter(|b| !b.backup)
            .map(|b| f64::from(b.count) * f64::from(b.workers) * b.speed)
            .sum();
        if cost.mean() <= 0.0 {
            return Err(
                "sim.offered_load needs requests that cost something: traffic.cost has a mean of 0"
                    .into(),
            );
        }
        Ok(slots * 1000.0 / cost.mean())
    }

    pub fn backend_plans(&self) -> Vec<BackendPlan> {
        self.backends.iter().flat_map(|b| self.expand(b)).collect()
    }

    fn expand(&self, b: &BackendSpec) -> Vec<BackendPlan> {
        if b.count == 1 {
            return vec![BackendPlan {
                name: b.name.clone(),
                spec: b.clone(),
            }];
        }
        (1..=b.count)
            .map(|i| BackendPlan {
                name: format!("{}-{i}", b.name),
                spec: b.clone(),
            })
            .collect()
    }

    /// The traffic, parsed.
    pub fn traffic(&self) -> Result<Traffic, String> {
        let first = self
            .sim
            .as_ref()
            .and_then(|s| s.offered_load.first().copied());
        self.traffic_at(first)
    }

    /// The traffic; at load `λ` when `[sim] offered_load` gives one (the rate is then λ times
    /// [`Scenario::capacity_rps`]).
    pub fn traffic_at(&self, offered_load: Option<f64>) -> Result<Traffic, String> {
        let t = &self.traffic;
        let sim = self.sim.clone().unwrap_or_default();
        let offered = match (offered_load, sim.offered_load.is_empty()) {
            (Some(l), false) => Some(l),
            _ => None,
        };
        if offered.is_some() && (t.pattern.is_some() || t.concurrency.is_some()) {
            return Err(
                "traffic: with sim.offered_load the rate follows from the load; leave pattern and concurrency out".into(),
            );
        }
        let load = match (&t.pattern, &t.concurrency) {
            _ if offered.is_some() => Load::Open(Pattern::Constant {
                rps: offered.unwrap_or(1.0) * self.capacity_rps()?,
            }),
            (Some(p), None) => {
                Load::Open(Pattern::from_str(p).map_err(|e| format!("traffic.pattern: {e}"))?)
            }
            (None, Some(c)) => Load::Closed(
                crate::load::closed::Users::from_str(c)
                    .map_err(|e| format!("traffic.concurrency: {e}"))?,
            ),
            (Some(_), Some(_)) => {
                return Err(
                    "traffic: pattern (open loop) and concurrency (closed loop) exclude each other: keep one".into(),
                );
            }
            (None, None) => {
                return Err(
                    "traffic: write pattern = \"…\" (open loop) or concurrency = … (closed loop)"
                        .into(),
                );
            }
        };
        let spacing = match t.spacing.as_str() {
            "poisson" => Spacing::Poisson,
            "even" => Spacing::Even,
            other => {
                return Err(format!(
                    "traffic.spacing = {other:?}: write poisson or even"
                ));
            }
        };
        let duration = |v: &str, key: &str| -> Result<Duration, String> {
            match humantime::parse_duration(v) {
                Ok(d) if !d.is_zero() && d <= Duration::from_secs(3600) => Ok(d),
                _ => Err(format!(
                    "traffic.{key} = {v:?}: write a duration such as \"60s\", above 0 and at most an hour"
                )),
            }
        };
        if t.path.is_empty() || !t.path.starts_with('/') || t.path.contains(char::is_whitespace) {
            return Err(format!(
                "traffic.path = {:?}: write a path such as \"/\"",
                t.path
            ));
        }
        if !(1..=1_000_000).contains(&t.clients) {
            return Err(format!(
                "traffic.clients = {}: write 1 to 1000000",
                t.clients
            ));
        }
        let length = match (sim.requests, t.duration.is_empty()) {
            (Some(n), true) => {
                let Load::Open(Pattern::Constant { rps }) = load else {
                    return Err(
                        "sim.requests needs a constant rate (traffic.pattern = \"constant:RPS\" or sim.offered_load)".into(),
                    );
                };
                Duration::from_secs_f64((n + sim.warmup) as f64 / rps)
            }
            (Some(_), false) => {
                return Err(
                    "traffic.duration and sim.requests exclude each other: keep one".into(),
                );
            }
            (None, true) => return Err("traffic.duration: write how long the traffic lasts".into()),
            (None, false) => duration(&t.duration, "duration")?,
        };
        let least_hold = Duration::from_millis(100);
        let hold = match &load {
            Load::Open(Pattern::Steps { hold, .. }) => Some(*hold),
            Load::Closed(crate::load::closed::Users::Steps { hold, .. }) => Some(*hold),
            _ => None,
        };
        if hold.is_some_and(|h| h < least_hold) {
            return Err("traffic: a step's HOLD is at least 100ms".into());
        }
        if let Load::Open(pattern) = &load {
            let peak = match *pattern {
                Pattern::Constant { rps } => rps,
                Pattern::Sine { max, .. } => max,
                Pattern::Steps { start, end, .. } => start.max(end),
                Pattern::Burst { n, repeat, .. } => f64::from(n) / repeat.as_secs_f64(),
            };
            // Poisson arrivals scatter around the rate: keep a tenth in hand.
            let most = peak * length.as_secs_f64() * 1.1 + 1.0;
            // The simulator reads a trace as it goes: no bound but its own.
            if self.sim.is_none() && most > crate::schedule::MAX_ARRIVALS as f64 {
                return Err(format!(
                    "traffic: up to {most:.0} requests at this pattern and duration, more than the {} a trace holds; shorten the duration or lower the rate",
                    crate::schedule::MAX_ARRIVALS
                ));
            }
        }
        Ok(Traffic {
            load,
            spacing,
            duration: length,
            cost: Cost::from_str(&t.cost).map_err(|e| format!("traffic.cost: {e}"))?,
            timeout: duration(&t.timeout, "timeout")?,
            clients: t.clients,
            path: t.path.clone(),
        })
    }
}

impl AlgorithmSpec {
    /// How its fleet shares the requests (checked when read).
    pub fn spread(&self) -> crate::load::Spread {
        self.spread
            .as_deref()
            .and_then(|s| s.parse().ok())
            .unwrap_or_default()
    }

    /// Which balancer, with which algorithm, serves this contender.
    pub fn balancer(&self) -> Result<Balancer, String> {
        let name = self.algorithm.as_deref().unwrap_or(&self.name);
        let at = format!("algorithm {:?}", self.name);
        match self.compare.as_deref() {
            None => balance::Algorithm::from_str(name)
                .map(Balancer::Fulcrum)
                .map_err(|e| format!("{at}: {e}")),
            Some("nginx") => NginxAlgorithm::from_name(name)
                .map(Balancer::Nginx)
                .ok_or_else(|| {
                    format!(
                        "{at}: nginx has no {name:?} the lab can configure: write weighted_round_robin, least_conn, ip_hash, hash, random or random_two"
                    )
                }),
            Some("haproxy") => HaproxyAlgorithm::from_name(name)
                .map(Balancer::Haproxy)
                .ok_or_else(|| {
                    format!(
                        "{at}: HAProxy has no {name:?} the lab can configure: write round_robin, least_conn, source or random_two"
                    )
                }),
            Some(other) => Err(format!(
                "{at}: compare = {other:?}: write \"nginx\" or \"haproxy\" (or leave it out for fulcrum)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
        seed = 3
        [[backend]]
        name = "a"
        count = 2
        speed = 0.5
        [[backend]]
        name = "b"
        [traffic]
        pattern = "constant:10"
        duration = "2s"
        [[algorithm]]
        name = "round_robin"
        [[algorithm]]
        name = "nginx lc"
        compare = "nginx"
        algorithm = "least_conn"
        [[algorithm]]
        name = "fast latency"
        algorithm = "latency"
        options = { window = 20 }
    "#;

    #[test]
    fn a_scenario_reads_with_its_defaults() {
        let s = Scenario::parse(GOOD, "x").unwrap();
        assert_eq!(s.name, "x");
        assert_eq!(s.repetitions, 1);
        let names: Vec<String> = s.backend_plans().into_iter().map(|b| b.name).collect();
        assert_eq!(names, ["a-1", "a-2", "b"]);
        let t = s.traffic().unwrap();
        assert_eq!(t.timeout, Duration::from_secs(4));
        assert_eq!(t.load, Load::Open(Pattern::Constant { rps: 10.0 }));
        assert_eq!(
            s.algorithms[1].balancer().unwrap(),
            Balancer::Nginx(NginxAlgorithm::LeastConn)
        );
        assert_eq!(
            s.algorithms[2].balancer().unwrap(),
            Balancer::Fulcrum(balance::Algorithm::Latency)
        );
    }

    #[test]
    fn memory_and_network_capacities_read_with_their_footprint() {
        let text = GOOD.replacen(
            "speed = 0.5",
            "speed = 0.5\nmem = \"4GB\"\nmem_base = \"1GB\"\nmem_per_request = \"32MB\"\nnet = \"942Mbit\"\nnet_per_request = \"64KB\"",
            1,
        );
        let s = Scenario::parse(&text, "x").unwrap();
        let f = s.backends[0].footprint().unwrap();
        assert_eq!(
            f,
            crate::backend::footprint::Footprint {
                mem: Some(4e9),
                mem_base: 1e9,
                mem_per_request: 32e6,
                net: Some(942e6),
                net_per_request: 64e3,
            }
        );
        // None given: none modelled (today's /load).
        assert!(!s.backends[1].footprint().unwrap().is_set());
    }

    #[test]
    fn mistakes_are_named() {
        let bad = |from: &str, to: &str, says: &str| {
            let text = GOOD.replacen(from, to, 1);
            assert_ne!(text, GOOD, "{from} is not in the scenario");
            let e = Scenario::parse(&text, "x").unwrap_err();
            assert!(e.contains(says), "{to}: {e}");
        };
        bad("speed = 0.5", "sped = 0.5", "unknown field `sped`");
        bad(
            "speed = 0.5",
            "speed = 0.5\ndeadline = \"5ms\"",
            "deadline = \"5ms\": write a duration of at least 10ms",
        );
        bad(
            "speed = 0.5",
            "speed = 0.5\nfail_status = 700",
            "fail_status = 700: write an HTTP status",
        );
        bad("constant:10", "constant:ten", "traffic.pattern");
        bad("\"least_conn\"", "\"maglev\"", "nginx has no \"maglev\"");
        bad(
            "name = \"round_robin\"",
            "name = \"round_robbin\"",
            "round_robbin",
        );
        bad("duration = \"2s\"", "duration = \"2\"", "traffic.duration");
        bad(
            "name = \"b\"",
            "name = \"a-1\"",
            "two backends are called \"a-1\"",
        );
        bad(
            "count = 2",
            "count = 2\nmode = \"gpu\"",
            "write cpu, io, mixed or burn",
        );
        bad(
            "options = { window = 20 }",
            "options = { read_timeout = \"1s\" }",
            "set by the lab",
        );
        // Issue 30: memory and network capacities.
        let mem = |extra: &str| format!("speed = 0.5\n{extra}");
        bad(
            "speed = 0.5",
            &mem("mem = \"4Gb\""),
            "backend \"a\": mem = \"4Gb\": write a size such as \"4GB\"",
        );
        bad(
            "speed = 0.5",
            &mem("mem = \"0GB\""),
            "backend \"a\": mem = \"0GB\": write the host's memory",
        );
        bad(
            "speed = 0.5",
            &mem("net = \"942Mbps\""),
            "backend \"a\": net = \"942Mbps\": write a link's rate such as \"942Mbit\"",
        );
        bad(
            "speed = 0.5",
            &mem("mem_per_request = \"32MB\""),
            "backend \"a\": mem_per_request needs mem: give the capacity",
        );
        bad(
            "speed = 0.5",
            &mem("net = \"1Gbit\"\nnet_per_request = \"lots\""),
            "backend \"a\": net_per_request = \"lots\": write a size",
        );
        bad(
            "speed = 0.5",
            &mem("mem = \"4GB\"\nmem_base = \"5GB\""),
            "mem_base = \"5GB\" is more than mem = \"4GB\"",
        );
        bad("speed = 0.5", &mem("mem = 4"), "invalid type: integer `4`");
        bad(
            "pattern = \"constant:10\"",
            "pattern = \"constant:10\"\nconcurrency = \"4\"",
            "exclude each other",
        );
        bad(
            "name = \"round_robin\"",
            "name = \"round_robin\"\ninstances = 0",
            "instances = 0: write 1 to 16",
        );
        bad(
            "name = \"round_robin\"",
            "name = \"round_robin\"\ninstances = 2\nspread = \"ecmp\"",
            "spread = \"ecmp\": write \"round_robin\" or \"client\"",
        );
        bad(
            "name = \"round_robin\"",
            "name = \"round_robin\"\nspread = \"client\"",
            "set instances above 1",
        );
        bad(
            "name = \"round_robin\"",
            "name = \"round_robin\"\ndistinct_seeds = true",
            "distinct_seeds seeds each fulcrum instance",
        );
        bad(
            "name = \"round_robin\"",
            "name = \"round_robin\"\ninstances = 3\n[sim]\nbalancers = 2",
            "the simulator's fleets are [sim] balancers",
        );
    }
}
