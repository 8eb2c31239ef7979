//! Memory utilization from `/proc/meminfo` (proc(5)): `1 − MemAvailable / MemTotal`.
//!
//! `MemAvailable` (Linux 3.14) is the kernel's own estimate of what can be allocated without
//! swapping, page cache that can be dropped included; `MemFree` alone would call a machine
//! with a warm page cache full. A kernel without `MemAvailable` is reported as an error rather
//! than guessed at.

use super::{ParseError, share};

/// `1 − MemAvailable / MemTotal`, clamped into [0, 1].
pub fn utilization(meminfo: &str) -> Result<f64, ParseError> {
    let total = field(meminfo, "MemTotal")?;
    let available = field(meminfo, "MemAvailable")?;
    if total == 0 {
        return Err(ParseError::new("MemTotal is 0"));
    }
    Ok(1.0 - share(available as f64, total as f64))
}

/// The value of `name:` in kB (the unit is the same for every line, so it is not checked).
fn field(meminfo: &str, name: &str) -> Result<u64, ParseError> {
    let line = meminfo
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .ok_or_else(|| ParseError::new(format!("no {name} line")))?;
    let value = line.split_whitespace().next().unwrap_or("");
    value
        .parse()
        .map_err(|_| ParseError::new(format!("{name}: {value:?} is not a number of kB")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "\
MemTotal:        1000000 kB
MemFree:          100000 kB
MemAvailable:     370000 kB
Buffers:           10000 kB
";

    #[test]
    fn used_is_what_is_not_available() {
        let u = utilization(MEMINFO).unwrap();
        assert!((u - 0.63).abs() < 1e-12, "{u}");
    }

    #[test]
    fn missing_fields_and_garbage_are_errors() {
        assert!(utilization("").is_err());
        assert!(utilization("MemTotal: 1000 kB\nMemFree: 10 kB\n").is_err());
        assert!(utilization("MemTotal: lots kB\nMemAvailable: 10 kB\n").is_err());
        assert!(utilization("MemTotal: 0 kB\nMemAvailable: 0 kB\n").is_err());
        assert!(utilization("MemTotal:\nMemAvailable: 1 kB\n").is_err());
        // A longer name that starts with the one asked for is not it.
        assert!(utilization("MemTotalish: 5 kB\nMemAvailable: 1 kB\n").is_err());
    }

    #[test]
    fn more_available_than_total_clamps_to_zero() {
        let u = utilization("MemTotal: 100 kB\nMemAvailable: 150 kB\n").unwrap();
        assert_eq!(u, 0.0);
    }
}
