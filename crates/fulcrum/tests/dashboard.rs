//! The dashboard's data and the dashboard itself (issue 32): `GET /api/history` (the last
//! minutes of every backend, sampled each second by fulcrum), the per-backend and per-route
//! duration histograms of `/metrics`, and the page in headless Chromium at 1400 and 1920 px.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lab::backend::Faults;
use lab::{Backend, Client};
use serde_json::Value;

mod common;
use common::chromium::Chromium;
use common::{Running, TempFile, admin_call, assert_promtool_accepts, installed, wait_until};

/// `fulcrum run` with upstream `web` (`least_conn` over `backends`, a route named `api` on
/// its listener) and upstream `fed` (`dwlc`, one backend whose load agent never answers,
/// polled every 200 ms), and an admin listener: the process and the admin's address.
fn start(name: &str, backends: &[SocketAddr]) -> (Running, SocketAddr, TempFile) {
    let block: String = backends
        .iter()
        .map(|a| format!("  [[upstream.backend]]\n  addr = \"{a}\"\n"))
        .collect();
    let config = TempFile::new(
        &format!("{name}.toml"),
        &format!(
            "workers = 2\naccess_log = false\n\n\
             [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\
             \x20 [[listener.route]]\n  name = \"api\"\n  path = \"/api/\"\n  upstream = \"web\"\n\n\
             [[upstream]]\nname = \"web\"\nalgorithm = \"least_conn\"\n{block}\n\
             [[upstream]]\nname = \"fed\"\nalgorithm = \"dwlc\"\npoll_interval = \"200ms\"\n\
             \x20 [[upstream.backend]]\n  addr = \"127.0.0.1:9\"\n  agent = \"127.0.0.1:9\"\n\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n"
        ),
    );
    let fulcrum = Running::start(&config, 1);
    let admin = fulcrum
        .admin
        .expect("the admin listener's address is logged");
    (fulcrum, admin, config)
}

fn get(admin: SocketAddr, path: &str) -> (u16, String) {
    let host = admin.to_string();
    admin_call(admin, "GET", path, &[("host", host.as_str())], "")
}

fn get_json(admin: SocketAddr, path: &str) -> Value {
    let (status, body) = get(admin, path);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn patch(admin: SocketAddr, path: &str, body: &str) {
    let host = admin.to_string();
    let headers = [
        ("host", host.as_str()),
        ("content-type", "application/json"),
    ];
    let (status, text) = admin_call(admin, "PATCH", path, &headers, body);
    assert_eq!(status, 200, "PATCH {path}: {text}");
}

/// One backend of `upstream` in a history answer (`Null` if it has none yet).
fn backend<'a>(history: &'a Value, upstream: &str, addr: SocketAddr) -> &'a Value {
    history["upstreams"]
        .as_array()
        .and_then(|all| all.iter().find(|u| u["name"] == upstream))
        .and_then(|u| u["backends"].as_array())
        .and_then(|all| all.iter().find(|b| b["addr"] == addr.to_string()))
        .unwrap_or(&Value::Null)
}

/// A series of a history answer (empty if it has none).
fn numbers(series: &Value) -> Vec<Option<f64>> {
    series
        .as_array()
        .map(|a| a.iter().map(Value::as_f64).collect())
        .unwrap_or_default()
}

