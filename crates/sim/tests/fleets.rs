//! Fleets: `[sim] balancers` as a list runs every contender at each fleet size, one row each,
//! and each size really is that many instances (each seeing only its own requests in flight).

mod common;

use common::{contender, play, scenario};

/// 40 single-slot backends at λ = 0.9, clients spread over the instances.
const FLEET: &str = r#"
seed = 5
[[backend]]
name = "s"
count = 40
workers = 1
[traffic]
cost = "exp:100"
clients = 1000
[sim]
balancers = [1, 8]
requests = 40_000
warmup = 10_000
offered_load = [0.9]
[[algorithm]]
name = "least_conn"
"#;

#[test]
fn a_list_of_fleet_sizes_is_one_row_each_and_each_row_is_that_fleet() {
    let s = scenario(FLEET);
    let results = play(&s, &[contender(&s, "least_conn")]);
    let lines = lab::report::lines(&results);
    let labels: Vec<&str> = lines.iter().map(|l| l.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "least_conn λ=0.90 balancers=1",
            "least_conn λ=0.90 balancers=8"
        ]
    );
    // One balancer's least connections sees every request in flight: little wait beyond the
    // 100 ms of service (129 ms mean). Eight instances each see only their own and send to
    // backends that others' requests keep busy (339 ms): far more than noise.
    let (one, eight) = (&lines[0], &lines[1]);
    assert!(one.mean_ms < 150.0, "{one:?}");
    assert!(eight.mean_ms > 2.0 * one.mean_ms, "{one:?} {eight:?}");
    // The row of size 1 is the run a scenario with `balancers = 1` makes, to the byte.
    let single = scenario(&FLEET.replace("balancers = [1, 8]", "balancers = 1"));
    let alone = lab::report::lines(&play(&single, &[contender(&single, "least_conn")]));
    assert_eq!(
        format!("{:?}", alone[0]).replace("λ=0.90\"", "λ=0.90 balancers=1\""),
        format!("{one:?}")
    );
}

#[test]
fn a_bad_fleet_size_is_named() {
    for (value, says) in [
        ("[1, 0]", "sim.balancers = 0: write 1 to 1024"),
        ("[]", "write one count, or a list of 1 to 16"),
        ("[2, 2]", "2 is listed twice"),
        ("-3", "a count, 1 or more"),
        ("\"8\"", "a whole number such as 8, or a list"),
        ("[1, \"x\"]", "balancers"),
    ] {
        let text = FLEET.replace("[1, 8]", value);
        let e = lab::scenario::Scenario::parse(&text, "x").unwrap_err();
        assert!(e.contains(says), "{value}: {e}");
    }
}
