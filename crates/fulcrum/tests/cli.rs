//! The `fulcrum` binary as a user runs it: real processes, real sockets, real signals.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lab::{Backend, Client};

mod common;
use common::{Running, TempFile, backend_block, fulcrum};

/// `fulcrum check --config FILE`, run to its end.
fn check(config: &TempFile) -> std::process::Output {
    fulcrum()
        .args(["check", "--config"])
        .arg(&config.0)
        .output()
        .unwrap()
}

#[test]
fn check_accepts_the_example_and_rejects_a_bad_config_with_line_and_key() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/fulcrum.toml");
    let out = fulcrum()
        .args(["check", "--config", example])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );

    let text = std::fs::read_to_string(example)
        .unwrap()
        .replace("algorithm = \"least_time\"", "algorithm = \"fastest\"");
    let bad = TempFile::new("bad.toml", &text);
    let out = check(&bad);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = text.lines().position(|l| l.contains("fastest")).unwrap() + 1;
    let expected = format!(
        "{}:{line}:13: upstream[0].algorithm: unknown algorithm \"fastest\"",
        bad.0.display()
    );
    assert!(
        stderr.contains(&expected),
        "expected {expected:?} in:\n{stderr}"
    );
    assert!(stderr.contains("known algorithms: round_robin"), "{stderr}");

    let missing = fulcrum()
        .args(["check", "--config", "/nonexistent/fulcrum.toml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("cannot read the configuration file")
    );
}

#[test]
fn check_reports_every_problem_at_once_in_the_docs_words() {
    let text = "\
workers = \"2\"

[[listener]]
listen = \"unix:/run/fulcrum.sock\"
upstream = \"web\"
max_connections = 4611686018427387904
trusted_proxies = [\"10.0.0.0/8\", \"10.0.0.300\"]

[[upstream]]
name = \"web\"
conect_timeout = \"1s\"
read_timeout = \"0s\"

  [[upstream.backend]]
  addr = \"127.0.0.1:9001\"
  weight = \"3\"
";
    let bad = TempFile::new("several.toml", text);
    let out = check(&bad);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let file = bad.0.display();
    for want in [
        format!("{file}:1:11: workers: expected an integer such as 2, not the string \"2\""),
        format!("{file}:4:10: listener[0].listen: Unix-socket listeners are not supported"),
        format!("{file}:6:19: listener[0].max_connections: must be between 1 and 1000000"),
        format!("{file}:7:34: listener[0].trusted_proxies[1]: "),
        format!(
            "{file}:11:1: upstream[0].conect_timeout: unknown key `conect_timeout`; did you mean `connect_timeout`?"
        ),
        format!("{file}:12:16: upstream[0].read_timeout: must be more than 0"),
        format!("{file}:16:12: upstream[0].backend[0].weight: expected an integer such as 3"),
        "16 |   weight = \"3\"\n   |            ^^^".to_owned(),
        format!("7 problems in {file}"),
    ] {
        assert!(stderr.contains(&want), "expected {want:?} in:\n{stderr}");
    }
    assert!(!stderr.contains("serde"), "{stderr}");
}

/// `fulcrum check FILE` checks FILE as `--config FILE` does (it was a usage error).
#[test]
fn check_takes_the_file_without_config_too() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/fulcrum.toml");
    let out = fulcrum().args(["check", example]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Both at once is a usage error that says so.
    let out = fulcrum()
        .args(["check", example, "--config", example])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}

#[test]
fn help_and_version() {
    let out = fulcrum().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("fulcrum "));
    for cmd in [
        &["--help"][..],
        &["run", "--help"],
        &["check", "--help"],
        &["demo", "--help"],
        &["lab", "backend", "--help"],
        &["lab", "--help"],
    ] {
        let out = fulcrum().args(cmd).output().unwrap();
        assert!(out.status.success(), "{cmd:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Usage: fulcrum"), "{cmd:?}");
        // Help says what is there, not what was once planned.
        assert!(!text.contains("(later)"), "{cmd:?}: {text}");
    }
}

/// The README counts the algorithms fulcrum has and names each, and the example
/// configuration lists each: both follow `balance::Algorithm::ALL`.
#[test]
fn the_readme_and_the_example_name_every_algorithm() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let example = std::fs::read_to_string(format!("{root}/examples/fulcrum.toml")).unwrap();
    let all = balance::Algorithm::ALL;
    let words = [
        "",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
        "twenty",
        "twenty-one",
        "twenty-two",
        "twenty-three",
    ];
    let count = words.get(all.len()).copied().unwrap_or("");
    assert!(
        readme.contains(&format!("{count} balancing algorithms"))
            && readme.contains(&format!("* {count} algorithms")),
        "the README counts {} algorithms as \"{count}\"",
        all.len()
    );
    for a in all {
        let name = a.name();
        assert!(
            readme.contains(&format!("`{name}`")),
            "the README names `{name}`"
        );
        assert!(example.contains(name), "examples/fulcrum.toml names {name}");
    }
}