/// Requests flowing to `proxy` on a few clients (`path`), until the returned sender says stop;
/// the task gives how many were answered.
fn traffic(
    proxy: SocketAddr,
    path: &'static str,
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<u64>,
) {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        let mut clients = tokio::task::JoinSet::new();
        for _ in 0..3 {
            let mut stopped = stopped.clone();
            clients.spawn(async move {
                let mut client = Client::new(proxy);
                let mut n = 0u64;
                loop {
                    tokio::select! {
                        _ = stopped.changed() => return n,
                        reply = client.get(path) => {
                            if reply.is_ok() {
                                n += 1;
                            }
                        }
                    }
                }
            });
        }
        clients.join_all().await.into_iter().sum()
    });
    (stop, task)
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn the_history_holds_each_backends_seconds_from_before_anyone_asked() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let a = Backend::start("a", loopback).await.unwrap();
        // b answers half its requests 500.
        let faults = Faults {
            fail_rate: 0.5,
            ..Faults::default()
        };
        let b = Backend::start_faulty("b", loopback, None, faults)
            .await
            .unwrap();
        let (mut fulcrum, admin, _config) = start("dashboard-history", &[a.addr(), b.addr()]);
        let proxy = fulcrum.addr_of("web");
        let (stop, load) = traffic(proxy, "/?delay_ms=30");
        // Three seconds of samples with answers from both, asked for only now.
        wait_until(
            Duration::from_secs(30),
            "3 s of history with answers",
            || {
                let h = get_json(admin, "/api/history");
                let busy = |addr| {
                    numbers(&backend(&h, "web", addr)["requests"])
                        .iter()
                        .filter(|n| n.unwrap_or(0.0) > 0.0)
                        .count()
                };
                match (busy(a.addr()), busy(b.addr())) {
                    (x, y) if x >= 3 && y >= 3 => Ok(()),
                    seen => Err(format!("seconds with answers: {seen:?}\n{h}")),
                }
            },
        );
        let _ = stop.send(true);
        let sent = load.await.unwrap();
        assert!(sent > 0);
        let h = get_json(admin, "/api/history");
        let time = numbers(&h["time"]);
        assert!(time.len() >= 3, "{h}");
        assert!(time.windows(2).all(|w| w[0] < w[1]), "{h}");
        let (ha, hb) = (backend(&h, "web", a.addr()), backend(&h, "web", b.addr()));
        for field in [
            "requests",
            "errors_5xx",
            "p50_ms",
            "p99_ms",
            "weight",
            "state",
        ] {
            assert_eq!(ha[field].as_array().unwrap().len(), time.len(), "{field}");
        }
        // A 30 ms request: at least in the 25–50 ms bucket (more on a busy machine), within
        // 10 s; an idle second has no percentile, not 0.
        let p99s = numbers(&ha["p99_ms"]);
        for ((n, p50), p99) in numbers(&ha["requests"])
            .iter()
            .zip(numbers(&ha["p50_ms"]))
            .zip(p99s)
        {
            match (n, p50, p99) {
                (Some(n), Some(p50), Some(p99)) if *n > 0.0 => {
                    assert!(
                        p50 >= 25.0 && p50 <= p99 && p99 <= 10_000.0,
                        "p50 {p50}, p99 {p99} ms\n{h}"
                    )
                }
                (_, p50, p99) => assert_eq!((p50, p99), (None, None), "{h}"),
            }
        }
        // b's 500s are its errors; a has none.
        let total = |v: &Value| numbers(v).iter().map(|n| n.unwrap_or(0.0)).sum::<f64>();
        assert!(total(&hb["errors_5xx"]) > 0.0, "{h}");
        assert_eq!(total(&ha["errors_5xx"]), 0.0, "{h}");
        assert!(total(&hb["errors_5xx"]) < total(&hb["requests"]), "{h}");
        // Every answer of a shows in its seconds (the sampler started with fulcrum, before
        // any request): as many as the balancer counted, but for the requests the three
        // clients dropped when they stopped (fulcrum's own 499s, not a's answers).
        let shown = common::backends_of(admin, "web")[0]["requests"]
            .as_f64()
            .unwrap();
        wait_until(Duration::from_secs(10), "the last second sampled", || {
            let h = get_json(admin, "/api/history");
            let seen = total(&backend(&h, "web", a.addr())["requests"]);
            match seen <= shown && seen >= shown - 3.0 {
                true => Ok(()),
                false => Err(format!("{seen} in the history, {shown} answered")),
            }
        });
        // The dead agent's backend: its report stale, shown so.
        wait_until(Duration::from_secs(20), "fed's report stale", || {
            let h = get_json(admin, "/api/history?upstream=fed&seconds=1");
            let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
            match backend(&h, "fed", addr)["report_stale"][0] == true {
                true => Ok(()),
                false => Err(h.to_string()),
            }
        });
        // Drained, and with an overridden weight: its seconds say so, and without answers
        // its percentiles stop (null), they do not stay at the last value.
        let path = format!("/api/upstreams/web/backends/{}", a.addr());
        patch(admin, &path, r#"{"state": "drain", "weight": 3}"#);
        wait_until(Duration::from_secs(20), "a's drained seconds", || {
            let h = get_json(admin, "/api/history?upstream=web&seconds=2");
            let ha = backend(&h, "web", a.addr());
            let ok = ha["state"] == serde_json::json!(["drain", "drain"])
                && ha["overridden"] == serde_json::json!([true, true])
                && ha["p99_ms"] == serde_json::json!([null, null])
                && ha["available"] == serde_json::json!([false, false]);
            match ok {
                true => Ok(()),
                false => Err(h.to_string()),
            }
        });
        // A backend that joins gets its seconds from then on; one that leaves keeps its past,
        // and has none (null) after.
        let c = Backend::start("c", loopback).await.unwrap();
        let host = admin.to_string();
        let headers = [
            ("host", host.as_str()),
            ("content-type", "application/json"),
        ];
        let body = format!(r#"{{"addr": "{}"}}"#, c.addr());
        let (status, text) = admin_call(
            admin,
            "POST",
            "/api/upstreams/web/backends",
            &headers,
            &body,
        );
        assert_eq!(status, 201, "{text}");
        wait_until(Duration::from_secs(20), "c's seconds", || {
            let h = get_json(admin, "/api/history?upstream=web&seconds=2");
            match backend(&h, "web", c.addr())["state"] == serde_json::json!(["up", "up"]) {
                true => Ok(()),
                false => Err(h.to_string()),
            }
        });
        let path = format!("/api/upstreams/web/backends/{}", c.addr());
        let (status, text) = admin_call(admin, "DELETE", &path, &headers, "");
        assert_eq!(status, 204, "{text}");
        wait_until(Duration::from_secs(20), "c gone, its past kept", || {
            let h = get_json(admin, "/api/history?upstream=web");
            let states = backend(&h, "web", c.addr())["state"].clone();
            let states = states.as_array().cloned().unwrap_or_default();
            let ok = states.first() == Some(&Value::Null)
                && states.iter().any(|s| s == "up")
                && states.last() == Some(&Value::Null);
            match ok {
                true => Ok(()),
                false => Err(h.to_string()),
            }
        });
        // Only what was asked: one upstream, the last seconds.
        let h = get_json(admin, "/api/history?upstream=fed&seconds=2");
        assert_eq!(h["upstreams"].as_array().unwrap().len(), 1, "{h}");
        assert_eq!(h["time"].as_array().unwrap().len(), 2, "{h}");
        // Bad asks: what is wrong and what is taken.
        let (status, body) = get(admin, "/api/history?seconds=901");
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("from 1 to 900"), "{body}");
        let (status, body) = get(admin, "/api/history?upstream=nope");
        assert_eq!(status, 404, "{body}");
        assert!(body.contains("\\\"web\\\""), "{body}");
        let (status, body) = get(admin, "/api/history?since=3");
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("upstream=NAME and seconds=N"), "{body}");
        assert!(fulcrum.terminate().success());
    });
}

