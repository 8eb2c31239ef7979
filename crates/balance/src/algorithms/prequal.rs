//! `prequal`: Prequal (Wydrowski, Kleinberg, Rumble, Archer, "Load is not what you should
//! balance: Introducing Prequal", NSDI 2024, arXiv 2312.10172): pick by probed
//! requests-in-flight (RIF) and latency, not by load.
//!
//! * **Probes** are triggered by picks: each pick asks for `probe_rate` probes (r_probe; a
//!   fractional rate carries over from pick to pick) of backends drawn uniformly at random,
//!   distinct within a pick, which the caller sends off the request path
//!   ([`Balancer::wanted_probes`]). A backend answers with its RIF and its latency estimate at
//!   that RIF ([`Probe`], computed by [`RifLatency`]).
//! * **The pool** keeps at most `pool_size` probes, one per backend: a newer probe of a
//!   backend replaces its older one, and a probe arriving at a full pool evicts the oldest.
//!   A probe older than `max_age` is dropped before each pick.
//! * **Hot-cold lexicographic rule (HCL)**: a probe whose RIF is above the `quantile` (Q_RIF)
//!   of the RIFs of the last [`RIF_HISTORY`] probes received is hot, the others cold. Among the
//!   usable cold probes the lowest latency wins (ties: lower RIF, then the older entry); if
//!   every usable probe is hot, the lowest RIF wins (ties: lower latency).
//! * **Reuse**: a probe serves at most b_reuse picks, then leaves the pool. Each use adds one
//!   to the probe's RIF, for the request just sent there, and scales its latency to the new
//!   RIF as [`RifLatency`] scales between RIFs (`(rif + 1)/rif`), so that reuse spreads picks
//!   rather than piling them on one stale answer (not in the paper; prequal-rs raises the RIF
//!   too, not the latency — with the latency unchanged, a one-slot backend that answered
//!   "idle" took the next request too, behind the first). b_reuse is `reuse` when set, else
//!   [`reuse_budget`].
//! * **Removal**: `remove_rate` (r_remove) times per pick a probe leaves the pool, alternately
//!   the oldest and the worst (the hottest by RIF if any is hot, else the slowest), so the
//!   pool keeps being renewed by fresh probes.
//!
//! **Fallback.** With fewer than two usable probes (at the start, after an idle spell longer
//! than `max_age`, when a retry excludes the probed backends, when probes are lost), the pick
//! is power of two choices on this balancer's own in-flight counts, by weight (`random_two`).
//! The paper's own fallback is not stated in what we could read; one usable probe is no choice
//! at all (it would send every request to the one probed backend, hot or not), and P2C is the
//! choice with no fresh information that is robust to many balancers acting at once (Mitzenmacher,
//! "The Power of Two Choices in Randomized Load Balancing"), where least connections herds.
//! Weights act only there: HCL itself does not weigh backends, as in the paper.
//!
//! Nothing here reads a clock: probes arrive with their `now`, picks carry theirs.

use std::collections::VecDeque;

use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::algorithms::RandomTwo;
use crate::backend::{BackendId, Backends, Nanos};
use crate::balancer::{Balancer, PickCtx, Probe};

/// How many recent probe RIFs Q_RIF's quantile is taken over: four pools' worth at the default
/// pool size, enough for a 0.84 quantile to mean something, short enough to follow a change
/// of load within a few dozen picks.
pub const RIF_HISTORY: usize = 64;

/// Upper bound on b_reuse when the formula has no finite answer (the pool cannot be renewed
/// faster than it is used: `(1 − m/n)·r_probe ≤ r_remove`, e.g. with fewer backends than
/// `pool_size`). A full pool's worth of uses per probe.
const MAX_REUSE: u32 = 16;

/// δ in b_reuse's formula: the margin of probe uses over picks (1, as prequal-rs's reading of
/// the paper).
const REUSE_DELTA: f64 = 1.0;

/// At most this many wanted probes wait to be drained; beyond it new wishes are dropped, so a
/// caller that never probes (or probes slowly) costs bounded memory.
const WANTED_MAX: usize = 1024;

/// How many random draws a pick spends looking for a healthy backend to probe before it gives
/// up on that probe (a tier that is mostly down).
const PROBE_DRAWS: usize = 8;

/// Prequal's settings (`[[upstream]]` options of `algorithm = "prequal"`). Defaults are the
/// paper's, as the prequal-rs implementation states them (`prequal-core/src/config.rs`: "Defaults
/// follow the paper"); where they come from is said on each constant.
#[derive(Debug, Clone, PartialEq)]
pub struct PrequalOptions {
    /// Most probes kept in the pool, m (`pool_size`).
    pub pool_size: u32,
    /// How many picks one probe may serve, b_reuse (`reuse`); `None`: [`reuse_budget`] from the
    /// other settings and the number of backends.
    pub reuse: Option<u32>,
    /// Q_RIF: a probe whose RIF is above this quantile of recent probe RIFs is hot
    /// (`quantile`), in [0, 1].
    pub quantile: f64,
    /// r_probe: probes asked for per pick, may be fractional (`probe_rate`).
    pub probe_rate: f64,
    /// A probe older than this is dropped from the pool (`probe_max_age`).
    pub max_age: Nanos,
    /// r_remove: how many probes per pick leave the pool, alternately the oldest and the worst.
    pub remove_rate: f64,
    /// How long the prober waits for a probe's answer (`probe_timeout`). The pure core never
    /// learns of a lost probe; the prober (and the simulator) use this.
    pub probe_timeout: Nanos,
}

