//! The event queue: events ordered by virtual time, ties by the order they were scheduled, so
//! a run is exactly reproducible.
//!
//! A 4-ary heap (shallower sifts than a binary heap's) of entries keyed by one `u128`: the
//! time in the high half, the push's sequence number in the low half, so the key is unique and
//! its order is (time, scheduling order). One 128-bit compare (two instructions) replaces the
//! lexicographic compare of a (time, sequence) tuple, which was about a tenth of the
//! simulator's instructions at 1,000 backends.
//!
//! Calendar queues (R. Brown, CACM 31(10), 1988) were tried, with vectors as buckets and with
//! buckets inline in one array: they did fewer instructions but missed the cache more — a
//! thousand events spread over a thousand buckets touch more lines than a 32 KiB heap whose
//! upper levels stay in L1 — and were no faster (docs/performance.md, issue 27).

use dary_heap::QuaternaryHeap;

/// Virtual time in nanoseconds.
pub type Time = u64;

/// An event and its key, ordered so that the heap's greatest is the earliest.
#[derive(Debug)]
struct Entry<E> {
    /// `at << 64 | seq`.
    key: u128,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Entry<E>) -> bool {
        self.key == other.key
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Entry<E>) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Entry<E>) -> std::cmp::Ordering {
        // Reversed: the max-heap's top is the smallest key.
        other.key.cmp(&self.key)
    }
}

/// Events of type `E` due at virtual times.
#[derive(Debug)]
pub struct Events<E> {
    heap: QuaternaryHeap<Entry<E>>,
    /// Pushes so far: the next sequence number.
    scheduled: u64,
}

impl<E> Default for Events<E> {
    fn default() -> Events<E> {
        Events {
            heap: QuaternaryHeap::new(),
            scheduled: 0,
        }
    }
}

impl<E> Events<E> {
    /// Schedules `event` at `at`.
    pub fn push(&mut self, at: Time, event: E) {
        let key = u128::from(at) << 64 | u128::from(self.scheduled);
        self.heap.push(Entry { key, event });
        self.scheduled += 1;
    }

