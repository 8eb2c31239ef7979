//! An upstream's balancing: `algorithm`, `hash_key`, and the options only some algorithms use
//! (`balance::OptionKey`; which algorithm takes which is declared with the algorithms, in
//! `balance::Algorithm::options`). An option the chosen algorithm does not use is refused with
//! the algorithms that do, so a setting never silently does nothing. See `docs/algorithms.md`.

use std::ops::Range;
use std::time::Duration;

use balance::{Affinity, Algorithm, OptionKey};
use proxy::HashKey;
use toml::de::DeValue;

use super::duration::Zero;
use super::report::Report;
use super::table::{Table, found};

/// An upstream's algorithm and what configures it.
#[derive(Debug)]
pub(super) struct Balancing {
    pub algorithm: Algorithm,
    pub hash_key: HashKey,
    /// The options; `penalty` is left at its default here, see `penalty`.
    pub options: balance::Options,
    /// `latency`'s and `p2c_ewma`'s `penalty` as configured; `None`: the upstream's
    /// `read_timeout`, which is what seed 002 sets it to (its timeout), filled in with the
    /// other defaults.
    pub penalty: Option<Duration>,
    /// The algorithm as checked, and as written when that is not an algorithm.
    pub chosen: Chosen,
}

/// An upstream's algorithm as read. When the name written is no algorithm (reported), the
/// checks that depend on it go on with the algorithm it most likely meant, or the default,
/// and their messages name what was written: `algorithm "least_connections" does not use
/// it`, never a value the user did not write.
#[derive(Debug, Clone)]
pub(super) struct Chosen {
    pub algorithm: Algorithm,
    /// The name written, when it is not an algorithm.
    pub unknown: Option<String>,
}

impl std::ops::Deref for Chosen {
    type Target = Algorithm;

    fn deref(&self) -> &Algorithm {
        &self.algorithm
    }
}

impl std::fmt::Display for Chosen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.unknown {
            Some(written) => f.write_str(written),
            None => write!(f, "{}", self.algorithm),
        }
    }
}

/// The algorithm a name that is not one most likely meant: one a couple of edits away, or
/// one the name starts with (`least_connections`: `least_conn`), the longest such.
fn likely_algorithm(written: &str) -> Option<Algorithm> {
    let written = written.trim().to_ascii_lowercase().replace('-', "_");
    let names: Vec<&'static str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
    let near = super::table::likely(&written, &names).or_else(|| {
        names
            .iter()
            .filter(|n| {
                n.len() >= 4
                    && (written.starts_with(*n) || n.starts_with(&written))
                    && written.len() >= 4
            })
            .max_by_key(|n| n.len())
            .copied()
    })?;
    near.parse().ok()
}

/// Reads the balancing keys of an upstream with `backends` backends.
pub(super) fn read(r: &mut Report<'_>, t: &Table<'_>, backends: usize) -> Balancing {
    let chosen = match t.text(r, "algorithm", "an algorithm", "least_conn") {
        None => Chosen {
            algorithm: Algorithm::WeightedRoundRobin,
            unknown: t
                .value("algorithm")
                .map(|v| super::table::found(v.get_ref())),
        },
        Some(a) => match a.get_ref().parse::<Algorithm>() {
            Ok(algorithm) => Chosen {
                algorithm,
                unknown: None,
            },
            Err(e) => {
                let likely = likely_algorithm(a.get_ref());
                match likely {
                    Some(l) => r.error(
                        a.span(),
                        &t.key("algorithm"),
                        format!(
                            "unknown algorithm \"{}\"; did you mean \"{l}\"?",
                            a.get_ref()
                        ),
                    ),
                    None => r.error(a.span(), &t.key("algorithm"), e),
                }
                Chosen {
                    algorithm: likely.unwrap_or(Algorithm::WeightedRoundRobin),
                    unknown: Some(a.get_ref().to_string()),
                }
            }
        },
    };
    let hash_key = hash_key(r, t, &chosen);
    let options = options(r, t, &chosen, backends);
    // 0 is allowed: failures then add nothing to a backend's estimate.
    let penalty = used(r, t, OptionKey::Penalty, &chosen)
        .and_then(|_| t.duration(r, OptionKey::Penalty.name(), Zero::Allowed));
    Balancing {
        algorithm: chosen.algorithm,
        hash_key,
        options,
        penalty,
        chosen,
    }
}

