//! Which backends an indexed algorithm must read again before a pick: those whose live state
//! the pool changed, and those whose eligibility or score the clock alone has changed.
//!
//! An algorithm that keeps an index over the backends (a tree keyed on their scores, see
//! [`crate::smooth_index`]) cannot read every backend on every pick: that is the O(n) it
//! exists to avoid. So [`Pool`](crate::Pool) tells it which backends it changed
//! ([`Balancer::on_change`](crate::Balancer::on_change)): in flight, health, a probe's
//! window. What no one changes but the clock — a failed backend's `fail_timeout` running out,
//! `least_time`'s response time halving while a backend stays idle — is a function of `now`
//! that steps at known times; with each read the algorithm records the window of time in
//! which what it read stays true, and a pick at a time outside a backend's window reads that
//! backend again. Windows have two ends because `now` need not grow from pick to pick: the
//! proxy's workers read the clock before they take the pool's lock.
//!
//! A view that no pool keeps the books for ([`Backends::is_tracked`] false: an algorithm driven
//! by hand, as the unit tests do) has every backend read again, which is always exact.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::backend::{BackendId, Backends};

/// No bound: a window that never closes on that side.
const NEVER: u64 = u64::MAX;

/// The times `[from, until)` between which what an algorithm read of a backend stays true
/// whatever the clock says (in nanoseconds; `until` [`NEVER`] for no end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) from: u64,
    pub(crate) until: u64,
}

impl Window {
    pub(crate) const ALWAYS: Window = Window {
        from: 0,
        until: NEVER,
    };

    /// Both windows at once.
    pub(crate) fn and(self, other: Window) -> Window {
        Window {
            from: self.from.max(other.from),
            until: self.until.min(other.until),
        }
    }
}

#[derive(Debug, Default, Clone)]
pub(crate) struct Tracker {
    /// Backends changed since the last pick, each once.
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
    /// Each backend's window as last read.
    windows: Vec<Window>,
    /// (end of window, backend), earliest first, and (start of window, backend), latest
    /// first; an entry that is no longer the backend's window is stale and skipped.
    ends: BinaryHeap<Reverse<(u64, u32)>>,
    starts: BinaryHeap<(u64, u32)>,
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
    /// Forgets everything, for `n` backends (a rebuild, which reads every backend).
    pub(crate) fn reset(&mut self, n: usize) {
        self.dirty.clear();
        self.is_dirty.clear();
        self.is_dirty.resize(n, false);
        self.windows.clear();
        self.windows.resize(n, Window::ALWAYS);
        self.ends.clear();
        self.starts.clear();
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

    /// What was just read of backend `i` holds within `window`.
    #[inline]
    pub(crate) fn read(&mut self, i: usize, window: Window) {
        let Some(slot) = self.windows.get_mut(i) else {
            return;
        };
        if *slot == window {
            return;
        }
        *slot = window;
        if window.until != NEVER {
            self.ends.push(Reverse((window.until, i as u32)));
        }
        if window.from != 0 {
            self.starts.push((window.from, i as u32));
        }
        if self.ends.len() + self.starts.len() > 4 * self.windows.len() + 64 {
            self.compact();
        }
    }

    /// Drops the stale entries of the queues, so they stay O(n) however often windows are
    /// replaced.
    fn compact(&mut self) {
        let live = || self.windows.iter().enumerate();
        self.ends = live()
            .filter(|(_, w)| w.until != NEVER)
            .map(|(i, w)| Reverse((w.until, i as u32)))
            .collect();
        self.starts = live()
            .filter(|(_, w)| w.from != 0)
            .map(|(i, w)| (w.from, i as u32))
            .collect();
    }

    /// What changed before a pick at `backends.now()`: [`Stale::All`], or [`Stale::Some`] with
    /// the backends to read again appended to `out` (each may appear twice): those the pool
    /// changed, and those read at a time whose window does not hold `now` (the clock moved
    /// past its end, or — picks on several threads read the clock before taking the lock —
    /// back before its start).
    pub(crate) fn take(&mut self, backends: &Backends<'_>, out: &mut Vec<u32>) -> Stale {
        if !backends.is_tracked() || self.is_dirty.len() != backends.len() {
            self.reset(backends.len());
            return Stale::All;
        }
        let now = backends.now().0;
        for &i in &self.dirty {
            self.is_dirty[i as usize] = false;
        }
        out.append(&mut self.dirty);
        while let Some(&Reverse((until, i))) = self.ends.peek() {
            if until > now {
                break;
            }
            self.ends.pop();
            if self.windows[i as usize].until == until {
                self.windows[i as usize] = Window::ALWAYS;
                out.push(i);
            }
        }
        while let Some(&(from, i)) = self.starts.peek() {
            if from <= now {
                break;
            }
            self.starts.pop();
            if self.windows[i as usize].from == from {
                self.windows[i as usize] = Window::ALWAYS;
                out.push(i);
            }
        }
        Stale::Some
    }
}

/// The window in which backend `id`'s passive-health verdict stays as it is at `now`: out
/// until its `fail_timeout` has passed since `checked`, then back (until the pool changes it).
#[inline]
pub(crate) fn failure_window(backends: &Backends<'_>, id: BackendId) -> Window {
    let state = backends.state(id);
    if state.spec.max_fails == 0 || state.fails < state.spec.max_fails {
        return Window::ALWAYS;
    }
    // `is_failed` holds while `now − checked ≤ fail_timeout` (and before `checked`).
    let back = state
        .checked
        .0
        .saturating_add(state.spec.fail_timeout.0)
        .saturating_add(1);
    if backends.now().0 < back {
        Window {
            from: 0,
            until: back,
        }
    } else {
        Window {
            from: back,
            until: NEVER,
        }
    }
}
