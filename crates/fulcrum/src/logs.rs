//! Where every command's logs go: stderr, through a writer thread (tracing-appender), so a
//! slow log sink (a full pipe to journald or docker) never blocks a worker in the middle of
//! its connections. The filter is `RUST_LOG`, or the level the command chose.

use tracing_subscriber::EnvFilter;

/// Starts the log writer; lines beyond its buffer are dropped rather than stall the data
/// plane. Keep the guard until exit: it flushes.
pub fn init(default: &str) -> tracing_appender::non_blocking::WorkerGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // The channel is allocated whole up front: 8192 lines (256 KiB) rather than the crate's
    // 128,000 (4 MiB) is ample between two writes of the thread.
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(8192)
        .finish(std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(writer)
        .init();
    guard
}
