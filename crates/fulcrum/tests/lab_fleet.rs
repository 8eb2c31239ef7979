//! `fulcrum lab run` with a fleet: a contender with `instances = 3` starts three fulcrum
//! processes over the same backends, the load generator spreads the requests over them, and
//! each instance's own metrics (read from its admin listener before it stops) show its share.

mod common;

use common::{ChildGuard, TempDir};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// 100 requests a second, evenly spaced, for 2 s: 200 requests of 5 ms on two backends.
const FLEET: &str = r#"
seed = 5

[[backend]]
name = "a"
workers = 4

[[backend]]
name = "b"
workers = 4

[traffic]
pattern = "constant:100"
spacing = "even"
duration = "2s"
cost = "const:5"
timeout = "2s"
clients = 10

[[algorithm]]
name = "least_conn x3"
algorithm = "least_conn"
instances = 3

[[algorithm]]
name = "least_conn x1"
algorithm = "least_conn"
"#;

#[test]
fn three_instances_each_answer_a_third_and_the_results_are_whole() {
    let dir = TempDir::new("lab-fleet", "thirds");
    let file = dir.0.join("fleet.toml");
    std::fs::write(&file, FLEET).unwrap();
    let out = dir.0.join("out");
    let log = dir.0.join("run.log");
    let mut run = ChildGuard(
        Command::new(env!("CARGO_BIN_EXE_fulcrum"))
            .args(["lab", "run"])
            .arg(&file)
            .arg("--out")
            .arg(&out)
            .arg("--quiet")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(dir.0.join("run.err")).unwrap())
            .spawn()
            .unwrap(),
    );
    // Two runs of 2 s, each starting two backends and up to three balancers.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = run.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the run took over 60 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = std::fs::read_to_string(dir.0.join("run.err")).unwrap_or_default();
    assert!(status.success(), "{err}");

    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let mut lines = csv.lines();
    let columns: Vec<&str> = lines.next().unwrap().split(',').collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2, "{csv}");
    let at = |row: &[&str], name: &str| -> f64 {
        let k = columns.iter().position(|c| *c == name).unwrap();
        row[k].parse().unwrap()
    };
    assert_eq!(rows[0][0], "least_conn x3", "{csv}");
    for row in &rows {
        assert_eq!(at(row, "requests"), 200.0, "{csv}");
        assert_eq!(at(row, "timeouts") + at(row, "failures"), 0.0, "{csv}");
        assert!(at(row, "p50_ms") >= 5.0, "{csv}");
        let shares = at(row, "share_a") + at(row, "share_b");
        assert!((shares - 1.0).abs() < 0.01, "{csv}");
    }

    // Arrival k went to instance k mod 3: each answered exactly its share of 200 (67, 67,
    // 66), by its own count.
    let work = out.join("work");
    let instances = std::fs::read_to_string(work.join("r1-0-instances.csv")).unwrap();
    let served: Vec<u64> = instances
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(served, [67, 67, 66], "{instances}");
    for k in 1..=3 {
        assert!(work.join(format!("r1-0-i{k}-fulcrum.log")).is_file());
    }
    // One instance: no fleet files.
    assert!(!work.join("r1-1-instances.csv").exists());
    assert!(work.join("r1-1-fulcrum.log").is_file());
}
