//! String functions: `strcat`, `substr`, case mapping, comparisons, `join`,
//! `splitUserName`, `splitSlotName` and version comparisons (the string
//! list family and `split` are in `strlist`).

use std::cmp::Ordering;

use crate::ast::Expr;
use crate::eval::{Evaluator, Scope};
use crate::ops::cmp_ignore_case;
use crate::value::{Value, to_display_string};

use super::{absorb, eval_n, scalar_text};

/// `strcat(a, b, ...)`: every argument printed as text and concatenated.
pub fn strcat(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let mut out = String::new();
    for a in args {
        let v = ev.eval(a, sc);
        match v {
            // The first UNDEFINED or ERROR, in argument order, is the result
            // (HTCondor: strcat(undefined, error) is UNDEFINED).
            Value::Error | Value::Undefined => return v,
            Value::Str(s) => out.push_str(&s),
            v => {
                if let Some(t) = to_display_string(&v) {
                    out.push_str(&t);
                }
            }
        }
    }
    Value::str(out)
}

/// `substr(s, offset [, length])`: a negative offset counts from the end; a
/// negative length stops that many bytes before the end. Out-of-range
/// requests are clipped, never an error.
pub fn substr(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    if !(2..=3).contains(&args.len()) {
        return Value::Error;
    }
    let s = ev.eval(&args[0], sc);
    let off = ev.eval(&args[1], sc);
    let len = args.get(2).map(|a| ev.eval(a, sc));
    // HTCondor looks for UNDEFINED before it checks types.
    if s.is_undefined() || off.is_undefined() || len.as_ref().is_some_and(Value::is_undefined) {
        return Value::Undefined;
    }
    let (Value::Str(s), Value::Int(off)) = (&s, &off) else {
        return Value::Error;
    };
    let len = match len {
        None => None,
        Some(Value::Int(l)) => Some(l),
        Some(_) => return Value::Error,
    };
    let n = s.len() as i64;
    let start = if *off < 0 {
        (n + off).max(0)
    } else {
        (*off).min(n)
    };
    let end = match len {
        None => n,
        Some(l) if l < 0 => n + l,
        Some(l) => start.saturating_add(l).min(n),
    }
    .clamp(start, n);
    let bytes = &s.as_bytes()[start as usize..end as usize];
    Value::str(String::from_utf8_lossy(bytes))
}

/// Maps the text of the single argument through `f`.
fn map_case(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr], f: fn(&str) -> String) -> Value {
    let Some([v]) = eval_n::<1>(ev, sc, args) else {
        return Value::Error;
    };
    match &v {
        Value::Undefined => Value::Undefined,
        // A list or an ad is cased as its text (HTCondor: toUpper({"a"}) is "{ \"A\" }").
        Value::List(_) | Value::Ad(_) => {
            to_display_string(&v).map_or(Value::Error, |t| Value::str(f(&t)))
        }
        v => scalar_text(v).map_or(Value::Error, |t| Value::str(f(&t))),
    }
}

/// `toUpper(s)`: ASCII upper case; numbers and booleans are printed first.
pub fn to_upper(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    map_case(ev, sc, args, str::to_ascii_uppercase)
}

/// `toLower(s)`: ASCII lower case; numbers and booleans are printed first.
pub fn to_lower(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    map_case(ev, sc, args, str::to_ascii_lowercase)
}

/// -1, 0 or 1 for an ordering, as the ClassAd comparison functions return.
fn sign(o: Ordering) -> Value {
    Value::Int(match o {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    })
}

