//! Control and meta functions: `ifThenElse`, `eval`, `unparse`,
//! `evalInEachContext`, `countMatches`, `debug`, `time`.

use crate::ast::{Expr, RefScope};
use crate::eval::{Evaluator, Scope};
use crate::ops::truth;
use crate::parse::parse_expr;
use crate::value::Value;

use super::eval_n;

/// `ifThenElse(c, a, b)`: `a` if `c` is true, `b` if false; only the chosen
/// branch is evaluated. UNDEFINED and non-boolean conditions propagate.
pub fn if_then_else(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let [c, a, b] = args else {
        return Value::Error;
    };
    match truth(&ev.eval(c, sc)) {
        Ok(true) => ev.eval(a, sc),
        Ok(false) => ev.eval(b, sc),
        Err(v) => v,
    }
}

/// `eval(s)`: parses the string `s` as an expression and evaluates it where
/// the call is. A string that does not parse is ERROR.
pub fn eval(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let Some([v]) = eval_n::<1>(ev, sc, args) else {
        return Value::Error;
    };
    match v {
        Value::Str(s) => match parse_expr(&s) {
            Ok(e) => ev.eval(&e, sc),
            Err(_) => Value::Error,
        },
        // HTCondor: nothing to parse is ERROR, any other value is itself.
        Value::Undefined | Value::Error => Value::Error,
        v => v,
    }
}

/// `unparse(attr)`: the expression bound to the attribute `attr`, as text,
/// without evaluating it; the empty string when the name is unbound. The
/// argument must be written as an attribute reference: as in HTCondor, only
/// a bare name is looked up (`MY.a` and `x.a` give the empty string), and
/// anything else, parenthesised names included, is ERROR.
pub fn unparse(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let arg = match args {
        [arg @ Expr::Attr(RefScope::Bare, _)] => arg,
        [Expr::Attr(..) | Expr::Select(..)] => return Value::str(""),
        _ => return Value::Error,
    };
    match ev.referenced_expr(arg, sc) {
        Some(e) => Value::str(pretty(&e, 3)),
        None => Value::str(""),
    }
}

/// An expression as HTCondor's `unparse()` writes it, where that differs
/// from the ordinary printer: a real literal as `%.15E`, a list one item a
/// line on a fresh line, indented by `indent` (items three further).
/// (Ads it lays out in its own hash order, which is not reproduced here.)
fn pretty(e: &Expr, indent: usize) -> String {
    match e {
        Expr::Literal(Value::Real(r)) => crate::value::real_to_string(*r),
        Expr::List(items) => {
            let pad = " ".repeat(indent);
            let mut out = format!("\n{pad}{{\n");
            for (k, item) in items.iter().enumerate() {
                let sep = if k + 1 < items.len() { "," } else { "" };
                out.push_str(&format!("{pad}   {}{sep}\n", pretty(item, indent + 3)));
            }
            out.push_str(&format!("{pad}}}"));
            out
        }
        e => e.to_string(),
    }
}

/// Evaluates `expr` inside each ad of the list `list`, calling `each` with
/// the result. `Err` is the value to return (the list is UNDEFINED, or it is
/// not a list of ads).
fn for_each_ad(
    ev: &mut Evaluator<'_>,
    sc: &Scope,
    expr: &Expr,
    list: &Expr,
    mut each: impl FnMut(Value),
) -> Result<(), Value> {
    let items = match ev.eval(list, sc) {
        Value::List(items) => items,
        Value::Undefined => return Err(Value::Undefined),
        _ => return Err(Value::Error),
    };
    for item in items.iter() {
        match item {
            Value::Ad(ad) => each(ev.eval(expr, &Scope::inside(ad))),
            _ => return Err(Value::Error),
        }
    }
    Ok(())
}

/// `evalInEachContext(expr, ads)`: the list of the values of `expr`
/// evaluated inside each ad of `ads`.
pub fn eval_in_each_context(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let [expr, list] = args else {
        return Value::Error;
    };
    let mut out = Vec::new();
    match for_each_ad(ev, sc, expr, list, |v| out.push(v)) {
        Ok(()) => Value::list(out),
        Err(v) => v,
    }
}

/// `countMatches(expr, ads)`: how many ads of `ads` make `expr` true.
pub fn count_matches(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    let [expr, list] = args else {
        return Value::Error;
    };
    let mut n = 0i64;
    match for_each_ad(ev, sc, expr, list, |v| {
        n += i64::from(truth(&v) == Ok(true))
    }) {
        Ok(()) => Value::Int(n),
        Err(v) => v,
    }
}

/// `debug(x)`: `x` unchanged (HTCondor also logs it, which we do not).
pub fn debug(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    match eval_n::<1>(ev, sc, args) {
        Some([v]) => v,
        None => Value::Error,
    }
}

/// `time()`: the current time in seconds since the Unix epoch (the
/// evaluator's clock when it has one, see [`Evaluator::at`]).
pub fn time(ev: &mut Evaluator<'_>, _sc: &Scope, args: &[Expr]) -> Value {
    if !args.is_empty() {
        return Value::Error;
    }
    if let Some(now) = ev.now {
        return Value::Int(now);
    }
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => Value::Int(i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
        Err(_) => Value::Int(0),
    }
}
