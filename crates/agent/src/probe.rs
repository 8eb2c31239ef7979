//! Prequal's probe (Wydrowski et al., "Load is not what you should balance", NSDI 2024, §3):
//! the `GET /probe` document, both ends of it, as DESIGN §2 "Prequal" states it:
//!
//! ```json
//! {"rif":3,"latency_ms":12.5}
//! ```
//!
//! `rif` is the server's requests in flight now; `latency_ms` its estimate of the latency a
//! request arriving now would see at that RIF (Prequal's server-side estimate, kept from its
//! recent completions by [`balance::RifLatency`]). The lab's emulated
//! backends and `fulcrum agent --probe-target` write it with [`probe_json`]; the control
//! plane's prober reads it with [`parse_probe`].
//!
//! * **Written**: `latency_ms` rounded to a microsecond; a server with no completion yet
//!   writes 0 (it knows of no delay: an idle server should attract the first requests).
//! * **Read**: untrusted input. Both fields are required: `rif` an integer in `[0, 2^32)`,
//!   `latency_ms` a finite number in `[0, MAX_LATENCY_MS]`; anything else is refused, never
//!   clamped (a probe that lies about its range says nothing trustworthy). Other fields are
//!   ignored.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The largest latency a probe may state: an hour. A backend estimating more is broken, and
/// the bound keeps the conversion to nanoseconds exact.
pub const MAX_LATENCY_MS: f64 = 3_600_000.0;

/// What a probe says: requests in flight and the latency estimate at that RIF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeAnswer {
    pub rif: u32,
    pub latency: Duration,
}

#[derive(Debug, Serialize, Deserialize)]
struct Document {
    rif: u32,
    latency_ms: f64,
}

/// The `GET /probe` body for `rif` requests in flight and the estimate `latency` (zero: no
/// completion to estimate from yet).
pub fn probe_json(rif: u32, latency: Duration) -> Vec<u8> {
    let ms = (latency.as_secs_f64() * 1e3).min(MAX_LATENCY_MS);
    let doc = Document {
        rif,
        latency_ms: (ms * 1e3).round() / 1e3,
    };
    serde_json::to_vec(&doc).expect("a struct of numbers always serializes")
}

/// Why a probe's answer was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// Not JSON, or a field missing or of the wrong type (serde's words).
    #[error("not a probe answer ({0}); expected JSON such as {{\"rif\":3,\"latency_ms\":12.5}}")]
    NotAProbe(String),
    /// `latency_ms` not finite, negative or beyond [`MAX_LATENCY_MS`].
    #[error("latency_ms must be a number of milliseconds from 0 to {MAX_LATENCY_MS}, not {0}")]
    Latency(String),
}

/// The answer in a `GET /probe` body, checked.
pub fn parse_probe(body: &[u8]) -> Result<ProbeAnswer, ProbeError> {
    let doc: Document =
        serde_json::from_slice(body).map_err(|e| ProbeError::NotAProbe(e.to_string()))?;
    let ms = doc.latency_ms;
    if !(ms.is_finite() && (0.0..=MAX_LATENCY_MS).contains(&ms)) {
        return Err(ProbeError::Latency(ms.to_string()));
    }
    Ok(ProbeAnswer {
        rif: doc.rif,
        latency: Duration::from_nanos((ms * 1e6).round() as u64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back() {
        let json = probe_json(3, Duration::from_micros(12_500));
        assert_eq!(
            String::from_utf8(json.clone()).unwrap(),
            r#"{"rif":3,"latency_ms":12.5}"#
        );
        assert_eq!(
            parse_probe(&json).unwrap(),
            ProbeAnswer {
                rif: 3,
                latency: Duration::from_micros(12_500)
            }
        );
        assert_eq!(
            String::from_utf8(probe_json(0, Duration::ZERO)).unwrap(),
            r#"{"rif":0,"latency_ms":0.0}"#
        );
    }

    #[test]
    fn bad_answers_are_refused() {
        for garbage in [
            &b"garbage"[..],
            b"",
            br#"{"rif":3}"#,
            br#"{"latency_ms":3}"#,
            br#"{"rif":-1,"latency_ms":3}"#,
            br#"{"rif":4294967296,"latency_ms":3}"#,
            br#"{"rif":1.5,"latency_ms":3}"#,
            br#"{"rif":"3","latency_ms":3}"#,
            br#"{"rif":3,"latency_ms":"3"}"#,
            br#"{"rif":3,"latency_ms":1e999}"#,
        ] {
            assert!(
                matches!(parse_probe(garbage), Err(ProbeError::NotAProbe(_))),
                "{:?}",
                String::from_utf8_lossy(garbage)
            );
        }
        for bad in [
            &br#"{"rif":3,"latency_ms":-0.5}"#[..],
            br#"{"rif":3,"latency_ms":3600000.5}"#,
        ] {
            assert!(
                matches!(parse_probe(bad), Err(ProbeError::Latency(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // Other fields are ignored.
        assert!(parse_probe(br#"{"rif":0,"latency_ms":0,"extra":true}"#).is_ok());
    }
}
