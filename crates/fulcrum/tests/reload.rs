//! Reloads as an operator does them: `fulcrum run` under steady open-loop load, its file
//! rewritten and SIGHUP sent (or `POST /api/reload`), and not one request may fail.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use lab::Client;
use lab::load::Verdict;
use serde_json::Value;

mod common;
use common::{Running, TempFile, steady_load};

/// One version of the configuration: the algorithm and each backend with its weight.
fn config(algorithm: &str, backends: &[(SocketAddr, u32)]) -> String {
    let mut text = format!(
        "workers = 2\naccess_log = false\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
         [[upstream]]\nname = \"web\"\nalgorithm = \"{algorithm}\"\n"
    );
    for (addr, weight) in backends {
        text.push_str(&format!(
            "  [[upstream.backend]]\n  addr = \"{addr}\"\n  weight = {weight}\n"
        ));
    }
    text.push_str("\n[admin]\nlisten = \"127.0.0.1:0\"\n");
    text
}

async fn upstream_state(admin: SocketAddr) -> Value {
    let reply = common::admin_get(admin, "/api/upstreams/web").await;
    assert_eq!(reply.status, 200);
    serde_json::from_str(&reply.text()).unwrap()
}

fn backends_of(state: &Value) -> Vec<(String, u64)> {
    state["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["addr"].as_str().unwrap().to_owned(),
                b["weight"]["static"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Waits for the log line that ends a reload; returns it.
fn reload_logged(fulcrum: &Running) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let line = fulcrum.next_line(deadline);
        if line.contains("configuration reloaded") || line.contains("reload refused") {
            return line;
        }
    }
}

#[test]
fn ten_reloads_under_steady_load_lose_no_request() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let backends = common::backends(&["a", "b", "c", "d"]).await;
        let [a, b, c, d] = [0, 1, 2, 3].map(|i| backends[i].addr());
        let versions: Vec<(&str, Vec<(SocketAddr, u32)>)> = vec![
            ("weighted_round_robin", vec![(a, 1), (b, 1), (c, 1)]),
            ("weighted_round_robin", vec![(a, 5), (b, 1), (c, 1)]),
            ("least_conn", vec![(a, 5), (b, 1), (c, 1)]),
            ("least_conn", vec![(a, 1), (b, 1), (c, 1), (d, 1)]),
            ("random_two", vec![(a, 1), (b, 1), (d, 1)]),
            ("ip_hash", vec![(a, 1), (b, 1), (d, 1)]),
            ("maglev", vec![(b, 1), (c, 1), (d, 1)]),
            ("p2c_ewma", vec![(b, 1), (c, 2), (d, 1)]),
            ("round_robin", vec![(a, 1), (c, 1)]),
            ("weighted_round_robin", vec![(a, 2), (b, 3), (c, 1), (d, 1)]),
            ("least_conn", vec![(a, 1), (b, 1), (c, 1), (d, 1)]),
        ];
        let file = TempFile::new("reload.toml", &config(versions[0].0, &versions[0].1));
        let mut fulcrum = Running::start(&file, 1);
        let admin = fulcrum.admin.unwrap();
        let proxy = fulcrum.addr_of("web");

        // 60 s at a steady 100 requests a second from 50 client addresses, open loop: each
        // request leaves at its time, whatever happens to the others.
        let plan = steady_load(proxy, 100.0, 60, 50);
        let sent = plan.trace.len();
        assert!((6000..=6001).contains(&sent), "{sent}");
        let load = tokio::spawn(async move { lab::load::run(&plan).await });

        for (i, (algorithm, set)) in versions.iter().enumerate().skip(1) {
            tokio::time::sleep(Duration::from_millis(4500)).await;
            if i == 5 {
                // An invalid file mid-run: refused, and nothing changes.
                let before = upstream_state(admin).await;
                std::fs::write(
                    &file.0,
                    "[[upstream]]\nname = \"web\"\nalgorithm = \"nope\"\n",
                )
                .unwrap();
                fulcrum.hangup();
                let line = reload_logged(&fulcrum);
                assert!(line.contains("reload refused"), "{line}");
                let after = upstream_state(admin).await;
                assert_eq!(before["algorithm"], after["algorithm"]);
                assert_eq!(backends_of(&before), backends_of(&after));
            }
            // What the backends that stay have counted so far: a reload must not reset it.
            let before: HashMap<String, u64> = upstream_state(admin).await["backends"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| {
                    (
                        b["addr"].as_str().unwrap().to_owned(),
                        b["requests"].as_u64().unwrap(),
                    )
                })
                .collect();
            std::fs::write(&file.0, config(algorithm, set)).unwrap();
            fulcrum.hangup();
            let line = reload_logged(&fulcrum);
            assert!(line.contains("configuration reloaded"), "{line}");
            let state = upstream_state(admin).await;
            assert_eq!(state["algorithm"], *algorithm, "reload {i}");
            let expected: Vec<(String, u64)> = {
                // Pool order: as configured (no backups here).
                set.iter()
                    .map(|(addr, w)| (addr.to_string(), u64::from(*w)))
                    .collect()
            };
            assert_eq!(backends_of(&state), expected, "reload {i}");
            for b in state["backends"].as_array().unwrap() {
                let addr = b["addr"].as_str().unwrap();
                if let Some(&was) = before.get(addr) {
                    let now = b["requests"].as_u64().unwrap();
                    assert!(
                        now >= was,
                        "reload {i}: {addr}'s count went from {was} to {now}"
                    );
                }
            }
        }

        let outcomes = load.await.unwrap();
        assert_eq!(outcomes.len(), sent);
        let mut verdicts: HashMap<&str, usize> = HashMap::new();
        let mut served: HashMap<String, usize> = HashMap::new();
        for o in &outcomes {
            *verdicts.entry(o.verdict().as_str()).or_default() += 1;
            if let Some(b) = &o.backend {
                *served.entry(b.clone()).or_default() += 1;
            }
        }
        assert_eq!(
            verdicts.get(Verdict::Ok.as_str()),
            Some(&sent),
            "every request answered below 500: {verdicts:?}"
        );
        assert!(
            outcomes.iter().all(|o| o.status == Some(200)),
            "every request answered 200"
        );
        // Every backend served some of them, as the versions had each one in.
        assert_eq!(served.len(), 4, "{served:?}");

        // The same through the API: a reload that changes nothing still answers.
        let req = Request::builder()
            .method("POST")
            .uri("/api/reload")
            .header("host", admin.to_string())
            .header("content-type", "application/json")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let reply = Client::new(admin).send(req).await.unwrap();
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert!(reply.text().contains("reloaded"), "{}", reply.text());
        assert!(fulcrum.terminate().success());
    });
}

