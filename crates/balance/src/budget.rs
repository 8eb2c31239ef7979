//! A retry budget: retries capped to a share of the requests, so that a failing upstream does
//! not multiply its own load (a retry storm).
//!
//! Finagle's `RetryBudget` semantics (Envoy's `retry_budget` is the same idea, as a share of the
//! requests in flight): every request deposits `ratio` of a retry, every retry withdraws one,
//! and deposits and withdrawals count for `window` only; on top of what the window holds, a
//! reserve of `min_per_second × window` retries lets a lightly used upstream retry at all. A
//! retry the budget cannot pay for is not made. Over any window, then, retries are at most
//! `ratio × requests + min_per_second × window`.
//!
//! Pure: the caller passes the time ([`Nanos`]). The window is kept in [`SLOTS`] slots, each
//! `window / SLOTS` long; a slot older than the window is emptied as time moves past it, so a
//! deposit leaves the window between `window × (1 − 1/SLOTS)` and `window` after it was made.

use crate::backend::Nanos;

/// Slots the window is kept in.
pub const SLOTS: usize = 10;

/// What one retry costs, in the budget's units (a request deposits `ratio` of it).
const RETRY: i64 = 1000;

/// A budget's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryBudgetSettings {
    /// Retries a request earns (Finagle's `percentCanRetry`): 0 to 1000.
    pub ratio: f64,
    /// Retries a second allowed whatever the requests (Finagle's `minRetriesPerSec`).
    pub min_per_second: u32,
    /// How long deposits and withdrawals count, in nanoseconds (Finagle's `ttl`); at least
    /// [`SLOTS`].
    pub window: Nanos,
}

impl Default for RetryBudgetSettings {
    /// The project's defaults: 20% of the requests (Finagle's and Envoy's share), 3 a second
    /// (Finagle's is 10; 3 keeps a small upstream's retries small), over 10 s (Finagle's).
    fn default() -> RetryBudgetSettings {
        RetryBudgetSettings {
            ratio: 0.2,
            min_per_second: 3,
            window: Nanos(10_000_000_000),
        }
    }
}

/// An upstream's retry budget.
#[derive(Debug, Clone)]
pub struct RetryBudget {
    /// What a request deposits, in units of [`RETRY`] / 1000 of a retry.
    deposit: i64,
    /// Retries always available over the window, in the same units.
    reserve: i64,
    /// Each slot's length, in nanoseconds.
    slot_len: u64,
    /// Deposits less withdrawals, by slot.
    slots: [i64; SLOTS],
    /// The number of the newest slot (time / `slot_len`).
    newest: u64,
}

impl RetryBudget {
    pub fn new(settings: RetryBudgetSettings) -> RetryBudget {
        let window = settings.window.0.max(SLOTS as u64);
        let seconds = window as f64 / 1e9;
        let ratio = if settings.ratio.is_finite() {
            settings.ratio.clamp(0.0, 1000.0)
        } else {
            0.0
        };
        RetryBudget {
            deposit: (ratio * RETRY as f64).round() as i64,
            reserve: (f64::from(settings.min_per_second) * seconds * RETRY as f64).round() as i64,
            slot_len: window / SLOTS as u64,
            slots: [0; SLOTS],
            newest: 0,
        }
    }

    /// A request was made at `now` (its first attempt): it earns its share of a retry.
    pub fn deposit(&mut self, now: Nanos) {
        let slot = self.advance(now);
        self.slots[slot] = self.slots[slot].saturating_add(self.deposit);
    }

    /// Whether a retry may be made at `now`; if so, it is paid for.
    pub fn try_withdraw(&mut self, now: Nanos) -> bool {
        let slot = self.advance(now);
        if self.balance() < RETRY {
            return false;
        }
        self.slots[slot] = self.slots[slot].saturating_sub(RETRY);
        true
    }

    /// A retry paid for at `now` was not made after all (no backend could be picked for it):
    /// its withdrawal is given back.
    pub fn refund(&mut self, now: Nanos) {
        let slot = self.advance(now);
        self.slots[slot] = self.slots[slot].saturating_add(RETRY);
    }

