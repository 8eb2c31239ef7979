//! `latency`: the statistical latency-based algorithm of seed 002 (Xu, Miao, Goyal, "Design
//! and Analysis for Layer 7 Load Balancing Algorithms", §V).
//!
//! Every backend's expected latency per request is `l = base + p·(1/s − 1)`: `base` an
//! exponential moving average of its recent latencies, `s` its recent success rate, and `p` the
//! penalty for a failed attempt (the paper's timeout), so that a backend needing `1/s`
//! tries on average pays `1/s − 1` timeouts. Each request then goes to a backend drawn at random
//! with probability `(1/l_i) / Σ_j (1/l_j)`, re-weighted after every completion (the paper found
//! periodic re-weighting worse).
//!
//! The algorithm keeps its own per-backend windows from [`Balancer::on_complete`]: the last
//! `window` latencies, and the last `window` outcomes (successes and failures). What counts as
//! which is [`Completion::verdict`]'s rule: an answer in the upstream's `failure_statuses`
//! (a fast 503) and a failed attempt (a read timeout) are failures, and so is a request whose
//! client gave up after waiting longer than the backend's `l` — seed 002's penalty is the
//! price of its 4 s timeout, and a timeout is exactly such a wait; a client that leaves sooner
//! says nothing and is ignored. `base` folds the latency window from its oldest entry with the
//! newest weighted `smoothing`. A failure's latency enters `base` only when it is above it:
//! a backend that failed after 4 s took at least 4 s, but a fast refusal says nothing of how
//! long an answer takes and would make a broken backend look quick (the penalty term prices
//! the failure itself).
//!
//! Decisions the paper leaves open: a backend with no completions yet is given the best (lowest)
//! `l` known, so it is tried; with no data anywhere all backends weigh the same. A backend
//! whose window holds only failures has `s = 0`, an infinite `l` and weight 0 — yet it is
//! chosen when it is the only usable backend, since a pick must not fail while one exists.
//! Weight 0 is not for good: a backend that is never drawn would never complete anything that
//! could raise it, so ten failures in an outage would shut it out after it recovered. Once its
//! `fail_timeout` has passed since its latest failure (nginx's window for a failed peer, 10 s
//! by default), its outcomes are forgotten and it is drawn as a backend without data for one
//! request, its probe, and weighs 0 again until the probe's outcome is in (a probe into a dead
//! backend may take a whole read timeout); one success weighs it by its latency again, one
//! failure shuts it out for another `fail_timeout`, a cancelled probe lets the next pick probe. Time comes from the pick's `now`, so this is exact in virtual time.
//!
//! The penalty: the paper sets `p` to its timeout (4 s in its testbed), which is
//! [`Options::DEFAULT_PENALTY`]; the configuration sets it to the upstream's `read_timeout`
//! unless `penalty` is given.
//!
//! The draw is O(log n): the weights `1/l` sit in a segment tree (each inner node holds the sum
//! and maximum of its leaves, and how many leaves have no data yet), updated on each
//! completion. Inner nodes are recomputed from their children, not adjusted by differences,
//! so floating-point error cannot accumulate and no periodic rebuild is needed.

use std::collections::VecDeque;

use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::algorithm::Options;
use crate::backend::{BackendId, Backends, Nanos};
use crate::balancer::{Balancer, Completion, PickCtx, Verdict};

/// The smallest `l`, in seconds, so that a backend answering in zero virtual time gets a
/// finite weight.
const MIN_LATENCY_SECS: f64 = 1e-9;

/// One backend's recent history.
#[derive(Debug, Clone, Default)]
struct History {
    /// Latencies of the last `window` successes (and of failures slower than `base`), in
    /// seconds, oldest first.
    latencies: VecDeque<f64>,
    /// The last `window` outcomes (`true` for success), oldest first.
    outcomes: VecDeque<bool>,
    successes: u32,
    /// Readmitted after a shut-out and not drawn since: the next pick of it is its probe.
    probe: bool,
    /// Its probe is in flight: it weighs 0 until an outcome comes back.
    awaiting: bool,
}

/// What the algorithm knows of a backend's latency.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Estimate {
    /// No completion yet.
    Unknown,
    /// The weight `1/l` (0 when every recent attempt failed).
    Weight(f64),
}

