//! `fulcrum lab run`: one scenario, every contender in turn, on the same seeded trace.
//!
//! **Paired repetitions.** Repetition `r` draws everything — the trace and every backend's
//! costs and failures — from the scenario's seed plus `r` (as the simulator does,
//! `sim::play`), and every contender gets that same draw: each repetition is one paired
//! comparison, which is what the reports' win counts and intervals rest on.
//!
//! For each repetition and each contender (interleaved, so that a slow minute of a shared
//! machine spreads over all of them) the runner starts the scenario's emulated backends
//! (`fulcrum lab backend` processes), a balancer in front of them (`fulcrum run` with a
//! generated configuration, or nginx or HAProxy configured the same way), waits until every
//! port answers, replays the trace through the balancer with the open-loop generator while it
//! samples every backend's `GET /load` four times a second, and stops every process again.
//! Fresh backends for every run: no queue, no counter and no antagonist phase carries over.
//!
//! **Cleaning up.** Every child is started in its own process group, through `setpriv
//! --pdeathsig KILL` where it exists (util-linux), so the kernel kills it when the runner dies,
//! even by SIGKILL; every child handle also kills its process when dropped, which covers an
//! error and SIGINT/SIGTERM (the command drops the run). The parent-death signal is tied to
//! the thread that forked the child, so children are spawned from the run's own future, never
//! from a spawned task (the command runs it with `block_on` on the main thread).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, bail};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::client::Client;
use std::io::IsTerminal as _;

use crate::load::{Mode, Outcome, Plan, Summary};
use crate::scenario::{
    BackendPlan, Balancer, HaproxyAlgorithm, Load, NginxAlgorithm, Scenario, Traffic,
};
use crate::tally::{Request, Tally};

/// Where the run's files go, and what to start.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The `fulcrum` executable (backends and fulcrum's balancer are its subcommands).
    pub exe: PathBuf,
    /// The output directory: results, the report, and `work/` (configurations and logs).
    pub out: PathBuf,
    /// Progress lines (and the generator's bar) on stderr.
    pub progress: bool,
}

/// One backend's `GET /load` at one moment of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadSample {
    /// From the start of the load.
    pub at: Duration,
    /// The backend's index in [`Results::backends`].
    pub backend: usize,
    pub cpu: f64,
    pub mem: f64,
    pub net: f64,
}

/// One run of one contender.
#[derive(Debug, Clone)]
pub struct Measured {
    pub label: String,
    pub repetition: u32,
    /// Its requests, aggregated (the plots draw the first repetition's).
    pub tally: Tally,
    /// The backends' `/load` (the first repetition's; empty for later ones).
    pub samples: Vec<LoadSample>,
    pub row: Row,
    /// The offered load of the run, when a simulated experiment varies it (the supermarket
    /// model's λ): `results.csv` then has an `offered_load` column. `None` in the lab.
    pub offered_load: Option<f64>,
}

/// A contender's numbers from one run (or the medians over several): the columns of
/// `results.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub summary: Summary,
    /// Answered requests (any status) per second of the trace's length.
    pub throughput_rps: f64,
    /// The most requests in flight at once, seen from the clients.
    pub peak_concurrency: u64,
    /// The standard deviation of the backends' reported CPU utilization across backends,
    /// averaged over the run's samples (seed 000's σ).
    pub util_stddev: f64,
    /// The share of the answered requests each backend served, in [`Results::backends`] order.
    pub shares: Vec<f64>,
    /// Attempts that reached a backend per request sent (retries included): the load
    /// amplification. Known in the simulator; `None` in the lab.
    pub attempts_per_request: Option<f64>,
}

/// Everything a scenario's run measured.
#[derive(Debug, Clone)]
pub struct Results {
    pub scenario: Scenario,
    pub traffic: Traffic,
    /// The backends' names, in the scenario's order.
    pub backends: Vec<String>,
    /// The contenders' labels, in the scenario's order.
    pub labels: Vec<String>,
    pub runs: Vec<Measured>,
    /// When the run started.
    pub started: SystemTime,
    /// Played by the simulator (`fulcrum sim`) in virtual time, not on real sockets.
    pub simulated: bool,
    pub elapsed: Duration,
}

