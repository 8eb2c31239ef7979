//! Which backends an indexed algorithm must look at again before a pick: those whose live state
//! the pool changed, and those whose eligibility or score changes with time alone.
//!
//! An algorithm that keeps an index over the backends (a tree keyed on their scores, see
//! [`crate::smooth_index`]) cannot rescan every backend on every pick: that is the O(n) it
//! exists to avoid. So [`Pool`](crate::Pool) tells it which backends it changed
//! ([`Balancer::on_change`](crate::Balancer::on_change)): in flight, health, a probe's
//! window. What no one changes but the clock — a failed backend's `fail_timeout` running out,
//! `least_time`'s response time halving while a backend stays idle — the algorithm schedules
//! here as events at the time they happen, and gets them back on the first pick at or after
//! that time.
//!
//! Two cases fall back to looking at every backend, which is always exact: a view that no pool
//! keeps the books for ([`Backends::is_tracked`](crate::Backends) is false: an algorithm
//! driven by hand, as the unit tests do), and a clock that went backwards.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::backend::{Backends, Nanos};

/// No event scheduled.
const NEVER: u64 = u64::MAX;

#[derive(Debug, Default, Clone)]
pub(crate) struct Tracker {
    /// Backends changed since the last pick, each once.
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
    /// (time, backend), earliest first; an entry whose time is no longer the backend's
    /// `next_event` is stale and skipped.
    events: BinaryHeap<Reverse<(u64, u32)>>,
    next_event: Vec<u64>,
    /// The `now` of the last pick; `None` until the first, and after a reset.
    last_now: Option<Nanos>,
}

/// What must be looked at again before a pick.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stale {
    /// Every backend.
    All,
    /// The backends drained into the caller's list.
    Some,
}

impl Tracker {
    /// Forgets everything, for `n` backends (after a rebuild, which looks at every backend).
    pub(crate) fn reset(&mut self, n: usize) {
        self.dirty.clear();
        self.is_dirty.clear();
        self.is_dirty.resize(n, false);
        self.events.clear();
        self.next_event.clear();
        self.next_event.resize(n, NEVER);
        self.last_now = None;
    }

    /// The pool changed backend `i`'s live state.
    #[inline]
    pub(crate) fn mark(&mut self, i: usize) {
        if let Some(flag) = self.is_dirty.get_mut(i)
            && !*flag
        {
            *flag = true;
            self.dirty.push(i as u32);
        }
    }

    /// Backend `i` must be looked at again at `at` (replacing any earlier schedule for it).
    #[inline]
    pub(crate) fn schedule(&mut self, i: usize, at: Option<Nanos>) {
        let at = at.map_or(NEVER, |t| t.0);
        let Some(slot) = self.next_event.get_mut(i) else {
            return;
        };
        if *slot == at {
            return;
        }
        *slot = at;
        if at != NEVER {
            self.events.push(Reverse((at, i as u32)));
            if self.events.len() > 4 * self.next_event.len() + 64 {
                self.compact();
            }
        }
    }

    /// Drops the stale entries of the event queue, so it stays O(n) however often schedules
    /// are replaced.
    fn compact(&mut self) {
        self.events = self
            .next_event
            .iter()
            .enumerate()
            .filter(|&(_, &t)| t != NEVER)
            .map(|(i, &t)| Reverse((t, i as u32)))
            .collect();
    }

    /// What changed before a pick at `backends.now()`: [`Stale::All`], or [`Stale::Some`] with
    /// the backends to look at again appended to `out` (each may appear twice).
    pub(crate) fn take(&mut self, backends: &Backends<'_>, out: &mut Vec<u32>) -> Stale {
        let now = backends.now();
        let went_back = self.last_now.is_some_and(|last| now < last);
        if !backends.is_tracked() || went_back || self.is_dirty.len() != backends.len() {
            self.reset(backends.len());
            self.last_now = Some(now);
            return Stale::All;
        }
        self.last_now = Some(now);
        for &i in &self.dirty {
            self.is_dirty[i as usize] = false;
        }
        out.append(&mut self.dirty);
        while let Some(&Reverse((at, i))) = self.events.peek() {
            if at > now.0 {
                break;
            }
            self.events.pop();
            if self.next_event[i as usize] == at {
                self.next_event[i as usize] = NEVER;
                out.push(i);
            }
        }
        Stale::Some
    }
}

/// When backend `id`'s passive-health verdict changes by itself: the end of its
/// `fail_timeout`, if it is out for failures now.
#[inline]
pub(crate) fn failure_ends(backends: &Backends<'_>, id: crate::BackendId) -> Option<Nanos> {
    let state = backends.state(id);
    state
        .is_failed(backends.now())
        .then(|| Nanos(state.checked.0.saturating_add(state.spec.fail_timeout.0).saturating_add(1)))
}
