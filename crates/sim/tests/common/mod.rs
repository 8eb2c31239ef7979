//! What the simulator's tests share: scenarios from text, contenders built as fulcrum's
//! configuration parser would (nginx's defaults: `max_fails = 1`, `fail_timeout = 10s`).

#![allow(dead_code)]

use std::time::{Duration, SystemTime};

use balance::{Algorithm, BackendSpec, Options, Policy};
use lab::run::Results;
use lab::scenario::Scenario;
use sim::Contender;

pub fn scenario(text: &str) -> Scenario {
    Scenario::parse(text, "test").expect("a valid scenario")
}

/// `algorithm` over the scenario's backends, in the scenario's order (no backups).
pub fn contender(s: &Scenario, algorithm: &str) -> Contender {
    contender_with(s, algorithm, |b| b)
}

pub fn contender_with(
    s: &Scenario,
    algorithm: &str,
    backend: impl Fn(BackendSpec) -> BackendSpec,
) -> Contender {
    let plans = s.backend_plans();
    Contender {
        label: algorithm.to_owned(),
        policy: Policy {
            algorithm: algorithm.parse::<Algorithm>().expect("an algorithm"),
            options: Options::default(),
            primaries: plans
                .iter()
                .map(|p| backend(BackendSpec::new(p.spec.weight).named(&p.name)))
                .collect(),
            backups: Vec::new(),
            retries: None,
            next_upstream: balance::NextUpstream::DEFAULT,
            retry_budget: None,
            queue: 0,
            queue_timeout: Duration::from_secs(60),
            poll_interval: Duration::from_secs(1),
            stale_after: 3,
        },
        plan_of: (0..plans.len()).collect(),
    }
}

pub fn play(s: &Scenario, contenders: &[Contender]) -> Results {
    sim::play::play(s, contenders, SystemTime::UNIX_EPOCH, &|_, _| {})
        .expect("the scenario plays")
        .results
}
