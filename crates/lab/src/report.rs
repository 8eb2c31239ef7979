//! The results of a lab run, written out: `results.csv` (one row per contender, the medians
//! over the repetitions), `results.md` (the verdict, the same table with the scenario, the
//! date and the machine) and `report.html` (one self-contained page: the verdict, the table
//! with the best of each column marked, and plots drawn by `plotters` as inline SVG, laid out
//! two a row on a wide screen, [`figures`]).
//!
//! **The verdict** ([`verdict`]): which contender had the lowest p99 and mean, by how much, and
//! whether that is distinguishable from noise; `fulcrum lab run` and `fulcrum demo` print it.
//!
//! **Over repetitions** (paired: repetition `r` is the same seeded trace for every contender):
//! each report gives the median of p50, p95, p99 and mean with a 95% percentile-bootstrap
//! interval ([`crate::stats`]), and paired win counts on p99 between the contenders of a case
//! (the labels that differ only in the contender, not in offered load, report delay or
//! balancer count): "A beat B in k of n". `repetitions.csv` keeps every repetition's numbers
//! (what `fulcrum evidence` pairs) and `wins.csv` the win counts. One repetition has no
//! interval and no win count, and the reports say so.
//!
//! Everything is read from each run's [`Tally`](crate::tally::Tally) and its backends'
//! samples, never from per-request records, so that the simulator's runs (ten million
//! requests, ten thousand backends) write the same files as the lab's. Many backends are
//! summarized: above [`SHARE_COLUMN_LIMIT`] the shares become their minimum, median and
//! maximum; above [`SHARE_CHART_LIMIT`](crate::tally::SHARE_CHART_LIMIT) the share chart sorts
//! the backends' shares over the run and the utilization chart draws the lowest, mean and
//! highest backend. A run longer than ten minutes is plotted per a few seconds rather than per
//! second ([`Tally::bucket_width`](crate::tally::Tally::bucket_width)), as a rate per second.
//! A simulated supermarket-model run gets a theory column ([`theory`]).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;

use crate::run::{Results, Row};
use crate::scenario::Load;
use crate::stats::{self, Interval};

pub mod chart;
pub mod figures;
mod repetitions;
pub mod theory;
mod verdict;
pub mod windows;
use figures::Figure;
pub use repetitions::{
    REPETITION_COLUMNS, WIN_COLUMNS, cases, group_cases, p99_best_in, p99_wins, split_label,
    without_delay,
};
pub use verdict::verdict;

/// Up to this many backends `results.csv` has a `share_<name>` column per backend and
/// `results.md` lists every share; above it, their minimum, median and maximum.
pub const SHARE_COLUMN_LIMIT: usize = 64;

/// The first columns of `results.csv`, exactly.
pub const COLUMNS: [&str; 14] = [
    "algorithm",
    "requests",
    "mean_ms",
    "p50_ms",
    "p90_ms",
    "p95_ms",
    "p99_ms",
    "p999_ms",
    "max_ms",
    "timeouts",
    "failures",
    "throughput_rps",
    "peak_concurrency",
    "util_stddev",
];

/// A contender's row: the medians over its repetitions, and their spread.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub label: String,
    pub repetitions: usize,
    pub requests: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub timeouts: f64,
    pub failures: f64,
    pub throughput_rps: f64,
    pub peak_concurrency: f64,
    pub util_stddev: f64,
    /// The lowest and highest p99 and mean over the repetitions.
    pub p99_range: (f64, f64),
    pub mean_range: (f64, f64),
    pub shares: Vec<f64>,
    /// The runs' offered load (the median), when a simulated experiment set one.
    pub offered_load: Option<f64>,
    /// Attempts at backends per request (the median), when the simulator counted them.
    pub attempts_per_request: Option<f64>,
    /// The 95% intervals of the medians; `None` with one repetition.
    pub intervals: Option<Intervals>,
}

/// 95% percentile-bootstrap intervals of a contender's medians over its repetitions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Intervals {
    pub mean_ms: Interval,
    pub p50_ms: Interval,
    pub p95_ms: Interval,
    pub p99_ms: Interval,
}

impl Intervals {
    /// The intervals over `rows`, one per repetition; `None` for fewer than two.
    fn of(rows: &[&Row]) -> Option<Intervals> {
        let of = |f: fn(&Row) -> f64| {
            stats::median_interval(&rows.iter().map(|r| f(r)).collect::<Vec<_>>())
        };
        Some(Intervals {
            mean_ms: of(|r| r.summary.mean_ms)?,
            p50_ms: of(|r| r.summary.p50_ms)?,
            p95_ms: of(|r| r.summary.p95_ms)?,
            p99_ms: of(|r| r.summary.p99_ms)?,
        })
    }
}

fn median(v: Vec<f64>) -> f64 {
    stats::median(&v)
}

fn range(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if v.is_empty() { (0.0, 0.0) } else { (lo, hi) }
}

/// One line per contender, in the scenario's order.
pub fn lines(results: &Results) -> Vec<Line> {
    results
        .labels
        .iter()
        .map(|label| {
            let rows: Vec<&Row> = results
                .runs
                .iter()
                .filter(|m| &m.label == label)
                .map(|m| &m.row)
                .collect();
            let of = |f: &dyn Fn(&Row) -> f64| median(rows.iter().map(|r| f(r)).collect());
            let p99: Vec<f64> = rows.iter().map(|r| r.summary.p99_ms).collect();
            let mean: Vec<f64> = rows.iter().map(|r| r.summary.mean_ms).collect();
            Line {
                label: label.clone(),
                repetitions: rows.len(),
                requests: of(&|r| r.summary.sent as f64),
                mean_ms: of(&|r| r.summary.mean_ms),
                p50_ms: of(&|r| r.summary.p50_ms),
                p90_ms: of(&|r| r.summary.p90_ms),
                p95_ms: of(&|r| r.summary.p95_ms),
                p99_ms: of(&|r| r.summary.p99_ms),
                p999_ms: of(&|r| r.summary.p999_ms),
                max_ms: of(&|r| r.summary.max_ms),
                timeouts: of(&|r| r.summary.timeouts as f64),
                failures: of(&|r| r.summary.failed as f64),
                throughput_rps: of(&|r| r.throughput_rps),
                peak_concurrency: of(&|r| r.peak_concurrency as f64),
                util_stddev: of(&|r| r.util_stddev),
                p99_range: range(&p99),
                mean_range: range(&mean),
                shares: (0..results.backends.len())
                    .map(|k| of(&|r| r.shares.get(k).copied().unwrap_or(0.0)))
                    .collect(),
                offered_load: {
                    let loads: Vec<f64> = results
                        .runs
                        .iter()
                        .filter(|m| &m.label == label)
                        .filter_map(|m| m.offered_load)
                        .collect();
                    (!loads.is_empty()).then(|| median(loads))
                },
                attempts_per_request: {
                    let attempts: Vec<f64> =
                        rows.iter().filter_map(|r| r.attempts_per_request).collect();
                    (!attempts.is_empty()).then(|| median(attempts))
                },
                intervals: Intervals::of(&rows),
            }
        })
        .collect()
}

