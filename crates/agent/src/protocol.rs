//! The agent protocol (DESIGN §2), both ends of it: the JSON document an agent serves at
//! `GET /load`, and the record it pushes to memcached (the same document, under a key named
//! after the backend). The agent and the lab's emulated backends write it with [`load_json`];
//! the control plane reads it with [`parse_load`] and [`parse_pushed`]. Both ends use this
//! one definition, so they cannot disagree on a field's name, on what is required or on how
//! a key is spelled.
//!
//! ```json
//! {"cpu":0.42,"mem":0.63,"disk":0.1,"net":0.05,"container_mem":0.5,"ts_ms":1700000000123}
//! ```
//!
//! * **Written**: the five utilizations of a [`LoadReport`], each in [0, 1] (a NaN as 1, fully
//!   used, as [`LoadReport::sanitized`] reads it), rounded to four decimals: a hundredth of a
//!   percent is finer than any of the counters behind them resolve, and `0.42` reads better
//!   than `0.41999999999999998`. `ts_ms` is when the sample was taken, in milliseconds since
//!   the Unix epoch.
//! * **Read**: untrusted input. Every utilization is required and must be a finite number
//!   (NaN, infinities and strings are refused); values outside [0, 1] are clamped
//!   ([`LoadReport::checked`]), so no report can carry a model outside its range. Other fields
//!   are ignored. `ts_ms` is informative in `GET /load`, and required in a pushed record:
//!   memcached keeps a stopped agent's last record until it expires, and its age is how a
//!   reader tells.
//! * **Key**: `fulcrum/load/<backend>`, `<backend>` being the backend's `addr` as fulcrum's
//!   configuration writes it (`fulcrum agent --push … --name <backend>`); memcached takes keys
//!   of at most 250 bytes without spaces or control characters.

use balance::weights::{InvalidReport, LoadReport};
use serde::{Deserialize, Serialize};

/// The prefix of every pushed record's key.
pub const KEY_PREFIX: &str = "fulcrum/load/";

/// memcached's limit on a key's length (its protocol.txt, "Keys").
pub const MAX_KEY: usize = 250;

/// The memcached key of `backend`'s pushed reports.
pub fn key(backend: &str) -> String {
    format!("{KEY_PREFIX}{backend}")
}

/// Whether `backend` makes a valid memcached key: not empty, no whitespace or control
/// characters, at most [`MAX_KEY`] bytes with the prefix.
pub fn is_valid_name(backend: &str) -> bool {
    !backend.is_empty()
        && !backend
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        && KEY_PREFIX.len() + backend.len() <= MAX_KEY
}

/// The document as written.
#[derive(Debug, Serialize)]
struct Written {
    cpu: f64,
    mem: f64,
    disk: f64,
    net: f64,
    container_mem: f64,
    ts_ms: u64,
}

/// The document's utilizations as read; every one is required.
#[derive(Debug, Deserialize)]
struct Utilizations {
    cpu: f64,
    mem: f64,
    disk: f64,
    net: f64,
    container_mem: f64,
}

/// The document's time stamp, read on its own: a `GET /load` body is accepted whatever its
/// `ts_ms` holds (informative there), a pushed record only with a number of milliseconds.
#[derive(Debug, Deserialize)]
struct Stamp {
    ts_ms: u64,
}

/// Four decimals (see the module doc).
fn rounded(u: f64) -> f64 {
    (u * 10_000.0).round() / 10_000.0
}

/// The document for `report`, sampled at `ts_ms` (Unix milliseconds): the body of
/// `GET /load` and the value of a pushed record.
pub fn load_json(report: &LoadReport, ts_ms: u64) -> Vec<u8> {
    let r = report.sanitized();
    let written = Written {
        cpu: rounded(r.cpu),
        mem: rounded(r.mem),
        disk: rounded(r.disk),
        net: rounded(r.net),
        container_mem: rounded(r.container_mem),
        ts_ms,
    };
    serde_json::to_vec(&written).expect("a struct of numbers always serializes")
}

/// Why a document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not JSON, or a utilization missing or not a number (serde's words).
    #[error(
        "not a load report ({0}); expected JSON such as {{\"cpu\":0.42,\"mem\":0.63,\"disk\":0.1,\"net\":0.05,\"container_mem\":0.5}}"
    )]
    NotAReport(String),
    /// A utilization that is not finite.
    #[error("{0}")]
    Invalid(InvalidReport),
    /// A pushed record without a usable `ts_ms`.
    #[error("a pushed report needs ts_ms (Unix milliseconds)")]
    NoTimestamp,
}

