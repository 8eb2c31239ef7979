//! [`FailureStatuses`]: which answers of a backend count as failures for what the load-aware
//! algorithms learn (`failure_statuses` in an upstream's configuration).
//!
//! A backend that answers 503 in a millisecond is not fast, it is failing: counted as a
//! success, it would look like the best backend to every algorithm that learns from latency
//! (seed 004 with `latency`: 51 failures of 300 against 19 for least connections). The
//! default is every 5xx but 501 (Not Implemented) and 505 (HTTP Version Not Supported), which
//! say the request cannot be served anywhere, not that this backend failed — Envoy's outlier
//! detection and gRPC's retry policies single out the same "gateway and server errors". The
//! statuses the upstream's `next_upstream` lists are added: a status that moves a request on
//! is one the operator already treats as the backend's failure.
//!
//! What a failed answer changes is learning only: passive health (`max_fails`) counts a
//! relayed answer as nginx does, not at all (see [`Outcome::FailedAnswer`]).

use std::fmt;

use crate::balancer::Outcome;
use crate::retry::NextUpstream;

/// The lowest and highest status an answer can have (RFC 9110 §15: three digits, 1xx to 5xx).
pub const STATUSES: std::ops::RangeInclusive<u16> = 100..=599;

/// A set of HTTP statuses in [`STATUSES`] (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FailureStatuses([u64; 10]);

impl FailureStatuses {
    /// No status: every answer is a success.
    pub const NONE: FailureStatuses = FailureStatuses([0; 10]);

    /// 500–599 except 501 and 505.
    pub const DEFAULT: FailureStatuses = FailureStatuses::NONE
        .with_range(500, 599)
        .without(501)
        .without(505);

    /// The set with `status` in it; a status outside [`STATUSES`] is left out.
    pub const fn with(self, status: u16) -> FailureStatuses {
        self.with_range(status, status)
    }

    /// The set with every status from `first` to `last` in it (those in [`STATUSES`]).
    pub const fn with_range(mut self, first: u16, last: u16) -> FailureStatuses {
        let mut s = first;
        while s <= last && s <= *STATUSES.end() {
            if s >= *STATUSES.start() {
                self.0[(s / 64) as usize] |= 1 << (s % 64);
            }
            s += 1;
        }
        self
    }

    /// The set without `status`.
    pub const fn without(mut self, status: u16) -> FailureStatuses {
        if status <= *STATUSES.end() {
            self.0[(status / 64) as usize] &= !(1 << (status % 64));
        }
        self
    }

    /// The set with every status `next_upstream` moves a request on from.
    pub fn with_next_upstream(self, next: NextUpstream) -> FailureStatuses {
        STATUSES
            .filter(|&s| next.moves_on(s))
            .fold(self, FailureStatuses::with)
    }

    pub fn contains(self, status: u16) -> bool {
        STATUSES.contains(&status) && self.0[(status / 64) as usize] & (1 << (status % 64)) != 0
    }

    /// How an attempt whose answer (with `status`) was relayed completes:
    /// [`Outcome::FailedAnswer`] for a status in the set, else [`Outcome::Success`].
    pub fn outcome(self, status: u16) -> Outcome {
        if self.contains(status) {
            Outcome::FailedAnswer
        } else {
            Outcome::Success
        }
    }

    /// The statuses in the set, as ranges of consecutive ones.
    pub fn ranges(self) -> Vec<(u16, u16)> {
        let mut ranges: Vec<(u16, u16)> = Vec::new();
        for s in STATUSES.filter(|&s| self.contains(s)) {
            match ranges.last_mut() {
                Some((_, last)) if *last + 1 == s => *last = s,
                _ => ranges.push((s, s)),
            }
        }
        ranges
    }
}

impl Default for FailureStatuses {
    fn default() -> FailureStatuses {
        FailureStatuses::DEFAULT
    }
}

impl fmt::Debug for FailureStatuses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FailureStatuses({self})")
    }
}

/// As the configuration writes it: `500, 502-504, 506-599`; `none` for the empty set.
impl fmt::Display for FailureStatuses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ranges = self.ranges();
        if ranges.is_empty() {
            return f.write_str("none");
        }
        for (i, (first, last)) in ranges.into_iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            if first == last {
                write!(f, "{first}")?;
            } else {
                write!(f, "{first}-{last}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_every_5xx_but_501_and_505() {
        let d = FailureStatuses::DEFAULT;
        for s in STATUSES {
            let want = (500..=599).contains(&s) && s != 501 && s != 505;
            assert_eq!(d.contains(s), want, "{s}");
        }
        assert!(!d.contains(0) && !d.contains(600) && !d.contains(u16::MAX));
        assert_eq!(d.to_string(), "500, 502-504, 506-599");
        assert_eq!(d.outcome(503), Outcome::FailedAnswer);
        assert_eq!(d.outcome(501), Outcome::Success);
        assert_eq!(d.outcome(200), Outcome::Success);
        assert_eq!(d.outcome(404), Outcome::Success);
    }

    #[test]
    fn next_upstream_adds_the_statuses_it_moves_on_from() {
        let next = NextUpstream::DEFAULT
            .with(NextUpstream::HTTP_429)
            .with(NextUpstream::HTTP_503);
        let set = FailureStatuses::NONE.with_next_upstream(next);
        assert_eq!(set.to_string(), "429, 503");
        assert_eq!(
            FailureStatuses::NONE
                .with_next_upstream(NextUpstream::DEFAULT)
                .to_string(),
            "none"
        );
        assert_eq!(
            FailureStatuses::NONE
                .with_range(90, 105)
                .with(700)
                .to_string(),
            "100-105"
        );
    }
}
