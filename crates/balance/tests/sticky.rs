//! Sticky sessions as the simulator runs them: the pool, the table of ids and
//! `balance::sticky`'s rules in virtual time, no I/O. The same scenario as the proxy's
//! `tests/sticky.rs` with curl: 100 clients of 10 requests under `least_conn`, then one backend
//! dies.

use balance::sticky::{self, StickyTable};
use balance::{
    Algorithm, BackendId, BackendSpec, Nanos, Options, Outcome, Pool, StickyId, StickyKey,
};

const CLIENTS: usize = 100;

/// One client: its cookie, the backends that answered it, and how often it was given a cookie.
#[derive(Debug, Clone, Default)]
struct Client {
    cookie: Option<StickyId>,
    answered_by: Vec<BackendId>,
    cookies_set: usize,
}

/// One round: every client has one request in flight at once (all picked, then all
/// completed). A request that meets `dead` fails at once (a refused connect: the backend is
/// blamed) and is retried on another backend, as the proxy's attempts do. Returns the attempts
/// made on `dead`.
fn round(
    pool: &mut Pool,
    table: &StickyTable,
    clients: &mut [Client],
    dead: Option<BackendId>,
    now: Nanos,
) -> usize {
    let mut on_dead = 0;
    let mut tickets = Vec::new();
    for c in clients.iter_mut() {
        let preferred = c.cookie.and_then(|id| table.backend(id));
        let mut tried = Vec::new();
        let ticket = loop {
            let t = sticky::pick(pool, preferred, None, &tried, now).expect("a backend");
            if Some(t.backend()) != dead {
                break t;
            }
            on_dead += 1;
            tried.push(t.backend());
            pool.complete(t, Outcome::Failure, now);
        };
        let id = table.id(ticket.backend()).expect("an id for every backend");
        if sticky::must_set(c.cookie, id) {
            c.cookie = Some(id);
            c.cookies_set += 1;
        }
        c.answered_by.push(ticket.backend());
        tickets.push(ticket);
    }
    for t in tickets {
        pool.complete(t, Outcome::Success, now);
    }
    on_dead
}

fn only_backend(c: &Client) -> BackendId {
    let first = c.answered_by[0];
    assert!(
        c.answered_by.iter().all(|&b| b == first),
        "{:?}",
        c.answered_by
    );
    first
}

#[test]
fn clients_stick_under_least_conn_and_move_once_when_their_backend_dies() {
    let names = ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"];
    let key = StickyKey::new(0x5eed, 0x00c0_ffee);
    let table = StickyTable::new(&key, names.iter().map(|n| n.as_bytes()));
    let specs: Vec<BackendSpec> = names.iter().map(|n| BackendSpec::new(1).named(n)).collect();
    let mut pool = Pool::new(Algorithm::LeastConn, &Options::default(), &specs, &[], 7);
    let mut clients = vec![Client::default(); CLIENTS];
    let now = Nanos(1_000_000_000);

    for _ in 0..10 {
        assert_eq!(round(&mut pool, &table, &mut clients, None, now), 0);
    }
    let homes: Vec<BackendId> = clients.iter().map(only_backend).collect();
    for c in &clients {
        assert_eq!(c.cookies_set, 1, "told once");
    }
    // least_conn spread the first, concurrent, requests evenly; the cookies kept them there.
    for b in 0..3 {
        let n = homes.iter().filter(|h| h.0 == b).count();
        assert!((33..=34).contains(&n), "backend {b}: {n} clients");
    }

    // Backend 1 dies: one request meets it (and blames it); every client of it moves once.
    let dead = BackendId(1);
    for c in &mut clients {
        c.answered_by.clear();
    }
    let mut on_dead = 0;
    for _ in 0..10 {
        on_dead += round(&mut pool, &table, &mut clients, Some(dead), now);
    }
    assert_eq!(on_dead, 1, "max_fails = 1: one failed attempt takes it out");
    for (c, home) in clients.iter().zip(&homes) {
        let now_on = only_backend(c);
        if *home == dead {
            assert_ne!(now_on, dead);
            assert_eq!(c.cookies_set, 2, "moved once");
        } else {
            assert_eq!(now_on, *home, "stays");
            assert_eq!(c.cookies_set, 1, "not told again");
        }
    }
    assert!(pool.states().iter().all(|s| s.in_flight() == 0));
}
