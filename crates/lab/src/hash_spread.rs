//! The hash-spread experiment of seed 000 (Ma & Chi, "Evaluation Test and Improvement of Load
//! Balancing Algorithms of Nginx", §V, Figures 20–21): many client addresses, a few equal
//! servers, and how evenly each address-hashing algorithm spreads the clients.
//!
//! The paper drew 1000 random addresses, sent them through nginx's `ip_hash` and its
//! `new_hash` to three servers, five times, and read from the bar charts that `new_hash` spreads
//! more evenly. Here every algorithm that hashes the client runs the very code the proxy runs
//! (`balance::Pool`), over the same clients, in each run. Clients are drawn uniformly over the
//! IPv4 space, or from a given number of /24 prefixes (what real traffic behind a few NATs or
//! ISPs looks like, and where hashing three octets must collapse).
//!
//! The spread is given two ways per run: the ratio of the busiest server's clients to the
//! idlest's, and the coefficient of variation of the counts. For reference, a perfect random
//! assignment of `c` clients to `s` servers has an expected coefficient of variation of about
//! `sqrt((s − 1) / c)`: an algorithm near it spreads like a good hash; one far above it collides.

use std::fmt::Write as _;
use std::net::Ipv4Addr;

use balance::{Affinity, Algorithm, BackendSpec, Nanos, Octets, Options, Outcome, Pool};
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64Mcg;

/// What to run.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Distinct client addresses per run.
    pub clients: usize,
    pub runs: usize,
    /// Equal-weight servers.
    pub servers: usize,
    /// Draw clients from this many random /24 prefixes; 0 draws them uniformly.
    pub prefixes: usize,
    /// Seed of the client draws: the same seed gives the same clients.
    pub seed: u64,
}

/// One algorithm under test.
#[derive(Debug, Clone)]
pub struct Contender {
    /// As printed: the algorithm and the option that matters.
    pub label: String,
    pub algorithm: Algorithm,
    pub options: Options,
}

/// The algorithms the experiment compares: nginx's `ip_hash`, the seed's `new_hash` on three
/// octets and on the whole address, nginx's `hash $remote_addr consistent`, and Maglev.
pub fn contenders() -> Vec<Contender> {
    let with = |label: &str, algorithm: Algorithm, options: Options| Contender {
        label: label.to_owned(),
        algorithm,
        options,
    };
    vec![
        with("ip_hash", Algorithm::IpHash, Options::default()),
        with("new_hash octets=3", Algorithm::NewHash, Options::default()),
        with(
            "new_hash octets=all",
            Algorithm::NewHash,
            Options {
                octets: Octets::All,
                ..Options::default()
            },
        ),
        with(
            "hash consistent",
            Algorithm::Hash,
            Options {
                consistent: true,
                ..Options::default()
            },
        ),
        with("maglev", Algorithm::Maglev, Options::default()),
    ]
}

/// Clients per server in each run, for one contender.
#[derive(Debug, Clone)]
pub struct Outcomes {
    pub label: String,
    /// `runs × servers` counts.
    pub counts: Vec<Vec<u64>>,
}

