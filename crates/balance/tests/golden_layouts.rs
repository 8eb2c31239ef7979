//! Golden layouts of the hash tables: the sorted ketama points of a small upstream and the
//! Maglev table of a small prime, plus Maglev's per-backend entry counts at 65537. A change to
//! how a ring or table is built shows up here as a diff. `UPDATE_GOLDEN=1 cargo test -p balance
//! --test golden_layouts` rewrites the files (then review the diff).
//!
//! The ketama file is not only compared with our own output: it is checked against nginx's own
//! answers (`tests/golden/nginx-chash_equal.txt`, recorded by `scripts/nginx-golden.sh` over the
//! same three servers), looking keys up in the recorded points with no use of our ring code.

use std::fmt::Write as _;
use std::path::PathBuf;

use balance::algorithms::MaglevTable;
use balance::ring::Ring;

/// The three servers of nginx's `chash_equal` upstream in the nginx golden data.
const THREE: [(&str, u32); 3] = [
    ("127.0.0.1:18001", 1),
    ("127.0.0.1:18002", 1),
    ("127.0.0.1:18003", 1),
];

/// The five servers of the weighted upstreams in the nginx golden data.
const FIVE: [(&str, u32); 5] = [
    ("127.0.0.1:18001", 1),
    ("127.0.0.1:18002", 2),
    ("127.0.0.1:18003", 1),
    ("127.0.0.1:18004", 3),
    ("127.0.0.1:18005", 1),
];

fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// Compares `text` with the golden file, or rewrites the file when `UPDATE_GOLDEN=1`.
fn golden(name: &str, text: &str) {
    let path = path(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::write(&path, text).expect("write golden file");
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; regenerate with UPDATE_GOLDEN=1", path.display()));
    if want != text {
        let line = want
            .lines()
            .zip(text.lines())
            .position(|(a, b)| a != b)
            .map_or(want.lines().count().min(text.lines().count()), |i| i);
        panic!(
            "{} differs from what the code builds, first at line {}; if the change is \
             intended, rerun with UPDATE_GOLDEN=1 and review the diff",
            path.display(),
            line + 1
        );
    }
}

fn servers_header(out: &mut String, servers: &[(&str, u32)]) {
    for (name, w) in servers {
        writeln!(out, "# server {name} weight={w}").unwrap();
    }
}

fn ketama_layout() -> String {
    let ring = Ring::from_servers(THREE);
    let mut out = String::from(
        "# nginx ketama ring (hash $key consistent): 160 points per weight unit, sorted,\n\
         # duplicates dropped; \"hash server\" per point. Written by tests/golden_layouts.rs.\n",
    );
    servers_header(&mut out, &THREE);
    for p in ring.points() {
        writeln!(out, "{} {}", p.hash, ring.group_name(p.group)).unwrap();
    }
    out
}

#[test]
fn ketama_layout_is_golden() {
    let text = ketama_layout();
    assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 480);
    golden("ketama-3x1.txt", &text);
}

/// The recorded points, looked up as nginx does (first point ≥ crc32(key), wrapping), give
/// nginx's own answer for every key nginx was asked about.
#[test]
fn ketama_layout_agrees_with_nginx() {
    let layout = std::fs::read_to_string(path("ketama-3x1.txt")).expect("ketama golden file");
    let points: Vec<(u32, &str)> = layout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (h, s) = l.split_once(' ').expect("\"hash server\"");
            (h.parse().expect("a hash"), s)
        })
        .collect();
    assert!(
        points.windows(2).all(|w| w[0].0 < w[1].0),
        "sorted, no duplicates"
    );
    let nginx = std::fs::read_to_string(path("nginx-chash_equal.txt")).expect("nginx golden");
    assert!(nginx.contains("# algorithm: hash consistent"));
    for (name, w) in THREE {
        assert!(nginx.contains(&format!("# server {name} weight={w}")));
    }
    let mut checked = 0;
    for line in nginx.lines().filter(|l| !l.starts_with('#')) {
        let (key, want) = line.split_once(' ').expect("\"key backend\"");
        let h = crc32fast::hash(key.as_bytes());
        let owner = points.iter().find(|(p, _)| *p >= h).unwrap_or(&points[0]).1;
        assert_eq!(owner, want, "{key}");
        checked += 1;
    }
    assert!(checked >= 1000);
}

#[test]
fn maglev_table_is_golden() {
    let table = MaglevTable::build(FIVE, 251);
    let mut out = String::from(
        "# Maglev lookup table, M = 251, xxh64 seeds 0 (offset) and 1 (skip), weighted turns;\n\
         # \"slot server\" per entry. Written by tests/golden_layouts.rs.\n",
    );
    servers_header(&mut out, &FIVE);
    for (slot, id) in table.entries().iter().enumerate() {
        writeln!(out, "{slot} {}", FIVE[id.index()].0).unwrap();
    }
    assert_eq!(table.len(), 251);
    golden("maglev-251.txt", &out);
}

#[test]
fn maglev_counts_are_golden_and_follow_weights() {
    let table = MaglevTable::build(FIVE, 65537);
    let counts = table.counts(FIVE.len());
    let mut out = String::from(
        "# Maglev entries per server, M = 65537 (the default); \"server entries\".\n\
         # Written by tests/golden_layouts.rs.\n",
    );
    servers_header(&mut out, &FIVE);
    for ((name, w), c) in FIVE.iter().zip(&counts) {
        writeln!(out, "{name} {c}").unwrap();
        // Turns are in exact proportion to the weights (total 8); only the last round is cut.
        let want = 65537.0 * f64::from(*w) / 8.0;
        assert!((*c as f64 - want).abs() <= 3.0, "{name}: {c} vs {want}");
    }
    golden("maglev-65537-counts.txt", &out);
}
