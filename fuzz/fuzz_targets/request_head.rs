//! The data plane's request_head parser on arbitrary bytes (proxy::fuzzing::request_head).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| proxy::fuzzing::request_head(data));
