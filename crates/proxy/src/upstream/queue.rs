//! Requests waiting for a backend below its `max_conns` (HAProxy's pending-connection
//! queue, NGINX Plus's `queue`): who may wait and who is handed the room that frees is
//! [`balance::queue`]'s rule, the simulator's too; this part keeps the waiters, wakes them
//! through channels and gives back what a waiter that left was handed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use balance::Outcome;
use balance::queue;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::Upstream;
use super::pick::Attempt;
use super::state::{Handed, State, Unpicked, lock, position};

impl Upstream {
    /// Waits in the queue for a backend to be handed over (see [`Upstream::pick`]).
    pub(super) async fn wait_in_queue(
        self: &Arc<Self>,
        handed: oneshot::Receiver<Handed>,
        queue_timeout: Duration,
        client: Option<&TcpStream>,
        watch_client: bool,
    ) -> Result<Attempt, Unpicked> {
        let mut wait = Wait {
            handed: Some(handed),
            upstream: self,
        };
        let deadline = crate::io::after(queue_timeout);
        let gone = crate::io::watch(client, watch_client);
        tokio::pin!(gone);
        let outcome = loop {
            let Some(handed) = wait.handed.as_mut() else {
                break Err(Unpicked::NoBackend);
            };
            tokio::select! {
                biased;
                handed = handed => break handed.unwrap_or(Err(Unpicked::NoBackend)),
                () = &mut gone => break Err(Unpicked::ClientGone),
                () = tokio::time::sleep_until(deadline) => break Err(Unpicked::QueueTimeout),
                // A backend may come back without an event (its `fail_timeout` passes): look
                // again now and then.
                () = tokio::time::sleep(RECHECK) => self.serve_waiting(),
            }
        };
        // A backend handed over just as the wait ended is used, not lost.
        let outcome = match (outcome, wait.take()) {
            (_, Some(Ok(parts))) | (Ok(parts), _) => Ok(parts),
            (Err(why), _) => Err(why),
        };
        outcome.map(|(generation, addr, ticket)| self.attempt(generation, addr, ticket))
    }

    /// Requests waiting in the queue now.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Hands backends with room to the waiting requests, oldest first; tells those that no
    /// backend is left for that there will be none. Called when room may have come (a
    /// completion, a change of state, weights or membership) and now and then by the waiters.
    pub(super) fn serve_waiting(&self) {
        if self.queued.load(Ordering::Acquire) == 0 {
            return;
        }
        let now = self.now();
        let handed = {
            let mut st = lock(&self.state);
            let State {
                pool,
                members,
                generation,
                waiting,
                ..
            } = &mut *st;
            let handed = queue::serve(pool, waiting, now, |w, out| {
                out.extend(w.tried.iter().filter_map(|&a| position(members, a)));
            });
            self.queued.store(waiting.len(), Ordering::Release);
            let generation = *generation;
            handed
                .into_iter()
                .map(|(w, h)| {
                    let result = match h {
                        queue::Handed::Ticket(ticket) => {
                            Ok((generation, members[ticket.backend().index()].addr, ticket))
                        }
                        queue::Handed::NoBackend => Err(Unpicked::NoBackend),
                    };
                    (w.to, result)
                })
                .collect::<Vec<_>>()
        };
        for (to, result) in handed {
            // A waiter that left in between: its ticket comes back and is cancelled.
            if let Err(Ok((generation, addr, ticket))) = to.send(result) {
                self.complete(generation, addr, ticket, Outcome::Cancelled);
            }
        }
    }
}

/// How often a waiting request has the queue looked at again, for room that came without an
/// event (a failed backend's `fail_timeout` passing).
const RECHECK: Duration = Duration::from_secs(1);

/// A waiting request's end of the queue. However the wait ends (answered, timed out, the client
/// gone, the task dropped), a backend handed over and not taken is given back.
struct Wait<'a> {
    handed: Option<oneshot::Receiver<Handed>>,
    upstream: &'a Upstream,
}

