//! Built-in functions, in a case-insensitive registry resolved once at parse time.
//!
//! Every function receives its arguments unevaluated, so that the lazy ones
//! (`ifThenElse`, the `is*` type tests, `unparse`) can decide what to evaluate.
//! A call with the wrong number or types of arguments evaluates to ERROR, as in
//! HTCondor; an unknown function name also evaluates to ERROR.
//!
//! # Layout
//! - `types`: type tests (`isUndefined`...) and conversions (`int`, `real`, `string`, `bool`).
//! - `math`: `floor`, `ceiling`, `round`, `pow`, `quantize`, `interval`...
//! - `strings`: `strcat`, `substr`, `toUpper`, `strcmp`, `join`, version comparisons...
//! - `strlist`: `split` and the string lists (`stringListMember`, `stringListSum`...).
//! - `lists`: `size`, `member`, `sum`, `avg`, `min`, `max`, `anyCompare`...
//! - `regex`: `regexp`, `regexps`, `replace`, `regexpMember`...
//! - `misc`: `ifThenElse`, `eval`, `unparse`, `evalInEachContext`, `countMatches`...

mod lists;
mod math;
mod misc;
mod regex;
mod strings;
mod strlist;
mod types;

use std::borrow::Cow;

use crate::ast::Expr;
use crate::eval::{Evaluator, Scope};
use crate::value::{Value, to_display_string};

