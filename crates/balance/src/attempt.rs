//! A request's attempts, from the first pick to an answer or our own error: the one state
//! machine the proxy's HTTP path (HTTP/1.1 and HTTP/2 backends alike), its TCP mode and the
//! simulator all drive, each supplying only its I/O.
//!
//! [`retry::decide`](crate::retry::decide) says what one failed attempt leads to. Around that
//! rule, a request needs more, and every caller needs the same answer to each of these:
//!
//! * **The attempt limit**: at most `retries + 1` backends (every backend once when `retries`
//!   is not set), counted in picks; a resend on a fresh connection is the same attempt.
//! * **The tried set**: the backends picked so far, in order, excluded from the next pick
//!   (chained failover, seed 004) and logged.
//! * **Resend once**: the keep-alive race ([`Action::ResendFresh`]) sends the request again on
//!   a fresh connection to the same backend, at most once per attempt. Should a resent request
//!   meet the race again — possible only where the connection the resend gets is itself one in
//!   use, as an HTTP/2 backend's shared connection — it is not resent a second time: the
//!   attempt ends without blame and the next backend is tried (`ResendFresh` is only ever
//!   decided for a request that may be repeated).
//! * **`response_timeout`**: once the request's whole time is up, no further attempt starts;
//!   and a read that timed out because that time ran out (rather than `read_timeout`) is not the
//!   backend's fault — it may have had only what a queue or earlier attempts left — so it is
//!   not blamed. The caller says whether the time is up; the machine reads no clock.
//! * **Blame in the body**: once a response has begun, how its relay ended decides its
//!   ticket's outcome ([`BodyEnd`]).
//! * **Our own answer**: when no attempt produced a response, the last attempt's fault chooses
//!   the status (502, 503 or 504: [`retry::own_answer`](crate::retry::own_answer)).
//!
//! The machine owns no ticket and touches no socket: the caller picks (with
//! [`Attempts::tried`] as the exclusion), tells the machine what it picked and what came of it,
//! and completes the ticket with the outcome the machine returns. Generic over how the caller
//! names a backend: the proxy remembers addresses (membership may change between attempts),
//! the simulator pool ids.

use crate::balancer::Outcome;
use crate::retry::{self, Action, AttemptFailure, Blame, Decision, Fault, NextUpstream, Replay};

/// One request's attempts so far.
#[derive(Debug, Clone)]
pub struct Attempts<B> {
    /// Backends picked, in order; never more than `limit`.
    tried: Vec<B>,
    /// Attempts allowed (picks), at least 1.
    limit: usize,
    /// The current attempt was resent on a fresh connection already.
    resent: bool,
    /// The last failed attempt's fault.
    last: Option<Fault>,
    /// A step said to give up: no further pick.
    over: bool,
    /// Which conditions move the request on (the upstream's `next_upstream`).
    next: NextUpstream,
    /// The status of an answer that moved the request on, if that was the last thing that
    /// happened to it (a failure since clears it).
    moved_on: Option<u16>,
}

/// Whether a pick was the request's first attempt or a retry (for the retry counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Picked {
    First,
    Retry,
}

/// What to do after a failed attempt, once the machine has applied every rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Send the request again to the same backend on a new connection; the attempt and its
    /// ticket go on (not completed).
    ResendFresh,
    /// Complete the ticket with `outcome` and pick another backend.
    NextBackend { outcome: Outcome },
    /// Complete the ticket with `outcome` and answer the client with our own error
    /// ([`Attempts::own_answer`]).
    GiveUp { outcome: Outcome },
}

/// A failed attempt's step: what next, and the policy's verdict it came from (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub next: Next,
    pub decision: Decision,
    /// The request's `response_timeout` ended it (a read that timed out when the request's
    /// time ran out), not the backend: not counted as the backend's failure.
    pub time_up: bool,
}

impl Step {
    /// The outcome the attempt's ticket completes with now (`None`: it goes on).
    pub fn outcome(&self) -> Option<Outcome> {
        match self.next {
            Next::ResendFresh => None,
            Next::NextBackend { outcome } | Next::GiveUp { outcome } => Some(outcome),
        }
    }
}

