//! The "string list" family (`stringListMember`, `stringListSize`,
//! `stringListSum`...) and `split`: functions over comma- or space-separated
//! lists held in one string.
//!
//! Their rules for what is not a string differ per function, as HTCondor
//! 25.14.1 answers them (checked with `tests/oracle/gen_wide.py`): the size
//! and number functions and `split` want strings and nothing else (UNDEFINED
//! is ERROR); `stringListMember` treats a missing item or list as holding
//! nothing and a missing delimiter as the default; `stringListsIntersect`
//! lets ERROR win over UNDEFINED over anything else.

use std::sync::Arc;

use crate::ast::Expr;
use crate::eval::{Evaluator, Scope};
use crate::value::Value;

use super::absorb;
use super::types::{parse_real_prefix, real_to_int};

/// Delimiters of string lists when none are given.
const DEFAULT_DELIMS: &str = " \t\r\n,";

/// Splits `s` at any of the characters of `delims`, trimming blanks around
/// each item and dropping empty ones.
fn tokens<'s>(s: &'s str, delims: &'s str) -> impl Iterator<Item = &'s str> {
    s.split(move |c: char| delims.contains(c))
        .map(|t| t.trim_matches([' ', '\t']))
        .filter(|t| !t.is_empty())
}

/// Evaluates the arguments of a function that takes strings only: its
/// texts, or ERROR when any is not a string (UNDEFINED included).
fn strict_strings(
    ev: &mut Evaluator<'_>,
    sc: &Scope,
    args: &[Expr],
) -> Result<Vec<Arc<str>>, Value> {
    let vals: Vec<Value> = args.iter().map(|a| ev.eval(a, sc)).collect();
    vals.into_iter()
        .map(|v| match v {
            Value::Str(s) => Ok(s),
            _ => Err(Value::Error),
        })
        .collect()
}

/// Shared body of `stringListMember` and `stringListIMember`.
fn list_member(
    ev: &mut Evaluator<'_>,
    sc: &Scope,
    args: &[Expr],
    eq: fn(&str, &str) -> bool,
) -> Value {
    if !(2..=3).contains(&args.len()) {
        return Value::Error;
    }
    let item = ev.eval(&args[0], sc);
    let list = ev.eval(&args[1], sc);
    let delims = match args.get(2).map(|d| ev.eval(d, sc)) {
        None | Some(Value::Undefined) => None,
        Some(Value::Str(d)) => Some(d),
        Some(_) => return Value::Error,
    };
    let (item, list) = match (&item, &list) {
        (Value::Str(i), Value::Str(l)) => (i, l),
        (Value::Undefined, Value::Undefined) => return Value::Undefined,
        (Value::Undefined, Value::Str(_)) | (Value::Str(_), Value::Undefined) => {
            return Value::Bool(false);
        }
        _ => return Value::Error,
    };
    let d = delims.as_deref().unwrap_or(DEFAULT_DELIMS);
    Value::Bool(tokens(list, d).any(|t| eq(t, item)))
}

/// `stringListMember(s, list [, delims])`: whether `s` is an item of the
/// comma- or space-separated `list`, case-sensitively.
pub fn string_list_member(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    list_member(ev, sc, args, |a, b| a == b)
}

/// `stringListIMember(s, list [, delims])`: like `stringListMember`, ignoring case.
pub fn string_list_imember(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    list_member(ev, sc, args, |a, b| a.eq_ignore_ascii_case(b))
}

/// `stringListsIntersect(a, b [, delims])`: whether the lists share an item.
pub fn string_lists_intersect(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    if !(2..=3).contains(&args.len()) {
        return Value::Error;
    }
    let vals: Vec<Value> = args.iter().map(|a| ev.eval(a, sc)).collect();
    if let Some(v) = absorb(&vals) {
        return v;
    }
    let (Some(a), Some(b)) = (vals[0].as_str(), vals[1].as_str()) else {
        return Value::Error;
    };
    let d = match vals.get(2) {
        None => DEFAULT_DELIMS,
        Some(Value::Str(d)) => d,
        Some(_) => return Value::Error,
    };
    Value::Bool(tokens(a, d).any(|x| tokens(b, d).any(|y| x == y)))
}

/// `stringListSize(list [, delims])`: the number of items.
pub fn string_list_size(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    if !(1..=2).contains(&args.len()) {
        return Value::Error;
    }
    match strict_strings(ev, sc, args) {
        Ok(s) => {
            let d = s.get(1).map_or(DEFAULT_DELIMS, |d| d);
            Value::Int(tokens(&s[0], d).count() as i64)
        }
        Err(v) => v,
    }
}

/// What to compute over the numbers of a string list.
#[derive(Clone, Copy, PartialEq)]
enum Summary {
    Sum,
    Avg,
    Min,
    Max,
}

