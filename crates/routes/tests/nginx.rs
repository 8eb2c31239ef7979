//! The routes crate against a real nginx (Debian's), in two independent sets of servers,
//! locations and requests: the same servers and locations written
//! as an nginx configuration and as [`routes::Spec`]s, and thousands of generated requests
//! (hosts × paths × methods: unnormalised paths, percent-encodings, `..`, mixed case, ports
//! and trailing dots in hosts, no host at all) sent to nginx; for each, the location nginx
//! chose (it passes the request to a server of its own with the location's number in a
//! header, which comes back), its 301 (nginx's auto-redirect of a proxied `location /p/` for
//! `/p`) or its 400 must be what `normalize` and `Table::select` say.
//!
//! nginx is required: without it the test fails (it does not skip).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use routes::{Headers, Host, PathMatch, Request, Selected, Spec, Table, normalize};

/// One nginx `server`: its names (empty: the default server, for the routes without `host`)
/// and its locations: nginx's modifier, the name, and whether it proxies (then a name ending
/// in `/` auto-redirects) or answers with `return`.
struct Server {
    names: &'static [&'static str],
    locations: &'static [(&'static str, &'static str, bool)],
}

/// The servers, hosts, paths and methods of one comparison.
struct Fixture {
    servers: &'static [Server],
    hosts: &'static [Option<&'static str>],
    paths: &'static [&'static str],
    methods: &'static [&'static str],
}

const SERVERS: &[Server] = &[
    Server {
        names: &[],
        locations: &[
            ("", "/", true),
            ("=", "/exact", true),
            ("", "/api/", true),
            ("", "/api/v1/", true),
            ("^~", "/static/", true),
            ("~", "\\.php$", true),
            ("~*", "\\.(jpg|png)$", true),
            ("=", "/e/", true),
        ],
    },
    Server {
        names: &["example.com", "www.example.com"],
        locations: &[
            ("", "/", true),
            ("=", "/", true),
            ("", "/app/", true),
            ("~", "^/app/[0-9]+$", true),
            ("^~", "/app/static/", true),
        ],
    },
    Server {
        names: &["*.example.com"],
        locations: &[("", "/", true), ("", "/x/", true), ("~*", "/X/Y", true)],
    },
    Server {
        names: &["www.example.*"],
        locations: &[("", "/", true), ("=", "/t", true)],
    },
    Server {
        names: &["~^api[0-9]+\\.example\\.(net|org)$"],
        locations: &[
            ("", "/", true),
            ("", "/v1/", true),
            ("~", "/v1/.*\\.json$", true),
        ],
    },
    Server {
        names: &[".example.org"],
        locations: &[("", "/", true), ("^~", "/o/", true), ("~", "/o/", true)],
    },
];

/// The routes, in the file order nginx's locations have here (server by server).
fn specs(servers: &[Server]) -> Vec<Spec> {
    let mut out = Vec::new();
    for server in servers {
        for &(modifier, name, proxied) in server.locations {
            let path = match modifier {
                "" => PathMatch::Prefix {
                    prefix: name.into(),
                    wins: false,
                },
                "^~" => PathMatch::Prefix {
                    prefix: name.into(),
                    wins: true,
                },
                "=" => PathMatch::Exact(name.into()),
                "~" | "~*" => PathMatch::Regex {
                    pattern: name.into(),
                    nocase: modifier == "~*",
                },
                other => panic!("modifier {other}"),
            };
            // A location that proxies auto-redirects when its name ends in `/`.
            let auto_redirect =
                proxied && !matches!(path, PathMatch::Regex { .. }) && name.ends_with('/');
            out.push(Spec {
                hosts: server.names.iter().map(|n| n.to_string()).collect(),
                path,
                auto_redirect,
                ..Spec::default()
            });
        }
    }
    out
}

