//! The charts of `report.html`, in order: the latency CDF; p99 and mean latency, throughput
//! (and goodput when answers failed) over time; each contender's backends' shares and
//! utilization; for a ramp, throughput and latency against the offered load. The plots show the
//! first repetition of each contender.
//!
//! Time charts share a [`Frame`]: the run's time buckets, the measured window (a simulated run
//! with a warm-up plots only what it measured) and the scenario's windows of reduced capacity
//! ([`super::windows`]), shaded. Rates are per second whatever the bucket's width, so a chart
//! reads the same for a 24 s lab run and a 10⁷-request simulation.

use std::ops::Range;
use std::time::Duration;

use super::chart::{Axis, Chart, Series, line_chart};
use super::windows::{self, Window};
use crate::load::closed::Users;
use crate::run::{Measured, Results};
use crate::scenario::Load;
use crate::schedule::Pattern;
use crate::tally::{SHARE_CHART_LIMIT, Tally};

/// A figure of the page: what to read from it (its caption, if it needs one), and its chart.
#[derive(Debug)]
pub struct Figure {
    pub read: Option<String>,
    pub chart: Chart,
}

fn figure(read: Option<&str>, chart: Chart) -> Figure {
    Figure {
        read: read.map(str::to_owned),
        chart,
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

/// What the time charts of a run share.
#[derive(Debug)]
pub struct Frame {
    /// "second", or "6 s" for wider buckets (or "26–49 s" when the runs differ in length):
    /// what a chart's time buckets are.
    per: String,
    /// A simulated run with a warm-up: only its measured window is plotted ([`Frame::shown`]).
    warmup: bool,
    /// Where the x axis starts, in seconds: the earliest bucket plotted.
    from: f64,
    windows: Vec<Window>,
}

impl Frame {
    /// The frame of `results`' plotted `runs`.
    pub fn of(results: &Results, runs: &[&Measured]) -> Frame {
        let warmup = results.scenario.sim.as_ref().is_some_and(|s| s.warmup > 0);
        let widths: Vec<u64> = runs
            .iter()
            .map(|m| m.tally.bucket_width().as_secs().max(1))
            .collect();
        let (lo, hi) = (
            widths.iter().copied().min().unwrap_or(1),
            widths.iter().copied().max().unwrap_or(1),
        );
        let per = match (lo, hi) {
            (1, 1) => "second".into(),
            (lo, hi) if lo == hi => format!("{lo} s"),
            (lo, hi) => format!("{lo}–{hi} s"),
        };
        let length = runs
            .iter()
            .map(|m| m.tally.length())
            .max()
            .unwrap_or_default();
        let mut frame = Frame {
            per,
            warmup,
            from: 0.0,
            windows: windows::of(&results.scenario, length),
        };
        frame.from = runs
            .iter()
            .map(|m| frame.start(&m.tally))
            .fold(f64::INFINITY, f64::min);
        if !frame.from.is_finite() {
            frame.from = 0.0;
        }
        frame
    }

    /// The buckets of `t` plotted: every one, or after a warm-up the whole buckets measured —
    /// from the one after the first measured request's (that one holds warm-up requests too)
    /// to the last measured request's (arrivals stop there, a little before or after the
    /// length, and the backends drain), excluded: the steady state the run measured.
    pub fn shown(&self, t: &Tally) -> Range<usize> {
        if !self.warmup {
            return 0..usize::MAX;
        }
        let offered = t.offered();
        let first = offered.iter().position(|&n| n > 0).map_or(0, |k| k + 1);
        let last = offered.iter().rposition(|&n| n > 0).unwrap_or(0);
        let whole = (t.length().as_secs() / t.bucket_width().as_secs().max(1)) as usize;
        first..last.min(whole)
    }

    /// Where `t`'s plotted buckets start, in seconds.
    fn start(&self, t: &Tally) -> f64 {
        self.shown(t).start as f64 * t.bucket_width().as_secs_f64()
    }
}

/// A bucket's middle, in seconds.
fn bucket_x(t: &Tally, k: usize) -> f64 {
    (k as f64 + 0.5) * t.bucket_width().as_secs_f64()
}

/// Every chart of the page, in order (see the module's documentation).
pub fn all(results: &Results) -> anyhow::Result<Vec<Figure>> {
    let runs = first_runs(results);
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let frame = Frame::of(results, &runs);
    let mut figures = vec![latency_cdf(&runs, &results.traffic.load)?];
    figures.extend(latency_over_time(&runs, &frame)?);
    figures.push(throughput_over_time(&runs, &frame)?);
    if runs.iter().any(|m| m.row.summary.failed > 0) {
        figures.push(goodput_over_time(&runs, &frame)?);
    }
    // Per contender: each backend's share of the requests, and its utilization.
    let many = results.backends.len() > SHARE_CHART_LIMIT;
    for m in &runs {
        figures.push(shares(results, m, many, &frame)?);
        figures.push(utilization(results, m, many, &frame)?);
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
    Ok(figure(
        Some("Further left is faster; where a line reaches the top is its tail."),
        line_chart(
            match load {
                Load::Open(_) => "Latency CDF (from the intended send time)",
                Load::Closed(_) => "Latency CDF (from the send)",
            },
            ("latency, ms (log scale)", "fraction of requests"),
            &cdfs,
            Axis::Log,
            &[],
        )?,
    ))
}

/// One series per contender: `f` of each plotted time bucket that has a value, at the
/// bucket's middle.
fn per_bucket(
    runs: &[&Measured],
    frame: &Frame,
    f: &dyn Fn(&Tally, usize) -> Option<f64>,
) -> Vec<Series> {
    runs.iter()
        .map(|m| {
            let t = &m.tally;
            let shown = frame.shown(t);
            let points = (0..t.offered().len())
                .filter(|k| shown.contains(k))
                .filter_map(|k| f(t, k).map(|y| (bucket_x(t, k), y)))
                .collect();
            (m.label.clone(), points)
        })
        .collect()
}

/// A time chart of `series`, its x axis from `from`, the frame's windows shaded.
fn time_chart(
    title: &str,
    y_desc: &str,
    series: &[Series],
    frame: &Frame,
    from: f64,
) -> anyhow::Result<Chart> {
    line_chart(
        title,
        ("seconds", y_desc),
        series,
        Axis::From(from),
        &frame.windows,
    )
}

/// What to read from a latency chart over time: the shaded windows' effect, if any.
fn latency_read(frame: &Frame) -> Option<&'static str> {
    (!frame.windows.is_empty()).then_some(
        "Shaded: a backend with less capacity. A contender that sees load moves requests away and stays flat; one that does not peaks there.",
    )
}

/// The p99 and the mean latency per time bucket.
fn latency_over_time(runs: &[&Measured], frame: &Frame) -> anyhow::Result<[Figure; 2]> {
    Ok([
        figure(
            latency_read(frame),
            time_chart(
                &format!("p99 latency per {} of the run", frame.per),
                "p99 latency, ms",
                &per_bucket(runs, frame, &|t, k| t.quantile_ms(k, 0.99)),
                frame,
                frame.from,
            )?,
        ),
        figure(
            None,
            time_chart(
                &format!("Mean latency per {} of the run", frame.per),
                "mean latency, ms",
                &per_bucket(runs, frame, &|t, k| t.mean_ms(k)),
                frame,
                frame.from,
            )?,
        ),
    ])
}

/// Per contender, `counts` per second for each plotted bucket of the time answers ended:
/// without a warm-up, up to the last answer (the run's length at least, so the drain shows);
/// with one, the whole buckets of the measured window. Exposed for the tests of the rate.
pub fn per_second(
    runs: &[&Measured],
    frame: &Frame,
    counts: &dyn Fn(&Tally) -> &[u64],
) -> Vec<Series> {
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
            let width = t.bucket_width().as_secs_f64();
            let shown = frame.shown(t);
            let points = counts(t)
                .iter()
                .enumerate()
                .take(last + 1)
                .filter(|(k, _)| shown.contains(k))
                .map(|(k, &n)| (bucket_x(t, k), n as f64 / width))
                .collect();
            (m.label.clone(), points)
        })
        .collect()
}

