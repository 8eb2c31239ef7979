//! The admin API's changes kept across reloads and restarts (`state_file`), as an operator
//! meets them: real `fulcrum run` processes and lab backends, changes made through the API,
//! the file rewritten and SIGHUP sent, the process stopped and started again.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{Running, TempDir, TempFile};

/// The configuration: `web` over `backends` (address, weight), `extra` lines at the top
/// level (an unrelated change to reload with), and the state file in `dir`.
fn config(dir: &TempDir, algorithm: &str, backends: &[(SocketAddr, u32)], extra: &str) -> String {
    format!(
        "workers = 1\naccess_log = false\nstate_file = \"{}/state.json\"\n{extra}\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
         [[upstream]]\nname = \"web\"\nalgorithm = \"{algorithm}\"\n{}\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n",
        dir.path(),
        common::backend_block(backends),
    )
}

/// A change through the admin API; its status must be `expect`.
fn call(admin: SocketAddr, method: &str, path: &str, body: &str, expect: u16) -> String {
    let host = admin.to_string();
    let headers = [
        ("Host", host.as_str()),
        ("Content-Type", "application/json"),
    ];
    let (status, answer) = common::admin_call(admin, method, path, &headers, body);
    assert_eq!(status, expect, "{method} {path} {body}: {answer}");
    answer
}