fn hash_key(r: &mut Report<'_>, t: &Table<'_>, algorithm: &Chosen) -> HashKey {
    let Some(hk) = t.text(r, "hash_key", "a key", "client_ip") else {
        return HashKey::ClientIp;
    };
    let key = t.key("hash_key");
    match (algorithm.affinity(), hk.get_ref().parse::<HashKey>()) {
        (_, Err(why)) => r.error(hk.span(), &key, why),
        (None, Ok(_)) => r.error(
            hk.span(),
            &key,
            format!("algorithm \"{algorithm}\" does not hash a key; remove hash_key or choose a hash algorithm ({})", hash_algorithms()),
        ),
        (Some(Affinity::AddressOctets), Ok(k)) if k != HashKey::ClientIp => r.error(
            hk.span(),
            &key,
            format!("{algorithm} always hashes the client address: the only value is \"client_ip\" (to hash {k}, use algorithm = \"hash\")"),
        ),
        (Some(_), Ok(k)) => return k,
    }
    HashKey::ClientIp
}

/// The algorithms that hash, named for a message: those that hash a key first, then those
/// that hash the client address ("hash, maglev, bounded_load, ip_hash, new_hash").
fn hash_algorithms() -> String {
    [Affinity::Key, Affinity::AddressOctets]
        .iter()
        .flat_map(|&affinity| {
            Algorithm::ALL
                .iter()
                .filter(move |a| a.affinity() == Some(affinity))
        })
        .map(|a| a.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The keys of an upstream that configure its balancing: `hash_key` and every algorithm's
/// options (`balance::OptionKey::ALL`), in that order. The admin API takes exactly these.
pub(crate) fn balancing_keys() -> Vec<&'static str> {
    std::iter::once("hash_key")
        .chain(OptionKey::ALL.iter().map(|o| o.name()))
        .collect()
}

/// Where `option` is set in `t` if it is and `algorithm` uses it; reported if it is set for
/// an algorithm that does not use it.
fn used(
    r: &mut Report<'_>,
    t: &Table<'_>,
    option: OptionKey,
    algorithm: &Chosen,
) -> Option<Range<usize>> {
    let span = t.span_of(option.name())?;
    if algorithm.takes(option) {
        return Some(span);
    }
    let names: Vec<&str> = option.users().map(|a| a.name()).collect();
    r.error(
        span,
        &t.key(option.name()),
        format!(
            "{option} is an option of {}; algorithm \"{algorithm}\" does not use it: remove it or change the algorithm",
            names.join(", ")
        ),
    );
    None
}

/// `slow_start`, on an upstream or a backend: refused for algorithms without weights to ramp.
/// 0 is no slow start (a backend can opt out of its upstream's).
pub(super) fn slow_start(
    r: &mut Report<'_>,
    t: &Table<'_>,
    algorithm: &Chosen,
) -> Option<Duration> {
    used(r, t, OptionKey::SlowStart, algorithm)?;
    t.duration(r, OptionKey::SlowStart.name(), Zero::Allowed)
}

/// Every algorithm's options, each read only if the algorithm uses it (and refused if it
/// does not); the rest stay at their defaults. Read in the same order as ever, so problems
/// at one place keep the order they were found in.
fn options(
    r: &mut Report<'_>,
    t: &Table<'_>,
    algorithm: &Chosen,
    backends: usize,
) -> balance::Options {
    let mut options = balance::Options::default();
    hash_options(r, t, algorithm, backends, &mut options);
    latency_options(r, t, algorithm, &mut options);
    thresholds(r, t, algorithm, &mut options);
    utilization_options(r, t, algorithm, &mut options);
    prequal_options(r, t, algorithm, &mut options.prequal);
    options.slow_start = slow_start(r, t, algorithm).map(Into::into);
    options
}

/// The hash algorithms' options: `hash`'s `consistent`, `new_hash`'s `octets`, `maglev`'s
/// `table_size` and `bounded_load`'s `balance_factor`.
fn hash_options(
    r: &mut Report<'_>,
    t: &Table<'_>,
    algorithm: &Chosen,
    backends: usize,
    options: &mut balance::Options,
) {
    if used(r, t, OptionKey::Consistent, algorithm).is_some()
        && let Some(v) = t.flag(r, OptionKey::Consistent.name())
    {
        options.consistent = v;
    }
    if used(r, t, OptionKey::Octets, algorithm).is_some()
        && let Some(v) = t.value(OptionKey::Octets.name())
    {
        match v.get_ref() {
            DeValue::Integer(i) if i128::from_str_radix(i.as_str(), i.radix()) == Ok(3) => options.octets = balance::Octets::Three,
            DeValue::String(w) if w == "all" => options.octets = balance::Octets::All,
            other => r.error(
                v.span(),
                &t.key(OptionKey::Octets.name()),
                format!("write octets = 3 (the first three octets of an IPv4 address, as the paper) or octets = \"all\", not {}", found(other)),
            ),
        }
    }
    if let Some(size) = table_size(r, t, algorithm, backends) {
        options.table_size = size;
    }
    if used(r, t, OptionKey::BalanceFactor, algorithm).is_some()
        && let Some(c) = t.number(r, OptionKey::BalanceFactor.name(), "1.25")
    {
        let c = *c.get_ref();
        if c > 1.0 && c <= 100.0 {
            options.balance_factor = c;
        } else {
            t.error(
                r,
                OptionKey::BalanceFactor.name(),
                "must be above 1 and at most 100: a backend may take this many times its fair share (1.25 is the usual choice)",
            );
        }
    }
}

/// `maglev`'s `table_size`: a prime, well above the number of backends.
fn table_size(
    r: &mut Report<'_>,
    t: &Table<'_>,
    algorithm: &Chosen,
    backends: usize,
) -> Option<u32> {
    let span = used(r, t, OptionKey::TableSize, algorithm)?;
    let size = t.integer::<u32>(
        r,
        OptionKey::TableSize.name(),
        3..=16_777_213,
        ", a prime like 65537 (the default) or 655373",
    )?;
    if !is_prime(u64::from(size)) {
        t.error(
            r,
            OptionKey::TableSize.name(),
            "must be a prime between 3 and 16777213, like 65537 (the default) or 655373",
        );
        None
    } else if (size as usize) < 10 * backends {
        r.error(
            span,
            &t.key(OptionKey::TableSize.name()),
            format!("{size} entries for {backends} backends: Maglev needs a table well above the number of backends (at least 10 times, 100 times for even shares)"),
        );
        None
    } else {
        Some(size)
    }
}

/// `latency`'s `window` and `smoothing` (its `penalty` is read apart, see [`Balancing`]).
fn latency_options(
    r: &mut Report<'_>,
    t: &Table<'_>,
    algorithm: &Chosen,
    options: &mut balance::Options,
) {
    if used(r, t, OptionKey::Window, algorithm).is_some()
        && let Some(w) = t.integer(r, OptionKey::Window.name(), 1..=10_000, " completions")
    {
        options.window = w;
    }
    if used(r, t, OptionKey::Smoothing, algorithm).is_some()
        && let Some(a) = t.number(r, OptionKey::Smoothing.name(), "0.5")
    {
        let a = *a.get_ref();
        if a > 0.0 && a <= 1.0 {
            options.smoothing = a;
        } else {
            t.error(
                r,
                OptionKey::Smoothing.name(),
                "must be above 0 and at most 1 (the weight of the newest latency)",
            );
        }
    }
}

/// `utilization_wrr`'s `blackout_period`, `weight_expiration_period` and
/// `error_utilization_penalty` (gRFC A58's).
fn utilization_options(
    r: &mut Report<'_>,
    t: &Table<'_>,
    algorithm: &Chosen,
    options: &mut balance::Options,
) {
    if used(r, t, OptionKey::BlackoutPeriod, algorithm).is_some()
        && let Some(d) = t.duration(r, OptionKey::BlackoutPeriod.name(), Zero::Allowed)
    {
        options.blackout_period = d.into();
    }
    if used(r, t, OptionKey::WeightExpirationPeriod, algorithm).is_some()
        && let Some(d) = t.duration(
            r,
            OptionKey::WeightExpirationPeriod.name(),
            Zero::Refused("every weight would expire at once"),
        )
    {
        options.weight_expiration_period = d.into();
    }
    if used(r, t, OptionKey::ErrorUtilizationPenalty, algorithm).is_some()
        && let Some(p) = t.number(r, OptionKey::ErrorUtilizationPenalty.name(), "1.0")
    {
        let p = *p.get_ref();
        if (0.0..=100.0).contains(&p) {
            options.error_utilization_penalty = p;
        } else {
            t.error(
                r,
                OptionKey::ErrorUtilizationPenalty.name(),
                "must be between 0 (errors do not count) and 100",
            );
        }
    }
}

/// `prequal`'s options (balance's `PrequalOptions`, the paper's defaults): `pool_size`,
/// `reuse`, `quantile`, `probe_rate`, `probe_max_age` and `probe_timeout`.
fn prequal_options(
    r: &mut Report<'_>,
    t: &Table<'_>,
    algorithm: &Chosen,
    options: &mut balance::PrequalOptions,
) {
    if used(r, t, OptionKey::PoolSize, algorithm).is_some()
        && let Some(n) = t.integer(
            r,
            OptionKey::PoolSize.name(),
            1..=1024,
            " probes (16, the paper's, is the default)",
        )
    {
        options.pool_size = n;
    }
    if used(r, t, OptionKey::Reuse, algorithm).is_some()
        && let Some(n) = t.integer(
            r,
            OptionKey::Reuse.name(),
            1..=1_000_000,
            " picks per probe (leave it out for the paper's formula)",
        )
    {
        options.reuse = Some(n);
    }
    let mut fraction = |option: OptionKey, example: &str, what: &str| -> Option<f64> {
        used(r, t, option, algorithm)?;
        let v = *t.number(r, option.name(), example)?.get_ref();
        let fits = match option {
            OptionKey::Quantile => v > 0.0 && v <= 1.0,
            _ => v > 0.0 && v <= 100.0,
        };
        if !fits {
            t.error(r, option.name(), what);
        }
        fits.then_some(v)
    };
    if let Some(q) = fraction(
        OptionKey::Quantile,
        "0.84",
        "must be above 0 and at most 1: probes whose RIF is above this quantile of the pool's are hot (0.84, the paper's, is the default)",
    ) {
        options.quantile = q;
    }
    if let Some(rate) = fraction(
        OptionKey::ProbeRate,
        "3",
        "must be above 0 and at most 100 probes per request (3, the paper's, is the default; for no probes at all use random_two)",
    ) {
        options.probe_rate = rate;
    }
    if used(r, t, OptionKey::ProbeMaxAge, algorithm).is_some()
        && let Some(d) = t.duration(
            r,
            OptionKey::ProbeMaxAge.name(),
            Zero::Refused("every probe would be too old to use"),
        )
    {
        options.max_age = d.into();
    }
    if used(r, t, OptionKey::ProbeTimeout, algorithm).is_some()
        && let Some(d) = t.duration(
            r,
            OptionKey::ProbeTimeout.name(),
            Zero::Refused("no probe could ever answer"),
        )
    {
        options.probe_timeout = d.into();
    }
}

/// `dynamic_wrr`'s `high_load` and `low_load` (seed 001's `H` and `L`, free shares in
/// [0, 1]), with `high_load < low_load` so that no server is both.
fn thresholds(
    r: &mut Report<'_>,
    t: &Table<'_>,
    algorithm: &Chosen,
    options: &mut balance::Options,
) {
    let mut read = |option: OptionKey, example: &str| -> Option<f64> {
        used(r, t, option, algorithm)?;
        let key = option.name();
        let v = *t.number(r, key, example)?.get_ref();
        if (0.0..=1.0).contains(&v) {
            Some(v)
        } else {
            t.error(
                r,
                key,
                "must be between 0 and 1: a share of a server's performance left free",
            );
            None
        }
    };
    let high = read(OptionKey::HighLoad, "0.2");
    let low = read(OptionKey::LowLoad, "0.4");
    let (h, l) = (
        high.unwrap_or(options.high_load),
        low.unwrap_or(options.low_load),
    );
    if h >= l {
        let key = if high.is_some() {
            OptionKey::HighLoad.name()
        } else {
            OptionKey::LowLoad.name()
        };
        t.error(
            r,
            key,
            format!("high_load ({h}) must be below low_load ({l}): a server cannot be highly and lightly loaded at once"),
        );
        return;
    }
    options.high_load = h;
    options.low_load = l;
}

fn is_prime(n: u64) -> bool {
    n >= 2
        && (2..)
            .take_while(|d| d * d <= n)
            .all(|d| !n.is_multiple_of(d))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;

    #[test]
    fn every_balancing_key_is_an_upstream_key() {
        for key in balancing_keys() {
            assert!(
                crate::config::upstream::SECTION.keys.contains(&key),
                "{key} is not a key of [[upstream]]"
            );
        }
    }

    #[test]
    fn unknown_algorithm_names_line_key_and_choices() {
        let e = refused(&GOOD.replace("least_conn", "fastest"));
        assert!(
            e.starts_with("t.toml:10:13: upstream[0].algorithm: unknown algorithm \"fastest\""),
            "{e}"
        );
        assert!(
            e.contains(
                "round_robin, weighted_round_robin, random, chained_round_robin, least_conn, \
                 fair, random_two, least_time, p2c_ewma, latency, prequal, ip_hash, new_hash, hash, \
                 maglev, bounded_load, dynamic_wrr, dwlc, capacity_weighted"
            ),
            "{e}"
        );
        assert!(e.contains("10 | algorithm = \"fastest\""), "{e}");
    }

    #[test]
    fn algorithm_options_reach_the_upstream() {
        let upstream = |text: &str| ok(text).proxy.upstreams[0].clone();
        let u = upstream(&with_algorithm(
            "hash",
            "consistent = true\nhash_key = \"cookie:sid\"",
        ));
        assert!(u.options.consistent);
        assert_eq!(u.hash_key, HashKey::Cookie("sid".into()));
        let u = upstream(&with_algorithm("new_hash", "octets = \"all\""));
        assert_eq!(u.options.octets, balance::Octets::All);
        let u = upstream(&with_algorithm("new_hash", "octets = 3"));
        assert_eq!(u.options.octets, balance::Octets::Three);
        let u = upstream(&with_algorithm(
            "maglev",
            "table_size = 251\nhash_key = \"uri\"",
        ));
        assert_eq!(u.options.table_size, 251);
        let u = upstream(&with_algorithm("bounded_load", "balance_factor = 1.5"));
        assert_eq!(u.options.balance_factor, 1.5);
        let u = upstream(&with_algorithm("bounded_load", "balance_factor = 2"));
        assert_eq!(u.options.balance_factor, 2.0);
        let u = upstream(&with_algorithm(
            "latency",
            "window = 20\nsmoothing = 0.25\npenalty = \"2s\"",
        ));
        assert_eq!(
            (u.options.window, u.options.smoothing, u.options.penalty),
            (20, 0.25, balance::Nanos(2_000_000_000))
        );
        let u = upstream(&with_algorithm(
            "dynamic_wrr",
            "high_load = 0.1\nlow_load = 0.5",
        ));
        assert_eq!((u.options.high_load, u.options.low_load), (0.1, 0.5));
        let u = upstream(&with_algorithm("dynamic_wrr", "low_load = 0.3"));
        assert_eq!((u.options.high_load, u.options.low_load), (0.2, 0.3));
        // Without a penalty, the timeout a failure costs: read_timeout (seed 002 §V).
        let u = upstream(&with_algorithm("latency", ""));
        assert_eq!(u.options.penalty, balance::Nanos(60_000_000_000));
        let u = upstream(&with_algorithm("latency", "read_timeout = \"5s\""));
        assert_eq!(u.options.penalty, balance::Nanos(5_000_000_000));
        let u = upstream(&with_algorithm(
            "latency",
            "read_timeout = \"5s\"\npenalty = \"2s\"",
        ));
        assert_eq!(u.options.penalty, balance::Nanos(2_000_000_000));
        let u = upstream(&with_algorithm("latency", "penalty = \"0s\""));
        assert_eq!(u.options.penalty, balance::Nanos(0));
        let text = with_algorithm("least_conn", "slow_start = \"30s\"")
            .replace("weight = 3", "weight = 3\n  slow_start = \"0s\"");
        let u = upstream(&text);
        assert_eq!(u.options.slow_start, Some(balance::Nanos(30_000_000_000)));
        assert_eq!(u.backends[0].slow_start, Some(Duration::ZERO));
        assert_eq!(u.backends[1].slow_start, None);
    }

    /// An unknown algorithm: a did-you-mean when one is close, the checks that depend on it
    /// made for that one, and their messages naming what was written (issue 32: they named
    /// the default, weighted_round_robin, which the user never wrote).
    #[test]
    fn options_after_an_unknown_algorithm_name_what_was_written() {
        let e = refused(&with_algorithm(
            "maglve",
            "table_size = 251\nhash_key = \"uri\"",
        ));
        assert!(
            e.starts_with("t.toml:10:13: upstream[0].algorithm: unknown algorithm \"maglve\"; did you mean \"maglev\"?\n"),
            "{e}"
        );
        assert!(!e.contains("problems in"), "maglev takes both options: {e}");
        let e = refused(&with_algorithm("fastest", "table_size = 251"));
        assert!(
            e.contains("unknown algorithm \"fastest\"; known algorithms: "),
            "{e}"
        );
        assert!(
            e.contains("table_size: table_size is an option of maglev; algorithm \"fastest\" does not use it"),
            "{e}"
        );
        assert!(!e.contains("weighted_round_robin\" does not"), "{e}");
    }

    #[test]
    fn options_of_another_algorithm_and_bad_values_are_refused() {
        let e = refused(&with_algorithm("least_conn", "consistent = true"));
        assert!(
            e.contains("upstream[0].consistent: consistent is an option of hash; algorithm \"least_conn\" does not use it"),
            "{e}"
        );
        let e = refused(&with_algorithm("ip_hash", "slow_start = \"10s\""));
        assert!(
            e.contains("slow_start is an option of weighted_round_robin, random"),
            "{e}"
        );
        let e = refused(&with_algorithm("maglev", "table_size = 65536"));
        assert!(e.contains("table_size: must be a prime"), "{e}");
        let e = refused(&with_algorithm("maglev", "table_size = 4294967311"));
        assert!(
            e.contains("table_size: must be between 3 and 16777213"),
            "{e}"
        );
        let e = refused(&with_algorithm("maglev", "table_size = 7"));
        assert!(e.contains("7 entries for 2 backends"), "{e}");
        let e = refused(&with_algorithm("new_hash", "octets = 2"));
        assert!(e.contains("write octets = 3"), "{e}");
        let e = refused(&with_algorithm("bounded_load", "balance_factor = 1.0"));
        assert!(e.contains("balance_factor: must be above 1"), "{e}");
        let e = refused(&with_algorithm("bounded_load", "balance_factor = nan"));
        assert!(e.contains("balance_factor: must be above 1"), "{e}");
        let e = refused(&with_algorithm("weighted_round_robin", "high_load = 0.1"));
        assert!(
            e.contains("high_load is an option of dynamic_wrr; algorithm \"weighted_round_robin\" does not use it"),
            "{e}"
        );
        let e = refused(&with_algorithm("dynamic_wrr", "low_load = 1.5"));
        assert!(e.contains("low_load: must be between 0 and 1"), "{e}");
        let e = refused(&with_algorithm("dynamic_wrr", "high_load = 0.5"));
        assert!(
            e.contains("high_load: high_load (0.5) must be below low_load (0.4)"),
            "{e}"
        );
        let e = refused(&with_algorithm("latency", "smoothing = 0"));
        assert!(e.contains("smoothing: must be above 0"), "{e}");
        let e = refused(&with_algorithm("latency", "window = 0"));
        assert!(
            e.contains("window: must be between 1 and 10000 completions"),
            "{e}"
        );
        let e = refused(&with_algorithm("ip_hash", "hash_key = \"uri\""));
        assert!(
            e.contains("ip_hash always hashes the client address"),
            "{e}"
        );
        let e = refused(&with_algorithm("hash", "hash_key = \"header:\""));
        assert!(e.contains("needs a header name"), "{e}");
        let e = refused(&with_algorithm("random", "hash_key = \"uri\""));
        assert!(
            e.contains("does not hash a key; remove hash_key or choose a hash algorithm (hash, maglev, bounded_load, ip_hash, new_hash)"),
            "{e}"
        );
    }

    #[test]
    fn prequal_options_are_read_and_checked() {
        let u = ok(&with_algorithm(
            "prequal",
            "pool_size = 8\nreuse = 2\nquantile = 0.9\nprobe_rate = 1.5\nprobe_max_age = \"500ms\"\nprobe_timeout = \"50ms\"",
        ))
        .proxy
        .upstreams[0]
            .clone();
        let p = &u.options.prequal;
        assert_eq!(
            (p.pool_size, p.reuse, p.quantile, p.probe_rate),
            (8, Some(2), 0.9, 1.5)
        );
        assert_eq!(p.max_age, balance::Nanos(500_000_000));
        assert_eq!(p.probe_timeout, balance::Nanos(50_000_000));
        let defaults = ok(&with_algorithm("prequal", "")).proxy.upstreams[0].clone();
        assert_eq!(defaults.options.prequal, balance::PrequalOptions::default());
        for (line, said) in [
            (
                "pool_size = 0",
                "upstream[0].pool_size: must be between 1 and 1024",
            ),
            (
                "reuse = 0",
                "upstream[0].reuse: must be between 1 and 1000000",
            ),
            (
                "quantile = 0",
                "upstream[0].quantile: must be above 0 and at most 1",
            ),
            (
                "quantile = 1.5",
                "upstream[0].quantile: must be above 0 and at most 1",
            ),
            (
                "probe_rate = 0",
                "upstream[0].probe_rate: must be above 0 and at most 100",
            ),
            ("probe_rate = \"3\"", "upstream[0].probe_rate"),
            (
                "probe_max_age = \"0s\"",
                "upstream[0].probe_max_age: must be more than 0",
            ),
            (
                "probe_timeout = \"0s\"",
                "upstream[0].probe_timeout: must be more than 0",
            ),
        ] {
            let e = refused(&with_algorithm("prequal", line));
            assert!(e.contains(said), "{line}: {e}");
        }
        let e = refused(&with_algorithm("least_conn", "probe_rate = 2"));
        assert!(
            e.contains(
                "probe_rate is an option of prequal; algorithm \"least_conn\" does not use it"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_probe_address_is_for_prequal_and_needed_over_tls_or_h2() {
        let text = with_algorithm("prequal", "")
            .replace("weight = 3", "weight = 3\n  probe = \"127.0.0.1:9101\"");
        let u = &ok(&text).proxy.upstreams[0];
        assert_eq!(u.backends[0].probe, Some(([127, 0, 0, 1], 9101).into()));
        assert_eq!(u.backends[1].probe, None);
        let e = refused(&text.replace("prequal", "least_conn"));
        assert!(
            e.contains(
                "upstream[0].backend[0].probe: only prequal probes its backends, not least_conn"
            ),
            "{e}"
        );
        let e = refused(&text.replace("probe = \"127.0.0.1:9101\"", "probe = \"nowhere\""));
        assert!(e.contains("upstream[0].backend[0].probe:"), "{e}");
        let h2 = with_algorithm("prequal", "backend_protocol = \"h2\"");
        let e = refused(&h2);
        assert!(
            e.contains("prequal probes with plain HTTP/1.1 GET /probe")
                && e.contains("127.0.0.1:9001"),
            "{e}"
        );
        let both = h2.replace("weight = 3", "weight = 3\n  probe = \"127.0.0.1:9101\"");
        let both = both.replace(
            "backup = true",
            "backup = true\n  probe = \"127.0.0.1:9102\"",
        );
        ok(&both);
    }
}
