//! What the reports say over paired repetitions: each contender's medians with their 95%
//! bootstrap intervals, and who beat whom on p99 in how many repetitions — in `results.md`
//! and `report.html` — and the files a later step pairs again: `repetitions.csv` (every run's
//! numbers, one row per contender and repetition) and `wins.csv` (the win counts).
//!
//! Only contenders of the same **case** are compared: the labels that differ in the contender
//! alone. The simulator names a case after the contender (`least_conn λ=0.90 delay=1s`), so a
//! label's case is what follows the scenario's contender name that begins it. It names a
//! report delay only for the contenders that read load reports; the others are the same at
//! every delay, so they join each delay's case ([`group_cases`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{Line, escape, lines};
use crate::run::{Results, repetition_seed};
use crate::stats::{self, Interval, Wins};

/// The header of `repetitions.csv`, exactly.
pub const REPETITION_COLUMNS: [&str; 12] = [
    "algorithm",
    "contender",
    "case",
    "repetition",
    "seed",
    "requests",
    "mean_ms",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "timeouts",
    "failures",
];

/// The header of `wins.csv`, exactly.
pub const WIN_COLUMNS: [&str; 7] = [
    "case",
    "algorithm",
    "versus",
    "p99_wins",
    "p99_losses",
    "p99_ties",
    "repetitions",
];

/// A label's contender and case: the longest contender name of the scenario that begins the
/// label (followed by a space or nothing), and the rest; the whole label and no case when no
/// name fits.
pub fn split_label<'l>(results: &Results, label: &'l str) -> (&'l str, &'l str) {
    results
        .scenario
        .algorithms
        .iter()
        .map(|a| a.name.as_str())
        .filter(|name| {
            label
                .strip_prefix(name)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
        })
        .max_by_key(|name| name.len())
        .map_or((label, ""), |name| {
            (&label[..name.len()], label[name.len()..].trim_start())
        })
}

/// The cases, in the order of the labels, each with its labels.
pub fn cases(results: &Results) -> Vec<(String, Vec<String>)> {
    group_cases(results.labels.iter().map(|label| {
        let (_, case) = split_label(results, label);
        (case.to_owned(), label.clone())
    }))
}

/// The case without its report delay (`λ=0.80 delay=1s` → `λ=0.80`), if it names one.
pub fn without_delay(case: &str) -> Option<String> {
    let tokens: Vec<&str> = case.split(' ').collect();
    let kept: Vec<&str> = tokens
        .iter()
        .copied()
        .filter(|t| !t.starts_with("delay="))
        .collect();
    (kept.len() < tokens.len()).then(|| kept.join(" "))
}

/// `items` grouped by their case, in the order cases first appear; then each case with a
/// report delay takes in, first, the items of the same case without a delay (contenders that
/// read no reports, the same at every delay), and such a case, taken in, is not listed alone.
pub fn group_cases<T: Clone>(
    items: impl IntoIterator<Item = (String, T)>,
) -> Vec<(String, Vec<T>)> {
    let mut plain: Vec<(String, Vec<T>)> = Vec::new();
    for (case, item) in items {
        match plain.iter_mut().find(|(c, _)| *c == case) {
            Some((_, group)) => group.push(item),
            None => plain.push((case, vec![item])),
        }
    }
    let taken: Vec<String> = plain
        .iter()
        .filter_map(|(c, _)| without_delay(c))
        .filter(|base| plain.iter().any(|(c, _)| c == base))
        .collect();
    plain
        .iter()
        .filter(|(c, _)| !taken.contains(c))
        .map(|(case, group)| {
            let base = without_delay(case)
                .and_then(|b| plain.iter().find(|(c, _)| *c == b))
                .map(|(_, g)| g.clone())
                .unwrap_or_default();
            (
                case.clone(),
                base.into_iter().chain(group.iter().cloned()).collect(),
            )
        })
        .collect()
}

/// `label`'s p99 in each of its repetitions.
fn p99s(results: &Results, label: &str) -> BTreeMap<u32, f64> {
    results
        .runs
        .iter()
        .filter(|m| m.label == label)
        .map(|m| (m.repetition, m.row.summary.p99_ms))
        .collect()
}

