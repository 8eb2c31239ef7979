//! Issue 29: `access` (allow / deny) answers every client address as nginx's own `allow` /
//! `deny` does: Debian's nginx and fulcrum, each with the same rules in front of the same
//! backend, asked by 200 client addresses across 127.0.0.0/8.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use common::{HeldPort, Running, TempDir, TempFile, status_from};

/// The rules, in order, as both take them (nginx: `allow X;` / `deny X;`).
const RULES: [&str; 6] = [
    "deny 127.0.0.5",
    "allow 127.0.0.0/26",
    "deny 127.0.1.0/24",
    "allow 127.0.0.0/16",
    "allow 127.2.0.0/15",
    "deny all",
];

#[test]
fn two_hundred_clients_get_nginx_s_allow_and_deny_answers() {
    let dir = TempDir::new("access", "nginx");
    let (front, backend) = (HeldPort::for_server(), HeldPort::for_server());
    let (front, backend) = (front.port(), backend.port());
    let d = dir.path();
    let rules: String = RULES.iter().map(|r| format!("    {r};\n")).collect();
    // One nginx: the rules on a server that proxies to another (a `return` would answer
    // before the access phase), and that other server, which is fulcrum's backend too.
    let conf = format!(
        "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nevents {{ worker_connections 256; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};\n  \
         uwsgi_temp_path {d}; scgi_temp_path {d};\n  \
         server {{ listen 127.0.0.1:{front};\n{rules}    location / {{ proxy_pass http://127.0.0.1:{backend}; }} }}\n  \
         server {{ listen 127.0.0.1:{backend}; location / {{ return 200 \"ok\\n\"; }} }}\n}}\n"
    );
    let _nginx = common::spawn_nginx(&dir, &conf);
    let front: SocketAddr = format!("127.0.0.1:{front}").parse().unwrap();
    common::wait_until(Duration::from_secs(10), "nginx answers", || {
        std::net::TcpStream::connect(front)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    let access: Vec<String> = RULES.iter().map(|r| format!("\"{r}\"")).collect();
    let config = TempFile::new(
        "access-nginx.toml",
        &format!(
            "workers = 1\naccess_log = false\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\naccess = [{}]\n\n\
             [[upstream]]\nname = \"web\"\n[[upstream.backend]]\naddr = \"127.0.0.1:{backend}\"\n",
            access.join(", ")
        ),
    );
    let fulcrum = Running::start(&config, 1);
    let proxy = fulcrum.addr_of("web");
    // 200 addresses: in and around each rule's range.
    let clients: Vec<IpAddr> = (1..=70u8)
        .map(|i| IpAddr::from([127, 0, 0, i]))
        .chain((1..=40u8).map(|i| IpAddr::from([127, 0, 1, i])))
        .chain((1..=30u8).map(|i| IpAddr::from([127, 0, 2, i])))
        .chain((1..=20u8).map(|i| IpAddr::from([127, 1, 0, i])))
        .chain((1..=20u8).map(|i| IpAddr::from([127, 2, 5, i])))
        .chain((1..=20u8).map(|i| IpAddr::from([127, 3, 9, i])))
        .collect();
    assert_eq!(clients.len(), 200);
    let mut differ = Vec::new();
    let (mut allowed, mut denied) = (0, 0);
    for &client in &clients {
        let (theirs, ours) = (status_from(client, front), status_from(client, proxy));
        if theirs != ours {
            differ.push(format!("{client}: nginx {theirs}, fulcrum {ours}"));
        }
        match theirs {
            200 => allowed += 1,
            403 => denied += 1,
            other => panic!("{client}: nginx answered {other}"),
        }
    }
    println!(
        "access: 200 clients, {allowed} allowed and {denied} denied by nginx; {} differ",
        differ.len()
    );
    assert!(
        differ.is_empty(),
        "{} differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
    // Both kinds of answer were compared.
    assert!(
        allowed > 50 && denied > 50,
        "{allowed} allowed, {denied} denied"
    );
}
