//! The per-request trace: every request of a run as one CSV line (RFC 4180), for the reports
//! and for anyone who wants to look past the summary.
//!
//! Columns ([`TRACE_HEADER`]): `intended_ms` and `start_ms` (when the request was to leave and
//! when it did), `end_ms` (when its answer ended), all from the start of the run in
//! milliseconds with three decimals; `status` and `backend` (the answer's `X-Backend`);
//! `cost_ms` (its `X-Lab-Cost`); `client` (the address it left from, 127.1.x.y); `outcome`:
//! `ok` (answered below 500), `http_error` (answered 5xx), `timeout` or `error` (no answer).
//! `end_ms`, `status` and `backend` are empty for a request that was not answered.

use std::io::{BufWriter, Write};
use std::time::Duration;

use super::{Outcome, client_addr};

/// The trace file's first line.
pub const TRACE_HEADER: &str = "intended_ms,start_ms,end_ms,status,backend,cost_ms,client,outcome";

/// Writes `outcomes` to `writer` as CSV: the header, then a line per outcome in the order
/// given. Buffered here, so a bare `File` is fine.
pub fn write_trace(writer: impl Write, outcomes: &[Outcome]) -> std::io::Result<()> {
    let mut w = BufWriter::new(writer);
    writeln!(w, "{TRACE_HEADER}")?;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    for o in outcomes {
        write!(w, "{:.3},{:.3},", ms(o.intended), ms(o.started))?;
        if let Some(end) = o.ended {
            write!(w, "{:.3}", ms(end))?;
        }
        w.write_all(b",")?;
        if let Some(status) = o.status {
            write!(w, "{status}")?;
        }
        w.write_all(b",")?;
        if let Some(backend) = &o.backend {
            write_field(&mut w, backend)?;
        }
        writeln!(
            w,
            ",{:.3},{},{}",
            o.cost_ms,
            client_addr(o.client),
            o.verdict().as_str()
        )?;
    }
    w.flush()
}

/// A text field, quoted (RFC 4180: doubled quotes inside) when it holds a comma, a quote or a
/// line break.
fn write_field(w: &mut impl Write, text: &str) -> std::io::Result<()> {
    if text.contains([',', '"', '\n', '\r']) {
        write!(w, "\"{}\"", text.replace('"', "\"\""))
    } else {
        w.write_all(text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_outcome_has_its_line() {
        let answered = Outcome {
            intended: Duration::from_micros(1500),
            started: Duration::from_micros(1750),
            latency: Some(Duration::from_millis(2)),
            ended: Some(Duration::from_micros(3500)),
            status: Some(200),
            backend: Some("a".into()),
            cost_ms: 1.25,
            timed_out: false,
            client: 251,
        };
        let outcomes = [
            answered.clone(),
            Outcome {
                status: Some(503),
                backend: Some("b,\"c\"".into()),
                ..answered.clone()
            },
            Outcome {
                latency: None,
                ended: None,
                status: None,
                backend: None,
                timed_out: true,
                ..answered.clone()
            },
            Outcome {
                latency: None,
                ended: None,
                status: None,
                backend: None,
                ..answered
            },
        ];
        let mut out = Vec::new();
        write_trace(&mut out, &outcomes).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "intended_ms,start_ms,end_ms,status,backend,cost_ms,client,outcome\n\
             1.500,1.750,3.500,200,a,1.250,127.1.1.2,ok\n\
             1.500,1.750,3.500,503,\"b,\"\"c\"\"\",1.250,127.1.1.2,http_error\n\
             1.500,1.750,,,,1.250,127.1.1.2,timeout\n\
             1.500,1.750,,,,1.250,127.1.1.2,error\n"
        );
    }
}
