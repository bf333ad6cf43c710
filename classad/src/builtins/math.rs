//! Numeric functions: `floor`, `ceiling`, `round`, `pow`, `quantize`, `interval`.

use crate::ast::Expr;
use crate::eval::{Evaluator, Scope};
use crate::value::Value;

use super::eval_n;
use super::types::{parse_real_prefix, real_to_int};

/// Applies a rounding function to the single argument: integers and booleans
/// are already whole, reals are rounded to an integer, numeric strings are
/// read as reals first. Like HTCondor, UNDEFINED is not a number: ERROR.
fn round_with(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr], f: fn(f64) -> f64) -> Value {
    let Some([v]) = eval_n::<1>(ev, sc, args) else {
        return Value::Error;
    };
    match v {
        Value::Int(i) => Value::Int(i),
        Value::Bool(b) => Value::Int(i64::from(b)),
        Value::Real(r) => Value::Int(real_to_int(f(r))),
        // The number at the start of the string, as `strtod` reads it
        // (HTCondor: floor("4096-1") is 4096).
        Value::Str(s) => match parse_real_prefix(&s) {
            Some((r, _)) => Value::Int(real_to_int(f(r))),
            None => Value::Error,
        },
        _ => Value::Error,
    }
}

/// `floor(x)`: the largest integer not above `x`.
pub fn floor(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    round_with(ev, sc, args, f64::floor)
}

/// `ceiling(x)`: the smallest integer not below `x`.
pub fn ceiling(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    round_with(ev, sc, args, f64::ceil)
}

/// `round(x)`: the nearest integer, halves to even (C's `rint`).
pub fn round(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    round_with(ev, sc, args, f64::round_ties_even)
}

/// `pow(base, exp)`: an integer when both are integers and `exp` is not
/// negative, otherwise a real (booleans count as 0 and 1). Anything but two
/// numbers or booleans (even UNDEFINED) is ERROR.
pub fn pow(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let Some([b, e]) = eval_n::<2>(ev, sc, args) else {
        return Value::Error;
    };
    // Numbers at the start of strings count, as `strtod` reads them, and
    // make the result a real (HTCondor: pow(2, "3") is 8.0).
    let number = |v: &Value| match v {
        Value::Str(s) => parse_real_prefix(s).map(|(r, _)| Value::Real(r)),
        v => Some(v.clone()),
    };
    let (Some(b), Some(e)) = (number(&b), number(&e)) else {
        return Value::Error;
    };
    match (&b, &e) {
        (Value::Int(b), Value::Int(e)) if *e >= 0 => {
            // HTCondor computes in floating point, adds one half and
            // truncates: pow(-3, 3) is -26, not -27; overflow gives i64::MIN.
            Value::Int(real_to_int((*b as f64).powf(*e as f64) + 0.5))
        }
        // Booleans count as 0 and 1 (and make the result a real).
        (
            Value::Int(_) | Value::Real(_) | Value::Bool(_),
            Value::Int(_) | Value::Real(_) | Value::Bool(_),
        ) => match (b.as_real(), e.as_real()) {
            (Some(b), Some(e)) => Value::Real(b.powf(e)),
            _ => Value::Error,
        },
        _ => Value::Error,
    }
}

/// The value of a number (booleans count as 0 and 1) as a real, for the
/// functions that compute in floating point.
trait AsReal {
    fn as_real(&self) -> Option<f64>;
}

impl AsReal for Value {
    fn as_real(&self) -> Option<f64> {
        match *self {
            Value::Int(i) => Some(i as f64),
            Value::Real(r) => Some(r),
            Value::Bool(b) => Some(if b { 1.0 } else { 0.0 }),
            _ => None,
        }
    }
}

/// A value as HTCondor's `quantize` reads a number: integers, reals,
/// booleans (0 and 1) and the number at the start of a string.
fn number_of(v: &Value) -> Option<f64> {
    match v {
        Value::Str(s) => parse_real_prefix(s).map(|(r, _)| r),
        v => v.as_real(),
    }
}