/// How the relay of a response body that had begun ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEnd {
    /// All of it reached the client.
    Whole,
    /// The backend's part failed (closed, reset, invalid framing, or no data within
    /// `read_timeout`).
    BackendFailed,
    /// The request's `response_timeout` ran out while the body was relayed: a slow client's
    /// reading counts towards it too, so the backend is not blamed.
    TimeUp,
    /// The client left or stopped reading.
    ClientLeft,
}

impl BodyEnd {
    /// The outcome the attempt's ticket completes with.
    pub fn outcome(self) -> Outcome {
        match self {
            BodyEnd::Whole => Outcome::Success,
            BodyEnd::BackendFailed => Outcome::Failure,
            BodyEnd::TimeUp | BodyEnd::ClientLeft => Outcome::Cancelled,
        }
    }
}

impl<B> Default for Attempts<B> {
    /// One attempt allowed, none made.
    fn default() -> Attempts<B> {
        Attempts {
            tried: Vec::new(),
            limit: 1,
            resent: false,
            last: None,
            over: false,
            next: NextUpstream::DEFAULT,
            moved_on: None,
        }
    }
}

/// The attempts a request is allowed: `retries + 1`, or with `retries` not set, one per
/// backend (nginx's `proxy_next_upstream_tries 0`: every server once). At least one.
pub fn attempt_limit(retries: Option<u32>, backends: usize) -> usize {
    match retries {
        Some(r) => (r as usize).saturating_add(1),
        None => backends,
    }
    .max(1)
}

impl<B: Copy> Attempts<B> {
    /// A request allowed `limit` attempts (at least one), moved on by the conditions of
    /// `next`.
    pub fn new(limit: usize, next: NextUpstream) -> Attempts<B> {
        Attempts {
            tried: Vec::new(),
            limit: limit.max(1),
            resent: false,
            last: None,
            over: false,
            next,
            moved_on: None,
        }
    }

    /// Starts again for a new request, keeping the memory of the tried list.
    pub fn reset(&mut self, limit: usize, next: NextUpstream) {
        self.tried.clear();
        self.limit = limit.max(1);
        self.resent = false;
        self.last = None;
        self.over = false;
        self.next = next;
        self.moved_on = None;
    }

    /// Gives the tried list's memory back (an idle connection's).
    pub fn release(&mut self) {
        self.tried = Vec::new();
    }

    /// Whether another backend may be picked: attempts are left, and no step said to give up.
    pub fn may_pick(&self) -> bool {
        !self.over && self.tried.len() < self.limit
    }

    /// The backends picked so far, in order: the next pick excludes them.
    pub fn tried(&self) -> &[B] {
        &self.tried
    }

    /// The backends picked, in order, the machine done with.
    pub fn into_tried(self) -> Vec<B> {
        self.tried
    }

    /// The backend of the current attempt.
    pub fn current(&self) -> Option<B> {
        self.tried.last().copied()
    }

    /// A backend was picked for a new attempt. Call only when [`may_pick`](Self::may_pick).
    pub fn picked(&mut self, backend: B) -> Picked {
        debug_assert!(self.may_pick(), "picked past the attempt limit");
        let picked = if self.tried.is_empty() {
            Picked::First
        } else {
            Picked::Retry
        };
        self.tried.push(backend);
        self.resent = false;
        picked
    }

    /// Whether the current attempt may use a connection kept alive from an earlier request:
    /// not once it has been resent (the resend is on a fresh connection).
    pub fn may_reuse(&self) -> bool {
        !self.resent
    }

    /// The current attempt failed before a complete response head, as `failure` says;
    /// `time_up`: the request's `response_timeout` has passed. The step to take, every rule
    /// applied (see the module documentation).
    pub fn failed(&mut self, failure: &AttemptFailure, time_up: bool) -> Step {
        self.failed_within(failure, time_up, || true)
    }

