//! Malformed input: every broken expression or ad is a [`ParseError`] that
//! says where and what, never a panic or a stack overflow. Also the runtime
//! counterparts: unknown functions, wrong arities, reference cycles and
//! very long reference chains evaluate to a value instead of crashing.
//!
//! Tests that feed very deep or very long input run their body in a child
//! process (this same test binary, filtered to that one test), on an ordinary
//! test thread: a stack overflow aborts the whole process, and isolating it
//! turns an abort into one failing test instead of a dead test binary.

use std::process::Command;

use classad::parse::MAX_NESTING;
use classad::{ClassAd, ParseError, Value, eval_with, parse_expr};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

const CHILD_ENV: &str = "CLASSAD_MALFORMED_CHILD";

/// Runs `body` in a child process running only the test `name`; fails with the
/// child's output when it panics or dies (a stack overflow aborts).
fn isolated(name: &str, body: fn()) {
    if std::env::var_os(CHILD_ENV).is_some() {
        body();
        return;
    }
    let exe = std::env::current_exe().expect("path of the test binary");
    let out = Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .output()
        .expect("run the test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "`{name}` failed in its child process ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

/// Checks what every error must satisfy, and that it prints.
#[track_caller]
fn sane(src: &str, e: &ParseError) {
    assert!(e.line >= 1 && e.column >= 1, "{src:?}: {e:?}");
    assert!(
        e.line <= src.split('\n').count(),
        "{src:?}: line {} past the end",
        e.line
    );
    assert!(!e.message.is_empty(), "{src:?}: empty message");
    let shown = e.to_string();
    assert!(shown.contains(&e.message), "{src:?}: {shown}");
}

#[track_caller]
fn expr_err(src: &str) -> ParseError {
    match parse_expr(src) {
        Ok(e) => panic!("{src:?} should not parse, got {e:?}"),
        Err(err) => {
            sane(src, &err);
            err
        }
    }
}

#[track_caller]
fn ad_err(src: &str) -> ParseError {
    match ClassAd::parse(src) {
        Ok(ad) => panic!("{src:?} should not parse as an ad, got {ad}"),
        Err(err) => {
            sane(src, &err);
            err
        }
    }
}

#[track_caller]
fn old_err(src: &str) -> ParseError {
    match ClassAd::parse_old(src) {
        Ok(ad) => panic!("{src:?} should not parse as an old ad, got {ad}"),
        Err(err) => {
            sane(src, &err);
            err
        }
    }
}

#[track_caller]
fn at(err: &ParseError, line: usize, column: usize) {
    assert_eq!(
        (err.line, err.column),
        (line, column),
        "error reported at the wrong place: {err}"
    );
}

#[track_caller]
fn says(err: &ParseError, parts: &[&str]) {
    for p in parts {
        assert!(
            err.message.contains(p),
            "message {:?} should mention {p:?}",
            err.message
        );
    }
}

fn eval(src: &str) -> Value {
    let e = parse_expr(src).unwrap_or_else(|err| panic!("{src:?} should parse: {err}"));
    eval_with(&e, None, None)
}

// ---------------------------------------------------------------------------
// Expressions
// ---------------------------------------------------------------------------

#[test]
fn malformed_expressions_are_errors() {
    for src in [
        // Nothing at all.
        "",
        " ",
        "\n\t",
        "/* only a comment */",
        "// only a comment",
        // Unbalanced brackets.
        "(",
        ")",
        "()",
        "(1",
        "1)",
        "((1)",
        "(1))",
        "[",
        "]",
        "[a = 1",
        "a = 1]",
        "{",
        "}",
        "{1,",
        "{1 2}",
        "{,}",
        "{1]",
        "(1]",
        "[a = 1)",
        "f(",
        "f(1,",
        "f(,1)",
        "f(1 2)",
        "f(1))",
        "a[",
        "a[]",
        "a[1",
        "a]",
        // Unterminated strings, quoted names and comments.
        "\"abc",
        "\"abc\\\"",
        "\"",
        "x + \"abc",
        "'abc",
        "'a\\'",
        "'",
        "MY.'abc",
        "1 /* never closed",
        // Stray and doubled operators.
        "&& true",
        "1 +",
        "1 2",
        "1 === 2",
        "1 = 2",
        "a ==",
        "* 2",
        "1 * * 2",
        "!",
        "-",
        "~",
        "a !",
        "a ? b",
        "a ? b :",
        "? a : b",
        ":",
        "a ?:",
        "a ?: !b",
        "a ?: ~b",
        "a ?: +b",
        "a ?: -b",
        // Selections and scopes.
        "a.",
        "MY.",
        "TARGET.",
        "parent.",
        ".",
        ".a",
        "a..b",
        "a.b.",
        "MY.1",
        "a.(b)",
        "a.\"b\"",
        // Numbers and keywords.
        "1.",
        "1e",
        "1e+",
        "1..2",
        "1.5.5",
        "1a",
        "true false",
        "is",
        "isnt 1",
        "x is",
        "undefined(1)",
        // Not expressions at all.
        ";",
        ",",
        "a = 1",
        "a; b",
        "#",
        "@",
        "$x",
        "`x`",
        "a\u{0}b",
        "ü",
    ] {
        expr_err(src);
    }
}

#[test]
fn errors_point_at_the_offending_token() {
    let e = expr_err("1 + )");
    at(&e, 1, 5);
    says(&e, &["expected", "expression", "found", ")"]);

    let e = expr_err("1 2");
    at(&e, 1, 3);
    says(&e, &["operator", "found `2`"]);

    let e = expr_err("a.");
    at(&e, 1, 3);
    says(&e, &["attribute name", "end of input"]);

    let e = expr_err("MY.");
    at(&e, 1, 4);
    says(&e, &["attribute name", "end of input"]);

    let e = expr_err("&& true");
    at(&e, 1, 1);
    says(&e, &["expression", "&&"]);

    let e = expr_err("1 === 2");
    at(&e, 1, 5);

    let e = expr_err("(1 + 2");
    at(&e, 1, 7);
    says(&e, &["end of input"]);

    let e = expr_err("");
    at(&e, 1, 1);
    says(&e, &["expression", "end of input"]);

    // The opening quote of an unterminated string.
    let e = expr_err("x + \"abc");
    at(&e, 1, 5);

    // Lines and columns count from 1; columns count characters, not bytes.
    let e = expr_err("a +\n  * 2");
    at(&e, 2, 3);
    assert_eq!(e.line_text, "  * 2");
    let e = expr_err("\"ünï\" + )");
    at(&e, 1, 9);
    let e = expr_err("f(1,\n\n   2 3)");
    at(&e, 3, 6);
}

#[test]
fn unknown_functions_and_wrong_arities_parse_and_evaluate_to_error() {
    for src in [
        "nosuch(1)",
        "nosuch()",
        "NoSuch(1, \"a\", {})",
        "size()",
        "size(1, 2)",
        "size({1}, {2})",
        "floor()",
        "floor(1, 2)",
        "ifThenElse(true)",
        "isUndefined()",
    ] {
        assert_eq!(eval(src), Value::Error, "{src}");
    }
    // The ERROR is an ordinary value that the rest of the expression can test.
    assert_eq!(eval("nosuch(1) =?= error"), Value::Bool(true));
}

#[test]
fn reference_cycles_are_undefined() {
    assert_eq!(eval("[a = b; b = a].a"), Value::Undefined);
    assert_eq!(eval("[a = a].a"), Value::Undefined);
    assert_eq!(eval("[a = b + 1; b = c * 2; c = a].a"), Value::Undefined);
    assert_eq!(eval("[a = [b = parent.a].b].a"), Value::Undefined);
    let ad = ClassAd::parse("[ a = b; b = a; c = a =?= undefined ]").expect("parses");
    assert_eq!(ad.eval_attr("a"), Value::Undefined);
    assert_eq!(ad.eval_attr("c"), Value::Bool(true));
    // MY and TARGET referring to each other.
    let my = ClassAd::parse("[ x = TARGET.y ]").expect("parses");
    let target = ClassAd::parse("[ y = TARGET.x ]").expect("parses");
    assert_eq!(my.eval_attr_against("x", Some(&target)), Value::Undefined);
    // A cycle is not confused with using the same attribute twice.
    assert_eq!(eval("[a = 1; b = a + a].b"), Value::Int(2));
}

// ---------------------------------------------------------------------------
// Ads
// ---------------------------------------------------------------------------

#[test]
fn malformed_new_syntax_ads_are_errors() {
    for src in [
        "",
        "a = 1",
        "[",
        "]",
        "[a = 1",
        "[a = 1;",
        "[a = 1 b = 2]",
        "[a 1]",
        "[a]",
        "[a =]",
        "[= 1]",
        "[a = 1; b]",
        "[1 = 2]",
        "[\"a\" = 2]",
        "['a = 1]",
        "[a = \"x]",
        "[a = 1]]",
        "[[a = 1]",
        "[a = 1] junk",
        "[a = 1] [b = 2]",
        "[a = (1]",
        "[a = {1]",
        "{a = 1}",
        "(a = 1)",
        "[a == 1]",
        "[a = 1, b = 2]",
    ] {
        ad_err(src);
    }
    let e = ad_err("[a = 1 b = 2]");
    at(&e, 1, 8);
    says(&e, &["found `b"]);
    let e = ad_err("[a 1]");
    at(&e, 1, 2);
    let e = ad_err("[\n  a = 1;\n  b = 2\n");
    at(&e, 4, 1);
    says(&e, &["end of input"]);
    let e = ad_err("[\n  a = 1;\n  b 2\n]");
    at(&e, 3, 3);
}

#[test]
fn malformed_old_syntax_lines_report_their_line() {
    for (src, line) in [
        ("A = 1\nB 2\nC = 3", 2),
        ("A = 1\nB = 2 +\nC = 3", 2),
        ("A = 1\n\n# comment\nB = (", 4),
        ("= 3", 1),
        ("A = 1\nB = \"unterminated", 2),
        ("'bad name = 1", 1),
        ("A == 1", 1),
        ("A = 1\nB = 2\nC =", 3),
        ("A = 1\n[B = 2]", 2),
        ("A = 1\n  B = )", 2),
        ("A = 1\n'quoted name' = 1 2", 2),
        ("A = 1\r\nB = 1 +\r\n", 2),
    ] {
        let e = old_err(src);
        assert_eq!(e.line, line, "{src:?}: {e}");
    }
    let e = old_err("A = 1\nB = 2 +\nC = 3");
    at(&e, 2, 8);
    assert_eq!(e.line_text, "B = 2 +");
    says(&e, &["end of input"]);
    let e = old_err("A = 1\n  B = )");
    at(&e, 2, 7);
    says(&e, &["found `)`"]);
    let e = old_err("A = 1\n'quoted name' = 1 2");
    at(&e, 2, 19);
}

/// A tree too deep for the parser on a line whose name is quoted must still
/// report that line, not line 1.
#[test]
fn old_syntax_depth_errors_report_their_line() {
    let deep = "!".repeat(5_000);
    for src in [
        format!("A = 1\nB = 2\nC = {deep}1"),
        format!("A = 1\nB = 2\n'C' = {deep}1"),
    ] {
        let e = old_err(&src);
        assert_eq!(e.line, 3, "{}: {}", e.column, e.message);
    }
}

// ---------------------------------------------------------------------------
// Very deep and very long input
// ---------------------------------------------------------------------------

fn nested(open: &str, inner: &str, close: &str, n: usize) -> String {
    format!("{}{inner}{}", open.repeat(n), close.repeat(n))
}

fn deep_nesting_body() {
    let n = 10_000;
    for src in [
        nested("(", "1", ")", n),
        nested("[a = ", "1", "]", n),
        nested("[", "", "]", n),
        nested("{", "1", "}", n),
        nested("{", "", "}", n),
        nested("f(", "1", ")", n),
        nested("a[", "0", "]", n),
        nested("([{", "1", "}])", n / 3),
        "(".repeat(n),
        "[".repeat(n),
        "{".repeat(n),
        "a ? ".repeat(n) + "1",
        "a ?: ".repeat(n) + "1",
    ] {
        let err = expr_err(&src);
        assert_eq!(err.line, 1);
        if src.starts_with('[') {
            ad_err(&src);
            old_err(&format!("A = {src}"));
        }
    }
}

#[test]
fn ten_thousand_nested_brackets_are_an_error() {
    isolated(
        "ten_thousand_nested_brackets_are_an_error",
        deep_nesting_body,
    );
}

/// Comments are skipped by the grammar, so a quote inside one must not make
/// the nesting check skip the brackets after it.
fn deep_nesting_after_a_comment_body() {
    for prefix in ["/* \" */ ", "/* ' */ ", "// don't\n", "// \"\n"] {
        for n in [150, MAX_NESTING, 300, 10_000] {
            let src = format!("{prefix}{}", nested("(", "1", ")", n));
            if let Ok(e) = parse_expr(&src) {
                let _ = eval_with(&e, None, None);
                let _ = e.to_string();
            }
        }
    }
}

#[test]
fn deep_nesting_after_a_comment_with_a_quote_does_not_crash() {
    isolated(
        "deep_nesting_after_a_comment_with_a_quote_does_not_crash",
        deep_nesting_after_a_comment_body,
    );
}

/// The deepest nesting the parser accepts must also be safe to build,
/// evaluate, print, compare and drop, on an ordinary test thread.
fn deepest_accepted_nesting_body() {
    let n = MAX_NESTING;
    for src in [
        nested("(", "1", ")", n),
        nested("{", "1", "}", n),
        nested("[a = ", "1", "]", n),
        nested("f(", "1", ")", n),
        "a ?: ".repeat(n) + "1",
        "a ? 1 : ".repeat(n) + "1",
        // Deep in brackets and in operators at once.
        nested("(", &format!("{}1", "!".repeat(100)), ")", n),
        nested("(", &vec!["1"; 300].join(" + "), ")", n),
        nested("[a = ", "1 + 2 * 3", "]", n / 2) + " + " + &nested("(", "1", ")", n / 2),
    ] {
        let e = parse_expr(&src).unwrap_or_else(|err| panic!("depth {n} is accepted: {err}"));
        let _ = eval_with(&e, None, None);
        let printed = e.to_string();
        assert_eq!(printed.len(), e.to_string().len());
        assert_eq!(e.clone(), e);
    }
    // One level more is refused.
    let e = expr_err(&nested("(", "1", ")", n + 1));
    says(&e, &["nested"]);
}

#[test]
fn deepest_accepted_nesting_does_not_overflow_the_stack() {
    isolated(
        "deepest_accepted_nesting_does_not_overflow_the_stack",
        deepest_accepted_nesting_body,
    );
}

/// Nesting limits count how deep brackets and conditionals are, not how many
/// there are side by side.
#[test]
fn many_sibling_conditionals_are_not_deep() {
    let n = MAX_NESTING + 50;
    let sum = vec!["(a ? 1 : 2)"; n].join(" + ");
    assert!(
        parse_expr(&sum).is_ok(),
        "{n} parenthesized conditionals in a row"
    );
    let list = format!("{{ {} }}", vec!["a ?: 1"; n].join(", "));
    assert!(parse_expr(&list).is_ok(), "a list of {n} `?:`");
    let defs: Vec<String> = (0..n).map(|i| format!("x{i} = y ? 1 : 2")).collect();
    let ad = ClassAd::parse(&format!("[ {} ]", defs.join("; ")))
        .unwrap_or_else(|e| panic!("an ad with {n} conditional attributes: {e}"));
    assert_eq!(ad.len(), n);
    let old = ClassAd::parse_old(&defs.join("\n")).expect("the same ad in old syntax");
    assert_eq!(old.len(), n);
    // The same with one more deeply nested (but legal) term, so that no
    // shortcut for shallow text applies.
    let depth = MAX_NESTING / 2 + 20;
    let deep = nested("(", "1", ")", depth);
    assert!(
        parse_expr(&format!("{sum} + {deep}")).is_ok(),
        "{n} parenthesized conditionals and a term {depth} deep"
    );
    let ad = ClassAd::parse(&format!("[ {}; z = {deep} ]", defs.join("; "))).unwrap_or_else(|e| {
        panic!("an ad with {n} conditional attributes and one {depth} deep: {e}")
    });
    assert_eq!(ad.len(), n + 1);
}

fn long_unary_body() {
    for op in ["!", "-", "~", "+", "- "] {
        let src = format!("{}1", op.repeat(100_000));
        let e = expr_err(&src);
        assert_eq!(e.line, 1);
    }
    // Long but within limits: evaluates.
    assert_eq!(eval(&format!("{}1", "- ".repeat(500))), Value::Int(1));
    assert_eq!(
        eval(&format!("{}true", "!".repeat(501))),
        Value::Bool(false)
    );
}

#[test]
fn a_hundred_thousand_unary_operators_are_an_error() {
    isolated(
        "a_hundred_thousand_unary_operators_are_an_error",
        long_unary_body,
    );
}

fn long_chain_body() {
    let n = 100_000;
    // 100,000 terms of `+`; other operators with fewer, to keep debug runs quick.
    for (op, term, n) in [
        ("+", "1", n),
        ("*", "1", n / 5),
        ("&&", "true", n / 5),
        ("||", "x", n / 5),
        ("==", "1", n / 5),
    ] {
        let src = vec![term; n].join(op);
        match parse_expr(&src) {
            Ok(e) => {
                let v = eval_with(&e, None, None);
                if op == "+" {
                    assert_eq!(v, Value::Int(n as i64));
                }
                let _ = e.to_string();
            }
            Err(err) => sane(&src, &err),
        }
    }
    // Long selections and subscripts.
    for src in [
        format!("a{}", ".b".repeat(n / 5)),
        format!("a{}", "[0]".repeat(n / 5)),
    ] {
        if let Ok(e) = parse_expr(&src) {
            let _ = eval_with(&e, None, None);
            let _ = e.to_string();
        }
    }
    // A chain that is long but within the depth limit parses and evaluates.
    let src = vec!["1"; 500].join(" + ");
    assert_eq!(eval(&src), Value::Int(500));
}

#[test]
fn a_hundred_thousand_term_chain_does_not_crash() {
    isolated(
        "a_hundred_thousand_term_chain_does_not_crash",
        long_chain_body,
    );
}

fn long_reference_chain_body() {
    let n = 5_000;
    // In a parsed new-syntax ad, in an old-syntax ad, and built in code.
    let defs: Vec<String> = (0..n)
        .map(|i| format!("a{i} = a{}", i + 1))
        .chain(std::iter::once(format!("a{n} = 42")))
        .collect();
    let new = ClassAd::parse(&format!("[ {} ]", defs.join("; "))).expect("new syntax parses");
    let old = ClassAd::parse_old(&defs.join("\n")).expect("old syntax parses");
    let mut built = ClassAd::new();
    for i in 0..n {
        built
            .insert_expr_str(&format!("a{i}"), &format!("a{}", i + 1))
            .expect("parses");
    }
    built.insert_value(&format!("a{n}"), Value::Int(42));
    for ad in [&new, &old, &built] {
        assert_eq!(ad.len(), n + 1);
        // Any value is fine (ERROR past the depth limit); crashing is not.
        let _ = ad.eval_attr("a0");
        let _ = ad.eval_attr_against("a0", Some(ad));
        let _ = eval_with(
            &parse_expr("TARGET.a0 + MY.a0").expect("parses"),
            Some(ad),
            Some(ad),
        );
        assert_eq!(ad.eval_attr(&format!("a{}", n - 10)), Value::Int(42));
    }
    // The same chain inside a nested ad.
    let e = parse_expr(&format!("[ {} ].a0", defs.join("; "))).expect("parses");
    let _ = eval_with(&e, None, None);
    // And a 5,000-long cycle.
    let cycle: Vec<String> = (0..n).map(|i| format!("b{i} = b{}", (i + 1) % n)).collect();
    let ad = ClassAd::parse(&format!("[ {} ]", cycle.join("; "))).expect("parses");
    let v = ad.eval_attr("b0");
    assert!(
        matches!(v, Value::Undefined | Value::Error),
        "a cycle gives UNDEFINED (or ERROR past the depth limit), got {v:?}"
    );
}

#[test]
fn a_five_thousand_long_reference_chain_does_not_crash() {
    isolated(
        "a_five_thousand_long_reference_chain_does_not_crash",
        long_reference_chain_body,
    );
}

/// Huge but flat input is fine: long strings, long lists, many attributes.
#[test]
fn wide_input_is_not_an_error() {
    let s = format!("\"{}\"", "x".repeat(200_000));
    assert!(matches!(eval(&format!("{s} == {s}")), Value::Bool(true)));
    let list = format!("{{ {} }}", vec!["1"; 20_000].join(", "));
    assert!(parse_expr(&list).is_ok());
    let n = 10_000;
    let defs: Vec<String> = (0..n).map(|i| format!("x{i} = {i}")).collect();
    let ad = ClassAd::parse(&format!("[ {} ]", defs.join("; "))).expect("parses");
    assert_eq!(ad.eval_attr("x9999"), Value::Int(9999));
}
