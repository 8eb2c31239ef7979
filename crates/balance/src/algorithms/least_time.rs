//! `least_time`: nginx's `least_time last_byte` (`ngx_http_upstream_get_least_time_peer` and
//! `ngx_http_upstream_least_time_eta` in `src/http/modules/ngx_http_upstream_least_time_module.c`,
//! nginx OSS 1.31): the backend expected to finish its current work soonest.
//!
//! Each backend's estimate is `eta = rt · (1 + in_flight)`, where `rt` is its average response
//! time in milliseconds — the Pool's moving average `avg = avg ? 0.05·v + 0.95·avg : v` over
//! successful requests, pick to completion (nginx's `last_byte`).
//!
//! Deliberate difference: failures. nginx's average sees only answers, so a backend that
//! answers 503 in a millisecond is its fastest. Here `rt` also pays seed 002's price of
//! failures (§V), `rt + p·(1/s − 1)`: `s` is the Pool's success rate (the same 0.05 smoothing;
//! what counts as a failure is [`crate::Completion::verdict`]'s rule — an answer in
//! `failure_statuses`, a failed attempt, a client that gave up after waiting longer than
//! `rt`), and `p` is the 5000 ms cap below, the worst response time `least_time`
//! distinguishes (seed 002 uses its 4 s timeout). A failure slower than the average also
//! raises it (the Pool's rule). Then nginx shapes `rt` the way this module does:
//!
//! * a backend not chosen for longer than `fail_timeout` has `rt` halved once per
//!   `fail_timeout + 1` seconds since its failure window last started, so a slow backend is
//!   given another chance;
//! * an `rt` above 5000 ms counts as 5000 (all such backends are equally bad, and the choice
//!   falls back to least connections);
//! * otherwise `rt` is rounded up to the next multiple of 20 ms (`rt += 20 − rt mod 20`), so
//!   backends with close response times tie and share the load. A backend without a response
//!   time yet has `rt = 0`, hence 20 ms: it competes with the fastest bucket.
//!
//! The lowest `eta` per unit of weight wins, compared without division as
//! `eta_a · weight_b < eta_b · weight_a`; ties are broken by smooth weighted round robin among
//! exactly the tied backends, as `least_conn` does. Weights are [`Backends::share`], so slow
//! start applies.

use crate::algorithm::Implementation;
use crate::algorithms::dual::{Dual, Family};
use crate::backend::{BackendId, Backends, Nanos};
use crate::balancer::{Balancer, Completion, PickCtx};
use crate::reference;
use crate::smooth_index::{Score, SmoothIndex};
use crate::tracking::Window;

/// Response times above this many milliseconds all count as this (nginx's cap).
const RT_CAP_MS: u64 = 5000;
/// Response times are rounded up to buckets of this many milliseconds (nginx's clusters).
const RT_BUCKET_MS: u64 = 20;

const NANOS_PER_MS: u64 = 1_000_000;
const NANOS_PER_SEC: u64 = 1_000_000_000;

/// `least_time`: the linear scan on small tiers, [`SmoothIndex`] over `eta` levels on large
/// ones (see [`crate::algorithms::dual`]); the same picks either way. The clock alone changes
/// a backend's shaped `rt` (halved while idle): the index schedules those moments
/// ([`rt_changes_at`]) and looks at the backend again then.
#[derive(Debug)]
pub struct LeastTime {
    imp: Dual<reference::LeastTime, SmoothIndex>,
}

impl Default for LeastTime {
    fn default() -> LeastTime {
        LeastTime::new(Implementation::Auto)
    }
}

impl LeastTime {
    pub(crate) fn new(implementation: Implementation) -> LeastTime {
        LeastTime {
            imp: Dual::new(implementation, Family::LeastLoaded, || {
                SmoothIndex::new(Score::Eta)
            }),
        }
    }
}

/// The response time nginx balances by, in milliseconds, shaped as
/// `ngx_http_upstream_least_time_eta` does (see the module doc).
pub(crate) fn shaped_rt_ms(backends: &Backends<'_>, id: BackendId, now: Nanos) -> u64 {
    let mut rt = rt_ms(backends, id);
    // nginx counts in whole seconds here (`ngx_time()`, `fail_timeout`). `checked` is the
    // Pool's `peer->checked`: restarted on a failure and on the first pick after the window.
    let state = backends.state(id);
    let idle = now.since(state.checked).0 / NANOS_PER_SEC;
    let fail_timeout = state.spec().fail_timeout.0 / NANOS_PER_SEC;
    if idle > fail_timeout {
        let shift = idle / (fail_timeout + 1);
        rt = if shift < u64::from(u64::BITS) {
            rt >> shift
        } else {
            0
        };
    }
    if rt > RT_CAP_MS {
        RT_CAP_MS
    } else {
        rt + RT_BUCKET_MS - rt % RT_BUCKET_MS
    }
}