#[derive(Debug)]
pub struct Latency {
    rng: Pcg64Mcg,
    window: usize,
    smoothing: f64,
    penalty_secs: f64,
    histories: Vec<History>,
    tree: WeightTree,
    /// Each backend's `fail_timeout`, how long a window of failures shuts it out.
    fail_timeouts: Vec<Nanos>,
    /// Backends whose window holds only failures (weight 0), with the time they are tried
    /// again; usually empty, so a pick pays nothing for it.
    shut_out: Vec<(BackendId, Nanos)>,
}

impl Latency {
    /// Reads `window`, `smoothing` and `penalty` from `options` (a window of 0 counts as 1, a
    /// smoothing outside (0, 1] as the default 0.5).
    pub fn new(options: &Options, seed: u64) -> Latency {
        let smoothing = if options.smoothing > 0.0 && options.smoothing <= 1.0 {
            options.smoothing
        } else {
            Options::DEFAULT_SMOOTHING
        };
        Latency {
            rng: Pcg64Mcg::seed_from_u64(seed),
            window: options.window.max(1) as usize,
            smoothing,
            penalty_secs: options.penalty.as_secs_f64(),
            histories: Vec::new(),
            tree: WeightTree::new(0),
            fail_timeouts: Vec::new(),
            shut_out: Vec::new(),
        }
    }

    /// Forgets the failures of every shut-out backend whose `fail_timeout` has passed since its
    /// last failure, so that it is drawn again as a backend without data, for one request (its
    /// probe) until an outcome comes back.
    fn readmit(&mut self, now: Nanos) {
        let mut k = 0;
        while k < self.shut_out.len() {
            let (id, at) = self.shut_out[k];
            if now < at {
                k += 1;
                continue;
            }
            self.shut_out.swap_remove(k);
            let h = &mut self.histories[id.index()];
            h.outcomes.clear();
            h.successes = 0;
            h.probe = true;
            self.tree.set(id.index(), Estimate::Unknown);
        }
    }

    /// `l = base + p·(1/s − 1)` for one history, as a weight `1/l`.
    fn estimate(&self, h: &History) -> Estimate {
        if h.outcomes.is_empty() {
            return Estimate::Unknown;
        }
        if h.successes == 0 {
            return Estimate::Weight(0.0);
        }
        let base = self.base(h).unwrap_or(0.0);
        let s = f64::from(h.successes) / h.outcomes.len() as f64;
        let l = base + self.penalty_secs * (1.0 / s - 1.0);
        Estimate::Weight(1.0 / l.max(MIN_LATENCY_SECS))
    }

    /// `base`, the latency window's moving average in seconds; `None` while it is empty.
    fn base(&self, h: &History) -> Option<f64> {
        let mut latencies = h.latencies.iter();
        let oldest = latencies.next().copied()?;
        Some(latencies.fold(oldest, |avg, &v| {
            self.smoothing * v + (1.0 - self.smoothing) * avg
        }))
    }

    /// The expected latency `l` of a backend, for [`Completion::verdict`]: the penalty
    /// (the timeout) while nothing is known, never (`u64::MAX`) while every recent attempt
    /// failed.
    fn expected(&self, h: &History) -> Nanos {
        match self.estimate(h) {
            Estimate::Unknown => Nanos((self.penalty_secs * 1e9) as u64),
            Estimate::Weight(w) if w > 0.0 => Nanos((1e9 / w) as u64),
            Estimate::Weight(_) => Nanos(u64::MAX),
        }
    }

    /// The weight a backend without data is drawn with: the best known, or 1 when nothing is
    /// known (only the proportions matter).
    fn unknown_weight(&self) -> f64 {
        let best = self.tree.max();
        if best > 0.0 { best } else { 1.0 }
    }

    fn weight(&self, id: BackendId) -> f64 {
        let h = &self.histories[id.index()];
        if h.awaiting {
            return 0.0;
        }
        match self.estimate(h) {
            Estimate::Unknown => self.unknown_weight(),
            Estimate::Weight(w) => w,
        }
    }

    /// The weighted draw: over all backends by the tree, and over the usable ones only if that
    /// landed on one that cannot be used.
    fn draw(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        let unknown_weight = self.unknown_weight();
        let total = self.tree.total(unknown_weight);
        if total > 0.0 {
            let r = self.rng.random::<f64>() * total;
            let i = self.tree.find(r, unknown_weight);
            if i < backends.len() {
                let id = BackendId(i as u32);
                if ctx.usable(id, backends) && self.weight(id) > 0.0 {
                    return Some(id);
                }
            }
        }
        self.draw_usable(ctx, backends)
    }