impl Wait<'_> {
    /// Closes the queue's end; what was handed over before, if anything.
    fn take(&mut self) -> Option<Handed> {
        let mut handed = self.handed.take()?;
        handed.close();
        handed.try_recv().ok()
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if let Some(Ok((generation, addr, ticket))) = self.take() {
            self.upstream
                .complete(generation, addr, ticket, Outcome::Cancelled);
        }
        // A request that stopped waiting (timed out, its client gone) leaves the queue now,
        // so the queue's length counts only those still waiting.
        if self.upstream.queued() > 0 {
            let mut st = lock(&self.upstream.state);
            st.waiting.retain(|w| !w.to.is_closed());
            self.upstream
                .queued
                .store(st.waiting.len(), Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::BackendSettings;
    use crate::settings::UpstreamSettings;
    use crate::upstream::AdminState;
    use balance::Algorithm;

    /// An upstream of backends at 10.0.0.1.. with `max_conns` 1, and a queue.
    fn full_upstream(backends: usize, queue: usize, timeout: Duration) -> Arc<Upstream> {
        let backends = (1..=backends)
            .map(|i| BackendSettings {
                max_conns: 1,
                ..BackendSettings::new(format!("10.0.0.{i}:80").parse().unwrap())
            })
            .collect();
        let mut s = UpstreamSettings::new("q", Algorithm::RoundRobin, backends);
        s.queue = queue;
        s.queue_timeout = timeout;
        Arc::new(Upstream::new(s))
    }

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, i], 80))
    }

    /// A client connection for `pick` to watch (it is not watched here).
    async fn client() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        (c, l.accept().await.unwrap().0)
    }

    /// Starts a pick that will wait, and waits until it is in the queue.
    async fn queue_one(
        u: &Arc<Upstream>,
        tried: Vec<SocketAddr>,
    ) -> tokio::task::JoinHandle<Result<Attempt, Unpicked>> {
        let before = u.queued();
        let u2 = Arc::clone(u);
        let task = tokio::spawn(async move {
            let (c, _s) = client().await;
            let settings = u2.settings();
            u2.pick(&settings, None, None, &tried, Some(&c), false)
                .await
        });
        while u.queued() == before {
            tokio::task::yield_now().await;
        }
        task
    }

    async fn pick_now(u: &Arc<Upstream>) -> Result<Attempt, Unpicked> {
        let (c, _s) = client().await;
        u.pick(&u.settings(), None, None, &[], Some(&c), false)
            .await
    }

    #[tokio::test]
    async fn waiting_requests_get_a_freed_backend_in_their_order_and_newcomers_queue_behind() {
        let u = full_upstream(1, 5, Duration::from_secs(30));
        let mut busy = pick_now(&u).await.unwrap();
        let first = queue_one(&u, vec![]).await;
        let second = queue_one(&u, vec![]).await;
        assert_eq!(u.queued(), 2);
        busy.complete(Outcome::Success);
        let mut first = first.await.unwrap().expect("the oldest is served");
        assert_eq!((first.addr, u.queued()), (addr(1), 1));
        // A newcomer does not take the room the second waits for.
        let newcomer = queue_one(&u, vec![]).await;
        first.complete(Outcome::Success);
        let second = second.await.unwrap().expect("then the second");
        assert_eq!(u.queued(), 1);
        drop(second);
        assert!(newcomer.await.unwrap().is_ok(), "then the newcomer");
        assert_eq!(u.queued(), 0);
    }

    #[tokio::test]
    async fn room_a_waiter_cannot_use_goes_to_the_next_that_can() {
        let u = full_upstream(2, 5, Duration::from_secs(30));
        let mut a = pick_now(&u).await.unwrap();
        let b = pick_now(&u).await.unwrap();
        assert_eq!((a.addr, b.addr), (addr(1), addr(2)));
        // A retry that already tried backend 1 waits first; a fresh request after it.
        let retry = queue_one(&u, vec![addr(1)]).await;
        let fresh = queue_one(&u, vec![]).await;
        a.complete(Outcome::Success);
        let fresh = fresh
            .await
            .unwrap()
            .expect("backend 1 goes to the one that may use it");
        assert_eq!((fresh.addr, u.queued()), (addr(1), 1));
        drop(b);
        assert_eq!(retry.await.unwrap().unwrap().addr, addr(2));
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once_and_a_wait_ends_at_queue_timeout() {
        let u = full_upstream(1, 1, Duration::from_millis(200));
        let _busy = pick_now(&u).await.unwrap();
        let waiting = queue_one(&u, vec![]).await;
        assert_eq!(pick_now(&u).await.err(), Some(Unpicked::QueueFull));
        assert_eq!(waiting.await.unwrap().err(), Some(Unpicked::QueueTimeout));
        assert_eq!(u.queued(), 0, "the timed-out request left the queue");
    }

    #[tokio::test]
    async fn a_waiter_that_leaves_gives_its_place_up_and_no_ticket_is_lost() {
        let u = full_upstream(1, 5, Duration::from_secs(30));
        let mut busy = pick_now(&u).await.unwrap();
        let leaving = queue_one(&u, vec![]).await;
        leaving.abort();
        let _ = leaving.await;
        assert_eq!(u.queued(), 0);
        busy.complete(Outcome::Success);
        assert_eq!(
            u.snapshot()[0].in_flight,
            0,
            "nothing handed to the one that left"
        );
        assert!(pick_now(&u).await.is_ok());
    }

    #[tokio::test]
    async fn waiters_learn_at_once_when_no_backend_is_left() {
        let u = full_upstream(1, 5, Duration::from_secs(30));
        let _busy = pick_now(&u).await.unwrap();
        let waiting = queue_one(&u, vec![]).await;
        u.set_state(addr(1), AdminState::Disabled).unwrap();
        assert_eq!(waiting.await.unwrap().err(), Some(Unpicked::NoBackend));
    }
}
