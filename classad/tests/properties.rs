//! Property tests for the printer and the parser.
//!
//! - Printing any expression tree and parsing the text gives the same tree
//!   (up to the parentheses the printer adds), and printing is a fixed point.
//! - No input text, however broken, makes the parsers, the evaluator or the
//!   printer panic; whatever parses prints back to text that parses to the
//!   same tree.

use std::sync::{Arc, LazyLock};

use classad::ast::{BinaryOp, Call, Expr, RefScope, UnaryOp};
use classad::symbol::Name;
use classad::{ClassAd, Value, eval_with, parse_expr};
use proptest::prelude::*;
use proptest::test_runner::Config;

/// Few enough cases to keep this file well under 20 s in debug mode, and no
/// regression files written into the source tree.
fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

// ---------------------------------------------------------------------------
// Random expression trees
// ---------------------------------------------------------------------------

const BINARY_OPS: [BinaryOp; 23] = [
    BinaryOp::Or,
    BinaryOp::And,
    BinaryOp::BitOr,
    BinaryOp::BitXor,
    BinaryOp::BitAnd,
    BinaryOp::Eq,
    BinaryOp::Ne,
    BinaryOp::Is,
    BinaryOp::Isnt,
    BinaryOp::IsWord,
    BinaryOp::IsntWord,
    BinaryOp::Lt,
    BinaryOp::Le,
    BinaryOp::Gt,
    BinaryOp::Ge,
    BinaryOp::Shl,
    BinaryOp::Shr,
    BinaryOp::UShr,
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Mod,
];

const UNARY_OPS: [UnaryOp; 4] = [UnaryOp::Not, UnaryOp::Neg, UnaryOp::Plus, UnaryOp::BitNot];

const SCOPES: [RefScope; 4] = [
    RefScope::Bare,
    RefScope::My,
    RefScope::Target,
    RefScope::Parent,
];

/// Attribute names that cannot be written bare, or that look like keywords,
/// scope prefixes or operators.
const ODD_NAMES: &[&str] = &[
    "",
    " ",
    "my",
    "MY",
    "Target",
    "parent",
    "true",
    "FALSE",
    "Undefined",
    "error",
    "is",
    "ISNT",
    "1abc",
    "9",
    "a b",
    "a'b",
    "'",
    "a\\b",
    "\\",
    "a\"b",
    "a\nb",
    "tab\there",
    "nul\0",
    "del\u{7f}",
    "a.b",
    "a-b",
    "a=b",
    "x/*y*/",
    "//",
    "#hash",
    "[x]",
    "ünïcödé",
    "名前",
    "emoji😀",
];

/// Function names: builtins (any case) and names no builtin has.
const FUNC_NAMES: &[&str] = &[
    "strcat",
    "StrCat",
    "size",
    "ifThenElse",
    "isUndefined",
    "member",
    "floor",
    "regexp",
    "unparse",
    "nosuch",
    "no_such_function_2",
    "my",
    "target",
    "parent",
    "_",
];

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[A-Za-z_][A-Za-z0-9_]{0,6}",
        2 => proptest::sample::select(ODD_NAMES).prop_map(str::to_string),
        1 => proptest::collection::vec(any::<char>(), 0..5)
            .prop_map(|cs| cs.into_iter().collect::<String>()),
    ]
}

fn string_value() -> impl Strategy<Value = String> {
    let tricky = proptest::sample::select(vec![
        '"', '\\', '\'', '\n', '\r', '\t', '\0', '\u{1}', '\u{1b}', '\u{7f}', '\u{85}', '\u{2028}',
        '/', '*', '?', ':', 'a', 'Z', '0', '7', ' ', 'é', '字', '😀',
    ]);
    prop_oneof![
        proptest::collection::vec(tricky, 0..10).prop_map(|cs| cs.into_iter().collect()),
        proptest::collection::vec(any::<char>(), 0..6).prop_map(|cs| cs.into_iter().collect()),
        Just(String::new()),
        Just("/* not a comment */ // nor this".to_string()),
        Just("\\101\\n".to_string()),
    ]
}

