//! Type tests (`isUndefined`, `isString`...) and conversions (`int`, `real`,
//! `string`, `bool`).

use crate::ast::Expr;
use crate::eval::{Evaluator, Scope};
use crate::value::{Value, to_display_string};

use super::eval_n;

/// Evaluates the single argument of a type test and applies `test` to it.
fn type_test(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr], test: fn(&Value) -> bool) -> Value {
    match eval_n::<1>(ev, sc, args) {
        Some([v]) => Value::Bool(test(&v)),
        None => Value::Error,
    }
}

/// `isUndefined(x)`: whether `x` evaluates to UNDEFINED.
pub fn is_undefined(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    type_test(ev, sc, args, |v| matches!(v, Value::Undefined))
}

/// `isError(x)`: whether `x` evaluates to ERROR.
pub fn is_error(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    type_test(ev, sc, args, |v| matches!(v, Value::Error))
}

/// `isString(x)`.
pub fn is_string(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    type_test(ev, sc, args, |v| matches!(v, Value::Str(_)))
}

/// `isInteger(x)`.
pub fn is_integer(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    type_test(ev, sc, args, |v| matches!(v, Value::Int(_)))
}

/// `isReal(x)`.
pub fn is_real(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    type_test(ev, sc, args, |v| matches!(v, Value::Real(_)))
}

/// `isList(x)`.
pub fn is_list(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    type_test(ev, sc, args, |v| matches!(v, Value::List(_)))
}

/// `isClassAd(x)`.
pub fn is_classad(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    type_test(ev, sc, args, |v| matches!(v, Value::Ad(_)))
}

/// `isBoolean(x)`.
pub fn is_boolean(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    type_test(ev, sc, args, |v| matches!(v, Value::Bool(_)))
}

/// Truncates a real to an integer as a C cast does on x86-64: values that do
/// not fit (and NaN) become `i64::MIN` rather than saturating.
pub(super) fn real_to_int(r: f64) -> i64 {
    // 2^63 is exactly representable; anything at or above it does not fit.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    // NaN is in no range, so it also lands here.
    if !(-LIMIT..LIMIT).contains(&r) {
        i64::MIN
    } else {
        r.trunc() as i64
    }
}

/// Length of the longest prefix of `b` (after `start`) made of ASCII digits.
fn digits(b: &[u8], start: usize) -> usize {
    b[start.min(b.len())..]
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .count()
}

/// Parses the longest real-number prefix of `s` as C's `strtod` does, which
/// is how HTCondor reads numbers out of strings: leading whitespace, a sign,
/// decimal notation with an optional exponent, hexadecimal (`0x1.8p3`),
/// `inf`, `infinity` and `nan`. Returns the number and the length consumed,
/// or `None` when nothing is a number.
pub(super) fn parse_real_prefix(s: &str) -> Option<(f64, usize)> {
    let lead = s.len() - s.trim_start().len();
    let t = &s[lead..];
    let b = t.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'-' | b'+')) {
        i = 1;
    }
    let neg = b.first() == Some(&b'-');
    let sign = |v: f64| if neg { -v } else { v };
    let rest = &t[i..];
    for (word, value) in [
        ("infinity", f64::INFINITY),
        ("inf", f64::INFINITY),
        ("nan", f64::NAN),
    ] {
        if rest
            .get(..word.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(word))
        {
            return Some((sign(value), lead + i + word.len()));
        }
    }
    if let Some((v, n)) = parse_hex(&b[i..]) {
        return Some((sign(v), lead + i + n));
    }
    let int_digits = digits(b, i);
    let mut end = i + int_digits;
    let mut frac_digits = 0;
    if b.get(end) == Some(&b'.') {
        frac_digits = digits(b, end + 1);
        if int_digits + frac_digits > 0 {
            end += 1 + frac_digits;
        }
    }
    if int_digits + frac_digits == 0 {
        return None;
    }
    end = exponent_end(b, end, b'e');
    // The prefix is plain decimal notation, which Rust's parser accepts.
    let v: f64 = t[..end].parse().ok()?;
    Some((v, lead + end))
}

/// Where an optional exponent (`e`/`p`, a sign, decimal digits) starting at
/// `end` stops; `end` itself when there is no complete exponent.
fn exponent_end(b: &[u8], end: usize, letter: u8) -> usize {
    if !b.get(end).is_some_and(|c| c.eq_ignore_ascii_case(&letter)) {
        return end;
    }
    let mut j = end + 1;
    if matches!(b.get(j), Some(b'-' | b'+')) {
        j += 1;
    }
    let n = digits(b, j);
    if n > 0 { j + n } else { end }
}