/// Busiest over idlest (infinite if a server got no client) and the coefficient of variation
/// (population standard deviation over mean) of a run's counts.
pub fn spread(counts: &[u64]) -> (f64, f64) {
    let max = counts.iter().copied().max().unwrap_or(0) as f64;
    let min = counts.iter().copied().min().unwrap_or(0) as f64;
    let n = counts.len() as f64;
    let mean = counts.iter().sum::<u64>() as f64 / n;
    let var = counts
        .iter()
        .map(|&c| (c as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    let ratio = if min > 0.0 { max / min } else { f64::INFINITY };
    let cv = if mean > 0.0 { var.sqrt() / mean } else { 0.0 };
    (ratio, cv)
}

/// The coefficient of variation a uniformly random assignment is expected to show.
pub fn random_cv(clients: usize, servers: usize) -> f64 {
    ((servers as f64 - 1.0) / clients as f64).sqrt()
}

/// `clients` distinct addresses: uniform over IPv4, or within `prefixes` random /24s.
fn draw_clients(rng: &mut Pcg64Mcg, clients: usize, prefixes: usize) -> Vec<Ipv4Addr> {
    let nets: Vec<u32> = (0..prefixes)
        .map(|_| rng.random::<u32>() & 0xffff_ff00)
        .collect();
    let capacity = if prefixes == 0 {
        u64::from(u32::MAX)
    } else {
        256 * prefixes as u64
    };
    let wanted = clients.min(capacity as usize);
    let mut seen = std::collections::HashSet::with_capacity(wanted);
    let mut out = Vec::with_capacity(wanted);
    while out.len() < wanted {
        let addr = if nets.is_empty() {
            rng.random::<u32>()
        } else {
            nets[rng.random_range(0..nets.len())] | rng.random_range(0..256u32)
        };
        if seen.insert(addr) {
            out.push(Ipv4Addr::from(addr));
        }
    }
    out
}

/// Runs the experiment: the same clients, run after run, through every contender.
pub fn run(spec: &Spec, contenders: &[Contender]) -> Vec<Outcomes> {
    let servers: Vec<BackendSpec> = (0..spec.servers)
        .map(|i| BackendSpec::new(1).named(&format!("10.0.0.{}:80", i + 1)))
        .collect();
    let mut outcomes: Vec<Outcomes> = contenders
        .iter()
        .map(|c| Outcomes {
            label: c.label.clone(),
            counts: Vec::with_capacity(spec.runs),
        })
        .collect();
    let mut rng = Pcg64Mcg::seed_from_u64(spec.seed);
    let mut key = Vec::with_capacity(16);
    for _ in 0..spec.runs {
        let clients = draw_clients(&mut rng, spec.clients, spec.prefixes);
        for (contender, out) in contenders.iter().zip(&mut outcomes) {
            let mut pool = Pool::new(contender.algorithm, &contender.options, &servers, &[], 0);
            let mut counts = vec![0u64; spec.servers];
            for client in &clients {
                key.clear();
                match contender.algorithm.affinity() {
                    Some(Affinity::AddressOctets) => key.extend_from_slice(&client.octets()),
                    _ => write!(KeyText(&mut key), "{client}").expect("writing to a vector"),
                }
                let ticket = pool
                    .pick(Some(&key), &[], Nanos(1))
                    .expect("every server is up");
                counts[ticket.backend().index()] += 1;
                pool.complete(ticket, Outcome::Success, Nanos(1));
            }
            out.counts.push(counts);
        }
    }
    outcomes
}

/// `fmt::Write` into a byte vector, for formatting an address as the proxy's text key.
struct KeyText<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for KeyText<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// The report: a table of counts per run and the spread, then a summary per algorithm.
pub fn report(spec: &Spec, outcomes: &[Outcomes]) -> String {
    let mut out = String::new();
    let drawn = if spec.prefixes == 0 {
        "drawn uniformly over IPv4".to_owned()
    } else {
        format!("drawn from {} random /24 prefixes", spec.prefixes)
    };
    let _ = writeln!(
        out,
        "hash spread: {} clients {drawn}, {} servers of equal weight, {} runs (seed {})\n",
        spec.clients, spec.servers, spec.runs, spec.seed
    );
    let width = outcomes.iter().map(|o| o.label.len()).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "{:width$}  run  {:>24}  {:>8}  {:>6}",
        "algorithm", "clients per server", "max/min", "cv"
    );
    for o in outcomes {
        for (run, counts) in o.counts.iter().enumerate() {
            let (ratio, cv) = spread(counts);
            let counts = counts
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" ");
            let _ = writeln!(
                out,
                "{:width$}  {:>3}  {counts:>24}  {:>8}  {cv:>6.3}",
                o.label,
                run + 1,
                ratio_text(ratio)
            );
        }
    }
    let reference = random_cv(spec.clients, spec.servers);
    let _ = writeln!(
        out,
        "\nover {} runs: median max/min, mean cv (a random assignment would give cv ≈ {reference:.3}):",
        spec.runs
    );
    for o in outcomes {
        let (ratio, cv) = summary(o);
        let _ = writeln!(
            out,
            "{:width$}  max/min {:>6}  cv {cv:.3}  ({:.1}× random)",
            o.label,
            ratio_text(ratio),
            cv / reference
        );
    }
    out
}

