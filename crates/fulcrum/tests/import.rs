//! `fulcrum import`: nginx's syntax (quotes, comments, includes with globs, errors with
//! file:line), the translation of each construct, and the command run on Debian's shipped
//! configuration and on three realistic ones (tests/import/): each output accepted by
//! `fulcrum check`, each directive left out listed, the exit status telling whether one of
//! them changes behaviour. The three configurations are also checked by the real nginx
//! (`nginx -t`), so they are nginx's syntax and not only ours.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::TempDir;
use fulcrum::import::{parse, translate};

/// `files` (name, text) written under a fresh directory; the first is the main file.
fn write_conf(dir: &TempDir, files: &[(&str, &str)]) -> PathBuf {
    for (name, text) in files {
        let path = dir.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, text).unwrap();
    }
    dir.0.join(files[0].0)
}

/// The TOML and notes for one nginx configuration given as text.
fn translated(text: &str) -> translate::Translation {
    let dir = TempDir::new("import", "t");
    let main = write_conf(&dir, &[("nginx.conf", text)]);
    translate::translate(&parse::parse_file(&main).unwrap())
}

/// `fulcrum ARGS`.
fn fulcrum(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .args(args)
        .output()
        .unwrap()
}

/// Asserts that the importer's report `err` lists each of `listed`.
fn assert_listed(err: &str, listed: &[&str]) {
    for listed in listed {
        assert!(err.contains(listed), "{listed} not listed:\n{err}");
    }
}

