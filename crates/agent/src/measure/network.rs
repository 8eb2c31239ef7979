//! Network utilization: bytes received and sent per second, from `/proc/net/dev` (proc(5)),
//! over the link speed, from `/sys/class/net/<if>/speed` (Mbit/s) or `--net-speed`.
//!
//! Loopback is never counted: its traffic does not cross a link. Received and sent bytes are
//! added and set against one link speed, as seed 001 measures network load: a full-duplex
//! link could carry twice that, so a figure of 1 means the link is busy in both directions or
//! saturated in one, whichever the reader prefers to call full.

use std::time::Duration;

use super::{Counter, ParseError, increases, share};

/// The interface that is never counted.
pub const LOOPBACK: &str = "lo";

/// Received plus sent bytes of every interface in one reading, loopback included (the caller
/// chooses which to count).
pub fn parse(net_dev: &str) -> Result<Vec<Counter>, ParseError> {
    let mut interfaces = Vec::new();
    // Two header lines, then `name: rx_bytes rx_packets ... (8 receive columns) tx_bytes ...`.
    // Old kernels leave no space between the colon and a large first number.
    for (n, line) in net_dev.lines().enumerate().skip(2) {
        if line.trim().is_empty() {
            continue;
        }
        let Some((name, counters)) = line.split_once(':') else {
            return Err(ParseError::new(format!("line {}: no \"name:\"", n + 1)));
        };
        let columns: Vec<&str> = counters.split_whitespace().collect();
        let (Some(rx), Some(tx)) = (columns.first(), columns.get(8)) else {
            return Err(ParseError::new(format!(
                "line {}: {} columns, fewer than the 9 up to tx_bytes",
                n + 1,
                columns.len()
            )));
        };
        let number = |field: &str| {
            field.parse::<u64>().map_err(|_| {
                ParseError::new(format!("line {}: {field:?} is not a byte count", n + 1))
            })
        };
        interfaces.push(Counter {
            name: name.trim().to_owned(),
            value: number(rx)?.wrapping_add(number(tx)?),
        });
    }
    Ok(interfaces)
}

/// The link speed in `/sys/class/net/<if>/speed`, in Mbit/s; `None` when the driver does not
/// know it (virtual interfaces read `-1`, or the read fails with EINVAL).
pub fn parse_link_speed(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok().filter(|&mbits| mbits > 0)
}

/// A `--net-speed` value in bits per second: a number and a unit, `bit`, `kbit`, `Mbit`,
/// `Gbit` or `Tbit` (decimal multiples, as link speeds are given), optionally with `/s`:
/// `1Gbit`, `100Mbit`, `2.5Gbit/s`.
pub fn parse_speed(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let text = text.strip_suffix("/s").unwrap_or(text);
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let multiplier = match unit.trim().to_ascii_lowercase().as_str() {
        "bit" => 1e0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "tbit" => 1e12,
        _ => {
            return Err(format!(
                "{text:?}: expected a number and a unit of bit, kbit, Mbit, Gbit or Tbit, as in 1Gbit"
            ));
        }
    };
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?}: {number:?} is not a number"))?;
    let bits = number * multiplier;
    if !(1.0..=u64::MAX as f64).contains(&bits) {
        return Err(format!("{text:?}: a link speed is at least 1 bit/s"));
    }
    Ok(bits.round() as u64)
}

/// Bits per second over the interval as a share of `speed_bits` (bits per second).
pub fn utilization(
    before: &[Counter],
    after: &[Counter],
    elapsed: Duration,
    speed_bits: u64,
) -> f64 {
    let bytes: u64 = increases(before, after).map(|(_, d)| d).sum();
    let bits_per_second = bytes as f64 * 8.0 / elapsed.as_secs_f64();
    share(bits_per_second, speed_bits as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET_DEV: &str = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 5000000     100    0    0    0     0          0         0  5000000     100    0    0    0     0       0          0
  eth0:1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0
docker0:   300       3    0    0    0     0          0         0      400       4    0    0    0     0       0          0
";

    fn pairs(counters: &[Counter]) -> Vec<(&str, u64)> {
        counters
            .iter()
            .map(|c| (c.name.as_str(), c.value))
            .collect()
    }

    #[test]
    fn receive_plus_transmit_per_interface() {
        assert_eq!(
            pairs(&parse(NET_DEV).unwrap()),
            [("lo", 10_000_000), ("eth0", 3000), ("docker0", 700)]
        );
    }

    #[test]
    fn garbage_and_short_lines_are_errors() {
        assert_eq!(parse("").unwrap(), []);
        assert_eq!(parse("header\nheader\n").unwrap(), []);
        assert!(parse("h\nh\neth0 1 2 3\n").is_err(), "no colon");
        assert!(parse("h\nh\neth0: 1 2 3\n").is_err(), "short");
        assert!(parse("h\nh\neth0: 1 2 3 4 5 6 7 8 x 10\n").is_err());
        assert!(parse("h\nh\neth0: -1 2 3 4 5 6 7 8 9 10\n").is_err());
    }

    #[test]
    fn link_speeds() {
        assert_eq!(parse_link_speed("1000\n"), Some(1000));
        assert_eq!(parse_link_speed("-1\n"), None);
        assert_eq!(parse_link_speed("0\n"), None);
        assert_eq!(parse_link_speed(""), None);
        assert_eq!(parse_link_speed("fast"), None);
    }

    #[test]
    fn speed_option() {
        assert_eq!(parse_speed("1Gbit"), Ok(1_000_000_000));
        assert_eq!(parse_speed("100Mbit"), Ok(100_000_000));
        assert_eq!(parse_speed("2.5Gbit/s"), Ok(2_500_000_000));
        assert_eq!(parse_speed("10 kbit"), Ok(10_000));
        assert_eq!(parse_speed("64bit"), Ok(64));
        assert!(parse_speed("1GB").is_err());
        assert!(parse_speed("Gbit").is_err());
        assert!(parse_speed("0Gbit").is_err());
        assert!(parse_speed("1e999Gbit").is_err());
        assert!(parse_speed("").is_err());
    }

    #[test]
    fn bytes_over_the_link_speed() {
        let before = parse("h\nh\neth0: 0 0 0 0 0 0 0 0 0 0\n").unwrap();
        let after = parse("h\nh\neth0: 6000000 0 0 0 0 0 0 0 6500000 0\n").unwrap();
        // 12.5 MB in one second is 100 Mbit/s: a tenth of a gigabit link.
        let u = utilization(&before, &after, Duration::from_secs(1), 1_000_000_000);
        assert!((u - 0.1).abs() < 1e-12, "{u}");
        assert_eq!(
            utilization(&before, &after, Duration::from_secs(1), 1_000),
            1.0
        );
        assert_eq!(
            utilization(&before, &after, Duration::ZERO, 1_000),
            0.0,
            "no time passed"
        );
    }

    #[test]
    fn counters_that_go_backwards_count_nothing() {
        let before = parse("h\nh\neth0: 900 0 0 0 0 0 0 0 900 0\n").unwrap();
        let after = parse("h\nh\neth0: 10 0 0 0 0 0 0 0 10 0\n").unwrap();
        assert_eq!(
            utilization(&before, &after, Duration::from_secs(1), 1000),
            0.0
        );
    }
}
