//! `fulcrum agent`: the backend-side load reporter started from the command line — its
//! settings from the arguments, its listeners bound, and served until SIGTERM, SIGINT or
//! SIGQUIT. What it measures and how it answers is the `agent` crate's.

use std::process::ExitCode;

use anyhow::Context as _;

use super::runtime;
use crate::cli::AgentArgs;
use crate::{LOG, logs, shutdown};

/// Runs the agent; 2 when `--push` is not a memcached URL.
pub fn run(args: AgentArgs) -> anyhow::Result<ExitCode> {
    let push = match (args.push, args.name) {
        (Some(url), Some(name)) => match agent::push::Target::new(&url, &name) {
            Ok(target) => Some(target),
            Err(e) => {
                eprintln!("fulcrum: error: --push: {e}");
                return Ok(ExitCode::from(2));
            }
        },
        _ => None,
    };
    let settings = agent::Settings {
        listen: args.listen,
        interval: args.interval,
        net_speed: args.net_speed,
        cgroup_root: args.cgroup_root,
        push,
        haproxy_agent: args.haproxy_agent,
        probe_target: args
            .probe_target
            .map(|addr| agent::target::Target::new(addr, args.probe_path)),
    };
    let _logs = logs::init("info");
    runtime(1).and_then(|rt| rt.block_on(serve(settings)))
}

/// Binds the agent's listeners and serves until the operator's stop.
async fn serve(settings: agent::Settings) -> anyhow::Result<ExitCode> {
    let (listen, haproxy, push) = (
        settings.listen,
        settings.haproxy_agent,
        settings.push.clone(),
    );
    let interval = settings.interval;
    let stop = shutdown::signal();
    let agent = agent::Agent::bind(settings)
        .await
        .with_context(|| match haproxy {
            Some(h) => format!("cannot listen on {listen} or {h}"),
            None => format!("cannot listen on {listen}"),
        })?;
    tracing::info!(
        target: LOG,
        listen = %agent.http_addr()?,
        interval = %humantime::format_duration(interval),
        "agent listening"
    );
    if let Some(addr) = agent.haproxy_addr() {
        tracing::info!(target: LOG, haproxy_agent = %addr?, "agent-check listening");
    }
    if let Some(target) = push {
        tracing::info!(target: LOG, server = %target.server, key = %target.key(), "pushing reports to memcached");
    }
    agent.run(stop).await;
    tracing::info!(target: LOG, "agent stopped");
    Ok(ExitCode::SUCCESS)
}
