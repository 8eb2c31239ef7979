//! `fulcrum import FILE [--out OUT]`: an nginx configuration translated into fulcrum's
//! (docs/import.md). Exit 0: everything left out is cosmetic; 1: something left out changes
//! behaviour (each listed on stderr); 2: the file cannot be read or parsed.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use fulcrum::import::{parse, translate};

/// Reads `file`, translates it, writes the TOML to `out` (stdout without one) and the
/// directives left out to stderr.
pub fn run(file: &Path, out: Option<&Path>) -> anyhow::Result<ExitCode> {
    let conf = match parse::parse_file(file) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fulcrum import: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let t = translate::translate(&conf);
    match out {
        Some(path) => std::fs::write(path, &t.toml)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => print!("{}", t.toml),
    }
    for n in &t.notes {
        eprintln!("{n}");
    }
    let behaviour = t.notes.iter().filter(|n| !n.cosmetic).count();
    if behaviour > 0 {
        eprintln!(
            "fulcrum import: {behaviour} of {} directives left out change behaviour: review them",
            t.notes.len()
        );
        Ok(ExitCode::FAILURE)
    } else {
        Ok(ExitCode::SUCCESS)
    }
}
