//! Durations as the configuration writes them: `"250ms"`, `"10s"`, `"1m 30s"` (nginx's and
//! systemd's notation, read by `humantime`), at most a year, and what 0 means per key.
//!
//! The bound: a timeout is added to a clock reading, and a deadline past what the clock can
//! hold either panics or silently becomes "never". No key needs more than a year, so a larger
//! value is refused rather than given a meaning. A year is humantime's `"1y"` (365.25 days),
//! so both `"1y"` and `"365d"` pass.

use std::time::Duration;

/// The largest duration any key accepts: humantime's year, 365.25 days.
pub(super) const MAX: Duration = Duration::from_secs(31_557_600);

/// What a key does with 0.
#[derive(Debug, Clone, Copy)]
pub(super) enum Zero {
    /// 0 has a meaning of its own (no grace period, no slow start).
    Allowed,
    /// 0 could never work; the text says why, or what to write instead.
    Refused(&'static str),
}

/// Reads `text` as a duration of at most [`MAX`], or says what is wrong.
pub(super) fn parse(text: &str, zero: Zero) -> Result<Duration, String> {
    let d = match humantime::parse_duration(text) {
        Ok(d) => d,
        Err(humantime::DurationError::NumberOverflow) => return Err(too_long()),
        Err(e) => {
            return Err(format!(
                "invalid duration \"{text}\" ({e}); write a number and a unit, like \"250ms\", \"10s\" or \"1m\""
            ));
        }
    };
    if d > MAX {
        return Err(too_long());
    }
    match zero {
        Zero::Refused(why) if d.is_zero() => Err(format!("must be more than 0: {why}")),
        _ => Ok(d),
    }
}

fn too_long() -> String {
    "at most a year (\"1y\"): no timeout needs longer, and a clock cannot hold every deadline"
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notation_bound_and_zero() {
        let allowed = |t| parse(t, Zero::Allowed);
        assert_eq!(allowed("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(allowed("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(allowed("0s"), Ok(Duration::ZERO));
        assert_eq!(allowed("1y"), Ok(MAX));
        assert_eq!(allowed("365d"), Ok(Duration::from_secs(365 * 86_400)));
        assert!(allowed("366d").unwrap_err().starts_with("at most a year"));
        assert!(
            allowed("100000000000000y")
                .unwrap_err()
                .starts_with("at most a year")
        );
        assert!(
            allowed("fast")
                .unwrap_err()
                .contains("write a number and a unit")
        );
        assert!(
            allowed("2")
                .unwrap_err()
                .contains("write a number and a unit")
        );
        assert_eq!(
            parse("0ms", Zero::Refused("why")),
            Err("must be more than 0: why".to_owned())
        );
        assert_eq!(
            parse("1ms", Zero::Refused("why")),
            Ok(Duration::from_millis(1))
        );
    }
}
