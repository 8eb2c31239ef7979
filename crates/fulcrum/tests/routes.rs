//! Routes (`[[listener.route]]`) against a running `fulcrum run`: requests sent by host and
//! path to the upstream their route names, a redirect (HTTP to HTTPS as nginx's `return 301
//! https://$host$request_uri`), a fixed answer, 404 when no route takes a request, the path a
//! backend gets with `strip_prefix` and `rewrite_prefix`, and paths that try to climb out of
//! a prefix (`/api/../admin`, `%2e%2e`) matched on their normalised form.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use common::{Running, TempFile};

/// A backend that answers every request with `X-Backend: <name>` and, as its body, the
/// request line it got; one thread, connection by connection, until the test ends.
fn echo_backend(name: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || serve_echo(stream, name));
        }
    });
    addr
}

fn serve_echo(stream: TcpStream, name: &str) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        // The rest of the head (no bodies in these tests).
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
        }
        let body = line.trim_end();
        let answer = format!(
            "HTTP/1.1 200 OK\r\nX-Backend: {name}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if out.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// What came back for one request: status, headers (lower-case names) and body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `GET target` with `Host: host` on a new connection (closed after the answer).
fn get(to: SocketAddr, host: &str, target: &str) -> Answer {
    request(to, "GET", host, target)
}

fn request(to: SocketAddr, method: &str, host: &str, target: &str) -> Answer {
    let mut s = TcpStream::connect(to).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    read_answer(&mut s)
}

/// Reads an answer to its end (the connection closes after it).
fn read_answer(s: &mut TcpStream) -> Answer {
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {text:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

fn site(api: SocketAddr, web: SocketAddr, with_default: bool) -> String {
    let default = if with_default {
        "upstream = \"web\"\n"
    } else {
        ""
    };
    format!(
        r#"workers = 1
access_log = false

[[listener]]
listen = "127.0.0.1:0"
{default}
  [[listener.route]]
  name = "to-https"
  host = ["old.example.com"]
  redirect = {{ status = 301, scheme = "https" }}

  [[listener.route]]
  name = "health"
  path_exact = "/healthz"
  respond = {{ status = 200, body = "ok\n", content_type = "text/plain" }}

  [[listener.route]]
  name = "api"
  path = "/api/"
  upstream = "api"

  [[listener.route]]
  name = "v1"
  path = "/v1/"
  upstream = "api"
  rewrite_prefix = "/api/v1/"

  [[listener.route]]
  name = "static"
  path = "/static/"
  upstream = "web"
  strip_prefix = true

  [[listener.route]]
  name = "images"
  path_regex_nocase = "\\.(png|jpg)$"
  upstream = "api"

[[upstream]]
name = "api"
  [[upstream.backend]]
  addr = "{api}"

[[upstream]]
name = "web"
  [[upstream.backend]]
  addr = "{web}"
"#
    )
}

#[test]
fn requests_go_where_their_route_says() {
    let (api, web) = (echo_backend("api"), echo_backend("web"));
    let config = TempFile::new("routes.toml", &site(api, web, true));
    let fulcrum = Running::start(&config, 1);
    let at = fulcrum.listening[0].1;

    let a = get(at, "a.example.com", "/api/users?id=1");
    assert_eq!(
        (a.status, a.header("x-backend")),
        (200, Some("api")),
        "{a:?}"
    );
    assert_eq!(a.body, "GET /api/users?id=1 HTTP/1.1", "passed on as sent");
    let a = get(at, "a.example.com", "/other");
    assert_eq!(
        a.header("x-backend"),
        Some("web"),
        "no route: the listener's upstream"
    );

    // nginx's `return 301 https://$host$request_uri`, for one host only.
    let a = get(at, "old.example.com", "/a?b=1");
    assert_eq!(a.status, 301, "{a:?}");
    assert_eq!(a.header("location"), Some("https://old.example.com/a?b=1"));
    let a = get(at, "old.example.com:8080", "/a");
    assert_eq!(
        a.header("location"),
        Some("https://old.example.com/a"),
        "the port of another scheme is not kept"
    );

    let a = get(at, "a.example.com", "/healthz");
    assert_eq!((a.status, a.body.as_str()), (200, "ok\n"));
    assert_eq!(a.header("content-type"), Some("text/plain"));
    let a = request(at, "HEAD", "a.example.com", "/healthz");
    assert_eq!((a.status, a.body.as_str()), (200, ""), "no body for HEAD");
    let a = get(at, "a.example.com", "/healthz/x");
    assert_eq!(a.header("x-backend"), Some("web"), "path_exact is exact");

    // The prefix replaced, the rest of the normalised path kept, the query passed on.
    let a = get(at, "a.example.com", "/v1/users?x=2");
    assert_eq!(a.body, "GET /api/v1/users?x=2 HTTP/1.1");
    let a = get(at, "a.example.com", "/static/css/site.css");
    assert_eq!(
        (a.header("x-backend"), a.body.as_str()),
        (Some("web"), "GET /css/site.css HTTP/1.1")
    );

    // A case-insensitive regex beats the prefix /api/ (nginx: regexes after a prefix that is
    // not `^~`).
    let a = get(at, "a.example.com", "/api/logo.PNG");
    assert_eq!(a.header("x-backend"), Some("api"));
    let a = get(at, "a.example.com", "/logo.JPG");
    assert_eq!(a.header("x-backend"), Some("api"));
}

#[test]
fn a_path_that_climbs_out_of_a_prefix_is_matched_where_it_lands() {
    let (api, web) = (echo_backend("api"), echo_backend("web"));
    let config = TempFile::new("routes-paths.toml", &site(api, web, true));
    let fulcrum = Running::start(&config, 1);
    let at = fulcrum.listening[0].1;
    for target in [
        "/api/../admin",
        "/api/%2e%2e/admin",
        "/api/%2E%2E/admin",
        "/api/./../admin",
    ] {
        let a = get(at, "a.example.com", target);
        assert_eq!(
            a.header("x-backend"),
            Some("web"),
            "{target} is /admin, which the api route does not take: {a:?}"
        );
    }
    // Merged slashes and decoded unreserved characters still name the prefix.
    for target in ["//api/x", "/%61pi/x", "/api//x"] {
        let a = get(at, "a.example.com", target);
        assert_eq!(a.header("x-backend"), Some("api"), "{target}: {a:?}");
    }
    let a = get(at, "a.example.com", "/API/x");
    assert_eq!(
        a.header("x-backend"),
        Some("web"),
        "prefixes are case-sensitive"
    );
    let a = get(at, "a.example.com", "/../etc/passwd");
    assert_eq!(a.status, 400, "above the root: {a:?}");
}

#[test]
fn without_an_upstream_of_its_own_a_listener_answers_404_to_what_no_route_takes() {
    let (api, web) = (echo_backend("api"), echo_backend("web"));
    let config = TempFile::new("routes-404.toml", &site(api, web, false));
    let fulcrum = Running::start(&config, 1);
    let at = fulcrum.listening[0].1;
    assert_eq!(get(at, "a.example.com", "/other").status, 404);
    assert_eq!(
        get(at, "a.example.com", "/api/x").header("x-backend"),
        Some("api")
    );
    // nginx's auto-redirect: `/api` for a proxied `location /api/` is sent to `/api/`.
    let a = get(at, "a.example.com", "/api?q=1");
    assert_eq!(a.status, 301, "{a:?}");
    assert_eq!(a.header("location"), Some("http://a.example.com/api/?q=1"));
}

#[test]
fn check_refuses_routes_that_cannot_work() {
    let cases: &[(&str, &str)] = &[
        (
            "  [[listener.route]]\n  path = \"/a/\"\n  path_regex = \"x\"\n  upstream = \"web\"\n",
            "one path condition",
        ),
        (
            "  [[listener.route]]\n  path = \"/a/\"\n",
            "needs one action",
        ),
        (
            "  [[listener.route]]\n  path = \"/a/\"\n  upstream = \"web\"\n  respond = { status = 200 }\n",
            "does one thing",
        ),
        (
            "  [[listener.route]]\n  path = \"/a/\"\n  upstream = \"nope\"\n",
            "no upstream is named \"nope\"",
        ),
        (
            "  [[listener.route]]\n  path_regex = \"(?=x)\"\n  upstream = \"web\"\n",
            "does not compile",
        ),
        (
            "  [[listener.route]]\n  path_regex = \"x\"\n  upstream = \"web\"\n  strip_prefix = true\n",
            "strip_prefix replaces",
        ),
        (
            "  [[listener.route]]\n  path = \"/a/\"\n  redirect = { status = 200 }\n",
            "must be between 301 and 308",
        ),
        (
            "  [[listener.route]]\n  path = \"/a/\"\n  upstream = \"web\"\n  [[listener.route]]\n  path = \"/a/\"\n  upstream = \"web\"\n",
            "no request can reach this route",
        ),
    ];
    for (routes, expected) in cases {
        let text = format!(
            "[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n{routes}\n[[upstream]]\nname = \"web\"\n  [[upstream.backend]]\n  addr = \"127.0.0.1:9\"\n"
        );
        let config = TempFile::new("routes-check.toml", &text);
        let out = common::fulcrum()
            .args(["check", "--config"])
            .arg(&config.0)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "refused: {routes}");
        assert!(stderr.contains(expected), "{expected:?} in: {stderr}");
    }
}

/// One HTTP/2 stream (h2c with prior knowledge) with `:authority` `host`: status, `x-backend`,
/// `location` and body.
async fn h2_get(
    send: &h2::client::SendRequest<bytes::Bytes>,
    host: &str,
    path: &str,
) -> (u16, Option<String>, Option<String>, String) {
    let request = http::Request::builder()
        .uri(format!("http://{host}{path}"))
        .body(())
        .unwrap();
    let mut send = send.clone().ready().await.unwrap();
    let (response, _) = send.send_request(request, true).unwrap();
    let response = response.await.unwrap();
    let (parts, mut recv) = response.into_parts();
    let mut body = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.unwrap();
        let _ = recv.flow_control().release_capacity(chunk.len());
        body.extend_from_slice(&chunk);
    }
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    (
        parts.status.as_u16(),
        header("x-backend"),
        header("location"),
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[tokio::test]
async fn http2_streams_are_routed_as_http1_requests_are() {
    let (api, web) = (echo_backend("api"), echo_backend("web"));
    let text = site(api, web, true).replace(
        "listen = \"127.0.0.1:0\"\n",
        "listen = \"127.0.0.1:0\"\nhttp2 = true\n",
    );
    let config = TempFile::new("routes-h2.toml", &text);
    let fulcrum = Running::start(&config, 1);
    let tcp = tokio::net::TcpStream::connect(fulcrum.listening[0].1)
        .await
        .unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let (status, backend, _, body) = h2_get(&send, "a.example.com", "/static/x.css").await;
    assert_eq!((status, backend.as_deref()), (200, Some("web")));
    assert_eq!(body, "GET /x.css HTTP/1.1", "strip_prefix over HTTP/2 too");
    let (_, backend, _, _) = h2_get(&send, "a.example.com", "/api/x").await;
    assert_eq!(backend.as_deref(), Some("api"));
    let (status, _, location, _) = h2_get(&send, "old.example.com", "/a?b=1").await;
    assert_eq!(status, 301);
    assert_eq!(location.as_deref(), Some("https://old.example.com/a?b=1"));
    let (status, _, _, body) = h2_get(&send, "a.example.com", "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (_, backend, _, _) = h2_get(&send, "a.example.com", "/api/%2e%2e/admin").await;
    assert_eq!(backend.as_deref(), Some("web"));
}

#[test]
fn the_admin_api_lists_each_listener_s_routes() {
    let (api, web) = (echo_backend("api"), echo_backend("web"));
    let text = format!(
        "{}\n[admin]\nlisten = \"127.0.0.1:0\"\n",
        site(api, web, false)
    );
    let config = TempFile::new("routes-admin.toml", &text);
    let fulcrum = Running::start(&config, 1);
    let admin = fulcrum
        .admin
        .expect("the admin listener's address is logged");
    let a = get(admin, &admin.to_string(), "/api/listeners");
    assert_eq!(a.status, 200, "{a:?}");
    let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    let listener = &v["listeners"][0];
    assert_eq!(listener["upstream"], serde_json::Value::Null);
    let routes = listener["routes"].as_array().unwrap();
    let names: Vec<&str> = routes.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["to-https", "health", "api", "v1", "static", "images"]
    );
    assert_eq!(routes[0]["host"][0], "old.example.com");
    assert_eq!(routes[0]["action"]["redirect"]["scheme"], "https");
    assert_eq!(routes[1]["path"]["exact"], "/healthz");
    assert_eq!(routes[2]["path"]["prefix"], "/api/");
    assert_eq!(routes[3]["action"]["rewrite_prefix"], "/api/v1/");
    assert_eq!(routes[4]["action"]["rewrite_prefix"], "/");
    assert_eq!(routes[5]["path"]["nocase"], true);

    // /metrics counts each route's answers.
    let at = fulcrum.listening[0].1;
    assert_eq!(get(at, "a.example.com", "/healthz").status, 200);
    assert_eq!(get(at, "a.example.com", "/healthz").status, 200);
    assert_eq!(get(at, "a.example.com", "/api/x").status, 200);
    assert_eq!(get(at, "old.example.com", "/").status, 301);
    let metrics = get(admin, &admin.to_string(), "/metrics").body;
    for series in [
        "fulcrum_route_requests_total{listener=\"127.0.0.1:0\",route=\"health\",code=\"2xx\"} 2",
        "fulcrum_route_requests_total{listener=\"127.0.0.1:0\",route=\"api\",code=\"2xx\"} 1",
        "fulcrum_route_requests_total{listener=\"127.0.0.1:0\",route=\"to-https\",code=\"3xx\"} 1",
    ] {
        assert!(metrics.contains(series), "{series} in:\n{metrics}");
    }
    common::assert_promtool_accepts(&metrics);
}

/// The routes of one version of the reload test: every path to upstream `ua` (even versions)
/// or `ub` (odd), and a fixed answer that names the version.
fn versioned(k: usize, a: SocketAddr, b: SocketAddr) -> String {
    let to = if k.is_multiple_of(2) { "ua" } else { "ub" };
    format!(
        r#"workers = 2
access_log = false

[[listener]]
listen = "127.0.0.1:0"

  [[listener.route]]
  name = "v{k}"
  path = "/"
  upstream = "{to}"

  [[listener.route]]
  path_exact = "/version"
  respond = {{ status = 200, body = "{k}" }}

[[upstream]]
name = "ua"
  [[upstream.backend]]
  addr = "{a}"

[[upstream]]
name = "ub"
  [[upstream.backend]]
  addr = "{b}"
"#
    )
}

/// Issue 28: the routes changed ten times under 200 requests a second for 20 s, and every
/// request answered by the route in force while it was in flight.
#[test]
fn routes_changed_under_load_route_each_request_by_the_routes_in_force() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let backends = common::backends(&["a", "b"]).await;
        let (a, b) = (backends[0].addr(), backends[1].addr());
        let file = TempFile::new("routes-reload.toml", &versioned(0, a, b));
        let fulcrum = Running::start(&file, 1);
        let proxy = fulcrum.listening[0].1;
        let plan = common::steady_load(proxy, 200.0, 20, 40);
        let sent = plan.trace.len();
        let start = std::time::Instant::now();
        let load = tokio::spawn(async move { lab::load::run(&plan).await });
        // (when the HUP was sent, when the reload was done), from `start`, for version k + 1.
        let mut reloads = Vec::new();
        for k in 1..=10 {
            // The schedule of the reloads, spread over the 20 s of load (not a wait for
            // something to happen: each reload is waited for by its log line below).
            tokio::time::sleep(Duration::from_millis(1800)).await;
            std::fs::write(&file.0, versioned(k, a, b)).unwrap();
            let hup = start.elapsed();
            fulcrum.hangup();
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let line = fulcrum.next_line(deadline);
                assert!(!line.contains("reload refused"), "{line}");
                if line.contains("configuration reloaded") {
                    break;
                }
            }
            reloads.push((hup, start.elapsed()));
        }
        let outcomes = load.await.unwrap();
        common::assert_all_answered(&outcomes, sent);
        // The version in force over [from, to] (offsets from `start`), if one was.
        let version_over = |from: Duration, to: Duration| -> Option<usize> {
            let mut version = 0;
            for (k, &(hup, done)) in reloads.iter().enumerate() {
                if to < hup {
                    break;
                }
                if from < done {
                    // In flight across reload k + 1: either version may answer.
                    return None;
                }
                version = k + 1;
            }
            Some(version)
        };
        let mut checked = 0;
        let mut wrong = Vec::new();
        for o in &outcomes {
            let Some(ended) = o.ended else { continue };
            // The load's clock starts a little after `start`: 100 ms either side.
            let margin = Duration::from_millis(100);
            let Some(k) = version_over(o.started.saturating_sub(margin), ended + margin) else {
                continue;
            };
            checked += 1;
            let want = if k % 2 == 0 { "a" } else { "b" };
            if o.backend.as_deref() != Some(want) {
                wrong.push((o.started, o.backend.clone(), k));
            }
        }
        assert!(
            checked > sent * 3 / 4,
            "most requests fall between reloads: {checked} of {sent}"
        );
        assert!(
            wrong.is_empty(),
            "{} of {checked} requests were not answered by the routes in force: {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
    });
}