#[test]
fn run_spreads_requests_exactly_and_stops_on_sigterm() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut backends = Vec::new();
        for name in ["a", "b", "c"] {
            backends.push(Backend::start(name, loopback).await.unwrap());
        }
        let even: Vec<_> = backends.iter().map(|b| (b.addr(), 1)).collect();
        let weighted: Vec<_> = backends
            .iter()
            .zip([5, 1, 1])
            .map(|(b, w)| (b.addr(), w))
            .collect();
        let config = TempFile::new(
            "run.toml",
            &format!(
                "workers = 2\naccess_log = false\n\n\
                 [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"rr\"\n\n\
                 [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"wrr\"\n\n\
                 [[upstream]]\nname = \"rr\"\nalgorithm = \"round_robin\"\n{}\n\
                 [[upstream]]\nname = \"wrr\"\nalgorithm = \"weighted_round_robin\"\n{}",
                backend_block(&even),
                backend_block(&weighted)
            ),
        );
        let mut fulcrum = Running::start(&config, 2);

        let mut counts = std::collections::HashMap::new();
        let mut client = Client::new(fulcrum.addr_of("rr"));
        for _ in 0..300 {
            let reply = client.get("/").await.unwrap();
            assert_eq!(reply.status, 200);
            *counts.entry(reply.text()).or_insert(0) += 1;
        }
        for name in ["a", "b", "c"] {
            assert_eq!(counts.get(name), Some(&100), "{counts:?}");
        }

        // Several connections, so requests are served by both worker threads: the smooth WRR
        // sequence is global, not per thread.
        let mut seq = String::new();
        let mut clients: Vec<Client> = (0..4)
            .map(|_| Client::new(fulcrum.addr_of("wrr")))
            .collect();
        for i in 0..7 {
            let reply = clients[i % 4].get("/").await.unwrap();
            seq.push_str(&reply.text());
        }
        assert_eq!(seq, "aabacaa");

        let status = fulcrum.terminate();
        assert!(status.success(), "{status:?}");
    });
}

#[test]
fn all_backends_down_gives_503_and_fulcrum_keeps_running() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // Ports that refuse connections: bound, then closed.
        let dead: Vec<(SocketAddr, u32)> = (0..3)
            .map(|_| {
                let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                (l.local_addr().unwrap(), 1)
            })
            .collect();
        let config = TempFile::new(
            "down.toml",
            &format!(
                "[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
                 [[upstream]]\nname = \"web\"\nconnect_timeout = \"2s\"\n{}",
                backend_block(&dead)
            ),
        );
        let mut fulcrum = Running::start(&config, 1);
        for _ in 0..3 {
            let started = Instant::now();
            let reply = Client::new(fulcrum.addr_of("web")).get("/").await.unwrap();
            assert_eq!(reply.status, 503);
            assert!(reply.text().contains("no backend available"));
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "{:?}",
                started.elapsed()
            );
        }
        assert!(
            fulcrum.child.try_wait().unwrap().is_none(),
            "fulcrum must keep running"
        );
        assert!(fulcrum.terminate().success());
    });
}

#[test]
fn listen_address_in_use_is_a_clear_startup_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let config = TempFile::new(
        "inuse.toml",
        &format!(
            "[[listener]]\nlisten = \"{addr}\"\nupstream = \"web\"\n\n\
             [[upstream]]\nname = \"web\"\n  [[upstream.backend]]\n  addr = \"127.0.0.1:9\"\n"
        ),
    );
    let out = fulcrum()
        .args(["run", "--config"])
        .arg(&config.0)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
    assert!(
        stderr.contains("another process is using this address"),
        "{stderr}"
    );
}

/// A backend that takes connections and requests and never answers; holds them open.
fn silent_backend() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().map_while(Result::ok) {
            held.push(stream);
        }
    });
    addr
}

/// Sends raw bytes on a new connection and reads until the proxy closes it.
fn raw(addr: SocketAddr, request: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn every_answer_is_in_the_access_log_with_the_backends_tried_and_the_clients_fate() {
    let silent = silent_backend();
    // Held for the whole test: refusing, and nobody else's.
    let held = common::HeldPort::refusing();
    let refusing = held.addr;
    let config = TempFile::new(
        "access.toml",
        &format!(
            "workers = 1\n\n\
             [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
             [[upstream]]\nname = \"web\"\nread_timeout = \"300ms\"\n{}",
            backend_block(&[(refusing, 1), (silent, 1)])
        ),
    );
    let fulcrum = Running::start(&config, 1);
    let addr = fulcrum.addr_of("web");
    // Refused before any backend: 400 (no Host) and 505 (an unknown version).
    assert!(raw(addr, b"GET /no-host HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 400"));
    assert!(raw(addr, b"GET /v2 HTTP/2.5\r\nHost: t\r\n\r\n").starts_with("HTTP/1.1 505"));
    // The refusing backend, then the silent one: 504 naming both.
    let answer = raw(addr, b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");
    // A client that leaves while the backend works: 499.
    {
        use std::io::Write;
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /gone HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
    }

    // nginx's combined format on stderr (the default), fulcrum's fields after it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut entries: Vec<String> = Vec::new();
    while entries.len() < 4 {
        let line = fulcrum.next_line(deadline);
        if line.starts_with("127.0.0.1 - - [") {
            entries.push(line);
        }
    }
    let entry = |path: &str| {
        entries
            .iter()
            .find(|l| l.contains(&format!("\"GET {path}")))
            .unwrap_or_else(|| panic!("no access log entry for {path}: {entries:#?}"))
    };
    assert!(
        entry("/no-host").contains("\"GET /no-host\" 400 "),
        "{entries:#?}"
    );
    assert!(entry("/v2").contains("\"GET /v2\" 505 "), "{entries:#?}");
    let slow = entry("/slow");
    assert!(
        slow.contains("\" 504 ") && slow.ends_with("upstream=web fate=no_answer"),
        "{slow}"
    );
    assert!(
        slow.contains(&format!(" ua=\"{refusing},{silent}\" ")),
        "both backends tried, in order: {slow}"
    );
    let gone = entry("/gone");
    assert!(
        gone.contains("\" 499 0 ") && gone.ends_with("fate=client_gone"),
        "{gone}"
    );
    assert!(gone.contains(&format!(" ua=\"{silent}\" ")), "{gone}");
}

/// Runs `fulcrum run` under a hard open-files limit of `limit` (as `ulimit -n` sets it).
fn run_with_open_files_limit(config: &TempFile, limit: u32) -> Child {
    Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ulimit -n {limit} && exec \"$0\" run --config \"$1\""
        ))
        .arg(env!("CARGO_BIN_EXE_fulcrum"))
        .arg(&config.0)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn max_connections_fit_the_open_files_limit() {
    // Explicit values that may need more descriptors than the limit: refused, with the numbers.
    let config = TempFile::new(
        "fds.toml",
        "[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\nmax_connections = 1000\n\n\
         [[upstream]]\nname = \"web\"\n  [[upstream.backend]]\n  addr = \"127.0.0.1:9\"\n",
    );
    let out = run_with_open_files_limit(&config, 512)
        .wait_with_output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("may need") && stderr.contains("limit is 512"),
        "{stderr}"
    );

    // Without max_connections, the listener takes what the limit allows, and starts.
    let config = TempFile::new(
        "fds-auto.toml",
        "workers = 1\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
         [[upstream]]\nname = \"web\"\nkeepalive = 10\n  [[upstream.backend]]\n  addr = \"127.0.0.1:9\"\n",
    );
    let mut child = run_with_open_files_limit(&config, 512);
    let stderr = child.stderr.take().unwrap();
    let line = BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("file descriptors"))
        .expect("the limits are logged");
    let _ = child.kill();
    let _ = child.wait();
    // (512 - 64 reserve - 4 for the worker - 1 listening socket - 10 idle) / 2
    assert!(line.contains("open_files_limit=512"), "{line}");
    // Each limit beside its listener's address, and the descriptors it counted, named.
    assert!(line.contains("max_connections=127.0.0.1:0=216"), "{line}");
    assert!(line.contains("descriptors_needed="), "{line}");
}