/// The value of one series of an exposition (`name{labels}`), if it is there.
fn value_of(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn durations_are_counted_by_backend_and_route_from_the_start() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let a = Backend::start("a", loopback).await.unwrap();
        let b = Backend::start("b", loopback).await.unwrap();
        let (mut fulcrum, admin, _config) = start("dashboard-durations", &[a.addr(), b.addr()]);
        let proxy = fulcrum.addr_of("web");
        let count = |backend: &str| {
            format!(
                "fulcrum_request_duration_seconds_count{{upstream=\"web\",backend=\"{backend}\"}}"
            )
        };
        let route_count =
            "fulcrum_route_request_duration_seconds_count{listener=\"127.0.0.1:0\",route=\"api\"}"
                .to_owned();
        // Before any request: every backend's series, fulcrum's own and the route's, at 0.
        let (status, text) = get(admin, "/metrics");
        assert_eq!(status, 200);
        for series in [
            count(&a.addr().to_string()),
            count(&b.addr().to_string()),
            count(""),
            route_count.clone(),
        ] {
            assert_eq!(value_of(&text, &series), Some(0.0), "{series} in\n{text}");
        }
        assert!(text.contains("# TYPE fulcrum_route_request_duration_seconds histogram"));
        assert_promtool_accepts(&text);
        let mut client = Client::new(proxy);
        for i in 0..20 {
            let path = if i % 2 == 0 { "/api/x" } else { "/" };
            assert_eq!(client.get(path).await.unwrap().status, 200);
        }
        let (_, text) = get(admin, "/metrics");
        let by_a = value_of(&text, &count(&a.addr().to_string())).unwrap();
        let by_b = value_of(&text, &count(&b.addr().to_string())).unwrap();
        assert_eq!(by_a, a.requests() as f64, "{text}");
        assert_eq!(by_b, b.requests() as f64, "{text}");
        assert_eq!(by_a + by_b, 20.0, "{text}");
        assert_eq!(value_of(&text, &route_count), Some(10.0), "{text}");
        assert_promtool_accepts(&text);
        assert!(fulcrum.terminate().success());
    });
}

