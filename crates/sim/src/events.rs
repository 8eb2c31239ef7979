//! The event queue: events ordered by virtual time, ties by the order they were scheduled, so
//! a run is exactly reproducible.

use dary_heap::QuaternaryHeap;
use std::cmp::Reverse;

/// Virtual time in nanoseconds.
pub type Time = u64;

/// Events of type `E` due at virtual times.
#[derive(Debug)]
pub struct Events<E> {
    heap: QuaternaryHeap<Reverse<(Time, u64, Slot<E>)>>,
    scheduled: u64,
}

/// Holds an event in the heap without asking it to be ordered (the time and sequence are).
#[derive(Debug)]
struct Slot<E>(E);

impl<E> PartialEq for Slot<E> {
    fn eq(&self, _: &Slot<E>) -> bool {
        true
    }
}
impl<E> Eq for Slot<E> {}
impl<E> PartialOrd for Slot<E> {
    fn partial_cmp(&self, other: &Slot<E>) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Slot<E> {
    fn cmp(&self, _: &Slot<E>) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
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
        self.heap.push(Reverse((at, self.scheduled, Slot(event))));
        self.scheduled += 1;
    }

    /// The next event and its time: the earliest, the first scheduled among equals.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        self.heap.pop().map(|Reverse((at, _, Slot(e)))| (at, e))
    }

    /// When the next event is due.
    pub fn next_time(&self) -> Option<Time> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
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
}
