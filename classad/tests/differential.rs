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