/// A count (a median of counts may end in .5).
fn count(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// The lowest, the median and the highest share.
fn share_spread(shares: &[f64]) -> (f64, f64, f64) {
    let (lo, hi) = range(shares);
    (lo, median(shares.to_vec()), hi)
}

/// The last columns of `results.csv`, after the shares: the 95% intervals of the medians
/// (empty with one repetition) and the repetitions in which the contender had the lowest p99
/// of its case.
pub const INTERVAL_COLUMNS: [&str; 9] = [
    "p50_ms_lo",
    "p50_ms_hi",
    "p95_ms_lo",
    "p95_ms_hi",
    "p99_ms_lo",
    "p99_ms_hi",
    "mean_ms_lo",
    "mean_ms_hi",
    "p99_best_in",
];

/// `results.csv`: the [`COLUMNS`], the repetitions and the spread of p99 and mean, the offered
/// load when a run set one, the attempts per request when the simulator counted them, the
/// shares (one column per backend, or their minimum, median
/// and maximum above [`SHARE_COLUMN_LIMIT`] backends), then the [`INTERVAL_COLUMNS`].
pub fn csv(results: &Results) -> String {
    let offered = results.runs.iter().any(|m| m.offered_load.is_some());
    let attempts = results
        .runs
        .iter()
        .any(|m| m.row.attempts_per_request.is_some());
    let spread = results.backends.len() > SHARE_COLUMN_LIMIT;
    let mut out = COLUMNS.join(",");
    out.push_str(",repetitions,p99_ms_min,p99_ms_max,mean_ms_min,mean_ms_max");
    if offered {
        out.push_str(",offered_load");
    }
    if attempts {
        out.push_str(",attempts_per_request");
    }
    if spread {
        out.push_str(",share_min,share_median,share_max");
    } else {
        for b in &results.backends {
            write!(out, ",share_{b}").ok();
        }
    }
    write!(out, ",{}", INTERVAL_COLUMNS.join(",")).ok();
    out.push('\n');
    for l in lines(results) {
        write!(
            out,
            "{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{},{},{:.2},{},{:.4},{},{:.3},{:.3},{:.3},{:.3}",
            l.label,
            count(l.requests),
            l.mean_ms,
            l.p50_ms,
            l.p90_ms,
            l.p95_ms,
            l.p99_ms,
            l.p999_ms,
            l.max_ms,
            count(l.timeouts),
            count(l.failures),
            l.throughput_rps,
            count(l.peak_concurrency),
            l.util_stddev,
            l.repetitions,
            l.p99_range.0,
            l.p99_range.1,
            l.mean_range.0,
            l.mean_range.1,
        )
        .ok();
        if offered {
            match l.offered_load {
                Some(x) => write!(out, ",{x}").ok(),
                None => write!(out, ",").ok(),
            };
        }
        if attempts {
            match l.attempts_per_request {
                Some(x) => write!(out, ",{x:.3}").ok(),
                None => write!(out, ",").ok(),
            };
        }
        if spread {
            let (lo, mid, hi) = share_spread(&l.shares);
            write!(out, ",{lo:.4},{mid:.4},{hi:.4}").ok();
        } else {
            for s in &l.shares {
                write!(out, ",{s:.4}").ok();
            }
        }
        match l.intervals {
            Some(i) => {
                for x in [i.p50_ms, i.p95_ms, i.p99_ms, i.mean_ms] {
                    write!(out, ",{:.3},{:.3}", x.lo, x.hi).ok();
                }
            }
            None => out.push_str(",,,,,,,,"),
        }
        write!(out, ",{}", p99_best_in(results, &l.label)).ok();
        out.push('\n');
    }
    out
}

/// The machine a run was measured on, one line.
pub fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let host = read("/proc/sys/kernel/hostname").trim().to_owned();
    let kernel = read("/proc/sys/kernel/osrelease").trim().to_owned();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{host}: {} ({cpu}), Linux {kernel}", counted(cores, "core"))
}

/// `n` and `word`, plural but for one: "1 core", "2 cores".
fn counted(n: usize, word: &str) -> String {
    match n {
        1 => format!("1 {word}"),
        n => format!("{n} {word}s"),
    }
}

/// What the machine line says: where the run was measured, or simulated.
fn machine_label(results: &Results) -> &'static str {
    if results.simulated {
        "simulated (fulcrum sim, virtual time) on"
    } else {
        "machine"
    }
}

fn date(results: &Results) -> String {
    humantime::format_rfc3339_seconds(results.started).to_string()
}

fn traffic_line(results: &Results) -> String {
    let t = &results.scenario.traffic;
    let load = match &results.traffic.load {
        Load::Open(_) if t.pattern.is_none() => {
            let loads: Vec<String> = results
                .scenario
                .sim
                .iter()
                .flat_map(|s| &s.offered_load)
                .map(|l| l.to_string())
                .collect();
            format!(
                "open loop, constant at λ = {} of the primaries' capacity",
                loads.join(", ")
            )
        }
        Load::Open(_) => format!("open loop, {}", t.pattern.as_deref().unwrap_or_default()),
        Load::Closed(_) => format!(
            "closed loop, {} users",
            t.concurrency.as_deref().unwrap_or_default()
        ),
    };
    let length = match results
        .scenario
        .sim
        .as_ref()
        .and_then(|s| s.requests.map(|n| (n, s.warmup)))
    {
        Some((n, 0)) => format!("{n} requests"),
        Some((n, warmup)) => format!("{n} requests after {warmup} not counted"),
        None => t.duration.clone(),
    };
    format!(
        "{load} for {length}, cost {}, timeout {}, {} client addresses, seed {}",
        t.cost, t.timeout, t.clients, results.scenario.seed
    )
}

