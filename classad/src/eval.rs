//! Evaluation of expressions: scopes (MY, TARGET, parent, nested ads),
//! attribute lookup, cycle detection and the depth limit.
//!
//! An [`Evaluator`] holds the two top-level ads of a match (MY and TARGET).
//! A [`Scope`] says which of them is "mine" at the moment (it flips when an
//! attribute of TARGET is evaluated, as in HTCondor) and which nested ads
//! enclose the expression being evaluated.

use std::sync::Arc;

use crate::ast::{Expr, RefScope};
use crate::ops;
use crate::record::ClassAd;
use crate::symbol::Symbol;
use crate::value::{Value, ValueRef};

/// Deepest evaluation recursion before a result becomes ERROR. Parsing
/// limits nesting far below this; the limit guards attribute chains.
pub const MAX_EVAL_DEPTH: u32 = 1000;

/// A nested ClassAd reached during evaluation, with the scope that encloses it,
/// so that names its expressions do not define are looked up outside it.
#[derive(Debug)]
pub struct NestedAd {
    /// The ad itself.
    pub ad: Arc<ClassAd>,
    parent: Option<Arc<NestedAd>>,
    side: u8,
}

impl NestedAd {
    /// Wraps a free-standing ad (no enclosing scope) as a value.
    pub fn detached(ad: Arc<ClassAd>) -> Arc<NestedAd> {
        Arc::new(NestedAd {
            ad,
            parent: None,
            side: 0,
        })
    }
}

/// Where an expression is being evaluated: which top-level ad is MY, and the
/// chain of nested ads around it. Opaque to users of the crate.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    side: u8,
    nested: Option<Arc<NestedAd>>,
}

impl Scope {
    /// The top-level scope: MY is the first ad of the evaluator.
    pub fn top() -> Scope {
        Scope::default()
    }

    /// The scope inside a nested ad value.
    pub fn inside(ad: &Arc<NestedAd>) -> Scope {
        Scope {
            side: ad.side,
            nested: Some(ad.clone()),
        }
    }
}

/// Attributes being evaluated right now, to turn reference cycles into
/// UNDEFINED, each identified by [`ClassAd::attr_key`]. Kept inline (and
/// small, because an evaluator is made per evaluation and the array is zeroed
/// each time) since chains are short and evaluation is hot.
struct Active {
    inline: [usize; ACTIVE_INLINE],
    len: usize,
    spill: Vec<usize>,
}

const ACTIVE_INLINE: usize = 8;

impl Active {
    fn new() -> Active {
        Active {
            inline: [0; ACTIVE_INLINE],
            len: 0,
            spill: Vec::new(),
        }
    }

    #[inline]
    fn contains(&self, key: usize) -> bool {
        self.inline[..self.len.min(ACTIVE_INLINE)].contains(&key) || self.spill.contains(&key)
    }

    #[inline]
    fn push(&mut self, key: usize) {
        if self.len < ACTIVE_INLINE {
            self.inline[self.len] = key;
        } else {
            self.spill.push(key);
        }
        self.len += 1;
    }

    #[inline]
    fn pop(&mut self) {
        self.len -= 1;
        if self.len >= ACTIVE_INLINE {
            self.spill.pop();
        }
    }
}

/// Where an attribute reference was found: the ad, the attribute's position,
/// and the scope its expression is evaluated in.
pub(crate) struct Found<'v> {
    ad: &'v ClassAd,
    idx: usize,
    at: FoundIn<'v>,
}

/// The scope an attribute's expression is evaluated in, kept borrowed until
/// it is needed, since a literal needs none.
pub(crate) enum FoundIn<'v> {
    Top(u8),
    Nested(&'v Arc<NestedAd>),
}