impl PrequalOptions {
    /// m = 16 (the paper's pool size).
    pub const DEFAULT_POOL_SIZE: u32 = 16;
    /// Q_RIF = 0.84 (the paper's value, per prequal-rs, which itself runs 0.6).
    pub const DEFAULT_QUANTILE: f64 = 0.84;
    /// r_probe = 3 probes per query (the paper's).
    pub const DEFAULT_PROBE_RATE: f64 = 3.0;
    /// 1 s (the paper's maximum probe age).
    pub const DEFAULT_MAX_AGE: Nanos = Nanos(1_000_000_000);
    /// r_remove = 1 per query (the paper's).
    pub const DEFAULT_REMOVE_RATE: f64 = 1.0;
    /// 100 ms: ours. A probe is a tiny request answered from memory; one that takes longer
    /// than this answers about a backend that has already changed.
    pub const DEFAULT_PROBE_TIMEOUT: Nanos = Nanos(100_000_000);
}

impl Default for PrequalOptions {
    fn default() -> PrequalOptions {
        PrequalOptions {
            pool_size: PrequalOptions::DEFAULT_POOL_SIZE,
            reuse: None,
            quantile: PrequalOptions::DEFAULT_QUANTILE,
            probe_rate: PrequalOptions::DEFAULT_PROBE_RATE,
            max_age: PrequalOptions::DEFAULT_MAX_AGE,
            remove_rate: PrequalOptions::DEFAULT_REMOVE_RATE,
            probe_timeout: PrequalOptions::DEFAULT_PROBE_TIMEOUT,
        }
    }
}

/// b_reuse for `backends` backends: the paper's budget
/// `max(1, (1 + δ) / ((1 − m/n)·r_probe − r_remove))`, rounded up, with m the pool size and n
/// the number of backends. Why that formula: each pick consumes one use; per pick the pool
/// gains r_probe probes, of which a share m/n replace a probe of the same backend already
/// pooled (no new uses net of the old ones), and loses r_remove; so each pooled probe must
/// serve `1 / ((1 − m/n)·r_probe − r_remove)` picks for the pool not to run dry, and δ is the
/// margin. With no positive denominator (few backends, or removal as fast as probing) the pool
/// is renewed only by replacement and the cap [`MAX_REUSE`] applies.
pub fn reuse_budget(options: &PrequalOptions, backends: usize) -> u32 {
    if let Some(reuse) = options.reuse {
        return reuse.max(1);
    }
    let m = f64::from(options.pool_size);
    let n = backends.max(1) as f64;
    let net = (1.0 - m / n) * options.probe_rate - options.remove_rate;
    if net <= 0.0 {
        return MAX_REUSE;
    }
    let budget = ((1.0 + REUSE_DELTA) / net).ceil();
    (budget as u32).clamp(1, MAX_REUSE)
}

/// One probe in the pool.
#[derive(Debug, Clone, Copy)]
struct Entry {
    id: BackendId,
    /// The answer, its RIF raised by one per pick it served.
    probe: Probe,
    /// When the answer arrived.
    received: Nanos,
    /// Picks it may still serve.
    uses_left: u32,
}

#[derive(Debug)]
pub struct Prequal {
    options: PrequalOptions,
    rng: Pcg64Mcg,
    /// The choice when fewer than two probes are usable.
    fallback: RandomTwo,
    /// At most `pool_size` probes, one per backend.
    pool: Vec<Entry>,
    /// The RIFs of the last [`RIF_HISTORY`] probes received, oldest first.
    rifs: VecDeque<u32>,
    /// Backends to probe, drained by `wanted_probes`.
    wanted: Vec<BackendId>,
    /// Fractional probes and removals owed, carried from pick to pick.
    probe_credit: f64,
    remove_credit: f64,
    /// Which removal comes next: the oldest (true) or the worst.
    remove_oldest_next: bool,
    /// b_reuse for the current number of backends.
    reuse: u32,
    /// Backends in the tier.
    backends: usize,
}

impl Prequal {
    pub fn new(options: &PrequalOptions, seed: u64) -> Prequal {
        Prequal {
            options: options.clone(),
            rng: Pcg64Mcg::seed_from_u64(seed),
            fallback: RandomTwo::new(seed ^ 0x5851_f42d_4c95_7f2d),
            pool: Vec::new(),
            rifs: VecDeque::with_capacity(RIF_HISTORY),
            wanted: Vec::new(),
            probe_credit: 0.0,
            remove_credit: 0.0,
            remove_oldest_next: true,
            reuse: 1,
            backends: 0,
        }
    }

