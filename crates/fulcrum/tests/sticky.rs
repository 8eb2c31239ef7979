//! Sticky sessions (`sticky` on an upstream: HAProxy's `cookie NAME insert indirect nocache`)
//! against a running `fulcrum run`, with curl as the client: its cookie engine parses every
//! `Set-Cookie` as a browser does (domain, path, expiry, `Secure`, `HttpOnly`), keeps the
//! cookies in a jar file between runs, and sends back those that apply.
//!
//! * 100 clients of 10 requests each under `least_conn` each stay on one backend, and are told
//!   their backend once; a backend is killed: its clients move once (one new cookie each) and
//!   stick to their new backend, the others stay where they were; no backend ever sees the
//!   sticky cookie, and a backend's own cookie of that name never reaches a client.
//! * The cookie's attributes are as configured, as curl's jar records them.
//! * HTTP/2 clients (h2c) stick alike.
//!
//! The backends count what they see: every request, those carrying the sticky cookie (there
//! must be none: `indirect`), and those carrying the application's own cookie (which must
//! pass).

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::task::{JoinHandle, JoinSet};

use common::{Running, TempDir, TempFile, installed};

/// What a backend saw.
#[derive(Debug, Default)]
struct Seen {
    requests: AtomicUsize,
    /// Requests whose `Cookie` carried the sticky cookie.
    sticky_cookie: AtomicUsize,
    /// Requests whose `Cookie` carried the application's `app=1`.
    app_cookie: AtomicUsize,
}

/// A backend answering `<name>\n` to every request, with its own `app=1` cookie and a forged
/// sticky one, named `cookie` (which the proxy must drop); killed by aborting its task (its
/// listener and every connection close with it).
struct Backend {
    name: &'static str,
    addr: SocketAddr,
    seen: Arc<Seen>,
    task: JoinHandle<()>,
}

fn backend(rt: &Runtime, name: &'static str, cookie: &'static str) -> Backend {
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let counts = Arc::clone(&seen);
    let task = rt.spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            if let Ok((stream, _)) = listener.accept().await {
                connections.spawn(serve(stream, (name, cookie), Arc::clone(&counts)));
            }
            while connections.try_join_next().is_some() {}
        }
    });
    Backend {
        name,
        addr,
        seen,
        task,
    }
}

/// Kills `b`: once this returns, its port refuses connections and its connections are closed
/// (the task, dropped, took its listener and its connections' tasks with it).
fn kill(rt: &Runtime, b: &mut Backend) {
    b.task.abort();
    let _ = rt.block_on(&mut b.task);
}

async fn serve(mut stream: TcpStream, (name, cookie): (&str, &str), seen: Arc<Seen>) {
    let sticky = format!("{}=", cookie.to_ascii_lowercase());
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        buf.drain(..end);
        seen.requests.fetch_add(1, Ordering::Relaxed);
        for line in head.lines().filter(|l| l.starts_with("cookie:")) {
            if line.contains(&sticky) {
                seen.sticky_cookie.fetch_add(1, Ordering::Relaxed);
            }
            if line.contains("app=1") {
                seen.app_cookie.fetch_add(1, Ordering::Relaxed);
            }
        }
        let body = format!("{name}\n");
        let answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nSet-Cookie: app=1; Path=/\r\n\
             Set-Cookie: {cookie}=forged; Path=/\r\n\r\n{body}",
            body.len()
        );
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// `workers = 2`, a listener (`listener_keys` added) on upstream "app" with `sticky` and
/// `algorithm` over `backends`.
fn config(name: &str, listener_keys: &str, sticky: &str, backends: &[&Backend]) -> TempFile {
    let mut text = format!(
        "workers = 2\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"app\"\n{listener_keys}\n\n\
         [[upstream]]\nname = \"app\"\nalgorithm = \"least_conn\"\nsticky = {sticky}\n"
    );
    for b in backends {
        text.push_str(&format!(
            "  [[upstream.backend]]\n  addr = \"{}\"\n",
            b.addr
        ));
    }
    TempFile::new(&format!("sticky-{name}.toml"), &text)
}