/// How long a balancer or backend may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Between the backends' start and the load, when an antagonist's phase must line up.
const ANTAGONIST_LEAD: Duration = Duration::from_millis(2500);
/// How often every backend's `/load` is read during a run.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Runs `scenario` to its end and returns what it measured (it writes no results itself;
/// see [`crate::report`]).
pub async fn run(scenario: &Scenario, settings: &Settings) -> anyhow::Result<Results> {
    if scenario.sim.is_some() {
        bail!(
            "the scenario {:?} has a [sim] section: it is the simulator's; run it with `fulcrum sim`",
            scenario.name
        );
    }
    let traffic = scenario.traffic().map_err(anyhow::Error::msg)?;
    let work = settings.out.join("work");
    std::fs::create_dir_all(&work)
        .with_context(|| format!("cannot create the directory {}", work.display()))?;
    let plans = scenario.backend_plans();
    for stale in crate::report::FILES {
        let _ = std::fs::remove_file(settings.out.join(stale));
    }
    preflight(scenario, &traffic, &plans, settings).await?;
    let started = SystemTime::now();
    let clock = Instant::now();
    let n = scenario.algorithms.len();
    let total = scenario.repetitions as usize * n;
    let mut runs = Vec::with_capacity(total);
    for repetition in 0..scenario.repetitions {
        let seed = repetition_seed(scenario.seed, repetition);
        let trace = trace(&traffic, seed);
        // Each repetition starts one contender later, so none is always first (on a cold
        // machine) or always last.
        for i in 0..n {
            let k = (i + repetition as usize) % n;
            let contender = &scenario.algorithms[k];
            let balancer = contender.balancer().map_err(anyhow::Error::msg)?;
            if settings.progress {
                eprintln!(
                    "[{}/{total}] {} (repetition {} of {})",
                    runs.len() + 1,
                    contender.name,
                    repetition + 1,
                    scenario.repetitions
                );
            }
            let tag = format!("r{}-{k}", repetition + 1);
            let one = Contender {
                balancer,
                options: &contender.options,
                instances: contender.instances,
                spread: contender.spread(),
                distinct_seeds: contender.distinct_seeds,
                tag: &tag,
                seed,
            };
            let (outcomes, samples) = run_one(scenario, &traffic, &plans, &one, &trace, settings)
                .await
                .with_context(|| format!("running {}", contender.name))?;
            let tally = tally(&outcomes, &plans, &traffic);
            drop(outcomes);
            let row = row(&tally, &samples, &traffic);
            // The plots show the first repetition; later ones keep only their numbers.
            let samples = if repetition == 0 { samples } else { Vec::new() };
            if settings.progress {
                eprintln!(
                    "      p50 {:.1} ms  p99 {:.1} ms  timeouts {}  failures {}  util σ {:.3}",
                    row.summary.p50_ms,
                    row.summary.p99_ms,
                    row.summary.timeouts,
                    row.summary.failed,
                    row.util_stddev
                );
            }
            runs.push(Measured {
                label: contender.name.clone(),
                repetition,
                tally,
                samples,
                row,
                offered_load: None,
            });
        }
    }
    Ok(Results {
        simulated: false,
        scenario: scenario.clone(),
        traffic,
        backends: plans.iter().map(|p| p.name.clone()).collect(),
        labels: scenario.algorithms.iter().map(|a| a.name.clone()).collect(),
        runs,
        started,
        elapsed: clock.elapsed(),
    })
}

struct Contender<'a> {
    balancer: Balancer,
    options: &'a toml::Table,
    /// Balancer processes (a fleet when more than one), and how they share the requests.
    instances: u32,
    spread: crate::load::Spread,
    /// Each instance its own seed ([`instance_options`]).
    distinct_seeds: bool,
    /// Names this run's files.
    tag: &'a str,
    /// The repetition's seed (the backends' draws come from it).
    seed: u64,
}

/// The seed of repetition `r` (from 0): the scenario's plus `r`, for every contender alike,
/// in the lab as in the simulator.
pub fn repetition_seed(seed: u64, repetition: u32) -> u64 {
    seed.wrapping_add(u64::from(repetition))
}

/// The trace of a repetition, from its seed: an open loop's schedule, or the costs a closed
/// loop takes in order.
fn trace(traffic: &Traffic, seed: u64) -> Vec<crate::schedule::Arrival> {
    match &traffic.load {
        Load::Open(pattern) => crate::schedule::trace(
            *pattern,
            traffic.spacing,
            traffic.duration,
            traffic.cost,
            traffic.clients,
            seed,
        ),
        Load::Closed(_) => {
            crate::schedule::costs(traffic.cost, crate::schedule::CLOSED_LOOP_COSTS, seed)
        }
    }
}

/// One run: start, load, stop. Every child is killed when this returns (or is dropped).
async fn run_one(
    scenario: &Scenario,
    traffic: &Traffic,
    plans: &[BackendPlan],
    contender: &Contender<'_>,
    trace: &[crate::schedule::Arrival],
    settings: &Settings,
) -> anyhow::Result<(Vec<Outcome>, Vec<LoadSample>)> {
    let work = settings.out.join("work");
    let mut children = Children::default();
    let antagonist = plans.iter().any(|p| p.spec.antagonist.is_some());
    let epoch = SystemTime::now() + ANTAGONIST_LEAD;
    let epoch_at = Instant::now() + ANTAGONIST_LEAD;
    let epoch_ms = epoch
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());

    let mut addrs = Vec::with_capacity(plans.len());
    for (i, plan) in plans.iter().enumerate() {
        let addr = free_addr()?;
        // Each backend its own stream of draws, the same for every contender of a repetition.
        let mut args = backend_args(plan, addr, contender.seed ^ (i as u64 + 1));
        if antagonist {
            args.extend(["--epoch-ms".into(), epoch_ms.to_string()]);
        }
        let log = work.join(format!("{}-backend-{}.log", contender.tag, plan.name));
        children.spawn(&plan.name, &settings.exe, &args, &log)?;
        addrs.push(addr);
    }
    for (plan, addr) in plans.iter().zip(&addrs) {
        children.wait_listening(&plan.name, *addr).await?;
    }

    let fleet = start_instances(
        &mut children,
        scenario,
        traffic,
        plans,
        &addrs,
        contender,
        settings,
    )
    .await?;
    if antagonist {
        let now = Instant::now();
        if now > epoch_at {
            bail!(
                "the backends and the balancer took {} ms longer to start than the {} ms allowed before the antagonists' time zero, so this contender would see the drops at other moments of the trace than the others; the machine is too busy for this run",
                (now - epoch_at).as_millis(),
                ANTAGONIST_LEAD.as_millis()
            );
        }
        tokio::time::sleep_until(epoch_at).await;
    }

    let mode = match traffic.load {
        Load::Open(_) => Mode::Open,
        Load::Closed(users) => Mode::Closed {
            users,
            duration: traffic.duration,
            clients: traffic.clients,
        },
    };
    let plan = Plan {
        target: fleet
            .listens
            .first()
            .copied()
            .context("no balancer was started")?,
        path: traffic.path.clone(),
        trace: trace.to_vec(),
        timeout: traffic.timeout,
        mode,
        progress: (settings.progress && std::io::stderr().is_terminal())
            .then(crate::load::progress::bar),
    };
    let (outcomes, samples) = {
        let done = std::sync::atomic::AtomicBool::new(false);
        let load = async {
            let outcomes = crate::load::run_fleet(&plan, &fleet.listens, contender.spread).await;
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            outcomes
        };
        let sampling = sample_loads(&addrs, &done);
        tokio::join!(load, sampling)
    };
    if !fleet.admins.is_empty() {
        let served = served_by_instances(&fleet.admins).await;
        write_instances(&work, contender.tag, &fleet, &served, settings.progress)?;
    }
    children.stop().await;
    Ok((outcomes, samples))
}

