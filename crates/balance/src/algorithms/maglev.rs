//! Maglev hashing (Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load
//! Balancer", NSDI 2016, §3.4), weighted as Envoy's maglev does (`MaglevTable` in
//! `source/extensions/load_balancing_policies/maglev/maglev_lb.cc`).
//!
//! A lookup table of prime size `M` (65537 by default, the paper's §5.3 choice) maps
//! `xxh64(key) mod M` to a backend in O(1). Each backend has a preference list, the permutation
//! `(offset + j·skip) mod M` of the table's slots, with `offset = xxh64(name, 0) mod M` and
//! `skip = xxh64(name, 1) mod (M − 1) + 1` (Envoy's seeds 0 and 1; `skip` is never 0 and, `M`
//! being prime, every `skip` visits every slot). Backends take turns claiming the next free slot
//! of their list until the table is full.
//!
//! Weights change how often a backend takes its turn (the paper: "by changing the relative
//! frequency of the turns"). As in Envoy, rounds are numbered 1, 2, …; backend `i` of weight
//! `wᵢ` takes a turn in round `k` when `k·wᵢ ≥ targetᵢ`, and each turn adds the largest weight
//! `W` to its target (starting at 0). So the heaviest backends take a turn every round and one
//! of weight `W/3` every third round, and entry counts come out proportional to the weights.
//! Envoy computes this with weights normalised to sum to 1 in floating point; we use the integer
//! weights, the same comparison in exact arithmetic (Envoy's rounding could only matter at an
//! exact tie).
//!
//! The table covers every backend of weight above 0, down or not, so marking one down moves no
//! other backend's keys. At lookup, an entry that cannot be used (down, failed, already tried)
//! is retried with the key hashed again under seed 1, 2, … up to 20 times: the keys of an
//! unusable backend spread over the others by their table shares, and every other key stays
//! where it was. After that, the next usable entry after the last one tried; if the table holds
//! no usable backend at all (a backend can get no entry when `M` is small or the weights
//! extreme), smooth weighted round robin among the usable ones.

use xxhash_rust::xxh64::xxh64;

use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, Completion, PickCtx};
use crate::smooth::SmoothWeights;

/// Seeds of xxHash64 for a backend's `offset` and `skip` (Envoy's).
pub const OFFSET_SEED: u64 = 0;
pub const SKIP_SEED: u64 = 1;
/// The key is hashed with seed `attempt`: 0 first, then 1, 2, … while the entry found cannot
/// be used.
pub const KEY_SEED: u64 = 0;
/// Rehashes of the key before walking the table.
const MAX_TRIES: u64 = 20;

/// Marks a slot not yet claimed while populating.
const EMPTY: u32 = u32::MAX;

/// A populated lookup table: which backend each slot belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaglevTable {
    entries: Vec<BackendId>,
}

impl MaglevTable {
    /// The paper's populate step (§3.4, Pseudocode 1) with Envoy's weighted turns, over
    /// backends given by their `(offset, skip)` and weight. `m` must be prime for every list to
    /// be a permutation; `offset < m` and `1 ≤ skip < m`. Returns, per slot, the index of the
    /// backend owning it. Backends of weight 0 take no turns.
    pub fn populate(m: u64, permutations: &[(u64, u64)], weights: &[u32]) -> Vec<u32> {
        assert_eq!(permutations.len(), weights.len());
        let mut table = vec![EMPTY; m as usize];
        let max_weight = u64::from(weights.iter().copied().max().unwrap_or(0));
        if max_weight == 0 || m == 0 {
            return Vec::new();
        }
        // Per backend: the next slot of its list, and the round count its turns have reached.
        let mut next: Vec<u64> = permutations.iter().map(|&(offset, _)| offset % m).collect();
        let mut target = vec![0u64; weights.len()];
        let mut filled = 0u64;
        let mut round = 1u64;
        while filled < m {
            for (i, &w) in weights.iter().enumerate() {
                if filled == m {
                    break;
                }
                let w = u64::from(w);
                if w == 0 || round * w < target[i] {
                    continue;
                }
                target[i] += max_weight;
                let skip = permutations[i].1;
                let mut slot = next[i];
                while table[slot as usize] != EMPTY {
                    slot = (slot + skip) % m;
                }
                table[slot as usize] = i as u32;
                next[i] = (slot + skip) % m;
                filled += 1;
            }
            round += 1;
        }
        table
    }

    /// `(offset, skip)` of a backend by its name, for a table of size `m`.
    pub fn permutation(name: &str, m: u64) -> (u64, u64) {
        let offset = xxh64(name.as_bytes(), OFFSET_SEED) % m;
        let skip = xxh64(name.as_bytes(), SKIP_SEED) % (m - 1) + 1;
        (offset, skip)
    }