/// How often `a` had the lower p99 than `b`, over the repetitions both ran.
pub fn p99_wins(results: &Results, a: &str, b: &str) -> Wins {
    let (a, b) = (p99s(results, a), p99s(results, b));
    let (xs, ys): (Vec<f64>, Vec<f64>) = a
        .iter()
        .filter_map(|(r, x)| b.get(r).map(|y| (*x, *y)))
        .unzip();
    stats::wins(&xs, &ys)
}

/// In how many repetitions `label` had the lowest p99 of its case (each of a tie counts; for
/// a contender in several delays' cases, the first).
pub fn p99_best_in(results: &Results, label: &str) -> usize {
    let Some((_, labels)) = cases(results)
        .into_iter()
        .find(|(_, labels)| labels.iter().any(|l| l == label))
    else {
        return 0;
    };
    let all: Vec<BTreeMap<u32, f64>> = labels.iter().map(|l| p99s(results, l)).collect();
    p99s(results, label)
        .iter()
        .filter(|(r, x)| all.iter().filter_map(|m| m.get(r)).all(|y| *x <= y))
        .count()
}

/// `repetitions.csv`: every run, in the order of the runs (repetition by repetition).
pub fn csv(results: &Results) -> String {
    let mut out = REPETITION_COLUMNS.join(",");
    out.push('\n');
    let mut runs: Vec<_> = results.runs.iter().collect();
    runs.sort_by_key(|m| m.repetition);
    for m in runs {
        let (contender, case) = split_label(results, &m.label);
        let s = &m.row.summary;
        writeln!(
            out,
            "{},{contender},{case},{},{},{},{:.3},{:.3},{:.3},{:.3},{},{}",
            m.label,
            m.repetition,
            repetition_seed(results.scenario.seed, m.repetition),
            s.sent,
            s.mean_ms,
            s.p50_ms,
            s.p95_ms,
            s.p99_ms,
            s.timeouts,
            s.failed
        )
        .ok();
    }
    out
}

/// `wins.csv`: for every ordered pair of contenders of a case, how often the first had the
/// lower p99.
pub fn wins_csv(results: &Results) -> String {
    let mut out = WIN_COLUMNS.join(",");
    out.push('\n');
    for (case, labels) in cases(results) {
        for a in &labels {
            for b in labels.iter().filter(|b| *b != a) {
                let w = p99_wins(results, a, b);
                writeln!(
                    out,
                    "{case},{a},{b},{},{},{},{}",
                    w.won,
                    w.lost,
                    w.tied,
                    w.of()
                )
                .ok();
            }
        }
    }
    out
}

/// A median and its interval: `12.3 [11.9, 12.8]`.
fn with_interval(median: f64, interval: Interval) -> String {
    format!("{median:.1} [{:.1}, {:.1}]", interval.lo, interval.hi)
}

const INTERVAL_HEADINGS: [&str; 6] = [
    "algorithm",
    "mean ms",
    "p50 ms",
    "p95 ms",
    "p99 ms",
    "lowest p99",
];

/// One row of the intervals' table, or `None` without intervals.
fn interval_cells(results: &Results, l: &Line) -> Option<[String; 6]> {
    let i = l.intervals?;
    Some([
        l.label.clone(),
        with_interval(l.mean_ms, i.mean_ms),
        with_interval(l.p50_ms, i.p50_ms),
        with_interval(l.p95_ms, i.p95_ms),
        with_interval(l.p99_ms, i.p99_ms),
        format!("{} of {}", p99_best_in(results, &l.label), l.repetitions),
    ])
}

/// A case's win matrix: its labels, and for each row the cells against each column.
type Matrix = (String, Vec<String>, Vec<Vec<String>>);

fn matrices(results: &Results) -> Vec<Matrix> {
    cases(results)
        .into_iter()
        .filter(|(_, labels)| labels.len() > 1)
        .map(|(case, labels)| {
            let cells = labels
                .iter()
                .map(|a| {
                    labels
                        .iter()
                        .map(|b| {
                            if a == b {
                                "—".to_owned()
                            } else {
                                let w = p99_wins(results, a, b);
                                format!("{} of {}", w.won, w.of())
                            }
                        })
                        .collect()
                })
                .collect();
            (case, labels, cells)
        })
        .collect()
}

