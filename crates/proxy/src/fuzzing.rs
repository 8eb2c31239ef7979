//! Entry points for the fuzz targets (`fuzz/`, `scripts/fuzz`): the data plane's parsers, as
//! the proxy calls them, on arbitrary bytes, with the invariants their callers rely on checked.
//! Built only with the `fuzzing` feature.

use std::net::{IpAddr, Ipv4Addr};

use crate::http1::{self, ClientAddr, ClientSide, Limits};
use crate::settings::HashKey;

/// A request head from a client: parsed and rewritten for the backend, then finished as an
/// attempt finishes it. The first byte picks what a hash algorithm would look for.
pub fn request_head(input: &[u8]) {
    let Some((&choice, buf)) = input.split_first() else {
        return;
    };
    let keys = [
        None,
        Some(HashKey::Header("X-User".into())),
        Some(HashKey::Cookie("id".into())),
        Some(HashKey::Uri),
    ];
    let key = &keys[usize::from(choice) % keys.len()];
    let trusted: Vec<ipnet::IpNet> = if choice & 0x10 != 0 {
        vec!["127.0.0.0/8".parse().expect("a valid network")]
    } else {
        Vec::new()
    };
    let client = ClientAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), &trusted);
    let limits = Limits {
        max_headers: 100,
        max_header_bytes: 16 * 1024,
        key: key.as_ref(),
    };
    let mut out = Vec::new();
    if let Ok(Some(head)) = http1::parse_request(buf, limits, &client, &mut out) {
        assert!(head.head_len <= buf.len());
        for range in [
            &head.method,
            &head.target,
            &head.key,
            &head.referer,
            &head.user_agent,
        ] {
            assert!(range.start <= range.end && range.end <= head.head_len);
        }
        http1::finish_request_head(&mut out, Some(buf.len() - head.head_len));
        assert!(out.ends_with(b"\r\n\r\n"));
    }
}

/// A chunked body, fed in two pieces split where the first byte says (as bytes arrive).
pub fn chunked(input: &[u8]) {
    let Some((&split, body)) = input.split_first() else {
        return;
    };
    let split = usize::from(split).min(body.len());
    let mut decoder = http1::Chunked::default();
    let mut data = 0usize;
    let mut consumed = 0usize;
    for piece in [&body[..split], &body[split..]] {
        match decoder.advance(piece, |d| data += d.len()) {
            Ok(n) => {
                assert!(n <= piece.len());
                consumed += n;
                if decoder.is_done() {
                    break;
                }
            }
            Err(_) => return,
        }
    }
    // The data decoded is never more than the bytes it came in.
    assert!(data <= consumed);
}

/// A response head from a backend, for a client of the kind the first byte says.
pub fn response_head(input: &[u8]) {
    let Some((&kind, buf)) = input.split_first() else {
        return;
    };
    let client = ClientSide {
        http11: kind & 1 != 0,
        keep_alive: kind & 2 != 0,
        is_head: kind & 4 != 0,
    };
    let mut out = Vec::new();
    match http1::parse_response(buf, client, &mut out) {
        Ok(Some(http1::ResponseHead::Final(head))) => {
            assert!(head.head_len <= buf.len());
            assert!(out.ends_with(b"\r\n\r\n"));
        }
        Ok(Some(http1::ResponseHead::Interim(n))) => assert!(n <= buf.len()),
        Ok(None) | Err(_) => {}
    }
}
