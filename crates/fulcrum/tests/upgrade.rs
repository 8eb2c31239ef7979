//! Zero-downtime upgrades: a new `fulcrum run --upgrade-socket PATH` takes the listening
//! sockets over from the one serving there, which drains and exits, under steady load.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lab::Backend;

mod common;
use common::{Running, TempDir, TempFile, backend_block, steady_load};

/// Waits for `fulcrum` to exit by itself; its exit status.
fn exits(fulcrum: &mut Running, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = fulcrum.child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the old fulcrum did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn five_upgrades_under_load_lose_no_request_and_refuse_no_connection() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let a = Backend::start("a", loopback).await.unwrap();
        let b = Backend::start("b", loopback).await.unwrap();
        let dir = TempDir::new("upgrade", "socket");
        let socket = format!("{}/upgrade.sock", dir.path());
        let config = TempFile::new(
            "upgrade.toml",
            &format!(
                "workers = 2\naccess_log = false\n\n\
                 [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
                 [[upstream]]\nname = \"web\"\nalgorithm = \"least_conn\"\n{}\n\
                 [admin]\nlisten = \"127.0.0.1:0\"\n",
                backend_block(&[(a.addr(), 1), (b.addr(), 1)])
            ),
        );
        let args = ["--upgrade-socket", socket.as_str()];
        let mut current = Running::start_with(&config, 1, &args);
        let proxy = current.addr_of("web");
        let admin = current.admin.unwrap();
        // 30 s at 100 requests a second, open loop: a fresh connection is opened whenever a
        // client's last one closed, so refused connections would show as failures.
        let plan = steady_load(proxy, 100.0, 30, 20);
        let sent = plan.trace.len();
        let load = tokio::spawn(async move { lab::load::run(&plan).await });
        for upgrade in 1..=5 {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let next = Running::start_with(&config, 1, &args);
            // The same sockets, not new ones: the same addresses (they were port 0).
            assert_eq!(next.addr_of("web"), proxy, "upgrade {upgrade}");
            assert_eq!(next.admin, Some(admin), "upgrade {upgrade}");
            let deadline = Instant::now() + Duration::from_secs(10);
            while !next
                .next_line(deadline)
                .contains("the previous fulcrum stopped accepting and drains")
            {}
            let status = exits(&mut current, Duration::from_secs(15));
            assert!(
                status.success(),
                "upgrade {upgrade}: the old one exited {status:?}"
            );
            current = next;
            // The new one answers, the admin API included.
            let reply = common::admin_get(admin, "/api/health").await;
            assert_eq!(reply.status, 200, "upgrade {upgrade}");
        }
        let outcomes = load.await.unwrap();
        common::assert_all_answered(&outcomes, sent);
        assert!(current.terminate().success());
    });
}