/// A reload says what it changed, and only that: an unchanged file changes nothing; a new
/// `workers` or `[admin]` (both take a restart) changes no listener and no upstream, and is
/// said not applied; a new weight reconfigures its upstream.
#[test]
fn a_reload_says_what_changed_and_nothing_else() {
    let backend = common::HeldPort::refusing();
    let addr: SocketAddr = format!("127.0.0.1:{}", backend.port()).parse().unwrap();
    let first = config("round_robin", &[(addr, 1)]);
    let file = TempFile::new("reload-honest.toml", &first);
    let fulcrum = Running::start(&file, 1);

    fulcrum.hangup();
    // Every line of the reload: none says the upstream was reconfigured.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut lines = Vec::new();
    while !lines
        .last()
        .is_some_and(|l: &String| l.contains("configuration reloaded"))
    {
        lines.push(fulcrum.next_line(deadline));
    }
    let line = lines.last().unwrap();
    assert!(
        line.contains("configuration reloaded: nothing changed"),
        "{line}"
    );
    assert!(!line.contains("web"), "{line}");
    assert!(
        lines.iter().all(|l| !l.contains("upstream reconfigured")),
        "{lines:#?}"
    );

    // Only workers and [admin]: neither the upstream nor the listener changes.
    let restart_only = first.replace("workers = 2", "workers = 3").replace(
        "[admin]\nlisten = \"127.0.0.1:0\"\n",
        "[admin]\nlisten = \"127.0.0.1:0\"\nallowed_hosts = [\"localhost\"]\n",
    );
    assert_ne!(restart_only, first);
    std::fs::write(&file.0, &restart_only).unwrap();
    fulcrum.hangup();
    let line = reload_logged(&fulcrum);
    assert!(
        line.contains("configuration reloaded: nothing changed"),
        "{line}"
    );
    assert!(!line.contains("listeners"), "{line}");
    assert!(!line.contains("reconfigured"), "{line}");
    assert!(
        line.contains("workers = 3 (running with 2): takes a restart"),
        "{line}"
    );
    assert!(line.contains("[admin]: takes a restart"), "{line}");

    // A new weight: the upstream, and only it, is reconfigured.
    std::fs::write(&file.0, restart_only.replace("weight = 1", "weight = 2")).unwrap();
    fulcrum.hangup();
    let line = reload_logged(&fulcrum);
    assert!(line.contains("upstreams reconfigured: web"), "{line}");
    assert!(!line.contains("listeners"), "{line}");
}