    /// The table over `(name, weight)` pairs in configuration order; backend `i` is the
    /// `i`-th. `m` is rounded up to a prime (at least 2).
    pub fn build<'a>(servers: impl IntoIterator<Item = (&'a str, u32)>, m: u64) -> MaglevTable {
        let m = next_prime(m.max(2));
        let (perms, weights): (Vec<(u64, u64)>, Vec<u32>) = servers
            .into_iter()
            .map(|(name, w)| (MaglevTable::permutation(name, m), w))
            .unzip();
        MaglevTable {
            entries: MaglevTable::populate(m, &perms, &weights)
                .into_iter()
                .map(BackendId)
                .collect(),
        }
    }

    pub fn entries(&self) -> &[BackendId] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many slots each of `n` backends owns.
    pub fn counts(&self, n: usize) -> Vec<u64> {
        let mut counts = vec![0; n];
        for id in &self.entries {
            counts[id.index()] += 1;
        }
        counts
    }
}

fn is_prime(n: u64) -> bool {
    n >= 2
        && (2..)
            .take_while(|d| d * d <= n)
            .all(|d| !n.is_multiple_of(d))
}

/// The smallest prime at or above `n`.
fn next_prime(n: u64) -> u64 {
    (n..).find(|&p| is_prime(p)).expect("primes are unbounded")
}

#[derive(Debug)]
pub struct Maglev {
    table_size: u64,
    table: MaglevTable,
    fallback: SmoothWeights,
}

impl Maglev {
    /// A Maglev balancer with a table of `table_size` slots (rounded up to a prime).
    pub fn new(table_size: u32) -> Maglev {
        Maglev {
            table_size: u64::from(table_size),
            table: MaglevTable::default(),
            fallback: SmoothWeights::default(),
        }
    }

    fn lookup(&self, key: &[u8], ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        let entries = self.table.entries();
        if entries.is_empty() {
            return None;
        }
        let m = entries.len() as u64;
        let mut slot = 0;
        for attempt in 0..=MAX_TRIES {
            slot = (xxh64(key, KEY_SEED + attempt) % m) as usize;
            if ctx.usable(entries[slot], backends) {
                return Some(entries[slot]);
            }
        }
        (1..entries.len())
            .map(|d| entries[(slot + d) % entries.len()])
            .find(|&id| ctx.usable(id, backends))
    }
}

