//! What choosing a route costs: `split_target` (and `normalize` when it says so) and
//! `Table::select` over the 50 routes of
//! `bench/compare.sh`'s `routes` case (10 hosts; an exact path, three prefixes and a regex or
//! a fourth prefix each), for the requests that case sends, in turn.

use criterion::{Criterion, criterion_group, criterion_main};
use routes::{Headers, Host, PathMatch, Request, Spec, Table, normalize, split_target};

struct NoHeaders;
impl Headers for NoHeaders {
    fn has(&self, _: &str, _: &[u8]) -> bool {
        false
    }
}

fn specs() -> Vec<Spec> {
    let mut out = Vec::new();
    for i in 0..10 {
        let host = vec![format!("h{i}.example.com")];
        let prefix = |p: &str, wins| PathMatch::Prefix {
            prefix: p.into(),
            wins,
        };
        let mut paths = vec![
            PathMatch::Exact("/status".into()),
            prefix("/api/", false),
            prefix("/app/", false),
            prefix("/static/", true),
        ];
        paths.push(if i < 5 {
            PathMatch::Regex {
                pattern: "\\.(png|jpg|css)$".into(),
                nocase: false,
            }
        } else {
            prefix("/v2/", false)
        });
        for path in paths {
            out.push(Spec {
                hosts: host.clone(),
                path,
                ..Spec::default()
            });
        }
    }
    out
}

fn requests() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for i in 0..10 {
        let host = format!("h{i}.example.com");
        let last = if i < 5 { "/img/logo.png" } else { "/v2/orders" };
        for path in [
            "/status",
            "/api/users/42",
            "/app/settings",
            "/static/site.css",
            last,
        ] {
            out.push((host.clone(), path.to_owned()));
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let table = Table::build(&specs()).expect("the routes build");
    let requests = requests();
    let mut buffer = Vec::with_capacity(256);
    let mut n = 0;
    c.bench_function("normalize_and_select_50_routes", |b| {
        b.iter(|| {
            let (host, target) = &requests[n % requests.len()];
            n += 1;
            // As the proxy does: a path already normal is used as it is.
            let (path, query, normal) = split_target(target.as_bytes());
            let path: &[u8] = if normal {
                path
            } else {
                normalize(path, &mut buffer).expect("a valid path");
                &buffer
            };
            table.select(&Request {
                host: Host::Sent(host.as_bytes()),
                path,
                method: b"GET",
                query,
                headers: &NoHeaders,
            })
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
