//! The cost of one request's worth of balancing: `Pool::pick` and `Pool::complete`, for every
//! algorithm, at 3, 100, 1,000 and 10,000 backends.
//!
//! Keys for the hash algorithms rotate through 4,096 client addresses (as octets or as text,
//! whichever the algorithm hashes), so a lookup is not always the same cache line. Completions
//! report a latency that varies by backend, so load-aware algorithms see differing backends.
//! Run with `cargo bench -p balance --bench pick`; docs/algorithms.md quotes the results.

use std::hint::black_box;
use std::net::Ipv4Addr;

use balance::{Affinity, Algorithm, BackendSpec, Nanos, Options, Outcome, Pool};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const SIZES: [usize; 4] = [3, 100, 1_000, 10_000];
const KEYS: usize = 4096;

fn pool(algorithm: Algorithm, options: &Options, n: usize) -> Pool {
    let specs: Vec<BackendSpec> = (0..n)
        .map(|i| {
            let ip = Ipv4Addr::from(0x0a00_0000 + i as u32 + 1);
            BackendSpec::new(1 + (i % 3) as u32).named(&format!("{ip}:8080"))
        })
        .collect();
    Pool::new(algorithm, options, &specs, &[], 1)
}

/// Client keys as the proxy hands them to `algorithm`.
fn keys(algorithm: Algorithm) -> Vec<Vec<u8>> {
    (0..KEYS as u32)
        .map(|i| {
            let ip = Ipv4Addr::from(0xc000_0000 | i.wrapping_mul(2_654_435_761) >> 8);
            match algorithm.affinity() {
                Some(Affinity::AddressOctets) => ip.octets().to_vec(),
                Some(Affinity::Key) => ip.to_string().into_bytes(),
                None => Vec::new(),
            }
        })
        .collect()
}

/// Every algorithm with its default options, and `hash` with `consistent = true` too.
fn cases() -> Vec<(String, Algorithm, Options)> {
    let mut cases: Vec<_> = Algorithm::ALL
        .iter()
        .map(|&a| (a.name().to_owned(), a, Options::default()))
        .collect();
    let consistent = Options {
        consistent: true,
        ..Options::default()
    };
    cases.push(("hash_consistent".to_owned(), Algorithm::Hash, consistent));
    cases
}

fn pick_and_complete(c: &mut Criterion) {
    for (label, algorithm, options) in cases() {
        let mut group = c.benchmark_group(format!("pick/{label}"));
        group.throughput(Throughput::Elements(1));
        for n in SIZES {
            let mut pool = pool(algorithm, &options, n);
            let keys = keys(algorithm);
            let hashed = algorithm.uses_affinity();
            let mut i = 0usize;
            let mut now = 1_000_000u64;
            group.bench_function(BenchmarkId::from_parameter(n), |b| {
                b.iter(|| {
                    i = i.wrapping_add(1);
                    now += 1_000;
                    let key = hashed.then(|| &keys[i % KEYS][..]);
                    let ticket = pool
                        .pick(black_box(key), &[], Nanos(now))
                        .expect("a backend");
                    // Latency grows with the backend's index: slower backends further down.
                    now += 100_000 + 1_000 * (ticket.backend().index() as u64 % 64);
                    pool.complete(ticket, Outcome::Success, Nanos(now));
                });
            });
        }
        group.finish();
    }
}

criterion_group!(benches, pick_and_complete);
criterion_main!(benches);
