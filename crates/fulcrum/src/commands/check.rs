//! `fulcrum check`: a configuration file read and checked exactly as `fulcrum run` and a reload
//! read it, so that an operator (or a deployment's pipeline) learns of every problem before
//! the file is used.

use std::path::Path;
use std::process::ExitCode;

use fulcrum::config;

/// 0 and a line when the file is good (its warnings on stderr); 1 and every problem
/// otherwise.
pub fn run(path: &Path) -> anyhow::Result<ExitCode> {
    match config::load(path) {
        Ok(cfg) => {
            for w in &cfg.warnings {
                eprintln!("warning: {w}");
            }
            println!("{}: configuration is valid", path.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
}
