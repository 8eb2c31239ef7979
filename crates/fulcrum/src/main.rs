//! `fulcrum`: the command line. See `fulcrum --help`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use fulcrum::{config, demo};
use tracing_subscriber::EnvFilter;

#[derive(Debug, Parser)]
#[command(
    name = "fulcrum",
    version,
    about = "A load balancer with every balancing algorithm, and a lab to compare them"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the load balancer.
    Run {
        /// A Unix socket through which a new fulcrum takes the listening sockets over from
        /// this one (a restart or binary upgrade without a refused connection): started with
        /// the same path while another fulcrum serves there, fulcrum takes its sockets, and
        /// the other one drains and exits. See docs/operations.md.
        #[arg(long, value_name = "PATH")]
        upgrade_socket: Option<PathBuf>,
        /// The configuration file (TOML; see docs/configuration.md).
        #[arg(short, long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Check a configuration file and exit: 0 if it is good, 1 with every problem listed.
    Check {
        /// The configuration file to check.
        #[arg(short, long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Check a running fulcrum, for keepalived's vrrp_script: exit 0 when its admin listener
    /// answers, every listener accepts a connection and every upstream has a usable backend;
    /// exit 1 with one line saying why not.
    #[command(group(clap::ArgGroup::new("target").required(true).args(["admin", "config"])))]
    Health {
        /// The admin listener's address.
        #[arg(long, value_name = "ADDR")]
        admin: Option<std::net::SocketAddr>,
        /// The configuration file whose [admin] listen to ask.
        #[arg(short, long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The most the whole check may take.
        #[arg(long, default_value = "900ms", value_parser = parse_interval)]
        timeout: std::time::Duration,
    },
    /// A short comparison on loopback: three unequal emulated backends, one losing capacity to
    /// background load, a sine wave of traffic through five algorithms; prints the results
    /// and writes an HTML report with plots.
    Demo {
        /// Where the results and the report go.
        #[arg(long, value_name = "DIR", default_value = "fulcrum-demo")]
        out: PathBuf,
    },
    /// Run the backend-side load reporter: samples CPU, memory, disk, network and container
    /// memory every interval and serves them as GET /load (JSON) and GET /metrics (Prometheus),
    /// until SIGTERM or SIGINT.
    Agent {
        /// Address of the HTTP endpoint (GET /load, GET /metrics).
        #[arg(short, long, value_name = "ADDR")]
        listen: std::net::SocketAddr,
        /// Time between samples.
        #[arg(long, default_value = "1s", value_parser = parse_interval)]
        interval: std::time::Duration,
        /// Link speed the network figure is a share of, e.g. 1Gbit or 100Mbit (default: the
        /// sum of /sys/class/net/<if>/speed over the interfaces whose speed is known).
        #[arg(long, value_name = "SPEED", value_parser = agent::measure::network::parse_speed)]
        net_speed: Option<u64>,
        /// The cgroup v2 root whose limited groups make the container memory figure.
        #[arg(long, value_name = "DIR", default_value = "/sys/fs/cgroup")]
        cgroup_root: PathBuf,
        /// Also write every report to memcached, under fulcrum/load/<name>.
        #[arg(long, value_name = "memcached://HOST:PORT", requires = "name")]
        push: Option<String>,
        /// The backend address the pushed reports are filed under (the address fulcrum's
        /// configuration gives this backend).
        #[arg(long, value_name = "ADDR", requires = "push")]
        name: Option<String>,
        /// Also answer HAProxy's agent-check protocol on this address (a line such as "75%").
        #[arg(long, value_name = "ADDR")]
        haproxy_agent: Option<std::net::SocketAddr>,
    },
    /// Simulate a lab scenario in virtual time with fulcrum's own balancing code (many
    /// backends, many balancer instances, late load reports); writes results.csv, results.md
    /// and report.html as `lab run` does.
    Sim {
        /// The scenario file (TOML; see docs/lab.md and docs/simulator.md).
        scenario: PathBuf,
        /// Where the results and the report go.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// The lab: emulated backends, load generation, and (later) scenarios and reports.
    Lab {
        #[command(subcommand)]
        command: LabCommand,
    },
}

#[derive(Debug, Subcommand)]
enum LabCommand {
    /// Run one emulated backend until SIGTERM or SIGINT (or --die-after): it answers every
    /// request with its name (and `X-Backend`) after the request's cost (`X-Lab-Cost: <ms>`, or
    /// `?delay_ms=N`). With --workers it emulates a server of limited capacity (modes, an
    /// antagonist, faults, a cost distribution; see docs/lab.md) and serves its utilization at
    /// GET /load in the agent's format.
    Backend {
        /// Address to listen on.
        #[arg(short, long, value_name = "ADDR")]
        listen: std::net::SocketAddr,
        /// The name it answers with (defaults to the listen address).
        #[arg(short, long)]
        name: Option<String>,
        /// Service slots, like cores: with it, the backend emulates a server of limited
        /// capacity (a FIFO queue over the slots, GET /load); without it, every request is
        /// served at once after its cost.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        workers: Option<u32>,
        /// Relative speed: a request alone takes its cost divided by this.
        #[arg(long, default_value_t = 1.0, value_parser = parse_speed, requires = "workers")]
        speed: f64,
        /// Requests that may wait beyond the workers; beyond, 503.
        #[arg(long, default_value_t = 1000, requires = "workers")]
        max_queue: usize,
        /// How a request uses the capacity: cpu (holds one of the --workers slots for its
        /// cost / speed), io (shares a bandwidth of workers x speed with the requests in
        /// service, at most speed each), mixed (half on the slots, then half on the bandwidth)
        /// or burn (as cpu, spinning a real thread for the slot's time).
        #[arg(long, default_value = "cpu", requires = "workers")]
        mode: lab::backend::Mode,
        /// The cost of a request without an X-Lab-Cost header, drawn per request: milliseconds
        /// (25), const:MS, uniform:A:B or lognormal:MU:SIGMA.
        #[arg(long, value_name = "DIST", value_parser = parse_cost, requires = "workers")]
        cost: Option<lab::schedule::Cost>,
        /// Background load that takes capacity away: FRACTION:FOR:EVERY[:OFFSET], e.g.
        /// 0.3:20s:60s leaves 30% of the capacity for 20 s of every 60 s (from OFFSET on the
        /// clock that starts at --epoch-ms). It shows in GET /load.
        #[arg(long, value_name = "PATTERN", requires = "workers")]
        antagonist: Option<lab::backend::Antagonist>,
        /// Time zero of the antagonist, in milliseconds since the Unix epoch (give every
        /// backend of a run the same, so their drops line up with the load); default: start.
        #[arg(long, value_name = "UNIX_MS", requires = "workers",
              value_parser = clap::value_parser!(u64).range(..=MAX_EPOCH_MS))]
        epoch_ms: Option<u64>,
        /// Answer each request 500 with this probability (0 to 1), drawn from --seed.
        #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = parse_probability, requires = "workers")]
        fail_rate: f64,
        /// After N requests, stop answering: later requests, those in progress and GET /load
        /// hang with their connections open.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(0..), requires = "workers")]
        stall_after: Option<u64>,
        /// After N requests, die: the port closes when the N-th arrives, every connection is
        /// dropped once it is answered, and the process exits with status 0.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), requires = "workers")]
        die_after: Option<u64>,
        /// Seed of the backend's draws (costs from --cost, failures from --fail-rate).
        #[arg(long, default_value_t = 1, requires = "workers")]
        seed: u64,
    },
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
    Run {
        /// The scenario (TOML).
        #[arg(value_name = "SCENARIO")]
        scenario: PathBuf,
        /// Where the results, the report and the run's logs go (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// No progress lines.
        #[arg(long)]
        quiet: bool,
    },
    /// Seed 000's hash-spread experiment (its Figures 20–21): client addresses through every
    /// algorithm that hashes the client, clients per server and how even that is — for clients
    /// drawn uniformly over IPv4, and from a few /24 prefixes.
    HashDistribution {
        /// Distinct client addresses per run.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
        clients: u32,
        /// Runs, each with newly drawn clients.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
        runs: u32,
        /// Servers of equal weight.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=10_000))]
        servers: u32,
        /// The second experiment draws its clients from this many random /24 prefixes (0: only
        /// the uniform one).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
        prefixes: u32,
        /// Seed of the client draws.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

/// `fulcrum lab load`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("loop").required(true).args(["pattern", "concurrency"])))]
struct LoadArgs {
    /// The target, http://IP:PORT/PATH (loopback in tests and the lab).
    #[arg(value_parser = parse_target)]
    url: (std::net::SocketAddr, String),
    /// Open loop: constant:RPS, sine:MIN-MAX:PERIOD, steps:START-END:STEP:HOLD or
    /// burst:N:GAP:REPEAT.
    #[arg(long, conflicts_with = "concurrency")]
    pattern: Option<lab::schedule::Pattern>,
    /// Closed loop: USERS virtual users (such as 200), or a ramp steps:START-END:STEP:HOLD
    /// (user k is active while k < the users at that time); each sends its next request as
    /// soon as its previous one is answered.
    #[arg(long, value_name = "USERS")]
    concurrency: Option<lab::load::Users>,
    /// How long requests are sent.
    #[arg(long, default_value = "10s", value_parser = parse_interval)]
    duration: std::time::Duration,
    /// Gaps between requests in open loop: poisson or even.
    #[arg(long, default_value = "poisson", value_parser = parse_spacing, conflicts_with = "concurrency")]
    spacing: lab::schedule::Spacing,
    /// Each request's cost (X-Lab-Cost): const:MS, uniform:A:B or lognormal:MU:SIGMA.
    #[arg(long, default_value = "const:0")]
    cost: lab::schedule::Cost,
    /// A request not answered this long after its intended time (closed loop: its send) is a
    /// timeout (seed 002's 4 s).
    #[arg(long, default_value = "4s", value_parser = parse_interval)]
    timeout: std::time::Duration,
    /// Distinct client addresses (127.1.x.y, each of the first 250 in its own /24), for the hash algorithms. Open loop: default 1.
    /// Closed loop: user i sends from address i mod CLIENTS; default, one address per user.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    clients: Option<u32>,
    /// Seed of the trace: the same seed sends the same requests at the same times (closed
    /// loop: with the same costs in the same order).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write every request to FILE as CSV (intended_ms, start_ms, end_ms, status,
    /// backend, cost_ms, client, outcome). A progress bar goes to stderr when it is a
    /// terminal.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    json: bool,
}

/// The latest `--epoch-ms`: the year 3000, far beyond any run, well within `SystemTime`.
const MAX_EPOCH_MS: u64 = 32_503_680_000_000;

/// Logs to stderr through a writer thread, so a slow log sink (a full pipe to journald or
/// docker) never blocks a worker in the middle of its connections; lines beyond its buffer
/// are dropped rather than stall the data plane. Keep the guard until exit: it flushes.
fn init_logs(default: &str) -> tracing_appender::non_blocking::WorkerGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // The channel is allocated whole up front: 8192 lines (256 KiB) rather than the crate's
    // 128,000 (4 MiB) is ample between two writes of the thread.
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(8192)
        .finish(std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(writer)
        .init();
    guard
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { config } => check(&config),
        Command::Health {
            admin,
            config,
            timeout,
        } => health(admin, config.as_deref(), timeout),
        Command::Run {
            config,
            upgrade_socket,
        } => run(&config, upgrade_socket.as_deref()),
        Command::Demo { out } => {
            let _logs = init_logs("warn");
            demo::run(&out)
        }
        Command::Agent {
            listen,
            interval,
            net_speed,
            cgroup_root,
            push,
            name,
            haproxy_agent,
        } => {
            let push = match (push, name) {
                (Some(url), Some(name)) => match agent::push::Target::new(&url, &name) {
                    Ok(target) => Some(target),
                    Err(e) => {
                        eprintln!("fulcrum: error: --push: {e}");
                        return ExitCode::from(2);
                    }
                },
                _ => None,
            };
            let settings = agent::Settings {
                listen,
                interval,
                net_speed,
                cgroup_root,
                push,
                haproxy_agent,
            };
            let _logs = init_logs("info");
            runtime(1).and_then(|rt| rt.block_on(run_agent(settings)))
        }
        Command::Lab {
            command:
                LabCommand::Backend {
                    listen,
                    name,
                    workers,
                    speed,
                    max_queue,
                    mode,
                    cost,
                    antagonist,
                    epoch_ms,
                    fail_rate,
                    stall_after,
                    die_after,
                    seed,
                },
        } => {
            let _logs = init_logs("info");
            let capacity = workers.map(|workers| lab::backend::Capacity {
                workers,
                speed,
                max_queue,
                mode,
                cost: cost.unwrap_or(lab::schedule::Cost::Const { ms: 0.0 }),
                antagonist,
                epoch: epoch_ms
                    .map(|ms| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)),
                seed,
            });
            let faults = lab::backend::Faults {
                fail_rate,
                stall_after,
                die_after,
            };
            runtime(1).and_then(|rt| rt.block_on(lab_backend(listen, name, capacity, faults)))
        }
        Command::Sim {
            scenario,
            out,
            quiet,
        } => lab::scenario::Scenario::load(&scenario)
            .map_err(anyhow::Error::msg)
            .and_then(|s| fulcrum::sim_run::play(&s, &out, !quiet)),
        Command::Lab {
            command: LabCommand::Load(args),
        } => {
            let _logs = init_logs("warn");
            lab_load(args)
        }
        Command::Lab {
            command:
                LabCommand::Run {
                    scenario,
                    out,
                    quiet,
                },
        } => {
            let _logs = init_logs("warn");
            lab_run(&scenario, &out, !quiet)
        }
        Command::Lab {
            command:
                LabCommand::HashDistribution {
                    clients,
                    runs,
                    servers,
                    prefixes,
                    seed,
                },
        } => {
            hash_distribution(clients, runs, servers, prefixes, seed);
            Ok(ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fulcrum: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime(workers: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("fulcrum-worker")
        .enable_all()
        .build()
        .context("cannot start the runtime")
}

/// `fulcrum health`: 0 and a line when healthy, 1 and the reason otherwise, 2 when it cannot
/// tell whom to ask.
fn health(
    admin: Option<std::net::SocketAddr>,
    config: Option<&std::path::Path>,
    timeout: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    let admin = match (admin, config) {
        (Some(a), _) => a,
        (None, Some(path)) => match config::load(path) {
            Ok(cfg) => match cfg.admin {
                Some(a) => a.listen,
                None => {
                    eprintln!(
                        "fulcrum health: {} has no [admin]: the check asks the admin listener",
                        path.display()
                    );
                    return Ok(ExitCode::from(2));
                }
            },
            Err(e) => {
                eprintln!("{e}");
                return Ok(ExitCode::from(2));
            }
        },
        (None, None) => anyhow::bail!("give --admin ADDR or --config FILE"),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    match rt.block_on(fulcrum::health::check(admin, timeout)) {
        Ok(line) => {
            println!("{line}");
            Ok(ExitCode::SUCCESS)
        }
        Err(why) => {
            println!("unhealthy: {why}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn check(path: &std::path::Path) -> anyhow::Result<ExitCode> {
    match config::load(path) {
        Ok(cfg) => {
            for w in &cfg.warnings {
                eprintln!("warning: {w}");
            }
            println!("{}: configuration is valid", path.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn run(
    path: &std::path::Path,
    upgrade_socket: Option<&std::path::Path>,
) -> anyhow::Result<ExitCode> {
    let _logs = init_logs("info");
    let cfg = match config::load(path) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    for w in &cfg.warnings {
        tracing::warn!("{w}");
    }
    let mut cfg = cfg;
    let (limit, error) = proxy::limits::raise_open_files_limit();
    if let Some(e) = error {
        tracing::warn!(error = %e, "cannot raise the open files limit to the hard limit");
    }
    if let Err(e) = proxy::limits::fit_to_limit(&mut cfg.proxy, limit) {
        eprintln!("fulcrum: error: {}: {e}", path.display());
        return Ok(ExitCode::FAILURE);
    }
    tracing::info!(
        open_files_limit = %limit.map_or_else(|| "unlimited".to_owned(), |l| l.to_string()),
        needed = proxy::limits::descriptors_needed(&cfg.proxy),
        max_connections = ?cfg.proxy.listeners.iter().map(|l| l.connection_limit()).collect::<Vec<_>>(),
        "file descriptors"
    );
    // A fulcrum already serving on the upgrade socket hands its listening sockets over.
    let (mut inherited, handshake) = match upgrade_socket.map(proxy::handover::take_over) {
        Some(Ok(Some((inherited, handshake)))) => {
            tracing::info!(
                sockets = inherited.len(),
                "took over the sockets of the running fulcrum"
            );
            (inherited, Some(handshake))
        }
        Some(Ok(None)) | None => (proxy::handover::Inherited::default(), None),
        Some(Err(e)) => {
            eprintln!(
                "fulcrum: error: --upgrade-socket {}: cannot take the sockets over from the running fulcrum: {e}",
                upgrade_socket.map_or_else(String::new, |p| p.display().to_string())
            );
            return Ok(ExitCode::FAILURE);
        }
    };
    let upgrade_socket = upgrade_socket.map(std::path::Path::to_owned);
    // The proxy runs its own worker threads; this runtime only waits for a signal.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let workers = cfg.proxy.workers;
    let admin_settings = cfg.admin.clone();
    let path = path.to_owned();
    rt.block_on(async move {
        // Installed before anything is served: an operator's `systemctl reload` (SIGHUP) must
        // never kill the process, however early it comes.
        let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .context("installing a SIGHUP handler")?;
        let proxy = proxy::Proxy::bind_inherited(cfg.proxy, &mut inherited).await?;
        let handle = proxy.handle();
        let (reloads, reload_requests) = tokio::sync::mpsc::channel(4);
        // The admin listener is bound before anything is served, so a port in use stops the
        // start, as a listener's does.
        let mut admin_handover = None;
        let admin = match admin_settings.clone() {
            Some(a) => {
                let socket = match inherited.take("admin") {
                    Some(socket) => socket,
                    None => std::net::TcpListener::bind(a.listen).with_context(|| {
                        format!("admin listener: cannot listen on {}", a.listen)
                    })?,
                };
                admin_handover = Some(socket.try_clone()?);
                let view = admin::View {
                    proxy: handle.clone(),
                    reload: Some(reloads),
                    balancing: Some(admin::Balancing(std::sync::Arc::new(
                        config::balancing::apply,
                    ))),
                };
                let settings = admin::Settings {
                    listen: a.listen,
                    token: a.token,
                };
                Some(admin::Admin::from_listener(socket, settings.token, view)?)
            }
            None => None,
        };
        tracing::info!(
            workers,
            version = env!("CARGO_PKG_VERSION"),
            "fulcrum started"
        );
        // The control plane (load feedback, health checks), the reloads and the admin
        // listener run on this runtime, beside the workers.
        let (stop_control, stopped) = tokio::sync::watch::channel(false);
        control::spawn(&handle.upstreams(), &stopped);
        tokio::spawn(reloader(
            path,
            handle.clone(),
            admin_settings,
            hangups,
            reload_requests,
            stopped.clone(),
        ));
        // SIGUSR1 reopens the access log's file, as nginx's does (logrotate's postrotate).
        let mut usr1 =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
                .context("installing a SIGUSR1 handler")?;
        let reopen = handle.clone();
        let mut stop_reopen = stopped.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = usr1.recv() => {
                        tracing::info!("SIGUSR1 received: reopening the access log");
                        reopen.reopen_logs();
                    }
                    _ = stop_reopen.changed() => return,
                }
            }
        });
        // Upgrades: once serving, tell the fulcrum we replace (it drains and exits) and offer
        // our own sockets to the next one; when one takes them, stop as at SIGTERM.
        let (handed_over, mut replaced) = tokio::sync::watch::channel(false);
        if let Some(path) = upgrade_socket {
            let handle = handle.clone();
            tokio::spawn(async move {
                if let Some(handshake) = handshake {
                    // Its workers accept within milliseconds; meanwhile the kernel queues.
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    match tokio::task::spawn_blocking(move || handshake.ready()).await {
                        Ok(Ok(())) => tracing::info!("the previous fulcrum stopped accepting and drains"),
                        Ok(Err(e)) => tracing::error!(error = %e, "the previous fulcrum did not let go; both serve until it stops"),
                        Err(e) => tracing::error!(error = %e, "the upgrade handshake failed"),
                    }
                }
                match proxy::handover::Offer::bind(&path) {
                    Ok(offer) => {
                        tracing::info!(path = %path.display(), "upgrade socket ready");
                        let _ = std::thread::Builder::new()
                            .name("fulcrum-upgrade".into())
                            .spawn(move || {
                                offer.serve(&|| {
                                    let mut sockets = handle.sockets_for_handover();
                                    if let Some(admin) =
                                        admin_handover.as_ref().and_then(|a| a.try_clone().ok())
                                    {
                                        sockets.push(("admin".to_owned(), admin));
                                    }
                                    sockets
                                });
                                tracing::info!("a new fulcrum took the sockets over: stopping as at SIGTERM");
                                let _ = handed_over.send(true);
                            });
                    }
                    Err(e) => tracing::error!(path = %path.display(), error = %e, "cannot listen on the upgrade socket; upgrades need a restart"),
                }
            });
        }
        if let Some(admin) = admin {
            tracing::info!(listen = %admin.local_addr()?, "admin listener");
            let mut stop = stopped.clone();
            let mut replaced = replaced.clone();
            tokio::spawn(admin.run(async move {
                tokio::select! {
                    _ = stop.changed() => {}
                    _ = replaced.changed() => {}
                }
            }));
        }
        let signal = shutdown_signal();
        proxy
            .run(async move {
                tokio::select! {
                    () = signal => {}
                    _ = replaced.changed() => {}
                }
            })
            .await;
        let _ = stop_control.send(true);
        tracing::info!("fulcrum stopped");
        Ok(ExitCode::SUCCESS)
    })
}

/// Reloads the configuration on SIGHUP and on `POST /api/reload`, one at a time, until the
/// proxy stops.
async fn reloader(
    path: std::path::PathBuf,
    proxy: proxy::ProxyHandle,
    admin: Option<config::admin::Admin>,
    mut hangups: tokio::signal::unix::Signal,
    mut requests: tokio::sync::mpsc::Receiver<admin::ReloadReply>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let reply = tokio::select! {
            _ = hangups.recv() => {
                tracing::info!("SIGHUP received: reloading the configuration");
                None
            }
            Some(reply) = requests.recv() => {
                tracing::info!("reload asked through the admin API");
                Some(reply)
            }
            _ = stop.changed() => return,
        };
        let result = reload(&path, &proxy, admin.as_ref(), &stop).await;
        if let Some(reply) = reply {
            let _ = reply.send(result);
        }
    }
}

/// One reload: the file is read and checked as `fulcrum check` does; a file with errors
/// changes nothing (its problems are logged); a valid one is applied without dropping a
/// request ([`proxy::ProxyHandle::reload`]). Returns what was done, or why nothing was.
async fn reload(
    path: &std::path::Path,
    proxy: &proxy::ProxyHandle,
    running_admin: Option<&config::admin::Admin>,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<String, String> {
    let mut cfg = match config::load(path) {
        Ok(cfg) => cfg,
        Err(e) => {
            let text = e.to_string();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                tracing::error!("{line}");
            }
            tracing::error!(
                "reload refused: {} has errors; the running configuration stays",
                path.display()
            );
            return Err(text);
        }
    };
    for w in &cfg.warnings {
        tracing::warn!("{w}");
    }
    let (limit, _) = proxy::limits::raise_open_files_limit();
    if let Err(e) = proxy::limits::fit_to_limit(&mut cfg.proxy, limit) {
        let text = format!("{}: {e}", path.display());
        tracing::error!("reload refused: {text}; the running configuration stays");
        return Err(text);
    }
    let mut not_applied = Vec::new();
    if cfg.admin.as_ref() != running_admin {
        not_applied.push("[admin]: takes a restart".to_owned());
    }
    match proxy.reload(cfg.proxy).await {
        Ok(done) => {
            for u in &done.new_upstreams {
                tokio::spawn(control::supervise(std::sync::Arc::clone(u), stop.clone()));
            }
            not_applied.extend(done.not_applied.iter().cloned());
            for n in &not_applied {
                tracing::warn!("reload: not applied: {n}");
            }
            let new_upstreams: Vec<&str> = done.new_upstreams.iter().map(|u| u.name()).collect();
            tracing::info!(
                reconfigured = ?done.reconfigured,
                new_upstreams = ?new_upstreams,
                removed_upstreams = ?done.removed_upstreams,
                new_listeners = ?done.new_listeners,
                changed_listeners = ?done.changed_listeners,
                removed_listeners = ?done.removed_listeners,
                "configuration reloaded"
            );
            Ok(format!(
                "reloaded: upstreams reconfigured {:?}, new {:?}, removed {:?}; listeners new {:?}, changed {:?}, removed {:?}{}",
                done.reconfigured,
                new_upstreams,
                done.removed_upstreams,
                done.new_listeners,
                done.changed_listeners,
                done.removed_listeners,
                if not_applied.is_empty() {
                    String::new()
                } else {
                    format!("; not applied: {}", not_applied.join("; "))
                }
            ))
        }
        Err(e) => {
            tracing::error!(error = %e, "reload refused; the running configuration stays");
            Err(e.to_string())
        }
    }
}

fn hash_distribution(clients: u32, runs: u32, servers: u32, prefixes: u32, seed: u64) {
    use lab::hash_spread::{Spec, contenders, report, run};
    let contenders = contenders();
    let mut drawn = vec![0];
    if prefixes > 0 {
        drawn.push(prefixes as usize);
    }
    for (i, prefixes) in drawn.into_iter().enumerate() {
        let spec = Spec {
            clients: clients as usize,
            runs: runs as usize,
            servers: servers as usize,
            prefixes,
            seed,
        };
        if i > 0 {
            println!();
        }
        print!("{}", report(&spec, &run(&spec, &contenders)));
    }
}

async fn lab_backend(
    listen: std::net::SocketAddr,
    name: Option<String>,
    capacity: Option<lab::backend::Capacity>,
    faults: lab::backend::Faults,
) -> anyhow::Result<ExitCode> {
    let name = name.unwrap_or_else(|| listen.to_string());
    let backend = lab::Backend::start_faulty(&name, listen, capacity, faults)
        .await
        .with_context(|| format!("cannot start the backend on {listen}"))?;
    tracing::info!(listen = %backend.addr(), name = %name, capacity = ?capacity, faults = ?faults, "lab backend listening");
    tokio::select! {
        () = shutdown_signal() => backend.kill().await,
        () = backend.died() => tracing::info!(
            requests = backend.requests(),
            "lab backend died after --die-after requests, as asked; exiting"
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// `fulcrum lab run`: the scenario's runs, then the results and the report in `out`.
fn lab_run(
    scenario: &std::path::Path,
    out: &std::path::Path,
    progress: bool,
) -> anyhow::Result<ExitCode> {
    let scenario = lab::scenario::Scenario::load(scenario).map_err(anyhow::Error::msg)?;
    fulcrum::lab_run::play(&scenario, out, progress)
}

/// File descriptors kept free beside the closed-loop users' connections (the runtime, the
/// trace file, stdio).
const SPARE_FILES: u64 = 64;

fn lab_load(args: LoadArgs) -> anyhow::Result<ExitCode> {
    use lab::load::{Mode, Plan, Summary};
    let (trace, mode) = match (args.pattern, args.concurrency) {
        (_, Some(users)) => {
            let (limit, _) = proxy::limits::raise_open_files_limit();
            if let Some(limit) = limit
                && u64::from(users.max()) + SPARE_FILES > limit
            {
                anyhow::bail!(
                    "--concurrency: {} users need {} open files, and the limit is {limit}; \
                     raise it (ulimit -n) or run fewer users",
                    users.max(),
                    u64::from(users.max()) + SPARE_FILES
                );
            }
            let mode = Mode::Closed {
                users,
                duration: args.duration,
                clients: args.clients.unwrap_or(users.max()),
            };
            let costs =
                lab::schedule::costs(args.cost, lab::schedule::CLOSED_LOOP_COSTS, args.seed);
            (costs, mode)
        }
        (Some(pattern), None) => {
            let trace = lab::schedule::trace(
                pattern,
                args.spacing,
                args.duration,
                args.cost,
                args.clients.unwrap_or(1),
                args.seed,
            );
            (trace, Mode::Open)
        }
        // clap requires one of the two.
        (None, None) => anyhow::bail!("give --pattern (open loop) or --concurrency (closed loop)"),
    };
    // Create the trace file first, so that a bad path fails before the run, not after it.
    let trace_file = match &args.trace {
        Some(path) => Some(std::fs::File::create(path).with_context(|| {
            format!(
                "--trace {}: cannot create the file; give a path in a directory you can write to",
                path.display()
            )
        })?),
        None => None,
    };
    // The bar goes to stderr, and only to a terminal: with --json, stdout still holds only
    // the JSON object.
    let progress =
        std::io::IsTerminal::is_terminal(&std::io::stderr()).then(lab::load::progress::bar);
    let plan = Plan {
        target: args.url.0,
        path: args.url.1,
        trace,
        timeout: args.timeout,
        mode,
        progress,
    };
    let rt = runtime(2)?;
    let outcomes = rt.block_on(lab::load::run(&plan));
    if let (Some(file), Some(path)) = (trace_file, &args.trace) {
        lab::load::write_trace(file, &outcomes)
            .with_context(|| format!("--trace {}: cannot write the trace", path.display()))?;
    }
    let summary = Summary::of(&outcomes, args.duration, args.timeout);
    if args.json {
        println!("{}", summary.to_json());
    } else {
        match mode {
            Mode::Open => {
                println!("open loop: latency counts from each request's intended send time")
            }
            Mode::Closed { users, .. } => println!(
                "closed loop, {} users at most: latency counts from each request's actual send, \
                 which hides stalls (coordinated omission)",
                users.max()
            ),
        }
        match mode {
            Mode::Open => println!("{summary}"),
            // No schedule to fall behind.
            Mode::Closed { .. } => println!("{summary:#}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `http://IP:PORT/PATH`: the address and the path (`/` when none).
fn parse_target(text: &str) -> Result<(std::net::SocketAddr, String), String> {
    let rest = text
        .strip_prefix("http://")
        .ok_or_else(|| format!("{text:?}: write a URL such as http://127.0.0.1:8080/"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_owned()),
        None => (rest, "/".to_owned()),
    };
    let addr = authority.parse().map_err(|_| {
        format!("{authority:?}: write an IP address and a port, such as 127.0.0.1:8080")
    })?;
    Ok((addr, path))
}

/// `poisson` or `even`.
fn parse_spacing(text: &str) -> Result<lab::schedule::Spacing, String> {
    match text {
        "poisson" => Ok(lab::schedule::Spacing::Poisson),
        "even" => Ok(lab::schedule::Spacing::Even),
        _ => Err(format!("{text:?}: write poisson or even")),
    }
}

/// A relative speed: a positive number up to 1000.
fn parse_speed(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 1000.0 => Ok(s),
        _ => Err(format!(
            "{text:?}: a speed is a number above 0 and at most 1000, like 0.5 or 2"
        )),
    }
}

/// A backend's cost distribution: milliseconds (`25`, `2.5`, meaning `const:MS`), or the
/// load generator's `const:MS`, `uniform:A:B`, `lognormal:MU:SIGMA`.
fn parse_cost(text: &str) -> Result<lab::schedule::Cost, String> {
    let cost = if text.parse::<f64>().is_ok() {
        format!("const:{text}").parse()
    } else {
        text.parse()
    };
    cost.map_err(|e| {
        format!("{e} (write milliseconds such as 25, or const:MS, uniform:A:B, lognormal:MU:SIGMA)")
    })
}

/// A probability: a number from 0 to 1.
fn parse_probability(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!(
            "{text:?}: a probability is a number from 0 to 1, like 0.05"
        )),
    }
}

/// A sampling interval: a humantime duration ("1s", "500ms") of at least 10 ms.
fn parse_interval(text: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| format!("{text:?}: {e}"))?;
    if d < std::time::Duration::from_millis(10) {
        return Err(format!("{text:?}: the interval is at least 10ms"));
    }
    Ok(d)
}

async fn run_agent(settings: agent::Settings) -> anyhow::Result<ExitCode> {
    let (listen, haproxy, push) = (
        settings.listen,
        settings.haproxy_agent,
        settings.push.clone(),
    );
    let interval = settings.interval;
    let stop = shutdown_signal();
    let agent = agent::Agent::bind(settings)
        .await
        .with_context(|| match haproxy {
            Some(h) => format!("cannot listen on {listen} or {h}"),
            None => format!("cannot listen on {listen}"),
        })?;
    tracing::info!(
        listen = %agent.http_addr()?,
        interval = %humantime::format_duration(interval),
        "agent listening"
    );
    if let Some(addr) = agent.haproxy_addr() {
        tracing::info!(haproxy_agent = %addr?, "agent-check listening");
    }
    if let Some(target) = push {
        tracing::info!(server = %target.server, key = %target.key(), "pushing reports to memcached");
    }
    agent.run(stop).await;
    tracing::info!("agent stopped");
    Ok(ExitCode::SUCCESS)
}

/// Resolves on the first SIGTERM or SIGINT. The handlers are installed at the call, not at
/// the first poll, so a signal that arrives before the future is awaited is not lost (nor
/// fatal: without a handler SIGTERM kills the process).
fn shutdown_signal() -> impl Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing a SIGINT handler");
    async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    }
}
