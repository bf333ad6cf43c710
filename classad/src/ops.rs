//! Operator semantics, following HTCondor: strict arithmetic and comparison
//! (ERROR wins over UNDEFINED), left-first non-commutative `&&` and `||`,
//! case-insensitive string comparison, exact `=?=`.

use std::cmp::Ordering;

use crate::ast::{BinaryOp, Expr, UnaryOp};
use crate::eval::{Evaluator, Scope};
use crate::value::Value;

/// The truth of a condition (`?:`, `!`, `&&`, `||`, `ifThenElse`): booleans
/// and numbers (non-zero is true). UNDEFINED and ERROR come back unchanged as
/// `Err`; any other type is `Err(Error)`.
pub fn truth(v: &Value) -> Result<bool, Value> {
    match *v {
        Value::Bool(b) => Ok(b),
        Value::Int(i) => Ok(i != 0),
        Value::Real(r) => Ok(r != 0.0),
        Value::Undefined => Err(Value::Undefined),
        _ => Err(Value::Error),
    }
}

/// Applies a binary operator; `&&` and `||` evaluate their right side only when needed.
pub fn binary(ev: &mut Evaluator<'_>, op: BinaryOp, l: &Expr, r: &Expr, sc: &Scope) -> Value {
    match op {
        BinaryOp::And => {
            let lv = ev.eval(l, sc);
            match truth(&lv) {
                Ok(false) => Value::Bool(false),
                Err(Value::Error) => Value::Error,
                left => match truth(&ev.eval(r, sc)) {
                    Ok(false) => Value::Bool(false),
                    Ok(true) => match left {
                        Ok(_) => Value::Bool(true),
                        Err(_) => Value::Undefined,
                    },
                    Err(e) => e,
                },
            }
        }
        BinaryOp::Or => {
            let lv = ev.eval(l, sc);
            match truth(&lv) {
                Ok(true) => Value::Bool(true),
                Err(Value::Error) => Value::Error,
                left => match truth(&ev.eval(r, sc)) {
                    Ok(true) => Value::Bool(true),
                    Ok(false) => match left {
                        Ok(_) => Value::Bool(false),
                        Err(_) => Value::Undefined,
                    },
                    Err(e) => e,
                },
            }
        }
        _ => {
            let lv = ev.eval(l, sc);
            let rv = ev.eval(r, sc);
            apply(op, &lv, &rv)
        }
    }
}

/// Applies a strict binary operator (anything but `&&`/`||`) to two values.
pub fn apply(op: BinaryOp, l: &Value, r: &Value) -> Value {
    use BinaryOp::*;
    match op {
        Is | IsWord => l.same_as(r).map_or(Value::Error, Value::Bool),
        Isnt | IsntWord => l.same_as(r).map_or(Value::Error, |b| Value::Bool(!b)),
        _ => {
            if l.is_error() || r.is_error() {
                return Value::Error;
            }
            if l.is_undefined() || r.is_undefined() {
                return Value::Undefined;
            }
            match op {
                Eq | Ne | Lt | Le | Gt | Ge => compare_op(op, l, r),
                Add | Sub | Mul | Div | Mod => arith(op, l, r),
                BitOr | BitXor | BitAnd | Shl | Shr | UShr => bitwise(op, l, r),
                And | Or | Is | IsWord | Isnt | IsntWord => {
                    unreachable!("logical and identity operators are handled before strict ones")
                }
            }
        }
    }
}

/// A number for arithmetic: booleans count as 0 and 1.
enum Num {
    I(i64),
    R(f64),
}

fn num(v: &Value) -> Option<Num> {
    match *v {
        Value::Int(i) => Some(Num::I(i)),
        Value::Real(r) => Some(Num::R(r)),
        Value::Bool(b) => Some(Num::I(b as i64)),
        _ => None,
    }
}