/// A contender's balancer processes, listening.
struct Fleet {
    /// Where each instance listens for the load.
    listens: Vec<SocketAddr>,
    /// Each instance's admin listener, read after the load: fulcrum fleets only (nginx and
    /// HAProxy are configured without one).
    admins: Vec<SocketAddr>,
}

/// Starts `contender.instances` balancers with the same configuration, each on its own port
/// over the same backends `addrs`, and waits until each listens. One instance is `balancer`,
/// its files named by the run's tag; a fleet's are `balancer-K`, their files `TAG-iK`.
async fn start_instances(
    children: &mut Children,
    scenario: &Scenario,
    traffic: &Traffic,
    plans: &[BackendPlan],
    addrs: &[SocketAddr],
    contender: &Contender<'_>,
    settings: &Settings,
) -> anyhow::Result<Fleet> {
    let work = settings.out.join("work");
    let n = contender.instances.max(1);
    let mut fleet = Fleet {
        listens: Vec::new(),
        admins: Vec::new(),
    };
    for k in 1..=n {
        let (name, tag) = if n == 1 {
            ("balancer".to_owned(), contender.tag.to_owned())
        } else {
            (format!("balancer-{k}"), format!("{}-i{k}", contender.tag))
        };
        let listen = free_addr()?;
        let admin = match contender.balancer {
            Balancer::Fulcrum(_) if n > 1 => Some(free_addr()?),
            _ => None,
        };
        let options = instance_options(contender.options, k, contender.distinct_seeds);
        let setup = balancer_setup(
            contender.balancer,
            &options,
            scenario,
            traffic,
            plans,
            addrs,
            (listen, admin),
            &work,
            &tag,
            &settings.exe,
        )?;
        let log = work.join(format!("{tag}-{}.log", setup.kind));
        children.spawn(&name, &setup.program, &setup.run, &log)?;
        children.wait_listening(&name, listen).await?;
        fleet.listens.push(listen);
        fleet.admins.extend(admin);
    }
    Ok(fleet)
}

/// The `[[upstream]]` options of fleet instance `k` (from 1): the contender's, and with
/// `distinct_seeds` the seed plus `k − 1` (instance 1 keeps the configured seed, default 0), so
/// that the instances' random draws differ as they would if each were seeded apart.
fn instance_options(options: &toml::Table, k: u32, distinct_seeds: bool) -> toml::Table {
    let mut options = options.clone();
    if distinct_seeds {
        let seed = options
            .get("seed")
            .and_then(toml::Value::as_integer)
            .unwrap_or(0);
        let seed = seed.saturating_add(i64::from(k) - 1);
        options.insert("seed".into(), toml::Value::from(seed));
    }
    options
}

/// The requests each fulcrum instance answered (the sum of its `fulcrum_requests_total`), read
/// from its admin listener's `/metrics`; `None` for one that did not answer.
async fn served_by_instances(admins: &[SocketAddr]) -> Vec<Option<u64>> {
    let mut served = Vec::with_capacity(admins.len());
    for &admin in admins {
        let mut client = Client::new(admin);
        let read = tokio::time::timeout(Duration::from_secs(2), client.get("/metrics"));
        served.push(match read.await {
            Ok(Ok(reply)) if reply.status.is_success() => Some(requests_total(&reply.text())),
            _ => None,
        });
    }
    served
}

/// The sum of the `fulcrum_requests_total` series of a Prometheus exposition (`name{labels}
/// value [timestamp]` lines; the lab's label values hold no `}`).
fn requests_total(exposition: &str) -> u64 {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("fulcrum_requests_total"))
        .filter_map(|rest| {
            let value = match rest.strip_prefix('{') {
                Some(labels) => labels.split_once('}')?.1,
                None => rest,
            };
            // Not another metric whose name goes on.
            if !value.starts_with(' ') {
                return None;
            }
            value.split_whitespace().next()?.parse::<f64>().ok()
        })
        .map(|v| v as u64)
        .sum()
}

/// Writes `TAG-instances.csv` into `work` (each instance's address and the requests it
/// answered, empty when its metrics could not be read) and, with `progress`, prints them.
fn write_instances(
    work: &Path,
    tag: &str,
    fleet: &Fleet,
    served: &[Option<u64>],
    progress: bool,
) -> anyhow::Result<()> {
    let mut csv = String::from("instance,listen,requests\n");
    for (k, (listen, n)) in fleet.listens.iter().zip(served).enumerate() {
        let n = n.map(|n| n.to_string()).unwrap_or_default();
        csv.push_str(&format!("{},{listen},{n}\n", k + 1));
    }
    let file = work.join(format!("{tag}-instances.csv"));
    std::fs::write(&file, csv).with_context(|| format!("cannot write {}", file.display()))?;
    if progress {
        let counts: Vec<String> = served
            .iter()
            .map(|n| n.map_or("?".to_owned(), |n| n.to_string()))
            .collect();
        eprintln!("      requests per instance: {}", counts.join(" / "));
    }
    Ok(())
}

