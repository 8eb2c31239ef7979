//! The measurements: one pure parser per kernel file, and the arithmetic that turns two
//! readings of a counter into a utilization.
//!
//! Nothing here touches the file system or reads a clock. [`crate::sampler`] reads the files
//! and the time and hands the text and the elapsed time in, so every parser is tested on fixed
//! text, including garbage, missing fields and counters that go backwards.
//!
//! Every utilization comes out in [0, 1]. A counter that went backwards (a device replaced, a
//! counter wrapped, an interface re-created) gives no busy time for that interval rather than
//! a huge or negative figure; the next interval measures from the new value.

pub mod cgroup;
pub mod cpu;
pub mod disk;
pub mod memory;
pub mod network;

use std::time::Duration;

/// A kernel file whose text was not what the parser expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

impl ParseError {
    fn new(reason: impl Into<String>) -> ParseError {
        ParseError(reason.into())
    }
}

/// A named monotonic counter (bytes of an interface, busy milliseconds of a disk).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// The device or interface name as the kernel lists it.
    pub name: String,
    /// The counter's value at the reading.
    pub value: u64,
}

/// The increase of every counter present in both readings, by name; a counter that went
/// backwards, or that is new or gone, contributes nothing.
fn increases<'a>(
    before: &'a [Counter],
    after: &'a [Counter],
) -> impl Iterator<Item = (&'a str, u64)> + 'a {
    after.iter().filter_map(move |now| {
        let then = before.iter().find(|c| c.name == now.name)?;
        now.value
            .checked_sub(then.value)
            .map(|d| (now.name.as_str(), d))
    })
}

/// `part / whole` clamped into [0, 1]; 0 when `whole` is not positive.
pub fn share(part: f64, whole: f64) -> f64 {
    if !part.is_finite() || !whole.is_finite() || whole <= 0.0 {
        return 0.0;
    }
    (part / whole).clamp(0.0, 1.0)
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