fn real_value() -> impl Strategy<Value = f64> {
    use proptest::num::f64 as f;
    prop_oneof![
        f::POSITIVE | f::ZERO | f::NORMAL | f::SUBNORMAL,
        (0u32..1_000_000).prop_map(|i| f64::from(i) / 1000.0),
        Just(0.0),
        Just(1e15),
        Just(1e-5),
        Just(0.1),
        Just(f64::MAX),
        Just(f64::MIN_POSITIVE),
    ]
}

fn literal() -> impl Strategy<Value = Expr> {
    prop_oneof![
        (0i64..1000).prop_map(Value::Int),
        (0..=i64::MAX).prop_map(Value::Int),
        real_value().prop_map(Value::Real),
        string_value().prop_map(Value::str),
        any::<bool>().prop_map(Value::Bool),
        Just(Value::Undefined),
        Just(Value::Error),
    ]
    .prop_map(Expr::Literal)
}

fn attr() -> impl Strategy<Value = Expr> {
    (proptest::sample::select(SCOPES.to_vec()), name())
        .prop_map(|(s, n)| Expr::Attr(s, Name::new(&n)))
}

fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Call(Box::new(Call {
        name: Name::new(name),
        func: classad::builtins::lookup(name),
        args,
    }))
}

fn nested_ad(defs: Vec<(String, Expr)>) -> Expr {
    let mut ad = ClassAd::new();
    for (n, e) in defs {
        ad.insert(&n, e);
    }
    Expr::Ad(Arc::new(ad))
}

fn expr_tree() -> impl Strategy<Value = Expr> {
    prop_oneof![2 => literal(), 1 => attr()].prop_recursive(5, 48, 3, |inner| {
        prop_oneof![
            1 => (inner.clone(), name()).prop_map(|(e, n)| Expr::Select(Box::new(e), Name::new(&n))),
            1 => (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::Index(Box::new((a, b)))),
            1 => (proptest::sample::select(UNARY_OPS.to_vec()), inner.clone())
                .prop_map(|(op, e)| Expr::Unary(op, Box::new(e))),
            3 => (
                proptest::sample::select(BINARY_OPS.to_vec()),
                inner.clone(),
                inner.clone()
            )
                .prop_map(|(op, a, b)| Expr::binary(op, a, b)),
            1 => (inner.clone(), inner.clone(), inner.clone())
                .prop_map(|(c, a, b)| Expr::Cond(Box::new((c, a, b)))),
            1 => (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::Elvis(Box::new((a, b)))),
            1 => (
                proptest::sample::select(FUNC_NAMES),
                proptest::collection::vec(inner.clone(), 0..4)
            )
                .prop_map(|(n, args)| call(n, args)),
            1 => proptest::collection::vec(inner.clone(), 0..4).prop_map(Expr::List),
            1 => proptest::collection::vec((name(), inner.clone()), 0..4).prop_map(nested_ad),
            1 => inner.prop_map(|e| Expr::Paren(Box::new(e))),
        ]
    })
}

