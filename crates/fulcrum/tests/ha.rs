//! High availability: what a keepalived pair of fulcrums needs of them.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use lab::{Backend, Client};

mod common;
use common::{Running, TempFile, backend_block};

/// The two nodes of a pair run the same file; a failover must not move a client whose key
/// the algorithm hashes. Every hash algorithm places keys by the backends' names alone (and
/// `random`-drawing ones by `seed`), so two fulcrums with one file agree on every client.
#[test]
fn two_nodes_with_one_file_send_every_client_to_the_same_backend() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut backends = Vec::new();
        for name in ["a", "b", "c", "d"] {
            backends.push(Backend::start(name, loopback).await.unwrap());
        }
        let block = backend_block(&backends.iter().map(|b| (b.addr(), 1)).collect::<Vec<_>>());
        for (algorithm, extra) in [
            ("ip_hash", ""),
            ("maglev", ""),
            ("hash", "hash_key = \"client_ip\"\nconsistent = true\n"),
            ("bounded_load", "hash_key = \"client_ip\"\n"),
        ] {
            let text = format!(
                "workers = 2\naccess_log = false\n\n\
                 [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n\
                 [[upstream]]\nname = \"web\"\nalgorithm = \"{algorithm}\"\n{extra}{block}"
            );
            let file = TempFile::new(&format!("ha-{algorithm}.toml"), &text);
            let node_a = Running::start(&file, 1);
            let node_b = Running::start(&file, 1);
            let mut answers: Vec<HashMap<IpAddr, String>> = Vec::new();
            for node in [&node_a, &node_b] {
                let mut seen = HashMap::new();
                // 200 clients in distinct /24s (ip_hash hashes the first three octets).
                for i in 0..200u32 {
                    let ip = lab::load::client_addr(i);
                    let mut client = Client::bound(node.addr_of("web"), ip);
                    let reply = client.get("/").await.unwrap();
                    assert_eq!(reply.status, 200);
                    seen.insert(ip, reply.text());
                }
                answers.push(seen);
            }
            assert_eq!(answers[0], answers[1], "{algorithm}: the nodes disagree");
            let used: std::collections::HashSet<&String> = answers[0].values().collect();
            assert_eq!(
                used.len(),
                4,
                "{algorithm}: the clients spread over every backend"
            );
        }
    });
}
