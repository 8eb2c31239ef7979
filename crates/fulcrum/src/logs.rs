//! Where every command's logs go: stderr, through a writer thread (tracing-appender), so a
//! slow log sink (a full pipe to journald or docker) never blocks a worker in the middle of
//! its connections.
//!
//! What is written: the level a command chose (`fulcrum run --log-level`, else the file's
//! `log_level`, else `info`) for every target, with `RUST_LOG`'s directives added on top — a directive naming a target
//! (`proxy=debug`, `control=warn`) applies to it, and a bare level in `RUST_LOG`
//! (`RUST_LOG=warn`) is the level when `--log-level` is not given (the flag wins over it).
//! How: text lines, or one JSON object per line (`--log-format json`, or `log_format =
//! "json"`) for a log shipper.

use tracing_subscriber::EnvFilter;

/// The level of `--log-level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
    Off,
}

impl Level {
    /// The level `log_level` names (one of `config::log::LEVELS`).
    pub fn named(name: &str) -> Option<Level> {
        <Level as clap::ValueEnum>::from_str(name, false).ok()
    }

    fn directive(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
            Level::Trace => "trace",
            Level::Off => "off",
        }
    }
}

/// The form of each line (`--log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A timestamp, the level, the target, the message and its fields: for a person.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `fields` with `message`):
    /// for a log shipper (Loki, Elasticsearch, journald's JSON readers).
    Json,
}

impl Format {
    /// The format `log_format` names (one of `config::log::FORMATS`).
    pub fn named(name: &str) -> Option<Format> {
        <Format as clap::ValueEnum>::from_str(name, false).ok()
    }
}

/// Starts the log writer at `default` (a filter directive) or `RUST_LOG`, as text lines; see
/// [`init_with`].
pub fn init(default: &str) -> tracing_appender::non_blocking::WorkerGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    start(filter, Format::Text)
}

/// Starts the log writer at `level` (`None`: `info`, or `RUST_LOG`'s own level) with
/// `RUST_LOG`'s directives on top, in `format`. Lines beyond its buffer are dropped rather
/// than stall the data plane. Keep the guard until exit: it flushes.
pub fn init_with(
    level: Option<Level>,
    format: Format,
) -> tracing_appender::non_blocking::WorkerGuard {
    let env = std::env::var("RUST_LOG").unwrap_or_default();
    start(EnvFilter::new(directives(level, &env)), format)
}

/// The filter's directives: the level, then those of `RUST_LOG` (`env`) — without its bare
/// level when `level` is given, which wins over it.
fn directives(level: Option<Level>, env: &str) -> String {
    // (An empty directive parses as a level too: ERROR.)
    let bare = |d: &str| {
        !d.is_empty()
            && !d.contains('=')
            && !d.contains('[')
            && d.parse::<tracing_subscriber::filter::LevelFilter>().is_ok()
    };
    let env_level = env.split(',').map(str::trim).any(bare);
    let mut all: Vec<String> = match level {
        Some(l) => vec![l.directive().to_owned()],
        None if env_level => Vec::new(),
        None => vec!["info".to_owned()],
    };
    all.extend(
        env.split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .filter(|d| level.is_none() || !bare(d))
            .map(str::to_owned),
    );
    all.join(",")
}

fn start(filter: EnvFilter, format: Format) -> tracing_appender::non_blocking::WorkerGuard {
    // The channel is allocated whole up front: 8192 lines (256 KiB) rather than the crate's
    // 128,000 (4 MiB) is ample between two writes of the thread.
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(8192)
        .finish(std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        Format::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        Format::Json => builder.json().with_ansi(false).init(),
    }
    guard
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_over_rust_logs_level_and_keeps_its_targets() {
        assert_eq!(directives(None, ""), "info");
        assert_eq!(directives(None, "proxy=debug,"), "info,proxy=debug");
        assert_eq!(directives(None, "warn"), "warn");
        assert_eq!(directives(None, "proxy=debug"), "info,proxy=debug");
        assert_eq!(
            directives(Some(Level::Debug), "info,fulcrum::access=off"),
            "debug,fulcrum::access=off"
        );
        assert_eq!(directives(Some(Level::Warn), ""), "warn");
        for name in fulcrum::config::log::LEVELS {
            assert!(Level::named(name).is_some(), "{name}");
        }
        for name in fulcrum::config::log::FORMATS {
            assert!(Format::named(name).is_some(), "{name}");
        }
    }
}
