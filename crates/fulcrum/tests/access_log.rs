//! The access log against nginx's: a template equal to nginx's `combined` writes, for the same
//! requests, the lines Debian's nginx writes with its `combined`; and `fulcrum check` refuses a
//! template with an unknown variable, saying where and which are known.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{HeldPort, Running, TempDir, TempFile};

/// nginx's `combined` (ngx_http_log_module.c's `ngx_http_combined_fmt`), as a template.
const COMBINED: &str = "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\"";

/// Requests whose lines exercise every part of `combined`: a user, escapes in the target and
/// the headers, an empty header, none at all, HTTP/1.0, HEAD, a 404.
const REQUESTS: &[&[u8]] = &[
    b"GET /a?x=\"1\"&y=%41 HTTP/1.1\r\nHost: example.com\r\nReferer: http://r.test/p\r\nUser-Agent: t \xff \"q\" \\ x\r\nAuthorization: Basic YWxpY2U6c2VjcmV0\r\nConnection: close\r\n\r\n",
    b"HEAD /b HTTP/1.0\r\n\r\n",
    b"GET /c HTTP/1.1\r\nHost: x\r\nUser-Agent:\r\nReferer: \r\nAuthorization: Bearer abc\r\nConnection: close\r\n\r\n",
    b"GET /missing/./x/../y HTTP/1.1\r\nHost: x\r\nAuthorization: Basic OnB3\r\nConnection: close\r\n\r\n",
];

/// Sends `request` on a new connection and reads the answer to its end.
fn send(to: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(to).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer
}

