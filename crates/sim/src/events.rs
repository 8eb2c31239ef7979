//! The event queue: events ordered by virtual time, ties by the order they were scheduled, so
//! a run is exactly reproducible.
//!
//! A calendar queue (R. Brown, "Calendar queues: a fast O(1) priority queue implementation for
//! the simulation event set problem", CACM 31(10), 1988). Time is cut into slots of
//! `2^shift` ns; slot `s` lives in bucket `s mod buckets`, like the days of a year on a desk
//! calendar. Each bucket is a short unsorted vector. The next event is found by walking the
//! slots from a cursor: the first bucket with an event in the cursor's own slot (not a later
//! year's) holds it, the earliest of them by key. With a slot about three events wide and
//! about as many buckets as events, a pop steps over about one bucket and looks at two or three
//! entries, and a push is a push at a vector's end — where a heap of a thousand events does
//! some twenty compares and moves of its 32-byte entries.
//!
//! The order is exact whatever the width and the number of buckets: the key is (time, the
//! sequence number of the push), unique, and every bucket is kept sorted by it; width and size
//! only change the speed. They are re-tuned (the queue rebuilt) when the number of events
//! outgrows the buckets or falls far below, and when the last stretch of pops stepped over too
//! many buckets or looked at too many entries per pop.

/// Virtual time in nanoseconds.
pub type Time = u64;

/// An event with its key.
#[derive(Debug)]
struct Entry<E> {
    at: Time,
    seq: u64,
    event: E,
}

/// Events of type `E` due at virtual times.
#[derive(Debug)]
pub struct Events<E> {
    /// Bucket `i` holds the events whose slot (`at >> shift`) is `i` modulo the bucket count
    /// (a power of two), in no order.
    buckets: Vec<Vec<Entry<E>>>,
    /// A slot is `2^shift` ns.
    shift: u32,
    /// The cursor: no event is due before this slot begins.
    slot: u64,
    len: usize,
    /// Where the earliest event is (bucket, place), when known: a look at the next event
    /// followed by pushes of later ones, or by the pop, need not search again.
    head: Option<(usize, usize)>,
    /// Pushes so far: the next sequence number.
    scheduled: u64,
    /// Since the last re-tune: pops, and the buckets stepped over plus the entries looked at
    /// beyond one a bucket.
    pops: u64,
    work: u64,
}

/// The fewest buckets kept.
const MIN_BUCKETS: usize = 16;
/// The first slot width, before there are events to measure (1 ms).
const FIRST_SHIFT: u32 = 20;
/// How many events at the front the width is measured on.
const SAMPLE: usize = 64;

impl<E> Default for Events<E> {
    fn default() -> Events<E> {
        Events {
            buckets: (0..MIN_BUCKETS).map(|_| Vec::new()).collect(),
            shift: FIRST_SHIFT,
            slot: 0,
            len: 0,
            head: None,
            scheduled: 0,
            pops: 0,
            work: 0,
        }
    }
}

impl<E> Events<E> {
    /// Schedules `event` at `at`.
    pub fn push(&mut self, at: Time, event: E) {
        let seq = self.scheduled;
        self.scheduled += 1;
        let slot = at >> self.shift;
        // Earlier than the cursor (an event scheduled after a look at the next one, before a
        // sooner event from elsewhere ran): the cursor comes back to it.
        self.slot = self.slot.min(slot);
        let mask = self.buckets.len() - 1;
        let i = slot as usize & mask;
        // The known earliest stays the earliest unless this one is due sooner (it is pushed
        // last, so among events due at the same time it comes last).
        if self.head.is_some_and(|(h, k)| at < self.buckets[h][k].at) {
            self.head = Some((i, self.buckets[i].len()));
        }
        self.buckets[i].push(Entry { at, seq, event });
        self.len += 1;
        if self.len > 2 * self.buckets.len() {
            self.rebuild(self.buckets.len() * 2);
        }
    }