    /// The slow path, when the draw over all backends landed on an unusable one: a draw over
    /// the usable ones only, by weight, or uniform if they all weigh 0.
    fn draw_usable(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        let usable = || backends.ids().filter(|&id| ctx.usable(id, backends));
        let total: f64 = usable().map(|id| self.weight(id)).sum();
        if total > 0.0 {
            let mut r = self.rng.random::<f64>() * total;
            let mut last = None;
            for id in usable() {
                let w = self.weight(id);
                if w > 0.0 {
                    if r < w {
                        return Some(id);
                    }
                    r -= w;
                    last = Some(id);
                }
            }
            // Rounding left `r` just past the end: the last backend with weight.
            return last;
        }
        let n = usable().count();
        if n == 0 {
            return None;
        }
        usable().nth(self.rng.random_range(0..n))
    }
}

impl Balancer for Latency {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        if self.histories.len() != backends.len() {
            self.histories = vec![History::default(); backends.len()];
            self.tree = WeightTree::new(backends.len());
            self.shut_out.clear();
        }
        self.fail_timeouts = backends
            .ids()
            .map(|id| backends.state(id).spec().fail_timeout)
            .collect();
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        if !self.shut_out.is_empty() {
            self.readmit(ctx.now);
        }
        let id = self.draw(ctx, backends)?;
        let h = &mut self.histories[id.index()];
        if h.probe {
            // One probe at a time: a backend back from an outage gets no more until it answers.
            h.probe = false;
            h.awaiting = true;
            self.tree.set(id.index(), Estimate::Weight(0.0));
        }
        Some(id)
    }

    fn on_complete(&mut self, id: BackendId, c: &Completion) {
        let window = self.window;
        let Some(h) = self.histories.get_mut(id.index()) else {
            return;
        };
        let probe = std::mem::take(&mut h.awaiting);
        let latency = c.latency.as_secs_f64();
        let h = &self.histories[id.index()];
        let (success, slower) = match c.verdict(self.expected(h)) {
            Verdict::Success => (true, true),
            Verdict::Failure => (false, self.base(h).is_some_and(|base| latency > base)),
            Verdict::Nothing if probe => {
                // The probe said nothing of the backend: the next pick probes again.
                self.histories[id.index()].probe = true;
                self.tree.set(id.index(), Estimate::Unknown);
                return;
            }
            Verdict::Nothing => return,
        };
        let h = &mut self.histories[id.index()];
        if slower {
            if h.latencies.len() == window {
                h.latencies.pop_front();
            }
            h.latencies.push_back(latency);
        }
        if h.outcomes.len() == window && h.outcomes.pop_front() == Some(true) {
            h.successes -= 1;
        }
        h.outcomes.push_back(success);
        h.successes += u32::from(success);
        let leaf = self.estimate(&self.histories[id.index()]);
        self.tree.set(id.index(), leaf);
        // Shut out from its latest failure while its window holds nothing else.
        if !self.shut_out.is_empty() {
            self.shut_out.retain(|&(shut, _)| shut != id);
        }
        if self.histories[id.index()].successes == 0 {
            let timeout = self
                .fail_timeouts
                .get(id.index())
                .copied()
                .unwrap_or_default();
            let at = Nanos(c.now.0.saturating_add(timeout.0));
            self.shut_out.push((id, at));
        }
    }
}

/// A segment tree over the backends' weights: for every node, the sum and the maximum of its
/// leaves' known weights and the number of its leaves without data. A leaf without data weighs
/// whatever the caller says unknown backends weigh, so that weight can change (when the best
/// known one does) without touching the tree.
#[derive(Debug)]
struct WeightTree {
    /// Number of leaves: a power of two; leaf `i` is node `size + i`, node `k`'s children
    /// are `2k` and `2k + 1`.
    size: usize,
    sum: Vec<f64>,
    max: Vec<f64>,
    unknown: Vec<u32>,
}

impl WeightTree {
    /// `n` leaves, all without data.
    fn new(n: usize) -> WeightTree {
        let size = n.next_power_of_two().max(1);
        let mut unknown = vec![0u32; 2 * size];
        for leaf in &mut unknown[size..size + n] {
            *leaf = 1;
        }
        for k in (1..size).rev() {
            unknown[k] = unknown[2 * k] + unknown[2 * k + 1];
        }
        WeightTree {
            size,
            sum: vec![0.0; 2 * size],
            max: vec![0.0; 2 * size],
            unknown,
        }
    }

