//! Operator semantics, following HTCondor: strict arithmetic and comparison
//! (ERROR wins over UNDEFINED), left-first non-commutative `&&` and `||`,
//! case-insensitive string comparison, exact `=?=`.

use std::cmp::Ordering;

use crate::ast::{BinaryOp, Expr, UnaryOp};
use crate::eval::{Evaluator, Operand, Scope};
use crate::value::{Value, ValueRef};

/// The truth of a condition (`?:`, `!`, `&&`, `||`, `ifThenElse`): booleans
/// and numbers (non-zero is true). UNDEFINED and ERROR come back unchanged as
/// `Err`; any other type is `Err(Error)`.
pub fn truth(v: &Value) -> Result<bool, Value> {
    truth_ref(v.view())
}

/// [`truth`] of a borrowed value.
#[inline]
pub fn truth_ref(v: ValueRef<'_>) -> Result<bool, Value> {
    match v {
        ValueRef::Bool(b) => Ok(b),
        ValueRef::Int(i) => Ok(i != 0),
        ValueRef::Real(r) => Ok(r != 0.0),
        ValueRef::Undefined => Err(Value::Undefined),
        _ => Err(Value::Error),
    }
}

/// The truth of a condition as [`truth`] gives it, in one byte: what `&&`,
/// `||` and comparisons pass between each other. A [`Value`] is returned
/// through memory, and reading it back right after it was written in pieces
/// stalls the processor; that was most of the cost of a Requirements.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Truth {
    /// Boolean `false` (or a zero number).
    False,
    /// Boolean `true` (or a non-zero number).
    True,
    /// UNDEFINED.
    Undefined,
    /// ERROR, or a value that is neither boolean nor number.
    Error,
}

impl Truth {
    /// The truth of a value, as [`truth_ref`].
    #[inline]
    pub(crate) fn of(v: ValueRef<'_>) -> Truth {
        match v {
            ValueRef::Bool(b) => Truth::from(b),
            ValueRef::Int(i) => Truth::from(i != 0),
            ValueRef::Real(r) => Truth::from(r != 0.0),
            ValueRef::Undefined => Truth::Undefined,
            _ => Truth::Error,
        }
    }

    /// The value of a `&&`, `||` or comparison whose result this is.
    #[inline]
    pub(crate) fn value(self) -> Value {
        match self {
            Truth::False => Value::Bool(false),
            Truth::True => Value::Bool(true),
            Truth::Undefined => Value::Undefined,
            Truth::Error => Value::Error,
        }
    }
}

impl From<bool> for Truth {
    #[inline]
    fn from(b: bool) -> Truth {
        if b { Truth::True } else { Truth::False }
    }
}

/// The value of an operand, borrowed when it is a literal (see
/// `Evaluator::operand`), else evaluated into `$slot`, a `let` declared by
/// the caller (a macro rather than a function because the result may
/// borrow that slot).
macro_rules! operand {
    ($ev:expr, $e:expr, $sc:expr, $slot:ident) => {
        match $ev.operand($e, $sc) {
            Operand::Value(v) => v,
            Operand::Attr(found) => {
                $slot = $ev.eval_attr_expr(&found, $sc);
                $slot.view()
            }
            Operand::Other => {
                $slot = $ev.eval($e, $sc);
                $slot.view()
            }
        }
    };
}

/// Applies a binary operator; `&&` and `||` evaluate their right side only when needed.
pub fn binary(ev: &mut Evaluator<'_>, op: BinaryOp, l: &Expr, r: &Expr, sc: &Scope) -> Value {
    use BinaryOp::*;
    match op {
        And | Or | Eq | Ne | Lt | Le | Gt | Ge | Is | Isnt | IsWord | IsntWord => {
            logic_binary(ev, op, l, r, sc).value()
        }
        _ => {
            let (lslot, rslot);
            let lv = operand!(ev, l, sc, lslot);
            let rv = operand!(ev, r, sc, rslot);
            apply_ref(op, lv, rv)
        }
    }
}