    /// Q_RIF's threshold: the `quantile` of the recent probe RIFs (the element at
    /// `⌊(len − 1)·q⌋` of them sorted); `None` before any probe.
    fn hot_threshold(&self) -> Option<u32> {
        let last = self.rifs.len().checked_sub(1)?;
        let mut sorted: Vec<u32> = self.rifs.iter().copied().collect();
        sorted.sort_unstable();
        let q = self.options.quantile.clamp(0.0, 1.0);
        sorted.get((last as f64 * q).floor() as usize).copied()
    }

    /// The pool entry HCL chooses among those `usable` holds, if at least two are usable.
    fn hcl(&self, threshold: Option<u32>, usable: impl Fn(BackendId) -> bool) -> Option<usize> {
        let candidates = || self.pool.iter().enumerate().filter(|(_, e)| usable(e.id));
        // One usable probe is no choice.
        candidates().nth(1)?;
        let hot = |e: &Entry| threshold.is_some_and(|t| e.probe.rif > t);
        let cold = candidates()
            .filter(|(_, e)| !hot(e))
            .min_by_key(|(_, e)| (e.probe.latency, e.probe.rif, e.received));
        cold.or_else(|| {
            candidates().min_by_key(|(_, e)| (e.probe.rif, e.probe.latency, e.received))
        })
        .map(|(i, _)| i)
    }

    /// Serves one pick from entry `i`: its RIF goes up by the request sent, and it leaves the
    /// pool when its uses are spent.
    fn consume(&mut self, i: usize) -> BackendId {
        let entry = &mut self.pool[i];
        let rif = entry.probe.rif.saturating_add(1);
        entry.probe.latency = Nanos(scale_to_rif(entry.probe.latency, entry.probe.rif, rif));
        entry.probe.rif = rif;
        entry.uses_left = entry.uses_left.saturating_sub(1);
        let id = entry.id;
        if entry.uses_left == 0 {
            self.pool.swap_remove(i);
        }
        id
    }

    /// Removes `remove_rate` probes (fractions carried over), alternately the oldest and the
    /// worst: the hottest by RIF if any is hot, else the slowest.
    fn remove_some(&mut self, threshold: Option<u32>) {
        self.remove_credit += self.options.remove_rate.max(0.0);
        while self.remove_credit >= 1.0 {
            self.remove_credit -= 1.0;
            let oldest = self.remove_oldest_next;
            self.remove_oldest_next = !oldest;
            let victim = if oldest {
                (0..self.pool.len()).min_by_key(|&i| (self.pool[i].received, self.pool[i].id))
            } else {
                let hot = |e: &Entry| threshold.is_some_and(|t| e.probe.rif > t);
                let pool = &self.pool;
                (0..pool.len())
                    .filter(|&i| hot(&pool[i]))
                    .max_by_key(|&i| (pool[i].probe.rif, pool[i].probe.latency))
                    .or_else(|| {
                        (0..pool.len()).max_by_key(|&i| (pool[i].probe.latency, pool[i].probe.rif))
                    })
            };
            if let Some(i) = victim {
                self.pool.swap_remove(i);
            }
        }
    }

    /// Adds this pick's probes (`probe_rate`, fractions carried over) to the wanted list:
    /// backends drawn uniformly at random, distinct within the pick, healthy when one is found
    /// in a few draws.
    fn ask_for_probes(&mut self, backends: &Backends<'_>) {
        let n = self.backends;
        if n == 0 {
            return;
        }
        self.probe_credit += self.options.probe_rate.max(0.0);
        let whole = self.probe_credit.floor();
        self.probe_credit -= whole;
        let count = (whole as usize).min(n);
        let start = self.wanted.len();
        for _ in 0..count {
            if self.wanted.len() >= WANTED_MAX {
                return;
            }
            let fresh = |w: &[BackendId], id: BackendId| !w[start..].contains(&id);
            let healthy = |id: BackendId| backends.state(id).is_eligible(backends.now());
            let drawn = (0..PROBE_DRAWS)
                .map(|_| BackendId(self.rng.random_range(0..n) as u32))
                .find(|&id| fresh(&self.wanted, id) && healthy(id));
            if let Some(id) = drawn {
                self.wanted.push(id);
            }
        }
    }
}

impl Balancer for Prequal {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        self.fallback.rebuild(backends);
        if backends.len() != self.backends {
            // Ids may now name other backends: what was learned about them is void.
            self.pool.clear();
            self.wanted.clear();
            self.backends = backends.len();
        }
        self.reuse = reuse_budget(&self.options, self.backends);
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        self.ask_for_probes(backends);
        let max_age = self.options.max_age;
        self.pool
            .retain(|e| e.id.index() < backends.len() && ctx.now.since(e.received) <= max_age);
        let threshold = self.hot_threshold();
        let chosen = match self.hcl(threshold, |id| ctx.usable(id, backends)) {
            Some(i) => Some(self.consume(i)),
            None => self.fallback.pick(ctx, backends),
        };
        self.remove_some(threshold);
        chosen
    }

    fn wanted_probes(&mut self, out: &mut Vec<BackendId>) {
        out.append(&mut self.wanted);
    }

    fn on_probe(&mut self, id: BackendId, probe: &Probe, now: Nanos) {
        if id.index() >= self.backends {
            return;
        }
        if self.rifs.len() == RIF_HISTORY {
            self.rifs.pop_front();
        }
        self.rifs.push_back(probe.rif);
        self.pool.retain(|e| e.id != id);
        let capacity = (self.options.pool_size as usize).max(1);
        if self.pool.len() >= capacity
            && let Some(oldest) = (0..self.pool.len()).min_by_key(|&i| self.pool[i].received)
        {
            self.pool.swap_remove(oldest);
        }
        self.pool.push(Entry {
            id,
            probe: *probe,
            received: now,
            uses_left: self.reuse,
        });
    }
}

