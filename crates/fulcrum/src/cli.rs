//! The command line's grammar: every subcommand, its arguments and their help, as clap derives
//! them. Nothing here runs anything; [`crate::commands`] and [`crate::serve`] do, from the
//! parsed arguments. Kept apart so that `fulcrum --help` can be read in one place, and so the
//! code that acts is not interleaved with a thousand lines of attributes.
//!
//! * this file: `fulcrum` itself and its subcommands but the lab's;
//! * [`lab`]: `fulcrum lab …`;
//! * [`values`]: the parsers of values clap does not know (durations, URLs, costs).

pub mod lab;
pub mod values;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use values::parse_interval;

#[derive(Debug, Parser)]
#[command(
    name = "fulcrum",
    version,
    about = "A load balancer with every balancing algorithm, and a lab to compare them"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the load balancer.
    Run(RunArgs),
    /// Check a configuration file and exit: 0 if it is good, 1 with every problem listed.
    Check(CheckArgs),
    /// Check a running fulcrum, for keepalived's vrrp_script: exit 0 when its admin listener
    /// answers, every listener accepts a connection and every upstream has a usable backend;
    /// exit 1 with one line saying why not.
    Health(HealthArgs),
    /// A short comparison on loopback: three unequal emulated backends, one losing capacity to
    /// background load, a sine wave of traffic through five algorithms; prints the results
    /// and writes an HTML report with plots.
    Demo(DemoArgs),
    /// Run the backend-side load reporter: samples CPU, memory, disk, network and container
    /// memory every interval and serves them as GET /load (JSON) and GET /metrics (Prometheus),
    /// until SIGTERM, SIGINT or SIGQUIT.
    Agent(AgentArgs),
    /// Simulate a lab scenario in virtual time with fulcrum's own balancing code (many
    /// backends, many balancer instances, late load reports); writes results.csv, results.md
    /// and report.html as `lab run` does.
    Sim(SimArgs),
    /// Translate an nginx configuration into fulcrum's: the TOML on stdout (or --out), every
    /// directive not translated on stderr; exit 0 if all of those are cosmetic, 1 if one
    /// changes behaviour, 2 if the file cannot be read. See docs/import.md.
    Import(ImportArgs),
    /// Write the evidence table (docs/evidence.md): from results directories of `fulcrum sim`
    /// and `fulcrum lab run`, every load-aware algorithm's median p99 relative to each row's
    /// best, with paired-bootstrap intervals, and the commands that made every input.
    Evidence(EvidenceArgs),
    /// The lab: emulated backends, load generation, scenarios run on real sockets, and their reports.
    Lab {
        #[command(subcommand)]
        command: lab::LabCommand,
    },
}

/// `fulcrum run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// A Unix socket through which a new fulcrum takes the listening sockets over from
    /// this one (a restart or binary upgrade without a refused connection): started with
    /// the same path while another fulcrum serves there, fulcrum takes its sockets, and
    /// the other one drains and exits. See docs/operations.md.
    #[arg(long, value_name = "PATH")]
    pub upgrade_socket: Option<PathBuf>,
    /// The configuration file (TOML; see docs/configuration.md).
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// The lowest level logged, for every target [default: the file's log_level, else
    /// info]. RUST_LOG's directives still apply on top of it (`RUST_LOG=proxy=debug`); its
    /// bare level gives way to this flag (and to log_level).
    #[arg(long, value_name = "LEVEL", value_enum)]
    pub log_level: Option<crate::logs::Level>,
    /// How log lines are written: `text` for a person, `json` one JSON object per line for a
    /// log shipper [default: the file's log_format, else text].
    #[arg(long, value_name = "FORMAT", value_enum)]
    pub log_format: Option<crate::logs::Format>,
}

/// `fulcrum check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The configuration file to check.
    #[arg(short, long, value_name = "FILE", required_unless_present = "file")]
    pub config: Option<PathBuf>,
    /// The configuration file, also taken without --config (`fulcrum check fulcrum.toml`).
    #[arg(value_name = "FILE", conflicts_with = "config")]
    pub file: Option<PathBuf>,
}

impl CheckArgs {
    /// The file to check, however it was given (clap requires one of the two).
    pub fn path(&self) -> Option<&std::path::Path> {
        self.config.as_deref().or(self.file.as_deref())
    }
}

/// `fulcrum import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The nginx configuration (its includes are read from its directory).
    pub file: PathBuf,
    /// Where the TOML goes (default: stdout).
    #[arg(long, value_name = "OUT")]
    pub out: Option<PathBuf>,
}

/// `fulcrum health`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["admin", "config"])))]
pub struct HealthArgs {
    /// The admin listener's address.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,
    /// The configuration file whose [admin] listen to ask.
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The most the whole check may take.
    #[arg(long, default_value = "900ms", value_parser = parse_interval)]
    pub timeout: Duration,
}

/// `fulcrum demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Where the results and the report go.
    #[arg(long, value_name = "DIR", default_value = "fulcrum-demo")]
    pub out: PathBuf,
}

/// `fulcrum agent`.
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// Address of the HTTP endpoint (GET /load, GET /metrics).
    #[arg(short, long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Time between samples.
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Link speed the network figure is a share of, e.g. 1Gbit or 100Mbit (default: the
    /// sum of /sys/class/net/<if>/speed over the interfaces whose speed is known).
    #[arg(long, value_name = "SPEED", value_parser = agent::measure::network::parse_speed)]
    pub net_speed: Option<u64>,
    /// The cgroup v2 root whose limited groups make the container memory figure.
    #[arg(long, value_name = "DIR", default_value = "/sys/fs/cgroup")]
    pub cgroup_root: PathBuf,
    /// Also write every report to memcached, under fulcrum/load/<name>.
    #[arg(long, value_name = "memcached://HOST:PORT", requires = "name")]
    pub push: Option<String>,
    /// The backend address the pushed reports are filed under (the address fulcrum's
    /// configuration gives this backend).
    #[arg(long, value_name = "ADDR", requires = "push")]
    pub name: Option<String>,
    /// Also answer HAProxy's agent-check protocol on this address (a line such as "75%").
    #[arg(long, value_name = "ADDR")]
    pub haproxy_agent: Option<SocketAddr>,
    /// Also answer Prequal's GET /probe for the backend at this address: its established
    /// connections as requests in flight, and the latency of the agent's own request to it.
    #[arg(long, value_name = "ADDR")]
    pub probe_target: Option<SocketAddr>,
    /// The path of the agent's own timed request to the probe target.
    #[arg(long, value_name = "PATH", default_value = "/", requires = "probe_target", value_parser = parse_probe_path)]
    pub probe_path: String,
}

/// `--probe-path`: an absolute path (it goes into a request line as written).
fn parse_probe_path(s: &str) -> Result<String, String> {
    if s.starts_with('/') && s.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{s:?} is not a path: write one that starts with / and has no spaces, such as /health"
        ))
    }
}

/// `fulcrum sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// The scenario file (TOML; see docs/lab.md and docs/simulator.md).
    pub scenario: PathBuf,
    /// Where the results and the report go.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// No progress bar.
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

/// `fulcrum evidence`.
#[derive(Debug, clap::Args)]
pub struct EvidenceArgs {
    /// Results directories of `fulcrum sim` or `fulcrum lab run` (with their
    /// repetitions.csv and provenance.toml), one row group each, in this order.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// The Markdown file to write.
    #[arg(long, value_name = "FILE", default_value = "docs/evidence.md")]
    pub out: PathBuf,
}
