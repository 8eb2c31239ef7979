//! The proxy's own shortage is not the backend's failure (issue 10, defect 3): a proxy out of
//! file descriptors answers 503 and leaves its backends in rotation.
//!
//! This test lowers the process's descriptor limit and uses up every descriptor, so it lives
//! in a test binary of its own: nothing else runs in this process meanwhile.

mod common;
mod harness;

use std::fs::File;
use std::time::Duration;

use balance::Algorithm;
use harness::*;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

#[tokio::test(flavor = "current_thread")]
async fn out_of_descriptors_answers_503_and_blames_no_backend() {
    let limit = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(256),
            maximum: limit.maximum,
        },
    )
    .expect("can lower the soft limit");

    let backend = backend("b").await;
    let mut up = upstream(Algorithm::RoundRobin, backends(&[backend.addr()]));
    // No idle connections: every request needs a new descriptor for its backend.
    up.keepalive = 0;
    let mut s = settings(up);
    s.workers = 1;
    let proxy = start(s).await;
    assert_eq!(get(proxy.addr, "/").await.status, 200);

    // Use up the descriptors but two: one for the client's socket, one for the proxy to
    // accept it with. Connecting to the backend then fails with EMFILE.
    // The warm-up's connections close asynchronously: keep taking descriptors until none has
    // been freed for 200 ms.
    let mut filler = Vec::new();
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_millis(200) {
        while let Ok(f) = File::open("/dev/null") {
            filler.push(f);
            quiet_since = Instant::now();
        }
        // Poll interval of a loop bounded by the quiet window.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    filler.truncate(filler.len() - 2);
    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let r = read_until_closed(&mut client, DEADLINE).await;
    drop(filler);
    setrlimit(Resource::Nofile, limit).expect("can restore the limit");

    let b = proxy.backend(backend.addr());
    println!(
        "defect 3: out of descriptors: {} ({}); backend failures {}, available {}",
        r.status,
        String::from_utf8_lossy(&r.body).trim(),
        b.failures,
        b.available
    );
    assert_eq!(r.status, 503, "{:?}", String::from_utf8_lossy(&r.raw));
    assert_eq!(
        b.failures, 0,
        "our own shortage is not the backend's failure"
    );
    assert!(b.available);
    assert_eq!(get(proxy.addr, "/").await.status, 200);
}
