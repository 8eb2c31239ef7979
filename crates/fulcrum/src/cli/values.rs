//! Parsers for the values of command-line arguments clap does not know: each takes the text
//! as written and returns the value or a message that says what to write instead, which clap
//! shows after the argument's name.

use std::net::SocketAddr;
use std::time::Duration;

/// `http://IP:PORT/PATH`: the address and the path (`/` when none).
pub fn parse_target(text: &str) -> Result<(SocketAddr, String), String> {
    let rest = text
        .strip_prefix("http://")
        .ok_or_else(|| format!("{text:?}: write a URL such as http://127.0.0.1:8080/"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_owned()),
        None => (rest, "/".to_owned()),
    };
    let addr = authority.parse().map_err(|_| {
        format!("{authority:?}: write an IP address and a port, such as 127.0.0.1:8080")
    })?;
    Ok((addr, path))
}

/// `poisson` or `even`.
pub fn parse_spacing(text: &str) -> Result<lab::schedule::Spacing, String> {
    match text {
        "poisson" => Ok(lab::schedule::Spacing::Poisson),
        "even" => Ok(lab::schedule::Spacing::Even),
        _ => Err(format!("{text:?}: write poisson or even")),
    }
}

/// A relative speed: a positive number up to 1000.
pub fn parse_speed(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 1000.0 => Ok(s),
        _ => Err(format!(
            "{text:?}: a speed is a number above 0 and at most 1000, like 0.5 or 2"
        )),
    }
}

/// A backend's cost distribution: milliseconds (`25`, `2.5`, meaning `const:MS`), or the
/// load generator's `const:MS`, `uniform:A:B`, `lognormal:MU:SIGMA`.
pub fn parse_cost(text: &str) -> Result<lab::schedule::Cost, String> {
    let cost = if text.parse::<f64>().is_ok() {
        format!("const:{text}").parse()
    } else {
        text.parse()
    };
    cost.map_err(|e| {
        format!("{e} (write milliseconds such as 25, or const:MS, uniform:A:B, lognormal:MU:SIGMA)")
    })
}

/// A size in bytes (`--mem-base`, `--mem-per-request`, `--net-per-request`): `4GB`,
/// `512MiB`, `64KB`.
pub fn parse_size(text: &str) -> Result<f64, String> {
    lab::backend::footprint::parse_bytes(text)
}

/// A host's memory (`--mem`): a size above 0.
pub fn parse_mem(text: &str) -> Result<f64, String> {
    match parse_size(text)? {
        0.0 => Err(format!(
            "{text:?}: write the host's memory, above 0, such as 4GB"
        )),
        bytes => Ok(bytes),
    }
}

/// A probability: a number from 0 to 1.
pub fn parse_probability(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!(
            "{text:?}: a probability is a number from 0 to 1, like 0.05"
        )),
    }
}

/// A sampling interval: a humantime duration ("1s", "500ms") of at least 10 ms.
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| format!("{text:?}: {e}"))?;
    if d < Duration::from_millis(10) {
        return Err(format!("{text:?}: the interval is at least 10ms"));
    }
    Ok(d)
}
