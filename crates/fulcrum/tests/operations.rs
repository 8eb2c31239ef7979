//! What an operator reads and does around a running fulcrum: its metrics families against
//! docs/operations.md, its log level and format, its log lines in words (no Rust debug
//! output, nothing said twice), SIGQUIT, and the admin API's refusals and changes in the log.

use std::collections::BTreeSet;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
use common::{HeldPort, Running, TempFile, admin_call, http_get, lines_of, wait_until};

/// A configuration of one listener sending to `web` (its `backends`), and an admin listener
/// with `admin_lines` under `[admin]`.
fn config(backends: &[SocketAddr], admin_lines: &str) -> String {
    let mut text = "workers = 2\naccess_log = false\nshutdown_timeout = \"20s\"\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
         [[upstream]]\nname = \"web\"\nalgorithm = \"round_robin\"\n"
        .to_owned();
    for addr in backends {
        text.push_str(&format!("  [[upstream.backend]]\n  addr = \"{addr}\"\n"));
    }
    text.push_str(&format!(
        "\n[admin]\nlisten = \"127.0.0.1:0\"\n{admin_lines}\n"
    ));
    text
}

/// Every line the process writes until it exits (within `within`), and its exit status.
fn until_exit(fulcrum: &mut Running, within: Duration) -> (Vec<String>, std::process::ExitStatus) {
    let deadline = Instant::now() + within;
    let mut lines = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match fulcrum
            .lines
            .recv_timeout(left.min(Duration::from_millis(100)))
        {
            Ok(line) => lines.push(line),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = fulcrum.child.wait().unwrap();
                return (lines, status);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                assert!(
                    Instant::now() < deadline,
                    "fulcrum did not exit: {lines:#?}"
                );
            }
        }
    }
}

