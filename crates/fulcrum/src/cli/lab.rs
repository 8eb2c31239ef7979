//! `fulcrum lab …`: the lab's subcommands — an emulated backend, the load generator, a
//! scenario's run and seed 000's hash-spread experiment — and their arguments.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;

use super::values::{
    parse_cost, parse_interval, parse_mem, parse_probability, parse_size, parse_spacing,
    parse_speed, parse_target,
};

#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Run one emulated backend until SIGTERM, SIGINT or SIGQUIT (or --die-after): it answers
    /// every request with its name (and `X-Backend`) after the request's cost
    /// (`X-Lab-Cost: <ms>`, or `?delay_ms=N`). With --workers it emulates a server of limited
    /// capacity (modes, an antagonist, faults, a cost distribution; see docs/lab.md) and serves
    /// its utilization at GET /load in the agent's format.
    Backend(BackendArgs),
    /// Load against a URL. Open loop (--pattern, the default way): requests leave on schedule
    /// whether or not earlier ones returned, and latency counts from the intended send time
    /// (no coordinated omission). Closed loop (--concurrency), as siege, ab and JMeter: virtual
    /// users each send their next request when the previous one is answered, and latency
    /// counts from the actual send (which hides stalls).
    Load(LoadArgs),
    /// Run a scenario (see lab/scenarios/ and docs/lab.md): every algorithm it names on the same
    /// seeded trace, each behind fresh emulated backends; writes DIR/results.csv,
    /// DIR/results.md and DIR/report.html, and stops every process it started, even when
    /// interrupted.
    Run(RunArgs),
    /// Seed 000's hash-spread experiment (its Figures 20–21): client addresses through every
    /// algorithm that hashes the client, clients per server and how even that is — for clients
    /// drawn uniformly over IPv4, and from a few /24 prefixes.
    HashDistribution(HashDistributionArgs),
}

/// The latest `--epoch-ms`: the year 3000, far beyond any run, well within `SystemTime`.
const MAX_EPOCH_MS: u64 = 32_503_680_000_000;

/// `fulcrum lab backend`.
#[derive(Debug, clap::Args)]
pub struct BackendArgs {
    /// Address to listen on.
    #[arg(short, long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// The name it answers with (defaults to the listen address).
    #[arg(short, long)]
    pub name: Option<String>,
    /// Service slots, like cores: with it, the backend emulates a server of limited
    /// capacity (a FIFO queue over the slots, GET /load); without it, every request is
    /// served at once after its cost.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub workers: Option<u32>,
    /// Relative speed: a request alone takes its cost divided by this.
    #[arg(long, default_value_t = 1.0, value_parser = parse_speed, requires = "workers")]
    pub speed: f64,
    /// Requests that may wait beyond the workers; beyond, 503.
    #[arg(long, default_value_t = 1000, requires = "workers")]
    pub max_queue: usize,
    /// How a request uses the capacity: cpu (holds one of the --workers slots for its
    /// cost / speed), io (shares a bandwidth of workers x speed with the requests in
    /// service, at most speed each), mixed (half on the slots, then half on the bandwidth)
    /// or burn (as cpu, spinning a real thread for the slot's time).
    #[arg(long, default_value = "cpu", requires = "workers")]
    pub mode: lab::backend::Mode,
    /// The cost of a request without an X-Lab-Cost header, drawn per request: milliseconds
    /// (25), const:MS, uniform:A:B or lognormal:MU:SIGMA.
    #[arg(long, value_name = "DIST", value_parser = parse_cost, requires = "workers")]
    pub cost: Option<lab::schedule::Cost>,
    /// Background load that takes capacity away: FRACTION:FOR:EVERY[:OFFSET], e.g.
    /// 0.3:20s:60s leaves 30% of the capacity for 20 s of every 60 s (from OFFSET on the
    /// clock that starts at --epoch-ms). It shows in GET /load.
    #[arg(long, value_name = "PATTERN", requires = "workers")]
    pub antagonist: Option<lab::backend::Antagonist>,
    /// Time zero of the antagonist, in milliseconds since the Unix epoch (give every
    /// backend of a run the same, so their drops line up with the load); default: start.
    #[arg(long, value_name = "UNIX_MS", requires = "workers",
          value_parser = clap::value_parser!(u64).range(..=MAX_EPOCH_MS))]
    pub epoch_ms: Option<u64>,
    /// Answer each request --fail-status (500) with this probability (0 to 1), drawn from
    /// --seed.
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = parse_probability, requires = "workers")]
    pub fail_rate: f64,
    /// The status of a --fail-rate failure (such as 503: an unavailable application).
    #[arg(long, value_name = "STATUS", default_value_t = 500, requires = "workers",
          value_parser = clap::value_parser!(u16).range(100..=599))]
    pub fail_status: u16,
    /// Answer 503 to a request not done this long after it arrived (such as 1s); its work
    /// goes on to its end, holding its slot: an application server's request timeout that
    /// cannot stop the handler.
    #[arg(long, value_name = "DURATION", value_parser = parse_interval, requires = "workers")]
    pub deadline: Option<Duration>,
    /// After N requests, stop answering: later requests, those in progress and GET /load
    /// hang with their connections open.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(0..), requires = "workers")]
    pub stall_after: Option<u64>,
    /// After N requests, die: the port closes when the N-th arrives, every connection is
    /// dropped once it is answered, and the process exits with status 0.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), requires = "workers")]
    pub die_after: Option<u64>,
    /// Seed of the backend's draws (costs from --cost, failures from --fail-rate).
    #[arg(long, default_value_t = 1, requires = "workers")]
    pub seed: u64,
    /// The host's memory (such as 4GB or 8GiB): GET /load's mem is then
    /// (--mem-base + --mem-per-request x requests in flight) / --mem, averaged over its
    /// window; without it, mem is the queue's fill.
    #[arg(long, value_name = "SIZE", value_parser = parse_mem, requires = "workers")]
    pub mem: Option<f64>,
    /// Memory held with no request in flight (such as 1GB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "mem")]
    pub mem_base: Option<f64>,
    /// Memory each request in flight holds, waiting or in service (such as 32MB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "mem")]
    pub mem_per_request: Option<f64>,
    /// The host's link (such as 942Mbit or 18.5Gbit): GET /load's net then adds
    /// 8 x --net-per-request x answers a second / --net.
    #[arg(long, value_name = "RATE", value_parser = lab::backend::footprint::parse_bits, requires = "workers")]
    pub net: Option<f64>,
    /// Bytes an answered request moves over the link, sent and received (such as 64KB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "net")]
    pub net_per_request: Option<f64>,
}

