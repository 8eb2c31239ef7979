//! The results of a lab run, written out: `results.csv` (one row per contender, the medians
//! over the repetitions), `results.md` (the same table with the scenario, the date and the
//! machine) and `report.html` (one self-contained page with the table and plots drawn by
//! `plotters` as inline SVG).
//!
//! **Over repetitions** (paired: repetition `r` is the same seeded trace for every contender):
//! each report gives the median of p50, p95, p99 and mean with a 95% percentile-bootstrap
//! interval ([`crate::stats`]), and paired win counts on p99 between the contenders of a case
//! (the labels that differ only in the contender, not in offered load, report delay or
//! balancer count): "A beat B in k of n". `repetitions.csv` keeps every repetition's numbers
//! (what `fulcrum evidence` pairs) and `wins.csv` the win counts. One repetition has no
//! interval and no win count, and the reports say so.
//!
//! Everything is read from each run's [`Tally`] and its backends' samples, never from
//! per-request records, so that the simulator's runs (ten million requests, ten thousand
//! backends) write the same files as the lab's. Many backends are summarized: above
//! [`SHARE_COLUMN_LIMIT`] the shares become their minimum, median and maximum; above
//! [`SHARE_CHART_LIMIT`] the share chart sorts the backends' shares over the run and the
//! utilization chart draws the lowest, mean and highest backend. A run longer than ten
//! minutes is plotted per a few seconds rather than per second ([`Tally::bucket_width`]).

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use plotters::prelude::*;

use crate::load::closed::Users;
use crate::run::{Measured, Results, Row};
use crate::scenario::Load;
use crate::schedule::Pattern;
use crate::stats::{self, Interval};

mod repetitions;
use crate::tally::{SHARE_CHART_LIMIT, Tally};
pub use repetitions::{
    REPETITION_COLUMNS, WIN_COLUMNS, cases, group_cases, p99_best_in, p99_wins, split_label,
    without_delay,
};

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

/// A line's cells in the tables of `results.md` and `report.html`, rounded for reading.
fn cells(l: &Line) -> [String; 14] {
    [
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
    ]
}

/// The results table as Markdown (also printed by `fulcrum lab run` and the demo).
pub fn table(results: &Results) -> String {
    let mut out = format!(
        "| {} |\n|---|{}\n",
        HEADINGS.join(" | "),
        "---:|".repeat(HEADINGS.len() - 1)
    );
    for l in lines(results) {
        let row = cells(&l).map(|c| c.replace('|', "\\|"));
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

/// `results.md`.
pub fn markdown(results: &Results) -> String {
    let s = &results.scenario;
    let mut out = format!("# {}\n\n", s.name);
    if !s.description.is_empty() {
        writeln!(out, "{}\n", s.description).ok();
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
    writeln!(
        out,
        "\nLatencies count {}; a timeout counts at the timeout. `util σ` is the standard deviation of the backends' CPU utilization (from their `/load`), averaged over the run.",
        latency_origin(&results.traffic.load)
    )
    .ok();
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

/// A series: its name and its points.
type Series = (String, Vec<(f64, f64)>);

const WIDTH: u32 = 760;
const HEIGHT: u32 = 380;

fn color(i: usize) -> RGBColor {
    // Distinct on white, and told apart by most colour-blind readers (Okabe–Ito).
    const COLORS: [RGBColor; 8] = [
        RGBColor(0, 114, 178),
        RGBColor(213, 94, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(230, 159, 0),
        RGBColor(86, 180, 233),
        RGBColor(0, 0, 0),
        RGBColor(240, 228, 66),
    ];
    COLORS[i % COLORS.len()]
}

fn upper(series: &[Series], f: fn(&(f64, f64)) -> f64) -> f64 {
    series
        .iter()
        .flat_map(|(_, p)| p.iter().map(f))
        .fold(0.0, f64::max)
}

/// A chart of lines, as SVG; `log_x` draws x on a log scale (from 1).
fn line_chart(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    log_x: bool,
) -> anyhow::Result<String> {
    let x_max = upper(series, |p| p.0).max(if log_x { 10.0 } else { 1.0 }) * 1.02;
    let y_max = upper(series, |p| p.1).max(1e-9) * 1.08;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64);
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart.map_err(|e| anyhow::anyhow!("{e}"))?;
                chart
                    .configure_mesh()
                    .x_desc(x_desc)
                    .y_desc(y_desc)
                    .light_line_style(RGBColor(235, 235, 235))
                    .draw()
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                for (i, (name, points)) in series.iter().enumerate() {
                    let c = color(i);
                    chart
                        .draw_series(LineSeries::new(
                            points
                                .iter()
                                .map(|&(x, y)| (if log_x { x.max(1.0) } else { x }, y)),
                            c.stroke_width(2),
                        ))
                        .map_err(|e| anyhow::anyhow!("{e}"))?
                        .label(name.as_str())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                        });
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.85))
                    .border_style(RGBColor(180, 180, 180))
                    .position(SeriesLabelPosition::UpperLeft)
                    .draw()
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
            }};
        }
        if log_x {
            draw!(builder.build_cartesian_2d((1f64..x_max).log_scale(), 0f64..y_max));
        } else {
            draw!(builder.build_cartesian_2d(0f64..x_max, 0f64..y_max));
        }
        root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(svg)
}

