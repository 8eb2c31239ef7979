//! The pieces a log line is written from, each appended to the worker's batch (a `Vec<u8>`
//! reused from line to line): numbers, addresses, times and request bytes, without the
//! formatting machinery of `std::fmt` (each `write!` costs a dynamic call per piece) and
//! without allocating.
//!
//! Escaping is nginx's default for a log variable (`ngx_http_log_escape` in
//! src/http/modules/ngx_http_log_module.c): `"`, `\`, control bytes, DEL and every byte from
//! 0x80 up become `\xHH` (upper-case hex); everything else is written as it is.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, SystemTime};

/// Which bytes nginx's log escapes, looked up (one load a byte).
static ESCAPED: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = !(0x20 <= b && b < 0x7f) || b == b'"' as usize || b == b'\\' as usize;
        b += 1;
    }
    table
};

/// Whether nginx's log escapes byte `b`.
#[inline]
fn escaped(b: u8) -> bool {
    ESCAPED[usize::from(b)]
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// `bytes` as nginx writes a variable's value: escaped (see the module's doc).
pub(crate) fn escape(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut plain = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if escaped(b) {
            out.extend_from_slice(&bytes[plain..i]);
            out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
            plain = i + 1;
        }
    }
    out.extend_from_slice(&bytes[plain..]);
}

/// `bytes` escaped, or `-` when there are none (a field nginx found empty or absent).
pub(crate) fn escape_or_dash(out: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.is_empty() {
        out.push(b'-');
    } else {
        escape(out, bytes);
    }
}

/// `n` in decimal: below 1,000 (an address's octet, a status, most sizes) digit by digit.
#[inline]
pub(crate) fn number(out: &mut Vec<u8>, n: u64) {
    let digit = |d: u64| b'0' + (d % 10) as u8;
    if n < 10 {
        out.push(digit(n));
    } else if n < 100 {
        out.extend_from_slice(&[digit(n / 10), digit(n)]);
    } else if n < 1000 {
        out.extend_from_slice(&[digit(n / 100), digit(n / 10), digit(n)]);
    } else {
        large_number(out, n);
    }
}

/// Appends `n` in decimal, a digit at a time (also the head writer's `Content-Length`).
pub(crate) fn large_number(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// `n` in decimal, at least three digits (nginx's `%03ui` for `$status`, `%03M`).
pub(crate) fn number3(out: &mut Vec<u8>, n: u64) {
    if n < 100 {
        out.push(b'0');
    }
    if n < 10 {
        out.push(b'0');
    }
    number(out, n);
}

/// An address as `Display` writes it (`127.0.0.1`, `::1`).
pub(crate) fn ip(out: &mut Vec<u8>, addr: IpAddr) {
    match addr {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                number(out, u64::from(octet));
            }
        }
        // Rare enough for `Display` (and its rules for `::` and embedded IPv4).
        IpAddr::V6(v6) => {
            use std::io::Write as _;
            let _ = write!(out, "{v6}");
        }
    }
}

/// A socket address as `Display` writes it (`127.0.0.1:9001`, `[::1]:9001`).
pub(crate) fn socket(out: &mut Vec<u8>, addr: SocketAddr) {
    match addr {
        SocketAddr::V4(v4) => {
            ip(out, IpAddr::V4(*v4.ip()));
            out.push(b':');
            number(out, u64::from(v4.port()));
        }
        SocketAddr::V6(v6) => {
            use std::io::Write as _;
            let _ = write!(out, "{v6}");
        }
    }
}

/// `d` in seconds with three decimals, rounded, exactly as `format!("{:.3}", d.as_secs_f64())`
/// writes it (what the `combined` line's `rt=` and `urt=` always said), in integers. Only a
/// duration exactly halfway between two milliseconds, or one too long for the float to hold
/// its nanoseconds, takes the float's way: there the float's own rounding decides.
pub(crate) fn seconds_rounded(out: &mut Vec<u8>, d: Duration) {
    let nanos = d.subsec_nanos();
    if nanos % 1_000_000 == 500_000 || d.as_secs() >= 1 << 20 {
        use std::io::Write as _;
        let _ = write!(out, "{:.3}", d.as_secs_f64());
        return;
    }
    let millis = d.as_secs() * 1000 + u64::from((nanos + 500_000) / 1_000_000);
    number(out, millis / 1000);
    out.push(b'.');
    number3(out, millis % 1000);
}