/// The signature of every builtin: the evaluator, the current scope and the
/// unevaluated arguments.
pub type BuiltinFn = fn(&mut Evaluator<'_>, &Scope, &[Expr]) -> Value;

/// Names (lower case) and implementations, sorted by name for binary search.
static REGISTRY: &[(&str, BuiltinFn)] = &[
    ("allcompare", lists::all_compare),
    ("anycompare", lists::any_compare),
    ("avg", lists::avg),
    ("bool", types::to_bool),
    ("ceil", math::ceiling),
    ("ceiling", math::ceiling),
    ("countmatches", misc::count_matches),
    ("debug", misc::debug),
    ("eval", misc::eval),
    ("evalineachcontext", misc::eval_in_each_context),
    ("floor", math::floor),
    ("identicalmember", lists::identical_member),
    ("ifthenelse", misc::if_then_else),
    ("int", types::to_int),
    ("interval", math::interval),
    ("isboolean", types::is_boolean),
    ("isclassad", types::is_classad),
    ("iserror", types::is_error),
    ("isinteger", types::is_integer),
    ("islist", types::is_list),
    ("isreal", types::is_real),
    ("isstring", types::is_string),
    ("isundefined", types::is_undefined),
    ("join", strings::join),
    ("max", lists::max),
    ("member", lists::member),
    ("min", lists::min),
    ("pow", math::pow),
    ("quantize", math::quantize),
    ("real", types::to_real),
    ("regexp", regex::regexp),
    ("regexpmember", regex::regexp_member),
    ("regexps", regex::regexps),
    ("replace", regex::replace),
    ("replaceall", regex::replace_all),
    ("round", math::round),
    ("size", lists::size),
    ("split", strlist::split),
    ("splitslotname", strings::split_slot_name),
    ("splitusername", strings::split_user_name),
    ("strcat", strings::strcat),
    ("strcmp", strings::strcmp),
    ("stricmp", strings::stricmp),
    ("string", types::to_string),
    ("stringlist_regexpmember", regex::string_list_regexp_member),
    ("stringlistavg", strlist::string_list_avg),
    ("stringlistimember", strlist::string_list_imember),
    ("stringlistmax", strlist::string_list_max),
    ("stringlistmember", strlist::string_list_member),
    ("stringlistmin", strlist::string_list_min),
    ("stringlistsintersect", strlist::string_lists_intersect),
    ("stringlistsize", strlist::string_list_size),
    ("stringlistsum", strlist::string_list_sum),
    ("substr", strings::substr),
    ("sum", lists::sum),
    ("time", misc::time),
    ("tolower", strings::to_lower),
    ("toupper", strings::to_upper),
    ("unparse", misc::unparse),
    ("version_in_range", strings::version_in_range),
    ("versioncmp", strings::versioncmp),
    ("versioneq", strings::version_eq),
    ("versionge", strings::version_ge),
    ("versiongt", strings::version_gt),
    ("versionle", strings::version_le),
    ("versionlt", strings::version_lt),
];

/// Finds a builtin by name, ignoring case.
pub fn lookup(name: &str) -> Option<BuiltinFn> {
    let lower = name.to_ascii_lowercase();
    REGISTRY
        .binary_search_by(|(n, _)| (*n).cmp(lower.as_str()))
        .ok()
        .map(|i| REGISTRY[i].1)
}

/// Evaluates exactly `N` arguments, in order; `None` when there are not `N`.
fn eval_n<const N: usize>(ev: &mut Evaluator<'_>, sc: &Scope, args: &[Expr]) -> Option<[Value; N]> {
    if args.len() != N {
        return None;
    }
    Some(std::array::from_fn(|i| ev.eval(&args[i], sc)))
}

/// The value a strict function returns when one of its arguments is not a
/// proper value: ERROR if any is ERROR, else UNDEFINED if any is UNDEFINED.
fn absorb(vals: &[Value]) -> Option<Value> {
    if vals.iter().any(Value::is_error) {
        Some(Value::Error)
    } else if vals.iter().any(Value::is_undefined) {
        Some(Value::Undefined)
    } else {
        None
    }
}

/// A scalar argument seen as text, the way the string functions coerce
/// numbers and booleans. `None` for UNDEFINED, ERROR, lists and ads.
fn scalar_text(v: &Value) -> Option<Cow<'_, str>> {
    match v {
        Value::Str(s) => Some(Cow::Borrowed(s)),
        Value::Int(_) | Value::Real(_) | Value::Bool(_) => to_display_string(v).map(Cow::Owned),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(text: &str) -> Value {
        let ad = crate::ClassAd::parse(
            r#"[ A = 1; L = { 1, 2.5, undefined }; S = "x y,z"; N = [ V = 3 ]; R = A + 1 ]"#,
        )
        .expect("test ad parses");
        let e = crate::parse_expr(text).expect("test expression parses");
        crate::eval_with(&e, Some(&ad), None)
    }

    #[test]
    fn functions_resolve_ignoring_case() {
        assert!(lookup("StrCat").is_some());
        assert!(lookup("version_in_range").is_some());
        assert!(lookup("nosuchfunction").is_none());
        assert_eq!(ev("nosuchfunction(1)"), Value::Error);
    }

    #[test]
    fn undefined_and_error_propagate_per_function() {
        assert_eq!(ev("floor(undefined)"), Value::Error);
        assert_eq!(ev("pow(2, undefined)"), Value::Error);
        assert_eq!(ev("member(undefined, 3)"), Value::Undefined);
        assert_eq!(ev("substr(undefined, error)"), Value::Undefined);
        assert_eq!(ev("stringListMember(\"a\", undefined)"), Value::Bool(false));
        // The first of UNDEFINED and ERROR in argument order (HTCondor 25.14.1).
        assert_eq!(ev("strcat(\"a\", undefined, error)"), Value::Undefined);
        assert_eq!(ev("strcat(\"a\", error, undefined)"), Value::Error);
        assert_eq!(ev("isError(error)"), Value::Bool(true));
    }

    #[test]
    fn list_functions_skip_undefined_elements() {
        assert_eq!(ev("sum(L)"), Value::Real(3.5));
        assert_eq!(ev("avg(L)"), Value::Real(1.75));
        assert_eq!(ev("max(L)"), Value::Real(2.5));
        assert_eq!(ev("join(\"-\", L)"), Value::str("1-2.500000000000000E+00"));
        assert_eq!(ev("size(N)"), Value::Int(1));
    }

    #[test]
    fn string_functions() {
        assert_eq!(ev("split(S)[2]"), Value::str("z"));
        assert_eq!(ev("substr(\"hello\", -3, -1)"), Value::str("ll"));
        assert_eq!(ev("strcmp(\"a\", \"B\")"), Value::Int(1));
        assert_eq!(ev("toUpper(true)"), Value::str("TRUE"));
        assert_eq!(ev("interval(61)"), Value::str("1:01"));
        assert_eq!(ev("versionLT(\"8.9.1\", \"8.10.0\")"), Value::Bool(true));
        // Integers in, an integer out: HTCondor truncates the mean.
        assert_eq!(ev("stringListAvg(\"1, 2\")"), Value::Int(1));
        assert_eq!(ev("stringListAvg(\"1, 2.0\")"), Value::Real(1.5));
    }

    #[test]
    fn regex_functions() {
        assert_eq!(
            ev("replaceAll(\"(a)\", \"banana\", \"<\\\\1>\")"),
            Value::str("b<a>n<a>n<a>")
        );
        assert_eq!(ev("regexps(\"z\", \"abc\", \"x\")"), Value::str(""));
        assert_eq!(ev("regexp(\"(\", \"abc\")"), Value::Error);
        assert_eq!(
            ev("stringList_regexpMember(\"^Z$\", S, \" ,\", \"i\")"),
            Value::Bool(true)
        );
    }

    #[test]
    fn meta_functions() {
        assert_eq!(ev("eval(\"A + 1\")"), Value::Int(2));
        assert_eq!(ev("unparse(R)"), Value::str("A + 1"));
        assert_eq!(ev("unparse(NoSuch)"), Value::str(""));
        assert_eq!(
            ev("evalInEachContext(V * 2, { N, N })"),
            Value::list(vec![Value::Int(6), Value::Int(6)])
        );
        assert_eq!(ev("countMatches(V == 3, { N, [ V = 4 ] })"), Value::Int(1));
        assert_eq!(ev("ifThenElse(A, \"y\", error)"), Value::str("y"));
    }

    #[test]
    fn registry_is_sorted_and_lower_case() {
        for w in REGISTRY.windows(2) {
            assert!(w[0].0 < w[1].0, "{} before {}", w[0].0, w[1].0);
        }
        for (n, _) in REGISTRY {
            assert_eq!(*n, n.to_ascii_lowercase());
        }
    }
}
