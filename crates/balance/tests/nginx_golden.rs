//! fulcrum's `hash`, `hash` with `consistent`, and `ip_hash` against a real nginx: every key
//! (client address, for `ip_hash`) in `tests/golden/nginx-*.txt` must go to the backend nginx
//! sent it to. The files are recorded by `scripts/nginx-golden.sh` from Debian's nginx, and
//! name the upstream's servers in their header, from which the pool is rebuilt here (same
//! names, weights and order).
//!
//! These files also cross-check the ketama layout golden file independently of our ring code
//! (see `golden_layouts.rs`): the nginx answers for the 3-server upstream must agree with a
//! lookup in the recorded points.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use balance::{Algorithm, BackendSpec, Nanos, Options, Outcome, Pool};

/// One recorded upstream and nginx's answers.
#[derive(Debug)]
struct Golden {
    algorithm: String,
    /// `(name, weight)` in configuration order.
    servers: Vec<(String, u32)>,
    /// `(key, backend name)`.
    answers: Vec<(String, String)>,
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn load(name: &str) -> Golden {
    let path = golden_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/nginx-golden.sh", path.display()));
    let mut golden = Golden {
        algorithm: String::new(),
        servers: Vec::new(),
        answers: Vec::new(),
    };
    for (n, line) in text.lines().enumerate() {
        let at = || format!("{}:{}", path.display(), n + 1);
        if let Some(alg) = line.strip_prefix("# algorithm: ") {
            golden.algorithm = alg.to_owned();
        } else if let Some(server) = line.strip_prefix("# server ") {
            let (name, weight) = server
                .split_once(" weight=")
                .unwrap_or_else(|| panic!("{}: server line without weight", at()));
            let weight = weight
                .parse()
                .unwrap_or_else(|_| panic!("{}: weight", at()));
            golden.servers.push((name.to_owned(), weight));
        } else if !line.starts_with('#') && !line.is_empty() {
            let (key, backend) = line
                .split_once(' ')
                .unwrap_or_else(|| panic!("{}: expected \"key backend\"", at()));
            golden.answers.push((key.to_owned(), backend.to_owned()));
        }
    }
    assert!(!golden.servers.is_empty(), "{}: no servers", path.display());
    golden
}

fn check(file: &str, expect_algorithm: &str) {
    let golden = load(file);
    assert_eq!(golden.algorithm, expect_algorithm, "{file}");
    assert!(golden.answers.len() >= 1000, "{file}: too few keys");
    let (algorithm, options) = match golden.algorithm.as_str() {
        "hash" => (Algorithm::Hash, Options::default()),
        "hash consistent" => (
            Algorithm::Hash,
            Options {
                consistent: true,
                ..Options::default()
            },
        ),
        "ip_hash" => (Algorithm::IpHash, Options::default()),
        other => panic!("{file}: unknown algorithm {other}"),
    };
    let specs: Vec<BackendSpec> = golden
        .servers
        .iter()
        .map(|(name, w)| BackendSpec::new(*w).named(name))
        .collect();
    let mut pool = Pool::new(algorithm, &options, &specs, &[], 0);
    let now = Nanos(1);
    let mut wrong = Vec::new();
    for (key, want) in &golden.answers {
        let affinity: Vec<u8> = if algorithm == Algorithm::IpHash {
            let addr: Ipv4Addr = key.parse().expect("a client address");
            addr.octets().to_vec()
        } else {
            key.as_bytes().to_vec()
        };
        let ticket = pool.pick(Some(&affinity), &[], now).expect("a backend");
        let got = &golden.servers[ticket.backend().index()].0;
        if got != want {
            wrong.push(format!("{key}: nginx {want}, fulcrum {got}"));
        }
        pool.complete(ticket, Outcome::Success, now);
    }
    assert!(
        wrong.is_empty(),
        "{file}: {} of {} keys differ from nginx, e.g. {:?}",
        wrong.len(),
        golden.answers.len(),
        &wrong[..wrong.len().min(5)]
    );
}

#[test]
fn hash_consistent_weighted_matches_nginx() {
    check("nginx-chash_weighted.txt", "hash consistent");
}

#[test]
fn hash_consistent_equal_matches_nginx() {
    check("nginx-chash_equal.txt", "hash consistent");
}

#[test]
fn hash_weighted_matches_nginx() {
    check("nginx-hash_weighted.txt", "hash");
}

#[test]
fn hash_equal_matches_nginx() {
    check("nginx-hash_equal.txt", "hash");
}

#[test]
fn ip_hash_weighted_matches_nginx() {
    check("nginx-ip_hash_weighted.txt", "ip_hash");
}

#[test]
fn ip_hash_equal_matches_nginx() {
    check("nginx-ip_hash_equal.txt", "ip_hash");
}