proptest! {
    #![proptest_config(config(400))]

    /// Printing a tree and parsing the text gives the same tree, up to the
    /// parentheses the printer had to add.
    #[test]
    fn print_then_parse_gives_the_same_tree(e in expr_tree()) {
        let s = e.to_string();
        let p = parse_expr(&s)
            .map_err(|err| TestCaseError::fail(format!("printed {s:?}, which does not parse: {err}")))?;
        prop_assert_eq!(p.without_parens(), e.without_parens(), "printed as {:?}", s);
    }

    /// Printing is a fixed point: what the printer writes, it writes again
    /// after a round trip through the parser.
    #[test]
    fn printing_is_a_fixed_point(e in expr_tree()) {
        let s = e.to_string();
        let p = parse_expr(&s)
            .map_err(|err| TestCaseError::fail(format!("printed {s:?}, which does not parse: {err}")))?;
        prop_assert_eq!(p.to_string(), s);
    }

    /// A new-syntax ad of random attributes prints to text that parses back to an equal ad.
    #[test]
    fn ads_print_and_parse_back(defs in proptest::collection::vec((name(), expr_tree()), 0..5)) {
        let Expr::Ad(ad) = nested_ad(defs) else { unreachable!("nested_ad builds an ad") };
        let new = ad.to_string();
        let back = ClassAd::parse(&new)
            .map_err(|err| TestCaseError::fail(format!("printed {new:?}, which does not parse: {err}")))?;
        prop_assert_eq!(back.len(), ad.len());
        for (n, e) in ad.iter() {
            let got = back.get(n).map(Expr::without_parens);
            prop_assert_eq!(got, Some(e.without_parens()), "attribute {:?} of {:?}", n, new);
        }
        let old = ad.to_old_syntax();
        let back = ClassAd::parse_old(&old)
            .map_err(|err| TestCaseError::fail(format!("printed {old:?}, which does not parse: {err}")))?;
        prop_assert_eq!(back.len(), ad.len());
        for (n, e) in ad.iter() {
            let got = back.get(n).map(Expr::without_parens);
            prop_assert_eq!(got, Some(e.without_parens()), "attribute {:?} of {:?}", n, old);
        }
    }
}

// ---------------------------------------------------------------------------
// Hand-picked trees, so that each printer rule is checked even when the
// random search does not happen to hit it.
// ---------------------------------------------------------------------------

fn bare(n: &str) -> Expr {
    Expr::Attr(RefScope::Bare, Name::new(n))
}

fn int(i: i64) -> Expr {
    Expr::Literal(Value::Int(i))
}

fn unary(op: UnaryOp, e: Expr) -> Expr {
    Expr::Unary(op, Box::new(e))
}

#[track_caller]
fn assert_round_trip(e: Expr) {
    let s = e.to_string();
    let p = parse_expr(&s).unwrap_or_else(|err| panic!("{e:?} printed as {s:?}: {err}"));
    assert_eq!(
        p.without_parens(),
        e.without_parens(),
        "{e:?} printed as {s:?}"
    );
    assert_eq!(p.to_string(), s, "printing {s:?} is not a fixed point");
}

#[test]
fn printer_adds_the_parentheses_precedence_needs() {
    use BinaryOp::*;
    let (a, b, c) = (bare("a"), bare("b"), bare("c"));
    // (a + b) * c, a - (b - c), a || (b && c) is not needed but (a || b) && c is.
    assert_round_trip(Expr::binary(
        Mul,
        Expr::binary(Add, a.clone(), b.clone()),
        c.clone(),
    ));
    assert_round_trip(Expr::binary(
        Sub,
        a.clone(),
        Expr::binary(Sub, b.clone(), c.clone()),
    ));
    assert_round_trip(Expr::binary(
        And,
        Expr::binary(Or, a.clone(), b.clone()),
        c.clone(),
    ));
    assert_eq!(
        Expr::binary(Sub, a.clone(), Expr::binary(Sub, b.clone(), c.clone())).to_string(),
        "a - (b - c)"
    );
    // Conditionals inside operators, selections and subscripts.
    let cond = Expr::Cond(Box::new((a.clone(), b.clone(), c.clone())));
    assert_round_trip(Expr::binary(Add, cond.clone(), int(1)));
    assert_round_trip(Expr::binary(Add, int(1), cond.clone()));
    assert_round_trip(Expr::Select(Box::new(cond.clone()), Name::new("x")));
    assert_round_trip(Expr::Index(Box::new((cond.clone(), int(0)))));
    assert_round_trip(Expr::Cond(Box::new((
        cond.clone(),
        cond.clone(),
        cond.clone(),
    ))));
    let elvis = Expr::Elvis(Box::new((a.clone(), b.clone())));
    assert_round_trip(Expr::Elvis(Box::new((elvis.clone(), elvis.clone()))));
    assert_round_trip(Expr::Cond(Box::new((elvis.clone(), elvis.clone(), elvis))));
    // Unary operators: `- -1`, `-(a + b)`, `!(!a)`, `(-a).x`.
    assert_round_trip(unary(UnaryOp::Neg, unary(UnaryOp::Neg, int(1))));
    assert_round_trip(unary(UnaryOp::Neg, Expr::binary(Add, a.clone(), b.clone())));
    assert_round_trip(unary(UnaryOp::Not, unary(UnaryOp::Not, a.clone())));
    assert_round_trip(Expr::Select(
        Box::new(unary(UnaryOp::Neg, a.clone())),
        Name::new("x"),
    ));
    assert_round_trip(Expr::binary(Sub, a.clone(), unary(UnaryOp::Neg, b.clone())));
    // `?:` followed by a unary operator (HTCondor refuses `a ?: !b`).
    for op in UNARY_OPS {
        assert_round_trip(Expr::Elvis(Box::new((a.clone(), unary(op, b.clone())))));
        assert_round_trip(Expr::Elvis(Box::new((a.clone(), unary(op, int(1))))));
    }
    // `is` and `isnt` are words and need spaces around them.
    assert_round_trip(Expr::binary(
        IsWord,
        a.clone(),
        unary(UnaryOp::Not, b.clone()),
    ));
    assert_round_trip(Expr::binary(
        IsntWord,
        int(1),
        Expr::Literal(Value::Undefined),
    ));
}

