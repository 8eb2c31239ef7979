//! The verdict: one paragraph saying which contender of each case had the lowest p99 and the
//! lowest mean, by how much against the runner-up and against round robin, and whether the
//! difference can be told from noise. `results.md`, `report.html`, `fulcrum lab run` and
//! `fulcrum demo` all print [`verdict`]'s text.
//!
//! Honest wording: with repetitions, two medians whose 95% intervals overlap are called "not
//! distinguishable" (an overlap is a conservative test, not a significance level); with one
//! repetition there is no interval, and the verdict says the difference is unmeasured.

use super::{Line, cases, lines, split_label};
use crate::run::Results;
use crate::stats::Interval;

/// The paragraph (no line breaks), or an empty string when no case has two contenders.
pub fn verdict(results: &Results) -> String {
    let all = lines(results);
    let mut sentences = Vec::new();
    for (case, labels) in cases(results) {
        let group: Vec<&Line> = labels
            .iter()
            .filter_map(|l| all.iter().find(|line| &line.label == l))
            .collect();
        if group.len() < 2 {
            continue;
        }
        let name = |l: &Line| split_label(results, &l.label).0.to_owned();
        let at = if case.is_empty() {
            String::new()
        } else {
            format!("At {case}: ")
        };
        let p99 = on(
            &group,
            "p99",
            |l| l.p99_ms,
            |l| l.intervals.map(|i| i.p99_ms),
            &name,
        );
        let mean = on(
            &group,
            "mean",
            |l| l.mean_ms,
            |l| l.intervals.map(|i| i.mean_ms),
            &name,
        );
        let sentence = format!("{p99}; {mean}.");
        sentences.push(if at.is_empty() {
            capitalized(&sentence)
        } else {
            format!("{at}{sentence}")
        });
    }
    if sentences.is_empty() {
        return String::new();
    }
    if results.scenario.repetitions < 2 {
        sentences.push(
            "One repetition: no interval, so how much of each difference is noise is not measured."
                .into(),
        );
    } else {
        sentences.push(format!(
            "Medians of {} paired repetitions, with 95% intervals; overlapping intervals are called not distinguishable.",
            results.scenario.repetitions
        ));
    }
    sentences.join(" ")
}

fn capitalized(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

/// "a and b", "a, b and c".
fn listed(names: &[String]) -> String {
    match names {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// `12.3 ms` or `12.3 ms [11.9, 12.8]`.
fn value(x: f64, interval: Option<Interval>) -> String {
    match interval {
        Some(i) => format!("{x:.1} ms [{:.1}, {:.1}]", i.lo, i.hi),
        None => format!("{x:.1} ms"),
    }
}

/// How much lower `best` is than `other`: "38% lower than", "3.2× lower than".
fn by(best: f64, other: f64) -> String {
    if best > 0.0 && other / best >= 2.0 {
        format!("{:.1}× lower than", other / best)
    } else if other > 0.0 {
        format!("{:.0}% lower than", (other - best) / other * 100.0)
    } else {
        "as low as".into()
    }
}

/// The clause for one measure: who won, by how much, and whether it is distinguishable.
fn on(
    group: &[&Line],
    measure: &str,
    of: fn(&Line) -> f64,
    interval: fn(&Line) -> Option<Interval>,
    name: &dyn Fn(&Line) -> String,
) -> String {
    let mut ranked: Vec<&Line> = group.to_vec();
    ranked.sort_by(|a, b| of(a).total_cmp(&of(b)));
    let (best, second) = (ranked[0], ranked[1]);
    let tied: Vec<String> = ranked
        .iter()
        .take_while(|l| of(l) == of(best))
        .map(|l| name(l))
        .collect();
    if tied.len() > 1 {
        return format!(
            "on {measure}, {} tie at {}",
            listed(&tied),
            value(of(best), None)
        );
    }
    let mut out = format!(
        "on {measure}, {} is lowest at {}, {} {}'s {}",
        name(best),
        value(of(best), interval(best)),
        by(of(best), of(second)),
        name(second),
        value(of(second), interval(second)),
    );
    if let (Some(b), Some(s)) = (interval(best), interval(second))
        && b.hi >= s.lo
    {
        out.push_str(&format!(
            " — not distinguishable from {}: the intervals overlap",
            name(second)
        ));
    }
    if let Some(rr) = ranked.iter().skip(2).find(|l| name(l) == "round_robin") {
        out.push_str(&format!(
            ", and {} round_robin's {}",
            by(of(best), of(rr)),
            value(of(rr), interval(rr))
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_says_percent_or_ratio() {
        assert_eq!(by(60.0, 100.0), "40% lower than");
        assert_eq!(by(20.0, 64.0), "3.2× lower than");
        assert_eq!(by(0.0, 0.0), "as low as");
    }
}
