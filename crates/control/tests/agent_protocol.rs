//! The agent protocol end to end: what `fulcrum agent` writes (the document it serves at
//! `GET /load` and pushes to memcached, under the key it pushes to) read back by the control
//! plane's own path (`source::parse_load` for a polled agent, `memcached::key` and
//! `memcached::read_record` for a pushed record).

use std::time::Duration;

use agent::push::Target;
use agent::report::Sample;
use balance::weights::LoadReport;
use control::{memcached, source};

/// Reports an agent may hold: ordinary ones, the edges of [0, 1], and values a broken counter
/// could give (the agent writes them clamped, NaN as fully used).
fn reports() -> Vec<LoadReport> {
    let odd = [
        0.0,
        -0.0,
        1.0,
        0.42,
        1e-9,
        0.99995,
        0.123456789,
        1.02,
        -0.01,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        f64::MIN_POSITIVE,
    ];
    let mut reports = Vec::new();
    for (i, &v) in odd.iter().enumerate() {
        let w = odd[(i + 3) % odd.len()];
        let x = odd[(i + 7) % odd.len()];
        reports.push(LoadReport {
            cpu: v,
            mem: w,
            disk: x,
            net: v,
            container_mem: w,
        });
    }
    reports
}

/// Whether `read` is `written` as the agent sends it: sanitized, to four decimals.
fn same(written: &LoadReport, read: &LoadReport) -> bool {
    let w = written.sanitized();
    [
        (w.cpu, read.cpu),
        (w.mem, read.mem),
        (w.disk, read.disk),
        (w.net, read.net),
        (w.container_mem, read.container_mem),
    ]
    .iter()
    .all(|&(w, r)| (w - r).abs() <= 0.5e-4 + 1e-12)
}

#[test]
fn what_the_agent_serves_the_control_plane_reads() {
    for report in reports() {
        let json = Sample {
            report,
            ts_ms: 1_700_000_000_123,
        }
        .to_json();
        let read = source::parse_load(&json).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&json));
        });
        assert!(same(&report, &read), "{report:?} read as {read:?}");
    }
}

#[test]
fn what_the_agent_pushes_the_control_plane_reads_under_the_same_key() {
    let backend = "10.0.0.1:8080";
    let target = Target::new("memcached://127.0.0.1:11211", backend).unwrap();
    assert_eq!(target.key(), memcached::key(backend));
    let ts_ms = 1_700_000_000_123;
    for report in reports() {
        let record = Sample { report, ts_ms }.to_json();
        let read = memcached::read_record(&target.key(), &record, ts_ms, Duration::from_secs(9))
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&record)));
        assert!(same(&report, &read), "{report:?} read as {read:?}");
    }
}
