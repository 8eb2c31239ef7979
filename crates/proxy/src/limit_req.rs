//! nginx's `limit_req`: a leaky bucket per key, with nginx's arithmetic to the
//! millisecond, so that the same requests at the same times are accepted, delayed or refused
//! as nginx would (`ngx_http_limit_req_lookup` and `ngx_http_limit_req_account` in
//! src/http/modules/ngx_http_limit_req_module.c).
//!
//! * A key's state is its excess, in thousandths of a request, and the time it was last
//!   updated, in milliseconds. A request drains `rate × elapsed` from the excess and adds one
//!   request (1000): `excess = excess − rate × ms / 1000 + 1000`, floored at 0 (integer
//!   arithmetic, `rate` in thousandths of a request per second: nginx's `ctx->rate`).
//! * More than `burst` (× 1000) of excess: refused, and the state is left as it was. Else
//!   accepted: the excess is kept, and the time only if some of it passed (nginx's `if (ms)`).
//! * An accepted request waits `(excess − delay) × 1000 / rate` ms when its excess is over
//!   `delay` (× 1000): `nodelay` never waits, `delay = N` lets N requests of the burst through
//!   at once, and the default (0) spaces every request of the burst at the rate.
//! * A key seen for the first time is accepted at once with no excess.
//! * The zone holds at most `zone_size` keys; a new key in a full zone takes the place of the
//!   least recently used one (nginx frees the oldest node when its zone's memory is full).
//!
//! Pure: the caller passes the time; one `LimitReq` is shared by every worker behind a lock.

use std::hash::Hash;

use hashlink::LruCache;

/// One request in nginx's units (thousandths).
const ONE: i64 = 1000;

/// What a `limit_req` is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitReqSettings {
    /// Requests a second, in thousandths (nginx's `ctx->rate`: `10r/s` is 10,000, `30r/m`
    /// 500). At least 1.
    pub rate: i64,
    /// Requests beyond the rate a key may send at once.
    pub burst: i64,
    /// Requests of the burst let through without waiting (`None`: `nodelay`, all of them).
    pub delay: Option<i64>,
    /// Keys the zone holds at most.
    pub zone_size: usize,
}

/// What becomes of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted, after waiting this many milliseconds (0: at once).
    Accept { delay_ms: u64 },
    /// Refused (the configured status, 503 by default as nginx, 429 often).
    Refuse,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Thousandths of a request.
    excess: i64,
    /// Milliseconds, on the caller's clock.
    last: u64,
}

/// The state of one `limit_req` zone.
#[derive(Debug)]
pub struct LimitReq<K: Hash + Eq> {
    rate: i64,
    burst: i64,
    delay: i64,
    zone: LruCache<K, Bucket>,
}

impl<K: Hash + Eq> LimitReq<K> {
    pub fn new(settings: LimitReqSettings) -> LimitReq<K> {
        LimitReq {
            rate: settings.rate.max(1),
            burst: settings.burst.max(0).saturating_mul(ONE),
            // nginx's `nodelay`: NGX_MAX_INT_T_VALUE / 1000, never reached.
            delay: settings
                .delay
                .map_or(i64::MAX / ONE, |d| d.max(0).saturating_mul(ONE)),
            zone: LruCache::new(settings.zone_size.max(1)),
        }
    }

    /// The request of `key` at `now` (milliseconds).
    pub fn check(&mut self, key: K, now: u64) -> Verdict {
        let Some(bucket) = self.zone.get_mut(&key) else {
            // A new key: accepted at once; a full zone forgets its least recently used key.
            self.zone.insert(
                key,
                Bucket {
                    excess: 0,
                    last: now,
                },
            );
            return Verdict::Accept { delay_ms: 0 };
        };
        // nginx's ngx_msec_int_t difference, with its guards against a clock that went back.
        let ms = now.wrapping_sub(bucket.last) as i64;
        let ms = if ms < -60_000 { 1 } else { ms.max(0) };
        let excess = (bucket.excess - self.rate.saturating_mul(ms) / 1000 + ONE).max(0);
        if excess > self.burst {
            return Verdict::Refuse;
        }
        bucket.excess = excess;
        if ms != 0 {
            bucket.last = now;
        }
        let delay_ms = if excess <= self.delay {
            0
        } else {
            ((excess - self.delay).saturating_mul(1000) / self.rate) as u64
        };
        Verdict::Accept { delay_ms }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.zone.len()
    }

    pub fn is_empty(&self) -> bool {
        self.zone.is_empty()
    }
}

