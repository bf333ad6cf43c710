//! Printing expressions, values and ads back in HTCondor's canonical form.
//!
//! Binary operators are surrounded by single spaces, unary operators stick to
//! their operand, lists print as `{ a,b }` and ads as `[ a = 1; b = 2 ]`.
//! Parentheses the user wrote are kept (`Expr::Paren`); parentheses that a
//! tree built in code needs for its meaning are added.

use std::fmt::{self, Write};

use crate::ast::{Expr, RefScope, UnaryOp};
use crate::record::ClassAd;
use crate::value::Value;

/// Words that cannot be bare attribute names.
const RESERVED: &[&str] = &["true", "false", "undefined", "error", "is", "isnt"];

fn is_plain_name(n: &str) -> bool {
    let mut chars = n.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !RESERVED.iter().any(|r| r.eq_ignore_ascii_case(n))
}

/// Appends an attribute name, quoted as `'...'` when it is not a plain identifier.
pub fn push_name(out: &mut String, n: &str) {
    let _ = write_name(out, n);
}

fn write_name<W: Write>(w: &mut W, n: &str) -> fmt::Result {
    if is_plain_name(n) {
        w.write_str(n)
    } else {
        w.write_char('\'')?;
        for c in n.chars() {
            write_escaped_char(w, c, '\'')?;
        }
        w.write_char('\'')
    }
}

fn write_escaped_char<W: Write>(w: &mut W, c: char, quote: char) -> fmt::Result {
    match c {
        '\\' => w.write_str("\\\\"),
        '\n' => w.write_str("\\n"),
        '\t' => w.write_str("\\t"),
        '\r' => w.write_str("\\r"),
        c if c == quote => {
            w.write_char('\\')?;
            w.write_char(c)
        }
        c if (c as u32) < 0x20 || c as u32 == 0x7f => write!(w, "\\{:03o}", c as u32),
        c => w.write_char(c),
    }
}

/// Writes a string literal with quotes and escapes.
pub fn write_string<W: Write>(w: &mut W, s: &str) -> fmt::Result {
    w.write_char('"')?;
    for c in s.chars() {
        write_escaped_char(w, c, '"')?;
    }
    w.write_char('"')
}

/// Writes a real so that it reads back as the same number and as a real.
pub fn write_real<W: Write>(w: &mut W, r: f64) -> fmt::Result {
    if AS_TEXT.with(std::cell::Cell::get) {
        return w.write_str(&crate::value::real_to_string(r));
    }
    if r.is_nan() {
        return w.write_str("real(\"NaN\")");
    }
    if r.is_infinite() {
        return w.write_str(if r > 0.0 {
            "real(\"INF\")"
        } else {
            "-real(\"INF\")"
        });
    }
    let a = r.abs();
    if a != 0.0 && !(1e-5..1e15).contains(&a) {
        let s = format!("{r:E}");
        let (m, e) = s.split_once('E').expect("{:E} has an exponent");
        let m = if m.contains('.') {
            m.to_string()
        } else {
            format!("{m}.0")
        };
        return match e.strip_prefix('-') {
            Some(e) => write!(w, "{m}E-{e}"),
            None => write!(w, "{m}E+{e}"),
        };
    }
    let s = r.to_string();
    w.write_str(&s)?;
    if !s.contains('.') {
        w.write_str(".0")?;
    }
    Ok(())
}

fn write_scalar<W: Write>(w: &mut W, v: &Value) -> fmt::Result {
    match v {
        Value::Undefined => w.write_str("undefined"),
        Value::Error => w.write_str("error"),
        Value::Bool(b) => w.write_str(if *b { "true" } else { "false" }),
        Value::Int(i) => write!(w, "{i}"),
        Value::Real(r) => write_real(w, *r),
        Value::Str(s) => write_string(w, s),
        Value::List(items) => {
            w.write_str("{ ")?;
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    w.write_char(',')?;
                }
                write_scalar(w, x)?;
            }
            w.write_str(" }")
        }
        Value::Ad(n) => write_ad(w, &n.ad),
    }
}

/// Writes a value in ClassAd syntax.
pub fn write_value<W: Write>(w: &mut W, v: &Value) -> fmt::Result {
    write_scalar(w, v)
}