#[test]
fn printer_quotes_names_that_are_not_identifiers() {
    for &n in ODD_NAMES {
        for scope in SCOPES {
            assert_round_trip(Expr::Attr(scope, Name::new(n)));
        }
        assert_round_trip(Expr::Select(Box::new(bare("a")), Name::new(n)));
        assert_round_trip(nested_ad(vec![(n.to_string(), int(1))]));
    }
    assert_eq!(bare("a b").to_string(), "'a b'");
    assert_eq!(bare("true").to_string(), "'true'");
}

#[test]
fn printer_escapes_strings() {
    for s in [
        "",
        "\"",
        "\\",
        "\\\"",
        "a\nb\r\tc",
        "\0",
        "\u{1}9",
        "\u{7f}7",
        "'",
        "/* x */",
        "é字😀",
    ] {
        assert_round_trip(Expr::Literal(Value::str(s)));
    }
}

#[test]
fn printer_writes_reals_that_read_back_as_reals() {
    for r in [
        0.0,
        1.0,
        0.1,
        1.5,
        1e-5,
        9.99e-6,
        1e15,
        1e16,
        123456789012345.6,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
    ] {
        let e = Expr::Literal(Value::Real(r));
        let s = e.to_string();
        match parse_expr(&s) {
            Ok(Expr::Literal(Value::Real(back))) => {
                assert_eq!(back.to_bits(), r.to_bits(), "{r} printed as {s}")
            }
            other => panic!("{r} printed as {s:?}, parsed as {other:?}"),
        }
    }
}

/// `MY.x` is a scoped reference; selecting `x` from an attribute that happens
/// to be called `my` must print differently (e.g. `'my'.x`).
#[test]
fn select_from_an_attribute_named_like_a_scope() {
    for n in ["my", "MY", "target", "Parent"] {
        assert_round_trip(Expr::Select(Box::new(bare(n)), Name::new("x")));
    }
}

/// `1.x` does not lex (`1.` starts a real), so a selection from a number
/// literal needs parentheses (`(1).x`) or a space (`1 .x`).
#[test]
fn select_from_a_number_literal() {
    assert_round_trip(Expr::Select(Box::new(int(1)), Name::new("x")));
    assert_round_trip(Expr::Select(
        Box::new(Expr::Literal(Value::Real(1.5))),
        Name::new("x"),
    ));
    assert_round_trip(Expr::Select(
        Box::new(Expr::Literal(Value::Real(1e300))),
        Name::new("x"),
    ));
    // The parser accepts a space before the dot, so such trees also come from text.
    for src in ["1 .x", "1.5 .x", "1e300 .x", "(1).x", "1 .x.y[0]"] {
        let e = parse_expr(src).unwrap_or_else(|err| panic!("{src:?} parses: {err}"));
        assert_round_trip(e);
    }
}