/// The response time before nginx's shaping, in whole milliseconds (nginx keeps whole
/// milliseconds; the Pool keeps nanoseconds: rounded to the nearest), with the price of the
/// backend's failures added (see the module doc).
fn rt_ms(backends: &Backends<'_>, id: BackendId) -> u64 {
    let rt = backends
        .latency(id)
        .map_or(0, |l| (l.0 + NANOS_PER_MS / 2) / NANOS_PER_MS);
    let s = backends.success_rate(id);
    if s >= 1.0 {
        return rt;
    }
    // Past the cap the shaped value is the cap whatever the excess; `as` saturates.
    let failures = (RT_CAP_MS as f64 * (1.0 / s - 1.0)).round();
    let failures = if failures.is_finite() {
        failures.min(RT_CAP_MS as f64 + 1.0) as u64
    } else {
        RT_CAP_MS + 1
    };
    rt.saturating_add(failures)
}

/// The window in which [`shaped_rt_ms`] of `id` stays as it is at `now` by the clock alone:
/// the whole seconds of idle time over which its `rt` is halved the same number of times
/// (`[k, k + 1)` multiples of `fail_timeout + 1` seconds after `checked`), open-ended once
/// further halving changes nothing (`rt` is already 0).
pub(crate) fn rt_window(backends: &Backends<'_>, id: BackendId, now: Nanos) -> Window {
    let rt = rt_ms(backends, id);
    let state = backends.state(id);
    let step = state.spec().fail_timeout.0 / NANOS_PER_SEC + 1;
    let Some(span) = step.checked_mul(NANOS_PER_SEC) else {
        return Window::ALWAYS;
    };
    let shift = now.since(state.checked).0 / span;
    let from = if shift == 0 {
        0
    } else {
        state.checked.0.saturating_add(shift * span)
    };
    let until = if shift >= u64::from(u64::BITS) || rt >> shift == 0 {
        u64::MAX
    } else {
        state
            .checked
            .0
            .saturating_add((shift + 1).saturating_mul(span))
    };
    Window { from, until }
}