fn backends_line(results: &Results) -> String {
    // One entry per [[backend]] table: a table of many backends is named by its range.
    results
        .scenario
        .backends
        .iter()
        .map(|b| {
            let name = match b.count {
                1 => b.name.clone(),
                2 => format!("{0}-1, {0}-2", b.name),
                n => format!("{0}-1 … {0}-{n}", b.name),
            };
            let mut s = format!(
                "{} ({} × {}, speed {}, weight {}",
                name,
                b.mode,
                counted(b.workers as usize, "worker"),
                b.speed,
                b.weight
            );
            if let Some(a) = &b.antagonist {
                write!(s, ", antagonist {a}").ok();
            }
            if let Some(f) = b.fail_rate {
                write!(s, ", fail rate {f}").ok();
                if let Some(status) = b.fail_status {
                    write!(s, " ({status})").ok();
                }
            }
            if let Some(d) = &b.deadline {
                write!(s, ", deadline {d}").ok();
            }
            if let Some(n) = b.stall_after {
                write!(s, ", stalls after {n}").ok();
            }
            if let Some(n) = b.die_after {
                write!(s, ", dies after {n}").ok();
            }
            if b.backup {
                s.push_str(", backup");
            }
            s.push(')');
            s
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The table's headings, for people (`COLUMNS` are the CSV's).
const HEADINGS: [&str; 14] = [
    "algorithm",
    "requests",
    "mean ms",
    "p50 ms",
    "p90 ms",
    "p95 ms",
    "p99 ms",
    "p99.9 ms",
    "max ms",
    "timeouts",
    "failures",
    "answers/s",
    "peak in flight",
    "util σ",
];

/// Which way each of the [`HEADINGS`] is better: lower for latencies, timeouts and failures,
/// higher for the answers per second; `None` where neither is (a count of requests, a peak,
/// a spread that a weighted algorithm makes on purpose).
const BETTER: [Option<Better>; 14] = {
    use Better::{Higher, Lower};
    [
        None,
        None,
        Some(Lower),
        Some(Lower),
        Some(Lower),
        Some(Lower),
        Some(Lower),
        Some(Lower),
        Some(Lower),
        Some(Lower),
        Some(Lower),
        Some(Higher),
        None,
        None,
    ]
};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Better {
    Lower,
    Higher,
}

/// A line's cells in the tables of `results.md` and `report.html`, rounded for reading, and
/// the theory column's when the run is the supermarket model.
fn cells(results: &Results, l: &Line, theory: bool) -> Vec<String> {
    let mut cells = vec![
        l.label.clone(),
        count(l.requests),
        format!("{:.1}", l.mean_ms),
        format!("{:.1}", l.p50_ms),
        format!("{:.1}", l.p90_ms),
        format!("{:.1}", l.p95_ms),
        format!("{:.1}", l.p99_ms),
        format!("{:.1}", l.p999_ms),
        format!("{:.1}", l.max_ms),
        count(l.timeouts),
        count(l.failures),
        format!("{:.1}", l.throughput_rps),
        count(l.peak_concurrency),
        format!("{:.3}", l.util_stddev),
    ];
    if theory {
        cells.push(
            theory::expected_ms(results, &l.label, l.offered_load)
                .map_or_else(|| "—".into(), |t| format!("{t:.1}")),
        );
    }
    cells
}

/// Whether the table has the theory column: some row is the supermarket model.
fn has_theory(results: &Results, lines: &[Line]) -> bool {
    lines
        .iter()
        .any(|l| theory::expected_ms(results, &l.label, l.offered_load).is_some())
}

/// A row of the table: its cells, and for each whether it is the best of its column.
type Marked = (Vec<String>, Vec<bool>);

/// The table's headings and rows: each line's cells, and which of them are the best of their
/// column among the contenders of the line's case (ties all; as rounded, so what reads equal
/// is equal).
fn rows(results: &Results) -> (Vec<String>, Vec<Marked>) {
    let lines = lines(results);
    let theory = has_theory(results, &lines);
    let mut headings: Vec<String> = HEADINGS.map(String::from).to_vec();
    if theory {
        headings.push("theory ms".into());
    }
    let table: Vec<Vec<String>> = lines.iter().map(|l| cells(results, l, theory)).collect();
    let cases = cases(results);
    let rows = lines
        .iter()
        .zip(&table)
        .map(|(l, row)| {
            let peers: Vec<&Vec<String>> = cases
                .iter()
                .find(|(_, labels)| labels.contains(&l.label))
                .map(|(_, labels)| {
                    lines
                        .iter()
                        .zip(&table)
                        .filter(|(o, _)| labels.contains(&o.label))
                        .map(|(_, r)| r)
                        .collect()
                })
                .unwrap_or_default();
            let best = row
                .iter()
                .enumerate()
                .map(|(c, cell)| {
                    let Some(better) = BETTER.get(c).copied().flatten() else {
                        return false;
                    };
                    let value = |s: &str| s.parse::<f64>().ok();
                    let (Some(x), true) = (value(cell), peers.len() > 1) else {
                        return false;
                    };
                    peers
                        .iter()
                        .filter_map(|p| value(&p[c]))
                        .all(|y| match better {
                            Better::Lower => x <= y,
                            Better::Higher => x >= y,
                        })
                })
                .collect();
            (row.clone(), best)
        })
        .collect();
    (headings, rows)
}

/// The results table as Markdown (also printed by `fulcrum lab run` and the demo), the best
/// value of each column in bold.
pub fn table(results: &Results) -> String {
    let (headings, rows) = rows(results);
    let mut out = format!(
        "| {} |\n|---|{}\n",
        headings.join(" | "),
        "---:|".repeat(headings.len() - 1)
    );
    for (row, best) in rows {
        let row: Vec<String> = row
            .iter()
            .zip(best)
            .map(|(c, b)| {
                let c = c.replace('|', "\\|");
                if b { format!("**{c}**") } else { c }
            })
            .collect();
        writeln!(out, "| {} |", row.join(" | ")).ok();
    }
    out
}

/// Where a latency is counted from: the open loop's intended send time, or the closed loop's
/// send (its users wait for their answers, so a stall delays the sends instead).
fn latency_origin(load: &Load) -> &'static str {
    match load {
        Load::Open(_) => "from each request's intended send time (open loop)",
        Load::Closed(_) => "from each request's send (closed loop)",
    }
}

/// Where `util σ`'s utilizations come from.
fn utilization_source(results: &Results) -> &'static str {
    if results.simulated {
        "as the simulator's model of each backend meters it: the share of its slots busy, weighted by the capacity an antagonist leaves — what the lab backend's `/load` would report"
    } else {
        "from their `/load`"
    }
}

/// What the table says, under it.
fn table_notes(results: &Results) -> Vec<String> {
    let mut notes = vec![format!(
        "Latencies count {}; a timeout counts at the timeout. `util σ` is the standard deviation of the backends' CPU utilization ({}), averaged over the run. Bold: the best of its column among the contenders compared (lowest latency, timeouts and failures; most answers per second).",
        latency_origin(&results.traffic.load),
        utilization_source(results)
    )];
    if has_theory(results, &lines(results)) {
        notes.push(theory::NOTE.into());
    }
    notes
}