/// A backend whose answer's body is the whole request head it got, with `Server: echo` and an
/// `X-Request-Id` of its own among its fields.
fn head_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        head.push_str(&line);
                    }
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nServer: echo\r\nX-Request-Id: the-backend-s\r\nX-Backend: head\r\nContent-Length: {}\r\n\r\n{head}",
                        head.len()
                    );
                    if out.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// `GET target` with `Host: host` and `extra` header lines, sent from `from` (a loopback
/// address of the test's choosing).
fn get_from(from: &str, to: SocketAddr, host: &str, target: &str, extra: &str) -> Answer {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: SocketAddr = format!("{from}:0").parse().unwrap();
    socket.bind(&local.into()).unwrap();
    socket.connect(&to.into()).unwrap();
    let mut s: TcpStream = socket.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    read_answer(&mut s)
}

/// Issue 28: header rules and the request id — HSTS added and `Server` removed on every
/// answer, the route's fields on its requests and answers with nginx's variables, and an
/// `X-Request-Id` the same in the backend's request, the client's answer and the access log.
#[test]
fn header_rules_and_the_request_id_reach_the_backend_the_client_and_the_log() {
    let backend = head_backend();
    let log = common::TempDir::new("routes", "header-rules");
    let log_file = format!("{}/access.log", log.path());
    let text = format!(
        r#"workers = 1
access_log = "{log_file}"

[[listener]]
listen = "127.0.0.1:0"
upstream = "b"
request_id = true
trusted_proxies = ["127.0.0.2"]
response_headers = {{ set = {{ "Strict-Transport-Security" = "max-age=63072000" }}, remove = ["Server"] }}

  [[listener.route]]
  name = "to-https"
  host = ["old.example.com"]
  redirect = {{ status = 301, scheme = "https" }}

  [[listener.route]]
  name = "api"
  path = "/api/"
  upstream = "b"
  request_headers = {{ set = {{ "X-Env" = "prod", "X-Seen" = "$host $uri $args $scheme" }}, add = {{ "X-Via-Route" = "$route" }}, remove = ["X-Debug"] }}
  response_headers = {{ add = {{ "X-Upstream" = "$upstream_addr", "X-Id" = "id=$request_id" }} }}

[[upstream]]
name = "b"
  [[upstream.backend]]
  addr = "{backend}"
"#
    );
    let config = TempFile::new("routes-headers.toml", &text);
    let fulcrum = Running::start(&config, 1);
    let at = fulcrum.listening[0].1;

    let a = get_from(
        "127.0.0.1",
        at,
        "API.example.com:8080",
        "/api/%61/../x?k=v",
        "X-Debug: 1\r\nX-Env: dev\r\nX-Request-Id: from-an-untrusted-client\r\n",
    );
    assert_eq!(a.status, 200, "{a:?}");
    let id = a.header("x-request-id").expect("an id").to_owned();
    assert_eq!(id.len(), 32, "{id}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    let sent: Vec<&str> = a.body.lines().collect();
    assert!(
        sent.contains(&format!("X-Request-Id: {id}").as_str()),
        "{sent:?}"
    );
    assert!(!a.body.contains("from-an-untrusted-client"), "{sent:?}");
    assert!(
        sent.contains(&"X-Env: prod") && !a.body.contains("X-Env: dev"),
        "{sent:?}"
    );
    assert!(!a.body.contains("X-Debug"), "{sent:?}");
    assert!(
        sent.contains(&"X-Seen: api.example.com /api/x k=v http"),
        "{sent:?}"
    );
    assert!(sent.contains(&"X-Via-Route: api"), "{sent:?}");
    assert_eq!(
        a.header("strict-transport-security"),
        Some("max-age=63072000")
    );
    assert_eq!(a.header("server"), None, "Server removed: {a:?}");
    assert_eq!(a.header("x-upstream"), Some(backend.to_string().as_str()));
    assert_eq!(a.header("x-id"), Some(format!("id={id}").as_str()));
    assert_eq!(
        a.headers
            .iter()
            .filter(|(n, _)| n == "x-request-id")
            .count(),
        1,
        "the backend's own id is replaced: {a:?}"
    );

    // From a trusted proxy, its id is kept.
    let a = get_from("127.0.0.2", at, "a.test", "/", "X-Request-Id: abc-123\r\n");
    assert_eq!(a.header("x-request-id"), Some("abc-123"));
    assert!(
        a.body.contains("X-Request-Id: abc-123\r\n") || a.body.contains("X-Request-Id: abc-123\n"),
        "{a:?}"
    );

    // The access log has each id.
    common::wait_until(
        Duration::from_secs(10),
        "the access log has the ids",
        || {
            let text = std::fs::read_to_string(&log_file).unwrap_or_default();
            let logged = text.contains(&format!("route=api request_id={id}"))
                && text.contains("request_id=abc-123");
            if logged { Ok(()) } else { Err(text) }
        },
    );

    // curl, as an operator checks a redirect: 301 to https, the query kept, HSTS on it too.
    let out = std::process::Command::new("curl")
        .args(["-sI", "--resolve"])
        .arg(format!("old.example.com:{}:127.0.0.1", at.port()))
        .arg(format!("http://old.example.com:{}/a?b=1", at.port()))
        .output()
        .expect("curl runs");
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 301"), "{head}");
    assert!(
        head.contains("\r\nlocation: https://old.example.com/a?b=1\r\n"),
        "{head}"
    );
    assert!(
        head.contains("\r\nstrict-transport-security: max-age=63072000\r\n"),
        "{head}"
    );
    assert!(head.contains("\r\nx-request-id: "), "{head}");
}