/// The truth of `e`, as `truth(eval(e))` but without building a [`Value`]
/// for logical operators and comparisons. Counts depth as `eval` does.
fn logic(ev: &mut Evaluator<'_>, e: &Expr, sc: &Scope) -> Truth {
    use BinaryOp::*;
    let t = match e {
        Expr::Binary(op @ (And | Or), b) => {
            if !ev.enter() {
                return Truth::Error;
            }
            and_or(ev, *op, &b.0, &b.1, sc)
        }
        Expr::Binary(op @ (Eq | Ne | Lt | Le | Gt | Ge | Is | Isnt | IsWord | IsntWord), b) => {
            if !ev.enter() {
                return Truth::Error;
            }
            compare_exprs(ev, *op, &b.0, &b.1, sc)
        }
        Expr::Paren(inner) => {
            if !ev.enter() {
                return Truth::Error;
            }
            logic(ev, inner, sc)
        }
        _ => {
            return match ev.operand(e, sc) {
                Operand::Value(v) => Truth::of(v),
                // An attribute bound to a condition (`Requirements = Start`).
                Operand::Attr(found) => ev.with_attr(&found, sc, Truth::Undefined, logic),
                Operand::Other => Truth::of(ev.eval(e, sc).view()),
            };
        }
    };
    ev.leave();
    t
}

/// Whether `e` evaluates to boolean `true` (not merely a non-zero number):
/// what matchmaking asks of `Requirements`. As `eval(e).is_true()`, but
/// without building a [`Value`] when `e` is a condition.
pub(crate) fn is_true(ev: &mut Evaluator<'_>, e: &Expr, sc: &Scope) -> bool {
    match ev.operand(e, sc) {
        Operand::Value(v) => matches!(v, ValueRef::Bool(true)),
        Operand::Attr(found) => ev.with_attr(&found, sc, false, is_true),
        // Logical operators and comparisons give only booleans, UNDEFINED
        // or ERROR, so for them "true" and "boolean true" are the same.
        Operand::Other if gives_boolean(e) => logic(ev, e, sc) == Truth::True,
        Operand::Other => ev.eval(e, sc).is_true(),
    }
}

/// Whether `e` is a logical operator or comparison (possibly parenthesized),
/// whose value is a boolean unless it is UNDEFINED or ERROR.
fn gives_boolean(e: &Expr) -> bool {
    use BinaryOp::*;
    match e {
        Expr::Binary(op, _) => matches!(
            op,
            And | Or | Eq | Ne | Lt | Le | Gt | Ge | Is | Isnt | IsWord | IsntWord
        ),
        Expr::Paren(inner) => gives_boolean(inner),
        _ => false,
    }
}

/// A logical or comparison operator applied to `l` and `r`.
fn logic_binary(ev: &mut Evaluator<'_>, op: BinaryOp, l: &Expr, r: &Expr, sc: &Scope) -> Truth {
    match op {
        BinaryOp::And | BinaryOp::Or => and_or(ev, op, l, r, sc),
        _ => compare_exprs(ev, op, l, r, sc),
    }
}

/// `l && r` or `l || r`: HTCondor's non-commutative three-valued logic,
/// where the left side decides alone when it can.
#[cfg_attr(not(debug_assertions), inline(always))]
fn and_or(ev: &mut Evaluator<'_>, op: BinaryOp, l: &Expr, r: &Expr, sc: &Scope) -> Truth {
    // `absorbing` decides alone (false for `&&`, true for `||`); UNDEFINED
    // on the left turns the other boolean on the right into UNDEFINED.
    let (absorbing, neutral) = if op == BinaryOp::And {
        (Truth::False, Truth::True)
    } else {
        (Truth::True, Truth::False)
    };
    match condition(ev, l, sc) {
        Truth::Error => Truth::Error,
        left if left == absorbing => absorbing,
        left => match condition(ev, r, sc) {
            right if right == neutral && left == Truth::Undefined => Truth::Undefined,
            right => right,
        },
    }
}

/// [`logic`] of an operand of `&&` or `||`, with the usual case (a
/// comparison) handled on the spot rather than through another call.
#[cfg_attr(not(debug_assertions), inline(always))]
fn condition(ev: &mut Evaluator<'_>, e: &Expr, sc: &Scope) -> Truth {
    use BinaryOp::*;
    match e {
        Expr::Binary(op @ (Eq | Ne | Lt | Le | Gt | Ge | Is | Isnt | IsWord | IsntWord), b) => {
            if !ev.enter() {
                return Truth::Error;
            }
            let t = compare_exprs(ev, *op, &b.0, &b.1, sc);
            ev.leave();
            t
        }
        _ => logic(ev, e, sc),
    }
}

