//! `fulcrum sim` end to end: the binary resolves contenders with fulcrum's configuration
//! parser, writes the lab's three outputs, skips nginx and HAProxy, and refuses what it cannot
//! do with a message that says what and where; `fulcrum lab run` refuses a simulator's file.

mod common;

use common::TempDir;
use std::path::Path;
use std::process::{Command, Output};

fn fulcrum(args: &[&str], extra: &[&Path]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fulcrum"));
    c.args(args);
    for p in extra {
        c.arg(p);
    }
    c.output().unwrap()
}

const SCENARIO: &str = r#"
description = "two backends, one slower; fulcrum against nginx"
seed = 9
[[backend]]
name = "fast"
workers = 4
[[backend]]
name = "slow"
workers = 4
speed = 0.5
[traffic]
pattern = "constant:200"
duration = "5s"
cost = "lognormal:3:0.5"
[[algorithm]]
name = "least_conn"
[[algorithm]]
name = "round_robin"
options = { retries = 1 }
[[algorithm]]
name = "nginx least_conn"
compare = "nginx"
algorithm = "least_conn"
"#;

#[test]
fn sim_writes_the_labs_outputs_and_skips_other_balancers() {
    let dir = TempDir::new("sim", "ok");
    let file = dir.0.join("two.toml");
    std::fs::write(&file, SCENARIO).unwrap();
    let out = dir.0.join("out");
    let o = fulcrum(
        &["sim", "--quiet", "--out", out.to_str().unwrap()],
        &[&file],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains("\"nginx least_conn\" runs nginx or HAProxy"),
        "{stderr}"
    );
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    assert!(lines[0].starts_with("algorithm,requests,mean_ms,p50_ms,p90_ms,p95_ms,p99_ms,p999_ms,max_ms,timeouts,failures,throughput_rps,peak_concurrency,util_stddev"));
    assert!(lines[1].starts_with("least_conn,"), "{csv}");
    assert!(lines[2].starts_with("round_robin,"), "{csv}");
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("simulated (fulcrum sim, virtual time)"), "{md}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("fulcrum sim"));
    // The same again: byte for byte.
    let again = dir.0.join("again");
    let o = fulcrum(
        &["sim", "--quiet", "--out", again.to_str().unwrap()],
        &[&file],
    );
    assert!(o.status.success());
    assert_eq!(
        csv,
        std::fs::read_to_string(again.join("results.csv")).unwrap()
    );
}

#[test]
fn bad_input_is_refused_with_what_and_where() {
    let dir = TempDir::new("sim", "bad");
    let out = dir.0.join("out");
    let out = out.to_str().unwrap();
    // A file that is not there.
    let missing = dir.0.join("missing.toml");
    let o = fulcrum(&["sim", "--quiet", "--out", out], &[&missing]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot read the scenario"));
    // An option fulcrum's configuration refuses: named with the contender.
    let file = dir.0.join("bad.toml");
    std::fs::write(&file, SCENARIO.replace("retries = 1", "retries = -3")).unwrap();
    let o = fulcrum(&["sim", "--quiet", "--out", out], &[&file]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        stderr.contains("algorithm \"round_robin\"") && stderr.contains("retries"),
        "{stderr}"
    );
    // A [sim] knob out of range.
    std::fs::write(&file, format!("{SCENARIO}\n[sim]\nbalancers = 0\n")).unwrap();
    let o = fulcrum(&["sim", "--quiet", "--out", out], &[&file]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(stderr.contains("sim.balancers = 0"), "{stderr}");
    // Only nginx: nothing to simulate.
    let only = r#"
description = "x"
[[backend]]
name = "a"
[traffic]
pattern = "constant:10"
duration = "1s"
[[algorithm]]
name = "n"
compare = "nginx"
algorithm = "least_conn"
"#;
    std::fs::write(&file, only).unwrap();
    let o = fulcrum(&["sim", "--quiet", "--out", out], &[&file]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no fulcrum contender to simulate"));
}

#[test]
fn the_lab_refuses_a_simulators_scenario() {
    let dir = TempDir::new("sim", "lab");
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/scenarios/sim-stale.toml");
    let out = dir.0.join("out");
    let o = fulcrum(
        &["lab", "run", "--quiet", "--out", out.to_str().unwrap()],
        &[&file],
    );
    assert!(!o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("has a [sim] section") && stderr.contains("fulcrum sim"),
        "{stderr}"
    );
}
