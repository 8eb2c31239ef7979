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
        Ok(mut cfg) => {
            // DNS discovery's names are looked up as `run` would: one that does not resolve
            // now is a warning (run starts without its backends and keeps asking).
            let dns = control::discovery::resolve_at_start(&mut cfg.proxy);
            for w in cfg.warnings.iter().chain(&dns) {
                eprintln!("warning: {w}");
            }
            match cfg.included.as_slice() {
                [] => println!("{}: configuration is valid", path.display()),
                files => {
                    let names: Vec<String> =
                        files.iter().map(|f| f.display().to_string()).collect();
                    println!(
                        "{}: configuration is valid (with {} included file{}: {})",
                        path.display(),
                        files.len(),
                        if files.len() == 1 { "" } else { "s" },
                        names.join(", ")
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
}
