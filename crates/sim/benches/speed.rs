//! Simulated requests per second of wall time: 1,000 single-slot backends, Poisson arrivals at
//! λ = 0.9, exponential costs of mean 1 s (the supermarket's shape), 1,000,000 requests per
//! iteration through the whole cluster model (pool, servers, tally). Throughput is reported in
//! requests: criterion's "elem/s" is simulated requests per second.

use balance::{Algorithm, BackendSpec, Options};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use lab::scenario::Scenario;
use sim::{Contender, Knobs};

const REQUESTS: u64 = 1_000_000;

fn scenario() -> Scenario {
    let text = format!(
        r#"
seed = 1
[[backend]]
name = "s"
count = 1000
workers = 1
max_queue = 100000000
[traffic]
cost = "exp:1000"
timeout = "1h"
clients = 1000
[sim]
requests = {REQUESTS}
offered_load = [0.9]
[[algorithm]]
name = "round_robin"
"#
    );
    Scenario::parse(&text, "speed").expect("a valid scenario")
}

fn contender(s: &Scenario, algorithm: Algorithm) -> Contender {
    let n = s.backend_plans().len();
    Contender {
        label: algorithm.name().to_owned(),
        policy: balance::Policy {
            algorithm,
            options: Options::default(),
            primaries: (0..n).map(|_| BackendSpec::new(1)).collect(),
            backups: Vec::new(),
            retries: None,
            next_upstream: balance::NextUpstream::DEFAULT,
            retry_budget: None,
            queue: 0,
            queue_timeout: std::time::Duration::from_secs(60),
            poll_interval: std::time::Duration::from_secs(1),
            stale_after: 3,
        },
        plan_of: (0..n).collect(),
    }
}

fn speed(c: &mut Criterion) {
    let s = scenario();
    let knobs = Knobs::of(&s);
    let traffic = s.traffic().expect("traffic");
    let mut group = c.benchmark_group("cluster 1000 backends λ 0.9");
    group.throughput(Throughput::Elements(REQUESTS));
    group.sample_size(10);
    for algorithm in [Algorithm::RoundRobin, Algorithm::RandomTwo] {
        let contender = contender(&s, algorithm);
        group.bench_function(algorithm.name(), |b| {
            b.iter(|| sim::cluster::run(&s, &traffic, &contender, &knobs, 1, &mut |_| {}).events)
        });
    }
    group.finish();
}

criterion_group!(benches, speed);
criterion_main!(benches);