/// How many recent completions [`RifLatency`] keeps.
const LATENCY_SAMPLES: usize = 256;

/// The last this many completions inform [`RifLatency`]'s estimate whatever their age.
const LATENCY_MIN_SAMPLES: usize = 32;

/// [`RifLatency`]'s estimate takes the median of at least this many samples (when it has them):
/// those at the RIF asked, then those at the nearest RIFs, scaled.
const LATENCY_NEAR_SAMPLES: usize = 8;

/// Completions older than this do not inform [`RifLatency`]'s estimate: a backend's speed
/// changes (an antagonist comes and goes) on a scale of seconds.
const LATENCY_WINDOW: Nanos = Nanos(5_000_000_000);

/// A backend's latency estimate at a given RIF, from its recent completions: what it answers a
/// probe with (Prequal §3: the server reports its RIF and the latency it expects at that RIF,
/// estimated from recently completed requests that arrived at a similar RIF). Shared by the lab
/// backend, `fulcrum agent` and the simulator's servers.
///
/// The estimate at `rif` is the median latency of the fresh samples that arrived at exactly
/// `rif` — latency *at that RIF*, as the paper means it. (It used to take those within one of
/// `rif`, as prequal-rs reads the paper; on a one-slot backend that blends a request that
/// started at once with one that waited a whole service, so an idle backend was estimated as
/// slow as a busy one: in `sim-fleet` prequal's queues grew without bound. docs/algorithms.md
/// has the numbers.) Fresh: among the last [`LATENCY_SAMPLES`] completions, those of the last
/// [`LATENCY_WINDOW`], and the last [`LATENCY_MIN_SAMPLES`] whatever their age — a backend
/// that completes one request a second would otherwise estimate from four samples. Where none
/// arrived at `rif`, ours: the samples at the nearest RIF seen (both, at a tie), each scaled
/// by `(rif + 1) / (seen + 1)`, up or down ([`scale_to_rif`]) — a backend with fewer requests
/// in flight than any it has recent samples of is not estimated as slow as it was then. No
/// sample at all gives zero.
#[derive(Debug, Clone, Default)]
pub struct RifLatency {
    /// The last completions as (RIF at arrival, latency, completed at), oldest first.
    samples: VecDeque<(u32, Nanos, Nanos)>,
}

impl RifLatency {
    pub fn new() -> RifLatency {
        RifLatency::default()
    }

    /// A request that arrived when `rif_at_start` other requests were in flight (what a probe
    /// at that moment would have answered) completed at `now` after `latency`.
    pub fn record(&mut self, rif_at_start: u32, latency: Nanos, now: Nanos) {
        if self.samples.len() == LATENCY_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((rif_at_start, latency, now));
    }

    /// The latency a request arriving now at `rif` can expect; zero with no fresh history.
    pub fn estimate(&self, rif: u32, now: Nanos) -> Nanos {
        // The last LATENCY_MIN_SAMPLES count whatever their age; older ones within the window.
        let old = self.samples.len().saturating_sub(LATENCY_MIN_SAMPLES);
        let fresh = || {
            self.samples
                .iter()
                .enumerate()
                .filter(move |(i, s)| *i >= old || now.since(s.2) <= LATENCY_WINDOW)
                .map(|(_, s)| s)
        };
        // (distance from `rif`, latency scaled to `rif`), nearest first.
        let mut scaled: Vec<(u32, u64)> = fresh()
            .map(|s| (s.0.abs_diff(rif), scale_to_rif(s.1, s.0, rif)))
            .collect();
        scaled.sort_unstable_by_key(|s| s.0);
        // The nearest RIFs' samples, whole RIFs, until at least LATENCY_NEAR_SAMPLES.
        let count = LATENCY_NEAR_SAMPLES.min(scaled.len());
        let Some(&(reach, _)) = scaled.get(count.wrapping_sub(1)) else {
            return Nanos::ZERO;
        };
        let mut near: Vec<u64> = scaled
            .iter()
            .filter(|s| s.0 <= reach)
            .map(|s| s.1)
            .collect();
        let middle = near.len() / 2;
        let (_, median, _) = near.select_nth_unstable(middle);
        Nanos(*median)
    }
}

