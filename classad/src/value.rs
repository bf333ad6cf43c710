//! Runtime values of the ClassAd language.
//!
//! UNDEFINED and ERROR are ordinary values here, as in HTCondor: an
//! expression never fails in the Rust sense, it evaluates to `Error`.

use std::fmt;
use std::sync::Arc;

use crate::eval::NestedAd;

/// The value of an evaluated ClassAd expression.
#[derive(Clone, Debug)]
pub enum Value {
    /// The result of referring to something that does not exist.
    Undefined,
    /// The result of an operation that makes no sense (type mismatch, division by zero...).
    Error,
    /// `true` or `false`.
    Bool(bool),
    /// A 64-bit integer; arithmetic wraps on overflow.
    Int(i64),
    /// A 64-bit float.
    Real(f64),
    /// A string; shared so that copying a value out of an ad is cheap.
    Str(Arc<str>),
    /// A list of evaluated elements.
    List(Arc<Vec<Value>>),
    /// A nested ClassAd together with the scope it was found in.
    Ad(Arc<NestedAd>),
}

impl Value {
    /// Builds a string value.
    pub fn str(s: impl Into<Arc<str>>) -> Value {
        Value::Str(s.into())
    }

    /// Builds a list value.
    pub fn list(items: Vec<Value>) -> Value {
        Value::List(Arc::new(items))
    }

    /// True for `Undefined`.
    pub fn is_undefined(&self) -> bool {
        matches!(self, Value::Undefined)
    }

    /// True for `Error`.
    pub fn is_error(&self) -> bool {
        matches!(self, Value::Error)
    }

    /// True for `Int` or `Real`.
    pub fn is_number(&self) -> bool {
        matches!(self, Value::Int(_) | Value::Real(_))
    }

    /// True only for the boolean `true`: what matchmaking requires of `Requirements`.
    pub fn is_true(&self) -> bool {
        matches!(self, Value::Bool(true))
    }

    /// The numeric value of an `Int`, `Real` or `Bool` as an f64, used by `Rank`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Int(i) => Some(i as f64),
            Value::Real(r) => Some(r),
            Value::Bool(b) => Some(if b { 1.0 } else { 0.0 }),
            _ => None,
        }
    }

    /// The string of a `Str`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A short name of the value's type, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Undefined => "undefined",
            Value::Error => "error",
            Value::Bool(_) => "boolean",
            Value::Int(_) => "integer",
            Value::Real(_) => "real",
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Ad(_) => "classad",
        }
    }

    /// Identity as `=?=` sees it for scalars: same type and same value,
    /// strings compared case-sensitively. `None` for lists and ads, which
    /// HTCondor refuses to compare with each other (the result is ERROR); a
    /// list or ad against any other type is simply not identical.
    pub fn same_as(&self, other: &Value) -> Option<bool> {
        self.view().same_as(other.view())
    }

    /// A borrowed view of the value, which copies nothing.
    #[inline]
    pub fn view(&self) -> ValueRef<'_> {
        match self {
            Value::Undefined => ValueRef::Undefined,
            Value::Error => ValueRef::Error,
            Value::Bool(b) => ValueRef::Bool(*b),
            Value::Int(i) => ValueRef::Int(*i),
            Value::Real(r) => ValueRef::Real(*r),
            Value::Str(s) => ValueRef::Str(s),
            Value::List(l) => ValueRef::List(l),
            Value::Ad(a) => ValueRef::Ad(a),
        }
    }

    /// Structural equality, used by tests: like `same_as`, extended to lists
    /// element by element and to ads by identity.
    pub fn identical(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::List(a), Value::List(b)) => {
                a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| x.identical(y))
            }
            (Value::Ad(a), Value::Ad(b)) => Arc::ptr_eq(a, b) || Arc::ptr_eq(&a.ad, &b.ad),
            _ => self.same_as(other).unwrap_or(false),
        }
    }
}

