//! The cost of one request's worth of balancing: `Pool::pick` and `Pool::complete`, for every
//! algorithm, at 3, 100, 1,000 and 10,000 backends.
//!
//! Keys for the hash algorithms rotate through 4,096 client addresses (as octets or as text,
//! whichever the algorithm hashes), so a lookup is not always the same cache line. Completions
//! report a latency that varies by backend, so load-aware algorithms see differing backends.
//! Run with `cargo bench -p balance --bench pick`; docs/algorithms.md quotes the results.
//!
//! `pick-impl/ALGORITHM/{reference,indexed}/N`: for the algorithms that have both (issue 27),
//! the linear code they had and the O(log n) index, side by side in the same run, at the sizes
//! around where one overtakes the other and up to 10,000 backends (docs/performance.md, "O(log
//! n) picks"). The `pick/` rows are what fulcrum runs: the faster of the two for the size.

use std::hint::black_box;
use std::net::Ipv4Addr;

use balance::{Affinity, Algorithm, BackendSpec, Implementation, Nanos, Options, Outcome, Pool};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const SIZES: [usize; 4] = [3, 100, 1_000, 10_000];
const KEYS: usize = 4096;
/// Sizes at which the two implementations are compared.
const IMPL_SIZES: [usize; 9] = [3, 8, 16, 32, 64, 100, 1_000, 3_000, 10_000];
/// The algorithms that have an index.
const INDEXED: [Algorithm; 8] = Implementation::INDEXED;

fn pool(algorithm: Algorithm, options: &Options, n: usize) -> Pool {
    pool_as(algorithm, options, n, Implementation::Auto)
}

fn pool_as(algorithm: Algorithm, options: &Options, n: usize, imp: Implementation) -> Pool {
    let specs: Vec<BackendSpec> = (0..n)
        .map(|i| {
            let ip = Ipv4Addr::from(0x0a00_0000 + i as u32 + 1);
            BackendSpec::new(1 + (i % 3) as u32).named(&format!("{ip}:8080"))
        })
        .collect();
    Pool::new_as(algorithm, options, &specs, &[], 1, imp)
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

/// One request's worth of balancing on `pool`: a pick, then its completion with a latency
/// that grows with the backend's index.
#[inline]
fn one_request(pool: &mut Pool, key: Option<&[u8]>, now: &mut u64) {
    *now += 1_000;
    let ticket = pool
        .pick(black_box(key), &[], Nanos(*now))
        .expect("a backend");
    // Latency grows with the backend's index: slower backends further down.
    *now += 100_000 + 1_000 * (ticket.backend().index() as u64 % 64);
    pool.complete(ticket, Outcome::Success, Nanos(*now));
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
                    let key = hashed.then(|| &keys[i % KEYS][..]);
                    one_request(&mut pool, key, &mut now);
                });
            });
        }
        group.finish();
    }
}

/// The linear code and the index of each algorithm that has both, side by side.
fn reference_against_index(c: &mut Criterion) {
    for algorithm in INDEXED {
        let options = Options::default();
        let mut group = c.benchmark_group(format!("pick-impl/{algorithm}"));
        group.throughput(Throughput::Elements(1));
        for n in IMPL_SIZES {
            for (name, imp) in [
                ("reference", Implementation::Reference),
                ("indexed", Implementation::Indexed),
            ] {
                let mut pool = pool_as(algorithm, &options, n, imp);
                let mut now = 1_000_000u64;
                group.bench_function(BenchmarkId::new(name, n), |b| {
                    b.iter(|| one_request(&mut pool, None, &mut now));
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, pick_and_complete, reference_against_index);
criterion_main!(benches);
