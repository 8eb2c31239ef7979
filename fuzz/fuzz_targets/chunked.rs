//! The data plane's chunked parser on arbitrary bytes (proxy::fuzzing::chunked).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| proxy::fuzzing::chunked(data));
