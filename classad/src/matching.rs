//! Matchmaking: each ad's `Requirements` evaluated against the other.

use std::sync::LazyLock;

use crate::ast::{Expr, RefScope};
use crate::eval::{Evaluator, Scope};
use crate::ops;
use crate::record::ClassAd;
use crate::symbol::Name;
use crate::value::Value;

static REQUIREMENTS: LazyLock<Expr> =
    LazyLock::new(|| Expr::Attr(RefScope::My, Name::new("Requirements")));
static RANK: LazyLock<Expr> = LazyLock::new(|| Expr::Attr(RefScope::My, Name::new("Rank")));

/// The outcome of matching two ads.
#[derive(Clone, Debug, PartialEq)]
pub struct MatchResult {
    /// `a`'s Requirements is `true` with MY = a, TARGET = b.
    pub a_accepts: bool,
    /// `b`'s Requirements is `true` with MY = b, TARGET = a.
    pub b_accepts: bool,
}

impl MatchResult {
    /// Both sides accept.
    pub fn symmetric(&self) -> bool {
        self.a_accepts && self.b_accepts
    }
}

/// True when `my`'s Requirements evaluates to boolean `true` against `target`.
/// Anything else (false, UNDEFINED, ERROR, a number, no Requirements) refuses.
pub fn accepts(my: &ClassAd, target: &ClassAd) -> bool {
    let mut ev = Evaluator::new(Some(my), Some(target));
    ops::is_true(&mut ev, &REQUIREMENTS, &Scope::top())
}

/// Evaluates both Requirements.
pub fn match_ads(a: &ClassAd, b: &ClassAd) -> MatchResult {
    MatchResult {
        a_accepts: accepts(a, b),
        b_accepts: accepts(b, a),
    }
}

/// True when both ads accept each other. Stops after the first refusal.
pub fn symmetric_match(a: &ClassAd, b: &ClassAd) -> bool {
    accepts(a, b) && accepts(b, a)
}

/// `my`'s Rank against `target` as a real; anything that is not a number
/// (booleans count as 0/1) ranks 0.
pub fn rank_of(my: &ClassAd, target: &ClassAd) -> f64 {
    Evaluator::new(Some(my), Some(target))
        .eval_top(&RANK)
        .as_f64()
        .unwrap_or(0.0)
}

/// `my`'s Rank against `target` as the raw value (for diagnostics and tests).
pub fn rank_value(my: &ClassAd, target: &ClassAd) -> Value {
    Evaluator::new(Some(my), Some(target)).eval_top(&RANK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ad(text: &str) -> ClassAd {
        ClassAd::parse(text).expect("test ad parses")
    }

    #[test]
    fn only_boolean_true_accepts() {
        let other = ad("[ Memory = 4096 ]");
        let cases = [
            ("[ Requirements = true ]", true),
            ("[ Requirements = (TARGET.Memory > 1024) ]", true),
            ("[ Requirements = TARGET.Memory > 1024 && true ]", true),
            (
                "[ Requirements = Start; Start = TARGET.Memory > 1024 ]",
                true,
            ),
            ("[ Requirements = Start; Start = true ]", true),
            ("[ Requirements = 1 ]", false),
            ("[ Requirements = Start; Start = 2 ]", false),
            ("[ Requirements = TARGET.Memory ]", false),
            ("[ Requirements = TARGET.Missing > 1 ]", false),
            ("[ Requirements = \"true\" ]", false),
            ("[ Requirements = Requirements ]", false),
            ("[ Requirements = Start; Start = Requirements ]", false),
            ("[ Requirements = TARGET.Memory > 1024 || error ]", true),
            ("[ Requirements = undefined || true ]", true),
            ("[ Rank = 1 ]", false),
        ];
        for (text, want) in cases {
            let a = ad(text);
            assert_eq!(accepts(&a, &other), want, "{text}");
            let slow = Evaluator::new(Some(&a), Some(&other))
                .eval_top(&REQUIREMENTS)
                .is_true();
            assert_eq!(slow, want, "{text} (as a value)");
        }
    }

    #[test]
    fn shared_expressions_keep_separate_cycle_detection() {
        // Both ads bind `A` to the same text, hence to one shared tree: the
        // evaluation of the job's `A` must still be able to evaluate the
        // machine's `A` (a cycle is only a return to the same ad's `A`).
        let text = "[ A = TARGET.A =?= undefined ? 1 : TARGET.A + 1 ]";
        let (job, machine) = (ad(text), ad(text));
        assert!(std::ptr::eq(job.expr_at(0), machine.expr_at(0)));
        assert_eq!(job.eval_attr_against("A", Some(&machine)), Value::Int(2));
    }
}
