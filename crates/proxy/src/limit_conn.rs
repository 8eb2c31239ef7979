//! nginx's `limit_conn`: at most `max` requests of one key in flight at once
//! (`ngx_http_limit_conn_handler` in src/http/modules/ngx_http_limit_conn_module.c).
//!
//! * A key seen with nothing in flight gets a count of 1; a key already at `max` is refused
//!   (nginx's `if (lc->conn >= limits[i].conn)`), and its count is left as it was.
//! * Each accepted request gives its place back when it ends (nginx's pool cleanup,
//!   `ngx_http_limit_conn_cleanup`); a key whose count falls to 0 is forgotten, so the zone
//!   holds only keys with requests in flight — bounded by the requests the listener holds.
//! * nginx counts a request, not a connection, despite the name: each HTTP/2 stream counts.
//!
//! Pure: one `LimitConn` is shared by every worker behind a lock; the caller holds a guard
//! that calls [`LimitConn::release`] exactly once.

use std::collections::HashMap;
use std::hash::Hash;

/// The requests in flight of each key, for one `limit_conn`.
#[derive(Debug)]
pub struct LimitConn<K: Hash + Eq> {
    max: u32,
    in_flight: HashMap<K, u32, foldhash::fast::RandomState>,
}

impl<K: Hash + Eq> LimitConn<K> {
    /// At most `max` (at least 1) requests of a key at once.
    pub fn new(max: u32) -> LimitConn<K> {
        LimitConn {
            max: max.max(1),
            in_flight: HashMap::default(),
        }
    }

    /// Takes a place for a request of `key`; `false`: the key is at its limit, refused.
    pub fn acquire(&mut self, key: K) -> bool {
        let n = self.in_flight.entry(key).or_insert(0);
        if *n >= self.max {
            return false;
        }
        *n += 1;
        true
    }

    /// Gives back the place a request of `key` took.
    pub fn release(&mut self, key: &K) {
        if let Some(n) = self.in_flight.get_mut(key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.in_flight.remove(key);
            }
        }
    }

    /// Requests of `key` in flight.
    pub fn in_flight(&self, key: &K) -> u32 {
        self.in_flight.get(key).copied().unwrap_or(0)
    }

    /// Keys with requests in flight.
    pub fn len(&self) -> usize {
        self.in_flight.len()
    }

    pub fn is_empty(&self) -> bool {
        self.in_flight.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_at_most_max_and_gets_its_places_back() {
        let mut l = LimitConn::new(2);
        assert!(l.acquire(1));
        assert!(l.acquire(1));
        assert!(!l.acquire(1), "the third of key 1 is refused");
        assert!(l.acquire(2), "another key has its own count");
        assert_eq!(l.in_flight(&1), 2, "a refusal takes no place");
        l.release(&1);
        assert!(l.acquire(1));
        l.release(&1);
        l.release(&1);
        l.release(&2);
        assert!(l.is_empty(), "keys with nothing in flight are forgotten");
        // A release too many does not underflow or make room beyond max.
        l.release(&1);
        assert!(l.acquire(1) && l.acquire(1) && !l.acquire(1));
    }
}
