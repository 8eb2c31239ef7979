//! The verdict: one paragraph saying which contender of each case had the lowest p99 and the
//! lowest mean, by how much against the runner-up and against round robin, whether the
//! difference can be told from noise, and what the winner paid for it in failed requests.
//! `results.md`, `report.html`, `fulcrum lab run` and `fulcrum demo` all print [`verdict`]'s
//! text.
//!
//! **Only contenders that answered are ranked.** A failed request has no latency (or the
//! timeout), and a run that answered nothing has an empty histogram, whose p99 and mean read
//! 0: failing fast would look fastest. So a contender with a repetition that answered no
//! request is named as such and left out of the ranking, and when the winner had a larger
//! share of requests failed or timed out than the runner-up, the verdict says so beside the
//! win; when any ranked contender failed requests, it lists every one's share.
//!
//! **Told apart, or not.** Repetitions are paired: repetition `r` replays the trace of seed +
//! `r` for every contender ([`crate::stats`]). So the winner is compared with the runner-up
//! repetition by repetition: the differences runner-up − winner, and the 95%
//! percentile-bootstrap interval of their median. When that interval excludes 0 the two are
//! called **distinguishable**; when it holds 0, these runs **could not tell them apart**. Two
//! per-contender intervals that overlap would be no test: their overlap ignores that both
//! contenders saw the same traffic. With one repetition there is no interval, and the verdict
//! says the difference is unmeasured.

use std::collections::BTreeMap;

use super::{Line, cases, lines, split_label};
use crate::load::Summary;
use crate::run::Results;
use crate::stats::{self, Interval};

/// One latency measure the verdict ranks on: its name, a contender's median of it and that
/// median's interval, and its value in one run.
struct Measure {
    name: &'static str,
    median: fn(&Line) -> f64,
    interval: fn(&Line) -> Option<Interval>,
    run: fn(&Summary) -> f64,
}

const P99: Measure = Measure {
    name: "p99",
    median: |l| l.p99_ms,
    interval: |l| l.intervals.map(|i| i.p99_ms),
    run: |s| s.p99_ms,
};

const MEAN: Measure = Measure {
    name: "mean",
    median: |l| l.mean_ms,
    interval: |l| l.intervals.map(|i| i.mean_ms),
    run: |s| s.mean_ms,
};

/// A contender of a case: its line, and what its requests came to over all its repetitions.
struct Contender<'r> {
    line: &'r Line,
    name: String,
    /// Its runs' summaries, by repetition.
    runs: BTreeMap<u32, &'r Summary>,
    sent: u64,
    /// Failed or timed out.
    failed: u64,
}

impl<'r> Contender<'r> {
    fn of(results: &'r Results, line: &'r Line) -> Contender<'r> {
        let runs: BTreeMap<u32, &Summary> = results
            .runs
            .iter()
            .filter(|m| m.label == line.label)
            .map(|m| (m.repetition, &m.row.summary))
            .collect();
        Contender {
            line,
            name: split_label(results, &line.label).0.to_owned(),
            sent: runs.values().map(|s| s.sent).sum(),
            failed: runs.values().map(|s| s.failed + s.timeouts).sum(),
            runs,
        }
    }

    /// The repetitions in which it answered no request.
    fn silent(&self) -> usize {
        self.runs.values().filter(|s| s.ok == 0).count()
    }

    /// The share of its requests that failed or timed out.
    fn failed_share(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            self.failed as f64 / self.sent as f64
        }
    }

    /// Why it is not ranked: "x answered no request (all 1000 failed or timed out)", "x
    /// answered no request in 2 of 5 repetitions".
    fn unranked(&self) -> String {
        if self.silent() == self.runs.len() {
            format!(
                "{} answered no request (all {} failed or timed out)",
                self.name, self.failed
            )
        } else {
            format!(
                "{} answered no request in {} of {} repetitions",
                self.name,
                self.silent(),
                self.runs.len()
            )
        }
    }
}

/// The paragraph (no line breaks), or an empty string when no case has two contenders.
pub fn verdict(results: &Results) -> String {
    let all = lines(results);
    let mut sentences = Vec::new();
    for (case, labels) in cases(results) {
        let group: Vec<Contender> = labels
            .iter()
            .filter_map(|l| all.iter().find(|line| &line.label == l))
            .map(|line| Contender::of(results, line))
            .collect();
        if group.len() < 2 {
            continue;
        }
        let sentence = case_sentence(&group);
        sentences.push(if case.is_empty() {
            capitalized(&sentence)
        } else {
            format!("At {case}: {sentence}")
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
            "Medians of {} paired repetitions (repetition r replays seed + r for every contender), with 95% intervals; the winner is distinguishable from the runner-up when the 95% interval of their paired difference (the median of the per-repetition differences, bootstrapped) excludes 0.",
            results.scenario.repetitions
        ));
    }
    sentences.join(" ")
}