#[test]
fn quotes_escapes_comments_and_variables() {
    let t = translated(
        "http { # a comment; not a directive\n server { listen 8080; server_name 'a.example' \"b.example\";\n location ~ \\.php$ { return 200 \"x\\\"y # z\\n\"; }\n location /v { proxy_pass http://${up}; } } }\n",
    );
    assert!(t.toml.contains(r#"path_regex = "\\.php$""#), "{}", t.toml);
    assert!(t.toml.contains(r#"body = "x\"y # z\n""#), "{}", t.toml);
    assert!(
        t.toml.contains(r#"host = ["a.example", "b.example"]"#),
        "{}",
        t.toml
    );
    // A variable in proxy_pass is kept as text and reported, not resolved.
    assert!(
        t.notes
            .iter()
            .any(|n| n.directive == "proxy_pass" && !n.cosmetic)
    );
}

#[test]
fn includes_by_glob_relative_to_the_main_file() {
    let dir = TempDir::new("import", "glob");
    let main = write_conf(
        &dir,
        &[
            (
                "etc/nginx.conf",
                "http {\n include sites/*.conf;\n include none/*.conf;\n}\n",
            ),
            ("etc/sites/b.conf", "server { listen 81; }\n"),
            ("etc/sites/a.conf", "upstream u { server 127.0.0.1:1; }\n"),
            ("etc/sites/c.txt", "this is not nginx {\n"),
        ],
    );
    let conf = parse::parse_file(&main).unwrap();
    let http = conf[0].block.as_ref().unwrap();
    let names: Vec<_> = http.iter().map(|d| d.name.as_str()).collect();
    // In name order (a.conf before b.conf), c.txt not matched, an empty glob no error.
    assert_eq!(names, ["upstream", "server"]);
    assert!(
        http[1].at().ends_with("etc/sites/b.conf:1"),
        "{}",
        http[1].at()
    );
}

#[test]
fn errors_name_file_and_line_and_exit_2() {
    let dir = TempDir::new("import", "err");
    let main = write_conf(
        &dir,
        &[
            (
                "nginx.conf",
                "events {}\nhttp {\n  include broken.conf;\n}\n",
            ),
            (
                "broken.conf",
                "server {\n  listen 80;\n  location / {\n    return 200 'open;\n",
            ),
        ],
    );
    let out = fulcrum(&["import", main.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("broken.conf:4"), "{err}");
    let missing = write_conf(
        &dir,
        &[("m.conf", "http {\n\n  include nowhere.conf;\n}\n")],
    );
    let out = fulcrum(&["import", missing.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("m.conf:3") && err.contains("nowhere.conf"),
        "{err}"
    );
}

#[test]
fn returns_as_redirects_and_answers() {
    let t = translated(concat!(
        "http { default_type text/html; server { listen 80; server_name a;\n",
        "location /1 { return 301 https://$host$request_uri; }\n",
        "location /2 { return 302 /login; }\n",
        "location /3 { return https://new.example:8443/x; }\n",
        "location /4 { return 308 $scheme://other.example$request_uri; }\n",
        "location /5 { return 403 'no'; }\n",
        "location /6 { return 301 https://$host/a?$args; }\n",
        "} }\n",
    ));
    let toml = &t.toml;
    assert!(
        toml.contains(r#"redirect = { status = 301, scheme = "https" }"#),
        "{toml}"
    );
    assert!(
        toml.contains(r#"redirect = { status = 302, path = "/login" }"#),
        "{toml}"
    );
    assert!(toml.contains(r#"redirect = { status = 302, scheme = "https", host = "new.example", port = 8443, path = "/x" }"#), "{toml}");
    assert!(
        toml.contains(r#"redirect = { status = 308, host = "other.example" }"#),
        "{toml}"
    );
    assert!(
        toml.contains(r#"respond = { status = 403, body = "no", content_type = "text/html" }"#),
        "{toml}"
    );
    // A path with variables cannot be written yet: reported as a change of behaviour.
    assert!(
        t.notes
            .iter()
            .any(|n| n.why.contains("path with variables") && !n.cosmetic)
    );
}

#[test]
fn proxy_pass_uri_parts_and_upstreams() {
    let t = translated(concat!(
        "http { upstream app { server 10.0.0.1 weight=3; server 10.0.0.2:81 backup; }\n",
        "server { listen 80; server_name a;\n",
        "location /a/ { proxy_pass http://app/; }\n",
        "location /b/ { proxy_pass http://app/v2/; }\n",
        "location /c/ { proxy_pass http://127.0.0.1:9000; }\n",
        "location ~ ^/d { proxy_pass http://app/x/; }\n",
        "} }\n",
    ));
    let toml = &t.toml;
    assert!(toml.contains("strip_prefix = true"), "{toml}");
    assert!(toml.contains(r#"rewrite_prefix = "/v2/""#), "{toml}");
    assert!(
        toml.contains("addr = \"10.0.0.1:80\"\nweight = 3"),
        "{toml}"
    );
    assert!(toml.contains("backup = true"), "{toml}");
    assert!(toml.contains("name = \"127.0.0.1:9000\""), "{toml}");
    // nginx sends Host: $proxy_host unless told otherwise.
    assert!(
        toml.contains(r#"request_headers = { set = { "Host" = "app" } }"#),
        "{toml}"
    );
    assert!(
        t.notes
            .iter()
            .any(|n| n.why.contains("nginx refuses") && !n.cosmetic)
    );
}

#[test]
fn header_inheritance_follows_nginx() {
    let t = translated(concat!(
        "http { add_header X-A 1 always; proxy_set_header X-P p;\n",
        "server { listen 80; server_name a;\n",
        "location /in { proxy_pass http://u:1; }\n",
        "location /own { add_header X-B 2 always; proxy_set_header X-Q q; proxy_set_header Host $host; proxy_pass http://u:1; }\n",
        "} }\n",
    ));
    let routes: Vec<&str> = t.toml.split("[[listener.route]]").skip(1).collect();
    let inherit = routes
        .iter()
        .find(|r| r.contains("path = \"/in\""))
        .unwrap();
    let own = routes
        .iter()
        .find(|r| r.contains("path = \"/own\""))
        .unwrap();
    assert!(
        inherit.contains(r#"add = { "X-A" = "1" }"#) && inherit.contains(r#""X-P" = "p""#),
        "{inherit}"
    );
    // A level with any add_header (proxy_set_header) inherits none of them.
    assert!(!own.contains("X-A") && !own.contains("X-P"), "{own}");
    assert!(
        own.contains(r#""X-Q" = "q""#) && own.contains(r#""Host" = "$host""#),
        "{own}"
    );
}

#[test]
fn default_server_twice_and_serverless_locations() {
    let t = translated(concat!(
        "http { server { listen 80; server_name first; location / { return 200 a; } }\n",
        "server { listen 80 default_server; server_name second; }\n",
        "server { listen 127.0.0.1:81; listen 82; return 410; } }\n",
    ));
    let toml = &t.toml;
    // The default server's routes come once with its names and once without host.
    assert!(
        toml.contains("name = \"second\"\nhost = [\"second\"]\nrespond = { status = 404 }"),
        "{toml}"
    );
    assert!(
        toml.contains("name = \"default\"\nrespond = { status = 404 }"),
        "{toml}"
    );
    assert_eq!(toml.matches("host = [\"first\"]").count(), 1, "{toml}");
    // A server on two addresses gives its routes to both listeners.
    assert!(
        toml.contains("listen = \"127.0.0.1:81\"") && toml.contains("listen = \"0.0.0.0:82\""),
        "{toml}"
    );
    assert_eq!(toml.matches("status = 410").count(), 2, "{toml}");
}

/// Copies `from`'s files into `to` (one level of subdirectories).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else if e.path().is_file() {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// `fulcrum import CONF --out OUT`, then `fulcrum check --config OUT`: the import's exit
/// status and stderr; panics unless check accepts the output.
fn import_and_check(conf: &Path) -> (i32, String) {
    let out = conf.with_extension("toml");
    let import = fulcrum(&[
        "import",
        conf.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&import.stderr).into_owned();
    let check = fulcrum(&["check", "--config", out.to_str().unwrap()]);
    assert!(
        check.status.success(),
        "check refused the import of {}:\n{}\n{}\n{err}",
        conf.display(),
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    (import.status.code().unwrap_or(-1), err)
}

#[test]
fn debians_shipped_configuration() {
    let etc = Path::new("/etc/nginx");
    assert!(
        etc.join("nginx.conf").is_file(),
        "needs Debian's nginx: apt-get install -y nginx"
    );
    let dir = TempDir::new("import", "debian");
    copy_dir(etc, &dir.0);
    // Its includes are absolute (/etc/nginx/...): point them at the copy.
    let main = dir.0.join("nginx.conf");
    let text = std::fs::read_to_string(&main)
        .unwrap()
        .replace("/etc/nginx/", &format!("{}/", dir.path()));
    std::fs::write(&main, text).unwrap();
    let (code, err) = import_and_check(&main);
    // The default site serves files (root, try_files): a change of behaviour, listed.
    assert_eq!(code, 1, "{err}");
    assert_listed(
        &err,
        &[
            "try_files: ",
            "root: ",
            "sendfile: ",
            "gzip: ",
            "ssl_protocols: ",
        ],
    );
    assert!(err.contains("sites-enabled/default:"), "{err}");
}

/// tests/import/ copied to a fresh directory with a certificate for the TLS site.
fn realistic() -> TempDir {
    let dir = TempDir::new("import", "realistic");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import"),
        &dir.0,
    );
    common::localhost_certificate(&dir.0);
    dir
}

#[test]
fn tls_site_with_http_to_https_redirect() {
    let dir = realistic();
    let (code, err) = import_and_check(&dir.0.join("tls-site.conf"));
    assert_eq!(code, 0, "only cosmetic directives are left out:\n{err}");
    let toml = std::fs::read_to_string(dir.0.join("tls-site.toml")).unwrap();
    assert!(
        toml.contains(r#"redirect = { status = 301, scheme = "https" }"#),
        "{toml}"
    );
    assert!(
        toml.contains(
            r#"redirect = { status = 308, scheme = "https", host = "blog.example.com" }"#
        ),
        "{toml}"
    );
    assert!(
        toml.contains("[[listener.tls]]") && toml.contains("http2 = true"),
        "{toml}"
    );
    assert!(
        toml.contains(r#""Strict-Transport-Security" = "max-age=63072000""#),
        "{toml}"
    );
    assert_listed(
        &err,
        &[
            "ssl_protocols: ",
            "keepalive: ",
            "sendfile: ",
            "X-Forwarded-For",
        ],
    );
}

#[test]
fn api_static_and_websocket_paths() {
    let dir = realistic();
    let (code, err) = import_and_check(&dir.0.join("api-static-ws.conf"));
    assert_eq!(code, 1, "static files and expires change behaviour:\n{err}");
    let toml = std::fs::read_to_string(dir.0.join("api-static-ws.toml")).unwrap();
    assert!(toml.contains("upgrade = [\"websocket\"]"), "{toml}");
    assert!(toml.contains("rewrite_prefix = \"/v1/\""), "{toml}");
    assert!(
        toml.contains("path = \"/static/\"\nprefix_wins = true"),
        "{toml}"
    );
    assert!(
        toml.contains(r#"path_regex_nocase = "\\.(png|jpg|css|js)$""#),
        "{toml}"
    );
    assert!(
        toml.contains("retries = 2") && toml.contains("connect_timeout = \"2s\""),
        "{toml}"
    );
    // proxy_next_upstream's conditions by the same names; the one fulcrum lacks is listed.
    assert!(
        toml.contains(r#"next_upstream = ["error", "timeout", "http_503"]"#),
        "{toml}"
    );
    assert!(
        err.contains("`http_404`: fulcrum's next_upstream has no such condition"),
        "{err}"
    );
    assert!(
        toml.contains("max_body_bytes = 10485760")
            && toml.contains("client_body_timeout = \"30s\""),
        "{toml}"
    );
    // The location's own limit cannot be expressed: listed.
    assert_listed(
        &err,
        &[
            "expires: ",
            "root: ",
            "client_max_body_size: max_body_bytes = 52428800",
            "map: ",
        ],
    );
}

#[test]
fn several_upstreams_with_weights_and_backups() {
    let dir = realistic();
    let (code, err) = import_and_check(&dir.0.join("weighted-upstreams.conf"));
    // Nothing left out changes behaviour now that allow/deny are translated.
    assert_eq!(code, 0, "{err}");
    let toml = std::fs::read_to_string(dir.0.join("weighted-upstreams.toml")).unwrap();
    for expected in [
        "weight = 5",
        "backup = true",
        "max_conns = 100",
        "down = true",
        "algorithm = \"ip_hash\"",
        "algorithm = \"random_two\"",
        "hash_key = \"cookie:session\"",
        "consistent = true",
        "addr = \"localhost:9701\"",
        "remove = [\"X-Debug\"]",
        "host = [\"reports.example.net\", \"*.reports.example.net\"]",
        "access = [\"allow 10.0.0.0/8\", \"deny all\"]",
    ] {
        assert!(toml.contains(expected), "{expected} missing:\n{toml}");
    }
    assert!(!err.contains("allow: ") && !err.contains("deny: "), "{err}");
}

/// The real nginx accepts the three configurations (`nginx -t`, its own prefix and pid file
/// under a temp dir): they are nginx's syntax, not only what our parser takes.
#[test]
fn nginx_accepts_the_realistic_configurations() {
    let dir = realistic();
    for conf in [
        "tls-site.conf",
        "api-static-ws.conf",
        "weighted-upstreams.conf",
    ] {
        let path = dir.0.join(conf);
        let out = Command::new("/usr/sbin/nginx")
            .args(["-t", "-p", dir.path(), "-e", "stderr", "-c"])
            .arg(&path)
            .args(["-g", &format!("pid {}/nginx.pid;", dir.path())])
            .output()
            .expect("needs Debian's nginx: apt-get install -y nginx");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || err.contains("is successful"),
            "{conf}: {err}"
        );
    }
}

/// `conf` as a test's nginx runs it: one process in the foreground (so that the test's guard,
/// which kills it by its PID, stops all of it), its pid file in `dir`. Without these lines
/// nginx daemonised and outlived the test.
fn in_foreground(dir: &TempDir, conf: &str) -> String {
    format!(
        "daemon off;\nmaster_process off;\npid {}/nginx.pid;\n{conf}",
        dir.path()
    )
}

/// A backend answering every request with `X-Backend: NAME` and the request line it got as
/// its body, connection by connection, until the test ends.
fn echo_backend(name: &'static str) -> std::net::SocketAddr {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                }
                let body = line.trim_end();
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nX-Backend: {name}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = out.write_all(answer.as_bytes());
            });
        }
    });
    addr
}

/// `GET target` with `Host: host`: status, `X-Backend`, `Location`, and the body when a
/// backend answered (nginx's and fulcrum's own error pages differ, and are not compared).
fn answer(to: std::net::SocketAddr, host: &str, target: &str) -> String {
    ask(to, "GET", host, target)
}

/// As [`answer`], with `method`.
fn ask(to: std::net::SocketAddr, method: &str, host: &str, target: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(to).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        s,
        "{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("none")
        .to_owned();
    let mut backend = None;
    let mut location = None;
    let mut site = None;
    for l in lines {
        if let Some((n, v)) = l.split_once(':') {
            match n.trim().to_ascii_lowercase().as_str() {
                "x-backend" => backend = Some(v.trim().to_owned()),
                "location" => location = Some(v.trim().to_owned()),
                "x-site" => site = Some(v.trim().to_owned()),
                _ => {}
            }
        }
    }
    // nginx talks HTTP/1.0 to backends (proxy_http_version), fulcrum 1.1: not compared.
    let body = if backend.is_some() {
        body.trim_end_matches(" HTTP/1.0")
            .trim_end_matches(" HTTP/1.1")
    } else {
        ""
    };
    // nginx writes its listen port into a relative redirect, fulcrum the Host's: the port of
    // an absolute Location is not compared.
    let location = location.map(|l| match l.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = match authority.rsplit_once(':') {
                Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
                _ => authority,
            };
            format!("{scheme}://{host}{tail}")
        }
        None => l,
    });
    format!("{status} backend={backend:?} location={location:?} site={site:?} {body}")
}

/// The imported configuration sends each request where nginx sends it: one configuration
/// run by the real nginx and, translated, by fulcrum; every host × path asked of both.
#[test]
fn the_translation_routes_as_nginx_does() {
    let (a, b) = (echo_backend("a"), echo_backend("b"));
    let dir = TempDir::new("import", "nginx");
    let port = common::HeldPort::for_server();
    let conf = format!(
        r#"events {{}}
http {{
    access_log off;
    upstream a {{ server {a}; }}
    upstream b {{ server {b}; }}
    server {{
        listen 127.0.0.1:{p};
        server_name one.test;
        location / {{ proxy_pass http://a; }}
        location /api/ {{ proxy_pass http://b/v1/; }}
        location = /x {{ return 301 https://$host$request_uri; }}
        location ~ \.png$ {{ proxy_pass http://b; }}
    }}
    server {{
        listen 127.0.0.1:{p} default_server;
        server_name *.two.test two.example;
        location / {{ proxy_pass http://b/; }}
        location ^~ /s/ {{ return 403; }}
        location /api/ {{ return 302 /moved; }}
    }}
}}
"#,
        p = port.port()
    );
    let nginx = common::spawn_nginx(&dir, &in_foreground(&dir, &conf));
    let nginx_addr: std::net::SocketAddr = format!("127.0.0.1:{}", port.port()).parse().unwrap();
    drop(port);
    let main = dir.0.join("nginx.conf");
    let parsed = parse::parse_file(&main).unwrap();
    let t = translate::translate(&parsed);
    // The one difference listed: `return 302 /moved` drops the query in nginx only.
    let listed: Vec<_> = t.notes.iter().filter(|n| !n.cosmetic).collect();
    assert!(
        listed.len() == 1 && listed[0].why.contains("query"),
        "{listed:?}"
    );
    let toml = format!("workers = 1\naccess_log = false\n{}", t.toml)
        .replace(&nginx_addr.to_string(), "127.0.0.1:0");
    let config = common::TempFile::new("import-diff.toml", &toml);
    let running = common::Running::start(&config, 1);
    let fulcrum_addr = running.listening[0].1;
    common::wait_until(std::time::Duration::from_secs(10), "nginx answers", || {
        std::net::TcpStream::connect(nginx_addr)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    let mut differ = Vec::new();
    let mut asked = 0;
    for host in ["one.test", "x.two.test", "two.example", "other.test"] {
        for path in [
            "/",
            "/api/u?q=1",
            "/x",
            "/a.png",
            "/api/b.png",
            "/s/a",
            "/s/a.png",
            "/z/y",
        ] {
            asked += 1;
            let (n, f) = (
                answer(nginx_addr, host, path),
                answer(fulcrum_addr, host, path),
            );
            let known = n.replace("/moved\")", "/moved?q=1\")");
            if n != f && known != f {
                differ.push(format!("{host}{path}: nginx {n} | fulcrum {f}"));
            }
        }
    }
    drop(nginx);
    assert!(
        differ.is_empty(),
        "{} of {asked} differ:\n{}\n{toml}",
        differ.len(),
        differ.join("\n")
    );
}

/// The site of the large differential test: 4 servers, 14 locations of every kind, proxies,
/// a redirect, a fixed answer, and `add_header` at a server's level and a location's.
fn site(
    listen: &str,
    a: std::net::SocketAddr,
    b: std::net::SocketAddr,
    c: std::net::SocketAddr,
) -> String {
    format!(
        r#"events {{ worker_connections 256; }}
http {{
    access_log off;
    upstream a {{ server {a}; }}
    upstream b {{ server {b}; }}
    upstream c {{ server {c}; }}
    server {{
        listen {listen} default_server;
        location / {{ proxy_pass http://a; }}
        location = /exact {{ proxy_pass http://b; }}
        location /api/ {{ proxy_pass http://b; }}
        location ^~ /static/ {{ proxy_pass http://c; }}
        location ~ \.php$ {{ proxy_pass http://c; }}
        location ~* \.(png|jpg)$ {{ proxy_pass http://b; }}
    }}
    server {{
        listen {listen};
        server_name www.example.com example.com;
        add_header X-Site www always;
        location / {{ proxy_pass http://b; }}
        location /app/ {{ proxy_pass http://c/; }}
        location = /old {{ return 301 https://$host$request_uri; }}
    }}
    server {{
        listen {listen};
        server_name *.example.com;
        location / {{ proxy_pass http://c; }}
        location ~ ^/v[0-9]+/ {{ proxy_pass http://a; }}
    }}
    server {{
        listen {listen};
        server_name ~^api[0-9]*\.example\.org$;
        location / {{ proxy_pass http://a; add_header X-Site api always; }}
        location /gone/ {{ return 410; }}
        location ^~ /b/ {{ proxy_pass http://b; }}
    }}
}}
"#
    )
}

/// Issue 28's first showing, at scale: the site above served by a real nginx and by fulcrum on
/// its translation, 2,100 generated requests (10 hosts × 30 paths, unnormalised and
/// percent-encoded ones among them, × 7 methods), each answered alike: the same backend and
/// path it got, or the same status and `Location`.
#[test]
fn nginx_and_fulcrum_answer_2100_requests_alike() {
    let (a, b, c) = (echo_backend("a"), echo_backend("b"), echo_backend("c"));
    let dir = TempDir::new("import", "nginx-large");
    let port = common::HeldPort::for_server();
    let nginx_addr: std::net::SocketAddr = format!("127.0.0.1:{}", port.port()).parse().unwrap();
    let conf = site(&nginx_addr.to_string(), a, b, c);
    let nginx = common::spawn_nginx(&dir, &in_foreground(&dir, &conf));
    drop(port);
    let parsed = parse::parse_file(&dir.0.join("nginx.conf")).unwrap();
    let t = translate::translate(&parsed);
    let toml = format!("workers = 1\naccess_log = false\n{}", t.toml)
        .replace(&nginx_addr.to_string(), "127.0.0.1:0");
    let config = common::TempFile::new("import-diff-large.toml", &toml);
    let running = common::Running::start(&config, 1);
    let fulcrum_addr = running.listening[0].1;
    common::wait_until(std::time::Duration::from_secs(10), "nginx answers", || {
        std::net::TcpStream::connect(nginx_addr)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    let hosts = [
        "unknown.test",
        "www.example.com",
        "EXAMPLE.com",
        "example.com:8080",
        "a.example.com",
        "x.y.example.com",
        "api.example.org",
        "api7.example.org",
        "example.org",
        "www.example.com.",
    ];
    let paths = [
        "/",
        "/exact",
        "/exact/",
        "/api",
        "/api/",
        "/api/x",
        "/API/x",
        "/static/a.php",
        "/x.php",
        "/x.PNG",
        "/img/a.jpg",
        "/app",
        "/app/",
        "/app/1",
        "/old",
        "/old?x=1",
        "/v1/a",
        "/v12/b",
        "/gone/",
        "/gone/x",
        "/b/x.php",
        "/b",
        "//api/x",
        "/api/../static/x.php",
        "/api/%2e%2e/exact",
        "/%61pp/",
        "/a/./b/../c",
        "/static/../x.png",
        "/q?x=/api/",
        "/api/x?y=1",
    ];
    let methods = ["GET", "HEAD", "POST", "DELETE", "PUT", "OPTIONS", "PATCH"];
    let (mut asked, mut differ) = (0, Vec::new());
    for host in hosts {
        for path in paths {
            for method in methods {
                asked += 1;
                let (n, f) = (
                    ask(nginx_addr, method, host, path),
                    ask(fulcrum_addr, method, host, path),
                );
                if n != f {
                    differ.push(format!("{method} {host}{path}: nginx {n} | fulcrum {f}"));
                }
            }
        }
    }
    drop(nginx);
    println!("{asked} requests, {} answered differently", differ.len());
    assert!(asked >= 2000, "{asked}");
    assert!(
        differ.is_empty(),
        "{} of {asked} differ:\n{}\n{toml}",
        differ.len(),
        differ.join("\n")
    );
}

/// allow/deny, limit_req and limit_conn with their zones and statuses, inherited as nginx
/// inherits them (a level with any of its own takes none from above), written on each route;
/// `fulcrum check` accepts the result; what fulcrum cannot limit by is listed.
#[test]
fn access_and_limits_follow_nginx() {
    let dir = TempDir::new("import", "limits");
    let main = write_conf(
        &dir,
        &[(
            "nginx.conf",
            concat!(
                "http {\n",
                "limit_req_zone $binary_remote_addr zone=per_ip:10m rate=10r/s;\n",
                "limit_req_zone $http_x_api_key zone=per_key:1m rate=30r/m;\n",
                "limit_req_zone $request_uri zone=per_uri:1m rate=1r/s;\n",
                "limit_conn_zone $remote_addr zone=conns:10m;\n",
                "limit_req_status 429;\n",
                "server { listen 127.0.0.1:8080; server_name a;\n",
                "  allow 10.0.0.0/8; deny all;\n",
                "  limit_req zone=per_ip burst=20 nodelay;\n",
                "  limit_conn conns 10;\n",
                "  location /in { proxy_pass http://127.0.0.1:9001; }\n",
                "  location /own { allow 192.168.0.0/16; deny all; limit_req zone=per_key burst=5 delay=2; proxy_pass http://127.0.0.1:9001; }\n",
                "  location /uri { limit_req zone=per_uri; proxy_pass http://127.0.0.1:9001; }\n",
                "  location /also { limit_req zone=per_key; proxy_pass http://127.0.0.1:9001; }\n",
                "} }\n",
            ),
        )],
    );
    let t = translate::translate(&parse::parse_file(&main).unwrap());
    let (listener, routes) = t.toml.split_once("[[listener.route]]").unwrap();
    let routes: Vec<&str> = routes.split("[[listener.route]]").collect();
    let route = |path: &str| {
        *routes
            .iter()
            .find(|r| r.contains(&format!("path = \"{path}\"")))
            .unwrap_or_else(|| panic!("no route {path}:\n{}", t.toml))
    };
    // The server's list and limits are the listener's: one state for all its routes, as one
    // nginx zone for every location inheriting them.
    for line in [
        r#"access = ["allow 10.0.0.0/8", "deny all"]"#,
        r#"limit_req = { rate = "10r/s", key = "client_ip", burst = 20, nodelay = true, status = 429, zone_size = 81920 }"#,
        r#"limit_conn = { key = "client_ip", max = 10, status = 503 }"#,
    ] {
        assert!(
            listener.contains(line),
            "{line} not on the listener:\n{listener}"
        );
    }
    let inherit = route("/in");
    assert!(
        !inherit.contains("access") && !inherit.contains("limit_"),
        "{inherit}"
    );
    // A location's own replace the listener's on its route, each apart (nginx's merge).
    let own = route("/own");
    assert!(
        own.contains(r#"access = ["allow 192.168.0.0/16", "deny all"]"#),
        "{own}"
    );
    assert!(
        own.contains(r#"limit_req = { rate = "30r/m", key = "header:X-Api-Key", burst = 5, delay = 2, status = 429, zone_size = 8192 }"#),
        "{own}"
    );
    assert!(!own.contains("limit_conn"), "{own}");
    // One zone named by two locations: one state in nginx, one per route here — listed.
    assert!(
        route("/also").contains("header:X-Api-Key"),
        "{}",
        route("/also")
    );
    assert!(
        t.notes
            .iter()
            .any(|n| n.why.contains("zone per_key is named in 2 places")),
        "{:?}",
        t.notes
    );
    // A key fulcrum cannot limit by: that route gets none, and it is listed.
    assert!(!route("/uri").contains("limit_req"), "{}", route("/uri"));
    assert!(
        t.notes
            .iter()
            .any(|n| n.directive == "limit_req" && n.why.contains("$request_uri")),
        "{:?}",
        t.notes
    );
    let (_, err) = import_and_check(&main);
    assert!(err.contains("$request_uri"), "{err}");
}