fn signal(child: &Child, name: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// The metric families docs/operations.md's table lists, those of `[cluster]` and of
/// `state_file` apart (they exist only with one; tests/state_file.rs scrapes those).
fn documented_families() -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operations.md");
    let text = std::fs::read_to_string(path).unwrap();
    let table = text
        .split("\n## Metrics")
        .nth(1)
        .expect("docs/operations.md has a Metrics section");
    let table = table.split("\n## ").next().unwrap();
    table
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter(|l| !l.contains("with `[cluster]`") && !l.contains("with `state_file`"))
        .map(|l| {
            l.trim_start_matches("| `")
                .split('`')
                .next()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// The families of a scrape: each `# TYPE` line's name.
fn exported_families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap().to_owned())
        .collect()
}

/// The value of the series `name` (written without labels) in a scrape.
fn value_of(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .parse()
        .unwrap()
}

fn scrape(admin: SocketAddr) -> String {
    let reply = http_get(admin, "/metrics").unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    reply.split_once("\r\n\r\n").unwrap().1.to_owned()
}

/// docs/operations.md's table checked against the code: right after the start, every family
/// it lists is exported (with HELP and TYPE, a series or not), and every family exported is
/// listed; the process's, the build's and the reloads' among them; promtool accepts it all.
#[test]
fn every_documented_metric_family_is_exported_from_the_start_and_no_other() {
    let dead = HeldPort::refusing();
    let file = TempFile::new("ops-metrics.toml", &config(&[dead.addr], ""));
    let fulcrum = Running::start(&file, 1);
    let admin = fulcrum.admin.unwrap();
    let text = scrape(admin);
    let documented = documented_families();
    let exported = exported_families(&text);
    for needed in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
        "fulcrum_build_info",
        "fulcrum_config_last_reload_successful",
        "fulcrum_config_last_reload_success_timestamp_seconds",
    ] {
        assert!(exported.contains(needed), "{needed} exported:\n{text}");
    }
    let undocumented: Vec<_> = exported.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "exported, not in docs/operations.md: {undocumented:?}"
    );
    let missing: Vec<_> = documented.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "in docs/operations.md, not exported at the start: {missing:?}\n{text}"
    );
    for f in &exported {
        assert!(text.contains(&format!("# HELP {f} ")), "HELP of {f}");
    }
    assert!(
        text.contains(&format!(
            "fulcrum_build_info{{version=\"{}\",profile=\"",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
    assert!(value_of(&text, "process_open_fds") > 0.0);
    common::assert_promtool_accepts(&text);

    // A refused reload: 0, and the time of the last applied stays; an applied one: 1, later.
    assert_eq!(
        value_of(&text, "fulcrum_config_last_reload_successful"),
        1.0
    );
    let started = value_of(
        &text,
        "fulcrum_config_last_reload_success_timestamp_seconds",
    );
    let good = std::fs::read_to_string(&file.0).unwrap();
    std::fs::write(&file.0, "[[upstream]]\nname = 1\n").unwrap();
    fulcrum.hangup();
    wait_until(
        Duration::from_secs(20),
        "the refused reload shows",
        || match value_of(&scrape(admin), "fulcrum_config_last_reload_successful") {
            0.0 => Ok(()),
            v => Err(format!("{v}")),
        },
    );
    let text = scrape(admin);
    assert_eq!(
        value_of(
            &text,
            "fulcrum_config_last_reload_success_timestamp_seconds"
        ),
        started
    );
    std::fs::write(&file.0, good).unwrap();
    fulcrum.hangup();
    wait_until(
        Duration::from_secs(20),
        "the applied reload shows",
        || match value_of(&scrape(admin), "fulcrum_config_last_reload_successful") {
            1.0 => Ok(()),
            v => Err(format!("{v}")),
        },
    );
    let at = value_of(
        &scrape(admin),
        "fulcrum_config_last_reload_success_timestamp_seconds",
    );
    assert!(at > started, "{at} after {started}");
}

/// Starts `fulcrum run` on `file` with `args`, its listener on a port chosen here (so that its
/// start can be seen without reading its log), and waits until it accepts.
fn start_quiet(file: &TempFile, args: &[&str]) -> (Running, SocketAddr) {
    let held = HeldPort::for_server();
    let addr = held.addr;
    let text = std::fs::read_to_string(&file.0).unwrap();
    std::fs::write(
        &file.0,
        text.replacen(
            "listen = \"127.0.0.1:0\"",
            &format!("listen = \"{addr}\""),
            1,
        ),
    )
    .unwrap();
    let mut child = common::fulcrum()
        .args(["run", "--config"])
        .arg(&file.0)
        .args(args)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stderr.take().unwrap());
    let running = Running {
        child,
        lines,
        listening: Vec::new(),
        started: Vec::new(),
        admin: None,
    };
    wait_until(Duration::from_secs(20), "fulcrum accepts", || {
        TcpStream::connect(addr)
            .map(drop)
            .map_err(|e| e.to_string())
    });
    drop(held);
    (running, addr)
}

/// `--log-level` filters every target, and wins over `RUST_LOG`'s bare level (the tests set
/// `RUST_LOG=info`): `warn` hides the start's INFO lines, `debug` shows DEBUG lines.
#[test]
fn the_log_level_flag_filters_and_wins_over_rust_logs_level() {
    let dead = HeldPort::refusing();
    let token = TempFile::new("ops-level.token", "s3cret-token-for-tests\n");
    let admin_lines = format!("token_file = \"{}\"", token.0.display());
    let held = HeldPort::for_server();
    let admin = held.addr;
    let text = config(&[dead.addr], &admin_lines).replace(
        "[admin]\nlisten = \"127.0.0.1:0\"",
        &format!("[admin]\nlisten = \"{admin}\""),
    );
    let file = TempFile::new("ops-level.toml", &text);
    let (mut quiet, addr) = start_quiet(&file, &["--log-level", "warn"]);
    drop(held);
    // A request to a dead backend: a WARN line (the attempt failed) that must show.
    let _ = http_get(addr, "/");
    // A refused call: its WARN line names the caller at this level too.
    let host = admin.to_string();
    let (status, _) = admin_call(admin, "POST", "/api/reload", &[("Host", host.as_str())], "");
    assert_eq!(status, 401);
    signal(&quiet.child, "TERM");
    let (lines, status) = until_exit(&mut quiet, Duration::from_secs(30));
    assert!(status.success());
    assert!(
        lines.iter().all(|l| !l.contains(" INFO ")),
        "no INFO line at warn: {lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains(" WARN ")),
        "WARN lines at warn: {lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("refused 401") && l.contains("caller=127.0.0.1:")),
        "the refusal names its caller at warn: {lines:#?}"
    );

    let file = TempFile::new("ops-level.toml", &config(&[dead.addr], ""));
    let (mut verbose, addr) = start_quiet(&file, &["--log-level", "debug"]);
    let _ = http_get(addr, "/");
    signal(&verbose.child, "TERM");
    let (lines, status) = until_exit(&mut verbose, Duration::from_secs(30));
    assert!(status.success());
    assert!(
        lines.iter().any(|l| l.contains(" DEBUG ")),
        "DEBUG lines at debug: {lines:#?}"
    );
    assert!(lines.iter().any(|l| l.contains(" INFO ")), "{lines:#?}");
}

/// `--log-format json`: every line is one JSON object, with the level, the target and the
/// message among its fields.
#[test]
fn the_json_log_format_writes_one_json_object_per_line() {
    let dead = HeldPort::refusing();
    let file = TempFile::new("ops-json.toml", &config(&[dead.addr], ""));
    let (mut fulcrum, addr) = start_quiet(&file, &["--log-format", "json"]);
    let _ = http_get(addr, "/");
    fulcrum.hangup();
    signal(&fulcrum.child, "TERM");
    let (lines, status) = until_exit(&mut fulcrum, Duration::from_secs(30));
    assert!(status.success());
    let mut messages = Vec::new();
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON object ({e}): {line}"));
        assert!(v["level"].is_string(), "{line}");
        assert!(v["target"].is_string(), "{line}");
        messages.push(
            v["fields"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    for said in [
        "fulcrum started",
        "listening",
        "attempt failed",
        "fulcrum stopped",
    ] {
        assert!(
            messages.iter().any(|m| m.starts_with(said)),
            "{said}: {lines:#?}"
        );
    }
}

/// A backend that answers each request it reads only when told to (`release`): a request
/// in flight for as long as a test wants.
fn held_backend() -> (SocketAddr, mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (release, released) = mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let Ok((mut s, _)) = listener.accept() else {
            return;
        };
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if s.read(&mut byte).unwrap_or(0) == 0 {
                return;
            }
            head.push(byte[0]);
        }
        if released.recv_timeout(Duration::from_secs(60)).is_ok() {
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nheld",
            );
        }
    });
    (addr, release, thread)
}