/// An operand as [`Evaluator::operand`] sees it before evaluating anything.
pub(crate) enum Operand<'v> {
    /// Its value, borrowed: a literal, or an attribute bound to a literal,
    /// or a reference to nothing (UNDEFINED).
    Value(ValueRef<'v>),
    /// A reference to an attribute bound to a non-literal expression,
    /// already looked up; evaluate it with [`Evaluator::eval_attr_expr`].
    Attr(Found<'v>),
    /// Anything else: evaluate it with [`Evaluator::eval`].
    Other,
}

/// Evaluates expressions against up to two ads (MY and TARGET).
pub struct Evaluator<'a> {
    ads: [Option<&'a ClassAd>; 2],
    depth: u32,
    active: Active,
    /// What `time()` answers (Unix seconds); `None`: the system clock.
    pub(crate) now: Option<i64>,
}

impl<'a> Evaluator<'a> {
    /// An evaluator where bare names are looked up in `my`, then in `target`.
    #[inline]
    pub fn new(my: Option<&'a ClassAd>, target: Option<&'a ClassAd>) -> Evaluator<'a> {
        Evaluator {
            ads: [my, target],
            depth: 0,
            active: Active::new(),
            now: None,
        }
    }

    /// The same evaluator with `time()` answering `unix_now` rather than
    /// reading the system clock: a caller with a clock of its own (a pure
    /// state machine, a test) decides what time it is.
    pub fn at(mut self, unix_now: i64) -> Evaluator<'a> {
        self.now = Some(unix_now);
        self
    }

    /// Evaluates `e` at the top level (MY is the first ad).
    pub fn eval_top(&mut self, e: &Expr) -> Value {
        self.eval(e, &Scope::top())
    }

    /// Evaluates `e` in scope `sc`.
    pub fn eval(&mut self, e: &Expr, sc: &Scope) -> Value {
        if self.depth >= MAX_EVAL_DEPTH {
            return Value::Error;
        }
        self.depth += 1;
        let v = self.eval_inner(e, sc);
        self.depth -= 1;
        v
    }

    /// Counts one level of evaluation depth, as [`Evaluator::eval`] does for
    /// each node; false (and nothing counted) at the limit, where the node's
    /// value is ERROR.
    #[cfg_attr(not(debug_assertions), inline(always))]
    pub(crate) fn enter(&mut self) -> bool {
        if self.depth >= MAX_EVAL_DEPTH {
            return false;
        }
        self.depth += 1;
        true
    }

    /// Undoes [`Evaluator::enter`].
    #[cfg_attr(not(debug_assertions), inline(always))]
    pub(crate) fn leave(&mut self) {
        self.depth -= 1;
    }

    /// What `e` is, short of evaluating it: its value when that can be had
    /// without evaluating anything (`e` is a literal, or names an attribute
    /// bound to a literal or nothing), else the expression an attribute
    /// reference leads to, else nothing.
    ///
    /// Operators try this before [`Evaluator::eval`], so that comparing an
    /// attribute with a literal copies nothing: no reference count of a
    /// shared string is touched (a locked increment on a line that is not in
    /// cache is what dominated such a comparison). Always inlined (in
    /// optimized builds; debug builds would pay for it in stack depth), so
    /// that nothing passes through memory on this path: an enum returned
    /// through memory and read back right after is a store-forwarding stall.
    #[cfg_attr(not(debug_assertions), inline(always))]
    pub(crate) fn operand<'v>(&self, e: &'v Expr, sc: &'v Scope) -> Operand<'v>
    where
        'a: 'v,
    {
        // At the depth limit `eval` gives ERROR even for a literal; leave
        // that case to it so that the result does not depend on the path.
        if self.depth >= MAX_EVAL_DEPTH {
            return Operand::Other;
        }
        match e {
            Expr::Literal(v) => Operand::Value(v.view()),
            Expr::Attr(scope, name) => match self.resolve(*scope, name.sym, sc) {
                Some(found) => match found.ad.literal_at(found.idx) {
                    Some(v) => Operand::Value(v),
                    None => Operand::Attr(found),
                },
                None => Operand::Value(ValueRef::Undefined),
            },
            _ => Operand::Other,
        }
    }

    /// Evaluates the expression of an attribute reference that
    /// [`Evaluator::operand`] returned as [`Operand::Attr`], as
    /// [`Evaluator::eval`] of the reference would.
    pub(crate) fn eval_attr_expr(&mut self, found: &Found<'_>, sc: &Scope) -> Value {
        self.with_attr(found, sc, Value::Undefined, Self::eval)
    }

    /// Runs `f` on the expression of an attribute reference that
    /// [`Evaluator::operand`] returned as [`Operand::Attr`], in the scope
    /// the attribute belongs to, counting depth for the reference (as
    /// [`Evaluator::eval`] does) and giving `cycle` instead when the
    /// attribute is already being evaluated.
    #[inline]
    pub(crate) fn with_attr<R>(
        &mut self,
        found: &Found<'_>,
        sc: &Scope,
        cycle: R,
        f: fn(&mut Self, &Expr, &Scope) -> R,
    ) -> R {
        // `operand` checked the depth limit for the reference.
        self.depth += 1;
        let r = self.eval_found(found, sc, cycle, f);
        self.depth -= 1;
        r
    }

    fn eval_inner(&mut self, e: &Expr, sc: &Scope) -> Value {
        match e {
            Expr::Literal(v) => v.clone(),
            Expr::Attr(scope, name) => self.lookup(*scope, name.sym, sc),
            Expr::Paren(inner) => self.eval(inner, sc),
            Expr::Binary(op, b) => ops::binary(self, *op, &b.0, &b.1, sc),
            _ => self.eval_compound(e, sc),
        }
    }

    /// [`Evaluator::eval_inner`] for the less common expressions, apart so
    /// that the frame of the usual recursion (operators and attribute
    /// references) stays small: long reference chains recurse deeply.
    #[inline(never)]
    fn eval_compound(&mut self, e: &Expr, sc: &Scope) -> Value {
        match e {
            Expr::Literal(_) | Expr::Attr(..) | Expr::Paren(_) | Expr::Binary(..) => {
                self.eval(e, sc)
            }
            Expr::Unary(op, inner) => {
                let v = self.eval(inner, sc);
                ops::unary(*op, v)
            }
            Expr::Cond(b) => match ops::truth(&self.eval(&b.0, sc)) {
                Ok(true) => self.eval(&b.1, sc),
                Ok(false) => self.eval(&b.2, sc),
                Err(v) => v,
            },
            Expr::Elvis(b) => {
                let v = self.eval(&b.0, sc);
                if v.is_undefined() {
                    self.eval(&b.1, sc)
                } else {
                    v
                }
            }
            Expr::Select(base, name) => {
                let base = self.eval(base, sc);
                self.select(base, name.sym)
            }
            Expr::Index(b) => {
                let base = self.eval(&b.0, sc);
                let idx = self.eval(&b.1, sc);
                self.index(base, idx)
            }
            Expr::Call(call) => match call.func {
                Some(f) => f(self, sc, &call.args),
                None => Value::Error,
            },
            Expr::List(items) => Value::list(items.iter().map(|x| self.eval(x, sc)).collect()),
            Expr::Ad(ad) => Value::Ad(Arc::new(NestedAd {
                ad: ad.clone(),
                parent: sc.nested.clone(),
                side: sc.side,
            })),
        }
    }

    /// Applies `f` (an evaluation) to the non-literal expression of the
    /// attribute `found`, or gives `cycle` if that attribute is already being
    /// evaluated. `sc` is the scope of the reference, reused when the
    /// attribute lives in the same place.
    #[inline]
    fn eval_found<R>(
        &mut self,
        found: &Found<'_>,
        sc: &Scope,
        cycle: R,
        f: fn(&mut Self, &Expr, &Scope) -> R,
    ) -> R {
        let key = found.ad.attr_key(found.idx);
        if self.active.contains(key) {
            return cycle;
        }
        let expr = found.ad.expr_at(found.idx);
        self.active.push(key);
        let r = match found.at {
            FoundIn::Top(side) if sc.nested.is_none() && sc.side == side => f(self, expr, sc),
            FoundIn::Top(side) => f(self, expr, &Scope { side, nested: None }),
            FoundIn::Nested(n) => f(self, expr, &Scope::inside(n)),
        };
        self.active.pop();
        r
    }

    /// Finds the attribute a reference names, without evaluating it.
    /// Always inlined for the reason given at [`Evaluator::operand`].
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn resolve<'v>(&self, scope: RefScope, sym: Symbol, sc: &'v Scope) -> Option<Found<'v>>
    where
        'a: 'v,
    {
        // Outside nested ads (the common case) a name is looked up in at
        // most the two top-level ads: keep that path small enough to inline.
        if sc.nested.is_none() {
            let side = match scope {
                RefScope::Bare | RefScope::My => sc.side,
                RefScope::Target => 1 - sc.side,
                RefScope::Parent => return None,
            };
            let found = self.top(side, sym);
            if found.is_some() || scope != RefScope::Bare {
                return found;
            }
            return self.top(1 - side, sym);
        }
        self.resolve_nested(scope, sym, sc)
    }

    /// Finds `sym` in top-level ad `side`.
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn top(&self, side: u8, sym: Symbol) -> Option<Found<'a>> {
        let ad: &'a ClassAd = self.ads[side as usize]?;
        let idx = ad.find_sym(sym)?;
        Some(Found {
            ad,
            idx,
            at: FoundIn::Top(side),
        })
    }

    /// [`Evaluator::resolve`] inside nested ads.
    #[inline(never)]
    fn resolve_nested<'v>(&self, scope: RefScope, sym: Symbol, sc: &'v Scope) -> Option<Found<'v>>
    where
        'a: 'v,
    {
        let top = |side: u8| self.top(side, sym);
        let nested = |n: &'v Arc<NestedAd>| -> Option<Found<'v>> {
            let idx = n.ad.find_sym(sym)?;
            Some(Found {
                ad: &n.ad,
                idx,
                at: FoundIn::Nested(n),
            })
        };
        match scope {
            RefScope::Bare => {
                let mut node = sc.nested.as_ref();
                while let Some(n) = node {
                    if let Some(f) = nested(n) {
                        return Some(f);
                    }
                    node = n.parent.as_ref();
                }
                top(sc.side).or_else(|| top(1 - sc.side))
            }
            RefScope::My => match &sc.nested {
                Some(n) => nested(n),
                None => top(sc.side),
            },
            RefScope::Target => top(1 - sc.side),
            RefScope::Parent => match &sc.nested {
                Some(n) => match &n.parent {
                    Some(p) => nested(p),
                    None => top(n.side),
                },
                None => None,
            },
        }
    }

    fn lookup(&mut self, scope: RefScope, sym: Symbol, sc: &Scope) -> Value {
        match self.find(scope, sym, sc) {
            Some(found) => {
                let expr = found.ad.expr_at(found.idx);
                if let Expr::Literal(v) = expr {
                    return v.clone();
                }
                self.eval_found(&found, sc, Value::Undefined, Self::eval)
            }
            None => Value::Undefined,
        }
    }

    /// [`Evaluator::resolve`], not inlined: for paths where a value is built
    /// anyway, and to keep their frames small (see [`Evaluator::eval_compound`]).
    #[inline(never)]
    fn find<'v>(&self, scope: RefScope, sym: Symbol, sc: &'v Scope) -> Option<Found<'v>>
    where
        'a: 'v,
    {
        self.resolve(scope, sym, sc)
    }

    /// `base.name`: an attribute of the ad that `base` evaluated to.
    pub fn select(&mut self, base: Value, sym: Symbol) -> Value {
        match base {
            Value::Ad(node) => match node.ad.find_sym(sym) {
                Some(idx) => {
                    let expr = node.ad.expr_at(idx);
                    if let Expr::Literal(v) = expr {
                        return v.clone();
                    }
                    let found = Found {
                        ad: &node.ad,
                        idx,
                        at: FoundIn::Nested(&node),
                    };
                    self.eval_found(&found, &Scope::top(), Value::Undefined, Self::eval)
                }
                None => Value::Undefined,
            },
            Value::Undefined => Value::Undefined,
            _ => Value::Error,
        }
    }

    /// `base[idx]`: an element of a list or an attribute of an ad.
    pub fn index(&mut self, base: Value, idx: Value) -> Value {
        match (&base, &idx) {
            (Value::Error, _) | (_, Value::Error) => Value::Error,
            (Value::Undefined, _) | (_, Value::Undefined) => Value::Undefined,
            (Value::List(items), Value::Int(i)) => usize::try_from(*i)
                .ok()
                .and_then(|i| items.get(i))
                .cloned()
                .unwrap_or(Value::Error),
            // A name no ad holds is not interned for it (a lookup from a
            // string must not grow the table).
            (Value::Ad(_), Value::Str(name)) => match Symbol::lookup(name) {
                Some(sym) => self.select(base.clone(), sym),
                None => Value::Undefined,
            },
            _ => Value::Error,
        }
    }

    /// The expression an attribute reference refers to, without evaluating it,
    /// for `unparse()`. `None` when `e` is not a reference or names nothing.
    pub fn referenced_expr(&mut self, e: &Expr, sc: &Scope) -> Option<Expr> {
        let (scope, sym) = match e {
            Expr::Attr(scope, name) => (*scope, name.sym),
            Expr::Paren(inner) => return self.referenced_expr(inner, sc),
            _ => return None,
        };
        let top = |ev: &Self, side: u8| -> Option<Expr> {
            let ad = ev.ads[side as usize]?;
            ad.find_sym(sym).map(|i| ad.expr_at(i).clone())
        };
        match scope {
            RefScope::Bare => {
                let mut node = sc.nested.clone();
                while let Some(n) = node {
                    if let Some(i) = n.ad.find_sym(sym) {
                        return Some(n.ad.expr_at(i).clone());
                    }
                    node = n.parent.clone();
                }
                // `unparse` (the only user) does not fall through to the
                // other ad of a match, unlike evaluation: HTCondor's
                // unparse(Ratio) is "" when only TARGET has Ratio.
                top(self, sc.side)
            }
            RefScope::My => match &sc.nested {
                Some(n) => n.ad.find_sym(sym).map(|i| n.ad.expr_at(i).clone()),
                None => top(self, sc.side),
            },
            RefScope::Target => top(self, 1 - sc.side),
            RefScope::Parent => None,
        }
    }
}

/// Evaluates `e` with `my` as MY and `target` as TARGET.
pub fn eval_with(e: &Expr, my: Option<&ClassAd>, target: Option<&ClassAd>) -> Value {
    Evaluator::new(my, target).eval_top(e)
}
