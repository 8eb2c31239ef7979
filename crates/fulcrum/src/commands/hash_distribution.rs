//! `fulcrum lab hash-distribution`: seed 000's hash-spread experiment (its Figures 20–21) run
//! and printed — clients drawn uniformly over IPv4, then from a few /24 prefixes. The
//! experiment is the lab's [`lab::hash_spread`].

use lab::hash_spread::{Spec, contenders, report, run as spread};

use crate::cli::lab::HashDistributionArgs;

/// Prints one table per way of drawing the clients.
pub fn run(args: &HashDistributionArgs) {
    let contenders = contenders();
    let mut drawn = vec![0];
    if args.prefixes > 0 {
        drawn.push(args.prefixes as usize);
    }
    for (i, prefixes) in drawn.into_iter().enumerate() {
        let spec = Spec {
            clients: args.clients as usize,
            runs: args.runs as usize,
            servers: args.servers as usize,
            prefixes,
            seed: args.seed,
        };
        if i > 0 {
            println!();
        }
        print!("{}", report(&spec, &spread(&spec, &contenders)));
    }
}