/// SIGQUIT stops as SIGTERM does (nginx's graceful `quit`): the request in flight is answered
/// 200, the stop is logged, and the process exits 0.
#[test]
fn sigquit_drains_like_sigterm() {
    let (backend, release, thread) = held_backend();
    let file = TempFile::new("ops-quit.toml", &config(&[backend], ""));
    let mut fulcrum = Running::start(&file, 1);
    let addr = fulcrum.addr_of("web");
    let client = std::thread::spawn(move || http_get(addr, "/"));
    let admin = fulcrum.admin.unwrap();
    wait_until(
        Duration::from_secs(20),
        "the request is in flight",
        || match common::in_flight(admin, "web").as_slice() {
            [1] => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    signal(&fulcrum.child, "QUIT");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !fulcrum.next_line(deadline).contains("SIGQUIT received") {}
    release.send(()).unwrap();
    let answer = client.join().unwrap().unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("held"), "{answer}");
    let (lines, status) = until_exit(&mut fulcrum, Duration::from_secs(30));
    assert!(status.success(), "{status}: {lines:#?}");
    assert!(
        lines.iter().any(|l| l.contains("fulcrum stopped")),
        "{lines:#?}"
    );
    thread.join().unwrap();
}

/// A typical life — start, requests (one backend dead), a reload, a drain through the API, a
/// refused call, the stop with connections open — logs words, not Rust's debug output; and
/// says "waiting for open connections" once, whatever the number of workers.
#[test]
fn the_log_has_no_debug_output_and_says_each_thing_once() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let live = rt.block_on(common::backends(&["a"]));
    let dead = HeldPort::refusing();
    let token = TempFile::new("ops-words.token", "s3cret-token-for-tests\n");
    let admin_lines = format!("token_file = \"{}\"", token.0.display());
    let file = TempFile::new(
        "ops-words.toml",
        &config(&[live[0].addr(), dead.addr], &admin_lines),
    );
    let mut fulcrum = Running::start(&file, 1);
    let addr = fulcrum.addr_of("web");
    let admin = fulcrum.admin.unwrap();
    for _ in 0..6 {
        let _ = http_get(addr, "/");
    }
    fulcrum.hangup();
    let host = admin.to_string();
    let (status, body) = admin_call(
        admin,
        "PATCH",
        &format!("/api/upstreams/web/backends/{}", dead.addr),
        &[
            ("Host", host.as_str()),
            ("Authorization", "Bearer s3cret-token-for-tests"),
            ("Content-Type", "application/json"),
        ],
        "{\"state\": \"drain\"}",
    );
    assert_eq!(status, 200, "{body}");
    // Keep-alive connections open at the stop, spread over the workers.
    let mut open = Vec::new();
    for _ in 0..8 {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "GET / HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut first = [0u8; 12];
        s.read_exact(&mut first).unwrap();
        open.push(s);
    }
    signal(&fulcrum.child, "TERM");
    let (lines, status) = until_exit(&mut fulcrum, Duration::from_secs(40));
    assert!(status.success(), "{lines:#?}");
    for line in &lines {
        for debug in ["Some(", " { ", "None", "Fresh", "Nothing"] {
            assert!(!line.contains(debug), "{debug:?} in {line}");
        }
    }
    let waiting = lines
        .iter()
        .filter(|l| l.contains("waiting for open connections"))
        .count();
    assert_eq!(waiting, 1, "{lines:#?}");
    let failed = lines
        .iter()
        .find(|l| l.contains("attempt failed"))
        .unwrap_or_else(|| panic!("the dead backend's failure is in the log: {lines:#?}"));
    assert!(
        failed.contains(" connection=new request_sent=none "),
        "{failed}"
    );
    drop(open);
}

