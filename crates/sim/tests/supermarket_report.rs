//! The report of `lab/scenarios/sim-supermarket.toml` (the scenario itself, shortened: 4·10⁵
//! measured requests after 2·10⁵ of warm-up, one repetition, λ = 0.5 and 0.9): its throughput
//! chart plots answers per second, λ × 1000 for each λ within 2%, and an offered line per λ
//! at the same rate, from the end of the warm-up on (no zeros before the measured window); its
//! table has the theory column.

mod common;

use common::{contender, play, scenario};
use lab::report::figures::{Frame, throughput};
use sim::supermarket::theory;

const SCENARIO: &str = include_str!("../../../lab/scenarios/sim-supermarket.toml");

#[test]
fn the_supermarket_report_plots_answers_per_second_and_the_theory() {
    let text = SCENARIO
        .replace("requests = 10_000_000", "requests = 400_000")
        .replace("warmup = 5_000_000", "warmup = 200_000")
        .replace("repetitions = 10", "repetitions = 1")
        .replace(
            "offered_load = [0.5, 0.7, 0.9, 0.95]",
            "offered_load = [0.5, 0.9]",
        );
    assert!(text.contains("requests = 400_000") && text.contains("[0.5, 0.9]"));
    let s = scenario(&text);
    let n = 1000.0;
    let results = play(&s, &[contender(&s, "random"), contender(&s, "random_two")]);
    // As the report plots them: every contender at every load on one chart, one frame.
    let runs: Vec<&lab::run::Measured> = results.runs.iter().collect();
    assert_eq!(runs.len(), 4);
    let frame = Frame::of(&results, &runs);
    let series = throughput(&runs, &frame);
    let labels: Vec<&str> = series.iter().map(|(label, _)| label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "random λ=0.50",
            "random_two λ=0.50",
            "random λ=0.90",
            "random_two λ=0.90",
            "offered λ=0.50",
            "offered λ=0.90"
        ],
        "four runs and an offered line per load"
    );
    for (label, points) in series {
        // An offered line is the first run's at its load.
        let run = match label.strip_prefix("offered λ=") {
            Some(load) => runs
                .iter()
                .find(|m| m.label.ends_with(&format!(" λ={load}")))
                .copied(),
            None => runs.iter().find(|m| m.label == label).copied(),
        }
        .unwrap_or_else(|| panic!("{label}: no run"));
        let load = run.offered_load.unwrap();
        let t = &run.tally;
        // Buckets of 2 s (the runs are longer than 600 s): a count per bucket would read
        // twice the rate.
        assert_eq!(t.bucket_width().as_secs(), 2);
        // The warm-up is a third of the arrivals: the measured window starts a third in.
        let warmup_end = t.length().as_secs_f64() / 3.0;
        assert!(points.len() > 100, "{label}: {} points", points.len());
        let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64;
        let expected = load * n;
        println!(
            "λ={load} {label}: {mean:.1} answers/s over {} points (expected {expected}), from {:.0} s (warm-up to {warmup_end:.0} s)",
            points.len(),
            points[0].0
        );
        assert!(
            (mean - expected).abs() / expected < 0.02,
            "λ={load} {label}: plotted {mean:.1} per second, expected {expected}"
        );
        assert!(
            points[0].0 >= warmup_end * 0.98,
            "λ={load} {label}: the warm-up is plotted (first point at {} s)",
            points[0].0
        );
        // No cliff: every plotted bucket reads the rate within 20% (Poisson noise over
        // buckets of 2 s is a few %).
        for (x, y) in &points {
            assert!(
                (y - expected).abs() / expected < 0.2,
                "λ={load} {label}: {y:.1} per second at {x:.0} s"
            );
        }
    }
    let md = lab::report::markdown(&results);
    let header = md
        .lines()
        .find(|l| l.starts_with("| algorithm |"))
        .expect("the table");
    assert!(header.ends_with("| theory ms |"), "{header}");
    for (label, load, d) in [
        ("random λ=0.50", 0.5, 1),
        ("random λ=0.90", 0.9, 1),
        ("random_two λ=0.50", 0.5, 2),
        ("random_two λ=0.90", 0.9, 2),
    ] {
        let row = md
            .lines()
            .find(|l| l.starts_with(&format!("| {label} |")))
            .unwrap_or_else(|| panic!("{label}: no row in\n{md}"));
        let expected = format!("| {:.1} |", theory(load, d) * 1000.0);
        assert!(
            row.ends_with(&expected),
            "{label}: {row} (expected {expected})"
        );
    }
    // 1/(1 − 0.5) s = 2000 ms for one choice.
    assert!(md.contains("| 2000.0 |"), "{md}");
    assert!(md.contains("1/(1 − λ)"), "{md}");
    assert!(
        !md.contains("from their `/load`"),
        "the simulator has no /load: {md}"
    );
    let page = lab::report::html(&results).expect("a page");
    assert!(page.contains("<th>theory ms</th>"));
    assert!(page.contains("Answers (and requests offered) per second"));
}