/// Reads every backend's `/load` every [`SAMPLE_EVERY`] until `done`, all backends at once.
async fn sample_loads(
    addrs: &[SocketAddr],
    done: &std::sync::atomic::AtomicBool,
) -> Vec<LoadSample> {
    let start = Instant::now();
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !done.load(std::sync::atomic::Ordering::Relaxed) {
        tick.tick().await;
        let at = start.elapsed();
        let mut reads = tokio::task::JoinSet::new();
        for (backend, addr) in addrs.iter().copied().enumerate() {
            reads.spawn(async move {
                let read = tokio::time::timeout(SAMPLE_EVERY, Client::new(addr).get("/load")).await;
                (backend, read)
            });
        }
        while let Some(Ok((backend, read))) = reads.join_next().await {
            let Ok(Ok(reply)) = read else { continue };
            let Ok(report) = agent::protocol::parse_load(&reply.body) else {
                continue;
            };
            samples.push(LoadSample {
                at,
                backend,
                cpu: report.cpu,
                mem: report.mem,
                net: report.net,
            });
        }
    }
    samples
}

/// The numbers of one run.
pub fn measure(
    outcomes: &[Outcome],
    samples: &[LoadSample],
    plans: &[BackendPlan],
    traffic: &Traffic,
) -> Row {
    row(&tally(outcomes, plans, traffic), samples, traffic)
}

/// The outcomes of one run, aggregated: each answer's `X-Backend` to its index in `plans`,
/// the peak concurrency from [`peak_concurrency`].
pub fn tally(outcomes: &[Outcome], plans: &[BackendPlan], traffic: &Traffic) -> Tally {
    let mut tally = Tally::new(
        plans.len(),
        traffic.duration,
        traffic.timeout,
        crate::tally::ramp_hold(&traffic.load),
    );
    let index: std::collections::HashMap<&str, usize> = plans
        .iter()
        .enumerate()
        .map(|(k, p)| (p.name.as_str(), k))
        .collect();
    for o in outcomes {
        let backend = o.backend.as_deref().and_then(|b| index.get(b).copied());
        tally.record(&Request::of(o, backend));
    }
    tally.set_peak_concurrency(peak_concurrency(outcomes, traffic.timeout));
    tally
}

/// The numbers of one run from its tally and its backends' samples (those within the
/// traffic's length count): the lab's and the simulator's.
pub fn row(tally: &Tally, samples: &[LoadSample], traffic: &Traffic) -> Row {
    let answered = tally.answered();
    let shares = tally
        .served()
        .iter()
        .map(|&n| n as f64 / answered.max(1) as f64)
        .collect();
    let during: Vec<LoadSample> = samples
        .iter()
        .filter(|s| s.at <= traffic.duration)
        .copied()
        .collect();
    Row {
        summary: tally.summary(),
        throughput_rps: answered as f64 / traffic.duration.as_secs_f64(),
        peak_concurrency: tally.peak_concurrency(),
        util_stddev: util_stddev(&during),
        shares,
        attempts_per_request: None,
    }
}

/// The most requests in flight at once: each from when it left to when its answer ended (its
/// timeout for one that timed out, at once for one that failed).
pub fn peak_concurrency(outcomes: &[Outcome], timeout: Duration) -> u64 {
    let mut events: Vec<(Duration, i8)> = Vec::with_capacity(outcomes.len() * 2);
    for o in outcomes {
        let end = match o.ended {
            Some(end) => end,
            None if o.timed_out => o.intended + timeout,
            None => o.started,
        };
        events.push((o.started, 1));
        events.push((end.max(o.started), -1));
    }
    // Ends before starts at the same instant.
    events.sort_unstable();
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, step) in events {
        now += i64::from(step);
        peak = peak.max(now);
    }
    peak as u64
}

/// Seed 000's σ: at each sampling instant, the standard deviation of the backends'
/// utilization across backends — each backend's busier resource, CPU or IO bandwidth (an `io`
/// backend's work shows as `net`) — averaged over the instants with at least two backends.
pub fn util_stddev(samples: &[LoadSample]) -> f64 {
    let mut by_instant: std::collections::BTreeMap<Duration, Vec<f64>> = Default::default();
    for s in samples {
        by_instant.entry(s.at).or_default().push(s.cpu.max(s.net));
    }
    let sigmas: Vec<f64> = by_instant
        .values()
        .filter(|v| v.len() >= 2)
        .map(|v| {
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
        })
        .collect();
    if sigmas.is_empty() {
        0.0
    } else {
        sigmas.iter().sum::<f64>() / sigmas.len() as f64
    }
}