/// A port in use is said once, with what to do: the listener's and the admin listener's.
#[test]
fn a_port_in_use_is_said_once_with_what_to_do() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap();
    let dead = HeldPort::refusing();
    let listener_taken = config(&[dead.addr], "").replacen(
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"{port}\""),
        1,
    );
    let admin_taken = config(&[dead.addr], "").replace(
        "[admin]\nlisten = \"127.0.0.1:0\"",
        &format!("[admin]\nlisten = \"{port}\""),
    );
    for (name, text, what) in [
        (
            "ops-inuse-listener.toml",
            listener_taken,
            "choose another `listen`",
        ),
        (
            "ops-inuse-admin.toml",
            admin_taken,
            "choose another [admin] listen",
        ),
    ] {
        let file = TempFile::new(name, &text);
        let out = common::fulcrum()
            .args(["run", "--config"])
            .arg(&file.0)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.matches("Address already in use").count(),
            1,
            "{stderr}"
        );
        assert!(stderr.contains(what), "{stderr}");
        assert!(stderr.contains(&port.to_string()), "{stderr}");
    }
}

/// The admin API's refusals (401) are logged with the caller, the method and the path, at
/// most one line a second however many come; every change (state, weight, added and removed
/// backend, algorithm, reload) says who made it.
#[test]
fn refused_calls_and_changes_through_the_api_name_the_caller() {
    let dead = HeldPort::refusing();
    let token = TempFile::new("ops-caller.token", "s3cret-token-for-tests\n");
    let admin_lines = format!("token_file = \"{}\"", token.0.display());
    let file = TempFile::new("ops-caller.toml", &config(&[dead.addr], &admin_lines));
    let mut fulcrum = Running::start(&file, 1);
    let admin = fulcrum.admin.unwrap();
    let host = admin.to_string();
    let path = format!("/api/upstreams/web/backends/{}", dead.addr);
    let change = |auth: &str, body: &str| {
        admin_call(
            admin,
            "PATCH",
            &path,
            &[
                ("Host", host.as_str()),
                ("Authorization", auth),
                ("Content-Type", "application/json"),
            ],
            body,
        )
    };
    // A brute force: 50 wrong tokens.
    let started = Instant::now();
    for i in 0..50 {
        let (status, _) = change(&format!("Bearer guess-{i}"), "{\"state\": \"drain\"}");
        assert_eq!(status, 401);
    }
    let took = started.elapsed();
    let (status, body) = change("Bearer s3cret-token-for-tests", "{\"state\": \"drain\"}");
    assert_eq!(status, 200, "{body}");
    let (status, body) = change("Bearer s3cret-token-for-tests", "{\"weight\": 3}");
    assert_eq!(status, 200, "{body}");
    let call = |method: &str, path: &str, body: &str| {
        admin_call(
            admin,
            method,
            path,
            &[
                ("Host", host.as_str()),
                ("Authorization", "Bearer s3cret-token-for-tests"),
                ("Content-Type", "application/json"),
            ],
            body,
        )
    };
    let other = HeldPort::refusing();
    let (status, body) = call(
        "POST",
        "/api/upstreams/web/backends",
        &format!("{{\"addr\": \"{}\"}}", other.addr),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = call(
        "DELETE",
        &format!("/api/upstreams/web/backends/{}", other.addr),
        "",
    );
    assert_eq!(status, 204, "{body}");
    let (status, body) = call(
        "PATCH",
        "/api/upstreams/web",
        "{\"algorithm\": \"least_conn\"}",
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = call("POST", "/api/reload", "");
    assert_eq!(status, 200, "{body}");
    // Every refusal is told: a line of its own, or counted in the next one's
    // `not_logged_since`, or in the line that ends its second (`refused=`).
    let told = |lines: &[String]| -> u64 {
        let field = |line: &str, name: &str| -> u64 {
            line.split_once(&format!("{name}="))
                .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        lines
            .iter()
            .map(|l| {
                if l.contains("refused 401") {
                    1 + field(l, "not_logged_since")
                } else if l.contains("more calls refused (401)") {
                    field(l, "refused")
                } else {
                    0
                }
            })
            .sum()
    };
    let mut early = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while told(&early) < 50 {
        early.push(fulcrum.next_line(deadline));
    }
    assert_eq!(told(&early), 50, "{early:#?}");
    signal(&fulcrum.child, "TERM");
    let (rest, status) = until_exit(&mut fulcrum, Duration::from_secs(30));
    assert!(status.success());
    let lines: Vec<String> = early.into_iter().chain(rest).collect();
    assert_eq!(told(&lines), 50, "each refusal told once: {lines:#?}");
    let refused: Vec<&String> = lines.iter().filter(|l| l.contains("refused 401")).collect();
    assert!(!refused.is_empty(), "{lines:#?}");
    // At most one a second (and one more for a second begun).
    let bound = took.as_secs() as usize + 1;
    assert!(
        refused.len() <= bound,
        "{} lines in {took:?}: {refused:#?}",
        refused.len()
    );
    for line in &refused {
        assert!(line.contains(" WARN "), "{line}");
        assert!(line.contains("caller=127.0.0.1:"), "{line}");
        assert!(line.contains(&format!("path={path}")), "{line}");
    }
    for said in [
        "backend state changed by the admin API",
        "backend added by the admin API",
        "backend removed by the admin API",
        "algorithm changed by the admin API",
        "reload asked through the admin API",
    ] {
        let line = lines
            .iter()
            .find(|l| l.contains(said))
            .unwrap_or_else(|| panic!("{said}: {lines:#?}"));
        assert!(line.contains("caller=127.0.0.1:"), "{line}");
    }
    let weight = lines
        .iter()
        .find(|l| l.contains("weight") && l.contains("admin API") && !l.contains("refused"))
        .unwrap_or_else(|| panic!("the weight change is logged: {lines:#?}"));
    assert!(weight.contains("caller=127.0.0.1:"), "{weight}");
}

/// Requests a stop cannot wait for: each of 8 requests held by a backend that never answers,
/// spread over 2 workers. How many are open is said when the stop begins; at
/// `shutdown_timeout` the closing is said once, with how many, however many workers close
/// theirs; the process still exits 0.
#[test]
fn connections_closed_at_shutdown_timeout_are_said_once() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let backend = silent.local_addr().unwrap();
    let (stop, stopped) = mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let mut held = Vec::new();
        for _ in 0..8 {
            match silent.accept() {
                Ok((s, _)) => held.push(s),
                Err(_) => return,
            }
        }
        let _ = stopped.recv_timeout(Duration::from_secs(60));
    });
    let text =
        config(&[backend], "").replace("shutdown_timeout = \"20s\"", "shutdown_timeout = \"1s\"");
    let file = TempFile::new("ops-timeout.toml", &text);
    let mut fulcrum = Running::start(&file, 1);
    let addr = fulcrum.addr_of("web");
    let admin = fulcrum.admin.unwrap();
    let clients: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(move || http_get(addr, "/")))
        .collect();
    wait_until(
        Duration::from_secs(20),
        "8 requests in flight",
        || match common::in_flight(admin, "web").as_slice() {
            [8] => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    signal(&fulcrum.child, "TERM");
    let (lines, status) = until_exit(&mut fulcrum, Duration::from_secs(30));
    assert!(status.success(), "{lines:#?}");
    let closing: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("still open after shutdown_timeout"))
        .collect();
    assert_eq!(closing.len(), 1, "{lines:#?}");
    assert!(
        closing[0].contains("closed_connections=8"),
        "{}",
        closing[0]
    );
    // How many were open: said when the stop began.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("shutting down") && l.contains("open_connections=8")),
        "{lines:#?}"
    );
    for c in clients {
        let _ = c.join();
    }
    let _ = stop.send(());
    holder.join().unwrap();
}

