//! The `max_conns` queue's decisions: whether a request that found every backend full may
//! wait, and which waiting request a backend with room goes to (HAProxy's pending-connection
//! queue; NGINX Plus's `queue`).
//!
//! The proxy keeps its waiting requests behind a lock with channels to wake them; the
//! simulator keeps them in its event loop. Both ask these functions, so they hand room over by
//! the same rules:
//!
//! * A newcomer takes a backend with room at once. Room is only left while nobody who could use
//!   it waits (every completion serves the queue first), so a newcomer never overtakes.
//! * A pick that found nothing is **held back by `max_conns`** only if some backend it may use
//!   is healthy and merely full ([`Pool::is_saturated`]); otherwise there is nothing to wait for
//!   and the request is answered at once (no backend).
//! * It waits if fewer than `queue` requests wait already; else the queue is full (503).
//! * Room goes to the **oldest** waiting request that may use it. Requests that stopped
//!   waiting lose their place. When every backend is full for a request that may use any of
//!   them (it tried none), it is full for every later request too: serving stops there. A
//!   request that excludes some backends (a retry) may find none of the rest with room while a
//!   later one can use the room: it keeps its place and the later one is served.
//! * A waiting request for which no backend is left at all (every one it may use failed or
//!   left) is told so at once, rather than at its `queue_timeout`.

use std::collections::VecDeque;

use crate::backend::{BackendId, Nanos};
use crate::pool::{Pool, Ticket};

/// What a pick for a new request came to.
#[derive(Debug)]
pub enum Admission {
    /// A backend with room.
    Picked(Ticket),
    /// No backend it may use is available (nor merely full): nothing to wait for.
    NoBackend,
    /// Every backend it may use is full and `queue` requests wait already.
    QueueFull,
    /// Every backend it may use is full: it joins the queue's end.
    Wait,
}

/// Picks for a new request (see the module documentation); `waiting`: requests in the queue
/// now, `queue`: how many may wait.
pub fn admit(
    pool: &mut Pool,
    affinity: Option<&[u8]>,
    exclude: &[BackendId],
    now: Nanos,
    waiting: usize,
    queue: usize,
) -> Admission {
    if let Some(ticket) = pool.pick(affinity, exclude, now) {
        return Admission::Picked(ticket);
    }
    if !pool.is_saturated(exclude, now) {
        return Admission::NoBackend;
    }
    if waiting >= queue {
        return Admission::QueueFull;
    }
    Admission::Wait
}

/// A request in the queue, as the hand-over sees it.
pub trait Waiter {
    /// It stopped waiting (timed out, its client left): it loses its place.
    fn left(&self) -> bool;
    /// Its affinity key, for the pick.
    fn affinity(&self) -> Option<&[u8]>;
}

/// What a waiting request is handed.
#[derive(Debug)]
pub enum Handed {
    /// A backend with room, picked for it.
    Ticket(Ticket),
    /// No backend it may use is left: it will get none.
    NoBackend,
}

