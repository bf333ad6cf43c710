//! A ClassAd expression from anyone (a class's requirements, an owner's
//! policy, `classad eval`): parsing and evaluating it must end in a value or
//! an error, and the two parsers must agree where the fast one answers.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = classad::parse_expr(text);
    if let Ok(expr) = &parsed {
        let _ = classad::eval_with(expr, None, None);
    }
    // The fast parser is a shortcut for common expressions; where it answers,
    // it must build the same tree as the full grammar.
    if let Some(fast) = classad::parse::parse_expr_fast(text) {
        let full = classad::parse::parse_expr_pest(text)
            .expect("the full grammar accepts what the fast parser accepts");
        assert_eq!(fast.to_string(), full.to_string(), "for {text:?}");
    }
});
