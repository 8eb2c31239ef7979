//! What sticky sessions add to a request's balancing: the opaque id of a backend (SipHash-2-4
//! of its address, made for every answer), the lookup of a cookie's id, and a pick that takes
//! the backend a cookie names (`sticky/pick`) against `least_conn`'s own (`sticky/least_conn`),
//! each with its completion, at 3, 100 and 1,000 backends. Run with
//! `cargo bench -p balance --bench sticky`; docs/traffic.md quotes the results.

use std::hint::black_box;
use std::net::Ipv4Addr;

use balance::sticky::{self, StickyTable};
use balance::{Algorithm, BackendId, BackendSpec, Nanos, Options, Outcome, Pool, StickyKey};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const SIZES: [usize; 3] = [3, 100, 1_000];

fn names(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("{}:8080", Ipv4Addr::from(0x0a00_0000 + i as u32 + 1)))
        .collect()
}

fn stick(c: &mut Criterion) {
    let key = StickyKey::new(0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210);
    let mut group = c.benchmark_group("sticky");
    group.throughput(Throughput::Elements(1));
    group.bench_function("id", |b| {
        b.iter(|| key.id(black_box(b"10.0.0.1:8080")));
    });
    for n in SIZES {
        let names = names(n);
        let table = StickyTable::new(&key, names.iter().map(|s| s.as_bytes()));
        let ids: Vec<_> = (0..n).map(|i| table.id(BackendId(i as u32))).collect();
        let specs: Vec<BackendSpec> = names.iter().map(|s| BackendSpec::new(1).named(s)).collect();
        let mut i = 0usize;
        group.bench_function(BenchmarkId::new("lookup", n), |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                table.backend(black_box(ids[i % n].unwrap()))
            });
        });
        for (label, with_cookie) in [("pick", true), ("least_conn", false)] {
            let mut pool = Pool::new(Algorithm::LeastConn, &Options::default(), &specs, &[], 1);
            let mut now = 1_000_000u64;
            group.bench_function(BenchmarkId::new(label, n), |b| {
                b.iter(|| {
                    i = i.wrapping_add(1);
                    now += 1_000;
                    let preferred = with_cookie.then(|| BackendId((i % n) as u32));
                    let t = sticky::pick(&mut pool, black_box(preferred), None, &[], Nanos(now))
                        .expect("a backend");
                    now += 100_000;
                    pool.complete(t, Outcome::Success, Nanos(now));
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, stick);
criterion_main!(benches);
