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
use crate::value::Value;

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
/// UNDEFINED. Kept inline because chains are short and evaluation is hot.
struct Active {
    inline: [(usize, u32); 16],
    len: usize,
    spill: Vec<(usize, u32)>,
}

impl Active {
    fn new() -> Active {
        Active {
            inline: [(0, 0); 16],
            len: 0,
            spill: Vec::new(),
        }
    }

    fn contains(&self, key: (usize, u32)) -> bool {
        self.inline[..self.len.min(16)].contains(&key) || self.spill.contains(&key)
    }

    fn push(&mut self, key: (usize, u32)) {
        if self.len < 16 {
            self.inline[self.len] = key;
        } else {
            self.spill.push(key);
        }
        self.len += 1;
    }

    fn pop(&mut self) {
        self.len -= 1;
        if self.len >= 16 {
            self.spill.pop();
        }
    }
}

/// Evaluates expressions against up to two ads (MY and TARGET).
pub struct Evaluator<'a> {
    ads: [Option<&'a ClassAd>; 2],
    depth: u32,
    active: Active,
}

impl<'a> Evaluator<'a> {
    /// An evaluator where bare names are looked up in `my`, then in `target`.
    pub fn new(my: Option<&'a ClassAd>, target: Option<&'a ClassAd>) -> Evaluator<'a> {
        Evaluator {
            ads: [my, target],
            depth: 0,
            active: Active::new(),
        }
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

    fn eval_inner(&mut self, e: &Expr, sc: &Scope) -> Value {
        match e {
            Expr::Literal(v) => v.clone(),
            Expr::Attr(scope, name) => self.lookup(*scope, name.sym, sc),
            Expr::Paren(inner) => self.eval(inner, sc),
            Expr::Binary(op, b) => ops::binary(self, *op, &b.0, &b.1, sc),
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

    /// Evaluates attribute `idx` of `ad` in `sc`, turning a cycle into UNDEFINED.
    fn eval_attr(&mut self, ad: &ClassAd, idx: usize, sc: &Scope) -> Value {
        let expr = ad.expr_at(idx);
        if let Expr::Literal(v) = expr {
            return v.clone();
        }
        let key = (ad as *const ClassAd as usize, idx as u32);
        if self.active.contains(key) {
            return Value::Undefined;
        }
        self.active.push(key);
        let v = self.eval(expr, sc);
        self.active.pop();
        v
    }

    fn top_lookup(&mut self, side: u8, sym: Symbol) -> Option<Value> {
        let ad = self.ads[side as usize]?;
        let idx = ad.find_sym(sym)?;
        Some(self.eval_attr(ad, idx, &Scope { side, nested: None }))
    }

    fn nested_lookup(&mut self, node: &Arc<NestedAd>, sym: Symbol) -> Option<Value> {
        let idx = node.ad.find_sym(sym)?;
        Some(self.eval_attr(&node.ad, idx, &Scope::inside(node)))
    }

    fn lookup(&mut self, scope: RefScope, sym: Symbol, sc: &Scope) -> Value {
        let found = match scope {
            RefScope::Bare => {
                let mut node = sc.nested.clone();
                while let Some(n) = node {
                    if let Some(v) = self.nested_lookup(&n, sym) {
                        return v;
                    }
                    node = n.parent.clone();
                }
                self.top_lookup(sc.side, sym)
                    .or_else(|| self.top_lookup(1 - sc.side, sym))
            }
            RefScope::My => match &sc.nested {
                Some(n) => self.nested_lookup(&n.clone(), sym),
                None => self.top_lookup(sc.side, sym),
            },
            RefScope::Target => self.top_lookup(1 - sc.side, sym),
            RefScope::Parent => match &sc.nested {
                Some(n) => match &n.parent {
                    Some(p) => self.nested_lookup(&p.clone(), sym),
                    None => self.top_lookup(n.side, sym),
                },
                None => None,
            },
        };
        found.unwrap_or(Value::Undefined)
    }

    /// `base.name`: an attribute of the ad that `base` evaluated to.
    pub fn select(&mut self, base: Value, sym: Symbol) -> Value {
        match base {
            Value::Ad(node) => self.nested_lookup(&node, sym).unwrap_or(Value::Undefined),
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
            (Value::Ad(_), Value::Str(name)) => self.select(base.clone(), Symbol::intern(name)),
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
                top(self, sc.side).or_else(|| top(self, 1 - sc.side))
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