    /// Retries the budget could pay for now (rounded down).
    pub fn available(&mut self, now: Nanos) -> u64 {
        self.advance(now);
        (self.balance().max(0) / RETRY) as u64
    }

    fn balance(&self) -> i64 {
        self.slots
            .iter()
            .fold(self.reserve, |sum, &s| sum.saturating_add(s))
    }

    /// Moves the window to `now`, emptying the slots it leaves; the index of `now`'s slot. A
    /// time before the newest slot (clocks of two threads) counts in the newest.
    fn advance(&mut self, now: Nanos) -> usize {
        let at = now.0 / self.slot_len;
        if at > self.newest {
            let passed = (at - self.newest).min(SLOTS as u64);
            for k in 1..=passed {
                self.slots[((self.newest + k) % SLOTS as u64) as usize] = 0;
            }
            self.newest = at;
        }
        (self.newest % SLOTS as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn budget(ratio: f64, min_per_second: u32) -> RetryBudget {
        RetryBudget::new(RetryBudgetSettings {
            ratio,
            min_per_second,
            window: Nanos(10 * SECOND),
        })
    }

    #[test]
    fn the_reserve_alone_allows_min_per_second_times_the_window() {
        let mut b = budget(0.2, 3);
        let allowed = (0..100).filter(|_| b.try_withdraw(Nanos(SECOND))).count();
        assert_eq!(allowed, 30);
        // Spent for the window; back once the window has passed.
        assert!(!b.try_withdraw(Nanos(5 * SECOND)));
        assert_eq!(b.available(Nanos(11 * SECOND + 1)), 30);
    }

    #[test]
    fn a_refund_gives_a_withdrawal_back() {
        let mut b = budget(0.0, 1);
        // A reserve of 10 over the window, spent; one given back is one more to spend.
        assert_eq!(
            (0..20).filter(|_| b.try_withdraw(Nanos(SECOND))).count(),
            10
        );
        b.refund(Nanos(SECOND));
        assert!(b.try_withdraw(Nanos(SECOND)));
        assert!(!b.try_withdraw(Nanos(SECOND)));
    }

    #[test]
    fn requests_earn_their_ratio_of_retries() {
        let mut b = budget(0.2, 0);
        for i in 0..1000 {
            b.deposit(Nanos(i * 1_000_000));
        }
        // 1000 requests at 20%: 200 retries, not one more.
        let allowed = (0..1000).filter(|_| b.try_withdraw(Nanos(SECOND))).count();
        assert_eq!(allowed, 200);
    }

    #[test]
    fn deposits_expire_with_the_window() {
        let mut b = budget(0.5, 0);
        for _ in 0..100 {
            b.deposit(Nanos(0));
        }
        assert_eq!(b.available(Nanos(9 * SECOND)), 50);
        assert_eq!(b.available(Nanos(10 * SECOND)), 0);
    }

    #[test]
    fn retries_stay_within_the_bound_over_any_window_under_a_storm() {
        // Every request fails and asks for a retry, for a minute: the retries over each window
        // stay within ratio × requests + the reserve.
        let mut b = budget(0.2, 3);
        let mut log = Vec::new();
        for ms in 0..60_000u64 {
            let now = Nanos(ms * 1_000_000);
            b.deposit(now);
            log.push((now, b.try_withdraw(now)));
        }
        for start in (0..50_000u64).step_by(1000) {
            let (from, to) = (start * 1_000_000, (start + 10_000) * 1_000_000);
            let within: Vec<_> = log
                .iter()
                .filter(|(t, _)| t.0 >= from && t.0 < to)
                .collect();
            let retries = within.iter().filter(|(_, r)| *r).count() as f64;
            let bound = 0.2 * within.len() as f64 + 30.0;
            // A slot's worth of deposits may still count at the window's edge.
            assert!(
                retries <= bound * (1.0 + 1.0 / SLOTS as f64),
                "{retries} > {bound}"
            );
        }
        let total = log.iter().filter(|(_, r)| *r).count();
        assert!(total > 11_000, "the budget must allow its share: {total}");
    }
}
