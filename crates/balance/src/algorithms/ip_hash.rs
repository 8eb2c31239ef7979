//! nginx's `ip_hash` (`ngx_http_upstream_ip_hash_module.c`), reproduced exactly so that fulcrum
//! sends a client to the same backend nginx would, given the same upstream block.
//!
//! The key is the first three octets of an IPv4 address (a whole /24 goes to one backend) or all
//! sixteen of an IPv6 one. Starting from 89, each byte updates `hash = (hash·113 + byte) mod
//! 6271`; `hash mod total_weight` then walks the backends subtracting weights. The total counts
//! every backend, marked down or not, so marking one down does not remap anyone else. If the
//! chosen backend cannot be used, the byte loop runs again from the current hash; after 20 tries
//! the choice falls back to smooth weighted round robin, as it does for a single backend or a
//! request without an address.
//!
//! nginx walks the backends to find the one `hash mod total_weight` falls on; a binary search
//! over cumulative weights (built in `rebuild`) lands on the same backend in O(log n).

use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, Completion, PickCtx};
use crate::smooth::SmoothWeights;

/// nginx's constants: the initial hash, multiplier and modulus, and how many rehashes to try
/// before giving up on the hash.
const HASH_INIT: u32 = 89;
const HASH_MUL: u32 = 113;
const HASH_MOD: u32 = 6271;
const MAX_TRIES: u32 = 20;

#[derive(Debug, Default)]
pub struct IpHash {
    /// `cumulative[i]` is the sum of the weights of backends `0..=i`, down ones included.
    cumulative: Vec<u64>,
    fallback: SmoothWeights,
}

/// The bytes nginx hashes: three octets of an IPv4 address, the whole of anything else.
fn hashed_bytes(key: &[u8]) -> &[u8] {
    if key.len() == 4 { &key[..3] } else { key }
}

impl Balancer for IpHash {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        let mut sum = 0;
        self.cumulative = backends
            .ids()
            .map(|id| {
                sum += u64::from(backends.weight(id));
                sum
            })
            .collect();
        self.fallback.rebuild(backends);
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        let total_weight = self.cumulative.last().copied().unwrap_or(0);
        let key = match ctx.affinity {
            Some(key) if backends.len() > 1 && total_weight > 0 => hashed_bytes(key),
            _ => return self.fallback.pick_usable(ctx, backends),
        };
        let mut hash = HASH_INIT;
        for _ in 0..=MAX_TRIES {
            for &b in key {
                hash = (hash * HASH_MUL + u32::from(b)) % HASH_MOD;
            }
            let w = u64::from(hash) % total_weight;
            let id = BackendId(self.cumulative.partition_point(|&c| c <= w) as u32);
            if ctx.usable(id, backends) {
                return Some(id);
            }
        }
        self.fallback.pick_usable(ctx, backends)
    }

    fn on_complete(&mut self, id: BackendId, c: &Completion) {
        self.fallback.on_complete(id, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testing::Harness;

    fn pick_for(h: &mut Harness<IpHash>, addr: [u8; 4]) -> u32 {
        h.pick_with_key(&addr).unwrap().0
    }

    /// The nginx computation written out by hand for one address.
    fn by_hand(addr: [u8; 4], weights: &[u32]) -> u32 {
        let mut hash = 89u32;
        for b in &addr[..3] {
            hash = (hash * 113 + u32::from(*b)) % 6271;
        }
        let mut w = hash % weights.iter().sum::<u32>();
        let mut i = 0;
        while w >= weights[i] {
            w -= weights[i];
            i += 1;
        }
        i as u32
    }

    #[test]
    fn worked_example() {
        // 127.0.0.x: 89·113+127 = 10184 mod 6271 = 3913; 3913·113 = 442169 mod 6271 = 3199;
        // 3199·113 = 361487 mod 6271 = 4040; 4040 mod 3 = 2 -> the third backend.
        let mut h = Harness::new(&[1, 1, 1], IpHash::default());
        assert_eq!(pick_for(&mut h, [127, 0, 0, 1]), 2);
        assert_eq!(
            pick_for(&mut h, [127, 0, 0, 200]),
            2,
            "last octet is ignored"
        );
    }

    #[test]
    fn matches_the_formula_for_many_addresses() {
        let weights = [2, 1, 3];
        let mut h = Harness::new(&weights, IpHash::default());
        for a in 0..=255u8 {
            for b in (0..=255u8).step_by(7) {
                let addr = [10, a, b, 9];
                assert_eq!(pick_for(&mut h, addr), by_hand(addr, &weights));
            }
        }
    }

    #[test]
    fn down_backend_rehashes_without_moving_others() {
        let weights = [1, 1, 1];
        let mut h = Harness::new(&weights, IpHash::default());
        let addrs: Vec<[u8; 4]> = (0..200u8).map(|i| [192, 168, i, 1]).collect();
        let before: Vec<u32> = addrs.iter().map(|&a| pick_for(&mut h, a)).collect();
        h.mark_down(1);
        for (a, was) in addrs.iter().zip(before) {
            let now = pick_for(&mut h, *a);
            assert_ne!(now, 1);
            if was != 1 {
                assert_eq!(now, was, "{a:?} moved though its backend is up");
            }
        }
    }

    #[test]
    fn ipv6_hashes_all_sixteen_bytes() {
        let mut h = Harness::new(&[1, 1, 1, 1, 1], IpHash::default());
        let mut seen = std::collections::HashSet::new();
        for last in 0..64u8 {
            let mut addr = [0u8; 16];
            addr[0] = 0x20;
            addr[1] = 0x01;
            addr[15] = last;
            seen.insert(h.pick_with_key(&addr).unwrap());
        }
        assert!(seen.len() > 1, "the last byte must take part in the hash");
    }

    #[test]
    fn all_down_but_one_still_served_through_fallback() {
        let mut h = Harness::new(&[1, 1, 1, 1], IpHash::default());
        h.mark_down(0);
        h.mark_down(1);
        h.mark_down(2);
        for i in 0..50u8 {
            assert_eq!(pick_for(&mut h, [i, i, i, 1]), 3);
        }
        h.mark_down(3);
        assert_eq!(h.pick_with_key(&[1, 2, 3, 4]), None);
    }
}
