//! An upstream's balancing policy: the part of an upstream's settings that decides where its
//! requests go — the algorithm and its options, the backends in pool order, how many attempts
//! a request gets, the `max_conns` queue, and how load reports are polled and aged.
//!
//! The proxy's settings make one (`proxy::UpstreamSettings::policy`; the upstream builds its pool
//! from it) and the simulator's contenders hold one (made from the very configuration the lab
//! would give the proxy), so both build their pools, attempt limits and load-report feeds the
//! same way. Addresses, TLS, timeouts and the rest of the proxy's I/O are not part of it.

use std::time::Duration;

use crate::algorithm::{Algorithm, Options};
use crate::attempt::attempt_limit;
use crate::backend::BackendSpec;
use crate::pool::Pool;
use crate::weights::feed::Feed;

/// An upstream's balancing policy (see the module documentation).
#[derive(Debug, Clone)]
pub struct Policy {
    pub algorithm: Algorithm,
    pub options: Options,
    /// The backends used while any is available, in pool order.
    pub primaries: Vec<BackendSpec>,
    /// Those used only when no primary is (after the primaries in pool order).
    pub backups: Vec<BackendSpec>,
    /// Further backends to try after a failed attempt (`None`: every backend once).
    pub retries: Option<u32>,
    /// What moves a request on to the next backend (`next_upstream`).
    pub next_upstream: crate::retry::NextUpstream,
    /// The cap on retries (`None`: none).
    pub retry_budget: Option<crate::budget::RetryBudgetSettings>,
    /// Requests that may wait for a backend below its `max_conns` (0: none may), and for how
    /// long.
    pub queue: usize,
    pub queue_timeout: Duration,
    /// How often load reports are polled, and after how many missed polls a backend's report
    /// is stale.
    pub poll_interval: Duration,
    pub stale_after: u32,
}

impl Policy {
    /// The attempts a request is allowed ([`attempt_limit`]).
    pub fn attempt_limit(&self) -> usize {
        attempt_limit(self.retries, self.primaries.len() + self.backups.len())
    }

    /// A pool over the policy's backends; `seed` feeds algorithms that draw random numbers.
    pub fn pool(&self, seed: u64) -> Pool {
        Pool::new(
            self.algorithm,
            &self.options,
            &self.primaries,
            &self.backups,
            seed,
        )
    }

    /// The load-report feed of its primaries, if its algorithm balances by load reports.
    pub fn feed(&self) -> Option<Feed> {
        let configured: Vec<u32> = self.primaries.iter().map(|b| b.weight).collect();
        Feed::new(self.algorithm, &configured, &self.options, self.stale_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attempt_limit_counts_backups_and_the_pool_has_every_backend() {
        let policy = Policy {
            algorithm: Algorithm::RoundRobin,
            options: Options::default(),
            primaries: vec![BackendSpec::new(1); 2],
            backups: vec![BackendSpec::new(1)],
            retries: None,
            next_upstream: crate::retry::NextUpstream::DEFAULT,
            retry_budget: None,
            queue: 0,
            queue_timeout: Duration::from_secs(60),
            poll_interval: Duration::from_secs(3),
            stale_after: 3,
        };
        assert_eq!(policy.attempt_limit(), 3);
        assert_eq!(
            Policy {
                retries: Some(0),
                ..policy.clone()
            }
            .attempt_limit(),
            1
        );
        let pool = policy.pool(1);
        assert_eq!(pool.len(), 3);
        assert_eq!(pool.primaries(), 2);
        assert!(policy.feed().is_none(), "round robin reads no load reports");
    }
}
