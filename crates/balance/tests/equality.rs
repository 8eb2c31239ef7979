//! The O(log n) picks (issue 27) against the linear code they replace, pick for pick.
//!
//! Two pools of the same backends, one on each implementation
//! ([`Implementation::Indexed`] and [`Implementation::Reference`]), are driven through the same
//! long random sequence: picks (some excluding backends already tried, as retries do),
//! completions held for a while or at once, with successes, failures and cancellations and
//! latencies from a few values (so `least_time` ties), weights changed one at a time or all at
//! once (as a load model does), backends marked down and up, active checks failing and passing,
//! `max_conns` limits, `max_fails` and short `fail_timeout`s (so failed backends come back by
//! the clock alone), slow start, a backup tier, the clock jumping ahead and, rarely, back, and
//! the membership changing (a new pool taking over the old one's state, as a reload does).
//! Weights come from a few small values, so ties — where the smooth round decides — are the
//! rule, not the exception. Every pick must name the same backend in both.
//!
//! The long runs at 10,000 backends are `#[ignore]`d (the reference is O(n) a pick and the
//! tests run unoptimised); run them with `cargo test --release -p balance --test equality --
//! --ignored`.

use balance::{
    Algorithm, BackendId, BackendSpec, Implementation, Nanos, Options, Outcome, Pool, Ticket,
};
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

/// The algorithms that have an index.
const INDEXED: [Algorithm; 8] = Implementation::INDEXED;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

/// The same pool on both implementations, and the tickets held on each.
struct Twin {
    algorithm: Algorithm,
    options: Options,
    primary: Vec<BackendSpec>,
    backup: Vec<BackendSpec>,
    indexed: Pool,
    reference: Pool,
    held: Vec<(Ticket, Ticket)>,
    now: u64,
    picks: u64,
}

fn spec(rng: &mut Pcg64, name: usize) -> BackendSpec {
    BackendSpec {
        max_fails: [0, 1, 1, 2, 3][rng.random_range(0..5)],
        fail_timeout: Nanos([SEC, 2 * SEC, 10 * SEC][rng.random_range(0..3)]),
        max_conns: [0, 0, 0, 1, 2, 3][rng.random_range(0..6)],
        slow_start: (rng.random_range(0..8) == 0).then_some(Nanos(3 * SEC)),
        ..BackendSpec::new(weight(rng)).named(&format!("10.0.{}.{}:80", name / 250, name % 250))
    }
}

/// Mostly 1 and 2, so backends tie; now and then 0 (out of rotation) or a model's scale.
fn weight(rng: &mut Pcg64) -> u32 {
    [1, 1, 1, 2, 2, 3, 0, 100][rng.random_range(0..8)]
}

impl Twin {
    fn new(algorithm: Algorithm, rng: &mut Pcg64, n: usize, backups: usize) -> Twin {
        let options = Options {
            slow_start: (rng.random_range(0..3) == 0).then_some(Nanos(5 * SEC)),
            ..Options::default()
        };
        let primary: Vec<_> = (0..n).map(|i| spec(rng, i)).collect();
        let backup: Vec<_> = (0..backups).map(|i| spec(rng, n + i)).collect();
        let seed = rng.random();
        let make = |imp| Pool::new_as(algorithm, &options, &primary, &backup, seed, imp);
        Twin {
            algorithm,
            indexed: make(Implementation::Indexed),
            reference: make(Implementation::Reference),
            options,
            primary,
            backup,
            held: Vec::new(),
            now: SEC,
            picks: 0,
        }
    }

    fn at(&self) -> Nanos {
        Nanos(self.now)
    }