/// A comparison or identity operator applied to `l` and `r`. Kept apart
/// from `&&` and `||` so that each function saves only the registers it
/// needs: the call overhead is a good part of evaluating a Requirements.
#[inline(never)]
fn compare_exprs(ev: &mut Evaluator<'_>, op: BinaryOp, l: &Expr, r: &Expr, sc: &Scope) -> Truth {
    let (lslot, rslot);
    let lv = operand!(ev, l, sc, lslot);
    let rv = operand!(ev, r, sc, rslot);
    compare_truth(op, lv, rv)
}

/// Applies a strict binary operator (anything but `&&`/`||`) to two values.
pub fn apply(op: BinaryOp, l: &Value, r: &Value) -> Value {
    apply_ref(op, l.view(), r.view())
}

/// [`apply`] to borrowed values.
#[inline]
pub fn apply_ref(op: BinaryOp, l: ValueRef<'_>, r: ValueRef<'_>) -> Value {
    use BinaryOp::*;
    match op {
        Is | IsWord | Isnt | IsntWord => compare_truth(op, l, r).value(),
        _ => {
            if matches!(l, ValueRef::Error) || matches!(r, ValueRef::Error) {
                return Value::Error;
            }
            if matches!(l, ValueRef::Undefined) || matches!(r, ValueRef::Undefined) {
                return Value::Undefined;
            }
            match op {
                Eq | Ne | Lt | Le | Gt | Ge => compare_op(op, l, r).value(),
                Add | Sub | Mul | Div | Mod => arith(op, l, r),
                BitOr | BitXor | BitAnd | Shl | Shr | UShr => bitwise(op, l, r),
                And | Or | Is | IsWord | Isnt | IsntWord => {
                    unreachable!("logical and identity operators are handled before strict ones")
                }
            }
        }
    }
}

/// A comparison or identity operator applied to two values.
#[cfg_attr(not(debug_assertions), inline(always))]
fn compare_truth(op: BinaryOp, l: ValueRef<'_>, r: ValueRef<'_>) -> Truth {
    use BinaryOp::*;
    match op {
        Is | IsWord => l.same_as(r).map_or(Truth::Error, Truth::from),
        Isnt | IsntWord => l.same_as(r).map_or(Truth::Error, |b| Truth::from(!b)),
        _ => {
            if matches!(l, ValueRef::Error) || matches!(r, ValueRef::Error) {
                return Truth::Error;
            }
            if matches!(l, ValueRef::Undefined) || matches!(r, ValueRef::Undefined) {
                return Truth::Undefined;
            }
            compare_op(op, l, r)
        }
    }
}

/// A number for arithmetic: booleans count as 0 and 1.
#[derive(Clone, Copy)]
enum Num {
    I(i64),
    R(f64),
}

impl Num {
    fn real(self) -> f64 {
        match self {
            Num::I(i) => i as f64,
            Num::R(r) => r,
        }
    }
}

#[inline]
fn num(v: ValueRef<'_>) -> Option<Num> {
    match v {
        ValueRef::Int(i) => Some(Num::I(i)),
        ValueRef::Real(r) => Some(Num::R(r)),
        ValueRef::Bool(b) => Some(Num::I(b as i64)),
        _ => None,
    }
}

fn arith(op: BinaryOp, l: ValueRef<'_>, r: ValueRef<'_>) -> Value {
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
            let (a, b) = (a.real(), b.real());
            let res = match op {
                Add => a + b,
                Sub => a - b,
                Mul => a * b,
                Div => a / b,
                // HTCondor defines `%` on integers only: once an operand is
                // real (booleans count as integers) the result is ERROR, as
                // its `doRealArithmetic` sets EDOM for the modulus.
                Mod => return Value::Error,
                _ => unreachable!("arith called with a non-arithmetic operator"),
            };
            // HTCondor treats a finite computation that ends at +inf as an
            // error (a positive number over zero too), but keeps -inf and NaN:
            // -1.25 / 0 is -inf, 0.0 / 0 is NaN, 1e308 * 10 is ERROR.
            if res == f64::INFINITY && a.is_finite() && b.is_finite() {
                Value::Error
            } else {
                Value::Real(res)
            }
        }
    }
}

fn bitwise(op: BinaryOp, l: ValueRef<'_>, r: ValueRef<'_>) -> Value {
    use BinaryOp::*;
    let (ValueRef::Int(a), ValueRef::Int(b)) = (l, r) else {
        return Value::Error;
    };
    Value::Int(match op {
        BitOr => a | b,
        BitXor => a ^ b,
        BitAnd => a & b,
        Shl => a.wrapping_shl(b as u32),
        // As HTCondor answers: a negative number shifted by 64 or more is
        // -1 and by a negative count is itself; otherwise the count is
        // taken modulo 64 (the hardware's rule).
        Shr if a < 0 && b >= 64 => -1,
        Shr if a < 0 && b < 0 => a,
        Shr => a.wrapping_shr(b as u32),
        UShr => ((a as u64).wrapping_shr(b as u32)) as i64,
        _ => unreachable!("bitwise called with a non-bitwise operator"),
    })
}

