//! Arbitrary bytes from a client through a running proxy to a backend, both in this process on
//! loopback (proxy::fuzzing::whole_request): the proxy answers in valid HTTP/1.1 or closes,
//! forwards only well-formed requests, and stays whole.
#![no_main]

libfuzzer_sys::fuzz_target!(
    init: {
        // libFuzzer's own main runs instead of Rust's, which would ignore SIGPIPE: a write to
        // a client that has reset its connection would kill the process rather than fail.
        // SAFETY: setting a signal's disposition to SIG_IGN, before any thread of ours exists.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
    },
    |data: &[u8]| proxy::fuzzing::whole_request(data)
);