/// A value seen without owning it: what operators work on, so that a literal
/// (in an expression, or bound to an attribute, possibly stored inline in the
/// record) is compared without copying it or touching a reference count.
///
/// Every variant holds at most one thin pointer, so that a `ValueRef` (and an
/// `Option` of one) is two words, returned in registers: larger results are
/// returned through memory, and reading them back right after they were
/// written in pieces stalls the processor.
#[derive(Clone, Copy, Debug)]
pub enum ValueRef<'v> {
    /// See [`Value::Undefined`].
    Undefined,
    /// See [`Value::Error`].
    Error,
    /// See [`Value::Bool`].
    Bool(bool),
    /// See [`Value::Int`].
    Int(i64),
    /// See [`Value::Real`].
    Real(f64),
    /// A [`Value::Str`].
    Str(&'v Arc<str>),
    /// A short string stored inline (in a record).
    ShortStr(&'v ShortStr),
    /// See [`Value::List`].
    List(&'v Arc<Vec<Value>>),
    /// See [`Value::Ad`].
    Ad(&'v Arc<NestedAd>),
}

/// A string of at most eight bytes, none of them NUL, stored by value and
/// padded with NULs (so its length needs no separate field). ClassAd
/// strings that attribute values are compared with (architectures,
/// operating systems...) are mostly this short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShortStr([u8; 8]);

impl ShortStr {
    /// The empty string (also an all-zero payload).
    pub const EMPTY: ShortStr = ShortStr([0; 8]);

    /// A copy of `s`, if it is short enough and has no NUL.
    pub fn new(s: &str) -> Option<ShortStr> {
        if s.len() > 8 || s.bytes().any(|b| b == 0) {
            return None;
        }
        let mut bytes = [0; 8];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Some(ShortStr(bytes))
    }

    /// The string's UTF-8 bytes (a `str` would have to be validated again,
    /// and operators compare strings byte by byte anyway).
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        // The padding NULs are the most significant bytes of the
        // little-endian number: count them instead of scanning.
        let pad = u64::from_le_bytes(self.0).leading_zeros() / 8;
        &self.0[..8 - pad as usize]
    }

    /// Reuses the eight bytes for a number (records store scalars in the
    /// same slots as short strings).
    #[inline]
    pub(crate) fn from_u64(n: u64) -> ShortStr {
        ShortStr(n.to_le_bytes())
    }

    /// The number stored by [`ShortStr::from_u64`].
    #[inline]
    pub(crate) fn to_u64(self) -> u64 {
        u64::from_le_bytes(self.0)
    }
}

impl<'v> ValueRef<'v> {
    /// The bytes of a string, of either representation.
    #[inline]
    pub fn str_bytes(self) -> Option<&'v [u8]> {
        match self {
            ValueRef::Str(s) => Some(s.as_bytes()),
            ValueRef::ShortStr(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    /// An owned copy (allocates for a short string, whose bytes are always
    /// valid UTF-8: they are a whole string's).
    pub fn to_value(self) -> Value {
        match self {
            ValueRef::Undefined => Value::Undefined,
            ValueRef::Error => Value::Error,
            ValueRef::Bool(b) => Value::Bool(b),
            ValueRef::Int(i) => Value::Int(i),
            ValueRef::Real(r) => Value::Real(r),
            ValueRef::Str(s) => Value::Str(s.clone()),
            ValueRef::ShortStr(s) => Value::Str(String::from_utf8_lossy(s.as_bytes()).into()),
            ValueRef::List(l) => Value::List(l.clone()),
            ValueRef::Ad(a) => Value::Ad(a.clone()),
        }
    }

    /// See [`Value::same_as`].
    pub fn same_as(self, other: ValueRef<'_>) -> Option<bool> {
        Some(match (self, other) {
            (ValueRef::Undefined, ValueRef::Undefined) | (ValueRef::Error, ValueRef::Error) => true,
            (ValueRef::Bool(a), ValueRef::Bool(b)) => a == b,
            (ValueRef::Int(a), ValueRef::Int(b)) => a == b,
            (ValueRef::Real(a), ValueRef::Real(b)) => a == b || (a.is_nan() && b.is_nan()),
            (ValueRef::List(_), ValueRef::List(_)) | (ValueRef::Ad(_), ValueRef::Ad(_)) => {
                return None;
            }
            (a, b) => match (a.str_bytes(), b.str_bytes()) {
                (Some(a), Some(b)) => a == b,
                _ => false,
            },
        })
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        self.identical(other)
    }
}

/// Formats a real the way HTCondor does when it turns one into a string:
/// `%.15E`, except zero, which it writes `0.0` (or `-0.0`), and NaN and the
/// infinities, which it writes `real("NaN")`, `real("INF")`, `real("-INF")`.
pub fn real_to_string(r: f64) -> String {
    if r == 0.0 {
        return if r.is_sign_negative() { "-0.0" } else { "0.0" }.to_string();
    }
    // What HTCondor writes for the numbers `%E` has no digits for (the
    // sign of a NaN is dropped: string(0 / -0.0) is real("NaN") there).
    if r.is_nan() {
        return "real(\"NaN\")".to_string();
    }
    if r.is_infinite() {
        return if r < 0.0 {
            "real(\"-INF\")"
        } else {
            "real(\"INF\")"
        }
        .to_string();
    }
    // Rust prints `1.500000000000000E0`; C prints `1.500000000000000E+00`.
    let s = format!("{r:.15E}");
    let (mant, exp) = s.split_once('E').expect("{:E} always has an exponent");
    let exp: i32 = exp.parse().expect("{:E} exponent is an integer");
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mant}E{sign}{:02}", exp.abs())
}

/// Converts a scalar to a string as `string()`, `strcat()` and `join()` do.
/// Lists and ads are printed in ClassAd syntax. `None` for UNDEFINED and ERROR.
pub fn to_display_string(v: &Value) -> Option<String> {
    Some(match v {
        Value::Undefined | Value::Error => return None,
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Real(r) => real_to_string(*r),
        Value::Str(s) => s.to_string(),
        Value::List(_) | Value::Ad(_) => crate::unparse::as_text(v),
    })
}

impl fmt::Display for Value {
    /// Prints the value in ClassAd syntax (strings quoted and escaped).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::unparse::write_value(f, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reals_print_like_c_percent_e() {
        assert_eq!(real_to_string(1.5), "1.500000000000000E+00");
        assert_eq!(real_to_string(-2.0), "-2.000000000000000E+00");
        assert_eq!(real_to_string(1e-100), "1.000000000000000E-100");
        assert_eq!(real_to_string(0.0), "0.0");
        assert_eq!(real_to_string(-0.0), "-0.0");
        assert_eq!(real_to_string(-f64::NAN), "real(\"NaN\")");
        assert_eq!(real_to_string(f64::NEG_INFINITY), "real(\"-INF\")");
    }
}