    /// [`failed`](Self::failed), where a move to the next backend is also a retry the
    /// upstream's retry budget must allow: `budget` is asked (and withdraws) only when the
    /// request would move on; when it refuses, the request ends there (our own answer).
    pub fn failed_within(
        &mut self,
        failure: &AttemptFailure,
        time_up: bool,
        budget: impl FnOnce() -> bool,
    ) -> Step {
        self.last = Some(failure.fault);
        self.moved_on = None;
        if time_up && failure.fault == Fault::ReadTimeout {
            // The request's own time ran out, not necessarily through this backend's fault.
            self.over = true;
            return Step {
                next: Next::GiveUp {
                    outcome: Outcome::Cancelled,
                },
                decision: Decision {
                    action: Action::GiveUp,
                    blame: Blame::Nobody,
                },
                time_up: true,
            };
        }
        let mut decision = retry::decide(failure, self.next);
        if decision.action == Action::ResendFresh {
            if self.resent {
                // Met the race again after a resend: no second resend, no blame.
                decision.action = Action::NextBackend;
            } else {
                self.resent = true;
                return Step {
                    next: Next::ResendFresh,
                    decision,
                    time_up: false,
                };
            }
        }
        let outcome = decision.outcome();
        let next = match decision.action {
            Action::NextBackend if !time_up && self.tried.len() < self.limit && budget() => {
                Next::NextBackend { outcome }
            }
            _ => {
                self.over = true;
                Next::GiveUp { outcome }
            }
        };
        Step {
            next,
            decision,
            time_up: false,
        }
    }

    /// The current attempt was answered with `status` (a complete head). `true`: the answer
    /// is dropped, the attempt's ticket completes as a failure and the next backend is tried —
    /// the status is listed in `next_upstream`, the request may be sent again (`replay`),
    /// attempts and time are left (`time_up`: the request's `response_timeout` has passed),
    /// and `budget` allows the retry (asked last, and only then). `false`: the answer is the
    /// request's, relayed, and its ticket completes as the relay ends (a listed status relayed
    /// because nothing is left is not held against the backend: nginx's rule).
    pub fn answered(
        &mut self,
        status: u16,
        replay: Replay,
        time_up: bool,
        budget: impl FnOnce() -> bool,
    ) -> bool {
        let moves_on = self.next.moves_on(status)
            && (replay == Replay::Safe || self.next.contains(NextUpstream::NON_IDEMPOTENT))
            && !time_up
            && self.tried.len() < self.limit
            && budget();
        if moves_on {
            self.moved_on = Some(status);
        }
        moves_on
    }

    /// A connect-stage failure (nothing sent, nothing received, a fresh connection): the
    /// [`AttemptFailure`] every protocol reports for it.
    pub fn connect_failed(&mut self, fault: Fault, replay: retry::Replay, time_up: bool) -> Step {
        self.failed(&AttemptFailure::connect(fault, replay), time_up)
    }

    /// The last failed attempt's fault (`None`: none failed, or none was picked).
    pub fn last_fault(&self) -> Option<Fault> {
        self.last
    }