/// `fulcrum lab backend` arguments for `plan` on `addr`.
fn backend_args(plan: &BackendPlan, addr: SocketAddr, seed: u64) -> Vec<String> {
    let b = &plan.spec;
    let mut args: Vec<String> = vec![
        "lab".into(),
        "backend".into(),
        "--listen".into(),
        addr.to_string(),
        "--name".into(),
        plan.name.clone(),
        "--workers".into(),
        b.workers.to_string(),
        "--speed".into(),
        b.speed.to_string(),
        "--max-queue".into(),
        b.max_queue.to_string(),
        "--mode".into(),
        b.mode.clone(),
        "--seed".into(),
        seed.to_string(),
    ];
    let mut opt = |flag: &str, v: Option<String>| {
        if let Some(v) = v {
            args.push(flag.into());
            args.push(v);
        }
    };
    opt("--cost", b.cost.clone());
    opt("--antagonist", b.antagonist.clone());
    opt("--fail-rate", b.fail_rate.map(|p| p.to_string()));
    opt("--fail-status", b.fail_status.map(|s| s.to_string()));
    opt("--deadline", b.deadline.clone());
    opt("--stall-after", b.stall_after.map(|n| n.to_string()));
    opt("--die-after", b.die_after.map(|n| n.to_string()));
    opt("--mem", b.mem.clone());
    opt("--mem-base", b.mem_base.clone());
    opt("--mem-per-request", b.mem_per_request.clone());
    opt("--net", b.net.clone());
    opt("--net-per-request", b.net_per_request.clone());
    args
}

fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

/// fulcrum's configuration for a contender: one listener, one upstream over the backends,
/// the scenario's timeout as the read timeout, each backend's `/load` as its agent when the
/// algorithm reads load reports.
pub fn fulcrum_config(
    algorithm: balance::Algorithm,
    options: &toml::Table,
    scenario: &Scenario,
    plans: &[BackendPlan],
    addrs: &[SocketAddr],
    listen: SocketAddr,
    timeout: Duration,
) -> anyhow::Result<String> {
    use toml::Value;
    let mut upstream = options.clone();
    upstream.insert("name".into(), Value::from("lab"));
    upstream.insert("algorithm".into(), Value::from(algorithm.name()));
    upstream.insert("read_timeout".into(), Value::from(millis(timeout)));
    let backends = plans
        .iter()
        .zip(addrs)
        .map(|(plan, addr)| {
            let mut b = toml::Table::new();
            b.insert("addr".into(), Value::from(addr.to_string()));
            b.insert("weight".into(), Value::from(i64::from(plan.spec.weight)));
            if plan.spec.backup {
                b.insert("backup".into(), Value::from(true));
            }
            if plan.spec.max_conns > 0 {
                let max_conns = i64::from(plan.spec.max_conns);
                b.insert("max_conns".into(), Value::from(max_conns));
            }
            if algorithm.reads_load_reports() && !plan.spec.backup {
                b.insert("agent".into(), Value::from(addr.to_string()));
            }
            Value::Table(b)
        })
        .collect::<Vec<_>>();
    upstream.insert("backend".into(), Value::Array(backends));
    let mut listener = toml::Table::new();
    listener.insert("listen".into(), Value::from(listen.to_string()));
    listener.insert("upstream".into(), Value::from("lab"));
    let mut root = toml::Table::new();
    root.insert(
        "workers".into(),
        Value::from(i64::from(scenario.proxy.workers)),
    );
    root.insert("access_log".into(), Value::from(false));
    root.insert("shutdown_timeout".into(), Value::from("1s"));
    root.insert(
        "listener".into(),
        Value::Array(vec![Value::Table(listener)]),
    );
    root.insert(
        "upstream".into(),
        Value::Array(vec![Value::Table(upstream)]),
    );
    toml::to_string(&root).context("writing fulcrum's configuration")
}

/// nginx configured like fulcrum's contender: one process (`master_process off`, so that the
/// parent-death signal covers all of it), keep-alive to the backends, the same read timeout
/// and nginx's defaults otherwise (`max_fails=1 fail_timeout=10s`, as fulcrum's).
fn nginx_config(
    algorithm: NginxAlgorithm,
    plans: &[BackendPlan],
    addrs: &[SocketAddr],
    listen: SocketAddr,
    timeout: Duration,
    prefix: &Path,
) -> String {
    let method = match algorithm {
        NginxAlgorithm::WeightedRoundRobin => "",
        NginxAlgorithm::LeastConn => "least_conn;",
        NginxAlgorithm::IpHash => "ip_hash;",
        NginxAlgorithm::Hash => "hash $remote_addr consistent;",
        NginxAlgorithm::Random => "random;",
        NginxAlgorithm::RandomTwo => "random two least_conn;",
    };
    let mut servers = String::new();
    for (plan, addr) in plans.iter().zip(addrs) {
        servers.push_str(&format!(
            "        server {addr} weight={}{}{};\n",
            plan.spec.weight,
            match plan.spec.max_conns {
                0 => String::new(),
                n => format!(" max_conns={n}"),
            },
            if plan.spec.backup { " backup" } else { "" }
        ));
    }
    format!(
        "daemon off;
master_process off;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    upstream lab {{
        {method}
{servers}        keepalive 256;
    }}
    server {{
        listen {listen};
        location / {{
            proxy_pass http://lab;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_read_timeout {timeout};
            proxy_connect_timeout 5s;
        }}
    }}
}}
",
        prefix = prefix.display(),
        timeout = millis(timeout),
    )
}

