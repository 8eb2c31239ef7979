//! Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam, "Consistent Hashing
//! with Bounded Loads", SODA 2018), with HAProxy's weighted bound (`chash_server_is_eligible`
//! in `src/lb_chash.c`, `hash-balance-factor`).
//!
//! Keys land on nginx's ketama ring ([`crate::ring`], the same ring as `hash consistent`) at
//! `crc32(key)`. Walking the ring from there, the first usable backend that is not *full* takes
//! the request. With `T` requests in flight in the tier and balance factor `c`, the request
//! about to be made included, there are `S = ⌈(T + 1)·c⌉` slots, shared among the eligible
//! backends by weight; a backend is full when its in-flight count has reached its share. So no
//! backend carries more than about `c` times its fair share, and a key stays on its own backend
//! while that backend is not overloaded.
//!
//! HAProxy's integer arithmetic, which we follow: `c` is a whole percentage `p` (ours:
//! `round(100·balance_factor)`, at least 100), `S = ((T + 1)·p + 99) / 100`; with `W` the total
//! weight of the eligible backends and `C` the weight of those before this one (configuration
//! order), a backend of weight `w` gets `w·⌊S/W⌋ + ⌊(C + w)·(S mod W)/W⌋ − ⌊C·(S mod W)/W⌋`
//! slots, which is `⌊(C + w)·S/W⌋ − ⌊C·S/W⌋` (so the shares add up to exactly `S`), and never
//! fewer than 1. It may take the request while `in_flight < slots`.
//!
//! When every usable backend is full (only possible when some backends are excluded or
//! ineligible), the first usable one on the walk is still chosen: the bound is a preference,
//! never a reason to refuse. Without a key (or with an empty one), smooth weighted round robin,
//! as HAProxy falls back to round robin when the hash key is missing.
//!
//! The shares are computed over the backends not marked `down`, in `rebuild`, so a pick costs
//! only its walk: total in flight comes from the pool in O(1). HAProxy also leaves out servers
//! its health checks have taken down; a backend that passive health has taken out here keeps
//! its share of the slots while it is out (the others' bound is that much tighter) — the price
//! of not scanning every backend on every request.
//!
//! Where HAProxy differs: it looks up the closest point on either side of the hash, on a ring of
//! its own (16 points per weight unit, hashed from server ids); we use nginx's ring and the
//! first point at or above the hash, so that `bounded_load` without load agrees with nginx's
//! `hash consistent`.

use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, Completion, PickCtx};
use crate::ring::{Ring, key_hash};
use crate::smooth::SmoothWeights;

#[derive(Debug)]
pub struct BoundedLoad {
    /// The balance factor as a whole percentage, at least 100.
    percent: u64,
    ring: Ring,
    fallback: SmoothWeights,
    /// The weight of the backends not marked down before each one (built in `rebuild`).
    cumulative: Vec<u64>,
    /// The weight of all backends not marked down.
    total_weight: u64,
    /// Backends with points on the ring.
    on_ring: usize,
    /// Per backend, the walk that last met it (see `mark`).
    seen: Vec<u32>,
    mark: u32,
}

impl BoundedLoad {
    pub fn new(balance_factor: f64) -> BoundedLoad {
        BoundedLoad {
            percent: factor_percent(balance_factor),
            ring: Ring::default(),
            fallback: SmoothWeights::default(),
            cumulative: Vec::new(),
            total_weight: 0,
            on_ring: 0,
            seen: Vec::new(),
            mark: 0,
        }
    }

    fn walk(
        &mut self,
        key: &[u8],
        ctx: &PickCtx<'_>,
        backends: &Backends<'_>,
    ) -> Option<BackendId> {
        if self.total_weight == 0 {
            return None;
        }
        let slots_total = total_slots(backends.total_in_flight(), self.percent);
        // A new mark for this walk: `seen[i] == mark` means met already, with no O(n) reset.
        self.mark = self.mark.wrapping_add(1);
        if self.mark == 0 {
            self.seen.fill(0);
            self.mark = 1;
        }
        let mut met = 0;
        let mut first = None;
        let start = self.ring.start(key_hash(key));
        for i in start..start + self.ring.len() {
            for &id in self.ring.at(i) {
                let seen = &mut self.seen[id.index()];
                if *seen == self.mark {
                    continue;
                }
                *seen = self.mark;
                met += 1;
                if !ctx.usable(id, backends) {
                    continue;
                }
                first.get_or_insert(id);
                let slots = slots(
                    self.cumulative[id.index()],
                    u64::from(backends.weight(id)),
                    slots_total,
                    self.total_weight,
                );
                if u64::from(backends.in_flight(id)) < slots {
                    return Some(id);
                }
            }
            if met == self.on_ring {
                break;
            }
        }
        first
    }
}

