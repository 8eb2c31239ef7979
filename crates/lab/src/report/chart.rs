//! One chart of a report: lines drawn by `plotters` as inline SVG that scales to its cell (the
//! page lays the charts out in a grid, [`super::html`]), the scenario's windows of reduced
//! capacity shaded behind the lines, and the legend written as HTML under the chart, where it
//! cannot cover the data.

use std::fmt::Write as _;

use plotters::prelude::*;

use super::escape;
use super::windows::Window;

/// A series: its name and its points.
pub type Series = (String, Vec<(f64, f64)>);

/// The SVG's own size: the page scales it to the width of its cell, keeping this aspect.
const WIDTH: u32 = 760;
const HEIGHT: u32 = 380;

/// A drawn chart: its SVG and its legend (each series' name and colour).
#[derive(Debug, Clone)]
pub struct Chart {
    pub svg: String,
    pub legend: Vec<(String, RGBColor)>,
}

impl Chart {
    /// The chart as HTML: the SVG, then its legend (none for a single series).
    pub fn html(&self) -> String {
        let mut out = self.svg.clone();
        if self.legend.len() > 1 {
            out.push_str("<div class=\"legend\">");
            for (name, RGBColor(r, g, b)) in &self.legend {
                write!(
                    out,
                    "<span><i style=\"background:#{r:02x}{g:02x}{b:02x}\"></i>{}</span>",
                    escape(name)
                )
                .ok();
            }
            out.push_str("</div>");
        }
        out
    }
}

pub(super) fn color(i: usize) -> RGBColor {
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

/// How a chart's x axis runs.
#[derive(Debug, Clone, Copy)]
pub enum Axis {
    /// Linear, from this value (0, or where a warm-up ends).
    From(f64),
    /// Logarithmic, from 1.
    Log,
}

/// A chart of lines, as SVG; `windows` are shaded (time charts only).
pub fn line_chart(
    title: &str,
    (x_desc, y_desc): (&str, &str),
    series: &[Series],
    axis: Axis,
    windows: &[Window],
) -> anyhow::Result<Chart> {
    let log_x = matches!(axis, Axis::Log);
    let x_min = match axis {
        Axis::From(x) => x,
        Axis::Log => 1.0,
    };
    let x_max =
        (upper(series, |p| p.0).max(if log_x { 10.0 } else { 1.0 }) * 1.02).max(x_min + 1.0);
    let y_max = upper(series, |p| p.1).max(1e-9) * 1.08;
    let mut svg = String::new();
    // The shaded windows in the SVG's pixels: (left, top, right, bottom, window).
    let mut bands: Vec<(i32, i32, i32, i32, &Window)> = Vec::new();
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
                for w in windows {
                    let (from, until) = (w.from.max(x_min), w.until.min(x_max));
                    if from < until {
                        let (l, t) = chart.backend_coord(&(from, y_max));
                        let (r, b) = chart.backend_coord(&(until, 0.0));
                        bands.push((l, t, r, b, w));
                    }
                }
                for (i, (_, points)) in series.iter().enumerate() {
                    let c = color(i);
                    chart
                        .draw_series(LineSeries::new(
                            points
                                .iter()
                                .map(|&(x, y)| (if log_x { x.max(1.0) } else { x }, y)),
                            c.stroke_width(2),
                        ))
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                }
            }};
        }
        if log_x {
            draw!(builder.build_cartesian_2d((1f64..x_max).log_scale(), 0f64..y_max));
        } else {
            draw!(builder.build_cartesian_2d(x_min..x_max, 0f64..y_max));
        }
        root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    shade(&mut svg, &bands);
    Ok(Chart {
        svg: svg.replacen(
            &format!("width=\"{WIDTH}\" height=\"{HEIGHT}\""),
            "width=\"100%\"",
            1,
        ),
        legend: series
            .iter()
            .enumerate()
            .map(|(i, (name, _))| (name.clone(), color(i)))
            .collect(),
    })
}

/// Puts the windows' bands behind everything but the background (right after its `<rect>`),
/// each a translucent rectangle with its label at the top and its whole text as a tooltip.
fn shade(svg: &mut String, bands: &[(i32, i32, i32, i32, &Window)]) {
    if bands.is_empty() {
        return;
    }
    let mut out = String::new();
    // Labels of windows that start at the same pixel go one under the other.
    let mut lines: Vec<(i32, i32)> = Vec::new();
    for &(l, t, r, b, w) in bands {
        let RGBColor(cr, cg, cb) = w.kind.color();
        let line = lines.iter().filter(|(x, _)| (*x - l).abs() < 60).count() as i32;
        lines.push((l, line));
        write!(
            out,
            "<g class=\"window {kind}\"><title>{text}</title><rect x=\"{l}\" y=\"{t}\" width=\"{w}\" height=\"{h}\" fill=\"#{cr:02x}{cg:02x}{cb:02x}\" fill-opacity=\"0.14\"/><text x=\"{tx}\" y=\"{ty}\" font-family=\"sans-serif\" font-size=\"11\" fill=\"#{cr:02x}{cg:02x}{cb:02x}\">{label}</text></g>",
            kind = w.kind.class(),
            text = escape(&w.text()),
            w = (r - l).max(1),
            h = (b - t).max(1),
            tx = l + 3,
            ty = t + 12 + 12 * line,
            label = escape(&w.label),
        )
        .ok();
    }
    let at = svg
        .find("<rect")
        .and_then(|start| svg[start..].find("/>").map(|end| start + end + 2));
    match at {
        Some(at) => svg.insert_str(at, &out),
        None => {
            if let Some(end) = svg.rfind("</svg>") {
                svg.insert_str(end, &out);
            }
        }
    }
}