/// Compares the texts of two arguments with `cmp`.
fn compare_texts(
    ev: &mut Evaluator<'_>,
    sc: &Scope,
    args: &[Expr],
    cmp: fn(&str, &str) -> Ordering,
) -> Value {
    let Some(vals) = eval_n::<2>(ev, sc, args) else {
        return Value::Error;
    };
    // Unlike most functions, an UNDEFINED argument wins over an ERROR one
    // here (HTCondor's strcmp checks for UNDEFINED first).
    if vals.iter().any(Value::is_undefined) {
        return Value::Undefined;
    }
    if let Some(v) = absorb(&vals) {
        return v;
    }
    // Lists and ads compare as their text, as HTCondor converts them.
    fn text(v: &Value) -> Option<std::borrow::Cow<'_, str>> {
        match v {
            Value::List(_) | Value::Ad(_) => to_display_string(v).map(std::borrow::Cow::Owned),
            v => scalar_text(v),
        }
    }
    match (text(&vals[0]), text(&vals[1])) {
        (Some(a), Some(b)) => sign(cmp(&a, &b)),
        _ => Value::Error,
    }
}

/// `strcmp(a, b)`: byte-wise comparison, -1, 0 or 1.
pub fn strcmp(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    compare_texts(ev, sc, args, |a, b| a.as_bytes().cmp(b.as_bytes()))
}

/// `stricmp(a, b)`: comparison ignoring ASCII case, -1, 0 or 1.
pub fn stricmp(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    compare_texts(ev, sc, args, cmp_ignore_case)
}

/// Appends the text of `v` to `out`; `Err` carries the value to return
/// instead (UNDEFINED or ERROR).
fn push_text(out: &mut String, v: &Value) -> Result<(), Value> {
    match v {
        Value::Str(s) => out.push_str(s),
        Value::Undefined => return Err(Value::Undefined),
        Value::Error => return Err(Value::Error),
        v => out.push_str(&to_display_string(v).unwrap_or_default()),
    }
    Ok(())
}

/// Joins `items` with `sep` as HTCondor does: UNDEFINED items are left out
/// (and if every item is UNDEFINED, so is the result), an ERROR one is the
/// result, anything else is its text (a list unparsed).
fn join_items(sep: Option<&str>, items: &[Value]) -> Value {
    // An UNDEFINED separator joins with nothing, but joins no item into UNDEFINED.
    let (sep, empty) = match sep {
        Some(s) => (s, Value::str("")),
        None => ("", Value::Undefined),
    };
    let mut out = String::new();
    let mut joined = 0usize;
    for item in items {
        if item.is_undefined() {
            continue;
        }
        if joined > 0 {
            out.push_str(sep);
        }
        joined += 1;
        if let Err(v) = push_text(&mut out, item) {
            return v;
        }
    }
    if joined == 0 {
        return if items.is_empty() {
            empty
        } else {
            Value::Undefined
        };
    }
    Value::str(out)
}

/// `join(sep, list)`, `join(sep, a, b, ...)` or `join(list)`: the items'
/// texts separated by `sep` (nothing for the one-argument form). `sep` may
/// be any value but ERROR: UNDEFINED joins with nothing, a number or a
/// boolean with its text.
pub fn join(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    match args {
        [] => Value::Error,
        [list] => match ev.eval(list, sc) {
            Value::List(items) => join_items(Some(""), &items),
            Value::Undefined => Value::Undefined,
            Value::Error => Value::Error,
            // HTCondor joins the elements of a list; anything else has none.
            _ => Value::str(""),
        },
        [sep, rest @ ..] => {
            let sep = ev.eval(sep, sc);
            let items: Vec<Value> = rest.iter().map(|a| ev.eval(a, sc)).collect();
            let sep = match &sep {
                Value::Error => return Value::Error,
                Value::Undefined => None,
                v => Some(to_display_string(v).unwrap_or_default()),
            };
            match items.as_slice() {
                [Value::List(list)] => join_items(sep.as_deref(), list),
                items => join_items(sep.as_deref(), items),
            }
        }
    }
}

/// Splits the single string argument at its first `@`; `None` means there is
/// no `@`. `Err` is the value to return.
fn split_at_sign(
    ev: &mut Evaluator<'_>,
    sc: &Scope,
    args: &[Expr],
) -> Result<(String, Option<String>), Value> {
    let Some([v]) = eval_n::<1>(ev, sc, args) else {
        return Err(Value::Error);
    };
    match v {
        Value::Str(s) => Ok(match s.split_once('@') {
            Some((a, b)) => (a.to_string(), Some(b.to_string())),
            None => (s.to_string(), None),
        }),
        // Like every string function HTCondor added to the language,
        // anything but a string is ERROR, UNDEFINED included.
        _ => Err(Value::Error),
    }
}

