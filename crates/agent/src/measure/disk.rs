//! Disk busy fraction from `/proc/diskstats` (the kernel's Documentation/admin-guide/iostats):
//! column 13 of each line (`major minor name` are 1–3) is the milliseconds the device had I/O
//! in flight, `io_ticks`. Its increase over an interval, divided by the interval, is the share
//! of time the device was busy — iostat's `%util`.
//!
//! Only whole disks count, and the figure is the busiest disk's (a saturated disk is a
//! bottleneck however idle the others are; an average would hide it). Partitions are skipped
//! since they repeat their disk's time, and so are `loop`, `ram` and `zram` devices, which are
//! memory or files, not disks. A partition is recognised by its name alone, so that the parser
//! needs nothing but the file, by the kernel's naming rule: a device whose name is another
//! listed device's name followed by a number (`sda1`, `vda2`), or by `p` and a number when
//! that name ends in a digit (`nvme0n1p1`, `mmcblk0p2`; but `md12` is not part of `md1`).

use std::time::Duration;

use super::{Counter, ParseError, increases, millis, share};

/// The `io_ticks` of every whole disk in one reading.
pub fn parse(diskstats: &str) -> Result<Vec<Counter>, ParseError> {
    let mut devices = Vec::new();
    for (n, line) in diskstats.lines().enumerate() {
        let columns: Vec<&str> = line.split_whitespace().collect();
        if columns.is_empty() {
            continue;
        }
        let (Some(name), Some(ticks)) = (columns.get(2), columns.get(12)) else {
            return Err(ParseError::new(format!(
                "line {}: {} columns, fewer than the 13 up to io_ticks",
                n + 1,
                columns.len()
            )));
        };
        let value = ticks.parse().map_err(|_| {
            ParseError::new(format!(
                "line {}: io_ticks {ticks:?} is not a number",
                n + 1
            ))
        })?;
        devices.push(Counter {
            name: (*name).to_owned(),
            value,
        });
    }
    let names: Vec<String> = devices.iter().map(|d| d.name.clone()).collect();
    devices.retain(|d| !is_virtual(&d.name) && !is_partition(&d.name, &names));
    Ok(devices)
}

fn is_virtual(name: &str) -> bool {
    ["loop", "ram", "zram"].iter().any(|p| {
        name.strip_prefix(p)
            .is_some_and(|rest| rest.bytes().all(|b| b.is_ascii_digit()))
    })
}

fn is_partition(name: &str, devices: &[String]) -> bool {
    devices.iter().any(|disk| {
        let Some(rest) = name.strip_prefix(disk.as_str()) else {
            return false;
        };
        // The kernel's own naming rule (block/partitions: disk_name): the number follows the
        // disk's name directly, or after a `p` when that name ends in a digit.
        let number = if disk.ends_with(|c: char| c.is_ascii_digit()) {
            match rest.strip_prefix('p') {
                Some(number) => number,
                None => return false,
            }
        } else {
            rest
        };
        !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit())
    })
}

/// The busiest disk's share of `elapsed` spent with I/O in flight.
pub fn utilization(before: &[Counter], after: &[Counter], elapsed: Duration) -> f64 {
    let elapsed = millis(elapsed);
    increases(before, after)
        .map(|(_, busy_ms)| share(busy_ms as f64, elapsed))
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Columns: major minor name, then 17 statistics; io_ticks (column 13) is set per device.
    fn line(name: &str, io_ticks: u64) -> String {
        format!("   8       0 {name} 100 0 800 50 20 0 160 30 0 {io_ticks} 80 0 0 0 0 0 0\n")
    }

    fn names(counters: &[Counter]) -> Vec<(&str, u64)> {
        counters
            .iter()
            .map(|c| (c.name.as_str(), c.value))
            .collect()
    }

    #[test]
    fn whole_disks_only() {
        let text = [
            line("loop0", 1),
            line("loop12", 1),
            line("ram0", 1),
            line("zram0", 1),
            line("sda", 500),
            line("sda1", 400),
            line("sda2", 100),
            line("nvme0n1", 70),
            line("nvme0n1p1", 60),
            line("mmcblk0", 9),
            line("mmcblk0p1", 9),
            line("dm-0", 30),
            line("md1", 4),
            line("md12", 5),
            line("ramdisk", 3),
        ]
        .concat();
        assert_eq!(
            names(&parse(&text).unwrap()),
            [
                ("sda", 500),
                ("nvme0n1", 70),
                ("mmcblk0", 9),
                ("dm-0", 30),
                ("md1", 4),
                ("md12", 5),
                ("ramdisk", 3),
            ]
        );
    }

    #[test]
    fn old_kernels_with_14_columns_still_parse() {
        let text = "   8 0 sda 1 2 3 4 5 6 7 8 9 1234 11\n";
        assert_eq!(names(&parse(text).unwrap()), [("sda", 1234)]);
    }

    #[test]
    fn garbage_and_short_lines_are_errors() {
        assert!(parse("8 0 sda 1 2 3\n").is_err());
        assert!(parse(&line("sda", 0).replace(" 0 80 ", " x 80 ")).is_err());
        assert!(parse("garbage\n").is_err());
        assert_eq!(parse("").unwrap(), []);
        assert_eq!(parse("\n\n").unwrap(), []);
    }

    #[test]
    fn busiest_disk_over_the_interval() {
        let before = parse(&[line("sda", 1000), line("sdb", 5000)].concat()).unwrap();
        let after = parse(&[line("sda", 1250), line("sdb", 5100)].concat()).unwrap();
        let u = utilization(&before, &after, Duration::from_secs(1));
        assert_eq!(u, 0.25);
    }

    #[test]
    fn counters_that_go_backwards_or_appear_count_nothing() {
        let before = parse(&[line("sda", 1000)].concat()).unwrap();
        let after = parse(&[line("sda", 10), line("sdb", 900)].concat()).unwrap();
        assert_eq!(utilization(&before, &after, Duration::from_secs(1)), 0.0);
    }

    #[test]
    fn clamped_and_safe_without_elapsed_time() {
        let before = parse(&line("sda", 0)).unwrap();
        let after = parse(&line("sda", 5000)).unwrap();
        assert_eq!(utilization(&before, &after, Duration::from_secs(1)), 1.0);
        assert_eq!(utilization(&before, &after, Duration::ZERO), 0.0);
    }
}
