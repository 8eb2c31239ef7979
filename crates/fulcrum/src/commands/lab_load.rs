//! `fulcrum lab load`: load against a URL, in open loop (requests on a schedule, latency from
//! the intended send) or closed loop (virtual users, latency from the actual send), and its
//! summary printed. The generator is the lab's [`lab::load`]; here, the arguments turned into
//! its plan, and its outcomes into the trace file and the summary.

use std::process::ExitCode;

use anyhow::Context as _;
use lab::load::{Mode, Plan, Summary};
use lab::schedule::Arrival;

use super::runtime;
use crate::cli::lab::LoadArgs;
use crate::logs;

/// File descriptors kept free beside the closed-loop users' connections (the runtime, the
/// trace file, stdio).
const SPARE_FILES: u64 = 64;

/// Sends the load, writes the trace if asked, prints the summary.
pub fn run(args: LoadArgs) -> anyhow::Result<ExitCode> {
    let _logs = logs::init("warn");
    let (trace, mode) = requests(&args)?;
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
        print_summary(&summary, mode);
    }
    Ok(ExitCode::SUCCESS)
}

/// What is sent, and how it is paced: in open loop every request of the seeded trace; in
/// closed loop the users and the costs their requests take in turn (refused when the users'
/// connections would not fit in the open-files limit).
fn requests(args: &LoadArgs) -> anyhow::Result<(Vec<Arrival>, Mode)> {
    match (args.pattern, args.concurrency) {
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
            Ok((costs, mode))
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
            Ok((trace, Mode::Open))
        }
        // clap requires one of the two.
        (None, None) => anyhow::bail!("give --pattern (open loop) or --concurrency (closed loop)"),
    }
}

/// The human summary: which loop, from when latency counts, then the figures.
fn print_summary(summary: &Summary, mode: Mode) {
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