    fn pick(&mut self, rng: &mut Pcg64, step: usize) {
        let len = self.indexed.len() as u32;
        let exclude: Vec<BackendId> = if rng.random_range(0..5) == 0 {
            (0..rng.random_range(1..4))
                .map(|_| BackendId(rng.random_range(0..len)))
                .collect()
        } else {
            Vec::new()
        };
        // Workers read the clock before they take the pool's lock: now and then a pick comes
        // in a little earlier than the last thing the pool saw.
        let jitter = if rng.random_range(0..20) == 0 {
            rng.random_range(0..2 * MS)
        } else {
            0
        };
        let now = Nanos(self.now.saturating_sub(jitter));
        let a = self.indexed.pick(None, &exclude, now);
        let b = self.reference.pick(None, &exclude, now);
        if a.as_ref().map(Ticket::backend) != b.as_ref().map(Ticket::backend) {
            for (i, s) in self.reference.states().iter().enumerate() {
                eprintln!(
                    "#{i}: weight {} ramp {} in flight {} latency {:?} fails {} checked {} \
                     eligible {} room {}",
                    s.weight(),
                    s.ramp(),
                    s.in_flight(),
                    s.latency(),
                    s.fails(),
                    s.checked().0,
                    s.is_eligible(now),
                    s.has_room()
                );
            }
            panic!(
                "{}: pick {} (step {step}) at {} differs, excluding {exclude:?}: {:?} (index) \
                 against {:?} (reference)",
                self.algorithm,
                self.picks,
                now.0,
                a.map(|t| t.backend()),
                b.map(|t| t.backend())
            );
        }
        self.picks += 1;
        if let (Some(a), Some(b)) = (a, b) {
            self.held.push((a, b));
        }
    }

    fn complete(&mut self, rng: &mut Pcg64) {
        if self.held.is_empty() {
            return;
        }
        let (a, b) = self.held.swap_remove(rng.random_range(0..self.held.len()));
        let outcome = match rng.random_range(0..100) {
            0..80 => Outcome::Success,
            80..92 => Outcome::Failure,
            _ => Outcome::Cancelled,
        };
        let latency = Nanos([5, 15, 30, 45, 100, 6000][rng.random_range(0..6)] * MS);
        let now = self.at();
        self.indexed.complete_measured(a, outcome, latency, now);
        self.reference.complete_measured(b, outcome, latency, now);
    }

    fn reweigh(&mut self, rng: &mut Pcg64) {
        let now = self.at();
        if rng.random_range(0..2) == 0 {
            let id = BackendId(rng.random_range(0..self.indexed.len() as u32));
            let w = weight(rng);
            self.indexed.set_weight(id, w, now);
            self.reference.set_weight(id, w, now);
        } else {
            let weights: Vec<u32> = (0..self.indexed.len()).map(|_| weight(rng)).collect();
            self.indexed.set_weights(&weights, now);
            self.reference.set_weights(&weights, now);
        }
    }

    fn health(&mut self, rng: &mut Pcg64) {
        let id = BackendId(rng.random_range(0..self.indexed.len() as u32));
        let now = self.at();
        if rng.random_range(0..2) == 0 {
            let down = !self.indexed.state(id).spec().down;
            self.indexed.set_down(id, down, now);
            self.reference.set_down(id, down, now);
        } else {
            let healthy = rng.random_range(0..3) != 0;
            self.indexed.set_check_result(id, healthy, now);
            self.reference.set_check_result(id, healthy, now);
        }
    }

    /// A reload: one backend leaves, one joins, the others keep their state and tickets.
    fn reload(&mut self, rng: &mut Pcg64) {
        let n = self.primary.len();
        let gone = (n > 1 && rng.random_range(0..2) == 0).then(|| rng.random_range(0..n));
        let mut same: Vec<Option<BackendId>> = Vec::new();
        let mut primary = Vec::new();
        for (i, s) in self.primary.iter().enumerate() {
            if Some(i) != gone {
                primary.push(s.clone());
                same.push(Some(BackendId(i as u32)));
            }
        }
        if rng.random_range(0..2) == 0 {
            primary.push(spec(rng, 1000 + self.picks as usize));
            same.push(None);
        }
        for (i, s) in self.backup.iter().enumerate() {
            same.push(Some(BackendId((n + i) as u32)));
            let _ = s;
        }
        let seed = rng.random();
        let now = self.at();
        let make = |imp, old: &Pool| {
            let mut p = Pool::new_as(
                self.algorithm,
                &self.options,
                &primary,
                &self.backup,
                seed,
                imp,
            );
            p.carry_over(old, &same, now);
            p
        };
        let indexed = make(Implementation::Indexed, &self.indexed);
        let reference = make(Implementation::Reference, &self.reference);
        let moved = |t: Ticket| {
            let at = same.iter().position(|s| *s == Some(t.backend()))?;
            Some(t.moved_to(BackendId(at as u32)))
        };
        let held = std::mem::take(&mut self.held);
        for (a, b) in held {
            if let (Some(a), Some(b)) = (moved(a), moved(b)) {
                self.held.push((a, b));
            }
        }
        self.indexed = indexed;
        self.reference = reference;
        self.primary = primary;
    }