/// A stand-in for `fulcrum agent` that always reports the same load (a fixture the issue
/// allows): every `GET` is answered with `{"cpu":u,...}` for every utilization `u`. Dropping
/// the handle stops it (its port then refuses connections).
fn fixed_agent(rt: &tokio::runtime::Runtime, u: f64) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    scripted_agent(
        rt,
        format!(
            "{{\"cpu\":{u},\"mem\":{u},\"disk\":{u},\"net\":{u},\"container_mem\":{u},\"ts_ms\":0}}"
        ),
    )
}

/// An agent stand-in answering every `GET` with `body` (200, JSON or not).
fn scripted_agent(
    rt: &tokio::runtime::Runtime,
    body: String,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let task = rt.spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                continue;
            };
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(answer.as_bytes()).await;
            });
        }
    });
    (addr, task)
}

/// Three lab backends `a`, `b`, `c`, each with a stand-in agent reporting the utilization
/// given for it, and fulcrum balancing them by `algorithm`; `upstream_keys` are more lines of
/// the `[[upstream]]` section.
struct Reported {
    rt: tokio::runtime::Runtime,
    _backends: Vec<Backend>,
    agents: Vec<(SocketAddr, tokio::task::JoinHandle<()>)>,
    fulcrum: Running,
    _config: TempFile,
}

fn reported(algorithm: &str, utilizations: [f64; 3], upstream_keys: &str) -> Reported {
    reported_with_weights(algorithm, utilizations, [1, 1, 1], upstream_keys)
}

/// [`reported`], with configured weights.
fn reported_with_weights(
    algorithm: &str,
    utilizations: [f64; 3],
    weights: [u32; 3],
    upstream_keys: &str,
) -> Reported {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let backends: Vec<Backend> = ["a", "b", "c"]
        .iter()
        .map(|n| rt.block_on(Backend::start(n, loopback)).unwrap())
        .collect();
    let agents: Vec<_> = utilizations.iter().map(|&u| fixed_agent(&rt, u)).collect();
    let mut text = format!(
        "workers = 1\naccess_log = false\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
         [[upstream]]\nname = \"web\"\nalgorithm = \"{algorithm}\"\n{upstream_keys}\n"
    );
    for ((b, (agent, _)), weight) in backends.iter().zip(&agents).zip(weights) {
        text += &format!(
            "  [[upstream.backend]]\n  addr = \"{}\"\n  weight = {weight}\n  agent = \"{agent}\"\n",
            b.addr()
        );
    }
    text += "\n[admin]\nlisten = \"127.0.0.1:0\"\n";
    let config = TempFile::new(&format!("{algorithm}.toml"), &text);
    let fulcrum = Running::start(&config, 1);
    Reported {
        rt,
        _backends: backends,
        agents,
        fulcrum,
        _config: config,
    }
}

/// The weights of a `weights applied` log line.
fn applied_weights(line: &str) -> Vec<u32> {
    line.split("new=[")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .unwrap_or_else(|| panic!("no weights in {line}"))
        .split(", ")
        .map(|w| w.parse().unwrap())
        .collect()
}

