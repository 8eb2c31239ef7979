//! The results of a lab run, written out: `results.csv` (one row per contender, the medians
//! over the repetitions), `results.md` (the same table with the scenario, the date and the
//! machine) and `report.html` (one self-contained page with the table and plots drawn by
//! `plotters` as inline SVG).

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use plotters::prelude::*;

use crate::load::Outcome;
use crate::load::closed::Users;
use crate::run::{Measured, Results, Row};
use crate::scenario::Load;
use crate::schedule::Pattern;

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
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
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

/// `results.csv`.
pub fn csv(results: &Results) -> String {
    let mut out = COLUMNS.join(",");
    out.push_str(",repetitions,p99_ms_min,p99_ms_max,mean_ms_min,mean_ms_max");
    for b in &results.backends {
        write!(out, ",share_{b}").ok();
    }
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
        for s in &l.shares {
            write!(out, ",{s:.4}").ok();
        }
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
    format!("{host}: {cores} cores ({cpu}), Linux {kernel}")
}

fn date(results: &Results) -> String {
    humantime::format_rfc3339_seconds(results.started).to_string()
}

fn traffic_line(results: &Results) -> String {
    let t = &results.scenario.traffic;
    let load = match &results.traffic.load {
        Load::Open(_) => format!("open loop, {}", t.pattern.as_deref().unwrap_or_default()),
        Load::Closed(_) => format!(
            "closed loop, {} users",
            t.concurrency.as_deref().unwrap_or_default()
        ),
    };
    format!(
        "{load} for {}, cost {}, timeout {}, {} client addresses, seed {}",
        t.duration, t.cost, t.timeout, t.clients, results.scenario.seed
    )
}