/// One client's run of curl: `n` requests on one connection to `url`, cookies read from and
/// written to its jar, every response head appended to its `heads` file.
struct Client {
    jar: PathBuf,
    heads: PathBuf,
}

/// What one run of a client came to: the backend of each answer, and its response heads.
struct Run {
    backends: Vec<String>,
    heads: String,
}

impl Run {
    /// The `Set-Cookie` fields naming `cookie`.
    fn cookies_set(&self, cookie: &str) -> Vec<&str> {
        let prefix = format!("set-cookie: {}=", cookie.to_ascii_lowercase());
        self.heads
            .lines()
            .filter(|l| l.to_ascii_lowercase().starts_with(&prefix))
            .collect()
    }

    /// The one backend every answer came from.
    fn only_backend(&self) -> &str {
        let first = &self.backends[0];
        assert!(
            self.backends.iter().all(|b| b == first),
            "answers from more than one backend: {:?}",
            self.backends
        );
        first
    }
}

/// Runs `clients` at once, each sending `n` requests to `url` with `extra` curl arguments;
/// each run is bounded by curl's `--max-time`.
fn run_all(clients: &[Client], url: &str, n: usize, extra: &[&str]) -> Vec<Run> {
    let children: Vec<_> = clients
        .iter()
        .map(|c| {
            let _ = std::fs::remove_file(&c.heads);
            Command::new("curl")
                .args(["-s", "-S", "--max-time", "30"])
                .args(extra)
                .arg("-b")
                .arg(&c.jar)
                .arg("-c")
                .arg(&c.jar)
                .arg("-D")
                .arg(&c.heads)
                .args(std::iter::repeat_n(url, n))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .zip(clients)
        .map(|(child, c)| {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "curl: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            let backends: Vec<String> = String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect();
            assert_eq!(backends.len(), n, "every request answered: {backends:?}");
            Run {
                backends,
                heads: std::fs::read_to_string(&c.heads).unwrap(),
            }
        })
        .collect()
}

fn clients(dir: &TempDir, n: usize) -> Vec<Client> {
    (0..n)
        .map(|i| Client {
            jar: Path::new(dir.path()).join(format!("jar-{i}")),
            heads: Path::new(dir.path()).join(format!("heads-{i}")),
        })
        .collect()
}

fn total(backends: &[Backend], count: impl Fn(&Seen) -> &AtomicUsize) -> usize {
    backends
        .iter()
        .map(|b| count(&b.seen).load(Ordering::Relaxed))
        .sum()
}

#[test]
fn clients_stick_under_least_conn_and_move_once_when_their_backend_dies() {
    if !installed("curl", "--version") {
        eprintln!("skipped: curl is not installed");
        return;
    }
    let rt = Runtime::new().unwrap();
    let mut backends = [
        backend(&rt, "a", "fulcrum_srv"),
        backend(&rt, "b", "fulcrum_srv"),
        backend(&rt, "c", "fulcrum_srv"),
    ];
    let file = config("least-conn", "", "{}", &backends.iter().collect::<Vec<_>>());
    let fulcrum = Running::start(&file, 1);
    let url = format!("http://{}/", fulcrum.addr_of("app"));
    let dir = TempDir::new("sticky", "least-conn");
    let clients = clients(&dir, 100);

    // Every client: one backend for all ten answers, told once (the first answer).
    let first = run_all(&clients, &url, 10, &[]);
    let mut home = Vec::new();
    for run in &first {
        home.push(run.only_backend().to_owned());
        let set = run.cookies_set("fulcrum_srv");
        assert_eq!(set.len(), 1, "one cookie, on the first answer: {set:?}");
        assert!(
            !run.heads.contains("forged"),
            "the backend's own cookie is dropped"
        );
        assert!(
            run.heads.contains("no-cache=\"Set-Cookie\""),
            "{}",
            run.heads
        );
    }
    for b in &backends {
        let n = home.iter().filter(|h| **h == b.name).count();
        assert!(
            n > 0,
            "least_conn sent the first requests to every backend: {home:?}"
        );
    }
    assert_eq!(total(&backends, |s| &s.requests), 1000);
    assert_eq!(
        total(&backends, |s| &s.sticky_cookie),
        0,
        "no cookie reached a backend"
    );
    assert_eq!(
        total(&backends, |s| &s.app_cookie),
        900,
        "the application's cookie passes"
    );

    // Backend b dies. Its clients move once and stick to their new backend; the others stay.
    kill(&rt, &mut backends[1]);
    let second = run_all(&clients, &url, 10, &[]);
    for (run, home) in second.iter().zip(&home) {
        let now = run.only_backend();
        let set = run.cookies_set("fulcrum_srv");
        if home == "b" {
            assert_ne!(now, "b");
            assert_eq!(set.len(), 1, "moved once: {set:?}");
        } else {
            assert_eq!(now, home, "stays on its backend");
            assert!(set.is_empty(), "not told again: {set:?}");
        }
    }
    // And they stick to where they moved.
    let third = run_all(&clients, &url, 5, &[]);
    for (run, before) in third.iter().zip(&second) {
        assert_eq!(run.only_backend(), before.only_backend());
        assert!(run.cookies_set("fulcrum_srv").is_empty());
    }
    assert_eq!(
        total(&backends, |s| &s.sticky_cookie),
        0,
        "no cookie reached a backend"
    );
}

/// A cookie as curl's jar keeps it (Netscape format): domain, subdomains, path, secure,
/// expiry (0: a session cookie), name, value; `#HttpOnly_` before the domain when it is.
fn jar_line(jar: &Path, name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(jar).unwrap();
    text.lines()
        .filter(|l| !l.is_empty() && (!l.starts_with('#') || l.starts_with("#HttpOnly_")))
        .map(|l| l.split('\t').map(str::to_owned).collect::<Vec<_>>())
        .find(|fields| fields.get(5).is_some_and(|n| n == name))
        .unwrap_or_else(|| panic!("no {name} in the jar:\n{text}"))
}

#[test]
fn the_cookie_s_attributes_are_as_configured() {
    if !installed("curl", "--version") {
        eprintln!("skipped: curl is not installed");
        return;
    }
    let rt = Runtime::new().unwrap();
    let one = backend(&rt, "one", "SRV");
    let file = config(
        "attributes",
        "",
        "{ cookie = \"SRV\", max_age = \"1h\", path = \"/app\", domain = \"sticky.test\", \
         http_only = true, same_site = \"Lax\" }",
        &[&one],
    );
    let fulcrum = Running::start(&file, 1);
    let port = fulcrum.addr_of("app").port();
    let dir = TempDir::new("sticky", "attributes");
    let client = clients(&dir, 1);
    let resolve = format!("app.sticky.test:{port}:127.0.0.1");
    let url = format!("http://app.sticky.test:{port}/app/page");
    let set_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let runs = run_all(&client, &url, 2, &["--resolve", &resolve]);
    let set = runs[0].cookies_set("SRV");
    assert_eq!(set.len(), 1, "{}", runs[0].heads);
    let id = set[0]
        .split_once('=')
        .and_then(|(_, rest)| rest.split(';').next())
        .unwrap();
    assert!(
        id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "an opaque id: {id}"
    );
    assert!(
        !set[0].contains(&one.addr.port().to_string()),
        "no address: {}",
        set[0]
    );
    assert_eq!(
        set[0].trim_end(),
        format!(
            "Set-Cookie: SRV={id}; Max-Age=3600; Path=/app; Domain=sticky.test; HttpOnly; SameSite=Lax"
        )
    );
    // As curl understood it.
    let fields = jar_line(&client[0].jar, "SRV");
    assert_eq!(
        fields[0], "#HttpOnly_.sticky.test",
        "HttpOnly, for the domain"
    );
    assert_eq!(fields[1], "TRUE", "subdomains too (Domain given)");
    assert_eq!(fields[2], "/app");
    assert_eq!(fields[3], "FALSE", "not Secure");
    let expires: u64 = fields[4].parse().unwrap();
    assert!(
        (set_at + 3600..=set_at + 3600 + 60).contains(&expires),
        "expires in an hour: {expires} (set at {set_at})"
    );
    assert_eq!(fields[6], id);
    // curl sent it back on the second request (the only one of the cookie's path), which was
    // not answered with another cookie, and the backend never saw it.
    assert_eq!(one.seen.requests.load(Ordering::Relaxed), 2);
    assert_eq!(one.seen.sticky_cookie.load(Ordering::Relaxed), 0);

    // Secure, SameSite=None, a session cookie (no Max-Age) for the host only. curl keeps a
    // Secure cookie from http://127.0.0.1 (a secure context, as for browsers).
    let file = config(
        "secure",
        "",
        "{ cookie = \"SRV\", secure = true, same_site = \"None\" }",
        &[&one],
    );
    let fulcrum = Running::start(&file, 1);
    let url = format!("http://{}/", fulcrum.addr_of("app"));
    let dir = TempDir::new("sticky", "secure");
    let client = clients(&dir, 1);
    let runs = run_all(&client, &url, 1, &[]);
    let set = runs[0].cookies_set("SRV");
    assert_eq!(set.len(), 1, "{}", runs[0].heads);
    assert!(
        set[0]
            .trim_end()
            .ends_with("; Path=/; Secure; SameSite=None"),
        "{}",
        set[0]
    );
    let fields = jar_line(&client[0].jar, "SRV");
    assert_eq!(fields[0], "127.0.0.1", "the host only, not HttpOnly");
    assert_eq!((fields[1].as_str(), fields[2].as_str()), ("FALSE", "/"));
    assert_eq!(fields[3], "TRUE", "Secure");
    assert_eq!(fields[4], "0", "a session cookie");
    drop(fulcrum);
}

#[test]
fn http2_clients_stick_alike() {
    if !installed("curl", "--version") {
        eprintln!("skipped: curl is not installed");
        return;
    }
    let rt = Runtime::new().unwrap();
    let backends = [
        backend(&rt, "a", "fulcrum_srv"),
        backend(&rt, "b", "fulcrum_srv"),
    ];
    let file = config(
        "http2",
        "http2 = true",
        "{}",
        &backends.iter().collect::<Vec<_>>(),
    );
    let fulcrum = Running::start(&file, 1);
    let url = format!("http://{}/", fulcrum.addr_of("app"));
    let dir = TempDir::new("sticky", "http2");
    let clients = clients(&dir, 10);
    // One request a connection: curl 7.88.1 fails a second request on a connection it
    // opened with prior knowledge ("Error in the HTTP2 framing layer"), against nginx's h2c as
    // against fulcrum's: curl's, not ours. The jar carries the cookie from one run to the next.
    let mut runs: Vec<Run> = (0..clients.len())
        .map(|_| Run {
            backends: Vec::new(),
            heads: String::new(),
        })
        .collect();
    for _ in 0..10 {
        for (all, one) in
            runs.iter_mut()
                .zip(run_all(&clients, &url, 1, &["--http2-prior-knowledge"]))
        {
            all.backends.extend(one.backends);
            all.heads.push_str(&one.heads);
        }
    }
    for run in &runs {
        run.only_backend();
        assert!(run.heads.starts_with("HTTP/2 200"), "{}", run.heads);
        assert_eq!(run.cookies_set("fulcrum_srv").len(), 1, "{}", run.heads);
        assert!(!run.heads.contains("forged"));
    }
    assert_eq!(total(&backends, |s| &s.requests), 100);
    assert_eq!(
        total(&backends, |s| &s.sticky_cookie),
        0,
        "no cookie reached a backend"
    );
    assert_eq!(
        total(&backends, |s| &s.app_cookie),
        90,
        "the application's cookie passes"
    );
}

/// A route's upstream sticks by its own cookie; another upstream of the same listener, without
/// `sticky`, passes the cookie on as any other (HAProxy: `cookie` is a backend's setting).
#[test]
fn a_route_s_upstream_sticks_and_another_passes_the_cookie_on() {
    if !installed("curl", "--version") {
        eprintln!("skipped: curl is not installed");
        return;
    }
    let rt = Runtime::new().unwrap();
    let sticky = [
        backend(&rt, "a", "fulcrum_srv"),
        backend(&rt, "b", "fulcrum_srv"),
    ];
    let other = backend(&rt, "other", "fulcrum_srv");
    let text = format!(
        "workers = 2\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"other\"\n\n\
         \x20 [[listener.route]]\n  name = \"app\"\n  path = \"/app/\"\n  upstream = \"app\"\n\n\
         [[upstream]]\nname = \"app\"\nalgorithm = \"round_robin\"\nsticky = {{}}\n\
         \x20 [[upstream.backend]]\n  addr = \"{}\"\n\
         \x20 [[upstream.backend]]\n  addr = \"{}\"\n\n\
         [[upstream]]\nname = \"other\"\n\
         \x20 [[upstream.backend]]\n  addr = \"{}\"\n",
        sticky[0].addr, sticky[1].addr, other.addr
    );
    let file = TempFile::new("sticky-route.toml", &text);
    let fulcrum = Running::start(&file, 1);
    let addr = fulcrum.addr_of("other,app");
    let dir = TempDir::new("sticky", "route");
    let clients = clients(&dir, 10);
    let runs = run_all(&clients, &format!("http://{addr}/app/x"), 6, &[]);
    for run in &runs {
        run.only_backend();
        assert_eq!(run.cookies_set("fulcrum_srv").len(), 1, "{}", run.heads);
    }
    assert_eq!(
        total(&sticky, |s| &s.sticky_cookie),
        0,
        "no cookie reached app's backends"
    );
    // The same clients, with their cookie, to the upstream without sticky sessions: it reaches
    // the backend, and the backend's own cookie of that name reaches the client.
    let runs = run_all(&clients, &format!("http://{addr}/elsewhere"), 2, &[]);
    for run in &runs {
        assert_eq!(run.only_backend(), "other");
        let set = run.cookies_set("fulcrum_srv");
        assert!(
            set.len() == 2 && set.iter().all(|c| c.contains("forged")),
            "only the backend's own: {set:?}"
        );
    }
    assert_eq!(other.seen.requests.load(Ordering::Relaxed), 20);
    assert_eq!(
        other.seen.sticky_cookie.load(Ordering::Relaxed),
        20,
        "passed on where the upstream has no sticky sessions"
    );
}

/// An nginx (Debian's) speaking HTTP/2 with prior knowledge (h2c) on a loopback address of its
/// own, answering `NAME $server_protocol [$http_cookie]` with its own `app=1` cookie and a
/// forged `fulcrum_srv` one. Killed when dropped (its guard), also on a panic.
struct H2Nginx {
    addr: SocketAddr,
    _process: common::ChildGuard,
    _dir: TempDir,
}

fn h2_nginx(name: &str, n: u8) -> H2Nginx {
    // 127.88.P.N: no server of this test binding 127.0.0.1 can take the port between its
    // release here and nginx's bind.
    let ip = std::net::Ipv4Addr::new(127, 88, (std::process::id() % 250) as u8, n);
    let addr = std::net::TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap();
    let dir = TempDir::new("sticky", &format!("nginx-{name}"));
    let d = dir.path();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\nerror_log {d}/error.log;\n\
         pid {d}/nginx.pid;\nevents {{ worker_connections 256; }}\nhttp {{\n\
         access_log off;\nclient_body_temp_path {d}/client_body;\nproxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fastcgi;\nuwsgi_temp_path {d}/uwsgi;\nscgi_temp_path {d}/scgi;\n\
         server {{\n listen {addr} http2;\n location / {{\n\
         add_header Set-Cookie \"app=1; Path=/\" always;\n\
         add_header Set-Cookie \"fulcrum_srv=forged; Path=/\" always;\n\
         return 200 \"{name} $server_protocol [$http_cookie]\\n\";\n }}\n }}\n}}\n"
    );
    let process = common::spawn_nginx(&dir, &conf);
    common::wait_until(Duration::from_secs(10), "nginx accepts connections", || {
        std::net::TcpStream::connect(addr)
            .map(drop)
            .map_err(|e| format!("{addr}: {e}"))
    });
    H2Nginx {
        addr,
        _process: process,
        _dir: dir,
    }
}

/// `backend_protocol = "h2"`: the request reaches the backend as HTTP/2 fields without the
/// sticky cookie, and the backend's answer, read as HTTP/2, gets the cookie set once.
#[test]
fn http2_backends_never_see_the_cookie_either() {
    if !installed("curl", "--version") || !installed("nginx", "-v") {
        eprintln!("skipped: curl or nginx is not installed");
        return;
    }
    let nginxes = [h2_nginx("x", 1), h2_nginx("y", 2)];
    let text = format!(
        "workers = 2\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"app\"\n\n\
         [[upstream]]\nname = \"app\"\nalgorithm = \"least_conn\"\nbackend_protocol = \"h2\"\n\
         sticky = {{}}\n\
         \x20 [[upstream.backend]]\n  addr = \"{}\"\n\
         \x20 [[upstream.backend]]\n  addr = \"{}\"\n",
        nginxes[0].addr, nginxes[1].addr
    );
    let file = TempFile::new("sticky-h2-backends.toml", &text);
    let fulcrum = Running::start(&file, 1);
    let dir = TempDir::new("sticky", "h2-backends");
    let clients = clients(&dir, 10);
    let runs = run_all(
        &clients,
        &format!("http://{}/", fulcrum.addr_of("app")),
        8,
        &[],
    );
    let mut homes = Vec::new();
    for run in &runs {
        let (home, _) = run.backends[0].split_once(' ').unwrap();
        for (i, line) in run.backends.iter().enumerate() {
            let want = if i == 0 {
                format!("{home} HTTP/2.0 []")
            } else {
                format!("{home} HTTP/2.0 [app=1]")
            };
            assert_eq!(
                *line, want,
                "one backend, over HTTP/2, never the sticky cookie"
            );
        }
        let set = run.cookies_set("fulcrum_srv");
        assert!(
            set.len() == 1 && !set[0].contains("forged"),
            "set once, the backend's own dropped: {set:?}"
        );
        homes.push(home.to_owned());
    }
    assert!(
        homes.iter().any(|h| h == "x") && homes.iter().any(|h| h == "y"),
        "{homes:?}"
    );
}

/// The `Set-Cookie` value fulcrum at `proxy` gives a first request, and the backend's name
/// that answered it.
fn first_cookie(proxy: SocketAddr) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let cookie = answer
        .lines()
        .find_map(|l| l.strip_prefix("Set-Cookie: fulcrum_srv="))
        .and_then(|v| v.split(';').next())
        .unwrap_or_else(|| panic!("no sticky cookie:\n{answer}"))
        .to_owned();
    let name = answer.lines().last().unwrap_or_default().to_owned();
    (cookie, name)
}

/// With `secret`, two fulcrum processes (a restart, a fleet's instances) name a backend with
/// the same id, so a client's cookie holds through a restart and at any instance; without
/// one, each process has its own ids.
#[test]
fn a_secret_gives_every_process_the_same_ids() {
    let rt = Runtime::new().unwrap();
    let one = backend(&rt, "one", "fulcrum_srv");
    let with_secret = "{ secret = \"0123456789abcdef0123456789abcdef\" }";
    let (a, b) = (
        config("secret-a", "", with_secret, &[&one]),
        config("secret-b", "", with_secret, &[&one]),
    );
    let own = config("own", "", "{}", &[&one]);
    let (fa, fb) = (Running::start(&a, 1), Running::start(&b, 1));
    let (ca, na) = first_cookie(fa.addr_of("app"));
    let (cb, nb) = first_cookie(fb.addr_of("app"));
    assert_eq!((na.as_str(), nb.as_str()), ("one", "one"));
    assert_eq!(ca, cb, "the same backend, the same secret: the same id");
    let fo = Running::start(&own, 1);
    let (co, _) = first_cookie(fo.addr_of("app"));
    assert_ne!(co, ca, "the process's own key is not the secret's");
}