/// nginx's `rate=`: `Nr/s` or `Nr/m` (a positive integer), in thousandths of a request a
/// second, as nginx computes it (`rate * 1000 / scale`); `None` for anything else.
pub fn parse_rate(text: &str) -> Option<i64> {
    let (number, scale) = if let Some(n) = text.strip_suffix("r/s") {
        (n, 1)
    } else if let Some(n) = text.strip_suffix("r/m") {
        (n, 60)
    } else {
        return None;
    };
    let rate: i64 = number
        .parse()
        .ok()
        .filter(|&r| r > 0 && r <= 1_000_000_000)?;
    Some((rate * 1000 / scale).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(rate: &str, burst: i64, delay: Option<i64>) -> LimitReq<u32> {
        LimitReq::new(LimitReqSettings {
            rate: parse_rate(rate).unwrap(),
            burst,
            delay,
            zone_size: 100,
        })
    }

    fn accepted(v: Verdict) -> bool {
        matches!(v, Verdict::Accept { .. })
    }

    #[test]
    fn a_burst_at_one_instant_passes_burst_plus_one() {
        for delay in [None, Some(0), Some(3)] {
            let mut l = limit("10r/s", 5, delay);
            let passed = (0..30).filter(|_| accepted(l.check(1, 1_000))).count();
            assert_eq!(passed, 6, "{delay:?}");
        }
    }

    #[test]
    fn the_burst_waits_at_the_rate_unless_nodelay_or_within_delay() {
        let delays = |delay| {
            let mut l = limit("10r/s", 5, delay);
            (0..6)
                .map(|_| match l.check(1, 0) {
                    Verdict::Accept { delay_ms } => delay_ms,
                    Verdict::Refuse => u64::MAX,
                })
                .collect::<Vec<_>>()
        };
        // The first request of a new key, then 100 ms apart at 10r/s.
        assert_eq!(delays(Some(0)), [0, 100, 200, 300, 400, 500]);
        assert_eq!(delays(None), [0; 6]);
        // `delay=2`: the first two of the burst at once.
        assert_eq!(delays(Some(2)), [0, 0, 0, 100, 200, 300]);
    }

    #[test]
    fn excess_drains_at_the_rate_to_the_millisecond() {
        let mut l = limit("10r/s", 0, None);
        assert!(accepted(l.check(7, 0)));
        // 99 ms later: 990 of the 1000 drained, +1000 is over a burst of 0.
        assert!(!accepted(l.check(7, 99)));
        assert!(accepted(l.check(7, 100)));
        // A refusal leaves the state as it was: 100 ms after the last acceptance, not after
        // the refusal.
        assert!(!accepted(l.check(7, 150)));
        assert!(accepted(l.check(7, 200)));
    }

    #[test]
    fn rates_per_minute_and_keys_apart() {
        assert_eq!(parse_rate("30r/m"), Some(500));
        assert_eq!(parse_rate("10r/s"), Some(10_000));
        assert_eq!(parse_rate("1r/m"), Some(16));
        for bad in ["0r/s", "10", "r/s", "-1r/s", "10r/h", "1.5r/s"] {
            assert_eq!(parse_rate(bad), None, "{bad}");
        }
        let mut l = limit("30r/m", 0, None);
        assert!(accepted(l.check(1, 0)));
        assert!(accepted(l.check(2, 0)));
        assert!(!accepted(l.check(1, 1_999)));
        assert!(accepted(l.check(1, 2_000)));
    }

    #[test]
    fn the_zone_keeps_its_size_and_forgets_the_least_recent() {
        let mut l = LimitReq::new(LimitReqSettings {
            rate: 1000,
            burst: 0,
            delay: None,
            zone_size: 1000,
        });
        // A flood of distinct keys: the zone never holds more than its size.
        for k in 0..100_000u32 {
            l.check(k, 0);
            assert!(l.len() <= 1000);
        }
        // A key kept in use stays limited through the flood.
        let mut l = LimitReq::new(LimitReqSettings {
            rate: 1000,
            burst: 0,
            delay: None,
            zone_size: 1000,
        });
        assert!(accepted(l.check(u32::MAX, 0)));
        for k in 0..10_000u32 {
            l.check(k, 0);
            if k % 100 == 0 {
                assert!(!accepted(l.check(u32::MAX, 0)), "{k}");
            }
        }
    }

    #[test]
    fn a_clock_that_goes_back_drains_nothing() {
        let mut l = limit("10r/s", 1, None);
        assert!(accepted(l.check(1, 10_000)));
        assert!(accepted(l.check(1, 9_000)));
        assert!(!accepted(l.check(1, 9_500)));
    }
}