/// `round(100·c)`, at least 100 (HAProxy refuses a factor below 100 other than 0, which turns
/// the bound off; a bound below the fair share cannot be met by every backend at once).
fn factor_percent(c: f64) -> u64 {
    let p = (c * 100.0).round();
    if p.is_finite() && p > 100.0 {
        p as u64
    } else {
        100
    }
}

/// `⌈(T + 1)·p / 100⌉`, HAProxy's `tot_slots`.
fn total_slots(in_flight: u64, percent: u64) -> u64 {
    ((in_flight + 1) * percent).div_ceil(100)
}

/// A backend's share of `total` slots: `⌊(C + w)·S/W⌋ − ⌊C·S/W⌋`, at least 1.
fn slots(cumulative: u64, weight: u64, total: u64, total_weight: u64) -> u64 {
    let share = (cumulative + weight) * total / total_weight - cumulative * total / total_weight;
    share.max(1)
}

impl Balancer for BoundedLoad {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        self.ring = Ring::build(backends);
        let mut total = 0;
        self.cumulative = backends
            .ids()
            .map(|id| {
                let before = total;
                if !backends.state(id).spec().down {
                    total += u64::from(backends.weight(id));
                }
                before
            })
            .collect();
        self.total_weight = total;
        self.on_ring = backends.ids().filter(|&id| backends.weight(id) > 0).count();
        self.seen = vec![0; backends.len()];
        self.mark = 0;
        self.fallback.rebuild(backends);
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        let chosen = match ctx.affinity.filter(|k| !k.is_empty()) {
            Some(key) if !self.ring.is_empty() => self.walk(key, ctx, backends),
            _ => None,
        };
        chosen.or_else(|| self.fallback.pick_usable(ctx, backends))
    }

    fn on_complete(&mut self, id: BackendId, c: &Completion) {
        self.fallback.on_complete(id, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::Hash;
    use crate::algorithms::testing::Harness;

    /// HAProxy's `chash_server_is_eligible` arithmetic, transcribed step by step (slots per
    /// weight, then the remainder by cumulative weight), to check our closed form against.
    #[allow(clippy::manual_div_ceil)] // HAProxy's own rounding, on purpose
    fn haproxy_slots(served: u64, percent: u64, weights: &[u64], i: usize) -> u64 {
        let tot_weight: u64 = weights.iter().sum();
        let tot_slots = ((served + 1) * percent + 99) / 100;
        let per_weight = tot_slots / tot_weight;
        let remainder = tot_slots % tot_weight;
        let cumulative: u64 = weights[..i].iter().sum();
        let mut slots = weights[i] * per_weight;
        slots += (cumulative + weights[i]) * remainder / tot_weight
            - cumulative * remainder / tot_weight;
        slots.max(1)
    }

    #[test]
    fn slots_match_haproxy_arithmetic() {
        let weights = [1u64, 3, 2, 5, 1];
        for percent in [100, 125, 150, 200, 317] {
            for served in 0..200 {
                let total = total_slots(served, percent);
                let mut sum = 0;
                for i in 0..weights.len() {
                    let cumulative = weights[..i].iter().sum();
                    let ours = slots(cumulative, weights[i], total, 12);
                    assert_eq!(ours, haproxy_slots(served, percent, &weights, i));
                    sum += ours;
                }
                assert!(sum >= total, "shares cover all slots");
            }
        }
    }

    #[test]
    fn pinned_slots() {
        // c = 1.25, three backends of weight 1. Nothing in flight: ⌈1·1.25⌉ = 2 slots,
        // ⌊1·2/3⌋ − 0 = 0 -> 1, ⌊2·2/3⌋ − ⌊2/3⌋ = 1, ⌊3·2/3⌋ − ⌊4/3⌋ = 1.
        assert_eq!(total_slots(0, 125), 2);
        assert_eq!(
            (0..3).map(|c| slots(c, 1, 2, 3)).collect::<Vec<_>>(),
            [1, 1, 1]
        );
        // Eleven in flight: ⌈12·1.25⌉ = 15 slots, 5 each.
        assert_eq!(total_slots(11, 125), 15);
        assert_eq!(slots(1, 1, 15, 3), 5);
        // 1.25 -> 125%, 1.0 and anything lower -> 100%.
        assert_eq!(factor_percent(1.25), 125);
        assert_eq!(factor_percent(0.5), 100);
        assert_eq!(factor_percent(f64::NAN), 100);
    }

    #[test]
    fn without_load_it_is_the_nginx_ring() {
        let weights = [1, 2, 1, 3];
        let mut ring = Harness::new(&weights, Hash::new(true));
        let mut bounded = Harness::new(&weights, BoundedLoad::new(1.25));
        for k in 0..2000 {
            let key = format!("key{k}");
            assert_eq!(
                bounded.pick_with_key(key.as_bytes()),
                ring.pick_with_key(key.as_bytes()),
                "{key}"
            );
        }
    }

    /// One hot key held in flight: every pick goes to a backend below its bound whenever one
    /// exists, and the load spreads along the ring instead of piling on the key's backend.
    #[test]
    fn never_exceeds_the_bound_while_a_backend_has_room() {
        let weights = [1u32, 2, 1, 1];
        let w64: Vec<u64> = weights.iter().map(|&w| u64::from(w)).collect();
        let mut h = Harness::new(&weights, BoundedLoad::new(1.25));
        let home = h.pick_with_key(b"hot").unwrap();
        for _ in 0..200 {
            let before = h.in_flight();
            let served: u64 = before.iter().map(|&c| u64::from(c)).sum();
            let id = h.hold_with_key(b"hot").unwrap();
            let has_room = |i: usize| u64::from(before[i]) < haproxy_slots(served, 125, &w64, i);
            assert!(has_room(id.index()), "picked full {id} with {before:?}");
            if has_room(home.index()) {
                assert_eq!(id, home, "the key's own backend had room");
            }
        }
        let load = h.in_flight();
        // 200 held, total weight 5: the bound is ⌈201·1.25⌉ = 252 slots, 50.4 per unit.
        for (c, w) in load.iter().zip(weights) {
            assert!(
                u64::from(*c) <= (252 * u64::from(w)).div_ceil(5),
                "{load:?}"
            );
        }
    }

    #[test]
    fn all_full_still_serves_a_usable_backend() {
        let mut h = Harness::new(&[1, 1, 1], BoundedLoad::new(1.0));
        for _ in 0..30 {
            h.hold_with_key(b"k").unwrap();
        }
        // With c = 1 and 30 in flight the bound keeps every backend at 10 (31 slots: 10, 10,
        // 11). Two excluded: the third is the only one that may serve, full or not.
        assert_eq!(h.in_flight(), [10, 10, 10]);
        let ex = [BackendId(0), BackendId(1)];
        assert_eq!(h.pick_with_key_excluding(b"k", &ex), Some(BackendId(2)));
        h.mark_down(2);
        assert_eq!(h.pick_with_key_excluding(b"k", &ex), None);
    }

    #[test]
    fn retry_with_exclude_and_all_but_one_down() {
        let mut h = Harness::new(&[1, 1, 1], BoundedLoad::new(1.25));
        let first = h.pick_with_key(b"s").unwrap();
        let second = h.pick_with_key_excluding(b"s", &[first]).unwrap();
        assert_ne!(first, second);
        let mut h = Harness::new(&[1, 1, 1, 1], BoundedLoad::new(1.25));
        for i in 0..3 {
            h.mark_down(i);
        }
        for k in 0..50 {
            assert_eq!(
                h.hold_with_key(format!("k{k}").as_bytes()),
                Some(BackendId(3))
            );
        }
    }
}