fn nginx_config(dir: &Path, fixture: &[Server], listen: SocketAddr, back: SocketAddr) -> String {
    let d = dir.display();
    let mut servers = String::new();
    let mut n = 0;
    for server in fixture {
        let names = if server.names.is_empty() {
            " default_server".to_owned()
        } else {
            format!(";\n        server_name {}", server.names.join(" "))
        };
        writeln!(servers, "    server {{\n        listen {listen}{names};").unwrap();
        for &(modifier, name, proxied) in server.locations {
            let answer = if proxied {
                format!("proxy_set_header X-Route {n}; proxy_pass http://{back};")
            } else {
                format!("add_header X-Route {n} always; return 200 \"{n}\";")
            };
            writeln!(servers, "        location {modifier} {name} {{ {answer} }}").unwrap();
            n += 1;
        }
        servers.push_str("    }\n");
    }
    format!(
        "daemon off;
master_process off;
worker_processes 1;
error_log {d}/error.log;
pid {d}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen {back};
        location / {{ add_header X-Route $http_x_route always; return 200 \"$http_x_route\"; }}
    }}
{servers}}}
"
    )
}

/// The nginx binary: Debian's, or the first `nginx` on `PATH`.
fn nginx_binary() -> PathBuf {
    let debian = PathBuf::from("/usr/sbin/nginx");
    if debian.is_file() {
        return debian;
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("nginx"))
                .find(|c| c.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "nginx not found: install Debian's nginx package (apt-get install nginx); this \
                 differential test compares the routes with a real nginx and cannot run without it"
            )
        })
}

/// A port on a loopback address of this test's own (127.201.x.y), so nothing else in the run
/// can take it between here and nginx's bind.
fn free_addr(n: u8) -> SocketAddr {
    let ip = Ipv4Addr::new(127, 201, (std::process::id() % 250) as u8, 1 + n);
    let listener = TcpListener::bind((ip, 0)).expect("bind a port on the test's loopback address");
    listener.local_addr().expect("local address")
}