/// Orders two values for `==`, `<`, ...: numbers (booleans as 0/1) by value,
/// strings ignoring case. `None` when they cannot be compared (ERROR).
pub fn compare(l: &Value, r: &Value) -> Option<Ordering> {
    compare_ref(l.view(), r.view())
}

/// [`compare`] of borrowed values.
#[inline]
pub fn compare_ref(l: ValueRef<'_>, r: ValueRef<'_>) -> Option<Ordering> {
    match (l.str_bytes(), r.str_bytes()) {
        (Some(a), Some(b)) => Some(cmp_bytes_ignore_case(a, b)),
        _ => match (num(l)?, num(r)?) {
            (Num::I(a), Num::I(b)) => Some(a.cmp(&b)),
            (a, b) => a.real().partial_cmp(&b.real()),
        },
    }
}

/// Compares two strings ignoring ASCII case, byte by byte as `strcasecmp` does.
pub fn cmp_ignore_case(a: &str, b: &str) -> Ordering {
    cmp_bytes_ignore_case(a.as_bytes(), b.as_bytes())
}

/// Whether two strings are equal ignoring ASCII case, as
/// `<[u8]>::eq_ignore_ascii_case` but eight bytes at a time: string equality
/// is most of what Requirements expressions do with strings.
#[cfg_attr(not(debug_assertions), inline(always))]
fn eq_ignore_case(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n <= 8 {
        return fold_case(load_short(a)) == fold_case(load_short(b));
    }
    // Whole words, then the last eight bytes (overlapping the previous word).
    let word = |s: &[u8], i: usize| {
        fold_case(u64::from_le_bytes(
            s[i..i + 8].try_into().expect("slice of eight bytes"),
        ))
    };
    (0..n / 8).all(|k| word(a, 8 * k) == word(b, 8 * k)) && word(a, n - 8) == word(b, n - 8)
}

/// Up to eight bytes packed into a word, for comparing two strings of the
/// same length `n`: reads overlap for lengths that are not 4 or 8, which is
/// fine since both strings are read at the same positions.
#[cfg_attr(not(debug_assertions), inline(always))]
fn load_short(s: &[u8]) -> u64 {
    let n = s.len();
    let u32_at = |i: usize| u32::from_le_bytes(s[i..i + 4].try_into().expect("four bytes"));
    match n {
        4..=8 => u64::from(u32_at(0)) | (u64::from(u32_at(n - 4)) << 32),
        1..=3 => u64::from(s[0]) | (u64::from(s[n / 2]) << 8) | (u64::from(s[n - 1]) << 16),
        _ => 0,
    }
}

