//! Why an owner holds a machine, for `carmi q -analyze`: the first clause of
//! the machine's `Start` expression (the owner policy it advertises) that is
//! not true, with the values of the attributes it reads, as HTCondor's
//! `-better-analyze` names the failing part of a requirement.

use classad::ast::{BinaryOp, RefScope};
use classad::{ClassAd, Expr, Value};

/// The most machines `-analyze` explains one by one per class; the rest are counted.
pub const MAX_EXPLAINED: usize = 5;

/// `"START is false: KeyboardIdle > 15 * Minute (KeyboardIdle = 32)"` for a
/// machine ad whose `Start` is not true against `job`; `None` when it is true
/// or the machine advertises no `Start`.
pub fn start_blocker(machine: &ClassAd, job: &ClassAd) -> Option<String> {
    let start = machine.get("Start")?;
    if machine.eval_expr(start, Some(job)).is_true() {
        return None;
    }
    let mut clauses = Vec::new();
    conjuncts(start, &mut clauses);
    let (clause, value) = clauses.iter().find_map(|c| {
        let v = machine.eval_expr(c, Some(job));
        (!v.is_true()).then_some((*c, v))
    })?;
    let mut names = Vec::new();
    attributes(clause, &mut names);
    let values: Vec<String> = names
        .iter()
        .map(|n| format!("{n} = {}", shown(&machine.eval_attr(n))))
        .collect();
    let is = match value {
        Value::Bool(false) => "false".to_string(),
        other => other.to_string(),
    };
    let mut text = format!("START is {is}: {clause}");
    if !values.is_empty() {
        text.push_str(&format!(" ({})", values.join(", ")));
    }
    Some(text)
}

/// The operands of top-level `&&`s, through parentheses, left to right.
fn conjuncts<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    match e {
        Expr::Binary(BinaryOp::And, pair) => {
            conjuncts(&pair.0, out);
            conjuncts(&pair.1, out);
        }
        Expr::Paren(inner) if matches!(**inner, Expr::Binary(BinaryOp::And, _)) => {
            conjuncts(inner, out)
        }
        _ => out.push(e),
    }
}

/// The attributes of the machine an expression reads (bare and `MY.`), once each.
fn attributes(e: &Expr, out: &mut Vec<String>) {
    match e {
        Expr::Attr(RefScope::Bare | RefScope::My, name) => {
            let text = name.text.to_string();
            if !out.iter().any(|n| n.eq_ignore_ascii_case(&text)) {
                out.push(text);
            }
        }
        Expr::Literal(_) | Expr::Attr(..) | Expr::Ad(_) => {}
        Expr::Select(inner, _) | Expr::Unary(_, inner) | Expr::Paren(inner) => {
            attributes(inner, out)
        }
        Expr::Index(pair) | Expr::Binary(_, pair) | Expr::Elvis(pair) => {
            attributes(&pair.0, out);
            attributes(&pair.1, out);
        }
        Expr::Cond(triple) => {
            attributes(&triple.0, out);
            attributes(&triple.1, out);
            attributes(&triple.2, out);
        }
        Expr::Call(call) => call.args.iter().for_each(|a| attributes(a, out)),
        Expr::List(items) => items.iter().for_each(|a| attributes(a, out)),
    }
}

/// A value as people read it: reals rounded, the rest as ClassAd text.
fn shown(v: &Value) -> String {
    match v {
        Value::Real(r) => format!("{r:.2}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ad(text: &str) -> ClassAd {
        ClassAd::parse(text).unwrap()
    }

    #[test]
    fn names_the_first_false_clause_with_its_values() {
        let job = ad("[ Owner = \"alice\" ]");
        let m = ad("[ Minute = 60; KeyboardIdle = 32; NonPoolLoad = 0.125; \
             Start = (KeyboardIdle > 15 * Minute) && NonPoolLoad < 0.3 ]");
        assert_eq!(
            start_blocker(&m, &job).as_deref(),
            Some("START is false: (KeyboardIdle > 15 * Minute) (KeyboardIdle = 32, Minute = 60)")
        );
        let m = ad("[ Minute = 60; KeyboardIdle = 3200; NonPoolLoad = 0.5; \
             Start = KeyboardIdle > 15 * Minute && (NonPoolLoad < 0.3 && true) ]");
        assert_eq!(
            start_blocker(&m, &job).as_deref(),
            Some("START is false: NonPoolLoad < 0.3 (NonPoolLoad = 0.50)")
        );
        let m = ad("[ Start = Missing > 3 ]");
        assert_eq!(
            start_blocker(&m, &job).as_deref(),
            Some("START is undefined: Missing > 3 (Missing = undefined)")
        );
    }

    #[test]
    fn silent_when_start_holds_or_is_absent() {
        let job = ad("[ Owner = \"alice\" ]");
        assert_eq!(start_blocker(&ad("[ Start = true ]"), &job), None);
        assert_eq!(start_blocker(&ad("[ Memory = 3 ]"), &job), None);
        assert_eq!(
            start_blocker(&ad("[ Start = TARGET.Owner == \"alice\" ]"), &job),
            None
        );
        assert_eq!(
            start_blocker(&ad("[ Start = TARGET.Owner == \"bob\" ]"), &job).as_deref(),
            Some("START is false: TARGET.Owner == \"bob\"")
        );
    }
}