/// `results.md`.
pub fn markdown(results: &Results) -> String {
    let s = &results.scenario;
    let mut out = format!("# {}\n\n", s.name);
    if !s.description.is_empty() {
        writeln!(out, "{}\n", s.description).ok();
    }
    let verdict = verdict(results);
    if !verdict.is_empty() {
        writeln!(out, "**Verdict.** {verdict}\n").ok();
    }
    writeln!(out, "* date: {}", date(results)).ok();
    writeln!(out, "* {}: {}", machine_label(results), machine()).ok();
    writeln!(out, "* traffic: {}", traffic_line(results)).ok();
    writeln!(out, "* backends: {}", backends_line(results)).ok();
    writeln!(
        out,
        "* repetitions: {} (the table gives medians; results.csv the spread); the run took {:.0} s\n",
        s.repetitions,
        results.elapsed.as_secs_f64()
    )
    .ok();
    out.push_str(&table(results));
    for note in table_notes(results) {
        writeln!(out, "\n{note}").ok();
    }
    let shares: Vec<String> = lines(results)
        .iter()
        .map(|l| {
            format!(
                "* {}: {}",
                l.label,
                shares_line(&results.backends, &l.shares)
            )
        })
        .collect();
    writeln!(
        out,
        "\nShare of the answered requests per backend:\n\n{}",
        shares.join("\n")
    )
    .ok();
    out.push_str(&repetitions::markdown(results));
    out
}