    fn set(&mut self, i: usize, estimate: Estimate) {
        let mut k = self.size + i;
        let (w, unknown) = match estimate {
            Estimate::Unknown => (0.0, 1),
            Estimate::Weight(w) => (w, 0),
        };
        self.sum[k] = w;
        self.max[k] = w;
        self.unknown[k] = unknown;
        while k > 1 {
            k /= 2;
            self.sum[k] = self.sum[2 * k] + self.sum[2 * k + 1];
            self.max[k] = self.max[2 * k].max(self.max[2 * k + 1]);
            self.unknown[k] = self.unknown[2 * k] + self.unknown[2 * k + 1];
        }
    }

    /// The largest known weight (0 if none).
    fn max(&self) -> f64 {
        self.max[1]
    }

    fn mass(&self, k: usize, unknown_weight: f64) -> f64 {
        self.sum[k] + f64::from(self.unknown[k]) * unknown_weight
    }

    fn total(&self, unknown_weight: f64) -> f64 {
        self.mass(1, unknown_weight)
    }

    /// The leaf where the cumulative weight passes `r` (`0 ≤ r < total`).
    fn find(&self, mut r: f64, unknown_weight: f64) -> usize {
        let mut k = 1;
        while k < self.size {
            let left = self.mass(2 * k, unknown_weight);
            if r < left {
                k *= 2;
            } else {
                r -= left;
                k = 2 * k + 1;
            }
        }
        k - self.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testing::Harness;
    use crate::backend::Nanos;
    use crate::balancer::Outcome;

    const MS: u64 = 1_000_000;

    fn options(window: u32) -> Options {
        Options {
            window,
            ..Options::default()
        }
    }

    fn feed(h: &mut Harness<Latency>, i: u32, outcome: Outcome, ms: u64) {
        let c = Completion {
            outcome,
            latency: Nanos(ms * MS),
            now: h.now,
        };
        h.balancer.on_complete(BackendId(i), &c);
    }

    fn weights(h: &Harness<Latency>) -> Vec<f64> {
        (0..h.states.len() as u32)
            .map(|i| h.balancer.weight(BackendId(i)))
            .collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    /// Window 3, smoothing 0.5, penalty 4 s:
    /// a: successes 800, 100, 200, 400 ms; the window keeps 100, 200, 400:
    ///    base = 0.1 -> 0.5·0.2 + 0.5·0.1 = 0.15 -> 0.5·0.4 + 0.5·0.15 = 0.275 s; s = 1.
    /// b: success 100, failure, success 100: base 0.1, s = 2/3, l = 0.1 + 4·(1.5 − 1) = 2.1 s.
    /// c: four successes of 50 ms: l = 0.05 s.
    /// 1/l = 3.6363…, 0.47619…, 20; shares 0.150808, 0.019749, 0.829443 (by hand and a
    /// calculator).
    fn worked_example(seed: u64) -> Harness<Latency> {
        let mut h = Harness::new(&[1, 1, 1], Latency::new(&options(3), seed));
        for ms in [800, 100, 200, 400] {
            feed(&mut h, 0, Outcome::Success, ms);
        }
        feed(&mut h, 1, Outcome::Success, 100);
        feed(&mut h, 1, Outcome::Failure, 3);
        feed(&mut h, 1, Outcome::Success, 100);
        for _ in 0..4 {
            feed(&mut h, 2, Outcome::Success, 50);
        }
        h
    }

    #[test]
    fn l_and_weights_by_hand() {
        let h = worked_example(1);
        let w = weights(&h);
        assert!(close(w[0], 1.0 / 0.275), "{w:?}");
        assert!(close(w[1], 1.0 / 2.1), "{w:?}");
        assert!(close(w[2], 1.0 / 0.05), "{w:?}");
        let total: f64 = w.iter().sum();
        for (got, want) in w.iter().zip([0.150_808, 0.019_749, 0.829_443]) {
            assert!((got / total - want).abs() < 1e-6, "{w:?}");
        }
    }

    #[test]
    fn shares_follow_one_over_l() {
        // 100000 draws with no feedback; expected 15081, 1975, 82944 (binomial sd under 120).
        let mut h = worked_example(2);
        let mut counts = [0i64; 3];
        for id in h.hold(100_000) {
            counts[id.index()] += 1;
        }
        for (got, want) in counts.iter().zip([15_081i64, 1_975, 82_944]) {
            assert!((got - want).abs() < 600, "{counts:?}");
        }
    }

    #[test]
    fn a_client_that_left_before_l_says_nothing_one_that_waited_longer_is_a_failure() {
        // c's l is 50 ms. A client gone after 40 ms: nothing changes.
        let mut h = worked_example(3);
        let before = weights(&h);
        feed(&mut h, 2, Outcome::Abandoned, 40);
        assert_eq!(weights(&h), before);
        // One that gave up after 4 s (the timeout): a failure at 4 s. c's windows (3): 50, 50
        // and 4000 ms; two successes of three. base = 0.05 -> 0.05 -> 0.5·4 + 0.5·0.05 =
        // 2.025 s; l = 2.025 + 4·(3/2 − 1) = 4.025 s.
        feed(&mut h, 2, Outcome::Abandoned, 4000);
        let w = weights(&h);
        assert!(close(w[2], 1.0 / 4.025), "{w:?}");
        assert_eq!(w[..2], before[..2]);
    }

    /// Seed 004's finding: a backend answering 503 in 1 ms looked fastest, since every answer
    /// was a success. Now its answers are failures (at 1 ms, below its base: base unchanged).
    #[test]
    fn a_backend_answering_failures_fast_is_not_preferred() {
        // a: 100 ms answers. b: 50 ms answers, then every other answer a 503 in 1 ms: window
        // 10 holds 5 failures, s = 0.5, base 50 ms, l = 0.05 + 4·(2 − 1) = 4.05 s against
        // 0.1 s: b gets (1/4.05) / (10 + 1/4.05) = 2.41% of the picks (sd about 15 of 10000).
        let mut h = Harness::new(&[1, 1], Latency::new(&options(10), 9));
        for _ in 0..10 {
            feed(&mut h, 0, Outcome::Success, 100);
            feed(&mut h, 1, Outcome::Success, 50);
        }
        for _ in 0..5 {
            feed(&mut h, 1, Outcome::FailedAnswer, 1);
            feed(&mut h, 1, Outcome::Success, 50);
        }
        let w = weights(&h);
        assert!(close(w[1], 1.0 / 4.05), "{w:?}");
        let b = h.hold(10_000).iter().filter(|id| id.0 == 1).count();
        assert!(b.abs_diff(241) < 80, "{b}");
    }

    #[test]
    fn a_backend_whose_requests_are_abandoned_at_the_timeout_loses_weight() {
        // a: 100 ms. b: 50 ms, then 5 of its requests abandoned at the 4 s timeout: window 10
        // keeps 5 successes at 50 ms and 5 failures at 4 s; b now weighs far below a.
        let mut h = Harness::new(&[1, 1], Latency::new(&options(10), 10));
        for _ in 0..10 {
            feed(&mut h, 0, Outcome::Success, 100);
            feed(&mut h, 1, Outcome::Success, 50);
        }
        assert!(weights(&h)[1] > weights(&h)[0]);
        for _ in 0..5 {
            feed(&mut h, 1, Outcome::Abandoned, 4000);
        }
        let w = weights(&h);
        assert!(w[1] < w[0] / 20.0, "{w:?}");
        let b = h.hold(10_000).iter().filter(|id| id.0 == 1).count();
        assert!(b < 500, "{b}");
    }

    #[test]
    fn a_failing_backend_share_falls() {
        // Two backends at 100 ms: even. Then b fails 5 times in 10: s = 0.5, l = 0.1 + 4 =
        // 4.1 s against 0.1: its share falls to (1/4.1) / (1/0.1 + 1/4.1) = 2.38%, 238 of
        // 10000 (sd about 15). Then all failures: s = 0, weight 0.
        let mut h = Harness::new(&[1, 1], Latency::new(&options(10), 4));
        for _ in 0..10 {
            feed(&mut h, 0, Outcome::Success, 100);
            feed(&mut h, 1, Outcome::Success, 100);
        }
        let even = h.hold(10_000).iter().filter(|id| id.0 == 1).count();
        assert!(even.abs_diff(5_000) < 250, "{even}");
        for k in 0..10 {
            let outcome = if k % 2 == 0 {
                Outcome::Failure
            } else {
                Outcome::Success
            };
            feed(&mut h, 1, outcome, 100);
        }
        let failing = h.hold(10_000).iter().filter(|id| id.0 == 1).count();
        assert!(failing.abs_diff(238) < 80, "{failing}");
        for _ in 0..10 {
            feed(&mut h, 1, Outcome::Failure, 100);
        }
        assert!(!h.hold(1_000).contains(&BackendId(1)));
        // ... yet it is chosen when it is the only usable backend.
        h.mark_down(0);
        assert_eq!(h.pick(), Some(BackendId(1)));
    }

    /// The review's finding: about ten failures during an outage gave a backend weight 0 for
    /// good, since a backend that is never drawn never completes anything that could raise it.
    #[test]
    fn a_backend_recovered_from_an_outage_is_tried_again() {
        let s = |secs: u64| Nanos(secs * 1_000_000_000);
        let mut h = Harness::new(&[1, 1], Latency::new(&options(10), 8));
        for _ in 0..10 {
            feed(&mut h, 0, Outcome::Success, 100);
            feed(&mut h, 1, Outcome::Success, 100);
        }
        // The outage: ten failures at t = 100 s fill b's window.
        h.now = s(100);
        for _ in 0..10 {
            feed(&mut h, 1, Outcome::Failure, 100);
        }
        // Within its fail_timeout (10 s, nginx's default) b is not drawn.
        h.now = s(105);
        assert!(!h.hold(1_000).contains(&BackendId(1)));
        // Once it has passed, b is drawn again, as a backend without data (the best known
        // weight, so about half of the picks): within a few picks, and once only while that
        // probe is in flight.
        h.now = Nanos(s(110).0 + 1);
        let held = h.hold(100);
        let first = held.iter().position(|&id| id == BackendId(1));
        assert!(matches!(first, Some(k) if k < 20), "{first:?}");
        assert_eq!(held.iter().filter(|id| id.0 == 1).count(), 1);
        // Healthy again: one success and it is weighed by its latency, evenly with a.
        feed(&mut h, 1, Outcome::Success, 100);
        let b = h.hold(10_000).iter().filter(|id| id.0 == 1).count();
        assert!(b.abs_diff(5_000) < 250, "{b}");
        // Still failing when tried: out again for another fail_timeout from that failure.
        for _ in 0..10 {
            feed(&mut h, 1, Outcome::Failure, 100);
        }
        h.now = s(115);
        assert!(!h.hold(1_000).contains(&BackendId(1)));
        h.now = s(121);
        assert!(h.hold(100).contains(&BackendId(1)));
        // A probe cancelled by its client says nothing: the next pick probes again.
        feed(&mut h, 1, Outcome::Cancelled, 100);
        assert!(h.hold(100).contains(&BackendId(1)));
    }

    #[test]
    fn a_backend_without_data_gets_the_best_known_l() {
        // a: 200 ms, b: 50 ms, c: nothing yet -> c weighs as b does: shares 1/4 : 1 : 1 of 2.25.
        let mut h = Harness::new(&[1, 1, 1], Latency::new(&options(10), 5));
        feed(&mut h, 0, Outcome::Success, 200);
        feed(&mut h, 1, Outcome::Success, 50);
        assert_eq!(weights(&h)[2], weights(&h)[1]);
        let mut counts = [0i64; 3];
        for id in h.hold(45_000) {
            counts[id.index()] += 1;
        }
        for (got, want) in counts.iter().zip([5_000i64, 20_000, 20_000]) {
            assert!((got - want).abs() < 500, "{counts:?}");
        }
        // Nothing known at all: uniform.
        let mut h = Harness::new(&[1, 1, 1, 1], Latency::new(&options(10), 6));
        let mut counts = [0i64; 4];
        for id in h.hold(40_000) {
            counts[id.index()] += 1;
        }
        assert!(
            counts.iter().all(|c| (c - 10_000).abs() < 500),
            "{counts:?}"
        );
    }

    #[test]
    fn unusable_backends_are_redrawn_over_the_usable_in_proportion() {
        // The worked example with c (the heaviest) down: a : b = 3.636 : 0.476, so b gets
        // 0.476 / 4.113 = 11.58% of the draws: 2316 of 20000 (sd about 45).
        let mut h = worked_example(7);
        h.mark_down(2);
        let b = h.hold(20_000).iter().filter(|id| id.0 == 1).count();
        assert!(b.abs_diff(2_316) < 250, "{b}");
        h.mark_down(0);
        h.mark_down(1);
        assert_eq!(h.pick(), None);
    }
}