/// Serves `waiting` (oldest first) with whatever room `pool` has now: the requests handed a
/// ticket or told there is none, removed from the queue, in order; those that left are dropped.
/// `exclude` writes the pool ids a waiting request must not be handed (those it tried) into
/// the buffer it is given (cleared before each call).
pub fn serve<W: Waiter>(
    pool: &mut Pool,
    waiting: &mut VecDeque<W>,
    now: Nanos,
    mut exclude: impl FnMut(&W, &mut Vec<BackendId>),
) -> Vec<(W, Handed)> {
    let mut handed = Vec::new();
    let mut excluded = Vec::new();
    let mut i = 0;
    while let Some(w) = waiting.get(i) {
        if w.left() {
            waiting.remove(i);
            continue;
        }
        excluded.clear();
        exclude(w, &mut excluded);
        let result = match pool.pick(w.affinity(), &excluded, now) {
            Some(ticket) => Handed::Ticket(ticket),
            None if !pool.is_saturated(&excluded, now) => Handed::NoBackend,
            // Every backend is full for a request that may use any: for all the others too.
            // They keep their places.
            None if excluded.is_empty() => break,
            // Full for this one (it tried the rest): a later one may use the room.
            None => {
                i += 1;
                continue;
            }
        };
        if let Some(w) = waiting.remove(i) {
            handed.push((w, result));
        }
    }
    handed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Algorithm, Options};
    use crate::backend::BackendSpec;
    use crate::balancer::Outcome;

    struct W {
        name: u32,
        left: bool,
        tried: Vec<BackendId>,
    }

    impl Waiter for W {
        fn left(&self) -> bool {
            self.left
        }
        fn affinity(&self) -> Option<&[u8]> {
            None
        }
    }

    fn w(name: u32, tried: &[u32]) -> W {
        W {
            name,
            left: false,
            tried: tried.iter().map(|&i| BackendId(i)).collect(),
        }
    }

    fn full_pool(backends: usize) -> Pool {
        let spec = BackendSpec {
            max_conns: 1,
            ..BackendSpec::new(1)
        };
        Pool::new(
            Algorithm::RoundRobin,
            &Options::default(),
            &vec![spec; backends],
            &[],
            7,
        )
    }

    fn names(handed: &[(W, Handed)]) -> Vec<(u32, bool)> {
        handed
            .iter()
            .map(|(w, h)| (w.name, matches!(h, Handed::Ticket(_))))
            .collect()
    }

    #[test]
    fn a_newcomer_waits_only_when_held_back_by_max_conns_and_the_queue_has_room() {
        let mut pool = full_pool(1);
        let now = Nanos(0);
        let Admission::Picked(ticket) = admit(&mut pool, None, &[], now, 0, 1) else {
            panic!("a backend with room is picked");
        };
        assert!(matches!(
            admit(&mut pool, None, &[], now, 0, 1),
            Admission::Wait
        ));
        assert!(matches!(
            admit(&mut pool, None, &[], now, 1, 1),
            Admission::QueueFull
        ));
        assert!(matches!(
            admit(&mut pool, None, &[], now, 0, 0),
            Admission::QueueFull
        ));
        // A request that tried the only backend has nothing to wait for.
        assert!(matches!(
            admit(&mut pool, None, &[BackendId(0)], now, 0, 1),
            Admission::NoBackend
        ));
        pool.complete(ticket, Outcome::Success, now);
    }

    #[test]
    fn room_goes_to_the_oldest_that_may_use_it_and_leavers_lose_their_place() {
        let mut pool = full_pool(2);
        let now = Nanos(0);
        let held: Vec<Ticket> = (0..2)
            .map(|_| match admit(&mut pool, None, &[], now, 0, 9) {
                Admission::Picked(t) => t,
                other => panic!("{other:?}"),
            })
            .collect();
        let mut queue = VecDeque::from(vec![
            W {
                left: true,
                ..w(0, &[])
            },
            w(1, &[0]),
            w(2, &[]),
            w(3, &[]),
        ]);
        let exclude = |w: &W, out: &mut Vec<BackendId>| out.extend(&w.tried);
        // Nothing has room: nobody is served, the one that left is dropped.
        assert!(serve(&mut pool, &mut queue, now, exclude).is_empty());
        assert_eq!(queue.len(), 3);
        // Backend 0 frees: 1 may not use it (it tried 0), 2 gets it, 3 keeps waiting.
        let mut held = held.into_iter();
        let first = held.next().unwrap_or_else(|| unreachable!());
        pool.complete(first, Outcome::Success, now);
        let handed = serve(&mut pool, &mut queue, now, exclude);
        assert_eq!(names(&handed), vec![(2, true)]);
        let mut done = handed;
        assert_eq!(queue.iter().map(|w| w.name).collect::<Vec<_>>(), vec![1, 3]);
        // Backend 1 frees: 1 (oldest, may use it) gets it.
        let second = held.next().unwrap_or_else(|| unreachable!());
        pool.complete(second, Outcome::Success, now);
        let handed = serve(&mut pool, &mut queue, now, exclude);
        assert_eq!(names(&handed), vec![(1, true)]);
        done.extend(handed);
        // Backend 0 goes down: request 3 (may use any) still waits — backend 1 is merely full.
        assert!(serve(&mut pool, &mut queue, now, exclude).is_empty());
        pool.set_down(BackendId(0), true, now);
        let mut tried_one = VecDeque::from(vec![w(4, &[1])]);
        let handed = serve(&mut pool, &mut tried_one, now, exclude);
        assert_eq!(names(&handed), vec![(4, false)], "no backend left for it");
        done.extend(handed);
        done.extend(serve(&mut pool, &mut queue, now, exclude));
        for (_, h) in done {
            if let Handed::Ticket(t) = h {
                pool.complete(t, Outcome::Success, now);
            }
        }
    }
}