impl Balancer for LeastTime {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        self.imp.rebuild(backends, false);
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        self.imp.pick(ctx, backends)
    }

    fn on_complete(&mut self, id: BackendId, c: &Completion) {
        self.imp.on_complete(id, c);
    }

    fn on_change(&mut self, id: BackendId) {
        self.imp.on_change(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testing::{Harness, names};
    use crate::balancer::Outcome;

    fn set_rt_ms(h: &mut Harness<LeastTime>, i: usize, ms: u64) {
        h.states[i].latency = Some((ms * NANOS_PER_MS) as f64);
    }

    #[test]
    fn rt_is_shaped_as_nginx_does() {
        // 0 (no data) -> 20; 45 -> 60; 100 -> 120 (a multiple of 20 still moves up a bucket);
        // 4999 -> 5000 (4999 mod 20 = 19, +1); 5001 -> capped at 5000; 9000 -> 5000.
        let mut h = Harness::new(&[1, 1, 1, 1, 1, 1], LeastTime::default());
        for (i, ms) in [(1, 45), (2, 100), (3, 4999), (4, 5001), (5, 9000)] {
            set_rt_ms(&mut h, i, ms);
        }
        let view = Backends::new(&h.states, h.now);
        let got: Vec<u64> = view
            .ids()
            .map(|id| shaped_rt_ms(&view, id, h.now))
            .collect();
        assert_eq!(got, [20, 60, 120, 5000, 5000, 5000]);
    }

    #[test]
    fn pinned_picks_with_requests_held() {
        // rt a = 100 ms (120), b = 45 ms (60), c unknown (20); weights 1; each pick is held,
        // so eta = rt·(1 + in flight) grows. By hand:
        //  1: a120 b60 c20 -> c;   2: c40 -> c;   3: b60 = c60, tie -> smooth WRR over {b, c}
        //  from zero: b 1, c 1, b first -> b (b -1);   4: a120 b120 c60 -> c;   5: c80 -> c;
        //  6: c100 -> c;   7: a120 b120 c120, tie of all: currents a 1, b 0, c 2 -> c (c -1);
        //  8: c140, a120 = b120: a 2, b 1 -> a.
        let mut h = Harness::new(&[1, 1, 1], LeastTime::default());
        set_rt_ms(&mut h, 0, 100);
        set_rt_ms(&mut h, 1, 45);
        assert_eq!(names(&h.hold(8)), "ccbcccca");
        assert_eq!(h.in_flight(), [1, 1, 6]);
    }

    #[test]
    fn eta_is_compared_per_weight() {
        // a: 150 ms (160) at weight 3, b: 50 ms (60) at weight 1. Per weight a is 53.3 against
        // b's 60: 160·1 < 60·3, so a wins though it is slower. With b's weight 3 as well, b.
        let mut h = Harness::new(&[3, 1], LeastTime::default());
        set_rt_ms(&mut h, 0, 150);
        set_rt_ms(&mut h, 1, 50);
        assert_eq!(h.pick_excluding(&[]), Some(BackendId(0)));
        let mut h = Harness::new(&[3, 3], LeastTime::default());
        set_rt_ms(&mut h, 0, 150);
        set_rt_ms(&mut h, 1, 50);
        assert_eq!(h.pick_excluding(&[]), Some(BackendId(1)));
    }

    #[test]
    fn ties_follow_smooth_wrr_step_by_step() {
        // a: 85 ms, shaped to 100 (85 + 20 - 5), at weight 5; b and c: no response time yet
        // (20 ms) at weight 1. Per weight all are at 20, and with each request completed
        // before the next every pick ties, so the sequence is smooth WRR's for 5, 1, 1.
        let mut h = Harness::new(&[5, 1, 1], LeastTime::default());
        set_rt_ms(&mut h, 0, 85);
        let mut seq = Vec::new();
        for _ in 0..14 {
            let id = h.pick().unwrap();
            seq.push(id);
            h.complete(id, Outcome::Success);
        }
        assert_eq!(names(&seq), "aabacaaaabacaa");
    }

    #[test]
    fn beyond_the_cap_it_is_least_conn() {
        // 9 s and 6 s both count as 5000 ms: the fewer requests in flight win, ties by smooth
        // WRR. Held: 1: tie, currents a 1, b 1 -> a (a -1); 2: b alone least -> b (currents
        // untouched); 3: tie, a 0, b 2 -> b; 4: a has fewer -> a.
        let mut h = Harness::new(&[1, 1], LeastTime::default());
        set_rt_ms(&mut h, 0, 9000);
        set_rt_ms(&mut h, 1, 6000);
        assert_eq!(names(&h.hold(4)), "abba");
    }

    #[test]
    fn a_backend_idle_past_fail_timeout_has_its_rt_halved() {
        // a: 400 ms, failure window started at 0; b: 150 ms (160), window started at 24 s.
        // At 25 s, a has been idle 25 s > fail_timeout 10 s: shift = 25 / 11 = 2, so its rt is
        // 400 >> 2 = 100 -> 120, and a wins. At 10 s (not yet past), b wins.
        let mut h = Harness::new(&[1, 1], LeastTime::default());
        set_rt_ms(&mut h, 0, 400);
        set_rt_ms(&mut h, 1, 150);
        h.states[1].checked = Nanos(24 * NANOS_PER_SEC);
        h.now = Nanos(10 * NANOS_PER_SEC);
        assert_eq!(h.pick_excluding(&[]), Some(BackendId(1)));
        h.now = Nanos(25 * NANOS_PER_SEC);
        assert_eq!(h.pick_excluding(&[]), Some(BackendId(0)));
    }

    #[test]
    fn unusable_backends_are_skipped() {
        let mut h = Harness::new(&[1, 1, 1], LeastTime::default());
        set_rt_ms(&mut h, 1, 500);
        set_rt_ms(&mut h, 2, 500);
        h.mark_down(0);
        assert_eq!(h.pick_excluding(&[BackendId(1)]), Some(BackendId(2)));
        h.mark_down(2);
        assert_eq!(h.pick_excluding(&[BackendId(1)]), None);
    }
}