/// `strtod`'s hexadecimal form after the sign: `0x`, hex digits with an
/// optional point, an optional binary exponent `p`. `None` unless at least
/// one hex digit follows the `0x` (then `strtod` reads just the `0`).
fn parse_hex(b: &[u8]) -> Option<(f64, usize)> {
    if !(b.len() > 2 && b[0] == b'0' && b[1].eq_ignore_ascii_case(&b'x')) {
        return None;
    }
    let (mut mantissa, mut scale, mut seen, mut i) = (0.0f64, 0i32, false, 2);
    let mut point = false;
    while let Some(&c) = b.get(i) {
        if c == b'.' && !point {
            point = true;
        } else if let Some(d) = (c as char).to_digit(16) {
            mantissa = mantissa * 16.0 + f64::from(d);
            seen = true;
            if point {
                scale -= 4;
            }
        } else {
            break;
        }
        i += 1;
    }
    if !seen {
        return None;
    }
    let end = exponent_end(b, i, b'p');
    let exp: i32 = if end > i {
        std::str::from_utf8(&b[i + 1..end])
            .ok()
            .and_then(|e| e.parse::<i32>().ok())
            .unwrap_or(if b[i + 1] == b'-' {
                i32::MIN / 2
            } else {
                i32::MAX / 2
            })
    } else {
        0
    };
    // In two halves, so that 2^-1074 does not pass through an overflow.
    let e = exp.saturating_add(scale);
    let half = 2f64.powi(e / 2);
    Some((mantissa * half * 2f64.powi(e - e / 2), end))
}

/// `int(x)`: numbers truncated, booleans as 0/1; a string is read as a real
/// (as `strtod` would: `int("1e3")` is 1000, `int("0x10")` is 16) and then
/// truncated like a real, so `int("9223372036854775807")` is `i64::MIN`.
pub fn to_int(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let Some([v]) = eval_n::<1>(ev, sc, args) else {
        return Value::Error;
    };
    match v {
        Value::Undefined => Value::Undefined,
        Value::Int(i) => Value::Int(i),
        Value::Real(r) => Value::Int(real_to_int(r)),
        Value::Bool(b) => Value::Int(i64::from(b)),
        Value::Str(s) => {
            parse_real_prefix(&s).map_or(Value::Error, |(r, _)| Value::Int(real_to_int(r)))
        }
        _ => Value::Error,
    }
}

/// `real(x)`: numbers and booleans as reals, strings parsed as reals.
pub fn to_real(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let Some([v]) = eval_n::<1>(ev, sc, args) else {
        return Value::Error;
    };
    match v {
        Value::Undefined => Value::Undefined,
        Value::Int(i) => Value::Real(i as f64),
        Value::Real(r) => Value::Real(r),
        Value::Bool(b) => Value::Real(if b { 1.0 } else { 0.0 }),
        Value::Str(s) => parse_real_prefix(&s).map_or(Value::Error, |(r, _)| Value::Real(r)),
        _ => Value::Error,
    }
}

/// `string(x)`: any proper value printed as `strcat` would.
pub fn to_string(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let Some([v]) = eval_n::<1>(ev, sc, args) else {
        return Value::Error;
    };
    match v {
        Value::Undefined => Value::Undefined,
        Value::Str(s) => Value::Str(s),
        v => to_display_string(&v).map_or(Value::Error, Value::str),
    }
}

/// `bool(x)`: numbers are true when non-zero; only the strings "true" and
/// "false" (any case) convert, any other string is UNDEFINED.
pub fn to_bool(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let Some([v]) = eval_n::<1>(ev, sc, args) else {
        return Value::Error;
    };
    match v {
        Value::Undefined => Value::Undefined,
        Value::Bool(b) => Value::Bool(b),
        Value::Int(i) => Value::Bool(i != 0),
        Value::Real(r) => Value::Bool(r != 0.0),
        Value::Str(s) => {
            if s.eq_ignore_ascii_case("true") {
                Value::Bool(true)
            } else if s.eq_ignore_ascii_case("false") {
                Value::Bool(false)
            } else {
                Value::Undefined
            }
        }
        _ => Value::Error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_prefixes_parse_like_strtod() {
        assert_eq!(parse_real_prefix("1.5e3"), Some((1500.0, 5)));
        assert_eq!(parse_real_prefix(".5x"), Some((0.5, 2)));
        assert_eq!(parse_real_prefix("5."), Some((5.0, 2)));
        assert_eq!(parse_real_prefix("1e"), Some((1.0, 1)));
        assert_eq!(parse_real_prefix("-INF"), Some((f64::NEG_INFINITY, 4)));
        assert!(parse_real_prefix("nan").is_some_and(|(r, _)| r.is_nan()));
        assert_eq!(parse_real_prefix("abc"), None);
        assert_eq!(parse_real_prefix("."), None);
        assert_eq!(parse_real_prefix("0x10"), Some((16.0, 4)));
        assert_eq!(parse_real_prefix(" -0X1.8p1z"), Some((-3.0, 9)));
        assert_eq!(parse_real_prefix("0x"), Some((0.0, 1)));
        assert_eq!(parse_real_prefix("0xg"), Some((0.0, 1)));
        assert_eq!(parse_real_prefix("0x1p"), Some((1.0, 3)));
        assert_eq!(parse_real_prefix("1e+"), Some((1.0, 1)));
        assert_eq!(parse_real_prefix("0x1p-1074"), Some((5e-324, 9)));
        assert_eq!(parse_real_prefix("0x1p99999"), Some((f64::INFINITY, 9)));
    }

    #[test]
    fn out_of_range_reals_truncate_to_min() {
        assert_eq!(real_to_int(3.7), 3);
        assert_eq!(real_to_int(-3.7), -3);
        assert_eq!(real_to_int(1e300), i64::MIN);
        assert_eq!(real_to_int(f64::NAN), i64::MIN);
    }
}