    /// The next event and its time: the earliest, the first scheduled among equals.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        self.heap.pop().map(|e| ((e.key >> 64) as Time, e.event))
    }

    /// When the next event is due.
    pub fn next_time(&self) -> Option<Time> {
        self.heap.peek().map(|e| (e.key >> 64) as Time)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};
    use rand_pcg::Pcg64Mcg;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    #[test]
    fn earliest_first_and_ties_in_scheduling_order() {
        let mut q = Events::default();
        q.push(30, "c");
        q.push(10, "a");
        q.push(20, "b1");
        q.push(20, "b2");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, [(10, "a"), (20, "b1"), (20, "b2"), (30, "c")]);
        assert!(q.is_empty());
    }

    /// The order the simulator had before the calendar queue: a heap on (time, push number).
    #[derive(Default)]
    struct Reference {
        heap: BinaryHeap<Reverse<(Time, u64)>>,
        scheduled: u64,
    }

    impl Reference {
        fn push(&mut self, at: Time) -> u64 {
            let id = self.scheduled;
            self.heap.push(Reverse((at, id)));
            self.scheduled += 1;
            id
        }
        fn pop(&mut self) -> Option<(Time, u64)> {
            self.heap.pop().map(|Reverse(k)| k)
        }
        fn next_time(&self) -> Option<Time> {
            self.heap.peek().map(|Reverse((at, _))| *at)
        }
    }

    /// How far ahead the random sequences schedule: the shapes the simulator makes.
    #[derive(Debug, Clone, Copy)]
    enum Shape {
        /// Exponential service times around a mean (a slot's end).
        Exponential(f64),
        /// A handful of fixed delays (network, polls, steps): many exact ties.
        Fixed(&'static [u64]),
        /// Now, or a little later: ties with the current time.
        Now,
        /// Mostly near, now and then an hour away (deadlines), now and then huge.
        Mixed,
    }

    fn ahead(rng: &mut Pcg64Mcg, shape: Shape) -> u64 {
        match shape {
            Shape::Exponential(mean) => (-mean * (1.0 - rng.random::<f64>()).ln()) as u64,
            Shape::Fixed(delays) => delays[rng.random_range(0..delays.len())],
            Shape::Now => rng.random_range(0..3),
            Shape::Mixed => match rng.random_range(0..100) {
                0..=79 => rng.random_range(0..2_000_000),
                80..=94 => 3_600_000_000_000,
                95..=98 => rng.random_range(0..4) * 250_000_000,
                _ => u64::MAX / 2 + rng.random_range(0..1000),
            },
        }
    }

    /// Drives the queue and the reference alike over a long random run and compares every
    /// step: pushes ahead of the current time in `shape`, pops, looks at the next time, and
    /// (as the simulator's arrivals do) pushes after a look, earlier than the next event.
    fn agrees(seed: u64, shape: Shape, steps: usize, target: usize) {
        let mut rng = Pcg64Mcg::seed_from_u64(seed);
        let mut q: Events<u64> = Events::default();
        let mut r = Reference::default();
        let mut now: Time = 0;
        for step in 0..steps {
            // Grow towards `target` events, then hover around it; now and then drain a lot.
            let drain = step % 50_000 > 45_000;
            let push = !drain && (r.heap.len() < target || rng.random_bool(0.5));
            match rng.random_range(0..10) {
                _ if push => {
                    let at = now.saturating_add(ahead(&mut rng, shape));
                    let id = r.push(at);
                    q.push(at, id);
                }
                0 => {
                    // A look, then an event from elsewhere before the next: pushes at times
                    // between now and the next event.
                    assert_eq!(q.next_time(), r.next_time(), "step {step}");
                    if let Some(next) = r.next_time() {
                        now = rng.random_range(now..=next);
                        for _ in 0..rng.random_range(0..3) {
                            let at = now.saturating_add(ahead(&mut rng, Shape::Now));
                            let id = r.push(at);
                            q.push(at, id);
                        }
                    }
                }
                _ => {
                    let (got, want) = (q.pop(), r.pop());
                    assert_eq!(got, want, "step {step}, {shape:?}, seed {seed}");
                    if let Some((at, _)) = want {
                        now = at;
                    }
                }
            }
            assert_eq!(q.len(), r.heap.len());
        }
        while let Some(want) = r.pop() {
            assert_eq!(q.pop(), Some(want));
        }
        assert!(q.is_empty() && q.pop().is_none());
    }

    #[test]
    fn pops_as_a_heap_on_time_and_push_order_does() {
        let shapes = [
            Shape::Exponential(1e9),
            Shape::Exponential(1e3),
            Shape::Fixed(&[0, 200_000, 250_000_000, 1_000_000_000]),
            Shape::Now,
            Shape::Mixed,
        ];
        for (k, shape) in shapes.into_iter().enumerate() {
            for (seed, target) in [(1, 10), (2, 1000), (3, 20_000)] {
                agrees(seed * 10 + k as u64, shape, 200_000, target);
            }
        }
    }

    #[test]
    fn shifting_loads_keep_the_order() {
        // The spacing of events changes by orders of magnitude while the size stays: the
        // width goes stale and is re-tuned.
        let mut rng = Pcg64Mcg::seed_from_u64(7);
        let mut q: Events<u64> = Events::default();
        let mut r = Reference::default();
        let mut now = 0;
        for phase in 0..12 {
            let mean = 10f64.powi(phase % 6 + 2);
            for _ in 0..50_000 {
                if r.heap.len() < 500 || rng.random_bool(0.5) {
                    let at = now + ahead(&mut rng, Shape::Exponential(mean));
                    let id = r.push(at);
                    q.push(at, id);
                } else {
                    let want = r.pop();
                    assert_eq!(q.pop(), want, "phase {phase}");
                    now = want.map_or(now, |(at, _)| at);
                }
            }
        }
    }
}
