//! Regular-expression functions: `regexp`, `regexps`, `replace`, `replaceAll`,
//! `regexpMember`, `stringList_regexpMember`.
//!
//! Patterns are compiled by the `regex` crate, which covers the PCRE syntax
//! ClassAds use in practice; a pattern it rejects (backreferences,
//! lookaround, or plain syntax errors) makes the call ERROR.

use regex::{Captures, Regex, RegexBuilder};

use crate::ast::Expr;
use crate::eval::{Evaluator, Scope};
use crate::value::Value;

/// Compiles `pattern` with HTCondor's option letters: `i` ignores case, `m`
/// makes `^`/`$` match at line ends, `s` lets `.` match newlines, `x` allows
/// blanks and comments. Other letters are ignored.
fn compile(pattern: &str, options: &str) -> Option<Regex> {
    let mut b = RegexBuilder::new(pattern);
    for c in options.chars() {
        match c.to_ascii_lowercase() {
            'i' => b.case_insensitive(true),
            'm' => b.multi_line(true),
            's' => b.dot_matches_new_line(true),
            'x' => b.ignore_whitespace(true),
            _ => &mut b,
        };
    }
    b.build().ok()
}

/// Evaluates all arguments, which must be strings, and compiles the pattern
/// (first) with the options (the argument at `opt_index`, if present).
/// ERROR anywhere wins, then UNDEFINED, then a type error (as HTCondor
/// answers `regexp(error, undefined)` with ERROR). `Err` is the value to return.
fn regex_args(
    ev: &mut Evaluator<'_>,
    sc: &Scope,
    args: &[Expr],
    opt_index: usize,
) -> Result<(Regex, Vec<Value>), Value> {
    let vals: Vec<Value> = args.iter().map(|a| ev.eval(a, sc)).collect();
    if vals.iter().any(|v| v.is_error()) {
        return Err(Value::Error);
    }
    if vals.iter().any(Value::is_undefined) {
        return Err(Value::Undefined);
    }
    if !vals.iter().all(|v| matches!(v, Value::Str(_))) {
        return Err(Value::Error);
    }
    let text = |i: usize| vals.get(i).and_then(Value::as_str).unwrap_or("");
    let re = compile(text(0), text(opt_index)).ok_or(Value::Error)?;
    Ok((re, vals))
}

/// Expands `\0`...`\9` in `template` to the text of the capture groups.
fn expand(caps: &Captures<'_>, template: &str, out: &mut String) {
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\'
            && let Some(d) = chars.peek().and_then(|d| d.to_digit(10))
        {
            chars.next();
            if let Some(m) = caps.get(d as usize) {
                out.push_str(m.as_str());
            }
            continue;
        }
        out.push(c);
    }
}

/// `regexp(pattern, target [, options])`: whether `pattern` matches somewhere in `target`.
pub fn regexp(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    if !(2..=3).contains(&args.len()) {
        return Value::Error;
    }
    match regex_args(ev, sc, args, 2) {
        Ok((re, vals)) => Value::Bool(re.is_match(vals[1].as_str().unwrap_or(""))),
        Err(v) => v,
    }
}

/// `regexps(pattern, target, substitute [, options])`: `substitute` with
/// `\N` replaced by the groups of the first match; empty when nothing matches.
pub fn regexps(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    if !(3..=4).contains(&args.len()) {
        return Value::Error;
    }
    match regex_args(ev, sc, args, 3) {
        Ok((re, vals)) => {
            let mut out = String::new();
            if let Some(caps) = re.captures(vals[1].as_str().unwrap_or("")) {
                expand(&caps, vals[2].as_str().unwrap_or(""), &mut out);
            }
            Value::str(out)
        }
        Err(v) => v,
    }
}

/// Shared body of `replace` and `replaceAll`: `target` with the first (or
/// every) match of `pattern` replaced by the expanded `substitute`.
fn replace_matches(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr], all: bool) -> Value {
    if !(3..=4).contains(&args.len()) {
        return Value::Error;
    }
    let (re, vals) = match regex_args(ev, sc, args, 3) {
        Ok(x) => x,
        Err(v) => return v,
    };
    let target = vals[1].as_str().unwrap_or("");
    let template = vals[2].as_str().unwrap_or("");
    let mut out = String::with_capacity(target.len());
    let mut last = 0;
    for caps in re.captures_iter(target) {
        let m = caps.get(0).expect("capture group 0 is the whole match");
        if all && m.is_empty() && m.end() == target.len() {
            // HTCondor's replaceAll fails on an empty match at the end of
            // the target (`replaceAll("x*", "abc", "X")`, `replaceAll("$",
            // ...)`); one elsewhere (`^`, a lookahead) is replaced.
            return Value::Error;
        }
        out.push_str(&target[last..m.start()]);
        expand(&caps, template, &mut out);
        last = m.end();
        if !all {
            break;
        }
    }
    out.push_str(&target[last..]);
    Value::str(out)
}

/// `replace(pattern, target, substitute [, options])`: replaces the first match.
pub fn replace(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    replace_matches(ev, sc, args, false)
}

/// `replaceAll(pattern, target, substitute [, options])`: replaces every match.
pub fn replace_all(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    replace_matches(ev, sc, args, true)
}

/// `regexpMember(pattern, list [, options])`: whether some string of `list` matches.
pub fn regexp_member(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    if !(2..=3).contains(&args.len()) {
        return Value::Error;
    }
    let pattern = ev.eval(&args[0], sc);
    let list = ev.eval(&args[1], sc);
    let options = args.get(2).map(|a| ev.eval(a, sc));
    let all = [Some(&pattern), Some(&list), options.as_ref()];
    if all.iter().flatten().any(|v| v.is_error()) {
        return Value::Error;
    }
    if pattern.is_undefined()
        || list.is_undefined()
        || options.as_ref().is_some_and(Value::is_undefined)
    {
        return Value::Undefined;
    }
    let (Value::Str(p), Value::List(items)) = (&pattern, &list) else {
        return Value::Error;
    };
    let opts = match &options {
        None => "",
        Some(Value::Str(o)) => o,
        Some(_) => return Value::Error,
    };
    let Some(re) = compile(p, opts) else {
        return Value::Error;
    };
    let mut found = false;
    for item in items.iter() {
        match item {
            Value::Str(s) => found |= re.is_match(s),
            Value::Undefined => {}
            _ => return Value::Error,
        }
    }
    Value::Bool(found)
}

/// `stringList_regexpMember(pattern, list [, delims [, options]])`: whether
/// some item of the string list matches.
pub fn string_list_regexp_member(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Value {
    if !(2..=4).contains(&args.len()) {
        return Value::Error;
    }
    let (re, vals) = match regex_args(ev, sc, args, 3) {
        Ok(x) => x,
        Err(v) => return v,
    };
    let delims = vals.get(2).and_then(Value::as_str).unwrap_or(" \t\r\n,");
    let list = vals[1].as_str().unwrap_or("");
    Value::Bool(
        list.split(|c: char| delims.contains(c))
            .map(|t| t.trim_matches([' ', '\t']))
            .filter(|t| !t.is_empty())
            .any(|t| re.is_match(t)),
    )
}
