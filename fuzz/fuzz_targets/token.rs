//! A token presented by anyone: verifying it ends in claims or a reason,
//! and nothing but a token the pool signed is accepted.
#![no_main]

use std::collections::HashSet;

use carmi_api::token::PublicKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let key = PublicKey::from_text("Vx3bH7mL0fQ2pK9sT4wZ1cR8yN6uE5aD3gJ2hF7kM0o")
        .expect("a 32-byte key");
    let verified = key.verify(text, 1_800_000_000, &HashSet::new());
    assert!(verified.is_err(), "nobody holds this key's private half");
});