/// `millis` as nginx's `%T.%03M`: whole seconds, a dot, three digits of milliseconds.
pub(crate) fn millis(out: &mut Vec<u8>, millis: u64) {
    number(out, millis / 1000);
    out.push(b'.');
    number3(out, millis % 1000);
}

/// `d` truncated to milliseconds, as nginx's `$request_time` and `$upstream_response_time`.
pub(crate) fn seconds_truncated(out: &mut Vec<u8>, d: Duration) {
    millis(out, u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
}

/// The time strings of one second, made once per second (nginx's `ngx_time_update` keeps its
/// log's time strings the same way, src/core/ngx_times.c): a worker's lines in the same
/// second copy them. UTC, as every time fulcrum writes.
#[derive(Debug)]
pub(crate) struct Clock {
    /// The second (since the epoch) the strings are of; `u64::MAX` before the first.
    second: u64,
    /// `26/Nov/2026:23:12:21 +0000`: nginx's `$time_local`.
    local: [u8; 26],
    /// `2026-11-26T23:12:21+00:00`: nginx's `$time_iso8601`.
    iso: [u8; 25],
}

impl Default for Clock {
    fn default() -> Clock {
        Clock {
            second: u64::MAX,
            local: [b' '; 26],
            iso: [b' '; 25],
        }
    }
}

/// Seconds since the epoch, and the milliseconds of the second (0 for a time before it).
pub(crate) fn since_epoch(t: SystemTime) -> (u64, u64) {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    (d.as_secs(), u64::from(d.subsec_millis()))
}

impl Clock {
    /// `$time_local` of the second `t` is in.
    pub(crate) fn local(&mut self, t: SystemTime) -> &[u8] {
        self.at(since_epoch(t).0);
        &self.local
    }

    /// `$time_iso8601` of the second `t` is in.
    pub(crate) fn iso(&mut self, t: SystemTime) -> &[u8] {
        self.at(since_epoch(t).0);
        &self.iso
    }

    fn at(&mut self, second: u64) {
        if second == self.second {
            return;
        }
        self.second = second;
        let t = chrono::DateTime::<chrono::Utc>::from_timestamp(
            i64::try_from(second).unwrap_or(i64::MAX),
            0,
        )
        .unwrap_or_default();
        let mut text = Vec::with_capacity(32);
        {
            use std::io::Write as _;
            let _ = write!(text, "{}", t.format("%d/%b/%Y:%H:%M:%S +0000"));
        }
        copy_into(&mut self.local, &text);
        text.clear();
        {
            use std::io::Write as _;
            let _ = write!(text, "{}", t.format("%Y-%m-%dT%H:%M:%S+00:00"));
        }
        copy_into(&mut self.iso, &text);
    }
}

/// `from` into `to`, as much as fits (a year past 9999 would not; the rest stays blank).
fn copy_into(to: &mut [u8], from: &[u8]) {
    let n = to.len().min(from.len());
    to[..n].copy_from_slice(&from[..n]);
}

/// The user an `Authorization: Basic` value names (nginx's `$remote_user`,
/// `ngx_http_auth_basic_user` in src/http/ngx_http_core_module.c): the scheme, case aside,
/// then spaces, then base64 of `user:password`; the user is what comes before the first `:`,
/// appended to `out`. `None` (nginx: not found, `-`) for any other value, or an empty user.
pub(crate) fn basic_user(value: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let scheme = value.get(..6)?;
    if !scheme.eq_ignore_ascii_case(b"Basic ") {
        return None;
    }
    let skip = value[6..].iter().take_while(|&&b| b == b' ').count();
    let encoded = &value[6 + skip..];
    let start = out.len();
    let user = decode_base64(encoded, out)
        .and_then(|()| out[start..].iter().position(|&b| b == b':'))
        .filter(|&colon| colon > 0);
    match user {
        Some(colon) => {
            out.truncate(start + colon);
            Some(())
        }
        // An empty user (`:password`), no colon, or no base64: nginx's not found.
        None => {
            out.truncate(start);
            None
        }
    }
}

/// Standard base64 (RFC 4648 §4) with its padding, appended to `out`; `None` if `text` is
/// not that.
fn decode_base64(text: &[u8], out: &mut Vec<u8>) -> Option<()> {
    fn value(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    let text = text
        .strip_suffix(b"==")
        .or_else(|| text.strip_suffix(b"="))
        .unwrap_or(text);
    if text.len() % 4 == 1 {
        return None;
    }
    for chunk in text.chunks(4) {
        let mut bits = 0u32;
        for &c in chunk {
            bits = (bits << 6) | value(c)?;
        }
        let bytes = (chunk.len() * 6) / 8;
        bits <<= 6 * (4 - chunk.len() as u32);
        out.extend_from_slice(&bits.to_be_bytes()[1..1 + bytes]);
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_addresses_are_display_s() {
        for n in [0, 7, 10, 99, 100, 12345, u64::MAX] {
            let mut out = Vec::new();
            number(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
            let mut out = Vec::new();
            number3(&mut out, n);
            assert_eq!(out, format!("{n:03}").as_bytes());
        }
        for a in [
            "127.0.0.1:80",
            "10.200.3.4:65535",
            "[::1]:9001",
            "[fe80::1]:1",
        ] {
            let a: SocketAddr = a.parse().unwrap();
            let mut out = Vec::new();
            socket(&mut out, a);
            assert_eq!(out, a.to_string().as_bytes());
            let mut out = Vec::new();
            ip(&mut out, a.ip());
            assert_eq!(out, a.ip().to_string().as_bytes());
        }
    }

    /// `rt=` and `urt=` stay byte for byte what the float formatting wrote, over durations
    /// near every rounding boundary and spread over the range.
    #[test]
    fn rounded_seconds_are_the_float_s() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut cases = vec![
            Duration::ZERO,
            Duration::from_nanos(499_999),
            Duration::from_nanos(500_000),
            Duration::from_nanos(500_001),
            Duration::from_nanos(1_500_000),
            Duration::from_nanos(2_500_000),
            Duration::from_millis(999) + Duration::from_nanos(500_000),
            Duration::from_secs(1 << 20) + Duration::from_nanos(1_499_999),
        ];
        for _ in 0..200_000 {
            let secs = next() % 5000;
            let ms = next() % 1000;
            let around = (next() % 5) as i64 - 2;
            let nanos = (ms * 1_000_000 + 500_000) as i64 + around;
            cases.push(Duration::new(secs, nanos.clamp(0, 999_999_999) as u32));
            cases.push(Duration::from_nanos(next() % 10_000_000_000));
        }
        for d in cases {
            let mut out = Vec::new();
            seconds_rounded(&mut out, d);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                format!("{:.3}", d.as_secs_f64()),
                "{d:?}"
            );
        }
    }

    #[test]
    fn escaping_is_nginx_s() {
        let mut out = Vec::new();
        escape(&mut out, b"a \"b\"\\c\x01\x7f\xff~");
        assert_eq!(out, b"a \\x22b\\x22\\x5Cc\\x01\\x7F\\xFF~");
        let mut out = Vec::new();
        escape_or_dash(&mut out, b"");
        assert_eq!(out, b"-");
    }

    #[test]
    fn time_strings_are_made_once_a_second() {
        let mut clock = Clock::default();
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_456_519_250);
        assert_eq!(clock.local(t), b"23/Nov/2026:17:55:19 +0000");
        assert_eq!(clock.iso(t), b"2026-11-23T17:55:19+00:00");
        assert_eq!(since_epoch(t), (1_795_456_519, 250));
        let later = t + Duration::from_millis(800);
        assert_eq!(clock.local(later), b"23/Nov/2026:17:55:20 +0000");
    }

    #[test]
    fn the_basic_user_is_nginx_s() {
        let user = |v: &[u8]| {
            let mut out = Vec::new();
            basic_user(v, &mut out).map(|()| String::from_utf8_lossy(&out).into_owned())
        };
        // "alice:secret", "bob:", "a:b:c", "nocolon"
        assert_eq!(user(b"Basic YWxpY2U6c2VjcmV0").as_deref(), Some("alice"));
        assert_eq!(user(b"basic   Ym9iOg==").as_deref(), Some("bob"));
        assert_eq!(user(b"Basic YTpiOmM=").as_deref(), Some("a"));
        assert_eq!(user(b"Basic bm9jb2xvbg=="), None);
        assert_eq!(user(b"Bearer YWxpY2U6c2VjcmV0"), None);
        assert_eq!(user(b"Basic !!!!"), None);
        assert_eq!(user(b"Basic"), None);
        // ":pw": an empty user is none.
        assert_eq!(user(b"Basic OnB3"), None);
    }
}