thread_local! {
    /// Set while a list or ad is turned into text by `string()` and its
    /// kin, which write every real inside as `%.15E`, as HTCondor does.
    static AS_TEXT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A list or ad as `string()`, `strcat()` and `join()` write it: ClassAd
/// syntax, but every real as `%.15E` (`{ 3,1.500000000000000E+00 }`).
pub fn as_text(v: &Value) -> String {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            AS_TEXT.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(AS_TEXT.with(|c| c.replace(true)));
    v.to_string()
}

/// Writes an ad in new syntax on one line.
pub fn write_ad<W: Write>(w: &mut W, ad: &ClassAd) -> fmt::Result {
    w.write_str("[ ")?;
    for (i, (n, e)) in ad.iter().enumerate() {
        if i > 0 {
            w.write_str("; ")?;
        }
        write_name(w, n)?;
        w.write_str(" = ")?;
        write_expr(w, e)?;
    }
    w.write_str(" ]")
}

/// How tightly an expression binds when printed without parentheses.
/// `?:` binds tighter than unary operators in HTCondor.
fn strength(e: &Expr) -> u8 {
    match e {
        Expr::Cond(_) => 0,
        Expr::Binary(op, _) => op.precedence(),
        Expr::Unary(..) => 20,
        Expr::Elvis(_) => 25,
        _ => 30,
    }
}

/// A minus sign applied directly to a number literal: the only unary
/// expression allowed right after `?:`.
fn is_negative_number(e: &Expr) -> bool {
    matches!(e, Expr::Unary(UnaryOp::Neg, inner)
        if matches!(&**inner, Expr::Literal(Value::Int(0..) ))
            || matches!(&**inner, Expr::Literal(Value::Real(r)) if r.is_finite() && r.is_sign_positive()))
}

fn write_operand<W: Write>(w: &mut W, e: &Expr, parens: bool) -> fmt::Result {
    if parens {
        w.write_char('(')?;
        write_expr(w, e)?;
        w.write_char(')')
    } else {
        write_expr(w, e)
    }
}

/// Writes an expression in canonical form.
pub fn write_expr<W: Write>(w: &mut W, e: &Expr) -> fmt::Result {
    match e {
        Expr::Literal(v) => write_scalar(w, v),
        Expr::Attr(scope, name) => {
            w.write_str(match scope {
                RefScope::Bare => "",
                RefScope::My => "MY.",
                RefScope::Target => "TARGET.",
                RefScope::Parent => "parent.",
            })?;
            write_name(w, name.text)
        }
        Expr::Select(base, name) => {
            // `1.x` would read as a malformed number, and `my.x` as a scoped
            // reference rather than a selection from an attribute named `my`.
            match &**base {
                Expr::Literal(Value::Int(_) | Value::Real(_)) => write_operand(w, base, true)?,
                Expr::Attr(RefScope::Bare, n) if crate::parse::scope_prefix(n.text).is_some() => {
                    w.write_char('\'')?;
                    for c in n.text.chars() {
                        write_escaped_char(w, c, '\'')?;
                    }
                    w.write_char('\'')?;
                }
                _ => write_operand(w, base, strength(base) < 30)?,
            }
            w.write_char('.')?;
            write_name(w, name.text)
        }
        Expr::Index(b) => {
            write_operand(w, &b.0, strength(&b.0) < 30)?;
            w.write_char('[')?;
            write_expr(w, &b.1)?;
            w.write_char(']')
        }
        Expr::Unary(op, inner) => {
            w.write_str(op.symbol())?;
            // `- -1` must not print as `--1`, and `-(a + b)` needs its parentheses.
            let glue = matches!(
                (op, &**inner),
                (_, Expr::Unary(..)) | (_, Expr::Literal(Value::Int(i64::MIN..=-1)))
            ) || matches!(&**inner, Expr::Literal(Value::Real(r)) if r.is_sign_negative());
            write_operand(w, inner, strength(inner) < 20 || glue)
        }
        Expr::Binary(op, b) => {
            let p = op.precedence();
            write_operand(w, &b.0, strength(&b.0) < p)?;
            write!(w, " {} ", op.symbol())?;
            write_operand(w, &b.1, strength(&b.1) <= p)
        }
        Expr::Cond(b) => {
            write_operand(w, &b.0, strength(&b.0) == 0)?;
            w.write_str(" ? ")?;
            write_expr(w, &b.1)?;
            w.write_str(" : ")?;
            write_expr(w, &b.2)
        }
        Expr::Elvis(b) => {
            write_operand(w, &b.0, strength(&b.0) < 25)?;
            w.write_str(" ?: ")?;
            write_operand(w, &b.1, strength(&b.1) < 30 && !is_negative_number(&b.1))
        }
        Expr::Call(c) => {
            w.write_str(c.name.text)?;
            w.write_char('(')?;
            for (i, a) in c.args.iter().enumerate() {
                if i > 0 {
                    w.write_char(',')?;
                }
                write_expr(w, a)?;
            }
            w.write_char(')')
        }
        Expr::List(items) => {
            w.write_str("{ ")?;
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    w.write_char(',')?;
                }
                write_expr(w, x)?;
            }
            w.write_str(" }")
        }
        Expr::Ad(ad) => write_ad(w, ad),
        Expr::Paren(inner) => {
            w.write_char('(')?;
            write_expr(w, inner)?;
            w.write_char(')')
        }
    }
}

impl fmt::Display for Expr {
    /// Prints the expression in HTCondor's canonical form (what `unparse()` returns).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_expr(f, self)
    }
}