/// `splitUserName("user@domain")`: `{ "user", "domain" }`; without `@` the
/// domain is empty.
pub fn split_user_name(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    match split_at_sign(ev, sc, args) {
        Ok((user, domain)) => Value::list(vec![
            Value::str(user),
            Value::str(domain.unwrap_or_default()),
        ]),
        Err(v) => v,
    }
}

/// `splitSlotName("slot1@host")`: `{ "slot1", "host" }`; without `@` the
/// slot is empty and the whole name is the host.
pub fn split_slot_name(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    match split_at_sign(ev, sc, args) {
        Ok((slot, Some(host))) => Value::list(vec![Value::str(slot), Value::str(host)]),
        Ok((host, None)) => Value::list(vec![Value::str(""), Value::str(host)]),
        Err(v) => v,
    }
}

/// Splits a run of digits into its leading zeros and the rest, keeping at
/// least one digit in the rest (`"00"` is one zero and `"0"`).
fn split_zeros(run: &[u8]) -> (usize, &[u8]) {
    let z = run
        .iter()
        .take_while(|&&c| c == b'0')
        .count()
        .min(run.len() - 1);
    (z, &run[z..])
}

/// Compares version strings as HTCondor's `versioncmp` does (found by
/// asking its library, `tests/oracle/gen_wide.py`): text byte by byte, but
/// a run of digits against a run of digits as a number. Between two runs,
/// more leading zeros sort first (the value is the difference of their
/// counts), then the longer number is larger (the difference of their
/// lengths), then the first differing digit decides (the difference of the
/// bytes); a run with leading zeros is a fraction, its digits compared as
/// text (`"01"` against `"010"` is -48). Elsewhere the value is the difference of the first differing
/// bytes, the end of a string counting as 0: `"1.2"` against `"1.10"` is
/// -1, `"a"` against `""` is 97, `"01"` against `"9"` is -1.
pub(crate) fn strverscmp(a: &[u8], b: &[u8]) -> i64 {
    let (mut i, mut j) = (0, 0);
    loop {
        let (ca, cb) = (a.get(i).copied(), b.get(j).copied());
        if let (Some(x), Some(y)) = (ca, cb)
            && x.is_ascii_digit()
            && y.is_ascii_digit()
        {
            let ra = &a[i..i + a[i..].iter().take_while(|c| c.is_ascii_digit()).count()];
            let rb = &b[j..j + b[j..].iter().take_while(|c| c.is_ascii_digit()).count()];
            let ((za, sa), (zb, sb)) = (split_zeros(ra), split_zeros(rb));
            if za != zb {
                return zb as i64 - za as i64;
            }
            if za > 0 {
                // Leading zeros make a fraction: its digits compare as
                // text, and where one run ends the bytes after it decide.
                let k = sa.iter().zip(sb).take_while(|(x, y)| x == y).count();
                if k < sa.len().min(sb.len()) {
                    return i64::from(sa[k]) - i64::from(sb[k]);
                }
                i += za + k;
                j += zb + k;
                continue;
            }
            if sa.len() != sb.len() {
                return sa.len() as i64 - sb.len() as i64;
            }
            if let Some((x, y)) = sa.iter().zip(sb).find(|(x, y)| x != y) {
                return i64::from(*x) - i64::from(*y);
            }
            i += ra.len();
            j += rb.len();
            continue;
        }
        let (x, y) = (ca.unwrap_or(0), cb.unwrap_or(0));
        if x != y || x == 0 {
            return i64::from(x) - i64::from(y);
        }
        i += 1;
        j += 1;
    }
}

/// The ordering of two version strings, by the sign of [`strverscmp`].
pub(crate) fn version_order(a: &str, b: &str) -> Ordering {
    strverscmp(a.as_bytes(), b.as_bytes()).cmp(&0)
}

