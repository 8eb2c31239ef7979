//! The cost of the HTTP/1.1 parsers on the request path, as the proxy calls them (through the
//! `fuzzing` entry points, which also check their invariants): a request head parsed and
//! rewritten for the backend, a response head rewritten for the client, and a chunked body
//! decoded as it arrives. Run with `cargo bench -p proxy --features fuzzing --bench parse`;
//! used to check that splitting a parser into smaller functions costs nothing.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use proxy::fuzzing;

/// A browser's GET: 11 header lines, about 600 bytes. The first byte picks no hash key.
const BROWSER_GET: &[u8] = b"\x00GET /static/app.js?v=31 HTTP/1.1\r\n\
Host: www.example.com\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n\
Accept: */*\r\n\
Accept-Language: en-GB,en;q=0.5\r\n\
Accept-Encoding: gzip, deflate, br, zstd\r\n\
Referer: https://www.example.com/index.html\r\n\
Connection: keep-alive\r\n\
Cookie: id=4f2a9c; theme=dark; session=8c1d77e0a4b94e0f9a1c\r\n\
Sec-Fetch-Dest: script\r\n\
Sec-Fetch-Mode: no-cors\r\n\
If-None-Match: \"5e1f-61a3c\"\r\n\r\n";

/// An API POST with a body length, hashed on a cookie (first byte 2), from a trusted
/// address with X-Forwarded-For (bit 0x10).
const API_POST: &[u8] = b"\x12POST /v1/orders HTTP/1.1\r\n\
Host: api.example.com\r\n\
Content-Type: application/json\r\n\
Content-Length: 512\r\n\
X-Forwarded-For: 203.0.113.7\r\n\
Cookie: id=user-1234\r\n\
Accept: application/json\r\n\r\n";

/// A backend's 200 for an HTTP/1.1 keep-alive client (first byte 3).
const RESPONSE: &[u8] = b"\x03HTTP/1.1 200 OK\r\n\
Server: backend\r\n\
Date: Thu, 26 Nov 2026 12:00:00 GMT\r\n\
Content-Type: text/html; charset=utf-8\r\n\
Content-Length: 12345\r\n\
Connection: keep-alive\r\n\
Cache-Control: max-age=60\r\n\
ETag: \"5e1f-61a3c\"\r\n\
Vary: Accept-Encoding\r\n\r\n";

/// A chunked body: `chunks` chunks of `size` bytes, with a chunk extension on every tenth
/// and a trailer, behind the split byte (in the middle).
fn chunked_body(chunks: usize, size: usize) -> Vec<u8> {
    let mut body = vec![128u8];
    for i in 0..chunks {
        if i % 10 == 0 {
            body.extend_from_slice(format!("{size:x};name=value\r\n").as_bytes());
        } else {
            body.extend_from_slice(format!("{size:x}\r\n").as_bytes());
        }
        body.extend(std::iter::repeat_n(b'a', size));
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"0\r\nX-Checksum: 1\r\n\r\n");
    body
}

fn parsers(c: &mut Criterion) {
    let mut group = c.benchmark_group("http1");
    for (name, input) in [
        ("request/browser_get", BROWSER_GET),
        ("request/api_post", API_POST),
    ] {
        group.throughput(Throughput::Bytes(input.len() as u64));
        group.bench_function(name, |b| b.iter(|| fuzzing::request_head(black_box(input))));
    }
    group.throughput(Throughput::Bytes(RESPONSE.len() as u64));
    group.bench_function("response/200", |b| {
        b.iter(|| fuzzing::response_head(black_box(RESPONSE)))
    });
    for (name, chunks, size) in [("chunked/64x16", 64, 16), ("chunked/16x1024", 16, 1024)] {
        let body = chunked_body(chunks, size);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(name, |b| b.iter(|| fuzzing::chunked(black_box(&body))));
    }
    group.finish();
}

criterion_group!(benches, parsers);
criterion_main!(benches);
