//! Matchmaking: each ad's `Requirements` evaluated against the other.

use std::sync::LazyLock;

use crate::ast::{Expr, RefScope};
use crate::eval::Evaluator;
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
    Evaluator::new(Some(my), Some(target))
        .eval_top(&REQUIREMENTS)
        .is_true()
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
