//! The data plane's response_head parser on arbitrary bytes (proxy::fuzzing::response_head).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| proxy::fuzzing::response_head(data));