/// What one case's verdict says, ending with a full stop: the ranking on each measure of the
/// contenders that answered, the failures beside it, and those that answered nothing.
fn case_sentence(group: &[Contender]) -> String {
    let (ranked, silent): (Vec<&Contender>, Vec<&Contender>) =
        group.iter().partition(|c| c.silent() == 0);
    let mut clauses = match ranked.as_slice() {
        [] => vec!["no contender answered a request in every repetition".to_owned()],
        [only] => vec![format!(
            "only {} answered in every repetition, so nothing is ranked",
            only.name
        )],
        _ => vec![on(&ranked, &P99), on(&ranked, &MEAN)],
    };
    if ranked.len() > 1 && ranked.iter().any(|c| c.failed > 0) {
        let shares: Vec<String> = ranked
            .iter()
            .map(|c| format!("{} {}", c.name, percent(c.failed_share())))
            .collect();
        clauses.push(format!(
            "requests failed or timed out: {}",
            shares.join(", ")
        ));
    }
    if !silent.is_empty() {
        let named: Vec<String> = silent.iter().map(|c| c.unranked()).collect();
        clauses.push(format!("{}, so not ranked", listed(&named)));
    }
    format!("{}.", clauses.join("; "))
}

/// A share as a percentage: "12%", "2.5%", "0%", and "<0.1%" for a few in many.
fn percent(share: f64) -> String {
    let p = share * 100.0;
    if p == 0.0 {
        "0%".into()
    } else if p < 0.1 {
        "<0.1%".into()
    } else if p < 10.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
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

/// The clause for one measure over the contenders that answered (two or more): who won, by
/// how much, what it failed against the runner-up, and whether the two can be told apart.
fn on(ranked: &[&Contender], m: &Measure) -> String {
    let of = |c: &Contender| (m.median)(c.line);
    let shown = |c: &Contender| value(of(c), (m.interval)(c.line));
    let mut order: Vec<&Contender> = ranked.to_vec();
    order.sort_by(|a, b| of(a).total_cmp(&of(b)));
    let (best, second) = (order[0], order[1]);
    let tied: Vec<String> = order
        .iter()
        .take_while(|c| of(c) == of(best))
        .map(|c| c.name.clone())
        .collect();
    if tied.len() > 1 {
        return format!(
            "on {}, {} tie at {}",
            m.name,
            listed(&tied),
            value(of(best), None)
        );
    }
    let mut out = format!(
        "on {}, {} is lowest at {}, {} {}'s {}",
        m.name,
        best.name,
        shown(best),
        by(of(best), of(second)),
        second.name,
        shown(second),
    );
    if let Some(rr) = order.iter().skip(2).find(|c| c.name == "round_robin") {
        out.push_str(&format!(
            ", and {} round_robin's {}",
            by(of(best), of(rr)),
            shown(rr)
        ));
    }
    if let Some(told) = told_apart(best, second, m) {
        out.push_str(&told);
    }
    if best.failed_share() > second.failed_share() {
        out.push_str(&format!(
            ", but {} of its requests failed or timed out against {} of {}'s",
            percent(best.failed_share()),
            percent(second.failed_share()),
            second.name
        ));
    }
    out
}

/// Whether `best` and `second` can be told apart on `m`, from the 95% interval of the median
/// of their paired differences (`second`'s run minus `best`'s, repetition by repetition);
/// `None` below two paired repetitions.
fn told_apart(best: &Contender, second: &Contender, m: &Measure) -> Option<String> {
    let differences: Vec<f64> = best
        .runs
        .iter()
        .filter_map(|(r, b)| second.runs.get(r).map(|s| (m.run)(s) - (m.run)(b)))
        .collect();
    let i = stats::median_interval(&differences)?;
    let d = stats::median(&differences);
    Some(if i.lo > 0.0 {
        format!(
            " — distinguishable from {}: paired by repetition, {} was lower by {d:.1} ms [{:.1}, {:.1}]",
            second.name, best.name, i.lo, i.hi
        )
    } else if i.hi < 0.0 {
        format!(
            " — yet paired by repetition {} was the lower, by {:.1} ms [{:.1}, {:.1}]",
            second.name, -d, -i.hi, -i.lo
        )
    } else {
        format!(
            " — these runs could not tell {} and {} apart: paired by repetition, the difference is {d:.1} ms [{:.1}, {:.1}], which includes 0",
            best.name, second.name, i.lo, i.hi
        )
    })
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
