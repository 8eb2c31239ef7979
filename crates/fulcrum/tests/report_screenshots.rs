//! The lab's and the simulator's `report.html` in a real browser, at 1400 and 1920 px: no
//! horizontal overflow (the page is as wide as the window), two charts side by side, and the
//! antagonist's window shaded on the p99 chart. `fulcrum lab run` prints the verdict that
//! `results.md` opens with.
//!
//! With `FULCRUM_UPDATE_SCREENSHOTS=1` the screenshots are saved into `docs/screenshots/`
//! (`report-lab-1400.png`, …), which docs/lab.md and docs/simulator.md show; otherwise into the
//! test's scratch directory.

mod common;

use common::chromium::Chromium;
use common::{TempDir, installed};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Three equal backends, `a` at 30% of its capacity from 1.5 s to 4.5 s of the load.
const SCENARIO: &str = r#"
description = "three equal backends, a at 30% of its capacity from 1.5 s to 4.5 s"
seed = 5
repetitions = REPETITIONS

[[backend]]
name = "a"
workers = 4
antagonist = "0.3:3s:60s:1.5s"

[[backend]]
name = "b"
workers = 4

[[backend]]
name = "c"
workers = 4

[traffic]
pattern = "constant:150"
duration = "DURATION"
cost = "lognormal:3:0.75"
timeout = "2s"
clients = 20

[[algorithm]]
name = "round_robin"

[[algorithm]]
name = "least_conn"
"#;

fn fulcrum(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .args(args)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "fulcrum {args:?}: {stderr}\n{stdout}");
    (stdout, stderr)
}

/// Writes the scenario and runs `tool` (`lab run` or `sim`) on it: its report's directory and
/// what it printed.
fn report(dir: &TempDir, tool: &[&str], repetitions: u32, duration: &str) -> (PathBuf, String) {
    let file = dir.0.join(format!("{}.toml", tool[0]));
    std::fs::write(
        &file,
        SCENARIO
            .replace("REPETITIONS", &repetitions.to_string())
            .replace("DURATION", duration),
    )
    .unwrap();
    let out = dir.0.join(format!("{}-out", tool[0]));
    let mut args = tool.to_vec();
    args.extend([file.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    let (stdout, _) = fulcrum(&args);
    (out, stdout)
}

/// What the page's layout measures, once the window is `width` px wide.
const MEASURE: &str = r#"new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => {
    const figures = [...document.querySelectorAll("figure.chart")];
    const rect = f => { const r = f.getBoundingClientRect(); return [r.left, r.top, r.width]; };
    const p99 = figures.find(f => f.textContent.includes("p99 latency per"));
    done(JSON.stringify({
        scrollWidth: document.documentElement.scrollWidth,
        clientWidth: document.documentElement.clientWidth,
        innerWidth: window.innerWidth,
        figures: figures.slice(0, 2).map(rect),
        bands: p99 ? p99.querySelectorAll("svg g.window.antagonist").length : -1,
        bandWidth: p99 && p99.querySelector("svg g.window.antagonist rect")
            ? p99.querySelector("svg g.window.antagonist rect").getBoundingClientRect().width : 0,
        svgWidth: p99 ? p99.querySelector("svg").getBoundingClientRect().width : 0,
    }));
})))"#;

/// Opens `dir/report.html` at 1400 and 1920 px, checks the layout and saves the screenshots
/// as `report-{name}-{width}.png` into `shots`.
async fn check(chromium: &Chromium, dir: &Path, name: &str, shots: &Path) {
    let url = format!("file://{}", dir.join("report.html").display());
    let mut tab = chromium.open(&url).await;
    for width in [1400u32, 1920] {
        tab.resize(width, 1000).await.unwrap();
        let v = tab.evaluate(MEASURE).await.unwrap();
        let m: serde_json::Value = serde_json::from_str(v.as_str().unwrap()).unwrap();
        println!("{name} at {width} px: {m}");
        assert_eq!(m["innerWidth"], width, "{name}: {m}");
        // The page is as wide as the window (less its vertical scroll bar, if it draws one).
        assert_eq!(
            m["scrollWidth"], m["clientWidth"],
            "{name} at {width} px overflows: {m}"
        );
        assert!(
            m["clientWidth"].as_u64().unwrap() > u64::from(width) - 20,
            "{name}: {m}"
        );
        let (first, second) = (&m["figures"][0], &m["figures"][1]);
        assert_eq!(
            first[1], second[1],
            "{name} at {width} px: two charts side by side: {m}"
        );
        assert!(
            first[0].as_f64().unwrap() < second[0].as_f64().unwrap(),
            "{name} at {width} px: {m}"
        );
        // Each chart about half the page, not a fixed 620 px.
        let chart = first[2].as_f64().unwrap();
        assert!(
            chart > f64::from(width) * 0.35 && chart < f64::from(width) * 0.5,
            "{name} at {width} px: a chart {chart} px wide: {m}"
        );
        assert_eq!(m["bands"], 1, "{name}: the antagonist's window: {m}");
        // 3 s of a 6 s (lab) or 12 s (sim) run: a visible share of the plot.
        let share = m["bandWidth"].as_f64().unwrap() / m["svgWidth"].as_f64().unwrap();
        assert!(share > 0.15 && share < 0.5, "{name}: band {share}: {m}");
        let png = tab.screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{name}: not a PNG");
        let path = shots.join(format!("report-{name}-{width}.png"));
        std::fs::write(&path, &png).unwrap();
        println!("{}: {} KB", path.display(), png.len() / 1024);
    }
}

#[test]
fn the_lab_and_sim_reports_fit_a_wide_screen_in_chromium() {
    if !installed("chromium", "--version") {
        return;
    }
    let dir = TempDir::new("report-shots", "reports");
    let (lab, stdout) = report(&dir, &["lab", "run"], 1, "6s");
    // The verdict `fulcrum lab run` prints is results.md's.
    let md = std::fs::read_to_string(lab.join("results.md")).unwrap();
    let verdict = md
        .lines()
        .find_map(|l| l.strip_prefix("**Verdict.** "))
        .unwrap_or_else(|| panic!("no verdict in results.md:\n{md}"));
    assert!(verdict.starts_with("On p99, "), "{verdict}");
    assert!(
        stdout.contains(&format!("\nVerdict. {verdict}\n")),
        "{stdout}"
    );
    let (sim, _) = report(&dir, &["sim", "--quiet"], 3, "12s");
    let shots = if std::env::var("FULCRUM_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots")
    } else {
        dir.0.join("screenshots")
    };
    std::fs::create_dir_all(&shots).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let chromium = tokio::task::block_in_place(Chromium::start);
        check(&chromium, &lab, "lab", &shots).await;
        check(&chromium, &sim, "sim", &shots).await;
    });
}