/// The lines of `path` once it has `n` (waiting up to 10 s).
fn lines(path: &std::path::Path, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = String::from_utf8(std::fs::read(path).unwrap_or_default()).unwrap();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(Instant::now() < deadline, "{n} lines in {path:?}: {text}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A line with its `[time]` taken out, and the time (`26/Nov/2026:23:12:21 +0000`) as
/// seconds counted from the start of its month, with its month and year.
fn without_time(line: &str) -> (String, (i64, String)) {
    let (open, close) = (line.find('[').unwrap(), line.find(']').unwrap());
    let time = &line[open + 1..close];
    let n = |at: std::ops::Range<usize>| -> i64 {
        time.get(at)
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{line}"))
    };
    let seconds = n(0..2) * 86400 + n(12..14) * 3600 + n(15..17) * 60 + n(18..20);
    assert_eq!(time.get(20..), Some(" +0000"), "{line}");
    (
        format!("{}[]{}", &line[..open], &line[close + 1..]),
        (seconds, time[3..11].to_owned()),
    )
}

#[test]
fn a_template_equal_to_combined_writes_nginx_s_lines() {
    let dir = TempDir::new("access-log", "combined");
    let (direct, backend) = (HeldPort::for_server(), HeldPort::for_server());
    let (direct, backend) = (direct.port(), backend.port());
    let d = dir.path();
    // One nginx: a server the test asks directly, logging in `combined`, and one (not logging)
    // that is fulcrum's backend; both answer alike.
    let conf = format!(
        "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nevents {{ worker_connections 64; }}\n\
         http {{\n  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};\n  \
         uwsgi_temp_path {d}; scgi_temp_path {d};\n  \
         server {{ listen 127.0.0.1:{direct}; access_log {d}/nginx.log;\n    \
         location / {{ return 200 \"hello\\n\"; }} location /missing {{ return 404; }} }}\n  \
         server {{ listen 127.0.0.1:{backend}; access_log off;\n    \
         location / {{ return 200 \"hello\\n\"; }} location /missing {{ return 404; }} }}\n}}\n"
    );
    let _nginx = common::spawn_nginx(&dir, &conf);
    let direct: SocketAddr = format!("127.0.0.1:{direct}").parse().unwrap();
    common::wait_until(Duration::from_secs(10), "nginx answers", || {
        TcpStream::connect(direct)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    let log = std::path::Path::new(d).join("fulcrum.log");
    let config = TempFile::new(
        "access-log-combined.toml",
        &format!(
            "workers = 1\naccess_log = \"{}\"\naccess_log_format = '{COMBINED}'\n\n\
             [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
             [[upstream]]\nname = \"web\"\n[[upstream.backend]]\naddr = \"127.0.0.1:{backend}\"\n",
            log.display()
        ),
    );
    let fulcrum = Running::start(&config, 1);
    let proxy = fulcrum.addr_of("web");
    for request in REQUESTS {
        let (theirs, ours) = (send(direct, request), send(proxy, request));
        // The same answer's status line (the body's bytes are counted by both).
        let status = |a: &[u8]| a.split(|&b| b == b'\r').next().unwrap().to_vec();
        assert_eq!(status(&theirs), status(&ours));
    }
    let nginx_lines = lines(&std::path::Path::new(d).join("nginx.log"), REQUESTS.len());
    let our_lines = lines(&log, REQUESTS.len());
    for (theirs, ours) in nginx_lines.iter().zip(&our_lines) {
        let ((theirs_text, theirs_time), (ours_text, ours_time)) =
            (without_time(theirs), without_time(ours));
        assert_eq!(
            ours_text, theirs_text,
            "\nnginx:   {theirs}\nfulcrum: {ours}"
        );
        // Each wrote the time it wrote its line: the same second, or the next.
        assert_eq!(ours_time.1, theirs_time.1, "{theirs}\n{ours}");
        assert!((ours_time.0 - theirs_time.0).abs() <= 1, "{theirs}\n{ours}");
    }
    assert_eq!(our_lines.len(), REQUESTS.len());
}

#[test]
fn check_refuses_an_unknown_variable_with_its_place_and_the_known_ones() {
    let config = TempFile::new(
        "access-log-unknown.toml",
        "workers = 1\naccess_log_format = '$remote_addr $stauts'\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
         [[upstream]]\nname = \"web\"\n[[upstream.backend]]\naddr = \"127.0.0.1:9\"\n",
    );
    let out = common::fulcrum()
        .args(["check", "--config"])
        .arg(&config.0)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "access_log_format: at character 14 of the template: unknown variable \"$stauts\"; known: $remote_addr, $remote_user, $time_local"
        ),
        "{err}"
    );
    assert!(
        err.contains("$http_NAME, $host, $request_id, $route, $fate, $upstream"),
        "{err}"
    );
}

/// `$upstream_addr` and `$upstream_status` list every backend a request tried, with what each
/// came to, as nginx writes them: a backend refusing the connection (502), one answering a 503
/// that `next_upstream` lists (503), then the one whose 200 is relayed — "502, 503, 200" from
/// both for the same request; `$upstream_response_time` has a time for each.
#[test]
fn the_upstream_trail_is_nginx_s() {
    let dir = TempDir::new("access-log", "trail");
    let refusing = HeldPort::refusing();
    let (busy, ok, front) = (
        HeldPort::for_server(),
        HeldPort::for_server(),
        HeldPort::for_server(),
    );
    let (busy, ok, front) = (busy.port(), ok.port(), front.port());
    let refused = refusing.addr;
    let d = dir.path();
    let format = "$upstream_addr|$upstream_status|$upstream_response_time";
    // nginx: the two backends, and a proxy in front of all three (the refusing port first)
    // that moves on after an error and a 503, keeping every server in (max_fails=0).
    let conf = format!(
        "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nevents {{ worker_connections 64; }}\n\
         http {{\n  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};\n  \
         uwsgi_temp_path {d}; scgi_temp_path {d};\n  \
         log_format trail '{format}';\n  \
         upstream three {{ server {refused} max_fails=0; server 127.0.0.1:{busy} max_fails=0; \
         server 127.0.0.1:{ok} max_fails=0; }}\n  \
         server {{ listen 127.0.0.1:{busy}; access_log off; location / {{ return 503; }} }}\n  \
         server {{ listen 127.0.0.1:{ok}; access_log off; location / {{ return 200 \"ok\\n\"; }} }}\n  \
         server {{ listen 127.0.0.1:{front}; access_log {d}/nginx.log trail;\n    \
         location / {{ proxy_pass http://three; proxy_next_upstream error timeout http_503; }} }}\n}}\n"
    );
    let _nginx = common::spawn_nginx(&dir, &conf);
    let front: SocketAddr = format!("127.0.0.1:{front}").parse().unwrap();
    common::wait_until(Duration::from_secs(10), "nginx answers", || {
        TcpStream::connect(front)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    let log = std::path::Path::new(d).join("fulcrum.log");
    let config = TempFile::new(
        "access-log-trail.toml",
        &format!(
            "workers = 1\naccess_log = \"{}\"\naccess_log_format = '{format}'\n\n\
             [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"three\"\n\n\
             [[upstream]]\nname = \"three\"\nnext_upstream = [\"error\", \"timeout\", \"http_503\"]\n\
             [[upstream.backend]]\naddr = \"{refused}\"\nmax_fails = 0\n\
             [[upstream.backend]]\naddr = \"127.0.0.1:{busy}\"\nmax_fails = 0\n\
             [[upstream.backend]]\naddr = \"127.0.0.1:{ok}\"\nmax_fails = 0\n",
            log.display()
        ),
    );
    let fulcrum = Running::start(&config, 1);
    let request = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    for to in [front, fulcrum.addr_of("three")] {
        let answer = send(to, request);
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    }
    let theirs = lines(&std::path::Path::new(d).join("nginx.log"), 1);
    let ours = lines(&log, 1);
    let fields = |line: &str| -> (String, String, usize) {
        let parts: Vec<&str> = line.split('|').collect();
        assert_eq!(parts.len(), 3, "{line}");
        // Each time is seconds with three decimals.
        let times: Vec<&str> = parts[2].split(", ").collect();
        for t in &times {
            let (s, ms) = t.split_once('.').unwrap_or_else(|| panic!("{line}"));
            assert!(s.parse::<u64>().is_ok() && ms.len() == 3, "{line}");
        }
        (parts[0].to_owned(), parts[1].to_owned(), times.len())
    };
    let (theirs, ours) = (fields(&theirs[0]), fields(&ours[0]));
    assert_eq!(
        theirs,
        (
            format!("{refused}, 127.0.0.1:{busy}, 127.0.0.1:{ok}"),
            "502, 503, 200".to_owned(),
            3
        )
    );
    assert_eq!(ours, theirs);
}
