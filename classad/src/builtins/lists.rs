//! List functions: `size`, `member`, `identicalMember`, `sum`, `avg`, `min`,
//! `max`, `anyCompare`, `allCompare`.

use crate::ast::{BinaryOp, Expr};
use crate::eval::{Evaluator, Scope};
use crate::ops;
use crate::value::Value;

use super::eval_n;

/// `size(x)`: the length of a string, the number of elements of a list or
/// the number of attributes of an ad.
pub fn size(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let Some([v]) = eval_n::<1>(ev, sc, args) else {
        return Value::Error;
    };
    match v {
        Value::Undefined => Value::Undefined,
        Value::Str(s) => Value::Int(s.len() as i64),
        Value::List(items) => Value::Int(items.len() as i64),
        Value::Ad(ad) => Value::Int(ad.ad.len() as i64),
        _ => Value::Error,
    }
}

/// `member(x, list)`: whether some element `== x` (strings ignore case).
/// An UNDEFINED `x` gives UNDEFINED whatever the list is.
pub fn member(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let Some([x, l]) = eval_n::<2>(ev, sc, args) else {
        return Value::Error;
    };
    match (&x, &l) {
        (Value::Undefined, _) | (_, Value::Undefined) => Value::Undefined,
        (Value::Error | Value::List(_) | Value::Ad(_), _) => Value::Error,
        (x, Value::List(items)) => Value::Bool(
            items
                .iter()
                .any(|e| ops::apply(BinaryOp::Eq, x, e).is_true()),
        ),
        _ => Value::Error,
    }
}

/// `identicalMember(x, list)`: whether some element `=?= x`.
pub fn identical_member(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let Some([x, l]) = eval_n::<2>(ev, sc, args) else {
        return Value::Error;
    };
    match (&x, &l) {
        (_, Value::Undefined) => Value::Undefined,
        (Value::List(_) | Value::Ad(_), _) => Value::Error,
        (x, Value::List(items)) => Value::Bool(items.iter().any(|e| x.same_as(e) == Some(true))),
        _ => Value::Error,
    }
}

/// The numbers of a list argument, UNDEFINED elements skipped. `Err` is the
/// value to return: UNDEFINED for an undefined list, ERROR for anything that
/// is not a list of numbers.
fn numbers(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Result<Vec<Value>, Value> {
    let [l] = eval_n::<1>(ev, sc, args).ok_or(Value::Error)?;
    let items = match l {
        Value::List(items) => items,
        Value::Undefined => return Err(Value::Undefined),
        _ => return Err(Value::Error),
    };
    let mut out = Vec::with_capacity(items.len());
    for v in items.iter() {
        match v {
            Value::Undefined => {}
            Value::Int(_) | Value::Real(_) | Value::Bool(_) => out.push(v.clone()),
            _ => return Err(Value::Error),
        }
    }
    Ok(out)
}

/// The value of a number (a boolean counts as 0 or 1) as a real.
fn real_of(v: &Value) -> f64 {
    match *v {
        Value::Int(i) => i as f64,
        Value::Real(r) => r,
        Value::Bool(b) => f64::from(u8::from(b)),
        _ => f64::NAN,
    }
}

/// Adds up numbers as HTCondor's `+` folds them: one number is the sum as
/// it is (`sum({true})` is `true`); more give an integer while none is a
/// real (booleans counting as 0 and 1, wrapping), else a real.
fn total(nums: &[Value]) -> Value {
    if let [one] = nums {
        return one.clone();
    }
    if !nums.iter().any(|v| matches!(v, Value::Real(_))) {
        Value::Int(nums.iter().fold(0i64, |acc, v| match v {
            Value::Int(i) => acc.wrapping_add(*i),
            Value::Bool(b) => acc.wrapping_add(i64::from(*b)),
            _ => acc,
        }))
    } else {
        Value::Real(nums.iter().map(real_of).sum())
    }
}

/// `sum(list)`: the sum of the numbers of `list` (0 when empty).
pub fn sum(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    match numbers(ev, sc, args) {
        Ok(nums) => total(&nums),
        Err(v) => v,
    }
}

/// `avg(list)`: the mean of the numbers of `list`, a real (integer 0 when empty).
pub fn avg(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    match numbers(ev, sc, args) {
        Ok(nums) if nums.is_empty() => Value::Int(0),
        Ok(nums) => Value::Real(real_of(&total(&nums)) / nums.len() as f64),
        Err(v) => v,
    }
}

/// The smallest (or largest) number of the list; a real if any number is.
fn extreme(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr], want: std::cmp::Ordering) -> Value {
    let nums = match numbers(ev, sc, args) {
        Ok(n) => n,
        Err(v) => return v,
    };
    let mut best: Option<&Value> = None;
    for v in &nums {
        best = match best {
            Some(b) if ops::compare(v, b) != Some(want) => Some(b),
            _ => Some(v),
        };
    }
    match best {
        None => Value::Undefined,
        // One element is the answer as it is (`max({false})` is `false`);
        // between several, the comparison promotes: a real if any is one,
        // else an integer (booleans as 0 and 1).
        Some(b) if nums.len() == 1 => b.clone(),
        Some(b) if nums.iter().any(|v| matches!(v, Value::Real(_))) => Value::Real(real_of(b)),
        Some(Value::Bool(b)) => Value::Int(i64::from(*b)),
        Some(b) => b.clone(),
    }
}

/// `min(list)`: the smallest number of `list`, UNDEFINED when there is none.
pub fn min(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    extreme(ev, sc, args, std::cmp::Ordering::Less)
}

/// `max(list)`: the largest number of `list`, UNDEFINED when there is none.
pub fn max(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    extreme(ev, sc, args, std::cmp::Ordering::Greater)
}

/// The operator named by the first argument of `anyCompare`/`allCompare`.
fn compare_op(name: &str) -> Option<BinaryOp> {
    use BinaryOp::*;
    Some(match name.to_ascii_lowercase().as_str() {
        "<" => Lt,
        "<=" => Le,
        "==" => Eq,
        "!=" => Ne,
        ">" => Gt,
        ">=" => Ge,
        "=?=" | "is" => Is,
        "=!=" | "isnt" => Isnt,
        _ => return None,
    })
}

/// Shared body of `anyCompare(op, list, x)` and `allCompare(op, list, x)`:
/// applies `element op x` to each element.
fn quantified(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr], all: bool) -> Value {
    let Some([op, list, x]) = eval_n::<3>(ev, sc, args) else {
        return Value::Error;
    };
    let op = match &op {
        Value::Str(s) => match compare_op(s) {
            Some(op) => op,
            None => return Value::Error,
        },
        Value::Undefined => return Value::Undefined,
        _ => return Value::Error,
    };
    let items = match list {
        Value::List(items) => items,
        Value::Undefined => return Value::Undefined,
        _ => return Value::Error,
    };
    // In order, stopping at the first element that settles the answer; a
    // comparison that is ERROR before that makes the answer ERROR (HTCondor:
    // anyCompare("<", {1, "a"}, 2) is true, anyCompare("<", {3, "a"}, 2) ERROR).
    for e in items.iter() {
        let r = ops::apply(op, e, &x);
        if r.is_error() {
            return Value::Error;
        }
        if r.is_true() != all {
            return Value::Bool(!all);
        }
    }
    Value::Bool(all)
}

/// `anyCompare(op, list, x)`: whether `e op x` is true for some element `e`.
pub fn any_compare(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    quantified(ev, sc, args, false)
}

/// `allCompare(op, list, x)`: whether `e op x` is true for every element `e`.
pub fn all_compare(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    quantified(ev, sc, args, true)
}
