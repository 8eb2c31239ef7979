//! Sticky sessions by cookie: HAProxy's `cookie SRV insert indirect nocache`, NGINX Plus's
//! `sticky cookie`. The first answer to a client names the backend that gave it in a cookie;
//! the client's later requests carry the cookie and go to that backend for as long as it can
//! take them; when it cannot, the algorithm picks and the cookie is replaced.
//!
//! The rules, all here so that the proxy and the simulator follow the same ones:
//!
//! * **The name in the cookie is opaque** ([`StickyId`]): a keyed hash (SipHash-2-4, the
//!   keyed pseudo-random function of Aumasson and Bernstein, 2012) of the backend's name under
//!   a secret ([`StickyKey`]) the caller makes. A client learns nothing of the backend's
//!   address from it, and cannot name a backend it was never sent to except by chance (one in
//!   2^64). HAProxy writes the `cookie` value configured on each server; NGINX Plus an MD5 of
//!   the address, which anyone can compute from a guessed address.
//! * **The pick** ([`pick`]): the backend the cookie names, if it may take a request now —
//!   healthy, in rotation, below its `max_conns`, not already tried by this request — whatever
//!   its tier (HAProxy honours a persistence cookie naming a backup server that is up);
//!   otherwise the algorithm's pick, as for a request without a cookie. A retry after a failed
//!   attempt excludes the backend tried, so a dead sticky backend costs one attempt and the
//!   algorithm chooses the next.
//! * **The answer** ([`must_set`]): the cookie is set only when the backend that answered is
//!   not the one the request's cookie named (none, an unknown or malformed value, or a backend
//!   that could not take it): HAProxy's `indirect`, which sends no cookie to a client that
//!   already has the right one. A client that moved is told its new backend once, and sticks
//!   to it from then on.
//!
//! What the proxy does around these (removing the cookie from the request the backend gets,
//! the `Set-Cookie` attributes, `Cache-Control`) is HTTP, and is the proxy's; see
//! docs/traffic.md.

use std::fmt;

use crate::backend::{BackendId, Nanos};
use crate::pool::{Pool, Ticket};

/// The secret the ids are made with. Two proxies name a backend alike only if they hold the
/// same key: one made from an operator's secret ([`StickyKey::from_secret`]) is the same in
/// every process that has the secret; without one, the proxy makes a random key at start (so
/// cookies last as long as the process).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct StickyKey {
    k0: u64,
    k1: u64,
}

impl fmt::Debug for StickyKey {
    /// Never prints the secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StickyKey(..)")
    }
}

impl StickyKey {
    /// A key of 128 bits, given as two words (SipHash's `k0`, `k1`).
    pub fn new(k0: u64, k1: u64) -> StickyKey {
        StickyKey { k0, k1 }
    }

    /// The key of an operator's `secret` (`sticky.secret`): two SipHash-2-4 outputs of it
    /// under fixed keys, so the same secret gives the same key everywhere — ids then last
    /// across restarts and upgrades, and every proxy of a fleet names a backend alike.
    pub fn from_secret(secret: &[u8]) -> StickyKey {
        const K: [u64; 4] = [
            0x6675_6c63_7275_6d2d,
            0x7374_6963_6b79_2d30,
            0x6675_6c63_7275_6d2d,
            0x7374_6963_6b79_2d31,
        ];
        StickyKey::new(siphash24(K[0], K[1], secret), siphash24(K[2], K[3], secret))
    }

    /// The id of the backend named `name` (its configured address, say).
    pub fn id(&self, name: &[u8]) -> StickyId {
        StickyId(siphash24(self.k0, self.k1, name))
    }
}

/// A backend's name in a sticky cookie: 64 bits, written as 16 lower-case hexadecimal digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StickyId(pub u64);

impl StickyId {
    /// Characters of the cookie value.
    pub const TEXT_LEN: usize = 16;

    /// The id a cookie value names: exactly 16 hexadecimal digits (either case); anything else
    /// names none (the request is balanced as if it had no cookie, and gets a new one).
    pub fn parse(text: &[u8]) -> Option<StickyId> {
        if text.len() != Self::TEXT_LEN {
            return None;
        }
        text.iter()
            .try_fold(0u64, |acc, &b| {
                let digit = char::from(b).to_digit(16)?;
                Some(acc << 4 | u64::from(digit))
            })
            .map(StickyId)
    }

    /// Appends the cookie value.
    pub fn put(self, out: &mut Vec<u8>) {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        for shift in (0..Self::TEXT_LEN).rev() {
            out.push(DIGITS[((self.0 >> (shift * 4)) & 0xf) as usize]);
        }
    }
}