/// Lowercases the ASCII letters among the eight bytes of `x`, leaving every
/// other byte (including non-ASCII ones) alone.
#[inline]
fn fold_case(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Per byte, on its low seven bits (so that no sum carries into the next
    // byte): the high bit of `ge_a` says ">= 'A'", that of `gt_z` "> 'Z'".
    let low = x & !HIGH;
    let ge_a = low + ONES * (0x80 - u64::from(b'A'));
    let gt_z = low + ONES * (0x80 - u64::from(b'Z') - 1);
    let upper = ge_a & !gt_z & !x & HIGH;
    x | (upper >> 2)
}

/// [`cmp_ignore_case`] on the strings' bytes.
#[inline]
fn cmp_bytes_ignore_case(a: &[u8], b: &[u8]) -> Ordering {
    for (x, y) in a.iter().zip(b.iter()) {
        let (x, y) = (x.to_ascii_lowercase(), y.to_ascii_lowercase());
        if x != y {
            return x.cmp(&y);
        }
    }
    a.len().cmp(&b.len())
}

#[cfg_attr(not(debug_assertions), inline(always))]
fn compare_op(op: BinaryOp, l: ValueRef<'_>, r: ValueRef<'_>) -> Truth {
    use BinaryOp::*;
    let ord = match (l.str_bytes(), r.str_bytes()) {
        // Equality of strings needs no order: equal lengths are checked first.
        (Some(a), Some(b)) if matches!(op, Eq | Ne) => {
            return Truth::from(eq_ignore_case(a, b) == (op == Eq));
        }
        (Some(a), Some(b)) => Some(cmp_bytes_ignore_case(a, b)),
        (Some(_), None) | (None, Some(_)) => return Truth::Error,
        (None, None) => match (num(l), num(r)) {
            (Some(Num::I(a)), Some(Num::I(b))) => Some(a.cmp(&b)),
            (Some(a), Some(b)) => a.real().partial_cmp(&b.real()),
            _ => return Truth::Error,
        },
    };
    // Only NaN gives no order: every comparison with it is false but `!=`.
    let Some(ord) = ord else {
        return Truth::from(op == Ne);
    };
    Truth::from(match op {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_expr;

    fn eval(src: &str) -> Value {
        crate::eval_with(
            &parse_expr(src).expect("test expression parses"),
            None,
            None,
        )
    }

    #[test]
    fn fold_case_lowercases_exactly_the_ascii_capitals() {
        for b in 0..=255u8 {
            for pos in 0..8 {
                let mut bytes = *b"xY@[`{Z\xc3";
                bytes[pos] = b;
                let want = bytes.map(|c| c.to_ascii_lowercase());
                assert_eq!(
                    fold_case(u64::from_le_bytes(bytes)),
                    u64::from_le_bytes(want),
                    "byte {b:#x} at {pos}"
                );
            }
        }
    }

    #[test]
    fn string_equality_agrees_with_the_standard_library() {
        let base = "aZ@[`{é0_LINUX-x86_64-Mixed Case";
        let mut samples: Vec<String> = Vec::new();
        for len in 0..=base.len() {
            if let Some(s) = base.get(..len) {
                samples.push(s.to_string());
                samples.push(s.to_ascii_uppercase());
                samples.push(s.to_ascii_lowercase());
                samples.push(s.replace('a', "b"));
            }
        }
        for a in &samples {
            for b in &samples {
                let (a, b) = (a.as_bytes(), b.as_bytes());
                assert_eq!(
                    eq_ignore_case(a, b),
                    a.eq_ignore_ascii_case(b),
                    "{a:?} {b:?}"
                );
            }
        }
    }

    #[test]
    fn modulus_is_for_integers_only() {
        assert!(eval("7 % 3").same_as(&Value::Int(1)).unwrap());
        assert!(eval("-7 % 3").same_as(&Value::Int(-1)).unwrap());
        assert!(eval("true % 2").same_as(&Value::Int(1)).unwrap());
        for src in [
            "7 % 0",
            "7.5 % 2",
            "7 % 2.0",
            "false % 3.0",
            "0.25 % true",
            "1.0 % 1.0",
        ] {
            assert!(eval(src).is_error(), "{src}");
        }
        assert!(eval("undefined % 2.0").is_undefined());
    }

    /// HTCondor's `&&` and `||` on values, written as plainly as possible.
    fn reference(and: bool, l: &Value, r: &Value) -> Value {
        let decisive = !and;
        match truth(l) {
            Ok(b) if b == decisive => Value::Bool(decisive),
            Err(Value::Error) => Value::Error,
            left => match truth(r) {
                Ok(b) if b == decisive => Value::Bool(decisive),
                Ok(b) if left.is_ok() => Value::Bool(b),
                Ok(_) => Value::Undefined,
                Err(e) => e,
            },
        }
    }

    #[test]
    fn logical_operators_follow_the_reference_at_any_nesting() {
        let operands = [
            "true",
            "false",
            "undefined",
            "error",
            "1",
            "0",
            "2.5",
            "\"s\"",
        ];
        for (op, and) in [("&&", true), ("||", false)] {
            for l in operands {
                for r in operands {
                    let (lv, rv) = (eval(l), eval(r));
                    let want = reference(and, &lv, &rv);
                    let src = format!("{l} {op} {r}");
                    assert!(eval(&src).same_as(&want).unwrap(), "{src}");
                    // Nested, the inner operator goes through `logic`.
                    for outer in ["true", "false", "undefined"] {
                        let ov = eval(outer);
                        let nested = format!("({src}) {op} {outer}");
                        let want2 = reference(and, &want, &ov);
                        assert!(eval(&nested).same_as(&want2).unwrap(), "{nested}");
                        let nested = format!("{outer} {op} ({src})");
                        let want2 = reference(and, &ov, &want);
                        assert!(eval(&nested).same_as(&want2).unwrap(), "{nested}");
                    }
                }
            }
        }
    }
}
