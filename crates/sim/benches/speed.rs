//! Simulated requests per second of wall time: the supermarket model on 1,000 single-slot
//! backends at λ = 0.9, 100,000 requests a run, for round_robin (the speed target is
//! 5 million per second for a 1,000-backend round_robin scenario) and random_two.
//! `cargo bench -p sim` reports the rate as elements per second.

use balance::Algorithm;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sim::supermarket::{Setup, run};

fn speed(c: &mut Criterion) {
    let mut group = c.benchmark_group("supermarket_1000_backends");
    let requests = 100_000;
    group.throughput(Throughput::Elements(requests));
    group.sample_size(20);
    for algorithm in [Algorithm::RoundRobin, Algorithm::RandomTwo] {
        let setup = Setup {
            servers: 1000,
            load: 0.9,
            algorithm,
            requests,
            warmup: 0,
            seed: 1,
        };
        group.bench_function(algorithm.name(), |b| b.iter(|| run(&setup)));
    }
    group.finish();
}

criterion_group!(benches, speed);
criterion_main!(benches);