/// HAProxy configured like fulcrum's contender: the same threads and read timeout; a failed
/// connection retried on another server, each server at most once (`retries` = servers − 1,
/// `option redispatch 1`); a server whose connection fails taken out at once and checked
/// again every 10 s (`observe layer4 error-limit 1 on-error mark-down`, `check inter 10s`), as
/// fulcrum's and nginx's `max_fails=1 fail_timeout=10s`.
fn haproxy_config(
    algorithm: HaproxyAlgorithm,
    plans: &[BackendPlan],
    addrs: &[SocketAddr],
    listen: SocketAddr,
    timeout: Duration,
    threads: u32,
) -> anyhow::Result<String> {
    let balance = match algorithm {
        HaproxyAlgorithm::RoundRobin => "roundrobin",
        HaproxyAlgorithm::LeastConn => "leastconn",
        HaproxyAlgorithm::Source => "source",
        HaproxyAlgorithm::RandomTwo => "random(2)",
    };
    let mut servers = String::new();
    for (plan, addr) in plans.iter().zip(addrs) {
        if plan.spec.weight > 256 {
            bail!(
                "backend {:?}: weight {} is above HAProxy's 256",
                plan.name,
                plan.spec.weight
            );
        }
        servers.push_str(&format!(
            "    server {} {addr} weight {}{}{} check inter 10s fall 1 rise 1 observe layer4 error-limit 1 on-error mark-down\n",
            plan.name,
            plan.spec.weight,
            match plan.spec.max_conns {
                0 => String::new(),
                n => format!(" maxconn {n}"),
            },
            if plan.spec.backup { " backup" } else { "" }
        ));
    }
    Ok(format!(
        "global
    nbthread {threads}
    maxconn 4096
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server {timeout}
    retries {retries}
    option redispatch 1
frontend lab
    bind {listen}
    default_backend lab
backend lab
    balance {balance}
{servers}",
        timeout = millis(timeout),
        retries = plans.len().saturating_sub(1).max(1),
    ))
}

/// A free loopback address: a port the kernel picks, released at once for the child to
/// bind (a child that cannot is reported by [`Children::wait_listening`]). On an address of
/// 127.0.0.0/8 of this process's own (`127.200-249.x.1`, by process id), not 127.0.0.1: in
/// the moment between the release and the child's bind, the kernel may give the same port on
/// 127.0.0.1 to any other program's outgoing connection or listener — with tests and
/// benchmarks running beside a lab run that happened, and the child failed with "Address
/// already in use". Other programs' sockets are on 127.0.0.1 (or the load generator's client
/// addresses, 127.1-17.x.y), so they do not take this address's ports.
fn free_addr() -> anyhow::Result<SocketAddr> {
    let pid = std::process::id();
    let ip = std::net::Ipv4Addr::new(127, 200 + (pid % 50) as u8, (pid / 50 % 250) as u8, 1);
    let listener = std::net::TcpListener::bind((ip, 0)).context("finding a free port")?;
    listener.local_addr().context("finding a free port")
}

/// A contender's balancer, its configuration written: what to run, and how to check it.
struct Setup {
    /// `fulcrum`, `nginx` or `haproxy`: names its log.
    kind: &'static str,
    program: PathBuf,
    run: Vec<String>,
    check: Vec<String>,
}

/// Writes the configuration of `balancer` over `addrs`, listening on `listen` (and for
/// fulcrum, with an admin listener on `admin` when given), into `dir` (files named by `tag`);
/// `exe` is fulcrum.
#[allow(clippy::too_many_arguments)]
fn balancer_setup(
    balancer: Balancer,
    options: &toml::Table,
    scenario: &Scenario,
    traffic: &Traffic,
    plans: &[BackendPlan],
    addrs: &[SocketAddr],
    (listen, admin): (SocketAddr, Option<SocketAddr>),
    dir: &Path,
    tag: &str,
    exe: &Path,
) -> anyhow::Result<Setup> {
    let write = |file: &Path, text: String| {
        std::fs::write(file, text).with_context(|| format!("cannot write {}", file.display()))
    };
    Ok(match balancer {
        Balancer::Fulcrum(algorithm) => {
            let file = dir.join(format!("{tag}-fulcrum.toml"));
            let config = fulcrum_config(
                algorithm,
                options,
                scenario,
                plans,
                addrs,
                listen,
                traffic.timeout,
            )?;
            write(&file, with_admin(config, admin)?)?;
            let file = file.display().to_string();
            Setup {
                kind: "fulcrum",
                program: exe.to_owned(),
                run: vec!["run".into(), "--config".into(), file.clone()],
                check: vec!["check".into(), "--config".into(), file],
            }
        }
        Balancer::Nginx(algorithm) => {
            let prefix = dir.join(format!("{tag}-nginx"));
            std::fs::create_dir_all(prefix.join("logs"))
                .and_then(|()| std::fs::create_dir_all(prefix.join("tmp")))
                .with_context(|| format!("cannot create {}", prefix.display()))?;
            let file = prefix.join("nginx.conf");
            write(
                &file,
                nginx_config(algorithm, plans, addrs, listen, traffic.timeout, &prefix),
            )?;
            let run = nginx_args(&prefix, &file);
            let mut check = vec!["-t".into()];
            check.extend(run.iter().cloned());
            Setup {
                kind: "nginx",
                program: PathBuf::from(find_program("nginx")?),
                run,
                check,
            }
        }
        Balancer::Haproxy(algorithm) => {
            let file = dir.join(format!("{tag}-haproxy.cfg"));
            let config = haproxy_config(
                algorithm,
                plans,
                addrs,
                listen,
                traffic.timeout,
                scenario.proxy.workers,
            )?;
            write(&file, config)?;
            let file = file.display().to_string();
            Setup {
                kind: "haproxy",
                program: PathBuf::from(find_program("haproxy")?),
                run: vec!["-db".into(), "-f".into(), file.clone()],
                check: vec!["-c".into(), "-f".into(), file],
            }
        }
    })
}