impl fmt::Display for StickyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// The ids of one pool's backends, in pool order, and the backend each id names.
#[derive(Debug, Clone, Default)]
pub struct StickyTable {
    /// Entry `i` is the id of `BackendId(i)`.
    ids: Vec<StickyId>,
    /// Sorted by id, for the lookup a request with a cookie makes.
    by_id: Vec<(StickyId, BackendId)>,
}

impl StickyTable {
    /// The table of backends named `names`, in pool order, under `key`.
    pub fn new<'a>(key: &StickyKey, names: impl IntoIterator<Item = &'a [u8]>) -> StickyTable {
        StickyTable::from_ids(names.into_iter().map(|n| key.id(n)).collect())
    }

    /// The table of backends whose ids are `ids`, in pool order (made by the caller's key).
    pub fn from_ids(ids: Vec<StickyId>) -> StickyTable {
        let mut by_id: Vec<(StickyId, BackendId)> = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| (id, BackendId(i as u32)))
            .collect();
        by_id.sort_unstable();
        StickyTable { ids, by_id }
    }

    /// The backend `id` names, if it is one of the pool's.
    pub fn backend(&self, id: StickyId) -> Option<BackendId> {
        let i = self.by_id.binary_search_by_key(&id, |&(id, _)| id).ok()?;
        self.by_id.get(i).map(|&(_, backend)| backend)
    }

    /// The id of `backend`.
    pub fn id(&self, backend: BackendId) -> Option<StickyId> {
        self.ids.get(backend.index()).copied()
    }
}

/// Picks for a request whose cookie names `preferred`: that backend while it may take the
/// request, else the algorithm's choice (see the module documentation).
pub fn pick(
    pool: &mut Pool,
    preferred: Option<BackendId>,
    affinity: Option<&[u8]>,
    exclude: &[BackendId],
    now: Nanos,
) -> Option<Ticket> {
    preferred
        .and_then(|p| pool.pick_preferred(p, exclude, now))
        .or_else(|| pool.pick(affinity, exclude, now))
}

/// Whether the answer of the backend `answered` sets the cookie, for a request whose cookie
/// named `asked` (`None`: it had none, or none that parses): unless they are the same
/// (HAProxy's `indirect`).
pub fn must_set(asked: Option<StickyId>, answered: StickyId) -> bool {
    asked != Some(answered)
}