/// The right operand of `?:` is a postfix expression or a negative number,
/// and HTCondor refuses a unary operator right after `?:`: anything else
/// needs parentheses, e.g. `a ?: (!x + b)`.
#[test]
fn elvis_whose_right_operand_starts_with_a_unary_operator() {
    let (a, b, c, x) = (bare("a"), bare("b"), bare("c"), bare("x"));
    for op in UNARY_OPS {
        let starts_unary = Expr::binary(BinaryOp::Add, unary(op, x.clone()), b.clone());
        assert_round_trip(Expr::Elvis(Box::new((a.clone(), starts_unary))));
        let cond = Expr::Cond(Box::new((unary(op, x.clone()), b.clone(), c.clone())));
        assert_round_trip(Expr::Elvis(Box::new((a.clone(), cond))));
        let index = Expr::Index(Box::new((unary(op, x.clone()), b.clone())));
        assert_round_trip(Expr::Elvis(Box::new((a.clone(), index))));
    }
}

/// `without_parens` promises to remove every `Paren` node, including those
/// in the expressions of a nested ad literal.
#[test]
fn without_parens_reaches_into_nested_ads() {
    let with = parse_expr("[a = (1); b = {(2)}]").expect("parses");
    let without = parse_expr("[a = 1; b = {2}]").expect("parses");
    assert_eq!(with.without_parens(), without.without_parens());
}

#[test]
fn calls_keep_their_name_and_resolve_builtins() {
    for &n in FUNC_NAMES {
        let e = call(n, vec![int(1), bare("a")]);
        assert_round_trip(e.clone());
        let Ok(Expr::Call(c)) = parse_expr(&e.to_string()) else {
            panic!("{e} does not parse to a call");
        };
        assert_eq!(c.name.text, n, "the name is printed as written");
        assert_eq!(c.func.is_some(), classad::builtins::lookup(n).is_some());
    }
}

// ---------------------------------------------------------------------------
// Random text: no panics anywhere.
// ---------------------------------------------------------------------------

const TOKENS: &[&str] = &[
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
    "\"",
    "'",
    "!",
    "-",
    "+",
    "~",
    "*",
    "/",
    "%",
    "<",
    ">",
    "<<",
    ">>>",
    "&",
    "|",
    "^",
    "==",
    "!=",
    "=?=",
    "=!=",
    "&&",
    "||",
    "=",
    "1",
    "0",
    "1.5",
    "1e3",
    "1e999",
    ".5",
    "9223372036854775807",
    "x",
    "y",
    "l",
    "n",
    "s",
    "c",
    "MY.",
    "TARGET.",
    "parent.",
    "MY",
    "is",
    "isnt",
    "true",
    "undefined",
    "error",
    "\"str\"",
    "'q'",
    "size",
    "strcat",
    "nosuch",
    "ifThenElse",
    "/*",
    "*/",
    "//",
    "\n",
    " ",
    "\\",
    "#",
    "x = 1",
    "é",
];

fn token_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        (
            proptest::sample::select(TOKENS),
            proptest::sample::select(vec!["", " "]),
        ),
        0..30,
    )
    .prop_map(|toks| {
        toks.into_iter()
            .map(|(t, sep)| format!("{t}{sep}"))
            .collect()
    })
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::collection::vec(any::<u8>(), 0..64)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        token_text(),
        token_text(),
        token_text(),
    ]
}

static MY_AD: LazyLock<ClassAd> = LazyLock::new(|| {
    ClassAd::parse(
        r#"[ x = 1; y = x + 1; s = "str"; l = { 1, 2.5, "a", x }; c = c;
             n = [ x = 2; p = parent.x; q = y ]; MY = TARGET.x; is_ = undefined;
             r = real("INF"); e = error ]"#,
    )
    .expect("MY ad parses")
});