/// fulcrum's configuration `config` with an `[admin]` listener on `admin`, if any (loopback,
/// so no token is needed; the lab's client names itself `fulcrum.test`).
fn with_admin(config: String, admin: Option<SocketAddr>) -> anyhow::Result<String> {
    let Some(admin) = admin else {
        return Ok(config);
    };
    let mut root: toml::Table = config.parse().context("reading fulcrum's configuration")?;
    let mut table = toml::Table::new();
    table.insert("listen".into(), toml::Value::from(admin.to_string()));
    table.insert(
        "allowed_hosts".into(),
        toml::Value::Array(vec![toml::Value::from("fulcrum.test")]),
    );
    root.insert("admin".into(), toml::Value::Table(table));
    toml::to_string(&root).context("writing fulcrum's configuration")
}

/// nginx's arguments: its prefix, its configuration, and the error log under the prefix from
/// the start (before the configuration is read, nginx writes to its compiled-in one).
fn nginx_args(prefix: &Path, file: &Path) -> Vec<String> {
    vec![
        "-p".into(),
        prefix.display().to_string(),
        "-e".into(),
        prefix.join("logs/error.log").display().to_string(),
        "-c".into(),
        file.display().to_string(),
    ]
}

/// Checks, before anything runs, what would otherwise fail only at a contender's turn: that
/// `setpriv` is there, and that every contender's configuration is one its balancer accepts
/// (`fulcrum check`, `nginx -t`, `haproxy -c`), with stand-in addresses.
async fn preflight(
    scenario: &Scenario,
    traffic: &Traffic,
    plans: &[BackendPlan],
    settings: &Settings,
) -> anyhow::Result<()> {
    if !Path::new(SETPRIV).is_file() {
        bail!(
            "{SETPRIV} is missing: the lab starts every process through it, so that none outlives the run; install util-linux"
        );
    }
    let dir = settings.out.join("work").join("preflight");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let addrs: Vec<SocketAddr> = (0..plans.len())
        .map(|i| SocketAddr::from(([127, 0, 0, 1], 10_000 + i as u16)))
        .collect();
    let listen = SocketAddr::from(([127, 0, 0, 1], 9_999));
    for (k, contender) in scenario.algorithms.iter().enumerate() {
        let balancer = contender.balancer().map_err(anyhow::Error::msg)?;
        let setup = balancer_setup(
            balancer,
            &contender.options,
            scenario,
            traffic,
            plans,
            &addrs,
            // A fleet's admin listener is checked too.
            (
                listen,
                (contender.instances > 1).then(|| SocketAddr::from(([127, 0, 0, 1], 9_998))),
            ),
            &dir,
            &k.to_string(),
            &settings.exe,
        )?;
        let (program, args) = (setup.program.display().to_string(), setup.check);
        let out = Command::new(&program)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .await
            .with_context(|| format!("cannot run {program}"))?;
        if !out.status.success() {
            bail!(
                "algorithm {:?}: its configuration is refused ({program} {}):\n{}{}",
                contender.name,
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    Ok(())
}

/// `name` on the PATH or in /usr/sbin.
fn find_program(name: &str) -> anyhow::Result<String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
        .with_context(|| {
            format!("{name} is not installed: install it (Debian: apt-get install {name}) to compare with it")
        })
}

/// util-linux's `setpriv`, which starts every child with the parent-death signal.
const SETPRIV: &str = "/usr/bin/setpriv";

/// The processes of one run. Dropping it kills every one of them.
#[derive(Debug, Default)]
struct Children {
    running: Vec<(String, Child, PathBuf)>,
}

impl Children {
    /// Starts `program args`, its output into `log`.
    fn spawn(
        &mut self,
        name: &str,
        program: &Path,
        args: &[String],
        log: &Path,
    ) -> anyhow::Result<()> {
        let out = std::fs::File::create(log)
            .with_context(|| format!("cannot create the log {}", log.display()))?;
        let err = out
            .try_clone()
            .with_context(|| format!("cannot open the log {}", log.display()))?;
        let mut command = Command::new(SETPRIV);
        command.args(["--pdeathsig", "KILL", "--"]).arg(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .kill_on_drop(true);
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {} {}", program.display(), args.join(" ")))?;
        self.running.push((name.to_owned(), child, log.to_owned()));
        Ok(())
    }

    /// Waits until `addr` accepts connections; an error, with the end of the child's log, if
    /// `name` exits first or takes longer than [`START_TIMEOUT`].
    async fn wait_listening(&mut self, name: &str, addr: SocketAddr) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return Ok(());
            }
            let Some((_, child, log)) = self.running.iter_mut().find(|(n, ..)| n == name) else {
                bail!("{name} was never started");
            };
            if let Ok(Some(status)) = child.try_wait() {
                bail!(
                    "{name} exited ({status}) before listening on {addr}; its log {}:\n{}",
                    log.display(),
                    tail(log)
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "{name} did not listen on {addr} within {} s; its log {}:\n{}",
                    START_TIMEOUT.as_secs(),
                    log.display(),
                    tail(log)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills every process and waits for each.
    async fn stop(&mut self) {
        for (_, child, _) in &mut self.running {
            let _ = child.start_kill();
        }
        for (_, mut child, _) in self.running.drain(..) {
            let _ = child.wait().await;
        }
    }
}

/// The last lines of a log.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(start_ms: u64, latency_ms: Option<u64>, timed_out: bool) -> Outcome {
        Outcome {
            intended: Duration::from_millis(start_ms),
            started: Duration::from_millis(start_ms),
            latency: latency_ms.map(Duration::from_millis),
            ended: latency_ms.map(|l| Duration::from_millis(start_ms + l)),
            status: latency_ms.map(|_| 200),
            cost_ms: 0.0,
            backend: None,
            timed_out,
            client: 0,
        }
    }

    #[test]
    fn peak_concurrency_counts_overlaps_and_timeouts() {
        let timeout = Duration::from_millis(1000);
        // [0, 100), [50, 150), [100, 200) → 2 at once (the first ends as the third starts);
        // a timeout at 120 lasts to 1120 → 3 at 120.
        let outcomes = vec![
            outcome(0, Some(100), false),
            outcome(50, Some(100), false),
            outcome(100, Some(100), false),
            outcome(120, None, true),
        ];
        assert_eq!(peak_concurrency(&outcomes, timeout), 3);
        assert_eq!(peak_concurrency(&outcomes[..3], timeout), 2);
        assert_eq!(peak_concurrency(&[], timeout), 0);
    }

    #[test]
    fn util_stddev_is_the_mean_spread_across_backends() {
        let s = |ms: u64, backend: usize, cpu: f64| LoadSample {
            at: Duration::from_millis(ms),
            backend,
            cpu,
            mem: 0.0,
            net: 0.0,
        };
        // At 0: 0.2 and 0.6 → σ 0.2; at 250: 0.5 and 0.5 → 0; a lone sample is skipped.
        let samples = [
            s(0, 0, 0.2),
            s(0, 1, 0.6),
            s(250, 0, 0.5),
            s(250, 1, 0.5),
            s(500, 0, 1.0),
        ];
        assert!((util_stddev(&samples) - 0.1).abs() < 1e-12);
        assert_eq!(util_stddev(&[]), 0.0);
    }

    #[test]
    fn configurations_name_every_backend_and_the_timeout() {
        let scenario = Scenario::parse(
            r#"
            [[backend]]
            name = "a"
            weight = 3
            [[backend]]
            name = "b"
            backup = true
            [traffic]
            pattern = "constant:10"
            duration = "1s"
            timeout = "2s"
            [[algorithm]]
            name = "dwlc"
            options = { poll_interval = "1s" }
            "#,
            "t",
        )
        .unwrap();
        let plans = scenario.backend_plans();
        let addrs: Vec<SocketAddr> = vec![
            "127.0.0.1:9001".parse().unwrap(),
            "127.0.0.1:9002".parse().unwrap(),
        ];
        let listen: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let config = fulcrum_config(
            balance::Algorithm::Dwlc,
            &scenario.algorithms[0].options,
            &scenario,
            &plans,
            &addrs,
            listen,
            Duration::from_secs(2),
        )
        .unwrap();
        let parsed: toml::Table = toml::from_str(&config).unwrap();
        let upstream = &parsed["upstream"][0];
        assert_eq!(upstream["algorithm"].as_str(), Some("dwlc"));
        assert_eq!(upstream["read_timeout"].as_str(), Some("2000ms"));
        assert_eq!(upstream["poll_interval"].as_str(), Some("1s"));
        let backends = upstream["backend"].as_array().unwrap();
        assert_eq!(backends[0]["agent"].as_str(), Some("127.0.0.1:9001"));
        assert_eq!(backends[0]["weight"].as_integer(), Some(3));
        assert!(
            backends[1].get("agent").is_none(),
            "a backup is not weighed"
        );
        let nginx = nginx_config(
            NginxAlgorithm::LeastConn,
            &plans,
            &addrs,
            listen,
            Duration::from_secs(2),
            Path::new("/tmp/x"),
        );
        assert!(nginx.contains("least_conn;"));
        assert!(nginx.contains("server 127.0.0.1:9001 weight=3;"));
        assert!(nginx.contains("server 127.0.0.1:9002 weight=1 backup;"));
        assert!(nginx.contains("proxy_read_timeout 2000ms;"));
        let haproxy = haproxy_config(
            HaproxyAlgorithm::LeastConn,
            &plans,
            &addrs,
            listen,
            Duration::from_secs(2),
            2,
        )
        .unwrap();
        assert!(haproxy.contains("balance leastconn"));
        assert!(haproxy.contains("server b 127.0.0.1:9002 weight 1 backup"));
    }

    #[test]
    fn a_fleets_admin_listener_and_its_request_count() {
        let config = "workers = 1\n".to_owned();
        let admin: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let with = with_admin(config.clone(), Some(admin)).unwrap();
        let parsed: toml::Table = toml::from_str(&with).unwrap();
        assert_eq!(parsed["admin"]["listen"].as_str(), Some("127.0.0.1:9"));
        assert_eq!(parsed["workers"].as_integer(), Some(1));
        assert_eq!(with_admin(config.clone(), None).unwrap(), config);
        let exposition = "# TYPE fulcrum_requests_total counter
fulcrum_requests_total{upstream=\"lab\",backend=\"a\",class=\"2xx\"} 40
fulcrum_requests_total{upstream=\"lab\",backend=\"\",class=\"5xx\"} 2
fulcrum_requests_totally_other 7
fulcrum_request_duration_seconds_count{upstream=\"lab\"} 42
";
        assert_eq!(requests_total(exposition), 42);
    }

    #[test]
    fn distinct_seeds_give_each_instance_its_own() {
        let mut options = toml::Table::new();
        options.insert("window".into(), toml::Value::from(20));
        let seed = |t: &toml::Table| t.get("seed").and_then(toml::Value::as_integer);
        assert_eq!(seed(&instance_options(&options, 3, false)), None);
        assert_eq!(seed(&instance_options(&options, 1, true)), Some(0));
        assert_eq!(seed(&instance_options(&options, 3, true)), Some(2));
        options.insert("seed".into(), toml::Value::from(7));
        let third = instance_options(&options, 3, true);
        assert_eq!(seed(&third), Some(9));
        assert_eq!(third["window"].as_integer(), Some(20));
        assert_eq!(seed(&instance_options(&options, 3, false)), Some(7));
    }
}