/// The first repetition of every contender (the plots show one run each).
fn first_runs(results: &Results) -> Vec<&Measured> {
    results
        .labels
        .iter()
        .filter_map(|l| results.runs.iter().find(|m| &m.label == l))
        .collect()
}

/// "second", or "6 s" for wider buckets: what a chart's time buckets are.
fn bucket_name(t: &Tally) -> String {
    match t.bucket_width().as_secs() {
        1 => "second".into(),
        n => format!("{n} s"),
    }
}

/// A bucket's middle, in seconds.
fn bucket_x(t: &Tally, k: usize) -> f64 {
    (k as f64 + 0.5) * t.bucket_width().as_secs_f64()
}

/// A ramp's offered load at a time, and its unit: the open loop's rate steps, or the closed
/// loop's user steps.
type Ramp = (Box<dyn Fn(Duration) -> f64>, &'static str);

fn ramp(load: &Load) -> Option<Ramp> {
    match *load {
        Load::Open(pattern @ Pattern::Steps { .. }) => Some((
            Box::new(move |t| pattern.rate_at(t).unwrap_or_default()),
            "offered rate (requests per second)",
        )),
        Load::Closed(users @ Users::Steps { .. }) => Some((
            Box::new(move |t| f64::from(users.at(t))),
            "users (closed loop)",
        )),
        _ => None,
    }
}

/// The backends' CPU utilization at one sampling instant: lowest, sum, highest, how many.
#[derive(Clone, Copy)]
struct Spread {
    min: f64,
    sum: f64,
    max: f64,
    n: usize,
}

/// For a run over more than [`SHARE_CHART_LIMIT`] backends: at each sampling instant, the
/// lowest, the mean and the highest CPU utilization across backends.
fn utilization_spread(m: &Measured) -> Vec<Series> {
    let mut by_instant: std::collections::BTreeMap<Duration, Spread> = Default::default();
    for s in &m.samples {
        let e = by_instant.entry(s.at).or_insert(Spread {
            min: f64::INFINITY,
            sum: 0.0,
            max: f64::NEG_INFINITY,
            n: 0,
        });
        e.min = e.min.min(s.cpu);
        e.sum += s.cpu;
        e.max = e.max.max(s.cpu);
        e.n += 1;
    }
    let series = |name: &str, f: fn(&Spread) -> f64| -> Series {
        let points = by_instant
            .iter()
            .map(|(at, e)| (at.as_secs_f64(), f(e)))
            .collect();
        (name.into(), points)
    };
    vec![
        series("min", |e| e.min),
        series("mean", |e| e.sum / e.n as f64),
        series("max", |e| e.max),
    ]
}

/// A figure of the page: its caption, and its chart as SVG.
type Figure = (String, String);

/// `report.html`: the table and the plots, one self-contained page.
pub fn html(results: &Results) -> anyhow::Result<String> {
    let figures = figures(results)?;
    let mut page = String::new();
    write_head(&mut page, results);
    write_table(&mut page, results);
    repetitions::html(&mut page, results);
    write_figures(&mut page, figures);
    Ok(page)
}

/// Every chart of the page, in order: latency, throughput, then each contender's backends,
/// then (for a ramp) the figures against the offered load. The plots show the first
/// repetition of each contender.
fn figures(results: &Results) -> anyhow::Result<Vec<Figure>> {
    let runs = first_runs(results);
    let per = runs
        .first()
        .map_or_else(|| "second".into(), |m| bucket_name(&m.tally));
    let mut figures = vec![latency_cdf(&runs, &results.traffic.load)?];
    figures.extend(latency_over_time(&runs, &per)?);
    figures.push(throughput_over_time(&runs, &per)?);
    if runs.iter().any(|m| m.row.summary.failed > 0) {
        figures.push(goodput_over_time(&runs, &per)?);
    }
    // Per contender: each backend's share of the requests, and its utilization.
    let many = results.backends.len() > SHARE_CHART_LIMIT;
    for m in &runs {
        figures.push(shares(results, m, many)?);
        figures.push(utilization(results, m, many)?);
    }
    if let Some(ramp) = ramp(&results.traffic.load) {
        figures.extend(against_offered_load(&runs, ramp)?);
    }
    Ok(figures)
}

/// Each contender's latency CDF over the whole run.
fn latency_cdf(runs: &[&Measured], load: &Load) -> anyhow::Result<Figure> {
    let cdfs: Vec<Series> = runs
        .iter()
        .map(|m| (m.label.clone(), m.tally.cdf()))
        .collect();
    Ok((
        "Latency CDF".into(),
        line_chart(
            match load {
                Load::Open(_) => "Latency CDF (from the intended send time)",
                Load::Closed(_) => "Latency CDF (from the send)",
            },
            "latency, ms (log scale)",
            "fraction of requests",
            &cdfs,
            true,
        )?,
    ))
}

/// One series per contender: `f` of each time bucket that has a value, at the bucket's
/// middle.
fn per_bucket(runs: &[&Measured], f: &dyn Fn(&Tally, usize) -> Option<f64>) -> Vec<Series> {
    runs.iter()
        .map(|m| {
            let t = &m.tally;
            let points = (0..t.offered().len())
                .filter_map(|k| f(t, k).map(|y| (bucket_x(t, k), y)))
                .collect();
            (m.label.clone(), points)
        })
        .collect()
}

/// The p99 and the mean latency per time bucket (`per`: what a bucket is).
fn latency_over_time(runs: &[&Measured], per: &str) -> anyhow::Result<[Figure; 2]> {
    Ok([
        (
            "p99 latency over time".into(),
            line_chart(
                &format!("p99 latency per {per} of the run"),
                "seconds",
                "p99 latency, ms",
                &per_bucket(runs, &|t, k| t.quantile_ms(k, 0.99)),
                false,
            )?,
        ),
        (
            "Mean latency over time".into(),
            line_chart(
                &format!("Mean latency per {per} of the run"),
                "seconds",
                "mean latency, ms",
                &per_bucket(runs, &|t, k| t.mean_ms(k)),
                false,
            )?,
        ),
    ])
}

/// Throughput: answers by the bucket they ended in, and the offered load.
fn throughput_over_time(runs: &[&Measured], per: &str) -> anyhow::Result<Figure> {
    let mut throughput = per_end_bucket(runs, &Tally::answered_by_end);
    if let Some(m) = runs.first() {
        let t = &m.tally;
        let points = t
            .offered()
            .iter()
            .enumerate()
            .map(|(k, &n)| (bucket_x(t, k), n as f64))
            .collect();
        throughput.push(("offered".into(), points));
    }
    Ok((
        "Throughput over time".into(),
        line_chart(
            &format!("Answers per {per} (and requests offered)"),
            "seconds",
            &format!("requests per {per}"),
            &throughput,
            false,
        )?,
    ))
}

/// Goodput: successful answers by the bucket they ended in (drawn when some answer failed:
/// then the answers' count hides what the clients got).
fn goodput_over_time(runs: &[&Measured], per: &str) -> anyhow::Result<Figure> {
    Ok((
        "Successful answers over time".into(),
        line_chart(
            &format!("Successful (2xx) answers per {per}"),
            "seconds",
            &format!("successes per {per}"),
            &per_end_bucket(runs, &Tally::succeeded_by_end),
            false,
        )?,
    ))
}

/// One series per contender: `counts` of its tally per bucket of the time answers ended, up
/// to the last answer (the run's length at least).
fn per_end_bucket(runs: &[&Measured], counts: &dyn Fn(&Tally) -> &[u64]) -> Vec<Series> {
    runs.iter()
        .map(|m| {
            let t = &m.tally;
            let ended = t.answered_by_end();
            let last = ended
                .iter()
                .rposition(|&n| n > 0)
                .unwrap_or(0)
                .max(t.offered().len() - 1)
                .min(ended.len() - 1);
            let points = counts(t)
                .iter()
                .take(last + 1)
                .enumerate()
                .map(|(k, &n)| (bucket_x(t, k), n as f64))
                .collect();
            (m.label.clone(), points)
        })
        .collect()
}

/// A contender's share of the requests per backend: per time bucket, or with `many`
/// backends, each backend's share over the whole run, sorted.
fn shares(results: &Results, m: &Measured, many: bool) -> anyhow::Result<Figure> {
    let t = &m.tally;
    let chart = if many {
        let mut shares: Vec<f64> = t
            .served()
            .iter()
            .map(|&n| n as f64 / t.answered().max(1) as f64)
            .collect();
        shares.sort_by(|a, b| b.total_cmp(a));
        let points = shares
            .iter()
            .enumerate()
            .map(|(k, &s)| ((k + 1) as f64, s))
            .collect();
        line_chart(
            &format!("{}: each backend's share over the run, sorted", m.label),
            "backend rank",
            "share",
            &[("share".into(), points)],
            false,
        )?
    } else {
        let shares: Vec<Series> = results
            .backends
            .iter()
            .enumerate()
            .map(|(b, name)| {
                let points = t
                    .offered()
                    .iter()
                    .enumerate()
                    .filter(|&(_, &n)| n > 0)
                    .map(|(k, &n)| {
                        let mine = t.served_in(k, b).unwrap_or(0);
                        (bucket_x(t, k), mine as f64 / n as f64)
                    })
                    .collect();
                (name.clone(), points)
            })
            .collect();
        line_chart(
            &format!("{}: each backend's share of the requests", m.label),
            "seconds",
            "share",
            &shares,
            false,
        )?
    };
    Ok((format!("{}: share per backend", m.label), chart))
}

/// A contender's backends' CPU utilization as they reported it: each backend's, or with
/// `many` backends, the lowest, mean and highest.
fn utilization(results: &Results, m: &Measured, many: bool) -> anyhow::Result<Figure> {
    let util: Vec<Series> = if many {
        utilization_spread(m)
    } else {
        results
            .backends
            .iter()
            .enumerate()
            .map(|(k, name)| {
                let points = m
                    .samples
                    .iter()
                    .filter(|s| s.backend == k)
                    .map(|s| (s.at.as_secs_f64(), s.cpu))
                    .collect();
                (name.clone(), points)
            })
            .collect()
    };
    let title = if many {
        format!(
            "{}: the backends' CPU utilization, lowest, mean and highest (their /load)",
            m.label
        )
    } else {
        format!("{}: each backend's CPU utilization (its /load)", m.label)
    };
    Ok((
        format!("{}: utilization per backend", m.label),
        line_chart(&title, "seconds", "cpu", &util, false)?,
    ))
}

/// Ramps: throughput and mean latency against the offered load, step by step.
fn against_offered_load(runs: &[&Measured], (offered, unit): Ramp) -> anyhow::Result<[Figure; 2]> {
    let mut tput: Vec<Series> = Vec::new();
    let mut mean: Vec<Series> = Vec::new();
    for m in runs {
        let t = &m.tally;
        let Some(hold) = t.ramp_hold() else { continue };
        let (mut a, mut l) = (Vec::new(), Vec::new());
        for (k, step) in t.steps().iter().enumerate() {
            let x = offered(hold * k as u32 + hold / 2);
            a.push((x, step.answered as f64 / hold.as_secs_f64()));
            if let Some(y) = step.mean_ms() {
                l.push((x, y));
            }
        }
        tput.push((m.label.clone(), a));
        mean.push((m.label.clone(), l));
    }
    Ok([
        (
            "Throughput against offered load".into(),
            line_chart(
                &format!("Answers per second against the {unit}"),
                unit,
                "answers per second",
                &tput,
                false,
            )?,
        ),
        (
            "Mean latency against offered load".into(),
            line_chart(
                &format!("Mean latency against the {unit}"),
                unit,
                "mean latency, ms",
                &mean,
                false,
            )?,
        ),
    ])
}

/// The page's head (title, style) and what was run: the scenario, the date, the machine, the
/// traffic, the backends.
fn write_head(page: &mut String, results: &Results) {
    let s = &results.scenario;
    write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{name} — fulcrum {tool}</title>\n<style>\nbody {{ font-family: sans-serif; margin: 2em auto; max-width: 1600px; color: #222; }}\ntable {{ border-collapse: collapse; margin: 1em 0; }}\nth, td {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}\nth:first-child, td:first-child {{ text-align: left; }}\n.charts {{ display: flex; flex-wrap: wrap; gap: 12px; }}\nfigure {{ margin: 0; }}\nfigcaption {{ font-size: 90%; color: #555; }}\n</style></head><body>\n<h1>{name}</h1>\n",
        name = escape(&s.name),
        tool = if results.simulated { "sim" } else { "lab" }
    )
    .ok();
    if !s.description.is_empty() {
        writeln!(page, "<p>{}</p>", escape(&s.description)).ok();
    }
    writeln!(
        page,
        "<ul><li>date: {}</li><li>{}: {}</li><li>traffic: {}</li><li>backends: {}</li><li>repetitions: {} (medians; the plots show the first)</li></ul>",
        escape(&date(results)),
        machine_label(results),
        escape(&machine()),
        escape(&traffic_line(results)),
        escape(&backends_line(results)),
        s.repetitions
    )
    .ok();
}

/// The results table: one row per contender, as in `results.md`.
fn write_table(page: &mut String, results: &Results) {
    page.push_str("<table><tr>");
    for h in HEADINGS {
        write!(page, "<th>{}</th>", escape(h)).ok();
    }
    page.push_str("</tr>\n");
    for l in lines(results) {
        page.push_str("<tr>");
        for cell in cells(&l) {
            write!(page, "<td>{}</td>", escape(&cell)).ok();
        }
        page.push_str("</tr>\n");
    }
    page.push_str("</table>\n");
}

/// The charts, each with its caption, and the end of the page.
fn write_figures(page: &mut String, figures: Vec<Figure>) {
    page.push_str("<div class=\"charts\">\n");
    for (caption, svg) in figures {
        writeln!(
            page,
            "<figure>{svg}<figcaption>{}</figcaption></figure>",
            escape(&caption)
        )
        .ok();
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
        let figures = |page: &str| page.matches("<figure>").count();
        assert_eq!(figures(&many), figures(&few));
        assert!(many.contains("random: each backend&apos;s share over the run, sorted"));
        assert!(many.contains("round_robin: each backend&apos;s share over the run, sorted"));
        assert!(many.contains("lowest, mean and highest"));
        assert!(!many.contains("share of the requests"));
    }
}
