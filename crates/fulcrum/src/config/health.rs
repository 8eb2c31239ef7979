//! `[upstream.health_check]`: active health checks of an upstream's backends (HAProxy's
//! `check` with `inter`, `rise`, `fall`; nginx Plus's `health_check`).

use proxy::{CheckKind, HealthCheckSettings};
use toml::Spanned;

use super::duration::Zero;
use super::report::Report;
use super::table::{Section, Table};

pub(super) const SECTION: Section = Section {
    title: "[upstream.health_check]",
    keys: &[
        "type", "path", "expect", "interval", "timeout", "rise", "fall",
    ],
    not_yet: &[],
};

/// The most checks in a row `rise` or `fall` may ask for.
const MAX_COUNT: i64 = 100;

/// Reads the section; `None` when something in it is wrong (reported).
pub(super) fn read(r: &mut Report<'_>, t: &Table<'_>) -> Option<HealthCheckSettings> {
    let kind = t.text(r, "type", "\"http\" or \"tcp\"", "http");
    let path = t.text(r, "path", "a path", "/health");
    let expect = t.text(r, "expect", "a status or a range", "200-399");
    let interval = t.duration(
        r,
        "interval",
        Zero::Refused("backends would be checked without pause"),
    );
    let timeout = t.duration(
        r,
        "timeout",
        Zero::Refused("every check would time out before it starts"),
    );
    let rise = t.integer(r, "rise", 1..=MAX_COUNT, "");
    let fall = t.integer(r, "fall", 1..=MAX_COUNT, "");
    let interval = interval.unwrap_or(HealthCheckSettings::DEFAULT_INTERVAL);
    // Unset, the timeout is 1 s or the interval if that is shorter.
    let timeout = timeout.unwrap_or(HealthCheckSettings::DEFAULT_TIMEOUT.min(interval));
    let mut ok = true;
    if timeout > interval {
        t.error(
            r,
            if t.span_of("timeout").is_some() { "timeout" } else { "interval" },
            format!("timeout ({timeout:?}) is longer than interval ({interval:?}): a check must end before the next begins"),
        );
        ok = false;
    }
    let kind = match kind.as_ref().map(|k| *k.get_ref()) {
        None | Some("http") => http_check(r, t, path, expect),
        Some("tcp") => tcp_check(r, t),
        Some(other) => {
            t.error(
                r,
                "type",
                format!("unknown check type \"{other}\": use \"http\" or \"tcp\""),
            );
            return None;
        }
    };
    let kind = kind?;
    ok.then(|| HealthCheckSettings {
        kind,
        interval,
        timeout,
        rise: rise.unwrap_or(HealthCheckSettings::DEFAULT_RISE),
        fall: fall.unwrap_or(HealthCheckSettings::DEFAULT_FALL),
    })
}

/// `type = "http"`: a GET of `path` (default `/`) answered with a status in `expect` (default
/// 200-399). `None` when either is wrong (both are checked, and reported).
fn http_check(
    r: &mut Report<'_>,
    t: &Table<'_>,
    path: Option<Spanned<&str>>,
    expect: Option<Spanned<&str>>,
) -> Option<CheckKind> {
    let mut ok = true;
    let path = path.map_or("/", |p| *p.get_ref()).to_owned();
    if !path.starts_with('/') || path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        t.error(
            r,
            "path",
            format!("\"{path}\" is not a request path: write one such as \"/health\""),
        );
        ok = false;
    }
    let expect = match expect {
        None => (200, 399),
        Some(e) => match status_range(e.get_ref()) {
            Some(range) => range,
            None => {
                t.error(r, "expect", format!("\"{}\" is not a status or a range of statuses: write one such as \"200\" or \"200-399\"", e.get_ref()));
                ok = false;
                (200, 399)
            }
        },
    };
    ok.then_some(CheckKind::Http { path, expect })
}

/// `type = "tcp"`: a connect, nothing more; `None` when `path` or `expect` is given (each
/// reported).
fn tcp_check(r: &mut Report<'_>, t: &Table<'_>) -> Option<CheckKind> {
    let mut ok = true;
    for key in ["path", "expect"] {
        if t.span_of(key).is_some() {
            t.error(
                r,
                key,
                format!("`{key}` is for type = \"http\"; a tcp check only connects"),
            );
            ok = false;
        }
    }
    ok.then_some(CheckKind::Tcp)
}

/// `"200"` or `"200-399"`: statuses from 100 to 599, the first not above the second.
fn status_range(text: &str) -> Option<(u16, u16)> {
    let status = |s: &str| {
        s.trim()
            .parse::<u16>()
            .ok()
            .filter(|s| (100..=599).contains(s))
    };
    let (low, high) = match text.split_once('-') {
        Some((a, b)) => (status(a)?, status(b)?),
        None => {
            let s = status(text)?;
            (s, s)
        }
    };
    (low <= high).then_some((low, high))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;
    use std::time::Duration;

    #[test]
    fn agent_checks_and_health_checks_exclude_each_other() {
        let text = with_algorithm(
            "weighted_round_robin",
            "[upstream.health_check]\npath = \"/up\"",
        )
        .replacen(
            "weight = 3",
            "weight = 3\n  agent_check = \"127.0.0.1:9102\"",
            1,
        );
        let e = refused(&text);
        assert!(
            e.contains("whose up and down would overrule the health checks"),
            "{e}"
        );
    }

    #[test]
    fn statuses_and_ranges() {
        assert_eq!(status_range("200"), Some((200, 200)));
        assert_eq!(status_range("200-399"), Some((200, 399)));
        for bad in ["", "abc", "399-200", "99", "600", "200-"] {
            assert_eq!(status_range(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_health_check_reaches_the_settings_and_bad_ones_are_refused() {
        let text = GOOD.replacen(
            "[[upstream.backend]]",
            "[upstream.health_check]\npath = \"/up\"\nexpect = \"200\"\ninterval = \"500ms\"\ntimeout = \"200ms\"\nrise = 1\nfall = 2\n\n[[upstream.backend]]",
            1,
        );
        let h = ok(&text).proxy.upstreams[0].health_check.clone().unwrap();
        assert_eq!(
            h,
            HealthCheckSettings {
                kind: CheckKind::Http {
                    path: "/up".into(),
                    expect: (200, 200)
                },
                interval: Duration::from_millis(500),
                timeout: Duration::from_millis(200),
                rise: 1,
                fall: 2,
            }
        );
        for (lines, message) in [
            ("type = \"udp\"", "unknown check type \"udp\""),
            ("expect = \"ok\"", "is not a status or a range"),
            ("timeout = \"5s\"", "is longer than interval"),
            (
                "type = \"tcp\"\npath = \"/x\"",
                "`path` is for type = \"http\"",
            ),
            ("rise = 0", "must be between 1 and 100"),
            ("colour = 1", "unknown key `colour`"),
        ] {
            let text = GOOD.replacen(
                "[[upstream.backend]]",
                &format!("[upstream.health_check]\n{lines}\n\n[[upstream.backend]]"),
                1,
            );
            let e = refused(&text);
            assert!(e.contains(message), "{lines}: {e}");
        }
    }
}