/// A running nginx, killed (by its PID) and its directory removed when dropped.
struct Nginx {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_nginx(label: &str, servers: &[Server], n: u8) -> Nginx {
    let dir = std::env::temp_dir().join(format!(
        "fulcrum-routes-nginx-{label}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (addr, back) = (free_addr(n), free_addr(n + 1));
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, nginx_config(&dir, servers, addr, back)).unwrap();
    let child = Command::new(nginx_binary())
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(&conf)
        .arg("-e")
        .arg(dir.join("error.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx runs");
    let mut nginx = Nginx { child, dir, addr };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = nginx.child.try_wait().unwrap() {
            let log = std::fs::read_to_string(nginx.dir.join("error.log")).unwrap_or_default();
            panic!("nginx exited at start-up ({status}):\n{log}");
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
            && TcpStream::connect_timeout(&back, Duration::from_millis(200)).is_ok()
        {
            return nginx;
        }
        assert!(Instant::now() < deadline, "nginx did not start in 10 s");
        // Polling interval of the deadline loop.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What nginx answered: its status and, for a 200, the location's number.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Route(usize),
    AddSlash(String),
    Status(u16),
}

fn ask(nginx: &Nginx, method: &str, host: Option<&str>, target: &str) -> Answer {
    let mut s = TcpStream::connect(nginx.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = match host {
        Some(host) => {
            format!("{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
        }
        None => format!("{method} {target} HTTP/1.0\r\n\r\n"),
    };
    s.write_all(head.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    let status: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{method} {target} ({host:?}): no status: {text:?}"));
    let header = |name: &str| {
        text.lines().take_while(|l| !l.is_empty()).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    };
    match status {
        200 => Answer::Route(
            header("x-route")
                .and_then(|v| v.parse().ok())
                .unwrap_or(usize::MAX),
        ),
        301 => Answer::AddSlash(header("location").unwrap_or_default()),
        other => Answer::Status(other),
    }
}

struct NoHeaders;
impl Headers for NoHeaders {
    fn has(&self, _: &str, _: &[u8]) -> bool {
        false
    }
}

/// What the routes say of the same request.
fn expect(table: &Table, method: &str, host: Option<&str>, target: &str) -> Answer {
    let path = target.split('?').next().unwrap_or_default();
    let query = target.split_once('?').map_or("", |(_, q)| q);
    let mut normalised = Vec::new();
    if normalize(path.as_bytes(), &mut normalised).is_err() {
        return Answer::Status(400);
    }
    let request = Request {
        host: Host::Sent(host.unwrap_or_default().as_bytes()),
        path: &normalised,
        method: method.as_bytes(),
        query: query.as_bytes(),
        headers: &NoHeaders,
    };
    match table.select(&request) {
        Selected::Route(i) => Answer::Route(i),
        // nginx's Location is absolute; the path with its slash is what is compared.
        Selected::AddSlash(_) => {
            let mut location = String::from_utf8_lossy(&normalised).into_owned();
            location.push('/');
            if !query.is_empty() {
                location.push('?');
                location.push_str(query);
            }
            Answer::AddSlash(location)
        }
        Selected::BadHost => Answer::Status(400),
        Selected::None => Answer::Status(404),
    }
}

const HOSTS: &[Option<&str>] = &[
    None,
    Some("example.com"),
    Some("www.example.com"),
    Some("EXAMPLE.COM"),
    Some("example.com:8080"),
    Some("example.com."),
    Some("a.example.com"),
    Some("A.B.example.com"),
    Some("www.example.net"),
    Some("www.example.co.uk"),
    Some("api1.example.net"),
    Some("API22.example.org"),
    Some("example.org"),
    Some("x.example.org"),
    Some("unknown.test"),
    Some("a..b"),
];

const PATHS: &[&str] = &[
    "/",
    "/exact",
    "/exact/",
    "/EXACT",
    "/e",
    "/e/",
    "/api",
    "/api/",
    "/api?q=1",
    "/api/x",
    "/api/v1",
    "/api/v1/x",
    "/api/../static/a",
    "/api/%2e%2e/static/a",
    "/api/%2E%2E/admin",
    "//api/x",
    "/api//v1/x",
    "/%61pi/x",
    "/API/x",
    "/static/a.php",
    "/a.php",
    "/A.PHP",
    "/img/a.JPG",
    "/img/a.png?x=1",
    "/app",
    "/app/",
    "/app/123",
    "/app/123/",
    "/app/%31%32%33",
    "/app/static/1.png",
    "/app/static",
    "/x",
    "/x/",
    "/x/Y",
    "/X/Y",
    "/x/y",
    "/t",
    "/t/",
    "/v1",
    "/v1/a.json",
    "/v1/a.JSON",
    "/o",
    "/o/",
    "/o/p",
    "/a/./b/../c",
    "/..",
    "/a/../..",
    "/a%2fb",
    "/a%2F..%2Fapi/",
    "/%zz",
    "/a%",
    "/a%3Fb.php",
    "/a%23b",
    "/a%20b.png",
];

const METHODS: &[&str] = &["GET", "HEAD", "DELETE"];

/// Sends every request of `fixture` to a real nginx and to the routes; panics with every one
/// answered differently.
fn compare(label: &str, fixture: &Fixture, n: u8) {
    let nginx = start_nginx(label, fixture.servers, n);
    let table = Table::build(&specs(fixture.servers)).expect("the routes build");
    let mut differ = Vec::new();
    let mut sent = 0;
    for &host in fixture.hosts {
        for path in fixture.paths {
            for method in fixture.methods {
                let got = ask(&nginx, method, host, path);
                let want = expect(&table, method, host, path);
                sent += 1;
                let same = match (&got, &want) {
                    // nginx's Location is absolute (http://host:port/...): its path must end
                    // the same.
                    (Answer::AddSlash(theirs), Answer::AddSlash(ours)) => {
                        theirs.ends_with(ours.as_str())
                    }
                    // No location: nginx's static handler answers, 404 to a GET or HEAD and
                    // 405 to other methods.
                    (Answer::Status(405), Answer::Status(404)) => {
                        !matches!(*method, "GET" | "HEAD")
                    }
                    _ => got == want,
                };
                if !same {
                    differ.push(format!(
                        "{method} {path} (Host {host:?}): nginx {got:?}, routes {want:?}"
                    ));
                }
            }
        }
    }
    println!(
        "{label}: {sent} requests, {} answered differently",
        differ.len()
    );
    assert!(sent >= 2000, "at least 2,000 requests: {sent}");
    assert!(
        differ.is_empty(),
        "{} of {sent} differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
}

#[test]
fn the_routes_choose_what_nginx_chooses() {
    let fixture = Fixture {
        servers: SERVERS,
        hosts: HOSTS,
        paths: PATHS,
        methods: METHODS,
    };
    compare("first", &fixture, 0);
}

/// A second set, written apart from the first (by another hand, on issue 28): more location
/// kinds side by side (`=` and prefix of one name, nested prefixes with `^~` inside, locations
/// that answer with `return`, a non-ASCII name), more hosts (IPv6, ports on wildcards, bad
/// ones) and paths.
#[test]
fn a_second_set_of_routes_chooses_what_nginx_chooses() {
    let fixture = Fixture {
        servers: SERVERS_2,
        hosts: HOSTS_2,
        paths: PATHS_2,
        methods: &["GET", "HEAD", "POST", "DELETE"],
    };
    compare("second", &fixture, 2);
}

const SERVERS_2: &[Server] = &[
    Server {
        names: &[],
        locations: &[
            ("=", "/", false),
            ("", "/", false),
            ("=", "/exact", false),
            ("", "/api/", true),
            ("^~", "/static/", false),
            ("~", "\\.php$", false),
            ("~*", "\\.(png|jpg)$", false),
            ("", "/img/", false),
            ("", "/img/deep/", false),
            ("=", "/e/", true),
            ("", "/docs", false),
            ("~", "^/api/v[0-9]+/", false),
            ("^~", "/img/deep/x", false),
            ("", "/caf\u{e9}/", false),
        ],
    },
    Server {
        names: &["www.example.com", "api.example.com"],
        locations: &[
            ("", "/api/", true),
            ("~*", "^/API", false),
            ("=", "/exact", false),
            ("", "/docs/", false),
        ],
    },
    Server {
        names: &["*.example.com"],
        locations: &[
            ("", "/", false),
            ("~", "\\.php$", false),
            ("^~", "/static/", false),
        ],
    },
    Server {
        names: &[".example.net"],
        locations: &[
            ("=", "/", false),
            ("", "/img/", false),
            ("~*", "\\.png$", false),
        ],
    },
    Server {
        names: &["www.example.*"],
        locations: &[("", "/api/", true), ("", "/ap", false)],
    },
    Server {
        names: &["~^v[0-9]+\\.example\\.org$"],
        locations: &[("~", "^/api/v[0-9]+/", false), ("", "/e/", true)],
    },
];

const HOSTS_2: &[Option<&str>] = &[
    None,
    Some("www.example.com"),
    Some("WWW.Example.Com:8080"),
    Some("api.example.com."),
    Some("a.example.com"),
    Some("x.y.Example.com"),
    Some("example.com"),
    Some("example.net"),
    Some("A.example.net."),
    Some("www.example.org"),
    Some("www.example.co.uk"),
    Some("v12.example.org"),
    Some("V3.EXAMPLE.ORG."),
    Some("v.example.org"),
    Some("unknown.test"),
    Some("a..b"),
    Some("bad/host"),
    Some("[::1]:80"),
    Some("a.example.com.:81"),
    Some("127.0.0.1"),
    Some("a b"),
];

const PATHS_2: &[&str] = &[
    "/",
    "/exact",
    "/exact/",
    "/EXACT",
    "/api",
    "/api/",
    "/api/x",
    "/api/v1/users",
    "/API/v2/",
    "/static/a.php",
    "/x.php",
    "/img/a.PNG",
    "/img/a.gif",
    "/img/deep/x.jpg",
    "/img/deep",
    "/img/deep/xy",
    "/e",
    "/e/",
    "/docs",
    "/docs/x",
    "//api//x",
    "/a/../api/v2/",
    "/%2e%2e/x",
    "/a/%2e%2e/exact",
    "/img%2Fa.png",
    "/x%3F.php",
    "/x%25.php",
    "/%zz",
    "/a%",
    "/..",
    "/./exact",
    "/exact/.",
    "/static/../x.php",
    "/x.PHP",
    "/x.Php?y=1",
    "/api?x",
    "/e?q=1",
    "/%00",
    "/caf%C3%A9/x",
    "/img/deep/../a.jpg",
    "/ap",
    "/d%6fcs",
    "/exact#frag",
    "/%2E/e",
    "/api/%2e/v3/",
    "/a/b/c/../../..",
    "/a/b/c/../../../..",
    "/.%2e/x",
    "/%2fexact",
    "/ap%69",
];