impl Balancer for Maglev {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        self.table = MaglevTable::build(
            backends
                .ids()
                .map(|id| (backends.name(id), backends.weight(id))),
            self.table_size,
        );
        self.fallback.rebuild(backends);
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        let chosen = match ctx.affinity.filter(|k| !k.is_empty()) {
            Some(key) => self.lookup(key, ctx, backends),
            None => None,
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
    use crate::algorithms::testing::{Harness, names};

    /// The paper's Table 1: M = 7; B0 offset 3 skip 4, B1 offset 0 skip 2, B2 offset 3 skip 1.
    /// Permutations: B0 3 0 4 1 5 2 6, B1 0 2 4 6 1 3 5, B2 3 4 5 6 0 1 2; the resulting
    /// lookup table is B1 B0 B1 B0 B2 B2 B0. With B1 removed it is B0 B0 B0 B0 B2 B2 B2 (both
    /// columns of Table 1, and worked again by hand from the permutations).
    #[test]
    fn paper_table_1() {
        let perms = [(3, 4), (0, 2), (3, 1)];
        assert_eq!(
            MaglevTable::populate(7, &perms, &[1, 1, 1]),
            vec![1, 0, 1, 0, 2, 2, 0]
        );
        // B1 removed (weight 0 takes no turns): the "after" column of Table 1.
        assert_eq!(
            MaglevTable::populate(7, &perms, &[1, 0, 1]),
            vec![0, 0, 0, 0, 2, 2, 2]
        );
    }

    /// Weighted turns worked by hand on Table 1's permutations with weights 3, 1, 1 (W = 3):
    /// round 1 all take a turn (B0 3, B1 0, B2 4 as its 3 is taken) and targets become 3;
    /// round 2 only B0 (2·3 ≥ 3; its list goes on 0, 4 taken, 1), B1 and B2 wait (2·1 < 3);
    /// round 3 all (B0 5; B1 2; B2 5 taken, 6): full, B1 B0 B1 B0 B2 B0 B2 (unweighted, slot 5
    /// went to B2 in round 2).
    #[test]
    fn weighted_turns_by_hand() {
        let perms = [(3, 4), (0, 2), (3, 1)];
        assert_eq!(
            MaglevTable::populate(7, &perms, &[3, 1, 1]),
            vec![1, 0, 1, 0, 2, 0, 2]
        );
    }

    #[test]
    fn entry_counts_follow_weights() {
        let names: Vec<String> = (1..=4).map(|i| format!("10.0.0.{i}:80")).collect();
        let weights = [1u32, 2, 1, 4];
        let table = MaglevTable::build(names.iter().map(String::as_str).zip(weights), 65537);
        let counts = table.counts(4);
        assert_eq!(counts.iter().sum::<u64>(), 65537);
        for (c, w) in counts.iter().zip(weights) {
            // Turns are in exact proportion to the weights; only the last round is partial.
            let want = 65537.0 * f64::from(w) / 8.0;
            assert!((*c as f64 - want).abs() <= 4.0, "{counts:?}");
        }
    }

    #[test]
    fn table_size_is_rounded_to_a_prime() {
        assert_eq!(next_prime(65536), 65537);
        assert_eq!(next_prime(251), 251);
        assert_eq!(next_prime(0), 2);
        let t = MaglevTable::build([("a", 1), ("b", 1)], 100);
        assert_eq!(t.len(), 101);
    }

    /// The lookup is `table[xxh64(key, 0) mod M]`, computed here from the table directly.
    #[test]
    fn lookup_is_the_table_entry() {
        let mut h = Harness::new(&[1, 2, 3], Maglev::new(251));
        let table = MaglevTable::build(
            [("10.0.0.1:80", 1), ("10.0.0.2:80", 2), ("10.0.0.3:80", 3)],
            251,
        );
        for k in 0..1000 {
            let key = format!("k{k}");
            let want = table.entries()[(xxh64(key.as_bytes(), 0) % 251) as usize];
            assert_eq!(h.pick_with_key(key.as_bytes()), Some(want));
        }
    }

    /// xxHash64 check values (from the xxHash reference's sanity tests: the empty input hashes
    /// to 0xEF46DB3751D8E999 with seed 0), so the documented seeds mean what they say.
    #[test]
    fn xxh64_reference_value() {
        assert_eq!(xxh64(b"", 0), 0xEF46_DB37_51D8_E999);
    }

    #[test]
    fn down_backend_moves_only_its_keys() {
        let mut h = Harness::new(&[1, 1, 1, 1, 1], Maglev::new(65537));
        let keys: Vec<String> = (0..2000).map(|k| format!("user{k}")).collect();
        let before: Vec<BackendId> = keys
            .iter()
            .map(|k| h.pick_with_key(k.as_bytes()).unwrap())
            .collect();
        h.mark_down(2);
        let mut moved_to = [0u32; 5];
        for (k, was) in keys.iter().zip(before) {
            let now = h.pick_with_key(k.as_bytes()).unwrap();
            assert_ne!(now, BackendId(2));
            if was == BackendId(2) {
                moved_to[now.index()] += 1;
            } else {
                assert_eq!(now, was, "{k} moved though its backend is up");
            }
        }
        // The rehash spreads backend 2's keys over all the others.
        assert!(
            moved_to.iter().enumerate().all(|(i, &c)| i == 2 || c > 0),
            "{moved_to:?}"
        );
    }

    #[test]
    fn retry_with_exclude_and_all_but_one_down() {
        let mut h = Harness::new(&[1, 1, 1], Maglev::new(251));
        let first = h.pick_with_key(b"cart-7").unwrap();
        let second = h.pick_with_key_excluding(b"cart-7", &[first]).unwrap();
        assert_ne!(first, second);
        let third = h
            .pick_with_key_excluding(b"cart-7", &[first, second])
            .unwrap();
        assert!(third != first && third != second);
        assert_eq!(
            h.pick_with_key_excluding(b"cart-7", &[first, second, third]),
            None
        );
        let mut h = Harness::new(&[1; 20], Maglev::new(65537));
        for i in 0..19 {
            h.mark_down(i);
        }
        for k in 0..500 {
            let key = format!("k{k}");
            assert_eq!(h.pick_with_key(key.as_bytes()), Some(BackendId(19)));
        }
    }

    #[test]
    fn no_key_is_round_robin() {
        let mut h = Harness::new(&[5, 1, 1], Maglev::new(251));
        assert_eq!(names(&h.picks(7)), "aabacaa");
    }

    /// A backend with no slot at all (a table smaller than the backends) is still chosen
    /// when it is the only usable one.
    #[test]
    fn backend_without_entries_is_still_reachable() {
        let mut h = Harness::new(&[1; 5], Maglev::new(2));
        let table = MaglevTable::build(
            (1..=5).map(|i| {
                (
                    [
                        "10.0.0.1:80",
                        "10.0.0.2:80",
                        "10.0.0.3:80",
                        "10.0.0.4:80",
                        "10.0.0.5:80",
                    ][i - 1],
                    1,
                )
            }),
            2,
        );
        let missing = (0..5u32)
            .find(|i| !table.entries().contains(&BackendId(*i)))
            .expect("2 slots cannot hold 5 backends");
        for i in 0..5 {
            if i != missing as usize {
                h.mark_down(i);
            }
        }
        assert_eq!(h.pick_with_key(b"k"), Some(BackendId(missing)));
    }
}