/// Said instead of intervals and wins when a scenario ran once.
const ONE_REPETITION: &str = "One repetition: no interval and no win count — a single run says nothing about its own spread (set repetitions in the scenario).";

/// How the intervals and the wins were made, above them.
fn preamble(n: u32) -> String {
    format!(
        "{n} paired repetitions: repetition r replays seed + r for every contender. Medians with 95% intervals (percentile bootstrap of the median, {} resamples from a fixed seed); \"lowest p99\": the repetitions in which the contender had the lowest p99 of its case.",
        stats::grouped(stats::RESAMPLES)
    )
}

const WINS_LINE: &str = "Paired wins on p99: the row's contender had the lower p99 than the column's in k of n repetitions (ties count for neither).";

/// The section of `results.md`.
pub fn markdown(results: &Results) -> String {
    let mut out = String::from("\n## Over the repetitions\n\n");
    if results.scenario.repetitions < 2 {
        writeln!(out, "{ONE_REPETITION}").ok();
        return out;
    }
    writeln!(out, "{}\n", preamble(results.scenario.repetitions)).ok();
    writeln!(
        out,
        "| {} |\n|---|{}",
        INTERVAL_HEADINGS.join(" | "),
        "---:|".repeat(INTERVAL_HEADINGS.len() - 1)
    )
    .ok();
    for l in lines(results) {
        if let Some(cells) = interval_cells(results, &l) {
            writeln!(
                out,
                "| {} |",
                cells.map(|c| c.replace('|', "\\|")).join(" | ")
            )
            .ok();
        }
    }
    writeln!(out, "\n{WINS_LINE}").ok();
    for (case, labels, cells) in matrices(results) {
        out.push('\n');
        if !case.is_empty() {
            writeln!(out, "{case}:\n").ok();
        }
        let escaped: Vec<String> = labels.iter().map(|l| l.replace('|', "\\|")).collect();
        writeln!(
            out,
            "| beat → | {} |\n|---|{}",
            escaped.join(" | "),
            "---:|".repeat(labels.len())
        )
        .ok();
        for (a, row) in labels.iter().zip(cells) {
            writeln!(out, "| {} | {} |", a.replace('|', "\\|"), row.join(" | ")).ok();
        }
    }
    out
}

/// An HTML table.
fn html_table(page: &mut String, headings: &[String], rows: &[Vec<String>]) {
    page.push_str("<table><tr>");
    for h in headings {
        write!(page, "<th>{}</th>", escape(h)).ok();
    }
    page.push_str("</tr>\n");
    for row in rows {
        page.push_str("<tr>");
        for cell in row {
            write!(page, "<td>{}</td>", escape(cell)).ok();
        }
        page.push_str("</tr>\n");
    }
    page.push_str("</table>\n");
}

/// The section of `report.html`.
pub fn html(page: &mut String, results: &Results) {
    page.push_str("<h2>Over the repetitions</h2>\n");
    if results.scenario.repetitions < 2 {
        writeln!(page, "<p>{}</p>", escape(ONE_REPETITION)).ok();
        return;
    }
    writeln!(
        page,
        "<p>{}</p>",
        escape(&preamble(results.scenario.repetitions))
    )
    .ok();
    let rows: Vec<Vec<String>> = lines(results)
        .iter()
        .filter_map(|l| interval_cells(results, l))
        .map(Vec::from)
        .collect();
    html_table(page, &INTERVAL_HEADINGS.map(String::from), &rows);
    writeln!(page, "<p>{}</p>", escape(WINS_LINE)).ok();
    for (case, labels, cells) in matrices(results) {
        if !case.is_empty() {
            writeln!(page, "<p>{}:</p>", escape(&case)).ok();
        }
        let mut headings = vec!["beat →".to_owned()];
        headings.extend(labels.iter().cloned());
        let rows: Vec<Vec<String>> = labels
            .iter()
            .zip(cells)
            .map(|(a, row)| std::iter::once(a.clone()).chain(row).collect())
            .collect();
        html_table(page, &headings, &rows);
    }
}
