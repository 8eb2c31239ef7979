//! CPU busy fraction from `/proc/stat` (proc(5)): the first line, `cpu`, sums every CPU's
//! time in USER_HZ ticks as `user nice system idle iowait irq softirq steal guest guest_nice`.
//!
//! Busy is `total − idle − iowait`, where total is the sum of the first eight columns. `guest`
//! and `guest_nice` are left out of the total: the kernel already counts them inside `user`
//! and `nice` (since Linux 2.6.24), so adding them would count guest time twice. `iowait` is
//! idle time (a CPU waiting on a disk can run other work), as top and node_exporter's users
//! read it. The utilization over an interval is `Δbusy / Δtotal`, as top computes it; it
//! needs no clock, since the ticks of all CPUs are their own time base.

use super::{ParseError, share};

/// The aggregate CPU times of one reading of `/proc/stat`, in ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    /// Ticks spent neither idle nor waiting on I/O.
    pub busy: u64,
    /// All ticks (user through steal).
    pub total: u64,
}

/// Reads the `cpu` line of `/proc/stat`. Kernels before 2.6 list only four columns; the
/// missing ones count as 0. Fewer than four (no idle column) is an error.
pub fn parse(stat: &str) -> Result<CpuTimes, ParseError> {
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))
        .ok_or_else(|| ParseError::new("no \"cpu\" line"))?;
    let mut ticks = [0u64; 8];
    let mut columns = 0;
    for (slot, field) in ticks.iter_mut().zip(line.split_whitespace().skip(1)) {
        *slot = field
            .parse()
            .map_err(|_| ParseError::new(format!("\"cpu\" line: {field:?} is not a count")))?;
        columns += 1;
    }
    if columns < 4 {
        return Err(ParseError::new(format!(
            "\"cpu\" line has {columns} columns, fewer than the 4 up to idle"
        )));
    }
    let total = ticks.iter().try_fold(0u64, |sum, &t| sum.checked_add(t));
    let total = total.ok_or_else(|| ParseError::new("\"cpu\" line: the ticks overflow"))?;
    let (idle, iowait) = (ticks[3], ticks[4]);
    Ok(CpuTimes {
        busy: total - idle - iowait,
        total,
    })
}

/// The busy fraction between two readings; 0 if either counter went backwards or no time
/// passed.
pub fn utilization(before: CpuTimes, after: CpuTimes) -> f64 {
    match (
        after.busy.checked_sub(before.busy),
        after.total.checked_sub(before.total),
    ) {
        (Some(busy), Some(total)) => share(busy as f64, total as f64),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "\
cpu  100 20 30 800 50 0 10 0 7 3
cpu0 50 10 15 400 25 0 5 0 0 0
cpu1 50 10 15 400 25 0 5 0 0 0
intr 12345 0 0
ctxt 999
";

    #[test]
    fn reads_the_aggregate_line_without_guest_time() {
        // total = 100+20+30+800+50+0+10+0 = 1010; busy = 1010 - 800 - 50 = 160.
        assert_eq!(
            parse(STAT),
            Ok(CpuTimes {
                busy: 160,
                total: 1010
            })
        );
    }

    #[test]
    fn old_kernels_with_four_columns() {
        assert_eq!(parse("cpu 1 2 3 4\n"), Ok(CpuTimes { busy: 6, total: 10 }));
    }

    #[test]
    fn garbage_and_missing_fields_are_errors() {
        assert!(parse("").is_err());
        assert!(
            parse("cpu0 1 2 3 4\n").is_err(),
            "per-CPU lines are not the aggregate"
        );
        assert!(parse("cpu 1 2 3\n").is_err());
        assert!(parse("cpu 1 2 x 4 5\n").is_err());
        assert!(parse("cpu -1 2 3 4\n").is_err());
        assert!(parse("\u{0}\u{1}binary").is_err());
        let max = u64::MAX;
        assert!(parse(&format!("cpu {max} {max} 0 0\n")).is_err());
    }

    #[test]
    fn utilization_is_the_busy_share_of_the_ticks_between_readings() {
        let a = CpuTimes {
            busy: 100,
            total: 1000,
        };
        let b = CpuTimes {
            busy: 150,
            total: 1200,
        };
        assert_eq!(utilization(a, b), 0.25);
        assert_eq!(utilization(a, a), 0.0, "no ticks passed");
    }

    #[test]
    fn counters_that_go_backwards_give_zero() {
        let a = CpuTimes {
            busy: 500,
            total: 1000,
        };
        let b = CpuTimes {
            busy: 100,
            total: 1200,
        };
        assert_eq!(utilization(a, b), 0.0);
        assert_eq!(utilization(b, a), 0.0);
    }

    #[test]
    fn utilization_never_leaves_the_unit_interval() {
        let a = CpuTimes { busy: 0, total: 0 };
        let b = CpuTimes {
            busy: 300,
            total: 200,
        };
        assert_eq!(utilization(a, b), 1.0);
    }
}