/// The throughput chart's series: answers per second by the bucket they ended in, per
/// contender, then the requests offered per second: one line per distinct offered load of the
/// simulator's runs (each from the first run at that load, labelled `offered λ=0.50` when
/// there are several), or one `offered` line when the runs share their traffic (the lab:
/// every contender replays the same trace).
pub fn throughput(runs: &[&Measured], frame: &Frame) -> Vec<Series> {
    let mut series = per_second(runs, frame, &Tally::answered_by_end);
    let mut loads: Vec<(Option<f64>, &Measured)> = Vec::new();
    for m in runs {
        if !loads.iter().any(|(load, _)| *load == m.offered_load) {
            loads.push((m.offered_load, m));
        }
    }
    let several = loads.len() > 1;
    for (load, m) in loads {
        let label = match load {
            Some(load) if several => format!("offered λ={load:.2}"),
            _ => "offered".to_owned(),
        };
        series.push((label, offered_per_second(&m.tally, frame)));
    }
    series
}

/// The requests a run offered per second, by the bucket they were meant to start in.
fn offered_per_second(t: &Tally, frame: &Frame) -> Vec<(f64, f64)> {
    let width = t.bucket_width().as_secs_f64();
    let shown = frame.shown(t);
    t.offered()
        .iter()
        .enumerate()
        .filter(|(k, _)| shown.contains(k))
        .map(|(k, &n)| (bucket_x(t, k), n as f64 / width))
        .collect()
}