static TARGET_AD: LazyLock<ClassAd> = LazyLock::new(|| {
    ClassAd::parse(r#"[ x = 3; y = MY.y; z = {}; t = TARGET.x; l = l; n = [ n = n ] ]"#)
        .expect("TARGET ad parses")
});

/// True when `e` holds an infinite real literal anywhere, nested ads included.
fn has_infinite_literal(e: &Expr) -> bool {
    match e {
        Expr::Literal(Value::Real(r)) => !r.is_finite(),
        Expr::Literal(_) | Expr::Attr(..) => false,
        Expr::Select(b, _) | Expr::Unary(_, b) | Expr::Paren(b) => has_infinite_literal(b),
        Expr::Index(b) | Expr::Binary(_, b) | Expr::Elvis(b) => {
            has_infinite_literal(&b.0) || has_infinite_literal(&b.1)
        }
        Expr::Cond(b) => [&b.0, &b.1, &b.2].into_iter().any(has_infinite_literal),
        Expr::Call(c) => c.args.iter().any(has_infinite_literal),
        Expr::List(items) => items.iter().any(has_infinite_literal),
        Expr::Ad(ad) => ad.iter().any(|(_, e)| has_infinite_literal(e)),
    }
}

/// Everything a caller can do with a parsed expression, none of which may panic.
fn exercise(e: &Expr) -> Result<(), TestCaseError> {
    let _ = eval_with(e, Some(&MY_AD), Some(&TARGET_AD));
    let _ = eval_with(e, Some(&TARGET_AD), Some(&MY_AD));
    let _ = eval_with(e, None, None);
    let printed = e.to_string();
    let back = parse_expr(&printed).map_err(|err| {
        TestCaseError::fail(format!(
            "{e:?} printed as {printed:?}, which does not parse: {err}"
        ))
    })?;
    if has_infinite_literal(e) {
        // A literal too large for f64 (`1e999`) is infinite and prints as
        // `real("INF")`, a call, as in HTCondor: the text parses, the tree differs.
        return Ok(());
    }
    prop_assert_eq!(
        &back.without_parens(),
        &e.without_parens(),
        "printed as {:?}",
        printed
    );
    prop_assert_eq!(back.to_string(), printed);
    Ok(())
}

fn exercise_ad(ad: &ClassAd) -> Result<(), TestCaseError> {
    for (n, e) in ad.iter() {
        let _ = ad.eval_attr(n);
        let _ = ad.eval_attr_against(n, Some(&TARGET_AD));
        exercise(e)?;
    }
    let new = ad.to_string();
    prop_assert!(ClassAd::parse(&new).is_ok(), "printed as {:?}", new);
    let old = ad.to_old_syntax();
    prop_assert!(ClassAd::parse_old(&old).is_ok(), "printed as {:?}", old);
    Ok(())
}

proptest! {
    #![proptest_config(config(1500))]

    #[test]
    fn no_text_makes_parse_expr_panic(s in any_text()) {
        match parse_expr(&s) {
            Ok(e) => exercise(&e)?,
            Err(err) => {
                prop_assert!(err.line >= 1 && err.column >= 1, "{:?}", err);
                prop_assert!(!err.message.is_empty());
                let _ = err.to_string();
            }
        }
    }

    #[test]
    fn no_text_makes_the_ad_parsers_panic(s in any_text()) {
        for text in [s.clone(), format!("[{s}]"), format!("[ a = {s} ]")] {
            match ClassAd::parse(&text) {
                Ok(ad) => exercise_ad(&ad)?,
                Err(err) => {
                    prop_assert!(err.line >= 1 && err.column >= 1, "{:?}", err);
                    let _ = err.to_string();
                }
            }
        }
        for text in [s.clone(), format!("A = {s}"), format!("A = 1\n{s}\nB = 2")] {
            match ClassAd::parse_old(&text) {
                Ok(ad) => exercise_ad(&ad)?,
                Err(err) => {
                    prop_assert!(err.line >= 1 && err.column >= 1, "{:?}", err);
                    prop_assert!(err.line <= text.lines().count().max(1), "{:?} in {:?}", err, text);
                    let _ = err.to_string();
                }
            }
        }
    }
}