/// Rounds `a` up to a multiple of `q`: two integers give an integer, any
/// other pair of numbers (booleans and numeric strings included) a real; a
/// zero quantum gives `a` back unchanged, whatever its type.
fn quantize_to(a: &Value, q: &Value) -> Value {
    let (Some(av), Some(qv)) = (number_of(a), number_of(q)) else {
        return Value::Error;
    };
    if qv == 0.0 {
        return a.clone();
    }
    match (a, q) {
        (Value::Int(a), Value::Int(q)) => {
            // HTCondor's integer rule, `((a + q - 1) / q) * q` with
            // truncating division: rounding up for positive numbers, and
            // what that formula gives otherwise (quantize(-10, 5) is -5,
            // quantize(-2, -3) is -6), checked against its library.
            let up = a.wrapping_add(*q).wrapping_sub(1);
            Value::Int(up.wrapping_div(*q).wrapping_mul(*q))
        }
        _ => Value::Real((av / qv).ceil() * qv),
    }
}

/// `quantize(a, q)`: `a` rounded up to a multiple of the number `q`; or, when
/// `q` is a list, the first element not below `a` (as it is written), else a
/// multiple of the last; an empty list gives `a` back. `a` must be a number
/// (anything else, UNDEFINED included, is ERROR), as must each element looked at.
pub fn quantize(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let Some([a, q]) = eval_n::<2>(ev, sc, args) else {
        return Value::Error;
    };
    let Some(av) = number_of(&a) else {
        return Value::Error;
    };
    let Value::List(items) = &q else {
        return quantize_to(&a, &q);
    };
    let mut last = None;
    for item in items.iter() {
        let Some(x) = number_of(item) else {
            return Value::Error;
        };
        if x >= av {
            return item.clone();
        }
        last = Some(item);
    }
    match last {
        Some(l) => quantize_to(&a, l),
        None => a,
    }
}

/// `interval(seconds)`: a duration as `[days+]hh:mm:ss`, dropping leading
/// zero fields (`interval(61)` is `"1:01"`), a minus sign in front of a
/// negative one. Reals are truncated, booleans are 0 and 1, a string gives
/// the number at its start; anything else (UNDEFINED too) is ERROR. Like
/// HTCondor, the seconds are a 32-bit C `int`: larger counts wrap around
/// (`interval(2147483648)` is `"-24855+03:14:08"`).
pub fn interval(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let Some([v]) = eval_n::<1>(ev, sc, args) else {
        return Value::Error;
    };
    let secs = match v {
        Value::Int(i) => i,
        Value::Bool(b) => i64::from(b),
        Value::Real(r) => real_to_int(r),
        Value::Str(s) => match parse_real_prefix(&s) {
            Some((r, _)) => real_to_int(r),
            None => return Value::Error,
        },
        _ => return Value::Error,
    };
    // Truncation to 32 bits is the point here, as in HTCondor's C code.
    let secs = i64::from(secs as i32);
    let sign = if secs < 0 { "-" } else { "" };
    let secs = secs.abs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (hours, minutes, seconds) = (rest / 3600, rest % 3600 / 60, rest % 60);
    let text = if days != 0 {
        format!("{sign}{days}+{hours:02}:{minutes:02}:{seconds:02}")
    } else if hours != 0 {
        format!("{sign}{hours}:{minutes:02}:{seconds:02}")
    } else if minutes != 0 {
        format!("{sign}{minutes}:{seconds:02}")
    } else {
        format!("{sign}{seconds}")
    };
    Value::str(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_quantize_rounds_up() {
        assert_eq!(quantize_to(&Value::Int(7), &Value::Int(5)), Value::Int(10));
        assert_eq!(quantize_to(&Value::Int(10), &Value::Int(5)), Value::Int(10));
        assert_eq!(quantize_to(&Value::Int(-3), &Value::Int(2)), Value::Int(-2));
        // As HTCondor 25.14.1 answers, signs mixed included.
        for (a, q, want) in [
            (-10, 5, -5),
            (-7, 5, 0),
            (-1, 5, 0),
            (-2, 2, 0),
            (4, -3, 0),
            (1, -3, -3),
            (-2, -3, -6),
            (-7, -5, -10),
            (3, 5, 5),
        ] {
            assert_eq!(
                quantize_to(&Value::Int(a), &Value::Int(q)),
                Value::Int(want),
                "quantize({a}, {q})"
            );
        }
        assert_eq!(quantize_to(&Value::Int(1), &Value::Int(0)), Value::Int(1));
        assert_eq!(
            quantize_to(&Value::Real(7.5), &Value::Int(2)),
            Value::Real(8.0)
        );
    }
}
