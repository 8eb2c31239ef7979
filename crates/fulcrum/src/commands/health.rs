//! `fulcrum health`: whether a running fulcrum serves, for keepalived's `vrrp_script` — the
//! command line's side (whom to ask, exit statuses); the check itself is the library's
//! [`fulcrum::health`].

use std::process::ExitCode;

use anyhow::Context as _;
use fulcrum::config;

use crate::cli::HealthArgs;

/// 0 and a line when healthy, 1 and the reason otherwise, 2 when it cannot tell whom to ask.
pub fn run(args: &HealthArgs) -> anyhow::Result<ExitCode> {
    let admin = match (args.admin, args.config.as_deref()) {
        (Some(a), _) => a,
        (None, Some(path)) => match config::load(path) {
            Ok(cfg) => match cfg.admin {
                Some(a) => a.listen,
                None => {
                    eprintln!(
                        "fulcrum health: {} has no [admin]: the check asks the admin listener",
                        path.display()
                    );
                    return Ok(ExitCode::from(2));
                }
            },
            Err(e) => {
                eprintln!("{e}");
                return Ok(ExitCode::from(2));
            }
        },
        (None, None) => anyhow::bail!("give --admin ADDR or --config FILE"),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    match rt.block_on(fulcrum::health::check(admin, args.timeout)) {
        Ok(line) => {
            println!("{line}");
            Ok(ExitCode::SUCCESS)
        }
        Err(why) => {
            println!("unhealthy: {why}");
            Ok(ExitCode::FAILURE)
        }
    }
}