/// The title of a per-second chart: the rate, and the buckets it is averaged over.
fn per_second_title(what: &str, frame: &Frame) -> String {
    match frame.per.as_str() {
        "second" => format!("{what} per second"),
        per => format!("{what} per second, averaged over {per}"),
    }
}

/// Throughput: answers per second by the bucket they ended in, and the offered load.
fn throughput_over_time(runs: &[&Measured], frame: &Frame) -> anyhow::Result<Figure> {
    Ok(figure(
        Some("Answers keep up with their offered line when nothing queues or fails."),
        time_chart(
            &per_second_title("Answers (and requests offered)", frame),
            "requests per second",
            &throughput(runs, frame),
            frame,
            frame.from,
        )?,
    ))
}

/// Goodput: successful answers by the bucket they ended in (drawn when some answer failed:
/// then the answers' count hides what the clients got).
fn goodput_over_time(runs: &[&Measured], frame: &Frame) -> anyhow::Result<Figure> {
    Ok(figure(
        Some("Below the throughput chart's line by the answers that failed."),
        time_chart(
            &per_second_title("Successful (2xx) answers", frame),
            "successes per second",
            &per_second(runs, frame, &Tally::succeeded_by_end),
            frame,
            frame.from,
        )?,
    ))
}

/// A contender's share of the requests per backend: per time bucket, or with `many`
/// backends, each backend's share over the whole run, sorted.
fn shares(results: &Results, m: &Measured, many: bool, frame: &Frame) -> anyhow::Result<Figure> {
    let t = &m.tally;
    let shown = frame.shown(t);
    if many {
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
        return Ok(figure(
            Some("Flat: every backend got the same share; a slope is imbalance."),
            line_chart(
                &format!("{}: each backend's share over the run, sorted", m.label),
                ("backend rank", "share"),
                &[("share".into(), points)],
                Axis::From(0.0),
                &[],
            )?,
        ));
    }
    let shares: Vec<Series> = results
        .backends
        .iter()
        .enumerate()
        .map(|(b, name)| {
            let points = t
                .offered()
                .iter()
                .enumerate()
                .filter(|&(k, &n)| n > 0 && shown.contains(&k))
                .map(|(k, &n)| {
                    let mine = t.served_in(k, b).unwrap_or(0);
                    (bucket_x(t, k), mine as f64 / n as f64)
                })
                .collect();
            (name.clone(), points)
        })
        .collect();
    Ok(figure(
        (!frame.windows.is_empty())
            .then_some("A backend's share falls under its shaded window when the balancer steers away from it."),
        time_chart(
            &format!("{}: each backend's share of the requests", m.label),
            "share",
            &shares,
            frame,
            frame.start(t),
        )?,
    ))
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
fn utilization_spread(m: &Measured, from: f64) -> Vec<Series> {
    let mut by_instant: std::collections::BTreeMap<Duration, Spread> = Default::default();
    for s in m.samples.iter().filter(|s| s.at.as_secs_f64() >= from) {
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

/// A contender's backends' CPU utilization: each backend's, or with `many` backends, the
/// lowest, mean and highest. The lab reads it from each backend's `/load`; the simulator from
/// its model of the same meter.
fn utilization(
    results: &Results,
    m: &Measured,
    many: bool,
    frame: &Frame,
) -> anyhow::Result<Figure> {
    let from = frame.start(&m.tally);
    let util: Vec<Series> = if many {
        utilization_spread(m, from)
    } else {
        results
            .backends
            .iter()
            .enumerate()
            .map(|(k, name)| {
                let points = m
                    .samples
                    .iter()
                    .filter(|s| s.backend == k && s.at.as_secs_f64() >= from)
                    .map(|s| (s.at.as_secs_f64(), s.cpu))
                    .collect();
                (name.clone(), points)
            })
            .collect()
    };
    let source = if results.simulated {
        "simulated meter"
    } else {
        "/load"
    };
    let title = if many {
        format!(
            "{}: the backends' CPU utilization, lowest, mean and highest ({source})",
            m.label
        )
    } else {
        format!("{}: each backend's CPU utilization ({source})", m.label)
    };
    Ok(figure(
        Some("Near 1 a backend is saturated; lines apart are an imbalance."),
        time_chart(&title, "cpu", &util, frame, from)?,
    ))
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
        figure(
            Some("Where answers stop rising with the offered load is the capacity."),
            line_chart(
                &format!("Answers per second against the {unit}"),
                (unit, "answers per second"),
                &tput,
                Axis::From(0.0),
                &[],
            )?,
        ),
        figure(
            Some("The knee is where queueing starts."),
            line_chart(
                &format!("Mean latency against the {unit}"),
                (unit, "mean latency, ms"),
                &mean,
                Axis::From(0.0),
                &[],
            )?,
        ),
    ])
}
