//! `log_level` and `log_format` (top level): fulcrum's own log, as `fulcrum run --log-level`
//! and `--log-format` set it (a flag wins over its key). Read once, at the start: a change
//! takes a restart.

use super::report::Report;
use super::table::Table;

/// The levels `log_level` takes, lowest first.
pub const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// The forms `log_format` takes.
pub const FORMATS: [&str; 2] = ["text", "json"];

/// What the file says of fulcrum's own log (`None`: the key is not there).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Log {
    /// One of [`LEVELS`].
    pub level: Option<&'static str>,
    /// One of [`FORMATS`].
    pub format: Option<&'static str>,
}

/// Reads `log_level` and `log_format` from the top level.
pub(super) fn read(r: &mut Report<'_>, top: &Table<'_>) -> Log {
    Log {
        level: one_of(r, top, "log_level", "a level", &LEVELS),
        format: one_of(r, top, "log_format", "a format", &FORMATS),
    }
}

fn one_of(
    r: &mut Report<'_>,
    top: &Table<'_>,
    key: &str,
    what: &str,
    allowed: &[&'static str],
) -> Option<&'static str> {
    let value = top.text(r, key, what, allowed[0])?;
    let found = allowed.iter().find(|a| **a == *value.get_ref());
    if found.is_none() {
        r.error(
            value.span(),
            key,
            format!(
                "\"{}\" is not {what}: write one of {}",
                value.get_ref(),
                allowed
                    .iter()
                    .map(|a| format!("\"{a}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    found.copied()
}

#[cfg(test)]
mod tests {
    use crate::config::testing::{GOOD, ok, refused};

    #[test]
    fn log_level_and_format_take_their_words_and_nothing_else() {
        let c = ok(&GOOD.replace(
            "workers = 2",
            "workers = 2\nlog_level = \"debug\"\nlog_format = \"json\"",
        ));
        assert_eq!(c.log.level, Some("debug"));
        assert_eq!(c.log.format, Some("json"));
        assert_eq!(ok(GOOD).log, super::Log::default());
        let e = refused(&GOOD.replace("workers = 2", "log_level = \"verbose\""));
        assert!(
            e.contains("log_level: \"verbose\" is not a level: write one of \"off\", \"error\""),
            "{e}"
        );
        let e = refused(&GOOD.replace("workers = 2", "log_format = \"yaml\""));
        assert!(e.contains("log_format: \"yaml\" is not a format"), "{e}");
    }
}
