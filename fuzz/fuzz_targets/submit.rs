//! A submit description from a user: parsing it ends in a job or a list of
//! errors, never a crash or a job that breaks the pool's limits.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = carmi_proto::submit::parse("fuzz.sub", text);
});
