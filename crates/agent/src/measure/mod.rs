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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Text that looks like the kernel's files often enough to reach deep into the parsers:
    /// names, numbers (huge and negative ones too), colons and line breaks.
    fn kernel_like() -> impl Strategy<Value = String> {
        let token = prop_oneof![
            "[a-z]{1,6}[0-9]{0,2}",
            any::<u64>().prop_map(|n| n.to_string()),
            "-?[0-9]{1,25}",
            Just("cpu".to_owned()),
            Just("MemTotal:".to_owned()),
            Just("MemAvailable:".to_owned()),
            Just(":".to_owned()),
            Just("max".to_owned()),
            Just("\n".to_owned()),
            ".{0,3}",
        ];
        proptest::collection::vec(token, 0..80).prop_map(|t| t.join(" "))
    }

    proptest! {
        #[test]
        fn parsers_never_panic_and_stay_in_range(a in kernel_like(), b in kernel_like(), ms in 0u64..10_000) {
            let elapsed = Duration::from_millis(ms);
            if let (Ok(x), Ok(y)) = (cpu::parse(&a), cpu::parse(&b)) {
                prop_assert!((0.0..=1.0).contains(&cpu::utilization(x, y)));
            }
            if let Ok(u) = memory::utilization(&a) {
                prop_assert!((0.0..=1.0).contains(&u));
            }
            if let (Ok(x), Ok(y)) = (disk::parse(&a), disk::parse(&b)) {
                prop_assert!((0.0..=1.0).contains(&disk::utilization(&x, &y, elapsed)));
            }
            if let (Ok(x), Ok(y)) = (network::parse(&a), network::parse(&b)) {
                let u = network::utilization(&x, &y, elapsed, 1_000_000);
                prop_assert!((0.0..=1.0).contains(&u));
            }
            let _ = network::parse_link_speed(&a);
            let _ = network::parse_speed(&a);
            let _ = cgroup::parse_max(&a);
            let _ = cgroup::parse_current(&a);
        }
    }
}