    fn step(&mut self, rng: &mut Pcg64, step: usize) {
        self.now += rng.random_range(0..3 * MS);
        match rng.random_range(0..1000) {
            0..450 => self.pick(rng, step),
            450..880 => self.complete(rng),
            880..900 => self.reweigh(rng),
            900..960 => self.health(rng),
            960..963 => self.reload(rng),
            963..999 => self.now += rng.random_range(0..15 * SEC),
            _ => self.now = self.now.saturating_sub(rng.random_range(0..2 * SEC)),
        }
        // Now and then everything completes: an idle pool, where every backend ties.
        if rng.random_range(0..500) == 0 {
            while !self.held.is_empty() {
                self.complete(rng);
            }
        }
    }
}

/// `steps` random steps on a fresh twin of `n` primaries (and a few backups now and then).
fn run(algorithm: Algorithm, seed: u64, n: usize, steps: usize) -> u64 {
    let mut rng = Pcg64::seed_from_u64(seed ^ (n as u64) << 32);
    let backups = if rng.random_range(0..4) == 0 {
        rng.random_range(1..4)
    } else {
        0
    };
    let mut twin = Twin::new(algorithm, &mut rng, n, backups);
    for step in 0..steps {
        twin.step(&mut rng, step);
    }
    twin.picks
}

/// Pools of 1 to 50 backends, several seeds: at least 100,000 steps per seed.
fn small_pools(algorithm: Algorithm) {
    for seed in 0..3 {
        let mut steps = 0;
        for n in 1..=50 {
            let len = 2_000 + (n * 37 % 11) * 100;
            run(algorithm, seed, n, len);
            steps += len;
        }
        assert!(steps >= 100_000);
    }
}

#[test]
fn weighted_round_robin_small_pools() {
    small_pools(Algorithm::WeightedRoundRobin);
}

#[test]
fn least_conn_small_pools() {
    small_pools(Algorithm::LeastConn);
}

#[test]
fn fair_small_pools() {
    small_pools(Algorithm::Fair);
}

#[test]
fn least_time_small_pools() {
    small_pools(Algorithm::LeastTime);
}

#[test]
fn dynamic_wrr_small_pools() {
    small_pools(Algorithm::DynamicWrr);
}

#[test]
fn dwlc_small_pools() {
    small_pools(Algorithm::Dwlc);
}

#[test]
fn capacity_weighted_small_pools() {
    small_pools(Algorithm::CapacityWeighted);
}

#[test]
fn utilization_wrr_small_pools() {
    small_pools(Algorithm::UtilizationWrr);
}

/// One long sequence on a large pool per algorithm, short enough for an unoptimised build.
#[test]
fn every_algorithm_on_a_large_pool() {
    for algorithm in INDEXED {
        run(algorithm, 7, 2_000, 3_000);
    }
}

/// 10,000 backends, 100,000 steps per algorithm and seed.
#[test]
#[ignore = "long: run with --release"]
fn every_algorithm_at_ten_thousand_backends() {
    for algorithm in INDEXED {
        for seed in 0..2 {
            let picks = run(algorithm, 100 + seed, 10_000, 100_000);
            assert!(picks > 40_000, "{algorithm}: {picks} picks");
        }
    }
}