fn arith(op: BinaryOp, l: &Value, r: &Value) -> Value {
    use BinaryOp::*;
    let (Some(a), Some(b)) = (num(l), num(r)) else {
        return Value::Error;
    };
    match (a, b) {
        (Num::I(a), Num::I(b)) => match op {
            Add => Value::Int(a.wrapping_add(b)),
            Sub => Value::Int(a.wrapping_sub(b)),
            Mul => Value::Int(a.wrapping_mul(b)),
            Div if b == 0 => Value::Error,
            Div => Value::Int(a.wrapping_div(b)),
            Mod if b == 0 => Value::Error,
            Mod => Value::Int(a.wrapping_rem(b)),
            _ => unreachable!("arith called with a non-arithmetic operator"),
        },
        (a, b) => {
            let a = match a {
                Num::I(i) => i as f64,
                Num::R(r) => r,
            };
            let b = match b {
                Num::I(i) => i as f64,
                Num::R(r) => r,
            };
            let res = match op {
                Add => a + b,
                Sub => a - b,
                Mul => a * b,
                Div if b == 0.0 => return Value::Error,
                Div => a / b,
                // HTCondor takes the modulus of reals on their integer parts,
                // so a divisor below one in magnitude is a division by zero.
                Mod if b as i64 == 0 => return Value::Error,
                Mod => (a as i64).wrapping_rem(b as i64) as f64,
                _ => unreachable!("arith called with a non-arithmetic operator"),
            };
            // HTCondor treats a finite computation that overflows as an error.
            if !res.is_finite() && a.is_finite() && b.is_finite() {
                Value::Error
            } else {
                Value::Real(res)
            }
        }
    }
}

fn bitwise(op: BinaryOp, l: &Value, r: &Value) -> Value {
    use BinaryOp::*;
    let (Value::Int(a), Value::Int(b)) = (l, r) else {
        return Value::Error;
    };
    let (a, b) = (*a, *b);
    Value::Int(match op {
        BitOr => a | b,
        BitXor => a ^ b,
        BitAnd => a & b,
        Shl => a.wrapping_shl(b as u32),
        Shr => a.wrapping_shr(b as u32),
        UShr => ((a as u64).wrapping_shr(b as u32)) as i64,
        _ => unreachable!("bitwise called with a non-bitwise operator"),
    })
}

/// Orders two values for `==`, `<`, ...: numbers (booleans as 0/1) by value,
/// strings ignoring case. `None` when they cannot be compared (ERROR).
pub fn compare(l: &Value, r: &Value) -> Option<Ordering> {
    match (l, r) {
        (Value::Str(a), Value::Str(b)) => Some(cmp_ignore_case(a, b)),
        _ => match (num(l)?, num(r)?) {
            (Num::I(a), Num::I(b)) => Some(a.cmp(&b)),
            (a, b) => {
                let a = match a {
                    Num::I(i) => i as f64,
                    Num::R(r) => r,
                };
                let b = match b {
                    Num::I(i) => i as f64,
                    Num::R(r) => r,
                };
                a.partial_cmp(&b)
            }
        },
    }
}

/// Compares two strings ignoring ASCII case, byte by byte as `strcasecmp` does.
pub fn cmp_ignore_case(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    for (x, y) in a.iter().zip(b.iter()) {
        let (x, y) = (x.to_ascii_lowercase(), y.to_ascii_lowercase());
        if x != y {
            return x.cmp(&y);
        }
    }
    a.len().cmp(&b.len())
}

fn compare_op(op: BinaryOp, l: &Value, r: &Value) -> Value {
    use BinaryOp::*;
    let ord = match (l, r) {
        (Value::Str(_), Value::Str(_)) => compare(l, r),
        (Value::Str(_), _) | (_, Value::Str(_)) => return Value::Error,
        _ if num(l).is_none() || num(r).is_none() => return Value::Error,
        _ => compare(l, r),
    };
    // Only NaN gives no order: every comparison with it is false but `!=`.
    let Some(ord) = ord else {
        return Value::Bool(op == Ne);
    };
    Value::Bool(match op {
        Eq => ord == Ordering::Equal,
        Ne => ord != Ordering::Equal,
        Lt => ord == Ordering::Less,
        Le => ord != Ordering::Greater,
        Gt => ord == Ordering::Greater,
        Ge => ord != Ordering::Less,
        _ => unreachable!("compare_op called with a non-comparison operator"),
    })
}

/// Applies a unary operator to a value.
pub fn unary(op: UnaryOp, v: Value) -> Value {
    match (op, v) {
        (_, Value::Error) => Value::Error,
        (_, Value::Undefined) => Value::Undefined,
        (UnaryOp::Not, v) => match truth(&v) {
            Ok(b) => Value::Bool(!b),
            Err(e) => e,
        },
        (UnaryOp::Neg, Value::Int(i)) => Value::Int(i.wrapping_neg()),
        (UnaryOp::Neg, Value::Real(r)) => Value::Real(-r),
        (UnaryOp::Plus, v @ (Value::Int(_) | Value::Real(_))) => v,
        (UnaryOp::BitNot, Value::Int(i)) => Value::Int(!i),
        _ => Value::Error,
    }
}
