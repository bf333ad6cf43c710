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
//! - `strings`: `strcat`, `substr`, `toUpper`, `strcmp`, `join`, `split`, version comparisons...
//! - `lists`: `size`, `member`, `sum`, `avg`, `min`, `max`, `anyCompare`, string lists...
//! - `regex`: `regexp`, `regexps`, `replace`, `regexpMember`...
//! - `misc`: `ifThenElse`, `eval`, `unparse`, `evalInEachContext`, `countMatches`...

use crate::ast::Expr;
use crate::eval::{Evaluator, Scope};
use crate::value::Value;

/// The signature of every builtin: the evaluator, the current scope and the
/// unevaluated arguments.
pub type BuiltinFn = fn(&mut Evaluator<'_>, &Scope, &[Expr]) -> Value;

/// Names (lower case) and implementations, sorted by name for binary search.
static REGISTRY: &[(&str, BuiltinFn)] = &[];

/// Finds a builtin by name, ignoring case.
pub fn lookup(name: &str) -> Option<BuiltinFn> {
    let lower = name.to_ascii_lowercase();
    REGISTRY
        .binary_search_by(|(n, _)| (*n).cmp(lower.as_str()))
        .ok()
        .map(|i| REGISTRY[i].1)
}

#[cfg(test)]
mod tests {
    use super::*;

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
