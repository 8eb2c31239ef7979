//! A small harness for algorithm unit tests: a pool of backends with a fake clock.

use crate::backend::{BackendId, BackendSpec, BackendState, Backends, Nanos};
use crate::balancer::{Balancer, Completion, Outcome, PickCtx};

pub(crate) struct Harness<B: Balancer> {
    pub states: Vec<BackendState>,
    pub balancer: B,
    pub now: Nanos,
}

/// Picks as letters: backend 0 is `a`.
pub(crate) fn names(ids: &[BackendId]) -> String {
    ids.iter().map(|id| (b'a' + id.0 as u8) as char).collect()
}

impl<B: Balancer> Harness<B> {
    pub fn new(weights: &[u32], balancer: B) -> Harness<B> {
        Harness::with_max_fails(weights, 1, balancer)
    }

    pub fn with_max_fails(weights: &[u32], max_fails: u32, balancer: B) -> Harness<B> {
        let states = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                BackendState::new(BackendSpec {
                    max_fails,
                    ..BackendSpec::new(w).named(&format!("10.0.0.{}:80", i + 1))
                })
            })
            .collect();
        let mut h = Harness {
            states,
            balancer,
            now: Nanos(1),
        };
        h.balancer.rebuild(&Backends::new(&h.states, h.now));
        h
    }

    fn pick_ctx(&mut self, affinity: Option<&[u8]>, exclude: &[BackendId]) -> Option<BackendId> {
        self.now.0 += 1000;
        let ctx = PickCtx {
            affinity,
            exclude,
            now: self.now,
        };
        let id = self
            .balancer
            .pick(&ctx, &Backends::new(&self.states, self.now))?;
        assert!(self.states[id.index()].is_eligible(self.now));
        assert!(!exclude.contains(&id));
        self.states[id.index()].in_flight += 1;
        Some(id)
    }

    pub fn pick(&mut self) -> Option<BackendId> {
        self.pick_ctx(None, &[])
    }

    pub fn pick_excluding(&mut self, exclude: &[BackendId]) -> Option<BackendId> {
        let id = self.pick_ctx(None, exclude);
        if let Some(id) = id {
            self.complete(id, Outcome::Success);
        }
        id
    }

    pub fn pick_with_key(&mut self, key: &[u8]) -> Option<BackendId> {
        let id = self.pick_ctx(Some(key), &[]);
        if let Some(id) = id {
            self.complete(id, Outcome::Success);
        }
        id
    }

    pub fn pick_with_key_excluding(
        &mut self,
        key: &[u8],
        exclude: &[BackendId],
    ) -> Option<BackendId> {
        let id = self.pick_ctx(Some(key), exclude);
        if let Some(id) = id {
            self.complete(id, Outcome::Success);
        }
        id
    }

    /// A pick with a key, held in flight.
    pub fn hold_with_key(&mut self, key: &[u8]) -> Option<BackendId> {
        self.pick_ctx(Some(key), &[])
    }

    pub fn complete(&mut self, id: BackendId, outcome: Outcome) {
        self.states[id.index()].in_flight -= 1;
        let c = Completion {
            outcome,
            latency: Nanos(1000),
            now: self.now,
        };
        self.balancer.on_complete(id, &c);
    }

    /// `n` picks, each completed successfully before the next.
    pub fn picks(&mut self, n: usize) -> Vec<BackendId> {
        (0..n)
            .map(|_| {
                let id = self.pick().expect("a backend");
                self.complete(id, Outcome::Success);
                id
            })
            .collect()
    }

    /// `n` picks held in flight.
    pub fn hold(&mut self, n: usize) -> Vec<BackendId> {
        (0..n).map(|_| self.pick().expect("a backend")).collect()
    }

    pub fn counts(&mut self, n: usize) -> Vec<u64> {
        let mut counts = vec![0; self.states.len()];
        for id in self.picks(n) {
            counts[id.index()] += 1;
        }
        counts
    }

    pub fn in_flight(&self) -> Vec<u32> {
        self.states.iter().map(|s| s.in_flight).collect()
    }

    pub fn mark_down(&mut self, i: usize) {
        self.states[i].spec.down = true;
    }

    pub fn mark_up(&mut self, i: usize) {
        self.states[i].spec.down = false;
    }
}
