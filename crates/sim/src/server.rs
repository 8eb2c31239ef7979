//! A backend as a queueing server: `slots` service slots of relative `speed`, a FIFO queue
//! over them (the lab backend's `cpu` mode).

use std::collections::VecDeque;

use crate::events::Time;

/// A FIFO server with `slots` slots. The caller owns the clock: [`Server::arrive`] and
/// [`Server::finish`] say when service starts and ends; the caller schedules the end.
#[derive(Debug, Clone)]
pub struct Server {
    slots: u32,
    busy: u32,
    speed: f64,
    /// Jobs waiting: (job id, work in ns at speed 1).
    queue: VecDeque<(u64, u64)>,
}

impl Server {
    pub fn new(slots: u32, speed: f64) -> Server {
        Server {
            slots: slots.max(1),
            busy: 0,
            speed: if speed > 0.0 { speed } else { 1.0 },
            queue: VecDeque::new(),
        }
    }

    /// Job `id` of `work` ns arrives at `now`: `Some(end)` if it starts at once, else it waits.
    pub fn arrive(&mut self, now: Time, id: u64, work: u64) -> Option<Time> {
        if self.busy < self.slots {
            self.busy += 1;
            Some(now + self.service(work))
        } else {
            self.queue.push_back((id, work));
            None
        }
    }

    /// A job ends at `now`: the next waiting job, if any, starts: `Some((id, end))`.
    pub fn finish(&mut self, now: Time) -> Option<(u64, Time)> {
        match self.queue.pop_front() {
            Some((id, work)) => Some((id, now + self.service(work))),
            None => {
                self.busy = self.busy.saturating_sub(1);
                None
            }
        }
    }

    /// Jobs in service and waiting.
    pub fn jobs(&self) -> usize {
        self.busy as usize + self.queue.len()
    }

    fn service(&self, work: u64) -> u64 {
        (work as f64 / self.speed).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_slots_serve_in_turn() {
        let mut s = Server::new(2, 0.5);
        assert_eq!(s.arrive(0, 1, 100), Some(200));
        assert_eq!(s.arrive(0, 2, 100), Some(200));
        assert_eq!(s.arrive(10, 3, 50), None);
        assert_eq!(s.jobs(), 3);
        assert_eq!(s.finish(200), Some((3, 300)));
        assert_eq!(s.finish(200), None);
        assert_eq!(s.finish(300), None);
        assert_eq!(s.jobs(), 0);
    }
}
