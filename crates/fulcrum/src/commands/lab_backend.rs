//! `fulcrum lab backend`: one emulated backend, served until SIGTERM, SIGINT or SIGQUIT (or
//! until it dies as `--die-after` asks). Its capacity model and faults are the lab's
//! [`lab::backend`]; here, the arguments turned into them.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use super::runtime;
use crate::cli::lab::BackendArgs;
use crate::{LOG, logs, shutdown};

/// Runs the backend.
pub fn run(args: BackendArgs) -> anyhow::Result<ExitCode> {
    let _logs = logs::init("info");
    let capacity = capacity(&args);
    let faults = lab::backend::Faults {
        fail_rate: args.fail_rate,
        fail_status: args.fail_status,
        deadline: args.deadline,
        stall_after: args.stall_after,
        die_after: args.die_after,
    };
    runtime(1).and_then(|rt| rt.block_on(serve(args.listen, args.name, capacity, faults)))
}

/// The server of limited capacity `--workers` asks for, or none: every request served at
/// once after its cost.
fn capacity(args: &BackendArgs) -> Option<lab::backend::Capacity> {
    args.workers.map(|workers| lab::backend::Capacity {
        workers,
        speed: args.speed,
        max_queue: args.max_queue,
        mode: args.mode,
        cost: args.cost.unwrap_or(lab::schedule::Cost::Const { ms: 0.0 }),
        antagonist: args.antagonist,
        epoch: args
            .epoch_ms
            .map(|ms| std::time::UNIX_EPOCH + Duration::from_millis(ms)),
        seed: args.seed,
        footprint: lab::backend::footprint::Footprint {
            mem: args.mem,
            mem_base: args.mem_base.unwrap_or(0.0),
            mem_per_request: args.mem_per_request.unwrap_or(0.0),
            net: args.net,
            net_per_request: args.net_per_request.unwrap_or(0.0),
        },
    })
}

/// Starts the backend and serves until the operator's stop or its own death.
async fn serve(
    listen: SocketAddr,
    name: Option<String>,
    capacity: Option<lab::backend::Capacity>,
    faults: lab::backend::Faults,
) -> anyhow::Result<ExitCode> {
    let name = name.unwrap_or_else(|| listen.to_string());
    let backend = lab::Backend::start_faulty(&name, listen, capacity, faults)
        .await
        .with_context(|| format!("cannot start the backend on {listen}"))?;
    tracing::info!(
        target: LOG,
        listen = %backend.addr(),
        name = %name,
        capacity = %capacity.map_or_else(
            || "unlimited".to_owned(),
            |c| format!("{} workers at speed {}, queue {}", c.workers, c.speed, c.max_queue)
        ),
        faults = %faults_in_words(&faults),
        "lab backend listening"
    );
    tokio::select! {
        () = shutdown::signal() => backend.kill().await,
        () = backend.died() => tracing::info!(
            target: LOG,
            requests = backend.requests(),
            "lab backend died after --die-after requests, as asked; exiting"
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// The faults a backend was started with, as its flags name them (`none` without any).
fn faults_in_words(f: &lab::backend::Faults) -> String {
    let mut words = Vec::new();
    if f.fail_rate > 0.0 {
        words.push(format!(
            "fail_rate={} fail_status={}",
            f.fail_rate, f.fail_status
        ));
    }
    if let Some(d) = f.deadline {
        words.push(format!("deadline={}ms", d.as_millis()));
    }
    if let Some(n) = f.stall_after {
        words.push(format!("stall_after={n}"));
    }
    if let Some(n) = f.die_after {
        words.push(format!("die_after={n}"));
    }
    if words.is_empty() {
        "none".to_owned()
    } else {
        words.join(" ")
    }
}
