//! `fulcrum evidence DIR... --out FILE`: the evidence table ([`lab::evidence`]) from the
//! results directories, written to FILE.

use std::process::ExitCode;

use anyhow::Context as _;

use crate::cli::EvidenceArgs;

/// Reads every directory (an error names the one that cannot be read and why), writes the
/// table, and says where.
pub fn run(args: &EvidenceArgs) -> anyhow::Result<ExitCode> {
    let sources = args
        .dirs
        .iter()
        .map(|d| lab::evidence::read(d))
        .collect::<Result<Vec<_>, String>>()
        .map_err(anyhow::Error::msg)?;
    let doc = lab::evidence::markdown(&sources, &args.out);
    std::fs::write(&args.out, doc)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    println!(
        "{}: {} results directories",
        args.out.display(),
        sources.len()
    );
    Ok(ExitCode::SUCCESS)
}