/// Where `FULCRUM_UPDATE_SCREENSHOTS=1` puts the dashboard's pictures: docs/screenshots/
/// (committed, shown by the docs); else a directory of the test's own.
fn screenshot_dir() -> (std::path::PathBuf, Option<common::TempDir>) {
    match std::env::var("FULCRUM_UPDATE_SCREENSHOTS").as_deref() {
        Ok("1") => {
            let dir =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots");
            std::fs::create_dir_all(&dir).unwrap();
            (dir, None)
        }
        _ => {
            let temp = common::TempDir::new("dashboard", "screenshots");
            (temp.0.clone(), Some(temp))
        }
    }
}

#[test]
fn the_dashboard_fits_1400_and_1920_px_and_draws_the_minutes_before_it_opened() {
    if !installed("chromium", "--version") {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let a = Backend::start("a", loopback).await.unwrap();
        let b = Backend::start("b", loopback).await.unwrap();
        let faults = Faults {
            fail_rate: 0.2,
            ..Faults::default()
        };
        let c = Backend::start_faulty("c", loopback, None, faults)
            .await
            .unwrap();
        let (mut fulcrum, admin, _config) =
            start("dashboard-chromium", &[a.addr(), b.addr(), c.addr()]);
        let proxy = fulcrum.addr_of("web");
        let (stop, load) = traffic(proxy, "/?delay_ms=20");
        // Traffic for a few seconds before any page is open; then a is drained, and its
        // seconds without answers follow.
        wait_until(Duration::from_secs(30), "3 s of a's answers", || {
            let h = get_json(admin, "/api/history?upstream=web");
            let busy = numbers(&backend(&h, "web", a.addr())["requests"])
                .iter()
                .filter(|n| n.unwrap_or(0.0) > 0.0)
                .count();
            match busy >= 3 {
                true => Ok(()),
                false => Err(h.to_string()),
            }
        });
        let path = format!("/api/upstreams/web/backends/{}", a.addr());
        patch(admin, &path, r#"{"state": "drain"}"#);
        wait_until(Duration::from_secs(30), "2 s of a drained, fed stale", || {
            let h = get_json(admin, "/api/history?seconds=2");
            let ha = backend(&h, "web", a.addr());
            let fed = backend(&h, "fed", "127.0.0.1:9".parse().unwrap());
            match ha["requests"] == serde_json::json!([0, 0]) && fed["report_stale"][1] == true {
                true => Ok(()),
                false => Err(h.to_string()),
            }
        });
        let opened = unix_now();

        let chromium = tokio::task::block_in_place(Chromium::start);
        let (dir, _temp) = screenshot_dir();
        let url = format!("http://{admin}/");
        for width in [1400u32, 1920] {
            let mut tab = chromium.open("about:blank").await;
            tab.resize(width, 1000).await.unwrap();
            // As an overlay scrollbar takes no width: the page's width is the window's.
            tab.call(
                "Emulation.setScrollbarsHidden",
                serde_json::json!({ "hidden": true }),
            )
            .await
            .unwrap();
            tab.call("Page.navigate", serde_json::json!({ "url": url }))
                .await
                .unwrap();
            // The page's first update: the table and the charts, from the history.
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                let updates = tab
                    .evaluate("Number(document.getElementById('status')?.dataset.updates || 0)")
                    .await;
                if updates.as_ref().ok().and_then(Value::as_f64).unwrap_or(0.0) >= 1.0 {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "no update: {updates:?}");
                // Poll interval of a loop bounded by `deadline`.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // No horizontal overflow: the page is as wide as the window, every button in it.
            let widths = tab
                .evaluate(
                    "({scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth, \
                      controls: [...document.querySelectorAll('button')].every(b => b.getBoundingClientRect().right <= window.innerWidth)})",
                )
                .await
                .unwrap();
            assert_eq!(widths["innerWidth"], width, "{widths}");
            assert_eq!(
                widths["scrollWidth"], widths["innerWidth"],
                "{width}: the page overflows: {widths}"
            );
            assert_eq!(widths["controls"], true, "{width}: a button past the edge: {widths}");
            let facts = tab
                .evaluate(&format!(
                    r#"(() => {{
                        const h = history.get("web");
                        const c = charts.get("web");
                        const a = "{a}";
                        const requests = h.backends.get(a).requests;
                        const before = h.t.filter((t, i) => t < {opened} && requests[i] > 0).length;
                        const p99 = c.latency.data[1 + 2 * [...h.backends.keys()].indexOf(a)];
                        const legends = [...document.querySelectorAll(".u-legend")].map(l => l.textContent);
                        const row = document.querySelector('section[data-upstream="web"] tr[data-addr="{a}"]');
                        const fed = document.querySelector('section[data-upstream="fed"] td.report');
                        return {{
                            before,
                            charts: [...document.querySelectorAll('section[data-upstream="web"] .chart')].map(e => e.className),
                            canvases: document.querySelectorAll("canvas").length,
                            p99Last: p99.slice(-2),
                            p99Drawn: p99.filter(v => v !== null).length,
                            legends,
                            state: row.querySelector("td.state").firstChild.textContent,
                            stateOverride: row.querySelectorAll("td.state .badge.override").length,
                            health: row.querySelector("td.health").textContent,
                            fed: fed.textContent,
                            fedStale: fed.querySelectorAll(".badge.stale").length,
                        }};
                    }})()"#,
                    a = a.addr(),
                ))
                .await
                .unwrap();
            // The charts hold the seconds before the tab opened, at once.
            assert!(facts["before"].as_u64().unwrap() >= 2, "{width}: {facts}");
            let kinds: Vec<&str> = facts["charts"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            for kind in ["requests", "errors", "latency", "weight"] {
                assert!(
                    kinds.iter().any(|k| k.split(' ').any(|w| w == kind)),
                    "{width}: no {kind} chart: {facts}"
                );
            }
            // The drained backend: said so, and its latency line stops (no answers: gaps).
            assert_eq!(facts["state"], "drain", "{facts}");
            // Set through the API, not the file: an override, marked.
            assert_eq!(facts["stateOverride"], 1, "{facts}");
            assert!(facts["health"].as_str().unwrap().contains("draining"), "{facts}");
            assert_eq!(facts["p99Last"], serde_json::json!([null, null]), "{facts}");
            assert!(facts["p99Drawn"].as_u64().unwrap() >= 2, "{facts}");
            // The dead agent's backend: its report shown stale.
            assert_eq!(facts["fedStale"], 1, "{facts}");
            // Legends show the latest values, never uPlot's "--" placeholders.
            for legend in facts["legends"].as_array().unwrap() {
                let text = legend.as_str().unwrap();
                assert!(!text.contains("--"), "{width}: legend {text:?}");
            }
            // And it keeps going: newer seconds come in.
            let first = tab.evaluate("lastTime").await.unwrap();
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            loop {
                let now = tab.evaluate("lastTime").await.unwrap();
                if now.as_f64() > first.as_f64() {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{width}: no second after {first}"
                );
                // Poll interval of a loop bounded by `deadline`.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let png = tab.screenshot().await.unwrap();
            assert!(png.starts_with(b"\x89PNG"), "a PNG");
            std::fs::write(dir.join(format!("dashboard-{width}.png")), png).unwrap();
        }
        let _ = stop.send(true);
        assert!(load.await.unwrap() > 0);
        drop(chromium);
        assert!(fulcrum.terminate().success());
    });
}
