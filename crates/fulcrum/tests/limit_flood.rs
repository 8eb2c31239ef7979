//! Issue 29: a flood of distinct client addresses cannot grow `limit_req`'s state past its
//! `zone_size`, nor free a legitimate client from its limit. 100,000 requests, each from an
//! address of its own across 127.0.0.0/8, go through a listener with `zone_size = 1000`
//! while one client, every 100 of them, asks faster than its 1r/s: fulcrum's resident memory
//! grows by less than the keys beyond the zone would take (about 10 MB for 100,000), and that
//! client is refused all but about once a second throughout (it is the most recently used key
//! at each of its requests, so the least recently used ones go first).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::{Running, TempFile, status_from};

/// Distinct addresses in the flood.
const FLOOD: u32 = 100_000;
/// The legitimate client asks once every this many flood requests.
const EVERY: u32 = 100;
/// The keys the zone holds.
const ZONE_SIZE: u32 = 1000;
/// The most the flood may add to fulcrum's resident memory. 100,000 keys beyond the zone
/// would take about 10 MB (a key, its bucket and its place in the LRU list are about 100
/// bytes); what the connections leave behind in the allocator stays well under this.
const MAX_GROWTH_KIB: u64 = 4 * 1024;
/// The whole flood must be over within this.
const FLOOD_DEADLINE: Duration = Duration::from_secs(300);
/// The legitimate client.
const LEGIT: [u8; 4] = [127, 0, 0, 2];

/// A backend that answers every request `200 ok`, keeping connections open.
fn backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve(stream));
        }
    });
    addr
}

fn serve(mut stream: TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.drain(..end + 4);
            if stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .is_err()
            {
                return;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Flood address number `i`: 127.10.0.1 on, never a .0 or .255 last octet.
fn flood_addr(i: u32) -> [u8; 4] {
    let n = (i / 254) * 256 + i % 254 + 1;
    [127, 10 + (n >> 16) as u8, (n >> 8) as u8, n as u8]
}

#[test]
fn a_flood_of_addresses_stays_within_the_zone_and_the_limits_hold() {
    let backend = backend();
    let config = TempFile::new(
        "limit-flood.toml",
        &format!(
            "workers = 2\naccess_log = false\n\n\
             [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\
             limit_req = {{ rate = \"1r/s\", nodelay = true, status = 429, zone_size = {ZONE_SIZE} }}\n\n\
             [[upstream]]\nname = \"web\"\n[[upstream.backend]]\naddr = \"{backend}\"\n\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n"
        ),
    );
    let fulcrum = Running::start(&config, 1);
    let proxy = fulcrum.addr_of("web");
    let pid = fulcrum.child.id();
    // Warm up: the zone full, the workers' buffers and backend connections made.
    for i in 0..2 * ZONE_SIZE {
        assert_eq!(status_from(flood_addr(FLOOD + i), proxy), 200);
    }
    let before = common::rss_kib(pid);
    let began = Instant::now();
    let (mut legit_ok, mut legit_refused) = (0u32, 0u32);
    let mut peak = before;
    for i in 0..FLOOD {
        assert_eq!(
            status_from(flood_addr(i), proxy),
            200,
            "flood #{i}: a new key"
        );
        if i % EVERY == 0 {
            match status_from(LEGIT, proxy) {
                200 => legit_ok += 1,
                429 => legit_refused += 1,
                other => panic!("the legitimate client got {other}"),
            }
        }
        if i % 10_000 == 0 {
            peak = peak.max(common::rss_kib(pid));
        }
        assert!(
            began.elapsed() < FLOOD_DEADLINE,
            "the flood took over {FLOOD_DEADLINE:?} (at #{i})"
        );
    }
    let took = began.elapsed();
    let after = common::rss_kib(pid);
    peak = peak.max(after);
    println!(
        "flood: {FLOOD} addresses in {took:.1?} against zone_size {ZONE_SIZE}: fulcrum's RSS {before} KiB before, {after} KiB after, {peak} KiB at most (+{} KiB); the legitimate client: {legit_ok} accepted, {legit_refused} refused",
        peak.saturating_sub(before)
    );
    assert!(
        peak.saturating_sub(before) < MAX_GROWTH_KIB,
        "the flood grew fulcrum's memory by {} KiB",
        peak.saturating_sub(before)
    );
    // 1r/s, no burst: at most one a second (and the first), whatever the flood did.
    let allowed = took.as_secs() as u32 + 2;
    assert!(
        legit_ok <= allowed,
        "the legitimate client got {legit_ok} through in {took:?}: its limit was lost"
    );
    assert!(
        legit_refused > legit_ok,
        "{legit_ok} accepted, {legit_refused} refused"
    );
    // The refusals are counted for the listener, by reason.
    let admin = fulcrum.admin.expect("the admin listener's address");
    let (_, metrics) = common::admin_call(admin, "GET", "/metrics", &[("host", "127.0.0.1")], "");
    let counted = metrics.lines().any(|l| {
        l.starts_with("fulcrum_requests_limited_total{")
            && l.contains("listener=\"127.0.0.1:0\"")
            && l.contains("reason=\"limit_req\"")
            && l.contains("route=\"\"")
            && l.ends_with(&format!("}} {legit_refused}"))
    });
    assert!(
        counted,
        "{legit_refused} limit_req refusals not in:\n{metrics}"
    );
}
