//! A machine ad or submit-time ad in either syntax: parsing it, and matching
//! it against itself, must end in an ad or an error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(ad) = classad::ClassAd::parse_any(text) {
        if let Ok(req) = classad::parse_expr("MY.Requirements && TARGET.Requirements") {
            let _ = classad::eval_with(&req, Some(&ad), Some(&ad));
        }
    }
});