    /// The next event and its time: the earliest, the first scheduled among equals.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        let (i, j) = self.find()?;
        self.head = None;
        let e = self.buckets[i].swap_remove(j);
        self.len -= 1;
        self.pops += 1;
        self.tune();
        Some((e.at, e.event))
    }

    /// When the next event is due (moves the cursor up to it).
    pub fn next_time(&mut self) -> Option<Time> {
        let (i, j) = self.find()?;
        Some(self.buckets[i][j].at)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the earliest event is (bucket, place), the cursor moved to its slot.
    fn find(&mut self) -> Option<(usize, usize)> {
        if self.head.is_some() || self.len == 0 {
            return self.head;
        }
        self.head = self.search();
        self.head
    }

    /// [`Events::find`] without the known answer.
    fn search(&mut self) -> Option<(usize, usize)> {
        let mask = self.buckets.len() - 1;
        for _ in 0..self.buckets.len() {
            let bucket = &self.buckets[self.slot as usize & mask];
            // The earliest of the bucket's events due in this slot (the others are a later
            // year's).
            let mut best: Option<(usize, (Time, u64))> = None;
            for (j, e) in bucket.iter().enumerate() {
                let key = (e.at, e.seq);
                if e.at >> self.shift == self.slot && best.is_none_or(|(_, b)| key < b) {
                    best = Some((j, key));
                }
            }
            self.work += bucket.len().saturating_sub(1) as u64;
            if let Some((j, _)) = best {
                return Some((self.slot as usize & mask, j));
            }
            self.slot = self.slot.wrapping_add(1);
            self.work += 1;
        }
        // A whole year without an event: straight to the earliest.
        let (i, j, at) = self
            .buckets
            .iter()
            .enumerate()
            .flat_map(|(i, b)| {
                b.iter()
                    .enumerate()
                    .map(move |(j, e)| (i, j, (e.at, e.seq)))
            })
            .min_by_key(|&(_, _, key)| key)?;
        self.slot = at.0 >> self.shift;
        Some((i, j))
    }

    /// After a pop: fewer buckets when the events are far fewer; a new width when the stretch
    /// since the last re-tune (at least as many pops as there are events, so rebuilding costs
    /// O(log n) a pop) took more than a few steps and shifts per pop.
    fn tune(&mut self) {
        if self.buckets.len() > MIN_BUCKETS && self.len < self.buckets.len() / 4 {
            return self.rebuild(self.buckets.len() / 2);
        }
        if self.pops >= (self.len as u64).max(1024) {
            if self.work > 8 * self.pops {
                self.rebuild(self.buckets.len());
            }
            self.pops = 0;
            self.work = 0;
        }
    }

    /// Spreads the events over `count` buckets with a width measured on the earliest ones:
    /// about three of them per slot (Brown's rule).
    fn rebuild(&mut self, count: usize) {
        self.head = None;
        let mut all: Vec<Entry<E>> = self.buckets.iter_mut().flat_map(|b| b.drain(..)).collect();
        all.sort_unstable_by_key(|e| (e.at, e.seq));
        let front = &all[..all.len().min(SAMPLE)];
        let shift = match (front.first(), front.last()) {
            (Some(a), Some(b)) if front.len() > 1 => {
                let gap = (b.at - a.at) / (front.len() as u64 - 1);
                let width = gap.saturating_mul(3).max(1);
                63 - width.leading_zeros()
            }
            _ => self.shift,
        };
        // No event is due before the old cursor's slot began, nor before the earliest event.
        let start = self.slot << self.shift;
        self.slot = all.first().map_or(start, |e| e.at.max(start)) >> shift;
        self.shift = shift;
        self.buckets.resize_with(count, Vec::new);
        self.buckets.truncate(count);
        let mask = count - 1;
        for e in all {
            self.buckets[(e.at >> shift) as usize & mask].push(e);
        }
        self.pops = 0;
        self.work = 0;
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