/// `latency`, seen at `seen` in flight, scaled to `rif`: by `(rif + 1) / (seen + 1)`, up or
/// down — a request waits behind the ones in flight, so on a one-slot backend latency grows
/// linearly with RIF, and a backend with fewer requests in flight than any it has reported
/// on must not look as slow as it did then.
fn scale_to_rif(latency: Nanos, seen: u32, rif: u32) -> u64 {
    let scaled = u128::from(latency.0) * (u128::from(rif) + 1) / (u128::from(seen) + 1);
    u64::try_from(scaled).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testing::Harness;
    use crate::balancer::Outcome;

    const MS: u64 = 1_000_000;

    fn probe(rif: u32, latency_ms: u64) -> Probe {
        Probe {
            rif,
            latency: Nanos(latency_ms * MS),
        }
    }

    /// Settings that isolate one mechanism: no probes asked for, no removals, a large reuse
    /// budget, and Q_RIF = 1 (only a RIF above every recent one is hot).
    fn quiet() -> PrequalOptions {
        PrequalOptions {
            probe_rate: 0.0,
            remove_rate: 0.0,
            quantile: 1.0,
            reuse: Some(100),
            ..PrequalOptions::default()
        }
    }

    fn harness(n: usize, options: PrequalOptions) -> Harness<Prequal> {
        Harness::new(&vec![1; n], Prequal::new(&options, 7))
    }

    /// Puts a RIF of 1000 in the recent history: with Q_RIF = 1 nothing below it is hot.
    fn nothing_hot(h: &mut Harness<Prequal>) {
        h.balancer.rifs.push_back(1000);
    }

    fn answer(h: &mut Harness<Prequal>, i: u32, rif: u32, latency_ms: u64) {
        let now = h.now;
        h.balancer
            .on_probe(BackendId(i), &probe(rif, latency_ms), now);
    }

    #[test]
    fn among_cold_probes_the_lowest_latency_wins_and_all_hot_gives_the_lowest_rif() {
        // Q_RIF 0.5 over RIFs [1, 2, 9]: the threshold is the element at ⌊2·0.5⌋ = 1, RIF 2;
        // c (RIF 9) is hot although it is the fastest. Among a and b (cold), b is faster.
        let mut h = harness(
            3,
            PrequalOptions {
                quantile: 0.5,
                ..quiet()
            },
        );
        answer(&mut h, 0, 1, 30);
        answer(&mut h, 1, 2, 20);
        answer(&mut h, 2, 9, 1);
        assert_eq!(h.balancer.hot_threshold(), Some(2));
        assert_eq!(h.pick_excluding(&[]), Some(BackendId(1)));
        // Now b's pooled RIF is 3 (the request just sent), hot too; a is the only cold one,
        // but one usable cold probe still wins over the hot ones.
        assert_eq!(h.pick_excluding(&[]), Some(BackendId(0)));
        // All hot (a at 2, b at 3, c at 9 > 2): the lowest RIF, a, whatever the latencies.
        assert_eq!(h.pick_excluding(&[]), Some(BackendId(0)));
        assert_eq!(
            h.pick_excluding(&[]),
            Some(BackendId(1)),
            "a at 3 ties b at 3: b faster"
        );
    }

    #[test]
    fn the_hot_threshold_is_the_quantile_of_recent_probe_rifs() {
        // RIFs 0..=99 arrive; the last 64 (36..=99) count. ⌊63·0.84⌋ = 52, so the threshold is
        // the 53rd smallest, 36 + 52 = 88.
        let mut h = harness(4, quiet());
        h.balancer.options.quantile = 0.84;
        assert_eq!(h.balancer.hot_threshold(), None, "no probe yet");
        for rif in 0..100 {
            answer(&mut h, rif % 4, rif, 1);
        }
        assert_eq!(h.balancer.hot_threshold(), Some(88));
        h.balancer.options.quantile = 0.0;
        assert_eq!(h.balancer.hot_threshold(), Some(36));
        h.balancer.options.quantile = 1.0;
        assert_eq!(h.balancer.hot_threshold(), Some(99));
    }

    #[test]
    fn reuse_budget_follows_the_formula() {
        let o = PrequalOptions::default();
        // n = 100: (1 − 16/100)·3 − 1 = 1.52; (1 + 1)/1.52 = 1.32 → 2.
        assert_eq!(reuse_budget(&o, 100), 2);
        // n = 1000: 0.984·3 − 1 = 1.952; 2/1.952 = 1.02 → 2. n = 10000: 2.9952 − 1 → 1.0024 → 2.
        assert_eq!(reuse_budget(&o, 1000), 2);
        // n = 40: 0.6·3 − 1 = 0.8; 2/0.8 = 2.5 → 3. n = 24: (1/3)·3 − 1 = 0: no finite answer.
        assert_eq!(reuse_budget(&o, 40), 3);
        assert_eq!(reuse_budget(&o, 24), MAX_REUSE);
        assert_eq!(reuse_budget(&o, 3), MAX_REUSE);
        // r_probe = 10 at n = 100: 8.4 − 1 = 7.4 → 0.27 → at least 1.
        let eager = PrequalOptions {
            probe_rate: 10.0,
            ..o.clone()
        };
        assert_eq!(reuse_budget(&eager, 100), 1);
        let set = PrequalOptions {
            reuse: Some(5),
            ..o
        };
        assert_eq!(reuse_budget(&set, 100), 5);
    }

    #[test]
    fn a_probe_serves_at_most_its_reuse_budget() {
        // reuse 2: a (fastest) serves two picks and leaves the pool; then b, twice (each use
        // doubles a latency at RIF 0, so they are far apart), and c's probe is left.
        let mut h = harness(
            3,
            PrequalOptions {
                reuse: Some(2),
                ..quiet()
            },
        );
        nothing_hot(&mut h);
        answer(&mut h, 0, 0, 1);
        answer(&mut h, 1, 0, 10);
        answer(&mut h, 2, 0, 100);
        let picks: Vec<u32> = (0..4).map(|_| h.pick_excluding(&[]).unwrap().0).collect();
        assert_eq!(picks, [0, 0, 1, 1]);
        assert_eq!(h.balancer.pool.len(), 1, "only c's probe is left");
    }

    #[test]
    fn probes_age_out_and_the_fallback_takes_over() {
        // a's probe says fast, but a holds 5 requests of this balancer and b none: while the
        // probes are fresh HCL sends to a; once older than max_age, P2C on in-flight sends to b.
        let mut h = harness(2, quiet());
        h.states[0].in_flight = 5;
        answer(&mut h, 0, 0, 1);
        answer(&mut h, 1, 0, 50);
        assert_eq!(h.pick_excluding(&[]), Some(BackendId(0)));
        h.now = Nanos(h.now.0 + PrequalOptions::DEFAULT_MAX_AGE.0);
        assert_eq!(h.pick_excluding(&[]), Some(BackendId(1)));
        assert!(h.balancer.pool.is_empty());
    }

    #[test]
    fn with_fewer_than_two_usable_probes_the_fallback_picks() {
        // Probes of a and b only; a retry that excludes a leaves one usable probe, b's: not a
        // choice, so P2C over the usable backends (b and c) picks, and c holds nothing.
        let mut h = harness(3, quiet());
        h.states[1].in_flight = 4;
        answer(&mut h, 0, 0, 1);
        answer(&mut h, 1, 0, 2);
        for _ in 0..20 {
            assert_eq!(h.pick_excluding(&[BackendId(0)]), Some(BackendId(2)));
        }
        // A backend marked down is not usable either, and no probe sends a pick there.
        h.mark_down(0);
        h.states[1].in_flight = 0;
        answer(&mut h, 2, 0, 3);
        for _ in 0..20 {
            assert_ne!(h.pick_excluding(&[]), Some(BackendId(0)));
        }
        // Nothing usable: none.
        h.mark_down(1);
        h.mark_down(2);
        assert_eq!(h.pick_excluding(&[]), None);
    }

    #[test]
    fn picks_ask_for_probe_rate_probes_of_distinct_healthy_backends() {
        // 1.5 probes per pick: 1, 2, 1, 2, … — six picks ask for nine; never of the backend
        // that is down, never twice in one pick.
        let mut h = harness(
            4,
            PrequalOptions {
                probe_rate: 1.5,
                ..quiet()
            },
        );
        h.mark_down(3);
        let mut per_pick = Vec::new();
        let mut all = Vec::new();
        for _ in 0..6 {
            h.pick_excluding(&[]);
            let mut out = Vec::new();
            h.balancer.wanted_probes(&mut out);
            per_pick.push(out.len());
            let mut distinct = out.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), out.len(), "{out:?}");
            all.extend(out);
        }
        assert_eq!(per_pick, [1, 2, 1, 2, 1, 2]);
        assert!(!all.contains(&BackendId(3)), "{all:?}");
        // Undrained wishes are bounded.
        h.balancer.options.probe_rate = 3.0;
        for _ in 0..1000 {
            h.pick_excluding(&[]);
        }
        assert!(h.balancer.wanted.len() <= WANTED_MAX);
    }

    #[test]
    fn the_pool_keeps_one_probe_per_backend_and_drops_the_oldest_when_full() {
        let mut h = harness(
            5,
            PrequalOptions {
                pool_size: 3,
                ..quiet()
            },
        );
        for (i, t) in [(0, 1), (1, 2), (0, 3), (2, 4), (3, 5)] {
            h.now = Nanos(t);
            answer(&mut h, i, 0, 1);
        }
        // a's second probe replaced its first; d's evicted the oldest, b's.
        let mut ids: Vec<u32> = h.balancer.pool.iter().map(|e| e.id.0).collect();
        ids.sort();
        assert_eq!(ids, [0, 2, 3]);
    }

    #[test]
    fn removal_alternates_oldest_and_worst() {
        // One removal per pick, no probes asked. Pool: a (old, fast), b (slow), c, d (newer).
        let mut h = harness(
            4,
            PrequalOptions {
                remove_rate: 1.0,
                ..quiet()
            },
        );
        nothing_hot(&mut h);
        for (i, t, latency) in [(0, 1, 1), (1, 2, 90), (2, 3, 5), (3, 4, 6)] {
            h.now = Nanos(t);
            answer(&mut h, i, 0, latency);
        }
        // First pick: a (fastest) is chosen, then the oldest (a) is removed.
        assert_eq!(h.pick_excluding(&[]), Some(BackendId(0)));
        let ids = |h: &Harness<Prequal>| {
            let mut v: Vec<u32> = h.balancer.pool.iter().map(|e| e.id.0).collect();
            v.sort();
            v
        };
        assert_eq!(ids(&h), [1, 2, 3]);
        // Second: c is chosen; nothing is hot, so the slowest (b) is removed.
        assert_eq!(h.pick_excluding(&[]), Some(BackendId(2)));
        assert_eq!(ids(&h), [2, 3]);
    }

    #[test]
    fn probes_of_backends_that_left_are_ignored() {
        let mut h = harness(2, quiet());
        answer(&mut h, 5, 0, 1);
        assert!(h.balancer.pool.is_empty());
        assert!(h.balancer.rifs.is_empty());
    }

    #[test]
    fn the_pool_hands_probes_out_and_back_with_pool_wide_ids() {
        use crate::algorithm::{Algorithm, Options};
        use crate::backend::BackendSpec;
        use crate::pool::Pool;
        let spec = |_| BackendSpec::new(1);
        let primary: Vec<_> = (0..3).map(spec).collect();
        let backup: Vec<_> = (0..2).map(spec).collect();
        let mut options = Options::default();
        options.prequal.probe_rate = 2.0;
        let mut pool = Pool::new(Algorithm::Prequal, &options, &primary, &backup, 3);
        let t = pool.pick(None, &[], Nanos(1)).unwrap();
        let mut wanted = Vec::new();
        pool.take_probes(&mut wanted);
        assert_eq!(wanted.len(), 2);
        assert!(wanted.iter().all(|id| id.index() < 3), "{wanted:?}");
        pool.take_probes(&mut wanted);
        assert_eq!(wanted.len(), 2, "drained");
        pool.complete(t, Outcome::Success, Nanos(2));
        // Probes of primaries 0 and 2 say 2 is far better: the next pick goes there.
        pool.probed(BackendId(0), probe(9, 90), Nanos(3));
        pool.probed(BackendId(2), probe(0, 1), Nanos(3));
        pool.probed(BackendId(7), probe(0, 1), Nanos(3));
        let t = pool.pick(None, &[], Nanos(4)).unwrap();
        assert_eq!(t.backend(), BackendId(2));
        pool.complete(t, Outcome::Success, Nanos(5));
    }

    #[test]
    fn rif_latency_is_the_median_at_the_rif() {
        let mut l = RifLatency::new();
        assert_eq!(l.estimate(3, Nanos(0)), Nanos::ZERO, "no history");
        let at = Nanos(1_000 * MS);
        // Eight samples at RIF 5 (10, 20, … 80 ms), eight at RIF 2 (1 ms), one at RIF 20.
        for i in 1..=8 {
            l.record(5, Nanos(i * 10 * MS), at);
            l.record(2, Nanos(MS), at);
        }
        l.record(20, Nanos(999 * MS), at);
        // Enough at the RIF asked: their (upper) median, nothing else.
        assert_eq!(l.estimate(5, at), Nanos(50 * MS));
        assert_eq!(l.estimate(2, at), Nanos(MS));
        // None at 3: the nearest RIF's, scaled by (3 + 1)/(2 + 1); at 4, RIF 5's by 5/6, and
        // below everything seen, RIF 2's by 1/3.
        assert_eq!(l.estimate(3, at), Nanos(MS * 4 / 3));
        assert_eq!(l.estimate(4, at), Nanos(50 * MS * 5 / 6));
        assert_eq!(l.estimate(0, at), Nanos(MS / 3));
        // Two samples at RIF 10 are too few alone: RIF 5's eight join them, scaled by 11/6;
        // the sixth smallest of the ten is 60·11/6 ms.
        l.record(10, Nanos(1_000 * MS), at);
        l.record(10, Nanos(1_000 * MS), at);
        assert_eq!(l.estimate(10, at), Nanos(60 * MS * 11 / 6));
        // Older than the window, but among the last 32: still used.
        let later = Nanos(at.0 + LATENCY_WINDOW.0 + 1);
        assert_eq!(l.estimate(5, later), Nanos(50 * MS));
        // Once 32 newer samples came (1 ms, at RIF 0), the old ones are forgotten: RIF 0 is
        // the nearest, its 1 ms scaled by (5 + 1)/(0 + 1).
        for _ in 0..LATENCY_MIN_SAMPLES {
            l.record(0, Nanos(MS), later);
        }
        assert_eq!(l.estimate(5, later), Nanos(6 * MS));
    }

    #[test]
    fn each_use_of_a_probe_raises_its_latency_with_its_rif() {
        // a answered 10 ms at RIF 0, b 15 ms: a is chosen; with the request just sent a is at
        // RIF 1, and at twice its latency (20 ms) it loses to b. (Before: a stayed at 10 ms
        // and took the second request too, behind the first on a one-slot backend.)
        let mut h = harness(2, quiet());
        nothing_hot(&mut h);
        answer(&mut h, 0, 0, 10);
        answer(&mut h, 1, 0, 15);
        assert_eq!(h.pick_excluding(&[]), Some(BackendId(0)));
        assert_eq!(h.pick_excluding(&[]), Some(BackendId(1)));
        let a = h.balancer.pool.iter().find(|e| e.id == BackendId(0));
        assert_eq!(
            a.map(|e| (e.probe.rif, e.probe.latency)),
            Some((1, Nanos(20 * MS)))
        );
    }

    #[test]
    fn rif_latency_does_not_rate_an_idle_one_slot_backend_as_slow_as_a_busy_one() {
        // One slot, 1 s of work: a request arriving at RIF 0 takes 1 s, at RIF 1 about 2 s.
        // (Before: the median within one of the RIF blended them, 2 s at both.)
        let mut l = RifLatency::new();
        let at = Nanos(1_000 * MS);
        for _ in 0..10 {
            l.record(0, Nanos(1_000 * MS), at);
            l.record(1, Nanos(2_000 * MS), at);
        }
        assert_eq!(l.estimate(0, at), Nanos(1_000 * MS));
        assert_eq!(l.estimate(1, at), Nanos(2_000 * MS));
        // A backend that has been busy (every request arrived at RIF 4, 5 s) and is idle now
        // is not as slow as it was. (Before: not scaled down, 5 s at RIF 0.)
        let mut busy = RifLatency::new();
        for _ in 0..10 {
            busy.record(4, Nanos(5_000 * MS), at);
        }
        assert_eq!(busy.estimate(4, at), Nanos(5_000 * MS));
        assert_eq!(busy.estimate(0, at), Nanos(1_000 * MS));
    }

    #[test]
    fn rif_latency_keeps_the_last_samples_only() {
        let mut l = RifLatency::new();
        for i in 0..LATENCY_SAMPLES as u64 {
            l.record(1, Nanos(1000 * MS), Nanos(i));
        }
        for i in 0..LATENCY_SAMPLES as u64 {
            l.record(1, Nanos(MS), Nanos(i + 1000));
        }
        assert_eq!(l.estimate(1, Nanos(5000)), Nanos(MS));
    }

    #[derive(Debug, Clone)]
    enum Step {
        Answer {
            backend: u32,
            rif: u32,
            latency_ms: u64,
        },
        Pick {
            exclude: Vec<u32>,
            hold: bool,
        },
        Down(u32),
        Up(u32),
        Full(u32),
        Wait(u64),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0..8u32, 0..20u32, 0..100u64).prop_map(|(backend, rif, latency_ms)| {
                Step::Answer { backend, rif, latency_ms }
            }),
            4 => (proptest::collection::vec(0..6u32, 0..4), any::<bool>())
                .prop_map(|(exclude, hold)| Step::Pick { exclude, hold }),
            1 => (0..6u32).prop_map(Step::Down),
            1 => (0..6u32).prop_map(Step::Up),
            1 => (0..6u32).prop_map(Step::Full),
            1 => (0..2_000u64).prop_map(Step::Wait),
        ]
    }

    proptest::proptest! {
        /// Whatever the probes say (of backends that are down, full, excluded or gone), a pick
        /// goes only to a backend that is eligible, has room and is not excluded, and finds one
        /// whenever there is one.
        #[test]
        fn picks_never_go_to_an_excluded_or_ineligible_backend(
            steps in proptest::collection::vec(step(), 1..120),
            seed in 0..1000u64,
        ) {
            let options = PrequalOptions { probe_rate: 1.5, ..PrequalOptions::default() };
            let mut h = Harness::new(&[1; 6], Prequal::new(&options, seed));
            for step in steps {
                match step {
                    Step::Answer { backend, rif, latency_ms } => {
                        answer(&mut h, backend, rif, latency_ms)
                    }
                    Step::Pick { exclude, hold } => {
                        let exclude: Vec<BackendId> = exclude.into_iter().map(BackendId).collect();
                        let now = Nanos(h.now.0 + 1000);
                        let any_usable = (0..6).any(|i| {
                            let s = &h.states[i];
                            s.is_eligible(now) && s.has_room() && !exclude.contains(&BackendId(i as u32))
                        });
                        // The harness asserts the choice is eligible and not excluded.
                        let got = if hold {
                            let id = h.pick_excluding(&exclude);
                            if let Some(id) = id {
                                h.states[id.index()].in_flight += 1;
                            }
                            id
                        } else {
                            h.pick_excluding(&exclude)
                        };
                        if let Some(id) = got {
                            let s = &h.states[id.index()];
                            proptest::prop_assert!(s.spec.max_conns == 0 || s.in_flight <= s.spec.max_conns);
                        }
                        proptest::prop_assert_eq!(got.is_some(), any_usable);
                    }
                    Step::Down(i) => h.mark_down(i as usize),
                    Step::Up(i) => h.mark_up(i as usize),
                    Step::Full(i) => {
                        let s = &mut h.states[i as usize];
                        s.spec.max_conns = s.in_flight.max(1);
                        s.in_flight = s.spec.max_conns;
                    }
                    Step::Wait(ms) => h.now = Nanos(h.now.0 + ms * MS),
                }
                let mut out = Vec::new();
                h.balancer.wanted_probes(&mut out);
                proptest::prop_assert!(out.iter().all(|id| id.index() < 6));
            }
        }
    }
}
