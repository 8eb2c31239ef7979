//! A run's progress, as a person watching it wants it: elapsed and total time, requests sent,
//! answered, in flight, and errors — counted by the senders, drawn on an `indicatif` bar ten
//! times a second by a task of its own (never by the senders, which only bump counters).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Verdict;

/// Requests so far, by what became of them. The senders own the counting; the bar only reads.
#[derive(Debug, Default)]
pub struct Counters {
    sent: AtomicU64,
    /// Answered, whatever the status.
    answered: AtomicU64,
    /// Answered 5xx.
    http_errors: AtomicU64,
    /// Not answered: timed out or failed.
    unanswered: AtomicU64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub sent: u64,
    pub answered: u64,
    pub in_flight: u64,
    /// Answered 5xx, timed out or failed.
    pub errors: u64,
}

impl Counters {
    /// A request left.
    pub fn sent(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    /// A request that left came to `verdict`.
    pub fn done(&self, verdict: Verdict) {
        let counter = match verdict {
            Verdict::Ok => &self.answered,
            Verdict::HttpError => {
                self.http_errors.fetch_add(1, Ordering::Relaxed);
                &self.answered
            }
            Verdict::Timeout | Verdict::Error => &self.unanswered,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        // Read the finished before the sent, so that a request finishing in between is not
        // counted finished and not yet sent (in flight never goes below 0).
        let answered = self.answered.load(Ordering::Relaxed);
        let http_errors = self.http_errors.load(Ordering::Relaxed);
        let unanswered = self.unanswered.load(Ordering::Relaxed);
        let sent = self.sent.load(Ordering::Relaxed);
        Snapshot {
            sent,
            answered,
            in_flight: sent.saturating_sub(answered + unanswered),
            errors: http_errors + unanswered,
        }
    }
}

/// A bar on stderr, for [`Plan::progress`](super::Plan::progress) (`run` gives it its length
/// and style). indicatif draws nothing when stderr is not a terminal.
pub fn bar() -> ProgressBar {
    ProgressBar::new(0)
}

/// How often the bar is redrawn.
const TICK: Duration = Duration::from_millis(100);

/// A bar being drawn for a run.
#[derive(Debug)]
pub(super) struct Progress {
    bar: ProgressBar,
    counters: Arc<Counters>,
    start: Instant,
    length: Duration,
    ticker: JoinHandle<()>,
}

impl Progress {
    /// Styles `bar` for a run that sends for `length`, and redraws it every tick from now on.
    pub(super) fn start(bar: ProgressBar, length: Duration) -> Progress {
        let style = ProgressStyle::with_template("{bar:30.cyan/blue} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_length(length.as_millis().max(1) as u64);
        let counters = Arc::new(Counters::default());
        let start = Instant::now();
        let ticker = {
            let (bar, counters) = (bar.clone(), Arc::clone(&counters));
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(TICK);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    tick.tick().await;
                    draw(&bar, &counters, start.elapsed(), length);
                }
            })
        };
        Progress {
            bar,
            counters,
            start,
            length,
            ticker,
        }
    }

    pub(super) fn counters(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }

    /// Draws the final counts and leaves the bar there.
    pub(super) fn finish(self) {
        self.ticker.abort();
        draw(&self.bar, &self.counters, self.start.elapsed(), self.length);
        self.bar.finish();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.ticker.abort();
    }
}

fn draw(bar: &ProgressBar, counters: &Counters, elapsed: Duration, length: Duration) {
    bar.set_position(elapsed.min(length).as_millis() as u64);
    bar.set_message(message(counters.snapshot(), elapsed, length));
}

/// `4.2s / 10.0s  sent 12600  answered 12598  in flight 2  errors 0`
fn message(s: Snapshot, elapsed: Duration, length: Duration) -> String {
    format!(
        "{:.1}s / {:.1}s  sent {}  answered {}  in flight {}  errors {}",
        elapsed.as_secs_f64(),
        length.as_secs_f64(),
        s.sent,
        s.answered,
        s.in_flight,
        s.errors
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_is_sent_less_finished_and_errors_are_every_failure() {
        let c = Counters::default();
        for _ in 0..6 {
            c.sent();
        }
        c.done(Verdict::Ok);
        c.done(Verdict::HttpError);
        c.done(Verdict::Timeout);
        c.done(Verdict::Error);
        let s = c.snapshot();
        assert_eq!(
            s,
            Snapshot {
                sent: 6,
                answered: 2,
                in_flight: 2,
                errors: 3
            }
        );
        assert_eq!(
            message(s, Duration::from_millis(4200), Duration::from_secs(10)),
            "4.2s / 10.0s  sent 6  answered 2  in flight 2  errors 3"
        );
    }
}