fn backends_line(results: &Results) -> String {
    results
        .scenario
        .backend_plans()
        .iter()
        .map(|p| {
            let b = &p.spec;
            let mut s = format!(
                "{} ({} × {} workers, speed {}, weight {}",
                p.name, b.mode, b.workers, b.speed, b.weight
            );
            if let Some(a) = &b.antagonist {
                write!(s, ", antagonist {a}").ok();
            }
            if let Some(f) = b.fail_rate {
                write!(s, ", fail rate {f}").ok();
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

/// `results.md`.
pub fn markdown(results: &Results) -> String {
    let s = &results.scenario;
    let mut out = format!("# {}\n\n", s.name);
    if !s.description.is_empty() {
        writeln!(out, "{}\n", s.description).ok();
    }
    writeln!(out, "* date: {}", date(results)).ok();
    writeln!(out, "* machine: {}", machine()).ok();
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
    out.push_str(
        "\nLatencies count from each request's intended send time (open loop); a timeout counts at the timeout. `util σ` is the standard deviation of the backends' CPU utilization (from their `/load`), averaged over the run.\n",
    );
    let shares: Vec<String> = lines(results)
        .iter()
        .map(|l| {
            let parts: Vec<String> = results
                .backends
                .iter()
                .zip(&l.shares)
                .map(|(b, s)| format!("{b} {:.1}%", s * 100.0))
                .collect();
            format!("* {}: {}", l.label, parts.join(", "))
        })
        .collect();
    writeln!(
        out,
        "\nShare of the answered requests per backend:\n\n{}",
        shares.join("\n")
    )
    .ok();
    out
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

/// A latency per request: answered ones from their intended time, timeouts at the timeout.
fn latency_ms(o: &Outcome, timeout: Duration) -> Option<f64> {
    match o.latency {
        Some(l) => Some(l.as_secs_f64() * 1000.0),
        None if o.timed_out => Some(timeout.as_secs_f64() * 1000.0),
        None => None,
    }
}

/// The first repetition of every contender (the plots show one run each).
fn first_runs(results: &Results) -> Vec<&Measured> {
    results
        .labels
        .iter()
        .filter_map(|l| results.runs.iter().find(|m| &m.label == l))
        .collect()
}

/// The latency CDF of a run, at most ~400 points.
fn cdf(m: &Measured, timeout: Duration) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = m
        .outcomes
        .iter()
        .filter_map(|o| latency_ms(o, timeout))
        .collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let step = (n / 400).max(1);
    let mut points: Vec<(f64, f64)> = (0..n)
        .step_by(step)
        .map(|i| (v[i], (i + 1) as f64 / n as f64))
        .collect();
    if let Some(&last) = v.last() {
        points.push((last, 1.0));
    }
    points
}

/// Outcomes per second of intended time.
fn by_second(m: &Measured, seconds: usize) -> Vec<Vec<&Outcome>> {
    let mut buckets: Vec<Vec<&Outcome>> = vec![Vec::new(); seconds.max(1)];
    for o in &m.outcomes {
        let k = (o.intended.as_secs() as usize).min(buckets.len() - 1);
        buckets[k].push(o);
    }
    buckets
}

fn percentile(mut v: Vec<f64>, q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let k = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    Some(v[k])
}

/// A ramp's step length, the offered load at a time, and its unit: the open loop's rate
/// steps, or the closed loop's user steps.
type Ramp = (Duration, Box<dyn Fn(Duration) -> f64>, &'static str);

fn ramp(load: &Load) -> Option<Ramp> {
    match *load {
        Load::Open(pattern @ Pattern::Steps { hold, .. }) => Some((
            hold,
            Box::new(move |t| pattern.rate_at(t).unwrap_or_default()),
            "offered rate (requests per second)",
        )),
        Load::Closed(users @ Users::Steps { hold, .. }) => Some((
            hold,
            Box::new(move |t| f64::from(users.at(t))),
            "users (closed loop)",
        )),
        _ => None,
    }
}

/// `report.html`: the table and the plots, one self-contained page.
pub fn html(results: &Results) -> anyhow::Result<String> {
    let timeout = results.traffic.timeout;
    let seconds = results.traffic.duration.as_secs_f64().ceil() as usize;
    let runs = first_runs(results);
    let mut charts: Vec<(String, String)> = Vec::new();

    let cdfs: Vec<Series> = runs
        .iter()
        .map(|m| (m.label.clone(), cdf(m, timeout)))
        .collect();
    charts.push((
        "Latency CDF".into(),
        line_chart(
            "Latency CDF (from the intended send time)",
            "latency, ms (log scale)",
            "fraction of requests",
            &cdfs,
            true,
        )?,
    ));

    let per_second = |f: &dyn Fn(&[&Outcome]) -> Option<f64>| -> Vec<Series> {
        runs.iter()
            .map(|m| {
                let points = by_second(m, seconds)
                    .iter()
                    .enumerate()
                    .filter_map(|(s, b)| f(b).map(|y| (s as f64 + 0.5, y)))
                    .collect();
                (m.label.clone(), points)
            })
            .collect()
    };
    let latencies =
        |b: &[&Outcome]| -> Vec<f64> { b.iter().filter_map(|o| latency_ms(o, timeout)).collect() };
    charts.push((
        "p99 latency over time".into(),
        line_chart(
            "p99 latency per second of the run",
            "seconds",
            "p99 latency, ms",
            &per_second(&|b| percentile(latencies(b), 0.99)),
            false,
        )?,
    ));
    charts.push((
        "Mean latency over time".into(),
        line_chart(
            "Mean latency per second of the run",
            "seconds",
            "mean latency, ms",
            &per_second(&|b| {
                let v = latencies(b);
                (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
            }),
            false,
        )?,
    ));
    // Throughput: answers by the second they ended in, and the offered load.
    let mut throughput: Vec<Series> = runs
        .iter()
        .map(|m| {
            let mut per = vec![0.0; seconds + 5];
            for o in &m.outcomes {
                if let (Some(l), Some(_)) = (o.latency, o.status) {
                    let k = ((o.intended + l).as_secs() as usize).min(per.len() - 1);
                    per[k] += 1.0;
                }
            }
            // Up to the last answer (the run's length at least).
            let last = per
                .iter()
                .rposition(|&n| n > 0.0)
                .unwrap_or(0)
                .max(seconds - 1);
            let points = per[..=last.min(per.len() - 1)]
                .iter()
                .enumerate()
                .map(|(s, &n)| (s as f64 + 0.5, n))
                .collect();
            (m.label.clone(), points)
        })
        .collect();
    if let Some(m) = runs.first() {
        let points = by_second(m, seconds)
            .iter()
            .enumerate()
            .map(|(s, b)| (s as f64 + 0.5, b.len() as f64))
            .collect();
        throughput.push(("offered".into(), points));
    }
    charts.push((
        "Throughput over time".into(),
        line_chart(
            "Answers per second (and requests offered)",
            "seconds",
            "requests per second",
            &throughput,
            false,
        )?,
    ));
    // Per contender: each backend's share of the requests, and its utilization.
    for m in &runs {
        let shares: Vec<Series> = results
            .backends
            .iter()
            .map(|name| {
                let points = by_second(m, seconds)
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| !b.is_empty())
                    .map(|(s, b)| {
                        let mine = b
                            .iter()
                            .filter(|o| o.backend.as_deref() == Some(name.as_str()))
                            .count();
                        (s as f64 + 0.5, mine as f64 / b.len() as f64)
                    })
                    .collect();
                (name.clone(), points)
            })
            .collect();
        charts.push((
            format!("{}: share per backend", m.label),
            line_chart(
                &format!("{}: each backend's share of the requests", m.label),
                "seconds",
                "share",
                &shares,
                false,
            )?,
        ));
        let util: Vec<Series> = results
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
            .collect();
        charts.push((
            format!("{}: utilization per backend", m.label),
            line_chart(
                &format!("{}: each backend's CPU utilization (its /load)", m.label),
                "seconds",
                "cpu",
                &util,
                false,
            )?,
        ));
    }
    // Ramps: throughput and mean latency against the offered load, step by step.
    if let Some((hold, offered, unit)) = ramp(&results.traffic.load) {
        let steps = (results.traffic.duration.as_secs_f64() / hold.as_secs_f64()).ceil() as usize;
        let mut tput: Vec<Series> = Vec::new();
        let mut mean: Vec<Series> = Vec::new();
        for m in &runs {
            let mut at_step: Vec<Vec<&Outcome>> = vec![Vec::new(); steps.max(1)];
            for o in &m.outcomes {
                let k = ((o.intended.as_secs_f64() / hold.as_secs_f64()) as usize)
                    .min(at_step.len() - 1);
                at_step[k].push(o);
            }
            let (mut t, mut l) = (Vec::new(), Vec::new());
            for (k, b) in at_step.iter().enumerate() {
                let x = offered(hold * k as u32 + hold / 2);
                let answered = b.iter().filter(|o| o.status.is_some()).count();
                t.push((x, answered as f64 / hold.as_secs_f64()));
                let v = latencies(b);
                if !v.is_empty() {
                    l.push((x, v.iter().sum::<f64>() / v.len() as f64));
                }
            }
            tput.push((m.label.clone(), t));
            mean.push((m.label.clone(), l));
        }
        charts.push((
            "Throughput against offered load".into(),
            line_chart(
                &format!("Answers per second against the {unit}"),
                unit,
                "answers per second",
                &tput,
                false,
            )?,
        ));
        charts.push((
            "Mean latency against offered load".into(),
            line_chart(
                &format!("Mean latency against the {unit}"),
                unit,
                "mean latency, ms",
                &mean,
                false,
            )?,
        ));
    }

    let s = &results.scenario;
    let mut page = String::new();
    write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{name} — fulcrum lab</title>\n<style>\nbody {{ font-family: sans-serif; margin: 2em auto; max-width: 1600px; color: #222; }}\ntable {{ border-collapse: collapse; margin: 1em 0; }}\nth, td {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}\nth:first-child, td:first-child {{ text-align: left; }}\n.charts {{ display: flex; flex-wrap: wrap; gap: 12px; }}\nfigure {{ margin: 0; }}\nfigcaption {{ font-size: 90%; color: #555; }}\n</style></head><body>\n<h1>{name}</h1>\n",
        name = escape(&s.name)
    )
    .ok();
    if !s.description.is_empty() {
        writeln!(page, "<p>{}</p>", escape(&s.description)).ok();
    }
    writeln!(
        page,
        "<ul><li>date: {}</li><li>machine: {}</li><li>traffic: {}</li><li>backends: {}</li><li>repetitions: {} (medians; the plots show the first)</li></ul>",
        escape(&date(results)),
        escape(&machine()),
        escape(&traffic_line(results)),
        escape(&backends_line(results)),
        s.repetitions
    )
    .ok();
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
    page.push_str("</table>\n<div class=\"charts\">\n");
    for (caption, svg) in charts {
        writeln!(
            page,
            "<figure>{svg}<figcaption>{}</figcaption></figure>",
            escape(&caption)
        )
        .ok();
    }
    page.push_str("</div>\n</body></html>\n");
    Ok(page)
}

/// Writes `results.csv`, `results.md` and `report.html` into `dir`.
pub fn write(results: &Results, dir: &Path) -> anyhow::Result<()> {
    let put = |name: &str, text: String| -> anyhow::Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    put("results.csv", csv(results))?;
    put("results.md", markdown(results))?;
    put("report.html", html(results)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_percentiles() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(
            percentile((1..=100).map(f64::from).collect(), 0.99),
            Some(99.0)
        );
        assert_eq!(percentile(vec![5.0], 0.99), Some(5.0));
        assert_eq!(percentile(vec![], 0.5), None);
    }
}
