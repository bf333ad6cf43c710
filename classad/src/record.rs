//! `ClassAd` records: named attributes bound to expressions.

use std::fmt;
use std::sync::Arc;

use crate::ast::Expr;
use crate::eval::{Evaluator, eval_with};
use crate::parse::{self, ParseError};
use crate::symbol::{Name, Symbol};
use crate::value::Value;

/// A ClassAd: a set of attributes, each bound to an expression. Names ignore
/// case; the spelling of the first insertion is kept for printing.
///
/// Lookup compares interned symbols, so evaluating an attribute never hashes
/// or lowercases a string.
#[derive(Clone, Debug, Default)]
pub struct ClassAd {
    syms: Vec<Symbol>,
    names: Vec<Arc<str>>,
    exprs: Vec<Expr>,
}

impl ClassAd {
    /// An empty ad.
    pub fn new() -> ClassAd {
        ClassAd::default()
    }

    /// An empty ad with room for `n` attributes.
    pub fn with_capacity(n: usize) -> ClassAd {
        ClassAd {
            syms: Vec::with_capacity(n),
            names: Vec::with_capacity(n),
            exprs: Vec::with_capacity(n),
        }
    }

    /// Parses an ad in new syntax: `[ a = 1; b = a + 1 ]`.
    pub fn parse(text: &str) -> Result<ClassAd, ParseError> {
        parse::parse_classad(text)
    }

    /// Parses an ad in old syntax: one `Name = expr` per line; blank lines and
    /// lines starting with `#` are ignored.
    pub fn parse_old(text: &str) -> Result<ClassAd, ParseError> {
        parse::parse_old_classad(text)
    }

    /// Parses either syntax: new if the first non-blank character is `[`.
    pub fn parse_any(text: &str) -> Result<ClassAd, ParseError> {
        if text.trim_start().starts_with('[') {
            ClassAd::parse(text)
        } else {
            ClassAd::parse_old(text)
        }
    }

    /// Number of attributes.
    pub fn len(&self) -> usize {
        self.exprs.len()
    }

    /// True when the ad has no attributes.
    pub fn is_empty(&self) -> bool {
        self.exprs.is_empty()
    }

    /// Binds `name` to `expr`, replacing any earlier binding of the same name (any case).
    pub fn insert(&mut self, name: &str, expr: Expr) {
        self.insert_name(Name::new(name), expr);
    }

    /// Like [`ClassAd::insert`] with an already interned name.
    pub fn insert_name(&mut self, name: Name, expr: Expr) {
        match self.find_sym(name.sym) {
            Some(i) => self.exprs[i] = expr,
            None => {
                self.syms.push(name.sym);
                self.names.push(name.text);
                self.exprs.push(expr);
            }
        }
    }

    /// Binds `name` to a literal value.
    pub fn insert_value(&mut self, name: &str, v: Value) {
        self.insert(name, Expr::Literal(v));
    }

    /// Parses `expr` and binds it to `name`.
    pub fn insert_expr_str(&mut self, name: &str, expr: &str) -> Result<(), ParseError> {
        let e = parse::parse_expr(expr)?;
        self.insert(name, e);
        Ok(())
    }

    /// Removes an attribute; returns its expression if it was there.
    pub fn remove(&mut self, name: &str) -> Option<Expr> {
        let i = self.find_sym(Symbol::intern(name))?;
        self.syms.remove(i);
        self.names.remove(i);
        Some(self.exprs.remove(i))
    }

    /// The expression bound to `name` (any case).
    pub fn get(&self, name: &str) -> Option<&Expr> {
        self.find_sym(Symbol::intern(name)).map(|i| &self.exprs[i])
    }

    /// Position of the attribute with symbol `sym`.
    pub fn find_sym(&self, sym: Symbol) -> Option<usize> {
        self.syms.iter().position(|&s| s == sym)
    }

    /// The expression at position `i` (from [`ClassAd::find_sym`]).
    pub fn expr_at(&self, i: usize) -> &Expr {
        &self.exprs[i]
    }

    /// Attributes in insertion order: (name as written, expression).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Expr)> {
        self.names.iter().map(|n| &**n).zip(self.exprs.iter())
    }

    /// Evaluates attribute `name` with this ad as MY and no TARGET.
    pub fn eval_attr(&self, name: &str) -> Value {
        self.eval_attr_against(name, None)
    }

    /// Evaluates attribute `name` with this ad as MY and `target` as TARGET.
    pub fn eval_attr_against(&self, name: &str, target: Option<&ClassAd>) -> Value {
        match self.find_sym(Symbol::intern(name)) {
            Some(_) => eval_with(
                &Expr::Attr(crate::ast::RefScope::My, Name::new(name)),
                Some(self),
                target,
            ),
            None => Value::Undefined,
        }
    }

    /// Evaluates `e` with this ad as MY and `target` as TARGET.
    pub fn eval_expr(&self, e: &Expr, target: Option<&ClassAd>) -> Value {
        Evaluator::new(Some(self), target).eval_top(e)
    }

    /// Prints the ad in old syntax: one `Name = expr` per line.
    pub fn to_old_syntax(&self) -> String {
        let mut s = String::new();
        for (n, e) in self.iter() {
            crate::unparse::push_name(&mut s, n);
            s.push_str(" = ");
            s.push_str(&e.to_string());
            s.push('\n');
        }
        s
    }
}

impl PartialEq for ClassAd {
    /// Same attributes (names ignoring case) bound to equal expressions, in any order.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .syms
                .iter()
                .zip(self.exprs.iter())
                .all(|(s, e)| other.find_sym(*s).is_some_and(|i| other.exprs[i] == *e))
    }
}

impl fmt::Display for ClassAd {
    /// Prints the ad in new syntax on one line: `[ a = 1; b = 2 ]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::unparse::write_ad(f, self)
    }
}