#[test]
fn dwlc_follows_agent_reports_and_a_stale_agent_gets_the_average() {
    // Uniform utilizations 0.6, 0.2, 0.9: seed 003's L = 60, 20, 90, so W = 40, 80, 10.
    let pool = reported(
        "dwlc",
        [0.6, 0.2, 0.9],
        "poll_interval = \"500ms\"\npoll_timeout = \"200ms\"\nstale_after = 2",
    );
    let (rt, agents, fulcrum) = (&pool.rt, &pool.agents, &pool.fulcrum);
    let deadline = Instant::now() + Duration::from_secs(15);
    let wait_for_weights = |want: &str| loop {
        let line = fulcrum.next_line(deadline);
        if line.contains("weights applied") && line.contains(&format!("new={want}")) {
            return line;
        }
    };
    let applied = wait_for_weights("[40, 80, 10]");
    assert!(applied.contains("cpu=0.20"), "{applied}");

    let addr = fulcrum.addr_of("web");
    let counts = rt.block_on(async {
        let mut client = Client::new(addr);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..260 {
            let reply = client.get("/").await.unwrap();
            assert_eq!(reply.status, 200);
            *counts.entry(reply.text()).or_insert(0) += 1;
        }
        counts
    });
    for (name, want) in [("a", 80), ("b", 160), ("c", 20)] {
        let got = counts.get(name).copied().unwrap_or(0);
        assert!(
            (want - 5..=want + 5).contains(&got),
            "{name}: {got} of 260, want about {want}: {counts:?}"
        );
    }

    // The 0.2 agent dies. Its backend keeps serving; after stale_after polls it is weighted as
    // the average of the fresh reports (0.75: L = 75, W = 25), neither idle (100) nor full.
    let (_, b_agent) = &agents[1];
    b_agent.abort();
    let client_task = rt.spawn(async move {
        let mut client = Client::new(addr);
        let mut failed = 0;
        let mut sent = 0;
        let until = tokio::time::Instant::now() + Duration::from_secs(3);
        while tokio::time::Instant::now() < until {
            sent += 1;
            match client.get("/").await {
                Ok(r) if r.status == 200 => {}
                _ => failed += 1,
            }
        }
        (sent, failed)
    });
    let applied = wait_for_weights("[40, 25, 10]");
    assert!(applied.contains("cpu=0.75"), "{applied}");
    // The API and the metrics say the report is stale, not only its age.
    let admin = fulcrum.admin.unwrap();
    let b_addr = pool._backends[1].addr();
    let shown = rt
        .block_on(common::admin_get(admin, "/api/upstreams"))
        .text();
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    let report = shown["upstreams"][0]["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["addr"] == b_addr.to_string())
        .map(|b| b["load_report"].clone())
        .unwrap();
    assert_eq!(report["stale"], true, "{report}");
    assert!(report["failed_polls"].as_u64().unwrap() >= 2, "{report}");
    let metrics = rt.block_on(common::admin_get(admin, "/metrics")).text();
    let stale =
        format!("fulcrum_backend_load_report_stale{{upstream=\"web\",backend=\"{b_addr}\"}} 1");
    assert!(metrics.contains(&stale), "{stale} in\n{metrics}");
    let fresh = format!(
        "fulcrum_backend_load_report_stale{{upstream=\"web\",backend=\"{}\"}} 0",
        pool._backends[0].addr()
    );
    assert!(metrics.contains(&fresh), "{fresh} in\n{metrics}");
    assert!(
        metrics.contains("fulcrum_backend_load_poll_failures_total{"),
        "{metrics}"
    );
    common::assert_promtool_accepts(&metrics);
    let (sent, failed) = rt.block_on(client_task).unwrap();
    assert_eq!(
        failed, 0,
        "{failed} of {sent} requests failed while the agent was gone"
    );
}

/// A keep-alive backend answering its `name` to every request, except `GET /health`, which is
/// 200 while `healthy` holds and 503 otherwise.
fn checked_backend(
    rt: &tokio::runtime::Runtime,
    name: &'static str,
    healthy: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> SocketAddr {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                continue;
            };
            let healthy = std::sync::Arc::clone(&healthy);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                loop {
                    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&got[..end]).into_owned();
                    got.drain(..end + 4);
                    let answer = if head.starts_with("GET /health ") {
                        if healthy.load(Ordering::SeqCst) {
                            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_owned()
                        } else {
                            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\ndown"
                                .to_owned()
                        }
                    } else {
                        format!("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n{name}")
                    };
                    if s.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn a_backend_failing_its_health_checks_is_taken_out_and_brought_back() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let b_healthy = Arc::new(AtomicBool::new(true));
    let addrs = [
        checked_backend(&rt, "a", Arc::new(AtomicBool::new(true))),
        checked_backend(&rt, "b", Arc::clone(&b_healthy)),
        checked_backend(&rt, "c", Arc::new(AtomicBool::new(true))),
    ];
    let config = TempFile::new(
        "health.toml",
        &format!(
            "workers = 1\naccess_log = false\n\n\
             [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
             [[upstream]]\nname = \"web\"\n\
             [upstream.health_check]\npath = \"/health\"\ninterval = \"200ms\"\ntimeout = \"100ms\"\nrise = 2\nfall = 3\n\n{}",
            backend_block(&addrs.map(|a| (a, 1)))
        ),
    );
    let fulcrum = Running::start(&config, 1);
    let addr = fulcrum.addr_of("web");
    // Steady traffic all along, counting failures and answers from b.
    let failed = Arc::new(AtomicUsize::new(0));
    let from_b = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = {
        let (failed, from_b, stop) = (Arc::clone(&failed), Arc::clone(&from_b), Arc::clone(&stop));
        let done = Arc::clone(&done);
        rt.spawn(async move {
            let mut client = Client::new(addr);
            let mut sent = 0;
            while !stop.load(Ordering::SeqCst) {
                sent += 1;
                let reply = client.get("/").await;
                done.fetch_add(1, Ordering::SeqCst);
                match reply {
                    Ok(r) if r.status == 200 => {
                        if r.text() == "b" {
                            from_b.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            sent
        })
    };
    let wait_for = |what: &str, within: Duration| {
        let deadline = Instant::now() + within;
        loop {
            let line = fulcrum.next_line(deadline);
            if line.contains(what) {
                return line;
            }
        }
    };
    // fall × interval + timeout = 700 ms, and room for a loaded machine.
    let bound = Duration::from_millis(700);
    b_healthy.store(false, Ordering::SeqCst);
    let failing = Instant::now();
    let out = wait_for("failed its health checks", Duration::from_secs(10));
    let took = failing.elapsed();
    assert!(out.contains(&addrs[1].to_string()), "{out}");
    assert!(
        took < bound + Duration::from_millis(800),
        "out after {took:?}"
    );
    // Out: nothing reaches b while its checks fail (once the request that may have been in
    // flight to it when it went out has completed).
    let settled = done.load(Ordering::SeqCst) + 2;
    let deadline = Instant::now() + Duration::from_secs(5);
    while done.load(Ordering::SeqCst) < settled {
        assert!(Instant::now() < deadline, "traffic stopped");
        // Poll interval of a loop bounded by `deadline`.
        std::thread::sleep(Duration::from_millis(5));
    }
    let seen = from_b.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(600)); // traffic meanwhile: the thing measured
    assert_eq!(
        from_b.load(Ordering::SeqCst),
        seen,
        "b got requests while out"
    );

    b_healthy.store(true, Ordering::SeqCst);
    let passing = Instant::now();
    let back = wait_for("passed its health checks", Duration::from_secs(10));
    let took_back = passing.elapsed();
    assert!(back.contains(&addrs[1].to_string()), "{back}");
    // rise × interval + timeout = 500 ms.
    assert!(
        took_back < Duration::from_millis(500 + 800),
        "back after {took_back:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while from_b.load(Ordering::SeqCst) == seen {
        assert!(Instant::now() < deadline, "b gets no requests once back");
        // Poll interval of a loop bounded by `deadline`.
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::SeqCst);
    let sent = rt.block_on(traffic).unwrap();
    println!("health: out after {took:?}, back after {took_back:?}; {sent} requests, none failed");
    assert_eq!(failed.load(Ordering::SeqCst), 0, "of {sent}");
}

/// A child process killed (by its PID) when dropped.
struct Child2(std::process::Child);

impl Drop for Child2 {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until something accepts connections on `addr`.
fn wait_for_port(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {addr}");
        // Poll interval of a loop bounded by `deadline`.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Memory in use as `/proc/meminfo` says: `1 − MemAvailable / MemTotal`.
fn meminfo_used() -> f64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let field = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    1.0 - field("MemAvailable:") / field("MemTotal:")
}

#[test]
fn a_real_node_exporter_feeds_the_weights() {
    let exporter_bin = "/usr/bin/prometheus-node-exporter";
    if !std::path::Path::new(exporter_bin).exists() {
        println!(
            "SKIPPED: {exporter_bin} is not installed (apt-get install prometheus-node-exporter; .ci/run installs it)"
        );
        return;
    }
    let held = common::HeldPort::for_server();
    let exporter_addr = held.addr;
    let _exporter = Child2(
        Command::new(exporter_bin)
            .arg(format!("--web.listen-address={exporter_addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(exporter_addr);
    drop(held);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let backends: Vec<Backend> = ["a", "b"]
        .iter()
        .map(|n| rt.block_on(Backend::start(n, loopback)).unwrap())
        .collect();
    let mut text = String::from(
        "workers = 1\naccess_log = false\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
         [[upstream]]\nname = \"web\"\nalgorithm = \"dwlc\"\npoll_interval = \"300ms\"\n",
    );
    for b in &backends {
        text += &format!(
            "  [[upstream.backend]]\n  addr = \"{}\"\n  node_exporter = \"{exporter_addr}\"\n",
            b.addr()
        );
    }
    let config = TempFile::new("node-exporter.toml", &text);
    let fulcrum = Running::start(&config, 1);
    let deadline = Instant::now() + Duration::from_secs(15);
    let applied = loop {
        let line = fulcrum.next_line(deadline);
        if line.contains("weights applied") {
            break line;
        }
    };
    // Both backends read the same machine.
    let mem: f64 = applied
        .split("mem=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no mem figure in {applied}"));
    let want = meminfo_used();
    assert!(
        (mem - want).abs() < 0.05,
        "mem {mem} from node_exporter, {want} from /proc/meminfo: {applied}"
    );
    // Scraped a moment apart, the two CPU figures may differ by a point or so.
    let weights = applied_weights(&applied);
    assert_eq!(weights.len(), 2, "{applied}");
    assert!(weights[0].abs_diff(weights[1]) <= 5, "{applied}");
    let reply = rt
        .block_on(Client::new(fulcrum.addr_of("web")).get("/"))
        .unwrap();
    assert_eq!(reply.status, 200);
}

#[test]
fn bad_load_reports_never_crash_fulcrum_or_leave_the_models_range() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    // An agent that takes the connection and says nothing.
    let silent = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let _hold = rt.spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let agents = [
        scripted_agent(
            &rt,
            "{\"cpu\":0.5,\"mem\":0.5,\"disk\":0.5,\"net\":0.5,\"container_mem\":0.5}".into(),
        )
        .0,
        scripted_agent(&rt, "garbage, not JSON".into()).0,
        scripted_agent(
            &rt,
            "{\"cpu\":NaN,\"mem\":0,\"disk\":0,\"net\":0,\"container_mem\":0}".into(),
        )
        .0,
        scripted_agent(
            &rt,
            "{\"cpu\":-5,\"mem\":7,\"disk\":1e300,\"net\":-0.1,\"container_mem\":2}".into(),
        )
        .0,
        scripted_agent(&rt, format!("{{\"cpu\":\"{}\"}}", "x".repeat(1 << 20))).0,
        silent_addr,
    ];
    let backends: Vec<Backend> = (0..agents.len())
        .map(|i| {
            rt.block_on(Backend::start(&format!("b{i}"), loopback))
                .unwrap()
        })
        .collect();
    let mut text = String::from(
        "workers = 1\naccess_log = false\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
         [[upstream]]\nname = \"web\"\nalgorithm = \"dwlc\"\n\
         poll_interval = \"300ms\"\nstale_after = 3\n",
    );
    for (b, agent) in backends.iter().zip(&agents) {
        text += &format!(
            "  [[upstream.backend]]\n  addr = \"{}\"\n  agent = \"{agent}\"\n",
            b.addr()
        );
    }
    let config = TempFile::new("bad-reports.toml", &text);
    let mut fulcrum = Running::start(&config, 1);
    let addr = fulcrum.addr_of("web");
    // Two seconds: ten polls of every source, with traffic.
    let until = Instant::now() + Duration::from_secs(2);
    let failed = rt.block_on(async {
        let mut client = Client::new(addr);
        let mut failed = 0;
        while Instant::now() < until {
            if !matches!(client.get("/").await, Ok(r) if r.status == 200) {
                failed += 1;
            }
        }
        failed
    });
    assert_eq!(failed, 0);
    let mut lines = Vec::new();
    while let Ok(line) = fulcrum.lines.try_recv() {
        lines.push(line);
    }
    assert!(
        fulcrum.child.try_wait().unwrap().is_none(),
        "fulcrum is still running"
    );
    // Each broken source is logged once (it turns stale once and never comes back), the
    // clamped one never.
    for (i, agent) in agents.iter().enumerate() {
        let backend = backends[i].addr().to_string();
        let stale = lines
            .iter()
            .filter(|l| l.contains("load reports are stale") && l.contains(&backend))
            .count();
        let want = if i == 0 || i == 3 { 0 } else { 1 };
        assert_eq!(stale, want, "backend {i} (agent {agent}): {lines:#?}");
    }
    // Every weight applied is within dwlc's range, 1 to 100.
    let applied: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("weights applied"))
        .collect();
    assert!(!applied.is_empty(), "{lines:#?}");
    for line in applied {
        let new = line
            .split("new=[")
            .nth(1)
            .unwrap()
            .split(']')
            .next()
            .unwrap();
        for w in new.split(", ") {
            let w: u32 = w.parse().unwrap();
            assert!((1..=100).contains(&w), "{line}");
        }
    }
}

/// A stand-in for an HAProxy agent: every connection gets the current `reply` and is closed.
fn haproxy_agent(
    rt: &tokio::runtime::Runtime,
    reply: std::sync::Arc<std::sync::Mutex<String>>,
) -> SocketAddr {
    use tokio::io::AsyncWriteExt;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let line = reply.lock().unwrap().clone();
            let _ = s.write_all(line.as_bytes()).await;
        }
    });
    addr
}

#[test]
fn haproxy_agent_checks_scale_drain_and_take_out() {
    use std::sync::{Arc, Mutex};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let backends: Vec<Backend> = ["a", "b", "c"]
        .iter()
        .map(|n| rt.block_on(Backend::start(n, loopback)).unwrap())
        .collect();
    let replies: Vec<Arc<Mutex<String>>> = ["50%\n", "drain\n", "up 100%\n"]
        .iter()
        .map(|r| Arc::new(Mutex::new((*r).to_owned())))
        .collect();
    let mut text = String::from(
        "workers = 1\naccess_log = false\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
         [[upstream]]\nname = \"web\"\nalgorithm = \"weighted_round_robin\"\npoll_interval = \"200ms\"\n",
    );
    for (b, reply) in backends.iter().zip(&replies) {
        let agent = haproxy_agent(&rt, Arc::clone(reply));
        text += &format!(
            "  [[upstream.backend]]\n  addr = \"{}\"\n  weight = 4\n  agent_check = \"{agent}\"\n",
            b.addr()
        );
    }
    let config = TempFile::new("agent-check.toml", &text);
    let fulcrum = Running::start(&config, 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    let wait_for = |what: &str| loop {
        let line = fulcrum.next_line(deadline);
        if line.contains(what) {
            return line;
        }
    };
    // 50% of 4, drained, 100% of 4.
    wait_for("new=[2, 0, 4]");
    let addr = fulcrum.addr_of("web");
    let count = |n: usize| {
        rt.block_on(async {
            let mut client = Client::new(addr);
            let mut counts = std::collections::HashMap::new();
            for _ in 0..n {
                let reply = client.get("/").await.unwrap();
                assert_eq!(reply.status, 200);
                *counts.entry(reply.text()).or_insert(0) += 1;
            }
            counts
        })
    };
    let counts = count(60);
    assert_eq!(
        (counts.get("a"), counts.get("b"), counts.get("c")),
        (Some(&20), None, Some(&40)),
        "{counts:?}"
    );
    // The agent of a says down: a is taken out.
    *replies[0].lock().unwrap() = "down\n".to_owned();
    wait_for("agent check changed the backend's state");
    let counts = count(20);
    assert_eq!(counts.get("c"), Some(&20), "{counts:?}");
}

/// Three backends whose agents report uniform utilizations 0.6, 0.2 and 0.9, balanced by
/// `algorithm`: the weights its model applies, and how 260 sequential requests split.
fn split_under_reports(algorithm: &str) -> (Vec<u32>, [usize; 3]) {
    let pool = reported(algorithm, [0.6, 0.2, 0.9], "poll_interval = \"300ms\"");
    let (rt, fulcrum) = (&pool.rt, &pool.fulcrum);
    let deadline = Instant::now() + Duration::from_secs(15);
    // A round with all three reports (a slow poll would leave one out, and the next round
    // change the weights while requests are counted).
    let applied = loop {
        let line = fulcrum.next_line(deadline);
        if line.contains("weights applied")
            && ["cpu=0.60", "cpu=0.20", "cpu=0.90"]
                .iter()
                .all(|c| line.contains(c))
        {
            break line;
        }
    };
    let weights = applied_weights(&applied);
    let addr = fulcrum.addr_of("web");
    let counts = rt.block_on(async {
        let mut client = Client::new(addr);
        let mut counts = [0; 3];
        for _ in 0..260 {
            let reply = client.get("/").await.unwrap();
            assert_eq!(reply.status, 200);
            counts[(reply.text().as_bytes()[0] - b'a') as usize] += 1;
        }
        counts
    });
    (weights, counts)
}

#[test]
fn dynamic_wrr_and_capacity_weighted_follow_agent_reports_in_their_formulas_order() {
    for algorithm in ["dynamic_wrr", "capacity_weighted"] {
        let (weights, counts) = split_under_reports(algorithm);
        // The least loaded (0.2) weighs most, the most loaded (0.9) least.
        assert!(
            weights[1] > weights[0] && weights[0] > weights[2],
            "{algorithm}: {weights:?}"
        );
        // Smooth WRR over sequential requests: each backend's share of 260 is its weight's,
        // to within one request per backend and round of the weights.
        let total: u32 = weights.iter().sum();
        for i in 0..3 {
            let want = 260.0 * f64::from(weights[i]) / f64::from(total);
            assert!(
                (counts[i] as f64 - want).abs() <= 3.0,
                "{algorithm}: weights {weights:?}, counts {counts:?}"
            );
        }
        println!("{algorithm}: weights {weights:?}, 260 requests split {counts:?}");
    }
}

/// The first weights `utilization_wrr` applies over backends reporting `utilizations`, with
/// `weights` configured, under steady sequential traffic.
fn utilization_weights(utilizations: [f64; 3], weights: [u32; 3]) -> Vec<u32> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let pool = reported_with_weights(
        "utilization_wrr",
        utilizations,
        weights,
        "poll_interval = \"500ms\"\nblackout_period = \"0s\"",
    );
    let (rt, fulcrum) = (&pool.rt, &pool.fulcrum);
    let addr = fulcrum.addr_of("web");
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = {
        let stop = Arc::clone(&stop);
        rt.spawn(async move {
            let mut client = Client::new(addr);
            while !stop.load(Ordering::SeqCst) {
                assert_eq!(client.get("/").await.unwrap().status, 200);
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    let applied = loop {
        let line = fulcrum.next_line(deadline);
        if line.contains("weights applied") {
            break line;
        }
    };
    stop.store(true, Ordering::SeqCst);
    rt.block_on(traffic).unwrap();
    applied_weights(&applied)
}

#[test]
fn utilization_wrr_weighs_by_requests_served_per_unit_of_cpu() {
    // The same requests per second (equal configured weights) at CPU 0.25, 0.5 and 1.0:
    // A58 weighs them 4 : 2 : 1.
    let w = utilization_weights([0.25, 0.5, 1.0], [1, 1, 1]);
    assert!(w[0] > w[1] && w[1] > w[2], "{w:?}");
    let ratio = f64::from(w[0]) / f64::from(w[2]);
    assert!(
        (3.0..=5.0).contains(&ratio),
        "a/c = {ratio}, about 4 wanted: {w:?}"
    );
    // The same CPU, but a served three times the requests (configured 3, 1, 1): qps counts,
    // 3 : 1 : 1 (a model of 1/CPU alone would weigh them equally).
    let w = utilization_weights([0.5, 0.5, 0.5], [3, 1, 1]);
    let ratio = f64::from(w[0]) / f64::from(w[2]);
    assert!(
        (2.4..=3.6).contains(&ratio),
        "a/c = {ratio}, about 3 wanted: {w:?}"
    );
    assert!(w[1].abs_diff(w[2]) * 10 <= w[2], "b and c alike: {w:?}");
}

#[test]
fn lab_load_closed_loop_keeps_its_users_busy_and_writes_every_request_to_the_trace() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Four slots and no queue: a fifth request at once would be refused with 503.
    let capacity = lab::backend::Capacity {
        workers: 4,
        speed: 1.0,
        max_queue: 0,
        ..Default::default()
    };
    let backend = rt
        .block_on(Backend::start_with(
            "b",
            "127.0.0.1:0".parse().unwrap(),
            Some(capacity),
        ))
        .unwrap();
    let trace = TempFile::new("closed-trace.csv", "");
    let out = fulcrum()
        .args(["lab", "load", &format!("http://{}/", backend.addr())])
        .args([
            "--concurrency",
            "4",
            "--duration",
            "1s",
            "--cost",
            "const:50",
        ])
        .arg("--trace")
        .arg(&trace.0)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sent = json["sent"].as_u64().unwrap();
    // Four users, one request each 50 ms and a bit: at most 80 in a second.
    assert!((64..=80).contains(&sent), "{json}");
    assert_eq!(json["ok"], json["sent"], "{json}");
    assert_eq!(json["behind_max_ms"], 0.0, "{json}");
    assert!(json["p50_ms"].as_f64().unwrap() >= 50.0, "{json}");
    assert_eq!(backend.requests(), sent);
    let text = std::fs::read_to_string(&trace.0).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("intended_ms,start_ms,end_ms,status,backend,cost_ms,client,outcome")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len() as u64, sent);
    let clients: std::collections::BTreeSet<&str> = rows.iter().map(|r| r[6]).collect();
    assert_eq!(
        clients.into_iter().collect::<Vec<_>>(),
        ["127.1.0.1", "127.1.1.1", "127.1.2.1", "127.1.3.1"]
    );
    for r in &rows {
        assert_eq!(r[3..6], ["200", "b", "50.000"], "{r:?}");
        assert_eq!((r[0], r[7]), (r[1], "ok"), "{r:?}");
    }
    // A path that cannot be created is refused before the run, with what to do.
    let bad = fulcrum()
        .args(["lab", "load", &format!("http://{}/", backend.addr())])
        .args(["--concurrency", "1", "--duration", "1s"])
        .args(["--trace", "/nonexistent-dir/trace.csv"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains(
            "--trace /nonexistent-dir/trace.csv: cannot create the file; give a path in a directory you can write to"
        ),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert_eq!(backend.requests(), sent);
}

#[test]
fn lab_load_sends_on_schedule_and_prints_one_json_object() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let backend = rt
        .block_on(Backend::start("b", "127.0.0.1:0".parse().unwrap()))
        .unwrap();
    let out = fulcrum()
        .args(["lab", "load", &format!("http://{}/", backend.addr())])
        .args([
            "--pattern",
            "constant:200",
            "--duration",
            "1s",
            "--spacing",
            "even",
        ])
        .args(["--clients", "4", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 200 per second for 1 s, to within the rounding of the last gap.
    let sent = json["sent"].as_u64().unwrap();
    assert!((199..=201).contains(&sent), "{json}");
    assert_eq!(json["ok"], json["sent"], "{json}");
    assert_eq!(backend.requests(), sent);
    let bad = fulcrum()
        .args(["lab", "load", "127.0.0.1:1", "--pattern", "constant:1"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("write a URL such as http://127.0.0.1:8080/")
    );
}

#[test]
fn lab_backend_refuses_bad_flags_and_dies_after_n_requests_by_itself() {
    for (args, says) in [
        (
            &["--workers", "1", "--antagonist", "0.3:60s:20s"][..],
            "FOR must be above 0 and shorter than EVERY",
        ),
        (&["--workers", "1", "--fail-rate", "1.5"], "from 0 to 1"),
        (
            &["--workers", "1", "--mode", "disk"],
            "cpu, io, mixed or burn",
        ),
        (
            &["--workers", "1", "--cost", "uniform:9:1"],
            "want 0 <= A <= B",
        ),
        (&["--die-after", "3"], "--workers"),
    ] {
        let out = fulcrum()
            .args(["lab", "backend", "--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }

    let held = common::HeldPort::for_server();
    let addr = held.addr;
    let mut backend = Child2(
        fulcrum()
            .args([
                "lab",
                "backend",
                "--listen",
                &addr.to_string(),
                "--name",
                "d",
            ])
            .args(["--workers", "1", "--die-after", "2"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for_port(addr);
    drop(held);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for _ in 0..2 {
            let reply = Client::new(addr).get("/").await.unwrap();
            assert_eq!(reply.text(), "d");
        }
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = backend.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "still running after 2 requests");
        // Poll interval of a loop bounded by `deadline`.
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut log = String::new();
    std::io::Read::read_to_string(&mut backend.0.stderr.take().unwrap(), &mut log).unwrap();
    assert!(status.success(), "{status}: {log}");
    assert!(log.contains("died after --die-after requests"), "{log}");
    assert!(std::net::TcpStream::connect(addr).is_err());
}

#[test]
fn the_access_log_goes_to_a_file_as_json_and_sigusr1_reopens_it() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let a = Backend::start("a", "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let dir = common::TempDir::new("cli", "access-log");
        let log = std::path::Path::new(dir.path()).join("access.log");
        let config = TempFile::new(
            "access-file.toml",
            &format!(
                "workers = 1\naccess_log = \"{}\"\naccess_log_format = \"json\"\n\n\
                 [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
                 [[upstream]]\nname = \"web\"\n{}",
                log.display(),
                backend_block(&[(a.addr(), 1)])
            ),
        );
        let mut fulcrum = Running::start(&config, 1);
        let mut client = Client::new(fulcrum.addr_of("web"));
        let lines_in = |path: &std::path::Path, n: usize| {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let text = std::fs::read_to_string(path).unwrap_or_default();
                let lines: Vec<serde_json::Value> = text
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                    .collect();
                if lines.len() >= n {
                    return lines;
                }
                assert!(Instant::now() < deadline, "{n} lines in {path:?}: {text}");
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        for _ in 0..3 {
            assert_eq!(client.get("/one").await.unwrap().status, 200);
        }
        let lines = lines_in(&log, 3);
        assert_eq!(lines[0]["target"], "/one");
        assert_eq!(lines[0]["status"], 200);
        assert_eq!(lines[0]["body_bytes"], 1, "the body \"a\"");
        assert_eq!(lines[0]["backends"][0], a.addr().to_string());
        assert_eq!(lines[0]["fate"], "answered");
        // logrotate moves the file and sends SIGUSR1: the next lines go to a new file.
        let rotated = std::path::Path::new(dir.path()).join("access.log.1");
        std::fs::rename(&log, &rotated).unwrap();
        let status = Command::new("kill")
            .args(["-USR1", &fulcrum.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        while !fulcrum
            .next_line(deadline)
            .contains("the access log reopened")
        {}
        assert_eq!(client.get("/two").await.unwrap().status, 200);
        let lines = lines_in(&log, 1);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["target"], "/two");
        assert_eq!(
            lines_in(&rotated, 3).len(),
            3,
            "the rotated file keeps its lines"
        );
        assert!(fulcrum.terminate().success());
    });
}

/// The first SIGTERM drains (a request in flight may finish, up to `shutdown_timeout`); a
/// second one stops at once, as Ctrl-C pressed twice should.
#[test]
fn a_second_sigterm_during_the_drain_stops_at_once() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let backend = rt
        .block_on(Backend::start("slow", "127.0.0.1:0".parse().unwrap()))
        .unwrap();
    let config = TempFile::new(
        "twice.toml",
        &format!(
            "workers = 1\naccess_log = false\nshutdown_timeout = \"60s\"\n\n\
             [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
             [[upstream]]\nname = \"web\"\n{}",
            backend_block(&[(backend.addr(), 1)])
        ),
    );
    let mut fulcrum = Running::start(&config, 1);
    let addr = fulcrum.addr_of("web");
    // A request that takes 30 s holds the drain open.
    let slow = rt.spawn(async move { Client::new(addr).get("/?delay_ms=30000").await });
    let started = Instant::now();
    while backend.requests() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the slow request arrives"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = fulcrum.child.id().to_string();
    let kill = |signal: &str| {
        let status = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap();
        assert!(status.success());
    };
    kill("-TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fulcrum.next_line(deadline).contains("shutting down") {}
    // Still draining: the slow request holds it.
    assert!(fulcrum.child.try_wait().unwrap().is_none());
    let second = Instant::now();
    kill("-TERM");
    let exited = loop {
        if let Some(status) = fulcrum.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            second.elapsed() < Duration::from_secs(5),
            "a second SIGTERM stops fulcrum at once"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(!exited.success(), "{exited:?}");
    slow.abort();
}