/// The median max/min (a run that left a server idle has an infinite ratio, which a mean
/// could not carry) and the mean coefficient of variation over the runs.
pub fn summary(o: &Outcomes) -> (f64, f64) {
    let mut ratios: Vec<f64> = o.counts.iter().map(|c| spread(c).0).collect();
    ratios.sort_by(f64::total_cmp);
    let median = match ratios.len() {
        0 => 0.0,
        n if n % 2 == 1 => ratios[n / 2],
        n => (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0,
    };
    let runs = o.counts.len().max(1) as f64;
    let cv = o.counts.iter().map(|c| spread(c).1).sum::<f64>() / runs;
    (median, cv)
}

fn ratio_text(ratio: f64) -> String {
    if ratio.is_finite() {
        format!("{ratio:.2}")
    } else {
        "inf".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_known_counts() {
        // 300, 300, 400: mean 333.3, deviations −33.3, −33.3, 66.7, variance 2222.2,
        // sd 47.14, cv 0.1414; max/min 4/3.
        let (ratio, cv) = spread(&[300, 300, 400]);
        assert!((ratio - 4.0 / 3.0).abs() < 1e-9);
        assert!((cv - 0.141_42).abs() < 1e-4, "{cv}");
        assert_eq!(spread(&[0, 5, 5]).0, f64::INFINITY);
        assert!((random_cv(1000, 3) - 0.044_72).abs() < 1e-4);
        let runs = Outcomes {
            label: "x".into(),
            counts: vec![vec![1, 2], vec![0, 2], vec![2, 2]],
        };
        // Ratios 2, inf, 1: median 2; cvs 1/3, 1, 0: mean 4/9.
        let (ratio, cv) = summary(&runs);
        assert_eq!(ratio, 2.0);
        assert!((cv - 4.0 / 9.0).abs() < 1e-9, "{cv}");
    }

    #[test]
    fn clients_are_distinct_and_stay_in_their_prefixes() {
        let mut rng = Pcg64Mcg::seed_from_u64(3);
        let clients = draw_clients(&mut rng, 500, 4);
        let nets: std::collections::HashSet<u32> =
            clients.iter().map(|c| u32::from(*c) >> 8).collect();
        assert_eq!(clients.len(), 500);
        assert!(nets.len() <= 4, "{} prefixes", nets.len());
        let distinct: std::collections::HashSet<_> = clients.iter().collect();
        assert_eq!(distinct.len(), 500);
        // More clients than the prefixes hold: as many as there are addresses.
        assert_eq!(draw_clients(&mut rng, 1000, 2).len(), 512);
    }

    #[test]
    fn every_client_is_counted_once_per_run_and_the_same_seed_repeats() {
        let spec = Spec {
            clients: 1000,
            runs: 2,
            servers: 3,
            prefixes: 0,
            seed: 9,
        };
        let a = run(&spec, &contenders());
        for o in &a {
            for counts in &o.counts {
                assert_eq!(counts.iter().sum::<u64>(), 1000, "{}", o.label);
            }
        }
        let b = run(&spec, &contenders());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.counts, y.counts, "{}", x.label);
        }
    }

    #[test]
    fn three_octets_put_a_prefix_on_one_server() {
        // One /24: every 3-octet hash sends all its clients to one server; hashing the whole
        // address does not.
        let spec = Spec {
            clients: 200,
            runs: 1,
            servers: 3,
            prefixes: 1,
            seed: 5,
        };
        for o in run(&spec, &contenders()) {
            let busy = o.counts[0].iter().filter(|&&c| c > 0).count();
            match o.label.as_str() {
                "ip_hash" | "new_hash octets=3" => assert_eq!(busy, 1, "{}", o.label),
                _ => assert_eq!(busy, 3, "{}: {:?}", o.label, o.counts[0]),
            }
        }
    }
}