/// An access log that cannot be opened is named by its path (not Rust's `File("...")`), and
/// why is said once.
#[test]
fn an_access_log_that_cannot_be_opened_is_named_by_its_path_once() {
    let dead = HeldPort::refusing();
    let text = config(&[dead.addr], "").replace(
        "access_log = false",
        "access_log = \"/nonexistent-fulcrum-ops-dir/access.log\"",
    );
    let file = TempFile::new("ops-access-log.toml", &text);
    let out = common::fulcrum()
        .args(["run", "--config"])
        .arg(&file.0)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot open the access log /nonexistent-fulcrum-ops-dir/access.log: "),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("File("), "{stderr}");
}

/// The other long-running commands stop on SIGQUIT as on SIGTERM too: `lab backend` exits 0.
#[test]
fn lab_backend_stops_gracefully_on_sigquit() {
    let held = HeldPort::for_server();
    let addr = held.addr;
    let mut backend = common::ChildGuard(
        common::fulcrum()
            .args([
                "lab",
                "backend",
                "--listen",
                &addr.to_string(),
                "--name",
                "q",
            ])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_until(Duration::from_secs(20), "the backend accepts", || {
        TcpStream::connect(addr)
            .map(drop)
            .map_err(|e| e.to_string())
    });
    drop(held);
    signal(&backend.0, "QUIT");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = backend.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "still running after SIGQUIT");
        // Poll interval of a loop bounded by `deadline`.
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut log = String::new();
    backend
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(status.success(), "{status}: {log}");
    assert!(log.contains("SIGQUIT received"), "{log}");
}

/// `log_level` and `log_format` in the file set the log as the flags do; a flag wins over its
/// key; a change of them at a reload is said not applied.
#[test]
fn the_log_keys_set_the_log_and_the_flags_win() {
    let dead = HeldPort::refusing();
    let text = config(&[dead.addr], "").replace(
        "workers = 2\n",
        "workers = 2\nlog_level = \"warn\"\nlog_format = \"json\"\n",
    );
    let file = TempFile::new("ops-log-keys.toml", &text);
    let (mut fulcrum, addr) = start_quiet(&file, &[]);
    let _ = http_get(addr, "/");
    let changed = std::fs::read_to_string(&file.0)
        .unwrap()
        .replace("log_level = \"warn\"", "log_level = \"debug\"");
    std::fs::write(&file.0, changed).unwrap();
    fulcrum.hangup();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !fulcrum
        .next_line(deadline)
        .contains("log_level, log_format: take a restart")
    {}
    signal(&fulcrum.child, "TERM");
    let (lines, status) = until_exit(&mut fulcrum, Duration::from_secs(30));
    assert!(status.success());
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON object ({e}): {line}"));
        assert!(
            v["level"] != "INFO",
            "no INFO at log_level = \"warn\": {line}"
        );
    }

    // The flags win over the keys (debug, json in this file).
    let file = TempFile::new(
        "ops-log-keys.toml",
        &text.replace("log_level = \"warn\"", "log_level = \"debug\""),
    );
    let (mut fulcrum, addr) = start_quiet(&file, &["--log-level", "info", "--log-format", "text"]);
    let _ = http_get(addr, "/");
    signal(&fulcrum.child, "TERM");
    let (lines, status) = until_exit(&mut fulcrum, Duration::from_secs(30));
    assert!(status.success());
    assert!(
        lines
            .iter()
            .any(|l| l.contains(" INFO fulcrum: fulcrum started")),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .all(|l| !l.contains(" DEBUG ") && !l.starts_with('{')),
        "{lines:#?}"
    );
}
