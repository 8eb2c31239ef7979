//! The moments of a run when a backend had less capacity than it should, as the scenario
//! describes them: an antagonist's drops (`antagonist = "FRACTION:FOR:EVERY[:OFFSET]"`, on the
//! clock the load starts, see [`crate::backend::antagonist`]) and the simulator's outages
//! (`[sim] outages = ["NAME:FROM-UNTIL"]`). Time charts shade them, so that a latency peak
//! shows its cause.

use std::time::Duration;

use plotters::style::RGBColor;

use crate::backend::antagonist::Antagonist;
use crate::scenario::{Outage, Scenario};

/// The most windows a chart shades (a short period over a long run would paint it all).
const MOST: usize = 24;

/// What took the capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Antagonist,
    Outage,
}

impl Kind {
    /// The class of the band in the SVG (`window antagonist`, `window outage`).
    pub fn class(self) -> &'static str {
        match self {
            Kind::Antagonist => "antagonist",
            Kind::Outage => "outage",
        }
    }

    pub(super) fn color(self) -> RGBColor {
        match self {
            Kind::Antagonist => RGBColor(213, 94, 0),
            Kind::Outage => RGBColor(120, 120, 120),
        }
    }
}

/// One window, in seconds from the start of the load.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub from: f64,
    pub until: f64,
    /// What the chart writes in the band: "a 30%", "b down".
    pub label: String,
    pub kind: Kind,
}

impl Window {
    /// The window in words (the band's tooltip).
    pub fn text(&self) -> String {
        let what = match self.kind {
            Kind::Antagonist => "antagonist",
            Kind::Outage => "outage",
        };
        format!(
            "{what}: {} from {} s to {} s",
            self.label,
            trim(self.from),
            trim(self.until)
        )
    }
}

fn trim(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Every window of `scenario` within the first `length` of the load, in time order (the
/// first [`MOST`]). Backends of one `[[backend]]` table share a window, named after the table.
/// Each table's antagonist yields at most its first [`MOST`] windows: no later one of it could
/// be among the first [`MOST`] of all, and one table's many short drops cannot crowd out
/// another's.
pub fn of(scenario: &Scenario, length: Duration) -> Vec<Window> {
    let end = length.as_secs_f64();
    let mut out = Vec::new();
    for b in &scenario.backends {
        let Some(a) = b
            .antagonist
            .as_deref()
            .and_then(|a| a.parse::<Antagonist>().ok())
        else {
            continue;
        };
        let name = match b.count {
            1 => b.name.clone(),
            n => format!("{} (×{n})", b.name),
        };
        let label = format!("{name} {:.0}%", a.fraction * 100.0);
        let (on, every) = (a.on.as_secs_f64(), a.every.as_secs_f64());
        // The drop that covers or follows 0, then one per period.
        let mut start = a.offset.as_secs_f64() - ((a.offset.as_secs_f64() / every).ceil()) * every;
        let before = out.len();
        while start < end && out.len() - before < MOST {
            let until = (start + on).min(end);
            if until > 0.0 {
                out.push(Window {
                    from: start.max(0.0),
                    until,
                    label: label.clone(),
                    kind: Kind::Antagonist,
                });
            }
            start += every;
        }
    }
    for o in scenario.sim.iter().flat_map(|s| &s.outages) {
        let Ok(o) = o.parse::<Outage>() else { continue };
        let (from, until) = (o.from.as_secs_f64(), o.until.as_secs_f64().min(end));
        if from < until {
            out.push(Window {
                from,
                until,
                label: format!("{} down", o.backend),
                kind: Kind::Outage,
            });
        }
    }
    out.sort_by(|a, b| a.from.total_cmp(&b.from));
    out.truncate(MOST);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn antagonists_and_outages_become_windows_of_the_run() {
        let s = Scenario::parse(
            r#"
            [[backend]]
            name = "a"
            antagonist = "0.3:3s:10s:1.5s"
            [[backend]]
            name = "b"
            [traffic]
            pattern = "constant:10"
            duration = "20s"
            [sim]
            outages = ["b:2s-4s"]
            [[algorithm]]
            name = "random"
            "#,
            "w",
        )
        .unwrap();
        let w = of(&s, Duration::from_secs(20));
        let spans: Vec<(f64, f64, &str)> = w
            .iter()
            .map(|w| (w.from, w.until, w.label.as_str()))
            .collect();
        assert_eq!(
            spans,
            vec![
                (1.5, 4.5, "a 30%"),
                (2.0, 4.0, "b down"),
                (11.5, 14.5, "a 30%")
            ]
        );
        assert_eq!(w[0].text(), "antagonist: a 30% from 1.5 s to 4.5 s");
        assert_eq!(w[1].kind.class(), "outage");
    }

    #[test]
    fn one_backend_s_many_drops_do_not_crowd_out_another_s() {
        let s = Scenario::parse(
            r#"
            [[backend]]
            name = "a"
            antagonist = "0.5:0.5s:1s"
            [[backend]]
            name = "b"
            antagonist = "0.3:2s:100s:5s"
            [traffic]
            pattern = "constant:10"
            duration = "200s"
            [[algorithm]]
            name = "random"
            "#,
            "w",
        )
        .unwrap();
        let w = of(&s, Duration::from_secs(200));
        assert_eq!(w.len(), MOST);
        // a drops every second from 0 s, b at 5 s: b's is among the first, in time order.
        let b: Vec<(f64, f64)> = w
            .iter()
            .filter(|w| w.label == "b 30%")
            .map(|w| (w.from, w.until))
            .collect();
        assert_eq!(b, vec![(5.0, 7.0)]);
        assert_eq!(w[6].label, "b 30%");
        assert!(w.windows(2).all(|p| p[0].from <= p[1].from));
        assert_eq!(w.last().map(|w| w.from), Some(22.0));
    }

    #[test]
    fn a_drop_under_way_at_the_start_is_cut_at_zero() {
        let s = Scenario::parse(
            r#"
            [[backend]]
            name = "a"
            count = 3
            antagonist = "0.5:8s:10s:25s"
            [traffic]
            pattern = "constant:10"
            duration = "12s"
            [[algorithm]]
            name = "random"
            "#,
            "w",
        )
        .unwrap();
        let w = of(&s, Duration::from_secs(12));
        let spans: Vec<(f64, f64)> = w.iter().map(|w| (w.from, w.until)).collect();
        // Drops at 5–13 s (and -5–3 s) of every 10 s.
        assert_eq!(spans, vec![(0.0, 3.0), (5.0, 12.0)]);
        assert_eq!(w[0].label, "a (×3) 50%");
    }
}