/// Evaluates `N` version arguments as texts; `Err` is the value to return:
/// UNDEFINED if any is (before ERROR, as HTCondor answers), else ERROR if
/// any is. Anything else is its text, lists and ads unparsed.
fn version_args<const N: usize>(
    ev: &mut Evaluator<'_>,
    sc: &Scope,
    args: &[Expr],
) -> Result<[String; N], Value> {
    let vals = eval_n::<N>(ev, sc, args).ok_or(Value::Error)?;
    if vals.iter().any(Value::is_undefined) {
        return Err(Value::Undefined);
    }
    let mut out: [String; N] = std::array::from_fn(|_| String::new());
    for (o, v) in out.iter_mut().zip(vals.iter()) {
        *o = to_display_string(v).ok_or(Value::Error)?;
    }
    Ok(out)
}

/// `versioncmp(a, b)`: below, at or above zero as version `a` sorts before,
/// with or after `b` (`"1.2" < "1.10"`); see [`strverscmp`] for the value.
pub fn versioncmp(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    match version_args::<2>(ev, sc, args) {
        Ok([a, b]) => Value::Int(strverscmp(a.as_bytes(), b.as_bytes())),
        Err(v) => v,
    }
}

/// Applies `test` to the version ordering of the two arguments.
fn version_test(
    ev: &mut Evaluator<'_>,
    sc: &Scope,
    args: &[Expr],
    test: fn(Ordering) -> bool,
) -> Value {
    match version_args::<2>(ev, sc, args) {
        Ok([a, b]) => Value::Bool(test(version_order(&a, &b))),
        Err(v) => v,
    }
}

/// `versionGT(a, b)`.
pub fn version_gt(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    version_test(ev, sc, args, Ordering::is_gt)
}

/// `versionGE(a, b)`.
pub fn version_ge(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    version_test(ev, sc, args, Ordering::is_ge)
}

/// `versionLT(a, b)`.
pub fn version_lt(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    version_test(ev, sc, args, Ordering::is_lt)
}

/// `versionLE(a, b)`.
pub fn version_le(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    version_test(ev, sc, args, Ordering::is_le)
}

/// `versionEQ(a, b)`.
pub fn version_eq(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    version_test(ev, sc, args, Ordering::is_eq)
}

/// `version_in_range(v, low, high)`: `low <= v <= high` as versions. A
/// missing bound makes it UNDEFINED; after that, a missing or ERROR value
/// anywhere is ERROR (HTCondor: `version_in_range(undefined, 0, 9)` is ERROR).
pub fn version_in_range(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let Some(vals) = eval_n::<3>(ev, sc, args) else {
        return Value::Error;
    };
    if vals[1..].iter().any(Value::is_undefined) {
        return Value::Undefined;
    }
    let text = |v: &Value| to_display_string(v);
    match (text(&vals[0]), text(&vals[1]), text(&vals[2])) {
        (Some(v), Some(lo), Some(hi)) => {
            Value::Bool(version_order(&lo, &v).is_le() && version_order(&v, &hi).is_le())
        }
        _ => Value::Error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(version_order("1.2", "1.10"), Ordering::Less);
        assert_eq!(version_order("8.10.0", "8.9.0"), Ordering::Greater);
        assert_eq!(version_order("1.0", "1.0"), Ordering::Equal);
        assert_eq!(version_order("1.0", "1.0.1"), Ordering::Less);
        assert_eq!(version_order("a", "b"), Ordering::Less);
        // As HTCondor 25.14.1 answers.
        for (a, b, want) in [
            ("1.2", "1.10", -1),
            ("a", "", 97),
            ("-3", "0", -3),
            ("2.5", "7", -5),
            ("0.0", "0", 46),
            ("001", "0", -2),
            ("01", "9", -1),
            ("1.02", "1.2", -1),
            ("1.2", "1.00", 1),
            ("1.02", "1024", -3),
            ("1024", "1", 3),
            ("01", "010", -48),
            ("010", "09", -8),
        ] {
            assert_eq!(strverscmp(a.as_bytes(), b.as_bytes()), want, "{a} vs {b}");
        }
    }
}
