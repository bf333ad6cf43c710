//! The fast hand-written parser must agree with the pest grammar: whatever it
//! accepts, pest accepts with an identical tree (parentheses included), and
//! it should accept what pest accepts (or the fast path is wasted).

use classad::parse::{parse_expr_fast, parse_expr_pest};
use proptest::prelude::*;
use std::sync::LazyLock;

fn agree(text: &str) -> Result<(), String> {
    let fast = parse_expr_fast(text);
    let pest = parse_expr_pest(text);
    match (fast, pest) {
        (Some(f), Ok(p)) if f == p => Ok(()),
        (Some(f), Ok(p)) => Err(format!("{text:?}: fast {f:?} != pest {p:?}")),
        (Some(f), Err(e)) => Err(format!("{text:?}: fast accepted {f} but pest says {e}")),
        (None, Ok(p)) => Err(format!("{text:?}: fast declined what pest parsed as {p}")),
        (None, Err(_)) => Ok(()),
    }
}

static EXPRS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let text = include_str!("data/vectors.jsonl");
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["expr"].as_str().map(str::to_string))
        .collect()
});

fn vector_exprs() -> &'static [String] {
    &EXPRS
}

#[test]
fn agree_on_every_conformance_expression() {
    let mut bad = Vec::new();
    for e in vector_exprs() {
        if let Err(why) = agree(e) {
            bad.push(why);
        }
    }
    assert!(
        bad.is_empty(),
        "{} disagreements, first: {:#?}",
        bad.len(),
        &bad[..bad.len().min(5)]
    );
}

/// An old-syntax line `A = text` binds what pest makes of `text`, or does
/// not parse when pest rejects it: the line reader's own shortcuts (lone
/// literals, trees shared with the previous ad) must not change a tree.
fn old_line_agrees(text: &str) -> Result<(), String> {
    let line = format!("A = {text}\n");
    let ad = classad::ClassAd::parse_old(&line);
    match (ad, parse_expr_pest(text)) {
        (Ok(ad), Ok(p)) => match ad.get("A") {
            Some(e) if *e == p => Ok(()),
            other => Err(format!("{line:?}: bound {other:?}, pest {p:?}")),
        },
        (Ok(ad), Err(e)) => Err(format!("{line:?}: parsed as {ad:?} but pest says {e}")),
        (Err(_), Err(_)) => Ok(()),
        // Text with a newline, or empty, cannot be one line's right-hand side.
        (Err(_), Ok(_)) if text.trim().is_empty() || text.contains('\n') => Ok(()),
        (Err(e), Ok(p)) => Err(format!("{line:?}: rejected ({e}) what pest parsed as {p}")),
    }
}

#[test]
fn old_lines_agree_on_every_conformance_expression_and_literal() {
    let literals = [
        "1",
        "0",
        "007",
        "1.5",
        "1e3",
        "1.",
        ".5",
        "00.5",
        "1.5.3",
        "9223372036854775808",
        "1e400",
        "999999999999999999",
        "1000000000000000000",
        "9223372036854775807",
        r#""a\\""#,
        r#""\\\"x\\""#,
        "\"abc\"",
        "\"a\\\"b\"",
        "\"\"",
        "\"x",
        "true",
        "TRUE",
        "False",
        "truex",
        "true1",
        "true(1)",
        "1 2",
        "\"a\" \"b\"",
        "1 // c",
        "1 /* c */",
        "  7  ",
        "\"s\"[0]",
        "1[0]",
        "3.x",
    ];
    let mut bad = Vec::new();
    for t in vector_exprs().iter().map(String::as_str).chain(literals) {
        // Twice: the second ad may share trees with the first.
        for _ in 0..2 {
            if let Err(why) = old_line_agrees(t) {
                bad.push(why);
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} disagreements, first: {:#?}",
        bad.len(),
        &bad[..bad.len().min(5)]
    );
}

#[test]
fn agree_on_tricky_inputs() {
    for t in [
        "a ?: -1",
        "a ?: - 1",
        "a ?: -x",
        "a ?: +1",
        "-a ?: b ?: c",
        "a ? : b",
        "a ? b : c ? d : e",
        "MY . x",
        "my.x.y",
        "parent.x",
        "target['x']",
        "x[1][2].y",
        "f (1, 2)",
        "true(1)",
        "is",
        "a is b",
        "a isnt b",
        "a isx",
        "1e3",
        "1e",
        "1.5.3",
        ".5",
        "5.",
        "007",
        "0",
        "00.5",
        "1 /* c */ + 2",
        "1 // c",
        "/* open",
        "\"a\\\"b\"",
        "'odd name'",
        "'x",
        "\"x",
        "[a = 1; b = 2;]",
        "[a == 1]",
        "[;]",
        "[a = 1;;]",
        "[]",
        "{}",
        "{,}",
        "{1,}",
        "x.'odd'",
        "x.true",
        "1 === 2",
        "1 <<= 2",
        "- - 3",
        "!!x",
        "~-+1",
        "a.b[c].d",
        "  1  ",
        "\t\n1\n",
        "1 2",
        "",
        "()",
        "(1)",
        "[ a = [ b = 1 ]; c = a.b ].c",
        "x ?: y ? 1 : 2",
        "9223372036854775808",
        "1e400",
    ] {
        agree(t).unwrap();
    }
}

fn token() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        "?",
        ":",
        ".",
        ",",
        ";",
        "=",
        "!",
        "-",
        "+",
        "~",
        "*",
        "/",
        "%",
        "<",
        ">",
        "&",
        "|",
        "^",
        "==",
        "!=",
        "=?=",
        "=!=",
        "&&",
        "||",
        "<<",
        ">>",
        ">>>",
        "<=",
        ">=",
        " is ",
        " isnt ",
        "1",
        "0",
        "1.5",
        ".5",
        "1e3",
        "\"s\"",
        "'q n'",
        "x",
        "Y_1",
        "MY.",
        "TARGET.",
        "parent.",
        "true",
        "undefined",
        "error",
        "strcat(",
        "size(",
        " ",
        "\n",
        "/*c*/",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn agree_on_token_soup(tokens in prop::collection::vec(token(), 1..14)) {
        let text: String = tokens.concat();
        prop_assert!(agree(&text).is_ok(), "{}", agree(&text).unwrap_err());
    }

    #[test]
    fn agree_on_mutated_vectors(idx in 0usize..3185, cut in 0usize..200, ins in token()) {
        let exprs = vector_exprs();
        let e = &exprs[idx % exprs.len()];
        let mut at = cut.min(e.len());
        while !e.is_char_boundary(at) { at -= 1; }
        let text = format!("{}{}{}", &e[..at], ins, &e[at..]);
        prop_assert!(agree(&text).is_ok(), "{}", agree(&text).unwrap_err());
    }
}