/// Shared body of `stringListSum`, `stringListAvg`, `stringListMin` and
/// `stringListMax`, computed in floating point as HTCondor does: each item is
/// read as `strtod` reads it (ERROR if it does not start with a number), the
/// result is an integer (the real truncated) unless some item has a
/// character other than digits and signs. An empty list sums and averages
/// to the real 0 and has no minimum or maximum (UNDEFINED). The minimum and
/// maximum start from C's `FLT_MAX` and `FLT_MIN`, as HTCondor's do: the
/// maximum of negative numbers is `FLT_MIN` (2^-126), or 0 as an integer.
fn summarize(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr], what: Summary) -> Value {
    if !(1..=2).contains(&args.len()) {
        return Value::Error;
    }
    let s = match strict_strings(ev, sc, args) {
        Ok(s) => s,
        Err(v) => return v,
    };
    let d = s.get(1).map_or(DEFAULT_DELIMS, |d| d);
    let mut acc = match what {
        Summary::Sum | Summary::Avg => 0.0,
        Summary::Min => f64::from(f32::MAX),
        Summary::Max => f64::from(f32::MIN_POSITIVE),
    };
    let (mut count, mut real) = (0usize, false);
    for t in tokens(&s[0], d) {
        let Some((x, _)) = parse_real_prefix(t) else {
            return Value::Error;
        };
        real |= t.bytes().any(|c| !matches!(c, b'0'..=b'9' | b'+' | b'-'));
        count += 1;
        acc = match what {
            Summary::Sum | Summary::Avg => acc + x,
            Summary::Min if x < acc => x,
            Summary::Max if x > acc => x,
            _ => acc,
        };
    }
    if count == 0 {
        return match what {
            Summary::Sum | Summary::Avg => Value::Real(0.0),
            Summary::Min | Summary::Max => Value::Undefined,
        };
    }
    if what == Summary::Avg {
        acc /= count as f64;
    }
    if real {
        Value::Real(acc)
    } else {
        Value::Int(real_to_int(acc))
    }
}

/// `stringListSum(list [, delims])`.
pub fn string_list_sum(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    summarize(ev, sc, args, Summary::Sum)
}

/// `stringListAvg(list [, delims])`.
pub fn string_list_avg(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    summarize(ev, sc, args, Summary::Avg)
}

/// `stringListMin(list [, delims])`.
pub fn string_list_min(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    summarize(ev, sc, args, Summary::Min)
}

/// `stringListMax(list [, delims])`.
pub fn string_list_max(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    summarize(ev, sc, args, Summary::Max)
}

/// Splits `s` as HTCondor's `split` does: at any character of `seps`
/// (nothing when `seps` is empty), dropping the empty pieces between
/// separators except where a separator other than a blank repeats the
/// previous one, blanks between them aside: `"a,,b"` and `"a, ,b"` have an
/// empty middle item, `" a  b "` has none.
fn split_items(s: &str, seps: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut prev: Option<char> = None;
    if !seps.is_empty() {
        for (i, c) in s.char_indices().filter(|(_, c)| seps.contains(*c)) {
            if i > start {
                out.push(Value::str(&s[start..i]));
            } else if prev == Some(c) && !c.is_whitespace() {
                out.push(Value::str(""));
            }
            if !c.is_whitespace() {
                prev = Some(c);
            }
            start = i + c.len_utf8();
        }
    }
    if start < s.len() {
        out.push(Value::str(&s[start..]));
    }
    out
}

/// `split(s [, seps])`: the items of `s` as a list of strings; by default
/// items are separated by commas and blanks.
pub fn split(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    if !(1..=2).contains(&args.len()) {
        return Value::Error;
    }
    match strict_strings(ev, sc, args) {
        Ok(s) => Value::list(split_items(&s[0], s.get(1).map_or(", \t", |d| d))),
        Err(v) => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_drop_empty_items() {
        let t: Vec<_> = tokens("a, b,,c ", DEFAULT_DELIMS).collect();
        assert_eq!(t, ["a", "b", "c"]);
        let t: Vec<_> = tokens("a: b", ":").collect();
        assert_eq!(t, ["a", "b"]);
    }

    #[test]
    fn split_keeps_empty_items_between_repeated_separators() {
        let items = |s, seps| -> Vec<String> {
            split_items(s, seps)
                .iter()
                .map(|v| v.as_str().unwrap_or("?").to_string())
                .collect()
        };
        assert_eq!(items("a,,b", ", \t"), ["a", "", "b"]);
        assert_eq!(items("a, ,b", ", \t"), ["a", "", "b"]);
        assert_eq!(items(" a  b ", ", \t"), ["a", "b"]);
        assert_eq!(items("a; ;b", "; "), ["a", "", "b"]);
        assert_eq!(items("a,b", ""), ["a,b"]);
        assert!(items("", ",").is_empty());
    }
}