/// Every backend's share, or above [`SHARE_COLUMN_LIMIT`] backends their minimum, median and
/// maximum and the three highest and lowest.
fn shares_line(backends: &[String], shares: &[f64]) -> String {
    if backends.len() <= SHARE_COLUMN_LIMIT {
        return backends
            .iter()
            .zip(shares)
            .map(|(b, s)| format!("{b} {:.1}%", s * 100.0))
            .collect::<Vec<_>>()
            .join(", ");
    }
    // Finer: ten thousand backends have 0.01% each.
    let pct = |(b, s): (&String, &f64)| format!("{b} {:.3}%", s * 100.0);
    let (lo, mid, hi) = share_spread(shares);
    let mut ranked: Vec<(&String, &f64)> = backends.iter().zip(shares).collect();
    ranked.sort_by(|a, b| b.1.total_cmp(a.1));
    let top: Vec<String> = ranked.iter().take(3).copied().map(pct).collect();
    let bottom: Vec<String> = ranked.iter().rev().take(3).copied().map(pct).collect();
    format!(
        "min {:.3}%, median {:.3}%, max {:.3}% over {} backends; highest {}; lowest {}",
        lo * 100.0,
        mid * 100.0,
        hi * 100.0,
        backends.len(),
        top.join(", "),
        bottom.join(", ")
    )
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `report.html`: the verdict, the table and the plots, one self-contained page laid out for
/// a wide screen (two charts a row from 1200 px, one below).
pub fn html(results: &Results) -> anyhow::Result<String> {
    let figures = figures::all(results)?;
    let mut page = String::new();
    write_head(&mut page, results);
    write_table(&mut page, results);
    repetitions::html(&mut page, results);
    write_figures(&mut page, figures);
    Ok(page)
}

/// The page's style: a grid of charts that scale to their cells, and tables that scroll
/// inside their own box rather than widen the page.
const STYLE: &str = "\
body { font-family: sans-serif; margin: 1.5em auto; padding: 0 16px; max-width: 1800px; color: #222; }
h1 { margin-bottom: 0.3em; }
ul.run { overflow-wrap: anywhere; }
.verdict { font-size: 110%; line-height: 1.45; background: #f3f6fa; border-left: 4px solid #0072b2; padding: 0.6em 1em; }
.table { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
td.best { font-weight: bold; background: #e8f4ea; }
p.note { font-size: 90%; color: #444; }
.charts { display: grid; grid-template-columns: minmax(0, 1fr); gap: 16px 24px; }
@media (min-width: 1200px) { .charts { grid-template-columns: repeat(2, minmax(0, 1fr)); } }
figure { margin: 0; min-width: 0; }
figure svg { display: block; width: 100%; height: auto; }
.legend { display: flex; flex-wrap: wrap; gap: 2px 14px; font-size: 85%; margin: 2px 0 0 64px; }
.legend i { display: inline-block; width: 18px; height: 3px; margin: 0 5px 3px 0; vertical-align: middle; }
figcaption { font-size: 90%; color: #555; margin-top: 4px; }
";

/// The page's head (title, style), the verdict and what was run: the scenario, the date, the
/// machine, the traffic, the backends.
fn write_head(page: &mut String, results: &Results) {
    let s = &results.scenario;
    write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{name} — fulcrum {tool}</title>\n<style>\n{STYLE}</style></head><body>\n<h1>{name}</h1>\n",
        name = escape(&s.name),
        tool = if results.simulated { "sim" } else { "lab" }
    )
    .ok();
    if !s.description.is_empty() {
        writeln!(page, "<p>{}</p>", escape(&s.description)).ok();
    }
    let verdict = verdict(results);
    if !verdict.is_empty() {
        writeln!(page, "<p class=\"verdict\">{}</p>", escape(&verdict)).ok();
    }
    writeln!(
        page,
        "<ul class=\"run\"><li>date: {}</li><li>{}: {}</li><li>traffic: {}</li><li>backends: {}</li><li>repetitions: {} (medians; the plots show the first)</li></ul>",
        escape(&date(results)),
        machine_label(results),
        escape(&machine()),
        escape(&traffic_line(results)),
        escape(&backends_line(results)),
        s.repetitions
    )
    .ok();
}

/// The results table: one row per contender, as in `results.md`, the best of each column
/// marked (class `best`, bold).
fn write_table(page: &mut String, results: &Results) {
    let (headings, rows) = rows(results);
    page.push_str("<div class=\"table\"><table class=\"results\"><tr>");
    for h in &headings {
        write!(page, "<th>{}</th>", escape(h)).ok();
    }
    page.push_str("</tr>\n");
    for (row, best) in rows {
        page.push_str("<tr>");
        for (cell, best) in row.iter().zip(best) {
            if best {
                write!(page, "<td class=\"best\"><b>{}</b></td>", escape(cell)).ok();
            } else {
                write!(page, "<td>{}</td>", escape(cell)).ok();
            }
        }
        page.push_str("</tr>\n");
    }
    page.push_str("</table></div>\n");
    for note in table_notes(results) {
        writeln!(
            page,
            "<p class=\"note\">{}</p>",
            escape(&note.replace('`', ""))
        )
        .ok();
    }
}

/// The charts, each with what to read from it, and the end of the page.
fn write_figures(page: &mut String, figures: Vec<Figure>) {
    page.push_str("<div class=\"charts\">\n");
    for f in figures {
        page.push_str("<figure class=\"chart\">");
        page.push_str(&f.chart.html());
        if let Some(read) = f.read {
            write!(page, "<figcaption>{}</figcaption>", escape(&read)).ok();
        }
        page.push_str("</figure>\n");
    }
    page.push_str("</div>\n</body></html>\n");
}

/// The files [`write`] writes (a run removes them first, so none is left from an earlier one).
pub const FILES: [&str; 5] = [
    "results.csv",
    "results.md",
    "report.html",
    "repetitions.csv",
    "wins.csv",
];

/// Writes `results.csv`, `results.md`, `report.html`, `repetitions.csv` and `wins.csv` into
/// `dir`.
pub fn write(results: &Results, dir: &Path) -> anyhow::Result<()> {
    let put = |name: &str, text: String| -> anyhow::Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    put("repetitions.csv", repetitions::csv(results))?;
    put("wins.csv", repetitions::wins_csv(results))?;
    put("results.csv", csv(results))?;
    put("results.md", markdown(results))?;
    put("report.html", html(results)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::closed::Users;
    use crate::run::Measured;
    use crate::tally::Tally;
    use std::time::Duration;

    #[test]
    fn one_is_singular() {
        assert_eq!(counted(1, "worker"), "1 worker");
        assert_eq!(counted(4, "worker"), "4 workers");
        assert_eq!(counted(0, "core"), "0 cores");
    }

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
    }

    /// Results of two contenders over `n` backends, as a simulator would give them: a tally
    /// each, backend `k` serving `k + 1` requests per second, and samples of every backend.
    fn simulated(n: usize, offered_load: Option<f64>) -> Results {
        use crate::run::LoadSample;
        use crate::scenario::Scenario;
        use crate::tally::Request;
        let scenario = Scenario::parse(
            r#"
            [[backend]]
            name = "b"
            [traffic]
            pattern = "constant:10"
            duration = "3s"
            [[algorithm]]
            name = "random"
            [[algorithm]]
            name = "round_robin"
            "#,
            "many",
        )
        .unwrap();
        let traffic = scenario.traffic().unwrap();
        let backends: Vec<String> = (0..n).map(|k| format!("b{k}")).collect();
        let labels: Vec<String> = scenario.algorithms.iter().map(|a| a.name.clone()).collect();
        let runs = labels
            .iter()
            .map(|label| {
                let mut tally = Tally::new(n, traffic.duration, traffic.timeout, None);
                for second in 0..3u64 {
                    for k in 0..n {
                        for i in 0..=k as u64 {
                            let intended = Duration::from_millis(second * 1000 + i);
                            tally.record(&Request {
                                intended,
                                started: intended,
                                latency: Some(Duration::from_millis(5 + k as u64)),
                                status: Some(200),
                                backend: Some(k),
                                timed_out: false,
                            });
                        }
                    }
                }
                tally.set_peak_concurrency(7);
                let samples: Vec<LoadSample> = (0..4)
                    .flat_map(|t| {
                        (0..n).map(move |k| LoadSample {
                            at: Duration::from_millis(250 * t),
                            backend: k,
                            cpu: k as f64 / n as f64,
                            mem: 0.0,
                            net: 0.0,
                        })
                    })
                    .collect();
                let row = crate::run::row(&tally, &samples, &traffic);
                Measured {
                    label: label.clone(),
                    repetition: 0,
                    tally,
                    samples,
                    row,
                    offered_load,
                }
            })
            .collect();
        Results {
            simulated: true,
            scenario,
            traffic,
            backends,
            labels,
            runs,
            started: std::time::SystemTime::UNIX_EPOCH,
            elapsed: Duration::from_secs(1),
        }
    }

    /// `simulated(1, None)`'s contenders over repetitions, the simulator's way (a case each
    /// per offered load): `p99[c][r]` is contender `c`'s p99 in repetition `r`, at both loads
    /// (the second load's twice as high).
    fn repeated(p99: &[&[f64]]) -> Results {
        let mut results = simulated(1, None);
        let base = results.runs[0].clone();
        let names = ["random", "round_robin", "least_conn"];
        let mut third = results.scenario.algorithms[0].clone();
        third.name = "least_conn".into();
        results.scenario.algorithms.push(third);
        results.scenario.repetitions = p99[0].len() as u32;
        results.labels.clear();
        results.runs.clear();
        for (load, scale) in [(0.5, 1.0), (0.9, 2.0)] {
            for (c, values) in p99.iter().enumerate() {
                let label = format!("{} λ={load:.2}", names[c]);
                results.labels.push(label.clone());
                for (r, &p) in values.iter().enumerate() {
                    let mut m = base.clone();
                    m.label = label.clone();
                    m.repetition = r as u32;
                    m.offered_load = Some(load);
                    m.row.summary.p99_ms = p * scale;
                    m.row.summary.p50_ms = p * scale / 4.0;
                    results.runs.push(m);
                }
            }
        }
        results
    }

    #[test]
    fn paired_wins_are_counted_within_a_case() {
        let results = repeated(&[
            &[10.0, 20.0, 30.0, 40.0, 50.0],
            &[11.0, 19.0, 31.0, 41.0, 50.0],
            &[12.0, 21.0, 29.0, 39.0, 49.0],
        ]);
        assert_eq!(
            split_label(&results, "round_robin λ=0.90"),
            ("round_robin", "λ=0.90")
        );
        let cases = cases(&results);
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[1].0, "λ=0.90");
        assert_eq!(cases[1].1.len(), 3);
        let w = p99_wins(&results, "random λ=0.50", "round_robin λ=0.50");
        assert_eq!((w.won, w.lost, w.tied), (3, 1, 1));
        assert_eq!(p99_best_in(&results, "random λ=0.50"), 1);
        assert_eq!(p99_best_in(&results, "round_robin λ=0.90"), 1);
        assert_eq!(p99_best_in(&results, "least_conn λ=0.90"), 3);
        let wins = repetitions::wins_csv(&results);
        assert_eq!(wins.lines().next(), Some(WIN_COLUMNS.join(",").as_str()));
        // 2 cases × 3 × 2 ordered pairs; never across cases.
        assert_eq!(wins.lines().count(), 1 + 12, "{wins}");
        assert!(wins.contains("\nλ=0.50,random λ=0.50,round_robin λ=0.50,3,1,1,5\n"));
        assert!(!wins.contains("λ=0.50,random λ=0.50,round_robin λ=0.90"));
        let md = markdown(&results);
        assert!(
            md.contains("| beat → | random λ=0.90 | round_robin λ=0.90 | least_conn λ=0.90 |"),
            "{md}"
        );
        assert!(
            md.contains("| random λ=0.90 | — | 3 of 5 | 2 of 5 |"),
            "{md}"
        );
        assert!(
            md.contains("| least_conn λ=0.90 | 3 of 5 | 3 of 5 | — |"),
            "{md}"
        );
        assert!(html(&results).unwrap().contains("<td>3 of 5</td>"));
    }

    #[test]
    fn contenders_without_reports_join_every_delays_case() {
        let items = [
            ("λ=0.80", "random"),
            ("λ=0.80 delay=0s", "dwlc"),
            ("λ=0.80 delay=1s", "dwlc"),
            ("λ=0.90", "random"),
        ]
        .map(|(c, i)| (c.to_owned(), i));
        assert_eq!(
            group_cases(items),
            vec![
                ("λ=0.80 delay=0s".to_owned(), vec!["random", "dwlc"]),
                ("λ=0.80 delay=1s".to_owned(), vec!["random", "dwlc"]),
                ("λ=0.90".to_owned(), vec!["random"]),
            ]
        );
        assert_eq!(without_delay("λ=0.80 delay=10s").as_deref(), Some("λ=0.80"));
        assert_eq!(without_delay("delay=1s").as_deref(), Some(""));
        assert_eq!(without_delay("λ=0.80"), None);
    }

    #[test]
    fn the_csv_appends_intervals_and_keeps_every_repetition() {
        let results = repeated(&[
            &[10.0, 20.0, 30.0, 40.0, 50.0],
            &[11.0, 19.0, 31.0, 41.0, 50.0],
            &[12.0, 21.0, 29.0, 39.0, 49.0],
        ]);
        let csv = csv(&results);
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        assert_eq!(&header[..14], &COLUMNS);
        assert_eq!(&header[header.len() - 9..], &INTERVAL_COLUMNS);
        let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
        assert_eq!(row.len(), header.len());
        let at = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
        assert_eq!(at("p99_ms"), "30.000");
        let (lo, hi): (f64, f64) = (
            at("p99_ms_lo").parse().unwrap(),
            at("p99_ms_hi").parse().unwrap(),
        );
        assert!(
            lo < 30.0 && 30.0 < hi && lo >= 10.0 && hi <= 50.0,
            "{lo} {hi}"
        );
        assert_eq!(at("p99_best_in"), "1");
        let md = markdown(&results);
        assert!(md.contains("5 paired repetitions"), "{md}");
        assert!(md.contains("| random λ=0.50 | "), "{md}");
        assert!(
            md.contains(&format!("{:.1} [{lo:.1}, {hi:.1}] | 1 of 5 |", 30.0)),
            "{md}"
        );
        let reps = repetitions::csv(&results);
        let lines: Vec<&str> = reps.lines().collect();
        assert_eq!(lines[0], REPETITION_COLUMNS.join(","));
        assert_eq!(lines.len(), 1 + 2 * 3 * 5);
        // Repetition by repetition; the seed is the scenario's plus the repetition.
        let seed = results.scenario.seed;
        assert!(
            lines[1].starts_with(&format!("random λ=0.50,random,λ=0.50,0,{seed},")),
            "{}",
            lines[1]
        );
        assert!(
            lines[7].contains(&format!(",1,{},", seed + 1)),
            "{}",
            lines[7]
        );
        assert!(lines[7].ends_with(",20.000,0,0"), "{}", lines[7]);
    }

    #[test]
    fn one_repetition_has_no_interval() {
        let results = simulated(2, None);
        let csv = csv(&results);
        let row = csv.lines().nth(1).unwrap();
        assert!(row.ends_with(",,,,,,,,,1"), "{row}");
        let md = markdown(&results);
        assert!(
            md.contains("One repetition: no interval and no win count"),
            "{md}"
        );
        assert!(!md.contains("beat →"), "{md}");
        assert!(
            html(&results)
                .unwrap()
                .contains("One repetition: no interval")
        );
    }

    #[test]
    fn a_closed_loop_is_not_called_open() {
        let mut results = simulated(2, None);
        assert!(markdown(&results).contains("intended send time (open loop)"));
        results.traffic.load = Load::Closed(Users::Fixed(10));
        let md = markdown(&results);
        assert!(!md.contains("open loop"), "{md}");
        assert!(
            md.contains("from each request's send (closed loop)"),
            "{md}"
        );
        let page = html(&results).unwrap();
        assert!(!page.contains("intended send time"));
    }

    #[test]
    fn up_to_64_backends_have_a_share_column_each() {
        let results = simulated(64, None);
        let csv = csv(&results);
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        assert_eq!(header.len(), 14 + 5 + 64 + 9, "{header:?}");
        assert_eq!(header[19], "share_b0");
        assert_eq!(header[82], "share_b63");
        let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
        assert_eq!(row.len(), header.len());
        // 3 × (1 + … + 64) requests; b63 served 64 of every 2080.
        assert_eq!(row[1], "6240");
        assert_eq!(row[12], "7");
        assert_eq!(row[82], format!("{:.4}", 64.0 / 2080.0));
        assert!(!csv.contains("offered_load"));
    }

    #[test]
    fn above_64_backends_the_shares_are_summarized() {
        let results = simulated(100, Some(0.5));
        let csv = csv(&results);
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        assert_eq!(
            &header[14..],
            &[
                "repetitions",
                "p99_ms_min",
                "p99_ms_max",
                "mean_ms_min",
                "mean_ms_max",
                "offered_load",
                "share_min",
                "share_median",
                "share_max",
                "p50_ms_lo",
                "p50_ms_hi",
                "p95_ms_lo",
                "p95_ms_hi",
                "p99_ms_lo",
                "p99_ms_hi",
                "mean_ms_lo",
                "mean_ms_hi",
                "p99_best_in"
            ]
        );
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3, "{csv}");
        let row: Vec<&str> = lines[1].split(',').collect();
        assert_eq!(row.len(), header.len());
        assert_eq!(row[0], "random");
        assert_eq!(row[19], "0.5");
        // Backend k served k + 1 of every 5050.
        let total = 5050.0;
        assert_eq!(row[20], format!("{:.4}", 1.0 / total));
        assert_eq!(row[21], format!("{:.4}", 50.5 / total));
        assert_eq!(row[22], format!("{:.4}", 100.0 / total));
        let md = markdown(&results);
        assert!(
            md.contains("* random: min 0.020%, median 1.000%, max 1.980% over 100 backends; highest b99 1.980%, b98 1.960%, b97 1.941%; lowest b0 0.020%, b1 0.040%, b2 0.059%"),
            "{md}"
        );
        assert!(!md.contains("b50 "), "{md}");
    }

    #[test]
    fn above_16_backends_the_charts_summarize_them() {
        let few = html(&simulated(16, None)).unwrap();
        // plotters writes the apostrophe as &apos;.
        assert!(few.contains("random: each backend&apos;s share of the requests"));
        assert!(!few.contains("share over the run, sorted"));
        let many = html(&simulated(17, None)).unwrap();
        let figures = |page: &str| page.matches("<figure class=\"chart\">").count();
        assert!(figures(&few) > 4);
        assert_eq!(figures(&many), figures(&few));
        assert!(many.contains("random: each backend&apos;s share over the run, sorted"));
        assert!(many.contains("round_robin: each backend&apos;s share over the run, sorted"));
        assert!(many.contains("lowest, mean and highest"));
        assert!(!many.contains("share of the requests"));
    }

    /// The `<figure>`s of a page.
    fn figures_of(page: &str) -> Vec<&str> {
        page.split("<figure class=\"chart\">")
            .skip(1)
            .map(|f| &f[..f.find("</figure>").unwrap()])
            .collect()
    }

    #[test]
    fn the_page_is_a_grid_of_charts_that_scale_to_their_cells() {
        let page = html(&simulated(3, None)).unwrap();
        assert!(page.contains("@media (min-width: 1200px) { .charts { grid-template-columns: repeat(2, minmax(0, 1fr)); } }"));
        assert!(
            page.contains("<div class=\"table\"><table"),
            "wide tables scroll in a box"
        );
        assert!(page.contains(".table { overflow-x: auto;"));
        let figures = figures_of(&page);
        assert!(figures.len() >= 7, "{}", figures.len());
        for f in &figures {
            assert!(
                f.starts_with("<svg width=\"100%\" viewBox=\"0 0 760 380\""),
                "{}",
                &f[..80]
            );
        }
        assert!(!page.contains("<svg width=\"760\""));
        // Legends are HTML under the charts, never drawn over the data.
        assert!(page.contains(
            "<div class=\"legend\"><span><i style=\"background:#0072b2\"></i>random</span>"
        ));
    }

    #[test]
    fn captions_say_what_to_read_not_the_title() {
        let mut results = simulated(3, None);
        results.scenario.backends[0].antagonist = Some("0.3:1s:10s:1s".into());
        let page = html(&results).unwrap();
        let mut captions = 0;
        for f in figures_of(&page) {
            let Some(at) = f.find("<figcaption>") else {
                continue;
            };
            captions += 1;
            let caption = &f[at + 12..f.find("</figcaption>").unwrap()];
            let svg = &f[..at];
            // The chart's title is the SVG's first text.
            let title = svg.split("<text").nth(1).unwrap();
            let title = &title[title.find('>').unwrap() + 1..title.find("</text>").unwrap()];
            let words = |t: &str| -> Vec<String> {
                t.split_whitespace()
                    .take(2)
                    .map(str::to_lowercase)
                    .collect()
            };
            assert!(caption.ends_with('.'), "{caption:?}");
            assert_ne!(
                words(caption),
                words(title),
                "{caption:?} repeats {title:?}"
            );
            assert!(
                !title.to_lowercase().contains(&caption.to_lowercase()),
                "{caption:?}"
            );
        }
        assert!(captions >= 4, "{captions}");
    }

    #[test]
    fn the_throughput_chart_has_an_offered_line_per_offered_load() {
        let labels = |results: &Results| -> Vec<String> {
            let runs: Vec<&Measured> = results.runs.iter().collect();
            let frame = figures::Frame::of(results, &runs);
            figures::throughput(&runs, &frame)
                .into_iter()
                .map(|(label, _)| label)
                .collect()
        };
        // The same traffic for both (the lab, or one load): one line.
        assert_eq!(
            labels(&simulated(2, None)),
            ["random", "round_robin", "offered"]
        );
        let mut results = simulated(2, Some(0.5));
        assert_eq!(labels(&results), ["random", "round_robin", "offered"]);
        // Two loads on one chart: a line for each, named by it.
        results.runs[1].offered_load = Some(0.9);
        assert_eq!(
            labels(&results),
            ["random", "round_robin", "offered λ=0.50", "offered λ=0.90"]
        );
    }

    #[test]
    fn time_charts_shade_the_antagonist_windows() {
        let mut results = simulated(3, None);
        results.scenario.backends[0].antagonist = Some("0.3:1.5s:10s:1s".into());
        let page = html(&results).unwrap();
        let figures = figures_of(&page);
        // The CDF has no time axis; the p99 over time has the band, with its label.
        assert!(!figures[0].contains("class=\"window"));
        assert!(figures[1].contains("p99 latency per second"));
        assert!(
            figures[1].contains("<g class=\"window antagonist\"><title>antagonist: b 30% from 1 s to 2.5 s</title><rect "),
            "{}",
            figures[1]
        );
        assert!(figures[1].contains(">b 30%</text>"));
        assert!(
            !html(&simulated(3, None))
                .unwrap()
                .contains("class=\"window")
        );
    }

    #[test]
    fn the_best_value_of_each_column_is_marked() {
        let results = repeated(&[
            &[10.0, 20.0, 30.0, 40.0, 50.0],
            &[11.0, 19.0, 31.0, 41.0, 50.0],
            &[12.0, 21.0, 29.0, 39.0, 49.0],
        ]);
        let md = markdown(&results);
        let row = |label: &str| {
            md.lines()
                .find(|l| l.starts_with(&format!("| {label} |")))
                .unwrap()
                .to_owned()
        };
        // p99 medians 30, 31, 29 at λ = 0.50 and 60, 62, 58 at λ = 0.90: the lowest of each
        // case in bold, not the lowest over both; equal columns (the mean) all bold.
        assert!(row("least_conn λ=0.50").contains("| **29.0** |"), "{md}");
        assert!(row("random λ=0.50").contains("| 30.0 |"), "{md}");
        assert!(row("least_conn λ=0.90").contains("| **58.0** |"), "{md}");
        assert!(row("random λ=0.90").contains("| 60.0 |"), "{md}");
        for label in ["random λ=0.50", "round_robin λ=0.90"] {
            let mean = row(label).split(" | ").nth(2).unwrap().to_owned();
            assert!(mean.starts_with("**"), "{label}: {mean}");
        }
        // Not the request count (neither better).
        assert!(
            !row("random λ=0.50").starts_with("| random λ=0.50 | **"),
            "{md}"
        );
        let page = html(&results).unwrap();
        assert!(
            page.contains("<td class=\"best\"><b>29.0</b></td>"),
            "{page}"
        );
        assert!(page.contains("td.best { font-weight: bold;"));
    }

    #[test]
    fn the_verdict_names_the_winner_by_how_much_and_whether_it_is_noise() {
        let close = repeated(&[
            &[10.0, 20.0, 30.0, 40.0, 50.0],
            &[11.0, 19.0, 31.0, 41.0, 50.0],
            &[12.0, 21.0, 29.0, 39.0, 49.0],
        ]);
        let v = verdict(&close);
        assert!(
            v.starts_with("At λ=0.50: on p99, least_conn is lowest at 29.0 ms ["),
            "{v}"
        );
        assert!(v.contains("3% lower than random's 30.0 ms ["), "{v}");
        assert!(
            v.contains("could not tell least_conn and random apart"),
            "{v}"
        );
        assert!(
            v.contains(", and 6% lower than round_robin's 31.0 ms ["),
            "{v}"
        );
        assert!(
            v.contains("on mean, random, round_robin and least_conn tie at"),
            "{v}"
        );
        assert!(v.contains("Medians of 5 paired repetitions"), "{v}");
        let clear = repeated(&[
            &[10.0, 11.0, 12.0, 10.0, 11.0],
            &[50.0, 52.0, 51.0, 53.0, 50.0],
            &[20.0, 21.0, 22.0, 20.0, 21.0],
        ]);
        let v = verdict(&clear);
        assert!(v.contains("At λ=0.50: on p99, random is lowest at 11.0 ms [10.0, 12.0], 48% lower than least_conn's 21.0 ms [20.0, 22.0], and 4.6× lower than round_robin's 51.0 ms"), "{v}");
        assert!(v.contains("distinguishable from least_conn"), "{v}");
        // At the top of results.md and of the page.
        let md = markdown(&clear);
        assert!(md.contains(&format!("**Verdict.** {v}\n")), "{md}");
        assert!(md.find("**Verdict.**") < md.find("| algorithm |"));
        assert!(
            html(&clear)
                .unwrap()
                .contains("<p class=\"verdict\">At λ=0.50: on p99, random")
        );
        let one = verdict(&simulated(2, None));
        assert!(
            one.starts_with("On p99, random and round_robin tie at"),
            "{one}"
        );
        assert!(one.contains("One repetition: no interval"), "{one}");
    }

    /// `repeated`'s runs of `label` with `failed` of 100 requests failed (and none answered
    /// when all failed: an empty histogram, p99 and mean 0).
    fn failing(results: &mut Results, label: &str, failed: u64) {
        for m in results.runs.iter_mut().filter(|m| m.label == label) {
            let s = &mut m.row.summary;
            (s.sent, s.ok, s.failed, s.timeouts) = (100, 100 - failed, failed, 0);
            if failed == 100 {
                (s.p99_ms, s.mean_ms, s.p50_ms) = (0.0, 0.0, 0.0);
            }
        }
    }

    #[test]
    fn a_contender_that_answered_nothing_is_not_the_winner() {
        let mut results = repeated(&[
            &[10.0, 11.0, 12.0, 10.0, 11.0],
            &[50.0, 52.0, 51.0, 53.0, 50.0],
            &[20.0, 21.0, 22.0, 20.0, 21.0],
        ]);
        for label in results.labels.clone() {
            failing(&mut results, &label, 0);
        }
        failing(&mut results, "random λ=0.50", 100);
        let v = verdict(&results);
        let at_50 = &v[..v.find("At λ=0.90").unwrap()];
        assert!(!at_50.contains("random is lowest"), "{v}");
        assert!(
            v.contains("At λ=0.50: on p99, least_conn is lowest at 21.0 ms [20.0, 22.0], 2.4× lower than round_robin's"),
            "{v}"
        );
        assert!(
            v.contains("; random answered no request (all 500 failed or timed out), so not ranked. At λ=0.90"),
            "{v}"
        );
        // Every contender silent: nothing ranked.
        for label in results.labels.clone() {
            failing(&mut results, &label, 100);
        }
        let v = verdict(&results);
        assert!(
            v.starts_with("At λ=0.50: no contender answered a request in every repetition; "),
            "{v}"
        );
        assert!(!v.contains("is lowest"), "{v}");
    }

    #[test]
    fn a_winner_that_failed_more_requests_says_so() {
        let mut results = repeated(&[
            &[10.0, 11.0, 12.0, 10.0, 11.0],
            &[50.0, 52.0, 51.0, 53.0, 50.0],
            &[20.0, 21.0, 22.0, 20.0, 21.0],
        ]);
        for label in results.labels.clone() {
            failing(&mut results, &label, 0);
        }
        failing(&mut results, "random λ=0.50", 12);
        failing(&mut results, "round_robin λ=0.50", 1);
        let v = verdict(&results);
        assert!(
            v.contains("on p99, random is lowest at 11.0 ms [10.0, 12.0], 48% lower than least_conn's 21.0 ms [20.0, 22.0], and "),
            "{v}"
        );
        assert!(
            v.contains("random was lower by 10.0 ms [10.0, 10.0], but 12% of its requests failed or timed out against 0% of least_conn's; on mean"),
            "{v}"
        );
        assert!(
            v.contains("; requests failed or timed out: random 12%, round_robin 1.0%, least_conn 0%. At λ=0.90"),
            "{v}"
        );
        // No failures at λ = 0.90: no clause and no list.
        let at_90 = &v[v.find("At λ=0.90").unwrap()..];
        assert!(!at_90.contains("failed or timed out"), "{v}");
    }

    #[test]
    fn repetitions_are_told_apart_by_their_paired_difference() {
        // The per-contender intervals overlap, but least_conn was lower by 1 ms in every
        // repetition: the paired difference tells them apart.
        let paired = repeated(&[
            &[11.0, 21.0, 31.0, 41.0, 51.0],
            &[60.0, 70.0, 80.0, 90.0, 99.0],
            &[10.0, 20.0, 30.0, 40.0, 50.0],
        ]);
        let v = verdict(&paired);
        assert!(
            v.contains("least_conn is lowest at 30.0 ms [10.0, 50.0], 3% lower than random's 31.0 ms [11.0, 51.0], and 2.7× lower than round_robin's 80.0 ms [60.0, 99.0] — distinguishable from random: paired by repetition, least_conn was lower by 1.0 ms [1.0, 1.0]"),
            "{v}"
        );
        assert!(!v.contains("overlap"), "{v}");
        // Lower in three repetitions, higher in two: the paired interval holds 0.
        let close = repeated(&[
            &[10.0, 20.0, 30.0, 40.0, 50.0],
            &[11.0, 19.0, 31.0, 41.0, 50.0],
            &[12.0, 21.0, 29.0, 39.0, 49.0],
        ]);
        let v = verdict(&close);
        assert!(
            v.contains("these runs could not tell least_conn and random apart: paired by repetition, the difference is 1.0 ms [-2.0, 1.0], which includes 0"),
            "{v}"
        );
        assert!(!v.contains("distinguishable from random"), "{v}");
        assert!(
            v.contains("when the 95% interval of their paired difference"),
            "{v}"
        );
    }

    #[test]
    fn the_simulator_s_util_sigma_is_not_from_a_load_endpoint() {
        let mut results = simulated(2, None);
        let md = markdown(&results);
        assert!(!md.contains("from their `/load`"), "{md}");
        assert!(
            md.contains("the simulator's model of each backend meters it"),
            "{md}"
        );
        results.simulated = false;
        assert!(markdown(&results).contains("(from their `/load`)"));
    }
}