    /// Our own answer when no attempt produced a response: its status and body text, chosen by
    /// the last fault ([`retry::own_answer`]), or, when the last attempt's answer moved the
    /// request on and no backend was left to take it, by that answer's status
    /// ([`retry::own_answer_after_moving_on`], nginx's choice).
    pub fn own_answer(&self) -> (u16, &'static str) {
        match self.moved_on {
            Some(_) => retry::own_answer_after_moving_on(),
            None => retry::own_answer(self.last),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::{Connection, Replay, RequestSent, ResponseReceived};

    fn closed(connection: Connection) -> AttemptFailure {
        AttemptFailure {
            fault: Fault::Closed,
            connection,
            request: RequestSent::Whole,
            response: ResponseReceived::Nothing,
            replay: Replay::Safe,
        }
    }

    #[test]
    fn picks_stop_at_the_limit_and_the_last_attempt_gives_up() {
        let mut a = Attempts::new(2, NextUpstream::DEFAULT);
        assert!(a.may_pick());
        assert_eq!(a.picked(7u32), Picked::First);
        let step = a.connect_failed(Fault::ConnectFailed, Replay::Safe, false);
        assert_eq!(
            step.next,
            Next::NextBackend {
                outcome: Outcome::Failure
            }
        );
        assert_eq!(a.picked(8), Picked::Retry);
        let step = a.connect_failed(Fault::ConnectTimeout, Replay::Safe, false);
        assert_eq!(
            step.next,
            Next::GiveUp {
                outcome: Outcome::Failure
            }
        );
        assert!(!a.may_pick());
        assert_eq!(a.tried(), &[7, 8]);
        assert_eq!(a.own_answer().0, 504);
    }

    #[test]
    fn a_limit_of_zero_still_allows_one_attempt() {
        let mut a = Attempts::<u8>::new(0, NextUpstream::DEFAULT);
        assert!(a.may_pick());
        a.picked(1);
        assert!(!a.may_pick());
    }

    #[test]
    fn the_keep_alive_race_resends_once_then_moves_on_without_blame() {
        let mut a = Attempts::new(3, NextUpstream::DEFAULT);
        a.picked(1u32);
        assert!(a.may_reuse());
        let first = a.failed(&closed(Connection::Reused), false);
        assert_eq!(first.next, Next::ResendFresh);
        assert_eq!(first.outcome(), None);
        assert!(!a.may_reuse(), "the resend is on a fresh connection");
        // The resend met the race again (an HTTP/2 backend's shared connection): no second
        // resend.
        let second = a.failed(&closed(Connection::Reused), false);
        assert_eq!(
            second.next,
            Next::NextBackend {
                outcome: Outcome::Cancelled
            }
        );
        // A new attempt may resend again.
        a.picked(2);
        assert!(a.may_reuse());
        assert_eq!(
            a.failed(&closed(Connection::Reused), false).next,
            Next::ResendFresh
        );
    }

    #[test]
    fn a_fresh_connection_closed_after_a_resend_blames_the_backend() {
        let mut a = Attempts::new(3, NextUpstream::DEFAULT);
        a.picked(1u32);
        assert_eq!(
            a.failed(&closed(Connection::Reused), false).next,
            Next::ResendFresh
        );
        let step = a.failed(&closed(Connection::Fresh), false);
        assert_eq!(
            step.next,
            Next::NextBackend {
                outcome: Outcome::Failure
            }
        );
        assert_eq!(step.decision.blame, Blame::Backend);
    }

    #[test]
    fn time_up_stops_further_attempts_and_a_read_timeout_then_blames_nobody() {
        let mut a = Attempts::new(3, NextUpstream::DEFAULT);
        a.picked(1u32);
        let timeout = AttemptFailure {
            fault: Fault::ReadTimeout,
            ..closed(Connection::Fresh)
        };
        let step = a.failed(&timeout, true);
        assert_eq!(
            step.next,
            Next::GiveUp {
                outcome: Outcome::Cancelled
            }
        );
        assert!(!a.may_pick());
        assert_eq!(a.own_answer().0, 504);

        // A connect failure once the time is up: blamed, but no next backend.
        let mut a = Attempts::new(3, NextUpstream::DEFAULT);
        a.picked(1u32);
        let step = a.connect_failed(Fault::ConnectFailed, Replay::Safe, true);
        assert_eq!(
            step.next,
            Next::GiveUp {
                outcome: Outcome::Failure
            }
        );
        assert!(!a.may_pick());
    }

    #[test]
    fn a_read_timeout_within_the_request_s_time_blames_the_backend_and_moves_on_as_nginx() {
        let timeout = AttemptFailure {
            fault: Fault::ReadTimeout,
            ..closed(Connection::Fresh)
        };
        let mut a = Attempts::new(3, NextUpstream::DEFAULT);
        a.picked(1u32);
        assert_eq!(
            a.failed(&timeout, false).next,
            Next::NextBackend {
                outcome: Outcome::Failure
            }
        );
        // Without `timeout` in `next_upstream`, it ends there.
        let mut a = Attempts::new(3, NextUpstream::ERROR);
        a.picked(1u32);
        assert_eq!(
            a.failed(&timeout, false).next,
            Next::GiveUp {
                outcome: Outcome::Failure
            }
        );
    }

    #[test]
    fn a_listed_status_moves_on_while_attempts_and_budget_last_then_is_relayed() {
        let next = NextUpstream::DEFAULT.with(NextUpstream::HTTP_503);
        let mut a = Attempts::new(2, next);
        a.picked(1u32);
        // Not listed: relayed; listed but the request may not be repeated: relayed.
        assert!(!a.answered(500, Replay::Safe, false, || true));
        assert!(!a.answered(503, Replay::Unsafe, false, || true));
        // The budget refuses: relayed, and the budget was asked only then.
        let mut asked = 0;
        assert!(!a.answered(503, Replay::Safe, false, || {
            asked += 1;
            false
        }));
        assert_eq!(asked, 1);
        assert!(a.answered(503, Replay::Safe, false, || true));
        assert!(a.may_pick());
        a.picked(2);
        // The last attempt's answer is relayed whatever its status.
        assert!(!a.answered(503, Replay::Safe, false, || panic!("not asked")));
        // Had no backend been left to pick after the move, nginx's answer is 502 (no live
        // upstreams).
        let mut b = Attempts::new(2, next);
        b.picked(1u32);
        assert!(b.answered(503, Replay::Safe, false, || true));
        assert_eq!(b.own_answer().0, 502);
        // A later failure's own answer is the failure's.
        b.picked(2);
        b.connect_failed(Fault::ConnectTimeout, Replay::Safe, false);
        assert_eq!(b.own_answer().0, 504);
    }

    #[test]
    fn a_refused_budget_ends_the_request_with_our_own_answer() {
        let mut a = Attempts::new(3, NextUpstream::DEFAULT);
        a.picked(1u32);
        let refused = AttemptFailure::connect(Fault::ConnectFailed, Replay::Safe);
        let step = a.failed_within(&refused, false, || false);
        assert_eq!(
            step.next,
            Next::GiveUp {
                outcome: Outcome::Failure
            }
        );
        assert!(!a.may_pick());
        assert_eq!(a.own_answer().0, 503);
    }

    #[test]
    fn no_pick_at_all_is_answered_503_and_reset_starts_over() {
        let mut a = Attempts::<u32>::new(2, NextUpstream::DEFAULT);
        assert_eq!(a.own_answer().0, 503);
        a.picked(1);
        a.failed(
            &AttemptFailure {
                fault: Fault::InvalidResponse,
                response: ResponseReceived::Partly,
                ..closed(Connection::Fresh)
            },
            false,
        );
        assert_eq!(a.own_answer().0, 502);
        assert!(!a.may_pick());
        a.reset(2, NextUpstream::DEFAULT);
        assert!(a.may_pick());
        assert!(a.tried().is_empty());
        assert_eq!(a.last_fault(), None);
    }

    #[test]
    fn body_ends_blame_only_the_backend_s_failures() {
        assert_eq!(BodyEnd::Whole.outcome(), Outcome::Success);
        assert_eq!(BodyEnd::BackendFailed.outcome(), Outcome::Failure);
        assert_eq!(BodyEnd::TimeUp.outcome(), Outcome::Cancelled);
        assert_eq!(BodyEnd::ClientLeft.outcome(), Outcome::Cancelled);
    }

    /// Over every failure sequence of up to four steps on a limit of three: the machine never
    /// allows more picks than the limit, never resends twice in one attempt, gives a ticket an
    /// outcome exactly when it does not resend, and never goes on after giving up.
    #[test]
    fn invariants_hold_over_every_short_sequence() {
        let faults = Fault::ALL;
        let connections = [Connection::Fresh, Connection::Reused];
        let mut cases = Vec::new();
        for fault in faults {
            for connection in connections {
                for replay in [Replay::Safe, Replay::Unsafe] {
                    for time_up in [false, true] {
                        cases.push((
                            AttemptFailure {
                                fault,
                                connection,
                                request: RequestSent::Whole,
                                response: ResponseReceived::Nothing,
                                replay,
                            },
                            time_up,
                        ));
                    }
                }
            }
        }
        let n = cases.len();
        for seq in 0..n * n * n {
            let mut a = Attempts::new(3, NextUpstream::DEFAULT);
            let mut k = seq;
            a.picked(0usize);
            let mut resends_in_attempt = 0;
            for _ in 0..3 {
                let (failure, time_up) = cases[k % n];
                k /= n;
                let step = a.failed(&failure, time_up);
                assert_eq!(step.outcome().is_none(), step.next == Next::ResendFresh);
                match step.next {
                    Next::ResendFresh => {
                        resends_in_attempt += 1;
                        assert!(resends_in_attempt <= 1);
                    }
                    Next::NextBackend { .. } => {
                        assert!(a.may_pick());
                        a.picked(a.tried().len());
                        resends_in_attempt = 0;
                    }
                    Next::GiveUp { .. } => {
                        assert!(!a.may_pick());
                        break;
                    }
                }
                assert!(a.tried().len() <= 3);
            }
        }
    }
}