fn upstream(admin: SocketAddr) -> Value {
    let (status, body) = common::admin_call(
        admin,
        "GET",
        "/api/upstreams/web",
        &[("Host", &admin.to_string())],
        "",
    );
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn backend(admin: SocketAddr, addr: SocketAddr) -> Value {
    upstream(admin)["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["addr"] == addr.to_string())
        .cloned()
        .unwrap_or_else(|| panic!("no backend {addr}: {}", upstream(admin)))
}

fn addrs(admin: SocketAddr) -> Vec<String> {
    upstream(admin)["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["addr"].as_str().unwrap().to_owned())
        .collect()
}

/// The state file's overrides.
fn state_file(dir: &TempDir) -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(dir.0.join("state.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["overrides"].as_object().unwrap().clone()
}

/// Rewrites the file, sends SIGHUP and waits for the reload's line, which it returns with the
/// lines before it.
fn reload(fulcrum: &Running, file: &TempFile, text: &str) -> Vec<String> {
    std::fs::write(&file.0, text).unwrap();
    fulcrum.hangup();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut lines = Vec::new();
    loop {
        let line = fulcrum.next_line(deadline);
        let done = line.contains("configuration reloaded") || line.contains("reload refused");
        lines.push(line);
        if done {
            assert!(
                lines.last().unwrap().contains("configuration reloaded"),
                "{lines:#?}"
            );
            return lines;
        }
    }
}

/// Sends `n` requests through the proxy (each must be answered 200) and returns how many
/// reached `backend`, by its count in the admin API.
fn requests_reaching(fulcrum: &Running, n: usize, backend_addr: SocketAddr) -> u64 {
    let admin = fulcrum.admin.unwrap();
    let before = backend(admin, backend_addr)["requests"].as_u64().unwrap();
    for _ in 0..n {
        assert_eq!(
            common::status_from([127, 0, 0, 1], fulcrum.addr_of("web")),
            200
        );
    }
    backend(admin, backend_addr)["requests"].as_u64().unwrap() - before
}

#[test]
fn a_drain_survives_a_reload_and_a_restart_and_the_files_edit_wins() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let backends = rt.block_on(common::backends(&["a", "b", "c"]));
    let [a, b, c] = [0, 1, 2].map(|i| backends[i].addr());
    let dir = TempDir::new("state", "drain");
    let text = |weights: [u32; 3], extra: &str| {
        config(
            &dir,
            "weighted_round_robin",
            &[(a, weights[0]), (b, weights[1]), (c, weights[2])],
            extra,
        )
    };
    let file = TempFile::new("state.toml", &text([1, 1, 1], ""));
    let mut fulcrum = Running::start(&file, 1);
    let admin = fulcrum.admin.unwrap();

    // Drained, and c weighted 3, through the API: both overrides, shown and written.
    let path_b = format!("/api/upstreams/web/backends/{b}");
    let path_c = format!("/api/upstreams/web/backends/{c}");
    call(admin, "PATCH", &path_b, r#"{"state": "drain"}"#, 200);
    call(admin, "PATCH", &path_c, r#"{"weight": 3}"#, 200);
    assert_eq!(
        backend(admin, b)["overrides"],
        serde_json::json!({"state": {"value": "drain", "file": "up"}})
    );
    assert_eq!(
        backend(admin, c)["overrides"],
        serde_json::json!({"weight": {"value": 3, "file": 1}})
    );
    assert_eq!(backend(admin, a)["overrides"], serde_json::json!({}));
    let written = state_file(&dir);
    assert_eq!(written.len(), 2, "{written:?}");
    assert_eq!(
        written[&format!("upstreams/web/backends/{b}")],
        serde_json::json!({"state": {"value": "drain", "file": "up"}})
    );

    // A reload with an unrelated change: still drained, still weighted, and said so.
    let lines = reload(
        &fulcrum,
        &file,
        &text([1, 1, 1], "shutdown_timeout = \"5s\""),
    );
    let done = lines.last().unwrap();
    assert!(done.contains(&format!("{b} state drain")), "{done}");
    assert!(done.contains(&format!("{c} weight 3")), "{done}");
    assert_eq!(backend(admin, b)["state"], "drain");
    assert_eq!(backend(admin, c)["weight"]["static"], 3);
    assert_eq!(
        requests_reaching(&fulcrum, 40, b),
        0,
        "a drained backend gets nothing"
    );

    // c's weight changed in the file: the file wins, and the log names the dropped override.
    let lines = reload(
        &fulcrum,
        &file,
        &text([1, 1, 2], "shutdown_timeout = \"5s\""),
    );
    let dropped = lines
        .iter()
        .find(|l| l.contains("override dropped"))
        .unwrap_or_else(|| panic!("no override dropped: {lines:#?}"));
    assert!(dropped.contains("WARN"), "{dropped}");
    for said in [
        "upstream \"web\"".to_owned(),
        format!("backend {c}"),
        "weight override 3 dropped".to_owned(),
        "the file had 1, it now has 2".to_owned(),
    ] {
        assert!(dropped.contains(&said), "{said:?} in {dropped}");
    }
    assert_eq!(backend(admin, c)["weight"]["static"], 2);
    assert_eq!(backend(admin, c)["overrides"], serde_json::json!({}));
    assert_eq!(backend(admin, b)["state"], "drain", "the drain stays");
    let written = state_file(&dir);
    assert_eq!(written.len(), 1, "the dropped one is gone: {written:?}");

    // Stopped and started again with the same file: the drain is back.
    assert!(fulcrum.terminate().success());
    drop(fulcrum);
    let fulcrum = Running::start(&file, 1);
    let admin = fulcrum.admin.unwrap();
    assert_eq!(backend(admin, b)["state"], "drain");
    assert_eq!(
        backend(admin, b)["overrides"],
        serde_json::json!({"state": {"value": "drain", "file": "up"}})
    );
    assert_eq!(backend(admin, c)["weight"]["static"], 2);
    assert_eq!(
        requests_reaching(&fulcrum, 40, b),
        0,
        "drained after the restart"
    );

    // Put back to the file's value through the API: the override is cleared, in the file too.
    call(admin, "PATCH", &path_b, r#"{"state": "up"}"#, 200);
    assert_eq!(backend(admin, b)["overrides"], serde_json::json!({}));
    assert!(state_file(&dir).is_empty(), "{:?}", state_file(&dir));
    assert!(requests_reaching(&fulcrum, 40, b) > 0, "up again");
}

#[test]
fn added_and_removed_backends_and_an_algorithm_survive_a_reload() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let backends = rt.block_on(common::backends(&["a", "b", "d"]));
    let [a, b, d] = [0, 1, 2].map(|i| backends[i].addr());
    let dir = TempDir::new("state", "members");
    let text = |extra: &str| config(&dir, "round_robin", &[(a, 1), (b, 1)], extra);
    let file = TempFile::new("state.toml", &text(""));
    let fulcrum = Running::start(&file, 1);
    let admin = fulcrum.admin.unwrap();

    call(
        admin,
        "POST",
        "/api/upstreams/web/backends",
        &format!(r#"{{"addr": "{d}", "weight": 2}}"#),
        201,
    );
    call(
        admin,
        "DELETE",
        &format!("/api/upstreams/web/backends/{a}"),
        "",
        204,
    );
    call(
        admin,
        "PATCH",
        "/api/upstreams/web",
        r#"{"algorithm": "least_conn"}"#,
        200,
    );
    let shown = upstream(admin)["overrides"].clone();
    assert_eq!(
        shown["removed"],
        serde_json::json!([a.to_string()]),
        "{shown}"
    );
    assert_eq!(
        shown["algorithm"]["value"]["algorithm"], "least_conn",
        "{shown}"
    );
    assert_eq!(
        shown["algorithm"]["file"]["algorithm"], "round_robin",
        "{shown}"
    );

    reload(&fulcrum, &file, &text("shutdown_timeout = \"5s\""));
    assert_eq!(addrs(admin), vec![b.to_string(), d.to_string()]);
    assert_eq!(upstream(admin)["algorithm"], "least_conn");
    assert_eq!(
        backend(admin, d)["overrides"],
        serde_json::json!({"added": {"weight": 2, "backup": false}})
    );
    assert_eq!(backend(admin, d)["weight"]["static"], 2);
    assert_eq!(state_file(&dir).len(), 3, "{:?}", state_file(&dir));

    // Each put back as the file has it: nothing left, in the API or the state file.
    call(
        admin,
        "PATCH",
        "/api/upstreams/web",
        r#"{"algorithm": "round_robin"}"#,
        200,
    );
    call(
        admin,
        "DELETE",
        &format!("/api/upstreams/web/backends/{d}"),
        "",
        204,
    );
    call(
        admin,
        "POST",
        "/api/upstreams/web/backends",
        &format!(r#"{{"addr": "{a}"}}"#),
        201,
    );
    assert_eq!(upstream(admin)["overrides"], serde_json::json!({}));
    assert!(state_file(&dir).is_empty(), "{:?}", state_file(&dir));
    reload(&fulcrum, &file, &text(""));
    assert_eq!(addrs(admin), vec![a.to_string(), b.to_string()]);
    assert_eq!(upstream(admin)["algorithm"], "round_robin");
}

#[test]
fn a_corrupt_state_file_is_set_aside_and_fulcrum_serves() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let backends = rt.block_on(common::backends(&["a"]));
    let a = backends[0].addr();
    let dir = TempDir::new("state", "corrupt");
    let garbage = b"{\"version\": 1, \"overrides\": {\"upstreams/web/backends/";
    std::fs::write(dir.0.join("state.json"), garbage).unwrap();
    let file = TempFile::new("state.toml", &config(&dir, "round_robin", &[(a, 1)], ""));
    let mut child = common::fulcrum()
        .args(["run", "--config"])
        .arg(&file.0)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = common::lines_of(child.stderr.take().unwrap());
    let guard = common::ChildGuard(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut error = None;
    let mut proxy = None;
    while error.is_none() || proxy.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line: String = lines.recv_timeout(left).expect("fulcrum logs its start");
        if line.contains("state file cannot be used") {
            error = Some(line.clone());
        }
        if line.contains(" listening") {
            proxy = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("listen="))
                .and_then(|a| a.parse::<SocketAddr>().ok());
        }
    }
    let error = error.unwrap();
    assert!(error.contains("ERROR"), "{error}");
    assert!(error.contains("it is not JSON"), "what: {error}");
    assert!(
        error.contains(&format!("{}/state.json", dir.path())),
        "where: {error}"
    );
    assert!(
        error.contains("starts on its configuration alone"),
        "what to do: {error}"
    );
    // Kept whole under another name, and fulcrum serves.
    let aside: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("state.json.bad-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(std::fs::read(&aside[0]).unwrap(), garbage);
    assert_eq!(common::status_from([127, 0, 0, 1], proxy.unwrap()), 200);
    drop(guard);
}

/// An upstream written in an included file: an algorithm override made through the API is
/// dropped when that file changes the upstream's balancing options (here maglev's
/// `table_size`), as for an upstream of the main file, and the log says why.
#[test]
fn an_included_files_edit_of_the_balancing_options_drops_the_algorithm_override() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let backends = rt.block_on(common::backends(&["a", "b"]));
    let [a, b] = [0, 1].map(|i| backends[i].addr());
    let dir = TempDir::new("state", "included");
    std::fs::create_dir_all(dir.0.join("conf.d")).unwrap();
    let web = |table_size: u32| {
        format!(
            "[[upstream]]\nname = \"web\"\nalgorithm = \"maglev\"\ntable_size = {table_size}\n{}",
            common::backend_block(&[(a, 1), (b, 1)])
        )
    };
    let included = dir.0.join("conf.d/web.toml");
    std::fs::write(&included, web(65537)).unwrap();
    let main = format!(
        "workers = 1\naccess_log = false\nstate_file = \"{0}/state.json\"\ninclude = [\"{0}/conf.d/*.toml\"]\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n",
        dir.path()
    );
    let file = TempFile::new("state-included.toml", &main);
    let fulcrum = Running::start(&file, 1);
    let admin = fulcrum.admin.unwrap();
    call(
        admin,
        "PATCH",
        "/api/upstreams/web",
        r#"{"algorithm": "least_conn"}"#,
        200,
    );
    let shown = upstream(admin)["overrides"].clone();
    assert_eq!(
        shown["algorithm"]["file"]["options"]["table_size"], 65537,
        "the file's options, from the included file: {shown}"
    );

    // An unrelated reload keeps the override.
    reload(
        &fulcrum,
        &file,
        &format!("shutdown_timeout = \"5s\"\n{main}"),
    );
    assert_eq!(upstream(admin)["algorithm"], "least_conn");

    // The included file changes the upstream's options: the file wins.
    std::fs::write(&included, web(1009)).unwrap();
    let lines = reload(&fulcrum, &file, &main);
    assert_eq!(upstream(admin)["algorithm"], "maglev", "{lines:#?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("WARN") && l.contains("algorithm") && l.contains("dropped")),
        "the log names the dropped override: {lines:#?}"
    );
    assert_eq!(upstream(admin)["overrides"], serde_json::json!({}));
}

/// A ring upstream (`hash` with `consistent = true`) takes no weight its ring could not be
/// built for (10,000 in all, as the configuration): the API refuses one (409, saying the
/// bound and what to do) and the weights stay; the same value in the state file is dropped
/// at start with a WARN naming its key, and requests are answered throughout. (Such a weight
/// used to stall the upstream's requests for tens of seconds while its ring was rebuilt.)
#[test]
fn a_weight_past_the_rings_bound_is_refused_and_dropped_from_the_state_file() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let backends = rt.block_on(common::backends(&["a", "b"]));
    let [a, b] = [0, 1].map(|i| backends[i].addr());
    let dir = TempDir::new("state", "ring");
    let heavy = format!("upstreams/web/backends/{b}");
    let state = serde_json::json!({
        "version": 1,
        "overrides": {
            heavy.clone(): {"weight": {"value": 100000, "file": 1}},
            format!("upstreams/web/backends/{a}"): {"state": {"value": "drain", "file": "up"}},
        }
    });
    std::fs::write(dir.0.join("state.json"), state.to_string()).unwrap();
    let text = config(&dir, "hash", &[(a, 1), (b, 1)], "").replace(
        "algorithm = \"hash\"",
        "algorithm = \"hash\"\nconsistent = true",
    );
    let file = TempFile::new("state.toml", &text);
    let fulcrum = Running::start(&file, 1);
    let admin = fulcrum.admin.unwrap();
    let warned = fulcrum
        .started
        .iter()
        .find(|l| l.contains("override dropped") && l.contains(&heavy))
        .unwrap_or_else(|| panic!("a WARN naming {heavy}: {:#?}", fulcrum.started));
    assert!(warned.contains("WARN"), "{warned}");
    assert!(warned.contains("at most 10000"), "the bound: {warned}");
    // The drain beside it holds; b keeps the file's weight.
    assert_eq!(backend(admin, a)["state"], "drain");
    assert_eq!(backend(admin, b)["weight"]["static"], 1);
    assert_eq!(requests_reaching(&fulcrum, 3, b), 3);

    // Through the API: refused with the bound and what to do, nothing changed.
    call(
        admin,
        "PATCH",
        &format!("/api/upstreams/web/backends/{a}"),
        r#"{"state": "up"}"#,
        200,
    );
    let path_b = format!("/api/upstreams/web/backends/{b}");
    let answer = call(admin, "PATCH", &path_b, r#"{"weight": 100000}"#, 409);
    assert!(answer.contains("at most 10000"), "{answer}");
    assert!(answer.contains("lower the others"), "{answer}");
    let answer = call(
        admin,
        "POST",
        "/api/upstreams/web/backends",
        r#"{"addr": "127.0.0.1:9", "weight": 9999}"#,
        409,
    );
    assert!(answer.contains("at most 10000"), "{answer}");
    // Not a backend: that is what the answer says, whatever the weight.
    call(
        admin,
        "PATCH",
        "/api/upstreams/web/backends/127.0.0.1:9",
        r#"{"weight": 100000}"#,
        404,
    );
    let weights: Vec<u64> = upstream(admin)["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["weight"]["static"].as_u64().unwrap())
        .collect();
    assert_eq!(weights, vec![1, 1]);
    assert!(
        state_file(&dir).get(&heavy).is_none(),
        "{:?}",
        state_file(&dir)
    );
    // Within the bound it is taken.
    call(admin, "PATCH", &path_b, r#"{"weight": 9999}"#, 200);
    for _ in 0..5 {
        assert_eq!(
            common::status_from([127, 0, 0, 1], fulcrum.addr_of("web")),
            200
        );
    }
}

/// One bad entry in the state file (a weight of 0, written by hand) costs only itself: the
/// drain beside it holds from the start (it used to be thrown away with the whole file, and
/// the drained backend took traffic), a WARN names the bad key and where the file as it was
/// is kept, that copy holds it whole, and the state file is rewritten without it.
#[test]
fn a_bad_entry_in_the_state_file_drops_only_itself() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let backends = rt.block_on(common::backends(&["a", "b"]));
    let [a, b] = [0, 1].map(|i| backends[i].addr());
    let dir = TempDir::new("state", "entry");
    let bad = format!("upstreams/web/backends/{b}");
    // Nothing can be connected to on port 0: the file and the API refuse it, and so does
    // the state file (it was added and shown up).
    let port0 = "upstreams/web/backends/127.0.0.9:0".to_owned();
    let text = serde_json::json!({
        "version": 1,
        "overrides": {
            format!("upstreams/web/backends/{a}"): {"state": {"value": "drain", "file": "up"}},
            bad.clone(): {"weight": {"value": 0, "file": 1}},
            port0.clone(): {"added": {"weight": 1}},
        }
    })
    .to_string();
    std::fs::write(dir.0.join("state.json"), &text).unwrap();
    let file = TempFile::new(
        "state.toml",
        &config(&dir, "round_robin", &[(a, 1), (b, 1)], ""),
    );
    let fulcrum = Running::start(&file, 1);
    let admin = fulcrum.admin.unwrap();
    assert_eq!(backend(admin, a)["state"], "drain");
    assert_eq!(requests_reaching(&fulcrum, 4, b), 4);
    let warned = fulcrum
        .started
        .iter()
        .find(|l| l.contains("entry cannot be used") && l.contains(&bad))
        .unwrap_or_else(|| panic!("a WARN naming {bad}: {:#?}", fulcrum.started));
    assert!(warned.contains("WARN"), "{warned}");
    assert!(warned.contains("a weight is from 1"), "what: {warned}");
    assert!(
        warned.contains("through the admin API"),
        "what to do: {warned}"
    );
    assert_eq!(backend(admin, a)["state"], "drain");
    assert_eq!(requests_reaching(&fulcrum, 4, b), 4);
    assert_eq!(addrs(admin), vec![a.to_string(), b.to_string()]);
    let refused = fulcrum
        .started
        .iter()
        .find(|l| l.contains("entry cannot be used") && l.contains(&port0))
        .unwrap_or_else(|| panic!("a WARN naming {port0}: {:#?}", fulcrum.started));
    assert!(refused.contains("a port from 1 to 65535"), "{refused}");
    // The state file is written again at once without the dropped entries: a later start
    // does not read them again.
    let kept: Vec<String> = state_file(&dir).keys().cloned().collect();
    assert_eq!(kept, vec![format!("upstreams/web/backends/{a}")]);
    // The file as it was, kept under the name the WARN gives.
    let copy = warned
        .split("kept as ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_else(|| panic!("where the file is kept: {warned}"));
    assert_eq!(std::fs::read_to_string(copy).unwrap(), text);
}

/// The value of the series `name` (written without labels) in a scrape of `/metrics`.
fn metric(admin: SocketAddr, name: &str) -> f64 {
    let reply = common::http_get(admin, "/metrics").unwrap();
    reply
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in {reply}"))
        .parse()
        .unwrap()
}

/// A state file that cannot be written (its directory replaced by a regular file, which stops
/// root too): the change is applied, and its answer says it is not saved and why; the log
/// says what to do for that error; `/metrics` shows it (present from the start); once the
/// directory is back the next change saves every override and the warning goes.
#[test]
fn a_failed_state_file_write_is_told_in_the_answer_and_the_metrics() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let backends = rt.block_on(common::backends(&["a", "b"]));
    let [a, b] = [0, 1].map(|i| backends[i].addr());
    let dir = TempDir::new("state", "unwritable");
    let sub = dir.0.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let text = config(&dir, "round_robin", &[(a, 1), (b, 1)], "").replace(
        &format!("{}/state.json", dir.path()),
        &format!("{}/state.json", sub.display()),
    );
    let file = TempFile::new("state.toml", &text);
    let fulcrum = Running::start(&file, 1);
    let admin = fulcrum.admin.unwrap();
    assert_eq!(
        metric(admin, "fulcrum_state_file_last_write_successful"),
        1.0
    );
    assert_eq!(
        metric(admin, "fulcrum_state_file_write_failures_total"),
        0.0
    );
    let path_a = format!("/api/upstreams/web/backends/{a}");
    let answer = call(admin, "PATCH", &path_a, r#"{"state": "drain"}"#, 200);
    assert!(!answer.contains("warning"), "{answer}");

    std::fs::remove_dir_all(&sub).unwrap();
    std::fs::write(&sub, "not a directory").unwrap();
    let answer = call(admin, "PATCH", &path_a, r#"{"weight": 2}"#, 200);
    let v: Value = serde_json::from_str(&answer).unwrap();
    let warning = v["warning"].as_str().unwrap_or_else(|| panic!("{answer}"));
    assert!(warning.contains("is applied"), "{warning}");
    assert!(warning.contains("would not survive a restart"), "{warning}");
    assert!(
        warning.contains("not a directory"),
        "why and what to do: {warning}"
    );
    assert_eq!(v["weight"]["static"], 2, "applied: {answer}");
    assert_eq!(
        metric(admin, "fulcrum_state_file_last_write_successful"),
        0.0
    );
    assert_eq!(
        metric(admin, "fulcrum_state_file_write_failures_total"),
        1.0
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let logged = loop {
        let line = fulcrum.next_line(deadline);
        if line.contains("cannot write the state file") {
            break line;
        }
    };
    assert!(logged.contains("ERROR"), "{logged}");
    assert!(
        logged.contains("create it"),
        "the advice fits the error: {logged}"
    );
    assert!(!logged.contains("writable by"), "{logged}");
    // DELETE, whose answer has no body otherwise, says so too.
    let answer = call(
        admin,
        "DELETE",
        &format!("/api/upstreams/web/backends/{b}"),
        "",
        200,
    );
    assert!(answer.contains("would not survive a restart"), "{answer}");

    // The directory back: the next change saves them all, and says nothing.
    std::fs::remove_file(&sub).unwrap();
    std::fs::create_dir(&sub).unwrap();
    let answer = call(admin, "PATCH", &path_a, r#"{"weight": 3}"#, 200);
    assert!(!answer.contains("warning"), "{answer}");
    assert_eq!(
        metric(admin, "fulcrum_state_file_last_write_successful"),
        1.0
    );
    assert_eq!(
        metric(admin, "fulcrum_state_file_write_failures_total"),
        2.0
    );
    let saved = std::fs::read_to_string(sub.join("state.json")).unwrap();
    assert!(
        saved.contains("\"drain\"") && saved.contains("\"removed\""),
        "{saved}"
    );
}