/// The report in a `GET /load` body, checked.
pub fn parse_load(body: &[u8]) -> Result<LoadReport, ParseError> {
    let u: Utilizations =
        serde_json::from_slice(body).map_err(|e| ParseError::NotAReport(e.to_string()))?;
    LoadReport::checked(u.cpu, u.mem, u.disk, u.net, u.container_mem).map_err(ParseError::Invalid)
}

/// A record an agent pushed to memcached: its report and when it was sampled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pushed {
    pub report: LoadReport,
    /// Unix milliseconds.
    pub ts_ms: u64,
}

/// The report and time stamp of a pushed record, checked.
pub fn parse_pushed(value: &[u8]) -> Result<Pushed, ParseError> {
    let report = parse_load(value)?;
    let ts_ms = serde_json::from_slice::<Stamp>(value)
        .map_err(|_| ParseError::NoTimestamp)?
        .ts_ms;
    Ok(Pushed { report, ts_ms })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> LoadReport {
        LoadReport {
            cpu: 0.42,
            mem: 0.63,
            disk: 0.1,
            net: 0.05,
            container_mem: 0.123456789,
        }
    }

    #[test]
    fn the_document_has_the_protocol_fields() {
        assert_eq!(
            String::from_utf8(load_json(&report(), 1_700_000_000_123)).unwrap(),
            r#"{"cpu":0.42,"mem":0.63,"disk":0.1,"net":0.05,"container_mem":0.1235,"ts_ms":1700000000123}"#
        );
    }

    #[test]
    fn the_document_is_in_range_whatever_the_report() {
        let mut r = report();
        r.cpu = f64::NAN;
        r.mem = -3.0;
        r.disk = 7.0;
        let v: serde_json::Value = serde_json::from_slice(&load_json(&r, 0)).unwrap();
        assert_eq!(v["cpu"], 1.0);
        assert_eq!(v["mem"], 0.0);
        assert_eq!(v["disk"], 1.0);
    }

    #[test]
    fn what_is_written_reads_back() {
        let json = load_json(&report(), 7);
        let read = parse_load(&json).unwrap();
        assert_eq!(
            read,
            LoadReport {
                container_mem: 0.1235,
                ..report()
            }
        );
        assert_eq!(
            parse_pushed(&json).unwrap(),
            Pushed {
                report: read,
                ts_ms: 7
            }
        );
    }

    #[test]
    fn reports_are_checked() {
        let r = parse_load(br#"{"cpu":-3,"mem":7,"disk":0,"net":0,"container_mem":0}"#).unwrap();
        assert_eq!((r.cpu, r.mem), (0.0, 1.0));
        for garbage in [
            &b"garbage"[..],
            br#"{"cpu":"NaN","mem":0,"disk":0,"net":0,"container_mem":0}"#,
            br#"{"cpu":0.1}"#,
            br#"{"cpu":1e999,"mem":0,"disk":0,"net":0,"container_mem":0}"#,
            b"",
        ] {
            assert!(
                matches!(parse_load(garbage), Err(ParseError::NotAReport(_))),
                "{:?}",
                String::from_utf8_lossy(garbage)
            );
        }
        // ts_ms is informative in GET /load, whatever it holds; a pushed record needs it.
        let odd_stamp = br#"{"cpu":0,"mem":0,"disk":0,"net":0,"container_mem":0,"ts_ms":"x"}"#;
        assert!(parse_load(odd_stamp).is_ok());
        assert_eq!(parse_pushed(odd_stamp), Err(ParseError::NoTimestamp));
        let no_stamp = br#"{"cpu":0,"mem":0,"disk":0,"net":0,"container_mem":0}"#;
        assert_eq!(parse_pushed(no_stamp), Err(ParseError::NoTimestamp));
    }

    #[test]
    fn keys() {
        assert_eq!(key("10.0.0.1:8080"), "fulcrum/load/10.0.0.1:8080");
        assert!(is_valid_name("10.0.0.1:8080"));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("a b"));
        assert!(!is_valid_name("a\nb"));
        assert!(is_valid_name(&"x".repeat(MAX_KEY - KEY_PREFIX.len())));
        assert!(!is_valid_name(&"x".repeat(MAX_KEY - KEY_PREFIX.len() + 1)));
    }
}
