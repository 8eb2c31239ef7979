//! The configuration loader on arbitrary text: it must answer every file with a configuration
//! or with its problems, never panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = fulcrum::config::parse(std::path::Path::new("fuzz.toml"), text);
    }
});
