//! An HTTP/2 request's fields through the h2 server and the translation into the HTTP/1.1 head
//! a backend gets (proxy::fuzzing::h2_request_head).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| proxy::fuzzing::h2_request_head(data));