/// SipHash-2-4 of `msg` under the key (`k0`, `k1`) (Aumasson and Bernstein, "SipHash: a fast
/// short-input PRF", 2012), by the `siphasher` crate.
fn siphash24(k0: u64, k1: u64, msg: &[u8]) -> u64 {
    siphasher::sip::SipHasher24::new_with_keys(k0, k1).hash(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Algorithm, Options};
    use crate::backend::BackendSpec;
    use crate::balancer::Outcome;

    /// The reference test vectors (the SipHash paper, appendix A, and its `vectors.h`): key
    /// 00 01 … 0f, messages 00 01 … of every length up to 15.
    #[test]
    fn siphash_matches_the_reference_vectors() {
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        let msg: Vec<u8> = (0..64).collect();
        assert_eq!(siphash24(k0, k1, &msg[..0]), 0x726f_db47_dd0e_0e31);
        assert_eq!(siphash24(k0, k1, &msg[..1]), 0x74f8_39c5_93dc_67fd);
        assert_eq!(siphash24(k0, k1, &msg[..8]), 0x93f5_f579_9a93_2462);
        assert_eq!(siphash24(k0, k1, &msg[..15]), 0xa129_ca61_49be_45e5);
        assert_eq!(siphash24(k0, k1, &msg[..63]), 0x958a_324c_eb06_4572);
    }

    #[test]
    fn ids_round_trip_and_only_16_hex_digits_parse() {
        let key = StickyKey::new(1, 2);
        let id = key.id(b"10.0.0.1:8080");
        let mut text = Vec::new();
        id.put(&mut text);
        assert_eq!(text.len(), StickyId::TEXT_LEN);
        assert_eq!(String::from_utf8(text.clone()).unwrap(), id.to_string());
        assert_eq!(StickyId::parse(&text), Some(id));
        assert_eq!(
            StickyId::parse(b"00000000000000FF"),
            Some(StickyId(0xff)),
            "either case"
        );
        for bad in [
            &b""[..],
            b"0",
            b"000000000000000",
            b"00000000000000000",
            b"000000000000000g",
            b"+00000000000000f",
            b" 00000000000000f",
            "00000000000000é".as_bytes(),
        ] {
            assert_eq!(StickyId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_id_depends_on_the_key_and_never_shows_the_address() {
        let name = b"127.0.0.1:8080";
        let (a, b) = (StickyKey::new(1, 2), StickyKey::new(1, 3));
        assert_ne!(a.id(name), b.id(name));
        assert_eq!(a.id(name), StickyKey::new(1, 2).id(name));
        let text = a.id(name).to_string();
        assert!(!text.contains("127") && !text.contains("8080"), "{text}");
        assert_eq!(format!("{a:?}"), "StickyKey(..)");
    }

    #[test]
    fn the_table_finds_each_backend_by_its_id() {
        let key = StickyKey::new(7, 9);
        let names = ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"];
        let table = StickyTable::new(&key, names.iter().map(|n| n.as_bytes()));
        for (i, n) in names.iter().enumerate() {
            let id = key.id(n.as_bytes());
            assert_eq!(table.id(BackendId(i as u32)), Some(id));
            assert_eq!(table.backend(id), Some(BackendId(i as u32)));
        }
        assert_eq!(table.backend(key.id(b"10.0.0.4:80")), None);
        assert_eq!(table.id(BackendId(3)), None);
    }

    fn pool(alg: Algorithm, primaries: usize, backups: usize) -> Pool {
        let specs = |n| vec![BackendSpec::new(1); n];
        Pool::new(
            alg,
            &Options::default(),
            &specs(primaries),
            &specs(backups),
            1,
        )
    }

    #[test]
    fn the_named_backend_is_picked_while_it_can_take_the_request() {
        let now = Nanos(1);
        let mut p = pool(Algorithm::LeastConn, 3, 1);
        // Backend 2 is busy: least_conn alone would avoid it; the cookie still goes there.
        let busy: Vec<Ticket> = (0..3)
            .map(|_| pick(&mut p, Some(BackendId(2)), None, &[], now).unwrap())
            .collect();
        assert!(busy.iter().all(|t| t.backend() == BackendId(2)));
        assert_eq!(p.state(BackendId(2)).in_flight(), 3);
        // No cookie: the algorithm (an idle one).
        let t = pick(&mut p, None, None, &[], now).unwrap();
        assert_ne!(t.backend(), BackendId(2));
        // A cookie naming the backup, up: honoured (HAProxy's rule).
        let b = pick(&mut p, Some(BackendId(3)), None, &[], now).unwrap();
        assert_eq!(b.backend(), BackendId(3));
        // A cookie naming no backend of the pool: the algorithm.
        let none = pick(&mut p, Some(BackendId(9)), None, &[], now).unwrap();
        assert!(none.backend().index() < 3);
        for t in busy.into_iter().chain([t, b, none]) {
            p.complete(t, Outcome::Success, now);
        }
        assert!(p.states().iter().all(|s| s.in_flight() == 0));
    }

    #[test]
    fn a_backend_that_cannot_take_the_request_falls_back_to_the_algorithm() {
        let now = Nanos(1_000);
        // Failed (max_fails 1): the algorithm picks, and keeps picking while it is out.
        let mut p = pool(Algorithm::RoundRobin, 3, 0);
        let t = p.pick_preferred(BackendId(1), &[], now).unwrap();
        p.complete(t, Outcome::Failure, now);
        for _ in 0..6 {
            let t = pick(&mut p, Some(BackendId(1)), None, &[], now).unwrap();
            assert_ne!(t.backend(), BackendId(1));
            p.complete(t, Outcome::Success, now);
        }
        // Tried already by this request (a retry): the algorithm, among the others.
        let t = pick(&mut p, Some(BackendId(0)), None, &[BackendId(0)], now).unwrap();
        assert_ne!(t.backend(), BackendId(0));
        p.complete(t, Outcome::Success, now);
        // Marked down.
        p.set_down(BackendId(2), true, now);
        assert!(p.pick_preferred(BackendId(2), &[], now).is_none());
        // At its max_conns.
        let mut spec = BackendSpec::new(1);
        spec.max_conns = 1;
        let mut p = Pool::new(
            Algorithm::RoundRobin,
            &Options::default(),
            &[spec.clone(), spec],
            &[],
            1,
        );
        let held = p.pick_preferred(BackendId(0), &[], now).unwrap();
        assert!(p.pick_preferred(BackendId(0), &[], now).is_none());
        let t = pick(&mut p, Some(BackendId(0)), None, &[], now).unwrap();
        assert_eq!(t.backend(), BackendId(1));
        p.complete(held, Outcome::Success, now);
        p.complete(t, Outcome::Success, now);
    }

    #[test]
    fn the_cookie_is_set_only_when_the_backend_changed() {
        let (a, b) = (StickyId(1), StickyId(2));
        assert!(must_set(None, a));
        assert!(must_set(Some(b), a));
        assert!(!must_set(Some(a), a));
    }
}