/// `fulcrum lab load`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("loop").required(true).args(["pattern", "concurrency"])))]
pub struct LoadArgs {
    /// The target, http://IP:PORT/PATH (loopback in tests and the lab).
    #[arg(value_parser = parse_target)]
    pub url: (SocketAddr, String),
    /// Open loop: constant:RPS, sine:MIN-MAX:PERIOD, steps:START-END:STEP:HOLD or
    /// burst:N:GAP:REPEAT.
    #[arg(long, conflicts_with = "concurrency")]
    pub pattern: Option<lab::schedule::Pattern>,
    /// Closed loop: USERS virtual users (such as 200), or a ramp steps:START-END:STEP:HOLD
    /// (user k is active while k < the users at that time); each sends its next request as
    /// soon as its previous one is answered.
    #[arg(long, value_name = "USERS")]
    pub concurrency: Option<lab::load::Users>,
    /// How long requests are sent.
    #[arg(long, default_value = "10s", value_parser = parse_interval)]
    pub duration: Duration,
    /// Gaps between requests in open loop: poisson or even.
    #[arg(long, default_value = "poisson", value_parser = parse_spacing, conflicts_with = "concurrency")]
    pub spacing: lab::schedule::Spacing,
    /// Each request's cost (X-Lab-Cost): const:MS, uniform:A:B or lognormal:MU:SIGMA.
    #[arg(long, default_value = "const:0")]
    pub cost: lab::schedule::Cost,
    /// A request not answered this long after its intended time (closed loop: its send) is a
    /// timeout (seed 002's 4 s).
    #[arg(long, default_value = "4s", value_parser = parse_interval)]
    pub timeout: Duration,
    /// Distinct client addresses (127.1.x.y, each of the first 250 in its own /24), for the hash algorithms. Open loop: default 1.
    /// Closed loop: user i sends from address i mod CLIENTS; default, one address per user.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub clients: Option<u32>,
    /// Seed of the trace: the same seed sends the same requests at the same times (closed
    /// loop: with the same costs in the same order).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write every request to FILE as CSV (intended_ms, start_ms, end_ms, status,
    /// backend, cost_ms, client, outcome). A progress bar goes to stderr when it is a
    /// terminal.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    pub json: bool,
}

/// `fulcrum lab run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The scenario (TOML).
    #[arg(value_name = "SCENARIO")]
    pub scenario: PathBuf,
    /// Where the results, the report and the run's logs go (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// No progress lines.
    #[arg(long)]
    pub quiet: bool,
    /// Replace the scenario's contenders by these of fulcrum's algorithms, at their default
    /// options (such as least_conn,p2c_ewma,dwlc).
    #[arg(long, value_name = "A,B,...", value_delimiter = ',')]
    pub algorithms: Vec<String>,
    /// Run this many paired repetitions instead of the scenario's `repetitions`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repetitions: Option<u32>,
}

/// `fulcrum lab hash-distribution`.
#[derive(Debug, clap::Args)]
pub struct HashDistributionArgs {
    /// Distinct client addresses per run.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub clients: u32,
    /// Runs, each with newly drawn clients.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub runs: u32,
    /// Servers of equal weight.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=10_000))]
    pub servers: u32,
    /// The second experiment draws its clients from this many random /24 prefixes (0: only
    /// the uniform one).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub prefixes: u32,
    /// Seed of the client draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}
